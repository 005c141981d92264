/* OpenCL kernels of the fused normalizations (domain graphfuse, README "Fused ops";
 * device code in fused_norm.cl), fp32, fp16 and bf16 storage (computed in fp32):
 *
 *   RMSNorm AddRMSNorm LayerNorm AddLayerNorm   X [rows, n] -> Y (S, Mean, InvStdDev)
 *   RMSNormGrad                                 dY, X, W? -> dX, dW?
 *   LayerNormGrad                               dY, X, W?, Mean?, InvStdDev? -> dX, dW?, dB?
 *
 * One row per slot of work-items, float4 rows when n % 4 == 0.  When the
 * slot's items can hold the row in registers (PER vectors each, 4 to 16,
 * the smallest that fits the work-group the kernel allows) every element is
 * read from memory once; else the row is read once per pass (two-pass
 * kernels, the rereads hitting the cache).  With prefetch, persistent
 * work-groups (about as many as the device holds at once) walk the rows and
 * load the next row while the current one is reduced; without, the
 * forward has one row per slot.  dW: each slot of the backward kernel sums
 * its rows into one partial row of the workspace (in registers until the
 * end), and colsum adds the partial rows in a fixed order (deterministic,
 * no [rows, n] temporary, no float atomics).  W or B that broadcast to the
 * normalized block without having all its n elements are first expanded
 * into the workspace.  Mean and InvStdDev are float for every storage.
 */
#include "fused.h"

#define NORM_FILE "fused_norm.cl"

/* flags of fused_norm.cl */
#define F_W 2u
#define F_B 4u
#define F_S 8u
#define F_MEAN 16u
#define F_ISTD 32u
#define F_EPS_OUT 128u
#define F_DW 256u
#define F_STATS 512u

/* knobs: work-group size, vectors per work-item (the row in registers when
 * slots of work-items that size cover it), vector width (1: scalar),
 * prefetch (1: off, 2: on), work-groups per compute unit of the persistent
 * grids (the backward's, the forward's with prefetch); 0 is automatic */
enum { K_WG, K_PER, K_VEC, K_PF, K_GPC };
static const int wg_values[] = {0, 64, 256, 1024};
static const int per_values[] = {0, 2, 4, 8};
static const int vec_values[] = {0, 1};
static const int pf_values[] = {0, 1, 2};
static const int gpc_values[] = {0, 1, 2, 4};
static const struct gf_config_knob knobs[] = {
    {"wg", 4, wg_values},
    {"per_item", 4, per_values},
    {"vec", 2, vec_values},
    {"prefetch", 3, pf_values},
    {"groups_per_cu", 4, gpc_values},
};
#define WG_AUTO 256
#define PER_AUTO_MAX 16

/* A float4 kernel when n allows it and the vec knob does not say 1. */
static int norm_vec(const struct gf_kernel_args *a, size_t n)
{
    return n % 4 == 0 && fcl_knob(a, K_VEC) != 1 ? 4 : 1;
}

/* ---- the shape of a row kernel ------------------------------------------------ */

/* Kernel, vectors per item (0: rows re-read), prefetch, work-group size,
 * slot width, work-groups and slots of a launch. */
struct shape {
    cl_kernel k;
    int vec, per, pf;
    size_t wg, tpr, groups, slots;
};

/* The row kernels of fused_norm.cl, in the order of its -DONLY groups. */
enum nk { NK_RMS_FWD, NK_ADD_RMS_FWD, NK_LN_FWD, NK_ADD_LN_FWD, NK_RMS_GRAD, NK_LN_GRAD };
static const char *const nk_names[] = {"rms_fwd", "add_rms_fwd", "ln_fwd", "add_ln_fwd",
                                       "rms_grad", "ln_grad"};

/* Row kernel `id` from a program variant built for it alone. */
static cl_kernel norm_kernel(const struct gf_kernel_args *a, enum nk id, enum gf_dtype dt,
                             int vec, int per, int pf)
{
    char extra[48];
    snprintf(extra, sizeof(extra), "-DPER=%d -DPF=%d -DONLY=%d", per, pf, (int)id + 1);
    return fcl_kernel(a, NORM_FILE, nk_names[id], dt, vec, extra);
}

