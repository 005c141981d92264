/* fp32 GEMM for the products of inference at small batch: C (+)= A B with A
 * [m, k], B [k, n] and C [m, n] row-major (any leading dimensions), on
 * AVX-512F, split by columns over gf_parallel_for.
 *
 * Why not OpenBLAS there: at 1 x 128 tokens a weight is used by 128 rows
 * only, and OpenBLAS first copies (packs) each weight into its panel layout,
 * once per call, in a pass over memory that nothing overlaps; with several
 * threads its own workers spin after a call and fight gf_parallel_for's for
 * the cores.  Here B goes through in blocks of KC rows x NC columns: each
 * block is copied into panels of NR columns (contiguous, on the stack) that
 * every row block of A then reads, and while the tiles work on one block
 * they prefetch the next one, a line every 8 k steps, so that its copy
 * reads from cache and the weights stream from memory under the
 * arithmetic.  (B's rows lie a power of two apart, or near it: read in
 * place, a panel's rows fall into a few cache sets, and how badly depends
 * on the physical pages a process gets.)
 *
 * The micro-kernel keeps an MR x NR tile of C in 16 zmm registers: per k,
 * two loads of B's row and MR broadcasts of A's column, 2 MR FMAs.  Every
 * element of C is, per block of KC values of p (from p = 0), one chain of
 * FMAs over the block's p in order starting from zero, added to C as it
 * stands (C = 0 + s would turn -0 into +0: the first block of a product
 * that does not accumulate is stored as it is), as BLAS adds beta C; so
 * the result does not depend on the thread count or on how the columns
 * are split.
 *
 * On the 2-core Zen 4 VM, the 29 GEMMs of the issue-18 Llama at 1 x 128
 * (7.4 GFLOP, 116 MB of weights, cold), process medians: one thread
 * OpenBLAS 0.3.21 (Cooperlake kernels) 82-90 ms, this 79-80 ms (B read in
 * place: 80-96 ms, by the process); two threads 42-43 ms.  From about 256
 * rows OpenBLAS is as fast or faster (at 2048 rows 20%: here A goes past
 * every block of B again), so larger products copying B stay with it
 * (GF_CPU_SGEMM_MAX_M), but for attention's per-head products while A's
 * part of a block of k fits half an L2 (gf_cpu_sgemm_takes): at 4 x 512,
 * [512, 64] x [64, 512] and [512, 512] x [512, 64], one per head, 8.0-9.8
 * ms on OpenBLAS's two threads for 32 heads, 6.4-8.4 ms here; and no
 * OpenBLAS threads left spinning (sched_yield) after them, against the
 * pool's, through the ops that follow.
 *
 * An inference plan packs each weight once (gf_cpu_sgemm_pack, below, as
 * ONNX Runtime does at session start) and its products read the panels
 * from there (gf_cpu_sgemm_packed): the same tiles on the same values in
 * the same order, without the copy.  Past 256 rows (issue 18 at 4 x 512
 * tokens: 2048) only that packed product runs (GF_CPU_SGEMM_PACKED_MAX_M),
 * its rows in chunks of MC = 128 outside the blocks of k: a chunk's part
 * of A (128 x KC, 128 KiB) and of C (128 x NC, 64 KiB) stay in L2 while
 * the panels of a column block go past, and C is added to from L2, not
 * memory.  The order of each element's sums is unchanged (blocks of k in
 * order), so the bits are those of the small products and do not depend
 * on the threads.  At 2048 rows on 2 threads of the Zen 4 VM
 * (single-call medians, load ~2 from other work): the Llama's 512 x 512,
 * 512 x 1376 and 1376 x 512 products and the 512 x 32000 LM head run at
 * 0.91-0.97x OpenBLAS's time (without the chunks, in the old order:
 * 0.96-1.12x), and no OpenBLAS threads spin afterwards against the pool's.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "gf_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(GF_NO_AVX512_SGEMM)
#include <immintrin.h>

#define SG_MR 8   /* rows of the register tile */
#define SG_NR GF_CPU_SGEMM_NR /* columns of the register tile: two zmm */
#ifndef SG_KC
#define SG_KC GF_CPU_SGEMM_KC /* rows of B in one block */
#endif
#ifndef SG_MC
#define SG_MC 128 /* rows of A that go past a block of B together */
#endif
#ifndef SG_NC
#define SG_NC 128 /* columns of B in one block (a 128 KiB copy on the stack) */
#endif

