/*
 * Gradient rules, part 2: layout and indexing ops, Einsum, softmax,
 * LayerNormalization and the two classification losses.  The table that
 * lists them is in grad_rules.c.  g = d loss / d Y (output 0).
 */
#include <string.h>

#include "grad_rules.h"

#define MAXR 64 /* ranks handled (shape inference tracks up to 64) */

static struct gf_value *in(const struct gf_grad_args *a, size_t i)
{
    return i < a->n->n_inputs ? a->n->inputs[i] : NULL;
}

static struct gf_value *out(const struct gf_grad_args *a, size_t k)
{
    return k < a->n->n_outputs ? a->n->outputs[k] : NULL;
}

static bool need(const struct gf_grad_args *a, size_t i)
{
    return i < a->n->n_inputs && a->need[i];
}

#define OP1(op, x) gf_ad_op1(a->ad, op, x)
#define OP2(op, x, y) gf_ad_op2(a->ad, op, x, y)
#define ATTR_INT(v, name, i) gf_ad_attr_int(a->ad, v, name, i)
#define COPY(v, name) gf_ad_attr_copy(a->ad, v, name)

/* Rank of v, or an error when it is not known (or too large). */
static int known_rank(struct gf_grad_args *a, const struct gf_value *v)
{
    int r = gf_ad_rank(v);
    if (r < 0 || r > MAXR)
        gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "the rank of '%s' is not known", v->name);
    return r;
}

/* Attribute `axis` (default dflt) normalized for rank r; -1 on error. */
static int norm_axis(struct gf_grad_args *a, int64_t dflt, int r)
{
    int64_t axis = gf_node_attr_int(a->n, "axis", dflt);
    int64_t ax = axis < 0 ? axis + r : axis;
    if (ax < 0 || ax >= r) {
        gf_ad_fail(a->ad, GF_ERR_INVALID, "axis %lld out of range for rank %d",
                   (long long)axis, r);
        return -1;
    }
    return (int)ax;
}

/* ---- layout ----------------------------------------------------------------- */

/* dX = Transpose(g, inverse perm) */
enum gf_status gf_grad_transpose(struct gf_grad_args *a)
{
    int r = known_rank(a, in(a, 0));
    size_t n = 0;
    const int64_t *perm = gf_node_attr_ints(a->n, "perm", &n);
    int64_t inv[MAXR];
    if (r < 0)
        return gf_ad_status(a->ad);
    for (int i = 0; i < r; i++) {
        int64_t p = perm && (size_t)i < n ? perm[i] : r - 1 - i;
        if (p < 0 || p >= r)
            return gf_ad_fail(a->ad, GF_ERR_INVALID, "bad perm");
        inv[p] = i;
    }
    a->dx[0] = gf_ad_transpose(a->ad, a->dy[0], (size_t)r, inv);
    return gf_ad_status(a->ad);
}

/* Reshape Flatten Squeeze Unsqueeze: dX = Reshape(g, Shape(X)) */
enum gf_status gf_grad_reshape(struct gf_grad_args *a)
{
    a->dx[0] = gf_ad_reshape_like(a->ad, a->dy[0], out(a, 0), in(a, 0));
    return gf_ad_status(a->ad);
}

/* dX = SumToShape(g, Shape(X)) */
enum gf_status gf_grad_expand(struct gf_grad_args *a)
{
    a->dx[0] = gf_ad_sum_to(a->ad, a->dy[0], out(a, 0), in(a, 0));
    return gf_ad_status(a->ad);
}

/* The sizes of Concat's inputs along axis ax, as an int64 [n] value:
 * constant when static, else gathered from their shapes at run time. */
