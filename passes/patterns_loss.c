/* Loss patterns: softmax cross-entropy in the forms the exporters and the
 * ONNX function bodies write (the SoftmaxCrossEntropyLoss op, LogSoftmax +
 * NegativeLogLikelihoodLoss, NegativeLogLikelihoodLoss's own body), the
 * Hugging Face causal-LM label shift on top of it, the lm-head MatMul
 * absorbed into LinearCrossEntropy, and the generalized Jensen-Shannon
 * divergence.  Pattern format: pattern.h; fused ops: README "Fused ops".
 *
 * The cross-entropy forms build on one another: every form first becomes
 * SoftmaxCrossEntropy (shift 0, the ONNX op's semantics), then
 *   Reduce{Sum,Mean}(SoftmaxCrossEntropy none) -> its sum / mean,
 *   SoftmaxCrossEntropy(Reshape(Slice(L)), Reshape(Slice(T)))  -> shift 1,
 *   SoftmaxCrossEntropy(MatMul(H, W), T)       -> LinearCrossEntropy. */
#include <math.h>
#include <string.h>

#include "pattern.h"

/* ---- shared helpers ---------------------------------------------------------------- */

static bool same_dim(const struct gf_dim *a, const struct gf_dim *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

/* Dims i of a and j of b are known to be equal (same size or symbol). */
static bool dims_match(const struct gf_value *a, int i, const struct gf_value *b, int j)
{
    return gf_pat_rank(a) > i && gf_pat_rank(b) > j &&
           same_dim(&a->type.dims[i], &b->type.dims[j]);
}

/* Known size of dim i of v, or -1. */
static int64_t dim_size(const struct gf_value *v, int i)
{
    return gf_pat_rank(v) > i ? v->type.dims[i].value : -1;
}

static bool is_label_type(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR &&
           (v->type.dtype == GF_INT64 || v->type.dtype == GF_INT32);
}

/* The integers of attribute `attr` of n (older opsets) or else of its
 * constant input k; false when neither holds at most `cap` of them. */
static bool const_ints(const struct gf_node *n, size_t k, const char *attr, int64_t *out,
                       size_t cap, size_t *cnt)
{
    size_t na = 0;
    const int64_t *a = attr ? gf_node_attr_ints(n, attr, &na) : NULL;
    if (a) {
        if (na > cap)
            return false;
        memcpy(out, a, na * sizeof(*out));
        *cnt = na;
        return true;
    }
    const struct gf_tensor *t =
        k < n->n_inputs && n->inputs[k] ? gf_value_constant(n->inputs[k]) : NULL;
    if (!t || (t->dtype != GF_INT64 && t->dtype != GF_INT32) || t->rank > 1 || t->nelem > cap)
        return false;
    for (size_t i = 0; i < t->nelem; i++)
        out[i] = gf_tensor_get_i64(t, i);
    *cnt = t->nelem;
    return true;
}

/* Axis a of a rank-r tensor, made non-negative; -1 when out of range. */
static int64_t norm_axis(int64_t a, int r)
{
    if (r < 0 || a < -r || a >= r)
        return -1;
    return a < 0 ? a + r : a;
}

/* A (Un)Squeeze of exactly one axis, `want` in a rank-r tensor. */
static bool one_axis(const struct gf_node *n, int r, int64_t want)
{
    int64_t a[2];
    size_t c;
    return const_ints(n, 1, "axes", a, 2, &c) && c == 1 && norm_axis(a[0], r) == want;
}

/* A Slice of one axis with step 1: its constant start, end and axis (made
 * non-negative for a rank-r input). */
struct slice1 {
    int64_t start, end, axis;
};

static bool slice_one(const struct gf_node *n, int r, struct slice1 *s)
{
    int64_t v[2];
    size_t c;
    if (!const_ints(n, 1, "starts", v, 1, &c) || c != 1)
        return false;
    s->start = v[0];
    if (!const_ints(n, 2, "ends", v, 1, &c) || c != 1)
        return false;
    s->end = v[0];
    s->axis = 0;
    if (gf_node_attr(n, "axes") || (n->n_inputs > 3 && n->inputs[3])) {
        if (!const_ints(n, 3, "axes", v, 1, &c) || c != 1)
            return false;
        s->axis = v[0];
    }
    if ((s->axis = norm_axis(s->axis, r)) < 0)
        return false;
    if (n->n_inputs > 4 && n->inputs[4])
        return const_ints(n, 4, NULL, v, 1, &c) && c == 1 && v[0] == 1;
    return true;
}

/* A ReduceSum / ReduceMean of every axis to a scalar (keepdims 0). */
static bool reduces_all(const struct gf_node *n)
{
    int r = gf_pat_rank(n->inputs[0]);
    int64_t a[16];
    size_t c = 0;
    bool seen[16] = {false};
    if (gf_node_attr_int(n, "keepdims", 1) != 0)
        return false;
    if ((gf_node_attr(n, "axes") || (n->n_inputs > 1 && n->inputs[1])) &&
        !const_ints(n, 1, "axes", a, 16, &c))
        return false;
    if (c == 0)
        return gf_node_attr_int(n, "noop_with_empty_axes", 0) == 0;
    if (r < 0 || c != (size_t)r)
        return false;
    for (size_t i = 0; i < c; i++) {
        int64_t x = norm_axis(a[i], r);
        if (x < 0 || seen[x])
            return false;
        seen[x] = true;
    }
    return true;
}

static bool in_match(const struct gf_match *m, const struct gf_node *n)
{
    for (int i = 0; i < m->pat->n_nodes; i++)
        if (m->node[i] == n)
            return true;
    for (int i = 0; i < m->n_cast; i++)
        if (m->cast[i] == n)
            return true;
    return false;
}

/* v is a graph output or read by a node outside the match. */
static bool read_outside(const struct gf_match *m, const struct gf_value *v)
{
    if (!v)
        return false;
    if (v->is_output)
        return true;
    for (size_t u = 0; u < v->n_uses; u++)
        if (v->uses[u].slot < 0 || !in_match(m, v->uses[u].node))
            return true;
    return false;
}

static const char *reduction_name(const char *s)
{
    return strcmp(s, "none") == 0 ? "none" : strcmp(s, "sum") == 0 ? "sum" : "mean";
}

static bool valid_reduction(const char *s)
{
    return strcmp(s, "none") == 0 || strcmp(s, "sum") == 0 || strcmp(s, "mean") == 0;
}

/* Labels T (int32/int64 [N, d...]) and class weights W (absent, or [C] of
 * the logits' dtype) of logits L [N, C, d...]. */
static bool labels_and_weights(struct gf_match *m, int pn, const struct gf_value *l,
                               const struct gf_value *t, const struct gf_value *w)
{
    int r = gf_pat_rank(l);
    if (!gf_pat_float(l) || r < 2)
        return gf_match_fail(m, pn, "the logits are not a floating-point tensor of rank >= 2");
    if (!is_label_type(t) || gf_pat_rank(t) != r - 1)
        return gf_match_fail(m, pn, "the labels are not int32/int64 of rank %d", r - 1);
    if (w && (gf_pat_rank(w) != 1 || w->type.dtype != l->type.dtype ||
              (dim_size(w, 0) >= 0 && dim_size(l, 1) >= 0 && dim_size(w, 0) != dim_size(l, 1))))
        return gf_match_fail(m, pn, "the class weights '%s' are not [C] of the logits' dtype",
                             w->name);
    return true;
}

/* The fused SoftmaxCrossEntropy (shift 0), with LogP as its second output
 * when the log-probabilities are read elsewhere. */
static enum gf_status sce_emit(struct gf_fused *f, const char *reduction,
                               const struct gf_value *ii, struct gf_value *logp)
{
    enum gf_status st;
    f->op = GF_OP_SOFTMAX_CROSS_ENTROPY;
    if ((st = gf_fused_attr_string(f, "reduction", reduction_name(reduction))) != GF_OK)
        return st;
    if (ii) {
        double v;
        if (!gf_pat_scalar(gf_value_constant(ii), &v))
            return gf_error(GF_ERR_INTERNAL, "cross_entropy: ignore_index changed after the check");
        if ((st = gf_fused_attr_int(f, "ignore_index", (int64_t)v)) != GF_OK)
            return st;
    }
    return logp ? gf_fused_output(f, logp) : GF_OK;
}

/* ---- SoftmaxCrossEntropyLoss op ------------------------------------------------------
 *   L [N, C, d...] ─┐
 *   T [N, d...] ────SoftmaxCrossEntropyLoss(reduction, ignore_index) ── loss (, log_prob)
 *   W [C] ──────────┘
 */
enum { CL, CT, CW, CXSHAPE, CII, CZ1, CZ2, CONE };
static const struct gf_pcap ce_caps[] = {
    [CL] = GF_K_ANY("logits"), [CT] = GF_K_ANY("labels"), [CW] = GF_K_ANY("class weights"),
    [CXSHAPE] = GF_K_CONST("shape of the logits"), [CII] = GF_K_CONST("ignore_index"),
    [CZ1] = GF_K_SCALAR("0", 0.0, 0), [CZ2] = GF_K_SCALAR("0", 0.0, 0),
    [CONE] = GF_K_SCALAR("1", 1.0, 0),
};
static const struct gf_pnode sce_op_nodes[] = {
    {GF_P("SoftmaxCrossEntropyLoss", GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS, GF_C(CL), GF_C(CT),
          GF_OPT(CW)), .escape = 2},
};

static bool sce_op_check(struct gf_match *m)
{
    const struct gf_node *n = gf_match_node(m, 0);
    const char *red = gf_node_attr_string(n, "reduction", "mean");
    if (!valid_reduction(red))
        return gf_match_fail(m, 0, "reduction '%s' is not none, sum or mean", red);
    return labels_and_weights(m, 0, gf_match_cap(m, CL), gf_match_cap(m, CT),
                              gf_match_cap(m, CW));
}

/* The fused node's common part: L, T, W? and the attributes of node n. */
static enum gf_status sce_from_node(struct gf_match *m, struct gf_fused *f,
                                    const struct gf_node *n, struct gf_value *logp)
{
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, CL));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CT));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CW));
    if (st != GF_OK)
        return st;
    st = sce_emit(f, gf_node_attr_string(n, "reduction", "mean"), NULL, logp);
    if (st == GF_OK && gf_node_attr(n, "ignore_index"))
        st = gf_fused_attr_int(f, "ignore_index", gf_node_attr_int(n, "ignore_index", 0));
    return st;
}

