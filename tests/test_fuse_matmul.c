/* MatMulEpilogue fusion: a MatMul or Gemm with its bias, activation (raw or
 * already fused), residual, operand Transpose and constant scale folded in
 * fuses and computes what it replaced (the unfused graph on the executor is
 * the reference); near misses stay unfused, and the residual Add before a
 * norm and the gate of a GLU are left to the norm and GLU fusions. */
#include "fusetest.h"

/* ---- helpers ------------------------------------------------------------------ */

/* What the one MatMulEpilogue of the graph must be: inputs by name (NULL:
 * omitted or absent), attributes (0 / 1.0 / "" are the defaults). */
struct want {
    const char *in[4];
    int64_t ta, tb;
    double alpha, beta;
    const char *act;
};

/* Nodes of op `op` (a second function body of the op in a model renames
 * the node's op_type, "MatMulEpilogue_2": count by op, not by name). */
static int count_op(const struct tg *t, enum gf_op op)
{
    int k = 0;
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        k += n->op == op;
    return k;
}

static const struct gf_node *find_op(const struct tg *t, enum gf_op op)
{
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        if (n->op == op)
            return n;
    fail_msg("no %s node in the graph", gf_op_get_info(op)->name);
    return NULL;
}

static void expect_mme(const struct tg *t, struct want w)
{
    assert_int_equal(count_op(t, GF_OP_MATMUL_EPILOGUE), 1);
    const struct gf_node *n = find_op(t, GF_OP_MATMUL_EPILOGUE);
    assert_string_equal(n->domain, "graphfuse");
    for (size_t i = 0; i < 4; i++) {
        const struct gf_value *v = i < n->n_inputs ? n->inputs[i] : NULL;
        if (!w.in[i] && v)
            fail_msg("input %zu is '%s', expected none", i, v->name);
        if (w.in[i] && (!v || strcmp(v->name, w.in[i]) != 0))
            fail_msg("input %zu is '%s', expected '%s'", i, v ? v->name : "(none)", w.in[i]);
    }
    assert_int_equal(gf_node_attr_int(n, "transA", 0), w.ta);
    assert_int_equal(gf_node_attr_int(n, "transB", 0), w.tb);
    assert_float_equal(gf_node_attr_float(n, "alpha", 1.0f), w.alpha ? w.alpha : 1.0, 1e-7);
    assert_float_equal(gf_node_attr_float(n, "beta", 1.0f), w.beta ? w.beta : 1.0, 1e-7);
    assert_string_equal(gf_node_attr_string(n, "activation", ""), w.act ? w.act : "");
}

static void expect_no_mme(const struct tg *t)
{
    assert_int_equal(count_op(t, GF_OP_MATMUL_EPILOGUE), 0);
    assert_true(tg_count(t, "MatMul") + tg_count(t, "Gemm") >= 1);
}

/* x [2,3,8] @ w [8,16] -> out; weights are inputs, so random. */
static struct tg mm_product(int64_t opset, const char *out)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_input(&t, "w", GF_FLOAT, "8,16");
    tg_node(&t, "MatMul", "x,w", out);
    return t;
}

static struct tg mm_base(int64_t opset)
{
    return mm_product(opset, "p");
}

/* p + b, b a [16] initializer: the biased linear. */
static struct tg mm_bias(int64_t opset)
{
    struct tg t = mm_base(opset);
    tg_init(&t, "b", GF_FLOAT, "16", NULL);
    tg_node(&t, "Add", "p,b", "h");
    return t;
}

/* y = gelu(h), GPT-2's gelu_new: 0.5h * (1 + tanh(0.7978846 * (h + 0.044715 h^3))). */
static void gelu_tanh(struct tg *t)
{
    tg_node(t, "Mul", "h,#0.5", "g0");
    tg_node(t, "Pow", "h,#3", "g1");
    tg_node(t, "Mul", "g1,#0.044715", "g2");
    tg_node(t, "Add", "h,g2", "g3");
    tg_node(t, "Mul", "g3,#0.7978846", "g4");
    tg_node(t, "Tanh", "g4", "g5");
    tg_node(t, "Add", "g5,#1", "g6");
    tg_node(t, "Mul", "g0,g6", "y");
}

/* y = gelu(h), torch's exact gelu: (h * (1 + erf(h / sqrt2))) * 0.5. */
static void gelu_erf(struct tg *t, const char *out)
{
    tg_node(t, "Div", "h,#1.4142135", "e0");
    tg_node(t, "Erf", "e0", "e1");
    tg_node(t, "Add", "e1,#1", "e2");
    tg_node(t, "Mul", "h,e2", "e3");
    tg_node(t, "Mul", "e3,#0.5", out);
}

