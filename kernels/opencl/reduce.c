/* OpenCL kernels of the reduce family, forward and backward:
 *
 *   ReduceSum ReduceMean ReduceMax SumToShape      any set of axes
 *   Sum                                            variadic, broadcasting
 *   Softmax LogSoftmax SoftmaxGrad LogSoftmaxGrad  along one axis
 *   LayerNormalization LayerNormalizationGrad      rows of the trailing block
 *   SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss and their Grad ops
 *
 * They mirror the CPU kernels (kernels/cpu/reduce.c, grad.c): the same
 * checks and messages, the same definitions, fp32 arithmetic on the device
 * (the CPU sums in double).  An op's float tensors have one type, input
 * 0's: fp32, fp16 or bf16, the program built for that storage
 * (storage.cl), each result rounded once to it; LayerNormalization's Mean
 * and InvStdDev are fp32 (stash_type 1) and so are the workspaces.
 *
 * Rows are reduced by one work-group each (reduce.cl); every sum has a
 * fixed order, including the losses' means (per-position values in the
 * workspace, then one work-group adds them) and LayerNormalizationGrad's
 * dScale / dBias (partial column sums per block of rows in the workspace,
 * then added in order).
 *
 * Labels are checked on the host when the executor has a host copy;
 * otherwise the kernels flag a bad one in the workspace and the host reads
 * the flag back after the launch (one small blocking read).
 *
 * Config space of the row kernels: wg (threads per row: a power of two,
 * capped at the device's and the kernel's limit and at the row length
 * rounded up to a power of two, 32 at least) and vec (elements per load,
 * used when rows are contiguous and their length a multiple of it).
 */
#include <stdio.h>

#include "device_common.h"
#include "ocl.h"

#define FILE_CL "reduce.cl"
#define LOSS_WS_HEAD 4 /* floats before the per-position losses: flag, wsum, padding */
#define LN_PARTS 64    /* blocks of rows of LayerNormalizationGrad's column sums */

/* ---- the config space ------------------------------------------------------------- */

static const int wg_vals[] = {256, 64, 128, 512, 1024};
static const int vec_vals[] = {4, 1, 2};

static const struct gf_config_knob row_knobs[] = {
    {"wg", 5, wg_vals},
    {"vec", 3, vec_vals},
};

/* Knob i of the config (its default without one); -1 when not in the list. */
static int knob(const struct gf_kernel_args *a, size_t i)
{
    int v = a->config ? a->config[i] : row_knobs[i].values[0];
    for (int j = 0; j < row_knobs[i].n_values; j++)
        if (row_knobs[i].values[j] == v)
            return v;
    return -1;
}

