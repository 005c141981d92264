/* Normalization patterns: LayerNorm and RMSNorm in the forms the exporters
 * write, the weight / bias multiplies they absorb afterwards, and the
 * residual Add in front of them (AddLayerNorm, AddRMSNorm).  Pattern
 * format: pattern.h; fused ops: README "Fused ops". */
#include <math.h>
#include <string.h>

#include "pattern.h"

/* ---- shared checks ------------------------------------------------------------ */

static bool float_input(struct gf_match *m, int pn, const struct gf_value *x)
{
    if (gf_pat_float(x))
        return true;
    return gf_match_fail(m, pn, "'%s' is not a floating-point tensor (or its dtype is unknown)",
                         x ? x->name : "?");
}

/* The axis (-k) a ReduceMean normalizes over: the last k axes of x. */
static bool mean_axis(struct gf_match *m, int pn, int rank, int64_t *axis)
{
    const struct gf_node *mean = gf_match_node(m, pn);
    int64_t axes[16];
    size_t n;
    if (!gf_pat_reduce_axes(mean, rank, axes, 16, &n))
        return gf_match_fail(m, pn, "axes unknown, keepdims=0 or noop_with_empty_axes set "
                             "(the mean must keep the reduced axes, given as constants)");
    if (!gf_pat_trailing_axes(axes, n, rank, axis))
        return gf_match_fail(m, pn, "reduces %zu axis(es) starting at %lld, not the last "
                             "axes of a rank-%d input", n, (long long)axes[0], rank);
    return true;
}

/* Epsilon: one non-negative float that does not widen the shape. */
static bool epsilon(struct gf_match *m, int pn, int cap, int rank, double *eps)
{
    const struct gf_tensor *t = gf_match_const(m, cap);
    if (!t || !gf_pat_scalar(t, eps))
        return gf_match_fail(m, pn, "epsilon must be one constant element, it has %zu",
                             t ? t->nelem : 0);
    if (t->dtype != GF_FLOAT && t->dtype != GF_DOUBLE && t->dtype != GF_FLOAT16 &&
        t->dtype != GF_BFLOAT16)
        return gf_match_fail(m, pn, "epsilon is not floating-point");
    if (t->rank > (rank < 0 ? 1 : rank))
        return gf_match_fail(m, pn, "epsilon of rank %d would broadcast the result", t->rank);
    if (!(*eps >= 0) || !isfinite(*eps))
        return gf_match_fail(m, pn, "epsilon %g is negative or not finite", *eps);
    return true;
}

/* A weight or bias that scales the normalized axes only (rank <= k, each
 * dim 1 or the input's). */
static bool fits(struct gf_match *m, int pn, const struct gf_value *w, const struct gf_node *norm)
{
    int k = gf_pat_norm_axes(norm);
    if (gf_pat_fits_trailing(w, norm->outputs[0], k))
        return true;
    char shape[128] = "?";
    if (w)
        gf_type_format(&w->type, shape, sizeof(shape));
    return gf_match_fail(m, pn, "'%s' %s%s does not broadcast over the %d normalized axis(es) "
                         "alone (or differs in dtype)", w ? w->name : "?",
                         w ? gf_dtype_name(w->type.dtype) : "", shape, k);
}

static enum gf_status norm_attrs(struct gf_fused *f, int64_t axis, double eps)
{
    enum gf_status st = gf_fused_attr_int(f, "axis", axis);
    return st == GF_OK ? gf_fused_attr_float(f, "epsilon", (float)eps) : st;
}

/* ---- LayerNorm, decomposed ------------------------------------------------------------
 *   x ─ReduceMean─┐      ┌─Pow(2) | d·d─ReduceMean─Add(eps)─Sqrt─┐
 *   x ───────────Sub── d ┤                                        ├─Div | Mul(d, 1/·)── y
 *                        └────────────────────────────────────────┘
 */
enum { LX, LTWO, LEPS, LONE, LNHALF };
static const struct gf_pcap ln_caps[] = {
    [LX] = GF_K_ANY("x"), [LTWO] = GF_K_SCALAR("two", 2.0, 0),
    [LEPS] = GF_K_CONST("eps"), [LONE] = GF_K_SCALAR("one", 1.0, 0),
    [LNHALF] = GF_K_SCALAR("-0.5", -0.5, 0),
};
enum { L_MEAN, L_SUB, L_POW, L_DD, L_SQ, L_VAR, L_ADD, L_SQRT, L_ROOT_DIV };
enum { L_RDIV = L_SQRT + 1, L_RREC, L_RPOW, L_INV, L_ROOT_MUL };
#define LN_PREFIX                                                                          \
    [L_MEAN] = {GF_P("mean", GF_OP_REDUCE_MEAN, GF_C(LX), GF_ANY), .cast = 1},             \
    [L_SUB] = {GF_P("x-mean", GF_OP_SUB, GF_C(LX), GF_N(L_MEAN)), .cast = 1},              \
    [L_POW] = {GF_P("d^2", GF_OP_POW, GF_N(L_SUB), GF_C(LTWO))},                          \
    [L_DD] = {GF_P("d*d", GF_OP_MUL, GF_N(L_SUB), GF_N(L_SUB))},                          \
    [L_SQ] = {GF_P("square", GF_PAT_ALT, GF_N(L_POW), GF_N(L_DD))},                       \
    [L_VAR] = {GF_P("variance", GF_OP_REDUCE_MEAN, GF_N(L_SQ), GF_ANY)},                  \
    [L_ADD] = {GF_P("+eps", GF_OP_ADD, GF_N(L_VAR), GF_C(LEPS)), .flags = GF_PF_COMMUTE}, \
    [L_SQRT] = {GF_P("sqrt", GF_OP_SQRT, GF_N(L_ADD))}