static enum gf_status sce_op_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *n = gf_match_node(m, 0);
    struct gf_value *lp = n->n_outputs > 1 ? n->outputs[1] : NULL;
    return sce_from_node(m, f, n, read_outside(m, lp) ? lp : NULL);
}

/* ---- the log-softmax over the class axis, as the loss forms below read it ------------
 *   L ─LogSoftmax(axis 1; 2-D: or -1) ──────────────────────────────────────────┐
 *   L ─[Reshape(0,0,-1)]─Transpose(0,2,1)─LogSoftmax(-1)─Transpose(0,2,1)─[Reshape(Shape(L))]
 *   (the second line is SoftmaxCrossEntropyLoss's function body) ──────────────┴─ log P
 */
enum { X_LSM, X_R1, X_IN, X_T1, X_LSM2, X_T2, X_SHAPE, X_TGT, X_R2, X_LOGP, X_END };
#define LOGP_NODES                                                                          \
    [X_LSM] = {GF_P("logsoftmax", GF_OP_LOG_SOFTMAX, GF_C(CL)), .escape = 1, .cast = 1},    \
    [X_R1] = {GF_P("to [N,C,D]", GF_OP_RESHAPE, GF_C(CL), GF_ANY), .cast = 1},              \
    [X_IN] = {GF_P("[N,C,D]", GF_PAT_ALT, GF_N(X_R1), GF_C(CL))},                           \
    [X_T1] = {GF_P("to [N,D,C]", GF_OP_TRANSPOSE, GF_N(X_IN))},                             \
    [X_LSM2] = {GF_P("logsoftmax(last)", GF_OP_LOG_SOFTMAX, GF_N(X_T1))},                   \
    [X_T2] = {GF_P("back to [N,C,D]", GF_OP_TRANSPOSE, GF_N(X_LSM2)), .escape = 1},         \
    [X_SHAPE] = {GF_P("shape", GF_OP_SHAPE, GF_C(CL))},                                     \
    [X_TGT] = {GF_P("shape of L", GF_PAT_ALT, GF_N(X_SHAPE), GF_C(CXSHAPE))},               \
    [X_R2] = {GF_P("back to L's shape", GF_OP_RESHAPE, GF_N(X_T2), GF_N(X_TGT)),            \
              .escape = 1},                                                                 \
    [X_LOGP] = {GF_P("log P", GF_PAT_ALT, GF_N(X_LSM), GF_N(X_R2), GF_N(X_T2))}

/* LogSoftmax's axis, with the default of the model's opset (1 before 13). */
static int64_t lsm_axis(const struct gf_match *m, const struct gf_node *n, int r)
{
    int64_t dflt = gf_model_opset(m->graph->model, "") >= 13 ? -1 : 1;
    return norm_axis(gf_node_attr_int(n, "axis", dflt), r);
}

static bool perm_021(const struct gf_node *n)
{
    size_t c = 0;
    const int64_t *p = gf_node_attr_ints(n, "perm", &c);
    return p && c == 3 && p[0] == 0 && p[1] == 2 && p[2] == 1;
}

/* The direct form: LogSoftmax over axis 1 of L; before opset 13 it
 * flattens the axes from `axis` on, which is the class axis only in 2-D. */
static bool logp_direct(struct gf_match *m, const struct gf_value *l)
{
    int r = gf_pat_rank(l);
    if (lsm_axis(m, gf_match_node(m, X_LSM), r) != 1)
        return gf_match_fail(m, X_LSM, "LogSoftmax is not over axis 1, the class axis of "
                             "[N, C, d...]");
    if (r != 2 && gf_model_opset(m->graph->model, "") < 13)
        return gf_match_fail(m, X_LSM, "before opset 13 LogSoftmax(axis 1) of a rank-%d "
                             "tensor normalizes over C and d... together", r);
    return true;
}

/* The reshape to [N, C, D] keeps N and C (or is absent for 3-D L). */
static bool logp_ncd(struct gf_match *m, const struct gf_value *l)
{
    const struct gf_node *r1 = gf_match_node(m, X_R1);
    if (!r1)
        return gf_pat_rank(l) == 3 ||
               gf_match_fail(m, X_T1, "transposes a rank-%d tensor", gf_pat_rank(l));
    const struct gf_value *o = r1->outputs[0];
    if (gf_pat_rank(o) != 3 || !dims_match(o, 0, l, 0) || !dims_match(o, 1, l, 1))
        return gf_match_fail(m, X_R1, "does not reshape [N, C, d...] to [N, C, D]");
    return true;
}

/* The reshape back reads Shape(L) or L's static shape. */
static bool logp_back(struct gf_match *m, const struct gf_value *l)
{
    const struct gf_node *sh = gf_match_node(m, X_SHAPE);
    const struct gf_tensor *t = gf_match_const(m, CXSHAPE);
    if (sh && (gf_node_attr(sh, "start") || gf_node_attr(sh, "end")))
        return gf_match_fail(m, X_SHAPE, "takes part of the shape (start/end)");
    if (t) {
        int r = gf_pat_rank(l);
        bool ok = t->rank == 1 && r >= 0 && t->nelem == (size_t)r;
        for (int i = 0; ok && i < r; i++)
            ok = dim_size(l, i) >= 0 && gf_tensor_get_i64(t, (size_t)i) == dim_size(l, i);
        if (!ok)
            return gf_match_fail(m, X_R2, "reshapes to something else than L's shape");
    }
    return true;
}

/* log P is log_softmax(L) over the class axis 1 of L [N, C, d...], shaped
 * like L; only it may be read outside the match. */
static bool logp_check(struct gf_match *m, const struct gf_value *l)
{
    if (gf_match_node(m, X_LSM))
        return logp_direct(m, l);
    if (!logp_ncd(m, l))
        return false;
    if (!perm_021(gf_match_node(m, X_T1)) || !perm_021(gf_match_node(m, X_T2)))
        return gf_match_fail(m, X_T2, "the transposes do not swap the last two axes of a "
                             "rank-3 tensor");
    if (lsm_axis(m, gf_match_node(m, X_LSM2), 3) != 2)
        return gf_match_fail(m, X_LSM2, "not over the last axis");
    if (gf_match_node(m, X_R2) && !logp_back(m, l))
        return false;
    if (!gf_pat_same_type(m->val[X_LOGP], l))
        return gf_match_fail(m, X_LOGP, "log P is not shaped like the logits");
    if (gf_match_node(m, X_R2) && read_outside(m, gf_match_node(m, X_T2)->outputs[0]))
        return gf_match_fail(m, X_T2, "the transposed log-probabilities are read elsewhere");
    return true;
}

/* log P when read outside the match (the fused op's LogP output). */
static struct gf_value *logp_out(const struct gf_match *m)
{
    return read_outside(m, m->val[X_LOGP]) ? m->val[X_LOGP] : NULL;
}

