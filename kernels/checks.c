/* Checks every backend's kernels share (declared in checks.h): the error
 * helper, and the per-op attribute and shape checks of the fused ops. */
#include <stdarg.h>

#include "checks.h"
#include "optim_ops.h"

_Static_assert(GF_ADAMW_HYPER == GF_OPTIM_HYPER && GF_SGD_HYPER == GF_OPTIM_HYPER,
               "hyper's length is graph/opcheck.h's GF_OPTIM_HYPER");

static bool half_type(enum gf_dtype t)
{
    return t == GF_FLOAT16 || t == GF_BFLOAT16;
}

enum gf_status gf_kernel_error(const struct gf_kernel_args *a, enum gf_status st,
                               const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const struct gf_node *n = a->node;
    if (n && n->name && *n->name)
        return gf_error(st, "node '%s' (%s): %s", n->name, n->op_type, msg);
    return gf_error(st, "node #%d (%s): %s", n ? n->id : -1, n ? n->op_type : "?", msg);
}

/* ---- elementwise ---------------------------------------------------------- */

enum gf_status gf_ew_begin(const struct gf_kernel_args *a, size_t n_in, bool *empty)
{
    *empty = a->n_out >= 1 && a->out[0].nelem == 0;
    if (*empty)
        return GF_OK;
    if (a->n_out < 1 || !a->out[0].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "output 0 is missing");
    enum gf_status st = GF_OK;
    for (size_t k = 0; k < n_in && st == GF_OK; k++)
        st = gf_ew_check_in(a, k);
    return st;
}

enum gf_status gf_ew_check_in(const struct gf_kernel_args *a, size_t k)
{
    if (k >= a->n_in || (!a->in[k].data && a->in[k].nelem))
        return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is missing", k);
    return GF_OK;
}

enum gf_status gf_ew_check_operand(const struct gf_kernel_args *a, size_t k, enum gf_dtype dt)
{
    char what[32];
    snprintf(what, sizeof(what), "input %zu", k);
    enum gf_status st = gf_ew_check_in(a, k);
    return st != GF_OK ? st : gf_ew_check_dtype(a, what, a->in[k].dtype, dt);
}

enum gf_status gf_ew_bcast(const struct gf_kernel_args *a, int k, const struct gf_tview *t,
                           const struct gf_tview *out, int64_t *st)
{
    bool ok = t->rank <= out->rank; /* (fu_bcasts_to takes extra leading 1s) */
    for (int d = 0; ok && d < t->rank; d++) {
        int64_t od = out->dims[out->rank - t->rank + d];
        ok = t->dims[d] == od || t->dims[d] == 1;
    }
    if (!ok)
        return gf_kernel_error(a, GF_ERR_INVALID, "input %d of shape %s does not broadcast to "
                               "the output shape %s", k, FU_SHAPE(t), FU_SHAPE(out));
    gf_bcast_strides(t, out, st);
    return GF_OK;
}

enum gf_status gf_ew_check_dtype(const struct gf_kernel_args *a, const char *what,
                                 enum gf_dtype got, enum gf_dtype want)
{
    if (got == want)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "%s has type %s, expected %s", what,
                           gf_dtype_name(got), gf_dtype_name(want));
}

enum gf_status gf_ew_check_count(const struct gf_kernel_args *a, const struct gf_tview *x,
                                 const struct gf_tview *y)
{
    if (x->nelem == y->nelem)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "input 0 has %zu elements, output 0 has %zu",
                           x->nelem, y->nelem);
}

enum gf_status gf_where_check(const struct gf_kernel_args *a)
{
    enum gf_dtype dt = a->in[1].dtype;
    enum gf_status st = gf_ew_check_dtype(a, "input 0 (condition)", a->in[0].dtype, GF_BOOL);
    if (st == GF_OK)
        st = gf_ew_check_dtype(a, "input 2", a->in[2].dtype, dt);
    if (st == GF_OK)
        st = gf_ew_check_dtype(a, "output 0", a->out[0].dtype, dt);
    return st;
}

enum gf_status gf_clip_bound_check(const struct gf_kernel_args *a, size_t k, const char *name)
{
    if (k >= a->n_in || !a->in[k].data)
        return GF_OK;
    char what[32];
    snprintf(what, sizeof(what), "input %zu (%s)", k, name);
    enum gf_status st = gf_ew_check_dtype(a, what, a->in[k].dtype, a->in[0].dtype);
    if (st == GF_OK && a->in[k].nelem != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s must be a scalar, not of shape %s", what,
                               FU_SHAPE(&a->in[k]));
    return st;
}

enum gf_status gf_cast_check(const struct gf_kernel_args *a)
{
    const struct gf_attr *to = gf_node_attr(a->node, "to");
    if (a->node->op == GF_OP_CAST && to && to->type == GF_ATTR_INT)
        return gf_ew_check_dtype(a, "output 0", a->out[0].dtype, (enum gf_dtype)to->i);
    return GF_OK;
}

/* ---- axes, reductions ---------------------------------------------------- */

enum gf_status gf_axis_attr(const struct gf_kernel_args *a, int64_t dflt, int rank, int *ax)
{
    return gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", dflt), rank, ax);
}

/* Empty axes reduce everything, or nothing with noop_with_empty_axes.  Axes
 * come from input 1 (ReduceSum-13, the others from 18) or else from the
 * attribute (older opsets). */