#define SG_TARGET __attribute__((target("avx512f")))

/* A walk over the lines of the next block of B, row by row, that the tiles
 * of a block take turns to prefetch: `left` lines from `at`, `row_lines` a
 * row, the next row `skip` bytes after a row's last line. */
struct sg_walk {
    const char *at;
    int col, row_lines;
    ptrdiff_t skip;
    int64_t left;
};

/* One k step of the tile: acc (+)= A's column (a[i lda], i < mr) times B's
 * row (bq; a panel's: read whole, without masks). */
static inline __attribute__((always_inline)) SG_TARGET void
sg_step(int mr, bool panel, const float *a, ptrdiff_t lda, const float *bq, __mmask16 m0,
        __mmask16 m1, __m512 acc[SG_MR][2])
{
    __m512 b0 = panel ? _mm512_load_ps(bq) : _mm512_maskz_loadu_ps(m0, bq);
    __m512 b1 = panel ? _mm512_load_ps(bq + 16) : _mm512_maskz_loadu_ps(m1, bq + 16);
#pragma GCC unroll 8
    for (int i = 0; i < SG_MR; i++) {
        if (i < mr) {
            __m512 av = _mm512_set1_ps(a[i * lda]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
}

/* C[mr x NR] (+)= A[mr x kc] B[kc x NR] for the columns under m0 | m1 << 16
 * (B's row p at b + p ldb): the block's product is summed from zero, then
 * added to C (load_c) as BLAS adds beta C.  Every 8 steps it prefetches the
 * next line of the walk *pf into L1 (prefetcht1 did nothing here on Zen 4;
 * t0 did), the 8 steps between unrolled.  `panel`: b is a panel (ldb NR,
 * 64-byte aligned, zeros past the last column), read whole without masks
 * (no mask registers reloaded each step).  Both took the Llama's 29 GEMMs
 * below from 80 to 72-75 ms on one thread. */
static inline __attribute__((always_inline)) SG_TARGET void
sg_tile(int mr, bool panel, int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
        float *c, ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1, struct sg_walk *pf)
{
    struct sg_walk w = *pf;
    __m512 acc[SG_MR][2];
    if (panel)
        ldb = SG_NR;
#pragma GCC unroll 8
    for (int i = 0; i < SG_MR; i++) {
        if (i < mr) {
            acc[i][0] = _mm512_setzero_ps();
            acc[i][1] = _mm512_setzero_ps();
        }
    }
    int p = 0;
    for (; p < kc; p += 8) {
        if (w.left > 0) {
            _mm_prefetch(w.at, _MM_HINT_T0);
            w.left--;
            w.at += 64;
            if (++w.col == w.row_lines) {
                w.col = 0;
                w.at += w.skip;
            }
        }
        if (p + 8 > kc)
            break;
#pragma GCC unroll 8
        for (int q = p; q < p + 8; q++)
            sg_step(mr, panel, a + q, lda, b + (ptrdiff_t)q * ldb, m0, m1, acc);
    }
    for (; p < kc; p++) /* the last steps, fewer than 8 */
        sg_step(mr, panel, a + p, lda, b + (ptrdiff_t)p * ldb, m0, m1, acc);
#pragma GCC unroll 8
    for (int i = 0; i < SG_MR; i++) {
        if (i < mr) {
            if (load_c) {
                acc[i][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c + i * ldc), acc[i][0]);
                acc[i][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + i * ldc + 16), acc[i][1]);
            }
            _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
        }
    }
    *pf = w;
}

typedef void (*sg_tile_fn)(int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                           float *c, ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1,
                           struct sg_walk *pf);

/* one function per row count, so that the tile's loops unroll; _p: B in
 * panels */
#define SG_TILE(R)                                                                            \
    static __attribute__((noinline)) SG_TARGET void sg_tile##R(                              \
        int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb, float *c,       \
        ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1, struct sg_walk *pf)           \
    {                                                                                         \
        sg_tile(R, false, kc, a, lda, b, ldb, c, ldc, load_c, m0, m1, pf);                    \
    }                                                                                         \
    static __attribute__((noinline)) SG_TARGET void sg_tile##R##_p(                          \
        int kc, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb, float *c,       \
        ptrdiff_t ldc, bool load_c, __mmask16 m0, __mmask16 m1, struct sg_walk *pf)           \
    {                                                                                         \
        sg_tile(R, true, kc, a, lda, b, ldb, c, ldc, load_c, m0, m1, pf);                     \
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
static const sg_tile_fn sg_tiles_p[SG_MR + 1] = {NULL,       sg_tile1_p, sg_tile2_p,
                                                 sg_tile3_p, sg_tile4_p, sg_tile5_p,
                                                 sg_tile6_p, sg_tile7_p, sg_tile8_p};

/* B[kc x nc] (row-major, ldb) to pack as nc / NR panels of kc x NR, zeros
 * past column nc; read row by row, so that the reads stream. */
static __attribute__((noinline)) SG_TARGET void sg_pack(int kc, int64_t nc, const float *b,
                                                        ptrdiff_t ldb, float *pack)
{
    int64_t panels = (nc + SG_NR - 1) / SG_NR;
    for (int r = 0; r < kc; r++) {
        const float *row = b + r * ldb;
        float *dst = pack + (ptrdiff_t)r * SG_NR;
        for (int64_t p = 0; p < panels; p++) {
            int64_t w = nc - p * SG_NR;
            __mmask16 m0 = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1);
            __mmask16 m1 = w >= 32 ? (__mmask16)0xffff
                           : w <= 16 ? 0 : (__mmask16)((1u << (w - 16)) - 1);
            _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, row));
            _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, row + 16));
            row += SG_NR;
            dst += (ptrdiff_t)kc * SG_NR;
        }
    }
}

