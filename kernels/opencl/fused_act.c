/* OpenCL kernels of the fused activations and their gradients (domain
 * graphfuse, README "Fused ops" and "Fused backward ops"; device code in
 * fused_act.cl), fp32, fp16 and bf16 storage (computed in fp32):
 *
 *   SwiGLU GeGLU   G, U -> Y        same shapes: float4 grid-stride; broadcast G / U:
 *   SiLU Gelu      X -> Y           an element-strided kernel over merged axes
 *   SwiGLUGrad GeGLUGrad  dY, G, U -> dG?, dU?
 *   RoPE           X, Cos, Sin -> Y      RoPEGrad  dY, Cos, Sin -> dX
 *   MatMulEpilogueGrad  dY, Z -> dZ, dBias?   rows walked down columns; dBias
 *                  through per-group partial rows (colsum of fused_norm.cl)
 *
 * Every element is read once and written once; exp / erfc are OpenCL's
 * (fp32, within a few ulp).
 */
#include "device_common.h"
#include "fused.h"

#define ACT_FILE "fused_act.cl"


/* knobs: work-group size, vector width (1: scalar), work-groups per compute
 * unit of the grid-stride loops */
enum { K_WG, K_VEC, K_GPC };
static const int wg_values[] = {0, 64, 256, 1024};
static const int vec_values[] = {0, 1};
static const int gpc_values[] = {0, 1, 8, 64};
static const struct gf_config_knob knobs[] = {
    {"wg", 4, wg_values},
    {"vec", 2, vec_values},
    {"groups_per_cu", 4, gpc_values},
};
#define WG_AUTO 256
#define GPC_AUTO 8 /* 8 x 256 work-items: one resident wave on an SM of 2048 threads */

/* A grid-stride launch over n items: its work-group size and group cap. */
static enum gf_status grid_launch(const struct gf_kernel_args *a, cl_kernel k, size_t n)
{
    size_t wg = fcl_wg(a, k, fcl_knob(a, K_WG) > 0 ? (size_t)fcl_knob(a, K_WG) : WG_AUTO);
    size_t gpc = fcl_knob(a, K_GPC) > 0 ? (size_t)fcl_knob(a, K_GPC) : GPC_AUTO;
    size_t cu = gf_cl_of(a->backend)->compute_units;
    return fcl_launch_n(a, k, n, wg, (cu ? cu : 1) * gpc);
}

static int vec_of(const struct gf_kernel_args *a, bool possible)
{
    return possible && fcl_knob(a, K_VEC) != 1 ? 4 : 1;
}

/* ---- SwiGLU GeGLU SiLU Gelu ---------------------------------------------------- */

/* bcast_t of fused_act.cl */
struct bcast_arg {
    cl_uint rank, dims[8], sg[8], su[8];
};

/* Drops size-1 axes and merges an axis into the one before it when both
 * operands are contiguous across the pair (gf_nd_merge, as the CPU kernel
 * does); rank 0 when every axis has size 1. */
static void bcast_merge(struct bcast_arg *b, int rank, const int64_t *dims, const int64_t *sg,
                        const int64_t *su)
{
    int64_t st[2][GF_MAX_RANK], md[GF_MAX_RANK], ms[2][GF_MAX_RANK];
    memcpy(st[0], sg, (size_t)rank * sizeof(int64_t));
    memcpy(st[1], su, (size_t)rank * sizeof(int64_t));
    int r = gf_nd_merge(rank, dims, 2, st, md, ms);
    if (r == 1 && md[0] == 1)
        r = 0;
    for (int i = 0; i < r; i++) {
        b->dims[i] = (cl_uint)md[i];
        b->sg[i] = (cl_uint)ms[0][i];
        b->su[i] = (cl_uint)ms[1][i];
    }
    b->rank = (cl_uint)r;
}

