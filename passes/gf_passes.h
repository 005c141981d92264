/*
 * gf_passes.h — graph-to-graph rewrites: cleanup, fusion, autodiff.
 *
 *     struct gf_cleanup_opts co = {.eval = gf_exec_eval_node};
 *     gf_pass_cleanup(model->graph, &co, NULL);
 *     struct gf_fuse_opts fo = {.target = GF_TARGET_GRAPHFUSE};
 *     struct gf_fuse_report rep;
 *     gf_pass_fuse(model, &fo, &rep);
 *     gf_fuse_report_print(&rep, stdout, false);
 *     gf_fuse_report_free(&rep);
 *
 * Passes never execute anything themselves: constant folding asks the
 * caller's evaluator (the executor provides gf_exec_eval_node).
 */
#ifndef GF_PASSES_H
#define GF_PASSES_H

#include <stdio.h>

#include "gf_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cleanup ------------------------------------------------------------- */

/* Computes the outputs of node n from constant inputs in[] (NULL entries
 * for omitted optional inputs).  out[i] receives a new tensor allocated in
 * model m's arena (NULL for an omitted output).  Returns GF_ERR_UNSUPPORTED
 * when it cannot evaluate this node, GF_ERR_INVALID when the data is bad
 * (the pass then leaves the node alone); other errors stop the pass. */
typedef enum gf_status (*gf_eval_fn)(struct gf_model *m, const struct gf_node *n,
                                     struct gf_tensor *const *in, struct gf_tensor **out);

struct gf_cleanup_opts {
    gf_eval_fn eval;          /* NULL: no evaluation (Constant and Shape still fold) */
    size_t fold_limit;        /* largest folded output in bytes; 0: 16 MiB */
    bool keep_dropout;        /* keep Dropout (training graphs) */
};

struct gf_cleanup_stats {
    size_t folded;      /* nodes replaced by initializers (Constant nodes included) */
    size_t dead;        /* nodes removed as unused */
    size_t dead_inits;  /* initializers removed as unused (not graph inputs) */
    size_t identities;  /* no-op nodes bypassed */
    size_t cse;         /* duplicate nodes and constant initializers merged */
    size_t rounds;      /* passes over the graph until nothing changed */
};

/* Constant folding, no-op removal, common-subexpression elimination and
 * dead-code elimination on the main graph, repeated until nothing changes
 * (subgraphs are left as they are).  Graph input and output names never
 * change.  Needs no shapes beforehand: each pass runs its own inference.
 * o NULL: no evaluator (only Constant nodes and shape values are folded). */
enum gf_status gf_pass_cleanup(struct gf_graph *g, const struct gf_cleanup_opts *o,
                               struct gf_cleanup_stats *st);
/* The single passes; each counts its changes in *n (n may be NULL).
 *
 * fold_constants: Constant nodes become initializers; nodes whose inputs
 * are all constant (initializers that are not graph inputs, omitted
 * optional inputs) are evaluated by o->eval and replaced by initializers
 * under their output names (outputs up to fold_limit bytes, static shape,
 * not random ops, no subgraphs); outputs whose elements shape inference
 * knows from static dims (Shape, Size, shape arithmetic) are folded
 * without evaluation.  Nothing that depends on a symbolic dim is folded. */
enum gf_status gf_pass_fold_constants(struct gf_graph *g, const struct gf_cleanup_opts *o,
                                      size_t *n);
/* remove_identities: bypasses Identity, inference Dropout (no or constant
 * false training_mode, mask unread; unless keep_dropout), Cast / CastLike
 * to the input's type, Reshape / Expand / Flatten / Squeeze giving the
 * input's shape, Transpose with identity perm.  A no-op producing a graph
 * output hands the name to its input's producer, or stays. */
enum gf_status gf_pass_remove_identities(struct gf_graph *g, bool keep_dropout, size_t *n);
/* cse: merges nodes with the same op, domain, inputs and attributes
 * (ai.onnx and graphfuse ops; not random ops, not nodes with subgraphs),
 * and constant initializers (not graph inputs) up to 4 KiB with the same
 * dtype, shape and bytes. */
