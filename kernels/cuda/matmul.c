/*
 * CUDA MatMul and Gemm through cuBLASLt, and the backend's cuBLASLt handle.
 *
 *   MatMul   Y = A @ B                  batch dims broadcast, 1-D operands
 *   Gemm     Y = alpha A' B' + beta C   C broadcast to [M, N]
 *
 * fp32 with CUBLAS_COMPUTE_32F: no TF32 (PyTorch's fp32 default), so the
 * results match fp32 PyTorch and the CPU within rounding of the sum order.
 * A model run with --precision tf32 (gf_model_precision, asked through the
 * node's graph and the graphs enclosing it) gets
 * CUBLAS_COMPUTE_32F_FAST_TF32 for its fp32 GEMMs, LinearCrossEntropy's
 * included: tensor cores, 10-bit mantissas in, fp32 sums.
 *
 * fp16 / bf16 (every op here): cuBLASLt with CUDA_R_16F / CUDA_R_16BF
 * operands and output and CUBLAS_COMPUTE_32F, i.e. fp32 sums rounded once
 * to nearest even, as the CPU computes a 16-bit node (widen, fp32 kernel,
 * round).  Gemm's C is exact in Y's type, so beta C in the GEMM rounds
 * once too.  MatMulEpilogue without Bias and activation, with Res (if
 * any) shaped like Y, is one call with Res as cuBLASLt's C; any other
 * epilogue (cuBLASLt's 16-bit bias epilogue would round the product
 * before the activation where the CPU does not) has the GEMM write fp32
 * into the node's workspace and one pass (matmul.cu) add beta Bias, apply
 * the activation and Res and round.  MatMulEpilogueGrad: dZ in fp32,
 * rounded once; dBias from the unrounded values in double, rounded once.
 *
 * Row-major Y [M, N] = A' [M, K] B' [K, N] is, read column-major, Y^T =
 * B'^T A'^T: cuBLASLt is called with the operands swapped (its A is our B,
 * its B our A), each stored matrix described as it lies (rows and columns
 * swapped) with a transpose where ours has one.  Batches: one strided
 * batched call when every operand's batch offsets are a multiple of the
 * batch index (broadcast ones: stride 0), else one call per outer batch
 * over the innermost batch dim; batches of A that follow each other with B
 * shared (a Linear over [B, T, K]) are more rows of one product.
 *
 * Gemm's C is first broadcast into Y (the layout kernel's strided copy),
 * then Y = alpha A' B' + beta Y in place.  K = 0 is a sum of nothing, done
 * without cuBLASLt as the CPU does it: MatMul 0, Gemm beta C (or 0),
 * MatMulEpilogue act(beta Bias) + Res.
 *
 * The algorithm: knob "algo" (MatMul, Gemm, MatMulEpilogue) is the index
 * into cuBLASLt's heuristic list for this exact problem (up to GF_CU_ALGOS
 * candidates within the backend's workspace, GF_CU_BLAS_WS); 0, the
 * default, is the heuristic's first choice.  An index past the candidates
 * offered is declined (GF_ERR_UNSUPPORTED, nothing launched), so the
 * autotuner skips it; choosing among them is the autotuner's job (issue
 * 14).  The heuristic's list is cached per problem (shape, transposes,
 * batch strides, epilogue, operand alignment, operand and output types,
 * compute type: fp32 / TF32) in the backend: a query costs
 * tens of microseconds, so it runs once per problem, not per call.
 * LinearCrossEntropy's GEMMs (gf_cu_gemm) take the first choice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "cu.h"
#include "gf_passes.h"
#include "launch_mla.h"

#define GF_CU_BLAS_WS ((size_t)32 << 20)
#define GF_CU_ALGOS 8   /* heuristic candidates asked for: knob "algo" 0..7 */
#define ALGO_SLOTS 256  /* problems whose candidates are cached */
#define ALGO_PROBE 8    /* slots tried from a problem's hash */

/* A problem as the heuristic sees it: every field that can change its
 * answer (int64 throughout: no padding, so memcmp and the hash see only
 * these bytes). */
struct algo_key {
    int64_t m, n, k, lda, ldb, batch, sa, sb, sy;
    int64_t ta, tb, epi, bias, align_a, align_b, align_y;
    int64_t dt, ydt, compute; /* cudaDataType of A and B, of C and Y; cublasComputeType_t */
};

/* The heuristic's candidates for one problem, in its order. */
struct algo_entry {
    struct algo_key key;
    int used;
    int n; /* candidates (0..GF_CU_ALGOS) */
    cublasLtMatmulAlgo_t algo[GF_CU_ALGOS];
};

/* The handle, its workspace and the heuristic's cache, made together on
 * first use. */
