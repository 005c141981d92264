/*
 * OpenCL kernels: the layout family (layout.cl), any 1/2/4/8-byte type.
 *
 *   copies     Reshape Flatten Squeeze Unsqueeze (a device copy once the
 *              shape checks)
 *   remaps     Transpose (tiled through local memory when it is a batched
 *              2-d transpose, else N-d), Slice, Expand, Split, Concat
 *   indexing   Gather (int32/int64 indices)
 *   backward   GatherGrad (deterministic), SliceGrad: fp32, fp16, bf16
 *              (GatherGrad sums in float: its program is built for the
 *              storage type, storage.cl)
 *
 * Shape-like inputs (Reshape's shape, Squeeze's axes, Slice's starts ...,
 * Split's sizes, Expand's shape) are read through `host`: `supports`
 * declines a node whose such input has none.  Indices are checked on the
 * host when they have a host copy; otherwise the kernel flags the first
 * bad one in the workspace and the host reads it back.  Checks and
 * messages follow kernels/cpu/layout.c and cpu/grad.c.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "ocl.h"

#define LY_FILE "layout.cl"
#define MAX_INTS (2 * GF_MAX_RANK)

static const int wg_values[] = {256, 64, 128, 512, 1024};
static const struct gf_config_knob ly_knobs[] = {{"wg", 5, wg_values}};
static const int tile_values[] = {32, 16};
static const int rows_values[] = {8, 4, 16};
static const struct gf_config_knob tr_knobs[] = {
    {"wg", 5, wg_values}, {"tile", 2, tile_values}, {"rows", 3, rows_values}};

/* ---- helpers ------------------------------------------------------------------ */

static size_t ly_wg(const struct gf_kernel_args *a)
{
    size_t wg = (size_t)(a->config ? a->config[0] : wg_values[0]);
    size_t max = gf_cl_of(a->backend)->max_wg;
    return max && wg > max ? max : wg;
}

static const char *size_sfx(enum gf_dtype t)
{
    switch (t == GF_STRING || t == GF_INT4 || t == GF_UINT4 ? 0 : gf_dtype_size(t)) {
    case 1: return "1";
    case 2: return "2";
    case 4: return "4";
    case 8: return "8";
    default: return NULL;
    }
}

static bool is_index_type(enum gf_dtype t)
{
    return t == GF_INT32 || t == GF_INT64;
}

/* Input i is given: data, or an empty tensor (which may have none). */
static bool has_input(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_in && (a->in[i].data || a->in[i].host ||
                           (a->in[i].rank > 0 && a->in[i].nelem == 0));
}

static enum gf_status require_inputs(const struct gf_kernel_args *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!has_input(a, i))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is missing", i);
    return GF_OK;
}

/* Element i of an int32/int64 input's host copy. */
static int64_t ival(const struct gf_tview *t, size_t i)
{
    return t->dtype == GF_INT64 ? ((const int64_t *)t->host)[i]
                                : ((const int32_t *)t->host)[i];
}

static size_t prod(const int64_t *dims, int from, int to)
{
    size_t p = 1;
    for (int k = from; k < to; k++)
        p *= (size_t)dims[k];
    return p;
}

static void strides_of(int rank, const int64_t *dims, int64_t *stride)
{
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        stride[k] = s;
        s *= dims[k];
    }
}

static const char *fmt_dims(char *buf, size_t len, int rank, const int64_t *dims)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < rank && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%" PRId64, k ? "," : "", dims[k]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

/* Output k must have the shape the inputs give (and a buffer). */
static enum gf_status check_out(const struct gf_kernel_args *a, size_t k, int rank,
                                const int64_t *dims)
{
    if (k >= a->n_out)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is missing", k);
    const struct gf_tview *o = &a->out[k];
    bool same = o->rank == rank;
    for (int i = 0; same && i < rank; i++)
        same = o->dims[i] == dims[i];
    char want[200], got[200];
    if (!same)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has shape %s but the inputs give %s",
                               k, fmt_dims(got, sizeof(got), o->rank, o->dims),
                               fmt_dims(want, sizeof(want), rank, dims));
    if (!o->data && o->nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has no buffer", k);
    return GF_OK;
}

static enum gf_status check_dtype(const struct gf_kernel_args *a, const char *what,
                                  enum gf_dtype got, enum gf_dtype want)
{
    if (got == want)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "%s is %s, expected %s", what, gf_dtype_name(got),
                           gf_dtype_name(want));
}

/* An int list from input `slot`'s host copy when given, else from
 * attribute `attr` (NULL: none).  *given: either was there. */
static enum gf_status int_list(const struct gf_kernel_args *a, size_t slot, const char *attr,
                               const char *what, int64_t *buf, size_t *n, bool *given)
{
    const int64_t *v = NULL;
    size_t count = 0;
    *given = true;
    if (slot && has_input(a, slot)) {
        count = a->in[slot].nelem;
        if (count && !a->in[slot].host)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%s (input %zu) is not on the host",
                                   what, slot);
        if (!is_index_type(a->in[slot].dtype))
            return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, expected int64",
                                   what, slot, gf_dtype_name(a->in[slot].dtype));
    } else if (attr && gf_node_attr(a->node, attr)) {
        v = gf_node_attr_ints(a->node, attr, &count);
    } else {
        *given = false;
    }
    if (count > MAX_INTS)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s has %zu values; at most %d are supported",
                               what, count, MAX_INTS);
    for (size_t i = 0; i < count; i++)
        buf[i] = v ? v[i] : ival(&a->in[slot], i);
    *n = count;
    return GF_OK;
}