/* ---- LogSoftmax + NegativeLogLikelihoodLoss op ---------------------------------------
 *   L ─(log P, above)─┐
 *   T ────────────────NegativeLogLikelihoodLoss(reduction, ignore_index) ── loss
 *   W ────────────────┘
 */
enum { NO_ROOT = X_END };
static const struct gf_pnode nll_op_nodes[] = {
    LOGP_NODES,
    [NO_ROOT] = {GF_P("nll", GF_OP_NEGATIVE_LOG_LIKELIHOOD_LOSS, GF_N(X_LOGP), GF_C(CT),
                      GF_OPT(CW))},
};

static bool nll_op_check(struct gf_match *m)
{
    const struct gf_value *l = gf_match_cap(m, CL);
    const char *red = gf_node_attr_string(gf_match_node(m, NO_ROOT), "reduction", "mean");
    if (!valid_reduction(red))
        return gf_match_fail(m, NO_ROOT, "reduction '%s' is not none, sum or mean", red);
    return labels_and_weights(m, NO_ROOT, l, gf_match_cap(m, CT), gf_match_cap(m, CW)) &&
           logp_check(m, l);
}

static enum gf_status nll_op_rewrite(struct gf_match *m, struct gf_fused *f)
{
    return sce_from_node(m, f, gf_match_node(m, NO_ROOT), logp_out(m));
}

/* ---- NegativeLogLikelihoodLoss's function body, after the log-softmax -----------------
 *   T ─Unsqueeze(1)─┐                                   (no ignore_index, no weights)
 *   log P ──────────GatherElements(axis 1)─Neg─Slice(axis 1, 0:1)─Squeeze(1)── loss (none)
 * The weights, sum and mean are then taken into the fused "none" loss (below).
 */
enum { B_UNSQ = X_END, B_GE, B_NEG, B_SLICE, B_SQ };
static const struct gf_pnode nll_none_nodes[] = {
    LOGP_NODES,
    [B_UNSQ] = {GF_P("unsqueeze(T)", GF_OP_UNSQUEEZE, GF_C(CT), GF_ANY)},
    [B_GE] = {GF_P("gather log P", GF_OP_GATHER_ELEMENTS, GF_N(X_LOGP), GF_N(B_UNSQ))},
    [B_NEG] = {GF_P("neg", GF_OP_NEG, GF_N(B_GE))},
    [B_SLICE] = {GF_P("slice 0:1", GF_OP_SLICE, GF_N(B_NEG), GF_ANY, GF_ANY, GF_ANY, GF_ANY)},
    [B_SQ] = {GF_P("squeeze", GF_OP_SQUEEZE, GF_N(B_SLICE), GF_ANY)},
};

/*   with ignore_index ii: t = Unsqueeze(T), mask = Equal(Cast(t), ii), T' = Where(mask, t-t, t)
 *   log P ─GatherElements(T')─Where(mask, 0, ·)─Neg─Slice─Squeeze─┐
 *   Where(Squeeze(mask), 0, 1) | Squeeze(Where(mask, 0, Gather(W, T'))) ─Mul── loss (none)
 *   mean: Div(ReduceSum(Mul), ReduceSum(weight))
 */
enum { I_UNSQ = X_END, I_ZT, I_CAST, I_TI, I_EQ, I_TT, I_GE, I_GET, I_NEG, I_SLICE, I_SQ,
       I_SMASK, I_WG1, I_WGT, I_WGT1, I_WG2, I_WG, I_MUL, I_RS, I_RSW, I_DIV };
#define NLL_II                                                                                 \
    [I_UNSQ] = {GF_P("unsqueeze(T)", GF_OP_UNSQUEEZE, GF_C(CT), GF_ANY)},                      \
    [I_ZT] = {GF_P("t-t", GF_OP_SUB, GF_N(I_UNSQ), GF_N(I_UNSQ))},                              \
    [I_CAST] = {GF_P("to int64", GF_OP_CAST, GF_N(I_UNSQ))},                                   \
    [I_TI] = {GF_P("t (int64)", GF_PAT_ALT, GF_N(I_CAST), GF_N(I_UNSQ))},                       \
    [I_EQ] = {GF_P("mask", GF_OP_EQUAL, GF_N(I_TI), GF_C(CII)), .flags = GF_PF_COMMUTE},      \
    [I_TT] = {GF_P("masked T", GF_OP_WHERE, GF_N(I_EQ), GF_N(I_ZT), GF_N(I_UNSQ))},            \
    [I_GE] = {GF_P("gather log P", GF_OP_GATHER_ELEMENTS, GF_N(X_LOGP), GF_N(I_TT))},          \
    [I_GET] = {GF_P("masked log P", GF_OP_WHERE, GF_N(I_EQ), GF_C(CZ1), GF_N(I_GE))},           \
    [I_NEG] = {GF_P("neg", GF_OP_NEG, GF_N(I_GET))},                                           \
    [I_SLICE] = {GF_P("slice 0:1", GF_OP_SLICE, GF_N(I_NEG), GF_ANY, GF_ANY, GF_ANY, GF_ANY)},  \
    [I_SQ] = {GF_P("squeeze", GF_OP_SQUEEZE, GF_N(I_SLICE), GF_ANY)},                          \
    [I_SMASK] = {GF_P("squeeze(mask)", GF_OP_SQUEEZE, GF_N(I_EQ), GF_ANY)},                    \
    [I_WG1] = {GF_P("0|1", GF_OP_WHERE, GF_N(I_SMASK), GF_C(CZ2), GF_C(CONE))},                 \
    [I_WGT] = {GF_P("W[T']", GF_OP_GATHER, GF_C(CW), GF_N(I_TT))},                             \
    [I_WGT1] = {GF_P("masked W[T']", GF_OP_WHERE, GF_N(I_EQ), GF_C(CZ2), GF_N(I_WGT))},        \
    [I_WG2] = {GF_P("squeeze", GF_OP_SQUEEZE, GF_N(I_WGT1), GF_ANY)},                          \
    [I_WG] = {GF_P("weight", GF_PAT_ALT, GF_N(I_WG1), GF_N(I_WG2))},                            \
    [I_MUL] = {GF_P("*weight", GF_OP_MUL, GF_N(I_SQ), GF_N(I_WG)), .flags = GF_PF_COMMUTE}

static const struct gf_pnode nll_ii_none_nodes[] = {LOGP_NODES, NLL_II};
static const struct gf_pnode nll_ii_mean_nodes[] = {
    LOGP_NODES, NLL_II,
    [I_RS] = {GF_P("sum", GF_OP_REDUCE_SUM, GF_N(I_MUL), GF_ANY)},
    [I_RSW] = {GF_P("sum of weight", GF_OP_REDUCE_SUM, GF_N(I_WG), GF_ANY)},
    [I_DIV] = {GF_P("mean", GF_OP_DIV, GF_N(I_RS), GF_N(I_RSW))},
};

/* One node of the NLL body (pattern node pn) has the constants the ONNX
 * function writes; r is the rank of the logits [N, C, d...]. */
static bool nll_body_node(struct gf_match *m, int pn, int r)
{
    const struct gf_node *n = gf_match_node(m, pn);
    struct slice1 s;
    switch (n->op) {
    case GF_OP_UNSQUEEZE:
    case GF_OP_SQUEEZE:
        return one_axis(n, r, 1) || gf_match_fail(m, pn, "not of axis 1");
    case GF_OP_GATHER_ELEMENTS:
        return gf_node_attr_int(n, "axis", 0) == 1 || gf_match_fail(m, pn, "not along axis 1");
    case GF_OP_GATHER:
        return norm_axis(gf_node_attr_int(n, "axis", 0), 1) == 0 ||
               gf_match_fail(m, pn, "not along axis 0 of W");
    case GF_OP_SLICE:
        if (!slice_one(n, r, &s) || s.axis != 1 || s.start != 0 || s.end != 1)
            return gf_match_fail(m, pn, "is not [:, 0:1] (constant bounds, step 1)");
        return true;
    case GF_OP_REDUCE_SUM:
    case GF_OP_REDUCE_MEAN:
        return reduces_all(n) || gf_match_fail(m, pn, "does not reduce every axis (keepdims 0)");
    case GF_OP_CAST:
        return gf_node_attr_int(n, "to", 0) == GF_INT64 || gf_match_fail(m, pn, "not to int64");
    default:
        return true;
    }
}

static bool nll_body_check(struct gf_match *m)
{
    const struct gf_value *l = gf_match_cap(m, CL), *ii = gf_match_cap(m, CII);
    int root = m->pat->n_nodes - 1;
    double v;
    if (!labels_and_weights(m, root, l, gf_match_cap(m, CT), gf_match_cap(m, CW)) ||
        !logp_check(m, l))
        return false;
    for (int pn = X_END; pn < m->pat->n_nodes; pn++)
        if (gf_match_node(m, pn) && !nll_body_node(m, pn, gf_pat_rank(l)))
            return false;
    if (ii && (!gf_pat_scalar(gf_value_constant(ii), &v) || !is_label_type(ii) || v != floor(v)))
        return gf_match_fail(m, I_EQ, "ignore_index is not one integer");
    return true;
}

