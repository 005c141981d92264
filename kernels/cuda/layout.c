/*
 * CUDA kernels: the layout family (device code: layout.cu), any
 * 1/2/4/8-byte type.
 *
 *   copies     Reshape Flatten Squeeze Unsqueeze (a device copy once the
 *              shape checks)
 *   remaps     Transpose, Slice, Expand (one strided copy), Concat, Split
 *              (cudaMemcpy2DAsync per input / output)
 *   indexing   Gather (int32 / int64 indices)
 *
 * Shape-like inputs (Reshape's shape, Squeeze's axes, Slice's starts ...,
 * Split's sizes, Expand's shape) are read through `host`: `supports`
 * declines a node whose such input has none.  Indices are checked on the
 * host when they have a host copy; otherwise the kernel flags the first bad
 * one in the workspace and the host reads it back.  The rules follow
 * kernels/opencl/layout.c (Pad, GatherND, GatherGrad and SliceGrad are not
 * here yet: they run on the CPU); checks and messages kernels/cpu/layout.c.
 */
#include <limits.h>
#include <stdio.h>

#include "cu.h"

/* Bytes of an element movable by size, 0 otherwise. */
static size_t move_size(enum gf_dtype t)
{
    if (t == GF_STRING || t == GF_INT4 || t == GF_UINT4 || t == GF_UNDEFINED)
        return 0;
    size_t s = gf_dtype_size(t);
    return s == 1 || s == 2 || s == 4 || s == 8 ? s : 0;
}

/* y = x walked with strides sx over dims (x at element `base`). */
static enum gf_status copy_nd(const struct gf_kernel_args *a, enum gf_dtype dt, const void *x,
                              int64_t base, void *y, int r, const int64_t *dims,
                              const int64_t *sx)
{
    struct gf_tview shape = {.dtype = dt};
    gf_tview_set_shape(&shape, r, dims);
    if (shape.nelem == 0)
        return GF_OK;
    int64_t st[1][GF_MAX_RANK];
    memcpy(st[0], sx, sizeof(int64_t) * (size_t)r);
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, r, dims, 1, st);
    size_t es = move_size(dt);
    cudaError_t e = gf_cu_copy_nd(gf_cu_stream(a), (int)es, (const char *)x + base * (int64_t)es,
                                  y, &nd, (int64_t)shape.nelem);
    return gf_cu_check(a, e, "strided copy");
}

/* ---- supports ------------------------------------------------------------------- */

/* Inputs that hold shapes or axes (read on the host), as a bit mask. */
static unsigned host_slots(enum gf_op op)
{
    switch (op) {
    case GF_OP_SLICE: return 0x1e;
    case GF_OP_TRANSPOSE: case GF_OP_FLATTEN: case GF_OP_CONCAT: case GF_OP_GATHER: return 0;
    default: return 0x2;
    }
}

static bool ly_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !move_size(in[0].dtype))
        return false;
    unsigned slots = host_slots(n->op);
    for (size_t i = 0; i < n_in; i++) {
        bool given = in[i].data || in[i].host;
        if ((slots >> i & 1) && given && (!in[i].host || !gf_is_index_type(in[i].dtype)))
            return false;
        if (i > 0 && n->op == GF_OP_CONCAT && in[i].dtype != in[0].dtype)
            return false;
    }
    if (n->op == GF_OP_GATHER && (n_in < 2 || !gf_is_index_type(in[1].dtype)))
        return false;
    return true;
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: a copy once the shape checks ----------- */

static enum gf_status run_view(const struct gf_kernel_args *a)
{
    int r;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_view_dims(a, &r, dims);
    if (st == GF_OK)
        st = gf_check_out_dims(a, 0, r, dims);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
    if (st == GF_OK && a->out[0].nelem)
        st = a->backend->ops->copy(a->backend, a->out[0].data, a->in[0].data,
                                   gf_tview_bytes(&a->in[0]));
    return st;
}

/* ---- Transpose, Slice, Expand ------------------------------------------------------ */

static enum gf_status run_transpose(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank, perm[GF_MAX_RANK];
    int64_t dims[GF_MAX_RANK], stride[GF_MAX_RANK], sx[GF_MAX_RANK];
    enum gf_status st = gf_transpose_perm(a, perm, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)) || a->out[0].nelem == 0)
        return st;
    gf_strides_of(r, x->dims, stride);
    for (int k = 0; k < r; k++)
        sx[k] = stride[perm[k]];
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, r, dims, sx);
}

static enum gf_status run_slice(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    int64_t sx[GF_MAX_RANK], base = 0;
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_slice_plan(a, 1, r, x->dims, first, step, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)) || a->out[0].nelem == 0)
        return st;
    gf_strides_of(r, x->dims, stride);
    for (int k = 0; k < r; k++) {
        base += first[k] * stride[k];
        sx[k] = step[k] * stride[k];
    }
    return copy_nd(a, x->dtype, x->data, base, a->out[0].data, r, dims, sx);
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r;
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK];
    enum gf_status st = gf_expand_dims(a, &r, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)) || a->out[0].nelem == 0)
        return st;
    gf_bcast_strides(x, &a->out[0], sx);
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, r, dims, sx);
}