static struct gf_value *concat_sizes(struct gf_grad_args *a, int ax, int64_t *sizes,
                                     bool *known)
{
    size_t n = a->n->n_inputs;
    struct gf_value *piece[64];
    *known = true;
    for (size_t i = 0; i < n; i++) {
        const struct gf_value *x = in(a, i);
        sizes[i] = gf_ad_rank(x) > ax ? x->type.dims[ax].value : -1;
        *known = *known && sizes[i] >= 0;
    }
    if (*known)
        return gf_ad_ints(a->ad, n, sizes);
    if (gf_ad_opset(a->ad) < 13)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "run-time sizes need opset 13"), NULL;
    int64_t b = ax, e = ax + 1;
    for (size_t i = 0; i < n; i++)
        piece[i] = sizes[i] >= 0 ? gf_ad_ints(a->ad, 1, &sizes[i])
                                 : gf_ad_node(a->ad, "Slice", 3, (struct gf_value *[]){
                                       gf_ad_shape(a->ad, in(a, i)), gf_ad_ints(a->ad, 1, &b),
                                       gf_ad_ints(a->ad, 1, &e)}, 0, NULL);
    return ATTR_INT(gf_ad_node(a->ad, "Concat", n, piece, 0, NULL), "axis", 0);
}

/* Concat: dXi = the slice of g along axis that Xi filled (one Split) */
enum gf_status gf_grad_concat(struct gf_grad_args *a)
{
    size_t n = a->n->n_inputs;
    int r = known_rank(a, out(a, 0)), ax;
    int64_t sizes[64];
    struct gf_value *parts[64];
    bool known;
    if (r < 0 || (ax = norm_axis(a, 1, r)) < 0)
        return gf_ad_status(a->ad);
    if (n == 1) {
        a->dx[0] = a->dy[0];
        return gf_ad_status(a->ad);
    }
    if (n > 64)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "%zu inputs (at most 64)", n);
    struct gf_value *sz = concat_sizes(a, ax, sizes, &known);
    struct gf_value *s;
    if (gf_ad_opset(a->ad) >= 13) {
        s = gf_ad_node(a->ad, "Split", 2, (struct gf_value *[]){a->dy[0], sz}, n, parts);
    } else {
        s = gf_ad_node(a->ad, "Split", 1, &a->dy[0], n, parts);
        s = gf_ad_attr_ints(a->ad, s, "split", n, sizes);
    }
    if (!ATTR_INT(s, "axis", ax))
        return gf_ad_status(a->ad);
    for (size_t i = 0; i < n; i++)
        if (need(a, i))
            a->dx[i] = parts[i];
    return gf_ad_status(a->ad);
}

/* Split: dX = Concat(g0, g1, ...) with zeros for outputs without a gradient */
enum gf_status gf_grad_split(struct gf_grad_args *a)
{
    size_t n = a->n->n_outputs;
    struct gf_value *parts[64];
    if (n > 64)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "%zu outputs (at most 64)", n);
    for (size_t k = 0; k < n; k++)
        parts[k] = a->dy[k] ? a->dy[k] : gf_ad_zeros_like(a->ad, out(a, k));
    if (n == 1) {
        a->dx[0] = parts[0];
        return gf_ad_status(a->ad);
    }
    struct gf_value *c = gf_ad_node(a->ad, "Concat", n, parts, 0, NULL);
    a->dx[0] = ATTR_INT(c, "axis", gf_node_attr_int(a->n, "axis", 0));
    return gf_ad_status(a->ad);
}

/* Slice: SliceGrad(g, Shape(X), starts, ends, axes?, steps?) */
enum gf_status gf_grad_slice(struct gf_grad_args *a)
{
    struct gf_value *ins[6] = {a->dy[0], gf_ad_shape(a->ad, in(a, 0))};
    size_t n = 4;
    if (gf_ad_opset(a->ad) >= 10) {
        for (size_t i = 1; i < a->n->n_inputs; i++)
            ins[i + 1] = in(a, i);
        n = a->n->n_inputs + 1;
    } else { /* starts / ends / axes attributes */
        const char *names[3] = {"starts", "ends", "axes"};
        for (size_t i = 0; i < 3; i++) {
            size_t k;
            const int64_t *v = gf_node_attr_ints(a->n, names[i], &k);
            ins[i + 2] = v ? gf_ad_ints(a->ad, k, v) : NULL;
            n = v ? i + 3 : n;
        }
    }
    a->dx[0] = gf_ad_node(a->ad, "SliceGrad", n, ins, 0, NULL);
    return gf_ad_status(a->ad);
}