static size_t pow2_ceil(size_t n)
{
    size_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* The build options "-DWG=wg -DVEC=vec" and the storage of the op's float
 * tensors (input 0's type) into opts. */
static void build_opts(const struct gf_kernel_args *a, size_t wg, int vec, char *opts,
                       size_t len)
{
    const char *store = gf_cl_storage_opt(a->in[0].dtype);
    store = store ? store : "";
    snprintf(opts, len, "-DWG=%zu -DVEC=%d%s%s", wg, vec, *store ? " " : "", store);
}

/* Kernel `name` of reduce.cl built for rows of n elements: *wg threads per
 * row (see the top of the file), VEC = vec when usable.  cols: the kernel
 * is reduce_cols, whose group is 32 outputs x (wg / 32) slices. */
static cl_kernel row_kernel(const struct gf_kernel_args *a, const char *name, size_t n,
                            int vec, size_t *wg)
{
    struct gf_cl *cl = gf_cl_of(a->backend);
    int want = knob(a, 0);
    if (want < 0 || (vec > 1 && knob(a, 1) < 0)) {
        gf_kernel_error(a, GF_ERR_INVALID, "config is outside the kernel's space");
        return NULL;
    }
    size_t cap = pow2_ceil(n / (size_t)vec);
    *wg = (size_t)want;
    while (*wg > 32 && (*wg > cap || *wg > cl->max_wg))
        *wg /= 2;
    for (;; *wg /= 2) {
        char opts[64];
        build_opts(a, *wg, vec, opts, sizeof(opts));
        cl_kernel k = gf_cl_kernel(a->backend, FILE_CL, name, opts);
        if (!k) {
            gf_cl_fail(a, name);
            return NULL;
        }
        size_t max = 0;
        if (*wg == 1 || clGetKernelWorkGroupInfo(k, cl->device, CL_KERNEL_WORK_GROUP_SIZE,
                                                 sizeof(max), &max, NULL) != CL_SUCCESS ||
            *wg <= max)
            return k;
    }
}

/* The vec knob where rows are contiguous (stride 1) and n a multiple of it. */
static int row_vec(const struct gf_kernel_args *a, size_t n, size_t stride)
{
    int v = knob(a, 1);
    return v > 1 && stride == 1 && n % (size_t)v == 0 ? v : 1;
}

static enum gf_status launch_rows(const struct gf_kernel_args *a, cl_kernel k, size_t rows,
                                  size_t wg)
{
    size_t global = rows * wg;
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* A kernel of reduce.cl that is not a row kernel (one build for them all). */
static cl_kernel plain_kernel(const struct gf_kernel_args *a, const char *name)
{
    char opts[64];
    build_opts(a, 256, 1, opts, sizeof(opts));
    cl_kernel k = gf_cl_kernel(a->backend, FILE_CL, name, opts);
    if (!k)
        gf_cl_fail(a, name);
    return k;
}

/* Up to 2^20 threads walking n elements. */
static enum gf_status launch_flat(const struct gf_kernel_args *a, cl_kernel k, size_t n)
{
    size_t local = 256, global = (n + local - 1) / local * local;
    global = global < ((size_t)1 << 20) ? global : (size_t)1 << 20;
    return gf_cl_run(a, k, 1, &global, &local);
}

/* ---- checks (kernels/device_common.c has the rules) ------------------------------- */

static const struct gf_dev_reduce cl_red;
static const struct gf_dev_caps *const caps = &cl_red.caps;

/* Every tensor indexable with int on the device. */
static enum gf_status check_sizes(const struct gf_kernel_args *a)
{
    return gf_dev_check_sizes(a, caps);
}

/* Input i (named `name` in messages) is present and has the op's float
 * type: input 0's, one of fp32, fp16, bf16. */
static enum gf_status check_in(const struct gf_kernel_args *a, size_t i, const char *name)
{
    return gf_dev_check_float_in(a, caps, i, name);
}

/* ==== Reduce{Sum,Mean,Max}, SumToShape ============================================== */

/* Must match red_geom in reduce.cl. */
struct red_geom {
    cl_int kdim[GF_MAX_RANK], kstr[GF_MAX_RANK], rdim[GF_MAX_RANK], rstr[GF_MAX_RANK];
    cl_int nk, nr, nout, nred;
};

/* gf_red_plan in the kernel's ints (check_sizes: they fit). */
static void red_plan(const struct gf_tview *x, const bool *reduce, struct red_geom *g)
{
    struct gf_red_plan p;
    gf_red_plan(x, reduce, &p);
    memset(g, 0, sizeof(*g));
    g->nk = p.nk;
    g->nr = p.nr;
    g->nout = (cl_int)p.nout;
    g->nred = (cl_int)p.nred;
    for (int i = 0; i < p.nk; i++)
        g->kdim[i] = (cl_int)p.kdim[i], g->kstr[i] = (cl_int)p.kstr[i];
    for (int i = 0; i < p.nr; i++)
        g->rdim[i] = (cl_int)p.rdim[i], g->rstr[i] = (cl_int)p.rstr[i];
}

/* op: 0 sum, 1 mean, 2 max (reduce.cl).  Outputs that are neighbours in
 * the input (innermost dim kept), or short reductions, go 32 outputs to a
 * group; long inner reductions one output to a group. */
static enum gf_status red_launch(const struct gf_kernel_args *a, const bool *reduce, int op)
{
    const struct gf_tview *x = &a->in[0];
    struct red_geom g;
    red_plan(x, reduce, &g);
    enum gf_status st = gf_check_out_count(a, 0, x->dtype, (size_t)g.nout);
    if (st != GF_OK || g.nout == 0)
        return st;
    bool cols = (g.nk > 0 && g.kstr[g.nk - 1] == 1) || g.nred < 32;
    size_t wg;
    cl_kernel k = row_kernel(a, cols ? "reduce_cols" : "reduce_rows",
                             cols ? 32 * (size_t)g.nred : (size_t)g.nred, 1, &wg);
    cl_int cop = op;
    if (!k)
        return GF_ERR_INTERNAL;
    if (!gf_cl_args(k, 4, sizeof(cl_mem), &x->data, sizeof(cl_mem), &a->out[0].data,
                    sizeof(g), &g, sizeof(cl_int), &cop))
        return gf_cl_fail(a, "setting a reduction's arguments");
    if (!cols)
        return launch_rows(a, k, (size_t)g.nout, wg);
    size_t rc = wg < 32 ? wg : 32, local[2] = {rc, wg / rc};
    size_t global[2] = {((size_t)g.nout + rc - 1) / rc * rc, wg / rc};
    return gf_cl_run(a, k, 2, global, local);
}

static bool red_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_reduce_supports(caps, n, in, n_in);
}

/* ==== Sum ============================================================================= */

#define SUM_PER_LAUNCH 4

/* Must match sum_geom in reduce.cl. */
struct sum_geom {
    cl_int dims[GF_MAX_RANK], st[SUM_PER_LAUNCH][GF_MAX_RANK];
    cl_int flat[SUM_PER_LAUNCH];
    cl_int rank, n_in, nelem;
};

/* Adds the inputs in order, four per launch: y = in0 + in1 + in2 + in3,
 * then y = y + in4 + ..., each float sum rounded as the CPU's pairwise
 * folds round it. */
static enum gf_status sum_run(const struct gf_kernel_args *a)
{
    enum gf_status st = check_sizes(a);
    const struct gf_tview *y = &a->out[0];
    if (st == GF_OK && a->n_in == 0)
        st = gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, a->in[0].dtype, y->nelem);
    for (size_t i = 0; st == GF_OK && i < a->n_in; i++) {
        char name[32];
        snprintf(name, sizeof(name), "input %zu", i);
        st = check_in(a, i, name);
        if (st == GF_OK && !fu_bcasts_to(&a->in[i], y->rank, y->dims))
            st = gf_kernel_error(a, GF_ERR_INVALID, "input %zu %s does not broadcast to the "
                                 "output %s", i, FU_SHAPE(&a->in[i]), FU_SHAPE(y));
    }
    if (st != GF_OK || y->nelem == 0)
        return st;
    if (a->n_in == 1)
        return a->backend->ops->copy(a->backend, y->data, a->in[0].data, gf_tview_bytes(y));
    cl_kernel k = plain_kernel(a, "sum_n");
    if (!k)
        return GF_ERR_INTERNAL;
    for (size_t done = 0; done < a->n_in;) {
        struct sum_geom g = {.rank = y->rank, .nelem = (cl_int)y->nelem};
        cl_mem src[SUM_PER_LAUNCH] = {0};
        int n = 0;
        if (done) { /* the sum so far */
            src[n] = y->data;
            g.flat[n++] = 1;
        }
        for (; n < SUM_PER_LAUNCH && done < a->n_in; n++, done++) {
            const struct gf_tview *t = &a->in[done];
            int64_t st64[GF_MAX_RANK];
            fu_strides(t, y->rank, y->dims, st64);
            for (int d = 0; d < y->rank; d++)
                g.st[n][d] = (cl_int)st64[d];
            g.flat[n] = t->nelem == y->nelem;
            src[n] = t->data;
        }
        g.n_in = n;
        for (int d = 0; d < y->rank; d++)
            g.dims[d] = (cl_int)y->dims[d];
        if (!gf_cl_args(k, 6, sizeof(cl_mem), &y->data, sizeof(cl_mem), &src[0], sizeof(cl_mem),
                        &src[1], sizeof(cl_mem), &src[2], sizeof(cl_mem), &src[3], sizeof(g), &g))
            return gf_cl_fail(a, "setting Sum's arguments");
        if ((st = launch_flat(a, k, y->nelem)) != GF_OK)
            return st;
    }
    return GF_OK;
}

static bool sum_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK)
            return false;
    return n_in >= 1 && gf_dev_float(caps, in[0].dtype);
}