/* ---- bias ------------------------------------------------------------------------- */

static void test_bias(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_output(&t, "h");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    assert_int_equal(t.g->n_nodes, 1);
    assert_int_equal(tg_hits(&rep, "matmul_bias"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* bias + p, the bias a graph input [1,1,16] (legacy writes Add(bias, MatMul)). */
static void test_bias_first(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "b", GF_FLOAT, "1,1,16");
    tg_node(&t, "Add", "b,p", "h");
    tg_output(&t, "h");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    gf_model_free(t.m);
}

/* The product is read twice: nothing fuses. */
static void test_bias_product_reused(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_output(&t, "h");
    tg_output(&t, "p");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* A "bias" [3,1] varies along the rows, not the last axis: no bias, and
 * not of the product's shape either. */
static void test_bias_wrong_axis(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "b", GF_FLOAT, "3,1");
    tg_node(&t, "Add", "p,b", "h");
    tg_output(&t, "h");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* A bias [2,1,16] would broadcast over the batch too. */
static void test_bias_batch_varying(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "b", GF_FLOAT, "2,1,16");
    tg_node(&t, "Add", "p,b", "h");
    tg_output(&t, "h");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* ---- activations -------------------------------------------------------------------- */

/* GPT-2's MLP up-projection: bias, then gelu_new written out. */
static void test_gelu_tanh(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    gelu_tanh(&t);
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}, .act = "gelu_tanh"});
    assert_int_equal(t.g->n_nodes, 1);
    assert_int_equal(tg_hits(&rep, "gelu"), 1);
    assert_int_equal(tg_hits(&rep, "matmul_bias"), 1);
    assert_int_equal(tg_hits(&rep, "matmul_act"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

static void test_gelu_erf(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    gelu_erf(&t, "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}, .act = "gelu"});
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

/* The ONNX Gelu op (opset 20) on a product without bias. */
static void test_gelu_op(void **state)
{
    (void)state;
    struct tg t = mm_base(20);
    gf_node_set_attr_string(tg_node(&t, "Gelu", "p", "y"), "approximate", "tanh");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w"}, .act = "gelu_tanh"});
    gf_model_free(t.m);
}

/* One biased linear per activation op. */
static void act_case(const char *op, const char *act)
{
    struct tg t = mm_bias(17);
    tg_node(&t, op, "h", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}, .act = act});
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

static void test_relu(void **state)
{
    (void)state;
    act_case("Relu", "relu");
}

static void test_tanh(void **state)
{
    (void)state;
    act_case("Tanh", "tanh");
}

static void test_sigmoid(void **state)
{
    (void)state;
    act_case("Sigmoid", "sigmoid");
}

/* x*sigmoid(x) after the bias: SiLU fuses first, then joins the epilogue. */
static void test_silu(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_node(&t, "Sigmoid", "h", "s");
    tg_node(&t, "Mul", "s,h", "y");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}, .act = "silu"});
    assert_int_equal(tg_hits(&rep, "silu"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* Relu of a product that is also read elsewhere. */
static void test_act_product_reused(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_node(&t, "Relu", "h", "y");
    tg_output(&t, "y");
    tg_output(&t, "h");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}}); /* the bias alone */
    assert_int_equal(tg_count(&t, "Relu"), 1);
    gf_model_free(t.m);
}

/* gelu(x @ wg) * up is GeGLU: the gate stays a plain MatMul for it. */
static void test_geglu_keeps_gate(void **state)
{
    (void)state;
    struct tg t = mm_product(17, "h");
    tg_input(&t, "u", GF_FLOAT, "2,3,16");
    gelu_erf(&t, "a");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    assert_string_equal(tg_find_op(&t, "GeGLU")->inputs[0]->name, "h");
    gf_model_free(t.m);
}

/* silu(x @ wg + bg) * up is SwiGLU. */
static void test_swiglu_keeps_gate(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_input(&t, "u", GF_FLOAT, "2,3,16");
    tg_node(&t, "Sigmoid", "h", "s");
    tg_node(&t, "Mul", "h,s", "a");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    assert_int_equal(count_op(&t, GF_OP_SWIGLU), 1);
    gf_model_free(t.m);
}

/* ---- Gemm -------------------------------------------------------------------------- */

/* The MLP classifier's Relu(Gemm(x, W, c, transB)), here with alpha and beta. */
static void test_gemm_relu(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_input(&t, "w", GF_FLOAT, "16,8");
    tg_input(&t, "c", GF_FLOAT, "16");
    struct gf_node *g = tg_node(&t, "Gemm", "x,w,c", "h");
    gf_node_set_attr_int(g, "transB", 1);
    gf_node_set_attr_float(g, "alpha", 0.5f);
    gf_node_set_attr_float(g, "beta", 2.0f);
    tg_node(&t, "Relu", "h", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "c"}, .tb = 1, .alpha = 0.5, .beta = 2,
                                 .act = "relu"});
    gf_model_free(t.m);
}

