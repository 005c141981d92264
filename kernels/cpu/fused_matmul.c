/* CPU kernel of MatMulEpilogue (domain graphfuse, README "Fused ops"):
 *
 *   A, B, Bias?, Res? -> Y     P = alpha (A' @ B'),  Y = act(P + beta Bias) + Res
 *
 * A' and B' are A and B with their last two axes swapped when transA /
 * transB; batch dims broadcast as in ONNX MatMul, a 1-D A is [1, K] and a
 * 1-D B [K, 1] (the added axis dropped from Y).  Y is seen as logical
 * [batch..., M, N] with rows (batch..., M); Bias and Res broadcast to Y.
 *
 * The GEMM is OpenBLAS (sgemm, dgemm; fp16 / bf16 are widened into the
 * workspace and computed as fp32), or for fp32 with A not transposed the
 * CPU's own (kernels/cpu/sgemm.c, tiles of up to GF_CPU_SGEMM_MAX_M rows).  The output is produced tile by tile
 * (about 1 MB, a batch's rows at most, at least one tile per thread; wide
 * outputs in column blocks too, see mme_compute), each by one thread:
 * beta Bias is written into the tile, a
 * single-threaded GEMM accumulates onto it (BLAS beta = 1), and the
 * activation and Res are applied while the tile is still in cache.
 */
#include <cblas.h>
#include <limits.h>

#include "fused.h"

#define TILE_ELEMS (256 * 1024) /* output elements per tile */
#define LR (GF_MAX_RANK + 2)   /* room for the logical shape */

enum mact { MACT_NONE, MACT_RELU, MACT_GELU, MACT_GELU_TANH, MACT_SILU, MACT_TANH, MACT_SIGMOID };

struct mme {
    /* the GEMM: rows i of batch b of Y (compute type, [count*m, n] in yc) */
    enum gf_dtype ct;  /* compute type: GF_FLOAT or GF_DOUBLE */
    int64_t m, n, k;
    bool ta, tb;
    const void *a, *b; /* compute type */
    const float *packed; /* fp32 2-D B packed once a plan (mme_prepare), or NULL */
    int64_t lda, ldb;
    double alpha, beta;
    void *yc;
    int brank;         /* broadcast batch dims; 0: a single GEMM */
    int64_t bdims[GF_MAX_RANK], sa[GF_MAX_RANK], sb[GF_MAX_RANK];
    int64_t count;
    /* the epilogue over logical Y [lrank dims], rows = product of all but the last */
    enum mact act;
    int lrank;
    int64_t ldims[LR], sbias[LR], sres[LR];
    const void *bias, *res; /* Y's dtype, or NULL */
    void *y;                /* Y; == yc unless fp16 / bf16 */
    bool narrow;            /* yc is an fp32 copy: store it into y */
};

/* ---- typed row loops -------------------------------------------------------------- */

#define FU_TANH(x) _Generic((x), float: tanhf, default: tanh)(x)

/* Rows [r0, r1), columns [j0, j1) of yc = beta Bias (0 without Bias: then K == 0). */
#define DEF_MME_FILL(DT, sfx, T, C, LD, ST)                                             \
    FU_HOT static void mme_fill_##sfx(const struct mme *c, size_t r0, size_t r1,        \
                                      size_t j0, size_t j1)                             \
    {                                                                                   \
        size_t n = (size_t)c->n, bs = (size_t)c->sbias[c->lrank - 1], w = j1 - j0;      \
        C beta = (C)c->beta;                                                            \
        for (size_t r = r0; r < r1; r++) {                                              \
            C *p = (C *)c->yc + r * n + j0;                                             \
            const T *q = c->bias ? (const T *)c->bias +                                 \
                                       fu_offset(c->lrank - 1, c->ldims, c->sbias, r) + \
                                       j0 * bs                                          \
                                 : NULL;                                                \
            if (!q)                                                                     \
                for (size_t j = 0; j < w; j++)                                          \
                    p[j] = 0;                                                           \
            else if (bs == 1)                                                           \
                for (size_t j = 0; j < w; j++)                                          \
                    p[j] = beta * (C)LD(q[j]);                                          \
            else                                                                        \
                for (size_t j = 0; j < w; j++)                                          \
                    p[j] = beta * (C)LD(q[j * bs]);                                     \
        }                                                                               \
    }