/* ==== Softmax LogSoftmax SoftmaxGrad LogSoftmaxGrad ================================== */

/* A row kernel whose arguments are n_bufs buffers, then n, inner, logsm. */
static enum gf_status rows_launch(const struct gf_kernel_args *a, const char *name,
                                  const cl_mem *bufs, int n_bufs, size_t n, size_t inner,
                                  size_t rows, bool logsm)
{
    size_t wg;
    cl_kernel k = row_kernel(a, name, n, row_vec(a, n, inner), &wg);
    if (!k)
        return GF_ERR_INTERNAL;
    cl_int v[3] = {(cl_int)n, (cl_int)inner, logsm};
    bool ok = true;
    for (int i = 0; ok && i < n_bufs + 3; i++)
        ok = i < n_bufs ? clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &bufs[i]) == CL_SUCCESS
                        : clSetKernelArg(k, (cl_uint)i, sizeof(cl_int), &v[i - n_bufs]) ==
                              CL_SUCCESS;
    if (!ok)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "setting the arguments of %s failed", name);
    return launch_rows(a, k, rows, wg);
}

/* Softmax LogSoftmax from X, their Grads from dY and Y. */
static enum gf_status softmax_launch(const struct gf_kernel_args *a, const struct gf_dev_rows *r)
{
    enum gf_op op = a->node->op;
    if (op == GF_OP_SOFTMAX || op == GF_OP_LOG_SOFTMAX) {
        cl_mem bufs[2] = {a->in[0].data, a->out[0].data};
        return rows_launch(a, "softmax_rows", bufs, 2, r->n, r->inner, r->rows,
                           op == GF_OP_LOG_SOFTMAX);
    }
    cl_mem bufs[3] = {a->in[0].data, a->in[1].data, a->out[0].data};
    return rows_launch(a, "softmax_grad_rows", bufs, 3, r->n, r->inner, r->rows,
                       op == GF_OP_LOG_SOFTMAX_GRAD);
}

