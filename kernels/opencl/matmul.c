/* OpenCL kernels: MatMul, Gemm and MatMulEpilogue (fp32), all through the
 * tiled GEMM of matmul.cl with the epilogue applied in registers:
 *
 *   MatMul          Y = A @ B                     batch dims broadcast, 1-D operands
 *   Gemm            Y = alpha A' B' + beta C      C broadcast to [M, N]
 *   MatMulEpilogue  Y = act(alpha A' @ B' + beta Bias) + Res   (README "Fused ops")
 *
 * The host side turns each op into one struct mm_geom: M, N, K, the row
 * strides of A and B as stored, the broadcast batch dims with the element
 * strides of every operand (0 where it broadcasts), and Bias / Res strides
 * over Y's rows and columns.  Batch dims that are contiguous for every
 * operand are merged, and batches whose A rows follow each other while B
 * is shared become more rows of one product.
 *
 * Config space (knobs): tile (TS, the square tile of Y per work-group),
 * tile_k (TK), wpt (a WPT x WPT block of Y per thread), vec (floats per
 * global load).  Every combination computes the same result for every
 * shape: vec applies to an operand only when its rows are aligned for it
 * (else the widest width that is), and a tile/wpt pair whose work-group the
 * device cannot run (over its limit, or the kernel's) takes the next larger
 * wpt, as a TK whose tiles do not fit in local memory takes a smaller one.
 */
#include <limits.h>
#include <stdio.h>

#include "../cpu/fused.h"
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
    cl_int vwa, vwb;
    cl_float alpha, beta;
};

/* A product ready to launch. */
struct mm_job {
    struct mm_geom g;
    bool ta, tb;
    int64_t count; /* batches */
    cl_mem a, b, bias, res, y;
};

enum mact { MACT_NONE, MACT_RELU, MACT_GELU, MACT_GELU_TANH, MACT_SILU, MACT_TANH, MACT_SIGMOID };

static const char *const mact_names[] = {"", "relu", "gelu", "gelu_tanh", "silu", "tanh",
                                         "sigmoid"};

/* ---- the config space ----------------------------------------------------------- */

static const int tile_vals[] = {64, 32, 128, 16};
static const int tk_vals[] = {16, 8, 32};
static const int wpt_vals[] = {4, 2, 8, 1};
static const int vec_vals[] = {4, 1, 2};

static const struct gf_config_knob mm_knobs[] = {
    {"tile", 4, tile_vals},
    {"tile_k", 3, tk_vals},
    {"wpt", 4, wpt_vals},
    {"vec", 3, vec_vals},
};

#define N_KNOBS (sizeof(mm_knobs) / sizeof(mm_knobs[0]))

/* The config's values (defaults without one); false if a value is not in
 * its knob's list. */
static bool mm_config(const struct gf_kernel_args *a, int *v)
{
    for (size_t i = 0; i < N_KNOBS; i++) {
        const struct gf_config_knob *kn = &mm_knobs[i];
        v[i] = a->config ? a->config[i] : kn->values[0];
        bool known = false;
        for (int j = 0; j < kn->n_values; j++)
            known = known || kn->values[j] == v[i];
        if (!known)
            return false;
    }
    return true;
}

/* ---- shapes ------------------------------------------------------------------------- */

/* Batch dims of A (rank ra) and B (rank rb) broadcast into j (strides of a
 * whole matrix per step, 0 where an operand has 1), Y's shape into ydims. */
static enum gf_status mm_batch(const struct gf_kernel_args *a, struct mm_job *j, int *yrank,
                               int64_t *ydims)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    int ra = A->rank > 2 ? A->rank - 2 : 0, rb = B->rank > 2 ? B->rank - 2 : 0;
    int r = ra > rb ? ra : rb;
    int64_t sa = (A->rank > 1 ? A->dims[A->rank - 2] : 1) * A->dims[A->rank - 1];
    int64_t sb = (B->rank > 1 ? B->dims[B->rank - 2] : 1) * B->dims[B->rank - 1];
    j->count = 1;
    for (int i = r - 1; i >= 0; i--) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return gf_kernel_error(a, GF_ERR_INVALID, "batch dims of A %s and B %s do not "
                                   "broadcast", FU_SHAPE(A), FU_SHAPE(B));
        ydims[i] = da == 1 ? db : da;
        j->g.dims[i] = (cl_int)ydims[i];
        j->g.sa[i] = da == 1 ? 0 : sa;
        j->g.sb[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        j->count *= ydims[i];
    }
    j->g.rank = r;
    *yrank = r;
    if (A->rank > 1)
        ydims[(*yrank)++] = j->g.m;
    if (B->rank > 1)
        ydims[(*yrank)++] = j->g.n;
    return GF_OK;
}