static const struct gf_pnode ln_div[] = {
    LN_PREFIX,
    [L_ROOT_DIV] = {GF_P("d/std", GF_OP_DIV, GF_N(L_SUB), GF_N(L_SQRT))},
};
static const struct gf_pnode ln_mul[] = {
    LN_PREFIX,
    [L_RDIV] = {GF_P("1/std", GF_OP_DIV, GF_C(LONE), GF_N(L_SQRT))},
    [L_RREC] = {GF_P("reciprocal", GF_OP_RECIPROCAL, GF_N(L_SQRT))},
    [L_RPOW] = {GF_P("rsqrt", GF_OP_POW, GF_N(L_ADD), GF_C(LNHALF))},
    [L_INV] = {GF_P("1/std", GF_PAT_ALT, GF_N(L_RDIV), GF_N(L_RREC), GF_N(L_RPOW))},
    [L_ROOT_MUL] = {GF_P("d*inv", GF_OP_MUL, GF_N(L_SUB), GF_N(L_INV)), .flags = GF_PF_COMMUTE},
};

static bool ln_check(struct gf_match *m)
{
    int root = m->pat->n_nodes - 1;
    const struct gf_value *x = gf_match_cap(m, LX);
    int rank = gf_pat_rank(x);
    int64_t a1, a2;
    double eps;
    if (!float_input(m, root, x) || !mean_axis(m, L_MEAN, rank, &a1) ||
        !mean_axis(m, L_VAR, rank, &a2) || !epsilon(m, L_ADD, LEPS, rank, &eps))
        return false;
    if (a1 != a2)
        return gf_match_fail(m, L_VAR, "the variance reduces other axes than the mean");
    m->i[0] = a1;
    m->f[0] = eps;
    return true;
}

static enum gf_status ln_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_LAYER_NORM;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, LX));
    return st == GF_OK ? norm_attrs(f, m->i[0], m->f[0]) : st;
}

/* ---- LayerNorm, the ONNX function body (LayerNormalization _expanded) -------------------
 *   x ─Flatten─(Cast)─ XU ─ mean, E[XU²]−mean², +eps, Sqrt ─ (XU−mean)/std ─(Cast)─┐
 *   w ─Flatten(0)─ Mul ─ [b ─Flatten(0)─ Add] ──────────────────────────────────────┤
 *   x ─Shape──────────────────────────────────────────────────────────── Reshape ── y
 *   tails: mean ─Reshape(reduced)── Mean,  std ─Reciprocal─Reshape(reduced)── InvStdDev
 * After cleanup the Flatten of a constant weight and the Shape of a static
 * x are folded constants; the weight then goes to the fused op reshaped
 * to the normalized dims (a new initializer).  The Mean / InvStdDev tails
 * (when read) become the fused op's outputs 1 and 2; their shape, x's with
 * the normalized dims set to 1, must be a constant (static x). */
enum { EX, EW, EB, EEPS, EW2, EB2, ESHAPE, ERED };
static const struct gf_pcap lnx_caps[] = {
    [EX] = GF_K_ANY("x"), [EW] = GF_K_ANY("w"), [EB] = GF_K_ANY("b"),
    [EEPS] = GF_K_CONST("eps"), [EW2] = GF_K_CONST("w2d"), [EB2] = GF_K_CONST("b2d"),
    [ESHAPE] = GF_K_CONST("shape of x"), [ERED] = GF_K_CONST("reduced shape"),
};
enum { E_SHAPE, E_TARGET, E_FLAT, E_MEAN, E_SQ, E_MSQ, E_SQM, E_VAR, E_ADD, E_SQRT, E_DEV,
       E_DIV, E_FWN, E_FW, E_SCALE, E_FBN, E_FB, E_BIAS, E_BODY, E_MOUT, E_RECIP, E_IOUT,
       E_ROOT };
/* Mean and 1/std escape directly where cleanup removed a no-op Reshape of
 * them (2-D x): the check then wants them in the statistics' shape. */
