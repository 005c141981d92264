/* Tests of B packed ahead of time for the CPU's fp32 GEMM (kernels/cpu/sgemm.c:
 * gf_cpu_sgemm_pack, gf_cpu_sgemm_packed) and of the plan step that packs a
 * weight once (the kernels' prepare hook, executor/session.c).
 *
 * The packed product must equal the product that copies B per call bit for
 * bit, and both the scalar fmaf computation of the same order (per block
 * of GF_CPU_SGEMM_KC values of k, one chain from zero, added to C); a sum
 * in double bounds the error.  Shapes: n not a multiple of the 32-column
 * panels, k not a multiple of KC, B given transposed, a column range that
 * starts at a later panel (MatMulEpilogue's column tiles), 1 to 3 threads.
 * Then MatMul, Gemm (transB, bias) and MatMulEpilogue (transB, bias,
 * activation) run with and without what their prepare hook made, and a
 * session packs an initializer B but not an initializer that is a graph
 * input. */
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
#include "gf_exec.h"
#include "gf_kernels.h"

static uint32_t rng_state = 4321;

static float rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((int)(rng_state >> 9) % 2001 - 1000) / 997.0f;
}

static float *fill(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = rnd();
    return p;
}

static float *packed_b(int64_t k, int64_t n, const float *b, int64_t ldb, bool trans_b)
{
    size_t bytes = gf_cpu_sgemm_pack_size(k, n);
    if (!bytes)
        return NULL; /* no AVX-512F here */
    assert_int_equal(bytes, (size_t)((n + 31) / 32 * 32 * k) * sizeof(float));
    float *p = aligned_alloc(64, bytes);
    assert_non_null(p);
    memset(p, 0xff, bytes); /* NaNs: any panel byte left unwritten shows */
    gf_cpu_sgemm_pack(2, k, n, b, ldb, trans_b, p);
    return p;
}

/* C [m, n] (ldc) from A [m, k] (lda) and B [k, n] or B^T [n, k] (ldb), in
 * the kernel's order, in scalar fmaf; checks the error against double. */
static void reference(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, bool trans_b, float *c, int64_t ldc,
                      bool accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = c[i * ldc + j], blk = 0.0f;
            double d = accumulate ? s : 0.0, mag = fabs(d);
            for (int64_t p = 0; p < k; p++) {
                float x = a[i * lda + p], y = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                blk = fmaf(x, y, blk);
                d += (double)x * y;
                mag += fabs((double)x * y);
                if ((p + 1) % GF_CPU_SGEMM_KC == 0 || p + 1 == k) {
                    s = !accumulate && p < GF_CPU_SGEMM_KC ? blk : s + blk;
                    blk = 0.0f;
                }
            }
            assert_true(fabs((double)s - d) <= (double)(k + 1) * 6e-8 * mag + 1e-30);
            c[i * ldc + j] = s;
        }
}

