/* CPU kernels: MatMul, Gemm and Einsum.
 *
 * Every product ends in one primitive, a strided 2-D GEMM (struct gemm):
 * fp32 and double go to OpenBLAS (cblas_sgemm / cblas_dgemm), the integer
 * types to a plain dot-product loop whose accumulator is uint64_t (wrapping,
 * so signed overflow never happens; the low bits are the two's-complement
 * result).  fp16 and bf16 are widened into an fp32 workspace, computed as
 * fp32 and narrowed back.  A batch (MatMul's broadcast batch dims, Einsum's
 * batch labels) is one GEMM repeated at strided offsets (struct gemm_batch).
 * Einsum forms that are not a batched GEMM (diagonals, traces, sums, three
 * or more operands) run a general loop over output and contracted indices.
 */
#include <cblas.h>
#include <limits.h>

#include "cpu.h"

#define MM_MAX_IN 16                   /* Einsum operands we accept */
#define EIN_LABELS (52 + GF_MAX_RANK)  /* A-Z, a-z, then ellipsis axes */

static int imax(int a, int b)
{
    return a > b ? a : b;
}

/* Checks that the executor's output shape is the one we compute. */
static enum gf_status check_out(const struct gf_kernel_args *a, int rank, const int64_t *dims)
{
    const struct gf_tview *y = &a->out[0];
    bool same = y->rank == rank;
    for (int i = 0; same && i < rank; i++)
        same = y->dims[i] == dims[i];
    if (!same)
        return gf_kernel_error(a, GF_ERR_INVALID, "output has shape %s, expected %s", FU_SHAPE(y),
                               FU_DIMS(rank, dims));
    return GF_OK;
}

/* ---- the GEMM primitive ------------------------------------------------ */

struct gemm {
    enum gf_dtype dtype;
    int64_t m, n, k;
    const void *a; /* A[i,p] = a[i*a_rs + p*a_cs], i < m, p < k */
    const void *b; /* B[p,j] = b[p*b_rs + j*b_cs], j < n */
    void *c;       /* C[i,j] = c[i*c_rs + j] */
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs;
    double alpha;
    bool accumulate; /* C += alpha A B, else C = alpha A B */
    const float *packed; /* fp32 B packed ahead of time (gf_cpu_sgemm_pack), or NULL */
};

/* Y[m,n] (dense) = scale * X[i*rs + j*cs]: Gemm's beta * C, broadcast. */
struct fill {
    const void *src;
    void *dst;
    int64_t n, rs, cs;
    double scale;
};

/* Einsum as loops: each output element sums, over every combination of the
 * contracted labels, the product of one element of each operand. */
struct ein_plan {
    int n_ops;
    const void *in[MM_MAX_IN];
    void *out;
    int out_rank;
    int64_t out_dims[GF_MAX_RANK];
    int64_t out_st[MM_MAX_IN][GF_MAX_RANK]; /* operand stride of each output axis */
    int n_sum;
    int64_t sum_dims[EIN_LABELS];
    int64_t sum_st[MM_MAX_IN][EIN_LABELS]; /* operand stride of each summed label */
    int64_t sum_count;                     /* product of sum_dims */
};

/* Operand offsets of output element o; clears the summation counters. */
static void ein_start(const struct ein_plan *p, int64_t o, int64_t *off, int64_t *idx)
{
    for (int i = 0; i < p->n_ops; i++)
        off[i] = 0;
    for (int d = p->out_rank - 1; d >= 0; d--) {
        int64_t x = o % p->out_dims[d];
        o /= p->out_dims[d];
        for (int i = 0; i < p->n_ops; i++)
            off[i] += x * p->out_st[i][d];
    }
    for (int l = 0; l < p->n_sum; l++)
        idx[l] = 0;
}

/* Odometer step over the contracted labels, moving the operand offsets. */
static void ein_next(const struct ein_plan *p, int64_t *idx, int64_t *off)
{
    for (int l = p->n_sum - 1; l >= 0; l--) {
        for (int i = 0; i < p->n_ops; i++)
            off[i] += p->sum_st[i][l];
        if (++idx[l] < p->sum_dims[l])
            return;
        for (int i = 0; i < p->n_ops; i++)
            off[i] -= p->sum_st[i][l] * p->sum_dims[l];
        idx[l] = 0;
    }
}

/* Typed loops, one set per element type: T the element, ACC the
 * accumulator (double for floats, wrapping uint64_t for integers), SCALE
 * turns alpha / beta into an ACC (integers: integral values, see
 * gemm_supports). */
#define MM_TYPE_FUNCS(name, dt, T, ACC, SCALE)                                              \
    static void name##_gemm_rows(void *ctx, size_t i0, size_t i1)                          \
    {                                                                                       \
        const struct gemm *g = ctx;                                                         \
        const T *a = g->a, *b = g->b;                                                       \
        T *c = g->c;                                                                        \
        ACC alpha = SCALE(g->alpha);                                                        \
        for (int64_t i = (int64_t)i0; i < (int64_t)i1; i++)                                 \
            for (int64_t j = 0; j < g->n; j++) {                                            \
                ACC acc = 0;                                                                \
                for (int64_t p = 0; p < g->k; p++)                                          \
                    acc += (ACC)a[i * g->a_rs + p * g->a_cs] * (ACC)b[p * g->b_rs + j * g->b_cs]; \
                T *y = &c[i * g->c_rs + j];                                                 \
                *y = (T)((g->accumulate ? (ACC)*y : 0) + alpha * acc);                      \
            }                                                                               \
    }                                                                                       \
    static void name##_fill(void *ctx, size_t i0, size_t i1)                               \
    {                                                                                       \
        const struct fill *f = ctx;                                                         \
        const T *x = f->src;                                                                \
        T *y = f->dst;                                                                      \
        ACC s = SCALE(f->scale);                                                            \
        for (int64_t i = (int64_t)i0; i < (int64_t)i1; i++)                                 \
            for (int64_t j = 0; j < f->n; j++)                                              \
                y[i * f->n + j] = (T)(s * (ACC)x[i * f->rs + j * f->cs]);                   \
    }                                                                                       \
    static void name##_einsum(void *ctx, size_t o0, size_t o1)                             \
    {                                                                                       \
        const struct ein_plan *p = ctx;                                                     \
        int64_t off[MM_MAX_IN], idx[EIN_LABELS];                                            \
        for (size_t o = o0; o < o1; o++) {                                                  \
            ein_start(p, (int64_t)o, off, idx);                                             \
            ACC acc = 0;                                                                    \
            for (int64_t s = 0; s < p->sum_count; s++) {                                    \
                ACC prod = 1;                                                               \
                for (int i = 0; i < p->n_ops; i++)                                          \
                    prod *= (ACC)((const T *)p->in[i])[off[i]];                             \
                acc += prod;                                                                \
                ein_next(p, idx, off);                                                      \
            }                                                                               \
            ((T *)p->out)[o] = (T)acc;                                                      \
        }                                                                                   \
    }

