/* OpenCL kernels of the fused normalizations (domain graphfuse, README
 * "Fused ops"; device code in fused_norm.cl), fp32:
 *
 *   RMSNorm AddRMSNorm LayerNorm AddLayerNorm   X [rows, n] -> Y (S, Mean, InvStdDev)
 *   RMSNormGrad                                 dY, X, W? -> dX, dW?
 *   LayerNormGrad                               dY, X, W?, Mean?, InvStdDev? -> dX, dW?, dB?
 *
 * One row per slot of work-items, float4 rows when n % 4 == 0, the row
 * kept in registers between passes when a work-item's share is at most 8
 * vectors.  dW: each slot of the backward kernel sums its rows into one
 * partial row of the workspace, and colsum adds the partial rows in a
 * fixed order (deterministic, no [rows, n] temporary, no float atomics).
 * W or B that broadcast to the normalized block without having all its n
 * elements are first expanded into the workspace.
 */
#include "fused.h"

#define NORM_FILE "fused_norm.cl"

/* flags of fused_norm.cl */
#define F_ADD 1u
#define F_W 2u
#define F_B 4u
#define F_S 8u
#define F_MEAN 16u
#define F_ISTD 32u
#define F_RMS 64u
#define F_EPS_OUT 128u
#define F_DW 256u
#define F_STATS 512u

/* knobs: work-group size, rows per work-group, vector width (1: scalar),
 * and for the backward work-groups per compute unit */
enum { K_WG, K_RPW, K_VEC, K_GPC };
static const int wg_values[] = {0, 64, 256, 1024};
static const int rpw_values[] = {0, 1, 4, 16};
static const int vec_values[] = {0, 1};
static const int gpc_values[] = {0, 1, 4, 16};
static const struct gf_config_knob knobs[] = {
    {"wg", 4, wg_values},
    {"rows_per_wg", 4, rpw_values},
    {"vec", 2, vec_values},
    {"groups_per_cu", 4, gpc_values},
};
#define GPC_AUTO 4

/* A float4 kernel when n allows it and the vec knob does not say 1. */
static int norm_vec(const struct gf_kernel_args *a, size_t n)
{
    return n % 4 == 0 && fcl_knob(a, K_VEC) != 1 ? 4 : 1;
}

/* ---- W and B: direct, or expanded into the workspace ------------------------ */

/* A parameter of the normalized block: its own buffer when it holds all n
 * elements (then its layout is the block's), else expanded at ws offset
 * `off` (bytes). */
struct param {
    const struct gf_tview *t; /* NULL: absent */
    bool expand;
    size_t off;
};

static size_t param_bytes(const struct param *p, size_t n)
{
    return p->t && p->expand ? fcl_align(n * sizeof(float)) : 0;
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
    cl_kernel k = fcl_kernel(a, NORM_FILE, "expand", 1, 0);
    if (!k)
        return gf_cl_fail(a, "building expand");
    cl_mem src = fcl_mem(p->t), dst = (cl_mem)a->workspace;
    cl_uint off = (cl_uint)(p->off / sizeof(float)), nn = (cl_uint)n;
    if (!gf_cl_args(k, 5, ARG(src), ARG(dst), ARG(off), ARG(nn), ARG(e)))
        return gf_cl_fail(a, "expand arguments");
    return fcl_launch_n(a, k, n, 256, 0);
}

/* Buffer and offset (in vectors of vec floats) the kernel reads p from. */
static void param_arg(const struct gf_kernel_args *a, const struct param *p, int vec,
                      cl_mem *m, cl_uint *off)
{
    *m = !p->t ? NULL : p->expand ? (cl_mem)a->workspace : fcl_mem(p->t);
    *off = p->t && p->expand ? (cl_uint)(p->off / sizeof(float) / (size_t)vec) : 0;
}

/* ---- forward ------------------------------------------------------------------- */

/* Input slots X R W B, -1 where the op has none. */
struct slots {
    int r, w, b;
};

static struct slots slots_of(enum gf_op op)
{
    switch (op) {
    case GF_OP_RMS_NORM: return (struct slots){-1, 1, -1};
    case GF_OP_ADD_RMS_NORM: return (struct slots){1, 2, -1};
    case GF_OP_LAYER_NORM: return (struct slots){-1, 1, 2};
    default: return (struct slots){1, 2, 3}; /* AddLayerNorm */
    }
}