static enum gf_status nll_body_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *root = gf_match_node(m, m->pat->n_nodes - 1);
    const char *red = root->op == GF_OP_DIV ? "mean" : "none";
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, CL));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CT));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CW));
    return st == GF_OK ? sce_emit(f, red, gf_match_cap(m, CII), logp_out(m)) : st;
}

/* ---- class weights of NegativeLogLikelihoodLoss's body, on the fused "none" loss ----------
 *   L, T ─SoftmaxCrossEntropy(none)─┐
 *   W ─Gather(T) ───────────────────Mul ── loss (none, W)
 *   mean: Div(ReduceSum(Mul), ReduceSum(Gather(W, T)))     (sum: see "reductions")
 */
enum { V_SCE, V_WG, V_MUL, V_RS, V_RSW, V_DIV };
#define WEIGHTED_NODES                                                                        \
    [V_SCE] = {GF_P("loss (none)", GF_OP_SOFTMAX_CROSS_ENTROPY, GF_C(CL), GF_C(CT), GF_NONE), \
               .escape = 2},                                                                   \
    [V_WG] = {GF_P("W[T]", GF_OP_GATHER, GF_C(CW), GF_C(CT))},                                 \
    [V_MUL] = {GF_P("*W[T]", GF_OP_MUL, GF_N(V_SCE), GF_N(V_WG)), .flags = GF_PF_COMMUTE}
static const struct gf_pnode weighted_none_nodes[] = {WEIGHTED_NODES};
static const struct gf_pnode weighted_mean_nodes[] = {
    WEIGHTED_NODES,
    [V_RS] = {GF_P("sum", GF_OP_REDUCE_SUM, GF_N(V_MUL), GF_ANY)},
    [V_RSW] = {GF_P("sum of W[T]", GF_OP_REDUCE_SUM, GF_N(V_WG), GF_ANY)},
    [V_DIV] = {GF_P("mean", GF_OP_DIV, GF_N(V_RS), GF_N(V_RSW))},
};

static bool weighted_check(struct gf_match *m)
{
    const struct gf_node *sce = gf_match_node(m, V_SCE);
    const struct gf_value *l = gf_match_cap(m, CL);
    if (strcmp(gf_node_attr_string(sce, "reduction", "mean"), "none") != 0 ||
        gf_node_attr(sce, "ignore_index") || gf_node_attr_int(sce, "shift", 0) != 0)
        return gf_match_fail(m, V_SCE, "not an unshifted per-position loss without "
                             "ignore_index");
    if (!labels_and_weights(m, V_MUL, l, gf_match_cap(m, CT), gf_match_cap(m, CW)))
        return false;
    if (!gf_match_cap(m, CW) || norm_axis(gf_node_attr_int(gf_match_node(m, V_WG), "axis", 0),
                                          1) != 0)
        return gf_match_fail(m, V_WG, "not W gathered along its axis 0");
    for (int pn = V_RS; pn <= V_RSW; pn++)
        if (gf_match_node(m, pn) && !reduces_all(gf_match_node(m, pn)))
            return gf_match_fail(m, pn, "does not reduce every axis (keepdims 0)");
    return true;
}

static enum gf_status weighted_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *sce = gf_match_node(m, V_SCE);
    struct gf_value *lp = sce->n_outputs > 1 ? sce->outputs[1] : NULL;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, CL));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CT));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, CW));
    return st == GF_OK ? sce_emit(f, gf_match_node(m, V_DIV) ? "mean" : "none", NULL,
                                  read_outside(m, lp) ? lp : NULL)
                       : st;
}

/* ---- reductions of a fused per-position loss ---------------------------------------------
 *   L, T, W? ─SoftmaxCrossEntropy | LinearCrossEntropy (reduction none)─ReduceSum(all)── loss
 *   the same ─ReduceMean(all)── loss   (no class weights, no ignore_index: a plain mean)
 *   (also how NegativeLogLikelihoodLoss's body reaches sum and mean without W)
 */
enum { A0, A1, A2, A3 };
static const struct gf_pcap red_caps[] = {
    [A0] = GF_K_ANY("input 0"), [A1] = GF_K_ANY("input 1"), [A2] = GF_K_ANY("input 2"),
    [A3] = GF_K_ANY("input 3"),
};
enum { R_LOSS, R_ROOT };
#define RED_TABLE(name, OP, ROP, ...)                                                     \
    static const struct gf_pnode name[] = {                                              \
        [R_LOSS] = {GF_P("loss (none)", OP, __VA_ARGS__), .escape = 2},                   \
        [R_ROOT] = {GF_P("reduce", ROP, GF_N(R_LOSS), GF_ANY)},                           \
    }
RED_TABLE(sce_sum_nodes, GF_OP_SOFTMAX_CROSS_ENTROPY, GF_OP_REDUCE_SUM, GF_C(A0), GF_C(A1),
          GF_OPT(A2));
RED_TABLE(sce_mean_nodes, GF_OP_SOFTMAX_CROSS_ENTROPY, GF_OP_REDUCE_MEAN, GF_C(A0), GF_C(A1),
          GF_NONE);
RED_TABLE(lce_sum_nodes, GF_OP_LINEAR_CROSS_ENTROPY, GF_OP_REDUCE_SUM, GF_C(A0), GF_C(A1),
          GF_C(A2), GF_OPT(A3));
RED_TABLE(lce_mean_nodes, GF_OP_LINEAR_CROSS_ENTROPY, GF_OP_REDUCE_MEAN, GF_C(A0), GF_C(A1),
          GF_C(A2), GF_OPT(A3));

static bool red_check(struct gf_match *m)
{
    const struct gf_node *loss = gf_match_node(m, R_LOSS), *r = gf_match_node(m, R_ROOT);
    if (strcmp(gf_node_attr_string(loss, "reduction", "mean"), "none") != 0)
        return gf_match_fail(m, R_LOSS, "already reduced");
    if (!reduces_all(r))
        return gf_match_fail(m, R_ROOT, "does not reduce every axis to a scalar (keepdims 0)");
    if (r->op == GF_OP_REDUCE_MEAN && gf_node_attr(loss, "ignore_index"))
        return gf_match_fail(m, R_LOSS, "with ignore_index the loss's mean counts the kept "
                             "positions only, ReduceMean counts all");
    return true;
}

static enum gf_status red_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *loss = gf_match_node(m, R_LOSS);
    bool mean = gf_match_node(m, R_ROOT)->op == GF_OP_REDUCE_MEAN;
    struct gf_value *lp = loss->n_outputs > 1 ? loss->outputs[1] : NULL;
    enum gf_status st = GF_OK;
    f->op = loss->op;
    for (size_t i = 0; st == GF_OK && i < loss->n_inputs; i++)
        st = gf_fused_input(f, loss->inputs[i]);
    if (st == GF_OK)
        st = gf_fused_copy_attrs(f, loss);
    if (st == GF_OK)
        st = gf_fused_attr_string(f, "reduction", mean ? "mean" : "sum");
    if (st == GF_OK && read_outside(m, lp))
        st = gf_fused_output(f, lp);
    return st;
}

/* ---- the Hugging Face causal-LM label shift ------------------------------------------------
 *   L [B,S,C] ─Slice(axis 1, 0:-1)─Reshape([-1, C])─┐
 *   T [B,S] ───Slice(axis 1, 1:)───Reshape([-1])────SoftmaxCrossEntropy(W?) ── loss
 *   → SoftmaxCrossEntropy(L, T, W?, shift 1)
 */
enum { SL, ST, SW };
static const struct gf_pcap shift_caps[] = {
    [SL] = GF_K_ANY("logits [B,S,C]"), [ST] = GF_K_ANY("labels [B,S]"),
    [SW] = GF_K_ANY("class weights"),
};
enum { H_SL, H_RL, H_ST, H_RT, H_ROOT };
static const struct gf_pnode shift_nodes[] = {
    [H_SL] = {GF_P("L[:, :-1]", GF_OP_SLICE, GF_C(SL), GF_ANY, GF_ANY, GF_ANY, GF_ANY),
              .cast = 1},
    [H_RL] = {GF_P("view(-1, C)", GF_OP_RESHAPE, GF_N(H_SL), GF_ANY)},
    [H_ST] = {GF_P("T[:, 1:]", GF_OP_SLICE, GF_C(ST), GF_ANY, GF_ANY, GF_ANY, GF_ANY)},
    [H_RT] = {GF_P("view(-1)", GF_OP_RESHAPE, GF_N(H_ST), GF_ANY)},
    [H_ROOT] = {GF_P("cross-entropy", GF_OP_SOFTMAX_CROSS_ENTROPY, GF_N(H_RL), GF_N(H_RT),
                     GF_OPT(SW))},
};