#define LNX_CORE(XV)                                                                        \
    [E_MEAN] = {GF_P("mean", GF_OP_REDUCE_MEAN, XV, GF_ANY), .cast = 1, .escape = 1},        \
    [E_SQ] = {GF_P("square", GF_OP_MUL, XV, XV), .cast = 3},                                 \
    [E_MSQ] = {GF_P("mean of square", GF_OP_REDUCE_MEAN, GF_N(E_SQ), GF_ANY)},               \
    [E_SQM] = {GF_P("square of mean", GF_OP_MUL, GF_N(E_MEAN), GF_N(E_MEAN))},               \
    [E_VAR] = {GF_P("variance", GF_OP_SUB, GF_N(E_MSQ), GF_N(E_SQM))},                       \
    [E_ADD] = {GF_P("+eps", GF_OP_ADD, GF_N(E_VAR), GF_C(EEPS)), .flags = GF_PF_COMMUTE,     \
               .cast = 3},                                                                   \
    [E_SQRT] = {GF_P("stddev", GF_OP_SQRT, GF_N(E_ADD))},                                    \
    [E_DEV] = {GF_P("deviation", GF_OP_SUB, XV, GF_N(E_MEAN)), .cast = 1},                   \
    [E_DIV] = {GF_P("normalized", GF_OP_DIV, GF_N(E_DEV), GF_N(E_SQRT))},                    \
    [E_FWN] = {GF_P("w2d", GF_OP_FLATTEN, GF_C(EW))},                                        \
    [E_FW] = {GF_P("w2d", GF_PAT_ALT, GF_N(E_FWN), GF_C(EW2))},                              \
    [E_SCALE] = {GF_P("scaled", GF_OP_MUL, GF_N(E_DIV), GF_N(E_FW)), .flags = GF_PF_COMMUTE, \
                 .cast = 3},                                                                 \
    [E_FBN] = {GF_P("b2d", GF_OP_FLATTEN, GF_C(EB))},                                        \
    [E_FB] = {GF_P("b2d", GF_PAT_ALT, GF_N(E_FBN), GF_C(EB2))},                              \
    [E_MOUT] = {GF_P("Mean", GF_OP_RESHAPE, GF_N(E_MEAN), GF_C(ERED)), .flags = GF_PF_TAIL,  \
                .escape = 1},                                                                \
    [E_RECIP] = {GF_P("1/std", GF_OP_RECIPROCAL, GF_N(E_SQRT)), .flags = GF_PF_TAIL,         \
                 .escape = 1},                                                               \
    [E_IOUT] = {GF_P("InvStdDev", GF_OP_RESHAPE, GF_N(E_RECIP), GF_C(ERED)),                 \
                .flags = GF_PF_TAIL, .escape = 1}

static const struct gf_pnode lnx_nodes[] = {
    [E_SHAPE] = {GF_P("shape", GF_OP_SHAPE, GF_C(EX))},
    [E_TARGET] = {GF_P("shape", GF_PAT_ALT, GF_N(E_SHAPE), GF_C(ESHAPE))},
    [E_FLAT] = {GF_P("x2d", GF_OP_FLATTEN, GF_C(EX))},
    LNX_CORE(GF_N(E_FLAT)),
    [E_BIAS] = {GF_P("biased", GF_OP_ADD, GF_N(E_SCALE), GF_N(E_FB)), .flags = GF_PF_COMMUTE},
    [E_BODY] = {GF_P("affine", GF_PAT_ALT, GF_N(E_BIAS), GF_N(E_SCALE))},
    [E_ROOT] = {GF_P("reshape", GF_OP_RESHAPE, GF_N(E_BODY), GF_N(E_TARGET))},
};
/* A 2-D x [rows, n] normalized over axis 1: cleanup removed the Flatten of
 * x and the Reshape of y (both no-ops); the entries these forms do not
 * reach (shape, x2d, biased, affine) stay empty. */
