/* CUDA kernels of the normalizations (device code: fused_norm.cu), fp32,
 * fp16 and bf16 storage (computed in fp32 as the CPU's half kernels):
 *
 *   RMSNorm AddRMSNorm LayerNorm AddLayerNorm   X [rows, n] -> Y (S, Mean, InvStdDev)
 *   RMSNormGrad                                 dY, X, W?, G? -> dX, dW?, dXl?
 *   LayerNormGrad                               dY, X, W?, Mean?, InvStdDev? -> dX, dW?, dB?
 *   LayerNormalization (ONNX)                   X, Scale, B? -> Y, Mean?, InvStdDev?
 *   LayerNormalizationGrad                      dY, X, Scale, Mean?, InvStdDev? -> dX,
 *                                               dScale?, dBias?
 *
 * One block per row forward; the backward persistent (a grid of about as
 * many blocks as the device holds), each block's dW (dB) summed in
 * registers into one partial row of the workspace, then added up in a
 * fixed order (fused_norm.cu).  W or B that broadcast to the normalized
 * block without having all its n elements are expanded into the workspace
 * first.  Sums in double, as the CPU's.  Types as the shared checks ask:
 * X, R, W, B, Y, S (and dY, dX, dW, dB) of one float type, Mean and
 * InvStdDev fp32 (inputs and outputs).  The rules (what `supports` takes)
 * follow kernels/opencl/fused_norm.c and reduce.c; checks and messages
 * are the shared ones (kernels/checks.h) and the CPU's.
 */
#include "cu.h"
#include "device_common.h"
#include "launch_fused.h"