struct blas {
    cublasLtHandle_t h;
    void *ws;
    struct algo_entry *cache; /* ALGO_SLOTS */
    unsigned evict;           /* round robin over a full probe run */
};

void *gf_cu_blas(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    if (cu->blas)
        return cu->blas;
    struct blas *b = calloc(1, sizeof(*b));
    if (b && !(b->cache = calloc(ALGO_SLOTS, sizeof(*b->cache)))) {
        free(b);
        b = NULL;
    }
    if (!b) {
        gf_error(GF_ERR_NOMEM, "out of memory starting cuBLASLt");
        return NULL;
    }
    cublasStatus_t s = cublasLtCreate(&b->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(b->cache);
        free(b);
        gf_error(GF_ERR_INTERNAL, "cuBLASLt: cannot start on '%s': %s", cu->device_name,
                 cublasLtGetStatusString(s));
        return NULL;
    }
    if (cudaMalloc(&b->ws, GF_CU_BLAS_WS) != cudaSuccess) {
        cudaGetLastError();
        cublasLtDestroy(b->h);
        free(b->cache);
        free(b);
        gf_error(GF_ERR_NOMEM, "cuBLASLt: cannot allocate its %zu-byte workspace on '%s'",
                 GF_CU_BLAS_WS, cu->device_name);
        return NULL;
    }
    gf_cu_mem_add(cu, b->ws, GF_CU_BLAS_WS);
    cu->blas = b;
    return b;
}

void gf_cu_blas_free(struct gf_cu *cu)
{
    struct blas *b = cu->blas;
    if (!b)
        return;
    gf_cu_mem_remove(cu, b->ws);
    cudaFree(b->ws);
    cublasLtDestroy(b->h);
    free(b->cache);
    free(b);
    cu->blas = NULL;
}

/* ---- one (strided batched) product --------------------------------------------- */

/* A product as cuBLASLt sees it: Y [m, n] (row-major, ld n) of `batch`
 * products, A and B at element strides sa, sb between batches. */
struct prod {
    int64_t m, n, k, lda, ldb;
    bool ta, tb;
    int64_t batch, sa, sb, sy;
    float alpha, beta; /* beta: C (Y itself unless given) is added */
    int epi;           /* cublasLtEpilogue_t (0: CUBLASLT_EPILOGUE_DEFAULT) */
    const float *bias; /* the epilogue's bias [n], or NULL (fp32 only) */
    int algo;          /* index into the heuristic's candidates (knob "algo") */
    cudaDataType_t dt, ydt; /* A and B; C and Y */
    bool tf32;         /* CUBLAS_COMPUTE_32F_FAST_TF32 (fp32 operands only) */
};

/* The "algo" knob: the heuristic's candidates by index, its first choice
 * the default. */
static const int algo_values[GF_CU_ALGOS] = {0, 1, 2, 3, 4, 5, 6, 7};
static const struct gf_config_knob mm_knobs[] = {{"algo", GF_CU_ALGOS, algo_values}};
#define N_KNOBS (sizeof(mm_knobs) / sizeof(mm_knobs[0]))

static int knob_algo(const struct gf_kernel_args *a)
{
    return a->config ? a->config[0] : 0;
}

/* The largest power of two (up to 256) that p's address is a multiple of. */
static int64_t align_of(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int64_t al = 256;
    while (al > 1 && (u & (uintptr_t)(al - 1)))
        al >>= 1;
    return al;
}