/* The row in registers: the first per (the knob's, else 4, 8, 16) whose
 * slot, the next power of two >= m / per items, fits the work-group limit
 * of its kernel (the wg knob's, else the device's); s->per stays 0 when
 * none does. */
static enum gf_status shape_regs(const struct gf_kernel_args *a, enum nk id, enum gf_dtype dt,
                                 size_t m, struct shape *s)
{
    int kp = fcl_knob(a, K_PER), kw = fcl_knob(a, K_WG);
    size_t dev = gf_cl_of(a->backend)->max_wg, want = kw > 0 ? (size_t)kw : FCL_MAX_WG;
    for (int per = kp > 0 ? kp : 4; per <= (kp > 0 ? kp : PER_AUTO_MAX); per *= 2) {
        size_t tpr = fcl_pow2_ceil((m + (size_t)per - 1) / (size_t)per);
        if (tpr > want || tpr > dev) /* too wide before the kernel's own limit */
            continue;
        if (!(s->k = norm_kernel(a, id, dt, s->vec, per, s->pf)))
            return gf_cl_fail(a, "building the norm kernel");
        size_t lim = fcl_wg(a, s->k, want);
        if (tpr <= lim) {
            s->per = per;
            s->tpr = tpr;
            s->wg = kw > 0 ? lim : tpr > WG_AUTO ? tpr : lim < WG_AUTO ? lim : WG_AUTO;
            return GF_OK;
        }
    }
    return GF_OK;
}

/* The shape for `rows` rows of n elements of dtype dt: persistent
 * work-groups (the backward, or with prefetch: groups_per_cu knob gpc, 0
 * automatic: as many work-groups of that size as the kernel's limit
 * suggests fit a compute unit) or one row per slot. */
static enum gf_status norm_shape(const struct gf_kernel_args *a, enum nk id, enum gf_dtype dt,
                                 size_t rows, size_t n, bool persistent, int gpc,
                                 struct shape *s)
{
    *s = (struct shape){.vec = norm_vec(a, n), .pf = fcl_knob(a, K_PF) != 1};
    size_t m = n / (size_t)s->vec;
    enum gf_status st = shape_regs(a, id, dt, m, s);
    if (st != GF_OK)
        return st;
    if (!s->per) {
        int kw = fcl_knob(a, K_WG);
        s->pf = 0;
        if (!(s->k = norm_kernel(a, id, dt, s->vec, 0, 0)))
            return gf_cl_fail(a, "building the norm kernel");
        size_t lim = fcl_wg(a, s->k, kw > 0 ? (size_t)kw : FCL_MAX_WG);
        s->tpr = fcl_pow2_ceil(m) < lim ? fcl_pow2_ceil(m) : lim;
        s->wg = kw > 0 ? lim : s->tpr > WG_AUTO ? s->tpr : lim < WG_AUTO ? lim : WG_AUTO;
    }
    size_t spw = s->wg / s->tpr, need = rows ? (rows + spw - 1) / spw : 1;
    s->groups = need;
    if (persistent || s->pf) {
        size_t cu = gf_cl_of(a->backend)->compute_units, per_cu = fcl_wg_limit(a, s->k) / s->wg;
        size_t g = (cu ? cu : 1) * (gpc > 0 ? (size_t)gpc : per_cu ? per_cu : 1);
        size_t iters = (need + g - 1) / g; /* the same rows per group, no idle last round */
        s->groups = (need + iters - 1) / iters;
    }
    s->slots = s->groups * spw;
    return GF_OK;
}

/* Enqueues the shape's kernel (its local memory: a float2 per work-item,
 * argument `red`). */
static enum gf_status shape_launch(const struct gf_kernel_args *a, const struct shape *s,
                                   cl_uint red)
{
    cl_int err = clSetKernelArg(s->k, red, s->wg * 2 * sizeof(float), NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL local memory argument: %s",
                               gf_cl_strerror(err));
    return fcl_launch(a, s->k, s->groups, s->wg);
}