static bool is_rms(enum gf_op op)
{
    return op == GF_OP_RMS_NORM || op == GF_OP_ADD_RMS_NORM;
}

static const struct gf_tview *opt_in(const struct gf_kernel_args *a, int slot)
{
    return slot >= 0 && fu_has(a, (size_t)slot) ? &a->in[slot] : NULL;
}

/* A node checked: the block, attributes, flags. */
struct norm {
    int brank;
    const int64_t *bdims;
    size_t n, rows;
    float eps, woff;
    cl_uint flags;
    struct param w, b;
};

static enum gf_status norm_block(const struct gf_kernel_args *a, const struct gf_tview *x,
                                 struct norm *c)
{
    int64_t axis = gf_node_attr_int(a->node, "axis", -1);
    int ax;
    if (!fu_axis(axis, x->rank, &ax))
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %lld is out of range for X of rank %d",
                               (long long)axis, x->rank);
    c->brank = x->rank - ax;
    c->bdims = x->dims + ax;
    c->n = 1;
    for (int i = ax; i < x->rank; i++)
        c->n *= (size_t)x->dims[i];
    c->rows = c->n ? x->nelem / c->n : 0;
    return GF_OK;
}

static enum gf_status norm_param(const struct gf_kernel_args *a, int i, const char *name,
                                 const struct norm *c)
{
    enum gf_status st = fu_check_in(a, (size_t)i, name, a->in[0].dtype);
    if (st == GF_OK && !fu_bcasts_to(&a->in[i], c->brank, c->bdims))
        return gf_kernel_error(a, GF_ERR_INVALID,
                               "%s (input %d) %s does not broadcast to the normalized dims %s",
                               name, i, FU_SHAPE(&a->in[i]), FU_DIMS(c->brank, c->bdims));
    return st;
}

