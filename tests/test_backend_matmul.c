/* OpenCL MatMul, Gemm and MatMulEpilogue (kernels/opencl/matmul.c) against
 * the CPU kernels on the same inputs: odd sizes that are no multiple of any
 * tile (1, 17, 33, 67, 129, 257, 1000), broadcast batches, 1-D operands,
 * K = 0, transposes, Gemm's alpha / beta and C in every broadcast form,
 * every activation and Bias / Res broadcast of MatMulEpilogue; a sweep of
 * the knob space on two odd shapes (MatMul with rows aligned for the vector
 * loads, MatMulEpilogue with unaligned rows), a few configs on large odd
 * shapes transposed both ways; float16 and bfloat16 storage; the knob
 * space itself (a small default, the large tiles in it); configs a smaller
 * device cannot run (its limits lowered here) refused, and passed over by
 * the autotuner; and the errors (bad shapes and types, a config outside the
 * space), which name the node.
 * Tolerance: 1e-5 relative plus 2e-6 sqrt(K) absolute (inputs in [-1, 1]);
 * float16 / bfloat16 outputs allow one rounding of their type on top.
 *
 * Every config is its own program (its tiles are compile-time constants),
 * and PoCL compiles each for a few seconds, so the sweeps run a covering
 * subset by default: the configs holding every pair of values of two knobs
 * (tests/opencl_util.h: 11 of the 72), the default, the largest tiles
 * (128 x 128 with 1024 work-items, and with 8 x 8 per thread) and the other
 * big_cfgs; the large shapes, fp16 and bf16 run every transpose on one
 * config and both untransposed and both transposed on the others (A's and
 * B's loads do not depend on each other).  A config that runs must match
 * the CPU.  GRAPHFUSE_TEST_ALL_CONFIGS=1 runs all 72 configs and every
 * transpose with every config: what the GPU machine runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gf_half.h"
#include "gf_tune.h"
#include "opencl/ocl.h"
#include "opencl_util.h"

static struct gf_model *model;
static void *bufs[64];
static size_t n_bufs;
static enum gf_dtype dtype = GF_FLOAT; /* of the operands made by rnd() */
static size_t real_max_wg;                /* the device's limits while a test lowers them */
static cl_ulong real_local_mem;

