/* OpenCL MatMul, Gemm and MatMulEpilogue (kernels/opencl/matmul.c) against
 * the CPU kernels on the same inputs: odd sizes that are no multiple of any
 * tile (1x1x1, 17x33x65, 130x257x99), broadcast batches, 1-D operands,
 * K = 0, transposes, Gemm's C in every broadcast form, every activation
 * and Bias / Res broadcast of MatMulEpilogue; every config of the knob
 * space on two odd shapes (one with aligned rows for the vector loads, one
 * transposed with unaligned rows); and the errors (bad shapes, a config
 * outside the space), which name the node.  Tolerance: 1e-5 relative plus
 * 2e-6 sqrt(K) absolute (inputs in [-1, 1]). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "opencl_util.h"

#define RTOL 1e-5

static struct gf_model *model;
static void *bufs[64];
static size_t n_bufs;

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
    gf_model_free(model);
    model = NULL;
    return 0;
}

static void need_opencl(void)
{
    if (!oclt_backend())
        skip();
}

/* A fresh model (ai.onnx 17, graphfuse 1) holding one node `op` named n0. */
static struct gf_node *node(const char *op, const char *domain, size_t n_in)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "", 17), GF_OK);
    assert_int_equal(gf_model_set_opset(model, "graphfuse", 1), GF_OK);
    struct gf_value *ins[8], *out = gf_graph_new_value(model->graph, NULL, "y");
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    struct gf_node *n = gf_graph_add_node(model->graph, op, domain, "n0", n_in, ins, 1, &out);
    assert_non_null(n);
    assert_int_not_equal(n->op, GF_OP_UNKNOWN);
    return n;
}

/* A view of random floats in [-1, 1) (freed at teardown). */
static struct gf_tview rnd(int rank, const int64_t *dims)
{
    struct gf_tview v = oclt_view(GF_FLOAT, NULL, rank, dims);
    assert_true(n_bufs < 64);
    float *p = bufs[n_bufs++] = malloc(v.nelem * sizeof(float) + 4);
    oclt_fill(p, v.nelem, -1, 1, (unsigned)(n_bufs * 7919 + v.nelem));
    v.data = p;
    v.host = p;
    return v;
}

static const struct gf_tview NONE = {.dtype = GF_UNDEFINED};

static double atol_for(int64_t k)
{
    return 2e-6 * sqrt((double)(k > 1 ? k : 1));
}

/* MatMul of A [ad] and B [bd] into Y [yd]; cfg NULL: the default config. */
static void matmul(int ar, const int64_t *ad, int br, const int64_t *bd, int yr,
                   const int64_t *yd, const int *cfg)
{
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(ar, ad), rnd(br, bd)};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, yr, yd);
    oclt_compare_cfg(n, in, 2, 0, &y, 1, cfg, RTOL, atol_for(ad[ar - 1]));
}

static void test_matmul_shapes(void **state)
{
    (void)state;
    need_opencl();
    matmul(DIMS(1, 1), DIMS(1, 1), DIMS(1, 1), NULL);
    matmul(DIMS(17, 33), DIMS(33, 65), DIMS(17, 65), NULL);
    matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), NULL);
    matmul(DIMS(64, 64), DIMS(64, 64), DIMS(64, 64), NULL);   /* whole tiles */
    matmul(DIMS(7, 1000), DIMS(1000, 3), DIMS(7, 3), NULL);   /* long K */
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

/* Gemm with C of rank cr (-1: none). */
static void gemm(int ta, int tb, float alpha, float beta, int64_t m, int64_t k, int64_t nn,
                 int cr, const int64_t *cd, const int *cfg)
{
    struct gf_node *n = node("Gemm", "", 3);
    assert_int_equal(gf_node_set_attr_int(n, "transA", ta), GF_OK);
    assert_int_equal(gf_node_set_attr_int(n, "transB", tb), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", alpha), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "beta", beta), GF_OK);
    int64_t ad[2] = {ta ? k : m, ta ? m : k}, bd[2] = {tb ? nn : k, tb ? k : nn};
    struct gf_tview in[3] = {rnd(2, ad), rnd(2, bd), cr >= 0 ? rnd(cr, cd) : NONE};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, DIMS(m, nn));
    oclt_compare_cfg(n, in, 3, 0, &y, 1, cfg, RTOL, atol_for(k) * (fabs(alpha) + 1));
}