/* ---- indexing ------------------------------------------------------------------- */

/* Gather: GatherGrad(g, Shape(X), indices), a scatter-add into zeros */
enum gf_status gf_grad_gather(struct gf_grad_args *a)
{
    struct gf_value *ins[3] = {a->dy[0], gf_ad_shape(a->ad, in(a, 0)), in(a, 1)};
    a->dx[0] = COPY(gf_ad_node(a->ad, "GatherGrad", 3, ins, 0, NULL), "axis");
    return gf_ad_status(a->ad);
}

/* GatherElements: GatherElementsGrad(g, Shape(X), indices) */
enum gf_status gf_grad_gather_elements(struct gf_grad_args *a)
{
    struct gf_value *ins[3] = {a->dy[0], gf_ad_shape(a->ad, in(a, 0)), in(a, 1)};
    a->dx[0] = COPY(gf_ad_node(a->ad, "GatherElementsGrad", 3, ins, 0, NULL), "axis");
    return gf_ad_status(a->ad);
}

/* TopK: the values' gradient scattered back along axis through Indices */
enum gf_status gf_grad_top_k(struct gf_grad_args *a)
{
    if (!a->dy[0])
        return gf_ad_status(a->ad);
    struct gf_value *ins[3] = {a->dy[0], gf_ad_shape(a->ad, in(a, 0)), out(a, 1)};
    struct gf_value *d = gf_ad_node(a->ad, "GatherElementsGrad", 3, ins, 0, NULL);
    a->dx[0] = ATTR_INT(d, "axis", gf_node_attr_int(a->n, "axis", -1));
    return gf_ad_status(a->ad);
}

/* GatherND (batch_dims 0): dX = ScatterND(zeros, indices, g, reduction=add) */
enum gf_status gf_grad_gather_nd(struct gf_grad_args *a)
{
    if (gf_node_attr_int(a->n, "batch_dims", 0) != 0 || gf_ad_opset(a->ad) < 16)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "needs batch_dims 0 and opset 16 "
                          "(ScatterND with reduction)");
    struct gf_value *ins[3] = {gf_ad_zeros_like(a->ad, in(a, 0)), in(a, 1), a->dy[0]};
    struct gf_value *d = gf_ad_node(a->ad, "ScatterND", 3, ins, 0, NULL);
    a->dx[0] = gf_ad_attr_string(a->ad, d, "reduction", "add");
    return gf_ad_status(a->ad);
}

/* ScatterND / ScatterElements(data, indices, updates), reduction none or
 * add: d data = g with the scattered positions zeroed (none) or g (add);
 * d updates = g gathered at the indices. */
enum gf_status gf_grad_scatter(struct gf_grad_args *a)
{
    const char *red = gf_node_attr_string(a->n, "reduction", "none");
    bool nd = a->n->op == GF_OP_SCATTER_ND, add = strcmp(red, "add") == 0;
    if (!add && strcmp(red, "none") != 0)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "reduction '%s'", red);
    if (need(a, 0) && add) {
        a->dx[0] = a->dy[0];
    } else if (need(a, 0)) {
        struct gf_value *ins[3] = {a->dy[0], in(a, 1), gf_ad_zeros_like(a->ad, in(a, 2))};
        a->dx[0] = COPY(gf_ad_node(a->ad, nd ? "ScatterND" : "ScatterElements", 3, ins, 0,
                                   NULL), "axis");
    }
    if (need(a, 2))
        a->dx[2] = COPY(OP2(nd ? "GatherND" : "GatherElements", a->dy[0], in(a, 1)), "axis");
    return gf_ad_status(a->ad);
}

