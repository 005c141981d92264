/* Every backend's reductions, Sum, SumToShape, softmax, layer normalization
 * and the losses, forward and backward (tests/backend_util.h), against the CPU
 * kernels on the same inputs: sizes 1, 7, 33, 129, 1000 and 4096 (no
 * multiple of the work-group), axes that are not last, broadcasting, NaN,
 * every config of the knob space on odd shapes; the losses' means are
 * bit-for-bit the same from run to run; bad labels (checked on the host, or
 * flagged by the device when there is no host copy), bad axes and shapes
 * are errors naming the node.  Tolerance 1e-5 relative, plus an absolute
 * term for sums with cancellation (the CPU sums in double).  Every op
 * again on fp16 and bf16 tensors, within one unit in the last place of
 * the CPU's result (Sum exactly: the same roundings); the backward ops,
 * which the CPU has in fp32 only, against the CPU on the inputs widened
 * to fp32 (backend_half.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "backend_half.h"

#define RTOL 1e-5

static struct gf_model *model;
static void *bufs[512];
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

/* A fresh model (ai.onnx `opset`, graphfuse 1) holding one node named n0. */
static struct gf_node *node(const char *op, const char *domain, int64_t opset, size_t n_in,
                            size_t n_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "", opset), GF_OK);
    assert_int_equal(gf_model_set_opset(model, "graphfuse", 1), GF_OK);
    struct gf_value *ins[8], *outs[4];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(model->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(model->graph, op, domain, "n0", n_in, ins, n_out, outs);
    assert_non_null(n);
    assert_int_not_equal(n->op, GF_OP_UNKNOWN);
    return n;
}

static void *keep(size_t bytes)
{
    assert_true(n_bufs < 512);
    return bufs[n_bufs++] = calloc(1, bytes + 8);
}

/* Random floats in [lo, hi) (freed at teardown). */
static struct gf_tview rnd(float lo, float hi, int rank, const int64_t *dims)
{
    struct gf_tview v = bt_view(GF_FLOAT, NULL, rank, dims);
    v.data = keep(v.nelem * sizeof(float));
    v.host = v.data;
    bt_fill(v.data, v.nelem, lo, hi, (unsigned)(n_bufs * 7919 + v.nelem));
    return v;
}

/* int64 (or int32) values. */
static struct gf_tview ints(enum gf_dtype dt, const int64_t *v, size_t n, int rank,
                            const int64_t *dims)
{
    struct gf_tview t = bt_view(dt, NULL, rank, dims);
    t.data = keep(n * 8);
    t.host = t.data;
    for (size_t i = 0; i < n; i++) {
        if (dt == GF_INT64)
            ((int64_t *)t.data)[i] = v[i];
        else
            ((int32_t *)t.data)[i] = (int32_t)v[i];
    }
    return t;
}

static struct gf_tview out(int rank, const int64_t *dims)
{
    return bt_view(GF_FLOAT, NULL, rank, dims);
}

static const struct gf_tview NONE = {.dtype = GF_UNDEFINED};

/* Float view v rounded to t (kept until teardown); v itself when t is
 * float or v is not a float view (labels, shapes, NONE). */
static struct gf_tview as_type(struct gf_tview v, enum gf_dtype t)
{
    if (t == GF_FLOAT || v.dtype != GF_FLOAT)
        return v;
    struct gf_tview h = v;
    uint16_t *d = keep(v.nelem * sizeof(uint16_t));
    for (size_t i = 0; i < v.nelem; i++) {
        float f = ((const float *)v.data)[i];
        d[i] = t == GF_FLOAT16 ? gf_float_to_half(f) : gf_float_to_bf16(f);
    }
    h.dtype = t;
    h.data = d;
    h.host = d;
    return h;
}

/* An output of type t (float for t = GF_FLOAT). */
static struct gf_tview out_t(enum gf_dtype t, int rank, const int64_t *dims)
{
    return bt_view(t, NULL, rank, dims);
}

/* The relative tolerance of results of type t. */
static double rtol_of(enum gf_dtype t)
{
    return t == GF_FLOAT ? RTOL : bth_ulp(t);
}

static const enum gf_dtype halves[] = {GF_FLOAT16, GF_BFLOAT16};

/* ==== Reduce{Sum,Mean,Max} ============================================================ */

struct red_case {
    int rank;
    int64_t dims[4];
    int n_axes; /* -1: attribute absent, no input */
    int64_t axes[4];
    int keepdims, noop;
};

