/* OpenCL kernels: MatMul, Gemm and MatMulEpilogue, all through the
 * register-blocked GEMM of matmul.cl with the epilogue applied in registers:
 *
 *   MatMul          Y = A @ B                     batch dims broadcast, 1-D operands
 *   Gemm            Y = alpha A' B' + beta C      C broadcast to [M, N]
 *   MatMulEpilogue  Y = act(alpha A' @ B' + beta Bias) + Res   (README "Fused ops")
 *
 * Tensors are float, float16 or bfloat16 (every operand of a node the same
 * type, storage.cl's store_t); products and sums are float, as on the CPU.
 *
 * The host side turns each op into one struct mm_geom: M, N, K, the row
 * strides of A and B as stored, the broadcast batch dims with the element
 * strides of every operand (0 where it broadcasts), and Bias / Res strides
 * over Y's rows and columns.  Batch dims that are contiguous for every
 * operand are merged, and batches whose A rows follow each other while B
 * is shared become more rows of one product.
 *
 * Config space (knobs, 72 configs, 36 builds per transpose and type):
 * tile_m x tile_n, the tile of Y per work-group; tile_k, the slice of K
 * staged in local memory; wpt, the wpt x wpt block of Y per thread (so
 * (tile_m/wpt) x (tile_n/wpt) work-items); vec, elements per global load
 * (a kernel argument: 4 applies to an operand only when its rows are
 * aligned for it, else 1).  The default (values[0]) is a small config any
 * OpenCL device runs: 8 x 8 work-items, 9.2 KB of local memory (two
 * buffers of each tile); the largest configs need 1024 work-items or 34 KB.
 * A config the device cannot run (too many work-items for it or for this
 * build, too little local memory) is refused with GF_ERR_UNSUPPORTED, which
 * the autotuner counts as failed and passes over; every other config
 * computes the same result for every shape.
 */
#include <limits.h>
#include <stdio.h>

#include "ocl.h"

#define MM_RANK 8 /* batch dims the kernel takes */

/* Must match mm_geom in matmul.cl. */
struct mm_geom {
    cl_long sa[MM_RANK], sb[MM_RANK], sbias[MM_RANK], sres[MM_RANK];
    cl_long bias_m, bias_n, res_m, res_n;
    cl_int dims[MM_RANK];
    cl_int rank;
    cl_int m, n, k, lda, ldb;
    cl_int act, has_bias, has_res;
    cl_int va, vb;
    cl_float alpha, beta;
};

/* A product ready to launch. */
struct mm_job {
    struct mm_geom g;
    bool ta, tb;
    enum gf_dtype dt; /* of every operand */
    int64_t count;    /* batches */
    cl_mem a, b, bias, res, y;
};

/* ---- the config space ----------------------------------------------------------- */

static const int tm_vals[] = {32, 64, 128};
static const int tn_vals[] = {32, 64, 128};
static const int tk_vals[] = {16, 8};
static const int wpt_vals[] = {4, 8};
static const int vec_vals[] = {4, 1};

static const struct gf_config_knob mm_knobs[] = {
    {"tile_m", 3, tm_vals}, {"tile_n", 3, tn_vals}, {"tile_k", 2, tk_vals},
    {"wpt", 2, wpt_vals},   {"vec", 2, vec_vals},
};

enum { K_TM, K_TN, K_TK, K_WPT, K_VEC, N_KNOBS };

/* The config's values (defaults without one); false if a value is not in
 * its knob's list. */
static bool mm_config(const struct gf_kernel_args *a, int *v)
{
    bool ok = true;
    for (size_t i = 0; i < N_KNOBS; i++) {
        const struct gf_config_knob *kn = &mm_knobs[i];
        v[i] = a->config ? a->config[i] : kn->values[0];
        bool known = false;
        for (int j = 0; j < kn->n_values; j++)
            known = known || kn->values[j] == v[i];
        ok = ok && known;
    }
    return ok;
}

/* "tile_m=32 tile_n=32 ..." into buf. */
static const char *mm_config_str(const int *v, char *buf, size_t len)
{
    size_t p = 0;
    for (size_t i = 0; i < N_KNOBS && p < len; i++)
        p += (size_t)snprintf(buf + p, len - p, "%s%s=%d", i ? " " : "", mm_knobs[i].name, v[i]);
    return buf;
}

/* ---- shapes ------------------------------------------------------------------------- */