static uint64_t key_hash(const struct algo_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(*k); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The cached entry for key, or the slot to fill (*fresh set): one of the
 * probe run's free slots, else one of them in turn. */
static struct algo_entry *algo_slot(struct blas *bl, const struct algo_key *key, bool *fresh)
{
    size_t h = (size_t)(key_hash(key) % ALGO_SLOTS);
    struct algo_entry *free_slot = NULL;
    for (size_t i = 0; i < ALGO_PROBE; i++) {
        struct algo_entry *e = &bl->cache[(h + i) % ALGO_SLOTS];
        if (e->used && memcmp(&e->key, key, sizeof(*key)) == 0) {
            *fresh = false;
            return e;
        }
        if (!e->used && !free_slot)
            free_slot = e;
    }
    *fresh = true;
    return free_slot ? free_slot : &bl->cache[(h + bl->evict++ % ALGO_PROBE) % ALGO_SLOTS];
}

static enum gf_status blas_fail(const struct gf_kernel_args *a, const char *what,
                                cublasStatus_t s)
{
    return gf_kernel_error(a, s == CUBLAS_STATUS_ALLOC_FAILED ? GF_ERR_NOMEM : GF_ERR_INTERNAL,
                           "cuBLASLt %s failed: %s", what, cublasLtGetStatusString(s));
}

/* A row-major matrix of r x c (ld) as cuBLASLt's column-major c x r. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t dt, int64_t r, int64_t c,
                             int64_t ld, int64_t batch, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutCreate(l, dt, (uint64_t)c, (uint64_t)r, ld);
    if (s == CUBLAS_STATUS_SUCCESS && batch > 1) {
        int32_t count = (int32_t)batch;
        s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof(count));
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof(stride));
    }
    return s;
}

/* Y = alpha A' B' + beta C (C NULL: Y itself), fp32 accumulation (TF32
 * with p->tf32), Y rounded once to its type. */
static enum gf_status run_prod(const struct gf_kernel_args *a, const struct prod *p,
                               const void *A, const void *B, const void *C, void *Y)
{
    struct blas *bl = gf_cu_blas(a->backend);
    if (!bl)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "%s", gf_last_error());
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ly = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* theirs: our B */
    cublasOperation_t opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* theirs: our A */
    size_t ws = GF_CU_BLAS_WS;
    cublasComputeType_t ct = p->tf32 && p->dt == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                            : CUBLAS_COMPUTE_32F;
    int64_t al_y = align_of(Y);
    if (!C)
        C = Y;
    else if (align_of(C) < al_y)
        al_y = align_of(C);
    struct algo_key key;
    memset(&key, 0, sizeof(key));
    key = (struct algo_key){.m = p->m, .n = p->n, .k = p->k, .lda = p->lda, .ldb = p->ldb,
                            .batch = p->batch, .sa = p->sa, .sb = p->sb, .sy = p->sy,
                            .ta = p->ta, .tb = p->tb, .epi = p->epi, .bias = p->bias != NULL,
                            .align_a = align_of(A), .align_b = align_of(B),
                            .align_y = al_y, .dt = p->dt, .ydt = p->ydt, .compute = ct};
    bool fresh;
    struct algo_entry *e = algo_slot(bl, &key, &fresh);
    const char *what = "setup";
    cublasStatus_t s = cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    if (s == CUBLAS_STATUS_SUCCESS && p->epi) {
        /* cuBLASLt's rows are our columns: its bias [n] is ours, shared by
         * every batch (stride 0) */
        cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
        int64_t bstride = 0;
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
        if (s == CUBLAS_STATUS_SUCCESS && p->bias)
            s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias,
                                               sizeof(p->bias));
        if (s == CUBLAS_STATUS_SUCCESS && p->bias && p->batch > 1)
            s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                               &bstride, sizeof(bstride));
    }
    /* our B as stored: [K, N] (or [N, K] transposed); our A: [M, K] (or [K, M]) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(&la, p->dt, p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb, p->batch,
                   p->sb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(&lb, p->dt, p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda, p->batch,
                   p->sa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(&ly, p->ydt, p->m, p->n, p->n, p->batch, p->sy);
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws));
    /* the operands' alignment as they lie (theirs: A is our B); the
     * heuristic otherwise assumes 256 bytes */
    uint32_t al[3] = {(uint32_t)key.align_b, (uint32_t)key.align_a, (uint32_t)key.align_y};
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &al[0], sizeof(al[0]));
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &al[1], sizeof(al[1]));
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &al[2], sizeof(al[2]));
    if (s == CUBLAS_STATUS_SUCCESS && fresh)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &al[2], sizeof(al[2]));
    if (s == CUBLAS_STATUS_SUCCESS && fresh) {
        cublasLtMatmulHeuristicResult_t h[GF_CU_ALGOS];
        int found = 0;
        what = "heuristic";
        s = cublasLtMatmulAlgoGetHeuristic(bl->h, op, la, lb, ly, ly, pref, GF_CU_ALGOS, h,
                                           &found);
        e->used = 0;
        e->n = 0;
        for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < found && i < GF_CU_ALGOS; i++)
            if (h[i].state == CUBLAS_STATUS_SUCCESS && h[i].workspaceSize <= ws)
                e->algo[e->n++] = h[i].algo;
        if (s == CUBLAS_STATUS_SUCCESS && e->n == 0)
            s = CUBLAS_STATUS_NOT_SUPPORTED;
        if (s == CUBLAS_STATUS_SUCCESS) {
            e->key = key;
            e->used = 1;
        }
    }
    bool declined = s == CUBLAS_STATUS_SUCCESS && (p->algo < 0 || p->algo >= e->n);
    if (s == CUBLAS_STATUS_SUCCESS && !declined) {
        what = "matmul";
        s = cublasLtMatmul(bl->h, op, &p->alpha, B, la, A, lb, &p->beta, C, ly, Y, ly,
                           &e->algo[p->algo], bl->ws, ws, gf_cu_stream(a));
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ly)
        cublasLtMatrixLayoutDestroy(ly);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    if (declined) /* nothing launched: the tuner skips this config */
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "cuBLASLt algo %d: the heuristic offers "
                               "%d candidate%s for this product", p->algo, e->n,
                               e->n == 1 ? "" : "s");
    return s == CUBLAS_STATUS_SUCCESS ? GF_OK : blas_fail(a, what, s);
}