static enum gf_status glu_dense(const struct gf_kernel_args *a, cl_uint act, cl_uint gated)
{
    size_t n = a->out[0].nelem;
    int vec = vec_of(a, true);
    cl_kernel k = fcl_kernel(a, ACT_FILE, "glu", a->in[0].dtype, vec, NULL);
    if (!k)
        return gf_cl_fail(a, "building glu");
    cl_mem g = fcl_mem(&a->in[0]), u = gated ? fcl_mem(&a->in[1]) : NULL;
    cl_mem y = fcl_mem(&a->out[0]);
    cl_ulong nv = n / (size_t)vec, nn = n;
    if (!gf_cl_args(k, 7, ARG(g), ARG(u), ARG(y), ARG(nv), ARG(nn), ARG(act), ARG(gated)))
        return gf_cl_fail(a, "glu arguments");
    return grid_launch(a, k, nv ? nv : 1);
}

static enum gf_status glu_bcast(const struct gf_kernel_args *a, cl_uint act, int rank,
                                const int64_t *dims)
{
    int64_t sg[GF_MAX_RANK], su[GF_MAX_RANK];
    fu_strides(&a->in[0], rank, dims, sg);
    fu_strides(&a->in[1], rank, dims, su);
    struct bcast_arg b = {0};
    bcast_merge(&b, rank, dims, sg, su);
    cl_kernel k = fcl_kernel(a, ACT_FILE, "glu_bcast", a->in[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building glu_bcast");
    cl_mem g = fcl_mem(&a->in[0]), u = fcl_mem(&a->in[1]), y = fcl_mem(&a->out[0]);
    cl_uint n = (cl_uint)a->out[0].nelem, gated = 1;
    if (!gf_cl_args(k, 7, ARG(g), ARG(u), ARG(y), ARG(n), ARG(act), ARG(gated), ARG(b)))
        return gf_cl_fail(a, "glu_bcast arguments");
    return grid_launch(a, k, n);
}

static enum gf_status glu_run(const struct gf_kernel_args *a)
{
    enum gf_op op = a->node->op;
    cl_uint gated = op == GF_OP_SWIGLU || op == GF_OP_GEGLU;
    const struct gf_tview *g = &a->in[0];
    enum gf_act act;
    int rank;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_glu_check(a, &act, &rank, dims); /* kernels/checks.c */
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    bool dense = !gated || (fu_same_shape(g, rank, dims) &&
                            fu_same_shape(&a->in[1], rank, dims));
    return dense ? glu_dense(a, (cl_uint)act, gated) : glu_bcast(a, (cl_uint)act, rank, dims);
}

/* ---- SwiGLUGrad GeGLUGrad -------------------------------------------------------- */

#define W_DG 1u
#define W_DU 2u

static enum gf_status glu_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *dy = &a->in[0];
    enum gf_act gact;
    cl_uint want = (fu_has_out(a, 0) ? W_DG : 0) | (fu_has_out(a, 1) ? W_DU : 0);
    enum gf_status st = gf_glu_grad_check(a, &gact); /* kernels/checks.c */
    cl_uint act = (cl_uint)gact;
    if (st != GF_OK || dy->nelem == 0 || !want)
        return st;
    int vec = vec_of(a, true);
    cl_kernel k = fcl_kernel(a, ACT_FILE, "glu_grad", dy->dtype, vec, NULL);
    if (!k)
        return gf_cl_fail(a, "building glu_grad");
    cl_mem d = fcl_mem(dy), g = fcl_mem(&a->in[1]), u = fcl_mem(&a->in[2]);
    cl_mem dg = want & W_DG ? fcl_mem(&a->out[0]) : NULL;
    cl_mem du = want & W_DU ? fcl_mem(&a->out[1]) : NULL;
    cl_ulong nv = dy->nelem / (size_t)vec, nn = dy->nelem;
    if (!gf_cl_args(k, 9, ARG(d), ARG(g), ARG(u), ARG(dg), ARG(du), ARG(nv), ARG(nn), ARG(act),
                    ARG(want)))
        return gf_cl_fail(a, "glu_grad arguments");
    return grid_launch(a, k, nv ? nv : 1);
}

/* ---- RoPE RoPEGrad ------------------------------------------------------------------ */

/* rope_t of fused_act.cl */
struct rope_arg {
    cl_uint rank, dims[8], sc[8], ss[8], lc, ls;
};

/* The leading axes of X (merged where Cos and Sin allow) with the strides
 * of Cos and Sin over them; the inner strides. */
static void rope_layout(const struct gf_kernel_args *a, struct rope_arg *p)
{
    const struct gf_tview *x = &a->in[0];
    int64_t sc[GF_MAX_RANK], ss[GF_MAX_RANK];
    fu_strides(&a->in[1], x->rank, x->dims, sc);
    fu_strides(&a->in[2], x->rank, x->dims, ss);
    struct bcast_arg b = {0};
    bcast_merge(&b, x->rank - 1, x->dims, sc, ss);
    p->rank = b.rank;
    memcpy(p->dims, b.dims, sizeof(p->dims));
    memcpy(p->sc, b.sg, sizeof(p->sc));
    memcpy(p->ss, b.su, sizeof(p->ss));
    p->lc = (cl_uint)sc[x->rank - 1];
    p->ls = (cl_uint)ss[x->rank - 1];
}

static enum gf_status rope_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    bool grad = a->node->op == GF_OP_ROPE_GRAD;
    enum gf_status st = gf_rope_check(a); /* kernels/checks.c */
    if (st != GF_OK || x->nelem == 0)
        return st;
    struct rope_arg p = {0};
    rope_layout(a, &p);
    size_t h = (size_t)x->dims[x->rank - 1] / 2;
    int vec = vec_of(a, h % 4 == 0 && p.lc == 1 && p.ls == 1);
    cl_kernel k = fcl_kernel(a, ACT_FILE, "rope", x->dtype, vec, NULL);
    if (!k)
        return gf_cl_fail(a, "building rope");
    cl_mem xm = fcl_mem(x), cs = fcl_mem(&a->in[1]), sn = fcl_mem(&a->in[2]);
    cl_mem y = fcl_mem(&a->out[0]);
    cl_uint rows = (cl_uint)(x->nelem / (2 * h)), hv = (cl_uint)(h / (size_t)vec), dir = grad;
    if (!gf_cl_args(k, 8, ARG(xm), ARG(cs), ARG(sn), ARG(y), ARG(rows), ARG(hv), ARG(dir),
                    ARG(p)))
        return gf_cl_fail(a, "rope arguments");
    return grid_launch(a, k, (size_t)rows * hv);
}

