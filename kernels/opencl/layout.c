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

/* Element i of an int32/int64 input's host copy. */
static int64_t ival(const struct gf_tview *t, size_t i)
{
    return gf_int_at(t, t->host, i);
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
    size_t n = gf_dims_prod(dims, 0, rank);
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
        if ((slots >> i & 1) && given && (!in[i].host || (index && !gf_is_index_type(in[i].dtype))))
            return false;
        if (i > 0 && n->op == GF_OP_CONCAT && in[i].dtype != in[0].dtype)
            return false;
    }
    if (n->op == GF_OP_GATHER || n->op == GF_OP_GATHER_GRAD) {
        size_t ix = n->op == GF_OP_GATHER ? 1 : 2;
        if (n_in <= ix || !gf_is_index_type(in[ix].dtype))
            return false;
    }
    /* the backward ops take the float types (the CPU: fp32, fp64) */
    bool grad = n->op == GF_OP_GATHER_GRAD || n->op == GF_OP_SLICE_GRAD;
    return !grad || gf_cl_storage_opt(in[0].dtype);
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: a copy once the shape checks ----------- */

static enum gf_status finish_copy(const struct gf_kernel_args *a, int rank, const int64_t *dims)
{
    enum gf_status st = gf_check_out_dims(a, 0, rank, dims);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
    if (st == GF_OK && a->out[0].nelem)
        st = a->backend->ops->copy(a->backend, a->out[0].data, a->in[0].data,
                                   gf_tview_bytes(&a->in[0]));
    return st;
}