/* Gemm without C, then a bias Add: beta does not carry over. */
static void test_gemm_bias(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "8,4");
    tg_input(&t, "w", GF_FLOAT, "8,16");
    tg_input(&t, "b", GF_FLOAT, "1,16");
    struct gf_node *g = tg_node(&t, "Gemm", "x,w", "h");
    gf_node_set_attr_int(g, "transA", 1);
    gf_node_set_attr_float(g, "alpha", 2.0f);
    gf_node_set_attr_float(g, "beta", 3.0f);
    tg_node(&t, "Add", "h,b", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}, .ta = 1, .alpha = 2});
    gf_model_free(t.m);
}

/* Gemm with C, then an Add of the output's shape: a residual. */
static void test_gemm_residual(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_input(&t, "w", GF_FLOAT, "8,16");
    tg_input(&t, "c", GF_FLOAT, "4,1");
    tg_input(&t, "r", GF_FLOAT, "4,16");
    tg_node(&t, "Gemm", "x,w,c", "h");
    tg_node(&t, "Add", "r,h", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "c", "r"}});
    gf_model_free(t.m);
}

/* ---- residual ------------------------------------------------------------------------ */

/* bias, Relu, then the residual. */
static void test_residual(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_input(&t, "r", GF_FLOAT, "2,3,16");
    tg_node(&t, "Relu", "h", "a");
    tg_node(&t, "Add", "r,a", "y");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"x", "w", "b", "r"}, .act = "relu"});
    assert_int_equal(tg_hits(&rep, "matmul_residual"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* No bias: the residual goes in after an omitted bias. */
static void test_residual_no_bias(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "r", GF_FLOAT, "2,3,16");
    tg_node(&t, "Add", "p,r", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", NULL, "r"}});
    gf_model_free(t.m);
}

/* A broadcasting "residual" [3,16] after the bias stays an Add. */
static void test_residual_broadcasting(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_input(&t, "r", GF_FLOAT, "3,16");
    tg_node(&t, "Add", "h,r", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    assert_int_equal(tg_count(&t, "Add"), 1);
    gf_model_free(t.m);
}

/* The residual sum is normalized next (GPT-2's attention output): the Add
 * goes to AddLayerNorm, the epilogue keeps the bias alone. */
static void test_residual_before_layernorm(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_input(&t, "r", GF_FLOAT, "2,3,16");
    tg_init(&t, "lw", GF_FLOAT, "16", NULL);
    tg_init(&t, "lb", GF_FLOAT, "16", NULL);
    tg_node(&t, "Add", "r,h", "s");
    tg_node(&t, "LayerNormalization", "s,lw,lb", "y");
    tg_output(&t, "y");
    tg_output(&t, "s");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    assert_int_equal(count_op(&t, GF_OP_ADD_LAYER_NORM), 1);
    gf_model_free(t.m);
}

/* The same before a decomposed RMSNorm (Llama's o_proj + residual). */
static void test_residual_before_rmsnorm(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "r", GF_FLOAT, "2,3,16");
    tg_node(&t, "Add", "r,p", "s");
    tg_node(&t, "Pow", "s,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "a");
    tg_node(&t, "Sqrt", "a", "rt");
    tg_node(&t, "Reciprocal", "rt", "inv");
    tg_node(&t, "Mul", "s,inv", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(count_op(&t, GF_OP_ADD_RMS_NORM), 1);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* ---- Transpose and scale -------------------------------------------------------------- */

/* Llama's attention scores: q @ Transpose(k, last two) * 0.25. */
static void test_attention_scores(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "q", GF_FLOAT, "2,3,5,4");
    tg_input(&t, "k", GF_FLOAT, "2,3,5,4");
    int64_t perm[] = {0, 1, 3, 2};
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "k", "kt"), "perm", 4, perm);
    tg_node(&t, "MatMul", "q,kt", "s");
    tg_node(&t, "Mul", "#0.25,s", "y");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"q", "k"}, .tb = 1, .alpha = 0.25});
    assert_int_equal(t.g->n_nodes, 1);
    assert_int_equal(tg_hits(&rep, "matmul_transpose"), 1);
    assert_int_equal(tg_hits(&rep, "matmul_scale"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* GPT-2's: the head transpose of k is not foldable, the Div by 4 (a
 * Constant node) is. */
static void test_div_scale(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "q", GF_FLOAT, "2,3,5,4");
    tg_input(&t, "k", GF_FLOAT, "2,5,3,4");
    int64_t perm[] = {0, 2, 3, 1};
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "k", "kt"), "perm", 4, perm);
    tg_node(&t, "MatMul", "q,kt", "s");
    tg_node(&t, "Div", "s,@4", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"q", "kt"}, .alpha = 0.25});
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    gf_model_free(t.m);
}