/* ---- Concat, Split: [outer, len] blocks of a [outer, pitch] tensor --------------------- */

static enum gf_status copy_2d(const struct gf_kernel_args *a, void *dst, size_t dpitch,
                              const void *src, size_t spitch, size_t width, size_t height)
{
    if (!width || !height)
        return GF_OK;
    cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                      cudaMemcpyDeviceToDevice, gf_cu_stream(a));
    return gf_cu_check(a, e, "2-d copy");
}

static enum gf_status run_concat(const struct gf_kernel_args *a)
{
    const struct gf_tview *x0 = &a->in[0];
    int ax;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_concat_dims(a, &ax, dims);
    if (st || a->out[0].nelem == 0)
        return st;
    /* out [outer, D * inner]: input j is the [outer, dj * inner] block at column pos */
    size_t es = move_size(x0->dtype);
    size_t outer = gf_dims_prod(dims, 0, ax), inner = gf_dims_prod(dims, ax + 1, x0->rank);
    size_t pos = 0, pitch = (size_t)dims[ax] * inner * es;
    for (size_t j = 0; j < a->n_in && st == GF_OK; j++) {
        size_t len = (size_t)a->in[j].dims[ax] * inner * es;
        st = copy_2d(a, (char *)a->out[0].data + pos, pitch, a->in[j].data, len, len, outer);
        pos += len;
    }
    return st;
}

static enum gf_status run_split(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    enum gf_status st = gf_split_axis(a, &ax);
    if (st)
        return st;
    size_t es = move_size(x->dtype);
    size_t outer = gf_dims_prod(x->dims, 0, ax), inner = gf_dims_prod(x->dims, ax + 1, x->rank);
    size_t pos = 0, pitch = (size_t)x->dims[ax] * inner * es;
    for (size_t j = 0; j < a->n_out; j++) {
        int64_t dims[GF_MAX_RANK];
        bool omitted;
        if ((st = gf_split_out(a, ax, j, dims, &omitted)))
            return st;
        size_t len = (size_t)dims[ax] * inner * es;
        if (!omitted &&
            (st = copy_2d(a, a->out[j].data, len, (const char *)x->data + pos, pitch, len, outer)))
            return st;
        pos += len;
    }
    return GF_OK;
}

/* ---- Gather -------------------------------------------------------------------------- */

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
    int ax, r = x->rank;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_gather_dims(a, &ax, dims); /* the indices too, on the host */
    if (st || a->out[0].nelem == 0)
        return st;
    struct gf_backend *be = a->backend;
    int *flag = ind->host ? NULL : a->workspace;
    if (!ind->host && !flag)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the index check");
    int big = INT_MAX;
    if (flag && (st = be->ops->copy_in(be, flag, &big, sizeof(big))))
        return st;
    cudaError_t e = gf_cu_gather(gf_cu_stream(a), (int)move_size(x->dtype), x->data, ind->data,
                                 ind->dtype == GF_INT64, a->out[0].data,
                                 (int64_t)gf_dims_prod(x->dims, 0, ax), (int64_t)ind->nelem,
                                 x->dims[ax], (int64_t)gf_dims_prod(x->dims, ax + 1, r), flag);
    if ((st = gf_cu_check(a, e, "Gather kernel")) || !flag)
        return st;
    /* the first bad index, if any: its position, then its value */
    int pos = INT_MAX;
    if ((st = be->ops->copy_out(be, &pos, flag, sizeof(pos))) || pos == INT_MAX)
        return st;
    int64_t v = 0;
    size_t es = gf_dtype_size(ind->dtype);
    if ((st = be->ops->copy_out(be, &v, (const char *)ind->data + (size_t)pos * es, es)))
        return st;
    if (ind->dtype == GF_INT32) {
        int32_t v32;
        memcpy(&v32, &v, 4);
        v = v32;
    }
    return gf_index_error(a, "indices", (size_t)pos, v, x->dims[ax], ax);
}

/* ---- the table ------------------------------------------------------------------- */

#define KERNEL(OP, NAME, WS)                                                                \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_" #NAME,       \
     .supports = ly_supports, .workspace = WS, .run = run_##NAME}
#define VIEW(OP, NAME)                                                                      \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_" #NAME,       \
     .supports = ly_supports, .run = run_view}

static const struct gf_kernel kernels[] = {
    VIEW(RESHAPE, reshape),
    VIEW(FLATTEN, flatten),
    VIEW(SQUEEZE, squeeze),
    VIEW(UNSQUEEZE, unsqueeze),
    KERNEL(TRANSPOSE, transpose, NULL),
    KERNEL(SLICE, slice, NULL),
    KERNEL(EXPAND, expand, NULL),
    KERNEL(CONCAT, concat, NULL),
    KERNEL(SPLIT, split, NULL),
    KERNEL(GATHER, gather, ws_gather),
};

const struct gf_kernel_table gf_cuda_layout_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