/* The activation over one row of yc, in place. */
#define DEF_MME_ACT(DT, sfx, T, C, LD, ST)                                              \
    FU_HOT static void mme_act_##sfx(enum mact act, C *p, size_t n)                     \
    {                                                                                   \
        switch (act) {                                                                  \
        case MACT_RELU:                                                                 \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = p[j] < 0 ? (C)0 : p[j];                                          \
            break;                                                                      \
        case MACT_GELU:                                                                 \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = FU_GELU(p[j]);                                                   \
            break;                                                                      \
        case MACT_GELU_TANH:                                                            \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = FU_GELU_TANH(p[j]);                                              \
            break;                                                                      \
        case MACT_SILU:                                                                 \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = p[j] * FU_SIGMOID(p[j]);                                         \
            break;                                                                      \
        case MACT_TANH:                                                                 \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = FU_TANH(p[j]);                                                   \
            break;                                                                      \
        case MACT_SIGMOID:                                                              \
            for (size_t j = 0; j < n; j++)                                              \
                p[j] = FU_SIGMOID(p[j]);                                                \
            break;                                                                      \
        default:                                                                        \
            break;                                                                      \
        }                                                                               \
    }

/* Rows [r0, r1), columns [j0, j1): Y = act(yc) + Res. */
#define DEF_MME_EPI(DT, sfx, T, C, LD, ST)                                              \
    FU_HOT static void mme_epi_##sfx(const struct mme *c, size_t r0, size_t r1,         \
                                     size_t j0, size_t j1)                              \
    {                                                                                   \
        size_t n = (size_t)c->n, rs = (size_t)c->sres[c->lrank - 1], w = j1 - j0;       \
        for (size_t r = r0; r < r1; r++) {                                              \
            C *p = (C *)c->yc + r * n + j0;                                             \
            T *y = (T *)c->y + r * n + j0;                                              \
            mme_act_##sfx(c->act, p, w);                                                \
            if (c->res) {                                                               \
                const T *q = (const T *)c->res +                                        \
                             fu_offset(c->lrank - 1, c->ldims, c->sres, r) + j0 * rs;   \
                if (rs == 1)                                                            \
                    for (size_t j = 0; j < w; j++)                                      \
                        y[j] = ST(p[j] + (C)LD(q[j]));                                  \
                else                                                                    \
                    for (size_t j = 0; j < w; j++)                                      \
                        y[j] = ST(p[j] + (C)LD(q[j * rs]));                             \
            } else if (c->narrow) {                                                     \
                for (size_t j = 0; j < w; j++)                                          \
                    y[j] = ST(p[j]);                                                    \
            }                                                                           \
        }                                                                               \
    }

FU_TYPES(DEF_MME_FILL)
FU_TYPES(DEF_MME_ACT)
FU_TYPES(DEF_MME_EPI)

typedef void (*mme_rows_fn)(const struct mme *c, size_t r0, size_t r1, size_t j0, size_t j1);
#define FILL_ENTRY(DT, sfx, ...) [DT] = mme_fill_##sfx,
#define EPI_ENTRY(DT, sfx, ...) [DT] = mme_epi_##sfx,
static const mme_rows_fn mme_fills[GF_DTYPE_COUNT] = {FU_TYPES(FILL_ENTRY)};
static const mme_rows_fn mme_epis[GF_DTYPE_COUNT] = {FU_TYPES(EPI_ENTRY)};

/* ---- the steps of one tile ----------------------------------------------------------- */