/* Slice bounds: L[:, :-1] (or :S-1) and T[:, 1:] (end past S). */
static bool shift_slices(struct gf_match *m, const struct gf_value *l)
{
    struct slice1 a, b;
    int64_t s = dim_size(l, 1);
    if (!slice_one(gf_match_node(m, H_SL), 3, &a) || a.axis != 1 || a.start != 0 ||
        !(a.end == -1 || (s > 0 && a.end == s - 1)))
        return gf_match_fail(m, H_SL, "is not L[:, :-1] (constant bounds, step 1)");
    if (!slice_one(gf_match_node(m, H_ST), 2, &b) || b.axis != 1 || b.start != 1 ||
        !(b.end >= INT32_MAX || (s > 0 && b.end >= s)))
        return gf_match_fail(m, H_ST, "is not T[:, 1:] (constant bounds, step 1)");
    return true;
}

static bool shift_check(struct gf_match *m)
{
    const struct gf_node *root = gf_match_node(m, H_ROOT);
    const struct gf_value *l = gf_match_cap(m, SL), *t = gf_match_cap(m, ST);
    const struct gf_value *rl = gf_match_node(m, H_RL)->outputs[0];
    const struct gf_value *rt = gf_match_node(m, H_RT)->outputs[0];
    if (gf_node_attr_int(root, "shift", 0) != 0)
        return gf_match_fail(m, H_ROOT, "already shifted");
    if (!gf_pat_float(l) || gf_pat_rank(l) != 3 || !is_label_type(t) || gf_pat_rank(t) != 2)
        return gf_match_fail(m, H_ROOT, "not float logits [B, S, C] and int labels [B, S]");
    if (!dims_match(l, 0, t, 0) || !dims_match(l, 1, t, 1))
        return gf_match_fail(m, H_ROOT, "logits and labels differ in B or S (or they are "
                             "unknown)");
    if (!shift_slices(m, l))
        return false;
    if (gf_pat_rank(rl) != 2 || !dims_match(rl, 1, l, 2))
        return gf_match_fail(m, H_RL, "does not flatten to [B*(S-1), C]");
    if (gf_pat_rank(rt) != 1)
        return gf_match_fail(m, H_RT, "does not flatten the labels");
    return true;
}

static enum gf_status shift_rewrite(struct gf_match *m, struct gf_fused *f)
{
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, SL));
    f->op = GF_OP_SOFTMAX_CROSS_ENTROPY;
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, ST));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, SW));
    if (st == GF_OK)
        st = gf_fused_copy_attrs(f, gf_match_node(m, H_ROOT));
    return st == GF_OK ? gf_fused_attr_int(f, "shift", 1) : st;
}

/* The newer Hugging Face form (transformers' ForCausalLMLoss): the labels
 * are padded with the ignore index and shifted, the logits are not sliced.
 *   L [B,S,C] ─────────────────────────────────────────────Reshape([-1, C])─┐
 *   T [B,S] ─Pad(axis 1: 0 before, 1 after, ignore index)─Slice(axis 1, 1:)─Reshape([-1])─
 *                                                 SoftmaxCrossEntropy(ignore_index) ── loss
 *   → SoftmaxCrossEntropy(L, T, shift 1): position S-1 has label ignore_index in one and
 *   no label in the other; every other position has label T[:, s+1] in both.
 */
enum { P_RL, P_PAD, P_ST, P_RT, P_ROOT };
static const struct gf_pnode pad_shift_nodes[] = {
    [P_RL] = {GF_P("view(-1, C)", GF_OP_RESHAPE, GF_C(SL), GF_ANY)},
    [P_PAD] = {GF_P("pad(T, (0, 1), ii)", GF_OP_PAD, GF_C(ST), GF_ANY, GF_ANY)},
    [P_ST] = {GF_P("[:, 1:]", GF_OP_SLICE, GF_N(P_PAD), GF_ANY, GF_ANY, GF_ANY, GF_ANY)},
    [P_RT] = {GF_P("view(-1)", GF_OP_RESHAPE, GF_N(P_ST), GF_ANY), .cast = 1},
    [P_ROOT] = {GF_P("cross-entropy", GF_OP_SOFTMAX_CROSS_ENTROPY, GF_N(P_RL), GF_N(P_RT),
                     GF_OPT(SW)), .cast = 2},
};

/* Pad adds one ignore_index column after axis 1 of [B,S] and nothing else. */
static bool pad_is_shift(struct gf_match *m, int64_t ii)
{
    const struct gf_node *pad = gf_match_node(m, P_PAD);
    int64_t p[4], v[1];
    size_t c = 0, cv = 0;
    if (strcmp(gf_node_attr_string(pad, "mode", "constant"), "constant") != 0 ||
        !const_ints(pad, 1, "pads", p, 4, &c) || c != 4 || p[0] || p[1] || p[2] || p[3] != 1)
        return gf_match_fail(m, P_PAD, "pads are not (0, 0, 0, 1), constant mode");
    if (pad->n_inputs > 3 && pad->inputs[3])
        return gf_match_fail(m, P_PAD, "has axes");
    if (!(pad->n_inputs > 2 && pad->inputs[2] && const_ints(pad, 2, NULL, v, 1, &cv) &&
          cv == 1 && v[0] == ii))
        return gf_match_fail(m, P_PAD, "the pad value is not the ignore index %lld",
                             (long long)ii);
    return true;
}

static bool pad_shift_check(struct gf_match *m)
{
    const struct gf_node *root = gf_match_node(m, P_ROOT);
    const struct gf_value *l = gf_match_cap(m, SL), *t = gf_match_cap(m, ST);
    const struct gf_value *rl = gf_match_node(m, P_RL)->outputs[0];
    const struct gf_value *rt = gf_match_node(m, P_RT)->outputs[0];
    struct slice1 b;
    int64_t s = dim_size(l, 1);
    if (gf_node_attr_int(root, "shift", 0) != 0)
        return gf_match_fail(m, P_ROOT, "already shifted");
    if (!gf_node_attr(root, "ignore_index"))
        return gf_match_fail(m, P_ROOT, "no ignore_index: the padded label would count");
    if (!gf_pat_float(l) || gf_pat_rank(l) != 3 || !is_label_type(t) || gf_pat_rank(t) != 2)
        return gf_match_fail(m, P_ROOT, "not float logits [B, S, C] and int labels [B, S]");
    if (!dims_match(l, 0, t, 0) || !dims_match(l, 1, t, 1))
        return gf_match_fail(m, P_ROOT, "logits and labels differ in B or S (or they are "
                             "unknown)");
    if (!pad_is_shift(m, gf_node_attr_int(root, "ignore_index", 0)))
        return false;
    if (!slice_one(gf_match_node(m, P_ST), 2, &b) || b.axis != 1 || b.start != 1 ||
        !(b.end >= INT32_MAX || (s > 0 && b.end >= s + 1)))
        return gf_match_fail(m, P_ST, "is not T[:, 1:] (constant bounds, step 1)");
    if (gf_pat_rank(rl) != 2 || !dims_match(rl, 1, l, 2))
        return gf_match_fail(m, P_RL, "does not flatten to [B*S, C]");
    if (gf_pat_rank(rt) != 1)
        return gf_match_fail(m, P_RT, "does not flatten the labels");
    return true;
}

/* ---- LinearCrossEntropy: the lm head into the loss --------------------------------------------
 *   H ─MatMul(W | Transpose(Wᵀ)) | MatMul+Add(b) | Gemm | MatMulEpilogue ─ logits ─[Cast]─┐
 *   T ─────────────────────────────────────────────────────────────SoftmaxCrossEntropy ── loss
 *   (the logits read by nothing else and no graph output; no class weights)
 * The optional Cast is the precision pass's (docs/precision.md): bf16 logits
 * widened to fp32 for the loss, as autocast computes cross-entropy (fp16's stay
 * unfused: the fused node's gradients for a unit loss gradient would be rounded to
 * fp16 before a loss scale lifts them).  The fused node then takes H, W (and the
 * bias) in bf16, computes the logits in fp32 without
 * rounding them to it (one rounding fewer than the unfused graph), and its loss is
 * fp32. */
