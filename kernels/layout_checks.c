/* The shape logic of the layout ops (Reshape, Flatten, Squeeze,
 * Unsqueeze, Transpose, Slice, Expand, Pad, Concat, Split, Gather,
 * GatherND ...): output shapes, attribute and shape-input checks and their
 * messages, one copy for every backend's kernels (declared in checks.h).
 * Shape-like inputs are read on the host (gf_host_bytes): a device backend
 * declines, in `supports`, a node whose such input has no host copy. */
#include <inttypes.h>

#include "checks.h"

/* ---- inputs, outputs, int lists ------------------------------------------------ */

bool gf_is_index_type(enum gf_dtype t)
{
    return t == GF_INT32 || t == GF_INT64;
}

bool gf_has_input(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_in && (a->in[i].data || a->in[i].host ||
                           (a->in[i].rank > 0 && a->in[i].nelem == 0));
}

enum gf_status gf_require_inputs(const struct gf_kernel_args *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!gf_has_input(a, i))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is missing", i);
    return GF_OK;
}

const void *gf_host_bytes(const struct gf_kernel_args *a, const struct gf_tview *t)
{
    if (t->host)
        return t->host;
    return !a->backend || a->backend->host_memory ? t->data : NULL;
}

int64_t gf_int_at(const struct gf_tview *t, const void *p, size_t i)
{
    if (t->dtype == GF_INT64) {
        int64_t v;
        memcpy(&v, (const char *)p + 8 * i, 8);
        return v;
    }
    if (t->dtype == GF_INT32) {
        int32_t v;
        memcpy(&v, (const char *)p + 4 * i, 4);
        return v;
    }
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = (void *)p};
    return gf_tensor_get_i64(&tmp, i);
}

size_t gf_dims_prod(const int64_t *dims, int from, int to)
{
    size_t p = 1;
    for (int k = from; k < to; k++)
        p *= (size_t)dims[k];
    return p;
}

void gf_strides_of(int rank, const int64_t *dims, int64_t *stride)
{
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        stride[k] = s;
        s *= dims[k];
    }
}

enum gf_status gf_check_out_dims(const struct gf_kernel_args *a, size_t k, int rank,
                                 const int64_t *dims)
{
    if (k >= a->n_out)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is missing", k);
    const struct gf_tview *o = &a->out[k];
    if (!fu_same_shape(o, rank, dims))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has shape %s but the inputs give %s",
                               k, FU_SHAPE(o), FU_DIMS(rank, dims));
    if (!o->data && o->nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has no buffer", k);
    return GF_OK;
}

enum gf_status gf_check_dtype(const struct gf_kernel_args *a, const char *what,
                              enum gf_dtype got, enum gf_dtype want)
{
    if (got == want)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "%s is %s, expected %s", what, gf_dtype_name(got),
                           gf_dtype_name(want));
}

enum gf_status gf_int_list(const struct gf_kernel_args *a, size_t slot, const char *attr,
                           const char *what, int64_t *buf, size_t *n, bool *given)
{
    const int64_t *v = NULL;
    const void *p = NULL;
    size_t count = 0;
    *given = true;
    if (slot && gf_has_input(a, slot)) {
        const struct gf_tview *t = &a->in[slot];
        count = t->nelem;
        p = gf_host_bytes(a, t);
        if (count && !p)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%s (input %zu) is not on the host",
                                   what, slot);
        if (!gf_dtype_is_int(t->dtype))
            return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, expected int64",
                                   what, slot, gf_dtype_name(t->dtype));
    } else if (attr && gf_node_attr(a->node, attr)) {
        v = gf_node_attr_ints(a->node, attr, &count);
    } else {
        *given = false;
    }
    if (count > GF_MAX_INTS)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s has %zu values; at most %d are supported",
                               what, count, GF_MAX_INTS);
    for (size_t i = 0; i < count; i++)
        buf[i] = v ? v[i] : gf_int_at(&a->in[slot], p, i);
    *n = count;
    return GF_OK;
}

/* The model's ai.onnx opset (the newest when it imports none). */
int64_t gf_node_opset(const struct gf_node *n)
{
    int64_t v = n->graph && n->graph->model ? gf_model_opset(n->graph->model, "") : 0;
    return v > 0 ? v : 23;
}