static void test_gemm(void **state)
{
    (void)state;
    need_opencl();
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
}

struct mme_case {
    int ta, tb;
    float alpha, beta;
    const char *act;
    int ar, br, biasr, resr; /* ranks; -1: input absent */
    int64_t ad[4], bd[4], biasd[4], resd[4];
    int yr;
    int64_t yd[4];
};

static void mme(const struct mme_case *c, const int *cfg)
{
    struct gf_node *n = node("MatMulEpilogue", "graphfuse", 4);
    assert_int_equal(gf_node_set_attr_int(n, "transA", c->ta), GF_OK);
    assert_int_equal(gf_node_set_attr_int(n, "transB", c->tb), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", c->alpha), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "beta", c->beta), GF_OK);
    assert_int_equal(gf_node_set_attr_string(n, "activation", c->act), GF_OK);
    struct gf_tview in[4] = {rnd(c->ar, c->ad), rnd(c->br, c->bd),
                             c->biasr >= 0 ? rnd(c->biasr, c->biasd) : NONE,
                             c->resr >= 0 ? rnd(c->resr, c->resd) : NONE};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, c->yr, c->yd);
    int64_t k = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
    oclt_compare_cfg(n, in, 4, 0, &y, 1, cfg, RTOL, atol_for(k) * (fabs(c->alpha) + 1));
}

static const struct mme_case mme_cases[] = {
    {0, 0, 1, 1, "", 2, 2, 1, -1, {17, 33}, {33, 65}, {65}, {0}, 2, {17, 65}},
    {0, 0, 1, 1, "relu", 2, 2, 1, 2, {17, 33}, {33, 65}, {65}, {17, 65}, 2, {17, 65}},
    {0, 1, 0.5f, 2, "gelu", 3, 2, 1, 3, {3, 9, 40}, {21, 40}, {21}, {3, 9, 21}, 3, {3, 9, 21}},
    {1, 0, 1, -1, "gelu_tanh", 3, 3, 2, 1, {2, 40, 9}, {2, 40, 21}, {9, 1}, {21}, 3,
     {2, 9, 21}},
    {1, 1, 2, 1, "silu", 4, 3, 3, -1, {2, 1, 33, 5}, {3, 7, 33}, {3, 1, 7}, {0}, 4,
     {2, 3, 5, 7}},
    {0, 0, 1, 0.5f, "tanh", 1, 3, -1, 2, {30}, {4, 30, 11}, {0}, {4, 11}, 2, {4, 11}},
    {0, 0, 1, 1, "sigmoid", 3, 1, 1, 1, {4, 6, 30}, {30}, {1}, {6}, 2, {4, 6}},
    {0, 0, 1, 1, "", 2, 2, -1, 2, {130, 257}, {257, 99}, {0}, {130, 99}, 2, {130, 99}},
    {0, 0, 1, 1, "relu", 2, 2, 0, -1, {5, 0}, {0, 6}, {0}, {0}, 2, {5, 6}}, /* K = 0 */
};

static void test_matmul_epilogue(void **state)
{
    (void)state;
    need_opencl();
    for (size_t i = 0; i < sizeof(mme_cases) / sizeof(mme_cases[0]); i++)
        mme(&mme_cases[i], NULL);
}

/* Every config on two odd shapes: MatMul 37 x 36 x 44 and MatMulEpilogue
 * 29 x 12 x 20 with Bias, Res and gelu (edges in M and N; rows aligned for
 * 4-float loads, so that every vec is taken as asked and the two shapes
 * share their builds). */
