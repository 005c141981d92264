/* Tests of the CPU reduce family (Reduce*, ArgMax/ArgMin, TopK, CumSum,
 * Softmax/LogSoftmax/Hardmax, LayerNormalization and the two losses): the
 * ONNX node tests, then odd shapes, the threading splits, every element type
 * the kernels promise and every error path, against the plain reference
 * loops written below (never against the kernels themselves). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/cpu.h"
#include "nodetest.h"

/* ---- fixtures: one model with one node; buffers freed after each test --- */

static struct gf_model *model;
static void **allocs;
static size_t n_allocs, cap_allocs;

static void *tcalloc(size_t n)
{
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, cap_allocs * sizeof(*allocs));
        assert_non_null(allocs);
    }
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return allocs[n_allocs++] = p;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_allocs; i++)
        free(allocs[i]);
    n_allocs = 0;
    free(allocs);
    allocs = NULL;
    cap_allocs = 0;
    gf_model_free(model);
    model = NULL;
    return 0;
}

/* A fresh model importing ai.onnx `opset`, holding one node `op`. */
static struct gf_node *node(const char *op, int64_t opset, size_t n_in, size_t n_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "", opset), GF_OK);
    struct gf_value *ins[8], *outs[4];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(model->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(model->graph, op, "", "n0", n_in, ins, n_out, outs);
    assert_non_null(n);
    return n;
}

static void set_ints(struct gf_node *n, const char *name, size_t count, const int64_t *v)
{
    assert_int_equal(gf_node_set_attr_ints(n, name, count, v), GF_OK);
}

static void set_int(struct gf_node *n, const char *name, int64_t v)
{
    assert_int_equal(gf_node_set_attr_int(n, name, v), GF_OK);
}

/* A view of freshly zeroed memory (`data` copied in when not NULL). */
static struct gf_tview tv(enum gf_dtype dt, const void *data, int rank, const int64_t *dims)
{
    struct gf_tview t = {.dtype = dt};
    gf_tview_set_shape(&t, rank, dims);
    t.data = tcalloc(gf_tview_bytes(&t));
    if (data)
        memcpy(t.data, data, gf_tview_bytes(&t));
    return t;
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) ((int)(sizeof(DIMS(__VA_ARGS__)) / sizeof(int64_t)))
#define TV(dt, data, ...) tv(dt, data, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))
#define I64(...) TV(GF_INT64, DIMS(__VA_ARGS__), NDIMS(__VA_ARGS__))

/* Runs the kernel the registry picks; GF_ERR_UNSUPPORTED when there is none.
 * The workspace is allocated at its exact size so ASan sees overruns. */
static enum gf_status run_threads(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                                  struct gf_tview *out, size_t n_out, int threads)
{
    struct gf_backend *be = gf_backend_get("cpu");
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k)
        return GF_ERR_UNSUPPORTED;
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
                               .n_threads = threads, .backend = be};
    void *ws = NULL;
    size_t bytes = k->workspace ? k->workspace(&a) : 0;
    if (bytes)
        ws = a.workspace = malloc(bytes);
    enum gf_status st = k->run(&a);
    free(ws);
    return st;
}

static enum gf_status run(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                          struct gf_tview *out, size_t n_out)
{
    return run_threads(n, in, n_in, out, n_out, 2);
}

/* The call fails with GF_ERR_INVALID and a message containing `what`. */
#define assert_invalid(call, what)                                                  \
    do {                                                                            \
        assert_int_equal((call), GF_ERR_INVALID);                                   \
        if (!strstr(gf_last_error(), what)) {                                       \
            print_error("message '%s' lacks '%s'\n", gf_last_error(), what);        \
            fail();                                                                 \
        }                                                                           \
    } while (0)

static double elem(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

static int64_t elem_i(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_i64(&tmp, i);
}

/* |got - want| <= atol + rtol |want|; equal infinities and NaN-for-NaN pass. */
static void expect_close(const struct gf_tview *got, const double *want, size_t n, double rtol,
                         double atol)
{
    assert_int_equal(got->nelem, n);
    for (size_t i = 0; i < n; i++) {
        double g = elem(got, i), w = want[i];
        if ((isnan(w) && isnan(g)) || (isinf(w) && g == w))
            continue;
        if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
            print_error("element %zu: got %.9g, want %.9g\n", i, g, w);
            fail();
        }
    }
}

/* Stores v into element i of a float tensor of any float dtype. */
static void put(struct gf_tview *t, size_t i, double v)
{
    switch (t->dtype) {
    case GF_FLOAT: ((float *)t->data)[i] = (float)v; break;
    case GF_DOUBLE: ((double *)t->data)[i] = v; break;
    case GF_FLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_bf16((float)v); break;
    default: fail();
    }
}

/* Deterministic values in [-1, 1). */
static uint64_t rng_state = 1;
static double rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

static struct gf_tview rand_f32(int rank, const int64_t *dims, double scale)
{
    struct gf_tview t = tv(GF_FLOAT, NULL, rank, dims);
    for (size_t i = 0; i < t.nelem; i++)
        ((float *)t.data)[i] = (float)(rnd() * scale);
    return t;
}

/* Small integers 0 .. m-1 as floats: plenty of ties. */
static struct gf_tview ties_f32(int rank, const int64_t *dims, int m)
{
    struct gf_tview t = tv(GF_FLOAT, NULL, rank, dims);
    for (size_t i = 0; i < t.nelem; i++)
        ((float *)t.data)[i] = (float)((int)((rnd() + 1) * m / 2) % m);
    return t;
}

/* Output view shaped like `like` with another dtype. */
static struct gf_tview out_like(const struct gf_tview *like, enum gf_dtype dt)
{
    return tv(dt, NULL, like->rank, like->dims);
}

/* The [outer, n, inner] split of dims around axis. */
static void split3(const struct gf_tview *t, int axis, size_t *outer, size_t *n, size_t *inner)
{
    *outer = *n = *inner = 1;
    for (int i = 0; i < t->rank; i++)
        *(i < axis ? outer : i == axis ? n : inner) *= (size_t)t->dims[i];
}

/* ---- the ONNX node tests ----------------------------------------------- */

static const char *const family_ops[] = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSumExp", "ArgMax", "ArgMin", "TopK", "CumSum", "Softmax",
    "LogSoftmax", "Hardmax", "LayerNormalization", "SoftmaxCrossEntropyLoss",
    "NegativeLogLikelihoodLoss", NULL};

#define NODE_TESTS_PASSING 208 /* libonnx-testdata 1.12: every test of the family */

static void test_node_tests(void **state)
{
    (void)state;
    struct nodetest_counts c = nodetest_run_ops(family_ops, true);
    printf("reduce family: %d passed, %d failed, %d unsupported\n", c.passed, c.failed,
           c.unsupported);
    assert_int_equal(c.failed, 0);
    assert_true(c.passed >= NODE_TESTS_PASSING);
}

/* ---- Reduce* -------------------------------------------------------------- */

enum rop { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LSE, R_COUNT };
static const char *const rop_names[R_COUNT] = {
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSumExp"};

/* Index of input element i in the output (kept dims, row-major). */
static size_t out_index(const struct gf_tview *x, const bool *mask, size_t i)
{
    size_t o = 0, stride = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        size_t c = i % (size_t)x->dims[d];
        i /= (size_t)x->dims[d];
        if (!mask[d]) {
            o += c * stride;
            stride *= (size_t)x->dims[d];
        }
    }
    return o;
}