/* Normalizes axis (in [-rank, rank-1]) into *out. */
enum gf_status gf_norm_axis(const struct gf_kernel_args *a, const char *what, int64_t axis,
                            int rank, int *out)
{
    *out = 0;
    if (axis < -rank || axis >= rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s %" PRId64 " is out of range [%d, %d] for "
                               "rank %d", what, axis, -rank, rank - 1, rank);
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

/* ---- views: Reshape, Flatten, Squeeze, Unsqueeze ------------------------------- */

static enum gf_status reshape_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    int64_t shape[GF_MAX_INTS];
    size_t n;
    bool given;
    enum gf_status st = gf_int_list(a, 1, "shape", "shape", shape, &n, &given);
    if (st)
        return st;
    if (!given)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 'shape' is missing");
    if (n > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "shape has %zu entries; rank %d at most", n,
                               GF_MAX_RANK);
    *rank = (int)n;
    return gf_reshape_dims(a, shape, n, dims);
}

static enum gf_status flatten_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axis = gf_node_attr_int(a->node, "axis", 1);
    if (axis < -x->rank || axis > x->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %" PRId64 " is out of range [%d, %d]",
                               axis, -x->rank, x->rank);
    int ax = (int)(axis < 0 ? axis + x->rank : axis);
    *rank = 2;
    dims[0] = (int64_t)gf_dims_prod(x->dims, 0, ax);
    dims[1] = (int64_t)gf_dims_prod(x->dims, ax, x->rank);
    return GF_OK;
}

static enum gf_status squeeze_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axes[GF_MAX_INTS];
    size_t n;
    bool given, hit[GF_MAX_RANK];
    enum gf_status st;
    if ((st = gf_int_list(a, 1, "axes", "axes", axes, &n, &given)) ||
        (st = gf_axes_mask(a, axes, n, x->rank, hit)))
        return st;
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        if (given && hit[k] && x->dims[k] != 1)
            return gf_kernel_error(a, GF_ERR_INVALID, "cannot squeeze axis %d of size %" PRId64,
                                   k, x->dims[k]);
        if (!(given ? hit[k] : x->dims[k] == 1))
            dims[r++] = x->dims[k];
    }
    *rank = r;
    return GF_OK;
}

static enum gf_status unsqueeze_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axes[GF_MAX_INTS];
    size_t n;
    bool given, hit[GF_MAX_RANK];
    enum gf_status st = gf_int_list(a, 1, "axes", "axes", axes, &n, &given);
    if (st)
        return st;
    if (!given)
        return gf_kernel_error(a, GF_ERR_INVALID, "axes are missing");
    int r = x->rank + (int)n; /* output rank */
    if (r > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", r, GF_MAX_RANK);
    if ((st = gf_axes_mask(a, axes, n, r, hit)))
        return st;
    for (int k = 0, j = 0; k < r; k++)
        dims[k] = hit[k] ? 1 : x->dims[j++];
    *rank = r;
    return GF_OK;
}

enum gf_status gf_view_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    enum gf_status st = gf_require_inputs(a, 1);
    if (st)
        return st;
    switch (a->node->op) {
    case GF_OP_RESHAPE: return reshape_dims(a, rank, dims);
    case GF_OP_FLATTEN: return flatten_dims(a, rank, dims);
    case GF_OP_SQUEEZE: return squeeze_dims(a, rank, dims);
    case GF_OP_UNSQUEEZE: return unsqueeze_dims(a, rank, dims);
    default:
        return gf_kernel_error(a, GF_ERR_INTERNAL, "not a view op");
    }
}

/* ---- Transpose, Slice, Expand -------------------------------------------------- */

enum gf_status gf_transpose_perm(const struct gf_kernel_args *a, int *perm, int64_t *dims)
{
    enum gf_status st = gf_require_inputs(a, 1);
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    bool seen[GF_MAX_RANK] = {false};
    size_t np;
    const int64_t *p = gf_node_attr_ints(a->node, "perm", &np);
    if (st)
        return st;
    if (p && np != (size_t)r)
        return gf_kernel_error(a, GF_ERR_INVALID, "perm has %zu entries for rank %d", np, r);
    for (int k = 0; k < r; k++) {
        int64_t v = p ? p[k] : r - 1 - k;
        if (v < 0 || v >= r || seen[v])
            return gf_kernel_error(a, GF_ERR_INVALID, "perm is not a permutation of 0..%d "
                                   "(entry %d is %" PRId64 ")", r - 1, k, v);
        seen[v] = true;
        perm[k] = (int)v;
        dims[k] = x->dims[v];
    }
    return GF_OK;
}