static const struct gf_dev_reduce cl_red = {
    .caps = {.name = "OpenCL", .half = true, .int_index = true},
    .reduce = red_launch, .rows = softmax_launch};

static enum gf_status red_run(const struct gf_kernel_args *a)
{
    return gf_dev_reduce_run(&cl_red, a);
}

static bool float_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_rows_supports(caps, n, in, n_in);
}

/* ==== LayerNormalization, LayerNormalizationGrad ====================================== */

/* Must match ln_geom in reduce.cl. */
struct ln_geom {
    cl_int dims[GF_MAX_RANK], sw[GF_MAX_RANK], sb[GF_MAX_RANK];
    cl_int rank, wfull, bfull;
};

/* Strides of Scale or B (t, named `name`) over the normalized block
 * x.shape[ax:]; it must have x's type and broadcast to the block. */
static enum gf_status ln_param(const struct gf_kernel_args *a, const struct gf_tview *t,
                               const char *name, const struct gf_tview *x, int ax,
                               struct ln_geom *g, cl_int *st, cl_int *full)
{
    int br = x->rank - ax;
    if (t->dtype != x->dtype)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s is %s, X is %s", name,
                               gf_dtype_name(t->dtype), gf_dtype_name(x->dtype));
    if (!fu_bcasts_to(t, br, x->dims + ax))
        return gf_kernel_error(a, GF_ERR_INVALID, "%s of rank %d does not broadcast to the %d "
                               "normalized dims of X", name, t->rank, br);
    int64_t s[GF_MAX_RANK];
    fu_strides(t, br, x->dims + ax, s);
    g->rank = br;
    for (int i = 0; i < br; i++) {
        g->dims[i] = (cl_int)x->dims[ax + i];
        st[i] = (cl_int)s[i];
    }
    *full = t->nelem == gf_dims_prod(x->dims, ax, x->rank);
    return GF_OK;
}

/* Optional output i of `rows` fp32 values: its buffer, or NULL when omitted. */
static enum gf_status ln_stat_out(const struct gf_kernel_args *a, size_t i, size_t rows,
                                  cl_mem *m)
{
    *m = NULL;
    if (i >= a->n_out || !a->out[i].data)
        return GF_OK;
    *m = a->out[i].data;
    return gf_check_out_count(a, i, GF_FLOAT, rows);
}

static enum gf_status ln_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct ln_geom g = {0};
    int ax = 0;
    cl_mem mean = NULL, inv = NULL, b = NULL;
    enum gf_status st = check_in(a, 0, "X");
    if (st == GF_OK)
        st = check_sizes(a);
    if (st == GF_OK)
        st = gf_axis_attr(a, -1, x->rank, &ax);
    if (st == GF_OK && (a->n_in < 2 || !fu_has(a, 1)))
        st = gf_kernel_error(a, GF_ERR_INVALID, "Scale (input 1) is missing");
    if (st == GF_OK)
        st = ln_param(a, &a->in[1], "Scale (input 1)", x, ax, &g, g.sw, &g.wfull);
    if (st == GF_OK && a->n_in > 2 && fu_has(a, 2)) {
        b = a->in[2].data;
        st = ln_param(a, &a->in[2], "B (input 2)", x, ax, &g, g.sb, &g.bfull);
    }
    size_t n = gf_dims_prod(x->dims, ax, x->rank), rows = gf_dims_prod(x->dims, 0, ax);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, x->dtype, x->nelem);
    if (st == GF_OK)
        st = ln_stat_out(a, 1, rows, &mean);
    if (st == GF_OK)
        st = ln_stat_out(a, 2, rows, &inv);
    if (st != GF_OK || rows == 0)
        return st;
    size_t wg;
    cl_kernel k = row_kernel(a, "layernorm_rows", n, row_vec(a, n, 1), &wg);
    if (!k)
        return GF_ERR_INTERNAL;
    cl_int cn = (cl_int)n, has_b = b != NULL;
    cl_float eps = gf_node_attr_float(a->node, "epsilon", 1e-5f);
    if (!gf_cl_args(k, 10, sizeof(cl_mem), &x->data, sizeof(cl_mem), &a->in[1].data,
                    sizeof(cl_mem), &b, sizeof(cl_mem), &a->out[0].data, sizeof(cl_mem), &mean,
                    sizeof(cl_mem), &inv, sizeof(cl_int), &cn, sizeof(cl_float), &eps,
                    sizeof(g), &g, sizeof(cl_int), &has_b))
        return gf_cl_fail(a, "setting LayerNormalization's arguments");
    return launch_rows(a, k, rows, wg);
}

