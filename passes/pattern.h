/*
 * pattern.h — the fusion engine's pattern format (internal to passes/).
 *
 * A pattern is data: a table of pattern nodes, a table of captures, and two
 * C callbacks.  One generic matcher (match.c) tries every pattern whose
 * root op is the op of a graph node, in topological order, to a fixpoint.
 * Writing a new fusion is writing a table and two short functions:
 *
 *     //   X ─────────────┐
 *     //   X ──Sigmoid────Mul── Y            (picture of what it matches)
 *     enum { CX };                                      // captures
 *     static const struct gf_pcap silu_caps[] = {[CX] = GF_K_ANY("x")};
 *     enum { SIG, ROOT };                               // pattern nodes
 *     static const struct gf_pnode silu_nodes[] = {
 *         [SIG]  = {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(CX))},
 *         [ROOT] = {GF_P("mul", GF_OP_MUL, GF_C(CX), GF_N(SIG)), .flags = GF_PF_COMMUTE},
 *     };
 *     static bool silu_check(struct gf_match *m)
 *     {
 *         return gf_pat_float(gf_match_cap(m, CX)) ||
 *                gf_match_fail(m, ROOT, "x is not a floating-point tensor");
 *     }
 *     static enum gf_status silu_rewrite(struct gf_match *m, struct gf_fused *f)
 *     {
 *         f->op = GF_OP_SILU;
 *         return gf_fused_input(f, gf_match_cap(m, CX));
 *     }
 *     ... GF_PATTERN("silu", "x*sigmoid(x)", silu_nodes, silu_caps,
 *                    silu_check, silu_rewrite),
 *
 * Pattern nodes are written {GF_P(label, op, inputs...), .field = ...}
 * (designated fields after GF_P: flags, cast, escape, slot, op_name).
 * The LAST entry of the table is the root: the node whose
 * output 0 the fused node's output 0 replaces (the engine indexes patterns
 * by the root's op).  Every other entry must be reachable from the root
 * through inputs, or be a tail (GF_PF_TAIL, below).  Each entry has:
 *   - label: a short name shown by --explain ("sqrt", "mean").
 *   - op: the graph node's op (GF_OP_*; fused ops such as GF_OP_RMS_NORM
 *     are allowed, which is how a pattern extends an earlier fusion); or
 *     GF_PAT_ALT: not a node but a choice, "the value matches one of my
 *     inputs" (tried in order, with backtracking); or GF_OP_UNKNOWN with
 *     `op_name` set to match an op outside ops.def by name ("Swish").
 *   - in[]: the inputs, in slot order, ended by 0 (or by the array end):
 *       GF_N(i)    output `slot` (normally 0) of pattern node i
 *       GF_C(k)    capture k: any value; the same k twice means the same value
 *       GF_OPT(k)  capture k, or an omitted input (the capture is then NULL)
 *       GF_ANY     any value or none, not captured (e.g. ReduceMean's axes,
 *                  which the check reads from the node)
 *       GF_NONE    the input must be omitted
 *     A graph node with more inputs than the pattern lists does not match
 *     (unless the extra ones are omitted).
 *   - flags: GF_PF_COMMUTE  binary op: also try the inputs swapped;
 *            GF_PF_ONE_USE  the node's output has exactly one user;
 *            GF_PF_TAIL     a tail: not an input of the root's subgraph but
 *              a reader of a value it computes (ONNX LayerNormalization's
 *              Mean and InvStdDev in its function body).  Tails are bound
 *              after the rest, in table order: the engine tries each reader
 *              of the value of the first pattern node in the tail's in[]
 *              (listed before the tail), and leaves the tail unbound when
 *              none fits (a tail of an unbound tail is unbound).  Their
 *              outputs may escape as the `escape` bits say.
 *   - cast: bit i set: input i may pass through a Cast that changes
 *     nothing (to the dtype it already has, e.g. the `.to(float32)` of the
 *     Hugging Face norms on a float32 model).  Such Casts join the match.
 *   - escape: bit s set: output s may be read outside the match (it
 *     becomes an output of the fused node: AddRMSNorm's sum S).  Any other
 *     value the match computes must have all its users inside the match
 *     and must not be a graph output, or the match is refused.
 *   - slot: which output of the node the edge reads (default 0).
 *
 * Captures (struct gf_pcap, indexed by k; write them GF_K_ANY("x"),
 * GF_K_CONST("eps"), GF_K_SCALAR("two", 2.0, 0)) have a name (for --explain and
 * gf_match_cap_named) and a kind: GF_CAP_ANY (any value), GF_CAP_CONST (an
 * initializer or Constant-node output: gf_match_const gives the tensor),
 * GF_CAP_SCALAR (a constant holding one element equal to `value` within
 * `rtol`, widened to the precision of the constant's dtype).  Constant
 * checks inside the matcher let alternatives backtrack on a wrong value.
 *
 * Callbacks.  check(m) runs on a complete match (every pattern node of the
 * chosen alternatives bound) and returns false to refuse it, after saying
 * why with gf_match_fail (shown by --explain).  It may leave results for
 * the rewrite in m->i[] / m->f[].  rewrite(m, f) describes the fused node
 * in `f` (op, inputs, attributes, extra outputs); f->out[0] is preset to
 * the root's output 0.  The engine then removes the matched nodes and
 * inserts the fused node (domain "graphfuse") where the root was, reusing
 * the output values, so names, types and graph outputs are kept.  Every
 * value a matched node reads must be a fused input, a constant, or made
 * inside the match; a rewrite breaking that is an internal error.
 *
 * Several tables may share a name (exporter variants); --disable NAME
 * turns them all off, hits are counted per name.  Patterns are tried in
 * registry order: list a more specific pattern before a more general one
 * rooted at the same op.  To add a pattern file: define an array of
 * struct gf_pattern and its count, declare them at the end of this header
 * and list them in fuse.c's registry (and the op's formal operand names
 * in fuse.c's `sigs` if it is a new fused op).
 *
 * Building on earlier fusions.  A rewrite is followed at once by the
 * patterns rooted at the new fused op, and the whole walk repeats until
 * nothing changes, so a pattern may take a fused node as a pattern node:
 * rmsnorm_weight is Mul(RMSNorm(x), w) -> RMSNorm(x, w), add_rmsnorm is
 * RMSNorm(Add(a, r)) -> AddRMSNorm.  An epilogue pattern can match
 * MatMul -> Add(bias) -> Gelu with the fused Gelu (GF_OP_FUSED_GELU) or
 * SiLU as a node.  The function body written for the final node is the
 * union of the original nodes of every fusion it absorbed.
 *
 * Constants inside the pattern (Slice bounds, Gather indices, axes) are
 * best matched with GF_ANY and read in the check from the bound node
 * (gf_value_constant(node->inputs[k])); a check that needs a value the
 * exporter computes at run time (legacy RoPE's d/2) relies on cleanup
 * having folded it into a constant first.  Multi-output ops: use `slot`
 * on the edge; outputs of the root other than 0 must be unused unless
 * the rewrite lists them (gf_fused_output).
 */