enum gf_status gf_reduce_axes(const struct gf_kernel_args *a, bool *red)
{
    int rank = a->in[0].rank;
    const struct gf_tview *ax = gf_has_input(a, 1) && a->in[1].nelem ? &a->in[1] : NULL;
    const void *p = ax ? gf_host_bytes(a, ax) : NULL;
    size_t n = 0;
    const int64_t *attr = NULL;
    if (ax && !gf_is_index_type(ax->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "axes (input 1) must be int32 or int64, not %s",
                               gf_dtype_name(ax->dtype));
    if (ax && !p)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "axes (input 1) are not on the host");
    if (ax)
        n = ax->nelem;
    else
        attr = gf_node_attr_ints(a->node, "axes", &n);
    bool all = n == 0 && gf_node_attr_int(a->node, "noop_with_empty_axes", 0) == 0;
    for (int i = 0; i < rank; i++)
        red[i] = all;
    for (size_t k = 0; k < n; k++) {
        int64_t v = ax ? gf_int_at(ax, p, k) : attr[k];
        int i;
        if (!fu_axis(v, rank, &i))
            return gf_kernel_error(a, GF_ERR_INVALID,
                                   "axes[%zu] = %lld is out of range [%d, %d] for rank %d", k,
                                   (long long)v, -rank, rank - 1, rank);
        if (red[i])
            return gf_kernel_error(a, GF_ERR_INVALID, "axes[%zu] = %lld repeats axis %d", k,
                                   (long long)v, i);
        red[i] = true;
    }
    return GF_OK;
}

enum gf_status gf_check_out_count(const struct gf_kernel_args *a, size_t i, enum gf_dtype dt,
                                  size_t nelem)
{
    if (i >= a->n_out || (!a->out[i].data && nelem))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is missing", i);
    const struct gf_tview *o = &a->out[i];
    if (o->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is %s, expected %s", i,
                               gf_dtype_name(o->dtype), gf_dtype_name(dt));
    if (o->nelem != nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has %zu elements, expected %zu", i,
                               o->nelem, nelem);
    return GF_OK;
}

/* ---- cross-entropy ------------------------------------------------------- */

enum gf_status fu_check_label_shape(const struct gf_kernel_args *a, size_t i, int rank,
                                        const int64_t *dims)
{
    enum gf_status st = fu_check_in(a, i, "label T", GF_UNDEFINED);
    const struct gf_tview *t = &a->in[i];
    if (st == GF_OK && t->dtype != GF_INT32 && t->dtype != GF_INT64)
        return gf_kernel_error(a, GF_ERR_INVALID, "label T (input %zu) is %s, expected int32 or "
                               "int64", i, gf_dtype_name(t->dtype));
    if (st == GF_OK && !fu_same_shape(t, rank, dims))
        return gf_kernel_error(a, GF_ERR_INVALID, "label T (input %zu) has shape %s, expected %s",
                               i, FU_SHAPE(t), FU_DIMS(rank, dims));
    return st;
}

enum gf_status gf_check_labels_in(const struct gf_kernel_args *a, size_t i)
{
    enum gf_status st = fu_check_given(a, i, "label T", GF_UNDEFINED);
    const struct gf_tview *t = &a->in[i];
    if (st == GF_OK && t->dtype != GF_INT32 && t->dtype != GF_INT64)
        return gf_kernel_error(a, GF_ERR_INVALID, "label T (input %zu) is %s, expected int32 or "
                               "int64", i, gf_dtype_name(t->dtype));
    return st;
}

/* ---- the fused ops: inputs and outputs here, the rules in graph/opcheck.c --- */

void gf_shape_of_view(const struct gf_tview *t, struct gf_shape *s)
{
    gf_shape_set(s, t->rank, t->dims);
}

int gf_shape_dims(const struct gf_shape *s, int64_t *dims)
{
    for (int i = 0; i < s->rank && i < GF_MAX_RANK; i++)
        dims[i] = s->d[i].value;
    return s->rank;
}

/* The shape of input i, or NULL where it is omitted. */
static const struct gf_shape *in_shape(const struct gf_kernel_args *a, size_t i,
                                       struct gf_shape *s)
{
    if (!fu_has(a, i))
        return NULL;
    gf_shape_of_view(&a->in[i], s);
    return s;
}

/* Every given input holds data (run time: the plan checks did without). */
static enum gf_status inputs_have_data(const struct gf_kernel_args *a)
{
    for (size_t i = 0; i < a->n_in; i++)
        if (fu_has(a, i) && a->in[i].nelem && !a->in[i].data)
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu has no data", i);
    return GF_OK;
}

enum gf_status gf_loss_check_run(const struct gf_kernel_args *a, enum gf_reduction red,
                                 const struct gf_shape *pos)
{
    enum gf_status st = inputs_have_data(a);
    if (st != GF_OK)
        return st;
    int64_t dims[GF_MAX_RANK];
    int rank = red == GF_RED_NONE ? gf_shape_dims(pos, dims) : 0;
    /* LinearCrossEntropy of fp16 / bf16 H: an fp32 loss (graph/shape.c) */
    enum gf_dtype t = a->in[0].dtype;
    if (a->node && a->node->op == GF_OP_LINEAR_CROSS_ENTROPY &&
        half_type(t))
        t = GF_FLOAT;
    return fu_check_out(a, 0, t, rank, dims);
}

size_t gf_shape_numel(const struct gf_shape *s)
{
    size_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= (size_t)s->d[i].value;
    return n;
}

enum gf_status gf_sce_check(const struct gf_kernel_args *a, struct gf_sce_rule *r)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_shape l, t, w;
    enum gf_status st = fu_check_given(a, 0, "logits L", GF_UNDEFINED);
    if (st == GF_OK)
        st = gf_check_labels_in(a, 1);
    if (st == GF_OK && fu_has(a, 2))
        st = fu_check_given(a, 2, "Wc", x->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(x, &l);
    gf_shape_of_view(&a->in[1], &t);
    return gf_rule_sce(a->node, &l, &t, in_shape(a, 2, &w), r);
}

