/* fp32 GEMM for the products of inference at small batch: C (+)= A B with A
 * [m, k], B [k, n] and C [m, n] row-major (any leading dimensions), on
 * AVX-512F, split by columns over gf_parallel_for.
 *
 * Why not OpenBLAS there: at 1 x 128 tokens a weight is used by 128 rows
 * only, and OpenBLAS first copies (packs) each weight into its panel layout,
 * once per call, a pass over memory of its own; with several threads its
 * own workers spin after a call and fight gf_parallel_for's for the cores.
 * Here B is read where it lies: a block of KC rows x NC columns of B stays
 * in L2 while every row block of A goes past it, and while one block is
 * used the next is prefetched into L2 (one line per k step of the
 * micro-kernel), so the weight streams from memory spread over the compute.
 *
 * The micro-kernel keeps an MR x NR tile of C in 16 zmm registers: per k,
 * two loads of B's row and MR broadcasts of A's column, 2 MR FMAs.  Every
 * element of C is one chain of FMAs over p = 0, 1, ..., k-1 in order
 * (blocks of k continue from the value stored), so the result does not
 * depend on the thread count or on how the columns are split.
 *
 * On the 2-core Zen 4 VM, one thread, the GEMMs of the issue-18 Llama at
 * 1 x 128 with cold weights: OpenBLAS 0.3.21 (Cooperlake kernels) 82-86
 * ms, this 78-80 ms; at 2048 rows OpenBLAS is 5-10% faster, so larger
 * products stay with it (GF_CPU_SGEMM_MAX_M).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "gf_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(GF_NO_AVX512_SGEMM)
#include <immintrin.h>

#define SG_MR 8   /* rows of the register tile */
#define SG_NR 32  /* columns of the register tile: two zmm */
#define SG_KC 256 /* rows of B in one block */
#define SG_NC 256 /* columns of B in one block */

#define SG_TARGET __attribute__((target("avx512f")))

/* C[mr x NR] (+)= A[mr x kc] B[kc x NR] for the columns under m0 | m1 << 16;
 * prefetches the line at pf, pf + ldb, ... (one a step) into L2. */
static inline __attribute__((always_inline)) SG_TARGET void
sg_tile(int mr, int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb, float *c,
        ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1, const float *pf)
{
    __m512 acc[SG_MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < SG_MR; i++) {
        if (i < mr) {
            acc[i][0] = load_c ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
            acc[i][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : _mm512_setzero_ps();
        }
    }
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b);
        __m512 b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        _mm_prefetch((const char *)pf, _MM_HINT_T1);
#pragma GCC unroll 8
        for (int i = 0; i < SG_MR; i++) {
            if (i < mr) {
                __m512 av = _mm512_set1_ps(a[i * lda + p]);
                acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
            }
        }
        b += ldb;
        pf += ldb;
    }
#pragma GCC unroll 8
    for (int i = 0; i < SG_MR; i++) {
        if (i < mr) {
            _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
        }
    }
}

typedef void (*sg_tile_fn)(int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                           float *c, ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1,
                           const float *pf);

/* one function per row count, so that the tile's loops unroll */
#define SG_TILE(R)                                                                            \
    static __attribute__((noinline)) SG_TARGET void sg_tile##R(                              \
        int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb, float *c,       \
        ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1, const float *pf)              \
    {                                                                                         \
        sg_tile(R, kc, a, lda, b, ldb, c, ldc, load_c, m0, m1, pf);                           \
    }
SG_TILE(1)
SG_TILE(2)
SG_TILE(3)
SG_TILE(4)
SG_TILE(5)
SG_TILE(6)
SG_TILE(7)
SG_TILE(8)
static const sg_tile_fn sg_tiles[SG_MR + 1] = {NULL,     sg_tile1, sg_tile2, sg_tile3, sg_tile4,
                                               sg_tile5, sg_tile6, sg_tile7, sg_tile8};

static __mmask16 sg_mask(int64_t w)
{
    return w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
}

struct sg_args {
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    bool accumulate;
};

/* Columns [n0, n1) of C, every row. */
static void sg_cols(const struct sg_args *s, int64_t n0, int64_t n1)
{
    const int64_t m = s->m, k = s->k, lda = s->lda, ldb = s->ldb, ldc = s->ldc;
    for (int64_t jc = n0; jc < n1; jc += SG_NC) {
        int64_t nc = n1 - jc < SG_NC ? n1 - jc : SG_NC;
        for (int64_t pc = 0; pc < k; pc += SG_KC) {
            int64_t kc = k - pc < SG_KC ? k - pc : SG_KC;
            bool load = s->accumulate || pc > 0;
            /* the block after this one: (jc, pc + KC), else (jc + NC, 0);
             * tile t prefetches its line t, every row */
            int64_t njc = jc, npc = pc + SG_KC;
            if (npc >= k) {
                npc = 0;
                njc = jc + SG_NC;
            }
            int64_t nnc = njc < n1 ? (n1 - njc < SG_NC ? n1 - njc : SG_NC) : 0;
            int64_t nkc = k - npc < SG_KC ? k - npc : SG_KC;
            int64_t lines = (nnc + 15) / 16;
            const float *next = s->b + npc * ldb + njc;
            int64_t t = 0;
            for (int64_t ic = 0; ic < m; ic += SG_MR) {
                int mr = (int)(m - ic < SG_MR ? m - ic : SG_MR);
                for (int64_t jr = 0; jr < nc; jr += SG_NR, t++) {
                    const float *b = s->b + pc * ldb + jc + jr;
                    /* a tile with no line left prefetches its own rows (in
                     * cache: a no-op); kc rows of the next block at most */
                    const float *pf = t < lines && nkc >= kc ? next + 16 * t : b;
                    sg_tiles[mr]((int)kc, s->a + ic * lda + pc, lda, b, ldb, s->c + ic * ldc + jc + jr,
                                 ldc, load, sg_mask(nc - jr), sg_mask(nc - jr - 16), pf);
                }
            }
        }
    }
}

/* Units [u0, u1) of NR columns. */
static void sg_units(void *ctx, size_t u0, size_t u1)
{
    const struct sg_args *s = ctx;
    int64_t n1 = (int64_t)u1 * SG_NR;
    sg_cols(s, (int64_t)u0 * SG_NR, n1 < s->n ? n1 : s->n);
}

static int sg_enabled(void)
{
    static int on = -1; /* benign race: every thread computes the same */
    if (on < 0) {
        const char *e = getenv("GF_CPU_SGEMM");
        __builtin_cpu_init();
        on = __builtin_cpu_supports("avx512f") && !(e && strcmp(e, "0") == 0);
    }
    return on;
}

bool gf_cpu_sgemm(int n_threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate)
{
    if (m <= 0 || n <= 0 || k <= 0 || m > GF_CPU_SGEMM_MAX_M || !sg_enabled())
        return false;
    struct sg_args s = {m, n, k, lda, ldb, ldc, a, b, c, accumulate};
    size_t units = (size_t)((n + SG_NR - 1) / SG_NR);
    /* a chunk of at least ~2^18 multiply-adds (some 10 us) */
    double per_unit = (double)m * (double)k * SG_NR;
    size_t grain = per_unit >= 262144.0 ? 1 : (size_t)(262144.0 / per_unit) + 1;
    gf_parallel_for(n_threads, units, grain, sg_units, &s);
    return true;
}

#else

bool gf_cpu_sgemm(int n_threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate)
{
    (void)n_threads, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)c, (void)ldc, (void)accumulate;
    return false;
}

#endif
