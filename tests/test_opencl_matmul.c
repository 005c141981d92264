/* The OpenCL MatMul, Gemm and MatMulEpilogue kernels' tiles
 * (kernels/opencl/matmul.c; the ops themselves on every backend:
 * test_backend_matmul.c): a sweep of the knob space on two odd shapes
 * (MatMul with rows aligned for the vector loads, MatMulEpilogue with
 * unaligned rows), a few configs on large odd shapes transposed both ways;
 * float16 and bfloat16 on the large tiles; the knob space itself (a small
 * default, the large tiles in it); configs a smaller device cannot run
 * (its limits lowered here) refused, and passed over by the autotuner; a
 * config outside the space refused; the types the kernels take.
 *
 * Every config is its own program (its tiles are compile-time constants),
 * and PoCL compiles each for a few seconds, so the sweeps run a covering
 * subset by default: programs holding every pair of values of two knobs,
 * each run with both vec values (a kernel argument, not a build), among
 * them the default, the largest tiles (128 x 128 with 1024 work-items, and
 * with 8 x 8 per thread) and the other big_cfgs; the large shapes run
 * untransposed, and both transposed on the square and the small big_cfgs
 * (A's and B's loads do not depend on each other; every transpose: the
 * default config, test_backend_matmul.c),
 * fp16 and bf16 likewise on a tall 128 x 32 tile.  A config that runs must
 * match the CPU.  GRAPHFUSE_TEST_ALL_CONFIGS=1 runs all 72 configs, every
 * transpose with every config and the halves on 8 x 8 per thread too:
 * what the GPU machine runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gf_tune.h"
#include "opencl/ocl.h"
#include "backend_util.h"
#include "matmul_fixture.h"

static size_t real_max_wg; /* the device's limits while a test lowers them */
static cl_ulong real_local_mem;

static int teardown(void **state)
{
    (void)state;
    if (real_max_wg) {
        gf_cl_of(bt_backend())->max_wg = real_max_wg;
        gf_cl_of(bt_backend())->local_mem = real_local_mem;
        real_max_wg = 0;
    }
    mm_release();
    return 0;
}

/* ---- the knob space ------------------------------------------------------------------ */

static const struct gf_kernel *cl_kernel_for(const char *op, const char *domain)
{
    struct gf_node *n = node(op, domain, 2);
    struct gf_tview in[2] = {bt_view(GF_FLOAT, NULL, DIMS(2, 2)),
                             bt_view(GF_FLOAT, NULL, DIMS(2, 2))};
    const struct gf_kernel *k = gf_kernel_find(bt_backend(), n, in, 2);
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
    need_backend();
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
 * one with GRAPHFUSE_TEST_ALL_CONFIGS=1; else programs (tile_m, tile_n,
 * tile_k, wpt: the build's constants) each run with every vec (a kernel
 * argument: no build of its own), the default's first, then the largest
 * config's and big_cfgs' (built for test_configs_large anyway), then,
 * greedily, the program covering the most pairs of values of two of its
 * knobs not yet run, until every such pair has run.  Every vec runs with
 * every program, so every pair of values of two knobs of k runs (the
 * coverage of bt_sweep): 22 configs in 11 builds, where bt_sweep's 11
 * configs and the extras took 16 builds. */
static size_t sweep_configs(const struct gf_kernel *k, size_t *out)
{
    size_t space = gf_tune_space_size(k);
    assert_true(space <= 72);
    if (bt_all_configs())
        return bt_sweep(k, out, 72);
    assert_int_equal(k->n_knobs, 5);
    assert_string_equal(k->knobs[4].name, "vec");
    enum { NP = 4 }; /* the program's knobs: all but vec, the last */
    size_t nv = (size_t)k->knobs[4].n_values, progs = space / nv, n = 0;
    static bool covered[NP][NP][BT_MAX_VALUES][BT_MAX_VALUES];
    memset(covered, 0, sizeof(covered));
    size_t left = 0;
    for (size_t i = 0; i < NP; i++)
        for (size_t j = i + 1; j < NP; j++)
            left += (size_t)k->knobs[i].n_values * (size_t)k->knobs[j].n_values;
    const int *extra[N_BIG + 1] = {largest_cfg};
    for (size_t i = 0; i < N_BIG; i++)
        extra[i + 1] = big_cfgs[i];
    /* program p: config p with vec = values[0] (vec varies slowest) */
    size_t seeds[N_BIG + 2] = {0}, n_seeds = 1;
    for (size_t i = 0; i < N_BIG + 1; i++)
        seeds[n_seeds++] = config_number(k, extra[i]) % progs;
    for (size_t s = 0;; s++) {
        size_t p = 0;
        if (s < n_seeds) {
            p = seeds[s];
        } else {
            if (left == 0)
                break;
            size_t gain_best = 0;
            for (size_t c = 0; c < progs; c++) {
                int idx[BT_MAX_KNOBS];
                bt_config_idx(k, c, idx);
                size_t gain = 0;
                for (size_t i = 0; i < NP; i++)
                    for (size_t j = i + 1; j < NP; j++)
                        gain += !covered[i][j][idx[i]][idx[j]];
                if (gain > gain_best) {
                    gain_best = gain;
                    p = c;
                }
            }
        }
        int idx[BT_MAX_KNOBS];
        bt_config_idx(k, p, idx);
        for (size_t i = 0; i < NP; i++)
            for (size_t j = i + 1; j < NP; j++)
                if (!covered[i][j][idx[i]][idx[j]]) {
                    covered[i][j][idx[i]][idx[j]] = true;
                    left--;
                }
        for (size_t v = 0; v < nv; v++) {
            size_t c = p + v * progs, j = 0;
            while (j < n && out[j] != c)
                j++;
            if (j == n) {
                assert_true(n < 72);
                out[n++] = c;
            }
        }
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
        enum gf_status st = bt_run(n, in, n_in, 0, y, 1, cfg, res);
        free(res[0]);
        bool wide, big = needs_big_device(k, cfg, &wide);
        if (st == GF_ERR_UNSUPPORTED && big) {
            const char *msg = gf_last_error();
            if (!strstr(msg, "work-items") && !strstr(msg, "local memory"))
                fail_msg("config %zu refused without naming the limit: %s", c, msg);
            continue;
        }
        bt_name_config(k, cfg);
        bt_compare_cfg(n, in, n_in, 0, y, 1, cfg, rtol(), atol);
        bt_config_name[0] = 0;
        ran++;
    }
    return ran;
}

/* The sweep (every config with GRAPHFUSE_TEST_ALL_CONFIGS=1): one MatMul
 * whose rows allow float4 loads, one MatMulEpilogue whose rows do not. */
static void test_all_configs(void **state)
{
    (void)state;
    need_backend();
    const struct gf_kernel *k = cl_kernel_for("MatMul", "");
    size_t space = gf_tune_space_size(k), swept;
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(67, 36)), rnd(DIMS(36, 44))};
    struct gf_tview y = bt_view(GF_FLOAT, NULL, DIMS(67, 44));
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
    y = bt_view(GF_FLOAT, NULL, DIMS(29, 21));
    assert_true(compare_configs(k, n, min, 4, &y, 2.5 * atol_for(13), &swept) > swept / 2);
}