/* Reshape Flatten Squeeze Unsqueeze */
static enum gf_status run_view(const struct gf_kernel_args *a)
{
    int r;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_view_dims(a, &r, dims);
    return st ? st : finish_copy(a, r, dims);
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
    const struct gf_tview *x = &a->in[0];
    int r = x->rank, perm[GF_MAX_RANK];
    int64_t dims[GF_MAX_RANK], stride[GF_MAX_RANK], st2[2][GF_MAX_RANK];
    enum gf_status st = gf_transpose_perm(a, perm, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)) || a->out[0].nelem == 0)
        return st;
    gf_strides_of(r, x->dims, stride);
    for (int k = 0; k < r; k++)
        st2[0][k] = stride[perm[k]];
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
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    int64_t sx[GF_MAX_RANK], sy[GF_MAX_RANK], base = 0;
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_slice_plan(a, 1, r, x->dims, first, step, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    gf_strides_of(r, x->dims, stride);
    gf_strides_of(r, dims, sy);
    for (int k = 0; k < r; k++) {
        base += first[k] * stride[k];
        sx[k] = step[k] * stride[k];
    }
    return copy_nd(a, x->dtype, x->data, base, a->out[0].data, 0, r, dims, sx, sy);
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r;
    int64_t dims[GF_MAX_RANK], sx[GF_MAX_RANK], sy[GF_MAX_RANK];
    enum gf_status st = gf_expand_dims(a, &r, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    gf_bcast_strides(x, &a->out[0], sx);
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
    int mode, r = x->rank;
    int64_t pb[GF_MAX_RANK], pe[GF_MAX_RANK], dims[GF_MAX_RANK], lead[GF_MAX_RANK];
    int64_t crop[GF_MAX_RANK], keep[GF_MAX_RANK], sx[GF_MAX_RANK];
    int64_t pads[GF_MAX_INTS], axes[GF_MAX_INTS];
    size_t np = 0, na = 0;
    bool given = false, has_axes = false;
    uint64_t fill = 0;
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_int_list(a, 1, "pads", "pads", pads, &np, &given)) ||
        (st = gf_int_list(a, 3, NULL, "axes", axes, &na, &has_axes)) ||
        (st = gf_pad_plan(a, pads, np, axes, na, has_axes, &mode, pb, pe, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    size_t es = gf_dtype_size(x->dtype), n = a->out[0].nelem;
    if (gf_has_input(a, 2) && a->in[2].nelem) {
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
    gf_strides_of(r, x->dims, sx);
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
        t = gf_dims_prod(a->in[1].dims, 0, a->in[1].rank > 0 ? a->in[1].rank - 1 : 0);
    return t * sizeof(cl_int) > 64 ? t * sizeof(cl_int) : 64;
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
    for (size_t t = 0; t < p.tuples; t++) {
        size_t o = p.per_batch ? t / p.per_batch * p.batch : 0;
        for (int j = 0; j < p.k; j++) {
            int64_t v = ival(ind, t * (size_t)p.k + (size_t)j), d = x->dims[p.b + j];
            o += (size_t)((v < 0 ? v + d : v) * xs[p.b + j]);
        }
        off[t] = (cl_int)o;
    }
    err = clEnqueueUnmapMemObject(cq, (cl_mem)a->workspace, off, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL unmap failed: %s",
                               gf_cl_strerror(err));
    char name[20];
    snprintf(name, sizeof(name), "gather_nd_%s", size_sfx(x->dtype));
    cl_kernel kn = gf_cl_kernel(a->backend, LY_FILE, name, NULL);
    cl_int cs = (cl_int)p.slice, cn = (cl_int)a->out[0].nelem;
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
    int ax;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_concat_dims(a, &ax, dims);
    if (st)
        return st;
    /* out [outer, D * inner]: input j is the [outer, dj * inner] block at
     * column pos (in elements) */
    int r = x0->rank;
    int64_t outer = (int64_t)gf_dims_prod(dims, 0, ax);
    int64_t inner = (int64_t)gf_dims_prod(dims, ax + 1, r);
    int64_t pos = 0, pitch = dims[ax] * inner;
    for (size_t j = 0; j < a->n_in && st == GF_OK; j++) {
        int64_t len = a->in[j].dims[ax] * inner, bd[2] = {outer, len};
        int64_t sx[2] = {len, 1}, sy[2] = {pitch, 1};
        st = copy_nd(a, x0->dtype, a->in[j].data, 0, a->out[0].data, pos, 2, bd, sx, sy);
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
    /* x [outer, dim * inner]: output j is the block at column pos */
    int64_t outer = (int64_t)gf_dims_prod(x->dims, 0, ax);
    int64_t inner = (int64_t)gf_dims_prod(x->dims, ax + 1, x->rank);
    int64_t pos = 0, pitch = x->dims[ax] * inner;
    for (size_t j = 0; j < a->n_out; j++) {
        int64_t dims[GF_MAX_RANK];
        bool omitted;
        if ((st = gf_split_out(a, ax, j, dims, &omitted)))
            return st;
        int64_t len = dims[ax] * inner, bd[2] = {outer, len};
        int64_t sx[2] = {pitch, 1}, sy[2] = {len, 1};
        if (!omitted &&
            (st = copy_nd(a, x->dtype, x->data, pos, a->out[j].data, 0, 2, bd, sx, sy)))
            return st;
        pos += len;
    }
    return GF_OK;
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
    return gf_index_error(a, "indices", (size_t)pos, v, dim, axis);
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
    snprintf(name, sizeof(name), "gather_%s_%s", size_sfx(x->dtype),
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
    if (!gf_cl_storage_opt(g->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "dY is %s, expected float, float16 or "
                               "bfloat16", gf_dtype_name(g->dtype));
    if (!gf_is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices (input 2) must be int32 or int64");
    size_t pre = gf_dims_prod(o->dims, 0, ax), n = (size_t)o->dims[ax];
    size_t post = gf_dims_prod(o->dims, ax + 1, o->rank), ni = ind->nelem;
    if (g->nelem != pre * ni * post)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, expected %zu", g->nelem,
                               pre * ni * post);
    bool host = ind->host != NULL;
    if (host && (st = gf_check_indices(a, ind, (int64_t)n, ax)))
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
    enum gf_status st = gf_require_inputs(a, 4);
    if (st || (st = gf_check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int r = o->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK];
    if ((st = gf_check_dtype(a, "output 0", o->dtype, g->dtype)))
        return st;
    if (g->rank != r)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has rank %d, the data %d", g->rank, r);
    if ((st = gf_slice_plan(a, 2, r, o->dims, first, step, dims)))
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
#define VIEW(OP, NAME)                                                                      \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl_" #NAME,     \
     .supports = ly_supports, .run = run_view, .n_knobs = 1, .knobs = ly_knobs}

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
    KERNEL(GATHER, gather, ws_gather, ly_knobs),
    KERNEL(GATHER_GRAD, gather_grad, ws_gather_grad, ly_knobs),
    KERNEL(SLICE_GRAD, slice_grad, NULL, ly_knobs),
};

const struct gf_kernel_table gf_opencl_layout_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
