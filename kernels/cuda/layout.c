/*
 * CUDA kernels: the layout family (device code: layout.cu), any
 * 1/2/4/8-byte type.
 *
 *   copies     Reshape Flatten Squeeze Unsqueeze (a device copy once the
 *              shape checks)
 *   remaps     Transpose, Slice, Expand (one strided copy), Concat, Split
 *              (cudaMemcpy2DAsync per input / output)
 *   indexing   Gather (int32 / int64 indices), GatherND (indices on the host)
 *   padding    Pad (constant, reflect, edge, wrap)
 *   backward   GatherGrad (fp32, fp16, bf16: the positions of each index
 *              value listed on the device by a stable radix sort, summed in
 *              position order in fp32, as the CPU, 16-bit rounded once),
 *              SliceGrad (fp32, fp64, fp16, bf16)
 *
 * Shape-like inputs (Reshape's shape, Squeeze's axes, Slice's starts ...,
 * Split's sizes, Expand's shape) are read through `host`: `supports`
 * declines a node whose such input has none.  Indices are checked on the
 * host when they have a host copy; otherwise the kernel flags the first bad
 * one: in a slot of the executor's deferred checks during a session's run
 * (read after the run: nothing waits, a CUDA graph may hold the node),
 * else in the workspace, which the host reads back.  The rules and checks
 * are the device backends' (kernels/device_common.c) and every backend's
 * (layout_checks.c), the messages those of kernels/cpu/layout.c and grad.c.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu.h"
#include "device_common.h"
#include "launch_fused.h"

static const struct gf_dev_caps caps = {.name = "CUDA", .half = true, .int_index = false};

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
    size_t es = gf_dev_move_size(dt);
    cudaError_t e = gf_cu_copy_nd(gf_cu_stream(a), (int)es, (const char *)x + base * (int64_t)es,
                                  y, &nd, (int64_t)shape.nelem);
    return gf_cu_check(a, e, "strided copy");
}

/* ---- supports ------------------------------------------------------------------- */

/* The device rules (device_common.c); here GatherND's indices on the
 * host (Gather and GatherGrad check theirs on the device without one), and
 * the backward ops' types: SliceGrad moves fp32, fp64, fp16, bf16;
 * GatherGrad adds fp32, fp16, bf16 (in fp32). */
static bool ly_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (!gf_dev_layout_supports(&caps, n, in, n_in))
        return false;
    if (n->op == GF_OP_GATHER_ND && (n_in < 2 || !in[1].host || !gf_is_index_type(in[1].dtype)))
        return false;
    if (n->op == GF_OP_GATHER_GRAD) /* indices without a host copy: checked on the device */
        return gf_dev_float(&caps, in[0].dtype);
    if (n->op == GF_OP_SLICE_GRAD)
        return gf_dev_float(&caps, in[0].dtype) || in[0].dtype == GF_DOUBLE;
    return true;
}

/* ---- Transpose, Slice, Expand ------------------------------------------------------ */

static enum gf_status run_transpose(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK];
    enum gf_status st = gf_dev_transpose_walk(a, dims, sx);
    if (st || a->out[0].nelem == 0)
        return st;
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, x->rank, dims, sx);
}

static enum gf_status run_slice(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK], base;
    enum gf_status st = gf_dev_slice_walk(a, dims, &base, sx);
    if (st || a->out[0].nelem == 0)
        return st;
    return copy_nd(a, x->dtype, x->data, base, a->out[0].data, x->rank, dims, sx);
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r;
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK];
    enum gf_status st = gf_dev_expand_walk(a, &r, dims, sx);
    if (st || a->out[0].nelem == 0)
        return st;
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, r, dims, sx);
}

/* ---- Concat, Split: [outer, len] blocks of a [outer, pitch] tensor --------------------- */

static enum gf_status copy_2d(const struct gf_kernel_args *a, void *dst, size_t doff,
                              size_t dpitch, const void *src, size_t soff, size_t spitch,
                              size_t width, size_t height)
{
    if (!width || !height)
        return GF_OK;
    cudaError_t e = cudaMemcpy2DAsync((char *)dst + doff, dpitch, (const char *)src + soff,
                                      spitch, width, height, cudaMemcpyDeviceToDevice,
                                      gf_cu_stream(a));
    return gf_cu_check(a, e, "2-d copy");
}

static enum gf_status run_concat(const struct gf_kernel_args *a)
{
    return gf_concat_blocks(a, copy_2d);
}

static enum gf_status run_split(const struct gf_kernel_args *a)
{
    return gf_split_blocks(a, copy_2d);
}

/* ---- Gather -------------------------------------------------------------------------- */

/* A deferred index check (Gather, GatherGrad): where the indices are, and
 * the axis they index. */