enum gf_status gf_sce_check_run(const struct gf_kernel_args *a, const struct gf_sce_rule *r)
{
    const struct gf_tview *x = &a->in[0];
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_loss_check_run(a, r->ce.red, &r->pos);
    if (st == GF_OK && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, gf_shape_dims(&r->logp, dims), dims);
    if (st == GF_OK && fu_has_out(a, 2))
        st = fu_check_out(a, 2, x->dtype, x->rank, x->dims);
    return st;
}

enum gf_status gf_lce_check(const struct gf_kernel_args *a, struct gf_lce_rule *r)
{
    const struct gf_tview *h = &a->in[0];
    struct gf_shape hs, ws, ts, bs;
    enum gf_status st = fu_check_given(a, 0, "H", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_given(a, 1, "W", h->dtype);
    if (st == GF_OK)
        st = gf_check_labels_in(a, 2);
    if (st == GF_OK && fu_has(a, 3))
        st = fu_check_given(a, 3, "Bias", h->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(h, &hs);
    gf_shape_of_view(&a->in[1], &ws);
    gf_shape_of_view(&a->in[2], &ts);
    return gf_rule_lce(a->node, &hs, &ws, &ts, in_shape(a, 3, &bs), r);
}

enum gf_status gf_lce_train_check(const struct gf_kernel_args *a, const struct gf_lce_rule *r)
{
    if (r->ce.red == GF_RED_NONE)
        return gf_kernel_error(a, GF_ERR_INVALID, "the gradient outputs need reduction mean or "
                               "sum");
    enum gf_dtype t = a->in[0].dtype;
    if (t != GF_FLOAT && t != GF_DOUBLE && t != GF_FLOAT16 && t != GF_BFLOAT16)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "the gradient outputs of %s H are not "
                               "supported (float, double, float16 and bfloat16 only)",
                               gf_dtype_name(t));
    if (fu_has_out(a, 3) && !fu_has(a, 3))
        return gf_kernel_error(a, GF_ERR_INVALID, "dBias (output 3) needs Bias");
    for (size_t k = 1; k < 4; k++) { /* dH, dW, dBias like H, W, Bias */
        const struct gf_tview *like = &a->in[k == 1 ? 0 : k == 2 ? 1 : 3];
        enum gf_status st = GF_OK;
        if (fu_has_out(a, k) && (st = fu_check_out(a, k, like->dtype, like->rank, like->dims)))
            return st;
    }
    return GF_OK;
}

enum gf_status gf_ce_grad_check(const struct gf_kernel_args *a, struct gf_ceg_rule *r)
{
    const struct gf_tview *g = &a->in[1];
    struct gf_shape d, gs;
    enum gf_status st = fu_check_in(a, 1, "G", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 0, "dLoss", g->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(&a->in[0], &d);
    gf_shape_of_view(g, &gs);
    if ((st = gf_rule_ce_grad(a->node, &d, &gs, r)))
        return st;
    return fu_check_out(a, 0, g->dtype, g->rank, g->dims);
}

/* ---- labels, the ONNX losses ----------------------------------------------- */

void gf_labels_init(struct gf_labels *l, const struct gf_tview *t, size_t slot,
                    const struct gf_ce_attrs *ce, size_t classes, size_t s1)
{
    *l = (struct gf_labels){.t = t, .slot = slot, .has_ii = ce->has_ii, .ii = ce->ii,
                            .classes = classes, .s1 = s1};
}

size_t gf_label_index(const struct gf_labels *l, size_t p)
{
    return l->s1 ? p / l->s1 * (l->s1 + 1) + p % l->s1 + 1 : p;
}

enum gf_status gf_label_error(const struct gf_kernel_args *a, const char *name,
                              const struct gf_labels *l, size_t i, int64_t v)
{
    if (l->has_ii)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) element %zu is %lld: outside "
                               "[0, %zu) and not ignore_index %lld", name, l->slot, i,
                               (long long)v, l->classes, (long long)l->ii);
    return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) element %zu is %lld: outside "
                           "[0, %zu)", name, l->slot, i, (long long)v, l->classes);
}

enum gf_status gf_check_labels(const struct gf_kernel_args *a, const char *name,
                               const struct gf_labels *l, const void *p, size_t n_pos)
{
    for (size_t k = 0; p && k < n_pos; k++) {
        size_t i = gf_label_index(l, k);
        int64_t v = gf_int_at(l->t, p, i);
        if (!(l->has_ii && v == l->ii) && !(v >= 0 && (uint64_t)v < l->classes))
            return gf_label_error(a, name, l, i, v);
    }
    return GF_OK;
}

/* The ONNX losses' inputs: their types and data, and their shapes. */
static enum gf_status nll_inputs(const struct gf_kernel_args *a, bool grad, struct gf_shape *s,
                                 struct gf_shape *t)
{
    size_t ti = grad ? 2 : 1;
    enum gf_status st = fu_check_in(a, 0, grad ? "dLoss" : "scores", GF_UNDEFINED);
    enum gf_dtype dt = st == GF_OK ? a->in[0].dtype : GF_UNDEFINED;
    if (st == GF_OK && a->node->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD)
        st = fu_check_in(a, 1, "scores", dt);
    if (st == GF_OK && a->node->op == GF_OP_NLL_LOSS_GRAD)
        st = gf_check_shape_input(a, 1);
    if (st == GF_OK)
        st = fu_check_in(a, ti, "labels", GF_UNDEFINED);
    if (st == GF_OK && !gf_is_index_type(a->in[ti].dtype))
        st = gf_kernel_error(a, GF_ERR_INVALID, "labels (input %zu) are %s, expected int32 or "
                             "int64", ti, gf_dtype_name(a->in[ti].dtype));
    if (st == GF_OK && fu_has(a, ti + 1))
        st = fu_check_in(a, ti + 1, "weights", dt);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = a->node->op == GF_OP_NLL_LOSS_GRAD ? &a->out[0] : &a->in[grad];
    gf_shape_of_view(x, s);
    gf_shape_of_view(&a->in[ti], t);
    return GF_OK;
}