static int teardown(void **state)
{
    (void)state;
    if (real_max_wg) {
        gf_cl_of(oclt_backend())->max_wg = real_max_wg;
        gf_cl_of(oclt_backend())->local_mem = real_local_mem;
        real_max_wg = 0;
    }
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
    gf_model_free(model);
    model = NULL;
    dtype = GF_FLOAT;
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

/* A view of random values in [-1, 1) of type `dtype` (freed at teardown). */
static struct gf_tview rnd(int rank, const int64_t *dims)
{
    struct gf_tview v = oclt_view(dtype, NULL, rank, dims);
    assert_true(n_bufs < 64);
    float *p = bufs[n_bufs++] = malloc(v.nelem * sizeof(float) + 4);
    assert_non_null(p);
    oclt_fill(p, v.nelem, -1, 1, (unsigned)(n_bufs * 7919 + v.nelem));
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
    struct gf_tview y = oclt_view(dtype, NULL, yr, yd);
    oclt_compare_cfg(n, in, 2, 0, &y, 1, cfg, rtol(), atol_for(ad[ar - 1]));
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
    struct gf_tview y = oclt_view(dtype, NULL, DIMS(m, nn));
    oclt_compare_cfg(n, in, 3, 0, &y, 1, cfg, rtol(), atol_for(k) * (fabs(alpha) + 1));
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
    gemm(0, 1, 1, 1, 1000, 129, 257, 1, (int64_t[]){257}, NULL); /* a Linear layer */
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
    struct gf_tview y = oclt_view(dtype, NULL, c->yr, c->yd);
    int64_t k = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
    oclt_compare_cfg(n, in, 4, 0, &y, 1, cfg, rtol(), atol_for(k) * (fabs(c->alpha) + 1));
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

static void test_matmul_epilogue(void **state)
{
    (void)state;
    need_opencl();
    for (size_t i = 0; i < N_MME; i++)
        mme(&mme_cases[i], NULL);
}

/* ---- the knob space ------------------------------------------------------------------ */

static const struct gf_kernel *cl_kernel_for(const char *op, const char *domain)
{
    struct gf_node *n = node(op, domain, 2);
    struct gf_tview in[2] = {oclt_view(GF_FLOAT, NULL, DIMS(2, 2)),
                             oclt_view(GF_FLOAT, NULL, DIMS(2, 2))};
    const struct gf_kernel *k = gf_kernel_find(oclt_backend(), n, in, 2);
    assert_non_null(k);
    return k;
}

/* The value of knob `name` in cfg. */
static int knob(const struct gf_kernel *k, const int *cfg, const char *name)
{
    for (size_t i = 0; i < k->n_knobs; i++)
        if (strcmp(k->knobs[i].name, name) == 0)
            return cfg[i];
    fail_msg("no knob %s", name);
    return 0;
}

/* The default is small enough for any OpenCL device (at most 64
 * work-items, at most 16 KB of local memory for two tiles); the space
 * holds the large tiles a big GPU wants (128 x 128, 8 x 8 per thread) and
 * is one product of at most 100 configs. */
static void test_space(void **state)
{
    (void)state;
    need_opencl();
    const char *ops[][2] = {{"MatMul", ""}, {"Gemm", ""}, {"MatMulEpilogue", "graphfuse"}};
    for (size_t o = 0; o < 3; o++) {
        const struct gf_kernel *k = cl_kernel_for(ops[o][0], ops[o][1]);
        int def[16], size = 1;
        assert_true(k->n_knobs <= 16);
        for (size_t i = 0; i < k->n_knobs; i++) {
            def[i] = k->knobs[i].values[0];
            size *= k->knobs[i].n_values;
        }
        int tm = knob(k, def, "tile_m"), tn = knob(k, def, "tile_n");
        int tk = knob(k, def, "tile_k"), wpt = knob(k, def, "wpt");
        assert_true((tm / wpt) * (tn / wpt) <= 64);
        assert_true(2 * tk * (tm + tn) * 4 <= 16384);
        assert_true(size <= 100);
        bool big = false;
        int idx[16] = {0}, cfg[16];
        for (int c = 0; c < size; c++) {
            for (size_t i = 0, r = (size_t)c; i < k->n_knobs; i++) {
                idx[i] = (int)(r % (size_t)k->knobs[i].n_values);
                r /= (size_t)k->knobs[i].n_values;
                cfg[i] = k->knobs[i].values[idx[i]];
            }
            big |= knob(k, cfg, "tile_m") == 128 && knob(k, cfg, "tile_n") == 128 &&
                   knob(k, cfg, "wpt") == 8 && knob(k, cfg, "vec") == 4;
        }
        assert_true(big);
    }
}

/* Every config on two odd shapes: MatMul 67 x 36 x 44 (edges in M, N and
 * K; rows aligned for 4-float loads, so that every vec is taken as asked)
 * and MatMulEpilogue 29 x 13 x 21 with Bias, Res and gelu (rows unaligned:
 * scalar loads whatever vec says).  Neither transposes: the two share
 * their builds. */
/* Whether config cfg of k needs more than 256 work-items or 32 KiB of local
 * memory: more than some devices give (the H200's compiled kernels allow
 * fewer work-items than the device's 1024 when they need many registers). */
static bool needs_big_device(const struct gf_kernel *k, const int *cfg, bool *wide)
{
    int tm = knob(k, cfg, "tile_m"), tn = knob(k, cfg, "tile_n");
    int tk = knob(k, cfg, "tile_k"), wpt = knob(k, cfg, "wpt");
    *wide = (tm / wpt) * (tn / wpt) > 256;
    return *wide || 2 * tk * (tm + tn + 8) * 4 > 32768;
}

/* Configs unlike the default (tile_m, tile_n, tile_k, wpt, vec): the large
 * square tile, the tall and the wide one, and a small tile with 8 x 8 per
 * thread (16 work-items, slices copied without the register prefetch). */
static const int big_cfgs[][5] = {
    {128, 128, 8, 8, 4}, {128, 64, 16, 8, 4}, {32, 128, 8, 8, 1}, {32, 32, 16, 8, 4}};

#define N_BIG (sizeof(big_cfgs) / sizeof(big_cfgs[0]))

/* The largest config: 128 x 128 tiles of 4 x 4 per thread (1024
 * work-items), slices of 16 (34 KB of local memory). */
static const int largest_cfg[5] = {128, 128, 16, 4, 4};

/* Config number c of k (gf_tune_config_at's numbering) holding cfg. */
static size_t config_number(const struct gf_kernel *k, const int *cfg)
{
    size_t c = 0, stride = 1;
    for (size_t i = 0; i < k->n_knobs; i++) {
        int v = 0;
        while (v < k->knobs[i].n_values && k->knobs[i].values[v] != cfg[i])
            v++;
        assert_true(v < k->knobs[i].n_values);
        c += (size_t)v * stride;
        stride *= (size_t)k->knobs[i].n_values;
    }
    return c;
}

/* The configs the sweeps run, as config numbers of k (at most 72): every
 * one with GRAPHFUSE_TEST_ALL_CONFIGS=1, else the pairwise covering subset
 * of oclt_sweep (the default first), the largest config and big_cfgs. */
static size_t sweep_configs(const struct gf_kernel *k, size_t *out)
{
    size_t space = gf_tune_space_size(k);
    assert_true(space <= 72);
    size_t n = oclt_sweep(k, out, 72);
    if (n == space)
        return n;
    const int *extra[N_BIG + 1] = {largest_cfg};
    for (size_t i = 0; i < N_BIG; i++)
        extra[i + 1] = big_cfgs[i];
    for (size_t i = 0; i < N_BIG + 1; i++) {
        size_t c = config_number(k, extra[i]), j = 0;
        while (j < n && out[j] != c)
            j++;
        if (j == n)
            out[n++] = c;
    }
    return n;
}

/* The sweep's configs on node n: each matches the CPU kernel, or (only a
 * config needing a big device) the device refuses it with
 * GF_ERR_UNSUPPORTED naming the limit.  Returns how many ran; *swept: how
 * many were tried. */
static size_t compare_configs(const struct gf_kernel *k, const struct gf_node *n,
                              const struct gf_tview *in, size_t n_in, const struct gf_tview *y,
                              double atol, size_t *swept)
{
    size_t sweep[72], ran = 0;
    *swept = sweep_configs(k, sweep);
    for (size_t s = 0; s < *swept; s++) {
        size_t c = sweep[s];
        int cfg[GF_TUNE_MAX_KNOBS];
        gf_tune_config_at(k, c, cfg);
        void *res[1] = {NULL};
        enum gf_status st = oclt_run_cl(n, in, n_in, 0, y, 1, cfg, res);
        free(res[0]);
        bool wide, big = needs_big_device(k, cfg, &wide);
        if (st == GF_ERR_UNSUPPORTED && big) {
            const char *msg = gf_last_error();
            if (!strstr(msg, "work-items") && !strstr(msg, "local memory"))
                fail_msg("config %zu refused without naming the limit: %s", c, msg);
            continue;
        }
        oclt_name_config(k, cfg);
        oclt_compare_cfg(n, in, n_in, 0, y, 1, cfg, rtol(), atol);
        oclt_config_name[0] = 0;
        ran++;
    }
    return ran;
}

/* The sweep (every config with GRAPHFUSE_TEST_ALL_CONFIGS=1): one MatMul
 * whose rows allow float4 loads, one MatMulEpilogue whose rows do not. */
static void test_all_configs(void **state)
{
    (void)state;
    need_opencl();
    const struct gf_kernel *k = cl_kernel_for("MatMul", "");
    size_t space = gf_tune_space_size(k), swept;
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(67, 36)), rnd(DIMS(36, 44))};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, DIMS(67, 44));
    size_t ran = compare_configs(k, n, in, 2, &y, atol_for(36), &swept);
    printf("MatMul: %zu of %zu configs tried ran on this device (%zu in the space%s)\n", ran,
           swept, space, swept < space ? "; GRAPHFUSE_TEST_ALL_CONFIGS=1 tries every one" : "");
    assert_true(ran > swept / 2);
    k = cl_kernel_for("MatMulEpilogue", "graphfuse"); /* before node(): it frees n */
    n = node("MatMulEpilogue", "graphfuse", 4);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", 1.5f), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "beta", 0.5f), GF_OK);
    assert_int_equal(gf_node_set_attr_string(n, "activation", "gelu"), GF_OK);
    struct gf_tview min[4] = {rnd(DIMS(29, 13)), rnd(DIMS(13, 21)), rnd(DIMS(21)),
                              rnd(DIMS(29, 21))};
    y = oclt_view(GF_FLOAT, NULL, DIMS(29, 21));
    assert_true(compare_configs(k, n, min, 4, &y, 2.5 * atol_for(13), &swept) > swept / 2);
}