struct index_check {
    const void *ind;
    enum gf_dtype dtype;
    int64_t dim;
    int axis;
};

/* The message of the first bad index, its value read from the device. */
static enum gf_status index_report(const struct gf_kernel_args *a, const struct gf_cu_check *c,
                                   int pos)
{
    struct index_check k;
    memcpy(&k, c->ctx, sizeof(k));
    struct gf_tview t = {.dtype = k.dtype};
    uint64_t v = 0;
    size_t es = gf_dtype_size(k.dtype);
    cudaError_t e = cudaMemcpy(&v, (const char *)k.ind + (size_t)pos * es, es,
                               cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return gf_cu_check(a, e, "reading a bad index");
    return gf_index_error(a, "indices", (size_t)pos, gf_int_at(&t, &v, 0), k.dim, k.axis);
}

/* The slot for a check of indices without a host copy while the executor
 * defers checks (NULL: check them here). */
static int *defer_index_check(const struct gf_kernel_args *a, const struct gf_tview *ind,
                              int64_t dim, int axis)
{
    struct index_check k = {ind->data, ind->dtype, dim, axis};
    return ind->host ? NULL : gf_cu_defer_check(a, 0, index_report, &k, sizeof(k));
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
    int *slot = defer_index_check(a, ind, x->dims[ax], ax);
    int *flag = ind->host ? NULL : slot ? slot : a->workspace;
    if (!ind->host && !flag)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the index check");
    int big = INT_MAX;
    if (flag && !slot && (st = be->ops->copy_in(be, flag, &big, sizeof(big))))
        return st;
    cudaError_t e = gf_cu_gather(gf_cu_stream(a), (int)gf_dev_move_size(x->dtype), x->data,
                                 ind->data, ind->dtype == GF_INT64, a->out[0].data,
                                 (int64_t)gf_dims_prod(x->dims, 0, ax), (int64_t)ind->nelem,
                                 x->dims[ax], (int64_t)gf_dims_prod(x->dims, ax + 1, r), flag);
    if ((st = gf_cu_check(a, e, "Gather kernel")) || !flag || slot)
        return st; /* a deferred check: read after the run */
    /* the first bad index, if any: its position, then its value */
    int pos = INT_MAX;
    if ((st = be->ops->copy_out(be, &pos, flag, sizeof(pos))) || pos == INT_MAX)
        return st;
    uint64_t v = 0;
    size_t es = gf_dtype_size(ind->dtype);
    if ((st = be->ops->copy_out(be, &v, (const char *)ind->data + (size_t)pos * es, es)))
        return st;
    return gf_index_error(a, "indices", (size_t)pos, gf_int_at(ind, &v, 0), x->dims[ax], ax);
}

/* ---- Pad ---------------------------------------------------------------------------- */

static enum gf_status run_pad(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_dev_pad p;
    enum gf_status st = gf_dev_pad_plan(a, &p);
    size_t n = a->out[0].nelem;
    if (st || n == 0)
        return st;
    struct gf_cu_pad_geom g = {.rank = p.rank, .mode = p.mode, .fill = p.fill};
    memcpy(g.dims, p.dims, sizeof(g.dims));
    memcpy(g.lead, p.lead, sizeof(g.lead));
    memcpy(g.crop, p.crop, sizeof(g.crop));
    memcpy(g.keep, p.keep, sizeof(g.keep));
    memcpy(g.sx, p.sx, sizeof(g.sx));
    cudaError_t e = gf_cu_pad(gf_cu_stream(a), (int)gf_dev_move_size(x->dtype), x->data,
                              a->out[0].data, &g, (int64_t)n);
    return gf_cu_check(a, e, "Pad kernel");
}

/* ---- GatherND (indices on the host) ---------------------------------------------- */

/* One int64 data offset per index tuple. */
static size_t ws_gather_nd(const struct gf_kernel_args *a)
{
    return gf_dev_gather_nd_workspace(a, sizeof(int64_t));
}

static enum gf_status run_gather_nd(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    struct gf_nd_plan p;
    int64_t xs[GF_MAX_RANK];
    enum gf_status st = gf_gather_nd_plan(a, &p); /* the indices checked, on the host */
    if (st || a->out[0].nelem == 0)
        return st;
    if (!ind->host || !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "GatherND needs its indices on the host "
                               "and a workspace");
    gf_strides_of(x->rank, x->dims, xs);
    int64_t *off = malloc(p.tuples * sizeof(int64_t) + 8);
    if (!off)
        return gf_kernel_error(a, GF_ERR_NOMEM, "no memory for %zu offsets", p.tuples);
    for (size_t t = 0; t < p.tuples; t++)
        off[t] = (int64_t)gf_dev_nd_tuple_offset(&p, x, ind, xs, t);
    struct gf_backend *be = a->backend;
    st = be->ops->copy_in(be, a->workspace, off, p.tuples * sizeof(int64_t));
    free(off);
    if (st)
        return st;
    cudaError_t e = gf_cu_gather_nd(gf_cu_stream(a), (int)gf_dev_move_size(x->dtype), x->data,
                                    a->workspace, a->out[0].data, (int64_t)p.slice,
                                    (int64_t)a->out[0].nelem);
    return gf_cu_check(a, e, "GatherND kernel");
}

/* ---- GatherGrad(dY, shape, indices): out [pre, N, post] ------------------------------ */

/* The lists of positions per index value, made on the device (a stable
 * radix sort: layout.cu), then a flag word for the index check. */
static size_t ws_gather_grad(const struct gf_kernel_args *a)
{
    if (a->n_in < 3 || a->n_out < 1)
        return 256;
    const struct gf_tview *o = &a->out[0];
    int64_t ax = gf_node_attr_int(a->node, "axis", 0);
    ax = ax < 0 ? ax + o->rank : ax;
    int64_t n = ax >= 0 && ax < o->rank ? o->dims[ax] : 0;
    return gf_cu_gather_grad_workspace((int64_t)a->in[2].nelem, n) + 256;
}

static enum gf_status run_gather_grad(const struct gf_kernel_args *a)
{
    struct gf_dev_gather_grad p;
    enum gf_status st = gf_dev_gather_grad_plan(a, &caps, &p); /* host indices checked */
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *ind = &a->in[2];
    if (st || o->nelem == 0)
        return st;
    if (p.ni > INT_MAX - 1 || p.n > INT_MAX - 1)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%zu indices into %zu rows exceed the "
                               "kernel's int", p.ni, p.n);
    size_t lists = gf_cu_gather_grad_workspace((int64_t)p.ni, (int64_t)p.n);
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the index lists");
    /* indices without a host copy (made on the device, or a batch's the
     * executor defers the check of) are checked on the device */
    struct gf_backend *be = a->backend;
    int *slot = p.ni ? defer_index_check(a, ind, (int64_t)p.n, p.axis) : NULL;
    int *flag = ind->host || !p.ni ? NULL : slot ? slot : (int *)((char *)a->workspace + lists);
    int big = INT_MAX;
    if (flag && !slot && (st = be->ops->copy_in(be, flag, &big, sizeof(big))))
        return st;
    cudaError_t e = gf_cu_gather_grad(gf_cu_stream(a), gf_dev_type_of(g->dtype), g->data,
                                      ind->data, ind->dtype == GF_INT64, o->data,
                                      (int64_t)p.pre, (int64_t)p.ni, (int64_t)p.n,
                                      (int64_t)p.post, a->workspace, flag);
    if ((st = gf_cu_check(a, e, "GatherGrad kernels")) || !flag || slot)
        return st; /* a deferred check: read after the run */
    int pos = INT_MAX;
    if ((st = be->ops->copy_out(be, &pos, flag, sizeof(pos))) || pos == INT_MAX)
        return st;
    struct index_check k = {ind->data, ind->dtype, (int64_t)p.n, p.axis};
    struct gf_cu_check c;
    memcpy(c.ctx, &k, sizeof(k));
    return index_report(a, &c, pos);
}