enum gf_status gf_nll_check(const struct gf_kernel_args *a, struct gf_loss_rule *r,
                            struct gf_labels *l)
{
    enum gf_op op = a->node->op;
    bool grad = op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD || op == GF_OP_NLL_LOSS_GRAD;
    struct gf_shape d, s, t, w;
    int64_t dims[GF_MAX_RANK];
    if (grad && a->n_out < 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "output 0 is missing");
    enum gf_status st = nll_inputs(a, grad, &s, &t);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(&a->in[0], &d);
    if ((st = gf_rule_loss(a->node, grad ? &d : NULL, &s, &t, in_shape(a, grad ? 3 : 2, &w), r)))
        return st;
    const struct gf_tview *x = &a->in[r->si];
    int rank = gf_shape_dims(grad ? &s : &r->loss, dims); /* dScores, or the loss */
    st = fu_check_out(a, 0, a->in[0].dtype, rank, dims);
    if (st == GF_OK && op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, x->rank, x->dims);
    if (st != GF_OK)
        return st;
    gf_labels_init(l, &a->in[r->ti], r->ti, &r->ce, (size_t)r->c.value, 0);
    return gf_check_labels(a, "labels", l, gf_host_bytes(a, l->t), l->t->nelem);
}

/* JSD's X (input xi), Y (xi + 1), T? (xi + 2) and beta; the rows are the
 * last axis of X. */
static enum gf_status jsd_inputs(const struct gf_kernel_args *a, size_t xi, float *beta,
                                 int64_t *ii)
{
    const struct gf_tview *x = &a->in[xi], *y = &a->in[xi + 1];
    double b = gf_node_attr_float(a->node, "beta", 0.5f);
    *beta = (float)b;
    *ii = gf_node_attr_int(a->node, "ignore_index", -100);
    enum gf_status st = fu_check_in(a, xi, "X", GF_UNDEFINED);
    if (st == GF_OK && x->rank < 1)
        st = gf_kernel_error(a, GF_ERR_INVALID, "X must have rank >= 1 (rows of the last axis)");
    if (st == GF_OK && xi && (st = fu_check_in(a, 0, "dLoss", x->dtype)) == GF_OK &&
        a->in[0].nelem != 1)
        st = gf_kernel_error(a, GF_ERR_INVALID, "dLoss %s must be a scalar",
                             FU_SHAPE(&a->in[0]));
    if (st == GF_OK && (st = fu_check_in(a, xi + 1, "Y", x->dtype)) == GF_OK &&
        !fu_same_shape(y, x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "Y %s must have X's shape %s", FU_SHAPE(y),
                             FU_SHAPE(x));
    if (st == GF_OK && !(b >= 0 && b <= 1))
        st = gf_kernel_error(a, GF_ERR_INVALID, "beta %g is outside [0, 1]", b);
    if (st == GF_OK && fu_has(a, xi + 2))
        st = fu_check_label_shape(a, xi + 2, x->rank - 1, x->dims);
    return st;
}

enum gf_status gf_jsd_check(const struct gf_kernel_args *a, float *beta, int64_t *ii)
{
    enum gf_status st = jsd_inputs(a, 0, beta, ii);
    return st == GF_OK ? fu_check_out(a, 0, a->in[0].dtype, 0, NULL) : st;
}

enum gf_status gf_jsd_grad_check(const struct gf_kernel_args *a, float *beta, int64_t *ii)
{
    const struct gf_tview *x = &a->in[1];
    enum gf_status st = jsd_inputs(a, 1, beta, ii);
    for (size_t k = 0; k < 2 && st == GF_OK; k++) /* dX, dY like X */
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, x->dtype, x->rank, x->dims);
    return st;
}

/* The compute type of float dtype dt: double for double, else float (the
 * type of LayerNorm's and attention's statistics). */
static enum gf_dtype compute_type(enum gf_dtype dt)
{
    return dt == GF_DOUBLE ? GF_DOUBLE : GF_FLOAT;
}

enum gf_status gf_attn_check(const struct gf_kernel_args *a, size_t qi, struct gf_attn_rule *r)
{
    static const char *const names[3] = {"Q", "K", "V"};
    const struct gf_tview *q = &a->in[qi];
    struct gf_shape s[3], m;
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < 3 && st == GF_OK; i++)
        st = fu_check_given(a, qi + i, names[i], i ? q->dtype : GF_UNDEFINED);
    if (st == GF_OK && fu_has(a, qi + 3))
        st = fu_check_given(a, qi + 3, "Mask", q->dtype);
    if (st != GF_OK)
        return st;
    for (size_t i = 0; i < 3; i++)
        gf_shape_of_view(&a->in[qi + i], &s[i]);
    if (qi == 0)
        return gf_rule_attention(a->node, &s[0], &s[1], &s[2], in_shape(a, 3, &m), r);
    /* AttentionGrad(dO, Q, K, V, Mask?, O, Stats?) -> dQ?, dK?, dV? like Q, K, V */
    struct gf_shape d, o, ss;
    if ((st = fu_check_given(a, 0, "dO", q->dtype)) ||
        (st = fu_check_given(a, 5, "O", q->dtype)))
        return st;
    if (fu_has(a, 6) && (st = fu_check_given(a, 6, "Stats", compute_type(q->dtype))))
        return st;
    gf_shape_of_view(&a->in[0], &d);
    gf_shape_of_view(&a->in[5], &o);
    return gf_rule_attention_grad(a->node, &d, &s[0], &s[1], &s[2], in_shape(a, 4, &m), &o,
                                  in_shape(a, 6, &ss), r);
}