static const struct red_case red_cases[] = {
    {1, {7}, -1, {0}, 1, 0},
    {1, {1000}, 1, {0}, 0, 0},
    {2, {33, 129}, 1, {1}, 1, 0},
    {2, {33, 129}, 1, {0}, 0, 0},
    {2, {33, 129}, 2, {0, 1}, 1, 0},
    {3, {2, 1000, 3}, 1, {1}, 1, 0},
    {3, {2, 1000, 3}, 2, {0, -1}, 0, 0},
    {3, {5, 4096, 1}, 1, {1}, 1, 0},
    {4, {4, 5, 6, 7}, 2, {1, 3}, 1, 0},
    {4, {4, 5, 6, 7}, 3, {0, 1, 2}, 0, 0},
    {2, {7, 33}, 0, {0}, 1, 1}, /* noop_with_empty_axes: a copy (Mean: x / 1) */
    {2, {3, 0}, 1, {1}, 1, 0},  /* empty reductions: 0, NaN, -inf */
};

/* Y's shape for a reduce case. */
static int red_shape(const struct red_case *c, int64_t *yd)
{
    bool r[4] = {false};
    for (int i = 0; i < c->rank; i++)
        r[i] = c->n_axes <= 0 && !c->noop;
    for (int k = 0; k < c->n_axes; k++)
        r[c->axes[k] < 0 ? c->axes[k] + c->rank : c->axes[k]] = true;
    int yr = 0;
    for (int i = 0; i < c->rank; i++)
        if (!r[i])
            yd[yr++] = c->dims[i];
        else if (c->keepdims)
            yd[yr++] = 1;
    return yr;
}

static size_t red_count(const struct red_case *c, const int64_t *yd, int yr)
{
    size_t nx = 1, ny = 1;
    for (int i = 0; i < c->rank; i++)
        nx *= (size_t)c->dims[i];
    for (int i = 0; i < yr; i++)
        ny *= (size_t)yd[i];
    return ny ? nx / ny : 1;
}

/* Axes as input 1 (with a host copy) or, as_attr, as the attribute; data
 * of type dt. */
static void red_one(const char *op, const struct red_case *c, bool as_attr, const int *cfg,
                    enum gf_dtype dt)
{
    struct gf_node *n = node(op, "", 18, 2, 1);
    assert_int_equal(gf_node_set_attr_int(n, "keepdims", c->keepdims), GF_OK);
    assert_int_equal(gf_node_set_attr_int(n, "noop_with_empty_axes", c->noop), GF_OK);
    struct gf_tview in[2] = {as_type(rnd(-1, 1, c->rank, c->dims), dt), NONE};
    if (c->n_axes >= 0 && as_attr)
        assert_int_equal(gf_node_set_attr_ints(n, "axes", (size_t)c->n_axes, c->axes), GF_OK);
    else if (c->n_axes >= 0)
        in[1] = ints(GF_INT64, c->axes, (size_t)c->n_axes, 1, (int64_t[]){c->n_axes});
    int64_t yd[4];
    int yr = red_shape(c, yd);
    struct gf_tview y = out_t(dt, yr, yd);
    double atol = 2e-6 * sqrt((double)red_count(c, yd, yr));
    if (strcmp(op, "ReduceMean") == 0)
        atol /= (double)red_count(c, yd, yr);
    bt_compare_cfg(n, in, 2, 2, &y, 1, cfg, strcmp(op, "ReduceMax") ? rtol_of(dt) : 0,
                     strcmp(op, "ReduceMax") ? atol : 0);
}

static void test_reduce(void **state)
{
    (void)state;
    need_backend();
    const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax"};
    for (size_t o = 0; o < 3; o++)
        for (size_t i = 0; i < sizeof(red_cases) / sizeof(red_cases[0]); i++) {
            red_one(ops[o], &red_cases[i], false, NULL, GF_FLOAT);
            red_one(ops[o], &red_cases[i], true, NULL, GF_FLOAT);
            for (int h = 0; h < 2; h++)
                red_one(ops[o], &red_cases[i], i % 2, NULL, halves[h]);
        }
}

/* A NaN sticks in ReduceMax; sums spread it. */
static void test_reduce_nan(void **state)
{
    (void)state;
    need_backend();
    const char *ops[] = {"ReduceSum", "ReduceMax"};
    for (size_t o = 0; o < 2; o++) {
        struct gf_node *n = node(ops[o], "", 18, 2, 1);
        struct gf_tview in[2] = {rnd(-1, 1, DIMS(3, 40)), ints(GF_INT64, (int64_t[]){1}, 1,
                                                                DIMS(1))};
        ((float *)in[0].data)[45] = NAN;
        struct gf_tview y = out(DIMS(3, 1));
        bt_compare(n, in, 2, 2, &y, 1, RTOL, 1e-5);
    }
}

static void test_reduce_configs(void **state)
{
    (void)state;
    need_backend();
    static const int wgs[] = {256, 64, 128, 512, 1024};
    for (size_t i = 0; i < 5; i++) {
        red_one("ReduceSum", &red_cases[1], false, &wgs[i], GF_FLOAT);
        red_one("ReduceMean", &red_cases[5], false, &wgs[i], GF_FLOAT);
        red_one("ReduceMax", &red_cases[8], false, &wgs[i], GF_FLOAT);
        red_one("ReduceSum", &red_cases[2], false, &wgs[i], halves[i % 2]);
    }
}