static void blas_threads(int n)
{
#ifdef OPENBLAS_VERSION
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

/* yc rows [i0, i1), columns [j0, j1) of batch bi = alpha A' B' (+ yc when
 * accumulating). */
static void mme_gemm(const struct mme *c, int64_t bi, int64_t i0, int64_t i1, int64_t j0,
                     int64_t j1, bool acc)
{
    int64_t oa = 0, ob = 0, x = bi;
    for (int d = c->brank - 1; d >= 0; d--) {
        oa += x % c->bdims[d] * c->sa[d];
        ob += x % c->bdims[d] * c->sb[d];
        x /= c->bdims[d];
    }
    oa += c->ta ? i0 : i0 * c->lda; /* A' row i0: row i0 of A, or column i0 of A^T */
    ob += c->tb ? j0 * c->ldb : j0; /* B' column j0: column j0 of B, or row j0 of B^T */
    int64_t oc = (bi * c->m + i0) * c->n + j0;
    enum CBLAS_TRANSPOSE ta = c->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = c->tb ? CblasTrans : CblasNoTrans;
    int m = (int)(i1 - i0), n = (int)(j1 - j0), k = (int)c->k, lda = (int)c->lda,
        ldb = (int)c->ldb, ldc = (int)c->n;
    /* fp32, A not transposed: kernels/cpu/sgemm.c on this thread, from B's
     * panels when the plan packed them (a 2-D B: the same for every batch) */
    if (c->ct == GF_FLOAT && !c->ta && c->alpha == 1 &&
        ((c->packed && gf_cpu_sgemm_packed(1, m, n, k, (const float *)c->a + oa, lda, c->packed,
                                           j0, (float *)c->yc + oc, ldc, acc)) ||
         gf_cpu_sgemm(1, m, n, k, (const float *)c->a + oa, lda, (const float *)c->b + ob, ldb,
                      c->tb, (float *)c->yc + oc, ldc, acc)))
        return;
    if (c->ct == GF_DOUBLE)
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, c->alpha, (const double *)c->a + oa, lda,
                    (const double *)c->b + ob, ldb, acc ? 1.0 : 0.0, (double *)c->yc + oc, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)c->alpha, (const float *)c->a + oa,
                    lda, (const float *)c->b + ob, ldb, acc ? 1.0f : 0.0f,
                    (float *)c->yc + oc, ldc);
}

/* Rows [i0, i1), columns [j0, j1) of batch bi, on the calling thread:
 * beta Bias, the GEMM onto it, then the epilogue while the tile is still in
 * cache. */
static void mme_tile(const struct mme *c, enum gf_dtype dt, int64_t bi, int64_t i0, int64_t i1,
                     int64_t j0, int64_t j1)
{
    size_t r0 = (size_t)(bi * c->m + i0), r1 = (size_t)(bi * c->m + i1);
    bool fill = c->bias || c->k == 0;
    if (fill)
        mme_fills[dt](c, r0, r1, (size_t)j0, (size_t)j1);
    if (c->k > 0)
        mme_gemm(c, bi, i0, i1, j0, j1, fill);
    if (c->act != MACT_NONE || c->res || c->narrow)
        mme_epis[dt](c, r0, r1, (size_t)j0, (size_t)j1);
}

/* Tiles of `rows` x `cols`: per batch, column blocks one after the other,
 * each of `nrb` row blocks (so that a thread's consecutive tiles share
 * their block of B). */
