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
#include <stdlib.h>

#include "device_common.h"
#include "ocl.h"

#define LY_FILE "layout.cl"

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

static const struct gf_dev_caps caps = {.name = "OpenCL", .half = true, .int_index = true};

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
    size_t n = gf_dims_prod(dims, 0, rank);
    if (n == 0)
        return GF_OK;
    if (!gf_cl_nd_init(&nd, rank, dims, 2, st) || xbase > INT_MAX || ybase > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                               "kernels");
    char name[16];
    snprintf(name, sizeof(name), "copy_nd_%s", gf_dev_size_sfx(t));
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

/* The device rules (device_common.c); the backward ops take the float
 * types (the CPU: fp32, fp64). */
static bool ly_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool grad = n->op == GF_OP_GATHER_GRAD || n->op == GF_OP_SLICE_GRAD;
    return gf_dev_layout_supports(&caps, n, in, n_in) &&
           (!grad || gf_dev_float(&caps, in[0].dtype));
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
    snprintf(name, sizeof(name), "transpose_tile_%s", gf_dev_size_sfx(a->in[0].dtype));
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
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t dims[GF_MAX_RANK], st2[2][GF_MAX_RANK];
    enum gf_status st = gf_dev_transpose_walk(a, dims, st2[0]);
    if (st || a->out[0].nelem == 0)
        return st;
    gf_strides_of(r, dims, st2[1]);
    struct gf_cl_nd nd;
    if (gf_cl_nd_init(&nd, r, dims, 2, st2) && transpose_tiled(a, &nd, &st))
        return st;
    return copy_nd(a, x->dtype, x->data, 0, a->out[0].data, 0, r, dims, st2[0], st2[1]);
}

/* ---- Slice, Expand --------------------------------------------------------------- */

static enum gf_status run_slice(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK], sy[GF_MAX_RANK], base;
    enum gf_status st = gf_dev_slice_walk(a, dims, &base, sx);
    if (st)
        return st;
    gf_strides_of(r, dims, sy);
    return copy_nd(a, x->dtype, x->data, base, a->out[0].data, 0, r, dims, sx, sy);
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r;
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK], sy[GF_MAX_RANK];
    enum gf_status st = gf_dev_expand_walk(a, &r, dims, sx);
    if (st)
        return st;
    gf_strides_of(r, dims, sy);
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
    struct gf_dev_pad p;
    enum gf_status st = gf_dev_pad_plan(a, &p);
    size_t es = gf_dtype_size(x->dtype), n = a->out[0].nelem;
    int r = p.rank;
    if (st || n == 0)
        return st;
    if (r > 8 || n > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL kernels");
    for (int k = 0; k < r; k++)
        if (p.dims[k] > INT_MAX || p.sx[k] > INT_MAX)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                                   "kernels");
    char name[16];
    snprintf(name, sizeof(name), "pad_nd_%s", gf_dev_size_sfx(x->dtype));
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int cn = (cl_int)n, cr = r, cm = p.mode;
    cl_int8 vd = int8_of(p.dims, r), vl = int8_of(p.lead, r), vc = int8_of(p.crop, r);
    cl_int8 vk = int8_of(p.keep, r), vs = int8_of(p.sx, r);
    cl_mem xm = (cl_mem)x->data, ym = (cl_mem)a->out[0].data;
    if (!k || !gf_cl_args(k, 11, sizeof(cl_mem), &xm, sizeof(cl_mem), &ym, sizeof(cn), &cn,
                          sizeof(cr), &cr, sizeof(vd), &vd, sizeof(vl), &vl, sizeof(vc), &vc,
                          sizeof(vk), &vk, sizeof(vs), &vs, sizeof(cm), &cm, es, &p.fill))
        return gf_cl_fail(a, name);
    return run_1d(a, k, n);
}

/* ---- GatherND (indices on the host) ---------------------------------------------- */

/* indices [B..., N..., k] address slices of data [B..., D0..Dk-1, S...];
 * the workspace holds each tuple's data offset. */
static size_t ws_gather_nd(const struct gf_kernel_args *a)
{
    return gf_dev_gather_nd_workspace(a, sizeof(cl_int));
}