static double ref_init(int op)
{
    return op == R_PROD ? 1 : op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : 0;
}

/* Reference: each output folds the inputs that map to it, in double. */
static void ref_reduce(int op, const struct gf_tview *x, const bool *mask, double *out,
                       size_t nout)
{
    double *mx = tcalloc(nout * sizeof(double)), *cnt = tcalloc(nout * sizeof(double));
    for (size_t o = 0; o < nout; o++)
        out[o] = ref_init(op), mx[o] = -INFINITY;
    for (size_t i = 0; i < x->nelem; i++) {
        size_t o = out_index(x, mask, i);
        mx[o] = fmax(mx[o], elem(x, i));
    }
    for (size_t i = 0; i < x->nelem; i++) {
        size_t o = out_index(x, mask, i);
        double v = elem(x, i);
        switch (op) {
        case R_MAX: out[o] = fmax(out[o], v); break;
        case R_MIN: out[o] = fmin(out[o], v); break;
        case R_PROD: out[o] *= v; break;
        case R_L1: out[o] += fabs(v); break;
        case R_L2: case R_SUMSQ: out[o] += v * v; break;
        case R_LSE: out[o] += exp(v - mx[o]); break;
        default: out[o] += v; break;
        }
        cnt[o]++;
    }
    for (size_t o = 0; o < nout; o++) {
        if (op == R_MEAN)
            out[o] /= cnt[o];
        else if (op == R_L2)
            out[o] = sqrt(out[o]);
        else if (op == R_LSE)
            out[o] = log(out[o]) + mx[o];
    }
}

struct red_case {
    int rank;
    int64_t dims[5];
    size_t naxes; /* 0: reduce everything */
    int64_t axes[5];
};

static const struct red_case red_cases[] = {
    {4, {3, 1, 5, 7}, 2, {1, 3}},         /* size-1 axis among the reduced */
    {3, {2, 3, 4}, 0, {0}},               /* empty axes: all */
    {3, {2, 3, 4}, 2, {-1, 0}},           /* negative, unsorted */
    {2, {0, 4}, 1, {0}},                  /* reducing a zero-size axis: identities */
    {2, {4, 0}, 1, {0}},                  /* zero outputs */
    {1, {100003}, 0, {0}},                /* one long reduction: split across threads */
    {2, {3, 40001}, 1, {-1}},             /* few long rows: split */
    {2, {40001, 3}, 1, {0}},              /* few long strided columns: split */
    {5, {2, 3, 4, 5, 6}, 3, {0, 2, 4}},   /* interleaved kept / reduced */
    {3, {257, 129, 3}, 1, {1}},           /* many outputs over threads */
    {3, {5, 300, 70}, 1, {1}},            /* contiguous outputs: blocks of 64 + 6 */
    {3, {40, 3, 100}, 1, {0}},            /* kept dims merge into rows of 300 */
    {4, {6, 7, 5, 33}, 2, {0, 2}},        /* blocks under an outer kept dim */
    {0, {0}, 0, {0}},                     /* a scalar */
};

static void check_reduce(int op, const struct red_case *rc, int keepdims, int threads)
{
    struct gf_node *n = node(rop_names[op], 18, 2, 1);
    set_int(n, "keepdims", keepdims);
    struct gf_tview in[2];
    in[0] = rand_f32(rc->rank, rc->dims, 1);
    if (op == R_PROD) /* keep long products finite */
        for (size_t i = 0; i < in[0].nelem; i++)
            ((float *)in[0].data)[i] = 1 + ((float *)in[0].data)[i] / 1024;
    in[1] = tv(GF_INT64, rc->axes, 1, DIMS((int64_t)rc->naxes));
    bool mask[5];
    int64_t odims[5];
    int orank = 0;
    for (int d = 0; d < rc->rank; d++) {
        mask[d] = rc->naxes == 0;
        for (size_t k = 0; k < rc->naxes; k++)
            mask[d] |= (rc->axes[k] + rc->rank) % rc->rank == d;
        if (!mask[d] || keepdims)
            odims[orank++] = mask[d] ? 1 : rc->dims[d];
    }
    struct gf_tview out = tv(GF_FLOAT, NULL, orank, odims);
    double *want = tcalloc(out.nelem * sizeof(double) + 1);
    ref_reduce(op, &in[0], mask, want, out.nelem);
    assert_int_equal(run_threads(n, in, 2, &out, 1, threads), GF_OK);
    expect_close(&out, want, out.nelem, 1e-5, 1e-6);
}

static void test_reduce_shapes(void **state)
{
    (void)state;
    static const int threads[] = {1, 2, 4};
    for (int op = 0; op < R_COUNT; op++)
        for (size_t c = 0; c < sizeof(red_cases) / sizeof(red_cases[0]); c++)
            for (size_t t = 0; t < 3; t++)
                check_reduce(op, &red_cases[c], (int)(c + t) % 2, threads[t]);
}

/* Reduces a [2, 3] float tensor with `n` built by the caller; returns y. */
static struct gf_tview reduce_2x3(struct gf_node *n, const float *x, struct gf_tview *axes,
                                  size_t out_n)
{
    struct gf_tview in[2] = {TV(GF_FLOAT, x, 2, 3)}, out = TV(GF_FLOAT, NULL, (int64_t)out_n);
    if (axes)
        in[1] = *axes;
    assert_int_equal(run(n, in, axes ? 2 : 1, &out, 1), GF_OK);
    return out;
}

/* Opset 11 takes axes as an attribute; opset 18 as an int32 or int64 input;
 * noop_with_empty_axes folds each element alone. */
static void test_reduce_axes_forms(void **state)
{
    (void)state;
    static const float x[6] = {1, -2, 3, -4, 5, -6};
    struct gf_node *n = node("ReduceL1", 11, 1, 1);
    set_ints(n, "axes", 1, DIMS(0));
    struct gf_tview y = reduce_2x3(n, x, NULL, 3);
    expect_close(&y, (double[]){5, 7, 9}, 3, 0, 0);

    n = node("ReduceMax", 18, 2, 1);
    struct gf_tview ax = TV(GF_INT32, (int32_t[]){-1}, 1);
    y = reduce_2x3(n, x, &ax, 2);
    expect_close(&y, (double[]){3, 5}, 2, 0, 0);

    n = node("ReduceSumSquare", 18, 2, 1);
    set_int(n, "noop_with_empty_axes", 1);
    ax = TV(GF_INT64, NULL, 0);
    y = reduce_2x3(n, x, &ax, 6);
    expect_close(&y, (double[]){1, 4, 9, 16, 25, 36}, 6, 0, 0);

    n = node("ReduceSum", 13, 2, 1); /* noop, axes input omitted */
    set_int(n, "noop_with_empty_axes", 1);
    y = reduce_2x3(n, x, NULL, 6);
    expect_close(&y, (double[]){1, -2, 3, -4, 5, -6}, 6, 0, 0);

    n = node("ReduceLogSumExp", 18, 2, 1); /* huge values: no overflow */
    struct gf_tview in[2] = {TV(GF_FLOAT, ((float[]){1000, 1000, -INFINITY, INFINITY}), 2, 2),
                             TV(GF_INT64, DIMS(1), 1)};
    y = TV(GF_FLOAT, NULL, 2);
    assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
    expect_close(&y, (double[]){1000 + log(2.0), INFINITY}, 2, 1e-6, 0);
}