/* Mean and InvStdDev fp32 outputs only (stash_type 1). */
static bool ln_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return float_supports(n, in, n_in) && gf_node_attr_int(n, "stash_type", 1) == 1;
}

/* LayerNormalizationGrad: rows of X [rows, n] over the block X.shape[axis:]. */
static void lng_block(const struct gf_kernel_args *a, size_t *rows, size_t *n, int *ax)
{
    const struct gf_tview *x = &a->in[1];
    int64_t axis = gf_node_attr_int(a->node, "axis", -1);
    *ax = (int)(axis < 0 ? axis + x->rank : axis);
    if (*ax < 0 || *ax >= x->rank)
        *ax = x->rank > 0 ? x->rank - 1 : 0;
    *n = gf_dims_prod(x->dims, *ax, x->rank);
    *rows = gf_dims_prod(x->dims, 0, *ax);
}

static size_t lng_parts(size_t rows)
{
    return rows < LN_PARTS ? (rows ? rows : 1) : LN_PARTS;
}

/* ws = [mean, rstd per row][parts x {dScale, dBias} x n partial sums] */
static size_t lng_workspace(const struct gf_kernel_args *a)
{
    size_t rows, n;
    int ax;
    if (a->n_in < 2)
        return 0;
    lng_block(a, &rows, &n, &ax);
    return (2 * rows + 2 * lng_parts(rows) * n) * sizeof(float);
}

/* The forward's Mean / InvStdDev (inputs 3, 4): both or neither, one float
 * per row. */
static enum gf_status lng_stats(const struct gf_kernel_args *a, size_t rows, cl_mem *mean,
                                cl_mem *rstd)
{
    *mean = *rstd = NULL;
    if (a->n_in < 5 || !fu_has(a, 3) || !fu_has(a, 4))
        return GF_OK;
    const struct gf_tview *m = &a->in[3], *r = &a->in[4];
    if (m->dtype != GF_FLOAT || r->dtype != GF_FLOAT || m->nelem != rows || r->nelem != rows)
        return gf_kernel_error(a, GF_ERR_INVALID, "Mean and InvStdDev must be float with one "
                               "element per row (%zu)", rows);
    *mean = m->data;
    *rstd = r->data;
    return GF_OK;
}

static enum gf_status lng_cols(const struct gf_kernel_args *a, cl_mem ws, size_t rows, size_t n)
{
    const struct gf_tview *g = &a->in[0], *x = &a->in[1];
    cl_mem ds = a->n_out > 1 ? a->out[1].data : NULL, db = a->n_out > 2 ? a->out[2].data : NULL;
    cl_int cr = (cl_int)rows, cn = (cl_int)n, cp = (cl_int)lng_parts(rows);
    cl_kernel kc = plain_kernel(a, "layernorm_grad_cols");
    cl_kernel ks = plain_kernel(a, "layernorm_grad_sum");
    if (!kc || !ks)
        return GF_ERR_INTERNAL;
    if (!gf_cl_args(kc, 6, sizeof(cl_mem), &g->data, sizeof(cl_mem), &x->data, sizeof(cl_mem),
                    &ws, sizeof(cl_int), &cr, sizeof(cl_int), &cn, sizeof(cl_int), &cp) ||
        !gf_cl_args(ks, 6, sizeof(cl_mem), &ws, sizeof(cl_mem), &ds, sizeof(cl_mem), &db,
                    sizeof(cl_int), &cr, sizeof(cl_int), &cn, sizeof(cl_int), &cp))
        return gf_cl_fail(a, "setting LayerNormalizationGrad's arguments");
    size_t local[2] = {64, 1}, global[2] = {n, (size_t)cp};
    enum gf_status st = gf_cl_run(a, kc, 2, global, local);
    return st == GF_OK ? gf_cl_run(a, ks, 1, global, local) : st;
}