/* Whether batch offsets st[0..r) over dims are b * st[r - 1] for the flat
 * batch index b (st[r - 1] may be 0: all of them 0). */
static bool uniform(int r, const int64_t *dims, const int64_t *st)
{
    for (int i = r - 2; i >= 0; i--)
        if (st[i] != st[i + 1] * dims[i + 1])
            return false;
    return true;
}

/* cuBLASLt's type of a float dtype (fp32 for anything else: callers check). */
static cudaDataType_t cu_dt(enum gf_dtype t)
{
    return t == GF_FLOAT16 ? CUDA_R_16F : t == GF_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The launchers' type (gf_cu_type) of a float dtype. */
static int cu_type(enum gf_dtype t)
{
    return t == GF_FLOAT16 ? GF_CU_F16 : t == GF_BFLOAT16 ? GF_CU_BF16 : GF_CU_F32;
}

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* Whether the node's model runs with --precision tf32 (a subgraph asks the
 * graphs that enclose it): then fp32 GEMMs may use TF32 tensor cores. */
static bool model_tf32(const struct gf_kernel_args *a)
{
    const struct gf_graph *g = a->node ? a->node->graph : NULL;
    while (g && !g->model && g->parent)
        g = g->parent;
    return g && g->model && gf_model_precision(g->model) == GF_PRECISION_TF32;
}

/* y[n] (dtype t) = beta y: zeros for beta 0 (whatever y held), nothing for
 * 1 (a GEMM over K = 0, which cuBLASLt is not asked to do). */
static enum gf_status scale_y(const struct gf_kernel_args *a, void *y, enum gf_dtype t,
                              int64_t n, float beta)
{
    cudaStream_t s = gf_cu_stream(a);
    if (n <= 0 || beta == 1.0f)
        return GF_OK;
    if (beta == 0.0f)
        return gf_cu_check(a, cudaMemsetAsync(y, 0, (size_t)n * gf_dtype_size(t), s), "memset");
    if (t != GF_FLOAT)
        return gf_cu_check(a, gf_cu_scale_t(s, cu_type(t), y, beta, n), "beta Y");
    return gf_cu_check(a, gf_cu_grad_acc(s, y, NULL, y, beta, n), "beta Y");
}

/* Y = alpha A' B' + beta C for the plan m: A and B the node's inputs 0, 1,
 * Y dense [..., M, N] of dtype ydt (the node's output, or an fp32
 * workspace), C like Y (NULL: Y itself). */
static enum gf_status run_plan_epi(const struct gf_kernel_args *a, const struct gf_mm *m,
                                   bool ta, bool tb, float alpha, float beta, int epi,
                                   const float *bias, const void *C, void *Y,
                                   enum gf_dtype ydt)
{
    const char *A = a->in[0].data, *B = a->in[1].data;
    const char *Cc = C;
    char *Yc = Y;
    size_t es = gf_dtype_size(a->in[0].dtype), ys = gf_dtype_size(ydt);
    struct prod p = {.m = m->m, .n = m->n, .k = m->k, .lda = m->lda, .ldb = m->ldb, .ta = ta,
                     .tb = tb, .batch = 1, .sy = m->m * m->n, .alpha = alpha, .beta = beta,
                     .epi = epi, .bias = bias, .algo = knob_algo(a),
                     .dt = cu_dt(a->in[0].dtype), .ydt = cu_dt(ydt), .tf32 = model_tf32(a)};
    if (m->count == 0 || p.m == 0 || p.n == 0)
        return GF_OK;
    int r = m->brank;
    bool sb_zero = true;
    for (int i = 0; i < r; i++)
        sb_zero &= m->sb[i] == 0;
    if (r == 0)
        return run_prod(a, &p, A, B, C, Y);
    /* A's batches one after another, B shared: more rows of one product */
    if (!ta && sb_zero && m->lda == m->k && uniform(r, m->bdims, m->sa) &&
        m->sa[r - 1] == m->m * m->k) {
        p.m *= m->count;
        return run_prod(a, &p, A, B, C, Y);
    }
    int64_t inner = m->bdims[r - 1], outer = m->count / inner;
    bool one = uniform(r, m->bdims, m->sa) && uniform(r, m->bdims, m->sb);
    p.batch = one ? m->count : inner;
    p.sa = m->sa[r - 1];
    p.sb = m->sb[r - 1];
    if (one)
        return run_prod(a, &p, A, B, C, Y);
    enum gf_status st = GF_OK;
    for (int64_t o = 0; o < outer && st == GF_OK; o++) {
        /* offsets of outer batch o (flat over bdims[0..r-1)) */
        int64_t oa = 0, ob = 0, rest = o;
        for (int i = r - 2; i >= 0; i--) {
            int64_t c = rest % m->bdims[i];
            rest /= m->bdims[i];
            oa += c * m->sa[i];
            ob += c * m->sb[i];
        }
        size_t oy = (size_t)(o * inner * p.sy) * ys;
        st = run_prod(a, &p, A + (size_t)oa * es, B + (size_t)ob * es, Cc ? Cc + oy : NULL,
                      Yc + oy);
    }
    return st;
}