/* ---- launching ------------------------------------------------------------------ */

/* y[ybase..] = x[xbase..] over dims with element strides sx (source) and
 * sy (destination); axes merged first. */
static enum gf_status copy_nd(const struct gf_kernel_args *a, enum gf_dtype t, cl_mem x,
                              int64_t xbase, cl_mem y, int64_t ybase, int rank,
                              const int64_t *dims, const int64_t *sx, const int64_t *sy)
{
    int64_t st[2][GF_MAX_RANK];
    memcpy(st[0], sx, (size_t)rank * sizeof(int64_t));
    memcpy(st[1], sy, (size_t)rank * sizeof(int64_t));
    struct gf_cl_nd nd;
    size_t n = prod(dims, 0, rank);
    if (n == 0)
        return GF_OK;
    if (!gf_cl_nd_init(&nd, rank, dims, 2, st) || xbase > INT_MAX || ybase > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                               "kernels");
    char name[16];
    snprintf(name, sizeof(name), "copy_nd_%s", size_sfx(t));
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int xb = (cl_int)xbase, yb = (cl_int)ybase, cn = (cl_int)n;
    if (!k || !gf_cl_args(k, 9, sizeof(cl_mem), &x, sizeof(xb), &xb, sizeof(cl_mem), &y,
                          sizeof(yb), &yb, sizeof(cn), &cn, sizeof(cl_int), &nd.rank,
                          sizeof(cl_int8), &nd.dims, sizeof(cl_int8), &nd.st[0],
                          sizeof(cl_int8), &nd.st[1]))
        return gf_cl_fail(a, name);
    size_t wg = ly_wg(a), global = gf_cl_grid(a, n, wg);
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* A kernel over n items with a grid-stride loop. */
static enum gf_status run_1d(const struct gf_kernel_args *a, cl_kernel k, size_t n)
{
    size_t wg = ly_wg(a), global = gf_cl_grid(a, n, wg);
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* ---- supports ------------------------------------------------------------------- */

/* Inputs that hold shapes or axes (read on the host), as a bit mask. */
static unsigned host_slots(enum gf_op op)
{
    switch (op) {
    case GF_OP_SLICE: return 0x1e;
    case GF_OP_PAD: return 0xe; /* pads, constant_value, axes */
    case GF_OP_SLICE_GRAD: return 0x3e;
    case GF_OP_GATHER_GRAD: return 0x2;
    case GF_OP_TRANSPOSE: case GF_OP_FLATTEN: case GF_OP_CONCAT: case GF_OP_GATHER: return 0;
    default: return 0x2;
    }
}

static bool ly_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !size_sfx(in[0].dtype))
        return false;
    unsigned slots = host_slots(n->op);
    for (size_t i = 0; i < n_in; i++) {
        bool given = in[i].data || in[i].host;
        if (in[i].nelem > INT_MAX)
            return false;
        bool index = !(n->op == GF_OP_PAD && i == 2); /* Pad's constant_value: data */
        if ((slots >> i & 1) && given && (!in[i].host || (index && !is_index_type(in[i].dtype))))
            return false;
        if (i > 0 && n->op == GF_OP_CONCAT && in[i].dtype != in[0].dtype)
            return false;
    }
    if (n->op == GF_OP_GATHER || n->op == GF_OP_GATHER_GRAD) {
        size_t ix = n->op == GF_OP_GATHER ? 1 : 2;
        if (n_in <= ix || !is_index_type(in[ix].dtype))
            return false;
    }
    /* the backward ops take the float types (the CPU: fp32, fp64) */
    bool grad = n->op == GF_OP_GATHER_GRAD || n->op == GF_OP_SLICE_GRAD;
    return !grad || gf_cl_storage_opt(in[0].dtype);
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: a copy once the shape checks ----------- */

static enum gf_status finish_copy(const struct gf_kernel_args *a, int rank, const int64_t *dims)
{
    enum gf_status st = check_out(a, 0, rank, dims);
    if (st == GF_OK)
        st = check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
    if (st == GF_OK && a->out[0].nelem)
        st = a->backend->ops->copy(a->backend, a->out[0].data, a->in[0].data,
                                   gf_tview_bytes(&a->in[0]));
    return st;
}

static enum gf_status run_reshape(const struct gf_kernel_args *a)
{
    int64_t shape[MAX_INTS], dims[GF_MAX_RANK];
    size_t n;
    bool given;
    enum gf_status st = require_inputs(a, 1);
    if (st || (st = int_list(a, 1, "shape", "shape", shape, &n, &given)))
        return st;
    if (!given)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 'shape' is missing");
    if (n > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "shape has %zu entries; rank %d at most", n,
                               GF_MAX_RANK);
    if ((st = gf_reshape_dims(a, shape, n, dims)))
        return st;
    return finish_copy(a, (int)n, dims);
}

static enum gf_status run_flatten(const struct gf_kernel_args *a)
{
    enum gf_status st = require_inputs(a, 1);
    if (st)
        return st;
    const struct gf_tview *x = &a->in[0];
    int64_t axis = gf_node_attr_int(a->node, "axis", 1);
    if (axis < -x->rank || axis > x->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %" PRId64 " is out of range [%d, %d]",
                               axis, -x->rank, x->rank);
    int ax = (int)(axis < 0 ? axis + x->rank : axis);
    int64_t dims[2] = {(int64_t)prod(x->dims, 0, ax), (int64_t)prod(x->dims, ax, x->rank)};
    return finish_copy(a, 2, dims);
}

static enum gf_status run_squeeze(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axes[MAX_INTS], dims[GF_MAX_RANK];
    size_t n;
    bool given, hit[GF_MAX_RANK];
    enum gf_status st = require_inputs(a, 1);
    if (st || (st = int_list(a, 1, "axes", "axes", axes, &n, &given)) ||
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
    return finish_copy(a, r, dims);
}

static enum gf_status run_unsqueeze(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axes[MAX_INTS], dims[GF_MAX_RANK];
    size_t n;
    bool given, hit[GF_MAX_RANK];
    enum gf_status st = require_inputs(a, 1);
    if (st || (st = int_list(a, 1, "axes", "axes", axes, &n, &given)))
        return st;
    if (!given)
        return gf_kernel_error(a, GF_ERR_INVALID, "axes are missing");
    int r = x->rank + (int)n;
    if (r > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", r, GF_MAX_RANK);
    if ((st = gf_axes_mask(a, axes, n, r, hit)))
        return st;
    for (int k = 0, j = 0; k < r; k++)
        dims[k] = hit[k] ? 1 : x->dims[j++];
    return finish_copy(a, r, dims);
}

/* ---- Transpose ------------------------------------------------------------------ */

/* The tiled kernel when the merged walk is a batched 2-d transpose:
 * y [B, P, Q] from x [B, Q, P]; false (nothing run) otherwise. */
static bool transpose_tiled(const struct gf_kernel_args *a, const struct gf_cl_nd *nd,
                            enum gf_status *st)
{
    const cl_int *d = nd->dims.s, *sx = nd->st[0].s;
    int r = nd->rank;
    if (r < 2 || r > 3 || sx[6] != 1 || sx[7] != d[6] || (r == 3 && sx[5] != d[6] * d[7]))
        return false;
    size_t ts = (size_t)(a->config ? a->config[1] : tile_values[0]);
    size_t rows = (size_t)(a->config ? a->config[2] : rows_values[0]);
    struct gf_cl *cl = gf_cl_of(a->backend);
    size_t es = gf_dtype_size(a->in[0].dtype);
    if (ts * rows > cl->max_wg || ts * (ts + 1) * es > cl->local_mem)
        return false; /* this config does not fit the device: the N-d copy */
    char opts[48];
    snprintf(opts, sizeof(opts), "-DTS=%zu -DROWS=%zu", ts, rows);
    char name[24];
    snprintf(name, sizeof(name), "transpose_tile_%s", size_sfx(a->in[0].dtype));
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, opts);
    cl_int p = d[6], q = d[7];
    if (!k || !gf_cl_args(k, 4, sizeof(cl_mem), &a->in[0].data, sizeof(cl_mem), &a->out[0].data,
                          sizeof(p), &p, sizeof(q), &q)) {
        *st = gf_cl_fail(a, name);
        return true;
    }
    size_t global[3] = {((size_t)p + ts - 1) / ts * ts, ((size_t)q + ts - 1) / ts * rows,
                        (size_t)(r == 3 ? d[5] : 1)};
    size_t local[3] = {ts, rows, 1};
    *st = gf_cl_run(a, k, 3, global, local);
    return true;
}

static enum gf_status run_transpose(const struct gf_kernel_args *a)
{
    enum gf_status st = require_inputs(a, 1);
    const struct gf_tview *x = &a->in[0];
    int r = x->rank, perm[GF_MAX_RANK];
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
    }
    int64_t dims[GF_MAX_RANK], stride[GF_MAX_RANK], st2[2][GF_MAX_RANK];
    strides_of(r, x->dims, stride);
    for (int k = 0; k < r; k++) {
        dims[k] = x->dims[perm[k]];
        st2[0][k] = stride[perm[k]];
    }
    if ((st = check_out(a, 0, r, dims)) || a->out[0].nelem == 0)
        return st;
    strides_of(r, dims, st2[1]);
    struct gf_cl_nd nd;
    if (gf_cl_nd_init(&nd, r, dims, 2, st2) && transpose_tiled(a, &nd, &st))
        return st;
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, 0, r, dims, st2[0], st2[1]);
}