#define FLOAT_SCALE(x) (x)
#define INT_SCALE(x) ((uint64_t)(int64_t)(x))

#define MM_TYPES(X)                                       \
    X(f32, GF_FLOAT, float, double, FLOAT_SCALE)          \
    X(f64, GF_DOUBLE, double, double, FLOAT_SCALE)        \
    X(i8, GF_INT8, int8_t, uint64_t, INT_SCALE)           \
    X(u8, GF_UINT8, uint8_t, uint64_t, INT_SCALE)         \
    X(i16, GF_INT16, int16_t, uint64_t, INT_SCALE)        \
    X(u16, GF_UINT16, uint16_t, uint64_t, INT_SCALE)      \
    X(i32, GF_INT32, int32_t, uint64_t, INT_SCALE)        \
    X(u32, GF_UINT32, uint32_t, uint64_t, INT_SCALE)      \
    X(i64, GF_INT64, int64_t, uint64_t, INT_SCALE)        \
    X(u64, GF_UINT64, uint64_t, uint64_t, INT_SCALE)

MM_TYPES(MM_TYPE_FUNCS)

struct mm_type {
    enum gf_dtype dtype;
    void (*gemm_rows)(void *gemm, size_t i0, size_t i1); /* rows [i0,i1) of C */
    void (*fill)(void *fill, size_t i0, size_t i1);      /* rows [i0,i1) of Y */
    void (*einsum)(void *plan, size_t o0, size_t o1);    /* output elements */
};

#define MM_TYPE_ENTRY(name, dt, T, ACC, SCALE) {dt, name##_gemm_rows, name##_fill, name##_einsum},
static const struct mm_type mm_types[] = {MM_TYPES(MM_TYPE_ENTRY)};

static const struct mm_type *mm_type_of(enum gf_dtype dt)
{
    for (size_t i = 0; i < sizeof(mm_types) / sizeof(mm_types[0]); i++)
        if (mm_types[i].dtype == dt)
            return &mm_types[i];
    return NULL;
}

static bool is_half(enum gf_dtype dt)
{
    return dt == GF_FLOAT16 || dt == GF_BFLOAT16;
}

/* m * n * k from which one product runs on OpenBLAS's threads */
#define MM_BLAS_MT_WORK (256.0 * 256 * 256)
/* m * n * k from which a product is split over gf_parallel_for */
#define MM_SPLIT_WORK (64.0 * 64 * 64)

static void blas_threads(int n)
{
#ifdef OPENBLAS_VERSION
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

/* How BLAS sees a rows x cols operand with element strides (rs, cs):
 * row-major, maybe transposed, leading dimension *ld.  False when neither
 * stride is 1 or the leading dimension does not fit BLAS's int. */
static bool blas_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                      int *ld)
{
    if (cols <= 1 || cs == 1) {
        int64_t l = rows <= 1 ? cols : rs;
        if (l >= cols && l >= 1 && l <= INT_MAX) {
            *trans = false;
            *ld = (int)l;
            return true;
        }
    }
    if (rows <= 1 || rs == 1) {
        int64_t l = cols <= 1 ? rows : cs;
        if (l >= rows && l >= 1 && l <= INT_MAX) {
            *trans = true;
            *ld = (int)l;
            return true;
        }
    }
    return false;
}

/* One BLAS call when the layout allows it. */
static bool gemm_blas(const struct gemm *g)
{
    bool ta, tb, tc;
    int lda, ldb, ldc;
    if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX ||
        !blas_view(g->m, g->k, g->a_rs, g->a_cs, &ta, &lda) ||
        !blas_view(g->k, g->n, g->b_rs, g->b_cs, &tb, &ldb) ||
        !blas_view(g->m, g->n, g->c_rs, 1, &tc, &ldc) || tc)
        return false;
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    double beta = g->accumulate ? 1 : 0;
    if (g->dtype == GF_FLOAT)
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)g->alpha, g->a, lda, g->b, ldb,
                    (float)beta, g->c, ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, g->alpha, g->a, lda, g->b, ldb, beta,
                    g->c, ldc);
    return true;
}

/* BLAS can take g as it is laid out. */
static bool gemm_blas_able(const struct gemm *g)
{
    bool ta, tb, tc;
    int lda, ldb, ldc;
    return g->m <= INT_MAX && g->n <= INT_MAX && g->k <= INT_MAX &&
           blas_view(g->m, g->k, g->a_rs, g->a_cs, &ta, &lda) &&
           blas_view(g->k, g->n, g->b_rs, g->b_cs, &tb, &ldb) &&
           blas_view(g->m, g->n, g->c_rs, 1, &tc, &ldc) && !tc;
}

/* Rows [r0, r1) of C, one single-threaded BLAS call: every element sums
 * over all of k in one call, as the whole product's call would. */