/* fp32, fp16, bf16: the kernels' storage types. */
static bool float_type(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* knobs: threads per row, blocks per SM of the backward's grid (0: auto) */
enum { K_BLOCK, K_BPS };
static const int block_values[] = GF_CU_NORM_BLOCKS;
static const int bps_values[] = GF_CU_NORM_BPS;
static const struct gf_config_knob knobs[] = {
    {"block", 5, block_values},
    {"blocks_per_sm", 5, bps_values},
};

static int knob(const struct gf_kernel_args *a, int k)
{
    return a->config ? a->config[k] : 0;
}

#define WS_ALIGN 256

static size_t ws_align(size_t b)
{
    return (b + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

/* ---- W and B: direct, or expanded into the workspace ------------------------ */

/* A parameter of the normalized block: its own memory when it holds all n
 * elements, else expanded at workspace offset `off`. */
struct param {
    const struct gf_tview *t; /* NULL: absent */
    bool expand;
    size_t off;
};

static void param_init(struct param *p, const struct gf_tview *t, size_t n, size_t *ws)
{
    p->t = t;
    p->expand = t && t->nelem != n;
    p->off = *ws;
    if (p->expand)
        *ws += ws_align(n * gf_dtype_size(t->dtype));
}

/* The parameter's n values on the device (expanded first when needed). */
static enum gf_status param_get(const struct gf_kernel_args *a, const struct param *p, int brank,
                                const int64_t *bdims, size_t n, const void **out)
{
    *out = NULL;
    if (!p->t)
        return GF_OK;
    if (!p->expand) {
        *out = p->t->data;
        return GF_OK;
    }
    void *dst = (char *)a->workspace + p->off;
    int64_t st[1][GF_MAX_RANK];
    fu_strides(p->t, brank, bdims, st[0]);
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, brank, bdims, 1, st);
    cudaError_t e = gf_cu_copy_nd(gf_cu_stream(a), (int)gf_dtype_size(p->t->dtype), p->t->data,
                                  dst, &nd, (int64_t)n);
    *out = dst;
    return gf_cu_check(a, e, "W / B expansion");
}

static bool aligned(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* GF_CU_NORM_VEC when n % 4 == 0 and every pointer of c is 16-byte aligned. */
static int vec_flag(const struct gf_cu_norm *c)
{
    const void *ps[] = {c->x, c->r, c->w, c->b, c->y, c->s, c->dy, c->dx, c->g, c->dxl};
    if (c->n % 4)
        return 0;
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        if (!aligned(ps[i]))
            return 0;
    return GF_CU_NORM_VEC;
}

static void plan(const struct gf_kernel_args *a, struct gf_cu_norm *c, bool grad)
{
    struct gf_cu *cu = a->backend ? gf_cu_of(a->backend) : NULL;
    if (cu)
        gf_cu_use(a->backend);
    gf_cu_norm_plan(c, grad, knob(a, K_BLOCK), knob(a, K_BPS), cu ? cu->sm_count : 132,
                    cu ? (int)cu->max_threads : 1024);
}

/* ---- the fused forms ------------------------------------------------------------ */

/* A node checked: the block, the launch's fields but the pointers, W, B. */
struct norm {
    int brank;
    const int64_t *bdims;
    struct gf_cu_norm c;
    struct param w, b;
    size_t part_off, ws;
};

/* c from a rule: the block X.shape[axis:], epsilon, eps_outside, woff. */
static void norm_from_rule(const struct gf_tview *x, const struct gf_norm_rule *r,
                           struct norm *nm)
{
    nm->brank = r->block.rank;
    nm->bdims = x->dims + r->axis;
    nm->c.n = (int64_t)gf_dims_prod(x->dims, r->axis, x->rank);
    nm->c.rows = nm->c.n ? (int64_t)x->nelem / nm->c.n : 0;
    nm->c.type = gf_dev_type_of(x->dtype); /* gf_cu_type's order */
    nm->c.ltype = nm->c.type;
    nm->c.eps = r->eps;
    nm->c.woff = r->woff;
    nm->c.flags = (r->rms ? GF_CU_NORM_RMS : 0) | (r->eps_outside ? GF_CU_NORM_EPS_OUT : 0);
}

/* The mixed form (kernels/checks.h): R and Y, or dY, 16-bit. */
static void mixed_type(const struct gf_kernel_args *a, struct norm *nm)
{
    enum gf_dtype low = gf_norm_low_type(a->node, a->in, a->n_in);
    if (low)
        nm->c.ltype = gf_dev_type_of(low);
}

static enum gf_status norm_check(const struct gf_kernel_args *a, bool run, struct norm *nm)
{
    struct gf_norm_slots sl = gf_norm_slots_of(a->node->op);
    struct gf_norm_rule r;
    memset(nm, 0, sizeof(*nm));
    enum gf_status st = gf_norm_check(a, &r);
    if (st == GF_OK && run)
        st = gf_norm_check_run(a, &r);
    if (st != GF_OK)
        return st;
    norm_from_rule(&a->in[0], &r, nm);
    mixed_type(a, nm);
    nm->c.flags |= sl.r >= 0 ? GF_CU_NORM_ADD : 0;
    param_init(&nm->w, gf_opt_in(a, sl.w), (size_t)nm->c.n, &nm->ws);
    param_init(&nm->b, r.rms ? NULL : gf_opt_in(a, sl.b), (size_t)nm->c.n, &nm->ws);
    return GF_OK;
}

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    struct norm nm;
    return norm_check(a, false, &nm) == GF_OK ? nm.ws : 0;
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct norm nm;
    enum gf_status st = norm_check(a, true, &nm);
    struct gf_cu_norm *c = &nm.c;
    if (st != GF_OK || c->n == 0 || c->rows == 0)
        return st;
    if (nm.ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and B");
    size_t n = (size_t)c->n;
    if ((st = param_get(a, &nm.w, nm.brank, nm.bdims, n, &c->w)) ||
        (st = param_get(a, &nm.b, nm.brank, nm.bdims, n, &c->b)))
        return st;
    bool add = c->flags & GF_CU_NORM_ADD, rms = c->flags & GF_CU_NORM_RMS;
    size_t ks = add ? 2 : 1;
    c->x = a->in[0].data;
    c->r = add ? a->in[gf_norm_slots_of(a->node->op).r].data : NULL;
    c->y = a->out[0].data;
    c->s = add && fu_has_out(a, 1) ? a->out[1].data : NULL;
    c->mean = !rms && fu_has_out(a, ks) ? a->out[ks].data : NULL;
    c->istd = !rms && fu_has_out(a, ks + 1) ? a->out[ks + 1].data : NULL;
    c->flags |= vec_flag(c);
    plan(a, c, false);
    return gf_cu_check(a, gf_cu_norm_fwd(gf_cu_stream(a), c), "norm forward kernel");
}

/* ---- RMSNormGrad, LayerNormGrad ----------------------------------------------------- */

/* parts: partial rows per block (1: dW; 2: dW and dB).  The workspace:
 * [W expanded][parts x grid x n doubles]. */
static enum gf_status grad_check(const struct gf_kernel_args *a, bool run, struct norm *nm)
{
    struct gf_norm_rule r;
    memset(nm, 0, sizeof(*nm));
    enum gf_status st = gf_norm_grad_check(a, &r);
    if (st == GF_OK && run)
        st = gf_norm_grad_check_run(a, &r);
    if (st != GF_OK)
        return st;
    norm_from_rule(&a->in[1], &r, nm);
    mixed_type(a, nm);
    param_init(&nm->w, fu_has(a, 2) ? &a->in[2] : NULL, (size_t)nm->c.n, &nm->ws);
    bool rms = r.rms, dw = fu_has_out(a, 1) || (!rms && fu_has_out(a, 2));
    /* the geometry as run() will have it: vectors when n allows (the
     * pointers of a plan's views are 256-byte aligned) */
    nm->c.flags |= nm->c.n % 4 == 0 ? GF_CU_NORM_VEC : 0;
    plan(a, &nm->c, true);
    nm->part_off = nm->ws;
    if (dw && nm->c.rows)
        nm->ws += ws_align((rms ? 1 : 2) * (size_t)nm->c.grid * (size_t)nm->c.n *
                           sizeof(double));
    return GF_OK;
}

static size_t grad_workspace(const struct gf_kernel_args *a)
{
    struct norm nm;
    return grad_check(a, false, &nm) == GF_OK ? nm.ws : 0;
}

static enum gf_status grad_run(const struct gf_kernel_args *a)
{
    struct norm nm;
    enum gf_status st = grad_check(a, true, &nm);
    struct gf_cu_norm *c = &nm.c;
    if (st != GF_OK || c->n == 0)
        return st;
    bool rms = c->flags & GF_CU_NORM_RMS;
    c->dw = fu_has_out(a, 1) ? a->out[1].data : NULL;
    c->db = !rms && fu_has_out(a, 2) ? a->out[2].data : NULL;
    if (nm.ws && !a->workspace && c->rows)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the dW partial rows");
    if (c->rows && (st = param_get(a, &nm.w, nm.brank, nm.bdims, (size_t)c->n, &c->w)))
        return st;
    c->dy = a->in[0].data;
    c->x = a->in[1].data;
    c->dx = a->out[0].data;
    c->g = rms && fu_has(a, 3) ? a->in[3].data : NULL;
    c->dxl = rms && fu_has_out(a, 2) ? a->out[2].data : NULL;
    if (!rms && fu_has(a, 3) && fu_has(a, 4)) {
        c->mean_in = a->in[3].data;
        c->istd_in = a->in[4].data;
    }
    c->part = (c->dw || c->db) && c->rows ? (double *)((char *)a->workspace + nm.part_off)
                                          : NULL;
    int grid = c->grid;
    c->flags = (c->flags & ~GF_CU_NORM_VEC) | vec_flag(c);
    plan(a, c, true);
    c->grid = c->grid < grid ? c->grid : grid; /* the workspace holds `grid` partial rows */
    return gf_cu_check(a, gf_cu_norm_grad(gf_cu_stream(a), c), "norm backward kernel");
}

/* ---- ONNX LayerNormalization and its Grad ------------------------------------------ */

/* Scale or B (t, named `name`): X's type, broadcasting to the block X.shape[ax:]. */
static enum gf_status ln_param(const struct gf_kernel_args *a, const struct gf_tview *t,
                               const char *name, const struct gf_tview *x, int ax)
{
    int br = x->rank - ax;
    if (t->dtype != x->dtype)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s is %s, X is %s", name,
                               gf_dtype_name(t->dtype), gf_dtype_name(x->dtype));
    if (!fu_bcasts_to(t, br, x->dims + ax))
        return gf_kernel_error(a, GF_ERR_INVALID, "%s of rank %d does not broadcast to the %d "
                               "normalized dims of X", name, t->rank, br);
    if (t->nelem && !t->data)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s has no data", name);
    return GF_OK;
}

/* Optional output i of `rows` fp32 values: its buffer, or NULL when omitted. */
static enum gf_status ln_stat_out(const struct gf_kernel_args *a, size_t i, size_t rows,
                                  float **m)
{
    *m = NULL;
    if (i >= a->n_out || !a->out[i].data)
        return GF_OK;
    *m = a->out[i].data;
    return gf_check_out_count(a, i, GF_FLOAT, rows);
}

/* LayerNormalization: X (input 0), Scale (1), B? (2) -> Y, Mean?, InvStdDev?;
 * Grad: dY (0), X (1), Scale (2), Mean? (3), InvStdDev? (4) -> dX, dScale?,
 * dBias?.  Fills nm (block, W, B, workspace). */
static enum gf_status onnx_check(const struct gf_kernel_args *a, bool grad, struct norm *nm)
{
    size_t xi = grad ? 1 : 0;
    const struct gf_tview *x = &a->in[xi];
    int ax = 0;
    memset(nm, 0, sizeof(*nm));
    enum gf_status st = a->n_in < xi + 2 ? gf_kernel_error(a, GF_ERR_INVALID, "needs %s",
                                                           grad ? "dY, X and Scale"
                                                                : "X and Scale")
                                         : GF_OK;
    for (size_t i = 0; st == GF_OK && i < xi + 2; i++) /* X's float type */
        st = fu_check_in(a, i, grad ? (i == 0 ? "dY" : i == 1 ? "X" : "Scale")
                                    : (i == 0 ? "X" : "Scale"), a->in[xi].dtype);
    if (st == GF_OK)
        st = gf_axis_attr(a, -1, x->rank, &ax);
    if (st == GF_OK)
        st = ln_param(a, &a->in[xi + 1], grad ? "Scale (input 2)" : "Scale (input 1)", x, ax);
    if (st == GF_OK && !grad && fu_has(a, 2))
        st = ln_param(a, &a->in[2], "B (input 2)", x, ax);
    if (st == GF_OK && grad && a->in[0].nelem != x->nelem)
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, X %zu", a->in[0].nelem,
                             x->nelem);
    if (st != GF_OK)
        return st;
    nm->brank = x->rank - ax;
    nm->bdims = x->dims + ax;
    nm->c.n = (int64_t)gf_dims_prod(x->dims, ax, x->rank);
    nm->c.rows = (int64_t)gf_dims_prod(x->dims, 0, ax);
    nm->c.eps = gf_node_attr_float(a->node, "epsilon", 1e-5f);
    nm->c.flags = GF_CU_NORM_ONNX;
    nm->c.type = gf_dev_type_of(x->dtype);
    nm->c.ltype = nm->c.type;
    param_init(&nm->w, &a->in[xi + 1], (size_t)nm->c.n, &nm->ws);
    param_init(&nm->b, !grad && fu_has(a, 2) ? &a->in[2] : NULL, (size_t)nm->c.n, &nm->ws);
    if (grad) {
        bool dw = (a->n_out > 1 && a->out[1].data) || (a->n_out > 2 && a->out[2].data);
        nm->c.flags |= nm->c.n % 4 == 0 ? GF_CU_NORM_VEC : 0;
        plan(a, &nm->c, true);
        nm->part_off = nm->ws;
        if (dw && nm->c.rows)
            nm->ws += ws_align(2 * (size_t)nm->c.grid * (size_t)nm->c.n * sizeof(double));
    }
    return GF_OK;
}

static size_t onnx_ln_workspace(const struct gf_kernel_args *a)
{
    struct norm nm;
    return onnx_check(a, false, &nm) == GF_OK ? nm.ws : 0;
}

static enum gf_status onnx_ln_run(const struct gf_kernel_args *a)
{
    struct norm nm;
    struct gf_cu_norm *c = &nm.c;
    enum gf_status st = onnx_check(a, false, &nm);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, a->in[0].dtype, a->in[0].nelem);
    if (st == GF_OK)
        st = ln_stat_out(a, 1, (size_t)c->rows, &c->mean);
    if (st == GF_OK)
        st = ln_stat_out(a, 2, (size_t)c->rows, &c->istd);
    if (st != GF_OK || c->rows == 0 || c->n == 0)
        return st;
    if (nm.ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for Scale and B");
    if ((st = param_get(a, &nm.w, nm.brank, nm.bdims, (size_t)c->n, &c->w)) ||
        (st = param_get(a, &nm.b, nm.brank, nm.bdims, (size_t)c->n, &c->b)))
        return st;
    c->x = a->in[0].data;
    c->y = a->out[0].data;
    c->flags |= vec_flag(c);
    plan(a, c, false);
    return gf_cu_check(a, gf_cu_norm_fwd(gf_cu_stream(a), c), "LayerNormalization kernel");
}

/* X, Scale, B of one float type; Mean and InvStdDev fp32 outputs only
 * (stash_type 1). */
static bool onnx_ln_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 2 || !float_type(in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in && i < 3; i++)
        if (in[i].dtype != GF_UNDEFINED && in[i].dtype != in[0].dtype)
            return false;
    return in[0].rank <= GF_MAX_RANK && gf_node_attr_int(n, "stash_type", 1) == 1;
}