static const struct gf_pnode lnx2_bias_nodes[] = {
    LNX_CORE(GF_C(EX)),
    [E_ROOT] = {GF_P("biased", GF_OP_ADD, GF_N(E_SCALE), GF_N(E_FB)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode lnx2_scale_nodes[] = {
    LNX_CORE(GF_C(EX)),
    [E_ROOT] = {GF_P("scaled", GF_OP_MUL, GF_N(E_DIV), GF_N(E_FW)), .flags = GF_PF_COMMUTE,
                .cast = 3},
};

static bool flatten_axis(struct gf_match *m, int pn, int64_t want)
{
    const struct gf_node *n = gf_match_node(m, pn);
    if (!n || gf_node_attr_int(n, "axis", 1) == want)
        return true;
    return gf_match_fail(m, pn, "flattens at axis %lld, expected %lld",
                         (long long)gf_node_attr_int(n, "axis", 1), (long long)want);
}

/* x's static dims from `axis` on: the shape a folded [1, n] weight takes
 * back (its element count must agree); false if not all known. */
static bool normalized_dims(const struct gf_value *x, int64_t axis, int *k, int64_t *dims)
{
    int r = gf_pat_rank(x);
    if (r < 0 || axis < -r || axis > r)
        return false;
    axis = axis < 0 ? axis + r : axis;
    *k = r - (int)axis;
    for (int i = 0; i < *k; i++)
        if ((dims[i] = x->type.dims[axis + i].value) < 0)
            return false;
    return true;
}

/* w of a Flatten(w, 0) node fits the normalized dims of x (the 2-D forms'
 * x is the 2-D view: its last dim). */
static bool flat_affine(struct gf_match *m, int pn, int cap, const struct gf_value *x,
                        int64_t axis)
{
    const struct gf_value *w = gf_match_cap(m, cap);
    int r = gf_pat_rank(x);
    int k = axis < 0 ? (int)-axis : r - (int)axis;
    if (!gf_match_node(m, pn) || (r >= 0 && gf_pat_fits_trailing(w, x, k)))
        return true;
    return gf_match_fail(m, pn, "'%s' does not fit the %d normalized dim(s) of '%s'",
                         w ? w->name : "?", k, x ? x->name : "?");
}

/* A folded Flatten(w, 0): one row, as many elements as the normalized dims. */
static bool folded_affine(struct gf_match *m, int pn, int cap, const struct gf_value *x,
                          int64_t axis)
{
    const struct gf_tensor *t = gf_match_const(m, cap);
    int64_t dims[16], n = 1;
    int k;
    if (!t)
        return true; /* the Flatten node form, or absent */
    if (!normalized_dims(x, axis, &k, dims) || k > 16)
        return gf_match_fail(m, pn, "a folded weight needs the static shape of x");
    for (int i = 0; i < k; i++)
        n *= dims[i];
    if (t->rank != 2 || t->dims[0] != 1 || t->dims[1] != n || t->dtype != x->type.dtype)
        return gf_match_fail(m, pn, "'%s' is not a [1, %lld] %s row", gf_match_cap(m, cap)->name,
                             (long long)n, gf_dtype_name(x->type.dtype));
    return true;
}

/* A folded Shape(x): x's static shape. */
static bool folded_shape(struct gf_match *m, const struct gf_value *x)
{
    const struct gf_tensor *t = gf_match_const(m, ESHAPE);
    int r = gf_pat_rank(x);
    if (!t)
        return true;
    bool ok = r >= 0 && t->rank == 1 && (size_t)r == t->nelem &&
              (t->dtype == GF_INT64 || t->dtype == GF_INT32);
    for (int i = 0; ok && i < r; i++)
        ok = x->type.dims[i].value >= 0 && gf_tensor_get_i64(t, (size_t)i) == x->type.dims[i].value;
    return ok || gf_match_fail(m, E_ROOT, "reshapes to something else than the shape of x");
}

/* The Mean / InvStdDev tails reshape to x's static shape with the dims
 * from `axis` on set to 1 (LayerNormalization's statistics shape). */
static bool reduced_shape(struct gf_match *m, const struct gf_value *x, int64_t axis)
{
    const struct gf_tensor *t = gf_match_const(m, ERED);
    int r = gf_pat_rank(x);
    if (!t)
        return true;
    axis = axis < 0 ? axis + r : axis;
    bool ok = r >= 0 && t->rank == 1 && (size_t)r == t->nelem &&
              (t->dtype == GF_INT64 || t->dtype == GF_INT32);
    for (int i = 0; ok && i < r; i++) {
        int64_t want = i < axis ? x->type.dims[i].value : 1;
        ok = want >= 0 && gf_tensor_get_i64(t, (size_t)i) == want;
    }
    return ok || gf_match_fail(m, E_MOUT, "the statistics are reshaped to something else "
                               "than x's shape with the normalized dims set to 1");
}

static bool lnx_has_bias(const struct gf_match *m)
{
    return gf_match_node(m, E_FBN) || gf_match_cap(m, EB2);
}

/* Mean (k 0) or 1/std (k 1) read outside the match as the fused node's
 * output: the Reshape tail's, or the value itself when it has the shape
 * of the statistics; NULL when not read. */
static bool lnx_stat(struct gf_match *m, int k, int64_t axis, struct gf_value **out)
{
    const struct gf_node *tail = gf_match_node(m, k ? E_IOUT : E_MOUT);
    struct gf_value *v = gf_match_node(m, k ? E_RECIP : E_MEAN)
                             ? gf_match_node(m, k ? E_RECIP : E_MEAN)->outputs[0] : NULL;
    *out = tail ? tail->outputs[0] : NULL;
    if (!v || !gf_match_read_outside(m, v))
        return true;
    if (tail)
        return gf_match_fail(m, k ? E_RECIP : E_MEAN, "'%s' is read outside the match and "
                             "reshaped to an output", v->name);
    *out = v;
    if (gf_pat_stats_shape(v, gf_match_cap(m, EX), axis))
        return true;
    return gf_match_fail(m, k ? E_RECIP : E_MEAN, "'%s' is read outside the match, not in the "
                         "shape of LayerNorm's statistics (x's, the normalized dims 1)", v->name);
}

static bool lnx_check(struct gf_match *m)
{
    const struct gf_value *x = gf_match_cap(m, EX);
    const struct gf_node *shape = gf_match_node(m, E_SHAPE), *flat = gf_match_node(m, E_FLAT);
    int vr = flat ? 2 : gf_pat_rank(x); /* rank of the view the means reduce */
    int64_t a1, a2, axis = flat ? gf_node_attr_int(flat, "axis", 1) : -1;
    struct gf_value *st[2];
    double eps;
    if (!float_input(m, E_ROOT, x) || !mean_axis(m, E_MEAN, vr, &a1) ||
        !mean_axis(m, E_MSQ, vr, &a2) || !epsilon(m, E_ADD, EEPS, vr, &eps) ||
        !flatten_axis(m, E_FWN, 0) || !flatten_axis(m, E_FBN, 0) ||
        !folded_affine(m, E_FW, EW2, x, axis) || !flat_affine(m, E_FWN, EW, x, axis) ||
        !flat_affine(m, E_FBN, EB, x, axis) ||
        (lnx_has_bias(m) && !folded_affine(m, E_FB, EB2, x, axis)) ||
        !folded_shape(m, x) || !reduced_shape(m, x, axis) || !lnx_stat(m, 0, axis, &st[0]) ||
        !lnx_stat(m, 1, axis, &st[1]))
        return false;
    if (a1 != -1 || a2 != -1)
        return gf_match_fail(m, E_MEAN, "the means must reduce the last axis (of the 2-D view)");
    if (shape && (gf_node_attr(shape, "start") || gf_node_attr(shape, "end")))
        return gf_match_fail(m, E_SHAPE, "takes part of the shape (start/end)");
    m->i[0] = axis;
    m->f[0] = eps;
    return true;
}

/* The 2-D forms' roots (Mul, Add) come before the wider forms' (Add,
 * Reshape) in the walk: a 2-D match gives way when a wider form matches at
 * a reader of its root, so that one node takes the whole body. */
static enum gf_status lnx_rewrite(struct gf_match *m, struct gf_fused *f);
static const struct gf_pattern lnx_wider[] = {
    GF_PATTERN("layernorm", "3-D", lnx_nodes, lnx_caps, lnx_check, lnx_rewrite),
    GF_PATTERN("layernorm", "2-D", lnx2_bias_nodes, lnx_caps, lnx_check, lnx_rewrite),
};

static bool lnx2_check(struct gf_match *m)
{
    const struct gf_value *y = gf_match_node(m, E_ROOT)->outputs[0];
    int wider = m->pat->nodes[E_ROOT].op == GF_OP_ADD ? 1 : 2; /* lnx_wider[0..wider) */
    struct gf_match w;
    if (!lnx_check(m))
        return false;
    for (size_t u = 0; u < y->n_uses; u++)
        for (int k = 0; y->uses[u].node && k < wider; k++)
            if (y->uses[u].node->op == lnx_wider[k].nodes[E_ROOT].op &&
                gf_pattern_match(&lnx_wider[k], y->uses[u].node, &w, NULL, 0))
                return gf_match_fail(m, E_ROOT, "a wider form matches at its reader");
    return true;
}

/* The weight (bias) operand: w itself, or the folded [1, n] row given the
 * normalized dims as a new initializer (the same data). */
static enum gf_status lnx_affine(struct gf_match *m, int cap, int cap2d, struct gf_value **out)
{
    const struct gf_value *x = gf_match_cap(m, EX);
    const struct gf_tensor *t = gf_match_const(m, cap2d);
    int64_t dims[16];
    int k;
    if (!t) {
        *out = gf_match_cap(m, cap);
        return GF_OK;
    }
    if (!normalized_dims(x, m->i[0], &k, dims))
        return gf_error(GF_ERR_INTERNAL, "layernorm: normalized dims changed after the check");
    struct gf_model *model = m->graph->model;
    struct gf_tensor *nt = gf_tensor_new(model, NULL, t->dtype, k, dims, t->data);
    char hint[200];
    snprintf(hint, sizeof(hint), "%.180s_nd", gf_match_cap(m, cap2d)->name);
    *out = nt ? gf_graph_add_initializer(m->graph, gf_graph_unique_name(m->graph, hint), nt)
              : NULL;
    return *out ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory reshaping a weight");
}

static enum gf_status lnx_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct gf_value *w, *b = NULL;
    f->op = GF_OP_LAYER_NORM;
    enum gf_status st = lnx_affine(m, EW, EW2, &w);
    if (st == GF_OK && lnx_has_bias(m))
        st = lnx_affine(m, EB, EB2, &b);
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, EX));
    if (st == GF_OK)
        st = gf_fused_input(f, w);
    if (st == GF_OK && b)
        st = gf_fused_input(f, b);
    for (int k = 0; st == GF_OK && k < 2; k++) { /* Mean, InvStdDev: read, or none */
        struct gf_value *v;
        if (!lnx_stat(m, k, m->i[0], &v))
            return gf_error(GF_ERR_INTERNAL, "layernorm: statistics changed after the check");
        st = gf_fused_output(f, v);
    }
    return st == GF_OK ? norm_attrs(f, m->i[0], m->f[0]) : st;
}