/* ---- Slice, Expand --------------------------------------------------------------- */

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

/* Per axis of data of shape dims: first element, step and count of the
 * slice (starts, ends, axes, steps from inputs base.., base + 3). */
static enum gf_status slice_plan(const struct gf_kernel_args *a, size_t base, int r,
                                 const int64_t *xdims, int64_t *first, int64_t *step,
                                 int64_t *dims)
{
    int64_t starts[MAX_INTS], ends[MAX_INTS], axes[MAX_INTS], steps[MAX_INTS];
    size_t ns, ne, na = 0, nst = 0;
    bool g, has_axes, has_steps;
    enum gf_status st;
    if ((st = int_list(a, base, "starts", "starts", starts, &ns, &g)) ||
        (st = int_list(a, base + 1, "ends", "ends", ends, &ne, &g)) ||
        (st = int_list(a, base + 2, "axes", "axes", axes, &na, &has_axes)) ||
        (st = int_list(a, base + 3, NULL, "steps", steps, &nst, &has_steps)))
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

static enum gf_status run_slice(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    int64_t sx[GF_MAX_RANK], sy[GF_MAX_RANK], base = 0;
    enum gf_status st = require_inputs(a, 1);
    if (st || (st = slice_plan(a, 1, r, x->dims, first, step, dims)) ||
        (st = check_out(a, 0, r, dims)))
        return st;
    strides_of(r, x->dims, stride);
    strides_of(r, dims, sy);
    for (int k = 0; k < r; k++) {
        base += first[k] * stride[k];
        sx[k] = step[k] * stride[k];
    }
    return copy_nd(a, x->dtype, x->data, base, a->out[0].data, 0, r, dims, sx, sy);
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    int64_t shape[MAX_INTS], dims[GF_MAX_RANK], sx[GF_MAX_RANK], sy[GF_MAX_RANK];
    size_t ns;
    bool given;
    enum gf_status st = require_inputs(a, 2);
    if (st || (st = int_list(a, 1, NULL, "shape", shape, &ns, &given)))
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
    if ((st = check_out(a, 0, r, dims)))
        return st;
    gf_bcast_strides(x, &a->out[0], sx);
    strides_of(r, dims, sy);
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, 0, r, dims, sx, sy);
}

