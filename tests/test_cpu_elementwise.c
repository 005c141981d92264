/* CPU elementwise kernels: the ONNX node tests, then what they miss (odd
 * and empty shapes, broadcasting corners, thread splits, integer corner
 * cases, fp16/bf16, casts, legacy attributes, every error path), each
 * checked against plain reference loops written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "nodetest.h"

/* ---- helpers ------------------------------------------------------------- */

static struct gf_model *models[32]; /* one per opset, freed at the end */

static struct gf_node *mk(int64_t opset, const char *op, size_t n_in, size_t n_out)
{
    if (!models[opset]) {
        models[opset] = gf_model_new(8, "t");
        assert_non_null(models[opset]);
        gf_model_set_opset(models[opset], "", opset);
    }
    struct gf_node *n = gf_graph_add_node(models[opset]->graph, op, "", op, n_in, NULL,
                                          n_out, NULL);
    assert_non_null(n);
    return n;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        gf_model_free(models[i]);
    return 0;
}

static struct gf_tview tv(enum gf_dtype t, void *data, int rank, const int64_t *dims)
{
    struct gf_tview v = {.dtype = t, .data = data};
    gf_tview_set_shape(&v, rank, dims);
    return v;
}
#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__}
#define SCALAR 0, NULL

static enum gf_status run_t(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                            struct gf_tview *out, size_t n_out, int threads)
{
    struct gf_backend *be = gf_backend_get("cpu");
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k)
        fail_msg("no kernel for %s", n->op_type);
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
                               .n_threads = threads, .backend = be};
    return k->run(&a);
}

static enum gf_status run(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                          struct gf_tview *out)
{
    return run_t(n, in, n_in, out, 1, 2);
}

static void expect_error(enum gf_status st, const char *needle)
{
    assert_int_equal(st, GF_ERR_INVALID);
    if (!strstr(gf_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", gf_last_error(), needle);
}

static double elem(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

/* |got - want| <= tol * max(1, |want|), NaN matching NaN, inf matching inf. */
static void expect_close(double got, double want, double tol, const char *what, size_t i)
{
    if (isnan(want) && isnan(got))
        return;
    if (isinf(want) && got == want)
        return;
    if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want))))
        fail_msg("%s element %zu: got %.9g, want %.9g", what, i, got, want);
}

static uint32_t rng_state = 12345;
static float rnd(float lo, float hi)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng_state >> 8) / 16777216.0f;
}

/* ---- the ONNX node tests ------------------------------------------------- */

static void test_node_conformance(void **state)
{
    (void)state;
    static const char *const ops[] = {
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less",
        "LessOrEqual", "Greater", "GreaterOrEqual", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp",
        "Log", "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu",
        "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Erf", "Gelu", "Floor", "Ceil",
        "Round", "Sign", "Not", "IsNaN", "IsInf", "Clip", "Max", "Min", "Mean", "Sum",
        "Where", "Cast", "CastLike", "Identity", "Dropout", NULL};
    /* libonnx-testdata 1.12 stores its bfloat16 tensors as uint16 (and
     * made them by truncation): the harness hands these kernels uint16
     * data, so they cannot pass.  test_cast_bf16 covers bfloat16 casts. */
    static const char *const bad_data[] = {
        "test_cast_BFLOAT16_to_FLOAT", "test_cast_FLOAT_to_BFLOAT16",
        "test_castlike_BFLOAT16_to_FLOAT", "test_castlike_BFLOAT16_to_FLOAT_expanded",
        "test_castlike_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16_expanded"};
    struct nodetest_counts c = nodetest_run_ops(ops, true);
    int known = 0;
    for (size_t i = 0; i < sizeof(bad_data) / sizeof(bad_data[0]); i++)
        known += nodetest_one(NODETEST_DIR, bad_data[i], false) == 0;
    printf("elementwise node tests: %d passed, %d failed (%d of them bfloat16 stored as "
           "uint16), %d unsupported\n", c.passed, c.failed, known, c.unsupported);
    assert_int_equal(c.failed, known);
    assert_true(c.passed >= 205);
}

/* ---- fp32 binary ops over broadcast shapes ------------------------------- */

/* Element of `in` read by output element i under numpy broadcasting. */
static size_t ref_offset(const struct gf_tview *in, const struct gf_tview *out, size_t i)
{
    size_t off = 0, mul = 1;
    for (int d = out->rank - 1; d >= 0; d--) {
        size_t c = i % (size_t)out->dims[d];
        i /= (size_t)out->dims[d];
        int id = d - (out->rank - in->rank);
        if (id < 0)
            continue;
        if (in->dims[id] != 1)
            off += c * mul;
        mul *= (size_t)in->dims[id];
    }
    return off;
}

/* Output shape of broadcasting a with b. */
static struct gf_tview bcast_shape(const struct gf_tview *a, const struct gf_tview *b)
{
    struct gf_tview o = {.dtype = GF_FLOAT};
    int64_t dims[GF_MAX_RANK];
    int r = a->rank > b->rank ? a->rank : b->rank;
    for (int d = 0; d < r; d++) {
        int ia = d - (r - a->rank), ib = d - (r - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        dims[d] = da == 1 ? db : da;
    }
    gf_tview_set_shape(&o, r, dims);
    return o;
}

struct bin_ref {
    const char *op;
    int fmod;
    bool cmp;  /* bool output */
    double (*f)(double x, double y);
};
static double r_add(double x, double y) { return (float)x + (float)y; }
static double r_sub(double x, double y) { return (float)x - (float)y; }
static double r_mul(double x, double y) { return (float)x * (float)y; }
static double r_div(double x, double y) { return (float)x / (float)y; }
static double r_pow(double x, double y) { return pow(x, y); }
static double r_fmod(double x, double y) { return fmod(x, y); }
static double r_max(double x, double y) { return x > y ? x : y; }
static double r_min(double x, double y) { return x < y ? x : y; }
static double r_lt(double x, double y) { return x < y; }
static double r_eq(double x, double y) { return x == y; }

static const struct bin_ref bin_refs[] = {
    {"Add", 0, false, r_add}, {"Sub", 0, false, r_sub}, {"Mul", 0, false, r_mul},
    {"Div", 0, false, r_div}, {"Pow", 0, false, r_pow}, {"Mod", 1, false, r_fmod},
    {"Max", 0, false, r_max}, {"Min", 0, false, r_min}, {"Less", 0, true, r_lt},
    {"Equal", 0, true, r_eq},
};

static void check_binary(const struct bin_ref *r, struct gf_tview *in, int threads)
{
    struct gf_tview out = bcast_shape(&in[0], &in[1]);
    out.dtype = r->cmp ? GF_BOOL : GF_FLOAT;
    void *buf = calloc(out.nelem + 1, 4);
    out.data = buf;
    struct gf_node *n = mk(17, r->op, 2, 1);
    if (r->fmod)
        gf_node_set_attr_int(n, "fmod", r->fmod);
    assert_int_equal(run_t(n, in, 2, &out, 1, threads), GF_OK);
    for (size_t i = 0; i < out.nelem; i++) {
        double x = elem(&in[0], ref_offset(&in[0], &out, i));
        double y = elem(&in[1], ref_offset(&in[1], &out, i));
        expect_close(elem(&out, i), r->f(x, y), 2e-7, r->op, i);
    }
    free(buf);
}

static void test_binary_broadcast(void **state)
{
    (void)state;
    static const struct { int ra, rb; int64_t a[4], b[4]; } shapes[] = {
        {2, 2, {3, 4}, {3, 4}},           {1, 0, {40007}, {0}},
        {0, 1, {0}, {40007}},             {3, 3, {3, 1, 5}, {1, 4, 1}},
        {4, 1, {2, 3, 4, 5}, {5}},        {4, 3, {2, 3, 4, 5}, {3, 1, 1}},
        {2, 2, {0, 3}, {1, 3}},           {0, 0, {0}, {0}},
        {2, 2, {7, 10007}, {7, 1}},       {3, 2, {1, 1, 1}, {1, 1}},
        {3, 3, {5, 1, 4099}, {1, 3, 1}},  {2, 3, {1, 9001}, {3, 1, 1}},
    };
    float *a = malloc(70100 * 4), *b = malloc(70100 * 4);
    for (size_t i = 0; i < 70100; i++) {
        a[i] = rnd(-3, 3);
        b[i] = rnd(0.25f, 2) * (i % 3 ? 1 : -1); /* no zero divisors */
        if (i % 17 == 0)
            b[i] = a[i]; /* some equal pairs for Equal / Max */
    }
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        struct gf_tview in[2] = {tv(GF_FLOAT, a, shapes[s].ra, shapes[s].a),
                                 tv(GF_FLOAT, b, shapes[s].rb, shapes[s].b)};
        for (size_t o = 0; o < sizeof(bin_refs) / sizeof(bin_refs[0]); o++)
            check_binary(&bin_refs[o], in, 1 + (int)((s + o) % 3));
    }
    free(a);
    free(b);
}