/* ---- LayerNorm from the ONNX LayerNormalization op ------------------------------------
 *   x ─┐
 *   w ─LayerNormalization(axis, epsilon, stash_type 1)── y, Mean?, InvStdDev?
 *   b ─┘                                (the fused op's outputs 1 and 2)
 */
enum { OX, OW, OB };
static const struct gf_pcap lnop_caps[] = {
    [OX] = GF_K_ANY("x"), [OW] = GF_K_ANY("scale"), [OB] = GF_K_ANY("bias"),
};
static const struct gf_pnode lnop_nodes[] = {
    {GF_P("layernorm", GF_OP_LAYER_NORMALIZATION, GF_C(OX), GF_C(OW), GF_OPT(OB)),
     .escape = 6},
};

static bool lnop_check(struct gf_match *m)
{
    const struct gf_node *n = gf_match_node(m, 0);
    const struct gf_value *x = gf_match_cap(m, OX);
    if (!float_input(m, 0, x))
        return false;
    if (x->type.dtype == GF_DOUBLE || gf_node_attr_int(n, "stash_type", 1) != 1)
        return gf_match_fail(m, 0, "stash_type %lld on %s input: not the fp32 computation of "
                             "the fused op", (long long)gf_node_attr_int(n, "stash_type", 1),
                             gf_dtype_name(x->type.dtype));
    if (!fits(m, 0, gf_match_cap(m, OW), n) ||
        (gf_match_cap(m, OB) && !fits(m, 0, gf_match_cap(m, OB), n)))
        return false;
    return true;
}

static enum gf_status lnop_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *n = gf_match_node(m, 0);
    f->op = GF_OP_LAYER_NORM;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, OX));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, OW));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, OB));
    for (size_t k = 1; st == GF_OK && k < n->n_outputs; k++) /* NULL: not read */
        st = gf_fused_output(f, gf_match_read_outside(m, n->outputs[k]) ? n->outputs[k] : NULL);
    return st == GF_OK ? norm_attrs(f, gf_node_attr_int(n, "axis", -1),
                                    gf_node_attr_float(n, "epsilon", 1e-5f))
                       : st;
}

/* ---- weight and bias of a fused LayerNorm / AddLayerNorm ------------------------------
 *   x ─LayerNorm─(Cast)─┐               x ─LayerNorm(·, w?)─(Cast)─┐
 *   w ──────────────────Mul── y         b ─────────────────────────Add── y
 *   (the same on AddLayerNorm, whose sum S stays an output)
 */
