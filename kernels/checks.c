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