#ifndef GF_PATTERN_H
#define GF_PATTERN_H

#include <stdbool.h>
#include <stdint.h>

#include "gf_passes.h"

#define GF_PAT_MAX_NODES 40 /* pattern nodes per table */
#define GF_PAT_MAX_IN 6     /* inputs (or alternatives) per pattern node (Slice has 5) */
#define GF_PAT_MAX_CAPS 16  /* captures per table */
#define GF_PAT_MAX_CASTS 16 /* no-op Casts one match may pass through */
#define GF_FUSED_MAX_IO 8   /* inputs / outputs of a fused node */
#define GF_FUSED_MAX_ATTRS 8

/* Input references (0 ends the list). */
#define GF_N(i) ((int8_t)(1 + (i)))    /* pattern node i */
#define GF_C(k) ((int8_t)(64 + (k)))   /* capture k */
#define GF_OPT(k) ((int8_t)(96 + (k))) /* capture k, or omitted */
#define GF_ANY ((int8_t)-1)            /* anything, not captured */
#define GF_NONE ((int8_t)-2)           /* omitted */

/* A pattern node's label, op and inputs (see the top of this file). */
#define GF_P(lab, o, ...) .label = (lab), .op = (o), .in = {__VA_ARGS__}
/* Captures. */
#define GF_K_ANY(n) {.name = (n), .kind = GF_CAP_ANY}
#define GF_K_CONST(n) {.name = (n), .kind = GF_CAP_CONST}
#define GF_K_SCALAR(n, v, tol) {.name = (n), .kind = GF_CAP_SCALAR, .value = (v), .rtol = (tol)}

/* The "op" of a choice node. */
#define GF_PAT_ALT GF_OP_COUNT

enum {
    GF_PF_COMMUTE = 1 << 0, /* binary op: try both input orders */
    GF_PF_ONE_USE = 1 << 1, /* output has exactly one user */
    GF_PF_TAIL = 1 << 2,    /* optional reader of a matched value (see the top) */
};