/* ---- W and B: direct, or expanded into the workspace ------------------------ */

/* A parameter of the normalized block: its own buffer when it holds all n
 * elements (then its layout is the block's), else expanded at ws offset
 * `off` (bytes), in its own dtype. */
struct param {
    const struct gf_tview *t; /* NULL: absent */
    bool expand;
    size_t off;
};

static size_t param_bytes(const struct param *p, size_t n)
{
    return p->t && p->expand ? fcl_align(gf_dtype_bytes(p->t->dtype, n)) : 0;
}

static void param_init(struct param *p, const struct gf_tview *t, size_t n, size_t *ws)
{
    p->t = t;
    p->expand = t && t->nelem != n;
    p->off = *ws;
    *ws += param_bytes(p, n);
}

/* expand_t of fused_norm.cl */
struct expand_arg {
    cl_uint rank, dims[8], st[8];
};

static enum gf_status param_expand(const struct gf_kernel_args *a, const struct param *p,
                                   int brank, const int64_t *bdims, size_t n)
{
    if (!p->t || !p->expand)
        return GF_OK;
    struct expand_arg e = {.rank = (cl_uint)brank};
    int64_t st[GF_MAX_RANK];
    fu_strides(p->t, brank, bdims, st);
    for (int i = 0; i < brank; i++) {
        e.dims[i] = (cl_uint)bdims[i];
        e.st[i] = (cl_uint)st[i];
    }
    cl_kernel k = fcl_kernel(a, NORM_FILE, "expand", p->t->dtype, 1, "-DONLY=7");
    if (!k)
        return gf_cl_fail(a, "building expand");
    cl_mem src = fcl_mem(p->t), dst = (cl_mem)a->workspace;
    cl_uint off = (cl_uint)(p->off / gf_dtype_size(p->t->dtype)), nn = (cl_uint)n;
    if (!gf_cl_args(k, 5, ARG(src), ARG(dst), ARG(off), ARG(nn), ARG(e)))
        return gf_cl_fail(a, "expand arguments");
    return fcl_launch_n(a, k, n, 256, 0);
}

/* Buffer and element offset the kernel reads p from. */
static void param_arg(const struct gf_kernel_args *a, const struct param *p, cl_mem *m,
                      cl_uint *off)
{
    *m = !p->t ? NULL : p->expand ? (cl_mem)a->workspace : fcl_mem(p->t);
    *off = p->t && p->expand ? (cl_uint)(p->off / gf_dtype_size(p->t->dtype)) : 0;
}

/* ---- forward ------------------------------------------------------------------- */

/* A node checked: the block, attributes, flags. */
struct norm {
    int brank;
    const int64_t *bdims;
    size_t n, rows;
    float eps, woff;
    cl_uint flags;
    struct param w, b;
};

/* c from a rule: the block X.shape[axis:] (dims pointing into X, its size
 * n, the rows), epsilon, the RMS forms' eps_outside and weight_offset. */
static void norm_from_rule(const struct gf_tview *x, const struct gf_norm_rule *r,
                           struct norm *c)
{
    c->brank = r->block.rank;
    c->bdims = x->dims + r->axis;
    c->n = gf_dims_prod(x->dims, r->axis, x->rank);
    c->rows = c->n ? x->nelem / c->n : 0;
    c->eps = r->eps;
    c->woff = r->woff;
    c->flags |= r->eps_outside ? F_EPS_OUT : 0;
}

/* Every check (kernels/checks.c, the rule in graph/opcheck.c; the data and
 * outputs when `run`); fills c and the workspace layout. */