static enum gf_status run_gather_nd(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    struct gf_nd_plan p;
    int64_t xs[GF_MAX_RANK];
    enum gf_status st = gf_gather_nd_plan(a, &p);
    if (st || a->out[0].nelem == 0)
        return st;
    if (a->out[0].nelem > INT_MAX || x->nelem > INT_MAX || !a->workspace)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL kernels");
    gf_strides_of(x->rank, x->dims, xs);
    cl_command_queue cq = gf_cl_of(a->backend)->queue;
    cl_int err;
    cl_int *off = clEnqueueMapBuffer(cq, (cl_mem)a->workspace, CL_TRUE, CL_MAP_WRITE, 0,
                                     p.tuples * sizeof(cl_int), 0, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL map failed: %s", gf_cl_strerror(err));
    /* the tuples' data offsets (the indices are checked) */
    for (size_t t = 0; t < p.tuples; t++)
        off[t] = (cl_int)gf_dev_nd_tuple_offset(&p, x, ind, xs, t);
    err = clEnqueueUnmapMemObject(cq, (cl_mem)a->workspace, off, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL unmap failed: %s",
                               gf_cl_strerror(err));
    char name[20];
    snprintf(name, sizeof(name), "gather_nd_%s", gf_dev_size_sfx(x->dtype));
    cl_kernel kn = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int cs = (cl_int)p.slice, cn = (cl_int)a->out[0].nelem;
    cl_mem ws = (cl_mem)a->workspace;
    if (!kn || !gf_cl_args(kn, 5, sizeof(cl_mem), &x->data, sizeof(cl_mem), &ws,
                           sizeof(cl_mem), &a->out[0].data, sizeof(cs), &cs, sizeof(cn), &cn))
        return gf_cl_fail(a, name);
    return run_1d(a, kn, a->out[0].nelem);
}

/* ---- Concat and Split: blocks along an axis ------------------------------------- */

/* A 2-d copy (gf_copy2d_fn, bytes) as copy_nd's walk over elements. */
static enum gf_status copy_2d(const struct gf_kernel_args *a, void *dst, size_t doff,
                              size_t dpitch, const void *src, size_t soff, size_t spitch,
                              size_t width, size_t height)
{
    enum gf_dtype t = a->in[0].dtype;
    int64_t es = (int64_t)gf_dtype_size(t), len = (int64_t)width / es;
    int64_t bd[2] = {(int64_t)height, len}, sx[2] = {(int64_t)spitch / es, 1};
    int64_t sy[2] = {(int64_t)dpitch / es, 1};
    return copy_nd(a, t, (cl_mem)src, (int64_t)soff / es, (cl_mem)dst, (int64_t)doff / es, 2,
                   bd, sx, sy);
}

static enum gf_status run_concat(const struct gf_kernel_args *a)
{
    return gf_concat_blocks(a, copy_2d);
}

static enum gf_status run_split(const struct gf_kernel_args *a)
{
    return gf_split_blocks(a, copy_2d);
}

/* ---- Gather, GatherGrad: bad indices ------------------------------------------------- */

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
    uint64_t v = 0;
    size_t es = gf_dtype_size(ind->dtype);
    cl_int err = clEnqueueReadBuffer(gf_cl_of(be)->queue, (cl_mem)ind->data, CL_TRUE,
                                     (size_t)pos * es, es, &v, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL read failed: %s",
                               gf_cl_strerror(err));
    return gf_index_error(a, "indices", (size_t)pos, gf_int_at(ind, &v, 0), dim, axis);
}

/* ---- Gather ---------------------------------------------------------------------- */

