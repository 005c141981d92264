/* The shape logic of the layout ops (Reshape, Squeeze, Unsqueeze, Pad,
 * ...), one copy for every backend's kernels (declared in checks.h). */
#include <inttypes.h>

#include "checks.h"

/* Normalizes axis (in [-rank, rank-1]) into *out. */
enum gf_status gf_norm_axis(const struct gf_kernel_args *a, const char *what, int64_t axis,
                                int rank, int *out)
{
    *out = 0;
    if (axis < -rank || axis >= rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s %" PRId64 " is out of range [%d, %d]", what,
                               axis, -rank, rank - 1);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return GF_OK;
}

/* Reshape's target shape: 0 copies the input dimension (unless allowzero),
 * one -1 is inferred. */
enum gf_status gf_reshape_dims(const struct gf_kernel_args *a, const int64_t *shape,
                                   size_t n, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0];
    bool allowzero = gf_node_attr_int(a->node, "allowzero", 0) != 0;
    int neg = -1;
    int64_t known = 1;
    for (int i = 0; i < (int)n; i++) {
        int64_t v = shape[i];
        if (v == 0 && !allowzero) {
            if (i >= x->rank)
                return gf_kernel_error(a, GF_ERR_INVALID, "shape[%d] is 0 (copy input dimension"
                                       " %d) but the input has rank %d", i, i, x->rank);
            v = x->dims[i];
        }
        if (v == -1 && neg >= 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "shape has more than one -1");
        if (v == -1) {
            neg = i;
            continue;
        }
        if (v < -1 || __builtin_mul_overflow(known, v, &known))
            return gf_kernel_error(a, GF_ERR_INVALID, "shape[%d] = %" PRId64 " is invalid", i, v);
        dims[i] = v;
    }
    if (neg >= 0) {
        if (known == 0 || x->nelem % (uint64_t)known)
            return gf_kernel_error(a, GF_ERR_INVALID, "cannot infer the -1 of shape: %zu elements"
                                   " are not a multiple of %" PRId64, x->nelem, known);
        dims[neg] = (int64_t)x->nelem / known;
    } else if ((uint64_t)known != x->nelem) {
        return gf_kernel_error(a, GF_ERR_INVALID, "shape has %" PRId64 " elements but the input"
                               " has %zu", known, x->nelem);
    }
    return GF_OK;
}

/* Squeeze / Unsqueeze axes (input 1 from opset 13, attribute before),
 * normalized against `rank` with no repeats, marked in `hit`. */
enum gf_status gf_axes_mask(const struct gf_kernel_args *a, const int64_t *axes, size_t n,
                                int rank, bool hit[GF_MAX_RANK])
{
    memset(hit, 0, GF_MAX_RANK * sizeof(bool));
    for (size_t i = 0; i < n; i++) {
        int ax;
        enum gf_status st = gf_norm_axis(a, "axis", axes[i], rank, &ax);
        if (st)
            return st;
        if (hit[ax])
            return gf_kernel_error(a, GF_ERR_INVALID, "axis %d is listed twice", ax);
        hit[ax] = true;
    }
    return GF_OK;
}

enum pad_mode gf_pad_mode_of(const struct gf_node *n)
{
    static const char *const names[] = {"constant", "reflect", "edge", "wrap"};
    const char *m = gf_node_attr_string(n, "mode", "constant");
    for (int i = 0; i < PAD_BAD; i++)
        if (strcmp(m, names[i]) == 0)
            return (enum pad_mode)i;
    return PAD_BAD;
}

/* Pad's plan (checks.h). */
enum gf_status gf_pad_plan(const struct gf_kernel_args *a, const int64_t *pads, size_t np,
                           const int64_t *axes_in, size_t na, bool has_axes, int *mode,
                           int64_t *pb, int64_t *pe, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    enum gf_status st;
    int64_t axes[GF_MAX_RANK];
    if (!has_axes)
        na = (size_t)r;
    if (np != 2 * na || na > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "pads has %zu entries, expected %zu (2 per axis)",
                               np, 2 * na);
    for (size_t i = 0; i < na; i++)
        axes[i] = has_axes ? axes_in[i] : (int64_t)i;
    bool seen[GF_MAX_RANK] = {false};
    memset(pb, 0, (size_t)r * sizeof(*pb));
    memset(pe, 0, (size_t)r * sizeof(*pe));
    for (size_t i = 0; i < na; i++) {
        int ax;
        if ((st = gf_norm_axis(a, "axis", axes[i], r, &ax)))
            return st;
        if (seen[ax])
            return gf_kernel_error(a, GF_ERR_INVALID, "axis %d is listed twice", ax);
        seen[ax] = true;
        pb[ax] = pads[i];
        pe[ax] = pads[i + na];
    }
    if ((*mode = (int)gf_pad_mode_of(a->node)) == PAD_BAD)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "mode '%s'",
                               gf_node_attr_string(a->node, "mode", ""));
    for (int k = 0; k < x->rank; k++)
        if (__builtin_add_overflow(x->dims[k], pb[k], &dims[k]) ||
            __builtin_add_overflow(dims[k], pe[k], &dims[k]) || dims[k] < 0 ||
            x->dims[k] + (pb[k] < 0 ? pb[k] : 0) + (pe[k] < 0 ? pe[k] : 0) < 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "pads %" PRId64 ", %" PRId64 " on axis %d"
                                   " of size %" PRId64 " crop more than the axis", pb[k], pe[k],
                                   k, x->dims[k]);
    for (int k = 0; k < x->rank; k++) {
        int64_t keep = x->dims[k] + (pb[k] < 0 ? pb[k] : 0) + (pe[k] < 0 ? pe[k] : 0);
        if (keep == 0 && dims[k] > 0 && *mode != PAD_CONSTANT)
            return gf_kernel_error(a, GF_ERR_INVALID, "cannot pad axis %d in mode '%s': it has "
                                   "no elements", k, gf_node_attr_string(a->node, "mode", ""));
    }
    return GF_OK;
}
