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
