/* The elementwise kernels of every backend besides the CPU
 * (tests/backend_util.h) against the CPU kernels: every unary op, the
 * binary ops with broadcasting (same shape, scalars, numpy broadcasts, odd
 * sizes around the vector width), integer and bool types, variadic Max /
 * Min, Clip, Where, every Cast pair, Identity, the activation gradients,
 * every knob config of one kernel per form, and the error paths.  The
 * float ops again on fp16 and bf16 tensors (computed in float, rounded
 * once: the CPU's result within one unit in the last place, exactly where
 * both do the same correctly rounded operation); the gradients, which the
 * CPU has in fp32 only, against the CPU on the inputs widened to fp32. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "backend_half.h"

static struct gf_model *model;

static struct gf_node *mk(const char *op, const char *domain, size_t n_in, size_t n_out)
{
    if (!model) {
        model = gf_model_new(8, "t");
        assert_non_null(model);
        gf_model_set_opset(model, "", 18);
        gf_model_set_opset(model, "graphfuse", 1);
    }
    struct gf_node *n = gf_graph_add_node(model->graph, op, domain, op, n_in, NULL, n_out, NULL);
    assert_non_null(n);
    return n;
}

static int teardown(void **state)
{
    (void)state;
    gf_model_free(model);
    return 0;
}

/* Shapes with sizes around the vector width and the work-group size. */
static const int64_t flat_sizes[] = {1, 3, 7, 8, 33, 129, 1000, 4099};

/* ---- unary --------------------------------------------------------------- */

static void check_unary(const char *op, float lo, float hi, const char *approx)
{
    struct gf_node *n = mk(op, "", 1, 1);
    if (approx)
        gf_node_set_attr_string(n, "approximate", approx);
    for (size_t s = 0; s < sizeof(flat_sizes) / sizeof(flat_sizes[0]); s++) {
        int64_t len = flat_sizes[s];
        float *x = malloc((size_t)len * sizeof(float));
        bt_fill(x, (size_t)len, lo, hi, (unsigned)s);
        struct gf_tview in = bt_view(GF_FLOAT, x, DIMS(len));
        struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(len));
        bt_compare(n, &in, 1, 0, &out, 1, 2e-6, 1e-6);
        free(x);
    }
}

static void test_unary(void **state)
{
    (void)state;
    need_backend();
    const char *all[] = {"Neg", "Exp", "Tanh", "Abs", "Erf", "Sin", "Cos", "Floor", "Ceil",
                         "Relu", "Sigmoid", "Softplus", "Gelu"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        check_unary(all[i], -6, 6, NULL);
    check_unary("Gelu", -6, 6, "tanh");
    check_unary("Sqrt", 0, 50, NULL);
    check_unary("Log", 1e-3f, 50, NULL);
    check_unary("Reciprocal", 0.1f, 9, NULL);
    check_unary("Sigmoid", -90, 90, NULL); /* saturated tails */
    check_unary("Exp", -80, 80, NULL);
}

static void test_unary_configs_and_not(void **state)
{
    (void)state;
    need_backend();
    float x[1003];
    bt_fill(x, 1003, -3, 3, 9);
    struct gf_tview in = bt_view(GF_FLOAT, x, DIMS(17, 59));
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(17, 59));
    bt_expect_space(bt_compare_configs(mk("Sigmoid", "", 1, 1), &in, 1, 0, &out, 1, 2e-6,
                                          1e-6), "opencl", 20);
    uint8_t b[11] = {0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0};
    struct gf_tview bin = bt_view(GF_BOOL, b, DIMS(11));
    struct gf_tview bout = bt_view(GF_BOOL, NULL, DIMS(11));
    bt_compare(mk("Not", "", 1, 1), &bin, 1, 0, &bout, 1, 0, 0);
}