/* One axis of Slice, clamped per the spec: first index and count. */
static void slice_axis(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *first,
                       int64_t *count)
{
    start = start < 0 ? start + d : start;
    end = end < 0 ? end + d : end;
    uint64_t diff, s;
    if (step > 0) {
        start = start < 0 ? 0 : start > d ? d : start;
        end = end < 0 ? 0 : end > d ? d : end;
        diff = end > start ? (uint64_t)(end - start) : 0;
        s = (uint64_t)step;
    } else {
        start = start < 0 ? 0 : start > d - 1 ? d - 1 : start;
        end = end < -1 ? -1 : end > d - 1 ? d - 1 : end;
        diff = start > end ? (uint64_t)(start - end) : 0;
        s = (uint64_t)(-(step + 1)) + 1; /* -step, also for INT64_MIN */
    }
    *first = d > 0 ? start : 0;
    *count = d > 0 ? (int64_t)(diff / s + (diff % s != 0)) : 0;
}

enum gf_status gf_slice_plan(const struct gf_kernel_args *a, size_t base, int r,
                             const int64_t *xdims, int64_t *first, int64_t *step,
                             int64_t *dims)
{
    int64_t starts[GF_MAX_INTS], ends[GF_MAX_INTS], axes[GF_MAX_INTS], steps[GF_MAX_INTS];
    size_t ns, ne, na = 0, nst = 0;
    bool g, has_axes, has_steps;
    enum gf_status st;
    if ((st = gf_int_list(a, base, "starts", "starts", starts, &ns, &g)) ||
        (st = gf_int_list(a, base + 1, "ends", "ends", ends, &ne, &g)) ||
        (st = gf_int_list(a, base + 2, "axes", "axes", axes, &na, &has_axes)) ||
        (st = gf_int_list(a, base + 3, NULL, "steps", steps, &nst, &has_steps)))
        return st;
    if (ne != ns || (has_axes && na != ns) || (has_steps && nst != ns))
        return gf_kernel_error(a, GF_ERR_INVALID, "starts, ends, axes and steps have %zu, %zu, "
                               "%zu and %zu entries", ns, ne, na, nst);
    bool done[GF_MAX_RANK] = {false};
    for (int k = 0; k < r; k++) {
        first[k] = 0;
        step[k] = 1;
        dims[k] = xdims[k];
    }
    for (size_t i = 0; i < ns; i++) {
        int ax;
        if ((st = gf_norm_axis(a, "axis", has_axes ? axes[i] : (int64_t)i, r, &ax)))
            return st;
        if (done[ax])
            return gf_kernel_error(a, GF_ERR_INVALID, "axis %d is sliced twice", ax);
        done[ax] = true;
        step[ax] = has_steps ? steps[i] : 1;
        if (step[ax] == 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "steps[%zu] is 0", i);
        slice_axis(xdims[ax], starts[i], ends[i], step[ax], &first[ax], &dims[ax]);
        if (dims[ax] <= 1)
            step[ax] = 1; /* unused, and may be INT64_MIN */
    }
    return GF_OK;
}

enum gf_status gf_expand_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims)
{
    int64_t shape[GF_MAX_INTS];
    size_t ns;
    bool given;
    enum gf_status st = gf_require_inputs(a, 2);
    if (st || (st = gf_int_list(a, 1, NULL, "shape", shape, &ns, &given)))
        return st;
    const struct gf_tview *x = &a->in[0];
    int r = x->rank > (int)ns ? x->rank : (int)ns;
    if (r > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "shape has %zu entries; rank %d at most", ns,
                               GF_MAX_RANK);
    for (int k = 0; k < r; k++) {
        int kx = k - (r - x->rank), ks = k - (r - (int)ns);
        int64_t d = kx >= 0 ? x->dims[kx] : 1, s = ks >= 0 ? shape[ks] : 1;
        if (s < 0 || (d != s && d != 1 && s != 1))
            return gf_kernel_error(a, GF_ERR_INVALID, "cannot broadcast input dimension %" PRId64
                                   " to shape entry %" PRId64 " (output axis %d)", d, s, k);
        dims[k] = d == 1 ? s : d;
    }
    *rank = r;
    return GF_OK;
}