/* M, N, K and the row strides of A and B as stored; a 1-D A is [1, K], a
 * 1-D B [K, 1]; transposed operands have rank >= 2. */
static enum gf_status mm_dims(const struct gf_kernel_args *a, struct mm_job *j)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    if (A->rank < 1 || B->rank < 1 || (j->ta && A->rank < 2) || (j->tb && B->rank < 2))
        return gf_kernel_error(a, GF_ERR_INVALID, "A %s and B %s need rank >= 1 (>= 2 when "
                               "transposed)", FU_SHAPE(A), FU_SHAPE(B));
    int64_t a0 = A->rank > 1 ? A->dims[A->rank - 2] : 1, a1 = A->dims[A->rank - 1];
    int64_t b0 = B->rank > 1 ? B->dims[B->rank - 2] : B->dims[0];
    int64_t b1 = B->rank > 1 ? B->dims[B->rank - 1] : 1;
    int64_t m = j->ta ? a1 : a0, k = j->ta ? a0 : a1, n = j->tb ? b0 : b1;
    int64_t kb = j->tb ? b1 : b0;
    if (k != kb)
        return gf_kernel_error(a, GF_ERR_INVALID, "inner dims differ: A%s %s has K = %lld, B%s "
                               "%s has K = %lld", j->ta ? "^T" : "", FU_SHAPE(A), (long long)k,
                               j->tb ? "^T" : "", FU_SHAPE(B), (long long)kb);
    if (a0 > INT_MAX || a1 > INT_MAX || b0 > INT_MAX || b1 > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "a matrix dim exceeds 2^31 - 1");
    j->g.m = (cl_int)m;
    j->g.n = (cl_int)n;
    j->g.k = (cl_int)k;
    j->g.lda = (cl_int)a1;
    j->g.ldb = (cl_int)b1;
    return GF_OK;
}

/* Strides of operand t (Bias or Res) over the batch dims, rows and columns
 * of Y [yrank dims]: t must broadcast to Y; the axes Y lacks (1-D A or B)
 * get stride 0. */
static enum gf_status mm_operand(const struct gf_kernel_args *a, const struct gf_tview *t,
                                 const char *name, int yrank, const int64_t *ydims,
                                 cl_long *sbatch, cl_long *sm, cl_long *sn)
{
    if (t->dtype != GF_FLOAT)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s is %s, expected float", name,
                               gf_dtype_name(t->dtype));
    if (!fu_bcasts_to(t, yrank, ydims))
        return gf_kernel_error(a, GF_ERR_INVALID, "%s %s does not broadcast to Y %s", name,
                               FU_SHAPE(t), FU_DIMS(yrank, ydims));
    int64_t st[GF_MAX_RANK + 2];
    fu_strides(t, yrank, ydims, st);
    int br = yrank - (a->in[0].rank > 1) - (a->in[1].rank > 1);
    for (int i = 0; i < br; i++)
        sbatch[i] = st[i];
    int y = br;
    *sm = a->in[0].rank > 1 ? st[y++] : 0;
    *sn = a->in[1].rank > 1 ? st[y] : 0;
    return GF_OK;
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

/* Widest load width <= vec that divides the row stride ld. */
static int vec_for(int vec, int ld)
{
    while (vec > 1 && ld % vec)
        vec /= 2;
    return vec;
}

/* The kernel for config cfg (tile, tile_k, wpt, vec) adjusted to the
 * device; *ts and *wpt receive the tile and work per thread it uses. */
static cl_kernel mm_kernel(const struct gf_kernel_args *a, const struct mm_job *j,
                           const int *cfg, int *ts, int *wpt)
{
    struct gf_cl *cl = gf_cl_of(a->backend);
    int tk = cfg[1];
    *ts = cfg[0];
    while (tk > 8 && (cl_ulong)2 * tk * (*ts + 4) * sizeof(float) > cl->local_mem)
        tk /= 2;
    for (*wpt = cfg[2]; *wpt <= *ts; *wpt *= 2) {
        size_t threads = (size_t)(*ts / *wpt) * (size_t)(*ts / *wpt);
        if (threads > cl->max_wg)
            continue;
        char opts[128];
        snprintf(opts, sizeof(opts), "-DTS=%d -DTK=%d -DWPT=%d%s%s", *ts, tk, *wpt,
                 j->ta ? " -DTRANS_A" : "", j->tb ? " -DTRANS_B" : "");
        cl_kernel k = gf_cl_kernel(a->backend, "matmul.cl", "mm_f32", opts);
        if (!k)
            return NULL;
        size_t max = 0;
        if (clGetKernelWorkGroupInfo(k, cl->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max,
                                     NULL) != CL_SUCCESS || threads <= max)
            return k;
    }
    gf_error(GF_ERR_UNSUPPORTED, "no work-group size of the matmul kernel fits this device");
    return NULL;
}