/* Integer reductions are exact in 64 bits and wrap like numpy; the
 * identity of an empty ReduceMax / ReduceMin is the type's extreme. */
static void test_reduce_integers(void **state)
{
    (void)state;
    int64_t big = (int64_t)1 << 60;
    struct gf_node *n = node("ReduceSum", 18, 1, 1);
    struct gf_tview in = TV(GF_INT64, ((int64_t[]){big, big + 1, -2 * big + 2}), 3);
    struct gf_tview y = TV(GF_INT64, NULL, 1);
    assert_int_equal(run(n, &in, 1, &y, 1), GF_OK);
    assert_int_equal(((int64_t *)y.data)[0], 3);

    in = TV(GF_INT32, ((int32_t[]){INT32_MAX, 1, 7, 2}), 2, 2);
    y = TV(GF_INT32, NULL, 1);
    assert_int_equal(run(n, &in, 1, &y, 1), GF_OK);
    assert_int_equal(((int32_t *)y.data)[0], INT32_MIN + 9); /* wrapped */

    n = node("ReduceMean", 18, 1, 1); /* truncates toward zero */
    in = TV(GF_INT32, ((int32_t[]){-1, -2, 1, 2}), 2, 2);
    struct gf_tview ax = I64(1);
    struct gf_tview ins[2] = {in, ax};
    y = TV(GF_INT32, NULL, 2);
    assert_int_equal(run(n, ins, 2, &y, 1), GF_OK);
    assert_int_equal(((int32_t *)y.data)[0], -1);
    assert_int_equal(((int32_t *)y.data)[1], 1);

    n = node("ReduceProd", 18, 1, 1);
    in = TV(GF_UINT64, ((uint64_t[]){1ull << 40, 1ull << 23, 3}), 3);
    y = TV(GF_UINT64, NULL, 1);
    assert_int_equal(run(n, &in, 1, &y, 1), GF_OK);
    assert_true(((uint64_t *)y.data)[0] == 1ull << 63); /* 3 * 2^63 wraps to 2^63 */

    static const enum gf_dtype types[] = {GF_INT8, GF_UINT8, GF_INT32, GF_UINT64, GF_BOOL};
    static const double lowest[] = {INT8_MIN, 0, INT32_MIN, 0, 0};
    for (size_t t = 0; t < 5; t++) {
        n = node("ReduceMax", 20, 2, 1);
        struct gf_tview e[2] = {TV(types[t], NULL, 0, 3), I64(0)};
        y = TV(types[t], NULL, 3);
        assert_int_equal(run(n, e, 2, &y, 1), GF_OK);
        for (size_t i = 0; i < 3; i++)
            assert_true(elem(&y, i) == lowest[t]);
    }
    n = node("ReduceMin", 18, 1, 1);
    struct gf_tview e = TV(GF_UINT64, NULL, 0);
    y = TV(GF_UINT64, NULL, 1);
    assert_int_equal(run(n, &e, 1, &y, 1), GF_OK);
    assert_true(((uint64_t *)y.data)[0] == UINT64_MAX);
}

static void test_reduce_small_types(void **state)
{
    (void)state;
    struct gf_node *n = node("ReduceMax", 20, 2, 1);
    struct gf_tview in[2] = {TV(GF_BOOL, ((uint8_t[]){0, 0, 1, 0, 0, 0}), 2, 3), I64(1)};
    struct gf_tview y = TV(GF_BOOL, NULL, 2);
    assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
    assert_int_equal(((uint8_t *)y.data)[0], 1);
    assert_int_equal(((uint8_t *)y.data)[1], 0);

    n = node("ReduceMin", 18, 2, 1);
    in[0] = TV(GF_INT8, ((int8_t[]){-128, 5, 127, -3, 0, 9}), 2, 3);
    y = TV(GF_INT8, NULL, 2);
    assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
    expect_close(&y, (double[]){-128, -3}, 2, 0, 0);

    /* fp16 / bf16 / double: accumulated in double, rounded once */
    static const enum gf_dtype ft[] = {GF_FLOAT16, GF_BFLOAT16, GF_DOUBLE};
    for (size_t t = 0; t < 3; t++) {
        n = node("ReduceMean", 18, 2, 1);
        struct gf_tview x = TV(ft[t], NULL, 2, 1000);
        for (size_t i = 0; i < x.nelem; i++)
            put(&x, i, (i % 7) * 0.25);
        in[0] = x;
        y = TV(ft[t], NULL, 2);
        assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
        double want = 0;
        for (size_t i = 0; i < 1000; i++)
            want += (i % 7) * 0.25;
        expect_close(&y, (double[]){want / 1000, want / 1000}, 2, 4e-3, 0);
    }
}

static void test_reduce_errors(void **state)
{
    (void)state;
    static const float x[6] = {0};
    struct gf_node *n = node("ReduceSum", 18, 2, 1);
    struct gf_tview ax = I64(2);
    struct gf_tview in[2] = {TV(GF_FLOAT, x, 2, 3), ax}, y = TV(GF_FLOAT, NULL, 2);
    assert_invalid(run(n, in, 2, &y, 1), "axes[0] = 2 is out of range [-2, 1]");
    in[1] = I64(1, -1);
    assert_invalid(run(n, in, 2, &y, 1), "axes[1] = -1 repeats axis 1");
    in[1] = TV(GF_FLOAT, ((float[]){1}), 1);
    assert_invalid(run(n, in, 2, &y, 1), "axes (input 1) must be int32 or int64");
    in[1] = I64(1);
    y = TV(GF_FLOAT, NULL, 5);
    assert_invalid(run(n, in, 2, &y, 1), "output 0 has 5 elements, expected 2");
    y = TV(GF_DOUBLE, NULL, 2);
    assert_invalid(run(n, in, 2, &y, 1), "output 0 is double, expected float");
    y = (struct gf_tview){.dtype = GF_FLOAT, .rank = 1, .dims = {2}, .nelem = 2};
    assert_invalid(run(n, in, 2, &y, 1), "output 0 is missing");

    n = node("ReduceMean", 11, 1, 1);
    set_ints(n, "axes", 2, DIMS(0, -3));
    y = TV(GF_FLOAT, NULL, 3);
    assert_invalid(run(n, in, 1, &y, 1), "axes[1] = -3 is out of range");
}

/* ---- ArgMax ArgMin --------------------------------------------------------- */

/* Sign of x[i] - x[j]; int64 compared exactly.  NaN is not compared. */
static int ref_cmp(const struct gf_tview *x, size_t i, size_t j)
{
    if (x->dtype == GF_INT64)
        return (elem_i(x, i) > elem_i(x, j)) - (elem_i(x, i) < elem_i(x, j));
    return (elem(x, i) > elem(x, j)) - (elem(x, i) < elem(x, j));
}

/* Reference: scan the axis; a NaN wins (first one, or last with
 * select_last_index), otherwise strict improvement or a tie taken last. */
static int64_t ref_arg(const struct gf_tview *x, size_t base, size_t n, size_t s, bool is_min,
                       bool last)
{
    size_t bi = 0;
    for (size_t k = 1; k < n; k++) {
        bool nv = isnan(elem(x, base + k * s)), nb = isnan(elem(x, base + bi * s));
        int c = nv || nb ? 0 : ref_cmp(x, base + k * s, base + bi * s) * (is_min ? -1 : 1);
        if (nv ? !nb || last : !nb && (c > 0 || (last && c == 0)))
            bi = k;
    }
    return (int64_t)bi;
}