/* Y (the node's output) = alpha A' B' + beta Y. */
static enum gf_status run_plan(const struct gf_kernel_args *a, const struct gf_mm *m, bool ta,
                               bool tb, float alpha, float beta)
{
    return run_plan_epi(a, m, ta, tb, alpha, beta, 0, NULL, NULL, a->out[0].data,
                        a->out[0].dtype);
}

enum gf_status gf_cu_gemm_t(const struct gf_kernel_args *a, enum gf_dtype dt, enum gf_dtype ct,
                            bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C)
{
    struct prod p = {.m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ta = ta, .tb = tb,
                     .batch = 1, .alpha = alpha, .beta = beta, .dt = cu_dt(dt),
                     .ydt = cu_dt(ct), .tf32 = dt == GF_FLOAT && model_tf32(a)};
    if (m <= 0 || n <= 0)
        return GF_OK;
    if (k <= 0) /* a sum of nothing: C = beta C */
        return scale_y(a, C, ct, m * n, beta);
    return run_prod(a, &p, A, B, NULL, C);
}

enum gf_status gf_cu_gemm(const struct gf_kernel_args *a, bool ta, bool tb, int64_t m,
                          int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C)
{
    return gf_cu_gemm_t(a, GF_FLOAT, GF_FLOAT, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C);
}

/* ---- the ops ------------------------------------------------------------------------ */