static void blas_rows(void *ctx, size_t r0, size_t r1)
{
    const struct gemm *g = ctx;
    size_t es = gf_dtype_size(g->dtype);
    struct gemm s = *g;
    s.m = (int64_t)(r1 - r0);
    s.a = (const char *)g->a + (int64_t)r0 * g->a_rs * (int64_t)es;
    s.c = (char *)g->c + (int64_t)r0 * g->c_rs * (int64_t)es;
    if (!gemm_blas(&s))
        mm_type_of(g->dtype)->gemm_rows((void *)g, r0, r1);
}

/* C = alpha A B (+ C); OpenBLAS threads already set by the caller.  A
 * mid-size product (from MM_SPLIT_WORK to MM_BLAS_MT_WORK) on several
 * threads is split by rows over gf_parallel_for, each block one
 * single-threaded BLAS call, rather than woken OpenBLAS threads. */
static void gemm_run(const struct gemm *g, int n_threads)
{
    if (g->m <= 0 || g->n <= 0)
        return;
    if (g->k <= 0) { /* empty sum: zeros (accumulating adds nothing) */
        size_t es = gf_dtype_size(g->dtype);
        for (int64_t i = 0; !g->accumulate && i < g->m; i++)
            memset((char *)g->c + (size_t)(i * g->c_rs) * es, 0, (size_t)g->n * es);
        return;
    }
    /* fp32 at up to GF_CPU_SGEMM_MAX_M rows, rows of A and of B or B^T
     * contiguous: kernels/cpu/sgemm.c, on the pool (B packed when the plan
     * packed it: mm_prepare) */
    if (g->dtype == GF_FLOAT && g->alpha == 1 && g->a_cs == 1 &&
        ((g->packed && gf_cpu_sgemm_packed(n_threads, g->m, g->n, g->k, g->a, g->a_rs, g->packed,
                                           0, g->c, g->c_rs, g->accumulate)) ||
         (g->b_cs == 1 && gf_cpu_sgemm(n_threads, g->m, g->n, g->k, g->a, g->a_rs, g->b, g->b_rs,
                                       false, g->c, g->c_rs, g->accumulate)) ||
         (g->b_rs == 1 && g->b_cs != 1 &&
          gf_cpu_sgemm(n_threads, g->m, g->n, g->k, g->a, g->a_rs, g->b, g->b_cs, true, g->c,
                       g->c_rs, g->accumulate))))
        return;
    if (g->dtype == GF_FLOAT || g->dtype == GF_DOUBLE) {
        double work = (double)g->m * (double)g->n * (double)g->k;
        if (n_threads > 1 && g->m >= 4 && work >= MM_SPLIT_WORK && work < MM_BLAS_MT_WORK &&
            gemm_blas_able(g)) {
            double per_row = (double)g->n * (double)g->k;
            size_t rows = (size_t)(MM_SPLIT_WORK / 2 / per_row) + 1;
            gf_parallel_for(n_threads, (size_t)g->m, rows < 2 ? 2 : rows, blas_rows, (void *)g);
            return;
        }
        if (gemm_blas(g))
            return;
    }
    int64_t row = g->n * g->k;
    size_t grain = row >= 16384 ? 1 : (size_t)(16384 / row);
    gf_parallel_for(n_threads, (size_t)g->m, grain, mm_type_of(g->dtype)->gemm_rows, (void *)g);
}

/* The same GEMM at every index of a batch: batch b's operands lie at
 * element offsets sum_d idx_d * s*[d] from g's, idx the row-major index of
 * b over dims.  rank 0 is a single GEMM. */
struct gemm_batch {
    struct gemm g;
    int rank;
    int64_t dims[GF_MAX_RANK], sa[GF_MAX_RANK], sb[GF_MAX_RANK], sc[GF_MAX_RANK];
    int64_t count;
    int n_threads; /* threads each GEMM may use */
};

static void batch_fn(void *ctx, size_t b0, size_t b1)
{
    const struct gemm_batch *gb = ctx;
    size_t es = gf_dtype_size(gb->g.dtype);
    for (size_t b = b0; b < b1; b++) {
        struct gemm g = gb->g;
        int64_t oa = 0, ob = 0, oc = 0, i = (int64_t)b;
        for (int d = gb->rank - 1; d >= 0; d--) {
            int64_t x = i % gb->dims[d];
            i /= gb->dims[d];
            oa += x * gb->sa[d];
            ob += x * gb->sb[d];
            oc += x * gb->sc[d];
        }
        g.a = (const char *)g.a + oa * (int64_t)es;
        g.b = (const char *)g.b + ob * (int64_t)es;
        g.c = (char *)g.c + oc * (int64_t)es;
        gemm_run(&g, gb->n_threads);
    }
}

/* Many small products run one per thread with single-threaded BLAS, and
 * so do a few per thread that kernels/cpu/sgemm.c takes (fp32 attention's
 * per-head products: each thread its own heads, no wake-up per head); large
 * ones run in order, each with every thread inside BLAS. */
static void run_batches(struct gemm_batch *gb, int n_threads)
{
    const struct gemm *g = &gb->g;
    double work = (double)g->m * (double)g->n * (double)g->k;
    n_threads = n_threads < 1 ? 1 : n_threads;
    bool own = g->dtype == GF_FLOAT && g->alpha == 1 && g->a_cs == 1 && !g->packed &&
               (g->b_cs == 1 || g->b_rs == 1) && gf_cpu_sgemm_takes(g->m, g->n, g->k);
    if (n_threads > 1 && gb->count > 1 &&
        (work < 128.0 * 128 * 128 ||
         (own && gb->count >= 2 * (int64_t)gf_parallel_width(n_threads)))) {
        gb->n_threads = 1;
        blas_threads(1);
        size_t grain = work >= 65536 ? 1 : (size_t)(65536 / (work + 1));
        gf_parallel_for(n_threads, (size_t)gb->count, grain, batch_fn, gb);
    } else {
        /* OpenBLAS's threads only for products that pay for them: after a
         * call they spin (sched_yield) for a long while, taking the cores
         * from gf_parallel_for's workers and from other processes */
        gb->n_threads = n_threads;
        blas_threads(work >= MM_BLAS_MT_WORK ? gf_parallel_width(n_threads) : 1);
        batch_fn(gb, 0, (size_t)gb->count);
    }
}

