/* MatMul, Gemm and MatMulEpilogue of every backend against the CPU kernels
 * on the same inputs: odd sizes that are no multiple of any tile (1, 17,
 * 33, 67, 129, 257, 1000), broadcast batches, 1-D operands, K = 0,
 * transposes, Gemm's alpha / beta and C in every broadcast form, every
 * activation and Bias / Res broadcast of MatMulEpilogue; float16 and
 * bfloat16 storage (where the backend has it); and the errors (bad shapes
 * and types), which name the node.  The OpenCL kernels' tiles and their
 * sweeps are test_opencl_matmul.c's.
 * Tolerance: 1e-5 relative plus 2e-6 sqrt(K) absolute (inputs in [-1, 1]);
 * float16 / bfloat16 outputs allow one rounding of their type on top.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "matmul_fixture.h"

static int teardown(void **state)
{
    (void)state;
    mm_release();
    return 0;
}

static void test_matmul_shapes(void **state)
{
    (void)state;
    need_backend();
    matmul(DIMS(1, 1), DIMS(1, 1), DIMS(1, 1), NULL);
    matmul(DIMS(17, 33), DIMS(33, 65), DIMS(17, 65), NULL);
    matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), NULL);
    matmul(DIMS(64, 64), DIMS(64, 64), DIMS(64, 64), NULL);   /* whole tiles */
    matmul(DIMS(7, 1000), DIMS(1000, 3), DIMS(7, 3), NULL);   /* long K */
    matmul(DIMS(1000, 129), DIMS(129, 257), DIMS(1000, 257), NULL);
    matmul(DIMS(1, 257), DIMS(257, 1000), DIMS(1, 1000), NULL); /* one row */
    matmul(DIMS(129, 1000), DIMS(1000, 1), DIMS(129, 1), NULL); /* one column */
    matmul(DIMS(5, 0), DIMS(0, 6), DIMS(5, 6), NULL);         /* K = 0: zeros */
    /* broadcast batches: [2,1,5,7] x [3,7,9] -> [2,3,5,9] */
    matmul(DIMS(2, 1, 5, 7), DIMS(3, 7, 9), DIMS(2, 3, 5, 9), NULL);
    matmul(DIMS(4, 33, 17), DIMS(4, 17, 20), DIMS(4, 33, 20), NULL);
    matmul(DIMS(3, 17, 33), DIMS(33, 20), DIMS(3, 17, 20), NULL); /* B shared: rows folded */
    matmul(DIMS(17, 33), DIMS(3, 33, 20), DIMS(3, 17, 20), NULL); /* A shared */
    /* 1-D operands */
    matmul(DIMS(33), DIMS(2, 33, 7), DIMS(2, 7), NULL);
    matmul(DIMS(2, 5, 33), DIMS(33), DIMS(2, 5), NULL);
    matmul(DIMS(129), DIMS(129), 0, (int64_t[]){1}, NULL);    /* a scalar */
}

static void test_gemm(void **state)
{
    (void)state;
    need_backend();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm(ta, tb, 1, 1, 17, 33, 65, -1, NULL, NULL);
            gemm(ta, tb, 0.5f, -2, 130, 99, 257, 1, (int64_t[]){257}, NULL);
        }
    gemm(0, 1, 1.5f, 0.25f, 33, 40, 7, 2, (int64_t[]){33, 1}, NULL);
    gemm(1, 0, 1, 3, 33, 40, 7, 2, (int64_t[]){1, 7}, NULL);
    gemm(0, 0, 1, 1, 33, 40, 7, 2, (int64_t[]){33, 7}, NULL);
    gemm(0, 0, 2, 0.5f, 1, 1, 1, 0, NULL, NULL); /* scalar C */
    gemm(1, 1, 1, 1, 9, 0, 5, 1, (int64_t[]){1}, NULL);
    gemm(0, 1, 1, 1, 1000, 129, 257, 1, (int64_t[]){257}, NULL); /* a Linear layer */
}

static void test_matmul_epilogue(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < N_MME; i++)
        mme(&mme_cases[i], NULL);
}

/* ---- float16 / bfloat16 storage ------------------------------------------------------- */

/* The default config, transposed every way (test_opencl_matmul.c runs the
 * OpenCL kernels' large tiles on the same cases). */