/* Whether transposes (ta, tb) run with a config other than the first
 * (each transpose is its own program): neither or both, unless
 * GRAPHFUSE_TEST_ALL_CONFIGS=1.  A's loads and B's do not depend on each
 * other, so this still has every load of A and of B with every config. */
static bool mixed_transposes(int ta, int tb)
{
    return ta == tb || oclt_all_configs();
}

/* The large-tile configs on larger odd shapes, transposed every way (the
 * first config; the others: mixed_transposes). */
static void test_configs_large(void **state)
{
    (void)state;
    need_opencl();
    for (size_t i = 0; i < N_BIG; i++) {
        matmul(DIMS(257, 129), DIMS(129, 1000), DIMS(257, 1000), big_cfgs[i]);
        matmul(DIMS(3, 130, 67), DIMS(3, 67, 99), DIMS(3, 130, 99), big_cfgs[i]);
        for (int t = 0; t < 4; t++)
            if (i == 0 || mixed_transposes(t & 1, t >> 1))
                gemm(t & 1, t >> 1, 0.5f, 2, 130, 257, 99, 1, (int64_t[]){99}, big_cfgs[i]);
        mme(&mme_cases[4], big_cfgs[i]);
        if (i == 0 || mixed_transposes(mme_cases[9].ta, mme_cases[9].tb))
            mme(&mme_cases[9], big_cfgs[i]);
        teardown(NULL);
    }
}

