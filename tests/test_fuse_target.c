/* optimize --target ort / onnx (passes/fuse_target.c) and the kernels that
 * run what they write (kernels/cpu/contrib.c): for each fused op, the ops
 * written, the cases that stay function calls, and (tg_check_fused) that
 * graphfuse computes the same outputs before fusion and after lowering. */
#include "fusetest.h"

static const struct gf_fuse_opts ort = {.target = GF_TARGET_ORT};
static const struct gf_fuse_opts onnx = {.target = GF_TARGET_ONNX};

/* Fuses t for target o (checking outputs) and frees it; then the graph
 * had `count` nodes of op type `op` (a graphfuse op: still a call). */
static void expect(struct tg *t, const struct gf_fuse_opts *o, const char *op, int count)
{
    tg_check_fused(t, o, NULL);
    if (tg_count(t, op) != count)
        fail_msg("target %s: %d %s, expected %d", gf_fuse_target_name(o->target),
                 tg_count(t, op), op, count);
}

static int domain_count(const struct tg *t, const char *domain)
{
    int k = 0;
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        k += n->domain && strcmp(n->domain, domain) == 0;
    return k;
}

/* s = x + r; y = s * (1 / sqrt(mean(s^2) + eps)) [* w]; outputs y and s. */
static struct tg add_rmsnorm(int64_t opset, const char *xdims, bool weight)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "x", GF_FLOAT, xdims);
    tg_input(&t, "r", GF_FLOAT, xdims);
    tg_node(&t, "Add", "x,r", "s");
    tg_node(&t, "Pow", "s,#2", "sq");
    if (opset >= 18)
        tg_node(&t, "ReduceMean", "sq,$-1", "ms");
    else
        tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "a");
    tg_node(&t, "Sqrt", "a", "rt");
    tg_node(&t, "Reciprocal", "rt", "inv");
    tg_node(&t, "Mul", "s,inv", weight ? "nr" : "y");
    if (weight) {
        tg_init(&t, "w", GF_FLOAT, "8", NULL);
        tg_node(&t, "Mul", "nr,w", "y");
    }
    tg_output(&t, "y");
    tg_output(&t, "s");
    return t;
}

static void test_add_rmsnorm(void **state)
{
    (void)state;
    struct tg t = add_rmsnorm(23, "2,3,8", true);
    expect(&t, &ort, "SkipSimplifiedLayerNormalization", 1);
    assert_int_equal(gf_model_opset(t.m, "com.microsoft"), 1);
    assert_int_equal(gf_model_opset(t.m, "graphfuse"), 0); /* no function left */
    assert_int_equal(t.m->n_functions, 0);
    gf_model_free(t.m);
    t = add_rmsnorm(23, "2,3,8", true);
    expect(&t, &onnx, "RMSNormalization", 1);
    assert_int_equal(tg_count(&t, "Add"), 1);
    assert_int_equal(domain_count(&t, "com.microsoft"), 0);
    gf_model_free(t.m);
    /* no weight: a ones scale; the Skip op takes rank 2 or 3 only */
    t = add_rmsnorm(23, "6,8", false);
    expect(&t, &ort, "SkipSimplifiedLayerNormalization", 1);
    assert_non_null(gf_graph_find(t.g, "gf_ones"));
    gf_model_free(t.m);
    t = add_rmsnorm(23, "2,2,3,8", true);
    expect(&t, &ort, "AddRMSNorm", 1);
    gf_model_free(t.m);
    /* opset 18: no RMSNormalization, the function stays */
    t = add_rmsnorm(18, "2,3,8", true);
    expect(&t, &onnx, "AddRMSNorm", 1);
    assert_int_equal(t.m->n_functions, 1);
    gf_model_free(t.m);
}

/* y = x / (sqrt(mean(x * x)) + eps): epsilon outside, no target op. */
static void test_rmsnorm_eps_outside(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct tg t = tg_new(23);
        tg_input(&t, "x", GF_FLOAT, "2,3,8");
        tg_node(&t, "Mul", "x,x", "sq");
        tg_node(&t, "ReduceMean", "sq,$-1", "ms");
        tg_node(&t, "Sqrt", "ms", "rt");
        tg_node(&t, "Add", "rt,#1e-3", "d");
        tg_node(&t, "Div", "x,d", "y");
        tg_output(&t, "y");
        expect(&t, k ? &onnx : &ort, "RMSNorm", 1);
        gf_model_free(t.m);
    }
}