/* ---- fp16 / bf16: widen to fp32, compute, narrow ------------------------- */

struct conv {
    const void *src;
    void *dst;
    enum gf_dtype dtype; /* the 16-bit type */
};

static void widen_fn(void *ctx, size_t i0, size_t i1)
{
    const struct conv *c = ctx;
    const uint16_t *s = c->src;
    float *d = c->dst;
    for (size_t i = i0; i < i1; i++)
        d[i] = c->dtype == GF_FLOAT16 ? gf_half_to_float(s[i]) : gf_bf16_to_float(s[i]);
}

static void narrow_fn(void *ctx, size_t i0, size_t i1)
{
    const struct conv *c = ctx;
    const float *s = c->src;
    uint16_t *d = c->dst;
    for (size_t i = i0; i < i1; i++)
        d[i] = c->dtype == GF_FLOAT16 ? gf_float_to_half(s[i]) : gf_float_to_bf16(s[i]);
}

static size_t mm_workspace(const struct gf_kernel_args *a)
{
    if (!a->n_in || !is_half(a->in[0].dtype))
        return 0;
    /* the executor asks with data-less views: an input is present when it
     * has a type (omitted inputs are zeroed views) */
    size_t n = a->out[0].nelem;
    for (size_t i = 0; i < a->n_in; i++)
        n += a->in[i].dtype != GF_UNDEFINED ? a->in[i].nelem : 0;
    return n * sizeof(float);
}

typedef enum gf_status (*mm_core)(const struct gf_kernel_args *a);

/* Checks the element types, then runs `core` directly or, for fp16/bf16,
 * on fp32 copies in the workspace:
 *   ws = [in0 as fp32][in1 as fp32]...[out as fp32] */
static enum gf_status run_typed(const struct gf_kernel_args *a, mm_core core)
{
    enum gf_dtype dt = a->in[0].dtype;
    if (a->n_in > MM_MAX_IN)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%zu inputs; at most %d are supported",
                               a->n_in, MM_MAX_IN);
    for (size_t i = 0; i < a->n_in; i++)
        if (a->in[i].data && a->in[i].dtype != dt)
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is %s but input 0 is %s", i,
                                   gf_dtype_name(a->in[i].dtype), gf_dtype_name(dt));
    if (a->out[0].dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "output is %s but the inputs are %s",
                               gf_dtype_name(a->out[0].dtype), gf_dtype_name(dt));
    if (!is_half(dt))
        return core(a);
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the fp32 copies");
    struct gf_tview in[MM_MAX_IN], out = a->out[0];
    float *ws = a->workspace;
    int nt = a->n_threads;
    for (size_t i = 0; i < a->n_in; i++) {
        in[i] = a->in[i];
        if (!in[i].data)
            continue;
        struct conv c = {in[i].data, ws, dt};
        gf_parallel_for(nt, in[i].nelem, 16384, widen_fn, &c);
        in[i].dtype = GF_FLOAT;
        in[i].data = ws;
        ws += in[i].nelem;
    }
    out.dtype = GF_FLOAT;
    out.data = ws;
    struct gf_kernel_args b = *a;
    b.in = in;
    b.out = &out;
    b.n_out = 1;
    b.prepared = NULL; /* (none is made for 16-bit B) */
    enum gf_status st = core(&b);
    if (st == GF_OK) {
        struct conv c = {out.data, a->out[0].data, dt};
        gf_parallel_for(nt, out.nelem, 16384, narrow_fn, &c);
    }
    return st;
}

static bool mm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && n_in <= MM_MAX_IN && (is_half(in[0].dtype) || mm_type_of(in[0].dtype));
}

/* ---- MatMul ------------------------------------------------------------------
 * A [..., M, K] x B [..., K, N] -> Y [..., M, N], batch dims broadcast; a 1-D
 * A is [1, K] and a 1-D B is [K, 1], the added axis dropped from Y. */

static int64_t product(int rank, const int64_t *dims)
{
    int64_t p = 1;
    for (int i = 0; i < rank; i++)
        p *= dims[i];
    return p;
}

/* Broadcast batch dims of A (ra of them) and B (rb) into gb, with element
 * strides (0 where an input's dim is 1); Y's expected batch dims in dims. */
static void matmul_batch(const struct gf_kernel_args *a, int ra, int rb,
                         struct gemm_batch *gb)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    const struct gemm *g = &gb->g;
    int r = imax(ra, rb);
    int64_t sa = g->m * g->k, sb = g->k * g->n, sc = g->m * g->n;
    for (int i = r - 1; i >= 0; i--) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        gb->dims[i] = da == 1 ? db : da;
        gb->sa[i] = da == 1 ? 0 : sa;
        gb->sb[i] = db == 1 ? 0 : sb;
        gb->sc[i] = sc;
        sa *= da;
        sb *= db;
        sc *= gb->dims[i];
    }
    gb->rank = r;
    gb->count = product(r, gb->dims);
}