static void half_cases(enum gf_dtype dt)
{
    need_backend();
    dtype = dt;
    matmul(DIMS(67, 36), DIMS(36, 44), DIMS(67, 44), NULL);
    matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), NULL);
    matmul(DIMS(2, 1, 5, 33), DIMS(3, 33, 9), DIMS(2, 3, 5, 9), NULL);
    for (int t = 0; t < 4; t++)
        gemm(t & 1, t >> 1, 0.5f, -2, 33, 129, 65, 2, (int64_t[]){33, 1}, NULL);
    for (size_t i = 0; i < N_MME; i++)
        mme(&mme_cases[i], NULL);
}

static void test_float16(void **state)
{
    (void)state;
    half_cases(GF_FLOAT16);
}

static void test_bfloat16(void **state)
{
    (void)state;
    half_cases(GF_BFLOAT16);
}

/* ---- errors ---------------------------------------------------------------------------- */

static void expect_error(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                         const struct gf_tview *y, const int *cfg, const char *what)
{
    void *res[1];
    enum gf_status st = bt_run(n, in, n_in, 0, y, 1, cfg, res);
    free(res[0]);
    assert_int_equal(st, GF_ERR_INVALID);
    const char *msg = gf_last_error();
    if (!strstr(msg, "n0") || !strstr(msg, what))
        fail_msg("message lacks the node name or '%s': %s", what, msg);
}

static void test_errors(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(3, 4)), rnd(DIMS(5, 6))};
    struct gf_tview y = bt_view(GF_FLOAT, NULL, DIMS(3, 6));
    expect_error(n, in, 2, &y, NULL, "inner dims differ");
    in[1] = rnd(DIMS(4, 6));
    y = bt_view(GF_FLOAT, NULL, DIMS(3, 7));
    expect_error(n, in, 2, &y, NULL, "shape");
    y = bt_view(GF_FLOAT16, NULL, DIMS(3, 6));
    expect_error(n, in, 2, &y, NULL, "output 0 is float16, expected float");
    in[0] = rnd(DIMS(2, 3, 4));
    in[1] = rnd(DIMS(3, 4, 6));
    y = bt_view(GF_FLOAT, NULL, DIMS(2, 3, 6));
    expect_error(n, in, 2, &y, NULL, "broadcast");
    n = node("MatMulEpilogue", "graphfuse", 4);
    assert_int_equal(gf_node_set_attr_string(n, "activation", "swish"), GF_OK);
    struct gf_tview m[4] = {rnd(DIMS(3, 4)), rnd(DIMS(4, 6)), NONE, NONE};
    y = bt_view(GF_FLOAT, NULL, DIMS(3, 6));
    expect_error(n, m, 4, &y, NULL, "swish");
    assert_int_equal(gf_node_set_attr_string(n, "activation", ""), GF_OK);
    m[2] = rnd(DIMS(4));
    expect_error(n, m, 4, &y, NULL, "Bias");
    n = node("Gemm", "", 3);
    struct gf_tview g[3] = {rnd(DIMS(3, 4)), rnd(DIMS(4, 6)), rnd(DIMS(2, 6))};
    expect_error(n, g, 3, &y, NULL, "C [2,6]");
}

/* Double and mixed types are left to the CPU (test_opencl_matmul.c: the
 * OpenCL kernels take float, float16 and bfloat16). */
static void test_supports(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("MatMul", "", 2);
    static double x[4]; /* views with data: the registry matches their dtype */
    struct gf_tview in[2] = {bt_view(GF_DOUBLE, x, DIMS(2, 2)), bt_view(GF_DOUBLE, x, DIMS(2, 2))};
    assert_null(gf_kernel_find(bt_backend(), n, in, 2));
    in[0].dtype = in[1].dtype = GF_FLOAT;
    assert_non_null(gf_kernel_find(bt_backend(), n, in, 2));
    in[0].dtype = GF_FLOAT16;
    assert_null(gf_kernel_find(bt_backend(), n, in, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_matmul_shapes, teardown),
        cmocka_unit_test_teardown(test_gemm, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue, teardown),
        cmocka_unit_test_teardown(test_float16, teardown),
        cmocka_unit_test_teardown(test_bfloat16, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_supports, teardown),
    };
    return bt_run_tests(tests, NULL, NULL);
}