static void test_all_configs(void **state)
{
    (void)state;
    need_opencl();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(37, 36)), rnd(DIMS(36, 44))};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, DIMS(37, 44));
    int runs = oclt_compare_all_configs(n, in, 2, 0, &y, 1, RTOL, atol_for(36));
    assert_int_equal(runs, 4 * 3 * 4 * 3);
    n = node("MatMulEpilogue", "graphfuse", 4);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", 1.5f), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "beta", 0.5f), GF_OK);
    assert_int_equal(gf_node_set_attr_string(n, "activation", "gelu"), GF_OK);
    struct gf_tview min[4] = {rnd(DIMS(29, 12)), rnd(DIMS(12, 20)), rnd(DIMS(20)),
                              rnd(DIMS(29, 20))};
    y = oclt_view(GF_FLOAT, NULL, DIMS(29, 20));
    runs = oclt_compare_all_configs(n, min, 4, 0, &y, 1, RTOL, 2.5 * atol_for(12));
    assert_int_equal(runs, 4 * 3 * 4 * 3);
}

/* A few configs on the larger odd shapes, transposed both ways. */
static void test_configs_large(void **state)
{
    (void)state;
    need_opencl();
    static const int cfgs[][4] = {{128, 8, 8, 4}, {16, 32, 1, 2}, {32, 16, 2, 1}};
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), cfgs[i]);
        gemm(1, 1, 1, 1, 130, 257, 99, 1, (int64_t[]){99}, cfgs[i]);
        mme(&mme_cases[4], cfgs[i]);
    }
}

static void expect_error(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                         const struct gf_tview *y, const int *cfg, const char *what)
{
    void *res[1];
    enum gf_status st = oclt_run_cl(n, in, n_in, 0, y, 1, cfg, res);
    free(res[0]);
    assert_int_equal(st, GF_ERR_INVALID);
    const char *msg = gf_last_error();
    if (!strstr(msg, "n0") || !strstr(msg, what))
        fail_msg("message lacks the node name or '%s': %s", what, msg);
}

static void test_errors(void **state)
{
    (void)state;
    need_opencl();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(3, 4)), rnd(DIMS(5, 6))};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, DIMS(3, 6));
    expect_error(n, in, 2, &y, NULL, "inner dims differ");
    in[1] = rnd(DIMS(4, 6));
    expect_error(n, in, 2, &y, (const int[]){64, 16, 3, 4}, "outside");
    y = oclt_view(GF_FLOAT, NULL, DIMS(3, 7));
    expect_error(n, in, 2, &y, NULL, "shape");
    in[0] = rnd(DIMS(2, 3, 4));
    in[1] = rnd(DIMS(3, 4, 6));
    y = oclt_view(GF_FLOAT, NULL, DIMS(2, 3, 6));
    expect_error(n, in, 2, &y, NULL, "broadcast");
    n = node("MatMulEpilogue", "graphfuse", 4);
    assert_int_equal(gf_node_set_attr_string(n, "activation", "swish"), GF_OK);
    struct gf_tview m[4] = {rnd(DIMS(3, 4)), rnd(DIMS(4, 6)), NONE, NONE};
    y = oclt_view(GF_FLOAT, NULL, DIMS(3, 6));
    expect_error(n, m, 4, &y, NULL, "swish");
    assert_int_equal(gf_node_set_attr_string(n, "activation", ""), GF_OK);
    m[2] = rnd(DIMS(4));
    expect_error(n, m, 4, &y, NULL, "Bias");
    n = node("Gemm", "", 3);
    struct gf_tview g[3] = {rnd(DIMS(3, 4)), rnd(DIMS(4, 6)), rnd(DIMS(2, 6))};
    expect_error(n, g, 3, &y, NULL, "C [2,6]");
}

/* Double operands are left to the CPU. */
static void test_supports(void **state)
{
    (void)state;
    need_opencl();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {oclt_view(GF_DOUBLE, NULL, DIMS(2, 2)),
                             oclt_view(GF_DOUBLE, NULL, DIMS(2, 2))};
    assert_null(gf_kernel_find(oclt_backend(), n, in, 2));
    in[0].dtype = in[1].dtype = GF_FLOAT;
    assert_non_null(gf_kernel_find(oclt_backend(), n, in, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_matmul_shapes, teardown),
        cmocka_unit_test_teardown(test_gemm, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue, teardown),
        cmocka_unit_test_teardown(test_configs_large, teardown),
        cmocka_unit_test_teardown(test_all_configs, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_supports, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