static enum gf_status mm_inputs(const struct gf_kernel_args *a, bool ta, bool tb,
                                struct gf_mm *m)
{
    if (a->n_in < 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs inputs A and B");
    enum gf_status st = fu_check_in(a, 0, "A", GF_UNDEFINED);
    if (st == GF_OK && !is_float(a->in[0].dtype))
        st = gf_kernel_error(a, GF_ERR_INVALID, "A is %s, expected a float type",
                             gf_dtype_name(a->in[0].dtype));
    if (st == GF_OK)
        st = fu_check_in(a, 1, "B", a->in[0].dtype);
    if (st == GF_OK)
        st = gf_mm_plan(a, ta, tb, m);
    return st;
}

/* MatMul: A [..., M, K] x B [..., K, N] -> Y [..., M, N]. */
static enum gf_status matmul_run(const struct gf_kernel_args *a)
{
    struct gf_mm m;
    enum gf_status st = mm_inputs(a, false, false, &m);
    if (st == GF_OK)
        st = fu_check_out(a, 0, a->in[0].dtype, m.yrank, m.ydims);
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    if (m.k == 0) /* a sum of nothing */
        return gf_cu_check(a, cudaMemsetAsync(a->out[0].data, 0, gf_tview_bytes(&a->out[0]),
                                              gf_cu_stream(a)), "memset");
    return run_plan(a, &m, false, false, 1.0f, 0.0f);
}

/* Gemm: Y [M, N] = alpha A' B' + beta C, C of rank <= 2 broadcast to Y
 * (before opset 7 only with broadcast = 1). */
static enum gf_status gemm_run(const struct gf_kernel_args *a)
{
    bool ta = gf_node_attr_int(a->node, "transA", 0) != 0;
    bool tb = gf_node_attr_int(a->node, "transB", 0) != 0;
    float alpha = gf_node_attr_float(a->node, "alpha", 1.0f);
    float beta = gf_node_attr_float(a->node, "beta", 1.0f);
    if (a->n_in < 2 || a->in[0].rank != 2 || a->in[1].rank != 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "A and B must be 2-D");
    struct gf_mm m;
    enum gf_status st = mm_inputs(a, ta, tb, &m);
    int64_t ydims[2] = {m.m, m.n};
    if (st == GF_OK)
        st = fu_check_out(a, 0, a->in[0].dtype, 2, ydims);
    if (st != GF_OK)
        return st;
    bool has_c = a->n_in >= 3 && fu_has(a, 2);
    if (has_c) {
        const struct gf_tview *C = &a->in[2];
        int64_t cm = C->rank == 2 ? C->dims[0] : 1;
        int64_t cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
        int64_t opset = gf_model_opset(a->node->graph->model, "");
        bool strict = opset > 0 && opset < 7 && !gf_node_attr_int(a->node, "broadcast", 0);
        if (C->rank > 2 || (cm != 1 && cm != m.m) || (cn != 1 && cn != m.n) ||
            (strict && (C->rank != 2 || cm != m.m || cn != m.n)))
            return gf_kernel_error(a, GF_ERR_INVALID, "C %s does not %s Y [%lld,%lld]%s",
                                   FU_SHAPE(C), strict ? "match" : "broadcast to",
                                   (long long)m.m, (long long)m.n,
                                   strict ? " (broadcast=0)" : "");
        if (C->dtype != a->in[0].dtype)
            return gf_kernel_error(a, GF_ERR_INVALID, "C is %s, expected %s like A",
                                   gf_dtype_name(C->dtype), gf_dtype_name(a->in[0].dtype));
        has_c = C->nelem > 0 && beta != 0.0f;
    }
    if (a->out[0].nelem == 0)
        return GF_OK;
    if (has_c) { /* Y = C broadcast, then Y = alpha A' B' + beta Y (K = 0: beta Y) */
        int64_t st2[1][GF_MAX_RANK];
        gf_bcast_strides(&a->in[2], &a->out[0], st2[0]);
        struct gf_cu_nd nd;
        gf_cu_nd_init(&nd, 2, ydims, 1, st2);
        cudaError_t e = gf_cu_copy_nd(gf_cu_stream(a), (int)gf_dtype_size(a->in[2].dtype),
                                      a->in[2].data, a->out[0].data, &nd,
                                      (int64_t)a->out[0].nelem);
        if ((st = gf_cu_check(a, e, "Gemm's C broadcast")))
            return st;
    }
    if (m.k == 0)
        return scale_y(a, a->out[0].data, a->out[0].dtype, (int64_t)a->out[0].nelem,
                       has_c ? beta : 0.0f);
    return run_plan(a, &m, ta, tb, alpha, has_c ? beta : 0.0f);
}

/* ---- MatMulEpilogue ------------------------------------------------------------------ */

/* MatMulEpilogue(A, B, Bias?, Res?) -> Y = act(alpha A' B' + beta Bias) + Res
 * (kernels/cpu/fused_matmul.c).  Bias a row vector [N] with beta 1:
 * cuBLASLt's BIAS epilogue, with RELU_BIAS or GELU_BIAS (tanh GELU: only
 * for approximate="tanh") fused when there is no Res; else Bias is
 * broadcast into Y first and the GEMM accumulates onto beta Y.  What
 * cuBLASLt cannot fuse exactly (erf GELU, SiLU, Tanh, Sigmoid, Res) is one
 * elementwise pass over Y (matmul.cu). */
static bool row_vector(const struct gf_tview *t, const struct gf_tview *y, int64_t *st)
{
    gf_bcast_strides(t, y, st);
    for (int i = 0; i + 1 < y->rank; i++)
        if (st[i] != 0)
            return false;
    return y->rank >= 1 && (st[y->rank - 1] == 1 || y->dims[y->rank - 1] == 1) &&
           t->nelem == (size_t)y->dims[y->rank - 1];
}

/* Whether Res (input 3) lies exactly like Y: then a 16-bit GEMM adds it as
 * cuBLASLt's C (fp32 sum, one rounding, as the CPU's epilogue does). */
static bool res_like_y(const struct gf_kernel_args *a)
{
    const struct gf_tview *res = &a->in[3], *y = &a->out[0];
    return res->nelem == y->nelem && fu_same_shape(res, y->rank, y->dims);
}

/* Whether a 16-bit MatMulEpilogue is one cuBLASLt call into Y: no Bias, no
 * activation, Res (if any) like Y; else the GEMM goes to an fp32
 * workspace [nelem of Y] and gf_cu_mme_epi_t rounds once. */
static bool mme16_direct(const struct gf_kernel_args *a, int act, bool has_b, bool has_r)
{
    return act == GF_CU_MACT_NONE && !has_b && (!has_r || res_like_y(a));
}

static size_t mme_workspace(const struct gf_kernel_args *a)
{
    if (a->n_in < 2 || a->n_out < 1 || a->in[0].dtype == GF_FLOAT)
        return 0;
    /* as mme_run decides, erring towards a workspace (an unknown
     * activation name is an error there) */
    const char *act = gf_node_attr_string(a->node, "activation", "");
    bool none = !act || !*act || strcmp(act, "none") == 0;
    bool has_b = a->n_in > 2 && fu_has(a, 2) && a->in[2].nelem > 0;
    bool has_r = a->n_in > 3 && fu_has(a, 3) && a->in[3].nelem > 0;
    if (mme16_direct(a, none ? GF_CU_MACT_NONE : GF_CU_MACT_RELU, has_b, has_r))
        return 0;
    return a->out[0].nelem * sizeof(float);
}

/* The 16-bit MatMulEpilogue (see mme16_direct). */
static enum gf_status mme16_run(const struct gf_kernel_args *a, const struct gf_mme_rule *r,
                                const struct gf_mm *m, bool has_b, bool has_r)
{
    struct gf_tview *y = &a->out[0];
    if (m->k > 0 && mme16_direct(a, r->act, has_b, has_r))
        return run_plan_epi(a, m, r->ta, r->tb, r->alpha, has_r ? 1.0f : 0.0f, 0, NULL,
                            has_r ? a->in[3].data : NULL, y->data, y->dtype);
    float *yf = NULL;
    if (m->k > 0) { /* K = 0: P = 0, no GEMM */
        if (!a->workspace)
            return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the fp32 product");
        yf = a->workspace;
        enum gf_status st = run_plan_epi(a, m, r->ta, r->tb, r->alpha, 0.0f, 0, NULL, NULL, yf,
                                         GF_FLOAT);
        if (st != GF_OK)
            return st;
    }
    int64_t st2[4][GF_MAX_RANK];
    memset(st2, 0, sizeof(st2));
    if (has_b)
        gf_bcast_strides(&a->in[2], y, st2[0]);
    if (has_r)
        gf_bcast_strides(&a->in[3], y, st2[1]);
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, y->rank, y->dims, 2, st2);
    cudaError_t e = gf_cu_mme_epi_t(gf_cu_stream(a), cu_type(y->dtype), r->act, yf,
                                    has_b ? a->in[2].data : NULL, r->beta,
                                    has_r ? a->in[3].data : NULL, &nd, y->data,
                                    (int64_t)y->nelem);
    return gf_cu_check(a, e, "MatMulEpilogue's epilogue");
}