static void test_reduce_errors(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("ReduceSum", "", 18, 2, 1);
    struct gf_tview in[2] = {rnd(-1, 1, DIMS(3, 4)), ints(GF_INT64, (int64_t[]){2}, 1, DIMS(1))};
    struct gf_tview y = out(DIMS(3, 1));
    void *res[1];
    assert_int_equal(bt_run(n, in, 2, 2, &y, 1, NULL, res), GF_ERR_INVALID);
    free(res[0]);
    if (!strstr(gf_last_error(), "n0") || !strstr(gf_last_error(), "out of range"))
        fail_msg("%s", gf_last_error());
    /* axes without a host copy: left to the CPU */
    in[1].host = NULL;
    assert_null(gf_kernel_find(bt_backend(), n, in, 2));
}

/* ==== SumToShape, Sum ================================================================== */

/* fp16 / bf16 (dt) against the CPU's fp32 kernel on the widened inputs. */
static void s2s(int xr, const int64_t *xd, int yr, const int64_t *yd, enum gf_dtype dt)
{
    struct gf_node *n = node("SumToShape", "graphfuse", 18, 2, 1);
    struct gf_tview in[2] = {as_type(rnd(-1, 1, xr, xd), dt),
                             ints(GF_INT64, yd, (size_t)yr, 1, (int64_t[]){yr})};
    struct gf_tview y = out_t(dt, yr, yd);
    size_t ny = y.nelem ? y.nelem : 1;
    double atol = 2e-6 * sqrt((double)(in[0].nelem / ny + 1));
    if (dt == GF_FLOAT)
        bt_compare(n, in, 2, 2, &y, 1, RTOL, atol);
    else
        bth_compare_wide(n, in, 2, 2, &y, 1, NULL, bth_ulp(dt), atol);
}

static void test_sum_to_shape(void **state)
{
    (void)state;
    need_backend();
    for (int t = 0; t < 3; t++) {
        enum gf_dtype dt = t ? halves[t - 1] : GF_FLOAT;
        s2s(DIMS(2, 3, 4, 5), DIMS(3, 1, 5), dt);
        s2s(DIMS(2, 3, 4, 5), DIMS(5), dt);
        s2s(DIMS(2, 3, 4, 5), DIMS(1), dt);
        s2s(DIMS(2, 3, 4, 5), DIMS(2, 3, 4, 5), dt);
        s2s(DIMS(1000, 33), DIMS(33), dt);
        s2s(DIMS(7, 129), DIMS(7, 1), dt);
        s2s(DIMS(0, 5), DIMS(5), dt); /* nothing to add: zeros */
        /* 8 outputs a thread where one axis is reduced and the kept inner
         * ones hold multiples of 8 (CUDA): GQA's K / V gradient, column sums */
        s2s(DIMS(2, 3, 2, 5, 16), DIMS(2, 3, 1, 5, 16), dt);
        s2s(DIMS(40, 264), DIMS(264), dt);
    }
    struct gf_node *n = node("SumToShape", "graphfuse", 18, 2, 1);
    struct gf_tview in[2] = {rnd(-1, 1, DIMS(3, 4)), ints(GF_INT64, (int64_t[]){2, 4}, 2,
                                                          DIMS(2))};
    struct gf_tview y = out(DIMS(2, 4));
    void *res[1];
    assert_int_equal(bt_run(n, in, 2, 2, &y, 1, NULL, res), GF_ERR_INVALID);
    free(res[0]);
    if (!strstr(gf_last_error(), "n0") || !strstr(gf_last_error(), "cannot be summed"))
        fail_msg("%s", gf_last_error());
}

static void sum(size_t n_in, const int *ranks, const int64_t (*dims)[4], int yr,
                const int64_t *yd, enum gf_dtype dt)
{
    struct gf_node *n = node("Sum", "", 13, n_in, 1);
    struct gf_tview in[8];
    for (size_t i = 0; i < n_in; i++)
        in[i] = as_type(rnd(-1, 1, ranks[i], dims[i]), dt);
    struct gf_tview y = out_t(dt, yr, yd);
    /* the same float additions, in order, each partial sum rounded to dt */
    bt_compare(n, in, n_in, 0, &y, 1, 0, 0);
}

