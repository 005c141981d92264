/* Tests of the CPU's own fp32 GEMM (kernels/cpu/sgemm.c).  Each element of C
 * is, per block of GF_CPU_SGEMM_KC values of k, one chain of FMAs over the
 * block in order from zero, added to C; the reference written here is that
 * in scalar fmaf (exact fused multiply-add, from libm) and the results must
 * be equal bit for bit: at odd sizes (edges of the register
 * tile, of the blocks of k and of columns), with leading dimensions larger
 * than the rows, with and without accumulating into C, with B given as is
 * or transposed, and on 1, 2 and 3 threads.  A second check against a sum in double bounds the error. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/cpu.h"
#include "gf_kernels.h"

static uint32_t rng_state = 12345;

static float rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((int)(rng_state >> 9) % 2001 - 1000) / 997.0f;
}

static float *fill(size_t n)
{
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = rnd();
    return p;
}

/* One product: C [m, n] (ldc) from A [m, k] (lda), B [k, n] (ldb), or with
 * trans_b from B^T [n, k] (ldb). */
static void check_t(int64_t m, int64_t n, int64_t k, int64_t pad, bool accumulate, bool trans_b,
                    bool *ran)
{
    int64_t lda = k + pad, ldb = (trans_b ? k : n) + pad, ldc = n + 2 * pad;
    float *a = fill((size_t)(m * lda)), *b = fill((size_t)((trans_b ? n : k) * ldb));
    float *c0 = fill((size_t)(m * ldc)), *want = malloc((size_t)(m * ldc) * sizeof(float));
    assert_non_null(want);
    memcpy(want, c0, (size_t)(m * ldc) * sizeof(float));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = want[i * ldc + j], blk = 0.0f;
            double d = accumulate ? want[i * ldc + j] : 0.0, mag = fabs(d);
            for (int64_t p = 0; p < k; p++) {
                float bpj = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                blk = fmaf(a[i * lda + p], bpj, blk);
                d += (double)a[i * lda + p] * bpj;
                mag += fabs((double)a[i * lda + p] * bpj);
                /* a block of KC values of p ends: added to C */
                if ((p + 1) % GF_CPU_SGEMM_KC == 0 || p + 1 == k) {
                    s = !accumulate && p < GF_CPU_SGEMM_KC ? blk : s + blk;
                    blk = 0.0f;
                }
            }
            /* the chain's rounding errors: at most k + 1 half-ulps of the
             * running magnitude */
            assert_true(fabs((double)s - d) <= (double)(k + 1) * 6e-8 * mag + 1e-30);
            want[i * ldc + j] = s;
        }
    float *c = malloc((size_t)(m * ldc) * sizeof(float));
    assert_non_null(c);
    for (int t = 1; t <= 3; t++) {
        memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
        if (!gf_cpu_sgemm(t, m, n, k, a, lda, b, ldb, trans_b, c, ldc, accumulate)) {
            *ran = false; /* no AVX-512F here */
            break;
        }
        *ran = true;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                /* the padding of C is left alone */
                float w = j < n ? want[i * ldc + j] : c0[i * ldc + j];
                if (memcmp(&c[i * ldc + j], &w, sizeof(float)) != 0)
                    fail_msg("m %lld n %lld k %lld pad %lld acc %d trans_b %d threads %d: "
                             "C[%lld,%lld] = %.9g, want %.9g",
                             (long long)m, (long long)n, (long long)k, (long long)pad,
                             accumulate, trans_b, t, (long long)i, (long long)j, c[i * ldc + j],
                             w);
            }
    }
    free(a), free(b), free(c0), free(want), free(c);
}

static void check(int64_t m, int64_t n, int64_t k, int64_t pad, bool accumulate, bool *ran)
{
    check_t(m, n, k, pad, accumulate, false, ran);
}

static void test_sizes(void **state)
{
    (void)state;
    static const int64_t ms[] = {1, 3, 8, 9, 17, 64};
    static const int64_t ns[] = {1, 15, 16, 17, 32, 33, 100, 300};
    static const int64_t ks[] = {1, 7, 256, 257, 600};
    bool ran = false;
    for (size_t x = 0; x < sizeof(ms) / sizeof(ms[0]); x++)
        for (size_t y = 0; y < sizeof(ns) / sizeof(ns[0]); y++)
            for (size_t z = 0; z < sizeof(ks) / sizeof(ks[0]); z++)
                check(ms[x], ns[y], ks[z], (int64_t)((x + y + z) % 3) * 5, (x + y + z) % 2 == 1,
                      &ran);
    if (!ran)
        skip();
}