static enum gf_status norm_check(const struct gf_kernel_args *a, bool run, struct norm *c,
                                 size_t *ws)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_norm_slots sl = gf_norm_slots_of(a->node->op);
    struct gf_norm_rule r;
    bool add = sl.r >= 0;
    *c = (struct norm){0};
    enum gf_status st = gf_norm_check(a, &r);
    if (st == GF_OK && run)
        st = gf_norm_check_run(a, &r);
    if (st != GF_OK)
        return st;
    bool rms = r.rms;
    norm_from_rule(x, &r, c);
    *ws = 0;
    param_init(&c->w, gf_opt_in(a, sl.w), c->n, ws);
    param_init(&c->b, rms ? NULL : gf_opt_in(a, sl.b), c->n, ws);
    size_t ks = add ? 2 : 1;
    c->flags |= (c->w.t ? F_W : 0) | (c->b.t ? F_B : 0);
    c->flags |= add && fu_has_out(a, 1) ? F_S : 0;
    c->flags |= !rms && fu_has_out(a, ks) ? F_MEAN : 0;
    c->flags |= !rms && fu_has_out(a, ks + 1) ? F_ISTD : 0;
    return GF_OK;
}

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    struct norm c;
    size_t ws = 0;
    return norm_check(a, false, &c, &ws) == GF_OK ? ws : 0;
}