static void test_sum(void **state)
{
    (void)state;
    need_backend();
    static const int64_t d[8][4] = {{3, 1, 5}, {4, 5}, {5}, {1}, {3, 4, 5}, {3, 4, 1},
                                    {1, 4, 5}, {4, 1}};
    static const int r[8] = {3, 2, 1, 1, 3, 3, 3, 2};
    static const int64_t same[8][4] = {{1001}, {1001}, {1001}, {1001}, {1001}};
    static const int r1[8] = {1, 1, 1, 1, 1};
    for (int t = 0; t < 3; t++) {
        enum gf_dtype dt = t ? halves[t - 1] : GF_FLOAT;
        for (size_t k = 2; k <= 8; k++)
            sum(k, r, d, DIMS(3, 4, 5), dt);
        sum(1, r + 4, d + 4, DIMS(3, 4, 5), dt); /* one input: a copy */
        sum(5, r1, same, DIMS(1001), dt);
    }
}

/* ==== Softmax, LogSoftmax and their gradients ========================================== */

struct rows_case {
    int rank;
    int64_t dims[3];
    int64_t axis;
};

static const struct rows_case rows_cases[] = {
    {2, {1, 1}, -1},  {2, {7, 33}, -1},   {2, {5, 129}, 1},    {2, {3, 1000}, -1},
    {2, {2, 4096}, -1}, {3, {2, 3, 7}, 1}, {3, {4, 33, 5}, 0}, {1, {1000}, 0},
};

static void smx(const char *op, const struct rows_case *c, int64_t opset, const int *cfg,
                enum gf_dtype dt)
{
    struct gf_node *n = node(op, "", opset, 1, 1);
    assert_int_equal(gf_node_set_attr_int(n, "axis", c->axis), GF_OK);
    struct gf_tview x = as_type(rnd(-8, 8, c->rank, c->dims), dt), y = out_t(dt, c->rank, c->dims);
    /* log-softmax: (x - max) - log(sum), each term up to 16: a float ulp there */
    double atol = strcmp(op, "Softmax") ? 4e-6 : 1e-7;
    bt_compare_cfg(n, &x, 1, 0, &y, 1, cfg, rtol_of(dt), dt == GF_FLOAT ? atol : BTH_ATOL);
}

/* fp16 / bf16 (dt) against the CPU's fp32 kernel on the widened inputs. */
static void smx_grad(const char *op, const struct rows_case *c, const int *cfg,
                     enum gf_dtype dt)
{
    struct gf_node *n = node(op, "graphfuse", 18, 2, 1);
    assert_int_equal(gf_node_set_attr_int(n, "axis", c->axis), GF_OK);
    bool log = strcmp(op, "LogSoftmaxGrad") == 0;
    struct gf_tview in[2] = {as_type(rnd(-1, 1, c->rank, c->dims), dt),
                             as_type(log ? rnd(-9, -0.01f, c->rank, c->dims)
                                         : rnd(0, 1, c->rank, c->dims), dt)};
    struct gf_tview y = out_t(dt, c->rank, c->dims);
    int ax = (int)(c->axis < 0 ? c->axis + c->rank : c->axis);
    double atol = 4e-6 * sqrt((double)c->dims[ax]);
    if (dt == GF_FLOAT)
        bt_compare_cfg(n, in, 2, 0, &y, 1, cfg, RTOL, atol);
    else
        bth_compare_wide(n, in, 2, 0, &y, 1, cfg, bth_ulp(dt), atol);
}

static void test_softmax(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(rows_cases) / sizeof(rows_cases[0]); i++)
        for (int t = 0; t < 3; t++) {
            enum gf_dtype dt = t ? halves[t - 1] : GF_FLOAT;
            smx("Softmax", &rows_cases[i], 13, NULL, dt);
            smx("LogSoftmax", &rows_cases[i], 13, NULL, dt);
            smx_grad("SoftmaxGrad", &rows_cases[i], NULL, dt);
            smx_grad("LogSoftmaxGrad", &rows_cases[i], NULL, dt);
        }
    /* before opset 13: the input coerced to 2-D at axis */
    smx("Softmax", &rows_cases[5], 11, NULL, GF_FLOAT);
    smx("LogSoftmax", &rows_cases[6], 11, NULL, GF_FLOAT);
    smx("Softmax", &rows_cases[6], 11, NULL, GF_FLOAT16);
    /* rows of -inf, with a NaN, with a -inf, with a +inf */
    for (int lsm = 0; lsm < 2; lsm++) {
        struct gf_node *n = node(lsm ? "LogSoftmax" : "Softmax", "", 13, 1, 1);
        struct gf_tview x = rnd(-1, 1, DIMS(4, 9)), y = out(DIMS(4, 9));
        for (int j = 0; j < 9; j++)
            ((float *)x.data)[j] = -INFINITY;
        ((float *)x.data)[13] = NAN;
        ((float *)x.data)[20] = -INFINITY;
        ((float *)x.data)[30] = INFINITY;
        bt_compare(n, &x, 1, 0, &y, 1, RTOL, 1e-6);
    }
}