enum { AX, AR, AW, AB };
static const struct gf_pcap aff_caps[] = {
    [AX] = GF_K_ANY("x"), [AR] = GF_K_ANY("residual"), [AW] = GF_K_ANY("weight"),
    [AB] = GF_K_ANY("bias"),
};
enum { A_NORM, A_ROOT };
static const struct gf_pnode ln_w_nodes[] = {
    [A_NORM] = {GF_P("layernorm", GF_OP_LAYER_NORM, GF_C(AX), GF_NONE, GF_NONE),
                .escape = 6},
    [A_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(A_NORM), GF_C(AW)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode ln_b_nodes[] = {
    [A_NORM] = {GF_P("layernorm", GF_OP_LAYER_NORM, GF_C(AX), GF_OPT(AW), GF_NONE),
                .escape = 6},
    [A_ROOT] = {GF_P("+bias", GF_OP_ADD, GF_N(A_NORM), GF_C(AB)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode addln_w_nodes[] = {
    [A_NORM] = {GF_P("addlayernorm", GF_OP_ADD_LAYER_NORM, GF_C(AX), GF_C(AR), GF_NONE,
                     GF_NONE), .escape = 14},
    [A_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(A_NORM), GF_C(AW)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode addln_b_nodes[] = {
    [A_NORM] = {GF_P("addlayernorm", GF_OP_ADD_LAYER_NORM, GF_C(AX), GF_C(AR), GF_OPT(AW),
                     GF_NONE), .escape = 14},
    [A_ROOT] = {GF_P("+bias", GF_OP_ADD, GF_N(A_NORM), GF_C(AB)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};

static bool aff_check(struct gf_match *m)
{
    const struct gf_node *norm = gf_match_node(m, A_NORM);
    bool bias = m->pat->nodes[A_ROOT].op == GF_OP_ADD;
    return fits(m, A_ROOT, gf_match_cap(m, bias ? AB : AW), norm);
}

/* Appends LayerNorm's Mean and InvStdDev, outputs `first`.. of norm. */
static enum gf_status stats_outputs(struct gf_fused *f, const struct gf_node *norm, size_t first)
{
    enum gf_status st = GF_OK;
    for (size_t k = first; st == GF_OK && k < norm->n_outputs; k++)
        st = gf_fused_output(f, norm->outputs[k]);
    return st;
}

/* The norm's operands with the weight or bias added, its attributes, and
 * for the Add forms the sum S as second output; LayerNorm's statistics
 * stay where they were. */
static enum gf_status aff_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *norm = gf_match_node(m, A_NORM);
    bool bias = m->pat->nodes[A_ROOT].op == GF_OP_ADD;
    bool add = norm->op == GF_OP_ADD_LAYER_NORM;
    f->op = norm->op;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, AX));
    if (st == GF_OK && add)
        st = gf_fused_input(f, gf_match_cap(m, AR));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, AW));
    if (st == GF_OK && bias)
        st = gf_fused_input(f, gf_match_cap(m, AB));
    if (st == GF_OK && add)
        st = gf_fused_output(f, norm->outputs[1]);
    if (st == GF_OK)
        st = stats_outputs(f, norm, add ? 2 : 1);
    return st == GF_OK ? gf_fused_copy_attrs(f, norm) : st;
}

/* ---- residual Add into a fused norm ------------------------------------------------------
 *   a ─┐                      w? b? ─┐
 *   r ─Add── s ───────────── LayerNorm | RMSNorm ── y
 *             └── (s may be read elsewhere: the fused op's output S)
 */
enum { D_ADD, D_ROOT };
static const struct gf_pnode addln_nodes[] = {
    [D_ADD] = {GF_P("residual add", GF_OP_ADD, GF_C(AX), GF_C(AR)), .escape = 1},
    [D_ROOT] = {GF_P("layernorm", GF_OP_LAYER_NORM, GF_N(D_ADD), GF_OPT(AW), GF_OPT(AB)),
                .escape = 6},
};
static const struct gf_pnode addrms_nodes[] = {
    [D_ADD] = {GF_P("residual add", GF_OP_ADD, GF_C(AX), GF_C(AR)), .escape = 1},
    [D_ROOT] = {GF_P("rmsnorm", GF_OP_RMS_NORM, GF_N(D_ADD), GF_OPT(AW))},
};

static bool add_check(struct gf_match *m)
{
    const struct gf_value *a = gf_match_cap(m, AX), *r = gf_match_cap(m, AR);
    if (gf_pat_same_type(a, r))
        return true;
    char sa[128], sr[128];
    return gf_match_fail(m, D_ADD, "the operands differ in dtype or shape (%s%s vs %s%s): "
                         "the fused op adds tensors of one shape", gf_dtype_name(a->type.dtype),
                         gf_type_format(&a->type, sa, sizeof(sa)), gf_dtype_name(r->type.dtype),
                         gf_type_format(&r->type, sr, sizeof(sr)));
}

static enum gf_status add_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *norm = gf_match_node(m, D_ROOT);
    bool ln = norm->op == GF_OP_LAYER_NORM;
    f->op = ln ? GF_OP_ADD_LAYER_NORM : GF_OP_ADD_RMS_NORM;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, AX));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, AR));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, AW));
    if (st == GF_OK && ln)
        st = gf_fused_input(f, gf_match_cap(m, AB));
    if (st == GF_OK)
        st = gf_fused_output(f, gf_match_node(m, D_ADD)->outputs[0]);
    if (st == GF_OK && ln) /* LayerNorm's statistics move after S */
        st = stats_outputs(f, norm, 1);
    return st == GF_OK ? gf_fused_copy_attrs(f, norm) : st;
}