/* The product's geometry (the shared plan m, kernels/checks.c) into j: M,
 * N, K, the row strides of A and B as stored, the broadcast batch. */
static enum gf_status mm_from_plan(const struct gf_kernel_args *a, const struct gf_mm *m,
                                   struct mm_job *j)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    int64_t a0 = A->rank > 1 ? A->dims[A->rank - 2] : 1;
    int64_t b0 = B->rank > 1 ? B->dims[B->rank - 2] : B->dims[0];
    if (a0 > INT_MAX || m->lda > INT_MAX || b0 > INT_MAX || m->ldb > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "a matrix dim exceeds 2^31 - 1");
    j->g.m = (cl_int)m->m;
    j->g.n = (cl_int)m->n;
    j->g.k = (cl_int)m->k;
    j->g.lda = (cl_int)m->lda;
    j->g.ldb = (cl_int)m->ldb;
    j->g.rank = m->brank;
    for (int i = 0; i < m->brank; i++) {
        j->g.dims[i] = (cl_int)m->bdims[i];
        j->g.sa[i] = m->sa[i];
        j->g.sb[i] = m->sb[i];
    }
    j->count = m->count;
    j->a = A->data;
    j->b = B->data;
    j->y = a->out[0].data;
    return GF_OK;
}

/* Strides of operand t (Bias or Res, checked to broadcast to Y) over the
 * batch dims, rows and columns of Y; the axes Y lacks (1-D A or B) get
 * stride 0. */
static void mm_operand(const struct gf_kernel_args *a, const struct gf_tview *t,
                       const struct gf_mm *m, cl_long *sbatch, cl_long *sm, cl_long *sn)
{
    int64_t st[GF_MAX_RANK + 2];
    fu_strides(t, m->yrank, m->ydims, st);
    int br = m->yrank - (a->in[0].rank > 1) - (a->in[1].rank > 1);
    for (int i = 0; i < br; i++)
        sbatch[i] = st[i];
    int y = br;
    *sm = a->in[0].rank > 1 ? st[y++] : 0;
    *sn = a->in[1].rank > 1 ? st[y] : 0;
}

/* Merges batch dims that are contiguous for every operand, drops size-1
 * dims, then folds trailing batches into rows while A's rows follow each
 * other (A not transposed), B is shared, and Bias / Res step by M rows. */
static void mm_simplify(struct mm_job *j)
{
    struct mm_geom *g = &j->g;
    int r = 0;
    for (int i = 0; i < g->rank; i++) {
        if (g->dims[i] == 1)
            continue;
        cl_long *s[4] = {g->sa, g->sb, g->sbias, g->sres};
        bool merge = r > 0;
        for (int o = 0; merge && o < 4; o++)
            merge = s[o][r - 1] == s[o][i] * g->dims[i];
        if (merge) {
            g->dims[r - 1] *= g->dims[i];
            for (int o = 0; o < 4; o++)
                s[o][r - 1] = s[o][i];
            continue;
        }
        g->dims[r] = g->dims[i];
        for (int o = 0; o < 4; o++)
            s[o][r] = s[o][i];
        r++;
    }
    g->rank = r;
    while (g->rank > 0 && !j->ta) {
        int d = g->rank - 1;
        int64_t m = g->m, rows = m * g->dims[d];
        if (rows > INT_MAX || g->sa[d] != m * g->lda || g->sb[d] != 0 ||
            g->sbias[d] != m * g->bias_m || g->sres[d] != m * g->res_m)
            break;
        g->m = (cl_int)rows;
        g->rank--;
    }
    j->count = 1;
    for (int i = 0; i < g->rank; i++)
        j->count *= g->dims[i];
}

/* ---- the launch --------------------------------------------------------------------- */

/* 4 (the config's vec) when rows of stride ld are aligned for it, else 1. */
static int vec_for(int vec, int ld)
{
    return ld % vec == 0 ? vec : 1;
}

/* The kernel for config v, or GF_ERR_UNSUPPORTED naming what the device
 * lacks for it. */