enum gf_status gf_attn_check_run(const struct gf_kernel_args *a, size_t qi,
                                 const struct gf_attn_rule *r)
{
    const struct gf_tview *q = &a->in[qi];
    int64_t od[GF_MAX_RANK];
    enum gf_status st = inputs_have_data(a);
    if (qi == 0 && st == GF_OK)
        st = fu_check_out(a, 0, q->dtype, gf_shape_dims(&r->o, od), od);
    if (qi == 0 && st == GF_OK && fu_has_out(a, 1)) /* Stats */
        st = fu_check_out(a, 1, compute_type(q->dtype), gf_shape_dims(&r->stats, od), od);
    if (qi == 0 || st != GF_OK)
        return st;
    /* dQ?, dK?, dV? like Q, K, V */
    for (size_t k = 0; k < 3 && st == GF_OK; k++)
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, q->dtype, a->in[1 + k].rank, a->in[1 + k].dims);
    return st;
}

/* ---- normalizations --------------------------------------------------------- */

struct gf_norm_slots gf_norm_slots_of(enum gf_op op)
{
    switch (op) {
    case GF_OP_RMS_NORM: return (struct gf_norm_slots){-1, 1, -1};
    case GF_OP_ADD_RMS_NORM: return (struct gf_norm_slots){1, 2, -1};
    case GF_OP_LAYER_NORM: return (struct gf_norm_slots){-1, 1, 2};
    default: return (struct gf_norm_slots){1, 2, 3}; /* AddLayerNorm */
    }
}

const struct gf_tview *gf_opt_in(const struct gf_kernel_args *a, int slot)
{
    return slot >= 0 && fu_has(a, (size_t)slot) ? &a->in[slot] : NULL;
}

/* Optional input slot (given, of type dt): its shape for a rule, or NULL. */
static enum gf_status opt_shape(const struct gf_kernel_args *a, int slot, const char *name,
                                enum gf_dtype dt, struct gf_shape *s, const struct gf_shape **p)
{
    *p = NULL;
    if (!gf_opt_in(a, slot))
        return GF_OK;
    enum gf_status st = fu_check_given(a, (size_t)slot, name, dt);
    if (st == GF_OK)
        *p = in_shape(a, (size_t)slot, s);
    return st;
}

enum gf_dtype gf_norm_low_type(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    size_t lo, x;
    switch (n->op) {
    case GF_OP_ADD_RMS_NORM: case GF_OP_ADD_LAYER_NORM: lo = 1, x = 0; break;
    case GF_OP_RMS_NORM_GRAD: case GF_OP_LAYER_NORM_GRAD: lo = 0, x = 1; break;
    default: return GF_UNDEFINED;
    }
    if (n_in <= lo || n_in <= x || in[x].dtype != GF_FLOAT || !half_type(in[lo].dtype))
        return GF_UNDEFINED;
    return in[lo].dtype;
}

enum gf_status gf_norm_check(const struct gf_kernel_args *a, struct gf_norm_rule *r)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_norm_slots sl = gf_norm_slots_of(a->node->op);
    struct gf_shape xs, rs, ws, bs;
    const struct gf_shape *rp = NULL, *wp, *bp;
    enum gf_dtype low = gf_norm_low_type(a->node, a->in, a->n_in);
    enum gf_status st = fu_check_given(a, 0, "X", GF_UNDEFINED);
    if (st == GF_OK && sl.r >= 0 &&
        (st = fu_check_given(a, (size_t)sl.r, "R", low ? low : x->dtype)) == GF_OK)
        rp = in_shape(a, (size_t)sl.r, &rs);
    if (st == GF_OK)
        st = opt_shape(a, sl.w, "W", x->dtype, &ws, &wp);
    if (st == GF_OK)
        st = opt_shape(a, sl.b, "B", x->dtype, &bs, &bp);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(x, &xs);
    return gf_rule_norm(a->node, &xs, rp, wp, bp, r);
}

/* Outputs k.. (from k while they are wanted): Mean and InvStdDev. */
static enum gf_status stats_out(const struct gf_kernel_args *a, size_t k,
                                const struct gf_norm_rule *r, enum gf_dtype xdt)
{
    int64_t dims[GF_MAX_RANK];
    int rank = gf_shape_dims(&r->stats, dims);
    enum gf_status st = GF_OK;
    for (size_t i = k; st == GF_OK && i < k + 2; i++)
        if (fu_has_out(a, i))
            st = fu_check_out(a, i, compute_type(xdt), rank, dims);
    return st;
}

enum gf_status gf_norm_check_run(const struct gf_kernel_args *a, const struct gf_norm_rule *r)
{
    const struct gf_tview *x = &a->in[0];
    bool add = gf_norm_slots_of(a->node->op).r >= 0;
    enum gf_dtype low = gf_norm_low_type(a->node, a->in, a->n_in);
    enum gf_status st = inputs_have_data(a);
    if (st == GF_OK) /* Y: R's type in the mixed form */
        st = fu_check_out(a, 0, low ? low : x->dtype, x->rank, x->dims);
    if (st == GF_OK && add && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, x->rank, x->dims);
    if (st == GF_OK && !r->rms)
        st = stats_out(a, add ? 2 : 1, r, x->dtype);
    return st;
}