/* ---- Pad ------------------------------------------------------------------------- */

/* Right-aligned int8 of v[0..r) (the kernels' layout). */
static cl_int8 int8_of(const int64_t *v, int r)
{
    cl_int8 o;
    memset(&o, 0, sizeof(o));
    for (int k = 0; k < r; k++)
        o.s[8 - r + k] = (cl_int)v[k];
    return o;
}

static enum gf_status run_pad(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int mode, r = x->rank;
    int64_t pb[GF_MAX_RANK], pe[GF_MAX_RANK], dims[GF_MAX_RANK], lead[GF_MAX_RANK];
    int64_t crop[GF_MAX_RANK], keep[GF_MAX_RANK], sx[GF_MAX_RANK];
    int64_t pads[MAX_INTS], axes[MAX_INTS];
    size_t np = 0, na = 0;
    bool given = false, has_axes = false;
    uint64_t fill = 0;
    enum gf_status st = require_inputs(a, 1);
    if (st || (st = int_list(a, 1, "pads", "pads", pads, &np, &given)) ||
        (st = int_list(a, 3, NULL, "axes", axes, &na, &has_axes)) ||
        (st = gf_pad_plan(a, pads, np, axes, na, has_axes, &mode, pb, pe, dims)) ||
        (st = check_out(a, 0, r, dims)))
        return st;
    size_t es = gf_dtype_size(x->dtype), n = a->out[0].nelem;
    if (has_input(a, 2) && a->in[2].nelem) {
        if (a->in[2].dtype != x->dtype || !a->in[2].host)
            return gf_kernel_error(a, GF_ERR_INVALID, "constant_value is %s, not the data's %s "
                                   "on the host", gf_dtype_name(a->in[2].dtype),
                                   gf_dtype_name(x->dtype));
        memcpy(&fill, a->in[2].host, es);
    } else if (gf_node_attr(a->node, "value")) {
        if (x->dtype != GF_FLOAT)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "attribute 'value' on %s data",
                                   gf_dtype_name(x->dtype));
        float v = gf_node_attr_float(a->node, "value", 0);
        memcpy(&fill, &v, sizeof(v));
    }
    if (n == 0)
        return GF_OK;
    if (r > 8 || n > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL kernels");
    strides_of(r, x->dims, sx);
    for (int k = 0; k < r; k++) {
        crop[k] = pb[k] < 0 ? -pb[k] : 0;
        lead[k] = pb[k] > 0 ? pb[k] : 0;
        keep[k] = x->dims[k] - crop[k] - (pe[k] < 0 ? -pe[k] : 0);
        if (dims[k] > INT_MAX || sx[k] > INT_MAX)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                                   "kernels");
    }
    char name[16];
    snprintf(name, sizeof(name), "pad_nd_%s", size_sfx(x->dtype));
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int cn = (cl_int)n, cr = r, cm = mode;
    cl_int8 vd = int8_of(dims, r), vl = int8_of(lead, r), vc = int8_of(crop, r);
    cl_int8 vk = int8_of(keep, r), vs = int8_of(sx, r);
    cl_mem xm = (cl_mem)x->data, ym = (cl_mem)a->out[0].data;
    if (!k || !gf_cl_args(k, 11, sizeof(cl_mem), &xm, sizeof(cl_mem), &ym, sizeof(cn), &cn,
                          sizeof(cr), &cr, sizeof(vd), &vd, sizeof(vl), &vl, sizeof(vc), &vc,
                          sizeof(vk), &vk, sizeof(vs), &vs, sizeof(cm), &cm, es, &fill))
        return gf_cl_fail(a, name);
    return run_1d(a, k, n);
}

/* ---- GatherND (indices on the host) ---------------------------------------------- */

/* indices [B..., N..., k] address slices of data [B..., D0..Dk-1, S...];
 * the workspace holds each tuple's data offset. */
static size_t ws_gather_nd(const struct gf_kernel_args *a)
{
    size_t t = 1;
    if (a->n_in >= 2)
        t = prod(a->in[1].dims, 0, a->in[1].rank > 0 ? a->in[1].rank - 1 : 0);
    return t * sizeof(cl_int) > 64 ? t * sizeof(cl_int) : 64;
}