/* Whether transposes (ta, tb) run with a config other than the first
 * (each transpose is its own program): neither or both, unless
 * GRAPHFUSE_TEST_ALL_CONFIGS=1.  A's loads and B's do not depend on each
 * other, so this still has every load of A and of B with every config. */
static bool mixed_transposes(int ta, int tb)
{
    return ta == tb || bt_all_configs();
}

/* Whether big_cfgs[i] runs transposed: the square tile (slices through
 * registers) and the small one (slices copied straight) are the two ways
 * of loading a slice; the tall and the wide tile only with
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 (each transposed build of an 8 x 8 tile
 * costs PoCL about 10 s). */
static bool transposed_big(size_t i)
{
    return i == 0 || i == N_BIG - 1 || bt_all_configs();
}

/* The large-tile configs on larger odd shapes, untransposed and (see
 * transposed_big) both transposed (mixed_transposes: every way with
 * GRAPHFUSE_TEST_ALL_CONFIGS=1; A's loads and B's do not depend on each
 * other, and the default config runs every transpose in
 * test_backend_matmul.c). */
static void test_configs_large(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < N_BIG; i++) {
        matmul(DIMS(257, 129), DIMS(129, 1000), DIMS(257, 1000), big_cfgs[i]);
        matmul(DIMS(3, 130, 67), DIMS(3, 67, 99), DIMS(3, 130, 99), big_cfgs[i]);
        for (int t = 0; t < 4; t++)
            if (mixed_transposes(t & 1, t >> 1) && (t == 0 || transposed_big(i)))
                gemm(t & 1, t >> 1, 0.5f, 2, 130, 257, 99, 1, (int64_t[]){99}, big_cfgs[i]);
        if (transposed_big(i))
            mme(&mme_cases[4], big_cfgs[i]);
        if (mixed_transposes(mme_cases[9].ta, mme_cases[9].tb))
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
    need_backend();
    const struct gf_kernel *k = cl_kernel_for("MatMul", "");
    struct gf_cl *cl = gf_cl_of(bt_backend());
    real_max_wg = cl->max_wg;
    real_local_mem = cl->local_mem;
    cl->max_wg = 256;
    cl->local_mem = 32768;
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(67, 36)), rnd(DIMS(36, 44))};
    struct gf_tview y = bt_view(GF_FLOAT, NULL, DIMS(67, 44));
    size_t sweep[72], swept = sweep_configs(k, sweep), refused = 0;
    for (size_t s = 0; s < swept; s++) {
        size_t c = sweep[s];
        int cfg[GF_TUNE_MAX_KNOBS];
        gf_tune_config_at(k, c, cfg);
        bool wide, big = needs_big_device(k, cfg, &wide);
        void *res[1];
        enum gf_status st = bt_run(n, in, 2, 0, &y, 1, cfg, res);
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
    const struct gf_kernel *kt = bt_all_configs() ? k : &kcut;
    if (kt != k)
        refused = 3;
    size_t space = gf_tune_space_size(kt);
    struct gf_tview tin[2] = {bt_view(GF_FLOAT, NULL, DIMS(67, 36)),
                              bt_view(GF_FLOAT, NULL, DIMS(36, 44))};
    struct gf_tune_opts o = {.budget = (int)space, .repeats = 1, .warmup = 1, .sample_ms = 0.1};
    struct gf_tune_result r;
    assert_int_equal(gf_tune_node(bt_backend(), n, tin, 2, &y, 1, &kt, 1, kt, &o, &r),
                     GF_OK);
    assert_int_equal(r.n_tried, space);
    assert_int_equal(r.n_failed, refused);
    assert_int_equal(r.n_rejected, 0);
    assert_ptr_equal(r.choice.kernel, kt);
    void *res[1];
    assert_int_equal(bt_run(n, in, 2, 0, &y, 1, r.choice.config, res), GF_OK);
    free(res[0]);
}