static size_t onnx_lng_workspace(const struct gf_kernel_args *a)
{
    struct norm nm;
    return onnx_check(a, true, &nm) == GF_OK ? nm.ws : 0;
}

static enum gf_status onnx_lng_run(const struct gf_kernel_args *a)
{
    struct norm nm;
    struct gf_cu_norm *c = &nm.c;
    enum gf_status st = onnx_check(a, true, &nm);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, a->in[1].dtype, a->in[1].nelem);
    for (size_t k = 1; st == GF_OK && k < a->n_out && k < 3; k++)
        if (a->out[k].data)
            st = gf_check_out_count(a, k, a->in[1].dtype, (size_t)c->n);
    if (st == GF_OK && fu_has(a, 3) && fu_has(a, 4)) {
        const struct gf_tview *m = &a->in[3], *r = &a->in[4];
        if (m->dtype != GF_FLOAT || r->dtype != GF_FLOAT || m->nelem != (size_t)c->rows ||
            r->nelem != (size_t)c->rows)
            st = gf_kernel_error(a, GF_ERR_INVALID, "Mean and InvStdDev must be float with "
                                 "one element per row (%lld)", (long long)c->rows);
        c->mean_in = m->data;
        c->istd_in = r->data;
    }
    if (st != GF_OK || c->n == 0)
        return st;
    c->dw = a->n_out > 1 ? a->out[1].data : NULL;
    c->db = a->n_out > 2 ? a->out[2].data : NULL;
    if (c->rows && nm.ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace");
    if (c->rows && (st = param_get(a, &nm.w, nm.brank, nm.bdims, (size_t)c->n, &c->w)))
        return st;
    c->dy = a->in[0].data;
    c->x = a->in[1].data;
    c->dx = a->out[0].data;
    c->part = (c->dw || c->db) && c->rows ? (double *)((char *)a->workspace + nm.part_off)
                                          : NULL;
    int grid = c->grid;
    c->flags = (c->flags & ~GF_CU_NORM_VEC) | vec_flag(c);
    plan(a, c, true);
    c->grid = c->grid < grid ? c->grid : grid;
    return gf_cu_check(a, gf_cu_norm_grad(gf_cu_stream(a), c),
                       "LayerNormalizationGrad kernel");
}