static enum gf_status matmul_core(const struct gf_kernel_args *a)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    struct gf_mm m; /* the rule (graph/opcheck.c): ranks, K, batch dims */
    enum gf_status st = gf_mm_plan(a, false, false, &m);
    if (st != GF_OK)
        return st;
    int64_t k = m.k;
    struct gemm_batch gb = {.g = {
        .dtype = A->dtype,
        .m = A->rank > 1 ? A->dims[A->rank - 2] : 1,
        .n = B->rank > 1 ? B->dims[B->rank - 1] : 1,
        .k = k,
        .a = A->data, .b = B->data, .c = a->out[0].data,
        .alpha = 1,
    }};
    struct gemm *g = &gb.g;
    g->a_rs = k, g->a_cs = 1, g->b_rs = g->n, g->b_cs = 1, g->c_rs = g->n;
    int ra = imax(A->rank - 2, 0), rb = imax(B->rank - 2, 0);
    matmul_batch(a, ra, rb, &gb);
    int64_t want[GF_MAX_RANK + 2];
    int rank = gb.rank;
    memcpy(want, gb.dims, sizeof(int64_t) * (size_t)rank);
    if (A->rank > 1)
        want[rank++] = g->m;
    if (B->rank > 1)
        want[rank++] = g->n;
    if ((st = check_out(a, rank, want)) != GF_OK)
        return st;
    /* B shared by every batch and A not broadcast: A's batches are
     * consecutive rows, so Y = A' [batch*M, K] B is one big GEMM. */
    bool b_shared = true;
    for (int i = 0; i < gb.rank; i++)
        b_shared = b_shared && gb.sb[i] == 0;
    if (gb.rank && b_shared && product(ra, A->dims) == gb.count) {
        g->m *= gb.count;
        gb.rank = 0;
        gb.count = 1;
    }
    if (a->prepared && gb.count == 1 && A->dtype == GF_FLOAT)
        g->packed = a->prepared;
    run_batches(&gb, a->n_threads);
    return GF_OK;
}

static enum gf_status matmul_run(const struct gf_kernel_args *a)
{
    if (a->n_in < 2 || !a->in[0].data || !a->in[1].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs two inputs A and B");
    return run_typed(a, matmul_core);
}

/* ---- Gemm ----------------------------------------------------------------------
 * Y [M, N] = alpha * A' B' + beta * C, A' = transA ? A^T : A ([M, K]),
 * B' = transB ? B^T : B ([K, N]); C optional (opset 11) and broadcast to
 * [M, N] (before opset 7 only when the attribute broadcast = 1). */

static void gemm_bias(const struct gf_kernel_args *a, const struct gf_tview *C,
                      const struct gemm *g, double beta)
{
    int64_t cm = C->rank == 2 ? C->dims[0] : 1, cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    struct fill f = {.src = C->data, .dst = g->c, .n = g->n, .rs = cm == 1 ? 0 : cn,
                     .cs = cn == 1 ? 0 : 1, .scale = beta};
    size_t grain = g->n >= 16384 ? 1 : (size_t)(16384 / (g->n + 1));
    gf_parallel_for(a->n_threads, (size_t)g->m, grain, mm_type_of(g->dtype)->fill, &f);
}

static enum gf_status gemm_core(const struct gf_kernel_args *a)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    const struct gf_tview *C = a->n_in > 2 && a->in[2].data ? &a->in[2] : NULL;
    struct gf_gemm_rule r;
    struct gf_mm m;
    enum gf_status st = gf_gemm_check(a, &r, &m);
    if (st != GF_OK)
        return st;
    bool ta = r.ta, tb = r.tb;
    struct gemm g = {
        .dtype = A->dtype, .m = m.m, .k = m.k, .n = m.n,
        .a = A->data, .b = B->data, .c = a->out[0].data, .alpha = r.alpha,
    };
    /* A is stored [M,K] or, transposed, [K,M]; B [K,N] or [N,K] */
    g.a_rs = ta ? 1 : g.k, g.a_cs = ta ? g.m : 1;
    g.b_rs = tb ? 1 : g.n, g.b_cs = tb ? g.k : 1;
    g.c_rs = g.n;
    if ((st = check_out(a, 2, (int64_t[]){g.m, g.n})) != GF_OK)
        return st;
    if (C)
        gemm_bias(a, C, &g, r.beta);
    g.accumulate = C != NULL;
    if (a->prepared && A->dtype == GF_FLOAT)
        g.packed = a->prepared;
    struct gemm_batch gb = {.g = g, .count = 1};
    run_batches(&gb, a->n_threads);
    return GF_OK;
}

static enum gf_status gemm_op_run(const struct gf_kernel_args *a)
{
    if (a->n_in < 2 || !a->in[0].data || !a->in[1].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs inputs A and B");
    return run_typed(a, gemm_core);
}

/* Integer Gemm scales by alpha and beta in integer arithmetic: refuse
 * scales that are not integers. */
static bool gemm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (!mm_supports(n, in, n_in))
        return false;
    if (in[0].dtype == GF_FLOAT || in[0].dtype == GF_DOUBLE || is_half(in[0].dtype))
        return true;
    double s[2] = {gf_node_attr_float(n, "alpha", 1.0f), gf_node_attr_float(n, "beta", 1.0f)};
    for (int i = 0; i < 2; i++)
        if (s[i] != floor(s[i]) || fabs(s[i]) > 9007199254740992.0)
            return false;
    return true;
}

/* ---- B packed once a plan ---------------------------------------------------
 * A fixed fp32 B (a weight of an inference plan) of a product that
 * gf_cpu_sgemm_packed takes (at most GF_CPU_SGEMM_PACKED_MAX_M rows of A,
 * alpha 1, A not transposed) is packed into its panels when the plan is
 * made, rather than copied into them on every call (kernels/cpu/sgemm.c;
 * above GF_CPU_SGEMM_MAX_M rows only the packed product is taken).  MatMul: a 2-D B
 * (every batch of A shares it: one product of all their rows); Gemm: B or,
 * with transB, B^T.  k x n of B, trans_b: stored as B^T. */
struct mm_pack {
    int64_t k, n;
    bool trans_b;
};