/* ---- Concat, Split ---------------------------------------------------------------- */

enum gf_status gf_concat_dims(const struct gf_kernel_args *a, int *axis, int64_t *dims)
{
    const struct gf_tview *x0 = &a->in[0];
    enum gf_status st = gf_require_inputs(a, a->n_in);
    if (st || a->n_in == 0)
        return st ? st : gf_kernel_error(a, GF_ERR_INVALID, "no inputs");
    if (!gf_node_attr(a->node, "axis") && gf_node_opset(a->node) >= 4)
        return gf_kernel_error(a, GF_ERR_INVALID, "attribute 'axis' is missing");
    int r = x0->rank, ax;
    if ((st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 1), r, &ax)))
        return st;
    memcpy(dims, x0->dims, (size_t)r * sizeof(int64_t));
    dims[ax] = 0;
    for (size_t j = 0; j < a->n_in; j++) {
        const struct gf_tview *x = &a->in[j];
        bool same = x->rank == r && x->dtype == x0->dtype;
        for (int k = 0; same && k < r; k++)
            same = k == ax || x->dims[k] == x0->dims[k];
        if (!same)
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu (%s %s) does not match input 0 "
                                   "(%s %s) off axis %d", j, gf_dtype_name(x->dtype), FU_SHAPE(x),
                                   gf_dtype_name(x0->dtype), FU_SHAPE(x0), ax);
        dims[ax] += x->dims[ax];
    }
    *axis = ax;
    if ((st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    return gf_check_dtype(a, "output 0", a->out[0].dtype, x0->dtype);
}

/* Size of Split output j: from the split list (input 1, or attribute
 * before opset 13), num_outputs (opset 18: ceil chunks, the last smaller),
 * or equal parts. */
enum gf_status gf_split_size(const struct gf_kernel_args *a, int64_t dim, size_t j,
                             int64_t *size)
{
    size_t n = a->n_out, count = 0;
    const int64_t *list = gf_node_attr_ints(a->node, "split", &count);
    const void *p = NULL;
    bool from_input = gf_has_input(a, 1);
    if (from_input) { /* any number of entries: not through gf_int_list */
        count = a->in[1].nelem;
        if (count && !(p = gf_host_bytes(a, &a->in[1])))
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "split (input 1) is not on the host");
    }
    if (from_input || list) {
        if (gf_node_attr(a->node, "num_outputs"))
            return gf_kernel_error(a, GF_ERR_INVALID, "both split and num_outputs are given");
        if (count != n)
            return gf_kernel_error(a, GF_ERR_INVALID, "split has %zu entries for %zu outputs",
                                   count, n);
        *size = from_input ? gf_int_at(&a->in[1], p, j) : list[j];
    } else if (gf_node_attr(a->node, "num_outputs")) {
        int64_t k = gf_node_attr_int(a->node, "num_outputs", 0);
        if (k != (int64_t)n)
            return gf_kernel_error(a, GF_ERR_INVALID, "num_outputs is %" PRId64 " but the node "
                                   "has %zu outputs", k, n);
        int64_t chunk = (dim + k - 1) / k, left = dim - (int64_t)j * chunk;
        *size = left < 0 ? 0 : left > chunk ? chunk : left;
    } else {
        if (dim % (int64_t)n)
            return gf_kernel_error(a, GF_ERR_INVALID, "axis of size %" PRId64 " does not split "
                                   "into %zu equal parts", dim, n);
        *size = dim / (int64_t)n;
    }
    if (*size < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "split[%zu] = %" PRId64 " is negative", j,
                               *size);
    return GF_OK;
}

enum gf_status gf_split_axis(const struct gf_kernel_args *a, int *axis)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), x->rank, axis)))
        return st;
    if (a->n_out == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "no outputs");
    int64_t dim = x->dims[*axis], total = 0, size;
    for (size_t j = 0; j < a->n_out; j++) {
        if ((st = gf_split_size(a, dim, j, &size)))
            return st;
        total += size;
    }
    if (total != dim)
        return gf_kernel_error(a, GF_ERR_INVALID, "split sizes add up to %" PRId64 ", not %" PRId64,
                               total, dim);
    return GF_OK;
}