static enum gf_status mme_run(const struct gf_kernel_args *a)
{
    struct gf_mme_rule r;
    struct gf_mm m;
    enum gf_status st = gf_mme_check(a, &r, &m);
    if (st == GF_OK && !is_float(a->in[0].dtype))
        st = gf_kernel_error(a, GF_ERR_INVALID, "A is %s, expected a float type",
                             gf_dtype_name(a->in[0].dtype));
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    struct gf_tview *y = &a->out[0];
    bool has_b = fu_has(a, 2) && a->in[2].nelem > 0 && r.beta != 0.0f;
    bool has_r = fu_has(a, 3) && a->in[3].nelem > 0;
    if (a->in[0].dtype != GF_FLOAT)
        return mme16_run(a, &r, &m, has_b, has_r);
    int act = r.act;
    int64_t bst[GF_MAX_RANK];
    cudaStream_t s = gf_cu_stream(a);
    if (has_b && r.beta == 1.0f && m.k > 0 && row_vector(&a->in[2], y, bst)) {
        int epi = CUBLASLT_EPILOGUE_BIAS, left = act;
        if (!has_r && act == GF_CU_MACT_RELU)
            epi = CUBLASLT_EPILOGUE_RELU_BIAS, left = GF_CU_MACT_NONE;
        else if (!has_r && act == GF_CU_MACT_GELU_TANH)
            epi = CUBLASLT_EPILOGUE_GELU_BIAS, left = GF_CU_MACT_NONE;
        st = run_plan_epi(a, &m, r.ta, r.tb, r.alpha, 0.0f, epi, a->in[2].data, NULL, y->data,
                          GF_FLOAT);
        if (st == GF_ERR_UNSUPPORTED) /* an algo past the candidates: declined */
            return st;
        if (st == GF_OK) {
            act = left;
            has_b = false;
        }
        if (st == GF_OK && act == GF_CU_MACT_NONE && !has_r)
            return GF_OK;
        if (st == GF_OK)
            goto epilogue;
    }
    if (has_b) { /* Y = Bias broadcast, then Y = alpha A' B' + beta Y */
        int64_t st2[1][GF_MAX_RANK];
        gf_bcast_strides(&a->in[2], y, st2[0]);
        struct gf_cu_nd nd;
        gf_cu_nd_init(&nd, y->rank, y->dims, 1, st2);
        if ((st = gf_cu_check(a, gf_cu_copy_nd(s, 4, a->in[2].data, y->data, &nd,
                                                (int64_t)y->nelem), "Bias broadcast")))
            return st;
    }
    if (m.k == 0) /* a sum of nothing: Y = beta Bias (or 0), then the epilogue */
        st = scale_y(a, y->data, GF_FLOAT, (int64_t)y->nelem, has_b ? r.beta : 0.0f);
    else
        st = run_plan(a, &m, r.ta, r.tb, r.alpha, has_b ? r.beta : 0.0f);
    if (st != GF_OK)
        return st;
    if (act == GF_CU_MACT_NONE && !has_r)
        return GF_OK;
epilogue:;
    struct gf_cu_nd nd = {.rank = 1, .dims = {1}};
    if (has_r) {
        int64_t st2[1][GF_MAX_RANK];
        gf_bcast_strides(&a->in[3], y, st2[0]);
        gf_cu_nd_init(&nd, y->rank, y->dims, 1, st2);
    }
    return gf_cu_check(a, gf_cu_mme_epi(s, act, y->data, has_r ? a->in[3].data : NULL, &nd,
                                        (int64_t)y->nelem), "MatMulEpilogue's epilogue");
}