static enum gf_status mm_launch(const struct gf_kernel_args *a, struct mm_job *j)
{
    int cfg[N_KNOBS], ts, wpt;
    if (!mm_config(a, cfg))
        return gf_kernel_error(a, GF_ERR_INVALID, "config (%d, %d, %d, %d) is outside the "
                               "matmul kernel's space", cfg[0], cfg[1], cfg[2], cfg[3]);
    if (a->out[0].nelem == 0)
        return GF_OK;
    mm_simplify(j);
    j->g.vwa = vec_for(cfg[3], j->g.lda);
    j->g.vwb = vec_for(cfg[3], j->g.ldb);
    cl_kernel k = mm_kernel(a, j, cfg, &ts, &wpt);
    if (!k)
        return gf_cl_fail(a, "building the matmul kernel");
    size_t rt = (size_t)(ts / wpt), tiles_n = ((size_t)j->g.n + ts - 1) / ts;
    size_t tiles_m = ((size_t)j->g.m + ts - 1) / ts;
    if (j->count * (int64_t)tiles_n > INT_MAX || tiles_m > 65535)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%lld batches of [%d, %d] are more tiles "
                               "than one launch takes", (long long)j->count, j->g.m, j->g.n);
    cl_int tn = (cl_int)tiles_n;
    if (!gf_cl_args(k, 7, sizeof(cl_mem), &j->a, sizeof(cl_mem), &j->b, sizeof(cl_mem), &j->y,
                    sizeof(cl_mem), &j->bias, sizeof(cl_mem), &j->res, sizeof(j->g), &j->g,
                    sizeof(cl_int), &tn))
        return gf_cl_fail(a, "setting the matmul kernel's arguments");
    size_t global[2] = {tiles_n * (size_t)j->count * rt, tiles_m * rt}, local[2] = {rt, rt};
    return gf_cl_run(a, k, 2, global, local);
}

/* ---- the ops ------------------------------------------------------------------------ */