/* Element i of the 1-D int tensor v as a [1] tensor: a constant when v
 * is constant, else Slice(v, [i], [i+1]). */
static struct gf_value *elem_of(struct gf_grad_args *a, struct gf_value *v, int64_t i,
                                const int64_t *known, size_t n_known)
{
    int64_t e = i + 1;
    if ((size_t)i < n_known)
        return gf_ad_ints(a->ad, 1, &known[i]);
    return gf_ad_node(a->ad, "Slice", 3, (struct gf_value *[]){v, gf_ad_ints(a->ad, 1, &i),
                                                             gf_ad_ints(a->ad, 1, &e)}, 0, NULL);
}

/* Tile: g seen as [r0, d0, r1, d1, ...] summed over the repeat axes.  The
 * target shape is built from 1-D pieces, which shape inference follows. */
enum gf_status gf_grad_tile(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *piece[2 * MAXR];
    int r = known_rank(a, x);
    int64_t reps[MAXR], dims[MAXR], axes[MAXR];
    size_t n_reps = 0, n_dims = 0;
    if (r < 0)
        return gf_ad_status(a->ad);
    if (r == 0) {
        a->dx[0] = a->dy[0];
        return gf_ad_status(a->ad);
    }
    if (!gf_ad_const_ints(in(a, 1), reps, MAXR, &n_reps))
        n_reps = 0;
    while (n_dims < (size_t)r && x->type.dims[n_dims].value >= 0)
        dims[n_dims] = x->type.dims[n_dims].value, n_dims++;
    for (int i = 0; i < r; i++) {
        piece[2 * i] = elem_of(a, in(a, 1), i, reps, n_reps);
        piece[2 * i + 1] = elem_of(a, gf_ad_shape(a->ad, x), i, dims, n_dims);
        axes[i] = 2 * i;
    }
    struct gf_value *inter = ATTR_INT(gf_ad_node(a->ad, "Concat", 2 * (size_t)r, piece, 0, NULL),
                                      "axis", 0);
    struct gf_value *g2 = OP2("Reshape", a->dy[0], inter);
    if (gf_ad_opset(a->ad) >= 14) /* a 0 repeat or dim is a real 0 */
        g2 = ATTR_INT(g2, "allowzero", 1);
    a->dx[0] = gf_ad_reduce_sum(a->ad, g2, (size_t)r, axes, false);
    return gf_ad_status(a->ad);
}

/* Pad (constant mode): dX = Pad(g, -pads), which crops what was added */
enum gf_status gf_grad_pad(struct gf_grad_args *a)
{
    const char *mode = gf_node_attr_string(a->n, "mode", "constant");
    if (strcmp(mode, "constant") != 0)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "mode '%s' (only 'constant')", mode);
    if (gf_ad_opset(a->ad) >= 11) {
        struct gf_value *ins[4] = {a->dy[0], OP1("Neg", in(a, 1)), NULL, in(a, 3)};
        a->dx[0] = gf_ad_node(a->ad, "Pad", in(a, 3) ? 4 : 2, ins, 0, NULL);
        return gf_ad_status(a->ad);
    }
    size_t n;
    const int64_t *p = gf_node_attr_ints(a->n, gf_ad_opset(a->ad) < 2 ? "paddings" : "pads", &n);
    int64_t neg[2 * MAXR];
    if (!p || n > 2 * MAXR)
        return gf_ad_fail(a->ad, GF_ERR_INVALID, "bad pads");
    for (size_t i = 0; i < n; i++)
        neg[i] = -p[i];
    a->dx[0] = gf_ad_attr_ints(a->ad, OP1("Pad", a->dy[0]), "pads", n, neg);
    return gf_ad_status(a->ad);
}