/* Both operands transposed (rank 2: Transpose without perm reverses). */
static void test_transpose_both(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "8,3");
    tg_input(&t, "b", GF_FLOAT, "16,8");
    tg_node(&t, "Transpose", "a", "at");
    tg_node(&t, "Transpose", "b", "bt");
    tg_node(&t, "MatMul", "at,bt", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"a", "b"}, .ta = 1, .tb = 1});
    gf_model_free(t.m);
}

/* perm [0,2,1,3] moves a batch axis: not a last-two swap. */
static void test_transpose_wrong_perm(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "2,5,3,4");
    tg_input(&t, "b", GF_FLOAT, "2,3,4,6");
    int64_t perm[] = {0, 2, 1, 3};
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "a", "at"), "perm", 4, perm);
    tg_node(&t, "MatMul", "at,b", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* The transposed k is read again. */
static void test_transpose_reused(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "q", GF_FLOAT, "3,4");
    tg_input(&t, "k", GF_FLOAT, "5,4");
    tg_node(&t, "Transpose", "k", "kt");
    tg_node(&t, "MatMul", "q,kt", "y");
    tg_output(&t, "y");
    tg_output(&t, "kt");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* A MatMulEpilogue (graphfuse domain) reading a (rank 3, [1, 3]) x-side
 * operand `a` and b, with transB = tb and alpha 0.5; y its output. */
static struct gf_node *mme_node(struct tg *t, const char *a, const char *b, int64_t tb)
{
    struct gf_value *in[3] = {gf_graph_find(t->g, a), gf_graph_find(t->g, b),
                              gf_graph_find(t->g, "bias")};
    struct gf_value *y = gf_graph_new_value(t->g, "y", NULL);
    assert_int_equal(gf_model_set_opset(t->m, "graphfuse", 1), GF_OK);
    struct gf_node *n = gf_graph_add_node(t->g, "MatMulEpilogue", "graphfuse", "mme", 3, in, 1,
                                          &y);
    assert_non_null(n);
    if (tb)
        assert_int_equal(gf_node_set_attr_int(n, "transB", 1), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "alpha", 0.5f), GF_OK);
    return n;
}

/* x [2,8,3] -> Transpose(last two) -> [2,3,8] @ w^T (w [16,8], transB) + bias. */
static struct tg tr_epilogue(const int64_t *perm)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8,3");
    tg_input(&t, "w", GF_FLOAT, "16,8");
    tg_init(&t, "bias", GF_FLOAT, "16", NULL);
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "x", "xt"), "perm", 3, perm);
    mme_node(&t, "xt", "w", 1);
    tg_output(&t, "y");
    return t;
}

/* A Transpose into a MatMulEpilogue sets its transA; the rest is kept. */
static void test_transpose_into_epilogue(void **state)
{
    (void)state;
    int64_t perm[] = {0, 2, 1};
    struct tg t = tr_epilogue(perm);
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_mme(&t, (struct want){.in = {"x", "w", "bias"}, .ta = 1, .tb = 1, .alpha = 0.5});
    assert_int_equal(t.g->n_nodes, 1);
    assert_int_equal(tg_hits(&rep, "matmul_transpose"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* A Transpose of an operand the epilogue reads transposed: transB off. */
static void test_transpose_toggles_epilogue(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_input(&t, "w", GF_FLOAT, "8,16");
    tg_init(&t, "bias", GF_FLOAT, "16", NULL);
    tg_node(&t, "Transpose", "w", "wt"); /* rank 2, no perm: the swap */
    mme_node(&t, "x", "wt", 1);
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "bias"}, .alpha = 0.5});
    assert_int_equal(tg_count(&t, "Transpose"), 0);
    gf_model_free(t.m);
}