static enum gf_status run_gather_nd(const struct gf_kernel_args *a)
{
    enum gf_status st = require_inputs(a, 2);
    if (st)
        return st;
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    int q = ind->rank, r = x->rank, b = (int)gf_node_attr_int(a->node, "batch_dims", 0);
    int64_t k = q ? ind->dims[q - 1] : 0, xs[GF_MAX_RANK], dims[2 * GF_MAX_RANK];
    if (q < 1 || b < 0 || b >= q || b >= r || k > r - b || !ind->host)
        return gf_kernel_error(a, GF_ERR_INVALID, "indices of rank %d, tuples of %" PRId64
                               ", batch_dims %d on data of rank %d (indices on the host)", q, k,
                               b, r);
    for (int j = 0; j < b; j++)
        if (ind->dims[j] != x->dims[j])
            return gf_kernel_error(a, GF_ERR_INVALID, "batch dimension %d differs", j);
    int n_out = q - 1 + r - b - (int)k;
    if (n_out > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", n_out,
                               GF_MAX_RANK);
    memcpy(dims, ind->dims, (size_t)(q - 1) * sizeof(int64_t));
    memcpy(dims + q - 1, x->dims + b + k, (size_t)(r - b - k) * sizeof(int64_t));
    if ((st = check_out(a, 0, n_out, dims)) ||
        (st = check_dtype(a, "output 0", a->out[0].dtype, x->dtype)))
        return st;
    size_t tuples = prod(ind->dims, 0, q - 1), per_batch = prod(ind->dims, b, q - 1);
    size_t slice = prod(x->dims, b + (int)k, r), batch = prod(x->dims, b, r);
    if (a->out[0].nelem == 0)
        return GF_OK;
    if (a->out[0].nelem > INT_MAX || x->nelem > INT_MAX || !a->workspace)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL kernels");
    strides_of(r, x->dims, xs);
    cl_command_queue cq = gf_cl_of(a->backend)->queue;
    cl_int err;
    cl_int *off = clEnqueueMapBuffer(cq, (cl_mem)a->workspace, CL_TRUE, CL_MAP_WRITE, 0,
                                     tuples * sizeof(cl_int), 0, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL map failed: %s", gf_cl_strerror(err));
    for (size_t t = 0; t < tuples && st == GF_OK; t++) {
        size_t o = per_batch ? t / per_batch * batch : 0;
        for (int j = 0; j < k; j++) {
            int64_t v = ival(ind, t * (size_t)k + (size_t)j), d = x->dims[b + j];
            if (v < -d || v >= d)
                st = gf_kernel_error(a, GF_ERR_INVALID, "indices: entry %zu is %" PRId64
                                     ", outside [-%" PRId64 ", %" PRId64 ") of axis %d",
                                     t * (size_t)k + (size_t)j, v, d, d, b + j);
            o += (size_t)((v < 0 ? v + d : v) * xs[b + j]);
        }
        off[t] = (cl_int)o;
    }
    err = clEnqueueUnmapMemObject(cq, (cl_mem)a->workspace, off, 0, NULL, NULL);
    if (st != GF_OK || err != CL_SUCCESS)
        return st != GF_OK ? st : gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL unmap failed: %s",
                                                   gf_cl_strerror(err));
    char name[20];
    snprintf(name, sizeof(name), "gather_nd_%s", size_sfx(x->dtype));
    cl_kernel kn = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int cs = (cl_int)slice, cn = (cl_int)a->out[0].nelem;
    cl_mem ws = (cl_mem)a->workspace;
    if (!kn || !gf_cl_args(kn, 5, sizeof(cl_mem), &x->data, sizeof(cl_mem), &ws,
                           sizeof(cl_mem), &a->out[0].data, sizeof(cs), &cs, sizeof(cn), &cn))
        return gf_cl_fail(a, name);
    return run_1d(a, kn, a->out[0].nelem);
}

/* ---- Concat and Split: blocks along an axis ------------------------------------- */

static enum gf_status run_concat(const struct gf_kernel_args *a)
{
    const struct gf_tview *x0 = &a->in[0];
    enum gf_status st = require_inputs(a, a->n_in);
    if (st || a->n_in == 0)
        return st ? st : gf_kernel_error(a, GF_ERR_INVALID, "no inputs");
    int r = x0->rank, ax;
    if ((st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 1), r, &ax)))
        return st;
    int64_t dims[GF_MAX_RANK];
    memcpy(dims, x0->dims, sizeof(dims));
    dims[ax] = 0;
    for (size_t j = 0; j < a->n_in; j++) {
        const struct gf_tview *x = &a->in[j];
        bool same = x->rank == r && x->dtype == x0->dtype;
        for (int k = 0; same && k < r; k++)
            same = k == ax || x->dims[k] == x0->dims[k];
        char s0[200], sj[200];
        if (!same)
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu (%s %s) does not match input 0 "
                                   "(%s %s) off axis %d", j, gf_dtype_name(x->dtype),
                                   fmt_dims(sj, sizeof(sj), x->rank, x->dims),
                                   gf_dtype_name(x0->dtype), fmt_dims(s0, sizeof(s0), r, x0->dims),
                                   ax);
        dims[ax] += x->dims[ax];
    }
    if ((st = check_out(a, 0, r, dims)) ||
        (st = check_dtype(a, "output 0", a->out[0].dtype, x0->dtype)))
        return st;
    /* out [outer, D * inner]: input j is the [outer, dj * inner] block at
     * column pos (in elements) */
    int64_t outer = (int64_t)prod(dims, 0, ax), inner = (int64_t)prod(dims, ax + 1, r);
    int64_t pos = 0, pitch = dims[ax] * inner;
    for (size_t j = 0; j < a->n_in && st == GF_OK; j++) {
        int64_t len = a->in[j].dims[ax] * inner, bd[2] = {outer, len};
        int64_t sx[2] = {len, 1}, sy[2] = {pitch, 1};
        st = copy_nd(a, x0->dtype, a->in[j].data, 0, a->out[0].data, pos, 2, bd, sx, sy);
        pos += len;
    }
    return st;
}