enum gf_status gf_pass_cse(struct gf_graph *g, size_t *n);
/* dce: removes nodes none of whose outputs reaches a graph output, and
 * initializers nothing reads that are not graph inputs or outputs. */
enum gf_status gf_pass_dce(struct gf_graph *g, size_t *n);

/* The tensor a value holds when it is constant (an initializer that is not
 * a graph input, or the output of a Constant node), else NULL. */
const struct gf_tensor *gf_value_constant(const struct gf_value *v);

/* ---- fusion (see README.md, "Fused ops" and "Optimize") ------------------- */

/* What the fused nodes become in the model. */
enum gf_fuse_target {
    GF_TARGET_GRAPHFUSE = 0, /* graphfuse-domain ops, each a call to a model-local
                                function whose body is the subgraph it replaced,
                                so any ONNX runtime still runs the file */
    GF_TARGET_ORT,           /* ONNX Runtime's own ops (com.microsoft contrib ops,
                                SimplifiedLayerNormalization) where one computes
                                exactly the fused op, else the function call */
    GF_TARGET_ONNX,          /* standard ONNX ops where one does at the model's
                                opset (no opset is raised), else the call */
};

struct gf_fuse_opts {
    const char *const *disabled; /* pattern names not to apply (gf_fuse_pattern_name) */
    size_t n_disabled;
    const char *explain;         /* pattern name whose every attempt is reported, or NULL */
    enum gf_fuse_target target;
    const char *const *enabled;  /* opt-in patterns to apply too (gf_fuse_pattern_opt_in) */
    size_t n_enabled;
};

/* How many nodes of each op type a graph has (main graph). */
struct gf_op_tally {
    char *op;     /* op_type (malloc'ed) */
    char *domain; /* "" for ai.onnx (malloc'ed) */
    size_t count;
};
struct gf_op_census {
    size_t n_nodes;
    size_t n_ops;
    struct gf_op_tally *ops; /* sorted by domain, then op */
};

struct gf_fuse_hit {
    const char *pattern; /* static name */
    size_t hits;         /* rewrites made by the pattern's forms */
    bool disabled;
};

struct gf_fuse_report {
    enum gf_fuse_target target;
    struct gf_op_census before, after; /* around gf_pass_fuse (a caller may replace
                                          `before` by a census of the input file) */
    size_t n_patterns;
    struct gf_fuse_hit *patterns;      /* every pattern name, in priority order */
    size_t n_functions;                /* model-local functions added */
    const char *explain;               /* the explained pattern, or NULL */
    size_t n_explain;
    char **explain_lines;              /* one per attempt: where it stopped and why */
    /* filled by the caller when it knows them; printed when set */
    size_t bytes_before, bytes_after;  /* file sizes */
    bool have_cleanup;
    struct gf_cleanup_stats cleanup;
};

/* Rewrites the main graph of m with the fusion patterns (README "Optimize")
 * until none applies, then removes what became unused (gf_pass_dce) and
 * emits the fused nodes for o->target.  Shapes are inferred first (checks
 * need dtypes and ranks).  o NULL: every pattern, target graphfuse.  rep
 * (may be NULL) is initialized and filled; free it with
 * gf_fuse_report_free.  GF_ERR_ARG: unknown pattern name or target; the
 * model is then unchanged. */
enum gf_status gf_pass_fuse(struct gf_model *m, const struct gf_fuse_opts *o,
                            struct gf_fuse_report *rep);
void gf_fuse_report_free(struct gf_fuse_report *rep);
/* The report as a table (op counts before / after, nodes and file size,
 * hits per pattern, explain lines), or as one JSON document
 * ("format": "graphfuse-fuse-report", "version": 1). */
void gf_fuse_report_print(const struct gf_fuse_report *rep, FILE *f, bool json);

/* Counts the op types of g (filling c; free with gf_op_census_free). */
enum gf_status gf_op_census_take(struct gf_op_census *c, const struct gf_graph *g);
void gf_op_census_free(struct gf_op_census *c);

/* Pattern names (each may cover several exporter forms), in priority order. */
size_t gf_fuse_pattern_count(void);
const char *gf_fuse_pattern_name(size_t i);
bool gf_fuse_pattern_known(const char *name);
/* Patterns applied only when gf_fuse_opts.enabled names them: "attention",
 * for training (its fused op keeps the attention probabilities out of the
 * memory the backward holds; the trainer enables it). */