struct tile_job {
    const struct mme *c;
    enum gf_dtype dt;
    int64_t rows, cols, nrb, ncb;
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static void tile_task(void *vj, size_t b, size_t e)
{
    const struct tile_job *j = vj;
    const struct mme *c = j->c;
    for (size_t t = b; t < e; t++) {
        int64_t per = j->nrb * j->ncb, bi = (int64_t)t / per, x = (int64_t)t % per;
        int64_t i0 = x % j->nrb * j->rows, j0 = x / j->nrb * j->cols;
        mme_tile(c, j->dt, bi, i0, min64(i0 + j->rows, c->m), j0, min64(j0 + j->cols, c->n));
    }
}

/* The output in tiles of about TILE_ELEMS, each made whole by one thread
 * calling single-threaded BLAS: no hand-over between BLAS's threads and
 * ours, and each epilogue finds its tile in its own core's cache.  A wide
 * output (N > MAX_COLS: an LM head) is cut into column blocks as well, so
 * that every tile has enough rows for BLAS to run at full speed (BLAS packs
 * its block of B once per call: with few rows per call the packing costs
 * as much as the product) and the threads split B between them (thread
 * ranges are contiguous tiles: each reads its share of B once) rather than
 * each reading all of B for a few rows. */
#define MAX_COLS 1024
#define MIN_ROWS 32

static void mme_compute(const struct mme *c, enum gf_dtype dt, int nt)
{
    int64_t ncb = c->n > MAX_COLS ? (c->n + MAX_COLS / 2 - 1) / (MAX_COLS / 2) : 1;
    int64_t cols = (c->n + ncb - 1) / ncb;
    if (ncb > 1)
        cols = (cols + 15) / 16 * 16; /* whole vectors */
    ncb = (c->n + cols - 1) / cols;
    int64_t rows = min64(c->m, TILE_ELEMS / cols > 1 ? TILE_ELEMS / cols : 1);
    /* a tile per thread at least, and a multiple of the threads while the
     * tiles are few (3 tiles on 2 threads leave one idle a third of the
     * time): fewer rows, down to MIN_ROWS while the columns can still be
     * split, then down to 1 */
    int64_t tiles;
    while (rows > 1 && ((tiles = c->count * ncb * ((c->m + rows - 1) / rows)) < nt ||
                        (tiles < 4 * nt && tiles % nt))) {
        if (rows <= MIN_ROWS && cols > 64 && c->n > 64) {
            cols = (cols / 2 + 15) / 16 * 16;
            ncb = (c->n + cols - 1) / cols;
            continue;
        }
        rows = (rows + 1) / 2;
    }
    struct tile_job j = {c, dt, rows, cols, (c->m + rows - 1) / rows, ncb};
    double work = (double)rows * (double)cols * (double)(c->k + 1);
    size_t grain = work >= 65536 ? 1 : (size_t)(65536 / work);
    blas_threads(1);
    gf_parallel_for(nt, (size_t)(j.nrb * j.ncb * c->count), grain, tile_task, &j);
}

/* ---- shapes ---------------------------------------------------------------------------- */

/* Strides of Bias or Res (input i, checked to broadcast to Y) over the
 * logical shape.  The axes Y lacks (1-D A or B) get stride 0. */
static void mme_operand(const struct gf_kernel_args *a, struct mme *c, size_t i,
                        const struct gf_mm *m, int64_t *lst)
{
    int64_t yst[GF_MAX_RANK];
    fu_strides(&a->in[i], m->yrank, m->ydims, yst);
    int y = 0;
    for (int l = 0; l < c->lrank; l++) {
        bool missing = (l == c->brank && a->in[0].rank < 2) ||
                       (l == c->brank + 1 && a->in[1].rank < 2);
        lst[l] = missing ? 0 : yst[y++];
    }
}

/* Every check (kernels/checks.c, the rule in graph/opcheck.c); fills c but
 * for the data pointers. */
static enum gf_status mme_check(const struct gf_kernel_args *a, struct mme *c)
{
    struct gf_mme_rule r;
    struct gf_mm m;
    enum gf_status st = gf_mme_check(a, &r, &m);
    if (st != GF_OK)
        return st;
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    int64_t a0 = A->rank > 1 ? A->dims[A->rank - 2] : 1;
    int64_t b0 = B->rank > 1 ? B->dims[B->rank - 2] : B->dims[0];
    if (m.m > INT_MAX || m.n > INT_MAX || m.k > INT_MAX || a0 > INT_MAX || m.lda > INT_MAX ||
        b0 > INT_MAX || m.ldb > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "a matrix dim exceeds BLAS's int");
    c->ta = r.ta, c->tb = r.tb, c->alpha = r.alpha, c->beta = r.beta;
    c->act = (enum mact)r.act;
    c->m = m.m, c->n = m.n, c->k = m.k, c->lda = m.lda, c->ldb = m.ldb;
    c->brank = m.brank, c->count = m.count;
    memcpy(c->bdims, m.bdims, sizeof(c->bdims));
    memcpy(c->sa, m.sa, sizeof(c->sa));
    memcpy(c->sb, m.sb, sizeof(c->sb));
    memcpy(c->ldims, m.bdims, sizeof(int64_t) * (size_t)m.brank);
    c->ldims[m.brank] = m.m;
    c->ldims[m.brank + 1] = m.n;
    c->lrank = m.brank + 2;
    if (fu_has(a, 2))
        mme_operand(a, c, 2, &m, c->sbias);
    if (fu_has(a, 3))
        mme_operand(a, c, 3, &m, c->sres);
    return GF_OK;
}

/* ---- the kernel ------------------------------------------------------------------------ */

struct widen {
    const uint16_t *src;
    float *dst;
    bool bf16;
};

static void widen_task(void *vw, size_t b, size_t e)
{
    const struct widen *w = vw;
    for (size_t i = b; i < e; i++)
        w->dst[i] = w->bf16 ? gf_bf16_to_float(w->src[i]) : gf_half_to_float(w->src[i]);
}

/* fp16 / bf16: ws = [A as fp32][B as fp32][Y as fp32]. */
static size_t mme_workspace(const struct gf_kernel_args *a)
{
    if (a->n_in < 2 || !fu_is_half(a->in[0].dtype) || a->n_out < 1)
        return 0;
    return (a->in[0].nelem + a->in[1].nelem + a->out[0].nelem) * sizeof(float);
}

/* Points c at the operands, widening fp16 / bf16 ones into the workspace. */
static enum gf_status mme_operands(const struct gf_kernel_args *a, struct mme *c)
{
    enum gf_dtype dt = a->in[0].dtype;
    c->y = a->out[0].data;
    c->bias = fu_has(a, 2) ? a->in[2].data : NULL;
    c->res = fu_has(a, 3) ? a->in[3].data : NULL;
    c->ct = dt == GF_DOUBLE ? GF_DOUBLE : GF_FLOAT;
    if (!fu_is_half(dt)) {
        c->a = a->in[0].data;
        c->b = a->in[1].data;
        c->yc = c->y;
        return GF_OK;
    }
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the fp32 copies");
    float *ws = a->workspace;
    for (int i = 0; i < 2; i++) {
        struct widen w = {a->in[i].data, ws, dt == GF_BFLOAT16};
        gf_parallel_for(fu_threads(a), a->in[i].nelem, FU_GRAIN, widen_task, &w);
        *(i ? &c->b : &c->a) = ws;
        ws += a->in[i].nelem;
    }
    c->yc = ws;
    c->narrow = true;
    return GF_OK;
}

/* Rows [r0, r1) of yc = beta Bias, on one thread of the pool. */
struct fill_job {
    const struct mme *c;
    enum gf_dtype dt;
};

static void fill_task(void *vj, size_t r0, size_t r1)
{
    const struct fill_job *j = vj;
    mme_fills[j->dt](j->c, r0, r1, 0, (size_t)j->c->n);
}

/* A product with no activation or Res after it (GPT-2's tied LM head,
 * MatMul(x, Transpose(W)) fused; a projection's bias) past
 * GF_CPU_SGEMM_MAX_M rows, with B not packed by the plan: beta Bias written
 * into Y first (split over the pool), then one BLAS call on BLAS's threads
 * adding the product to it (BLAS beta = 1), as the unfused MatMul and Add
 * make it, instead of tiles that each pack their block of B again
 * (1.05-1.14x the unfused Transpose + MatMul at 4 x 512 that way:
 * tests/bench_fused_models). */
static bool mme_whole(const struct mme *c, enum gf_dtype dt, int nt)
{
    if (c->res || c->act != MACT_NONE || c->narrow || c->packed || c->brank || c->count != 1 ||
        c->k <= 0 || c->m <= GF_CPU_SGEMM_MAX_M ||
        (double)c->m * (double)c->n * (double)c->k < 256.0 * 256 * 256)
        return false;
    if (c->bias) {
        struct fill_job j = {c, dt};
        gf_parallel_for(nt, (size_t)c->m, (size_t)(FU_GRAIN / c->n + 1), fill_task, &j);
    }
    enum CBLAS_TRANSPOSE ta = c->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = c->tb ? CblasTrans : CblasNoTrans;
    int m = (int)c->m, n = (int)c->n, k = (int)c->k, lda = (int)c->lda, ldb = (int)c->ldb;
    double beta = c->bias ? 1.0 : 0.0;
    blas_threads(gf_parallel_width(nt));
    if (c->ct == GF_DOUBLE)
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, c->alpha, c->a, lda, c->b, ldb, beta, c->yc,
                    n);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)c->alpha, c->a, lda, c->b, ldb,
                    (float)beta, c->yc, n);
    return true;
}