/* Size of Split output j: the split list (input 1 or the attribute),
 * num_outputs (ceil chunks, the last smaller), or equal parts. */
static enum gf_status split_size(const struct gf_kernel_args *a, int64_t dim, size_t j,
                                 int64_t *size)
{
    size_t n = a->n_out, count = 0;
    int64_t list[MAX_INTS];
    bool from_list;
    enum gf_status st = int_list(a, 1, "split", "split", list, &count, &from_list);
    if (st != GF_OK)
        return st;
    if (from_list) {
        if (gf_node_attr(a->node, "num_outputs"))
            return gf_kernel_error(a, GF_ERR_INVALID, "both split and num_outputs are given");
        if (count != n)
            return gf_kernel_error(a, GF_ERR_INVALID, "split has %zu entries for %zu outputs",
                                   count, n);
        *size = list[j];
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

static enum gf_status run_split(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = require_inputs(a, 1);
    int ax;
    if (st || (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), x->rank, &ax)))
        return st;
    if (a->n_out == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "no outputs");
    int64_t dim = x->dims[ax], total = 0, size;
    for (size_t j = 0; j < a->n_out; j++) {
        if ((st = split_size(a, dim, j, &size)))
            return st;
        total += size;
    }
    if (total != dim)
        return gf_kernel_error(a, GF_ERR_INVALID, "split sizes add up to %" PRId64 ", not %" PRId64,
                               total, dim);
    /* x [outer, dim * inner]: output j is the block at column pos */
    int64_t outer = (int64_t)prod(x->dims, 0, ax), inner = (int64_t)prod(x->dims, ax + 1, x->rank);
    int64_t pos = 0, pitch = dim * inner;
    for (size_t j = 0; j < a->n_out; j++) {
        int64_t dims[GF_MAX_RANK];
        memcpy(dims, x->dims, sizeof(dims));
        split_size(a, dim, j, &dims[ax]);
        int64_t len = dims[ax] * inner, bd[2] = {outer, len};
        int64_t sx[2] = {pitch, 1}, sy[2] = {len, 1};
        if (!a->out[j].data && !a->out[j].nelem) { /* omitted */
            pos += len;
            continue;
        }
        if ((st = check_out(a, j, x->rank, dims)) ||
            (st = check_dtype(a, "output", a->out[j].dtype, x->dtype)) ||
            (st = copy_nd(a, x->dtype, x->data, pos, a->out[j].data, 0, 2, bd, sx, sy)))
            return st;
        pos += len;
    }
    return GF_OK;
}

/* ---- Gather, GatherGrad: bad indices ------------------------------------------------- */

/* "indices element 4 (value 9) is out of range [-3, 2] for data axis 1" */
static enum gf_status index_error(const struct gf_kernel_args *a, size_t pos, int64_t v,
                                  int64_t dim, int axis)
{
    return gf_kernel_error(a, GF_ERR_INVALID,
                           "indices element %zu (value %" PRId64 ") is out of range [%" PRId64
                           ", %" PRId64 "] for data axis %d", pos, v, -dim, dim - 1, axis);
}

/* Host copy: every index in [-dim, dim). */
static enum gf_status check_indices(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                    int64_t dim, int axis)
{
    for (size_t i = 0; i < ind->nelem; i++) {
        int64_t v = ival(ind, i);
        if (v < -dim || v >= dim)
            return index_error(a, i, v, dim, axis);
    }
    return GF_OK;
}

/* Device only: the flag word at the workspace's start, reset to INT_MAX. */
static enum gf_status flag_reset(const struct gf_kernel_args *a)
{
    cl_int big = INT_MAX;
    cl_int err = clEnqueueFillBuffer(gf_cl_of(a->backend)->queue, (cl_mem)a->workspace, &big,
                                     sizeof(big), 0, sizeof(big), 0, NULL, NULL);
    return err == CL_SUCCESS ? GF_OK
                             : gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL fill failed: %s",
                                               gf_cl_strerror(err));
}

/* Reads the flag back after the kernel: the first bad index, if any. */
static enum gf_status flag_check(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                 int64_t dim, int axis)
{
    struct gf_backend *be = a->backend;
    cl_int pos = INT_MAX;
    enum gf_status st = be->ops->copy_out(be, &pos, a->workspace, sizeof(pos));
    if (st != GF_OK || pos == INT_MAX)
        return st;
    int64_t v = 0;
    size_t es = gf_dtype_size(ind->dtype);
    cl_int err = clEnqueueReadBuffer(gf_cl_of(be)->queue, (cl_mem)ind->data, CL_TRUE,
                                     (size_t)pos * es, es, &v, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL read failed: %s",
                               gf_cl_strerror(err));
    if (ind->dtype == GF_INT32) {
        int32_t v32;
        memcpy(&v32, &v, 4);
        v = v32;
    }
    return index_error(a, (size_t)pos, v, dim, axis);
}

/* ---- Gather ---------------------------------------------------------------------- */

/* The flag word for indices without a host copy (declared either way, so
 * the size does not depend on what the executor has on the host). */
static size_t ws_gather(const struct gf_kernel_args *a)
{
    (void)a;
    return 64;
}