/* perm [1,0,2] is not a last-two swap: the epilogue stays as it was. */
static void test_transpose_epilogue_wrong_perm(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "3,2,8");
    tg_input(&t, "w", GF_FLOAT, "16,8");
    tg_init(&t, "bias", GF_FLOAT, "16", NULL);
    int64_t perm[] = {1, 0, 2};
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "x", "xt"), "perm", 3, perm);
    mme_node(&t, "xt", "w", 1);
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"xt", "w", "bias"}, .tb = 1, .alpha = 0.5});
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    gf_model_free(t.m);
}

/* The transposed x is read again (a graph output): no fold. */
static void test_transpose_epilogue_reused(void **state)
{
    (void)state;
    int64_t perm[] = {0, 2, 1};
    struct tg t = tr_epilogue(perm);
    tg_output(&t, "xt");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"xt", "w", "bias"}, .tb = 1, .alpha = 0.5});
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    gf_model_free(t.m);
}

/* The Transpose is read by a second node (a Relu): no fold. */
static void test_transpose_epilogue_two_readers(void **state)
{
    (void)state;
    int64_t perm[] = {0, 2, 1};
    struct tg t = tr_epilogue(perm);
    tg_node(&t, "Relu", "xt", "r");
    tg_output(&t, "r");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"xt", "w", "bias"}, .tb = 1, .alpha = 0.5});
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    gf_model_free(t.m);
}

/* A Transpose read by a MatMul and by another node: no fold. */
static void test_transpose_two_readers(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "q", GF_FLOAT, "2,3,4");
    tg_input(&t, "k", GF_FLOAT, "2,5,4");
    int64_t perm[] = {0, 2, 1};
    gf_node_set_attr_ints(tg_node(&t, "Transpose", "k", "kt"), "perm", 3, perm);
    tg_node(&t, "MatMul", "q,kt", "y");
    tg_node(&t, "Relu", "kt", "r");
    tg_output(&t, "y");
    tg_output(&t, "r");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    gf_model_free(t.m);
}

/* A scale that is not constant, or not one element: no alpha. */
static void test_scale_not_constant(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_input(&t, "s", GF_FLOAT, "");
    tg_node(&t, "Mul", "p,s", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

static void test_scale_vector(void **state)
{
    (void)state;
    struct tg t = mm_base(17);
    tg_init(&t, "s", GF_FLOAT, "16", NULL);
    tg_node(&t, "Mul", "p,s", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_mme(&t);
    gf_model_free(t.m);
}

/* A scale after the bias would scale the bias too: the Mul stays. */
static void test_scale_after_bias(void **state)
{
    (void)state;
    struct tg t = mm_bias(17);
    tg_node(&t, "Mul", "h,#0.5", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_mme(&t, (struct want){.in = {"x", "w", "b"}});
    assert_int_equal(tg_count(&t, "Mul"), 1);
    gf_model_free(t.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_bias_first),
        cmocka_unit_test(test_bias_product_reused),
        cmocka_unit_test(test_bias_wrong_axis),
        cmocka_unit_test(test_bias_batch_varying),
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_gelu_erf),
        cmocka_unit_test(test_gelu_op),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_tanh),
        cmocka_unit_test(test_sigmoid),
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_act_product_reused),
        cmocka_unit_test(test_geglu_keeps_gate),
        cmocka_unit_test(test_swiglu_keeps_gate),
        cmocka_unit_test(test_gemm_relu),
        cmocka_unit_test(test_gemm_bias),
        cmocka_unit_test(test_gemm_residual),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_residual_no_bias),
        cmocka_unit_test(test_residual_broadcasting),
        cmocka_unit_test(test_residual_before_layernorm),
        cmocka_unit_test(test_residual_before_rmsnorm),
        cmocka_unit_test(test_attention_scores),
        cmocka_unit_test(test_div_scale),
        cmocka_unit_test(test_transpose_both),
        cmocka_unit_test(test_transpose_wrong_perm),
        cmocka_unit_test(test_transpose_reused),
        cmocka_unit_test(test_transpose_two_readers),
        cmocka_unit_test(test_transpose_into_epilogue),
        cmocka_unit_test(test_transpose_toggles_epilogue),
        cmocka_unit_test(test_transpose_epilogue_wrong_perm),
        cmocka_unit_test(test_transpose_epilogue_reused),
        cmocka_unit_test(test_transpose_epilogue_two_readers),
        cmocka_unit_test(test_scale_not_constant),
        cmocka_unit_test(test_scale_vector),
        cmocka_unit_test(test_scale_after_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