/* ---- RMSNorm -----------------------------------------------------------------------------
 *   x ─Pow(2) | x·x─ReduceMean─┬─Add(eps)─Sqrt─┬─Reciprocal | Div(1,·) | Pow(Add, -0.5)─┐
 *                              └─Sqrt─Add(eps)─┘ (eps_outside)  or: x ─Div(x, ·)────────┤
 *   x ─(Cast)────────────────────────────────────────────────────────────────────────Mul── y
 */
enum { RX, RTWO, REPS, RONE, RNHALF };
static const struct gf_pcap rms_caps[] = {
    [RX] = GF_K_ANY("x"), [RTWO] = GF_K_SCALAR("two", 2.0, 0), [REPS] = GF_K_CONST("eps"),
    [RONE] = GF_K_SCALAR("one", 1.0, 0), [RNHALF] = GF_K_SCALAR("-0.5", -0.5, 0),
};
enum { R_POW, R_XX, R_SQ, R_MEAN, R_ADDIN, R_SQRTIN, R_SQRTOUT, R_ADDOUT, R_DEN, R_ROOT_DIV };
enum { R_RDIV = R_DEN + 1, R_RREC, R_RPOW, R_INV, R_ROOT_MUL };
#define RMS_PREFIX                                                                              \
    [R_POW] = {GF_P("x^2", GF_OP_POW, GF_C(RX), GF_C(RTWO)), .cast = 1},                        \
    [R_XX] = {GF_P("x*x", GF_OP_MUL, GF_C(RX), GF_C(RX)), .cast = 3},                           \
    [R_SQ] = {GF_P("square", GF_PAT_ALT, GF_N(R_POW), GF_N(R_XX))},                             \
    [R_MEAN] = {GF_P("mean", GF_OP_REDUCE_MEAN, GF_N(R_SQ), GF_ANY)},                           \
    [R_ADDIN] = {GF_P("+eps", GF_OP_ADD, GF_N(R_MEAN), GF_C(REPS)), .flags = GF_PF_COMMUTE},    \
    [R_SQRTIN] = {GF_P("sqrt", GF_OP_SQRT, GF_N(R_ADDIN))},                                     \
    [R_SQRTOUT] = {GF_P("sqrt(mean)", GF_OP_SQRT, GF_N(R_MEAN))},                               \
    [R_ADDOUT] = {GF_P("sqrt+eps", GF_OP_ADD, GF_N(R_SQRTOUT), GF_C(REPS)),                     \
                  .flags = GF_PF_COMMUTE},                                                      \
    [R_DEN] = {GF_P("denominator", GF_PAT_ALT, GF_N(R_SQRTIN), GF_N(R_ADDOUT))}

static const struct gf_pnode rms_mul[] = {
    RMS_PREFIX,
    [R_RDIV] = {GF_P("1/den", GF_OP_DIV, GF_C(RONE), GF_N(R_DEN))},
    [R_RREC] = {GF_P("reciprocal", GF_OP_RECIPROCAL, GF_N(R_DEN))},
    [R_RPOW] = {GF_P("rsqrt", GF_OP_POW, GF_N(R_ADDIN), GF_C(RNHALF))},
    [R_INV] = {GF_P("1/den", GF_PAT_ALT, GF_N(R_RDIV), GF_N(R_RREC), GF_N(R_RPOW))},
    [R_ROOT_MUL] = {GF_P("x*inv", GF_OP_MUL, GF_C(RX), GF_N(R_INV)), .flags = GF_PF_COMMUTE,
                    .cast = 1},
};
static const struct gf_pnode rms_div[] = {
    RMS_PREFIX,
    [R_ROOT_DIV] = {GF_P("x/den", GF_OP_DIV, GF_C(RX), GF_N(R_DEN)), .cast = 1},
};

static bool rms_check(struct gf_match *m)
{
    int root = m->pat->n_nodes - 1;
    const struct gf_value *x = gf_match_cap(m, RX);
    int rank = gf_pat_rank(x);
    bool outside = gf_match_node(m, R_ADDOUT) != NULL;
    double eps;
    if (!float_input(m, root, x) || !mean_axis(m, R_MEAN, rank, &m->i[0]) ||
        !epsilon(m, outside ? R_ADDOUT : R_ADDIN, REPS, rank, &eps))
        return false;
    m->i[1] = outside;
    m->f[0] = eps;
    return true;
}

static enum gf_status rms_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_RMS_NORM;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, RX));
    if (st == GF_OK)
        st = norm_attrs(f, m->i[0], m->f[0]);
    if (st == GF_OK && m->i[1])
        st = gf_fused_attr_int(f, "eps_outside", 1);
    return st;
}

/* ---- weight of a fused RMSNorm / AddRMSNorm ------------------------------------------------
 *   x ─RMSNorm─(Cast)─────────┐
 *   w ───────────── [Add(1)] ─Mul── y      (Gemma's (1 + w): weight_offset 1)
 *   (the same on AddRMSNorm, whose sum S stays an output)
 */