static enum gf_status mm_kernel(const struct gf_kernel_args *a, const struct mm_job *j,
                                const int *v, cl_kernel *out)
{
    struct gf_cl *cl = gf_cl_of(a->backend);
    char cs[128], opts[256];
    size_t threads = (size_t)(v[K_TM] / v[K_WPT]) * (size_t)(v[K_TN] / v[K_WPT]);
    cl_ulong bytes = 2 * (cl_ulong)v[K_TK] * (cl_ulong)(v[K_TM] + v[K_TN] + 8) * sizeof(float);
    if (threads > cl->max_wg)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "matmul config %s needs %zu work-items "
                               "in a group; the device allows %zu", mm_config_str(v, cs, 128),
                               threads, cl->max_wg);
    if (bytes > cl->local_mem)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "matmul config %s needs %llu bytes of "
                               "local memory; the device has %llu", mm_config_str(v, cs, 128),
                               (unsigned long long)bytes, (unsigned long long)cl->local_mem);
    snprintf(opts, sizeof(opts), "-DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d%s%s %s", v[K_TM],
             v[K_TN], v[K_TK], v[K_WPT], v[K_WPT], j->ta ? " -DTRANS_A" : "",
             j->tb ? " -DTRANS_B" : "", gf_cl_storage_opt(j->dt));
    cl_kernel k = gf_cl_kernel(a->backend, "matmul.cl", "mm", opts);
    if (!k)
        return gf_cl_fail(a, "building the matmul kernel");
    size_t max = 0;
    if (clGetKernelWorkGroupInfo(k, cl->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max,
                                 NULL) == CL_SUCCESS && threads > max)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "matmul config %s needs %zu work-items "
                               "in a group; its build runs at most %zu on this device",
                               mm_config_str(v, cs, 128), threads, max);
    *out = k;
    return GF_OK;
}

static enum gf_status mm_launch(const struct gf_kernel_args *a, struct mm_job *j)
{
    int v[N_KNOBS];
    char cs[128];
    if (!mm_config(a, v))
        return gf_kernel_error(a, GF_ERR_INVALID, "config (%s) is outside the matmul kernel's "
                               "space", mm_config_str(v, cs, sizeof(cs)));
    if (a->out[0].nelem == 0)
        return GF_OK;
    mm_simplify(j);
    j->g.va = vec_for(v[K_VEC], j->g.lda);
    j->g.vb = vec_for(v[K_VEC], j->g.ldb);
    cl_kernel k = NULL;
    enum gf_status st = mm_kernel(a, j, v, &k);
    if (st != GF_OK)
        return st;
    size_t tx = (size_t)(v[K_TN] / v[K_WPT]), ty = (size_t)(v[K_TM] / v[K_WPT]);
    size_t tiles_n = ((size_t)j->g.n + v[K_TN] - 1) / v[K_TN];
    size_t tiles_m = ((size_t)j->g.m + v[K_TM] - 1) / v[K_TM];
    if (j->count * (int64_t)tiles_n > INT_MAX || tiles_m > 65535)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%lld batches of [%d, %d] are more tiles "
                               "than one launch takes", (long long)j->count, j->g.m, j->g.n);
    cl_int tn = (cl_int)tiles_n;
    if (!gf_cl_args(k, 7, sizeof(cl_mem), &j->a, sizeof(cl_mem), &j->b, sizeof(cl_mem), &j->y,
                    sizeof(cl_mem), &j->bias, sizeof(cl_mem), &j->res, sizeof(j->g), &j->g,
                    sizeof(cl_int), &tn))
        return gf_cl_fail(a, "setting the matmul kernel's arguments");
    size_t global[2] = {tiles_n * (size_t)j->count * tx, tiles_m * ty}, local[2] = {tx, ty};
    return gf_cl_run(a, k, 2, global, local);
}

/* ---- the ops ------------------------------------------------------------------------ */