/* epsilon >= 0, eps_outside 0 / 1, weight_offset finite and only with W. */
static enum gf_status norm_attrs(const struct gf_kernel_args *a, bool rms, bool has_w,
                                 struct norm *c)
{
    double eps = gf_node_attr_float(a->node, "epsilon", rms ? 1e-6f : 1e-5f);
    if (!(eps >= 0) || isinf(eps))
        return gf_kernel_error(a, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", eps);
    c->eps = (float)eps;
    c->woff = 0;
    if (!rms)
        return GF_OK;
    int64_t outside = gf_node_attr_int(a->node, "eps_outside", 0);
    if (outside != 0 && outside != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "eps_outside %lld must be 0 or 1",
                               (long long)outside);
    c->flags |= outside ? F_EPS_OUT : 0;
    double off = gf_node_attr_float(a->node, "weight_offset", 0.0f);
    if (!isfinite(off))
        return gf_kernel_error(a, GF_ERR_INVALID, "weight_offset must be finite");
    if (off != 0 && !has_w)
        return gf_kernel_error(a, GF_ERR_INVALID, "weight_offset %g needs the weight W", off);
    c->woff = (float)off;
    return GF_OK;
}

/* Mean and InvStdDev (outputs k, k + 1) when present: X's shape with the
 * normalized axes 1, float. */
static enum gf_status norm_stats_check(const struct gf_kernel_args *a, size_t k, int brank)
{
    const struct gf_tview *x = &a->in[0];
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = GF_OK;
    for (int i = 0; i < x->rank; i++)
        dims[i] = i < x->rank - brank ? x->dims[i] : 1;
    for (size_t i = k; st == GF_OK && i < k + 2; i++)
        if (fu_has_out(a, i))
            st = fu_check_out(a, i, GF_FLOAT, x->rank, dims);
    return st;
}

/* Every check of the CPU kernel; fills c and the workspace layout. */
static enum gf_status norm_check(const struct gf_kernel_args *a, struct norm *c, size_t *ws)
{
    const struct gf_tview *x = &a->in[0];
    struct slots sl = slots_of(a->node->op);
    bool rms = is_rms(a->node->op), add = sl.r >= 0;
    *c = (struct norm){.flags = (rms ? F_RMS : 0) | (add ? F_ADD : 0)};
    enum gf_status st = fu_check_in(a, 0, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = norm_block(a, x, c);
    if (st == GF_OK && add && (st = fu_check_in(a, (size_t)sl.r, "R", x->dtype)) == GF_OK &&
        !fu_same_shape(&a->in[sl.r], x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "R %s must have X's shape %s",
                             FU_SHAPE(&a->in[sl.r]), FU_SHAPE(x));
    if (st == GF_OK && opt_in(a, sl.w))
        st = norm_param(a, sl.w, "W", c);
    if (st == GF_OK && opt_in(a, sl.b))
        st = norm_param(a, sl.b, "B", c);
    if (st == GF_OK)
        st = norm_attrs(a, rms, opt_in(a, sl.w) != NULL, c);
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    if (st == GF_OK && add && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, x->rank, x->dims);
    if (st == GF_OK && !rms)
        st = norm_stats_check(a, add ? 2 : 1, c->brank);
    if (st != GF_OK)
        return st;
    *ws = 0;
    param_init(&c->w, opt_in(a, sl.w), c->n, ws);
    param_init(&c->b, rms ? NULL : opt_in(a, sl.b), c->n, ws);
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
    return norm_check(a, &c, &ws) == GF_OK ? ws : 0;
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct norm c;
    size_t ws = 0;
    enum gf_status st = norm_check(a, &c, &ws);
    if (st != GF_OK || c.n == 0 || c.rows == 0)
        return st;
    if (ws && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and B");
    if ((st = param_expand(a, &c.w, c.brank, c.bdims, c.n)) != GF_OK ||
        (st = param_expand(a, &c.b, c.brank, c.bdims, c.n)) != GF_OK)
        return st;
    int vec = norm_vec(a, c.n);
    struct fcl_rows r;
    cl_kernel k = fcl_rows_kernel(a, NORM_FILE, "norm_fwd", vec, c.rows, c.n / (size_t)vec,
                                  fcl_knob(a, K_WG), fcl_knob(a, K_RPW), &r);
    if (!k)
        return gf_cl_fail(a, "building norm_fwd");
    struct slots sl = slots_of(a->node->op);
    bool add = c.flags & F_ADD;
    size_t ks = add ? 2 : 1;
    cl_mem x = fcl_mem(&a->in[0]), rr = add ? fcl_mem(&a->in[sl.r]) : NULL, w, b;
    cl_mem y = fcl_mem(&a->out[0]), s = c.flags & F_S ? fcl_mem(&a->out[1]) : NULL;
    cl_mem mean = c.flags & F_MEAN ? fcl_mem(&a->out[ks]) : NULL;
    cl_mem istd = c.flags & F_ISTD ? fcl_mem(&a->out[ks + 1]) : NULL;
    cl_uint wo, bo, rows = (cl_uint)c.rows, n = (cl_uint)c.n, tpr = (cl_uint)r.tpr;
    param_arg(a, &c.w, vec, &w, &wo);
    param_arg(a, &c.b, vec, &b, &bo);
    if (!gf_cl_args(k, 16, ARG(x), ARG(rr), ARG(w), ARG(b), ARG(y), ARG(s), ARG(mean),
                    ARG(istd), ARG(wo), ARG(bo), ARG(rows), ARG(n), ARG(tpr), ARG(c.flags),
                    ARG(c.eps), ARG(c.woff)))
        return gf_cl_fail(a, "norm_fwd arguments");
    return fcl_launch(a, k, r.groups, r.wg);
}

/* ---- RMSNormGrad ---------------------------------------------------------------- */

/* The plan of a backward run: the node checked, the kernel and its shape,
 * and the workspace: [W expanded][partial rows: slots x n floats]. */
struct gplan {
    struct norm c;
    int vec;
    cl_kernel k;
    struct fcl_rows r;
    size_t slots, part_off, ws;
};

/* dY, X, W? -> dX, dW?: the checks of the CPU kernel. */
static enum gf_status rms_grad_check(const struct gf_kernel_args *a, struct norm *c)
{
    const struct gf_tview *x = &a->in[1];
    *c = (struct norm){.flags = F_RMS};
    enum gf_status st = fu_check_in(a, 1, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 0, "dY", x->dtype);
    if (st == GF_OK && !fu_same_shape(&a->in[0], x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY %s must have X's shape %s",
                             FU_SHAPE(&a->in[0]), FU_SHAPE(x));
    if (st == GF_OK)
        st = norm_block(a, x, c);
    if (st == GF_OK && fu_has(a, 2) && (st = fu_check_in(a, 2, "W", x->dtype)) == GF_OK &&
        !fu_bcasts_to(&a->in[2], c->brank, c->bdims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "W %s does not broadcast to the normalized dims",
                             FU_SHAPE(&a->in[2]));
    if (st == GF_OK) {
        double eps = gf_node_attr_float(a->node, "epsilon", 1e-6f);
        int64_t outside = gf_node_attr_int(a->node, "eps_outside", 0);
        double off = gf_node_attr_float(a->node, "weight_offset", 0.0f);
        if (!(eps >= 0) || isinf(eps))
            return gf_kernel_error(a, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", eps);
        if (outside != 0 && outside != 1)
            return gf_kernel_error(a, GF_ERR_INVALID, "eps_outside %lld must be 0 or 1",
                                   (long long)outside);
        if (!isfinite(off) || (off != 0 && !fu_has(a, 2)))
            return gf_kernel_error(a, GF_ERR_INVALID,
                                   "weight_offset %g needs a finite value and W", off);
        c->eps = (float)eps;
        c->woff = (float)off;
        c->flags |= outside ? F_EPS_OUT : 0;
    }
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    if (st == GF_OK && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, c->brank, c->bdims);
    return st;
}

/* The slots: automatic GPC_AUTO work-groups per compute unit (the knob
 * overrides), never more than the rows need. */
static void grad_shape(const struct gf_kernel_args *a, struct gplan *p)
{
    size_t spw = p->r.wg / p->r.tpr, cu = gf_cl_of(a->backend)->compute_units;
    size_t gpc = fcl_knob(a, K_GPC) > 0 ? (size_t)fcl_knob(a, K_GPC) : GPC_AUTO;
    size_t need = (p->c.rows + spw - 1) / spw, groups = (cu ? cu : 1) * gpc;
    p->r.groups = need < groups ? need : groups;
    p->r.groups = p->r.groups ? p->r.groups : 1;
    p->slots = p->r.groups * spw;
}

/* parts: partial rows per slot (1 for RMSNormGrad's dW, 2 for dW and dB). */
static enum gf_status grad_plan(const struct gf_kernel_args *a, const char *name, size_t parts,
                                struct gplan *p)
{
    p->ws = 0;
    param_init(&p->c.w, fu_has(a, 2) ? &a->in[2] : NULL, p->c.n, &p->ws);
    p->c.flags |= p->c.w.t ? F_W : 0;
    p->c.flags |= fu_has_out(a, 1) || (parts == 2 && fu_has_out(a, 2)) ? F_DW : 0;
    p->vec = norm_vec(a, p->c.n);
    p->k = fcl_rows_kernel(a, NORM_FILE, name, p->vec, p->c.rows, p->c.n / (size_t)p->vec,
                           fcl_knob(a, K_WG), fcl_knob(a, K_RPW), &p->r);
    if (!p->k)
        return gf_cl_fail(a, "building the norm backward kernel");
    grad_shape(a, p);
    p->part_off = p->ws;
    if (p->c.flags & F_DW)
        p->ws += fcl_align(parts * p->slots * p->c.n * sizeof(float));
    return GF_OK;
}

static size_t rms_grad_workspace(const struct gf_kernel_args *a)
{
    struct gplan p;
    if (rms_grad_check(a, &p.c) != GF_OK || grad_plan(a, "rms_grad", 1, &p) != GF_OK)
        return 0;
    return p.ws;
}

/* out[j] = sum of `count` partial rows of n floats at workspace offset off. */
static enum gf_status colsum(const struct gf_kernel_args *a, size_t off, size_t count,
                             size_t n, cl_mem out)
{
    cl_kernel k = fcl_kernel(a, NORM_FILE, "colsum", 1, 0);
    if (!k)
        return gf_cl_fail(a, "building colsum");
    size_t lim = fcl_wg(a, k, 1024), lx = lim < 32 ? lim : 32, ly = lim / lx;
    cl_mem part = (cl_mem)a->workspace;
    cl_uint po = (cl_uint)(off / sizeof(float)), pc = (cl_uint)count, nn = (cl_uint)n;
    float one = 1.0f;
    if (!gf_cl_args(k, 6, ARG(part), ARG(out), ARG(po), ARG(pc), ARG(nn), ARG(one)))
        return gf_cl_fail(a, "colsum arguments");
    size_t global[2] = {(n + lx - 1) / lx * lx, ly}, local[2] = {lx, ly};
    return gf_cl_run(a, k, 2, global, local);
}

/* The backward kernel over the rows, then colsum of its partial rows into
 * dW (and dB, output 2, for LayerNormGrad: its partial rows follow dW's). */
static enum gf_status grad_launch(const struct gf_kernel_args *a, struct gplan *p, bool rms)
{
    enum gf_status st;
    if ((p->c.flags & F_DW) && p->c.rows == 0) { /* a sum over no rows */
        for (size_t o = 1; o < (rms ? 2u : 3u); o++)
            if (fu_has_out(a, o) && (st = fcl_fill(a, fcl_mem(&a->out[o]), 0,
                                                    p->c.n * sizeof(float), 0)) != GF_OK)
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
    cl_uint wo, po = (cl_uint)(p->part_off / sizeof(float) / (size_t)p->vec);
    cl_uint rows = (cl_uint)p->c.rows, n = (cl_uint)p->c.n, tpr = (cl_uint)p->r.tpr;
    param_arg(a, &p->c.w, p->vec, &w, &wo);
    cl_mem mean = p->c.flags & F_STATS ? fcl_mem(&a->in[3]) : NULL;
    cl_mem istd = p->c.flags & F_STATS ? fcl_mem(&a->in[4]) : NULL;
    bool ok = rms ? gf_cl_args(p->k, 13, ARG(dy), ARG(x), ARG(w), ARG(dx), ARG(part), ARG(wo),
                               ARG(po), ARG(rows), ARG(n), ARG(tpr), ARG(p->c.flags),
                               ARG(p->c.eps), ARG(p->c.woff))
                  : gf_cl_args(p->k, 14, ARG(dy), ARG(x), ARG(w), ARG(dx), ARG(part), ARG(mean),
                               ARG(istd), ARG(wo), ARG(po), ARG(rows), ARG(n), ARG(tpr),
                               ARG(p->c.flags), ARG(p->c.eps));
    if (!ok)
        return gf_cl_fail(a, "norm backward arguments");
    if ((st = fcl_launch(a, p->k, p->r.groups, p->r.wg)) != GF_OK || !(p->c.flags & F_DW))
        return st;
    if (fu_has_out(a, 1))
        st = colsum(a, p->part_off, p->slots, p->c.n, fcl_mem(&a->out[1]));
    if (st == GF_OK && !rms && fu_has_out(a, 2))
        st = colsum(a, p->part_off + p->slots * p->c.n * sizeof(float), p->slots, p->c.n,
                    fcl_mem(&a->out[2]));
    return st;
}

static enum gf_status rms_grad_run(const struct gf_kernel_args *a)
{
    struct gplan p;
    enum gf_status st = rms_grad_check(a, &p.c);
    if (st != GF_OK || p.c.n == 0)
        return st;
    if ((st = grad_plan(a, "rms_grad", 1, &p)) != GF_OK)
        return st;
    return grad_launch(a, &p, true);
}

/* ---- LayerNormGrad -------------------------------------------------------------- */

/* Mean and InvStdDev (inputs 3, 4): both or neither, X's dtype, X's shape
 * with the normalized axes 1. */
static enum gf_status ln_stats_check(const struct gf_kernel_args *a, const struct norm *c)
{
    const struct gf_tview *x = &a->in[1];
    if (fu_has(a, 3) != fu_has(a, 4))
        return gf_kernel_error(a, GF_ERR_INVALID, "Mean (input 3) and InvStdDev (input 4) "
                               "must be given together");
    int64_t dims[GF_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        dims[i] = i < x->rank - c->brank ? x->dims[i] : 1;
    static const char *const names[2] = {"Mean", "InvStdDev"};
    for (size_t i = 3; i < 5 && fu_has(a, i); i++) {
        enum gf_status st = fu_check_in(a, i, names[i - 3], x->dtype);
        if (st != GF_OK)
            return st;
        if (!fu_same_shape(&a->in[i], x->rank, dims))
            return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) %s must be %s",
                                   names[i - 3], i, FU_SHAPE(&a->in[i]), FU_DIMS(x->rank, dims));
    }
    return GF_OK;
}

/* dY, X, W?, Mean?, InvStdDev? -> dX, dW?, dB?: the checks of the CPU kernel. */
static enum gf_status ln_grad_check(const struct gf_kernel_args *a, struct norm *c)
{
    const struct gf_tview *x = &a->in[1];
    *c = (struct norm){0};
    enum gf_status st = fu_check_in(a, 1, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 0, "dY", x->dtype);
    if (st == GF_OK && !fu_same_shape(&a->in[0], x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY %s must have X's shape %s",
                             FU_SHAPE(&a->in[0]), FU_SHAPE(x));
    if (st == GF_OK)
        st = norm_block(a, x, c);
    if (st == GF_OK && fu_has(a, 2) && (st = fu_check_in(a, 2, "W", x->dtype)) == GF_OK &&
        !fu_bcasts_to(&a->in[2], c->brank, c->bdims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "W %s does not broadcast to the normalized dims",
                             FU_SHAPE(&a->in[2]));
    if (st == GF_OK)
        st = ln_stats_check(a, c);
    double eps = gf_node_attr_float(a->node, "epsilon", 1e-5f);
    if (st == GF_OK && (!(eps >= 0) || isinf(eps)))
        st = gf_kernel_error(a, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", eps);
    c->eps = (float)eps;
    c->flags |= fu_has(a, 3) ? F_STATS : 0;
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    for (size_t k = 1; k < 3 && st == GF_OK; k++)
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, x->dtype, c->brank, c->bdims);
    return st;
}

static size_t ln_grad_workspace(const struct gf_kernel_args *a)
{
    struct gplan p;
    if (ln_grad_check(a, &p.c) != GF_OK || grad_plan(a, "ln_grad", 2, &p) != GF_OK)
        return 0;
    return p.ws;
}

static enum gf_status ln_grad_run(const struct gf_kernel_args *a)
{
    struct gplan p;
    enum gf_status st = ln_grad_check(a, &p.c);
    if (st != GF_OK || p.c.n == 0)
        return st;
    if ((st = grad_plan(a, "ln_grad", 2, &p)) != GF_OK)
        return st;
    return grad_launch(a, &p, false);
}

/* ---- the table ------------------------------------------------------------------- */

static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return fcl_all_f32(in, n_in, 0) && fcl_fits_u32(in[0].nelem) &&
           in[0].rank <= GF_MAX_RANK;
}

static bool grad_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 2 && fcl_all_f32(in, n_in, 0) && in[1].dtype == GF_FLOAT &&
           fcl_fits_u32(in[1].nelem);
}

#define KERNEL(OP, RUN, WS, SUP, NK)                                                      \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_FLOAT, .impl = "cl-rows",         \
     .supports = SUP, .workspace = WS, .run = RUN, .n_knobs = NK, .knobs = knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM, norm_run, norm_workspace, norm_supports, 3),
    KERNEL(ADD_RMS_NORM, norm_run, norm_workspace, norm_supports, 3),
    KERNEL(LAYER_NORM, norm_run, norm_workspace, norm_supports, 3),
    KERNEL(ADD_LAYER_NORM, norm_run, norm_workspace, norm_supports, 3),
    KERNEL(RMS_NORM_GRAD, rms_grad_run, rms_grad_workspace, grad_supports, 4),
    KERNEL(LAYER_NORM_GRAD, ln_grad_run, ln_grad_workspace, grad_supports, 4),
};

const struct gf_kernel_table gf_opencl_fused_norm_table = {
    kernels, sizeof(kernels) / sizeof(kernels[0])};