/* The same with B given transposed (B^T [n, k]: Gemm's transB, a tied LM
 * head); odd k exercises the transposing copy's tail. */
static void test_sizes_trans_b(void **state)
{
    (void)state;
    static const int64_t ms[] = {1, 8, 9, 30};
    static const int64_t ns[] = {1, 3, 16, 33, 130};
    static const int64_t ks[] = {1, 6, 257, 300};
    bool ran = false;
    for (size_t x = 0; x < sizeof(ms) / sizeof(ms[0]); x++)
        for (size_t y = 0; y < sizeof(ns) / sizeof(ns[0]); y++)
            for (size_t z = 0; z < sizeof(ks) / sizeof(ks[0]); z++)
                check_t(ms[x], ns[y], ks[z], (int64_t)((x + y + z) % 3) * 5, (x + y + z) % 2 == 0,
                        true, &ran);
    check_t(128, 600, 512, 0, false, true, &ran);
    if (!ran)
        skip();
}

/* The shapes of a Llama layer at 1 x 128 tokens, and more columns than one
 * block of them (the prefetch of the next block crosses blocks of k and of
 * columns); the largest row count taken. */
static void test_model_shapes(void **state)
{
    (void)state;
    bool ran = false;
    check(128, 512, 512, 0, false, &ran);
    check(128, 1376, 512, 0, false, &ran);
    check(128, 512, 1376, 0, true, &ran);
    check(GF_CPU_SGEMM_MAX_M, 600, 300, 3, false, &ran);
    /* attention's per-head products at 512 tokens, past GF_CPU_SGEMM_MAX_M
     * rows: A's part of a block of k fits GF_CPU_SGEMM_A_BYTES */
    check(512, 512, 64, 0, false, &ran);
    check(512, 64, 512, 1, false, &ran);
    if (!ran)
        skip();
}

static void test_refusals(void **state)
{
    (void)state;
    float x[4] = {0};
    /* too many rows (past GF_CPU_SGEMM_MAX_M: k and n both over
     * GF_CPU_SGEMM_HEAD, or A's block of k over GF_CPU_SGEMM_A_BYTES) or
     * an empty product: not taken, C untouched */
    const int64_t a_floats = GF_CPU_SGEMM_A_BYTES / 4, head = GF_CPU_SGEMM_HEAD;
    assert_true(gf_cpu_sgemm_takes(GF_CPU_SGEMM_MAX_M, 1 << 20, 1 << 20));
    assert_true(gf_cpu_sgemm_takes(a_floats / GF_CPU_SGEMM_KC, head, 600));
    assert_true(gf_cpu_sgemm_takes(a_floats / head, 600, head));
    assert_false(gf_cpu_sgemm_takes(GF_CPU_SGEMM_MAX_M + 1, head + 1, head + 1));
    assert_false(gf_cpu_sgemm_takes(a_floats / GF_CPU_SGEMM_KC + 1, head, GF_CPU_SGEMM_KC));
    assert_false(gf_cpu_sgemm_takes(a_floats / head + 1, 600, head));
    assert_false(gf_cpu_sgemm_takes(a_floats + 1, 1, 1));
    assert_false(gf_cpu_sgemm(2, GF_CPU_SGEMM_MAX_M + 1, head + 1, head + 1, x, 1, x, 1, false, x,
                              1, false));
    assert_false(gf_cpu_sgemm(2, a_floats / GF_CPU_SGEMM_KC + 1, 1, GF_CPU_SGEMM_KC, x, 1, x, 1,
                              false, x, 1, false));
    assert_false(gf_cpu_sgemm(2, 0, 1, 1, x, 1, x, 1, false, x, 1, false));
    assert_false(gf_cpu_sgemm(2, 1, 1, 0, x, 1, x, 1, true, x, 1, false));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_sizes_trans_b),
        cmocka_unit_test(test_model_shapes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