static enum gf_status mme_run(const struct gf_kernel_args *a)
{
    struct mme c = {0};
    enum gf_status st = mme_check(a, &c);
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    if ((st = mme_operands(a, &c)) != GF_OK)
        return st;
    /* B shared by every batch and A neither broadcast nor transposed: the
     * batches of A are consecutive rows, one GEMM of count * M rows. */
    bool b_shared = true;
    int64_t a_batches = 1;
    for (int i = 0; i < c.brank; i++) {
        b_shared = b_shared && c.sb[i] == 0;
        a_batches *= c.sa[i] ? c.bdims[i] : 1;
    }
    if (c.brank && b_shared && a_batches == c.count && !c.ta) {
        c.m *= c.count;
        c.count = 1;
        c.brank = 0;
    }
    if (a->prepared && c.ct == GF_FLOAT && a->in[0].dtype == GF_FLOAT)
        c.packed = a->prepared;
    if (mme_whole(&c, a->in[0].dtype, fu_threads(a)))
        return GF_OK;
    mme_compute(&c, a->in[0].dtype, fu_threads(a));
    return GF_OK;
}

/* A fixed fp32 2-D B (a weight of an inference plan; B^T with transB: a
 * tied LM head) packed into gf_cpu_sgemm's panels once a plan, when every
 * tile goes to it (A not transposed, alpha 1, at most
 * GF_CPU_SGEMM_PACKED_MAX_M rows in all).  Tiles whose first column is not
 * a panel's (MAX_COLS blocks are multiples of 16 columns) read B as it
 * lies (gf_cpu_sgemm, or OpenBLAS above GF_CPU_SGEMM_MAX_M rows). */