static bool mm_pack_geometry(const struct gf_kernel_args *a, struct mm_pack *p)
{
    const struct gf_tview *A = &a->in[0], *B = &a->in[1];
    if (a->n_in < 2 || !(a->fixed_in & 2) || A->dtype != GF_FLOAT || B->dtype != GF_FLOAT ||
        B->rank != 2 || A->rank < 1)
        return false;
    if (a->node->op == GF_OP_GEMM) {
        struct gf_gemm_rule r;
        struct gf_mm m;
        if (A->rank != 2 || gf_gemm_check(a, &r, &m) != GF_OK || r.ta || r.alpha != 1 ||
            m.m > GF_CPU_SGEMM_PACKED_MAX_M)
            return false;
        *p = (struct mm_pack){m.k, m.n, r.tb};
        return true;
    }
    int64_t k = A->dims[A->rank - 1];
    if (B->dims[0] != k || k <= 0 || (int64_t)A->nelem / k > GF_CPU_SGEMM_PACKED_MAX_M)
        return false;
    *p = (struct mm_pack){k, B->dims[1], false};
    return true;
}

static size_t mm_prepared_size(const struct gf_kernel_args *a)
{
    struct mm_pack p;
    return mm_pack_geometry(a, &p) ? gf_cpu_sgemm_pack_size(p.k, p.n) : 0;
}

static void mm_prepare(const struct gf_kernel_args *a, void *prepared)
{
    struct mm_pack p;
    if (mm_pack_geometry(a, &p))
        gf_cpu_sgemm_pack(a->n_threads, p.k, p.n, a->in[1].data, p.trans_b ? p.k : p.n,
                          p.trans_b, prepared);
}

/* ---- Einsum ------------------------------------------------------------------
 * "bij,bjk->bik": one term of labels per input, '...' for broadcast leading
 * axes, an optional "->" output term (without it, the output is '...' then
 * the labels used once, in ASCII order).  Labels are numbered A-Z 0-25,
 * a-z 26-51 and the ellipsis axes 52.. (right-aligned across inputs). */

#define EIN_ELL 127 /* '...' in a parsed term, before expansion */

struct ein_term {
    int n;
    uint8_t lab[GF_MAX_RANK + 1];
};

struct ein {
    int n_ops;
    struct ein_term t[MM_MAX_IN + 1]; /* the inputs, then the output */
    bool explicit_out;
    int64_t size[EIN_LABELS];                /* -1: label unused */
    int64_t st[MM_MAX_IN + 1][EIN_LABELS];   /* element stride (repeats add up) */
    int cnt[MM_MAX_IN + 1][EIN_LABELS];      /* occurrences in each term */
};

static enum gf_status ein_bad(const struct gf_kernel_args *a, const struct gf_bytes *eq,
                              const char *why)
{
    return gf_kernel_error(a, GF_ERR_INVALID, "equation '%.*s': %s", (int)eq->len,
                           eq->data ? (const char *)eq->data : "", why);
}

/* Parses one term at *p (up to ',', '-' or the end). */
static enum gf_status ein_term(const struct gf_kernel_args *a, const struct gf_bytes *eq,
                               size_t *p, struct ein_term *t)
{
    const char *s = (const char *)eq->data;
    bool ell = false;
    for (t->n = 0; *p < eq->len && s[*p] != ',' && s[*p] != '-'; (*p)++) {
        char c = s[*p];
        if (c == ' ')
            continue;
        if (t->n == GF_MAX_RANK + 1)
            return ein_bad(a, eq, "a term has more labels than the largest rank");
        if (c == '.') {
            if (ell || *p + 2 >= eq->len || s[*p + 1] != '.' || s[*p + 2] != '.')
                return ein_bad(a, eq, "'.' not part of a single '...' in a term");
            ell = true;
            *p += 2;
            t->lab[t->n++] = EIN_ELL;
        } else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
            t->lab[t->n++] = (uint8_t)(c <= 'Z' ? c - 'A' : 26 + c - 'a');
        } else {
            return ein_bad(a, eq, "a character that is not a letter, '...', ',' or '->'");
        }
    }
    return GF_OK;
}

static enum gf_status ein_parse(const struct gf_kernel_args *a, const struct gf_bytes *eq,
                                struct ein *e)
{
    const char *s = (const char *)eq->data;
    size_t p = 0;
    enum gf_status st;
    for (e->n_ops = 0;; p++) {
        if (e->n_ops == MM_MAX_IN)
            return ein_bad(a, eq, "more than 16 operands");
        if ((st = ein_term(a, eq, &p, &e->t[e->n_ops++])) != GF_OK)
            return st;
        if (p == eq->len || s[p] != ',')
            break;
    }
    e->explicit_out = p < eq->len;
    if (e->explicit_out) {
        if (p + 1 >= eq->len || s[p + 1] != '>')
            return ein_bad(a, eq, "'-' not followed by '>'");
        p += 2;
        if ((st = ein_term(a, eq, &p, &e->t[e->n_ops])) != GF_OK)
            return st;
        if (p < eq->len)
            return ein_bad(a, eq, "text after the output term");
    }
    if ((size_t)e->n_ops != a->n_in)
        return gf_kernel_error(a, GF_ERR_INVALID, "equation '%.*s' has %d input terms but the "
                               "node has %zu inputs", (int)eq->len, s ? s : "", e->n_ops, a->n_in);
    return GF_OK;
}

/* Replaces '...' in term t by the labels of the last n_ell of the ne
 * ellipsis axes (broadcasting aligns them on the right). */
static void ein_expand(struct ein_term *t, int n_ell, int ne)
{
    uint8_t out[GF_MAX_RANK + 1];
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->lab[i] != EIN_ELL)
            out[n++] = t->lab[i];
        else
            for (int j = ne - n_ell; j < ne; j++)
                out[n++] = (uint8_t)(52 + j);
    }
    memcpy(t->lab, out, (size_t)n);
    t->n = n;
}

static bool has_ell(const struct ein_term *t)
{
    return memchr(t->lab, EIN_ELL, (size_t)t->n) != NULL;
}