static void same_bits(const float *got, const float *want, int64_t m, int64_t n, int64_t ldc,
                      const char *what, int64_t k, bool trans_b, int t)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++)
            if (memcmp(&got[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0)
                fail_msg("%s: m %lld n %lld k %lld trans_b %d threads %d: C[%lld,%lld] = %.9g, "
                         "want %.9g", what, (long long)m, (long long)n, (long long)k, trans_b, t,
                         (long long)i, (long long)j, got[i * ldc + j], want[i * ldc + j]);
}

/* One product, packed against copied per call and against the reference;
 * with j0, columns [j0, n) of the packed B into C's columns from 0. */
static bool check(int64_t m, int64_t n, int64_t k, int64_t pad, bool accumulate, bool trans_b)
{
    int64_t lda = k + pad, ldb = (trans_b ? k : n) + pad, ldc = n + pad;
    float *a = fill((size_t)(m * lda)), *b = fill((size_t)((trans_b ? n : k) * ldb));
    float *p = packed_b(k, n, b, ldb, trans_b);
    if (!p) {
        free(a), free(b);
        return false;
    }
    float *c0 = fill((size_t)(m * ldc)), *want = malloc((size_t)(m * ldc) * sizeof(float));
    float *c = malloc((size_t)(m * ldc) * sizeof(float));
    assert_non_null(want);
    assert_non_null(c);
    memcpy(want, c0, (size_t)(m * ldc) * sizeof(float));
    reference(m, n, k, a, lda, b, ldb, trans_b, want, ldc, accumulate);
    for (int t = 1; t <= 3; t++) {
        memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
        assert_true(gf_cpu_sgemm(t, m, n, k, a, lda, b, ldb, trans_b, c, ldc, accumulate));
        same_bits(c, want, m, n, ldc, "copied per call", k, trans_b, t);
        memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
        assert_true(gf_cpu_sgemm_packed(t, m, n, k, a, lda, p, 0, c, ldc, accumulate));
        same_bits(c, want, m, n, ldc, "packed", k, trans_b, t);
    }
    if (n > 32) { /* columns [32, n): C's columns [0, n - 32) */
        int64_t j0 = 32;
        float *w2 = malloc((size_t)(m * ldc) * sizeof(float));
        assert_non_null(w2);
        memcpy(w2, c0, (size_t)(m * ldc) * sizeof(float));
        memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
        const float *bj = trans_b ? b + j0 * ldb : b + j0;
        reference(m, n - j0, k, a, lda, bj, ldb, trans_b, w2, ldc, accumulate);
        assert_true(gf_cpu_sgemm_packed(2, m, n - j0, k, a, lda, p, j0, c, ldc, accumulate));
        same_bits(c, w2, m, n - j0, ldc, "packed from column 32", k, trans_b, 2);
        free(w2);
    }
    free(a), free(b), free(p), free(c0), free(want), free(c);
    return true;
}

static void test_sizes(void **state)
{
    (void)state;
    static const int64_t ms[] = {1, 7, 8, 9, 33};
    static const int64_t ns[] = {1, 17, 32, 33, 100, 161};
    static const int64_t ks[] = {1, 5, 256, 257, 600};
    bool ran = false;
    for (size_t x = 0; x < sizeof(ms) / sizeof(ms[0]); x++)
        for (size_t y = 0; y < sizeof(ns) / sizeof(ns[0]); y++)
            for (size_t z = 0; z < sizeof(ks) / sizeof(ks[0]); z++)
                ran = check(ms[x], ns[y], ks[z], (int64_t)((x + y + z) % 3) * 3,
                            (x + y + z) % 2 == 1, (x + y) % 2 == 0);
    /* a layer at 1 x 128 tokens: blocks of columns and of k, the prefetch
     * of the next block across both */
    ran = check(128, 300, 520, 0, false, false) && check(128, 300, 520, 1, true, true);
    if (!ran)
        skip();
}

/* Past GF_CPU_SGEMM_MAX_M rows (issue 18 at 4 x 512 tokens: 2048) the
 * packed product runs, and gf_cpu_sgemm only where gf_cpu_sgemm_takes the
 * shape (else OpenBLAS takes B as it lies): each against the reference, 1
 * to 3 threads.  300 rows: chunks of rows
 * (MC) and a last one part full, an edge tile, blocks of k and of columns
 * past the first; and a column range from a later panel. */
static bool check_tall(int64_t m, int64_t n, int64_t k, int64_t pad, bool accumulate,
                       bool trans_b)
{
    int64_t lda = k + pad, ldb = (trans_b ? k : n) + pad, ldc = n + pad;
    float *a = fill((size_t)(m * lda)), *b = fill((size_t)((trans_b ? n : k) * ldb));
    float *p = packed_b(k, n, b, ldb, trans_b);
    if (!p) {
        free(a), free(b);
        return false;
    }
    float *c0 = fill((size_t)(m * ldc)), *want = malloc((size_t)(m * ldc) * sizeof(float));
    float *c = malloc((size_t)(m * ldc) * sizeof(float));
    assert_non_null(want);
    assert_non_null(c);
    memcpy(want, c0, (size_t)(m * ldc) * sizeof(float));
    reference(m, n, k, a, lda, b, ldb, trans_b, want, ldc, accumulate);
    memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
    bool took = gf_cpu_sgemm(2, m, n, k, a, lda, b, ldb, trans_b, c, ldc, accumulate);
    assert_int_equal(took, gf_cpu_sgemm_takes(m, n, k));
    if (took)
        same_bits(c, want, m, n, ldc, "copied, tall", k, trans_b, 2);
    for (int t = 1; t <= 3; t++) {
        memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
        assert_true(gf_cpu_sgemm_packed(t, m, n, k, a, lda, p, 0, c, ldc, accumulate));
        same_bits(c, want, m, n, ldc, "packed, tall", k, trans_b, t);
    }
    int64_t j0 = 64;
    memcpy(want, c0, (size_t)(m * ldc) * sizeof(float));
    memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
    reference(m, n - j0, k, a, lda, trans_b ? b + j0 * ldb : b + j0, ldb, trans_b, want, ldc,
              accumulate);
    assert_true(gf_cpu_sgemm_packed(2, m, n - j0, k, a, lda, p, j0, c, ldc, accumulate));
    same_bits(c, want, m, n - j0, ldc, "packed, tall, from column 64", k, trans_b, 2);
    free(a), free(b), free(p), free(c0), free(want), free(c);
    return true;
}

static void test_tall(void **state)
{
    (void)state;
    bool ran = check_tall(300, 161, 600, 3, false, false) &&
               check_tall(GF_CPU_SGEMM_MAX_M + 9, 200, 257, 0, true, true) &&
               check_tall(500, 100, 300, 1, false, false) &&
               check_tall(600, 100, 300, 1, false, true);
    if (!ran)
        skip();
}

static void test_refusals(void **state)
{
    (void)state;
    float x[64] __attribute__((aligned(64))) = {0};
    if (!gf_cpu_sgemm_pack_size(1, 1))
        skip();
    assert_int_equal(gf_cpu_sgemm_pack_size(0, 5), 0);
    assert_int_equal(gf_cpu_sgemm_pack_size(5, 0), 0);
    /* too many rows, a column range not starting a panel: not taken */
    assert_false(
        gf_cpu_sgemm_packed(1, GF_CPU_SGEMM_PACKED_MAX_M + 1, 1, 1, x, 1, x, 0, x, 1, false));
    assert_false(gf_cpu_sgemm_packed(1, 1, 1, 1, x, 1, x, 16, x, 1, false));
    assert_false(gf_cpu_sgemm_packed(1, 1, 1, 0, x, 1, x, 0, x, 1, false));
}

/* ---- the kernels' prepare hook ------------------------------------------------------ */

static struct gf_model *model;

static struct gf_node *node(const char *op, const char *domain, size_t n_in)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, domain, *domain ? 1 : 13), GF_OK);
    struct gf_value *ins[4], *y = gf_graph_new_value(model->graph, "y", NULL);
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    struct gf_node *n = gf_graph_add_node(model->graph, op, domain, "n0", n_in, ins, 1, &y);
    assert_non_null(n);
    return n;
}