bool gf_fuse_pattern_opt_in(const char *name);
/* "graphfuse", "ort", "onnx" <-> enum; parse returns false if unknown. */
const char *gf_fuse_target_name(enum gf_fuse_target t);
bool gf_fuse_target_parse(const char *s, enum gf_fuse_target *t);

/* Removes graph output `name` from the main graph's outputs (the nodes
 * computing it stay until dce), e.g. to let a fusion replace a value the
 * model used to return.  GF_ERR_ARG if there is no such output. */
enum gf_status gf_pass_drop_output(struct gf_graph *g, const char *name);

/* ---- autodiff (training; README "Training", "Autodiff") ------------------- */

struct gf_autodiff_opts {
    const char *loss;          /* value to differentiate; NULL: the output named "loss",
                                  else the only scalar float output.  A loss that is not
                                  a scalar is differentiated as the sum of its elements */
    size_t n_params;           /* 0: the default parameters: every float initializer of
                                  the main graph of rank >= 1 the loss depends on (rank-0
                                  ones are the scalar constants exporters write: eps,
                                  scales; name them here to train them) */
    const char *const *params; /* initializer names to differentiate (float; each once);
                                  one the loss does not depend on gets a zero gradient */
};

struct gf_autodiff_result {
    struct gf_value *loss;    /* the loss value */
    size_t n_params;
    struct gf_value **params; /* the parameters (initializers, now also graph inputs), in
                                 the order of opts->params, else in file order */
    struct gf_value **grads;  /* grads[i]: d loss / d params[i], a graph output named
                                 "<param>_grad" (made unique), same shape and dtype */
};

/* Appends the backward graph to m's main graph as ordinary nodes: seeds
 * d loss / d loss = 1, walks the forward nodes in reverse order applying
 * each op's gradient rule (passes/grad_rules*.c; some write the backward
 * ops of the graphfuse domain, whose opset is then imported), sums the
 * gradients of values with several users (a tied initializer read by
 * several nodes gets one summed gradient), and makes each parameter's
 * gradient a graph output.  Parameters become graph inputs that keep their
 * initializer (so the executor treats them as variables, not constants).
 * Integer and bool values, shape computations and piecewise-constant ops
 * (Floor, Sign, ...) carry no gradient.  Errors, found before the graph
 * changes: no loss (GF_ERR_ARG listing the candidates), a bad parameter
 * name (GF_ERR_ARG), an op on a path from a parameter to the loss without
 * a gradient rule, or an input its rule cannot differentiate
 * (GF_ERR_UNSUPPORTED naming node and op).  A rule refusing an attribute
 * form (e.g. Pad mode "reflect") fails after the graph changed: discard
 * the model then.  r may be NULL; its arrays live in m's arena.  Run
 * passes that rewrite the forward graph (fusion) before this one: the
 * backward nodes read forward values, which keeps patterns from matching.
 * A fused op without a rule of its own is differentiated through its
 * model-local function body (recomputed from its inputs). */
enum gf_status gf_pass_autodiff(struct gf_model *m, const struct gf_autodiff_opts *o,
                                struct gf_autodiff_result *r);

/* ---- precision (docs/precision.md) -------------------------------------- */

enum gf_precision {
    GF_PRECISION_FP32 = 0, /* no change */
    GF_PRECISION_TF32,     /* fp32 graph; CUDA GEMMs may use TF32 tensor cores */
    GF_PRECISION_BF16,     /* autocast policy, low type bfloat16 */
    GF_PRECISION_FP16,     /* autocast policy, low type float16 */
};
/* The model metadata_props key the pass records its precision under (tf32,
 * bf16, fp16), for backends: gf_model_precision reads it. */
#define GF_PRECISION_KEY "graphfuse.precision"

struct gf_precision_stats {
    size_t casts;       /* Cast nodes inserted */
    size_t low_ops;     /* matmul-class nodes now in the low type */
    size_t fp32_inputs; /* low inputs of fp32-class nodes cast to fp32 */
    size_t folded;      /* Cast pairs folded (narrow(widen(x)) -> x) */
    size_t hoisted;     /* exact ops (Slice, Neg, Concat, ...) moved to fp32 above
                         * the widening Casts of their outputs */
};