/* ---- MatMulEpilogueGrad ---------------------------------------------------------- */

/* The checks (kernels/checks.c, the rule in graph/opcheck.c): the
 * activation (gf_mme_act_names' order, as fused_act.cl's) and from_output. */
static enum gf_status epi_check(const struct gf_kernel_args *a, cl_uint *act, cl_uint *from_y)
{
    struct gf_mme_grad_rule r;
    enum gf_status st = gf_mme_grad_check(a, &r);
    *act = (cl_uint)r.act;
    *from_y = r.from_y;
    return st;
}

/* The grid: columns (vectors) x row groups of rpg rows, about
 * CU x wg x groups_per_cu work-items. */
struct epi_plan {
    int vec;
    size_t n, rows, m, groups, rpg, wg;
};

static void epi_plan(const struct gf_kernel_args *a, struct epi_plan *p)
{
    const struct gf_tview *dy = &a->in[0];
    p->n = (size_t)dy->dims[dy->rank - 1];
    p->rows = p->n ? dy->nelem / p->n : 0;
    p->vec = vec_of(a, p->n % 4 == 0);
    p->m = p->n / (size_t)p->vec;
    p->wg = fcl_knob(a, K_WG) > 0 ? (size_t)fcl_knob(a, K_WG) : WG_AUTO;
    size_t gpc = fcl_knob(a, K_GPC) > 0 ? (size_t)fcl_knob(a, K_GPC) : GPC_AUTO;
    size_t cu = gf_cl_of(a->backend)->compute_units, target = (cu ? cu : 1) * p->wg * gpc;
    size_t groups = p->m ? (target + p->m - 1) / p->m : 1;
    groups = groups < p->rows ? groups : p->rows ? p->rows : 1;
    p->rpg = p->rows ? (p->rows + groups - 1) / groups : 1;
    p->groups = p->rows ? (p->rows + p->rpg - 1) / p->rpg : 1;
}