static struct gf_tview view(int rank, const int64_t *dims)
{
    struct gf_tview t = {.dtype = GF_FLOAT};
    gf_tview_set_shape(&t, rank, dims);
    t.data = fill(t.nelem);
    return t;
}

/* Runs n on in (B is in[1]) on `threads` without, then with what the
 * kernel prepares from a fixed B: the same bits.  With `poison`, B's bytes
 * are NaNs once prepared, so every tile must have read the packed panels.
 * expect_packed: whether the kernel packs B (where AVX-512F is). */
static void run_both_tall(const struct gf_node *n, struct gf_tview *in, size_t n_in, int yrank,
                          const int64_t *ydims, bool expect_packed, int threads, bool poison,
                          bool tall)
{
    float *b_copy = NULL;
    struct gf_backend *be = gf_backend_get("cpu");
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    assert_non_null(k);
    assert_non_null(k->prepare);
    struct gf_tview y[2];
    for (int r = 0; r < 2; r++) {
        y[r] = (struct gf_tview){.dtype = GF_FLOAT};
        gf_tview_set_shape(&y[r], yrank, ydims);
        y[r].data = calloc(y[r].nelem, sizeof(float));
    }
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = &y[0], .n_out = 1,
                               .n_threads = threads, .backend = be};
    assert_int_equal(k->run(&a), GF_OK);
    assert_int_equal(k->prepared_size(&a), 0); /* nothing fixed */
    a.fixed_in = 1; /* A fixed, B not: nothing either */
    assert_int_equal(k->prepared_size(&a), 0);
    a.fixed_in = 2;
    size_t bytes = k->prepared_size(&a);
    if (!gf_cpu_sgemm_pack_size(1, 1) || !expect_packed) {
        assert_int_equal(bytes, 0);
    } else {
        assert_true(bytes > 0);
        void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
        assert_non_null(p);
        k->prepare(&a, p);
        if (tall) {
            b_copy = malloc(in[1].nelem * sizeof(float));
            assert_non_null(b_copy);
            memcpy(b_copy, in[1].data, in[1].nelem * sizeof(float));
        }
        if (poison)
            memset(in[1].data, 0xff, in[1].nelem * sizeof(float));
        a = (struct gf_kernel_args){.node = n, .in = in, .n_in = n_in, .out = &y[1], .n_out = 1,
                                    .n_threads = threads, .backend = be, .prepared = p};
        assert_int_equal(k->run(&a), GF_OK);
        free(p);
        if (tall) { /* the plain run was OpenBLAS's: against the reference */
            int64_t m = in[0].dims[0], kk = in[0].dims[1], nn = ydims[yrank - 1];
            memset(y[0].data, 0, y[0].nelem * sizeof(float));
            reference(m, nn, kk, in[0].data, kk, b_copy, nn, false, y[0].data, nn, false);
        }
        if (memcmp(y[0].data, y[1].data, y[0].nelem * sizeof(float)) != 0)
            fail_msg("%s on %d threads: prepared and plain runs differ", n->op_type, threads);
    }
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    free(y[0].data), free(y[1].data), free(b_copy);
}