/* Every config of the row kernels on odd shapes. */
static void test_rows_configs(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *n = node("Softmax", "", 13, 1, 1);
    struct gf_tview x = rnd(-8, 8, DIMS(5, 1000)), y = out(DIMS(5, 1000));
    bt_expect_space(bt_compare_configs(n, &x, 1, 0, &y, 1, RTOL, 1e-7), "opencl", 15);
    x = rnd(-8, 8, DIMS(3, 129));
    y = out(DIMS(3, 129));
    bt_compare_configs(n, &x, 1, 0, &y, 1, RTOL, 1e-7);
    n = node("LayerNormalization", "", 17, 3, 3);
    struct gf_tview in[3] = {rnd(-3, 5, DIMS(6, 1000)), rnd(0, 2, DIMS(1000)),
                             rnd(-1, 1, DIMS(1000))};
    struct gf_tview o[3] = {out(DIMS(6, 1000)), out(DIMS(6, 1)), out(DIMS(6, 1))};
    bt_compare_configs(n, in, 3, 0, o, 3, RTOL, 1e-5);
    n = node("LayerNormalizationGrad", "graphfuse", 17, 3, 3);
    struct gf_tview g[3] = {rnd(-1, 1, DIMS(70, 36)), rnd(-3, 5, DIMS(70, 36)),
                            rnd(0, 2, DIMS(36))};
    struct gf_tview go[3] = {out(DIMS(70, 36)), out(DIMS(36)), out(DIMS(36))};
    bt_compare_configs(n, g, 3, 0, go, 3, RTOL, 1e-4);
    /* fp16 and bf16 storage through every VEC (the loads and stores of the
     * storage type; the work-group size does not touch them) */
    static const int vcfg[3][2] = {{64, 1}, {128, 2}, {256, 4}};
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 3; c++) {
            enum gf_dtype dt = halves[h];
            n = node("Softmax", "", 13, 1, 1);
            x = as_type(rnd(-8, 8, DIMS(5, 1000)), dt);
            y = out_t(dt, DIMS(5, 1000));
            bt_compare_cfg(n, &x, 1, 0, &y, 1, vcfg[c], bth_ulp(dt), BTH_ATOL);
            n = node("LayerNormalization", "", 17, 3, 3);
            struct gf_tview hin[3] = {as_type(in[0], dt), as_type(in[1], dt),
                                      as_type(in[2], dt)};
            o[0] = out_t(dt, DIMS(6, 1000));
            bt_compare_cfg(n, hin, 3, 0, o, 3, vcfg[c], bth_ulp(dt), 1e-5);
        }
    for (size_t i = 0; i < 5; i++) {
        static const int cfgs[5][2] = {{64, 1}, {128, 2}, {512, 4}, {1024, 1}, {256, 2}};
        smx_grad("SoftmaxGrad", &rows_cases[3], cfgs[i], GF_FLOAT);
        smx_grad("LogSoftmaxGrad", &rows_cases[6], cfgs[i], GF_FLOAT);
        smx_grad("SoftmaxGrad", &rows_cases[3], cfgs[i], halves[i % 2]);
    }
}

/* ==== LayerNormalization and its gradient ============================================== */

struct ln_case {
    int rank;
    int64_t dims[3];
    int64_t axis;
    int wr;           /* Scale (and B) rank */
    int64_t wd[2];
    bool bias, stats; /* B present; Mean / InvStdDev wanted */
};

static const struct ln_case ln_cases[] = {
    {2, {7, 33}, -1, 1, {33}, true, true},
    {2, {1, 1}, -1, 1, {1}, false, false},
    {3, {3, 5, 129}, 1, 2, {5, 129}, true, true},
    {3, {3, 5, 129}, 1, 1, {129}, true, false},   /* Scale broadcast over the block */
    {2, {2, 4096}, -1, 1, {4096}, false, true},
    {2, {130, 257}, -1, 1, {257}, true, true},
};

static int stat_shape(const struct ln_case *c, int64_t *sd)
{
    int ax = (int)(c->axis < 0 ? c->axis + c->rank : c->axis);
    for (int i = 0; i < c->rank; i++)
        sd[i] = i < ax ? c->dims[i] : 1;
    return c->rank;
}