/* ws = [dBias partials: groups x n floats] */
static size_t epi_workspace(const struct gf_kernel_args *a)
{
    cl_uint act, fy;
    if (epi_check(a, &act, &fy) != GF_OK || !fu_has_out(a, 1))
        return 0;
    struct epi_plan p;
    epi_plan(a, &p);
    return fcl_align(p.groups * p.n * sizeof(float));
}

/* dBias = beta times the column sums of the groups' partial rows. */
static enum gf_status epi_dbias(const struct gf_kernel_args *a, const struct epi_plan *p)
{
    float beta = gf_node_attr_float(a->node, "beta", 1.0f);
    return fcl_colsum(a, (cl_mem)a->workspace, 0, p->rows ? p->groups : 0, p->n, &a->out[1],
                      beta);
}

static enum gf_status epi_run(const struct gf_kernel_args *a)
{
    cl_uint act, fy;
    enum gf_status st = epi_check(a, &act, &fy);
    struct epi_plan p;
    if (st != GF_OK)
        return st;
    epi_plan(a, &p);
    cl_uint want_db = fu_has_out(a, 1);
    if (p.n == 0)
        return GF_OK;
    if (want_db && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the dBias partials");
    if (p.rows) {
        cl_kernel k = fcl_kernel(a, ACT_FILE, "epi_grad", a->in[0].dtype, p.vec, NULL);
        if (!k)
            return gf_cl_fail(a, "building epi_grad");
        cl_mem dy = fcl_mem(&a->in[0]), z = fcl_mem(&a->in[1]), dz = fcl_mem(&a->out[0]);
        cl_mem part = want_db ? (cl_mem)a->workspace : NULL;
        cl_uint po = 0, rows = (cl_uint)p.rows, m = (cl_uint)p.m, rpg = (cl_uint)p.rpg;
        if (!gf_cl_args(k, 11, ARG(dy), ARG(z), ARG(dz), ARG(part), ARG(po), ARG(rows), ARG(m),
                        ARG(rpg), ARG(act), ARG(fy), ARG(want_db)))
            return gf_cl_fail(a, "epi_grad arguments");
        size_t wg = fcl_wg(a, k, p.wg);
        size_t global[2] = {(p.m + wg - 1) / wg * wg, p.groups}, local[2] = {wg, 1};
        if ((st = gf_cl_run(a, k, 2, global, local)) != GF_OK)
            return st;
    }
    return want_db ? epi_dbias(a, &p) : GF_OK;
}

/* ---- the table ------------------------------------------------------------------- */

/* One storable float type (fp32, fp16, bf16), and sizes that 32-bit
 * offsets reach (Cos / Sin, broadcast U). */
static bool act_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    for (size_t i = 0; i < n_in; i++)
        if (!fcl_fits_u32(in[i].nelem) || in[i].rank > GF_MAX_RANK)
            return false;
    return fcl_all_same(in, n_in, 0, 0, true);
}

#define KERNEL(OP, KIND, RUN)                                                             \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl-" #KIND,   \
     .supports = act_supports, .run = RUN, .n_knobs = 3, .knobs = knobs},

static const struct gf_kernel kernels[] = {
    GF_DEV_ACT_OPS(KERNEL)
    {.op = GF_OP_MATMUL_EPILOGUE_GRAD, .backend = "opencl", .dtype = GF_UNDEFINED,
     .impl = "cl-columns", .supports = act_supports, .workspace = epi_workspace, .run = epi_run,
     .n_knobs = 3, .knobs = knobs},
};

const struct gf_kernel_table gf_opencl_fused_act_table = {
    kernels, sizeof(kernels) / sizeof(kernels[0])};