enum { KH, KW, KWT, KB, KT };
static const struct gf_pcap lce_caps[] = {
    [KH] = GF_K_ANY("hidden"), [KW] = GF_K_ANY("weight"), [KWT] = GF_K_ANY("weight [V,K]"),
    [KB] = GF_K_ANY("bias"), [KT] = GF_K_ANY("labels"),
};
enum { M_TR, M_MMT, M_MM, M_MMB, M_ADD, M_GEMM, M_EPI, M_L, M_LC, M_LS, M_ROOT };
static const struct gf_pnode lce_nodes[] = {
    [M_TR] = {GF_P("transpose(W)", GF_OP_TRANSPOSE, GF_C(KWT))},
    [M_MMT] = {GF_P("H@W^T", GF_OP_MATMUL, GF_C(KH), GF_N(M_TR))},
    [M_MM] = {GF_P("H@W", GF_OP_MATMUL, GF_C(KH), GF_C(KW))},
    [M_MMB] = {GF_P("H@W", GF_OP_MATMUL, GF_C(KH), GF_C(KW))},
    [M_ADD] = {GF_P("+bias", GF_OP_ADD, GF_N(M_MMB), GF_C(KB)), .flags = GF_PF_COMMUTE},
    [M_GEMM] = {GF_P("gemm", GF_OP_GEMM, GF_C(KH), GF_C(KW), GF_OPT(KB))},
    [M_EPI] = {GF_P("matmul epilogue", GF_OP_MATMUL_EPILOGUE, GF_C(KH), GF_C(KW), GF_OPT(KB),
                    GF_NONE)},
    [M_L] = {GF_P("logits", GF_PAT_ALT, GF_N(M_MMT), GF_N(M_MM), GF_N(M_ADD), GF_N(M_GEMM),
                  GF_N(M_EPI))},
    [M_LC] = {GF_P("logits to fp32", GF_OP_CAST, GF_N(M_L))},
    [M_LS] = {GF_P("logits, widened or not", GF_PAT_ALT, GF_N(M_LC), GF_N(M_L))},
    [M_ROOT] = {GF_P("cross-entropy", GF_OP_SOFTMAX_CROSS_ENTROPY, GF_N(M_LS), GF_C(KT), GF_NONE),
                .cast = 1},
};

/* transB of the projection (-1: not a plain projection, reason recorded). */
static int lce_trans(struct gf_match *m)
{
    const struct gf_node *g = gf_match_node(m, M_GEMM), *e = gf_match_node(m, M_EPI);
    const struct gf_node *tr = gf_match_node(m, M_TR);
    size_t c = 0;
    const int64_t *p = tr ? gf_node_attr_ints(tr, "perm", &c) : NULL;
    if (tr) {
        if (p && !(c == 2 && p[0] == 1 && p[1] == 0)) {
            gf_match_fail(m, M_TR, "perm is not [1, 0]");
            return -1;
        }
        return 1;
    }
    const struct gf_node *n = g ? g : e;
    if (!n)
        return 0;
    bool bias = gf_match_cap(m, KB) != NULL;
    if (gf_node_attr_int(n, "transA", 0) != 0 || gf_node_attr_float(n, "alpha", 1.0f) != 1.0f ||
        (bias && gf_node_attr_float(n, "beta", 1.0f) != 1.0f) ||
        (e && strcmp(gf_node_attr_string(e, "activation", ""), "") != 0)) {
        gf_match_fail(m, g ? M_GEMM : M_EPI, "transA, alpha, beta or an activation: not H @ W + b");
        return -1;
    }
    return gf_node_attr_int(n, "transB", 0) != 0;
}

static bool lce_check(struct gf_match *m)
{
    int64_t shift = gf_node_attr_int(gf_match_node(m, M_ROOT), "shift", 0);
    const struct gf_value *h = gf_match_cap(m, KH), *b = gf_match_cap(m, KB);
    const struct gf_value *w = gf_match_node(m, M_TR) ? gf_match_cap(m, KWT) : gf_match_cap(m, KW);
    const struct gf_value *lg = m->val[M_L];
    int trans = lce_trans(m), r = gf_pat_rank(lg);
    if (trans < 0)
        return false;
    if (!gf_pat_float(h) || !w || gf_pat_rank(w) != 2 || w->type.dtype != h->type.dtype)
        return gf_match_fail(m, M_L, "not float H @ W with a 2-D W of H's dtype");
    if (r != (shift ? 3 : 2))
        return gf_match_fail(m, M_ROOT, "logits of rank %d: the class axis is not the last "
                             "(shift %lld wants rank %d)", r, (long long)shift, shift ? 3 : 2);
    if (!dims_match(w, trans ? 0 : 1, lg, r - 1) || !dims_match(w, trans ? 1 : 0, h, r - 1))
        return gf_match_fail(m, M_L, "W is not [K, V] (transB %d)", trans);
    if (b && (gf_pat_rank(b) != 1 || b->type.dtype != h->type.dtype ||
              !dims_match(b, 0, lg, r - 1)))
        return gf_match_fail(m, M_L, "the bias '%s' is not [V]", b->name);
    const struct gf_node *c = gf_match_node(m, M_LC);
    enum gf_dtype ht = h->type.dtype;
    bool half = ht == GF_FLOAT16 || ht == GF_BFLOAT16;
    /* not fp16: the fused node's dH, dW for a unit loss gradient would be rounded
     * to fp16 before a loss scale lifts them (they underflow) */
    if (c && !(ht == GF_BFLOAT16 && lg->type.dtype == ht &&
               c->outputs[0]->type.dtype == GF_FLOAT))
        return gf_match_fail(m, M_LC, "not bf16 logits widened to fp32 (fp16 dH, dW would "
                             "be rounded before the loss scale)");
    if (half && gf_match_node(m, M_ROOT)->outputs[0]->type.dtype != GF_FLOAT)
        return gf_match_fail(m, M_ROOT, "a %s loss: LinearCrossEntropy's of %s H is fp32",
                             gf_dtype_name(ht), gf_dtype_name(ht));
    m->i[0] = trans;
    return true;
}

static enum gf_status lce_rewrite(struct gf_match *m, struct gf_fused *f)
{
    bool tr = gf_match_node(m, M_TR) != NULL;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, KH));
    f->op = GF_OP_LINEAR_CROSS_ENTROPY;
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, tr ? KWT : KW));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, KT));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, KB));
    if (st == GF_OK)
        st = gf_fused_copy_attrs(f, gf_match_node(m, M_ROOT));
    if (st == GF_OK && m->i[0])
        st = gf_fused_attr_int(f, "transB", 1);
    return st;
}

/* ---- JSD: the generalized Jensen-Shannon divergence (Liger Kernel's torch reference) --------
 *   Q = exp(x), P = exp(y), M = lerp(Q, P, beta) | beta·P + (1-beta)·Q
 *   row = beta·Σ P(y - log M) + (1-beta)·Σ Q(x - log M)    (beta 0: Σ P(y - x); 1: Σ Q(x - y))
 *   loss = Σ row / rows  |  Σ where(t != ii, row, 0) / count(t != ii)
 * torch's lerp is Where(beta < 0.5, Q + beta(P-Q), P - (P-Q)(1-beta)) with a constant
 * condition.  Matched after cleanup (the shared Exp nodes merged, no-op Casts gone).
 * The beta 1 row Σ Q(x - y) is the beta 0 row with x and y swapped, and fuses as that
 * (the same function: nothing in the graph says which operand is the student).
 */
enum { JX, JY, JT, JII, JZERO, JWA, JWB, JCOND, JMB, JMQ, JCB, JCQ, JN, JSRC };
static const struct gf_pcap jsd_caps[] = {
    [JX] = GF_K_ANY("x = log Q"), [JY] = GF_K_ANY("y = log P"), [JT] = GF_K_ANY("labels"),
    [JII] = GF_K_CONST("ignore_index"), [JZERO] = GF_K_SCALAR("0", 0.0, 0),
    [JWA] = GF_K_CONST("lerp weight"), [JWB] = GF_K_CONST("1 - lerp weight"),
    [JCOND] = GF_K_CONST("weight < 0.5"), [JMB] = GF_K_CONST("beta"),
    [JMQ] = GF_K_CONST("1 - beta"), [JCB] = GF_K_CONST("beta"), [JCQ] = GF_K_CONST("1 - beta"),
    [JN] = GF_K_CONST("rows"), [JSRC] = GF_K_ANY("x or y"),
};
enum { J_EQ, J_EP, J_D, J_A1, J_A, J_B1, J_B, J_W, J_MX1, J_MX2, J_MX, J_M, J_LM, J_SP, J_KP,
       J_RP, J_CP, J_SQ, J_KQ, J_RQ, J_CQ, J_MIX, J_E0, J_S0, J_K0, J_R0, J_ROW, J_TAIL };