static enum gf_status lng_run(const struct gf_kernel_args *a)
{
    size_t rows = 0, n = 0;
    int ax = 0;
    struct ln_geom geo = {0};
    cl_mem mean, rstd, ws = a->workspace;
    enum gf_status st = a->n_in < 3 ? gf_kernel_error(a, GF_ERR_INVALID, "needs dY, X and "
                                                      "Scale") : check_sizes(a);
    for (size_t i = 0; st == GF_OK && i < 3; i++)
        st = check_in(a, i, i == 0 ? "dY" : i == 1 ? "X" : "Scale");
    const struct gf_tview *g = &a->in[0], *x = &a->in[1];
    if (st == GF_OK) {
        lng_block(a, &rows, &n, &ax);
        st = gf_axis_attr(a, -1, x->rank, &ax);
    }
    if (st == GF_OK && g->nelem != x->nelem)
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, X %zu", g->nelem,
                             x->nelem);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, x->dtype, x->nelem);
    for (size_t k = 1; st == GF_OK && k < a->n_out && k < 3; k++)
        if (a->out[k].data)
            st = gf_check_out_count(a, k, x->dtype, n);
    if (st == GF_OK)
        st = ln_param(a, &a->in[2], "Scale (input 2)", x, ax, &geo, geo.sw, &geo.wfull);
    if (st == GF_OK)
        st = lng_stats(a, rows, &mean, &rstd);
    if (st == GF_OK && !ws)
        st = gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if (st != GF_OK)
        return st;
    if (rows && n) {
        size_t wg;
        cl_kernel k = row_kernel(a, "layernorm_grad_rows", n, row_vec(a, n, 1), &wg);
        cl_int cn = (cl_int)n;
        cl_float eps = gf_node_attr_float(a->node, "epsilon", 1e-5f);
        if (!k)
            return GF_ERR_INTERNAL;
        if (!gf_cl_args(k, 10, sizeof(cl_mem), &g->data, sizeof(cl_mem), &x->data,
                        sizeof(cl_mem), &a->in[2].data, sizeof(cl_mem), &mean, sizeof(cl_mem),
                        &rstd, sizeof(cl_mem), &a->out[0].data, sizeof(cl_mem), &ws,
                        sizeof(cl_int), &cn, sizeof(cl_float), &eps, sizeof(geo), &geo))
            return gf_cl_fail(a, "setting LayerNormalizationGrad's arguments");
        if ((st = launch_rows(a, k, rows, wg)) != GF_OK)
            return st;
    }
    bool want = (a->n_out > 1 && a->out[1].data) || (a->n_out > 2 && a->out[2].data);
    return want && n ? lng_cols(a, ws, rows, n) : GF_OK;
}

static bool lng_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    for (size_t i = 0; i < n_in && i < 5; i++)
        if (in[i].dtype != GF_UNDEFINED && in[i].dtype != (i < 3 ? in[0].dtype : GF_FLOAT))
            return false;
    return n_in >= 3 && gf_dev_float(caps, in[0].dtype) && in[1].rank <= GF_MAX_RANK;
}

/* ==== the losses and their gradients ================================================= */

/* Must match loss_geom in reduce.cl. */
struct loss_geom {
    cl_long ii;
    cl_int c, d, npos;
    cl_int lab64, has_ii, has_w;
    cl_int reduction; /* 0 none, 1 sum, 2 mean */
};

/* The checks (kernels/checks.c, the rule in graph/opcheck.c: inputs,
 * outputs, the labels with a host copy) into g. */
static enum gf_status loss_geom_of(const struct gf_kernel_args *a, struct loss_geom *g)
{
    struct gf_loss_rule r;
    struct gf_labels l;
    enum gf_status st = gf_nll_check(a, &r, &l);
    if (st != GF_OK)
        return st;
    const struct gf_tview *t = l.t;
    *g = (struct loss_geom){.c = (cl_int)l.classes, .npos = (cl_int)t->nelem,
                            .lab64 = t->dtype == GF_INT64, .has_w = fu_has(a, r.wi),
                            .has_ii = l.has_ii, .ii = l.ii,
                            .reduction = r.ce.red == GF_RED_NONE  ? 0
                                         : r.ce.red == GF_RED_SUM ? 1 : 2};
    /* the scores' [N, C, d...]; NLLLossGrad's output 0 is shaped like them */
    const struct gf_tview *x = a->node->op == GF_OP_NLL_LOSS_GRAD ? &a->out[0] : &a->in[r.si];
    g->d = (cl_int)(x->dims[0] ? t->nelem / (size_t)x->dims[0] : 1);
    return GF_OK;
}

/* Clears the flag of ws before kernels that may set it. */
static enum gf_status flag_clear(const struct gf_kernel_args *a, cl_mem ws)
{
    cl_int zero = 0;
    cl_int err = clEnqueueFillBuffer(gf_cl_of(a->backend)->queue, ws, &zero, sizeof(zero), 0,
                                     sizeof(zero), 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "clearing the label flag: %s",
                               gf_cl_strerror(err));
    return GF_OK;
}

/* Labels without a host copy: reads back the flag the kernels set. */
static enum gf_status flag_check(const struct gf_kernel_args *a, const struct gf_tview *t,
                                 cl_mem ws, const struct loss_geom *g)
{
    if (t->host || !t->nelem)
        return GF_OK;
    cl_int flag = 0;
    cl_int err = clEnqueueReadBuffer(gf_cl_of(a->backend)->queue, ws, CL_TRUE, 0, sizeof(flag),
                                     &flag, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "reading the label flag: %s",
                               gf_cl_strerror(err));
    if (flag)
        return gf_kernel_error(a, GF_ERR_INVALID, "a label is outside [0, %d)%s", g->c,
                               g->has_ii ? " and not ignore_index" : "");
    return GF_OK;
}