static void test_unary_errors(void **state)
{
    (void)state;
    need_backend();
    float x[4] = {1, 2, 3, 4};
    void *res[1];
    struct gf_node *n = mk("Gelu", "", 1, 1);
    gf_node_set_attr_string(n, "approximate", "fast");
    struct gf_tview in = bt_view(GF_FLOAT, x, DIMS(4));
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(4));
    assert_int_equal(bt_run(n, &in, 1, 0, &out, 1, NULL, res), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "approximate='fast'"));
    free(res[0]);
    struct gf_tview small = bt_view(GF_FLOAT, NULL, DIMS(3));
    assert_int_equal(bt_run(mk("Exp", "", 1, 1), &in, 1, 0, &small, 1, NULL, res),
                     GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "4 elements, output 0 has 3"));
    free(res[0]);
}

/* ---- binary ----------------------------------------------------------------- */

struct bshape {
    int ra, rb, ro;
    int64_t a[4], b[4], o[4];
};

/* same shapes, scalars either side, numpy broadcasts, odd sizes */
static const struct bshape bshapes[] = {
    {1, 1, 1, {1003}, {1003}, {1003}},
    {2, 0, 2, {7, 33}, {0}, {7, 33}},
    {0, 2, 2, {0}, {5, 129}, {5, 129}},
    {1, 1, 1, {1}, {9}, {9}},
    {3, 2, 3, {3, 1, 5}, {4, 5}, {3, 4, 5}},
    {2, 1, 2, {6, 33}, {33}, {6, 33}},
    {2, 2, 2, {6, 1}, {1, 7}, {6, 7}},
    {4, 3, 4, {2, 3, 1, 7}, {3, 5, 1}, {2, 3, 5, 7}},
    {2, 2, 2, {1, 1}, {1, 1}, {1, 1}},
};

static size_t count(int r, const int64_t *d)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)d[i];
    return n;
}

/* Values of type t: floats in [lo, hi), integers in [lo, hi], bools. */
static void *values(enum gf_dtype t, size_t n, float lo, float hi, unsigned seed)
{
    float *f = malloc(n * sizeof(float) + 8);
    bt_fill(f, n, lo, hi, seed);
    if (t == GF_FLOAT)
        return f;
    void *p = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++) {
        int64_t v = (int64_t)floorf(f[i]);
        if (t == GF_INT64)
            ((int64_t *)p)[i] = v;
        else if (t == GF_INT32)
            ((int32_t *)p)[i] = (int32_t)v;
        else
            ((uint8_t *)p)[i] = (uint8_t)(v & 1);
    }
    free(f);
    return p;
}

static void check_binary(const char *op, enum gf_dtype t, enum gf_dtype out_t, float lo,
                         float hi, float blo, float bhi, unsigned host_mask)
{
    struct gf_node *n = mk(op, "", 2, 1);
    for (size_t s = 0; s < sizeof(bshapes) / sizeof(bshapes[0]); s++) {
        const struct bshape *b = &bshapes[s];
        void *xa = values(t, count(b->ra, b->a), lo, hi, (unsigned)s);
        void *xb = values(t, count(b->rb, b->b), blo, bhi, (unsigned)s + 100);
        struct gf_tview in[2] = {bt_view(t, xa, b->ra, b->a), bt_view(t, xb, b->rb, b->b)};
        struct gf_tview out = bt_view(out_t, NULL, b->ro, b->o);
        bt_compare(n, in, 2, host_mask, &out, 1, 1e-6, 1e-6);
        free(xa);
        free(xb);
    }
}

static void test_binary_float(void **state)
{
    (void)state;
    need_backend();
    const char *arith[] = {"Add", "Sub", "Mul", "Max", "Min"};
    for (size_t i = 0; i < 5; i++)
        check_binary(arith[i], GF_FLOAT, GF_FLOAT, -5, 5, -5, 5, 0);
    check_binary("Div", GF_FLOAT, GF_FLOAT, -5, 5, 0.5f, 4, 0);
    check_binary("Pow", GF_FLOAT, GF_FLOAT, 0.1f, 3, -2, 2, 0);
    check_binary("Pow", GF_FLOAT, GF_FLOAT, -3, 3, 2, 2.0f, 0); /* exponent exactly 2 */
    const char *cmp[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    for (size_t i = 0; i < 5; i++)
        check_binary(cmp[i], GF_FLOAT, GF_BOOL, -2, 2, -2, 2, 0);
}

static void test_binary_int_bool(void **state)
{
    (void)state;
    need_backend();
    enum gf_dtype types[] = {GF_INT64, GF_INT32};
    const char *ops[] = {"Add", "Sub", "Mul", "Max", "Min"};
    const char *cmp[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < 5; i++) {
            check_binary(ops[i], types[t], types[t], -50, 50, -50, 50, 0);
            check_binary(cmp[i], types[t], GF_BOOL, -3, 3, -3, 3, 0);
        }
        check_binary("Div", types[t], types[t], -50, 50, 1, 9, 0x2);
        check_binary("Div", types[t], types[t], -50, 50, -9, -1, 0x2);
    }
    const char *logic[] = {"Equal", "And", "Or", "Xor"};
    for (size_t i = 0; i < 4; i++)
        check_binary(logic[i], GF_BOOL, GF_BOOL, 0, 4, 0, 4, 0);
}