static void check_arg(const char *op, const struct gf_tview *x, int axis, int last, int threads)
{
    struct gf_node *n = node(op, 13, 1, 1);
    set_int(n, "axis", axis);
    set_int(n, "keepdims", 0);
    set_int(n, "select_last_index", last);
    size_t outer, len, inner;
    split3(x, (axis + x->rank) % x->rank, &outer, &len, &inner);
    struct gf_tview y = TV(GF_INT64, NULL, (int64_t)(outer * inner));
    assert_int_equal(run_threads(n, x, 1, &y, 1, threads), GF_OK);
    for (size_t j = 0; j < outer * inner; j++) {
        size_t base = j / inner * len * inner + j % inner;
        assert_int_equal(((int64_t *)y.data)[j],
                         ref_arg(x, base, len, inner, strcmp(op, "ArgMin") == 0, last));
    }
}

static void test_argmax_argmin(void **state)
{
    (void)state;
    struct gf_tview x = ties_f32(3, DIMS(5, 7, 3), 3), big = rand_f32(2, DIMS(3, 20000), 1);
    struct gf_tview nan = TV(GF_FLOAT, ((float[]){1, NAN, 3, NAN, -5}), 5);
    static const char *const ops[] = {"ArgMax", "ArgMin"};
    for (int o = 0; o < 2; o++) {
        for (int last = 0; last < 2; last++) {
            for (int axis = -1; axis < 3; axis++)
                check_arg(ops[o], &x, axis, last, 2);
            check_arg(ops[o], &nan, 0, last, 1);
        }
        check_arg(ops[o], &big, 0, 0, 4);
        check_arg(ops[o], &big, 1, 1, 3);
    }
    /* int64 beyond double precision, and uint8 */
    int64_t b = (int64_t)1 << 62;
    struct gf_tview i = TV(GF_INT64, ((int64_t[]){b + 1, b + 2, b}), 3);
    struct gf_tview u = TV(GF_UINT8, ((uint8_t[]){3, 250, 250, 7}), 2, 2);
    for (int o = 0; o < 2; o++) {
        check_arg(ops[o], &i, 0, 0, 1);
        check_arg(ops[o], &u, 0, 1, 1);
        check_arg(ops[o], &u, 1, 0, 1);
    }
}

static void test_arg_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("ArgMax", 13, 1, 1);
    set_int(n, "axis", 2);
    struct gf_tview x = TV(GF_FLOAT, NULL, 2, 3), y = TV(GF_INT64, NULL, 2);
    assert_invalid(run(n, &x, 1, &y, 1), "axis 2 is out of range [-2, 1] for rank 2");
    set_int(n, "axis", 1);
    x = TV(GF_FLOAT, NULL, 2, 0);
    assert_invalid(run(n, &x, 1, &y, 1), "axis 1 has size 0");
    x = TV(GF_FLOAT, NULL, 2, 3);
    y = TV(GF_INT32, NULL, 2);
    assert_invalid(run(n, &x, 1, &y, 1), "output 0 is int32, expected int64");
}

/* ---- TopK -------------------------------------------------------------------- */

/* a (index ia) ranks before b (index ib); NaN is the largest value. */
static bool ref_before(double a, int64_t ia, double b, int64_t ib, bool largest)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? ia < ib : largest == isnan(a);
    if (a != b)
        return largest ? a > b : a < b;
    return ia < ib;
}

/* Reference: k rounds of "best element not taken yet". */
static void check_topk(const struct gf_tview *x, int axis, size_t k, bool largest, int threads)
{
    struct gf_node *n = node("TopK", 11, 2, 2);
    set_int(n, "axis", axis);
    set_int(n, "largest", largest);
    size_t outer, len, inner;
    split3(x, (axis + x->rank) % x->rank, &outer, &len, &inner);
    struct gf_tview in[2] = {*x, I64((int64_t)k)};
    struct gf_tview out[2] = {TV(x->dtype, NULL, (int64_t)(outer * k * inner)),
                              TV(GF_INT64, NULL, (int64_t)(outer * k * inner))};
    assert_int_equal(run_threads(n, in, 2, out, 2, threads), GF_OK);
    bool *taken = tcalloc(len + 1);
    for (size_t j = 0; j < outer * inner; j++) {
        size_t base = j / inner * len * inner + j % inner;
        size_t obase = j / inner * k * inner + j % inner;
        memset(taken, 0, len);
        for (size_t r = 0; r < k; r++) {
            int64_t best = -1;
            for (size_t m = 0; m < len; m++)
                if (!taken[m] && (best < 0 || ref_before(elem(x, base + m * inner), (int64_t)m,
                                                         elem(x, base + (size_t)best * inner),
                                                         best, largest)))
                    best = (int64_t)m;
            taken[best] = true;
            assert_int_equal(elem_i(&out[1], obase + r * inner), best);
            double v = elem(&out[0], obase + r * inner), w = elem(x, base + (size_t)best * inner);
            assert_true(v == w || (isnan(v) && isnan(w)));
        }
    }
}

static void test_topk(void **state)
{
    (void)state;
    struct gf_tview x = ties_f32(3, DIMS(4, 37, 3), 5), big = rand_f32(2, DIMS(2, 5000), 1);
    struct gf_tview nan = TV(GF_FLOAT, ((float[]){2, NAN, -1, NAN, 7}), 5);
    struct gf_tview ints = TV(GF_INT32, ((int32_t[]){5, -3, 5, 9, -3, 0, 9, 1}), 2, 4);
    static const size_t ks[] = {0, 1, 5, 37};
    for (int largest = 0; largest < 2; largest++) {
        for (size_t i = 0; i < 4; i++)
            check_topk(&x, 1, ks[i], largest, 2);
        check_topk(&x, 0, 4, largest, 1);
        check_topk(&x, -1, 2, largest, 2);
        check_topk(&big, 1, 100, largest, 4);
        check_topk(&big, 0, 1, largest, 3);
        check_topk(&nan, 0, 5, largest, 1);
        check_topk(&ints, 1, 3, largest, 1);
    }
}

/* Opset 1 takes k as an attribute. */
static void test_topk_opset1(void **state)
{
    (void)state;
    struct gf_node *n = node("TopK", 1, 1, 2);
    set_int(n, "k", 2);
    struct gf_tview x = TV(GF_FLOAT, ((float[]){1, 4, 2, 4}), 4);
    struct gf_tview out[2] = {TV(GF_FLOAT, NULL, 2), TV(GF_INT64, NULL, 2)};
    assert_int_equal(run(n, &x, 1, out, 2), GF_OK);
    expect_close(&out[0], (double[]){4, 4}, 2, 0, 0);
    expect_close(&out[1], (double[]){1, 3}, 2, 0, 0);
}