/* Operands of one float type (fp32, fp16, bf16), rank <= 8 (K = 0 too:
 * act(beta Bias) + Res). */
static bool mme_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 2 || !is_float(in[0].dtype) || in[0].rank < 1 || in[1].rank < 1)
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_UNDEFINED &&
            (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK))
            return false;
    return true;
}

/* ---- MatMulEpilogueGrad ------------------------------------------------------------- */

/* MatMulEpilogueGrad(dY, Z) -> dZ = dY act'(Z), dBias? = beta (column sums
 * of dZ) (kernels/cpu/fused_grad.c).  No GEMM here, so no cuBLASLt
 * epilogue: one pass that writes dZ and each row group's column sums in
 * double, then one that adds the groups in order.  ws = [groups x N
 * doubles]. */
static size_t mmeg_workspace(const struct gf_kernel_args *a)
{
    if (a->n_in < 1 || a->in[0].rank < 1 || !fu_has_out(a, 1))
        return 0;
    const struct gf_tview *dy = &a->in[0];
    int64_t n = dy->dims[dy->rank - 1], rows = n ? (int64_t)dy->nelem / n : 0;
    return (size_t)gf_cu_colsum_groups(rows) * (size_t)n * sizeof(double);
}

static enum gf_status mmeg_run(const struct gf_kernel_args *a)
{
    struct gf_mme_grad_rule r;
    enum gf_status st = gf_mme_grad_check(a, &r);
    if (st != GF_OK)
        return st;
    const struct gf_tview *dy = &a->in[0];
    int64_t n = dy->dims[dy->rank - 1], rows = n ? (int64_t)dy->nelem / n : 0;
    if (n == 0)
        return GF_OK;
    bool want_db = fu_has_out(a, 1);
    if (want_db && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the dBias partials");
    cudaStream_t s = gf_cu_stream(a);
    double *part = want_db ? a->workspace : NULL;
    int t = cu_type(dy->dtype);
    cudaError_t e = gf_cu_mme_grad_t(s, t, r.act, r.from_y, dy->data, a->in[1].data,
                                     a->out[0].data, part, rows, n);
    if (e == cudaSuccess && want_db)
        e = gf_cu_colsum_finish_t(s, t, part, gf_cu_colsum_groups(rows), n, a->out[1].data,
                                  gf_node_attr_float(a->node, "beta", 1.0f));
    return gf_cu_check(a, e, "MatMulEpilogueGrad");
}

/* dY and Z of one float type (fp32, fp16, bf16), rank <= 8. */
static bool mmeg_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 2 || !is_float(in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK)
            return false;
    return true;
}

/* Operands of one float type (fp32, fp16, bf16; C included), rank <= 8;
 * K = 0 too (zeros, or Gemm's beta C). */
static bool mm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 2 || !is_float(in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_UNDEFINED &&
            (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK))
            return false;
    return true;
}

/* dtype GF_UNDEFINED: `supports` checks the float types, so that an empty A (K = 0: no
 * data on the device, the registry sees no type) finds its kernel too. */
static const struct gf_kernel kernels[] = {
    {.op = GF_OP_MATMUL, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cublaslt",
     .supports = mm_supports, .run = matmul_run, .n_knobs = N_KNOBS, .knobs = mm_knobs},
    {.op = GF_OP_GEMM, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cublaslt",
     .supports = mm_supports, .run = gemm_run, .n_knobs = N_KNOBS, .knobs = mm_knobs},
    {.op = GF_OP_MATMUL_EPILOGUE, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cublaslt",
     .supports = mme_supports, .workspace = mme_workspace, .run = mme_run, .n_knobs = N_KNOBS,
     .knobs = mm_knobs},
    {.op = GF_OP_MATMUL_EPILOGUE_GRAD, .backend = "cuda", .dtype = GF_UNDEFINED,
     .impl = "cu_columns", .supports = mmeg_supports, .workspace = mmeg_workspace,
     .run = mmeg_run},
};

const struct gf_kernel_table gf_cuda_matmul_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