static enum nk fwd_kernel(enum gf_op op)
{
    switch (op) {
    case GF_OP_RMS_NORM: return NK_RMS_FWD;
    case GF_OP_ADD_RMS_NORM: return NK_ADD_RMS_FWD;
    case GF_OP_LAYER_NORM: return NK_LN_FWD;
    default: return NK_ADD_LN_FWD;
    }
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct norm c;
    size_t ws = 0;
    enum gf_status st = norm_check(a, true, &c, &ws);
    if (st != GF_OK || c.n == 0 || c.rows == 0)
        return st;
    if (ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and B");
    if ((st = param_expand(a, &c.w, c.brank, c.bdims, c.n)) != GF_OK ||
        (st = param_expand(a, &c.b, c.brank, c.bdims, c.n)) != GF_OK)
        return st;
    struct shape sh;
    if ((st = norm_shape(a, fwd_kernel(a->node->op), a->in[0].dtype, c.rows, c.n, false,
                         fcl_knob(a, K_GPC), &sh)) != GF_OK)
        return st;
    struct gf_norm_slots sl = gf_norm_slots_of(a->node->op);
    bool add = sl.r >= 0;
    size_t ks = add ? 2 : 1;
    cl_mem x = fcl_mem(&a->in[0]), rr = add ? fcl_mem(&a->in[sl.r]) : NULL, w, b;
    cl_mem y = fcl_mem(&a->out[0]), s = c.flags & F_S ? fcl_mem(&a->out[1]) : NULL;
    cl_mem mean = c.flags & F_MEAN ? fcl_mem(&a->out[ks]) : NULL;
    cl_mem istd = c.flags & F_ISTD ? fcl_mem(&a->out[ks + 1]) : NULL;
    cl_uint wo, bo, rows = (cl_uint)c.rows, n = (cl_uint)c.n, tpr = (cl_uint)sh.tpr;
    param_arg(a, &c.w, &w, &wo);
    param_arg(a, &c.b, &b, &bo);
    if (!gf_cl_args(sh.k, 16, ARG(x), ARG(rr), ARG(w), ARG(b), ARG(y), ARG(s), ARG(mean),
                    ARG(istd), ARG(wo), ARG(bo), ARG(rows), ARG(n), ARG(tpr), ARG(c.flags),
                    ARG(c.eps), ARG(c.woff)))
        return gf_cl_fail(a, "norm forward arguments");
    return shape_launch(a, &sh, 16);
}

/* ---- RMSNormGrad ---------------------------------------------------------------- */

/* The plan of a backward run: the node checked, the kernel's shape, and the
 * workspace: [W expanded][partial rows: parts x slots x n floats]. */
struct gplan {
    struct norm c;
    struct shape sh;
    size_t part_off, ws;
};

/* RMSNormGrad and LayerNormGrad: every check (kernels/checks.c, the rule in
 * graph/opcheck.c; the data and outputs when `run`); fills c. */
static enum gf_status norm_grad_check(const struct gf_kernel_args *a, bool run, struct norm *c)
{
    struct gf_norm_rule r;
    *c = (struct norm){0};
    enum gf_status st = gf_norm_grad_check(a, &r);
    if (st == GF_OK && run)
        st = gf_norm_grad_check_run(a, &r);
    if (st != GF_OK)
        return st;
    norm_from_rule(&a->in[1], &r, c);
    c->flags |= fu_has(a, 3) && a->node->op == GF_OP_LAYER_NORM_GRAD ? F_STATS : 0;
    return GF_OK;
}

/* parts: partial rows per slot (1 for RMSNormGrad's dW, 2 for dW and dB). */
static enum gf_status grad_plan(const struct gf_kernel_args *a, enum nk id, size_t parts,
                                struct gplan *p)
{
    p->ws = 0;
    param_init(&p->c.w, fu_has(a, 2) ? &a->in[2] : NULL, p->c.n, &p->ws);
    p->c.flags |= p->c.w.t ? F_W : 0;
    p->c.flags |= fu_has_out(a, 1) || (parts == 2 && fu_has_out(a, 2)) ? F_DW : 0;
    enum gf_status st = norm_shape(a, id, a->in[1].dtype, p->c.rows, p->c.n, true,
                                   fcl_knob(a, K_GPC), &p->sh);
    if (st != GF_OK)
        return st;
    p->part_off = p->ws;
    if (p->c.flags & F_DW)
        p->ws += fcl_align(parts * p->sh.slots * p->c.n * sizeof(float));
    return GF_OK;
}

static size_t rms_grad_workspace(const struct gf_kernel_args *a)
{
    struct gplan p;
    if (norm_grad_check(a, false, &p.c) != GF_OK || p.c.n == 0 ||
        grad_plan(a, NK_RMS_GRAD, 1, &p) != GF_OK)
        return 0;
    return p.ws;
}

/* The backward kernel over the rows, then colsum of its partial rows into
 * dW (and dB, output 2, for LayerNormGrad: its partial rows follow dW's). */
static enum gf_status grad_launch(const struct gf_kernel_args *a, struct gplan *p, bool rms)
{
    enum gf_status st;
    if ((p->c.flags & F_DW) && p->c.rows == 0) { /* a sum over no rows */
        for (size_t o = 1; o < (rms ? 2u : 3u); o++)
            if (fu_has_out(a, o) && (st = fcl_fill(a, fcl_mem(&a->out[o]), 0,
                                                    gf_tview_bytes(&a->out[o]), 0)) != GF_OK)
                return st;
        return GF_OK;
    }
    if (p->c.rows == 0)
        return GF_OK;
    if (p->ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the dW partial rows");
    if ((st = param_expand(a, &p->c.w, p->c.brank, p->c.bdims, p->c.n)) != GF_OK)
        return st;
    cl_mem dy = fcl_mem(&a->in[0]), x = fcl_mem(&a->in[1]), dx = fcl_mem(&a->out[0]), w;
    cl_mem part = p->c.flags & F_DW ? (cl_mem)a->workspace : NULL;
    cl_uint wo, po = (cl_uint)(p->part_off / sizeof(float) / (size_t)p->sh.vec);
    cl_uint rows = (cl_uint)p->c.rows, n = (cl_uint)p->c.n, tpr = (cl_uint)p->sh.tpr;
    param_arg(a, &p->c.w, &w, &wo);
    cl_mem mean = p->c.flags & F_STATS ? fcl_mem(&a->in[3]) : NULL;
    cl_mem istd = p->c.flags & F_STATS ? fcl_mem(&a->in[4]) : NULL;
    bool ok = rms ? gf_cl_args(p->sh.k, 13, ARG(dy), ARG(x), ARG(w), ARG(dx), ARG(part),
                               ARG(wo), ARG(po), ARG(rows), ARG(n), ARG(tpr), ARG(p->c.flags),
                               ARG(p->c.eps), ARG(p->c.woff))
                  : gf_cl_args(p->sh.k, 14, ARG(dy), ARG(x), ARG(w), ARG(dx), ARG(part),
                               ARG(mean), ARG(istd), ARG(wo), ARG(po), ARG(rows), ARG(n),
                               ARG(tpr), ARG(p->c.flags), ARG(p->c.eps));
    if (!ok)
        return gf_cl_fail(a, "norm backward arguments");
    if ((st = shape_launch(a, &p->sh, rms ? 13 : 14)) != GF_OK || !(p->c.flags & F_DW))
        return st;
    size_t each = p->sh.slots * p->c.n * sizeof(float);
    for (size_t o = 1; st == GF_OK && o < (rms ? 2u : 3u); o++)
        if (fu_has_out(a, o))
            st = fcl_colsum(a, (cl_mem)a->workspace, p->part_off + (o - 1) * each, p->sh.slots,
                            p->c.n, &a->out[o], 1.0f);
    return st;
}

static enum gf_status rms_grad_run(const struct gf_kernel_args *a)
{
    struct gplan p;
    enum gf_status st = norm_grad_check(a, true, &p.c);
    if (st != GF_OK || p.c.n == 0)
        return st;
    if ((st = grad_plan(a, NK_RMS_GRAD, 1, &p)) != GF_OK)
        return st;
    return grad_launch(a, &p, true);
}

/* ---- LayerNormGrad -------------------------------------------------------------- */

static size_t ln_grad_workspace(const struct gf_kernel_args *a)
{
    struct gplan p;
    if (norm_grad_check(a, false, &p.c) != GF_OK || p.c.n == 0 ||
        grad_plan(a, NK_LN_GRAD, 2, &p) != GF_OK)
        return 0;
    return p.ws;
}

static enum gf_status ln_grad_run(const struct gf_kernel_args *a)
{
    struct gplan p;
    enum gf_status st = norm_grad_check(a, true, &p.c);
    if (st != GF_OK || p.c.n == 0)
        return st;
    if ((st = grad_plan(a, NK_LN_GRAD, 2, &p)) != GF_OK)
        return st;
    return grad_launch(a, &p, false);
}

/* ---- the table ------------------------------------------------------------------- */

/* X, R, W, B: one storable float type; sizes 32-bit offsets reach. */
static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return fcl_all_same(in, n_in, 0, 0, true) && fcl_fits_u32(in[0].nelem) &&
           in[0].rank <= GF_MAX_RANK;
}

/* dY, X, W: one storable float type; Mean, InvStdDev float. */
static bool grad_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    /* RMSNormGrad's G and dXl (the CPU's and CUDA's): the node runs on the CPU */
    if (n->op == GF_OP_RMS_NORM_GRAD &&
        ((n_in > 3 && in[3].dtype != GF_UNDEFINED) || (n->n_outputs > 2 && n->outputs[2])))
        return false;
    for (size_t i = 3; n->op == GF_OP_LAYER_NORM_GRAD && i < n_in && i < 5; i++)
        if (in[i].dtype != GF_UNDEFINED && in[i].dtype != GF_FLOAT)
            return false;
    return fcl_all_same(in, n_in, 1, n->op == GF_OP_LAYER_NORM_GRAD ? 0x18u : 0, true) &&
           fcl_fits_u32(in[1].nelem) && in[1].rank <= GF_MAX_RANK;
}

#define KERNEL(OP, RUN, WS, SUP)                                                          \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl-rows",     \
     .supports = SUP, .workspace = WS, .run = RUN, .n_knobs = 5, .knobs = knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM, norm_run, norm_workspace, norm_supports),
    KERNEL(ADD_RMS_NORM, norm_run, norm_workspace, norm_supports),
    KERNEL(LAYER_NORM, norm_run, norm_workspace, norm_supports),
    KERNEL(ADD_LAYER_NORM, norm_run, norm_workspace, norm_supports),
    KERNEL(RMS_NORM_GRAD, rms_grad_run, rms_grad_workspace, grad_supports),
    KERNEL(LAYER_NORM_GRAD, ln_grad_run, ln_grad_workspace, grad_supports),
};

const struct gf_kernel_table gf_opencl_fused_norm_table = {
    kernels, sizeof(kernels) / sizeof(kernels[0])};