/* dY, X, Scale of one float type; Mean, InvStdDev fp32. */
static bool onnx_lng_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 3 || !float_type(in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in && i < 5; i++)
        if (in[i].dtype != GF_UNDEFINED && in[i].dtype != (i < 3 ? in[0].dtype : GF_FLOAT))
            return false;
    return in[1].rank <= GF_MAX_RANK;
}

/* ---- the table ------------------------------------------------------------------- */

/* X, R, W, B (and dY) of one float type; LayerNormGrad's Mean and
 * InvStdDev (inputs 3, 4) fp32, as the shared checks ask. */
static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool lng = n->op == GF_OP_LAYER_NORM_GRAD;
    enum gf_dtype low = gf_norm_low_type(n, in, n_in);
    bool grad = n->op == GF_OP_RMS_NORM_GRAD || lng;
    size_t li = grad ? 0 : 1, xi = grad ? 1 : 0; /* the mixed form's 16-bit input, X */
    if (n_in <= xi || !float_type(in[xi].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_UNDEFINED &&
            in[i].dtype != (lng && i >= 3 ? GF_FLOAT : low && i == li ? low : in[xi].dtype))
            return false;
    return in[0].rank <= GF_MAX_RANK && (n_in < 2 || in[1].rank <= GF_MAX_RANK);
}