/* Expands ellipses, builds the implicit output, checks ranks. */
static enum gf_status ein_labels(const struct gf_kernel_args *a, struct ein *e)
{
    int n_ell[MM_MAX_IN], ne = 0;
    for (int i = 0; i < e->n_ops; i++) {
        int rank = a->in[i].rank, letters = e->t[i].n - has_ell(&e->t[i]);
        n_ell[i] = rank - letters;
        if (n_ell[i] < 0 || (!has_ell(&e->t[i]) && n_ell[i] != 0))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %d has rank %d but its term "
                                   "names %d axes", i, rank, letters);
        ne = imax(ne, n_ell[i]);
    }
    for (int i = 0; i < e->n_ops; i++)
        ein_expand(&e->t[i], n_ell[i], ne);
    struct ein_term *o = &e->t[e->n_ops];
    if (e->explicit_out) {
        if (ne > 0 && !has_ell(o))
            return gf_kernel_error(a, GF_ERR_INVALID, "inputs have %d '...' axes but the "
                                   "output term has no '...'", ne);
        if (o->n - has_ell(o) + (has_ell(o) ? ne : 0) > GF_MAX_RANK)
            return gf_kernel_error(a, GF_ERR_INVALID, "output term has more than %d axes",
                                   GF_MAX_RANK);
        ein_expand(o, ne, ne);
        return GF_OK;
    }
    int count[EIN_LABELS] = {0};
    for (int i = 0; i < e->n_ops; i++)
        for (int j = 0; j < e->t[i].n; j++)
            count[e->t[i].lab[j]]++;
    o->n = 0;
    for (int l = 52; l < 52 + ne; l++) /* ellipsis axes first, then A-Z, a-z */
        o->lab[o->n++] = (uint8_t)l;
    for (int l = 0; l < 52; l++) {
        if (count[l] != 1)
            continue;
        if (o->n == GF_MAX_RANK)
            return gf_kernel_error(a, GF_ERR_INVALID, "implicit output has more than %d axes",
                                   GF_MAX_RANK);
        o->lab[o->n++] = (uint8_t)l;
    }
    return GF_OK;
}
static char label_char(int l)
{
    return (char)(l < 26 ? 'A' + l : l < 52 ? 'a' + l - 26 : '.');
}

/* Sizes of the labels (a size-1 axis broadcasts against any size) and the
 * element strides of each label in each operand and in the output. */
static enum gf_status ein_sizes(const struct gf_kernel_args *a, struct ein *e)
{
    for (int l = 0; l < EIN_LABELS; l++)
        e->size[l] = -1;
    memset(e->st, 0, sizeof(e->st));
    memset(e->cnt, 0, sizeof(e->cnt));
    for (int i = 0; i < e->n_ops; i++) {
        const struct gf_tview *x = &a->in[i];
        int64_t stride = 1, seen[EIN_LABELS]; /* size in this input */
        for (int d = x->rank - 1; d >= 0; d--) {
            int l = e->t[i].lab[d];
            int64_t n = x->dims[d];
            if (e->cnt[i][l] && seen[l] != n)
                return gf_kernel_error(a, GF_ERR_INVALID, "label '%c' repeats in input %d %s "
                                       "with sizes %lld and %lld", label_char(l), i, FU_SHAPE(x),
                                       (long long)n, (long long)seen[l]);
            if (e->size[l] != -1 && e->size[l] != 1 && n != 1 && n != e->size[l])
                return gf_kernel_error(a, GF_ERR_INVALID, "label '%c' has size %lld in input "
                                       "%d %s but %lld elsewhere", label_char(l), (long long)n,
                                       i, FU_SHAPE(x), (long long)e->size[l]);
            if (e->size[l] == -1 || e->size[l] == 1)
                e->size[l] = n;
            seen[l] = n;
            e->cnt[i][l]++;
            e->st[i][l] += n == 1 ? 0 : stride;
            stride *= n;
        }
    }
    const struct ein_term *o = &e->t[e->n_ops];
    int64_t dims[GF_MAX_RANK], stride = 1;
    for (int d = o->n - 1; d >= 0; d--) {
        int l = o->lab[d];
        if (e->size[l] < 0 || e->cnt[e->n_ops][l]++)
            return gf_kernel_error(a, GF_ERR_INVALID, "output label '%c' %s", label_char(l),
                                   e->size[l] < 0 ? "appears in no input" : "is repeated");
        dims[d] = e->size[l];
        e->st[e->n_ops][l] = stride;
        stride *= dims[d];
    }
    return check_out(a, o->n, dims);
}

/* The loop form: output axes, then every label absent from the output. */
static void ein_general(const struct gf_kernel_args *a, const struct ein *e, struct ein_plan *p)
{
    const struct ein_term *o = &e->t[e->n_ops];
    p->n_ops = e->n_ops;
    p->out = a->out[0].data;
    p->out_rank = o->n;
    for (int i = 0; i < e->n_ops; i++) {
        p->in[i] = a->in[i].data;
        for (int d = 0; d < o->n; d++)
            p->out_st[i][d] = e->st[i][o->lab[d]];
    }
    for (int d = 0; d < o->n; d++)
        p->out_dims[d] = e->size[o->lab[d]];
    p->n_sum = 0;
    p->sum_count = 1;
    for (int l = 0; l < EIN_LABELS; l++) {
        if (e->size[l] < 0 || e->cnt[e->n_ops][l])
            continue;
        for (int i = 0; i < e->n_ops; i++)
            p->sum_st[i][p->n_sum] = e->st[i][l];
        p->sum_dims[p->n_sum++] = e->size[l];
        p->sum_count *= e->size[l];
    }
}

enum { EIN_BATCH, EIN_M, EIN_N, EIN_K, EIN_OTHER };

/* Role of a label in a two-operand product A B -> Y. */
static int ein_role(const struct ein *e, int l)
{
    bool in_a = e->cnt[0][l], in_b = e->cnt[1][l], in_y = e->cnt[2][l];
    if (e->cnt[0][l] > 1 || e->cnt[1][l] > 1)
        return EIN_OTHER; /* a diagonal */
    return in_a && in_b && in_y ? EIN_BATCH
           : in_a && in_y       ? EIN_M
           : in_b && in_y       ? EIN_N
           : in_a && in_b       ? EIN_K
                                : EIN_OTHER;
}