static void run_both(const struct gf_node *n, struct gf_tview *in, size_t n_in, int yrank,
                     const int64_t *ydims, bool expect_packed, int threads, bool poison)
{
    run_both_tall(n, in, n_in, yrank, ydims, expect_packed, threads, poison, false);
}

static void test_kernels(void **state)
{
    (void)state;
    /* MatMul: A [2, 60, 300] (batches of rows), B [300, 70] */
    struct gf_node *n = node("MatMul", "", 2);
    for (int t = 1; t <= 2; t++) {
        struct gf_tview mm[2] = {view(3, (int64_t[]){2, 60, 300}), view(2, (int64_t[]){300, 70})};
        run_both(n, mm, 2, 3, (int64_t[]){2, 60, 70}, true, t, true);
    }
    /* 300 rows: past GF_CPU_SGEMM_MAX_M, packed (unprepared: OpenBLAS's,
     * so the prepared run against the reference); past
     * GF_CPU_SGEMM_PACKED_MAX_M nothing packed */
    struct gf_tview tall[2] = {view(2, (int64_t[]){300, 40}), view(2, (int64_t[]){40, 40})};
    run_both_tall(n, tall, 2, 2, (int64_t[]){300, 40}, true, 2, true, true);
    const int64_t rows = GF_CPU_SGEMM_PACKED_MAX_M + 1;
    struct gf_tview big[2] = {view(2, (int64_t[]){rows, 8}), view(2, (int64_t[]){8, 8})};
    run_both(n, big, 2, 2, (int64_t[]){rows, 8}, false, 2, false);
    /* Gemm, transB, a bias row */
    n = node("Gemm", "", 3);
    assert_int_equal(gf_node_set_attr_int(n, "transB", 1), GF_OK);
    struct gf_tview ge[3] = {view(2, (int64_t[]){33, 257}), view(2, (int64_t[]){45, 257}),
                             view(1, (int64_t[]){45})};
    run_both(n, ge, 3, 2, (int64_t[]){33, 45}, true, 2, true);
    /* MatMulEpilogue, transB (a tied head), bias, GELU: column tiles of 224
     * on 2 threads (panels); of 432 on 1 (every other tile starts inside a
     * panel and reads B as it lies: not poisoned) */
    n = node("MatMulEpilogue", "graphfuse", 3);
    assert_int_equal(gf_node_set_attr_int(n, "transB", 1), GF_OK);
    assert_int_equal(gf_node_set_attr_string(n, "activation", "gelu"), GF_OK);
    for (int t = 1; t <= 2; t++) {
        struct gf_tview me[3] = {view(3, (int64_t[]){1, 24, 64}),
                                 view(2, (int64_t[]){2100, 64}), view(1, (int64_t[]){2100})};
        run_both(n, me, 3, 3, (int64_t[]){1, 24, 2100}, true, t, t == 2);
    }
    /* alpha 2: not the sgemm's product, nothing packed */
    n = node("MatMulEpilogue", "graphfuse", 2);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", 2.0f), GF_OK);
    struct gf_tview al[2] = {view(2, (int64_t[]){8, 64}), view(2, (int64_t[]){64, 40})};
    run_both(n, al, 2, 2, (int64_t[]){8, 40}, false, 2, false);
}