/* ws = [flag, wsum, -, -][losses of the positions][their weights] */
static size_t loss_workspace(const struct gf_kernel_args *a)
{
    size_t n = a->n_in > 1 ? a->in[a->node->op == GF_OP_NLL_LOSS_GRAD ||
                                     a->node->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD
                                 ? 2 : 1].nelem
                           : 0;
    return (LOSS_WS_HEAD + 2 * n) * sizeof(float);
}

static enum gf_status loss_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct loss_geom g;
    cl_mem ws = a->workspace, logp = NULL;
    const struct gf_tview *w = fu_has(a, 2) ? &a->in[2] : NULL;
    bool sce = a->node->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS;
    enum gf_status st = check_in(a, 0, "scores");
    if (st == GF_OK)
        st = check_sizes(a);
    if (st == GF_OK)
        st = loss_geom_of(a, &g);
    if (st == GF_OK && sce && fu_has_out(a, 1))
        logp = a->out[1].data;
    if (st == GF_OK && !ws)
        st = gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if (st == GF_OK)
        st = flag_clear(a, ws);
    if (st != GF_OK)
        return st;
    size_t wg;
    cl_mem wm = w ? w->data : NULL;
    cl_kernel k = sce ? row_kernel(a, "sce_rows", (size_t)g.c,
                                   row_vec(a, (size_t)g.c, (size_t)g.d), &wg)
                      : plain_kernel(a, "nll_rows");
    if (!k)
        return GF_ERR_INTERNAL;
    bool ok = gf_cl_args(k, 4, sizeof(cl_mem), &x->data, sizeof(cl_mem), &a->in[1].data,
                         sizeof(cl_mem), &wm, sizeof(cl_mem), &a->out[0].data);
    if (sce)
        ok = ok && clSetKernelArg(k, 4, sizeof(cl_mem), &logp) == CL_SUCCESS;
    ok = ok && clSetKernelArg(k, sce ? 5 : 4, sizeof(cl_mem), &ws) == CL_SUCCESS &&
         clSetKernelArg(k, sce ? 6 : 5, sizeof(g), &g) == CL_SUCCESS;
    if (!ok)
        return gf_cl_fail(a, "setting the loss's arguments");
    st = sce ? launch_rows(a, k, (size_t)g.npos, wg) : launch_flat(a, k, (size_t)g.npos);
    if (st != GF_OK)
        return st;
    if (g.reduction != 0) {
        cl_kernel kt = row_kernel(a, "loss_total", (size_t)g.npos, 1, &wg);
        cl_int mean = g.reduction == 2;
        if (!kt)
            return GF_ERR_INTERNAL;
        if (!gf_cl_args(kt, 4, sizeof(cl_mem), &ws, sizeof(cl_mem), &a->out[0].data,
                        sizeof(cl_int), &g.npos, sizeof(cl_int), &mean))
            return gf_cl_fail(a, "setting the loss's arguments");
        if ((st = launch_rows(a, kt, 1, wg)) != GF_OK)
            return st;
    }
    return flag_check(a, &a->in[1], ws, &g);
}

/* SoftmaxCrossEntropyLossGrad(dL, scores, labels, W?) and NLLLossGrad(dL,
 * shape, labels, W?); for "mean" the weight sum goes first into ws[1]. */
static enum gf_status lossg_setup(const struct gf_kernel_args *a, struct loss_geom *g)
{
    const struct gf_tview *t = &a->in[2];
    const struct gf_tview *w = fu_has(a, 3) ? &a->in[3] : NULL;
    enum gf_status st = loss_geom_of(a, g);
    if (st == GF_OK && !a->workspace)
        st = gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if (st == GF_OK)
        st = flag_clear(a, a->workspace);
    if (st != GF_OK || g->reduction != 2)
        return st;
    size_t wg;
    cl_kernel k = row_kernel(a, "loss_wsum", (size_t)g->npos, 1, &wg);
    cl_mem ws = a->workspace, wm = w ? w->data : NULL;
    if (!k)
        return GF_ERR_INTERNAL;
    if (!gf_cl_args(k, 4, sizeof(cl_mem), &t->data, sizeof(cl_mem), &wm, sizeof(cl_mem), &ws,
                    sizeof(*g), g))
        return gf_cl_fail(a, "setting the loss gradient's arguments");
    return launch_rows(a, k, 1, wg);
}