static void test_topk_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("TopK", 11, 2, 2);
    struct gf_tview in[2] = {TV(GF_FLOAT, NULL, 2, 3), I64(4)};
    struct gf_tview out[2] = {TV(GF_FLOAT, NULL, 2, 1), TV(GF_INT64, NULL, 2, 1)};
    assert_invalid(run(n, in, 2, out, 2), "k = 4 is out of range [0, 3]");
    in[1] = I64(-1);
    assert_invalid(run(n, in, 2, out, 2), "k = -1 is out of range");
    in[1] = I64(1, 1);
    assert_invalid(run(n, in, 2, out, 2), "K (input 1) must hold one int64");
    in[1] = TV(GF_FLOAT, ((float[]){1}), 1);
    assert_invalid(run(n, in, 2, out, 2), "K (input 1) must hold one int64");
    in[1] = I64(2);
    assert_invalid(run(n, in, 2, out, 2), "output 0 has 2 elements, expected 4");
    set_int(n, "axis", -3);
    assert_invalid(run(n, in, 2, out, 2), "axis -3 is out of range");
    n = node("TopK", 1, 1, 2);
    assert_invalid(run(n, in, 1, out, 2), "k is missing");
}

/* ---- CumSum ------------------------------------------------------------------ */

/* Reference: a float running sum down the axis (numpy's float32 cumsum). */
static void check_cumsum(const struct gf_tview *x, int axis, int excl, int rev, int threads)
{
    struct gf_node *n = node("CumSum", 14, 2, 1);
    set_int(n, "exclusive", excl);
    set_int(n, "reverse", rev);
    struct gf_tview in[2] = {*x, tv(GF_INT32, (int32_t[]){axis}, 0, NULL)}; /* scalar */
    struct gf_tview y = out_like(x, x->dtype);
    assert_int_equal(run_threads(n, in, 2, &y, 1, threads), GF_OK);
    size_t outer, len, inner;
    split3(x, (axis + x->rank) % x->rank, &outer, &len, &inner);
    double *want = tcalloc(x->nelem * sizeof(double) + 1);
    for (size_t j = 0; j < outer * inner; j++) {
        size_t base = j / inner * len * inner + j % inner;
        float acc = 0;
        for (size_t t = 0; t < len; t++) {
            size_t i = base + (rev ? len - 1 - t : t) * inner;
            if (excl)
                want[i] = acc;
            acc += (float)elem(x, i);
            if (!excl)
                want[i] = acc;
        }
    }
    expect_close(&y, want, x->nelem, 0, 0);
}

static void test_cumsum(void **state)
{
    (void)state;
    /* inner 67: one full block of 64 columns and a ragged one */
    struct gf_tview x = rand_f32(3, DIMS(3, 130, 67), 1);
    struct gf_tview ix = TV(GF_INT32, NULL, 2, 5, 3);
    for (size_t i = 0; i < ix.nelem; i++)
        ((int32_t *)ix.data)[i] = (int32_t)(i * 37 % 11) - 5;
    for (int e = 0; e < 2; e++) {
        for (int r = 0; r < 2; r++) {
            for (int axis = -1; axis < 3; axis++)
                check_cumsum(&x, axis, e, r, 2);
            check_cumsum(&ix, 1, e, r, 1);
        }
    }
    struct gf_tview one = rand_f32(1, DIMS(1), 1);
    check_cumsum(&one, 0, 0, 0, 1);
}

static void test_cumsum_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("CumSum", 14, 2, 1);
    struct gf_tview in[2] = {TV(GF_FLOAT, NULL, 2, 3), I64(2)}, y = TV(GF_FLOAT, NULL, 2, 3);
    assert_invalid(run(n, in, 2, &y, 1), "axis 2 is out of range [-2, 1]");
    in[1] = I64(0, 1);
    assert_invalid(run(n, in, 2, &y, 1), "axis (input 1) must be one int32 or int64 value");
    in[1] = TV(GF_FLOAT, ((float[]){0}), 1);
    assert_invalid(run(n, in, 2, &y, 1), "axis (input 1) must be one");
    assert_invalid(run(n, in, 1, &y, 1), "axis (input 1) must be one");
}

/* ---- Softmax LogSoftmax Hardmax ------------------------------------------- */

/* Reference over one column, in double. */
static void ref_softmax(const char *op, const struct gf_tview *x, size_t base, size_t n,
                        size_t s, double *out)
{
    double m = -INFINITY, sum = 0;
    size_t am = 0;
    for (size_t k = 0; k < n; k++)
        if (elem(x, base + k * s) > m)
            m = elem(x, base + k * s), am = k;
    for (size_t k = 0; k < n; k++)
        sum += exp(elem(x, base + k * s) - m);
    for (size_t k = 0; k < n; k++) {
        double v = elem(x, base + k * s), *o = &out[base + k * s];
        if (!strcmp(op, "Softmax"))
            *o = exp(v - m) / sum;
        else if (!strcmp(op, "LogSoftmax"))
            *o = v - m - log(sum);
        else
            *o = k == am;
    }
}

/* axis < -rank: leave the attribute out.  Opset 11 coerces to 2-D. */
static void check_softmax(const char *op, const struct gf_tview *x, int64_t opset, int axis,
                          int threads, double rtol)
{
    struct gf_node *n = node(op, opset, 1, 1);
    int eff = opset >= 13 ? -1 : 1;
    if (axis >= -x->rank)
        set_int(n, "axis", axis), eff = axis;
    eff = (eff + x->rank) % x->rank;
    struct gf_tview y = out_like(x, x->dtype);
    assert_int_equal(run_threads(n, x, 1, &y, 1, threads), GF_OK);
    size_t outer, len, inner;
    split3(x, eff, &outer, &len, &inner);
    if (opset < 13)
        len *= inner, inner = 1;
    double *want = tcalloc(x->nelem * sizeof(double) + 1);
    for (size_t j = 0; j < outer * inner; j++)
        ref_softmax(op, x, j / inner * len * inner + j % inner, len, inner, want);
    expect_close(&y, want, x->nelem, rtol, 1e-6);
}

static void test_softmax_family(void **state)
{
    (void)state;
    static const char *const ops[] = {"Softmax", "LogSoftmax", "Hardmax"};
    struct gf_tview x = ties_f32(3, DIMS(3, 4, 5), 4), big = rand_f32(2, DIMS(200, 1000), 20);
    struct gf_tview one = rand_f32(2, DIMS(1, 1), 1);
    struct gf_tview huge = TV(GF_FLOAT, ((float[]){1000, 1001, -INFINITY, 999}), 1, 4);
    for (int o = 0; o < 3; o++) {
        for (int axis = -4; axis < 3; axis++) {
            check_softmax(ops[o], &x, 13, axis, 2, 1e-5);
            check_softmax(ops[o], &x, 11, axis, 2, 1e-5);
        }
        check_softmax(ops[o], &big, 13, -1, 4, 1e-5);
        check_softmax(ops[o], &big, 13, 0, 3, 1e-5);
        check_softmax(ops[o], &big, 1, 0, 2, 1e-5);
        check_softmax(ops[o], &one, 13, 1, 1, 1e-6);
        check_softmax(ops[o], &huge, 13, 1, 1, 1e-6);
    }
    /* fp16, bf16 (computed in float) and double */
    static const enum gf_dtype ft[] = {GF_FLOAT16, GF_BFLOAT16, GF_DOUBLE};
    static const double tol[] = {2e-3, 1.6e-2, 1e-12};
    for (size_t t = 0; t < 3; t++) {
        struct gf_tview h = TV(ft[t], NULL, 6, 7);
        for (size_t i = 0; i < h.nelem; i++)
            put(&h, i, rnd() * 3);
        for (int o = 0; o < 3; o++)
            check_softmax(ops[o], &h, 13, -1, 1, tol[t]);
    }
}

