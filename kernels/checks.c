/* Checks every backend's kernels share (declared in checks.h): the error
 * helper, and the per-op attribute and shape checks of the fused ops. */
#include <stdarg.h>

#include "checks.h"

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

enum gf_status fu_ce_attrs(const struct gf_kernel_args *a, enum reduction *red, bool *shift,
                           bool *has_ii, int64_t *ii)
{
    const char *r = gf_node_attr_string(a->node, "reduction", "mean");
    if (strcmp(r, "none") == 0)
        *red = RED_NONE;
    else if (strcmp(r, "sum") == 0)
        *red = RED_SUM;
    else if (strcmp(r, "mean") == 0)
        *red = RED_MEAN;
    else
        return gf_kernel_error(a, GF_ERR_INVALID, "reduction '%s' is not one of none, sum, mean",
                               r);
    int64_t s = gf_node_attr_int(a->node, "shift", 0);
    if (s != 0 && s != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "shift %lld must be 0 or 1", (long long)s);
    *shift = s;
    *has_ii = gf_node_attr(a->node, "ignore_index") != NULL;
    *ii = gf_node_attr_int(a->node, "ignore_index", 0);
    return GF_OK;
}

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