/* Trilu: dX = Trilu(g) with the same k and upper */
enum gf_status gf_grad_trilu(struct gf_grad_args *a)
{
    struct gf_value *ins[2] = {a->dy[0], in(a, 1)};
    a->dx[0] = COPY(gf_ad_node(a->ad, "Trilu", in(a, 1) ? 2 : 1, ins, 0, NULL), "upper");
    return gf_ad_status(a->ad);
}

/* CumSum: dX = CumSum(g) in the other direction, same exclusive */
enum gf_status gf_grad_cumsum(struct gf_grad_args *a)
{
    struct gf_value *d = COPY(OP2("CumSum", a->dy[0], in(a, 1)), "exclusive");
    a->dx[0] = ATTR_INT(d, "reverse", !gf_node_attr_int(a->n, "reverse", 0));
    return gf_ad_status(a->ad);
}

/* ---- softmax, normalization, losses -------------------------------------------- */

/* Softmax: SoftmaxGrad(g, Y) = Y (g - sum(g Y)); LogSoftmax:
 * LogSoftmaxGrad(g, Y) = g - exp(Y) sum(g), along axis.  Before opset 13
 * the op works on the input coerced to 2-D at axis: the same is done here. */
enum gf_status gf_grad_softmax(struct gf_grad_args *a)
{
    const char *op = a->n->op == GF_OP_SOFTMAX ? "SoftmaxGrad" : "LogSoftmaxGrad";
    struct gf_value *g = a->dy[0], *y = out(a, 0);
    if (gf_ad_opset(a->ad) >= 13) {
        a->dx[0] = ATTR_INT(OP2(op, g, y), "axis", gf_node_attr_int(a->n, "axis", -1));
        return gf_ad_status(a->ad);
    }
    int r = known_rank(a, y), ax;
    if (r < 0 || (ax = norm_axis(a, 1, r)) < 0)
        return gf_ad_status(a->ad);
    if (ax == r - 1) {
        a->dx[0] = ATTR_INT(OP2(op, g, y), "axis", -1);
        return gf_ad_status(a->ad);
    }
    struct gf_value *g2 = ATTR_INT(OP1("Flatten", g), "axis", ax);
    struct gf_value *y2 = ATTR_INT(OP1("Flatten", y), "axis", ax);
    struct gf_value *d = ATTR_INT(OP2(op, g2, y2), "axis", 1);
    a->dx[0] = gf_ad_reshape_like(a->ad, d, NULL, in(a, 0));
    return gf_ad_status(a->ad);
}

/* True when w's shape is provably X.shape[ax:]. */
static bool is_block_shape(const struct gf_value *w, const struct gf_value *x, int ax)
{
    int rw = gf_ad_rank(w), rx = gf_ad_rank(x);
    if (rw < 0 || rx < 0 || rw != rx - ax)
        return false;
    for (int i = 0; i < rw; i++) {
        const struct gf_dim *p = &w->type.dims[i], *q = &x->type.dims[ax + i];
        if (p->value < 0 || p->value != q->value)
            return false;
    }
    return true;
}

/* LayerNormalizationGrad(g, X, Scale, Mean?, InvStdDev?) -> dX, dScale,
 * dBias (the statistics are recomputed when the forward did not output
 * them); dScale / dBias are X.shape[axis:] and summed down to Scale's / B's
 * shapes when those were broadcast. */