/* The sweep's configs (every config with GRAPHFUSE_TEST_ALL_CONFIGS=1) on a
 * device that allows 256 work-items and 32 KB of local memory (the OpenCL
 * backend's record of the device lowered): those that need more are
 * refused with GF_ERR_UNSUPPORTED naming the limit, the others run; the
 * autotuner, given a space (the whole one with GRAPHFUSE_TEST_ALL_CONFIGS=1,
 * else the 128 x 128 tiles: big_cfgs[0] first, which runs, then three
 * refused), counts the refused as failed and picks among the rest. */
static void test_small_device(void **state)
{
    (void)state;
    need_opencl();
    const struct gf_kernel *k = cl_kernel_for("MatMul", "");
    struct gf_cl *cl = gf_cl_of(oclt_backend());
    real_max_wg = cl->max_wg;
    real_local_mem = cl->local_mem;
    cl->max_wg = 256;
    cl->local_mem = 32768;
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(67, 36)), rnd(DIMS(36, 44))};
    struct gf_tview y = oclt_view(GF_FLOAT, NULL, DIMS(67, 44));
    size_t sweep[72], swept = sweep_configs(k, sweep), refused = 0;
    for (size_t s = 0; s < swept; s++) {
        size_t c = sweep[s];
        int cfg[GF_TUNE_MAX_KNOBS];
        gf_tune_config_at(k, c, cfg);
        bool wide, big = needs_big_device(k, cfg, &wide);
        void *res[1];
        enum gf_status st = oclt_run_cl(n, in, 2, 0, &y, 1, cfg, res);
        free(res[0]);
        assert_int_equal(st, wide || big ? GF_ERR_UNSUPPORTED : GF_OK);
        if (wide || big) {
            const char *msg = gf_last_error();
            if (!strstr(msg, "n0") || !strstr(msg, wide ? "work-items" : "local memory"))
                fail_msg("config %zu: %s", c, msg);
            refused++;
        }
    }
    assert_true(refused > 0 && refused < swept);
    /* the tuner's space: k's, or k's knobs cut to the 128 x 128 tiles with
     * tile_k 8 or 16, wpt 8 or 4, vec 4 (the first config, big_cfgs[0],
     * must run: the tuner stops when the default fails) */
    static const int v128[] = {128}, vtk[] = {8, 16}, vwpt[] = {8, 4}, vvec[] = {4};
    const struct gf_config_knob cut[] = {
        {"tile_m", 1, v128}, {"tile_n", 1, v128}, {"tile_k", 2, vtk}, {"wpt", 2, vwpt},
        {"vec", 1, vvec}};
    struct gf_kernel kcut = *k;
    assert_int_equal(k->n_knobs, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(k->knobs[i].name, cut[i].name);
    kcut.knobs = cut;
    const struct gf_kernel *kt = oclt_all_configs() ? k : &kcut;
    if (kt != k)
        refused = 3;
    size_t space = gf_tune_space_size(kt);
    struct gf_tview tin[2] = {oclt_view(GF_FLOAT, NULL, DIMS(67, 36)),
                              oclt_view(GF_FLOAT, NULL, DIMS(36, 44))};
    struct gf_tune_opts o = {.budget = (int)space, .repeats = 1, .warmup = 1, .sample_ms = 0.1};
    struct gf_tune_result r;
    assert_int_equal(gf_tune_node(oclt_backend(), n, tin, 2, &y, 1, &kt, 1, kt, &o, &r),
                     GF_OK);
    assert_int_equal(r.n_tried, space);
    assert_int_equal(r.n_failed, refused);
    assert_int_equal(r.n_rejected, 0);
    assert_ptr_equal(r.choice.kernel, kt);
    void *res[1];
    assert_int_equal(oclt_run_cl(n, in, 2, 0, &y, 1, r.choice.config, res), GF_OK);
    free(res[0]);
}