/* ---- SliceGrad(dY, shape, starts, ends, axes?, steps?): out has the data's shape ---- */

static enum gf_status run_slice_grad(const struct gf_kernel_args *a)
{
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    struct gf_cu_sg_geom p = {.rank = o->rank};
    enum gf_status st = gf_dev_slice_grad_plan(a, p.first, p.step, p.gdims);
    if (st || o->nelem == 0)
        return st;
    memcpy(p.dims, o->dims, sizeof(int64_t) * (size_t)o->rank);
    cudaError_t e = gf_cu_slice_grad(gf_cu_stream(a), (int)gf_dtype_size(g->dtype), g->data,
                                     o->data, &p, (int64_t)o->nelem);
    return gf_cu_check(a, e, "SliceGrad kernel");
}

/* ---- the table ------------------------------------------------------------------- */

#define KERNEL(OP, NAME, WS)                                                                \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_" #NAME,       \
     .supports = ly_supports, .workspace = WS, .run = run_##NAME}
#define VIEW(OP, NAME)                                                                      \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_" #NAME,       \
     .supports = ly_supports, .run = gf_dev_view_run}

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
    KERNEL(GATHER, gather, gf_dev_gather_workspace),
    KERNEL(PAD, pad, NULL),
    KERNEL(GATHER_ND, gather_nd, ws_gather_nd),
    KERNEL(GATHER_GRAD, gather_grad, ws_gather_grad),
    KERNEL(SLICE_GRAD, slice_grad, NULL),
};

const struct gf_kernel_table gf_cuda_layout_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
