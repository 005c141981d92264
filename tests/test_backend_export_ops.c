/* Every backend's kernels of the ops real Hugging Face exports add
 * (tests/backend_util.h), against the CPU
 * kernels, exactly.  Pad: every mode (constant, reflect, edge, wrap), pads
 * that crop (negative) and pads longer than the axis (reflect and wrap
 * repeat), opset-18 axes, the constant value from the input or absent (0),
 * several element sizes (fp32, int64, fp16, uint8), and the label shift
 * (int64 labels, one -100 column after the sequence).  GatherND (the dynamo
 * exporter's padding-mask pick): batch_dims 0 and 1, whole rows and single
 * elements, negative indices, int32/int64 indices, a bad index is an error.
 * IsNaN and IsInf (the attention guard): NaN, both infinities, the
 * detect_negative / detect_positive attributes, fp32 and fp16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "backend_half.h"

static struct gf_model *model;

static struct gf_node *mk(const char *op, size_t n_in)
{
    if (!model) {
        model = gf_model_new(8, "t");
        assert_non_null(model);
        gf_model_set_opset(model, "", 18);
    }
    struct gf_node *n = gf_graph_add_node(model->graph, op, "", op, n_in, NULL, 1, NULL);
    assert_non_null(n);
    return n;
}

static struct gf_node *pad_node(const char *mode)
{
    struct gf_node *n = mk("Pad", 4);
    assert_int_equal(gf_node_set_attr_string(n, "mode", mode), GF_OK);
    return n;
}

static int teardown(void **state)
{
    (void)state;
    gf_model_free(model);
    model = NULL;
    return 0;
}

struct pad_case {
    int r;
    int64_t dims[3];
    int n_axes;          /* 0: pads cover every axis */
    int64_t axes[3];
    int64_t pads[6];
};

static const struct pad_case cases[] = {
    {2, {2, 16}, 0, {0}, {0, 0, 0, 1}},          /* the label shift */
    {3, {2, 3, 5}, 0, {0}, {1, 0, 2, 0, 2, 1}},
    {3, {4, 3, 5}, 0, {0}, {-1, 0, 1, -2, 1, 3}}, /* crops and pads */
    {2, {3, 4}, 0, {0}, {7, 9, 5, 6}},            /* longer than the axes */
    {3, {2, 3, 5}, 2, {-1, 0}, {2, 1, 3, 0}},     /* axes: last, first */
    {1, {1}, 0, {0}, {3, 2}},                     /* one element */
};

static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
static const enum gf_dtype types[] = {GF_FLOAT, GF_INT64, GF_FLOAT16, GF_UINT8};

static void *data_of(enum gf_dtype t, size_t n, unsigned seed)
{
    float *f = malloc(n * sizeof(float) + 8);
    bt_fill(f, n, -100, 100, seed);
    void *p = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++) {
        if (t == GF_FLOAT)
            ((float *)p)[i] = f[i];
        else if (t == GF_INT64)
            ((int64_t *)p)[i] = (int64_t)(f[i] * 1000);
        else if (t == GF_FLOAT16)
            ((uint16_t *)p)[i] = gf_float_to_half(f[i]);
        else
            ((uint8_t *)p)[i] = (uint8_t)(i * 37 + seed);
    }
    free(f);
    return p;
}

static void run_case(const struct pad_case *c, const char *mode, enum gf_dtype t, bool value)
{
    int64_t od[3], pb[3] = {0}, pe[3] = {0};
    int na = c->n_axes ? c->n_axes : c->r;
    for (int i = 0; i < na; i++) {
        int ax = (int)(c->n_axes ? (c->axes[i] + c->r) % c->r : i);
        pb[ax] = c->pads[i];
        pe[ax] = c->pads[i + na];
    }
    size_t n = 1, on = 1;
    for (int k = 0; k < c->r; k++) {
        od[k] = c->dims[k] + pb[k] + pe[k];
        n *= (size_t)c->dims[k];
        on *= (size_t)od[k];
    }
    if (strcmp(mode, "constant") != 0 && n == 0)
        return;
    void *x = data_of(t, n, 3);
    void *v = data_of(t, 1, 11);
    int64_t np = 2 * na;
    struct gf_tview in[4] = {bt_view(t, x, c->r, c->dims),
                             bt_view(GF_INT64, (void *)c->pads, DIMS(np)),
                             value ? bt_view(t, v, DIMS()) : bt_view(t, NULL, DIMS(0)),
                             c->n_axes ? bt_view(GF_INT64, (void *)c->axes, DIMS(c->n_axes))
                                       : bt_view(GF_INT64, NULL, DIMS(0))};
    struct gf_tview out = bt_view(t, NULL, c->r, od);
    size_t n_in = c->n_axes ? 4 : value ? 3 : 2;
    bt_compare(pad_node(mode), in, n_in, 0xe, &out, 1, 0, 0);
    (void)on;
    free(x);
    free(v);
}

static void test_pad(void **state)
{
    (void)state;
    need_backend();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        for (int m = 0; m < 4; m++)
            for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
                run_case(&cases[c], modes[m], types[t], m == 0 && t != 3);
}