static enum gf_status run_gather(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    enum gf_status st = require_inputs(a, 2);
    int ax;
    if (st || (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), x->rank, &ax)))
        return st;
    int r = x->rank, q = ind->rank;
    if (r - 1 + q > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", r - 1 + q,
                               GF_MAX_RANK);
    int64_t dims[GF_MAX_RANK];
    memcpy(dims, x->dims, (size_t)ax * sizeof(int64_t));
    memcpy(dims + ax, ind->dims, (size_t)q * sizeof(int64_t));
    memcpy(dims + ax + q, x->dims + ax + 1, (size_t)(r - ax - 1) * sizeof(int64_t));
    if ((st = check_out(a, 0, r - 1 + q, dims)))
        return st;
    if (!is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices are %s, expected int32 or int64",
                               gf_dtype_name(ind->dtype));
    bool host = ind->host != NULL;
    if (host && (st = check_indices(a, ind, x->dims[ax], ax)))
        return st;
    if (a->out[0].nelem == 0)
        return GF_OK;
    if (a->out[0].nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output too large for the OpenCL kernel");
    if (!host && (!a->workspace || (st = flag_reset(a))))
        return st ? st : gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the index check");
    char name[24];
    snprintf(name, sizeof(name), "gather_%s_%s", size_sfx(x->dtype),
             ind->dtype == GF_INT64 ? "i64" : "i32");
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_mem flag = host ? NULL : (cl_mem)a->workspace;
    cl_int ni = (cl_int)ind->nelem, na = (cl_int)x->dims[ax];
    cl_int post = (cl_int)prod(x->dims, ax + 1, r), n = (cl_int)a->out[0].nelem;
    if (!k || !gf_cl_args(k, 8, sizeof(cl_mem), &x->data, sizeof(cl_mem), &ind->data,
                          sizeof(cl_mem), &a->out[0].data, sizeof(cl_mem), &flag, sizeof(ni), &ni,
                          sizeof(na), &na, sizeof(post), &post, sizeof(n), &n))
        return gf_cl_fail(a, name);
    if ((st = run_1d(a, k, a->out[0].nelem)))
        return st;
    return host ? GF_OK : flag_check(a, ind, x->dims[ax], ax);
}

/* ---- GatherGrad(dY, shape, indices): out [pre, N, post] ------------------------------ */

/* CSR of the indices (host path): (N + 1 + ni) ints; the flag (device
 * path): 64 bytes.  Room for either. */
static size_t ws_gather_grad(const struct gf_kernel_args *a)
{
    if (a->n_in < 3 || a->n_out < 1)
        return 64;
    const struct gf_tview *o = &a->out[0];
    int64_t ax = gf_node_attr_int(a->node, "axis", 0);
    ax = ax < 0 ? ax + o->rank : ax;
    size_t n = ax >= 0 && ax < o->rank ? (size_t)o->dims[ax] : 0;
    size_t csr = (n + 1 + a->in[2].nelem) * sizeof(cl_int);
    return csr > 64 ? csr : 64;
}

/* Fills the workspace (mapped) with start[N + 1] and order[ni]: the
 * positions i of each index value k in increasing order. */
static enum gf_status build_csr(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                size_t n)
{
    cl_command_queue q = gf_cl_of(a->backend)->queue;
    size_t ni = ind->nelem, bytes = (n + 1 + ni) * sizeof(cl_int);
    cl_int err;
    cl_int *start = clEnqueueMapBuffer(q, (cl_mem)a->workspace, CL_TRUE, CL_MAP_WRITE, 0, bytes,
                                       0, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL map failed: %s", gf_cl_strerror(err));
    cl_int *order = start + n + 1;
    memset(start, 0, (n + 1) * sizeof(cl_int));
    for (size_t i = 0; i < ni; i++) {
        int64_t k = ival(ind, i);
        start[(k < 0 ? k + (int64_t)n : k) + 1]++;
    }
    for (size_t k = 0; k < n; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < ni; i++) { /* start[k] walks to start[k + 1] */
        int64_t k = ival(ind, i);
        k = k < 0 ? k + (int64_t)n : k;
        order[start[k]++] = (cl_int)i;
    }
    for (size_t k = n; k > 0; k--)
        start[k] = start[k - 1];
    start[0] = 0;
    err = clEnqueueUnmapMemObject(q, (cl_mem)a->workspace, start, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL unmap failed: %s",
                               gf_cl_strerror(err));
    return GF_OK;
}

/* The shape input (1) must give the output's shape. */
static enum gf_status check_shape_input(const struct gf_kernel_args *a, size_t i)
{
    const struct gf_tview *s = &a->in[i], *o = &a->out[0];
    if (!is_index_type(s->dtype) || !s->host || s->rank != 1 || s->nelem != (size_t)o->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "input %zu must be a 1-D int64 shape of %d "
                               "elements", i, o->rank);
    for (int d = 0; d < o->rank; d++)
        if (ival(s, (size_t)d) != o->dims[d])
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu gives dim %d as %lld, the "
                                   "output has %lld", i, d, (long long)ival(s, (size_t)d),
                                   (long long)o->dims[d]);
    return GF_OK;
}