/* ---- float16 / bfloat16 storage ------------------------------------------------------- */

/* A tall tile of 4 x 4 per thread (256 work-items, as big_cfgs[0]: any
 * device that runs that one runs this) */
static const int half_cfg[5] = {128, 32, 16, 4, 4};

/* half_cfg as mixed_transposes says, and with GRAPHFUSE_TEST_ALL_CONFIGS=1
 * big_cfgs[0] (128 x 128, 8 x 8 per thread) too: the 16-bit loads and
 * stores (storage.cl) are the same code in every config, and the 8 x 8
 * builds are PoCL's slowest (the default config: test_backend_matmul.c). */
static void half_cases(enum gf_dtype dt)
{
    need_backend();
    for (size_t c = 0; c < (bt_all_configs() ? 2 : 1); c++) {
        const int *cfg = c ? big_cfgs[0] : half_cfg;
        dtype = dt;
        matmul(DIMS(67, 36), DIMS(36, 44), DIMS(67, 44), cfg);
        matmul(DIMS(130, 257), DIMS(257, 99), DIMS(130, 99), cfg);
        matmul(DIMS(2, 1, 5, 33), DIMS(3, 33, 9), DIMS(2, 3, 5, 9), cfg);
        for (int t = 0; t < 4; t++)
            if (mixed_transposes(t & 1, t >> 1))
                gemm(t & 1, t >> 1, 0.5f, -2, 33, 129, 65, 2, (int64_t[]){33, 1}, cfg);
        for (size_t i = 0; i < N_MME; i++)
            if (mixed_transposes(mme_cases[i].ta, mme_cases[i].tb))
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

/* ---- errors and types ------------------------------------------------------------------ */

static void test_config_outside(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {rnd(DIMS(3, 4)), rnd(DIMS(4, 6))};
    struct gf_tview y = bt_view(GF_FLOAT, NULL, DIMS(3, 6));
    void *res[1];
    enum gf_status st = bt_run(n, in, 2, 0, &y, 1, (const int[]){32, 32, 16, 3, 4}, res);
    free(res[0]);
    assert_int_equal(st, GF_ERR_INVALID);
    const char *msg = gf_last_error();
    if (!strstr(msg, "n0") || !strstr(msg, "wpt=3 vec=4) is outside"))
        fail_msg("message lacks the node name or the config: %s", msg);
}

/* Float, float16 and bfloat16 run here when every operand has the type;
 * double and mixed types are left to the CPU. */
static void test_supports(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("MatMul", "", 2);
    struct gf_tview in[2] = {bt_view(GF_DOUBLE, NULL, DIMS(2, 2)),
                             bt_view(GF_DOUBLE, NULL, DIMS(2, 2))};
    assert_null(gf_kernel_find(bt_backend(), n, in, 2));
    const enum gf_dtype ok[] = {GF_FLOAT, GF_FLOAT16, GF_BFLOAT16};
    for (size_t i = 0; i < 3; i++) {
        in[0].dtype = in[1].dtype = ok[i];
        assert_non_null(gf_kernel_find(bt_backend(), n, in, 2));
    }
    in[1].dtype = GF_FLOAT;
    assert_null(gf_kernel_find(bt_backend(), n, in, 2));
}

int main(void)
{
    bt_cur = bt_only("opencl");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_space, teardown),
        cmocka_unit_test_teardown(test_configs_large, teardown),
        cmocka_unit_test_teardown(test_all_configs, teardown),
        cmocka_unit_test_teardown(test_small_device, teardown),
        cmocka_unit_test_teardown(test_float16, teardown),
        cmocka_unit_test_teardown(test_bfloat16, teardown),
        cmocka_unit_test_teardown(test_config_outside, teardown),
        cmocka_unit_test_teardown(test_supports, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