static __mmask16 sg_mask(int64_t w)
{
    return w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
}

/* B^T [nc x kc] (row j at bt + j ldb) to pack as above: panels of kc x NR,
 * zeros past column nc.  4 x 4 blocks go through SSE registers, transposed
 * there; each row of B^T is read along, which streams. */
static void sg_pack_t(int kc, int64_t nc, const float *bt, ptrdiff_t ldb, float *pack)
{
    int64_t panels = (nc + SG_NR - 1) / SG_NR;
    int k4 = kc & ~3;
    for (int64_t pn = 0; pn < panels; pn++) {
        float *dst = pack + pn * (ptrdiff_t)kc * SG_NR;
        for (int jj = 0; jj < SG_NR; jj += 4) {
            int64_t j = pn * SG_NR + jj;
            if (j + 4 > nc) { /* the last columns: one by one, zeros past nc */
                for (int x = 0; x < 4; x++)
                    for (int p = 0; p < kc; p++)
                        dst[p * SG_NR + jj + x] = j + x < nc ? bt[(j + x) * ldb + p] : 0.0f;
                continue;
            }
            const float *r = bt + j * ldb;
            for (int p = 0; p < k4; p += 4) {
                __m128 r0 = _mm_loadu_ps(r + p), r1 = _mm_loadu_ps(r + ldb + p);
                __m128 r2 = _mm_loadu_ps(r + 2 * ldb + p), r3 = _mm_loadu_ps(r + 3 * ldb + p);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_store_ps(dst + p * SG_NR + jj, r0);
                _mm_store_ps(dst + (p + 1) * SG_NR + jj, r1);
                _mm_store_ps(dst + (p + 2) * SG_NR + jj, r2);
                _mm_store_ps(dst + (p + 3) * SG_NR + jj, r3);
            }
            for (int p = k4; p < kc; p++)
                for (int x = 0; x < 4; x++)
                    dst[p * SG_NR + jj + x] = r[x * ldb + p];
        }
    }
}