enum gf_status gf_norm_grad_check(const struct gf_kernel_args *a, struct gf_norm_rule *r)
{
    const struct gf_tview *x = &a->in[1];
    struct gf_shape dy, xs, ws, ms, is, gs;
    const struct gf_shape *wp = NULL, *mp = NULL, *ip = NULL, *gp = NULL;
    bool ln = a->node->op == GF_OP_LAYER_NORM_GRAD;
    enum gf_dtype low = gf_norm_low_type(a->node, a->in, a->n_in);
    enum gf_status st = fu_check_given(a, 1, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_given(a, 0, "dY", low ? low : x->dtype);
    if (st == GF_OK)
        st = opt_shape(a, 2, "W", x->dtype, &ws, &wp);
    if (st == GF_OK && ln)
        st = opt_shape(a, 3, "Mean", compute_type(x->dtype), &ms, &mp);
    if (st == GF_OK && ln)
        st = opt_shape(a, 4, "InvStdDev", compute_type(x->dtype), &is, &ip);
    if (st == GF_OK && !ln)
        st = opt_shape(a, 3, "G", x->dtype, &gs, &gp);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(&a->in[0], &dy);
    gf_shape_of_view(x, &xs);
    return gf_rule_norm_grad(a->node, &dy, &xs, wp, mp, ip, gp, r);
}

enum gf_status gf_norm_grad_check_run(const struct gf_kernel_args *a,
                                      const struct gf_norm_rule *r)
{
    const struct gf_tview *x = &a->in[1];
    int64_t dims[GF_MAX_RANK];
    int rank = gf_shape_dims(&r->block, dims);
    bool ln = a->node->op == GF_OP_LAYER_NORM_GRAD;
    enum gf_status st = inputs_have_data(a);
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    for (size_t k = 1; k < (ln ? 3u : 2u) && st == GF_OK; k++) /* dW, dB like the block */
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, x->dtype, rank, dims);
    if (st == GF_OK && !ln && fu_has_out(a, 2)) /* dXl: dX in dY's type */
        st = fu_check_out(a, 2, a->in[0].dtype, x->rank, x->dims);
    return st;
}

/* ---- activations ------------------------------------------------------------- */

enum gf_status gf_glu_check(const struct gf_kernel_args *a, enum gf_act *act, int *rank,
                            int64_t *dims)
{
    enum gf_op op = a->node->op;
    bool gated = op == GF_OP_SWIGLU || op == GF_OP_GEGLU;
    const struct gf_tview *g = &a->in[0];
    struct gf_shape gs, us, y;
    enum gf_status st = fu_check_in(a, 0, gated ? "G" : "X", GF_UNDEFINED);
    if (st == GF_OK && gated)
        st = fu_check_in(a, 1, "U", g->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(g, &gs);
    if ((st = gf_rule_glu(a->node, &gs, gated ? in_shape(a, 1, &us) : NULL, act, &y)))
        return st;
    *rank = gf_shape_dims(&y, dims);
    return fu_check_out(a, 0, g->dtype, *rank, dims);
}

enum gf_status gf_glu_grad_check(const struct gf_kernel_args *a, enum gf_act *act)
{
    const struct gf_tview *dy = &a->in[0];
    static const char *const names[3] = {"dY", "G", "U"};
    struct gf_shape s[3];
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < 3 && st == GF_OK; i++)
        st = fu_check_in(a, i, names[i], dy->dtype);
    if (st != GF_OK)
        return st;
    for (size_t i = 0; i < 3; i++)
        gf_shape_of_view(&a->in[i], &s[i]);
    st = gf_rule_glu_grad(a->node, &s[0], &s[1], &s[2], act);
    for (size_t k = 0; k < 2 && st == GF_OK; k++) /* dG, dU like dY */
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, dy->dtype, dy->rank, dy->dims);
    return st;
}

bool gf_rope_wide_tables(const struct gf_tview *in, size_t n_in)
{
    return n_in >= 3 && half_type(in[0].dtype) &&
           in[1].dtype == GF_FLOAT && in[2].dtype == GF_FLOAT;
}

enum gf_status gf_rope_check(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    static const char *const names[3] = {"X", "Cos", "Sin"};
    struct gf_shape s[3];
    enum gf_status st = GF_OK;
    /* Cos and Sin of X's type, or fp32 with a 16-bit X (the precision
     * pass's RoPE on bf16 / fp16 q and k with autocast's fp32 tables) */
    bool wide = gf_rope_wide_tables(a->in, a->n_in);
    for (size_t i = 0; i < 3 && st == GF_OK; i++)
        st = fu_check_in(a, i, i || a->node->op != GF_OP_ROPE_GRAD ? names[i] : "dY",
                         !i ? GF_UNDEFINED : wide ? GF_FLOAT : x->dtype);
    if (st != GF_OK)
        return st;
    for (size_t i = 0; i < 3; i++)
        gf_shape_of_view(&a->in[i], &s[i]);
    if ((st = gf_rule_rope(a->node, &s[0], &s[1], &s[2])))
        return st;
    return fu_check_out(a, 0, x->dtype, x->rank, x->dims);
}

/* ---- MatMulEpilogue ----------------------------------------------------------- */