struct gf_pnode {
    const char *label;
    enum gf_op op;
    int8_t in[GF_PAT_MAX_IN];
    uint8_t flags;
    uint8_t cast;   /* bit i: input i may pass through a no-op Cast */
    uint8_t escape; /* bit s: output s may be used outside the match */
    uint8_t slot;   /* output of the node that the edge reads */
    const char *op_name; /* with op GF_OP_UNKNOWN: match op_type by name */
};

enum gf_cap_kind { GF_CAP_ANY = 0, GF_CAP_CONST, GF_CAP_SCALAR };

struct gf_pcap {
    const char *name;
    enum gf_cap_kind kind;
    double value; /* GF_CAP_SCALAR */
    double rtol;  /* GF_CAP_SCALAR: 0 = exact up to the dtype's rounding */
};

struct gf_match;
struct gf_fused;

struct gf_pattern {
    const char *name; /* user-facing, shared by variants: "rmsnorm" */
    const char *form; /* which variant this table is: "x*rsqrt" */
    const struct gf_pnode *nodes;
    int n_nodes;
    const struct gf_pcap *caps;
    int n_caps;
    bool (*check)(struct gf_match *m);                       /* NULL: accept */
    enum gf_status (*rewrite)(struct gf_match *m, struct gf_fused *f);
};

#define GF_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define GF_PATTERN(name, form, nodes, caps, check, rewrite)                              \
    {(name), (form), (nodes), GF_COUNTOF(nodes), (caps), GF_COUNTOF(caps), (check), (rewrite)}

/* A match in progress or complete.  Read it through the functions below. */
struct gf_match {
    const struct gf_pattern *pat;
    struct gf_graph *graph;
    struct gf_node *node[GF_PAT_MAX_NODES];   /* bound graph node (NULL: ALT or not taken) */
    struct gf_value *val[GF_PAT_MAX_NODES];   /* value each pattern node matched */
    struct gf_value *cap[GF_PAT_MAX_CAPS];    /* NULL: omitted optional input */
    uint32_t cap_bound;                       /* bit k: capture k bound */
    struct gf_node *cast[GF_PAT_MAX_CASTS];   /* no-op Casts passed through */
    int n_cast;
    uint64_t tails_done; /* bit i: tail i was decided (bound or left out) */
    int64_t i[4]; /* scratch: check -> rewrite */
    double f[4];
    struct gf_match_why *why; /* where failures are recorded (engine) */
};

/* The graph node bound to pattern node `pn` (NULL for an alternative that
 * was not taken, and for GF_PAT_ALT nodes). */
struct gf_node *gf_match_node(const struct gf_match *m, int pn);
/* The value bound to capture k (NULL: omitted optional input). */
struct gf_value *gf_match_cap(const struct gf_match *m, int k);
/* The same by capture name; NULL if unknown or unbound. */
struct gf_value *gf_match_cap_named(const struct gf_match *m, const char *name);
/* The tensor of capture k when it is constant, else NULL. */
const struct gf_tensor *gf_match_const(const struct gf_match *m, int k);
/* Records why the match is refused at pattern node `pn` (for --explain)
 * and returns false, so a check can `return gf_match_fail(...)`. */