/* X, Scale, B and Y of type dt; Mean and InvStdDev fp32. */
static void test_layernorm(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(ln_cases) / sizeof(ln_cases[0]); i++)
        for (int t = 0; t < 3; t++) {
            enum gf_dtype dt = t ? halves[t - 1] : GF_FLOAT;
            const struct ln_case *c = &ln_cases[i];
            struct gf_node *n = node("LayerNormalization", "", 17, 3, 3);
            assert_int_equal(gf_node_set_attr_int(n, "axis", c->axis), GF_OK);
            assert_int_equal(gf_node_set_attr_float(n, "epsilon", 1e-3f), GF_OK);
            struct gf_tview in[3] = {as_type(rnd(-3, 5, c->rank, c->dims), dt),
                                     as_type(rnd(0, 2, c->wr, c->wd), dt),
                                     c->bias ? as_type(rnd(-1, 1, c->wr, c->wd), dt) : NONE};
            int64_t sd[3];
            int sr = stat_shape(c, sd);
            struct gf_tview o[3] = {out_t(dt, c->rank, c->dims), out(sr, sd), out(sr, sd)};
            bt_compare(n, in, 3, 0, o, c->stats ? 3 : 1, rtol_of(dt), 1e-5);
        }
    /* Scale of another type than X is an error naming both */
    struct gf_node *n = node("LayerNormalization", "", 17, 2, 1);
    struct gf_tview in[2] = {as_type(rnd(-3, 5, DIMS(3, 8)), GF_FLOAT16), rnd(0, 2, DIMS(8))};
    struct gf_tview y = out_t(GF_FLOAT16, DIMS(3, 8));
    void *res[1];
    assert_int_equal(bt_run(n, in, 2, 0, &y, 1, NULL, res), GF_ERR_INVALID);
    free(res[0]);
    if (!strstr(gf_last_error(), "Scale (input 1) is float, X is float16"))
        fail_msg("%s", gf_last_error());
}

/* dY, X, Scale, Mean?, InvStdDev? -> dX, dScale, dBias; the statistics
 * either given (from the CPU forward, fp32) or recomputed.  fp16 / bf16
 * (dt) against the CPU's fp32 kernel on the widened inputs. */
static void check_layernorm_grad(const struct ln_case *c, enum gf_dtype dt)
{
    int64_t sd[3];
    int sr = stat_shape(c, sd);
    struct gf_tview x = as_type(rnd(-3, 5, c->rank, c->dims), dt);
    struct gf_tview w = as_type(rnd(0, 2, c->wr, c->wd), dt);
    struct gf_tview st[2] = {out(sr, sd), out(sr, sd)};
    if (c->stats) { /* the forward's statistics, from the CPU */
        struct gf_node *f = node("LayerNormalization", "", 17, 2, 3);
        assert_int_equal(gf_node_set_attr_int(f, "axis", c->axis), GF_OK);
        struct gf_tview fo[3] = {out_t(dt, c->rank, c->dims), st[0], st[1]};
        fo[0].data = keep(x.nelem * 4);
        for (int k = 1; k < 3; k++) {
            fo[k].data = keep(fo[k].nelem * 4);
            fo[k].host = fo[k].data;
        }
        struct gf_tview fin[2] = {x, w};
        struct gf_backend *cpu = gf_backend_get("cpu");
        assert_int_equal(bt_run_on(cpu, f, fin, 2, fo, 3, NULL), GF_OK);
        st[0] = fo[1];
        st[1] = fo[2];
    }
    struct gf_node *n = node("LayerNormalizationGrad", "graphfuse", 17, 5, 3);
    assert_int_equal(gf_node_set_attr_int(n, "axis", c->axis), GF_OK);
    struct gf_tview in[5] = {as_type(rnd(-1, 1, c->rank, c->dims), dt), x, w,
                             c->stats ? st[0] : NONE, c->stats ? st[1] : NONE};
    int ax = (int)(c->axis < 0 ? c->axis + c->rank : c->axis);
    struct gf_tview o[3] = {out_t(dt, c->rank, c->dims), out_t(dt, c->rank - ax, c->dims + ax),
                            out_t(dt, c->rank - ax, c->dims + ax)};
    size_t rows = x.nelem / o[1].nelem;
    double atol = 1e-5 * sqrt((double)rows + 10);
    if (dt == GF_FLOAT)
        bt_compare(n, in, 5, 0, o, c->bias ? 3 : 2, RTOL, atol);
    else
        bth_compare_wide(n, in, 5, 0, o, c->bias ? 3 : 2, NULL, bth_ulp(dt), atol);
}

static void test_layernorm_grad(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(ln_cases) / sizeof(ln_cases[0]); i++)
        for (int t = 0; t < 3; t++)
            check_layernorm_grad(&ln_cases[i], t ? halves[t - 1] : GF_FLOAT);
}

/* ==== the losses ========================================================================= */

struct loss_case {
    int rank;
    int64_t dims[4]; /* scores [N, C, d...] */
    const char *reduction;
    bool weights, ignore, log_prob;
    enum gf_dtype label_type;
};

static const struct loss_case loss_cases[] = {
    {2, {7, 33}, "mean", false, false, true, GF_INT64},
    {2, {7, 33}, "sum", true, true, false, GF_INT32},
    {2, {5, 1000}, "none", true, true, true, GF_INT64},
    {4, {2, 5, 3, 4}, "mean", true, true, true, GF_INT64},
    {3, {3, 129, 2}, "none", false, true, false, GF_INT32},
    {2, {1, 1}, "mean", false, false, false, GF_INT64},
    {2, {4, 4096}, "mean", true, false, false, GF_INT64},
};