#define KERNEL(OP, IMPL, SUP, WS, RUN)                                                    \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = IMPL,            \
     .supports = SUP, .workspace = WS, .run = RUN, .n_knobs = 2, .knobs = knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM, "cu_rows", norm_supports, norm_workspace, norm_run),
    KERNEL(ADD_RMS_NORM, "cu_rows", norm_supports, norm_workspace, norm_run),
    KERNEL(LAYER_NORM, "cu_rows", norm_supports, norm_workspace, norm_run),
    KERNEL(ADD_LAYER_NORM, "cu_rows", norm_supports, norm_workspace, norm_run),
    KERNEL(RMS_NORM_GRAD, "cu_rows", norm_supports, grad_workspace, grad_run),
    KERNEL(LAYER_NORM_GRAD, "cu_rows", norm_supports, grad_workspace, grad_run),
    KERNEL(LAYER_NORMALIZATION, "cu_rows", onnx_ln_supports, onnx_ln_workspace, onnx_ln_run),
    KERNEL(LAYER_NORMALIZATION_GRAD, "cu_rows", onnx_lng_supports, onnx_lng_workspace,
           onnx_lng_run),
};

const struct gf_kernel_table gf_cuda_fused_norm_table = {kernels,
                                                         sizeof(kernels) / sizeof(kernels[0])};