/* The output may be one of the inputs (in-place execution). */
static void test_in_place(void **state)
{
    (void)state;
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {10, 20, 30, 40, 50};
    struct gf_tview in[2] = {tv(GF_FLOAT, x, DIMS(5)), tv(GF_FLOAT, y, DIMS(5))};
    struct gf_tview out = tv(GF_FLOAT, x, DIMS(5));
    assert_int_equal(run(mk(17, "Add", 2, 1), in, 2, &out), GF_OK);
    for (int i = 0; i < 5; i++)
        assert_true(x[i] == (float)(11 * (i + 1)));
}

/* ---- integer semantics --------------------------------------------------- */

/* Runs a binary op on two int32 vectors of length n. */
static void run_i32(const char *op, int fmod, const int32_t *x, const int32_t *y, int32_t *z,
                    size_t n)
{
    struct gf_node *node = mk(17, op, 2, 1);
    gf_node_set_attr_int(node, "fmod", fmod);
    struct gf_tview in[2] = {tv(GF_INT32, (void *)x, DIMS((int64_t)n)),
                             tv(GF_INT32, (void *)y, DIMS((int64_t)n))};
    struct gf_tview out = tv(GF_INT32, z, DIMS((int64_t)n));
    assert_int_equal(run(node, in, 2, &out), GF_OK);
}

static void expect_i32(const int32_t *got, const int32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s element %zu: got %d, want %d", what, i, got[i], want[i]);
}

static void test_int_div_mod(void **state)
{
    (void)state;
    const int32_t x[] = {7, -7, 7, -7, INT32_MIN, 5, 0, INT32_MIN};
    const int32_t y[] = {3, 3, -3, -3, -1, 7, 5, 1};
    const int32_t div[] = {2, -2, -2, 2, INT32_MIN, 0, 0, INT32_MIN};
    const int32_t mod0[] = {1, 2, -2, -1, 0, 5, 0, 0}; /* sign of the divisor */
    const int32_t mod1[] = {1, -1, 1, -1, 0, 5, 0, 0}; /* C fmod: sign of the dividend */
    int32_t z[8];
    run_i32("Div", 0, x, y, z, 8);
    expect_i32(z, div, 8, "Div");
    run_i32("Mod", 0, x, y, z, 8);
    expect_i32(z, mod0, 8, "Mod fmod=0");
    run_i32("Mod", 1, x, y, z, 8);
    expect_i32(z, mod1, 8, "Mod fmod=1");

    uint8_t ux[] = {200, 7}, uy[] = {7, 200}, uz[2];
    struct gf_tview in[2] = {tv(GF_UINT8, ux, DIMS(2)), tv(GF_UINT8, uy, DIMS(2))};
    struct gf_tview out = tv(GF_UINT8, uz, DIMS(2));
    assert_int_equal(run(mk(17, "Div", 2, 1), in, 2, &out), GF_OK);
    assert_true(uz[0] == 28 && uz[1] == 0);
    assert_int_equal(run(mk(17, "Mod", 2, 1), in, 2, &out), GF_OK);
    assert_true(uz[0] == 4 && uz[1] == 7);

    float fx[] = {-7.5f, 7.5f}, fy[] = {2, -2}, fz[2];
    struct gf_tview fin[2] = {tv(GF_FLOAT, fx, DIMS(2)), tv(GF_FLOAT, fy, DIMS(2))};
    struct gf_tview fout = tv(GF_FLOAT, fz, DIMS(2));
    assert_int_equal(run(mk(17, "Mod", 2, 1), fin, 2, &fout), GF_OK);
    assert_true(fz[0] == 0.5f && fz[1] == -0.5f);
}

/* Signed overflow wraps as two's complement (C would make it undefined). */
static void test_int_wrap(void **state)
{
    (void)state;
    const int32_t x[] = {INT32_MAX, INT32_MIN, 65536, -3};
    const int32_t y[] = {1, 1, 65536, 5};
    const int32_t add[] = {INT32_MIN, INT32_MIN + 1, 131072, 2};
    const int32_t sub[] = {INT32_MAX - 1, INT32_MAX, 0, -8};
    const int32_t mul[] = {INT32_MAX, INT32_MIN, 0, -15};
    int32_t z[4];
    run_i32("Add", 0, x, y, z, 4);
    expect_i32(z, add, 4, "Add");
    run_i32("Sub", 0, x, y, z, 4);
    expect_i32(z, sub, 4, "Sub");
    run_i32("Mul", 0, x, y, z, 4);
    expect_i32(z, mul, 4, "Mul");

    uint16_t ux[] = {65535, 300}, uz[2];
    struct gf_tview in[2] = {tv(GF_UINT16, ux, DIMS(2)), tv(GF_UINT16, ux, DIMS(2))};
    struct gf_tview out = tv(GF_UINT16, uz, DIMS(2));
    assert_int_equal(run(mk(17, "Mul", 2, 1), in, 2, &out), GF_OK);
    assert_true(uz[0] == 1 && uz[1] == (uint16_t)90000);

    int32_t nx[] = {INT32_MIN, -5, 7}, nz[3];
    struct gf_tview nin = tv(GF_INT32, nx, DIMS(3)), nout = tv(GF_INT32, nz, DIMS(3));
    assert_int_equal(run(mk(17, "Neg", 1, 1), &nin, 1, &nout), GF_OK);
    assert_true(nz[0] == INT32_MIN && nz[1] == 5 && nz[2] == -7);
    assert_int_equal(run(mk(17, "Abs", 1, 1), &nin, 1, &nout), GF_OK);
    assert_true(nz[0] == INT32_MIN && nz[1] == 5 && nz[2] == 7);
    assert_int_equal(run(mk(17, "Sign", 1, 1), &nin, 1, &nout), GF_OK);
    assert_true(nz[0] == -1 && nz[1] == -1 && nz[2] == 1);
    assert_int_equal(run(mk(17, "Relu", 1, 1), &nin, 1, &nout), GF_OK);
    assert_true(nz[0] == 0 && nz[1] == 0 && nz[2] == 7);
}

static void test_pow_types(void **state)
{
    (void)state;
    int32_t ix[] = {2, 3, -2, 0, 5}, iy[] = {10, 3, 3, 0, 1}, iz[5];
    const int32_t ipow[] = {1024, 27, -8, 1, 5};
    run_i32("Pow", 0, ix, iy, iz, 5);
    expect_i32(iz, ipow, 5, "Pow int32");

    int64_t lx[] = {3, 2}, ly[] = {40, 62}, lz[2];
    struct gf_tview in[2] = {tv(GF_INT64, lx, DIMS(2)), tv(GF_INT64, ly, DIMS(2))};
    struct gf_tview out = tv(GF_INT64, lz, DIMS(2));
    assert_int_equal(run(mk(17, "Pow", 2, 1), in, 2, &out), GF_OK);
    assert_true(lz[0] == INT64_C(-6289078614652622815) && lz[1] == INT64_C(1) << 62);

    float fy[] = {0.5f, 2, -1}; /* int base, float exponent: truncated result */
    in[0] = tv(GF_INT32, ix, DIMS(3));
    in[1] = tv(GF_FLOAT, fy, DIMS(3));
    out = tv(GF_INT32, iz, DIMS(3));
    assert_int_equal(run(mk(17, "Pow", 2, 1), in, 2, &out), GF_OK);
    assert_true(iz[0] == 1 && iz[1] == 9 && iz[2] == 0);

    float fx[] = {2, 4, -2}, fz[3]; /* float base, integer exponent */
    int64_t ey[] = {3, -1, -2};
    in[0] = tv(GF_FLOAT, fx, DIMS(3));
    in[1] = tv(GF_INT64, ey, DIMS(3));
    out = tv(GF_FLOAT, fz, DIMS(3));
    assert_int_equal(run(mk(17, "Pow", 2, 1), in, 2, &out), GF_OK);
    assert_true(fz[0] == 8 && fz[1] == 0.25f && fz[2] == 0.25f);

    uint8_t ub[] = {2, 3}, uz[2]; /* different integer types wrap in the base's */
    int8_t sy[] = {9, 2};
    in[0] = tv(GF_UINT8, ub, DIMS(2));
    in[1] = tv(GF_INT8, sy, DIMS(2));
    out = tv(GF_UINT8, uz, DIMS(2));
    assert_int_equal(run(mk(17, "Pow", 2, 1), in, 2, &out), GF_OK);
    assert_true(uz[0] == 0 && uz[1] == 9);
}