static void test_binary_configs(void **state)
{
    (void)state;
    need_backend();
    float a[7 * 33], b[33];
    bt_fill(a, 7 * 33, -1, 1, 1);
    bt_fill(b, 33, -1, 1, 2);
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(7, 33));
    struct gf_tview flat[2] = {bt_view(GF_FLOAT, a, DIMS(7, 33)),
                               bt_view(GF_FLOAT, a, DIMS(7, 33))};
    struct gf_tview bc[2] = {bt_view(GF_FLOAT, a, DIMS(7, 33)), bt_view(GF_FLOAT, b, DIMS(33))};
    bt_expect_space(bt_compare_configs(mk("Mul", "", 2, 1), flat, 2, 0, &out, 1, 1e-6,
                                          1e-7), "opencl", 20);
    bt_expect_space(bt_compare_configs(mk("Add", "", 2, 1), bc, 2, 0, &out, 1, 1e-6,
                                          1e-7), "opencl", 20);
}

static void test_variadic(void **state)
{
    (void)state;
    need_backend();
    float a[5 * 7], b[7], c[5];
    bt_fill(a, 35, -3, 3, 1);
    bt_fill(b, 7, -3, 3, 2);
    bt_fill(c, 5, -3, 3, 3);
    struct gf_tview in[3] = {bt_view(GF_FLOAT, a, DIMS(5, 7)), bt_view(GF_FLOAT, b, DIMS(7)),
                             bt_view(GF_FLOAT, c, DIMS(5, 1))};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(5, 7));
    bt_compare(mk("Max", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
    bt_compare(mk("Min", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
    bt_compare(mk("Max", "", 1, 1), in, 1, 0, &out, 1, 0, 0);
}

static void test_binary_errors(void **state)
{
    (void)state;
    need_backend();
    void *res[1];
    /* integer division by zero is an error naming the element */
    int64_t x[4] = {1, 2, 3, 4}, z[4] = {1, 2, 0, 4};
    struct gf_tview in[2] = {bt_view(GF_INT64, x, DIMS(4)), bt_view(GF_INT64, z, DIMS(4))};
    struct gf_tview out = bt_view(GF_INT64, NULL, DIMS(4));
    struct gf_node *div = mk("Div", "", 2, 1);
    assert_int_equal(bt_run(div, in, 2, 0x2, &out, 1, NULL, res), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "element 2 is 0"));
    free(res[0]);
    /* without the divisor on the host the kernel declines the node */
    struct gf_tview dev[2] = {in[0], in[1]};
    dev[1].host = NULL;
    assert_false(gf_kernel_find(bt_backend(), div, dev, 2));
    /* shapes that do not broadcast */
    float f[6] = {0};
    struct gf_tview bad[2] = {bt_view(GF_FLOAT, f, DIMS(2, 3)), bt_view(GF_FLOAT, f, DIMS(2))};
    struct gf_tview fo = bt_view(GF_FLOAT, NULL, DIMS(2, 3));
    assert_int_equal(bt_run(mk("Add", "", 2, 1), bad, 2, 0, &fo, 1, NULL, res),
                     GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "input 1 of shape [2] does not broadcast"));
    free(res[0]);
    /* mixed types (Pow's float ^ int64 among them) are left to the CPU */
    struct gf_tview mixed[2] = {bt_view(GF_FLOAT, f, DIMS(2, 3)),
                                bt_view(GF_INT64, x, DIMS(3))};
    assert_false(gf_kernel_find(bt_backend(), mk("Pow", "", 2, 1), mixed, 2));
    assert_false(gf_kernel_find(bt_backend(), mk("Mul", "", 2, 1), mixed, 2));
}

/* ---- Where, Cast, Identity ---------------------------------------------------------- */

static void test_where(void **state)
{
    (void)state;
    need_backend();
    enum gf_dtype types[] = {GF_FLOAT, GF_INT64, GF_BOOL, GF_FLOAT16, GF_BFLOAT16};
    for (int t = 0; t < 5; t++) {
        size_t es = gf_dtype_size(types[t]);
        uint8_t c[4 * 7];
        unsigned char x[7 * 8], y[4 * 8];
        for (size_t i = 0; i < sizeof(c); i++)
            c[i] = (uint8_t)((i * 7 + 3) % 3 == 0);
        for (size_t i = 0; i < sizeof(x); i++)
            x[i] = (unsigned char)(types[t] == GF_BOOL ? i & 1 : i * 13 + 1);
        for (size_t i = 0; i < sizeof(y); i++)
            y[i] = (unsigned char)(types[t] == GF_BOOL ? (i / es) % 2 : i * 5 + 2);
        struct gf_tview in[3] = {bt_view(GF_BOOL, c, DIMS(4, 7)),
                                 bt_view(types[t], x, DIMS(7)),
                                 bt_view(types[t], y, DIMS(4, 1))};
        struct gf_tview out = bt_view(types[t], NULL, DIMS(4, 7));
        bt_compare(mk("Where", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
    }
}

static void fill_typed(enum gf_dtype t, void *p, const float *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case GF_FLOAT: ((float *)p)[i] = f[i]; break;
        case GF_FLOAT16: ((uint16_t *)p)[i] = gf_float_to_half(f[i]); break;
        case GF_BFLOAT16: ((uint16_t *)p)[i] = gf_float_to_bf16(f[i]); break;
        case GF_INT64: ((int64_t *)p)[i] = (int64_t)f[i]; break;
        case GF_INT32: ((int32_t *)p)[i] = (int32_t)f[i]; break;
        case GF_UINT8: ((uint8_t *)p)[i] = (uint8_t)(f[i] < 0 ? -f[i] : f[i]); break;
        default: ((uint8_t *)p)[i] = f[i] != 0; break;
        }
    }
}

/* Every pair of types; float -> bf16 truncates before opset 19 (the
 * model's opset, 18) and rounds to nearest even from 19 on. */
static void check_casts(void)
{
    enum gf_dtype types[] = {GF_FLOAT,  GF_FLOAT16, GF_BFLOAT16, GF_INT64,
                             GF_INT32, GF_UINT8,   GF_BOOL};
    /* fractions, negatives, zero, values past uint8 and int32 (saturation),
     * past fp16 (infinity), bits below bf16's precision, a NaN (0 as an
     * integer) */
    float f[15] = {0.5f, -1.75f, 0, 3, 255.9f, 300, -300, 1e10f, -1e10f, 65504, 2.5f, 1e-3f,
                   1.01171875f, 1e5f, NAN};
    for (int s = 0; s < 7; s++) {
        bool fl = types[s] == GF_FLOAT || bth_is(types[s]);
        unsigned char src[15 * 8];
        size_t n = fl ? 15 : 12;
        fill_typed(types[s], src, f, n);
        for (int d = 0; d < 7; d++) {
            struct gf_node *node = mk("Cast", "", 1, 1);
            gf_node_set_attr_int(node, "to", types[d]);
            struct gf_tview in = bt_view(types[s], src, DIMS((int64_t)n));
            struct gf_tview out = bt_view(types[d], NULL, DIMS((int64_t)n));
            bt_compare(node, &in, 1, 0, &out, 1, 0, 0);
        }
    }
}

static void test_cast(void **state)
{
    (void)state;
    need_backend();
    check_casts();
    gf_model_set_opset(model, "", 19);
    check_casts();
    gf_model_set_opset(model, "", 18);
    /* CastLike: the target is input 1's type */
    float x[3] = {1.5f, -2, 7};
    int32_t like[1] = {0};
    struct gf_tview in[2] = {bt_view(GF_FLOAT, x, DIMS(3)), bt_view(GF_INT32, like, DIMS(1))};
    struct gf_tview out = bt_view(GF_INT32, NULL, DIMS(3));
    bt_compare(mk("CastLike", "", 2, 1), in, 2, 0, &out, 1, 0, 0);
}

static void test_identity(void **state)
{
    (void)state;
    need_backend();
    int64_t x[9] = {1, -2, 3, 4, 5, 6, 7, 8, 9};
    struct gf_tview in = bt_view(GF_INT64, x, DIMS(3, 3));
    struct gf_tview out = bt_view(GF_INT64, NULL, DIMS(3, 3));
    bt_compare(mk("Identity", "", 1, 1), &in, 1, 0, &out, 1, 0, 0);
}

/* ---- activation gradients ------------------------------------------------------------ */

static void test_act_grads(void **state)
{
    (void)state;
    need_backend();
    struct {
        const char *op, *approx;
        float lo, hi;
    } ops[] = {{"ReluGrad", NULL, -2, 2}, {"SigmoidGrad", NULL, 0, 1}, {"TanhGrad", NULL, -1, 1},
               {"GeluGrad", NULL, -5, 5}, {"GeluGrad", "tanh", -5, 5}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        struct gf_node *n = mk(ops[i].op, "graphfuse", 2, 1);
        if (ops[i].approx)
            gf_node_set_attr_string(n, "approximate", ops[i].approx);
        for (size_t s = 0; s < sizeof(flat_sizes) / sizeof(flat_sizes[0]); s++) {
            int64_t len = flat_sizes[s];
            float *g = malloc((size_t)len * 4), *v = malloc((size_t)len * 4);
            bt_fill(g, (size_t)len, -1, 1, (unsigned)s);
            bt_fill(v, (size_t)len, ops[i].lo, ops[i].hi, (unsigned)s + 7);
            struct gf_tview in[2] = {bt_view(GF_FLOAT, g, DIMS(len)),
                                     bt_view(GF_FLOAT, v, DIMS(len))};
            struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(len));
            bt_compare(n, in, 2, 0, &out, 1, 1e-5, 1e-6);
            free(g);
            free(v);
        }
    }
    float g[300], v[300];
    bt_fill(g, 300, -1, 1, 1);
    bt_fill(v, 300, -4, 4, 2);
    struct gf_tview in[2] = {bt_view(GF_FLOAT, g, DIMS(300)), bt_view(GF_FLOAT, v, DIMS(300))};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(300));
    bt_expect_space(bt_compare_configs(mk("GeluGrad", "graphfuse", 2, 1), in, 2, 0, &out,
                                          1, 1e-5, 1e-6), "opencl", 20);
}