/* A' x B' of inputs 0 and 1 from its rule: the sizes, the row strides as
 * stored, the broadcast batch (element strides of a matrix per step, 0
 * where an operand has 1) and Y's dims. */
static void mm_geometry(const struct gf_kernel_args *a, const struct gf_matmul_rule *r,
                        struct gf_mm *m)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    int ra = A->rank > 2 ? A->rank - 2 : 0, rb = B->rank > 2 ? B->rank - 2 : 0;
    int64_t sa = (A->rank > 1 ? A->dims[A->rank - 2] : 1) * A->dims[A->rank - 1];
    int64_t sb = (B->rank > 1 ? B->dims[B->rank - 2] : 1) * B->dims[B->rank - 1];
    m->m = r->m.value, m->n = r->n.value, m->k = r->k.value;
    m->lda = A->dims[A->rank - 1];
    m->ldb = B->rank > 1 ? B->dims[B->rank - 1] : 1;
    m->brank = ra > rb ? ra : rb;
    m->count = 1;
    for (int i = m->brank - 1; i >= 0; i--) {
        int ia = i - (m->brank - ra), ib = i - (m->brank - rb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        m->bdims[i] = da == 1 ? db : da;
        m->sa[i] = da == 1 ? 0 : sa;
        m->sb[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        m->count *= m->bdims[i];
    }
    m->yrank = gf_shape_dims(&r->y, m->ydims);
}

enum gf_status gf_mm_plan(const struct gf_kernel_args *a, bool ta, bool tb, struct gf_mm *m)
{
    struct gf_shape as, bs;
    struct gf_matmul_rule r;
    gf_shape_of_view(&a->in[0], &as);
    gf_shape_of_view(&a->in[1], &bs);
    enum gf_status st = gf_rule_matmul(a->node, &as, &bs, ta, tb, &r);
    if (st == GF_OK)
        mm_geometry(a, &r, m);
    return st;
}

enum gf_status gf_gemm_check(const struct gf_kernel_args *a, struct gf_gemm_rule *r,
                            struct gf_mm *m)
{
    struct gf_shape as, bs, cs;
    if (a->n_in < 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs inputs A and B");
    gf_shape_of_view(&a->in[0], &as);
    gf_shape_of_view(&a->in[1], &bs);
    enum gf_status st = gf_rule_gemm(a->node, &as, &bs, in_shape(a, 2, &cs), r);
    if (st == GF_OK)
        mm_geometry(a, &r->mm, m);
    return st;
}

enum gf_status gf_mme_check(const struct gf_kernel_args *a, struct gf_mme_rule *r,
                            struct gf_mm *m)
{
    const struct gf_tview *A = &a->in[0];
    struct gf_shape as, bs, bias, res;
    enum gf_status st = fu_check_in(a, 0, "A", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 1, "B", A->dtype);
    if (st == GF_OK && fu_has(a, 2))
        st = fu_check_in(a, 2, "Bias", A->dtype);
    if (st == GF_OK && fu_has(a, 3))
        st = fu_check_in(a, 3, "Res", A->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(A, &as);
    gf_shape_of_view(&a->in[1], &bs);
    if ((st = gf_rule_mme(a->node, &as, &bs, in_shape(a, 2, &bias), in_shape(a, 3, &res), r)))
        return st;
    mm_geometry(a, &r->mm, m);
    return fu_check_out(a, 0, A->dtype, m->yrank, m->ydims);
}

enum gf_status gf_mme_grad_check(const struct gf_kernel_args *a, struct gf_mme_grad_rule *r)
{
    const struct gf_tview *dy = &a->in[0];
    struct gf_shape ds, zs;
    bool fy = gf_node_attr_int(a->node, "from_output", 0) != 0;
    enum gf_status st = fu_check_in(a, 0, "dY", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 1, fy ? "Y" : "Z", dy->dtype);
    if (st != GF_OK)
        return st;
    gf_shape_of_view(dy, &ds);
    gf_shape_of_view(&a->in[1], &zs);
    if ((st = gf_rule_mme_grad(a->node, &ds, &zs, r)))
        return st;
    st = fu_check_out(a, 0, dy->dtype, dy->rank, dy->dims);
    if (st == GF_OK && fu_has_out(a, 1))
        st = fu_check_out(a, 1, dy->dtype, 1, dy->dims + dy->rank - 1);
    return st;
}

/* ---- the optimizer ops --------------------------------------------------------- */

/* The hyper input i: GF_OPTIM_HYPER float64 values, *h their host copy
 * (NULL: backend memory only, which the kernel reads on the device). */
static enum gf_status optim_hyper(const struct gf_kernel_args *a, size_t i, const double **h)
{
    const struct gf_tview *t = &a->in[i];
    enum gf_status st = fu_check_given(a, i, "hyper", GF_DOUBLE);
    *h = st == GF_OK ? gf_host_bytes(a, t) : NULL;
    if (st == GF_OK && !*h && !t->data)
        st = gf_kernel_error(a, GF_ERR_INVALID, "hyper (input %zu) has no data", i);
    return st;
}

/* The steps' optional N (input i): one float64, its host copy if any. */
static enum gf_status optim_norm(const struct gf_kernel_args *a, size_t i,
                                 struct gf_optim_args *o)
{
    o->max_norm = gf_node_attr_float(a->node, "max_norm", 0.0f);
    if (!fu_has(a, i))
        return GF_OK;
    enum gf_status st = fu_check_given(a, i, "N", GF_DOUBLE);
    if (st == GF_OK && (a->in[i].nelem != 1 || !a->in[i].data))
        st = gf_kernel_error(a, GF_ERR_INVALID, "N (input %zu) must be one float64", i);
    if (st == GF_OK) {
        o->norm = &a->in[i];
        o->norm_host = gf_host_bytes(a, o->norm);
    }
    return st;
}

enum gf_status gf_optim_check(const struct gf_kernel_args *a, struct gf_optim_args *o)
{
    static const char *const names[] = {"P", "G", "ExpAvg", "ExpAvgSq", "hyper"};
    enum gf_op op = a->node->op;
    struct gf_shape s[6];
    const struct gf_shape *in[6] = {0};
    size_t n_in = a->n_in < 6 ? a->n_in : 6;
    size_t oi = op == GF_OP_GRAD_ACCUMULATE ? 1 : op == GF_OP_SGD_STEP ? 3 : 0; /* optional */
    int64_t dims[GF_MAX_RANK];
    struct gf_optim_rule *r = &o->r;
    bool *opt = &o->opt;
    o->hyper = NULL;
    o->norm = NULL;
    o->norm_host = NULL;
    o->max_norm = 0;
    *opt = oi && fu_has(a, oi) && a->in[oi].data;
    if (op == GF_OP_SGD_STEP)
        *opt = *opt && fu_has_out(a, 1) && a->out[1].data;
    for (size_t i = 0; i < n_in; i++)
        in[i] = oi && i == oi && !*opt ? NULL : in_shape(a, i, &s[i]);
    enum gf_status st = gf_rule_optim(a->node, in, n_in, r);
    for (size_t i = 0; st == GF_OK && i < n_in; i++) /* every operand but hyper, N is fp32 */
        if (in[i] && !(r->hyper && i == r->hyper) && i < (op == GF_OP_SGD_STEP ? 4u : 5u))
            st = fu_check_in(a, i, op == GF_OP_SGD_STEP && i == 3 ? "Buf"
                                   : op == GF_OP_GRAD_ACCUMULATE ? (i ? "Acc" : "G")
                                   : op == GF_OP_GRAD_NORM ? "X" : names[i], GF_FLOAT);
    if (st != GF_OK)
        return st;
    if (op == GF_OP_GRAD_NORM)
        return gf_check_out_count(a, 0, GF_DOUBLE, 1);
    size_t n = gf_shape_numel(&r->y);
    if (op == GF_OP_GRAD_ACCUMULATE)
        return r->transpose ? fu_check_out(a, 0, GF_FLOAT, gf_shape_dims(&r->y, dims), dims)
                            : gf_check_out_count(a, 0, GF_FLOAT, n);
    if ((st = optim_hyper(a, r->hyper, &o->hyper)) != GF_OK ||
        (st = optim_norm(a, op == GF_OP_SGD_STEP ? 4 : 5, o)) != GF_OK)
        return st;
    size_t n_out = op == GF_OP_ADAMW_STEP ? 3 : 1;
    if (op == GF_OP_SGD_STEP) {
        struct gf_sgd_scalars sc;
        if (o->hyper) /* (on the device only: the kernel runs without the buffer's update) */
            gf_sgd_scalars(o->hyper, &sc);
        if (o->hyper && sc.momentum_on && !*opt)
            return gf_kernel_error(a, GF_ERR_INVALID, "momentum without a momentum buffer");
        n_out += *opt;
    }
    for (size_t k = 0; k < n_out && st == GF_OK; k++)
        st = gf_check_out_count(a, k, GF_FLOAT, n);
    return st;
}

/* The steps' N, if given: float64, on the host where host_hyper. */
static bool optim_norm_ok(const struct gf_tview *in, size_t n_in, size_t i, bool host_hyper)
{
    if (n_in <= i || in[i].dtype == GF_UNDEFINED)
        return true;
    return in[i].dtype == GF_DOUBLE && (!host_hyper || in[i].host);
}

bool gf_optim_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                       bool host_hyper)
{
    switch (n->op) {
    case GF_OP_GRAD_ACCUMULATE:
        if (n_in < 1 || in[0].dtype != GF_FLOAT ||
            (n_in > 1 && in[1].dtype != GF_UNDEFINED && in[1].dtype != GF_FLOAT))
            return false;
        return !gf_node_attr_int(n, "transpose", 0) || in[0].rank == 2;
    case GF_OP_GRAD_NORM:
        return n_in == 1 && in[0].dtype == GF_FLOAT;
    case GF_OP_SGD_STEP:
        return n_in >= 3 && in[0].dtype == GF_FLOAT && in[1].dtype == GF_FLOAT &&
               in[2].dtype == GF_DOUBLE && (!host_hyper || in[2].host) &&
               optim_norm_ok(in, n_in, 4, host_hyper);
    case GF_OP_ADAMW_STEP:
        return n_in >= 5 && in[0].dtype == GF_FLOAT && in[4].dtype == GF_DOUBLE &&
               (!host_hyper || in[4].host) && optim_norm_ok(in, n_in, 5, host_hyper);
    default:
        return false;
    }
}

enum gf_status gf_check_int_divisor(const struct gf_kernel_args *a, const struct gf_tview *b)
{
    if (a->node->op != GF_OP_DIV || (b->dtype != GF_INT64 && b->dtype != GF_INT32))
        return GF_OK;
    if (!b->host)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "integer Div needs the divisor on the "
                               "host");
    for (size_t i = 0; i < b->nelem; i++) {
        int64_t v = b->dtype == GF_INT64 ? ((const int64_t *)b->host)[i]
                                         : ((const int32_t *)b->host)[i];
        if (v == 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "input 1 (divisor) element %zu is 0: "
                                   "integer division by zero", i);
    }
    return GF_OK;
}