static void test_compare_logic(void **state)
{
    (void)state;
    int64_t x[] = {INT64_MIN, -1, 5, INT64_MAX}, y[] = {INT64_MIN, 0, 4, INT64_MIN};
    uint8_t z[4];
    struct gf_tview in[2] = {tv(GF_INT64, x, DIMS(4)), tv(GF_INT64, y, DIMS(4))};
    struct gf_tview out = tv(GF_BOOL, z, DIMS(4));
    static const struct { const char *op; uint8_t want[4]; } cases[] = {
        {"Equal", {1, 0, 0, 0}},          {"Less", {0, 1, 0, 0}},
        {"LessOrEqual", {1, 1, 0, 0}},    {"Greater", {0, 0, 1, 1}},
        {"GreaterOrEqual", {1, 0, 1, 1}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        assert_int_equal(run(mk(17, cases[c].op, 2, 1), in, 2, &out), GF_OK);
        assert_memory_equal(z, cases[c].want, 4);
    }
    uint8_t a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
    static const struct { const char *op; uint8_t want[4]; } logic[] = {
        {"And", {0, 0, 0, 1}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 1, 0}},
        {"Equal", {1, 0, 0, 1}},
    };
    in[0] = tv(GF_BOOL, a, DIMS(4));
    in[1] = tv(GF_BOOL, b, DIMS(4));
    for (size_t c = 0; c < sizeof(logic) / sizeof(logic[0]); c++) {
        assert_int_equal(run(mk(17, logic[c].op, 2, 1), in, 2, &out), GF_OK);
        assert_memory_equal(z, logic[c].want, 4);
    }
    assert_int_equal(run(mk(17, "Not", 1, 1), in, 1, &out), GF_OK);
    assert_true(z[0] == 1 && z[1] == 1 && z[2] == 0 && z[3] == 0);
    float nan[] = {NAN, 1}, one[] = {NAN, 1}; /* NaN equals nothing */
    in[0] = tv(GF_FLOAT, nan, DIMS(2));
    in[1] = tv(GF_FLOAT, one, DIMS(2));
    out = tv(GF_BOOL, z, DIMS(2));
    assert_int_equal(run(mk(17, "Equal", 2, 1), in, 2, &out), GF_OK);
    assert_true(z[0] == 0 && z[1] == 1);
}

/* ---- unary ops ----------------------------------------------------------- */

static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_recip(double x) { return 1 / x; }
static double r_neg(double x) { return -x; }
static double r_relu(double x) { return isnan(x) ? x : x > 0 ? x : 0; }
static double r_leaky(double x) { return x >= 0 ? x : (double)0.01f * x; }
static double r_elu(double x) { return x >= 0 ? x : exp(x) - 1; }
static double r_selu(double x) /* the defaults are these floats */
{
    return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * (exp(x) - 1));
}
static double r_softplus(double x) { return x > 30 ? x : log(1 + exp(x)); }
static double r_softsign(double x) { return x / (1 + fabs(x)); }
static double r_clamp01(double v) { return isnan(v) ? v : v < 0 ? 0 : v > 1 ? 1 : v; }
static double r_hsigmoid(double x) { return r_clamp01((double)0.2f * x + 0.5); }
static double r_hswish(double x) { return x * r_clamp01(x / 6 + 0.5); }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_sign(double x) { return isnan(x) ? x : (x > 0) - (x < 0); }
static double r_round(double x) { return x - floor(x) == 0.5 ? 2 * round(x / 2) : round(x); }
static double r_isnan(double x) { return isnan(x); }
static double r_isinf(double x) { return isinf(x) != 0; }

static const struct un_ref {
    const char *op;
    double (*f)(double);
    bool bool_out;
} un_refs[] = {
    {"Sqrt", sqrt, false},           {"Reciprocal", r_recip, false},
    {"Neg", r_neg, false},           {"Abs", fabs, false},
    {"Exp", exp, false},             {"Log", log, false},
    {"Sin", sin, false},             {"Cos", cos, false},
    {"Tanh", tanh, false},           {"Sigmoid", r_sigmoid, false},
    {"Relu", r_relu, false},         {"LeakyRelu", r_leaky, false},
    {"Elu", r_elu, false},           {"Selu", r_selu, false},
    {"Softplus", r_softplus, false}, {"Softsign", r_softsign, false},
    {"HardSigmoid", r_hsigmoid, false}, {"HardSwish", r_hswish, false},
    {"Erf", erf, false},             {"Gelu", r_gelu, false},
    {"Floor", floor, false},         {"Ceil", ceil, false},
    {"Round", r_round, false},       {"Sign", r_sign, false},
    {"IsNaN", r_isnan, true},        {"IsInf", r_isinf, true},
};

/* Every unary op on fp32 and double, 1000 random values plus the edges. */
static void test_unary(void **state)
{
    (void)state;
    enum { N = 1037 };
    static const double edges[] = {0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-30, 80, -80,
                                   100, -100, NAN, INFINITY, -INFINITY};
    double xd[N], yd[N];
    float xf[N], yf[N];
    for (int i = 0; i < N; i++) {
        xd[i] = i < 15 ? edges[i] : rnd(-6, 6);
        xf[i] = (float)xd[i];
        xd[i] = xf[i]; /* the same values in both types */
    }
    for (size_t o = 0; o < sizeof(un_refs) / sizeof(un_refs[0]); o++) {
        const struct un_ref *r = &un_refs[o];
        struct gf_node *n = mk(20, r->op, 1, 1);
        for (int dbl = 0; dbl < 2; dbl++) {
            struct gf_tview in = tv(dbl ? GF_DOUBLE : GF_FLOAT, dbl ? (void *)xd : xf, DIMS(N));
            struct gf_tview out = tv(r->bool_out ? GF_BOOL : in.dtype, dbl ? (void *)yd : yf,
                                     DIMS(N));
            assert_int_equal(run(n, &in, 1, &out), GF_OK);
            for (size_t i = 0; i < N; i++) {
                double want = dbl ? r->f(xd[i]) : (float)r->f(xd[i]);
                expect_close(elem(&out, i), want, dbl ? 1e-13 : 2e-6, r->op, i);
            }
        }
    }
}