/* s = x + r; y = (s - mean) / sqrt(var + eps), no weight or bias. */
static struct tg add_layernorm(int64_t opset)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_input(&t, "r", GF_FLOAT, "2,3,8");
    tg_node(&t, "Add", "x,r", "s");
    tg_axes(tg_node(&t, "ReduceMean", "s", "mu"), -1);
    tg_node(&t, "Sub", "s,mu", "d");
    tg_node(&t, "Pow", "d,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "var"), -1);
    tg_node(&t, "Add", "var,#1e-5", "ve");
    tg_node(&t, "Sqrt", "ve", "sd");
    tg_node(&t, "Div", "d,sd", "y");
    tg_output(&t, "y");
    return t;
}

static void test_add_layernorm(void **state)
{
    (void)state;
    struct tg t = add_layernorm(17);
    expect(&t, &ort, "SkipLayerNormalization", 1);
    gf_model_free(t.m);
    t = add_layernorm(17);
    expect(&t, &onnx, "LayerNormalization", 1);
    assert_int_equal(tg_count(&t, "Add"), 1);
    gf_model_free(t.m);
    t = add_layernorm(16); /* LayerNormalization is opset 17 */
    expect(&t, &onnx, "AddLayerNorm", 1);
    gf_model_free(t.m);
}

/* y = x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh formula, of value "x". */
static void gelu_chain(struct tg *t, bool tanh_form)
{
    if (tanh_form) {
        tg_node(t, "Pow", "x,#3", "x3");
        tg_node(t, "Mul", "x3,#0.044715", "c");
        tg_node(t, "Add", "x,c", "inner");
        tg_node(t, "Mul", "inner,#0.7978845608", "u");
        tg_node(t, "Tanh", "u", "e");
    } else {
        tg_node(t, "Div", "x,#1.4142135", "xs");
        tg_node(t, "Erf", "xs", "e");
    }
    tg_node(t, "Add", "e,#1", "p");
    tg_node(t, "Mul", "x,#0.5", "h");
    tg_node(t, "Mul", "h,p", "y");
    tg_output(t, "y");
}

static struct tg gelu(int64_t opset, bool tanh_form)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    gelu_chain(&t, tanh_form);
    return t;
}

static void test_gelu(void **state)
{
    (void)state;
    struct tg t = gelu(20, false);
    expect(&t, &ort, "Gelu", 1);
    assert_string_equal(tg_find_op(&t, "Gelu")->domain, "com.microsoft");
    gf_model_free(t.m);
    t = gelu(20, true);
    expect(&t, &ort, "FastGelu", 1);
    gf_model_free(t.m);
    t = gelu(20, true);
    expect(&t, &onnx, "Gelu", 1);
    assert_string_equal(gf_node_attr_string(tg_find_op(&t, "Gelu"), "approximate", ""), "tanh");
    gf_model_free(t.m);
    t = gelu(17, false); /* Gelu is opset 20: the call to the graphfuse Gelu stays */
    expect(&t, &onnx, "Gelu", 1);
    assert_string_equal(tg_find_op(&t, "Gelu")->domain, "graphfuse");
    gf_model_free(t.m);
}

static void test_silu(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct tg t = tg_new(17);
        tg_input(&t, "x", GF_FLOAT, "2,3,8");
        tg_node(&t, "Sigmoid", "x", "s");
        tg_node(&t, "Mul", "x,s", "y");
        tg_output(&t, "y");
        expect(&t, k ? &onnx : &ort, k ? "SiLU" : "QuickGelu", 1);
        if (!k)
            assert_true(gf_node_attr_float(tg_find_op(&t, "QuickGelu"), "alpha", 0) == 1.0f);
        gf_model_free(t.m);
    }
}

/* y = gelu(a @ w + b), b [16] */
static struct tg linear_gelu(int64_t opset, bool tanh_form)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "a", GF_FLOAT, "2,3,8");
    tg_init(&t, "w", GF_FLOAT, "8,16", NULL);
    tg_init(&t, "b", GF_FLOAT, "16", NULL);
    tg_node(&t, "MatMul", "a,w", "mm");
    tg_node(&t, "Add", "mm,b", "x");
    gelu_chain(&t, tanh_form);
    return t;
}

static void test_linear_gelu(void **state)
{
    (void)state;
    struct tg t = linear_gelu(20, false);
    expect(&t, &ort, "BiasGelu", 1);
    assert_int_equal(tg_count(&t, "MatMul"), 1);
    gf_model_free(t.m);
    t = linear_gelu(20, true);
    expect(&t, &ort, "FastGelu", 1);
    assert_int_equal(tg_find_op(&t, "FastGelu")->n_inputs, 2);
    gf_model_free(t.m);
    t = linear_gelu(20, false);
    expect(&t, &onnx, "Gelu", 1);
    assert_int_equal(tg_count(&t, "MatMul") + tg_count(&t, "Add"), 2);
    gf_model_free(t.m);
}