enum { W_ONE = AB + 1 };
static const struct gf_pcap rmsw_caps[] = {
    [AX] = GF_K_ANY("x"), [AR] = GF_K_ANY("residual"), [AW] = GF_K_ANY("weight"),
    [AB] = GF_K_ANY("unused"), [W_ONE] = GF_K_SCALAR("one", 1.0, 0),
};
enum { W_NORM, W_ADD, W_ROOT };
static const struct gf_pnode rms_gemma_nodes[] = {
    [W_NORM] = {GF_P("rmsnorm", GF_OP_RMS_NORM, GF_C(AX), GF_NONE)},
    [W_ADD] = {GF_P("1+w", GF_OP_ADD, GF_C(AW), GF_C(W_ONE)), .flags = GF_PF_COMMUTE},
    [W_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(W_NORM), GF_N(W_ADD)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode addrms_gemma_nodes[] = {
    [W_NORM] = {GF_P("addrmsnorm", GF_OP_ADD_RMS_NORM, GF_C(AX), GF_C(AR), GF_NONE),
                .escape = 2},
    [W_ADD] = {GF_P("1+w", GF_OP_ADD, GF_C(AW), GF_C(W_ONE)), .flags = GF_PF_COMMUTE},
    [W_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(W_NORM), GF_N(W_ADD)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode rms_w_nodes[] = {
    [A_NORM] = {GF_P("rmsnorm", GF_OP_RMS_NORM, GF_C(AX), GF_NONE)},
    [A_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(A_NORM), GF_C(AW)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};
static const struct gf_pnode addrms_w_nodes[] = {
    [A_NORM] = {GF_P("addrmsnorm", GF_OP_ADD_RMS_NORM, GF_C(AX), GF_C(AR), GF_NONE),
                .escape = 2},
    [A_ROOT] = {GF_P("*weight", GF_OP_MUL, GF_N(A_NORM), GF_C(AW)), .flags = GF_PF_COMMUTE,
                .cast = 1},
};

static bool rmsw_check(struct gf_match *m)
{
    const struct gf_node *norm = gf_match_node(m, 0);
    int root = m->pat->n_nodes - 1;
    if (gf_node_attr_float(norm, "weight_offset", 0.0f) != 0.0f)
        return gf_match_fail(m, 0, "already has a weight offset");
    return fits(m, root, gf_match_cap(m, AW), norm);
}

static enum gf_status rmsw_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *norm = gf_match_node(m, 0);
    bool add = norm->op == GF_OP_ADD_RMS_NORM;
    f->op = norm->op;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, AX));
    if (st == GF_OK && add)
        st = gf_fused_input(f, gf_match_cap(m, AR));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, AW));
    if (st == GF_OK && add)
        st = gf_fused_output(f, norm->outputs[1]);
    if (st == GF_OK)
        st = gf_fused_copy_attrs(f, norm);
    if (st == GF_OK && m->pat->n_nodes == 3) /* the (1 + w) form */
        st = gf_fused_attr_float(f, "weight_offset", 1.0f);
    return st;
}

/* ---- the table ---------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_norm[] = {
    /* LayerNorm first: an RMSNorm of x - mean(x) is the tail of one */
    GF_PATTERN("layernorm", "(x-mean)/sqrt(var+eps)", ln_div, ln_caps, ln_check, ln_rewrite),
    GF_PATTERN("layernorm", "(x-mean)*rsqrt(var+eps)", ln_mul, ln_caps, ln_check, ln_rewrite),
    GF_PATTERN("layernorm", "LayerNormalization function body", lnx_nodes, lnx_caps,
               lnx_check, lnx_rewrite),
    GF_PATTERN("layernorm", "LayerNormalization function body, 2-D", lnx2_bias_nodes, lnx_caps,
               lnx2_check, lnx_rewrite),
    GF_PATTERN("layernorm", "LayerNormalization function body, 2-D, no bias", lnx2_scale_nodes,
               lnx_caps, lnx2_check, lnx_rewrite),
    GF_PATTERN("layernorm", "LayerNormalization op", lnop_nodes, lnop_caps, lnop_check,
               lnop_rewrite),
    GF_PATTERN("layernorm_affine", "LayerNorm*w", ln_w_nodes, aff_caps, aff_check, aff_rewrite),
    GF_PATTERN("layernorm_affine", "LayerNorm+b", ln_b_nodes, aff_caps, aff_check, aff_rewrite),
    GF_PATTERN("layernorm_affine", "AddLayerNorm*w", addln_w_nodes, aff_caps, aff_check,
               aff_rewrite),
    GF_PATTERN("layernorm_affine", "AddLayerNorm+b", addln_b_nodes, aff_caps, aff_check,
               aff_rewrite),
    GF_PATTERN("add_layernorm", "LayerNorm(a+r)", addln_nodes, aff_caps, add_check, add_rewrite),
    GF_PATTERN("rmsnorm", "x*inv(den)", rms_mul, rms_caps, rms_check, rms_rewrite),
    GF_PATTERN("rmsnorm", "x/den", rms_div, rms_caps, rms_check, rms_rewrite),
    GF_PATTERN("rmsnorm_weight", "RMSNorm*(1+w)", rms_gemma_nodes, rmsw_caps, rmsw_check,
               rmsw_rewrite),
    GF_PATTERN("rmsnorm_weight", "AddRMSNorm*(1+w)", addrms_gemma_nodes, rmsw_caps, rmsw_check,
               rmsw_rewrite),
    GF_PATTERN("rmsnorm_weight", "RMSNorm*w", rms_w_nodes, rmsw_caps, rmsw_check, rmsw_rewrite),
    GF_PATTERN("rmsnorm_weight", "AddRMSNorm*w", addrms_w_nodes, rmsw_caps, rmsw_check,
               rmsw_rewrite),
    GF_PATTERN("add_rmsnorm", "RMSNorm(a+r)", addrms_nodes, aff_caps, add_check, add_rewrite),
};
const size_t gf_patterns_norm_count = sizeof(gf_patterns_norm) / sizeof(gf_patterns_norm[0]);