/* Attributes of the activations, the tanh Gelu and IsInf's selectors. */
static void test_unary_attributes(void **state)
{
    (void)state;
    float x[] = {-2, -0.5f, 0, 1.5f, INFINITY, -INFINITY, NAN}, y[7];
    uint8_t b[7];
    struct gf_tview in = tv(GF_FLOAT, x, DIMS(7)), out = tv(GF_FLOAT, y, DIMS(7));
    struct gf_node *n = mk(20, "LeakyRelu", 1, 1);
    gf_node_set_attr_float(n, "alpha", 0.5f);
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    assert_true(y[0] == -1 && y[1] == -0.25f && y[3] == 1.5f);
    n = mk(20, "Elu", 1, 1);
    gf_node_set_attr_float(n, "alpha", 2);
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    expect_close(y[0], 2 * (exp(-2.0) - 1), 1e-6, "Elu", 0);
    n = mk(20, "HardSigmoid", 1, 1);
    gf_node_set_attr_float(n, "alpha", 1);
    gf_node_set_attr_float(n, "beta", 0.25f);
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    assert_true(y[0] == 0 && y[1] == 0 && y[2] == 0.25f && y[3] == 1);
    n = mk(20, "Gelu", 1, 1);
    gf_node_set_attr_string(n, "approximate", "tanh");
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    for (int i = 0; i < 4; i++) {
        double v = x[i], t = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        expect_close(y[i], t, 1e-6, "Gelu tanh", (size_t)i);
    }
    out = tv(GF_BOOL, b, DIMS(7));
    n = mk(10, "IsInf", 1, 1);
    gf_node_set_attr_int(n, "detect_negative", 0);
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    assert_memory_equal(b, ((uint8_t[]){0, 0, 0, 0, 1, 0, 0}), 7);
    n = mk(10, "IsInf", 1, 1);
    gf_node_set_attr_int(n, "detect_positive", 0);
    assert_int_equal(run(n, &in, 1, &out), GF_OK);
    assert_memory_equal(b, ((uint8_t[]){0, 0, 0, 0, 0, 1, 0}), 7);
}

/* ---- fp16 and bf16 ------------------------------------------------------- */

static float h2f(enum gf_dtype t, uint16_t h)
{
    return t == GF_FLOAT16 ? gf_half_to_float(h) : gf_bf16_to_float(h);
}

static uint16_t f2h(enum gf_dtype t, float f)
{
    return t == GF_FLOAT16 ? gf_float_to_half(f) : gf_float_to_bf16(f);
}

/* [3, 300] + [300] (runs longer than the conversion block), Less against
 * a scalar and Sigmoid: computed in fp32, rounded once. */
static void test_half_types(void **state)
{
    (void)state;
    static const enum gf_dtype types[] = {GF_FLOAT16, GF_BFLOAT16};
    uint16_t a[900], b[300], c[900], s;
    uint8_t lt[900];
    for (size_t t = 0; t < 2; t++) {
        enum gf_dtype dt = types[t];
        for (int i = 0; i < 900; i++)
            a[i] = f2h(dt, rnd(-8, 8));
        for (int i = 0; i < 300; i++)
            b[i] = f2h(dt, rnd(-8, 8));
        s = f2h(dt, 0.5f);
        struct gf_tview in[2] = {tv(dt, a, DIMS(3, 300)), tv(dt, b, DIMS(300))};
        struct gf_tview out = tv(dt, c, DIMS(3, 300));
        assert_int_equal(run(mk(17, "Add", 2, 1), in, 2, &out), GF_OK);
        for (int i = 0; i < 900; i++)
            assert_int_equal(c[i], f2h(dt, h2f(dt, a[i]) + h2f(dt, b[i % 300])));
        assert_int_equal(run(mk(17, "Sigmoid", 1, 1), in, 1, &out), GF_OK);
        for (int i = 0; i < 900; i++)
            expect_close(h2f(dt, c[i]), 1 / (1 + exp(-h2f(dt, a[i]))), 1e-2, "Sigmoid", i);
        in[1] = tv(dt, &s, SCALAR);
        out = tv(GF_BOOL, lt, DIMS(3, 300));
        assert_int_equal(run(mk(17, "Less", 2, 1), in, 2, &out), GF_OK);
        for (int i = 0; i < 900; i++)
            assert_int_equal(lt[i], h2f(dt, a[i]) < 0.5f);
    }
}

/* ---- Cast ---------------------------------------------------------------- */

static void cast(const void *x, enum gf_dtype from, void *y, enum gf_dtype to, int64_t n)
{
    struct gf_node *node = mk(19, "Cast", 1, 1);
    gf_node_set_attr_int(node, "to", to);
    struct gf_tview in = tv(from, (void *)x, DIMS(n)), out = tv(to, y, DIMS(n));
    assert_int_equal(run(node, &in, 1, &out), GF_OK);
}

