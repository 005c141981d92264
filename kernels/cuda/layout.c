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
 *   backward   GatherGrad (indices read on the host: summed in index order, as the
 *              CPU), SliceGrad (fp32, fp64)
 *
 * Shape-like inputs (Reshape's shape, Squeeze's axes, Slice's starts ...,
 * Split's sizes, Expand's shape) are read through `host`: `supports`
 * declines a node whose such input has none.  Indices are checked on the
 * host when they have a host copy; otherwise the kernel flags the first bad
 * one in the workspace and the host reads it back.  The rules follow
 * kernels/opencl/layout.c; checks and messages kernels/cpu/layout.c and
 * grad.c.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu.h"
#include "launch_fused.h"

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
    case GF_OP_PAD: return 0xe; /* pads, constant_value, axes */
    case GF_OP_SLICE_GRAD: return 0x3e;
    case GF_OP_GATHER_GRAD: return 0x6; /* shape, indices */
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
        bool index = !(n->op == GF_OP_PAD && i == 2); /* Pad's constant_value: data */
        if ((slots >> i & 1) && given && (!in[i].host || (index && !gf_is_index_type(in[i].dtype))))
            return false;
        if (i > 0 && n->op == GF_OP_CONCAT && in[i].dtype != in[0].dtype)
            return false;
    }
    if (n->op == GF_OP_GATHER && (n_in < 2 || !gf_is_index_type(in[1].dtype)))
        return false;
    if (n->op == GF_OP_GATHER_ND && (n_in < 2 || !in[1].host || !gf_is_index_type(in[1].dtype)))
        return false;
    if (n->op == GF_OP_GATHER_GRAD && (n_in < 3 || !gf_is_index_type(in[2].dtype)))
        return false;
    /* the backward ops take the float types (the CPU's: fp32, fp64; GatherGrad fp32) */
    if (n->op == GF_OP_GATHER_GRAD)
        return in[0].dtype == GF_FLOAT;
    if (n->op == GF_OP_SLICE_GRAD)
        return in[0].dtype == GF_FLOAT || in[0].dtype == GF_DOUBLE;
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

/* ---- Pad ---------------------------------------------------------------------------- */

static enum gf_status run_pad(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int mode, r = x->rank;
    int64_t pb[GF_MAX_RANK], pe[GF_MAX_RANK], dims[GF_MAX_RANK];
    int64_t pads[GF_MAX_INTS], axes[GF_MAX_INTS];
    size_t np = 0, na = 0;
    bool given = false, has_axes = false;
    struct gf_cu_pad_geom p = {.rank = r};
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_int_list(a, 1, "pads", "pads", pads, &np, &given)) ||
        (st = gf_int_list(a, 3, NULL, "axes", axes, &na, &has_axes)) ||
        (st = gf_pad_plan(a, pads, np, axes, na, has_axes, &mode, pb, pe, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    size_t es = move_size(x->dtype), n = a->out[0].nelem;
    if (gf_has_input(a, 2) && a->in[2].nelem) {
        if (a->in[2].dtype != x->dtype || !a->in[2].host)
            return gf_kernel_error(a, GF_ERR_INVALID, "constant_value is %s, not the data's %s "
                                   "on the host", gf_dtype_name(a->in[2].dtype),
                                   gf_dtype_name(x->dtype));
        memcpy(&p.fill, a->in[2].host, es);
    } else if (gf_node_attr(a->node, "value")) {
        if (x->dtype != GF_FLOAT)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "attribute 'value' on %s data",
                                   gf_dtype_name(x->dtype));
        float v = gf_node_attr_float(a->node, "value", 0);
        memcpy(&p.fill, &v, sizeof(v));
    }
    if (n == 0)
        return GF_OK;
    p.mode = mode;
    gf_strides_of(r, x->dims, p.sx);
    for (int k = 0; k < r; k++) {
        p.dims[k] = dims[k];
        p.crop[k] = pb[k] < 0 ? -pb[k] : 0;
        p.lead[k] = pb[k] > 0 ? pb[k] : 0;
        p.keep[k] = x->dims[k] - p.crop[k] - (pe[k] < 0 ? -pe[k] : 0);
    }
    cudaError_t e = gf_cu_pad(gf_cu_stream(a), (int)es, x->data, a->out[0].data, &p,
                              (int64_t)n);
    return gf_cu_check(a, e, "Pad kernel");
}

/* ---- GatherND (indices on the host) ---------------------------------------------- */

/* One int64 data offset per index tuple. */
static size_t ws_gather_nd(const struct gf_kernel_args *a)
{
    size_t t = 1;
    if (a->n_in >= 2)
        t = gf_dims_prod(a->in[1].dims, 0, a->in[1].rank > 0 ? a->in[1].rank - 1 : 0);
    return t * sizeof(int64_t) > 64 ? t * sizeof(int64_t) : 64;
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
    for (size_t t = 0; t < p.tuples; t++) {
        size_t o = p.per_batch ? t / p.per_batch * p.batch : 0;
        for (int j = 0; j < p.k; j++) {
            int64_t v = gf_int_at(ind, ind->host, t * (size_t)p.k + (size_t)j);
            int64_t d = x->dims[p.b + j];
            o += (size_t)((v < 0 ? v + d : v) * xs[p.b + j]);
        }
        off[t] = (int64_t)o;
    }
    struct gf_backend *be = a->backend;
    st = be->ops->copy_in(be, a->workspace, off, p.tuples * sizeof(int64_t));
    free(off);
    if (st)
        return st;
    cudaError_t e = gf_cu_gather_nd(gf_cu_stream(a), (int)move_size(x->dtype), x->data,
                                    a->workspace, a->out[0].data, (int64_t)p.slice,
                                    (int64_t)a->out[0].nelem);
    return gf_cu_check(a, e, "GatherND kernel");
}

