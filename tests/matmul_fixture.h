/*
 * matmul_fixture.h — the operands and cases of the MatMul, Gemm and
 * MatMulEpilogue tests (test_backend_matmul.c on every backend,
 * test_opencl_matmul.c for the OpenCL kernels' tiles): one node in a fresh
 * model, random operands of type `dtype` kept until mm_release(), and the
 * comparisons with the CPU (bt_compare_cfg; cfg NULL: the default config).
 * Include after backend_util.h.
 */
#ifndef GF_MATMUL_FIXTURE_H
#define GF_MATMUL_FIXTURE_H

#include "gf_half.h"

static struct gf_model *model;
static void *bufs[64];
static size_t n_bufs;
static enum gf_dtype dtype = GF_FLOAT; /* of the operands made by rnd() */

/* Frees the operands and the model (the tests' teardowns call it). */
static void mm_release(void)
{
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
    gf_model_free(model);
    model = NULL;
    dtype = GF_FLOAT;
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

/* A view of random values in [-1, 1) of type `dtype` (freed at teardown). */
static struct gf_tview rnd(int rank, const int64_t *dims)
{
    struct gf_tview v = bt_view(dtype, NULL, rank, dims);
    assert_true(n_bufs < 64);
    float *p = bufs[n_bufs++] = malloc(v.nelem * sizeof(float) + 4);
    assert_non_null(p);
    bt_fill(p, v.nelem, -1, 1, (unsigned)(n_bufs * 7919 + v.nelem));
    uint16_t *h = (uint16_t *)p; /* narrowed in place, front to back */
    for (size_t i = 0; dtype != GF_FLOAT && i < v.nelem; i++)
        h[i] = dtype == GF_FLOAT16 ? gf_float_to_half(p[i]) : gf_float_to_bf16(p[i]);
    v.data = p;
    v.host = p;
    return v;
}

static const struct gf_tview NONE = {.dtype = GF_UNDEFINED};

/* Relative tolerance: float's, or one rounding of the 16-bit type. */
static double rtol(void)
{
    return dtype == GF_FLOAT16 ? 1e-3 : dtype == GF_BFLOAT16 ? 8e-3 : 1e-5;
}

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
    struct gf_tview y = bt_view(dtype, NULL, yr, yd);
    bt_compare_cfg(n, in, 2, 0, &y, 1, cfg, rtol(), atol_for(ad[ar - 1]));
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
    struct gf_tview y = bt_view(dtype, NULL, DIMS(m, nn));
    bt_compare_cfg(n, in, 3, 0, &y, 1, cfg, rtol(), atol_for(k) * (fabs(alpha) + 1));
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
    struct gf_tview y = bt_view(dtype, NULL, c->yr, c->yd);
    int64_t k = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
    bt_compare_cfg(n, in, 4, 0, &y, 1, cfg, rtol(), atol_for(k) * (fabs(c->alpha) + 1));
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
    {0, 1, 1, 1, "gelu", 3, 2, 1, 3, {2, 129, 257}, {67, 257}, {67}, {2, 129, 67}, 3,
     {2, 129, 67}}, /* batches folded into rows, Linear with bias and residual */
};

#define N_MME (sizeof(mme_cases) / sizeof(mme_cases[0]))

#endif /* GF_MATMUL_FIXTURE_H */