struct sg_args {
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    bool accumulate;
    bool trans_b; /* b holds B^T [n, k] (row stride ldb) */
    /* B packed ahead of time (gf_cpu_sgemm_pack), else NULL: column j of
     * the product is column j0 + j of it */
    const float *packed;
    int64_t j0;
};

/* Columns [n0, n1) of C, every row, in blocks of KC rows x NC columns of B.
 * Each block is first copied to a contiguous buffer, as panels of NR
 * columns, that every row block of A then reads: B's rows lie a power of
 * two apart or near it, which maps a panel's rows to few cache sets, and
 * neither the hardware prefetchers nor software prefetches (tried: no
 * effect on Zen 4) bring strided rows in ahead of the tile; the copy reads
 * whole row segments, which stream.  With one row block there is nothing
 * to reuse and the tile reads B where it lies.  B packed ahead of time is
 * read from its panels, in the same blocks: the same tiles on the same
 * values, so the same bits. */
static void sg_cols(const struct sg_args *s, int64_t n0, int64_t n1)
{
    const int64_t m = s->m, k = s->k, lda = s->lda, ldb = s->ldb, ldc = s->ldc;
    float pack[SG_KC * SG_NC] __attribute__((aligned(64)));
    const int row_blocks = (int)((m + SG_MR - 1) / SG_MR);
    /* a packed panel: k rows of NR columns */
    const ptrdiff_t panel = (ptrdiff_t)k * SG_NR;
    /* B packed ahead of time: the rows in chunks of MC outside the blocks
     * of k (each chunk's part of C stays in L2 from one block of k to the
     * next); B copied here: every row goes past each copy */
    const int chunk = s->packed ? SG_MC / SG_MR : row_blocks;
    for (int64_t jc = n0; jc < n1; jc += SG_NC) {
        int64_t nc = n1 - jc < SG_NC ? n1 - jc : SG_NC;
        for (int qa = 0; qa < row_blocks; qa += chunk) { /* row blocks [qa, qb) */
            int qb = row_blocks - qa < chunk ? row_blocks : qa + chunk;
            for (int64_t pc = 0; pc < k; pc += SG_KC) {
                int kc = (int)(k - pc < SG_KC ? k - pc : SG_KC);
                bool load = s->accumulate || pc > 0;
                /* the tiles read panels (packed now or ahead of time); B^T is
                 * always copied: the tile reads B's rows */
                bool packed = s->packed || row_blocks > 1 || s->trans_b;
                const float *b = NULL, *pb = NULL; /* B's block, or its first packed panel */
                if (s->packed) {
                    pb = s->packed + (s->j0 + jc) / SG_NR * panel + pc * SG_NR;
                } else {
                    b = s->trans_b ? s->b + jc * ldb + pc : s->b + pc * ldb + jc;
                    if (s->trans_b)
                        sg_pack_t(kc, nc, b, ldb, pack);
                    else if (packed)
                        sg_pack(kc, nc, b, ldb, pack);
                }
                /* the block after this one: (jc, pc + KC), else (jc + NC, 0) */
                int64_t njc = jc, npc = pc + SG_KC;
                if (npc >= k) {
                    npc = 0;
                    njc = jc + SG_NC;
                }
                struct sg_walk pf = {0};
                if (njc < n1 && s->packed) {
                    /* its panels, each kc x NR contiguous, a panel apart */
                    int64_t nkc = k - npc < SG_KC ? k - npc : SG_KC;
                    int64_t nnc = n1 - njc < SG_NC ? n1 - njc : SG_NC;
                    pf.at = (const char *)(s->packed + (s->j0 + njc) / SG_NR * panel + npc * SG_NR);
                    pf.row_lines = (int)(nkc * SG_NR / 16);
                    pf.skip = (panel - nkc * SG_NR) * (ptrdiff_t)sizeof(float);
                    pf.left = (nnc + SG_NR - 1) / SG_NR * pf.row_lines;
                } else if (njc < n1) {
                    int64_t nkc = k - npc < SG_KC ? k - npc : SG_KC;
                    int64_t nnc = n1 - njc < SG_NC ? n1 - njc : SG_NC;
                    /* rows of B (or of B^T), each `width` elements */
                    int64_t rows = s->trans_b ? nnc : nkc, width = s->trans_b ? nkc : nnc;
                    pf.at = (const char *)(s->trans_b ? s->b + njc * ldb + npc
                                                      : s->b + npc * ldb + njc);
                    pf.row_lines = (int)((width + 15) / 16);
                    pf.skip = (ldb - pf.row_lines * 16) * (ptrdiff_t)sizeof(float);
                    pf.left = rows * pf.row_lines;
                }
                /* rows in chunks of MC: a chunk's rows of A (MC x kc) stay in
                 * L2 while every panel of the block goes past them */
                for (int q0 = qa; q0 < qb; q0 += SG_MC / SG_MR) {
                    int q1 = qb - q0 < SG_MC / SG_MR ? qb : q0 + SG_MC / SG_MR;
                    for (int64_t jr = 0; jr < nc; jr += SG_NR) {
                        __mmask16 m0 = sg_mask(nc - jr), m1 = sg_mask(nc - jr - 16);
                        const float *bp = s->packed ? pb + jr / SG_NR * panel
                                          : packed  ? pack + jr * kc
                                                    : b + jr;
                        ptrdiff_t ldp = packed ? SG_NR : ldb;
                        for (int q = q0; q < q1; q++) {
                            int64_t ic = (int64_t)q * SG_MR;
                            int mr = (int)(m - ic < SG_MR ? m - ic : SG_MR);
                            sg_tile_fn tile = (packed ? sg_tiles_p : sg_tiles)[mr];
                            tile(kc, s->a + ic * lda + pc, lda, bp, ldp,
                                 s->c + ic * ldc + jc + jr, ldc, load, m0, m1, &pf);
                        }
                    }
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

static void sg_run(int n_threads, struct sg_args *s)
{
    size_t units = (size_t)((s->n + SG_NR - 1) / SG_NR);
    /* a chunk of at least ~2^18 multiply-adds (some 10 us) */
    double per_unit = (double)s->m * (double)s->k * SG_NR;
    size_t grain = per_unit >= 262144.0 ? 1 : (size_t)(262144.0 / per_unit) + 1;
    gf_parallel_for(n_threads, units, grain, sg_units, s);
}

bool gf_cpu_sgemm(int n_threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, bool trans_b, float *c, int64_t ldc, bool accumulate)
{
    if (m <= 0 || n <= 0 || k <= 0 || !gf_cpu_sgemm_takes(m, n, k) || !sg_enabled())
        return false;
    struct sg_args s = {m, n, k, lda, ldb, ldc, a, b, c, accumulate, trans_b, NULL, 0};
    sg_run(n_threads, &s);
    return true;
}

/* ---- B packed ahead of time --------------------------------------------------------
 * A weight of an inference plan is packed once, when the plan is made (as
 * ONNX Runtime does at session start), into the panels sg_cols would copy
 * it into on every call: the copy's pass over B leaves the runs, the tiles
 * stream the panels (contiguous: no cache-set conflicts), and the next
 * block's lines are prefetched as before.  The 29 GEMMs of the issue-18
 * Llama at 1 x 128 (tests/bench_sgemm_pack.c), B copied per call -> packed:
 * one thread 71-79 -> 68-71 ms, two threads 38-44 -> 35-40 ms; GPT-2's tied
 * LM head (B^T [32000, 512], transposed by the copy) 42-46 -> 39-40 ms on
 * one thread.  The memory: a second copy of each weight (the original is
 * no longer read by these products; their other readers keep it). */

static int sg_pack_enabled(void)
{
    static int on = -1; /* benign race, as sg_enabled */
    if (on < 0) {
        const char *e = getenv("GF_CPU_SGEMM_PACK");
        on = sg_enabled() && !(e && strcmp(e, "0") == 0);
    }
    return on;
}

size_t gf_cpu_sgemm_pack_size(int64_t k, int64_t n)
{
    if (k <= 0 || n <= 0 || k > INT_MAX / SG_NR || !sg_pack_enabled())
        return 0;
    return (size_t)((n + SG_NR - 1) / SG_NR) * (size_t)k * SG_NR * sizeof(float);
}

struct sg_pack_args {
    int64_t k, n, ldb;
    const float *b;
    bool trans_b;
    float *packed;
};

/* Panels [p0, p1): whole columns of B (rows of B^T), every row. */
static void sg_pack_panels(void *ctx, size_t p0, size_t p1)
{
    const struct sg_pack_args *s = ctx;
    int64_t j0 = (int64_t)p0 * SG_NR, j1 = (int64_t)p1 * SG_NR;
    int64_t nc = (j1 < s->n ? j1 : s->n) - j0;
    float *dst = s->packed + (ptrdiff_t)p0 * s->k * SG_NR;
    /* sg_pack's panels of kc rows, with kc = k: the whole of B's height */
    if (s->trans_b)
        sg_pack_t((int)s->k, nc, s->b + j0 * s->ldb, s->ldb, dst);
    else
        sg_pack((int)s->k, nc, s->b + j0, s->ldb, dst);
}

void gf_cpu_sgemm_pack(int n_threads, int64_t k, int64_t n, const float *b, int64_t ldb,
                       bool trans_b, float *packed)
{
    if (!gf_cpu_sgemm_pack_size(k, n))
        return;
    struct sg_pack_args s = {k, n, ldb, b, trans_b, packed};
    gf_parallel_for(n_threads, (size_t)((n + SG_NR - 1) / SG_NR), 1, sg_pack_panels, &s);
}

bool gf_cpu_sgemm_packed(int n_threads, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *packed, int64_t j0, float *c, int64_t ldc,
                         bool accumulate)
{
    if (m <= 0 || n <= 0 || k <= 0 || m > GF_CPU_SGEMM_PACKED_MAX_M || j0 < 0 || j0 % SG_NR ||
        !sg_pack_enabled())
        return false;
    struct sg_args s = {m, n, k, lda, 0, ldc, a, NULL, c, accumulate, false, packed, j0};
    sg_run(n_threads, &s);
    return true;
}

#else

bool gf_cpu_sgemm(int n_threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, bool trans_b, float *c, int64_t ldc, bool accumulate)
{
    (void)n_threads, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)trans_b;
    (void)c, (void)ldc, (void)accumulate;
    return false;
}

size_t gf_cpu_sgemm_pack_size(int64_t k, int64_t n)
{
    (void)k, (void)n;
    return 0;
}

void gf_cpu_sgemm_pack(int n_threads, int64_t k, int64_t n, const float *b, int64_t ldb,
                       bool trans_b, float *packed)
{
    (void)n_threads, (void)k, (void)n, (void)b, (void)ldb, (void)trans_b, (void)packed;
}

bool gf_cpu_sgemm_packed(int n_threads, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *packed, int64_t j0, float *c, int64_t ldc,
                         bool accumulate)
{
    (void)n_threads, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)packed, (void)j0;
    (void)c, (void)ldc, (void)accumulate;
    return false;
}

#endif