#define JSD_ROW                                                                                  \
    [J_EQ] = {GF_P("Q", GF_OP_EXP, GF_C(JX))},                                                   \
    [J_EP] = {GF_P("P", GF_OP_EXP, GF_C(JY))},                                                   \
    [J_D] = {GF_P("P-Q", GF_OP_SUB, GF_N(J_EP), GF_N(J_EQ))},                                    \
    [J_A1] = {GF_P("w(P-Q)", GF_OP_MUL, GF_N(J_D), GF_C(JWA)), .flags = GF_PF_COMMUTE},          \
    [J_A] = {GF_P("Q+w(P-Q)", GF_OP_ADD, GF_N(J_EQ), GF_N(J_A1)), .flags = GF_PF_COMMUTE},       \
    [J_B1] = {GF_P("(P-Q)(1-w)", GF_OP_MUL, GF_N(J_D), GF_C(JWB)), .flags = GF_PF_COMMUTE},      \
    [J_B] = {GF_P("P-(P-Q)(1-w)", GF_OP_SUB, GF_N(J_EP), GF_N(J_B1))},                          \
    [J_W] = {GF_P("lerp", GF_OP_WHERE, GF_C(JCOND), GF_N(J_A), GF_N(J_B))},                      \
    [J_MX1] = {GF_P("beta*P", GF_OP_MUL, GF_N(J_EP), GF_C(JMB)), .flags = GF_PF_COMMUTE},        \
    [J_MX2] = {GF_P("(1-beta)*Q", GF_OP_MUL, GF_N(J_EQ), GF_C(JMQ)), .flags = GF_PF_COMMUTE},    \
    [J_MX] = {GF_P("mixture", GF_OP_ADD, GF_N(J_MX1), GF_N(J_MX2)), .flags = GF_PF_COMMUTE},     \
    [J_M] = {GF_P("M", GF_PAT_ALT, GF_N(J_W), GF_N(J_A), GF_N(J_B), GF_N(J_MX))},                 \
    [J_LM] = {GF_P("log M", GF_OP_LOG, GF_N(J_M))},                                              \
    [J_SP] = {GF_P("y-log M", GF_OP_SUB, GF_C(JY), GF_N(J_LM))},                                 \
    [J_KP] = {GF_P("P(y-log M)", GF_OP_MUL, GF_N(J_EP), GF_N(J_SP)), .flags = GF_PF_COMMUTE},    \
    [J_RP] = {GF_P("sum P(y-log M)", GF_OP_REDUCE_SUM, GF_N(J_KP), GF_ANY)},                     \
    [J_CP] = {GF_P("beta*...", GF_OP_MUL, GF_N(J_RP), GF_C(JCB)), .flags = GF_PF_COMMUTE},       \
    [J_SQ] = {GF_P("x-log M", GF_OP_SUB, GF_C(JX), GF_N(J_LM))},                                 \
    [J_KQ] = {GF_P("Q(x-log M)", GF_OP_MUL, GF_N(J_EQ), GF_N(J_SQ)), .flags = GF_PF_COMMUTE},    \
    [J_RQ] = {GF_P("sum Q(x-log M)", GF_OP_REDUCE_SUM, GF_N(J_KQ), GF_ANY)},                     \
    [J_CQ] = {GF_P("(1-beta)*...", GF_OP_MUL, GF_N(J_RQ), GF_C(JCQ)), .flags = GF_PF_COMMUTE},   \
    [J_MIX] = {GF_P("row", GF_OP_ADD, GF_N(J_CP), GF_N(J_CQ)), .flags = GF_PF_COMMUTE},          \
    [J_E0] = {GF_P("P", GF_OP_EXP, GF_C(JY))},                                                   \
    [J_S0] = {GF_P("y-x", GF_OP_SUB, GF_C(JY), GF_C(JX))},                                       \
    [J_K0] = {GF_P("P(y-x)", GF_OP_MUL, GF_N(J_E0), GF_N(J_S0)), .flags = GF_PF_COMMUTE},        \
    [J_R0] = {GF_P("KL row", GF_OP_REDUCE_SUM, GF_N(J_K0), GF_ANY)},                             \
    [J_ROW] = {GF_P("row loss", GF_PAT_ALT, GF_N(J_MIX), GF_N(J_R0))}

/*   no labels: Div(row, rows) summed; rows = Cast(Gather(Shape(x|y), 0)) (legacy),
 *   Cast(Squeeze(Shape(x|y, 0:1))) (dynamo) or a constant */
enum { NJ_SH = J_TAIL, NJ_G, NJ_SQZ, NJ_R, NJ_C, NJ_N, NJ_DIV, NJ_ROOT };
static const struct gf_pnode jsd_nodes[] = {
    JSD_ROW,
    [NJ_SH] = {GF_P("shape", GF_OP_SHAPE, GF_C(JSRC))},
    [NJ_G] = {GF_P("shape[0]", GF_OP_GATHER, GF_N(NJ_SH), GF_ANY)},
    [NJ_SQZ] = {GF_P("squeeze", GF_OP_SQUEEZE, GF_N(NJ_SH), GF_ANY)},
    [NJ_R] = {GF_P("rows", GF_PAT_ALT, GF_N(NJ_G), GF_N(NJ_SQZ))},
    [NJ_C] = {GF_P("to float", GF_OP_CAST, GF_N(NJ_R))},
    [NJ_N] = {GF_P("rows", GF_PAT_ALT, GF_N(NJ_C), GF_C(JN))},
    [NJ_DIV] = {GF_P("row/rows", GF_OP_DIV, GF_N(J_ROW), GF_N(NJ_N))},
    [NJ_ROOT] = {GF_P("sum", GF_OP_REDUCE_SUM, GF_N(NJ_DIV), GF_ANY)},
};

/*   labels: Div(Where(t != ii, row, 0), Cast(ReduceSum(Cast(t != ii, int64)))) summed */
enum { LJ_EQ = J_TAIL, LJ_NOT, LJ_WH, LJ_CI, LJ_CNT, LJ_CF, LJ_DIV, LJ_ROOT };
static const struct gf_pnode jsd_label_nodes[] = {
    JSD_ROW,
    [LJ_EQ] = {GF_P("t == ii", GF_OP_EQUAL, GF_C(JT), GF_C(JII)), .flags = GF_PF_COMMUTE},
    [LJ_NOT] = {GF_P("t != ii", GF_OP_NOT, GF_N(LJ_EQ))},
    [LJ_WH] = {GF_P("kept rows", GF_OP_WHERE, GF_N(LJ_NOT), GF_N(J_ROW), GF_C(JZERO))},
    [LJ_CI] = {GF_P("to int", GF_OP_CAST, GF_N(LJ_NOT))},
    [LJ_CNT] = {GF_P("count", GF_OP_REDUCE_SUM, GF_N(LJ_CI), GF_ANY)},
    [LJ_CF] = {GF_P("to float", GF_OP_CAST, GF_N(LJ_CNT))},
    [LJ_DIV] = {GF_P("/count", GF_OP_DIV, GF_N(LJ_WH), GF_N(LJ_CF))},
    [LJ_ROOT] = {GF_P("sum", GF_OP_REDUCE_SUM, GF_N(LJ_DIV), GF_ANY)},
};

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-6 * fmax(1.0, fabs(b));
}

/* The single floating-point element of constant capture k. */
static bool cap_float(const struct gf_match *m, int k, double *v)
{
    const struct gf_tensor *t = gf_match_const(m, k);
    return t && (t->dtype == GF_FLOAT || t->dtype == GF_DOUBLE || t->dtype == GF_FLOAT16 ||
                 t->dtype == GF_BFLOAT16) && gf_pat_scalar(t, v);
}

/* beta of the mixture M = beta·P + (1-beta)·Q as the exporter wrote it. */
static bool jsd_mix_beta(struct gf_match *m, double *beta)
{
    const struct gf_node *w = gf_match_node(m, J_W);
    double a, b;
    if (gf_match_node(m, J_MX)) {
        if (!cap_float(m, JMB, &a) || !cap_float(m, JMQ, &b) || !near(a + b, 1.0))
            return gf_match_fail(m, J_MX, "the weights of P and Q are not beta and 1 - beta");
        *beta = a;
        return true;
    }
    bool use_a = gf_match_node(m, J_A) != NULL;
    if (w) { /* torch's lerp: the constant condition picks the branch */
        const struct gf_tensor *c = gf_match_const(m, JCOND);
        if (!c || c->dtype != GF_BOOL || c->nelem != 1 || !c->data)
            return gf_match_fail(m, J_W, "the condition is not one constant bool");
        use_a = ((const uint8_t *)c->data)[0] != 0;
    }
    if (use_a ? !cap_float(m, JWA, &a) : !cap_float(m, JWB, &b))
        return gf_match_fail(m, J_M, "the lerp weight is not one float constant");
    *beta = use_a ? a : 1.0 - b;
    return true;
}