static enum gf_status run_gather_grad(const struct gf_kernel_args *a)
{
    enum gf_status st = require_inputs(a, 3);
    if (st || (st = check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *ind = &a->in[2];
    int ax;
    if ((st = check_dtype(a, "output 0", o->dtype, g->dtype)) ||
        (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), o->rank, &ax)))
        return st;
    if (!gf_cl_storage_opt(g->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "dY is %s, expected float, float16 or "
                               "bfloat16", gf_dtype_name(g->dtype));
    if (!is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices (input 2) must be int32 or int64");
    size_t pre = prod(o->dims, 0, ax), n = (size_t)o->dims[ax];
    size_t post = prod(o->dims, ax + 1, o->rank), ni = ind->nelem;
    if (g->nelem != pre * ni * post)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, expected %zu", g->nelem,
                               pre * ni * post);
    bool host = ind->host != NULL;
    if (host && (st = check_indices(a, ind, (int64_t)n, ax)))
        return st;
    if (o->nelem == 0)
        return GF_OK;
    if (o->nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output too large for the OpenCL kernel");
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if ((st = host ? build_csr(a, ind, n) : flag_reset(a)))
        return st;
    char name[32];
    snprintf(name, sizeof(name), "gather_grad_%s",
             host ? "csr" : ind->dtype == GF_INT64 ? "scan_i64" : "scan_i32");
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, gf_cl_storage_opt(g->dtype));
    cl_int cni = (cl_int)ni, cn = (cl_int)n, cpost = (cl_int)post, total = (cl_int)o->nelem;
    cl_mem ws = (cl_mem)a->workspace;
    bool ok = k && (host ? gf_cl_args(k, 7, sizeof(cl_mem), &g->data, sizeof(cl_mem), &ws,
                                      sizeof(cl_mem), &o->data, sizeof(cni), &cni, sizeof(cn),
                                      &cn, sizeof(cpost), &cpost, sizeof(total), &total)
                         : gf_cl_args(k, 8, sizeof(cl_mem), &g->data, sizeof(cl_mem),
                                      &ind->data, sizeof(cl_mem), &o->data, sizeof(cl_mem), &ws,
                                      sizeof(cni), &cni, sizeof(cn), &cn, sizeof(cpost), &cpost,
                                      sizeof(total), &total));
    if (!ok)
        return gf_cl_fail(a, name);
    if ((st = run_1d(a, k, o->nelem)))
        return st;
    return host ? GF_OK : flag_check(a, ind, (int64_t)n, ax);
}

/* ---- SliceGrad(dY, shape, starts, ends, axes?, steps?): out has the data's shape ---- */

static enum gf_status run_slice_grad(const struct gf_kernel_args *a)
{
    enum gf_status st = require_inputs(a, 4);
    if (st || (st = check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int r = o->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK];
    if ((st = check_dtype(a, "output 0", o->dtype, g->dtype)))
        return st;
    if (g->rank != r)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has rank %d, the data %d", g->rank, r);
    if ((st = slice_plan(a, 2, r, o->dims, first, step, dims)))
        return st;
    for (int d = 0; d < r; d++)
        if (dims[d] != g->dims[d])
            return gf_kernel_error(a, GF_ERR_INVALID, "the slice takes %lld elements on axis "
                                   "%d, dY has %lld", (long long)dims[d], d,
                                   (long long)g->dims[d]);
    if (o->nelem == 0)
        return GF_OK;
    if (o->nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output too large for the OpenCL kernel");
    cl_int8 yd, fi, sp, gd;
    for (int d = 0; d < 8; d++) {
        int k = d - (8 - r);
        yd.s[d] = k >= 0 ? (cl_int)o->dims[k] : 1;
        fi.s[d] = k >= 0 ? (cl_int)first[k] : 0;
        sp.s[d] = k >= 0 ? (cl_int)step[k] : 1;
        gd.s[d] = k >= 0 ? (cl_int)g->dims[k] : 1;
    }
    char name[24];
    snprintf(name, sizeof(name), "slice_grad_%s", size_sfx(g->dtype));
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int n = (cl_int)o->nelem, cr = r;
    if (!k || !gf_cl_args(k, 8, sizeof(cl_mem), &g->data, sizeof(cl_mem), &o->data, sizeof(n),
                          &n, sizeof(cr), &cr, sizeof(yd), &yd, sizeof(fi), &fi, sizeof(sp), &sp,
                          sizeof(gd), &gd))
        return gf_cl_fail(a, name);
    return run_1d(a, k, o->nelem);
}

/* ---- the table ------------------------------------------------------------------- */

#define KERNEL(OP, NAME, WS, KNOBS)                                                         \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl_" #NAME,     \
     .supports = ly_supports, .workspace = WS, .run = run_##NAME,                           \
     .n_knobs = sizeof(KNOBS) / sizeof(KNOBS[0]), .knobs = KNOBS}

static const struct gf_kernel kernels[] = {
    KERNEL(RESHAPE, reshape, NULL, ly_knobs),
    KERNEL(FLATTEN, flatten, NULL, ly_knobs),
    KERNEL(SQUEEZE, squeeze, NULL, ly_knobs),
    KERNEL(UNSQUEEZE, unsqueeze, NULL, ly_knobs),
    KERNEL(TRANSPOSE, transpose, NULL, tr_knobs),
    KERNEL(SLICE, slice, NULL, ly_knobs),
    KERNEL(EXPAND, expand, NULL, ly_knobs),
    KERNEL(PAD, pad, NULL, ly_knobs),
    KERNEL(GATHER_ND, gather_nd, ws_gather_nd, ly_knobs),
    KERNEL(CONCAT, concat, NULL, ly_knobs),
    KERNEL(SPLIT, split, NULL, ly_knobs),
    KERNEL(GATHER, gather, ws_gather, ly_knobs),
    KERNEL(GATHER_GRAD, gather_grad, ws_gather_grad, ly_knobs),
    KERNEL(SLICE_GRAD, slice_grad, NULL, ly_knobs),
};

const struct gf_kernel_table gf_opencl_layout_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