static bool mme_pack_geometry(const struct gf_kernel_args *a, struct mme *c)
{
    if (a->n_in < 2 || !(a->fixed_in & 2) || a->in[0].dtype != GF_FLOAT ||
        a->in[1].dtype != GF_FLOAT || a->in[1].rank != 2 || mme_check(a, c) != GF_OK)
        return false;
    return !c->ta && c->alpha == 1 && c->m * c->count <= GF_CPU_SGEMM_PACKED_MAX_M;
}

static size_t mme_prepared_size(const struct gf_kernel_args *a)
{
    struct mme c = {0};
    return mme_pack_geometry(a, &c) ? gf_cpu_sgemm_pack_size(c.k, c.n) : 0;
}

static void mme_prepare(const struct gf_kernel_args *a, void *prepared)
{
    struct mme c = {0};
    if (mme_pack_geometry(a, &c))
        gf_cpu_sgemm_pack(fu_threads(a), c.k, c.n, a->in[1].data, c.ldb, c.tb, prepared);
}

static bool mme_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 2 && fu_is_float(in[0].dtype) && in[0].rank <= GF_MAX_RANK &&
           in[1].rank <= GF_MAX_RANK;
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_MATMUL_EPILOGUE, .backend = "cpu", .dtype = GF_UNDEFINED,
     .impl = "openblas-tiled", .supports = mme_supports, .workspace = mme_workspace,
     .run = mme_run, .prepared_size = mme_prepared_size, .prepare = mme_prepare},
};

const struct gf_kernel_table gf_cpu_fused_matmul_table = {kernels,
                                                          sizeof(kernels) / sizeof(kernels[0])};