enum gf_status gf_split_out(const struct gf_kernel_args *a, int axis, size_t j, int64_t *dims,
                            bool *omitted)
{
    const struct gf_tview *x = &a->in[0];
    memcpy(dims, x->dims, (size_t)x->rank * sizeof(int64_t));
    enum gf_status st = gf_split_size(a, x->dims[axis], j, &dims[axis]);
    *omitted = !a->out[j].data && !a->out[j].nelem;
    if (st || *omitted || (st = gf_check_out_dims(a, j, x->rank, dims)))
        return st;
    return gf_check_dtype(a, "output", a->out[j].dtype, x->dtype);
}

/* out [outer, D * inner]: input j is the [outer, dj * inner] block at
 * column pos (bytes throughout). */
enum gf_status gf_concat_blocks(const struct gf_kernel_args *a, gf_copy2d_fn copy)
{
    int ax;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_concat_dims(a, &ax, dims);
    if (st)
        return st;
    int r = a->in[0].rank;
    size_t es = gf_dtype_size(a->in[0].dtype), outer = gf_dims_prod(dims, 0, ax);
    size_t inner = gf_dims_prod(dims, ax + 1, r), pitch = (size_t)dims[ax] * inner * es, pos = 0;
    for (size_t j = 0; j < a->n_in && st == GF_OK; j++) {
        size_t len = (size_t)a->in[j].dims[ax] * inner * es;
        st = copy(a, a->out[0].data, pos, pitch, a->in[j].data, 0, len, len, outer);
        pos += len;
    }
    return st;
}

/* x [outer, dim * inner]: output j is the [outer, size_j * inner] block at
 * column pos (bytes throughout). */
enum gf_status gf_split_blocks(const struct gf_kernel_args *a, gf_copy2d_fn copy)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    enum gf_status st = gf_split_axis(a, &ax);
    if (st)
        return st;
    size_t es = gf_dtype_size(x->dtype), outer = gf_dims_prod(x->dims, 0, ax);
    size_t inner = gf_dims_prod(x->dims, ax + 1, x->rank);
    size_t pitch = (size_t)x->dims[ax] * inner * es, pos = 0;
    for (size_t j = 0; j < a->n_out; j++) {
        int64_t dims[GF_MAX_RANK];
        bool omitted;
        if ((st = gf_split_out(a, ax, j, dims, &omitted)))
            return st;
        size_t len = (size_t)dims[ax] * inner * es;
        if (!omitted && (st = copy(a, a->out[j].data, 0, len, x->data, pos, pitch, len, outer)))
            return st;
        pos += len;
    }
    return GF_OK;
}

/* ---- Gather, GatherND, shape inputs ------------------------------------------------- */

enum gf_status gf_index_error(const struct gf_kernel_args *a, const char *what, size_t pos,
                              int64_t v, int64_t dim, int axis)
{
    return gf_kernel_error(a, GF_ERR_INVALID,
                           "%s element %zu (value %" PRId64 ") is out of range [%" PRId64
                           ", %" PRId64 "] for data axis %d",
                           what, pos, v, -dim, dim - 1, axis);
}

enum gf_status gf_check_indices(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                int64_t dim, int axis)
{
    const void *p = gf_host_bytes(a, ind);
    for (size_t i = 0; p && i < ind->nelem; i++) {
        int64_t v = gf_int_at(ind, p, i);
        if (v < -dim || v >= dim)
            return gf_index_error(a, "indices", i, v, dim, axis);
    }
    return GF_OK;
}