/* ---- GatherGrad(dY, shape, indices): out [pre, N, post] ------------------------------ */

/* The CSR of the indices: start[N + 1] then order[ni], int64. */
static size_t ws_gather_grad(const struct gf_kernel_args *a)
{
    if (a->n_in < 3 || a->n_out < 1)
        return 64;
    const struct gf_tview *o = &a->out[0];
    int64_t ax = gf_node_attr_int(a->node, "axis", 0);
    ax = ax < 0 ? ax + o->rank : ax;
    size_t n = ax >= 0 && ax < o->rank ? (size_t)o->dims[ax] : 0;
    size_t csr = (n + 1 + a->in[2].nelem) * sizeof(int64_t);
    return csr > 64 ? csr : 64;
}

static enum gf_status run_gather_grad(const struct gf_kernel_args *a)
{
    enum gf_status st = gf_require_inputs(a, 3);
    if (st || (st = gf_check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *ind = &a->in[2];
    int ax;
    if ((st = gf_check_dtype(a, "output 0", o->dtype, g->dtype)) ||
        (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), o->rank, &ax)))
        return st;
    if (g->dtype != GF_FLOAT)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY is %s, expected float",
                               gf_dtype_name(g->dtype));
    if (!gf_is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices (input 2) must be int32 or int64");
    size_t pre = gf_dims_prod(o->dims, 0, ax), n = (size_t)o->dims[ax];
    size_t post = gf_dims_prod(o->dims, ax + 1, o->rank), ni = ind->nelem;
    if (g->nelem != pre * ni * post)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, expected %zu", g->nelem,
                               pre * ni * post);
    struct gf_backend *be = a->backend;
    /* indices made on the device (GPT-2's position ids) are read back: the
     * lists are built on the host either way (and the node, which waits
     * for the copy, runs outside a CUDA graph) */
    struct gf_tview hv = *ind;
    void *read = NULL;
    if (!ind->host && ni) {
        if (!(read = malloc(gf_tview_bytes(ind))))
            return gf_kernel_error(a, GF_ERR_NOMEM, "no memory for the indices");
        if ((st = be->ops->copy_out(be, read, ind->data, gf_tview_bytes(ind)))) {
            free(read);
            return st;
        }
        hv.host = read;
    }
    ind = &hv;
    if ((st = gf_check_indices(a, ind, (int64_t)n, ax)) || o->nelem == 0 || !a->workspace) {
        free(read);
        return st || o->nelem == 0 ? st : gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    }
    /* start[k]: the first position in order[] of index value k */
    int64_t *start = calloc(n + 1 + ni + 1, sizeof(int64_t)), *order = start + n + 1;
    if (!start) {
        free(read);
        return gf_kernel_error(a, GF_ERR_NOMEM, "no memory for the index lists");
    }
    for (size_t i = 0; i < ni; i++) {
        int64_t k = gf_int_at(ind, ind->host, i);
        start[(k < 0 ? k + (int64_t)n : k) + 1]++;
    }
    for (size_t k = 0; k < n; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < ni; i++) { /* start[k] walks to start[k + 1] */
        int64_t k = gf_int_at(ind, ind->host, i);
        k = k < 0 ? k + (int64_t)n : k;
        order[start[k]++] = (int64_t)i;
    }
    for (size_t k = n; k > 0; k--)
        start[k] = start[k - 1];
    start[0] = 0;
    free(read);
    st = be->ops->copy_in(be, a->workspace, start, (n + 1 + ni) * sizeof(int64_t));
    free(start);
    if (st)
        return st;
    cudaError_t e = gf_cu_gather_grad(gf_cu_stream(a), g->data, a->workspace, o->data,
                                      (int64_t)pre, (int64_t)ni, (int64_t)n, (int64_t)post);
    return gf_cu_check(a, e, "GatherGrad kernel");
}

/* ---- SliceGrad(dY, shape, starts, ends, axes?, steps?): out has the data's shape ---- */

static enum gf_status run_slice_grad(const struct gf_kernel_args *a)
{
    enum gf_status st = gf_require_inputs(a, 4);
    if (st || (st = gf_check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int r = o->rank;
    struct gf_cu_sg_geom p = {.rank = r};
    if ((st = gf_check_dtype(a, "output 0", o->dtype, g->dtype)))
        return st;
    if (g->rank != r)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has rank %d, the data %d", g->rank, r);
    if ((st = gf_slice_plan(a, 2, r, o->dims, p.first, p.step, p.gdims)))
        return st;
    for (int d = 0; d < r; d++) {
        if (p.gdims[d] != g->dims[d])
            return gf_kernel_error(a, GF_ERR_INVALID, "the slice takes %lld elements on axis "
                                   "%d, dY has %lld", (long long)p.gdims[d], d,
                                   (long long)g->dims[d]);
        p.dims[d] = o->dims[d];
    }
    if (o->nelem == 0)
        return GF_OK;
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
    KERNEL(PAD, pad, NULL),
    KERNEL(GATHER_ND, gather_nd, ws_gather_nd),
    KERNEL(GATHER_GRAD, gather_grad, ws_gather_grad),
    KERNEL(SLICE_GRAD, slice_grad, NULL),
};

const struct gf_kernel_table gf_cuda_layout_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