/* ---- a session ------------------------------------------------------------------------ */

/* Y = X @ W, W an initializer ([k, n]); W a graph input too when w_input. */
static const char *session_profile(bool w_input, char *buf, size_t len, float *y_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "", 13), GF_OK);
    struct gf_graph *g = model->graph;
    const int64_t m = 16, k = 40, n = 50;
    struct gf_value *x = gf_graph_new_value(g, "x", NULL), *w = gf_graph_new_value(g, "w", NULL);
    struct gf_value *y = gf_graph_new_value(g, "y", NULL);
    gf_value_set_tensor_type(x, GF_FLOAT, 2, (struct gf_dim[]){{.value = m}, {.value = k}});
    struct gf_tensor *wt = gf_tensor_new(model, "w", GF_FLOAT, 2, (int64_t[]){k, n}, NULL);
    assert_non_null(wt);
    for (size_t i = 0; i < wt->nelem; i++)
        ((float *)wt->data)[i] = (float)((i * 7) % 13) - 6.0f;
    assert_int_equal(gf_value_set_initializer(w, wt), GF_OK);
    assert_int_equal(gf_graph_add_input(g, x), GF_OK);
    if (w_input)
        assert_int_equal(gf_graph_add_input(g, w), GF_OK);
    assert_non_null(gf_graph_add_node(g, "MatMul", "", "mm", 2, (struct gf_value *[]){x, w}, 1,
                                      &y));
    assert_int_equal(gf_graph_add_output(g, y), GF_OK);
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 2, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(model, &o, &s), GF_OK);
    struct gf_tensor *xt = gf_tensor_new(model, "x", GF_FLOAT, 2, (int64_t[]){m, k}, NULL);
    assert_non_null(xt);
    for (size_t i = 0; i < xt->nelem; i++)
        ((float *)xt->data)[i] = (float)((i * 5) % 11) - 5.0f;
    struct gf_tensor **out;
    size_t n_out;
    assert_int_equal(gf_session_run(s, 1, (struct gf_tensor *const[]){xt}, &out, &n_out),
                     GF_OK);
    memcpy(y_out, out[0]->data, (size_t)(m * n) * sizeof(float));
    FILE *f = fmemopen(buf, len, "w");
    assert_non_null(f);
    gf_session_print_profile(s, f);
    fclose(f);
    gf_session_free(s);
    return buf;
}

static void test_session(void **state)
{
    (void)state;
    static char prof[2][8192];
    static float y[2][16 * 50];
    session_profile(false, prof[0], sizeof(prof[0]), y[0]);
    session_profile(true, prof[1], sizeof(prof[1]), y[1]);
    /* the graph input may change between runs: never packed; W [40, 50]
     * packed is 40 rows of 64 columns */
    assert_null(strstr(prof[1], "prepared inputs"));
    if (gf_cpu_sgemm_pack_size(1, 1))
        assert_non_null(strstr(prof[0], "prepared inputs 10240 bytes: 1 node"));
    /* (small integers: every sum exact) */
    assert_memory_equal(y[0], y[1], sizeof(y[0]));
}

static int teardown(void **state)
{
    (void)state;
    gf_model_free(model);
    model = NULL;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_tall),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