/* ---- Clip (fp32, fp16, bf16) ----------------------------------------------------------- */

/* x with NaN and infinities; bounds from inputs, attributes, or none. */
static void check_clip(enum gf_dtype t)
{
    float f[37], lo = -1.5f, hi = 2.25f;
    bt_fill(f, 37, -4, 4, 5);
    f[3] = NAN, f[8] = INFINITY, f[20] = -INFINITY;
    void *x = t == GF_FLOAT ? (void *)f : bth_from(t, f, 37);
    void *bl = t == GF_FLOAT ? (void *)&lo : bth_from(t, &lo, 1);
    void *bh = t == GF_FLOAT ? (void *)&hi : bth_from(t, &hi, 1);
    struct gf_tview none = {.dtype = GF_UNDEFINED};
    struct gf_tview in[3] = {bt_view(t, x, DIMS(37)), bt_view(t, bl, 0, NULL),
                             bt_view(t, bh, 0, NULL)};
    struct gf_tview out = bt_view(t, NULL, DIMS(37));
    bt_compare(mk("Clip", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
    bt_compare(mk("Clip", "", 1, 1), in, 1, 0, &out, 1, 0, 0);
    struct gf_tview lo_only[2] = {in[0], in[1]}, hi_only[3] = {in[0], none, in[2]};
    bt_compare(mk("Clip", "", 2, 1), lo_only, 2, 0, &out, 1, 0, 0);
    bt_compare(mk("Clip", "", 3, 1), hi_only, 3, 0, &out, 1, 0, 0);
    struct gf_tview crossed[3] = {in[0], in[2], in[1]}; /* min > max: max wins */
    bt_compare(mk("Clip", "", 3, 1), crossed, 3, 0, &out, 1, 0, 0);
    struct gf_node *attrs = mk("Clip", "", 1, 1); /* the opset < 11 form */
    gf_node_set_attr_float(attrs, "min", -0.3f);
    gf_node_set_attr_float(attrs, "max", 0.7f);
    bt_compare(attrs, in, 1, 0, &out, 1, 0, 0);
    if (t != GF_FLOAT) {
        free(x);
        free(bl);
        free(bh);
    }
}

static void test_clip(void **state)
{
    (void)state;
    need_backend();
    check_clip(GF_FLOAT);
    check_clip(GF_FLOAT16);
    check_clip(GF_BFLOAT16);
    float x[1003], two[2] = {0, 1};
    bt_fill(x, 1003, -2, 2, 3);
    struct gf_tview in[3] = {bt_view(GF_FLOAT, x, DIMS(17, 59)),
                             bt_view(GF_FLOAT, two, 0, NULL), bt_view(GF_FLOAT, two + 1, 0,
                                                                          NULL)};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(17, 59));
    bt_expect_space(bt_compare_configs(mk("Clip", "", 3, 1), in, 3, 0, &out, 1, 0, 0),
                    "opencl", 20);
    /* a bound that is no scalar is an error naming it */
    void *res[1];
    in[1] = bt_view(GF_FLOAT, two, DIMS(2));
    assert_int_equal(bt_run(mk("Clip", "", 3, 1), in, 3, 0, &out, 1, NULL, res),
                     GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "input 1 (min) must be a scalar"));
    free(res[0]);
}

