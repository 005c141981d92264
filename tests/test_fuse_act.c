/* Activation fusions: SiLU, GELU (erf and tanh, in their exporter forms),
 * SwiGLU and GeGLU fuse and compute what they replaced (the unfused graph
 * on the executor is the reference); near misses stay unfused. */
#include "fusetest.h"

static void expect_only(struct tg *t, const char *op, size_t n_inputs)
{
    assert_int_equal(t->g->n_nodes, 1);
    const struct gf_node *n = tg_find_op(t, op);
    assert_string_equal(n->domain, "graphfuse");
    assert_int_equal(n->n_inputs, n_inputs);
}

static void expect_no_fusion(struct tg *t)
{
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        if (n->domain && strcmp(n->domain, "graphfuse") == 0)
            fail_msg("unexpected fused node %s", n->op_type);
}

/* ---- SiLU ------------------------------------------------------------------ */

static struct tg silu(const char *mul_ins)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_input(&t, "v", GF_FLOAT, "2,3,8");
    tg_node(&t, "Sigmoid", "x", "s");
    tg_node(&t, "Mul", mul_ins, "y");
    tg_output(&t, "y");
    return t;
}

static void test_silu(void **state)
{
    (void)state;
    struct tg t = silu("x,s");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_only(&t, "SiLU", 1);
    assert_int_equal(tg_hits(&rep, "silu"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

static void test_silu_commuted(void **state)
{
    (void)state;
    struct tg t = silu("s,x");
    tg_check_fused(&t, NULL, NULL);
    expect_only(&t, "SiLU", 1);
    gf_model_free(t.m);
}

/* The Swish op (alpha 1): the executor has no Swish, so the reference is
 * x * sigmoid(x) run on the same inputs. */
static void test_swish_op(void **state)
{
    (void)state;
    struct tg t = tg_new(17), ref = silu("x,s");
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_input(&t, "v", GF_FLOAT, "2,3,8");
    tg_node(&t, "Swish", "x", "y");
    tg_output(&t, "y");
    tg_fuse(&t, NULL, NULL);
    expect_only(&t, "SiLU", 1);
    struct gf_tensor *in[4], *want[4], *got[4];
    size_t n_in = tg_inputs(&ref, in);
    tg_run(&ref, in, n_in, want, 4);
    tg_run(&t, in, n_in, got, 4);
    double worst;
    assert_true(gf_tensor_allclose(got[0], want[0], 1e-5, 1e-6, &worst));
    gf_model_free(t.m);
    gf_model_free(ref.m);
}

static void test_swish_alpha(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    gf_node_set_attr_float(tg_node(&t, "Swish", "x", "y"), "alpha", 2.0f);
    tg_output(&t, "y");
    tg_fuse(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* sigmoid(x) * v: not SiLU. */
static void test_silu_other_operand(void **state)
{
    (void)state;
    struct tg t = silu("v,s");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The sigmoid is also a graph output. */
static void test_silu_sigmoid_output(void **state)
{
    (void)state;
    struct tg t = silu("x,s");
    tg_output(&t, "s");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* ---- SwiGLU ---------------------------------------------------------------- */

static struct tg swiglu(bool reuse_silu)
{
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,3,16");
    tg_input(&t, "u", GF_FLOAT, "2,3,16");
    tg_node(&t, "Sigmoid", "g", "s");
    tg_node(&t, "Mul", "g,s", "a");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    if (reuse_silu) {
        tg_node(&t, "Neg", "a", "z");
        tg_output(&t, "z");
    }
    return t;
}

static void test_swiglu(void **state)
{
    (void)state;
    struct tg t = swiglu(false);
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_only(&t, "SwiGLU", 2);
    const struct gf_node *n = tg_find_op(&t, "SwiGLU");
    assert_string_equal(n->inputs[0]->name, "g");
    assert_string_equal(n->inputs[1]->name, "u");
    assert_int_equal(tg_hits(&rep, "silu"), 1);
    assert_int_equal(tg_hits(&rep, "swiglu"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* g * (sigmoid(g) * u), with a broadcast up operand [16]. */
static void test_swiglu_assoc(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,3,16");
    tg_input(&t, "u", GF_FLOAT, "16");
    tg_node(&t, "Sigmoid", "g", "s");
    tg_node(&t, "Mul", "u,s", "a");
    tg_node(&t, "Mul", "a,g", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_only(&t, "SwiGLU", 2);
    gf_model_free(t.m);
}

/* silu(g) is read again: SiLU fuses, the gate multiply stays. */
static void test_swiglu_silu_reused(void **state)
{
    (void)state;
    struct tg t = swiglu(true);
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "SwiGLU"), 0);
    assert_int_equal(tg_count(&t, "SiLU"), 1);
    assert_int_equal(tg_count(&t, "Mul"), 1);
    gf_model_free(t.m);
}

/* g * sigmoid(h) * u with h != g: neither SiLU nor SwiGLU. */
static void test_swiglu_other_gate(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,16");
    tg_input(&t, "h", GF_FLOAT, "2,16");
    tg_input(&t, "u", GF_FLOAT, "2,16");
    tg_node(&t, "Sigmoid", "h", "s");
    tg_node(&t, "Mul", "g,s", "a");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* ---- GELU ------------------------------------------------------------------ */

/* torch's exact gelu (legacy export): (x * (1 + erf(x / sqrt2))) * 0.5. */
static void gelu_erf_div(struct tg *t, const char *x, const char *y, const char *sqrt2)
{
    char in[64], nm[4][32];
    for (int i = 0; i < 4; i++)
        snprintf(nm[i], sizeof(nm[i]), "%s_e%d", y, i);
    snprintf(in, sizeof(in), "%s,%s", x, sqrt2);
    tg_node(t, "Div", in, nm[0]);
    tg_node(t, "Erf", nm[0], nm[1]);
    snprintf(in, sizeof(in), "%s,#1", nm[1]);
    tg_node(t, "Add", in, nm[2]);
    snprintf(in, sizeof(in), "%s,%s", x, nm[2]);
    tg_node(t, "Mul", in, nm[3]);
    snprintf(in, sizeof(in), "%s,#0.5", nm[3]);
    tg_node(t, "Mul", in, y);
}

/* gpt2's gelu_new: 0.5x * (1 + tanh(0.7978846 * (x + 0.044715 * x^3))). */
static void gelu_tanh_pow(struct tg *t, const char *x, const char *y, const char *k)
{
    char in[64], nm[7][32];
    for (int i = 0; i < 7; i++)
        snprintf(nm[i], sizeof(nm[i]), "%s_t%d", y, i);
    snprintf(in, sizeof(in), "%s,#0.5", x);
    tg_node(t, "Mul", in, nm[0]);
    snprintf(in, sizeof(in), "%s,#3", x);
    tg_node(t, "Pow", in, nm[1]);
    snprintf(in, sizeof(in), "%s,%s", nm[1], k);
    tg_node(t, "Mul", in, nm[2]);
    snprintf(in, sizeof(in), "%s,%s", x, nm[2]);
    tg_node(t, "Add", in, nm[3]);
    snprintf(in, sizeof(in), "%s,#0.7978846", nm[3]);
    tg_node(t, "Mul", in, nm[4]);
    tg_node(t, "Tanh", nm[4], nm[5]);
    snprintf(in, sizeof(in), "%s,#1", nm[5]);
    tg_node(t, "Add", in, nm[6]);
    snprintf(in, sizeof(in), "%s,%s", nm[0], nm[6]);
    tg_node(t, "Mul", in, y);
}

static void expect_gelu(struct tg *t, const char *approx)
{
    expect_only(t, "Gelu", 1);
    assert_string_equal(gf_node_attr_string(tg_find_op(t, "Gelu"), "approximate", "?"), approx);
}

static void test_gelu_erf(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    gelu_erf_div(&t, "x", "y", "#1.4142135");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_gelu(&t, "none");
    assert_int_equal(tg_hits(&rep, "gelu"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* x * 0.70710678 under Erf, and the half taken first: (0.5 * x) * (erf + 1). */
static void test_gelu_erf_mul(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_node(&t, "Mul", "#0.70710678,x", "xs");
    tg_node(&t, "Erf", "xs", "e");
    tg_node(&t, "Add", "#1,e", "p");
    tg_node(&t, "Mul", "#0.5,x", "h");
    tg_node(&t, "Mul", "p,h", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_gelu(&t, "none");
    gf_model_free(t.m);
}

/* x * (1 + erf(x / sqrt2)) / 2. */
static void test_gelu_div2(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_node(&t, "Div", "x,#1.41421356", "xs");
    tg_node(&t, "Erf", "xs", "e");
    tg_node(&t, "Add", "e,#1", "p");
    tg_node(&t, "Mul", "x,p", "q");
    tg_node(&t, "Div", "q,#2", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_gelu(&t, "none");
    gf_model_free(t.m);
}

static void test_gelu_tanh(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    gelu_tanh_pow(&t, "x", "y", "#0.044715");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_gelu(&t, "tanh");
    gf_model_free(t.m);
}

/* x*x*x, sqrt(2/pi) to 10 digits, and x * ((1 + tanh) * 0.5). */
static void test_gelu_tanh_cube(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "3,8");
    tg_node(&t, "Mul", "x,x", "x2");
    tg_node(&t, "Mul", "x,x2", "x3");
    tg_node(&t, "Mul", "#0.044715,x3", "k");
    tg_node(&t, "Add", "k,x", "i");
    tg_node(&t, "Mul", "#0.7978845608,i", "a");
    tg_node(&t, "Tanh", "a", "th");
    tg_node(&t, "Add", "th,#1", "p");
    tg_node(&t, "Mul", "p,#0.5", "h");
    tg_node(&t, "Mul", "x,h", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_gelu(&t, "tanh");
    gf_model_free(t.m);
}

/* 0.044 is not 0.044715. */
static void test_gelu_wrong_constant(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    gelu_tanh_pow(&t, "x", "y", "#0.044");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* sqrt(2) written as 1.41 is too far from it. */
static void test_gelu_rough_sqrt2(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    gelu_erf_div(&t, "x", "y", "#1.41");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The erf value is read again. */
static void test_gelu_erf_reused(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    gelu_erf_div(&t, "x", "y", "#1.4142135");
    tg_output(&t, "y");
    tg_output(&t, "y_e1");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* ---- GeGLU ----------------------------------------------------------------- */

static void test_geglu(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,3,16");
    tg_input(&t, "u", GF_FLOAT, "2,3,16");
    gelu_erf_div(&t, "g", "a", "#1.4142135");
    tg_node(&t, "Mul", "u,a", "y");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_only(&t, "GeGLU", 2);
    const struct gf_node *n = tg_find_op(&t, "GeGLU");
    assert_string_equal(gf_node_attr_string(n, "approximate", "?"), "none");
    assert_string_equal(n->inputs[0]->name, "g");
    assert_int_equal(tg_hits(&rep, "geglu"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

static void test_geglu_tanh(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,16");
    tg_input(&t, "u", GF_FLOAT, "2,16");
    gelu_tanh_pow(&t, "g", "a", "#0.044715");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_only(&t, "GeGLU", 2);
    assert_string_equal(gf_node_attr_string(tg_find_op(&t, "GeGLU"), "approximate", "?"),
                        "tanh");
    gf_model_free(t.m);
}

/* The ONNX Gelu op (opset 20) times up. */
static void test_geglu_onnx_gelu(void **state)
{
    (void)state;
    struct tg t = tg_new(20);
    tg_input(&t, "g", GF_FLOAT, "2,16");
    tg_input(&t, "u", GF_FLOAT, "2,16");
    gf_node_set_attr_string(tg_node(&t, "Gelu", "g", "a"), "approximate", "tanh");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_only(&t, "GeGLU", 2);
    assert_string_equal(gf_node_attr_string(tg_find_op(&t, "GeGLU"), "approximate", "?"),
                        "tanh");
    gf_model_free(t.m);
}

/* gelu(g) is read again: Gelu fuses, the multiply stays. */
static void test_geglu_gelu_reused(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,16");
    tg_input(&t, "u", GF_FLOAT, "2,16");
    gelu_erf_div(&t, "g", "a", "#1.4142135");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_output(&t, "a");
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "GeGLU"), 0);
    assert_int_equal(tg_count(&t, "Gelu"), 1);
    assert_int_equal(tg_count(&t, "Mul"), 1);
    gf_model_free(t.m);
}

/* A wrong GELU constant: neither Gelu nor GeGLU. */
static void test_geglu_wrong_constant(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,16");
    tg_input(&t, "u", GF_FLOAT, "2,16");
    gelu_erf_div(&t, "g", "a", "#2");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_silu_commuted),
        cmocka_unit_test(test_swish_op),
        cmocka_unit_test(test_swish_alpha),
        cmocka_unit_test(test_silu_other_operand),
        cmocka_unit_test(test_silu_sigmoid_output),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_swiglu_assoc),
        cmocka_unit_test(test_swiglu_silu_reused),
        cmocka_unit_test(test_swiglu_other_gate),
        cmocka_unit_test(test_gelu_erf),
        cmocka_unit_test(test_gelu_erf_mul),
        cmocka_unit_test(test_gelu_div2),
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_gelu_tanh_cube),
        cmocka_unit_test(test_gelu_wrong_constant),
        cmocka_unit_test(test_gelu_rough_sqrt2),
        cmocka_unit_test(test_gelu_erf_reused),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_geglu_tanh),
        cmocka_unit_test(test_geglu_onnx_gelu),
        cmocka_unit_test(test_geglu_gelu_reused),
        cmocka_unit_test(test_geglu_wrong_constant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