/* ---- float16 / bfloat16 storage ------------------------------------------------------- */

/* The default config transposed every way, big_cfgs[0] as
 * mixed_transposes says. */
static void half_cases(enum gf_dtype dt)
{
    need_opencl();
    for (size_t c = 0; c < 2; c++) {
        const int *cfg = c ? big_cfgs[0] : NULL;
        dtype = dt;
        matmul(DIMS(67, 36), DIMS(36, 44), DIMS(67, 44), cfg);
        matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), cfg);
        matmul(DIMS(2, 1, 5, 33), DIMS(3, 33, 9), DIMS(2, 3, 5, 9), cfg);
        for (int t = 0; t < 4; t++)
            if (c == 0 || mixed_transposes(t & 1, t >> 1))
                gemm(t & 1, t >> 1, 0.5f, -2, 33, 129, 65, 2, (int64_t[]){33, 1}, cfg);
        for (size_t i = 0; i < N_MME; i++)
            if (c == 0 || mixed_transposes(mme_cases[i].ta, mme_cases[i].tb))
                mme(&mme_cases[i], cfg);
        teardown(NULL);
    }
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
    expect_error(n, in, 2, &y, (const int[]){32, 32, 16, 3, 4}, "wpt=3 vec=4) is outside");
    y = oclt_view(GF_FLOAT, NULL, DIMS(3, 7));
    expect_error(n, in, 2, &y, NULL, "shape");
    y = oclt_view(GF_FLOAT16, NULL, DIMS(3, 6));
    expect_error(n, in, 2, &y, NULL, "output 0 is float16, expected float");
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

/* Float, float16 and bfloat16 run here when every operand has the type;
 * double and mixed types are left to the CPU. */
static void test_supports(void **state)
{
    (void)state;
    need_opencl();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {oclt_view(GF_DOUBLE, NULL, DIMS(2, 2)),
                             oclt_view(GF_DOUBLE, NULL, DIMS(2, 2))};
    assert_null(gf_kernel_find(oclt_backend(), n, in, 2));
    const enum gf_dtype ok[] = {GF_FLOAT, GF_FLOAT16, GF_BFLOAT16};
    for (size_t i = 0; i < 3; i++) {
        in[0].dtype = in[1].dtype = ok[i];
        assert_non_null(gf_kernel_find(oclt_backend(), n, in, 2));
    }
    in[1].dtype = GF_FLOAT;
    assert_null(gf_kernel_find(oclt_backend(), n, in, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_matmul_shapes, teardown),
        cmocka_unit_test_teardown(test_gemm, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue, teardown),
        cmocka_unit_test_teardown(test_space, teardown),
        cmocka_unit_test_teardown(test_configs_large, teardown),
        cmocka_unit_test_teardown(test_all_configs, teardown),
        cmocka_unit_test_teardown(test_small_device, teardown),
        cmocka_unit_test_teardown(test_float16, teardown),
        cmocka_unit_test_teardown(test_bfloat16, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_supports, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