/* ---- fp16 and bf16 ------------------------------------------------------------------ */

static const enum gf_dtype halves[] = {GF_FLOAT16, GF_BFLOAT16};
static const int vec_all[] = {1, 2, 4, 8}; /* the vec knob's values */

/* Values in [lo, hi) rounded to t (the caller frees .data). */
static struct gf_tview half_rnd(enum gf_dtype t, float lo, float hi, unsigned seed, int rank,
                                const int64_t *dims)
{
    struct gf_tview v = bt_view(t, NULL, rank, dims);
    float *f = malloc(v.nelem * sizeof(float) + 8);
    bt_fill(f, v.nelem, lo, hi, seed);
    v.data = bth_from(t, f, v.nelem);
    v.host = v.data;
    free(f);
    return v;
}

/* exact: the CPU and the backend do the same correctly rounded operation. */
static void check_unary_half(const char *op, float lo, float hi, const char *approx, bool exact)
{
    struct gf_node *n = mk(op, "", 1, 1);
    if (approx)
        gf_node_set_attr_string(n, "approximate", approx);
    for (int h = 0; h < 2; h++)
        for (size_t s = 0; s < sizeof(flat_sizes) / sizeof(flat_sizes[0]); s++) {
            int64_t len = flat_sizes[s];
            struct gf_tview in = half_rnd(halves[h], lo, hi, (unsigned)s, DIMS(len));
            struct gf_tview out = bt_view(halves[h], NULL, DIMS(len));
            bt_compare(n, &in, 1, 0, &out, 1, exact ? 0 : bth_ulp(halves[h]),
                         exact ? 0 : BTH_ATOL);
            free(in.data);
        }
}