/* Labels [2, 16] padded with -100: the value reaches every new position. */
static void test_label_shift(void **state)
{
    (void)state;
    need_backend();
    int64_t labels[32], fill = -100, pads[4] = {0, 0, 0, 1};
    for (int i = 0; i < 32; i++)
        labels[i] = i % 5 == 0 ? -100 : i * 7;
    struct gf_tview in[3] = {bt_view(GF_INT64, labels, DIMS(2, 16)),
                             bt_view(GF_INT64, pads, DIMS(4)),
                             bt_view(GF_INT64, &fill, DIMS())};
    struct gf_tview out = bt_view(GF_INT64, NULL, DIMS(2, 17));
    bt_compare(pad_node("constant"), in, 3, 0xe, &out, 1, 0, 0);
}

/* data [2, 3, 4] (fp32 and int64), indices [.., k] */
static void check_gather_nd(enum gf_dtype it, int b, int qr, const int64_t *qd, const int64_t *v,
                            int orank, const int64_t *od)
{
    int64_t xd[3] = {2, 3, 4};
    enum gf_dtype types2[2] = {GF_FLOAT, GF_INT64};
    size_t ni = 1;
    for (int i = 0; i < qr; i++)
        ni *= (size_t)qd[i];
    int32_t v32[32];
    for (size_t i = 0; i < ni; i++)
        v32[i] = (int32_t)v[i];
    for (int t = 0; t < 2; t++) {
        void *x = data_of(types2[t], 24, 5);
        struct gf_node *n = mk("GatherND", 2);
        assert_int_equal(gf_node_set_attr_int(n, "batch_dims", b), GF_OK);
        struct gf_tview in[2] = {bt_view(types2[t], x, 3, xd),
                                 bt_view(it, it == GF_INT64 ? (void *)v : v32, qr, qd)};
        struct gf_tview out = bt_view(types2[t], NULL, orank, od);
        bt_compare(n, in, 2, 0x2, &out, 1, 0, 0);
        free(x);
    }
}

static void test_gather_nd(void **state)
{
    (void)state;
    need_backend();
    static const int64_t rows_q[3] = {2, 2, 2}, rows_v[8] = {0, 1, 1, -1, 1, 0, 0, 2};
    static const int64_t rows_o[3] = {2, 2, 4};
    static const int64_t elem_q[2] = {3, 3}, elem_v[9] = {1, 2, 3, 0, 0, -1, 1, -3, 0};
    static const int64_t elem_o[1] = {3};
    static const int64_t b1_q[3] = {2, 2, 1}, b1_v[4] = {2, 0, 1, -1}, b1_o[3] = {2, 2, 4};
    for (int t = 0; t < 2; t++) {
        enum gf_dtype it = t ? GF_INT32 : GF_INT64;
        check_gather_nd(it, 0, 3, rows_q, rows_v, 3, rows_o);
        check_gather_nd(it, 0, 2, elem_q, elem_v, 1, elem_o);
        check_gather_nd(it, 1, 3, b1_q, b1_v, 3, b1_o);
    }
    /* an index out of range: an error from both, no crash */
    int64_t bad[2] = {0, 3}, q[1] = {2}, xd[3] = {2, 3, 4};
    float *x = data_of(GF_FLOAT, 24, 1);
    struct gf_tview in[2] = {bt_view(GF_FLOAT, x, 3, xd), bt_view(GF_INT64, bad, 1, q)};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(4));
    void *res[1];
    assert_int_equal(bt_run(mk("GatherND", 2), in, 2, 0x2, &out, 1, NULL, res),
                     GF_ERR_INVALID);
    free(res[0]);
    free(x);
}

static void test_isnan_isinf(void **state)
{
    (void)state;
    need_backend();
    float v[12] = {0, 1, -1, NAN, INFINITY, -INFINITY, 3.5f, -NAN, 1e38f, -1e-38f, 2, INFINITY};
    uint16_t h[12];
    for (int i = 0; i < 12; i++)
        h[i] = gf_float_to_half(v[i]);
    for (int t = 0; t < 2; t++) {
        struct gf_tview in = t ? bt_view(GF_FLOAT16, h, DIMS(3, 4))
                               : bt_view(GF_FLOAT, v, DIMS(3, 4));
        struct gf_tview out = bt_view(GF_BOOL, NULL, DIMS(3, 4));
        bt_compare(mk("IsNaN", 1), &in, 1, 0, &out, 1, 0, 0);
        for (int neg = 0; neg < 2; neg++)
            for (int pos = 0; pos < 2; pos++) {
                struct gf_node *n = mk("IsInf", 1);
                assert_int_equal(gf_node_set_attr_int(n, "detect_negative", neg), GF_OK);
                assert_int_equal(gf_node_set_attr_int(n, "detect_positive", pos), GF_OK);
                bt_compare(n, &in, 1, 0, &out, 1, 0, 0);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pad, teardown),
        cmocka_unit_test_teardown(test_label_shift, teardown),
        cmocka_unit_test_teardown(test_gather_nd, teardown),
        cmocka_unit_test_teardown(test_isnan_isinf, teardown),
    };
    return bt_run_tests(tests, NULL, NULL);
}