/* The labels of `role`, in the order of term `t`. */
static int ein_group(const struct ein *e, int t, int role, uint8_t *labs)
{
    int n = 0;
    for (int d = 0; d < e->t[t].n; d++)
        if (ein_role(e, e->t[t].lab[d]) == role)
            labs[n++] = e->t[t].lab[d];
    return n;
}

/* A group of labels as one axis of operand `t`: true when each label's
 * stride is the next one's times its size (size-1 labels aside). */
static bool ein_collapse(const struct ein *e, int t, const uint8_t *labs, int n, int64_t *size,
                         int64_t *stride)
{
    *size = 1;
    *stride = 0;
    for (int i = n - 1; i >= 0; i--) {
        int64_t s = e->size[labs[i]], st = e->st[t][labs[i]];
        if (s == 1)
            continue;
        if (*size == 1)
            *stride = st;
        else if (st != *stride * *size)
            return false;
        *size *= s;
    }
    return true;
}

/* Two fp32/double operands whose labels are batch, M, N and K groups that
 * each collapse to one axis: a batched GEMM (Y^T = B^T A^T when Y holds N
 * before M). */
static bool ein_gemm(const struct gf_kernel_args *a, const struct ein *e, struct gemm_batch *gb)
{
    enum gf_dtype dt = a->in[0].dtype;
    if (e->n_ops != 2 || (dt != GF_FLOAT && dt != GF_DOUBLE))
        return false;
    for (int l = 0; l < EIN_LABELS; l++)
        if (e->size[l] >= 0 && ein_role(e, l) == EIN_OTHER)
            return false;
    uint8_t bl[GF_MAX_RANK], ml[GF_MAX_RANK], nl[GF_MAX_RANK], kl[GF_MAX_RANK];
    int nb = ein_group(e, 2, EIN_BATCH, bl), nm = ein_group(e, 2, EIN_M, ml);
    int nn = ein_group(e, 2, EIN_N, nl), nk = ein_group(e, 0, EIN_K, kl);
    int64_t m, n, k, x, a_m, a_k, b_k, b_n, y_m, y_n;
    if (!ein_collapse(e, 0, ml, nm, &m, &a_m) || !ein_collapse(e, 0, kl, nk, &k, &a_k) ||
        !ein_collapse(e, 1, kl, nk, &x, &b_k) || !ein_collapse(e, 1, nl, nn, &n, &b_n) ||
        !ein_collapse(e, 2, ml, nm, &x, &y_m) || !ein_collapse(e, 2, nl, nn, &x, &y_n))
        return false;
    bool swap = !(y_n == 1 || n <= 1);
    if (swap && !(y_m == 1 || m <= 1))
        return false;
    const void *pa = a->in[0].data, *pb = a->in[1].data;
    gb->g = (struct gemm){.dtype = dt, .m = m, .n = n, .k = k, .a = pa, .b = pb,
                          .c = a->out[0].data, .a_rs = a_m, .a_cs = a_k, .b_rs = b_k,
                          .b_cs = b_n, .c_rs = y_m, .alpha = 1};
    if (swap) /* Y^T [N,M] = B^T [N,K] A^T [K,M] */
        gb->g = (struct gemm){.dtype = dt, .m = n, .n = m, .k = k, .a = pb, .b = pa,
                              .c = a->out[0].data, .a_rs = b_n, .a_cs = b_k, .b_rs = a_k,
                              .b_cs = a_m, .c_rs = y_n, .alpha = 1};
    gb->rank = nb;
    gb->count = 1;
    for (int i = 0; i < nb; i++) {
        gb->dims[i] = e->size[bl[i]];
        gb->sa[i] = e->st[swap ? 1 : 0][bl[i]];
        gb->sb[i] = e->st[swap ? 0 : 1][bl[i]];
        gb->sc[i] = e->st[2][bl[i]];
        gb->count *= gb->dims[i];
    }
    return true;
}

static enum gf_status einsum_core(const struct gf_kernel_args *a)
{
    const struct gf_attr *at = gf_node_attr(a->node, "equation");
    if (!at || at->type != GF_ATTR_STRING)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs a string attribute 'equation'");
    struct ein e;
    enum gf_status st = ein_parse(a, &at->s, &e);
    if (st == GF_OK)
        st = ein_labels(a, &e);
    if (st == GF_OK)
        st = ein_sizes(a, &e);
    if (st != GF_OK)
        return st;
    struct gemm_batch gb;
    if (ein_gemm(a, &e, &gb)) {
        run_batches(&gb, a->n_threads);
        return GF_OK;
    }
    struct ein_plan p;
    ein_general(a, &e, &p);
    size_t grain = p.sum_count >= 16384 ? 1 : (size_t)(16384 / (p.sum_count + 1));
    gf_parallel_for(a->n_threads, a->out[0].nelem, grain, mm_type_of(a->in[0].dtype)->einsum,
                    &p);
    return GF_OK;
}

static enum gf_status einsum_run(const struct gf_kernel_args *a)
{
    for (size_t i = 0; i < a->n_in; i++)
        if (!a->in[i].data)
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is missing", i);
    return run_typed(a, einsum_core);
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_MATMUL, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "openblas",
     .supports = mm_supports, .workspace = mm_workspace, .run = matmul_run,
     .prepared_size = mm_prepared_size, .prepare = mm_prepare},
    {.op = GF_OP_GEMM, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "openblas",
     .supports = gemm_supports, .workspace = mm_workspace, .run = gemm_op_run,
     .prepared_size = mm_prepared_size, .prepare = mm_prepare},
    {.op = GF_OP_EINSUM, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "openblas",
     .supports = mm_supports, .workspace = mm_workspace, .run = einsum_run},
};

const struct gf_kernel_table gf_cpu_matmul_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};