#define II (-100)

/* Labels of a case: classes, every fifth one ignore_index when asked. */
static struct gf_tview labels(const struct loss_case *c)
{
    int64_t ld[3], v[512];
    size_t n = 1;
    for (int i = 0; i < c->rank - 1; i++) {
        ld[i] = c->dims[i ? i + 1 : 0];
        n *= (size_t)ld[i];
    }
    assert_true(n <= 512);
    for (size_t i = 0; i < n; i++)
        v[i] = c->ignore && i % 5 == 2 ? II : (int64_t)((i * 7919 + 3) % (size_t)c->dims[1]);
    return ints(c->label_type, v, n, c->rank - 1, ld);
}

static void loss_attrs(struct gf_node *n, const struct loss_case *c)
{
    assert_int_equal(gf_node_set_attr_string(n, "reduction", c->reduction), GF_OK);
    if (c->ignore)
        assert_int_equal(gf_node_set_attr_int(n, "ignore_index", II), GF_OK);
}

/* The loss's output shape (type dt): labels' for "none", else a scalar. */
static struct gf_tview loss_out(const struct loss_case *c, const struct gf_tview *t,
                                enum gf_dtype dt)
{
    return strcmp(c->reduction, "none") == 0 ? out_t(dt, t->rank, t->dims) : out_t(dt, 0, NULL);
}

/* Scores, weights, loss and log-probabilities of type dt. */
static void loss_fwd(const char *op, const struct loss_case *c, unsigned host_mask,
                     const int *cfg, enum gf_dtype dt)
{
    bool sce = strcmp(op, "SoftmaxCrossEntropyLoss") == 0;
    struct gf_node *n = node(op, "", 13, 3, sce ? 2 : 1);
    loss_attrs(n, c);
    struct gf_tview in[3] = {
        as_type(sce ? rnd(-4, 4, c->rank, c->dims) : rnd(-9, 0, c->rank, c->dims), dt),
        labels(c), c->weights ? as_type(rnd(0.5f, 2, DIMS(c->dims[1])), dt) : NONE};
    struct gf_tview o[2] = {loss_out(c, &in[1], dt), out_t(dt, c->rank, c->dims)};
    bt_compare_cfg(n, in, 3, host_mask, o, sce && c->log_prob ? 2 : 1, cfg, rtol_of(dt),
                     2e-6);
}

/* dLoss, scores, weights and dX of type dt; fp16 / bf16 against the CPU's
 * fp32 kernel on the widened inputs. */
static void loss_bwd(const char *op, const struct loss_case *c, unsigned host_mask,
                     const int *cfg, enum gf_dtype dt)
{
    bool sce = strcmp(op, "SoftmaxCrossEntropyLossGrad") == 0;
    struct gf_node *n = node(op, "graphfuse", 13, 4, 1);
    loss_attrs(n, c);
    struct gf_tview t = labels(c), dl = rnd(0.5f, 2, 0, NULL);
    if (strcmp(c->reduction, "none") == 0)
        dl = rnd(-2, 2, t.rank, t.dims);
    struct gf_tview in[4] = {as_type(dl, dt),
                             sce ? as_type(rnd(-4, 4, c->rank, c->dims), dt)
                                 : ints(GF_INT64, c->dims, (size_t)c->rank, DIMS(c->rank)),
                             t, c->weights ? as_type(rnd(0.5f, 2, DIMS(c->dims[1])), dt) : NONE};
    struct gf_tview o = out_t(dt, c->rank, c->dims);
    unsigned mask = host_mask | (sce ? 0 : 2);
    if (dt == GF_FLOAT)
        bt_compare_cfg(n, in, 4, mask, &o, 1, cfg, RTOL, 1e-6);
    else
        bth_compare_wide(n, in, 4, mask, &o, 1, cfg, bth_ulp(dt), 1e-6);
}

static void test_losses(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(loss_cases) / sizeof(loss_cases[0]); i++) {
        const struct loss_case *c = &loss_cases[i];
        unsigned labels_on_host = i % 2 ? 0 : 2 | 4; /* labels: input 1 forward, 2 backward */
        for (int t = 0; t < 3; t++) {
            enum gf_dtype dt = t ? halves[t - 1] : GF_FLOAT;
            loss_fwd("SoftmaxCrossEntropyLoss", c, labels_on_host & 2, NULL, dt);
            loss_fwd("NegativeLogLikelihoodLoss", c, labels_on_host & 2, NULL, dt);
            loss_bwd("SoftmaxCrossEntropyLossGrad", c, labels_on_host & 4, NULL, dt);
            loss_bwd("NLLLossGrad", c, labels_on_host & 4, NULL, dt);
        }
    }
}