static void test_half_unary(void **state)
{
    (void)state;
    need_backend();
    const char *exact[] = {"Neg", "Abs", "Floor", "Ceil", "Relu"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        check_unary_half(exact[i], -6, 6, NULL, true);
    const char *approx[] = {"Exp", "Tanh", "Erf", "Sin", "Cos", "Sigmoid", "Softplus", "Gelu"};
    for (size_t i = 0; i < sizeof(approx) / sizeof(approx[0]); i++)
        check_unary_half(approx[i], -6, 6, NULL, false);
    check_unary_half("Gelu", -6, 6, "tanh", false);
    check_unary_half("Sqrt", 0, 50, NULL, false);
    check_unary_half("Log", 1e-3f, 50, NULL, false);
    check_unary_half("Reciprocal", 0.1f, 9, NULL, false);
    check_unary_half("Exp", -20, 12, NULL, false); /* past fp16's range: infinity */
}

static void check_binary_half(const char *op, bool cmp, float lo, float hi, float blo,
                              float bhi, bool exact)
{
    struct gf_node *n = mk(op, "", 2, 1);
    for (int h = 0; h < 2; h++)
        for (size_t s = 0; s < sizeof(bshapes) / sizeof(bshapes[0]); s++) {
            const struct bshape *b = &bshapes[s];
            enum gf_dtype t = halves[h];
            struct gf_tview in[2] = {half_rnd(t, lo, hi, (unsigned)s, b->ra, b->a),
                                     half_rnd(t, blo, bhi, (unsigned)s + 100, b->rb, b->b)};
            struct gf_tview out = bt_view(cmp ? GF_BOOL : t, NULL, b->ro, b->o);
            bt_compare(n, in, 2, 0, &out, 1, exact ? 0 : bth_ulp(t), exact ? 0 : BTH_ATOL);
            free(in[0].data);
            free(in[1].data);
        }
}

static void test_half_binary(void **state)
{
    (void)state;
    need_backend();
    const char *arith[] = {"Add", "Sub", "Mul", "Max", "Min"};
    for (size_t i = 0; i < 5; i++)
        check_binary_half(arith[i], false, -5, 5, -5, 5, true);
    check_binary_half("Add", false, 60000, 65504, 1000, 5000, true); /* overflow: infinity */
    check_binary_half("Div", false, -5, 5, 0.5f, 4, false);
    check_binary_half("Pow", false, 0.1f, 3, -2, 2, false);
    check_binary_half("Pow", false, -3, 3, 2, 2.0f, true); /* exponent 2: x * x */
    const char *cmp[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    for (size_t i = 0; i < 5; i++) /* few distinct values: many ties */
        check_binary_half(cmp[i], true, -2, 2, -2, 2, true);
    /* Pow of a half base with an fp32 exponent (the CPU goes through double) */
    struct gf_node *pw = mk("Pow", "", 2, 1);
    for (int h = 0; h < 2; h++)
        for (size_t s = 0; s < sizeof(bshapes) / sizeof(bshapes[0]); s++) {
            const struct bshape *b = &bshapes[s];
            float *e = malloc(count(b->rb, b->b) * sizeof(float) + 8);
            bt_fill(e, count(b->rb, b->b), -2, 2, (unsigned)s);
            e[0] = 2; /* the x * x case */
            struct gf_tview in[2] = {half_rnd(halves[h], 0.1f, 3, (unsigned)s, b->ra, b->a),
                                     bt_view(GF_FLOAT, e, b->rb, b->b)};
            struct gf_tview out = bt_view(halves[h], NULL, b->ro, b->o);
            bt_compare(pw, in, 2, 0, &out, 1, bth_ulp(halves[h]), BTH_ATOL);
            free(in[0].data);
            free(e);
        }
    /* Pow's other mixtures stay on the CPU */
    uint16_t hx[3] = {0}, hy[3] = {0};
    float fx[3] = {0};
    struct gf_tview mixed[2] = {bt_view(GF_FLOAT16, hx, DIMS(3)),
                                bt_view(GF_BFLOAT16, hy, DIMS(3))};
    assert_false(gf_kernel_find(bt_backend(), pw, mixed, 2));
    mixed[0] = bt_view(GF_FLOAT, fx, DIMS(3));
    mixed[1] = bt_view(GF_FLOAT16, hy, DIMS(3));
    assert_false(gf_kernel_find(bt_backend(), pw, mixed, 2));
}

static void test_half_variadic_where(void **state)
{
    (void)state;
    need_backend();
    for (int h = 0; h < 2; h++) {
        enum gf_dtype t = halves[h];
        struct gf_tview in[3] = {half_rnd(t, -3, 3, 1, DIMS(5, 7)), half_rnd(t, -3, 3, 2, DIMS(7)),
                                 half_rnd(t, -3, 3, 3, DIMS(5, 1))};
        struct gf_tview out = bt_view(t, NULL, DIMS(5, 7));
        bt_compare(mk("Max", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
        bt_compare(mk("Min", "", 3, 1), in, 3, 0, &out, 1, 0, 0);
        uint8_t c[7] = {1, 0, 0, 1, 1, 0, 1};
        struct gf_tview w[3] = {bt_view(GF_BOOL, c, DIMS(7)), in[2], in[0]};
        bt_compare(mk("Where", "", 3, 1), w, 3, 0, &out, 1, 0, 0);
        for (int k = 0; k < 3; k++)
            free(in[k].data);
    }
}

static void test_half_act_grads(void **state)
{
    (void)state;
    need_backend();
    struct {
        const char *op, *approx;
        float lo, hi;
    } ops[] = {{"ReluGrad", NULL, -2, 2}, {"SigmoidGrad", NULL, 0, 1}, {"TanhGrad", NULL, -1, 1},
               {"GeluGrad", NULL, -5, 5}, {"GeluGrad", "tanh", -5, 5}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        struct gf_node *n = mk(ops[i].op, "graphfuse", 2, 1);
        if (ops[i].approx)
            gf_node_set_attr_string(n, "approximate", ops[i].approx);
        for (int h = 0; h < 2; h++)
            for (size_t s = 0; s < sizeof(flat_sizes) / sizeof(flat_sizes[0]); s++) {
                int64_t len = flat_sizes[s];
                struct gf_tview in[2] = {
                    half_rnd(halves[h], -1, 1, (unsigned)s, DIMS(len)),
                    half_rnd(halves[h], ops[i].lo, ops[i].hi, (unsigned)s + 7, DIMS(len))};
                struct gf_tview out = bt_view(halves[h], NULL, DIMS(len));
                bth_compare_wide(n, in, 2, 0, &out, 1, NULL, bth_ulp(halves[h]),
                                   BTH_ATOL);
                free(in[0].data);
                free(in[1].data);
            }
    }
}

/* Every VEC (the loads and stores of the storage type) on fp16 and bf16;
 * the work-group size does not touch them (every config: fp32 above). */
static void test_half_configs(void **state)
{
    (void)state;
    need_backend();
    for (int h = 0; h < 2; h++) {
        enum gf_dtype t = halves[h];
        struct gf_tview a = half_rnd(t, -3, 3, 1, DIMS(17, 59)), b = half_rnd(t, -4, 4, 2,
                                                                               DIMS(17, 59));
        struct gf_tview out = bt_view(t, NULL, DIMS(17, 59)), flat[2] = {a, b};
        for (size_t v = 0; v < sizeof(vec_all) / sizeof(vec_all[0]); v++) {
            int cfg[2] = {256, vec_all[v]};
            bt_compare_cfg(mk("Tanh", "", 1, 1), &a, 1, 0, &out, 1, cfg, bth_ulp(t),
                             BTH_ATOL);
            bt_compare_cfg(mk("Relu", "", 1, 1), &b, 1, 0, &out, 1, cfg, 0, 0);
            bt_compare_cfg(mk("Mul", "", 2, 1), flat, 2, 0, &out, 1, cfg, 0, 0);
        }
        free(a.data);
        free(b.data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_unary_configs_and_not),
        cmocka_unit_test(test_unary_errors),
        cmocka_unit_test(test_binary_float),
        cmocka_unit_test(test_binary_int_bool),
        cmocka_unit_test(test_binary_configs),
        cmocka_unit_test(test_variadic),
        cmocka_unit_test(test_binary_errors),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_act_grads),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_half_unary),
        cmocka_unit_test(test_half_binary),
        cmocka_unit_test(test_half_variadic_where),
        cmocka_unit_test(test_half_act_grads),
        cmocka_unit_test(test_half_configs),
    };
    return bt_run_tests(tests, NULL, teardown);
}