enum gf_status gf_grad_layer_norm(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *outs[3] = {NULL};
    int r = known_rank(a, x), ax;
    if (r < 0 || (ax = norm_axis(a, -1, r)) < 0)
        return gf_ad_status(a->ad);
    if ((a->n->n_outputs > 1 && a->dy[1]) || (a->n->n_outputs > 2 && a->dy[2]))
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "gradients of Mean / InvStdDev");
    /* the forward's Mean / InvStdDev when it wrote them in X's precision */
    struct gf_value *ins[5] = {a->dy[0], x, in(a, 1), out(a, 1), out(a, 2)};
    size_t n_in = out(a, 2) && out(a, 1) && gf_ad_dtype(out(a, 1)) == gf_ad_dtype(x) &&
                  gf_ad_dtype(out(a, 2)) == gf_ad_dtype(x) ? 5 : 3;
    struct gf_value *d = gf_ad_node(a->ad, "LayerNormalizationGrad", n_in, ins,
                                    in(a, 2) ? 3 : 2, outs);
    d = ATTR_INT(d, "axis", ax);
    d = gf_ad_attr_float(a->ad, d, "epsilon", gf_node_attr_float(a->n, "epsilon", 1e-5f));
    if (!d)
        return gf_ad_status(a->ad);
    a->dx[0] = need(a, 0) ? outs[0] : NULL;
    for (size_t i = 1; i <= 2; i++)
        if (need(a, i))
            a->dx[i] = is_block_shape(in(a, i), x, ax)
                           ? outs[i]
                           : OP2("SumToShape", outs[i], gf_ad_shape(a->ad, in(a, i)));
    return gf_ad_status(a->ad);
}

/* SoftmaxCrossEntropyLoss: SoftmaxCrossEntropyLossGrad(g, scores, labels,
 * weights?) with the same reduction and ignore_index; a gradient reaching
 * the log_prob output adds LogSoftmaxGrad(g1, log_prob) along axis 1. */
enum gf_status gf_grad_sce_loss(struct gf_grad_args *a)
{
    struct gf_value *d = NULL;
    if (a->dy[0]) {
        struct gf_value *ins[4] = {a->dy[0], in(a, 0), in(a, 1), in(a, 2)};
        d = gf_ad_node(a->ad, "SoftmaxCrossEntropyLossGrad", in(a, 2) ? 4 : 3, ins, 0, NULL);
        d = COPY(COPY(d, "reduction"), "ignore_index");
    }
    if (a->n->n_outputs > 1 && a->dy[1]) {
        struct gf_value *l = ATTR_INT(OP2("LogSoftmaxGrad", a->dy[1], out(a, 1)), "axis", 1);
        d = d ? OP2("Add", d, l) : l;
    }
    a->dx[0] = d;
    return gf_ad_status(a->ad);
}

/* NegativeLogLikelihoodLoss: NLLLossGrad(g, Shape(X), target, weight?) */
enum gf_status gf_grad_nll_loss(struct gf_grad_args *a)
{
    struct gf_value *ins[4] = {a->dy[0], gf_ad_shape(a->ad, in(a, 0)), in(a, 1), in(a, 2)};
    struct gf_value *d = gf_ad_node(a->ad, "NLLLossGrad", in(a, 2) ? 4 : 3, ins, 0, NULL);
    a->dx[0] = COPY(COPY(d, "reduction"), "ignore_index");
    return gf_ad_status(a->ad);
}

/* ---- Einsum --------------------------------------------------------------------- */

#define EIN_TERMS 16
#define EIN_LEN 64

/* An equation with "..." written as '.', output made explicit. */
struct ein {
    int n;
    char in[EIN_TERMS][EIN_LEN];
    char out[EIN_LEN];
};

/* One term: letters and at most one "..." (kept as '.'). */
static bool ein_term(const char *s, size_t len, char *t)
{
    size_t k = 0;
    bool ell = false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            continue;
        if (s[i] == '.' && i + 2 < len && s[i + 1] == '.' && s[i + 2] == '.' && !ell) {
            ell = true;
            t[k++] = '.';
            i += 2;
        } else if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) {
            t[k++] = s[i];
        } else {
            return false;
        }
        if (k >= EIN_LEN - 1)
            return false;
    }
    t[k] = 0;
    return true;
}

/* Implicit output: "..." first when any term has it, then the letters
 * used once, in alphabetical order (ONNX / numpy). */