static void test_loss_configs(void **state)
{
    (void)state;
    need_backend();
    static const int cfgs[][2] = {{64, 1}, {128, 2}, {512, 4}, {1024, 4}, {256, 1}};
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        loss_fwd("SoftmaxCrossEntropyLoss", &loss_cases[2], 0, cfgs[i], GF_FLOAT);
        loss_bwd("SoftmaxCrossEntropyLossGrad", &loss_cases[3], 0, cfgs[i], GF_FLOAT);
        loss_fwd("SoftmaxCrossEntropyLoss", &loss_cases[6], 0, cfgs[i], GF_FLOAT);
        loss_fwd("SoftmaxCrossEntropyLoss", &loss_cases[2], 0, cfgs[i], halves[i % 2]);
        loss_bwd("SoftmaxCrossEntropyLossGrad", &loss_cases[6], 0, cfgs[i], halves[i % 2]);
    }
}

/* The mean loss comes out bit for bit the same on every run. */
static void test_loss_deterministic(void **state)
{
    (void)state;
    need_backend();
    struct loss_case c = {2, {300, 513}, "mean", true, true, false, GF_INT64};
    struct gf_node *n = node("SoftmaxCrossEntropyLoss", "", 13, 3, 1);
    loss_attrs(n, &c);
    int64_t v[300];
    for (int i = 0; i < 300; i++)
        v[i] = i % 7 == 3 ? II : (i * 37) % 513;
    struct gf_tview in[3] = {rnd(-4, 4, DIMS(300, 513)), ints(GF_INT64, v, 300, DIMS(300)),
                             rnd(0.5f, 2, DIMS(513))};
    struct gf_tview y = out(0, NULL);
    float first = 0;
    for (int run = 0; run < 4; run++) {
        void *res[1];
        assert_int_equal(bt_run(n, in, 3, 0, &y, 1, NULL, res), GF_OK);
        float got = *(float *)res[0];
        free(res[0]);
        if (run == 0)
            first = got;
        else if (memcmp(&got, &first, sizeof(float)) != 0)
            fail_msg("run %d gave %.9g, run 0 %.9g", run, got, first);
    }
    bt_compare(n, in, 3, 0, &y, 1, RTOL, 0);
}

/* A label outside [0, C): caught on the host with a host copy, else
 * flagged by the device; both name the node. */
static void test_loss_bad_label(void **state)
{
    (void)state;
    need_backend();
    const struct loss_case c = {2, {4, 9}, "mean", false, true, false, GF_INT64};
    for (unsigned mask = 0; mask <= 2; mask += 2) {
        struct gf_node *n = node("SoftmaxCrossEntropyLoss", "", 13, 2, 1);
        loss_attrs(n, &c);
        struct gf_tview in[2] = {rnd(-1, 1, DIMS(4, 9)),
                                 ints(GF_INT64, (int64_t[]){1, II, 9, 0}, 4, DIMS(4))};
        struct gf_tview y = out(0, NULL);
        void *res[1];
        assert_int_equal(bt_run(n, in, 2, mask, &y, 1, NULL, res), GF_ERR_INVALID);
        free(res[0]);
        if (!strstr(gf_last_error(), "n0") || !strstr(gf_last_error(), "[0, 9)"))
            fail_msg("%s", gf_last_error());
        n = node("NLLLossGrad", "graphfuse", 13, 3, 1);
        loss_attrs(n, &c);
        struct gf_tview g[3] = {rnd(1, 2, 0, NULL), ints(GF_INT64, (int64_t[]){4, 9}, 2,
                                                         DIMS(2)), in[1]};
        struct gf_tview o = out(DIMS(4, 9));
        assert_int_equal(bt_run(n, g, 3, 2 | (mask << 1), &o, 1, NULL, res),
                         GF_ERR_INVALID);
        free(res[0]);
        if (!strstr(gf_last_error(), "n0") || !strstr(gf_last_error(), "[0, 9)"))
            fail_msg("%s", gf_last_error());
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_reduce, teardown),
        cmocka_unit_test_teardown(test_reduce_nan, teardown),
        cmocka_unit_test_teardown(test_reduce_configs, teardown),
        cmocka_unit_test_teardown(test_reduce_errors, teardown),
        cmocka_unit_test_teardown(test_sum_to_shape, teardown),
        cmocka_unit_test_teardown(test_sum, teardown),
        cmocka_unit_test_teardown(test_softmax, teardown),
        cmocka_unit_test_teardown(test_rows_configs, teardown),
        cmocka_unit_test_teardown(test_layernorm, teardown),
        cmocka_unit_test_teardown(test_layernorm_grad, teardown),
        cmocka_unit_test_teardown(test_losses, teardown),
        cmocka_unit_test_teardown(test_loss_configs, teardown),
        cmocka_unit_test_teardown(test_loss_deterministic, teardown),
        cmocka_unit_test_teardown(test_loss_bad_label, teardown),
    };
    return bt_run_tests(tests, NULL, NULL);
}