static enum gf_status sceg_run(const struct gf_kernel_args *a)
{
    struct loss_geom g;
    const struct gf_tview *x = &a->in[1];
    enum gf_status st = check_in(a, 0, "dLoss");
    if (st == GF_OK)
        st = check_sizes(a);
    if (st == GF_OK)
        st = lossg_setup(a, &g);
    if (st != GF_OK)
        return st;
    size_t wg;
    cl_kernel k = row_kernel(a, "sce_grad_rows", (size_t)g.c,
                             row_vec(a, (size_t)g.c, (size_t)g.d), &wg);
    cl_mem ws = a->workspace, wm = fu_has(a, 3) ? a->in[3].data : NULL;
    if (!k)
        return GF_ERR_INTERNAL;
    if (!gf_cl_args(k, 7, sizeof(cl_mem), &a->in[0].data, sizeof(cl_mem), &x->data,
                    sizeof(cl_mem), &a->in[2].data, sizeof(cl_mem), &wm, sizeof(cl_mem), &ws,
                    sizeof(cl_mem), &a->out[0].data, sizeof(g), &g))
        return gf_cl_fail(a, "setting the loss gradient's arguments");
    if ((st = launch_rows(a, k, (size_t)g.npos, wg)) != GF_OK)
        return st;
    return flag_check(a, &a->in[2], ws, &g);
}

static enum gf_status nllg_run(const struct gf_kernel_args *a)
{
    struct loss_geom g;
    const struct gf_tview *o = &a->out[0];
    enum gf_status st = check_in(a, 0, "dLoss");
    if (st == GF_OK)
        st = check_sizes(a);
    if (st == GF_OK)
        st = lossg_setup(a, &g);
    if (st != GF_OK || o->nelem == 0)
        return st;
    cl_kernel k = plain_kernel(a, "nll_grad");
    cl_mem ws = a->workspace, wm = fu_has(a, 3) ? a->in[3].data : NULL;
    if (!k)
        return GF_ERR_INTERNAL;
    if (!gf_cl_args(k, 6, sizeof(cl_mem), &a->in[0].data, sizeof(cl_mem), &a->in[2].data,
                    sizeof(cl_mem), &wm, sizeof(cl_mem), &ws, sizeof(cl_mem), &o->data,
                    sizeof(g), &g))
        return gf_cl_fail(a, "setting NLLLossGrad's arguments");
    size_t local = 256, global = o->nelem;
    if ((st = gf_cl_run(a, k, 1, &global, &local)) != GF_OK)
        return st;
    return flag_check(a, &a->in[2], ws, &g);
}

/* Float scores / dLoss and weights of one type; int labels; shapes with
 * host copies. */
static bool loss_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool grad = n->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD || n->op == GF_OP_NLL_LOSS_GRAD;
    size_t wi = grad ? 3 : 2;
    if (n_in < wi || !gf_dev_float(caps, in[0].dtype) ||
        (wi < n_in && in[wi].dtype != GF_UNDEFINED && in[wi].dtype != in[0].dtype))
        return false;
    if (n->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD && in[1].dtype != in[0].dtype)
        return false;
    return n->op != GF_OP_NLL_LOSS_GRAD || gf_dev_host_or_empty(in, n_in, 1);
}

/* ==== the table ====================================================================== */

#define KERNEL(OP, IMPL, SUPPORTS, WS, RUN, NK)                                          \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = IMPL,           \
     .supports = SUPPORTS, .workspace = WS, .run = RUN, .n_knobs = NK, .knobs = row_knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(REDUCE_SUM, "reduce", red_supports, NULL, red_run, 1),
    KERNEL(REDUCE_MEAN, "reduce", red_supports, NULL, red_run, 1),
    KERNEL(REDUCE_MAX, "reduce", red_supports, NULL, red_run, 1),
    KERNEL(SUM_TO_SHAPE, "reduce", red_supports, NULL, red_run, 1),
    {.op = GF_OP_SUM, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "variadic",
     .supports = sum_supports, .run = sum_run},
    KERNEL(SOFTMAX, "rows", float_supports, NULL, red_run, 2),
    KERNEL(LOG_SOFTMAX, "rows", float_supports, NULL, red_run, 2),
    KERNEL(SOFTMAX_GRAD, "rows", float_supports, NULL, red_run, 2),
    KERNEL(LOG_SOFTMAX_GRAD, "rows", float_supports, NULL, red_run, 2),
    KERNEL(LAYER_NORMALIZATION, "rows", ln_supports, NULL, ln_run, 2),
    KERNEL(LAYER_NORMALIZATION_GRAD, "rows", lng_supports, lng_workspace, lng_run, 2),
    KERNEL(SOFTMAX_CROSS_ENTROPY_LOSS, "rows", loss_supports, loss_workspace, loss_run, 2),
    KERNEL(NEGATIVE_LOG_LIKELIHOOD_LOSS, "rows", loss_supports, loss_workspace, loss_run, 2),
    KERNEL(SOFTMAX_CROSS_ENTROPY_LOSS_GRAD, "rows", loss_supports, loss_workspace, sceg_run, 2),
    KERNEL(NLL_LOSS_GRAD, "rows", loss_supports, loss_workspace, nllg_run, 2),
};

const struct gf_kernel_table gf_opencl_reduce_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