/* beta, from the row form; the row coefficients must be beta and 1 - beta. */
static bool jsd_beta(struct gf_match *m, double *beta)
{
    double cb, cq;
    if (gf_match_node(m, J_R0)) {
        *beta = 0.0;
        return true;
    }
    if (!jsd_mix_beta(m, beta))
        return false;
    if (!(*beta > 0.0 && *beta < 1.0))
        return gf_match_fail(m, J_M, "beta %g: the mixture form needs 0 < beta < 1", *beta);
    if (!cap_float(m, JCB, &cb) || !cap_float(m, JCQ, &cq) || !near(cb, *beta) ||
        !near(cq, 1.0 - *beta))
        return gf_match_fail(m, J_MIX, "the KL terms are not weighted beta = %g and 1 - beta",
                             *beta);
    return true;
}

/* Row sums over the last axis of a rank-2 tensor, keepdims 0. */
static bool jsd_row_sums(struct gf_match *m)
{
    static const int sums[] = {J_RP, J_RQ, J_R0};
    for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++) {
        const struct gf_node *n = gf_match_node(m, sums[i]);
        int64_t a[2];
        size_t c;
        if (n && (gf_node_attr_int(n, "keepdims", 1) != 0 ||
                  !const_ints(n, 1, "axes", a, 2, &c) || c != 1 || norm_axis(a[0], 2) != 1))
            return gf_match_fail(m, sums[i], "not a sum over the last axis (keepdims 0)");
    }
    return true;
}

/* The number of rows: x's or y's dim 0, read at run time or constant. */
static bool jsd_rows(struct gf_match *m, const struct gf_value *x)
{
    const struct gf_node *sh = gf_match_node(m, NJ_SH), *g = gf_match_node(m, NJ_G);
    const struct gf_node *sq = gf_match_node(m, NJ_SQZ);
    int64_t v[2];
    size_t c;
    double n;
    if (!sh)
        return (cap_float(m, JN, &n) && n == (double)dim_size(x, 0)) ||
               gf_match_fail(m, NJ_DIV, "divides by something else than the number of rows");
    const struct gf_value *src = gf_match_cap(m, JSRC);
    if (src != x && src != gf_match_cap(m, JY))
        return gf_match_fail(m, NJ_SH, "the shape of another tensor than x or y");
    if (gf_node_attr_int(sh, "start", 0) != 0 || (g && gf_node_attr(sh, "end")) ||
        (sq && gf_node_attr_int(sh, "end", 0) != 1))
        return gf_match_fail(m, NJ_SH, "not dim 0 of the shape");
    if (g && (gf_node_attr_int(g, "axis", 0) != 0 || !const_ints(g, 1, NULL, v, 1, &c) ||
              c != 1 || v[0] != 0))
        return gf_match_fail(m, NJ_G, "not element 0 of the shape");
    if (sq && sq->n_inputs > 1 && sq->inputs[1] &&
        (!const_ints(sq, 1, "axes", v, 1, &c) || c != 1 || v[0] != 0))
        return gf_match_fail(m, NJ_SQZ, "not of axis 0");
    if (gf_node_attr_int(gf_match_node(m, NJ_C), "to", 0) != (int64_t)x->type.dtype)
        return gf_match_fail(m, NJ_C, "not to the dtype of x");
    return true;
}

/* The mean over the rows whose label is not ignore_index. */
static bool jsd_kept(struct gf_match *m, const struct gf_value *x)
{
    const struct gf_value *t = gf_match_cap(m, JT);
    double ii;
    if (!is_label_type(t) || gf_pat_rank(t) != 1 || !dims_match(t, 0, x, 0))
        return gf_match_fail(m, LJ_EQ, "the labels are not int [rows]");
    if (!gf_pat_scalar(gf_match_const(m, JII), &ii) || ii != floor(ii))
        return gf_match_fail(m, LJ_EQ, "ignore_index is not one integer");
    int64_t to = gf_node_attr_int(gf_match_node(m, LJ_CI), "to", 0);
    if (to != GF_INT64 && to != GF_INT32)
        return gf_match_fail(m, LJ_CI, "does not count in integers");
    if (!reduces_all(gf_match_node(m, LJ_CNT)))
        return gf_match_fail(m, LJ_CNT, "does not count every row");
    if (gf_node_attr_int(gf_match_node(m, LJ_CF), "to", 0) != (int64_t)x->type.dtype)
        return gf_match_fail(m, LJ_CF, "not to the dtype of x");
    m->f[1] = ii;
    return true;
}

static bool jsd_check(struct gf_match *m)
{
    const struct gf_value *x = gf_match_cap(m, JX), *y = gf_match_cap(m, JY);
    int root = m->pat->n_nodes - 1;
    bool labels = m->pat->nodes == jsd_label_nodes;
    if (!gf_pat_float(x) || gf_pat_rank(x) != 2 || !gf_pat_same_type(x, y))
        return gf_match_fail(m, J_ROW, "x and y are not float [rows, V] of one shape");
    if (!jsd_row_sums(m) || !jsd_beta(m, &m->f[0]))
        return false;
    if (!reduces_all(gf_match_node(m, root)))
        return gf_match_fail(m, root, "does not sum every row");
    return labels ? jsd_kept(m, x) : jsd_rows(m, x);
}

static enum gf_status jsd_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_value *t = gf_match_cap(m, JT);
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, JX));
    f->op = GF_OP_JSD;
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, JY));
    if (st == GF_OK && t)
        st = gf_fused_input(f, gf_match_cap(m, JT));
    if (st == GF_OK)
        st = gf_fused_attr_float(f, "beta", (float)m->f[0]);
    if (st == GF_OK && t)
        st = gf_fused_attr_int(f, "ignore_index", (int64_t)m->f[1]);
    return st;
}

/* ---- the table ----------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_loss[] = {
    GF_PATTERN("cross_entropy", "SoftmaxCrossEntropyLoss op", sce_op_nodes, ce_caps,
               sce_op_check, sce_op_rewrite),
    GF_PATTERN("cross_entropy", "log-softmax + NegativeLogLikelihoodLoss op", nll_op_nodes,
               ce_caps, nll_op_check, nll_op_rewrite),
    GF_PATTERN("cross_entropy", "NLL body, none", nll_none_nodes, ce_caps, nll_body_check,
               nll_body_rewrite),
    GF_PATTERN("cross_entropy", "NLL body, ignore_index, none", nll_ii_none_nodes, ce_caps,
               nll_body_check, nll_body_rewrite),
    GF_PATTERN("cross_entropy", "NLL body, ignore_index, mean", nll_ii_mean_nodes, ce_caps,
               nll_body_check, nll_body_rewrite),
    GF_PATTERN("cross_entropy", "SoftmaxCrossEntropy none * W[T]", weighted_none_nodes,
               ce_caps, weighted_check, weighted_rewrite),
    GF_PATTERN("cross_entropy", "sum(SoftmaxCrossEntropy none * W[T]) / sum(W[T])",
               weighted_mean_nodes, ce_caps, weighted_check, weighted_rewrite),
    GF_PATTERN("cross_entropy", "ReduceSum(SoftmaxCrossEntropy none)", sce_sum_nodes, red_caps,
               red_check, red_rewrite),
    GF_PATTERN("cross_entropy", "ReduceMean(SoftmaxCrossEntropy none)", sce_mean_nodes,
               red_caps, red_check, red_rewrite),
    GF_PATTERN("cross_entropy", "ReduceSum(LinearCrossEntropy none)", lce_sum_nodes, red_caps,
               red_check, red_rewrite),
    GF_PATTERN("cross_entropy", "ReduceMean(LinearCrossEntropy none)", lce_mean_nodes,
               red_caps, red_check, red_rewrite),
    /* at a fused SoftmaxCrossEntropy: the shift before the lm head */
    GF_PATTERN("cross_entropy_shift", "Slice+Reshape of logits and labels", shift_nodes,
               shift_caps, shift_check, shift_rewrite),
    /* (shift_rewrite reads the root as node 4 of either table) */
    GF_PATTERN("cross_entropy_shift", "Pad+Slice of the labels (transformers >= 4.46)",
               pad_shift_nodes, shift_caps, pad_shift_check, shift_rewrite),
    GF_PATTERN("linear_cross_entropy", "projection + SoftmaxCrossEntropy", lce_nodes, lce_caps,
               lce_check, lce_rewrite),
    GF_PATTERN("jsd", "batchmean over rows", jsd_nodes, jsd_caps, jsd_check, jsd_rewrite),
    GF_PATTERN("jsd", "mean over labelled rows", jsd_label_nodes, jsd_caps, jsd_check,
               jsd_rewrite),
};
const size_t gf_patterns_loss_count = sizeof(gf_patterns_loss) / sizeof(gf_patterns_loss[0]);