bool gf_match_fail(struct gf_match *m, int pn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- helpers for checks ---------------------------------------------------- */

/* True for float, double, float16 and bfloat16 tensors. */
bool gf_pat_float(const struct gf_value *v);
/* Rank of a tensor value, -1 when unknown. */
int gf_pat_rank(const struct gf_value *v);
/* Same dtype, rank and dims (known sizes equal, or the same symbol). */
bool gf_pat_same_type(const struct gf_value *a, const struct gf_value *b);
/* The single element of a constant tensor (false if it has more). */
bool gf_pat_scalar(const struct gf_tensor *t, double *out);
/* The axes a reduction node reduces (attribute, or constant input 1 from
 * opset 18), normalized to 0..rank-1 with the data rank `rank` (-1:
 * unknown; then negative axes are kept negative and positive ones make it
 * fail).  Fails (false) when the axes are not constant, the node keeps no
 * dims (keepdims=0) or reduces nothing (noop_with_empty_axes). */
bool gf_pat_reduce_axes(const struct gf_node *n, int rank, int64_t *axes, size_t cap,
                        size_t *n_axes);
/* When the axes are the last k of a rank-`rank` tensor (rank -1: the
 * axes must be -k..-1), stores -k in *axis. */
bool gf_pat_trailing_axes(const int64_t *axes, size_t n, int rank, int64_t *axis);
/* True when `w` broadcasts onto the last k dims of `x` alone: rank(w) <= k
 * and each dim of w is 1 or the matching dim of x, with the same dtype. */
bool gf_pat_fits_trailing(const struct gf_value *w, const struct gf_value *x, int k);
/* Number of normalized (trailing) axes of a fused norm node, from its
 * `axis` attribute and the rank of its input 0; -1 if unknown. */
int gf_pat_norm_axes(const struct gf_node *norm);
/* True when v has the shape of LayerNorm's Mean / InvStdDev for input x
 * normalized from `axis` on: x's dims, those from axis on set to 1. */
bool gf_pat_stats_shape(const struct gf_value *v, const struct gf_value *x, int64_t axis);
/* True when v is a graph output or read by a node outside the match. */
bool gf_match_read_outside(const struct gf_match *m, const struct gf_value *v);

/* ---- describing the fused node (rewrite) ------------------------------------- */

struct gf_fused_attr {
    const char *name;
    enum gf_attr_type type; /* INT, FLOAT or STRING */
    int64_t i;
    float f;
    const char *s;
};

struct gf_fused {
    enum gf_op op; /* a graphfuse-domain op */
    size_t n_in, n_out, n_attrs;
    struct gf_value *in[GF_FUSED_MAX_IO];   /* NULL: omitted optional input */
    struct gf_value *out[GF_FUSED_MAX_IO];  /* out[0] preset: the root's output 0 */
    struct gf_fused_attr attrs[GF_FUSED_MAX_ATTRS];
};

/* Append an input (NULL: omitted) / an output (a value a matched node
 * computes, read outside the match). */
enum gf_status gf_fused_input(struct gf_fused *f, struct gf_value *v);
enum gf_status gf_fused_output(struct gf_fused *f, struct gf_value *v);
enum gf_status gf_fused_attr_int(struct gf_fused *f, const char *name, int64_t v);
enum gf_status gf_fused_attr_float(struct gf_fused *f, const char *name, float v);
enum gf_status gf_fused_attr_string(struct gf_fused *f, const char *name, const char *v);
/* Copies the INT / FLOAT / STRING attributes of node n (e.g. a fused node
 * being extended). */
enum gf_status gf_fused_copy_attrs(struct gf_fused *f, const struct gf_node *n);

/* ---- the engine (match.c), driven by fuse.c ------------------------------------ */

struct gf_engine {
    const struct gf_pattern *const *patterns; /* enabled, in priority order */
    size_t n_patterns;
    size_t *hits;          /* per pattern, incremented on each rewrite */
    const char *explain;   /* pattern name whose attempts are explained, or NULL */
    /* Called after each rewrite with the nodes it removed (in graph order):
     * fuse.c keeps them as the body of the fused node. */
    void (*on_rewrite)(void *ctx, struct gf_node *fused, struct gf_node *const *removed,
                       size_t n_removed);
    /* Called with each --explain line (deduplicated by the caller). */
    void (*on_explain)(void *ctx, const char *line);
    void *ctx;
};

/* Rewrites `g` with the patterns to a fixpoint.  Errors: GF_ERR_NOMEM,
 * GF_ERR_INTERNAL (a pattern broke an invariant; names the pattern). */
enum gf_status gf_engine_run(struct gf_graph *g, const struct gf_engine *e);
/* One attempt of pattern p rooted at `root`; on success *m holds the match
 * (the graph is not changed).  `why` (may be NULL) receives, on failure,
 * where the deepest attempt stopped. */
bool gf_pattern_match(const struct gf_pattern *p, struct gf_node *root, struct gf_match *m,
                      char *why, size_t why_len);

/* ---- the pattern registry ------------------------------------------------------- */

extern const struct gf_pattern gf_patterns_norm[]; /* patterns_norm.c */
extern const size_t gf_patterns_norm_count;
extern const struct gf_pattern gf_patterns_act[]; /* patterns_act.c */
extern const size_t gf_patterns_act_count;
extern const struct gf_pattern gf_patterns_rope[]; /* patterns_rope.c */
extern const size_t gf_patterns_rope_count;
extern const struct gf_pattern gf_patterns_matmul[]; /* patterns_matmul.c */
extern const size_t gf_patterns_matmul_count;
extern const struct gf_pattern gf_patterns_loss[]; /* patterns_loss.c */
extern const size_t gf_patterns_loss_count;
extern const struct gf_pattern gf_patterns_attn[]; /* patterns_attn.c (opt-in) */
extern const size_t gf_patterns_attn_count;

#endif