/* The contiguous-row path (axis last, fp32): row lengths around the lane
 * count and odd ones, rows masked with -inf, a row with a NaN (all NaN),
 * an all -inf row (NaN, as before), 1 and 2 threads; tight against the
 * double reference and against the same data along a strided axis. */
static void test_softmax_rows(void **state)
{
    (void)state;
    static const int64_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 127, 512, 1001};
    static const char *const ops[] = {"Softmax", "LogSoftmax"};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        int64_t rows = 13, n = lens[l];
        struct gf_tview x = rand_f32(2, DIMS(rows, n), 30);
        struct gf_tview xt = tv(GF_FLOAT, NULL, 2, DIMS(n, rows));
        float *p = x.data;
        for (int64_t j = n / 2 + 1; j < n; j++) /* row 1: a causal-style mask */
            p[1 * n + j] = -INFINITY;
        if (n > 3)
            p[2 * n + 3] = NAN;
        for (int64_t j = 0; j < n; j++)
            p[3 * n + j] = -INFINITY;
        p[4 * n] = 1e30f; /* row 4: one dominant element */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++)
                ((float *)xt.data)[j * rows + r] = p[r * n + j];
        for (int o = 0; o < 2; o++)
            for (int threads = 1; threads <= 2; threads++) {
                check_softmax(ops[o], &x, 13, -1, threads, 3e-7);
                /* node() frees the previous node's model: one at a time */
                struct gf_tview y = out_like(&x, GF_FLOAT), yt = out_like(&xt, GF_FLOAT);
                assert_int_equal(run_threads(node(ops[o], 13, 1, 1), &x, 1, &y, 1, threads),
                                 GF_OK);
                struct gf_node *nt = node(ops[o], 13, 1, 1);
                set_int(nt, "axis", 0);
                assert_int_equal(run_threads(nt, &xt, 1, &yt, 1, threads), GF_OK);
                double *want = tcalloc((size_t)(rows * n) * sizeof(double));
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = 0; j < n; j++) {
                        want[r * n + j] = ((float *)yt.data)[j * rows + r];
                        float g = ((float *)y.data)[r * n + j];
                        if ((r == 3 || (r == 2 && n > 3)) && !isnan(g)) {
                            print_error("%s row %lld n %lld j %lld: %g not NaN\n", ops[o], (long long)r, (long long)n, (long long)j, (double)g);
                            fail();
                        }
                    }
                expect_close(&y, want, (size_t)(rows * n), 3e-7, 1e-30);
            }
    }
    struct gf_tview e = tv(GF_FLOAT, NULL, 2, DIMS(0, 5)), ey = out_like(&e, GF_FLOAT);
    assert_int_equal(run(node("Softmax", 13, 1, 1), &e, 1, &ey, 1), GF_OK);
    e = tv(GF_FLOAT, NULL, 2, DIMS(4, 0)), ey = out_like(&e, GF_FLOAT);
    assert_int_equal(run(node("LogSoftmax", 13, 1, 1), &e, 1, &ey, 1), GF_OK);
}

static void test_softmax_errors(void **state)
{
    (void)state;
    struct gf_tview x = TV(GF_FLOAT, NULL, 2, 3), y = TV(GF_FLOAT, NULL, 2, 3);
    struct gf_node *n = node("Softmax", 13, 1, 1);
    set_int(n, "axis", 2);
    assert_invalid(run(n, &x, 1, &y, 1), "axis 2 is out of range [-2, 1] for rank 2");
    n = node("Hardmax", 11, 1, 1);
    set_int(n, "axis", -3);
    assert_invalid(run(n, &x, 1, &y, 1), "axis -3 is out of range");
    n = node("LogSoftmax", 13, 1, 1);
    struct gf_tview s = tv(GF_FLOAT, NULL, 0, NULL);
    assert_invalid(run(n, &s, 1, &s, 1), "axis -1 is out of range [0, -1] for rank 0");
    y = TV(GF_FLOAT, NULL, 5);
    assert_invalid(run(n, &x, 1, &y, 1), "output 0 has 5 elements, expected 6");
}

/* ---- LayerNormalization ----------------------------------------------------- */

/* Offset into p (numpy-broadcast over the block's trailing dims) of block element j. */
static size_t bc_index(const struct gf_tview *p, const int64_t *bdims, int brank, size_t j)
{
    size_t off = 0, stride = 1;
    for (int d = brank - 1, e = p->rank - 1; d >= 0; d--, e--) {
        size_t c = j % (size_t)bdims[d];
        j /= (size_t)bdims[d];
        if (e >= 0 && p->dims[e] != 1)
            off += c * stride;
        if (e >= 0)
            stride *= (size_t)p->dims[e];
    }
    return off;
}

/* in: X, Scale, B (B.data NULL: omitted); stats: also check Mean and InvStdDev. */
static void check_ln(const struct gf_tview *in, int axis, float eps, bool stats, int threads)
{
    struct gf_node *n = node("LayerNormalization", 17, 3, 3);
    set_int(n, "axis", axis);
    assert_int_equal(gf_node_set_attr_float(n, "epsilon", eps), GF_OK);
    const struct gf_tview *x = &in[0];
    int ax = (axis + x->rank) % x->rank;
    size_t rows, len, inner;
    split3(x, ax, &rows, &len, &inner);
    len *= inner;
    struct gf_tview out[3] = {out_like(x, x->dtype)};
    if (stats)
        out[1] = TV(GF_FLOAT, NULL, (int64_t)rows), out[2] = TV(GF_FLOAT, NULL, (int64_t)rows);
    assert_int_equal(run_threads(n, in, 3, out, 3, threads), GF_OK);
    double *want = tcalloc(x->nelem * sizeof(double) + 1), *mean = tcalloc(rows * 8 + 8),
           *inv = tcalloc(rows * 8 + 8);
    for (size_t r = 0; r < rows; r++) {
        double s = 0, v = 0;
        for (size_t j = 0; j < len; j++)
            s += elem(x, r * len + j);
        mean[r] = s / len;
        for (size_t j = 0; j < len; j++)
            v += pow(elem(x, r * len + j) - mean[r], 2);
        inv[r] = 1 / sqrt(v / len + eps);
        for (size_t j = 0; j < len; j++) {
            double y = (elem(x, r * len + j) - mean[r]) * inv[r] *
                       elem(&in[1], bc_index(&in[1], x->dims + ax, x->rank - ax, j));
            if (in[2].data)
                y += elem(&in[2], bc_index(&in[2], x->dims + ax, x->rank - ax, j));
            want[r * len + j] = y;
        }
    }
    expect_close(&out[0], want, x->nelem, 1e-5, 1e-6);
    if (stats) {
        expect_close(&out[1], mean, rows, 1e-6, 1e-7);
        expect_close(&out[2], inv, rows, 1e-6, 1e-7);
    }
}