static enum gf_status run_gather(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    int ax, r = x->rank;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_gather_dims(a, &ax, dims); /* the indices too, on the host */
    bool host = ind->host != NULL;
    if (st || a->out[0].nelem == 0)
        return st;
    if (a->out[0].nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output too large for the OpenCL kernel");
    if (!host && (!a->workspace || (st = flag_reset(a))))
        return st ? st : gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the index check");
    char name[24];
    snprintf(name, sizeof(name), "gather_%s_%s", gf_dev_size_sfx(x->dtype),
             ind->dtype == GF_INT64 ? "i64" : "i32");
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_mem flag = host ? NULL : (cl_mem)a->workspace;
    cl_int ni = (cl_int)ind->nelem, na = (cl_int)x->dims[ax];
    cl_int post = (cl_int)gf_dims_prod(x->dims, ax + 1, r), n = (cl_int)a->out[0].nelem;
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
    return gf_dev_gather_grad_workspace(a, sizeof(cl_int));
}

/* Fills the workspace (mapped) with the indices' CSR as ints: start[N + 1]
 * and order[ni] (gf_dev_index_csr). */
static enum gf_status build_csr(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                size_t n)
{
    cl_command_queue q = gf_cl_of(a->backend)->queue;
    size_t len = n + 1 + ind->nelem;
    int64_t *csr = gf_dev_index_csr(ind, n);
    if (!csr)
        return gf_kernel_error(a, GF_ERR_NOMEM, "no memory for the index lists");
    cl_int err;
    cl_int *w = clEnqueueMapBuffer(q, (cl_mem)a->workspace, CL_TRUE, CL_MAP_WRITE, 0,
                                   len * sizeof(cl_int), 0, NULL, NULL, &err);
    if (err == CL_SUCCESS) {
        for (size_t i = 0; i < len; i++)
            w[i] = (cl_int)csr[i];
        err = clEnqueueUnmapMemObject(q, (cl_mem)a->workspace, w, 0, NULL, NULL);
        free(csr);
        if (err != CL_SUCCESS)
            return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL unmap failed: %s",
                                   gf_cl_strerror(err));
        return GF_OK;
    }
    free(csr);
    return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL map failed: %s", gf_cl_strerror(err));
}

static enum gf_status run_gather_grad(const struct gf_kernel_args *a)
{
    struct gf_dev_gather_grad p;
    enum gf_status st = gf_dev_gather_grad_plan(a, &caps, &p);
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *ind = &a->in[2];
    bool host = ind->host != NULL;
    if (st || o->nelem == 0)
        return st;
    if (o->nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output too large for the OpenCL kernel");
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if ((st = host ? build_csr(a, ind, p.n) : flag_reset(a)))
        return st;
    char name[32];
    snprintf(name, sizeof(name), "gather_grad_%s",
             host ? "csr" : ind->dtype == GF_INT64 ? "scan_i64" : "scan_i32");
    cl_kernel k = gf_cl_kernel(a->backend, LY_FILE, name, gf_cl_storage_opt(g->dtype));
    cl_int cni = (cl_int)p.ni, cn = (cl_int)p.n, cpost = (cl_int)p.post;
    cl_int total = (cl_int)o->nelem;
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
    return host ? GF_OK : flag_check(a, ind, (int64_t)p.n, p.axis);
}

/* ---- SliceGrad(dY, shape, starts, ends, axes?, steps?): out has the data's shape ---- */

static enum gf_status run_slice_grad(const struct gf_kernel_args *a)
{
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int r = o->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK];
    enum gf_status st = gf_dev_slice_grad_plan(a, first, step, dims);
    if (st)
        return st;
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
    snprintf(name, sizeof(name), "slice_grad_%s", gf_dev_size_sfx(g->dtype));
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
#define VIEW(OP, NAME)                                                                      \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl_" #NAME,     \
     .supports = ly_supports, .run = gf_dev_view_run, .n_knobs = 1, .knobs = ly_knobs}

static const struct gf_kernel kernels[] = {
    VIEW(RESHAPE, reshape),
    VIEW(FLATTEN, flatten),
    VIEW(SQUEEZE, squeeze),
    VIEW(UNSQUEEZE, unsqueeze),
    KERNEL(TRANSPOSE, transpose, NULL, tr_knobs),
    KERNEL(SLICE, slice, NULL, ly_knobs),
    KERNEL(EXPAND, expand, NULL, ly_knobs),
    KERNEL(PAD, pad, NULL, ly_knobs),
    KERNEL(GATHER_ND, gather_nd, ws_gather_nd, ly_knobs),
    KERNEL(CONCAT, concat, NULL, ly_knobs),
    KERNEL(SPLIT, split, NULL, ly_knobs),
    KERNEL(GATHER, gather, gf_dev_gather_workspace, ly_knobs),
    KERNEL(GATHER_GRAD, gather_grad, ws_gather_grad, ly_knobs),
    KERNEL(SLICE_GRAD, slice_grad, NULL, ly_knobs),
};

const struct gf_kernel_table gf_opencl_layout_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