/* y = (a @ transpose(b)) * 0.25: FusedMatMul {transB, alpha}. */
static void test_fused_matmul(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct tg t = tg_new(17);
        tg_input(&t, "a", GF_FLOAT, "2,4,5,16");
        tg_input(&t, "b", GF_FLOAT, "2,4,6,16");
        struct gf_node *tr = tg_node(&t, "Transpose", "b", "bt");
        int64_t perm[4] = {0, 1, 3, 2};
        assert_int_equal(gf_node_set_attr_ints(tr, "perm", 4, perm), GF_OK);
        tg_node(&t, "MatMul", "a,bt", "p");
        tg_node(&t, "Mul", "p,#0.25", "y");
        tg_output(&t, "y");
        expect(&t, k ? &onnx : &ort, k ? "MatMulEpilogue" : "FusedMatMul", 1);
        if (!k)
            assert_int_equal(gf_node_attr_int(tg_find_op(&t, "FusedMatMul"), "transB", 0), 1);
        gf_model_free(t.m);
    }
}

/* y = x cos + rotate_half(x) sin, x [2, 4, 5, 16]; the tables cos / sin
 * of Concat(t, t2) (t2 = t: equal halves), or graph inputs [5, 16]. */
static struct tg rope(int64_t opset, int tables)
{
    struct tg t = tg_new(opset);
    double axes01[2] = {0, 1};
    tg_input(&t, "x", GF_FLOAT, "batch,4,5,16");
    tg_init(&t, "u01", GF_INT64, "2", axes01);
    if (tables == 2) {
        tg_input(&t, "c", GF_FLOAT, "5,16");
        tg_input(&t, "s", GF_FLOAT, "5,16");
    } else {
        tg_input(&t, "t", GF_FLOAT, "5,8");
        tg_input(&t, "t2", GF_FLOAT, "5,8");
        struct gf_node *cat = tg_node(&t, "Concat", tables ? "t,t2" : "t,t", "emb");
        assert_int_equal(gf_node_set_attr_int(cat, "axis", -1), GF_OK);
        tg_node(&t, "Cos", "emb", "c");
        tg_node(&t, "Sin", "emb", "s");
    }
    tg_node(&t, "Unsqueeze", "c,u01", "cu");
    tg_node(&t, "Unsqueeze", "s,u01", "su");
    tg_node(&t, "Slice", "x,$0,$8,$-1", "x1");
    tg_node(&t, "Slice", "x,$8,$99,$-1", "x2");
    tg_node(&t, "Neg", "x2", "nx2");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "nx2,x1", "rx"), "axis", -1),
                     GF_OK);
    tg_node(&t, "Mul", "x,cu", "xc");
    tg_node(&t, "Mul", "rx,su", "xs");
    tg_node(&t, "Add", "xc,xs", "y");
    tg_output(&t, "y");
    return t;
}

static void test_rope(void **state)
{
    (void)state;
    struct tg t = rope(23, 0);
    expect(&t, &ort, "RotaryEmbedding", 1);
    assert_string_equal(tg_find_op(&t, "RotaryEmbedding")->domain, "com.microsoft");
    gf_model_free(t.m);
    t = rope(23, 0);
    expect(&t, &onnx, "RotaryEmbedding", 1);
    assert_int_equal(domain_count(&t, "com.microsoft"), 0);
    gf_model_free(t.m);
    /* halves not provably equal: the call stays */
    for (int tables = 1; tables <= 2; tables++) {
        t = rope(23, tables);
        expect(&t, &ort, "RoPE", 1);
        gf_model_free(t.m);
    }
    t = rope(20, 0); /* RotaryEmbedding is opset 23 */
    expect(&t, &onnx, "RoPE", 1);
    gf_model_free(t.m);
}

/* SwiGLU has no op in either target. */
static void test_swiglu_stays(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct tg t = tg_new(23);
        tg_input(&t, "g", GF_FLOAT, "2,3,8");
        tg_input(&t, "u", GF_FLOAT, "2,3,8");
        tg_node(&t, "Sigmoid", "g", "s");
        tg_node(&t, "Mul", "g,s", "a");
        tg_node(&t, "Mul", "a,u", "y");
        tg_output(&t, "y");
        expect(&t, k ? &onnx : &ort, "SwiGLU", 1);
        assert_int_equal(t.m->n_functions, 1);
        gf_model_free(t.m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_rmsnorm),
        cmocka_unit_test(test_rmsnorm_eps_outside),
        cmocka_unit_test(test_add_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_linear_gelu),
        cmocka_unit_test(test_fused_matmul),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu_stays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