static void test_layernorm(void **state)
{
    (void)state;
    struct gf_tview x = rand_f32(4, DIMS(2, 3, 4, 5), 2), none = {.dtype = GF_FLOAT};
    for (int axis = -2; axis < 4; axis++) {
        int ax = (axis + 4) % 4;
        struct gf_tview in[3] = {x, rand_f32(4 - ax, x.dims + ax, 1),
                                 rand_f32(4 - ax, x.dims + ax, 1)};
        check_ln(in, axis, 1e-5f, axis % 2 == 0, 2);
    }
    /* broadcast Scale [1, 5] and B [4, 1] over the block [4, 5]; scalars; no B */
    struct gf_tview in[3] = {x, rand_f32(2, DIMS(1, 5), 1), rand_f32(2, DIMS(4, 1), 1)};
    check_ln(in, 2, 1e-3f, true, 1);
    in[1] = rand_f32(1, DIMS(1), 1), in[2] = rand_f32(0, NULL, 1);
    check_ln(in, 1, 0.1f, true, 1);
    in[1] = rand_f32(3, DIMS(1, 1, 5), 1), in[2] = none; /* leading 1s beyond the block */
    check_ln(in, -1, 1e-5f, false, 1);
    /* many rows over threads; rows far from zero keep their precision */
    struct gf_tview big[3] = {rand_f32(2, DIMS(64, 1000), 1), rand_f32(1, DIMS(1000), 1),
                              rand_f32(1, DIMS(1000), 1)};
    for (size_t i = 0; i < big[0].nelem; i++)
        ((float *)big[0].data)[i] = 1000 + ((float *)big[0].data)[i] / 64;
    check_ln(big, -1, 1e-5f, true, 4);
    /* double */
    struct gf_tview d[3] = {TV(GF_DOUBLE, NULL, 3, 7), TV(GF_DOUBLE, NULL, 7), none};
    for (size_t i = 0; i < 21; i++)
        put(&d[0], i, rnd()), put(&d[1], i % 7, rnd());
    d[2].dtype = GF_DOUBLE;
    check_ln(d, 1, 1e-5f, true, 1);
}

static void test_layernorm_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("LayerNormalization", 17, 3, 3);
    struct gf_tview in[3] = {TV(GF_FLOAT, NULL, 2, 3), TV(GF_FLOAT, NULL, 3),
                             TV(GF_FLOAT, NULL, 3)};
    struct gf_tview out[3] = {TV(GF_FLOAT, NULL, 2, 3), TV(GF_FLOAT, NULL, 2, 1),
                              TV(GF_FLOAT, NULL, 2, 1)};
    set_int(n, "axis", 2);
    assert_invalid(run(n, in, 3, out, 3), "axis 2 is out of range [-2, 1]");
    set_int(n, "axis", -1);
    in[1] = TV(GF_FLOAT, NULL, 2);
    assert_invalid(run(n, in, 3, out, 3), "Scale (input 1) of rank 1 does not broadcast");
    in[1] = TV(GF_FLOAT, NULL, 2, 2, 3);
    assert_invalid(run(n, in, 3, out, 3), "Scale (input 1) of rank 3 does not broadcast");
    in[1] = TV(GF_DOUBLE, NULL, 3);
    assert_invalid(run(n, in, 3, out, 3), "Scale (input 1) is double, X is float");
    in[1] = TV(GF_FLOAT, NULL, 3), in[2] = TV(GF_FLOAT, NULL, 4);
    assert_invalid(run(n, in, 3, out, 3), "B (input 2) of rank 1 does not broadcast");
    in[2] = TV(GF_FLOAT, NULL, 3), out[1] = TV(GF_FLOAT, NULL, 3);
    assert_invalid(run(n, in, 3, out, 3), "output 1 has 3 elements, expected 2");
    out[1] = TV(GF_FLOAT, NULL, 2), out[2] = TV(GF_INT32, NULL, 2);
    assert_invalid(run(n, in, 3, out, 3), "output 2 is int32, expected a float type");
    in[1].data = NULL;
    assert_invalid(run(n, in, 3, out, 3), "Scale (input 1) is missing");
}

/* ---- SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss --------------------- */

struct loss_case {
    const char *op, *reduction;
    bool weights, log_prob;
    int64_t ignore; /* INT64_MIN: no ignore_index attribute */
};

/* Reference: per position -logp[label] * w[label] (0 and weight 0 when the
 * label is ignore_index); mean divides by the summed weights. */
static void ref_loss(const struct loss_case *lc, const struct gf_tview *in, double *loss,
                     double *logp, double *total)
{
    const struct gf_tview *x = &in[0], *t = &in[1];
    size_t C = (size_t)x->dims[1], D = t->nelem / (size_t)x->dims[0];
    bool sce = !strcmp(lc->op, "SoftmaxCrossEntropyLoss");
    double ls = 0, ws = 0;
    for (size_t pos = 0; pos < t->nelem; pos++) {
        size_t base = pos / D * C * D + pos % D;
        double m = -INFINITY, s = 0;
        for (size_t c = 0; c < C; c++)
            m = fmax(m, elem(x, base + c * D));
        for (size_t c = 0; c < C; c++)
            s += exp(elem(x, base + c * D) - m);
        for (size_t c = 0; c < C; c++)
            logp[base + c * D] = sce ? elem(x, base + c * D) - m - log(s) : elem(x, base + c * D);
        int64_t lab = elem_i(t, pos);
        double w = lab == lc->ignore ? 0 : lc->weights ? elem(&in[2], (size_t)lab) : 1;
        loss[pos] = w ? -logp[base + (size_t)lab * D] * w : 0;
        ls += loss[pos], ws += w;
    }
    *total = !strcmp(lc->reduction, "mean") ? ls / ws : ls;
}

static void check_loss(const struct loss_case *lc, int rank, const int64_t *dims, int threads)
{
    struct gf_node *n = node(lc->op, 13, 3, 2);
    assert_int_equal(gf_node_set_attr_string(n, "reduction", lc->reduction), GF_OK);
    if (lc->ignore != INT64_MIN)
        set_int(n, "ignore_index", lc->ignore);
    struct gf_tview in[3] = {rand_f32(rank, dims, 3)};
    int64_t tdims[8] = {dims[0]};
    memcpy(tdims + 1, dims + 2, (size_t)(rank - 2) * sizeof(int64_t));
    in[1] = tv(GF_INT64, NULL, rank - 1, tdims);
    for (size_t i = 0; i < in[1].nelem; i++) /* every class, and the ignored label */
        ((int64_t *)in[1].data)[i] = i % 4 == 3 && lc->ignore != INT64_MIN
                                         ? lc->ignore : (int64_t)(i * 7 % (size_t)dims[1]);
    in[2] = (struct gf_tview){.dtype = GF_UNDEFINED}; /* omitted */
    if (lc->weights)
        in[2] = rand_f32(1, dims + 1, 1);
    bool none = !strcmp(lc->reduction, "none");
    struct gf_tview out[2] = {none ? tv(GF_FLOAT, NULL, rank - 1, tdims)
                                   : tv(GF_FLOAT, NULL, 0, NULL)};
    if (lc->log_prob)
        out[1] = out_like(&in[0], GF_FLOAT);
    double *loss = tcalloc(in[1].nelem * 8 + 8), *logp = tcalloc(in[0].nelem * 8 + 8), total;
    ref_loss(lc, in, loss, logp, &total);
    assert_int_equal(run_threads(n, in, 3, out, 2, threads), GF_OK);
    expect_close(&out[0], none ? loss : &total, out[0].nelem, 1e-5, 1e-6);
    if (lc->log_prob)
        expect_close(&out[1], logp, in[0].nelem, 1e-5, 1e-6);
}