static void ein_implicit(struct ein *e)
{
    int count[128] = {0};
    bool ell = false;
    size_t k = 0;
    for (int i = 0; i < e->n; i++)
        for (const char *c = e->in[i]; *c; c++)
            *c == '.' ? (void)(ell = true) : (void)count[(int)*c]++;
    if (ell)
        e->out[k++] = '.';
    for (int c = 'A'; c <= 'z'; c++)
        if (count[c] == 1)
            e->out[k++] = (char)c;
    e->out[k] = 0;
}

static bool ein_parse(const char *eq, struct ein *e)
{
    const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq);
    e->n = 0;
    for (const char *p = eq; p <= end && e->n < EIN_TERMS;) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        size_t len = (size_t)((c ? c : end) - p);
        if (!ein_term(p, len, e->in[e->n++]))
            return false;
        if (!c)
            break;
        p = c + 1;
    }
    if (arrow)
        return ein_term(arrow + 2, strlen(arrow + 2), e->out);
    ein_implicit(e);
    return true;
}

/* Appends term t to buf, '.' written back as "...". */
static void ein_put(char *buf, size_t len, const char *t)
{
    size_t k = strlen(buf);
    for (; *t && k + 4 < len; t++) {
        if (*t == '.')
            k += (size_t)snprintf(buf + k, len - k, "...");
        else
            buf[k++] = *t;
    }
    buf[k] = 0;
}

/* Operand i can be differentiated by one Einsum: no letter repeated in
 * it, each of its letters also in another term or the output, and its
 * "..." (if any) kept in the output. */
static bool ein_invertible(const struct ein *e, int i)
{
    for (const char *c = e->in[i]; *c; c++) {
        if (strchr(c + 1, *c))
            return false;
        bool found = strchr(e->out, *c) != NULL;
        for (int j = 0; j < e->n && !found; j++)
            found = j != i && strchr(e->in[j], *c);
        if (!found || (*c == '.' && !strchr(e->out, '.')))
            return false;
    }
    return true;
}

/* Einsum: for a multilinear equation (each letter at most once per
 * operand), dXi = Einsum("<other terms>,<output>-><term i>")(others..., g);
 * with "..." in the output, the result keeps those dims and is summed to
 * Xi's shape. */
enum gf_status gf_grad_einsum(struct gf_grad_args *a)
{
    struct ein e;
    const char *eq = gf_node_attr_string(a->n, "equation", "");
    if (!ein_parse(eq, &e) || e.n != (int)a->n->n_inputs)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "equation '%s' not understood", eq);
    for (int i = 0; i < e.n; i++) {
        struct gf_value *ins[EIN_TERMS];
        char geq[EIN_TERMS * (EIN_LEN + 4)] = "";
        size_t k = 0;
        if (!need(a, (size_t)i))
            continue;
        if (!ein_invertible(&e, i))
            return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "equation '%s': operand %d has a "
                              "repeated letter or one summed within it only", eq, i);
        for (int j = 0; j < e.n; j++) {
            if (j == i)
                continue;
            ein_put(geq, sizeof(geq), e.in[j]);
            ein_put(geq, sizeof(geq), ",");
            ins[k++] = in(a, (size_t)j);
        }
        ein_put(geq, sizeof(geq), e.out);
        /* the output's "..." dims stay in the result (an operand without
         * them was broadcast along them): summed away below */
        bool ell = strchr(e.out, '.') != NULL;
        ein_put(geq, sizeof(geq), ell && !strchr(e.in[i], '.') ? "->." : "->");
        ein_put(geq, sizeof(geq), e.in[i]);
        ins[k++] = a->dy[0];
        struct gf_value *d = gf_ad_node(a->ad, "Einsum", k, ins, 0, NULL);
        d = gf_ad_attr_string(a->ad, d, "equation", geq);
        a->dx[i] = ell ? OP2("SumToShape", d, gf_ad_shape(a->ad, in(a, i))) : d;
    }
    return gf_ad_status(a->ad);
}