static enum gf_status mm_inputs(const struct gf_kernel_args *a, struct mm_job *j)
{
    if (a->n_in < 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs inputs A and B");
    enum gf_status st = fu_check_in(a, 0, "A", GF_FLOAT);
    if (st == GF_OK)
        st = fu_check_in(a, 1, "B", GF_FLOAT);
    if (st == GF_OK)
        st = mm_dims(a, j);
    j->a = a->in[0].data;
    j->b = a->in[1].data;
    j->y = a->out[0].data;
    return st;
}

/* MatMul: A [..., M, K] x B [..., K, N] -> Y [..., M, N]. */
static enum gf_status matmul_run(const struct gf_kernel_args *a)
{
    struct mm_job j = {.g = {.alpha = 1}};
    int yrank = 0;
    int64_t ydims[GF_MAX_RANK + 2];
    enum gf_status st = mm_inputs(a, &j);
    if (st == GF_OK)
        st = mm_batch(a, &j, &yrank, ydims);
    if (st == GF_OK)
        st = fu_check_out(a, 0, GF_FLOAT, yrank, ydims);
    return st == GF_OK ? mm_launch(a, &j) : st;
}

/* Gemm: Y [M, N] = alpha A' B' + beta C, C of rank <= 2 broadcast to Y
 * (before opset 7 only with broadcast = 1). */
static enum gf_status gemm_run(const struct gf_kernel_args *a)
{
    struct mm_job j = {.ta = gf_node_attr_int(a->node, "transA", 0) != 0,
                       .tb = gf_node_attr_int(a->node, "transB", 0) != 0,
                       .g = {.alpha = gf_node_attr_float(a->node, "alpha", 1.0f),
                             .beta = gf_node_attr_float(a->node, "beta", 1.0f)}};
    if (a->n_in < 2 || a->in[0].rank != 2 || a->in[1].rank != 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "A and B must be 2-D");
    enum gf_status st = mm_inputs(a, &j);
    int64_t ydims[2] = {j.g.m, j.g.n};
    if (st == GF_OK)
        st = fu_check_out(a, 0, GF_FLOAT, 2, ydims);
    if (st != GF_OK || a->n_in < 3 || !fu_has(a, 2))
        return st == GF_OK ? mm_launch(a, &j) : st;
    const struct gf_tview *C = &a->in[2];
    int64_t cm = C->rank == 2 ? C->dims[0] : 1, cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    int64_t opset = gf_model_opset(a->node->graph->model, "");
    bool strict = opset > 0 && opset < 7 && !gf_node_attr_int(a->node, "broadcast", 0);
    if (C->rank > 2 || (cm != 1 && cm != j.g.m) || (cn != 1 && cn != j.g.n) ||
        (strict && (C->rank != 2 || cm != j.g.m || cn != j.g.n)))
        return gf_kernel_error(a, GF_ERR_INVALID, "C %s does not %s Y [%d,%d]%s", FU_SHAPE(C),
                               strict ? "match" : "broadcast to", j.g.m, j.g.n,
                               strict ? " (broadcast=0)" : "");
    if (C->dtype != GF_FLOAT)
        return gf_kernel_error(a, GF_ERR_INVALID, "C is %s, expected float",
                               gf_dtype_name(C->dtype));
    j.g.has_bias = C->nelem > 0;
    j.bias = C->data;
    j.g.bias_m = cm == 1 ? 0 : cn;
    j.g.bias_n = cn == 1 ? 0 : 1;
    return mm_launch(a, &j);
}

static enum gf_status mme_attrs(const struct gf_kernel_args *a, struct mm_job *j)
{
    j->ta = gf_node_attr_int(a->node, "transA", 0) != 0;
    j->tb = gf_node_attr_int(a->node, "transB", 0) != 0;
    j->g.alpha = gf_node_attr_float(a->node, "alpha", 1.0f);
    j->g.beta = gf_node_attr_float(a->node, "beta", 1.0f);
    const char *act = gf_node_attr_string(a->node, "activation", "");
    for (size_t i = 0; i < sizeof(mact_names) / sizeof(mact_names[0]); i++)
        if (strcmp(act, mact_names[i]) == 0) {
            j->g.act = (cl_int)i;
            return GF_OK;
        }
    return gf_kernel_error(a, GF_ERR_INVALID, "activation '%s' is not one of \"\", relu, gelu, "
                           "gelu_tanh, silu, tanh, sigmoid", act);
}

/* MatMulEpilogue: A, B, Bias?, Res? -> Y = act(alpha A' @ B' + beta Bias) + Res. */
static enum gf_status mme_run(const struct gf_kernel_args *a)
{
    struct mm_job j = {0};
    int yrank = 0;
    int64_t ydims[GF_MAX_RANK + 2];
    enum gf_status st = mme_attrs(a, &j);
    if (st == GF_OK)
        st = mm_inputs(a, &j);
    if (st == GF_OK)
        st = mm_batch(a, &j, &yrank, ydims);
    if (st == GF_OK && yrank > GF_MAX_RANK)
        st = gf_kernel_error(a, GF_ERR_UNSUPPORTED, "Y would have rank %d", yrank);
    if (st == GF_OK && fu_has(a, 2)) {
        j.g.has_bias = 1;
        j.bias = a->in[2].data;
        st = mm_operand(a, &a->in[2], "Bias (input 2)", yrank, ydims, j.g.sbias, &j.g.bias_m,
                        &j.g.bias_n);
    }
    if (st == GF_OK && fu_has(a, 3)) {
        j.g.has_res = 1;
        j.res = a->in[3].data;
        st = mm_operand(a, &a->in[3], "Res (input 3)", yrank, ydims, j.g.sres, &j.g.res_m,
                        &j.g.res_n);
    }
    if (st == GF_OK)
        st = fu_check_out(a, 0, GF_FLOAT, yrank, ydims);
    return st == GF_OK ? mm_launch(a, &j) : st;
}

/* fp32 operands of rank <= 8 (Bias, Res, C included). */
static bool mm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 2)
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_UNDEFINED && (in[i].dtype != GF_FLOAT || in[i].rank > GF_MAX_RANK))
            return false;
    return in[0].dtype == GF_FLOAT && in[1].dtype == GF_FLOAT;
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