static void test_losses(void **state)
{
    (void)state;
    static const char *const ops[] = {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};
    static const char *const reds[] = {"none", "sum", "mean"};
    static const int64_t ignores[] = {INT64_MIN, 2, -1};
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < 3; r++)
            for (int w = 0; w < 2; w++)
                for (int i = 0; i < 3; i++) {
                    struct loss_case lc = {ops[o], reds[r], w, o == 0 && i != 1, ignores[i]};
                    check_loss(&lc, 2, DIMS(6, 5), 2);
                    check_loss(&lc, 4, DIMS(2, 5, 3, 4), 2);
                }
    struct loss_case big = {ops[0], "mean", true, true, 7};
    check_loss(&big, 3, DIMS(64, 300, 9), 4);
    big.op = ops[1], big.log_prob = false;
    check_loss(&big, 2, DIMS(20000, 3), 3);
}

/* Every label ignored: "mean" divides 0 by 0 (NaN, as PyTorch); "none" gives zeros. */
static void test_loss_all_ignored(void **state)
{
    (void)state;
    struct gf_node *n = node("NegativeLogLikelihoodLoss", 13, 2, 1);
    set_int(n, "ignore_index", 9);
    struct gf_tview in[2] = {TV(GF_FLOAT, ((float[]){1, 2, 3, 4}), 2, 2), I64(9, 9)};
    struct gf_tview y = tv(GF_FLOAT, NULL, 0, NULL);
    assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
    assert_true(isnan(((float *)y.data)[0]));
    n = node("SoftmaxCrossEntropyLoss", 13, 2, 1);
    set_int(n, "ignore_index", 9);
    assert_int_equal(gf_node_set_attr_string(n, "reduction", "none"), GF_OK);
    in[0] = TV(GF_FLOAT, NULL, 2, 0); /* no classes at all */
    y = TV(GF_FLOAT, ((float[]){5, 5}), 2);
    assert_int_equal(run(n, in, 2, &y, 1), GF_OK);
    expect_close(&y, (double[]){0, 0}, 2, 0, 0);
}

static void test_loss_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("SoftmaxCrossEntropyLoss", 13, 3, 2);
    struct gf_tview in[3] = {TV(GF_FLOAT, NULL, 3), I64(0, 1, 2), TV(GF_FLOAT, NULL, 5)};
    struct gf_tview out[2] = {tv(GF_FLOAT, NULL, 0, NULL), TV(GF_FLOAT, NULL, 3, 5)};
    assert_invalid(run(n, in, 3, out, 2), "scores (input 0) must be [N, C, d1...], got rank 1");
    in[0] = TV(GF_FLOAT, NULL, 3, 5);
    in[1] = TV(GF_FLOAT, NULL, 3);
    assert_invalid(run(n, in, 3, out, 2), "labels (input 1) are float, expected int32 or int64");
    in[1] = TV(GF_INT64, NULL, 3, 1);
    assert_invalid(run(n, in, 3, out, 2), "labels (input 1) must be [N, d1...] of rank 1, got "
                   "[3,1]");
    in[1] = TV(GF_INT64, NULL, 4);
    assert_invalid(run(n, in, 3, out, 2), "labels (input 1) dim 0 is 4, scores need 3");
    in[1] = TV(GF_INT32, ((int32_t[]){0, 4, 5}), 3);
    in[2] = TV(GF_FLOAT, NULL, 4);
    assert_invalid(run(n, in, 3, out, 2), "weights (input 2) must be [5], got [4]");
    in[2] = TV(GF_DOUBLE, NULL, 5);
    assert_invalid(run(n, in, 3, out, 2), "weights (input 2) is double, expected float");
    in[2] = TV(GF_FLOAT, NULL, 5);
    assert_invalid(run(n, in, 3, out, 2), "labels (input 1) element 2 is 5: outside [0, 5)");
    set_int(n, "ignore_index", -1);
    assert_invalid(run(n, in, 3, out, 2), "element 2 is 5: outside [0, 5) and not ignore_index -1");
    in[1] = TV(GF_INT32, ((int32_t[]){0, 4, -1}), 3);
    out[1] = TV(GF_FLOAT, NULL, 3, 4);
    assert_invalid(run(n, in, 3, out, 2), "output 1 has shape [3,4], expected [3,5]");
    out[1] = TV(GF_FLOAT, NULL, 3, 5);
    assert_int_equal(gf_node_set_attr_string(n, "reduction", "avg"), GF_OK);
    assert_invalid(run(n, in, 3, out, 2), "reduction 'avg' is not one of none, sum, mean");
    assert_int_equal(gf_node_set_attr_string(n, "reduction", "none"), GF_OK);
    assert_invalid(run(n, in, 3, out, 2), "output 0 has shape [], expected [3]");
    n = node("NegativeLogLikelihoodLoss", 13, 2, 1);
    in[1] = I64(0, -2, 1);
    assert_invalid(run(n, in, 2, out, 1), "element 1 is -2: outside [0, 5)");
}

/* ---- dtypes the kernels refuse ----------------------------------------------- */

static void test_unsupported(void **state)
{
    (void)state;
    struct gf_tview b = TV(GF_BOOL, NULL, 4), s = TV(GF_STRING, NULL, 4), i = TV(GF_INT32, NULL, 4);
    struct gf_tview y = TV(GF_FLOAT, NULL, 4);
    assert_int_equal(run(node("ReduceSum", 13, 1, 1), &b, 1, &y, 1), GF_ERR_UNSUPPORTED);
    assert_int_equal(run(node("ReduceMax", 13, 1, 1), &s, 1, &y, 1), GF_ERR_UNSUPPORTED);
    assert_int_equal(run(node("ArgMax", 13, 1, 1), &b, 1, &y, 1), GF_ERR_UNSUPPORTED);
    assert_int_equal(run(node("Softmax", 13, 1, 1), &i, 1, &y, 1), GF_ERR_UNSUPPORTED);
    assert_int_equal(run(node("LayerNormalization", 17, 2, 1), &i, 1, &y, 1),
                     GF_ERR_UNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_node_tests, teardown),
        cmocka_unit_test_teardown(test_reduce_shapes, teardown),
        cmocka_unit_test_teardown(test_reduce_axes_forms, teardown),
        cmocka_unit_test_teardown(test_reduce_integers, teardown),
        cmocka_unit_test_teardown(test_reduce_small_types, teardown),
        cmocka_unit_test_teardown(test_reduce_errors, teardown),
        cmocka_unit_test_teardown(test_argmax_argmin, teardown),
        cmocka_unit_test_teardown(test_arg_errors, teardown),
        cmocka_unit_test_teardown(test_topk, teardown),
        cmocka_unit_test_teardown(test_topk_opset1, teardown),
        cmocka_unit_test_teardown(test_topk_errors, teardown),
        cmocka_unit_test_teardown(test_cumsum, teardown),
        cmocka_unit_test_teardown(test_cumsum_errors, teardown),
        cmocka_unit_test_teardown(test_softmax_family, teardown),
        cmocka_unit_test_teardown(test_softmax_rows, teardown),
        cmocka_unit_test_teardown(test_softmax_errors, teardown),
        cmocka_unit_test_teardown(test_layernorm, teardown),
        cmocka_unit_test_teardown(test_layernorm_errors, teardown),
        cmocka_unit_test_teardown(test_losses, teardown),
        cmocka_unit_test_teardown(test_loss_all_ignored, teardown),
        cmocka_unit_test_teardown(test_loss_errors, teardown),
        cmocka_unit_test_teardown(test_unsupported, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