/* MatMul, Gemm: A and B, of a storage type, and the product's plan. */
static enum gf_status mm_inputs(const struct gf_kernel_args *a, struct mm_job *j,
                                struct gf_mm *m)
{
    if (a->n_in < 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs inputs A and B");
    enum gf_status st = fu_check_in(a, 0, "A", GF_UNDEFINED);
    j->dt = a->in[0].dtype;
    if (st == GF_OK && !gf_cl_storage_opt(j->dt))
        st = gf_kernel_error(a, GF_ERR_INVALID, "A (input 0) is %s, expected float, float16 "
                             "or bfloat16", gf_dtype_name(j->dt));
    if (st == GF_OK)
        st = fu_check_in(a, 1, "B", j->dt);
    if (st == GF_OK)
        st = gf_mm_plan(a, j->ta, j->tb, m);
    return st == GF_OK ? mm_from_plan(a, m, j) : st;
}

/* MatMul: A [..., M, K] x B [..., K, N] -> Y [..., M, N]. */
static enum gf_status matmul_run(const struct gf_kernel_args *a)
{
    struct mm_job j = {.g = {.alpha = 1}};
    struct gf_mm m;
    enum gf_status st = mm_inputs(a, &j, &m);
    if (st == GF_OK)
        st = fu_check_out(a, 0, j.dt, m.yrank, m.ydims);
    return st == GF_OK ? mm_launch(a, &j) : st;
}

/* Gemm: Y [M, N] = alpha A' B' + beta C, C of rank <= 2 broadcast to Y
 * (the rule: graph/opcheck.c). */
static enum gf_status gemm_run(const struct gf_kernel_args *a)
{
    struct gf_gemm_rule r;
    struct gf_mm m;
    enum gf_status st = gf_gemm_check(a, &r, &m);
    if (st != GF_OK)
        return st;
    struct mm_job j = {.ta = r.ta, .tb = r.tb, .g = {.alpha = r.alpha, .beta = r.beta}};
    st = mm_inputs(a, &j, &m);
    int64_t ydims[2] = {j.g.m, j.g.n};
    if (st == GF_OK)
        st = fu_check_out(a, 0, j.dt, 2, ydims);
    if (st != GF_OK || !fu_has(a, 2))
        return st == GF_OK ? mm_launch(a, &j) : st;
    const struct gf_tview *C = &a->in[2];
    int64_t cm = C->rank == 2 ? C->dims[0] : 1, cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    if (C->dtype != j.dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "C is %s, expected %s like A",
                               gf_dtype_name(C->dtype), gf_dtype_name(j.dt));
    j.g.has_bias = C->nelem > 0;
    j.bias = C->data;
    j.g.bias_m = cm == 1 ? 0 : cn;
    j.g.bias_n = cn == 1 ? 0 : 1;
    return mm_launch(a, &j);
}

/* MatMulEpilogue: A, B, Bias?, Res? -> Y = act(alpha A' @ B' + beta Bias) + Res
 * (the checks: kernels/checks.c, the rule in graph/opcheck.c). */
static enum gf_status mme_run(const struct gf_kernel_args *a)
{
    struct mm_job j = {0};
    struct gf_mme_rule r;
    struct gf_mm m;
    enum gf_status st = gf_mme_check(a, &r, &m);
    j.dt = a->in[0].dtype;
    if (st == GF_OK && !gf_cl_storage_opt(j.dt))
        st = gf_kernel_error(a, GF_ERR_INVALID, "A (input 0) is %s, expected float, float16 "
                             "or bfloat16", gf_dtype_name(j.dt));
    if (st == GF_OK)
        st = mm_from_plan(a, &m, &j);
    if (st != GF_OK)
        return st;
    j.ta = r.ta, j.tb = r.tb;
    j.g.alpha = r.alpha, j.g.beta = r.beta, j.g.act = r.act;
    if (fu_has(a, 2)) {
        j.g.has_bias = 1;
        j.bias = a->in[2].data;
        mm_operand(a, &a->in[2], &m, j.g.sbias, &j.g.bias_m, &j.g.bias_n);
    }
    if (fu_has(a, 3)) {
        j.g.has_res = 1;
        j.res = a->in[3].data;
        mm_operand(a, &a->in[3], &m, j.g.sres, &j.g.res_m, &j.g.res_n);
    }
    return mm_launch(a, &j);
}

/* Float, float16 or bfloat16 operands of one type and rank <= 8 (Bias,
 * Res, C included). */
static bool mm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 2 || !gf_cl_storage_opt(in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_UNDEFINED && (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK))
            return false;
    return true;
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_MATMUL, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "tiled",
     .supports = mm_supports, .run = matmul_run, .n_knobs = N_KNOBS, .knobs = mm_knobs},
    {.op = GF_OP_GEMM, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "tiled",
     .supports = mm_supports, .run = gemm_run, .n_knobs = N_KNOBS, .knobs = mm_knobs},
    {.op = GF_OP_MATMUL_EPILOGUE, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "tiled",
     .supports = mm_supports, .run = mme_run, .n_knobs = N_KNOBS, .knobs = mm_knobs},
};

const struct gf_kernel_table gf_opencl_matmul_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