/* Rewrites m's main graph with PyTorch autocast's policy (top of
 * passes/precision.c): MatMul, Gemm, Einsum, MatMulEpilogue and Attention
 * read bf16 / fp16 inputs (one Cast per value, shared by its readers) and
 * store low outputs; norms, softmax, losses and reductions get fp32
 * inputs; other ops compute in their inputs' type with torch's promotion.
 * fp32 initializers stay fp32 masters read through Casts; graph inputs and
 * outputs keep their dtypes.  Idempotent.  bf16 raises ai.onnx opset 13..18
 * to 19 (Cast rounding to nearest even).  fp32: nothing; tf32: only the
 * metadata.  Run it before fusion and autodiff.  st may be NULL. */
enum gf_status gf_pass_precision(struct gf_model *m, enum gf_precision p,
                                 struct gf_precision_stats *st);
/* After fusion, on a model gf_pass_precision made bf16 / fp16: the pass's
 * float Casts move past the data-movement ops beside them (Transpose,
 * Reshape, Flatten, Squeeze, Unsqueeze, Expand, Identity), which then run
 * in the low type: a widening Cast read only by such an op goes after it,
 * a narrowing Cast of such an op's output (read by the Cast alone) before
 * it.  The values are the same (a Cast commutes with moving elements); the
 * ops move half the bytes, and their gradients too (autodiff runs after).
 * Repeated until none moves; then a RoPE between a widening Cast of X and
 * a narrowing Cast of Y (fp32 Cos, Sin) reads and writes the low type
 * itself (computing in fp32: the same values).  *moved (may be NULL)
 * counts the moves and folds.  Nothing on an fp32 / tf32 model. */
enum gf_status gf_pass_precision_move_casts(struct gf_model *m, size_t *moved);
/* The precision a model was rewritten for (GF_PRECISION_FP32 if none). */
enum gf_precision gf_model_precision(const struct gf_model *m);
/* "fp32", "tf32", "bf16", "fp16" <-> enum; parse returns false if unknown. */
const char *gf_precision_name(enum gf_precision p);
bool gf_precision_parse(const char *s, enum gf_precision *p);

/* ---- parameters (training; README "Training → Parameters") ---------------- */

enum gf_param_kind {
    GF_PARAM_TRAINED,    /* a parameter: meets activations or input data */
    GF_PARAM_SCALAR,     /* fewer than 2 elements: eps, scales */
    GF_PARAM_TABLE,      /* 2+ dims > 1, one of the export's batch/sequence: masks, RoPE tables */
    GF_PARAM_POSITIONAL, /* meets only integers made float: RoPE inv_freq */
    GF_PARAM_UNUSED,     /* meets no activation */
};

struct gf_param_class {
    const struct gf_value *v;   /* valid while the graph is unchanged */
    const char *name;           /* the initializer's (the graph's arena) */
    int rank;
    int64_t dims[8];            /* the first 8 (rank may be larger) */
    size_t nelem;
    char readers[96];           /* op types reading it: "Mul x5, Gather" */
    enum gf_param_kind kind;
    const char *role;           /* op type of the node that decided, or NULL */
    bool merged;                /* trained, and read by n_roles nodes of op `role`:
                                   the exporter may have merged equal parameters */
    size_t n_roles;
};

/* Classifies every float initializer of g's main graph (file order) by the
 * rule at the top of passes/params.c; *out is malloc'd (free it). */
enum gf_status gf_params_classify(const struct gf_graph *g, struct gf_param_class **out,
                                  size_t *n);
/* Why an initializer of this kind is (not) trained, as a phrase. */
const char *gf_param_kind_name(enum gf_param_kind k);
/* Gives every node use of initializer v but the first its own copy (named
 * after the node's scope where the node name has one, "<scope>.weight",
 * else "<name>.<k>"); deterministic, so the same call on another copy of the
 * model gives the same names. */
enum gf_status gf_params_untie(struct gf_graph *g, struct gf_value *v, size_t *n_copies);

#ifdef __cplusplus
}
#endif
#endif /* GF_PASSES_H */