/* Float to integer truncates; NaN gives 0 and out-of-range saturates. */
static void test_cast_float_int(void **state)
{
    (void)state;
    const float x[] = {2.7f, -2.7f, 300, -300, NAN, INFINITY, -INFINITY, 1e20f, -0.5f};
    int8_t i8[9];
    uint8_t u8[9];
    int64_t i64[9];
    uint64_t u64[9];
    cast(x, GF_FLOAT, i8, GF_INT8, 9);
    assert_memory_equal(i8, ((int8_t[]){2, -2, 127, -128, 0, 127, -128, 127, 0}), 9);
    cast(x, GF_FLOAT, u8, GF_UINT8, 9);
    assert_memory_equal(u8, ((uint8_t[]){2, 0, 255, 0, 0, 255, 0, 255, 0}), 9);
    cast(x, GF_FLOAT, i64, GF_INT64, 9);
    const int64_t w64[] = {2, -2, 300, -300, 0, INT64_MAX, INT64_MIN, INT64_MAX, 0};
    assert_memory_equal(i64, w64, sizeof(w64));
    cast(x, GF_FLOAT, u64, GF_UINT64, 9);
    const uint64_t wu64[] = {2, 0, 300, 0, 0, UINT64_MAX, 0, UINT64_MAX, 0};
    assert_memory_equal(u64, wu64, sizeof(wu64));
    cast(x, GF_FLOAT, u8, GF_BOOL, 9); /* NaN is true, -0.5 too */
    assert_memory_equal(u8, ((uint8_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), 9);
    const double d[] = {0, -0.0, 1, 4294967296.0};
    cast(d, GF_DOUBLE, u8, GF_BOOL, 4);
    assert_memory_equal(u8, ((uint8_t[]){0, 0, 1, 1}), 4);
}

/* Between integer types values wrap, as C conversions do; bool is != 0. */
static void test_cast_int_int(void **state)
{
    (void)state;
    const int64_t x[] = {-1, 256, 300, INT64_MIN, 0};
    uint8_t u8[5];
    int16_t i16[5];
    uint64_t u64[5];
    cast(x, GF_INT64, u8, GF_UINT8, 5);
    assert_memory_equal(u8, ((uint8_t[]){255, 0, 44, 0, 0}), 5);
    cast(x, GF_INT64, i16, GF_INT16, 5);
    assert_memory_equal(i16, ((int16_t[]){-1, 256, 300, 0, 0}), 10);
    cast(x, GF_INT64, u64, GF_UINT64, 5);
    assert_true(u64[0] == UINT64_MAX && u64[3] == UINT64_C(1) << 63);
    cast(x, GF_INT64, u8, GF_BOOL, 5);
    assert_memory_equal(u8, ((uint8_t[]){1, 1, 1, 1, 0}), 5);
    const uint64_t big[] = {UINT64_MAX, UINT64_C(1) << 63};
    int64_t i64[2];
    cast(big, GF_UINT64, i64, GF_INT64, 2);
    assert_true(i64[0] == -1 && i64[1] == INT64_MIN);
    double dd[2];
    cast(big, GF_UINT64, dd, GF_DOUBLE, 2);
    assert_true(dd[0] == 18446744073709551616.0 && dd[1] == 9223372036854775808.0);
    const uint8_t bools[] = {0, 1};
    float f[2];
    cast(bools, GF_BOOL, f, GF_FLOAT, 2);
    assert_true(f[0] == 0 && f[1] == 1);
}

/* fp16 / bf16 round to nearest even, once, from double as from float. */
static void test_cast_bf16(void **state)
{
    (void)state;
    uint32_t bits[] = {0x3ef5eeb0u, 0x3ef535b8u, 0x3f808000u, 0x3f818000u, 0x7fc00000u};
    float x[5];
    memcpy(x, bits, sizeof(x));
    uint16_t h[5];
    cast(x, GF_FLOAT, h, GF_BFLOAT16, 5);
    assert_memory_equal(h, ((uint16_t[]){0x3ef6, 0x3ef5, 0x3f80, 0x3f82}), 8);
    assert_true((h[4] & 0x7f80) == 0x7f80 && (h[4] & 0x7f)); /* NaN */
    float back[5];
    cast(h, GF_BFLOAT16, back, GF_FLOAT, 4);
    for (int i = 0; i < 4; i++)
        assert_true(back[i] == gf_bf16_to_float(h[i]));
    /* 1 + 2^-11 + 2^-40 is just above the midpoint of two halves; through
     * float it would land on the midpoint and round down to 1. */
    const double d[] = {1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-11, 70000, -1e-9, 0x1p-24};
    cast(d, GF_DOUBLE, h, GF_FLOAT16, 5);
    assert_memory_equal(h, ((uint16_t[]){0x3c01, 0x3c00, 0x7c00, 0x8000, 0x0001}), 10);
    double dd[5];
    cast(h, GF_FLOAT16, dd, GF_DOUBLE, 5);
    assert_true(dd[0] == 1 + 0x1p-10 && isinf(dd[2]) && dd[4] == 0x1p-24);
}

/* CastLike takes the type of its second input; same-type casts copy. */
static void test_castlike_identity(void **state)
{
    (void)state;
    int32_t x[3] = {-1, 0, 7}, like[1], same[3];
    double y[3];
    struct gf_tview in[2] = {tv(GF_INT32, x, DIMS(3)), tv(GF_DOUBLE, like, DIMS(1))};
    struct gf_tview out = tv(GF_DOUBLE, y, DIMS(3));
    assert_int_equal(run(mk(19, "CastLike", 2, 1), in, 2, &out), GF_OK);
    assert_true(y[0] == -1 && y[1] == 0 && y[2] == 7);
    out = tv(GF_INT32, same, DIMS(3));
    assert_int_equal(run(mk(19, "Identity", 1, 1), in, 1, &out), GF_OK);
    assert_memory_equal(same, x, sizeof(x));
    memset(same, 0, sizeof(same));
    struct gf_node *n = mk(19, "Cast", 1, 1);
    gf_node_set_attr_int(n, "to", GF_INT32);
    assert_int_equal(run(n, in, 1, &out), GF_OK);
    assert_memory_equal(same, x, sizeof(x));
}

/* ---- Clip ---------------------------------------------------------------- */

static void test_clip(void **state)
{
    (void)state;
    float x[] = {-5, -1, 0, 2, 9, NAN}, y[6], lo = -1.5f, hi = 3;
    struct gf_tview in[3] = {tv(GF_FLOAT, x, DIMS(6)), tv(GF_FLOAT, &lo, SCALAR),
                             tv(GF_FLOAT, &hi, SCALAR)};
    struct gf_tview out = tv(GF_FLOAT, y, DIMS(6));
    assert_int_equal(run(mk(13, "Clip", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(y, ((float[]){-1.5f, -1, 0, 2, 3}), 20);
    assert_true(isnan(y[5]));
    in[1].data = NULL; /* only max */
    assert_int_equal(run(mk(13, "Clip", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(y, ((float[]){-5, -1, 0, 2, 3}), 20);
    lo = 4; /* min > max: everything becomes max */
    in[1].data = &lo;
    assert_int_equal(run(mk(13, "Clip", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(y, ((float[]){3, 3, 3, 3, 3}), 20);
    struct gf_node *n = mk(6, "Clip", 1, 1); /* opset 6: attributes */
    gf_node_set_attr_float(n, "min", 0);
    assert_int_equal(run(n, in, 1, &out), GF_OK);
    assert_memory_equal(y, ((float[]){0, 0, 0, 2, 9}), 20);

    int8_t ix[] = {-128, -3, 0, 5, 127}, iy[5], ilo = -3, ihi = 4;
    in[0] = tv(GF_INT8, ix, DIMS(5));
    in[1] = tv(GF_INT8, &ilo, DIMS(1));
    in[2] = tv(GF_INT8, &ihi, SCALAR);
    out = tv(GF_INT8, iy, DIMS(5));
    assert_int_equal(run(mk(13, "Clip", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(iy, ((int8_t[]){-3, -3, 0, 4, 4}), 5);
    uint16_t h[3] = {gf_float_to_half(-7), gf_float_to_half(0.25f), gf_float_to_half(7)};
    uint16_t hlo = gf_float_to_half(-1), hhi = gf_float_to_half(1), hy[3];
    in[0] = tv(GF_FLOAT16, h, DIMS(3));
    in[1] = tv(GF_FLOAT16, &hlo, SCALAR);
    in[2] = tv(GF_FLOAT16, &hhi, SCALAR);
    out = tv(GF_FLOAT16, hy, DIMS(3));
    assert_int_equal(run(mk(13, "Clip", 3, 1), in, 3, &out), GF_OK);
    assert_true(hy[0] == hlo && hy[1] == h[1] && hy[2] == hhi);
}

/* ---- Max Min Sum Mean ---------------------------------------------------- */

/* Three inputs [2,3,4], [3,1], [4] against the reference fold. */
static void test_variadic(void **state)
{
    (void)state;
    float a[24], b[3], c[4], y[24];
    for (int i = 0; i < 24; i++)
        a[i] = rnd(-4, 4);
    for (int i = 0; i < 3; i++)
        b[i] = rnd(-4, 4);
    for (int i = 0; i < 4; i++)
        c[i] = rnd(-4, 4);
    struct gf_tview in[3] = {tv(GF_FLOAT, a, DIMS(2, 3, 4)), tv(GF_FLOAT, b, DIMS(3, 1)),
                             tv(GF_FLOAT, c, DIMS(4))};
    struct gf_tview out = tv(GF_FLOAT, y, DIMS(2, 3, 4));
    static const char *const ops[] = {"Sum", "Mean", "Max", "Min"};
    for (int o = 0; o < 4; o++) {
        /* the inputs in reverse order: the first one is broadcast too */
        struct gf_tview rev[3] = {in[2], in[1], in[0]};
        assert_int_equal(run(mk(13, ops[o], 3, 1), rev, 3, &out), GF_OK);
        for (size_t i = 0; i < 24; i++) {
            double x0 = a[i], x1 = b[i / 4 % 3], x2 = c[i % 4];
            double want = o == 0 ? x2 + x1 + x0 : o == 1 ? (x2 + x1 + x0) / 3
                        : o == 2 ? fmax(fmax(x0, x1), x2) : fmin(fmin(x0, x1), x2);
            expect_close(y[i], want, 1e-6, ops[o], i);
        }
    }
    assert_int_equal(run(mk(13, "Max", 1, 1), in, 1, &out), GF_OK); /* one input: a copy */
    assert_memory_equal(y, a, sizeof(a));
    float nan[2] = {NAN, 1}, one[2] = {1, NAN};
    in[0] = tv(GF_FLOAT, nan, DIMS(2));
    in[1] = tv(GF_FLOAT, one, DIMS(2));
    out = tv(GF_FLOAT, y, DIMS(2));
    assert_int_equal(run(mk(13, "Max", 2, 1), in, 2, &out), GF_OK);
    assert_true(isnan(y[0]) && isnan(y[1])); /* NaN propagates, either side */
    uint64_t u[] = {UINT64_MAX, 3}, v[] = {1, 5}, w[2];
    in[0] = tv(GF_UINT64, u, DIMS(2));
    in[1] = tv(GF_UINT64, v, DIMS(2));
    out = tv(GF_UINT64, w, DIMS(2));
    assert_int_equal(run(mk(13, "Min", 2, 1), in, 2, &out), GF_OK);
    assert_true(w[0] == 1 && w[1] == 3);
    assert_int_equal(run(mk(13, "Mean", 2, 1), in, 2, &out), GF_OK);
    assert_true(w[0] == 0 && w[1] == 4); /* wrapped sum, then integer division */
}

/* ---- Where --------------------------------------------------------------- */

static void test_where(void **state)
{
    (void)state;
    uint8_t c[3] = {1, 0, 1};
    int64_t x[4] = {1, 2, 3, 4}, y = -1, z[12];
    struct gf_tview in[3] = {tv(GF_BOOL, c, DIMS(3, 1)), tv(GF_INT64, x, DIMS(1, 4)),
                             tv(GF_INT64, &y, SCALAR)};
    struct gf_tview out = tv(GF_INT64, z, DIMS(3, 4));
    assert_int_equal(run(mk(16, "Where", 3, 1), in, 3, &out), GF_OK);
    for (int i = 0; i < 12; i++)
        assert_int_equal(z[i], c[i / 4] ? x[i % 4] : -1);
    uint16_t hx[3] = {1, 2, 3}, hy[3] = {7, 8, 9}, hz[3];
    in[1] = tv(GF_FLOAT16, hx, DIMS(3));
    in[2] = tv(GF_FLOAT16, hy, DIMS(3));
    in[0] = tv(GF_BOOL, c, DIMS(3));
    out = tv(GF_FLOAT16, hz, DIMS(3));
    assert_int_equal(run(mk(16, "Where", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(hz, ((uint16_t[]){1, 8, 3}), 6);
    uint8_t bx[3] = {0, 0, 0}, by[3] = {1, 1, 1}, bz[3];
    in[1] = tv(GF_BOOL, bx, DIMS(3));
    in[2] = tv(GF_BOOL, by, DIMS(3));
    out = tv(GF_BOOL, bz, DIMS(3));
    assert_int_equal(run(mk(16, "Where", 3, 1), in, 3, &out), GF_OK);
    assert_memory_equal(bz, ((uint8_t[]){0, 1, 0}), 3);
}

/* ---- Dropout ------------------------------------------------------------- */

/* Runs Dropout on x[n] with y and mask outputs; ratio < 0: no ratio input. */
static enum gf_status dropout(struct gf_node *n, float *x, float *y, uint8_t *mask, int64_t len,
                              float ratio, int train)
{
    uint8_t t = (uint8_t)(train > 0);
    struct gf_tview in[3] = {tv(GF_FLOAT, x, DIMS(len)), tv(GF_FLOAT, &ratio, SCALAR),
                             tv(GF_BOOL, &t, SCALAR)};
    if (ratio < 0)
        in[1].data = NULL;
    struct gf_tview out[2] = {tv(GF_FLOAT, y, DIMS(len)), tv(GF_BOOL, mask, DIMS(len))};
    return run_t(n, in, train < 0 ? 1 : 3, out, mask ? 2 : 1, 2);
}

static void test_dropout(void **state)
{
    (void)state;
    enum { N = 10000 };
    float *x = malloc(N * 4), *y = malloc(N * 4), *y2 = malloc(N * 4);
    uint8_t *mask = malloc(N), *mask2 = malloc(N);
    for (int i = 0; i < N; i++)
        x[i] = rnd(-2, 2);
    struct gf_node *n = mk(13, "Dropout", 3, 2);
    gf_node_set_attr_int(n, "seed", 7);
    /* inference, and training with ratio 0: exact copies, mask all true */
    for (int train = 0; train < 2; train++) {
        assert_int_equal(dropout(n, x, y, mask, N, train ? 0 : 0.5f, train), GF_OK);
        assert_memory_equal(y, x, N * 4);
        for (int i = 0; i < N; i++)
            assert_int_equal(mask[i], 1);
    }
    /* training: kept elements scaled by 1/(1 - ratio), about ratio dropped */
    assert_int_equal(dropout(n, x, y, mask, N, 0.25f, 1), GF_OK);
    int dropped = 0;
    for (int i = 0; i < N; i++) {
        dropped += !mask[i];
        expect_close(y[i], mask[i] ? x[i] / 0.75 : 0, 1e-7, "Dropout", (size_t)i);
    }
    assert_true(dropped > N / 4 - 300 && dropped < N / 4 + 300);
    /* the same seed drops the same elements; without a mask output too */
    assert_int_equal(dropout(n, x, y2, NULL, N, 0.25f, 1), GF_OK);
    assert_memory_equal(y, y2, N * 4);
    struct gf_node *n2 = mk(13, "Dropout", 3, 2);
    gf_node_set_attr_int(n2, "seed", 8);
    assert_int_equal(dropout(n2, x, y2, mask2, N, 0.25f, 1), GF_OK);
    assert_memory_not_equal(mask, mask2, N);
    /* opset 6: is_test=0 (the default) trains with the ratio attribute */
    struct gf_node *old = mk(6, "Dropout", 1, 1);
    assert_int_equal(dropout(old, x, y, NULL, N, -1, -1), GF_OK);
    dropped = 0;
    for (int i = 0; i < N; i++)
        dropped += y[i] == 0;
    assert_true(dropped > N / 2 - 300 && dropped < N / 2 + 300);
    gf_node_set_attr_int(old, "is_test", 1);
    assert_int_equal(dropout(old, x, y, NULL, N, -1, -1), GF_OK);
    assert_memory_equal(y, x, N * 4);
    /* opset 7: inference; the mask has the data's type */
    float fmask[3];
    struct gf_tview in = tv(GF_FLOAT, x, DIMS(3));
    struct gf_tview out[2] = {tv(GF_FLOAT, y, DIMS(3)), tv(GF_FLOAT, fmask, DIMS(3))};
    assert_int_equal(run_t(mk(7, "Dropout", 1, 2), &in, 1, out, 2, 1), GF_OK);
    assert_true(fmask[0] == 1 && fmask[2] == 1 && y[1] == x[1]);
    free(x), free(y), free(y2), free(mask), free(mask2);
}

/* ---- opset 1-6 broadcasting: B placed at `axis` -------------------------- */

static void test_legacy_broadcast(void **state)
{
    (void)state;
    float a[120], b[12], y[120];
    for (int i = 0; i < 120; i++)
        a[i] = (float)i;
    for (int i = 0; i < 12; i++)
        b[i] = (float)(1000 * i);
    struct gf_node *n = mk(6, "Add", 2, 1);
    gf_node_set_attr_int(n, "broadcast", 1);
    gf_node_set_attr_int(n, "axis", 1);
    struct gf_tview in[2] = {tv(GF_FLOAT, a, DIMS(2, 3, 4, 5)), tv(GF_FLOAT, b, DIMS(3, 4))};
    struct gf_tview out = tv(GF_FLOAT, y, DIMS(2, 3, 4, 5));
    assert_int_equal(run(n, in, 2, &out), GF_OK);
    for (int i = 0; i < 120; i++)
        assert_true(y[i] == a[i] + b[i / 5 % 12]);
    n = mk(6, "Mul", 2, 1); /* broadcast=1 without axis: trailing, as numpy */
    gf_node_set_attr_int(n, "broadcast", 1);
    in[1] = tv(GF_FLOAT, b, DIMS(5));
    assert_int_equal(run(n, in, 2, &out), GF_OK);
    for (int i = 0; i < 120; i++)
        assert_true(y[i] == a[i] * b[i % 5]);
}

/* ---- errors: GF_ERR_INVALID with a message naming the problem ------------ */

static void test_errors_arith(void **state)
{
    (void)state;
    int32_t x[3] = {1, 2, 3}, zero[3] = {1, 5, 0}, neg[3] = {1, -2, 3}, z[3];
    struct gf_tview in[2] = {tv(GF_INT32, x, DIMS(3)), tv(GF_INT32, zero, DIMS(3))};
    struct gf_tview out = tv(GF_INT32, z, DIMS(3));
    expect_error(run(mk(17, "Div", 2, 1), in, 2, &out),
                 "input 1 (divisor) element 2 is 0: integer division by zero");
    expect_error(run(mk(17, "Mod", 2, 1), in, 2, &out),
                 "element 2 is 0: integer modulo by zero");
    in[1].data = neg;
    expect_error(run(mk(17, "Pow", 2, 1), in, 2, &out),
                 "input 1 (exponent) element 1 is -2: an integer base needs a non-negative");
    struct gf_node *n = mk(17, "Mod", 2, 1);
    gf_node_set_attr_int(n, "fmod", 2);
    expect_error(run(n, in, 2, &out), "fmod=2 is neither 0 nor 1");

    float a[12] = {0}, b[5] = {0}, y[12];
    double d[12] = {0};
    in[0] = tv(GF_FLOAT, a, DIMS(3, 4));
    in[1] = tv(GF_FLOAT, b, DIMS(5));
    out = tv(GF_FLOAT, y, DIMS(3, 4));
    expect_error(run(mk(17, "Add", 2, 1), in, 2, &out),
                 "input 1 of shape [5] does not broadcast to the output shape [3,4]");
    in[1] = tv(GF_FLOAT, b, DIMS(1, 1, 1));
    expect_error(run(mk(17, "Sub", 2, 1), in, 2, &out), "input 1 of shape [1,1,1]");
    in[1] = tv(GF_FLOAT, NULL, DIMS(4));
    expect_error(run(mk(17, "Mul", 2, 1), in, 2, &out), "input 1 is missing");
    in[1] = tv(GF_DOUBLE, d, DIMS(4));
    expect_error(run(mk(17, "Mul", 2, 1), in, 2, &out),
                 "inputs 0 and 1 differ in type (float, double)");
    in[1] = in[0];
    out.dtype = GF_INT32;
    expect_error(run(mk(17, "Add", 2, 1), in, 2, &out),
                 "output 0 has type int32, expected float");
    out = tv(GF_FLOAT, y, DIMS(3, 4));
    expect_error(run(mk(17, "Less", 2, 1), in, 2, &out),
                 "output 0 has type float, expected bool");
    out.data = NULL;
    expect_error(run(mk(17, "Add", 2, 1), in, 2, &out), "output 0 is missing");
    out = tv(GF_FLOAT, y, DIMS(4, 3, 1));
    expect_error(run(mk(17, "Relu", 1, 1), in, 1, &out),
                 "input 0 of shape [3,4] does not broadcast");
    out = tv(GF_FLOAT, y, DIMS(11));
    expect_error(run(mk(17, "Exp", 1, 1), in, 1, &out),
                 "input 0 has 12 elements, output 0 has 11");
    n = mk(6, "Add", 2, 1);
    gf_node_set_attr_int(n, "broadcast", 1);
    gf_node_set_attr_int(n, "axis", 2);
    out = tv(GF_FLOAT, y, DIMS(3, 4));
    expect_error(run(n, in, 2, &out),
                 "axis=2 cannot place input 1 (rank 2) in input 0 (rank 2)");
    n = mk(20, "Gelu", 1, 1);
    gf_node_set_attr_string(n, "approximate", "fast");
    expect_error(run(n, in, 1, &out), "approximate='fast' is neither 'none' nor 'tanh'");
}

static void test_errors_other(void **state)
{
    (void)state;
    float x[4] = {0}, y[4], lo[2] = {0, 1}, ratio = 1;
    double dlo = 0;
    uint8_t yes = 1, m[4];
    int32_t ix[4] = {0};
    struct gf_tview in[3] = {tv(GF_FLOAT, x, DIMS(4)), tv(GF_FLOAT, lo, DIMS(2)),
                             tv(GF_FLOAT, lo, SCALAR)};
    struct gf_tview out[2] = {tv(GF_FLOAT, y, DIMS(4)), tv(GF_BOOL, m, DIMS(4))};
    expect_error(run(mk(13, "Clip", 3, 1), in, 3, out),
                 "input 1 (min) must be a scalar, not of shape [2]");
    in[1] = tv(GF_DOUBLE, &dlo, SCALAR);
    expect_error(run_t(mk(13, "Clip", 3, 1), in, 3, out, 1, 1),
                 "input 1 (min) has type double, expected float");
    in[1] = tv(GF_FLOAT, &ratio, SCALAR);
    in[2] = tv(GF_BOOL, &yes, SCALAR);
    expect_error(run_t(mk(13, "Dropout", 3, 2), in, 3, out, 2, 1),
                 "ratio 1 is outside [0, 1)");
    in[1] = tv(GF_FLOAT, lo, DIMS(2));
    expect_error(run_t(mk(13, "Dropout", 3, 2), in, 3, out, 2, 1),
                 "input 1 (ratio) must be a scalar");
    in[1] = tv(GF_FLOAT, lo, SCALAR);
    in[2] = tv(GF_FLOAT, lo, SCALAR);
    expect_error(run_t(mk(13, "Dropout", 3, 2), in, 3, out, 2, 1),
                 "input 2 (training_mode) has type float, expected bool");
    in[0] = tv(GF_INT32, ix, DIMS(4));
    in[1] = tv(GF_FLOAT, x, DIMS(4));
    in[2] = tv(GF_FLOAT, x, DIMS(4));
    struct gf_node *n = mk(16, "Where", 3, 1);
    expect_error(run_t(n, in, 3, out, 1, 1),
                 "input 0 (condition) has type int32, expected bool");
    n = mk(19, "Cast", 1, 1);
    gf_node_set_attr_int(n, "to", GF_DOUBLE);
    expect_error(run(n, in, 1, out), "output 0 has type float, expected double");
    in[1] = tv(GF_DOUBLE, &dlo, SCALAR);
    expect_error(run(mk(13, "Sum", 3, 1), in + 1, 2, out),
                 "input 0 has type double, expected float");
    in[0] = tv(GF_FLOAT, x, DIMS(4));
    out[0] = tv(GF_FLOAT, y, DIMS(3));
    expect_error(run(mk(13, "Identity", 1, 1), in, 1, out),
                 "input 0 has 4 elements, output 0 has 3");
}

/* Type combinations the kernels refuse: no kernel is found. */
static void test_unsupported(void **state)
{
    (void)state;
    struct gf_backend *be = gf_backend_get("cpu");
    int32_t i[1];
    float f[1];
    struct gf_tview in[2] = {tv(GF_INT32, i, SCALAR), tv(GF_FLOAT, f, SCALAR)};
    assert_null(gf_kernel_find(be, mk(17, "Sqrt", 1, 1), in, 1));
    assert_null(gf_kernel_find(be, mk(17, "Softplus", 1, 1), in, 1));
    assert_null(gf_kernel_find(be, mk(17, "And", 2, 1), in + 1, 1));
    assert_null(gf_kernel_find(be, mk(17, "IsNaN", 1, 1), in, 1));
    struct gf_node *n = mk(17, "Cast", 1, 1);
    gf_node_set_attr_int(n, "to", GF_STRING);
    assert_null(gf_kernel_find(be, n, in, 1));
    n = mk(19, "Cast", 1, 1);
    gf_node_set_attr_int(n, "to", GF_FLOAT8E4M3FN);
    assert_null(gf_kernel_find(be, n, in, 1));
    assert_non_null(gf_kernel_find(be, mk(17, "Pow", 2, 1), in, 2)); /* Pow mixes types */
}

/* Empty outputs succeed without touching any data. */
static void test_empty(void **state)
{
    (void)state;
    struct gf_tview in[3] = {tv(GF_FLOAT, NULL, DIMS(0, 5)), tv(GF_FLOAT, NULL, DIMS(1, 5)),
                             tv(GF_FLOAT, NULL, DIMS(0, 1))};
    struct gf_tview out = tv(GF_FLOAT, NULL, DIMS(0, 5));
    static const struct { const char *op; size_t n_in; } cases[] = {
        {"Add", 2}, {"Relu", 1}, {"Sum", 3}, {"Identity", 1}, {"Clip", 1}, {"Dropout", 1},
        {"Max", 1}, {"Pow", 2},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        assert_int_equal(run(mk(17, cases[c].op, cases[c].n_in, 1), in, cases[c].n_in, &out),
                         GF_OK);
    struct gf_node *n = mk(17, "Cast", 1, 1);
    gf_node_set_attr_int(n, "to", GF_INT8);
    out.dtype = GF_INT8;
    assert_int_equal(run(n, in, 1, &out), GF_OK);
}


/* ---- fp32 Exp / Tanh / Sigmoid / Pow fast paths: accuracy ----------------- */

/* Distance of got from the exact value want (double libm) in ulps of the
 * float at want; a float result that is the correctly rounded one, or one
 * step next to it, is below 1. */
static double ulp_err(float got, double want)
{
    if (isnan(want))
        return isnan(got) ? 0 : INFINITY;
    if ((double)got == want || (float)want == got)
        return 0;
    if (isinf(got) || isinf(want)) /* overflow: FLT_MAX against inf is 1 ulp */
        return fabs(want) > FLT_MAX && fabs(got) == FLT_MAX ? 1 : INFINITY;
    double a = fabs(want) < FLT_MIN ? FLT_MIN : fabs(want);
    int e;
    frexp(a, &e);
    return fabs((double)got - want) / ldexp(1.0, e - 24);
}

static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* Every 61st float bit pattern (70 million values: all exponents, both
 * signs, subnormals, inf, NaN), a dense sweep of [-20, 20] and the edge
 * values: through the Exp / Tanh / Sigmoid kernels (1 and 2 threads) against
 * double libm, within 1 ulp; results that libm's float functions round the
 * same way are counted, for the record. */
static void test_unary_accuracy(void **state)
{
    (void)state;
    const size_t n = 4 << 20;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    static const float edge[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, FLT_MIN, -FLT_MIN,
                                 FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, -NAN,
                                 88.72283f, 88.72284f, -87.33654f, -103.9720f, -103.9721f,
                                 -104.0f, 0.55f, -0.55f, 0.5499999f, 9.0f, 10.0f, 40.0f,
                                 -110.0f, 1e-8f, -1e-8f};
    const char *ops[] = {"Exp", "Tanh", "Sigmoid"};
    double (*refs[])(double) = {exp, tanh, ref_sigmoid};
    float (*libmf[])(float) = {expf, tanhf, NULL};
    for (int o = 0; o < 3; o++) {
        struct gf_node *node = mk(17, ops[o], 1, 1);
        double worst = 0;
        size_t diff_libm = 0, total = 0;
        for (uint64_t start = 0, pass = 0; pass < 18; pass++) {
            size_t m = 0;
            if (pass == 0) {
                for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
                    x[m++] = edge[i];
                for (; m < n; m++) /* [-20, 20] evenly */
                    x[m] = -20.0f + 40.0f * (float)m / (float)n;
            } else {
                for (; m < n && start < (1ull << 32); m++, start += 61) {
                    uint32_t b = (uint32_t)start;
                    memcpy(&x[m], &b, 4);
                }
            }
            if (m == 0)
                break;
            int64_t len = (int64_t)m;
            struct gf_tview in = tv(GF_FLOAT, x, DIMS(len)), out = tv(GF_FLOAT, y, DIMS(len));
            assert_int_equal(run_t(node, &in, 1, &out, 1, pass % 2 ? 1 : 2), GF_OK);
            for (size_t i = 0; i < m; i++) {
                double e = ulp_err(y[i], refs[o]((double)x[i]));
                if (e > worst)
                    worst = e;
                if (!(e < 1.0))
                    fail_msg("%s(%a) = %a, want %a (%.3g ulp)", ops[o], (double)x[i],
                             (double)y[i], refs[o]((double)x[i]), e);
                if (isnan(x[i]) && !isnan(y[i]))
                    fail_msg("%s(NaN) = %a", ops[o], (double)y[i]);
                if (libmf[o]) {
                    float l = libmf[o](x[i]);
                    diff_libm += memcmp(&l, &y[i], 4) != 0 && !(isnan(l) && isnan(y[i]));
                }
            }
            total += m;
        }
        print_message("%s: %zu values, worst %.3f ulp, %zu differ from libm's float function\n",
                      ops[o], total, worst, diff_libm);
    }
    free(x);
    free(y);
}

/* Pow with scalar exponents 2, 3 and 0.5 (the fast paths) and 1.5 (pow):
 * against double pow within 1 ulp, pow's special values exact, odd lengths
 * and 1 / 2 threads. */
static void test_pow_scalar_exponents(void **state)
{
    (void)state;
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f,
                                    FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 2.5e12f, -3e-20f};
    float ex[] = {2.0f, 3.0f, 0.5f, 1.5f};
    enum { N = 40003 };
    static float x[N], y[N];
    for (size_t i = 0; i < N; i++)
        x[i] = i < sizeof(special) / sizeof(special[0]) ? special[i]
               : i % 3 ? rnd(-50, 50) : rnd(-1, 1) * ldexpf(1.0f, (int)(i % 200) - 100);
    for (size_t k = 0; k < 4; k++) {
        for (int64_t len = 1; len <= N; len = len * 7 + 3) {
            struct gf_tview in[2] = {tv(GF_FLOAT, x, DIMS(len)), tv(GF_FLOAT, &ex[k], SCALAR)};
            struct gf_tview out = tv(GF_FLOAT, y, DIMS(len));
            assert_int_equal(run_t(mk(15, "Pow", 2, 1), in, 2, &out, 1, len % 2 ? 1 : 2), GF_OK);
            for (int64_t i = 0; i < len; i++) {
                double want = pow((double)x[i], (double)ex[k]);
                float wf = powf(x[i], ex[k]);
                if (isnan(wf) || isinf(wf) || wf == 0) { /* special values: powf's */
                    if (!(isnan(wf) ? isnan(y[i]) : memcmp(&wf, &y[i], 4) == 0))
                        fail_msg("pow(%a, %g) = %a, powf %a", (double)x[i], (double)ex[k],
                                 (double)y[i], (double)wf);
                } else if (!(ulp_err(y[i], want) < 1.0)) {
                    fail_msg("pow(%a, %g) = %a, want %a", (double)x[i], (double)ex[k],
                             (double)y[i], want);
                }
            }
        }
    }
}

/* Where over every pattern of broadcast operands (the condition, x and y
 * each full, a row, a column or a scalar), float and bytes, against a
 * reference loop. */
static void test_where_broadcasts(void **state)
{
    (void)state;
    enum { R = 7, C = 37 };
    static uint8_t cond[R * C];
    static float xs[R * C], ys[R * C], z[R * C];
    for (int i = 0; i < R * C; i++)
        cond[i] = (uint8_t)(rnd(0, 1) < 0.5f ? 0 : i % 5 ? 1 : 7), xs[i] = rnd(-9, 9),
        ys[i] = rnd(-9, 9);
    int64_t shapes[4][2] = {{R, C}, {1, C}, {R, 1}, {1, 1}};
    int ranks[4] = {2, 2, 2, 0};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++) {
                struct gf_tview in[3] = {tv(GF_BOOL, cond, ranks[a], shapes[a]),
                                         tv(GF_FLOAT, xs, ranks[b], shapes[b]),
                                         tv(GF_FLOAT, ys, ranks[c], shapes[c])};
                int64_t od[2] = {1, 1};
                for (int k = 0; k < 3; k++)
                    for (int d = 0; d < in[k].rank; d++)
                        od[d] = in[k].dims[d] > od[d] ? in[k].dims[d] : od[d];
                int orank = a == 3 && b == 3 && c == 3 ? 0 : 2;
                struct gf_tview out = tv(GF_FLOAT, z, orank, od);
                assert_int_equal(run_t(mk(16, "Where", 3, 1), in, 3, &out, 1, (a + b + c) % 2 + 1),
                                 GF_OK);
                for (int64_t i = 0; i < od[0]; i++)
                    for (int64_t j = 0; j < od[1]; j++) {
#define AT(k, arr) arr[(in[k].rank ? (in[k].dims[0] > 1 ? i : 0) * in[k].dims[1] : 0) + \
                       (in[k].rank && in[k].dims[1] > 1 ? j : 0)]
                        float want = AT(0, cond) ? AT(1, xs) : AT(2, ys);
#undef AT
                        if (memcmp(&want, &z[i * od[1] + j], 4) != 0)
                            fail_msg("Where case %d%d%d at %lld,%lld", a, b, c, (long long)i,
                                     (long long)j);
                    }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_conformance), cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_in_place),         cmocka_unit_test(test_int_div_mod),
        cmocka_unit_test(test_int_wrap),         cmocka_unit_test(test_pow_types),
        cmocka_unit_test(test_compare_logic),    cmocka_unit_test(test_unary),
        cmocka_unit_test(test_unary_attributes), cmocka_unit_test(test_half_types),
        cmocka_unit_test(test_cast_float_int),   cmocka_unit_test(test_cast_int_int),
        cmocka_unit_test(test_cast_bf16),        cmocka_unit_test(test_castlike_identity),
        cmocka_unit_test(test_clip),             cmocka_unit_test(test_variadic),
        cmocka_unit_test(test_where),            cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_legacy_broadcast), cmocka_unit_test(test_errors_arith),
        cmocka_unit_test(test_errors_other),     cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_empty),            cmocka_unit_test(test_unary_accuracy),
        cmocka_unit_test(test_pow_scalar_exponents), cmocka_unit_test(test_where_broadcasts),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