enum gf_status gf_gather_dims(const struct gf_kernel_args *a, int *axis, int64_t *dims)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    enum gf_status st = gf_require_inputs(a, 2);
    int ax;
    if (st || (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), x->rank, &ax)))
        return st;
    int r = x->rank, q = ind->rank;
    if (r - 1 + q > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", r - 1 + q,
                               GF_MAX_RANK);
    /* out: x dims before axis, indices dims, x dims after axis */
    memcpy(dims, x->dims, (size_t)ax * sizeof(int64_t));
    memcpy(dims + ax, ind->dims, (size_t)q * sizeof(int64_t));
    memcpy(dims + ax + q, x->dims + ax + 1, (size_t)(r - ax - 1) * sizeof(int64_t));
    *axis = ax;
    if ((st = gf_check_out_dims(a, 0, r - 1 + q, dims)))
        return st;
    if (!gf_is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices are %s, expected int32 or int64",
                               gf_dtype_name(ind->dtype));
    return gf_check_indices(a, ind, x->dims[ax], ax);
}

enum gf_status gf_nd_plan(const struct gf_kernel_args *a, int b, struct gf_nd_plan *p)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    enum gf_status st = gf_require_inputs(a, 2);
    if (st)
        return st;
    int q = ind->rank, r = x->rank;
    if (q < 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "indices must have rank >= 1");
    int64_t k = ind->dims[q - 1];
    if (b < 0 || b >= q || b >= r)
        return gf_kernel_error(a, GF_ERR_INVALID, "batch_dims %d must be in [0, %d)", b,
                               q < r ? q : r);
    if (k > r - b)
        return gf_kernel_error(a, GF_ERR_INVALID, "index tuples of length %" PRId64 " exceed "
                               "the %d data axes after the batch", k, r - b);
    for (int j = 0; j < b; j++)
        if (ind->dims[j] != x->dims[j])
            return gf_kernel_error(a, GF_ERR_INVALID, "batch dimension %d differs: indices %"
                                   PRId64 ", data %" PRId64, j, ind->dims[j], x->dims[j]);
    *p = (struct gf_nd_plan){.b = b, .k = (int)k, .rank = q - 1 + r - b - (int)k,
                             .tuples = gf_dims_prod(ind->dims, 0, q - 1),
                             .per_batch = gf_dims_prod(ind->dims, b, q - 1),
                             .slice = gf_dims_prod(x->dims, b + (int)k, r),
                             .batch = gf_dims_prod(x->dims, b, r)};
    /* gathered: indices dims but the last, then the slice dims */
    if (p->rank <= GF_MAX_RANK) {
        memcpy(p->dims, ind->dims, (size_t)(q - 1) * sizeof(int64_t));
        memcpy(p->dims + q - 1, x->dims + b + k, (size_t)(r - b - k) * sizeof(int64_t));
    }
    const void *h = gf_host_bytes(a, ind);
    if (!h && ind->nelem)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "indices are not on the host");
    for (size_t t = 0; k && t * (size_t)k < ind->nelem; t++)
        for (int j = 0; j < k; j++) {
            int64_t v = gf_int_at(ind, h, t * (size_t)k + (size_t)j), d = x->dims[b + j];
            if (v < -d || v >= d)
                return gf_index_error(a, "indices", t * (size_t)k + (size_t)j, v, d, b + j);
        }
    return GF_OK;
}

enum gf_status gf_gather_nd_plan(const struct gf_kernel_args *a, struct gf_nd_plan *p)
{
    enum gf_status st = gf_nd_plan(a, (int)gf_node_attr_int(a->node, "batch_dims", 0), p);
    if (st)
        return st;
    if (p->rank > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", p->rank,
                               GF_MAX_RANK);
    if ((st = gf_check_out_dims(a, 0, p->rank, p->dims)))
        return st;
    return gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
}

enum gf_status gf_check_shape_input(const struct gf_kernel_args *a, size_t i)
{
    const struct gf_tview *s = &a->in[i], *o = &a->out[0];
    const void *p = gf_host_bytes(a, s);
    if (!gf_is_index_type(s->dtype) || s->rank != 1 || s->nelem != (size_t)o->rank ||
        (s->nelem && !p))
        return gf_kernel_error(a, GF_ERR_INVALID, "input %zu must be a 1-D int64 shape of %d "
                               "elements", i, o->rank);
    for (int d = 0; d < o->rank; d++)
        if (gf_int_at(s, p, (size_t)d) != o->dims[d])
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu gives dim %d as %lld, the "
                                   "output has %lld", i, d, (long long)gf_int_at(s, p, (size_t)d),
                                   (long long)o->dims[d]);
    return GF_OK;
}
