/* Normalization fusions: each exporter form of RMSNorm and LayerNorm fuses
 * and computes what it replaced (the unfused graph on the executor is the
 * reference); near misses (a second user, a wrong constant, axis or
 * epsilon shape, a broadcasting residual) stay unfused. */
#include "fusetest.h"

#define NODE_TESTS "/usr/share/libonnx-testdata/data/node"

static void set_to(struct gf_node *n, int64_t to)
{
    assert_int_equal(gf_node_set_attr_int(n, "to", to), GF_OK);
}

/* ---- RMSNorm --------------------------------------------------------------- */

/* The torch.onnx legacy form (opset 17): Cast, Pow, ReduceMean(axes attr),
 * Add(Constant eps), Sqrt, Div(1, .), Mul(x, .), Cast, Mul(w, .). */
static struct tg rms_legacy(const char *dims, const char *wdims)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, dims);
    tg_init(&t, "w", GF_FLOAT, wdims, NULL);
    set_to(tg_node(&t, "Cast", "x", "xf"), 1);
    tg_node(&t, "Pow", "xf,@2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,@1e-6", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Div", "@1,s", "inv");
    tg_node(&t, "Mul", "xf,inv", "n");
    set_to(tg_node(&t, "Cast", "n", "nc"), 1);
    tg_node(&t, "Mul", "w,nc", "y");
    tg_output(&t, "y");
    return t;
}

static void expect_rmsnorm(struct tg *t, double eps, int64_t eps_outside, bool weight)
{
    assert_int_equal(tg_count(t, "RMSNorm"), 1);
    const struct gf_node *n = tg_find_op(t, "RMSNorm");
    assert_string_equal(n->domain, "graphfuse");
    assert_int_equal(gf_node_attr_int(n, "axis", 0), -1);
    assert_float_equal(gf_node_attr_float(n, "epsilon", 0), eps, eps * 1e-6);
    assert_int_equal(gf_node_attr_int(n, "eps_outside", 0), eps_outside);
    assert_string_equal(n->inputs[0]->name, "x");
    assert_int_equal(n->n_inputs, weight ? 2 : 1);
}

static void test_rms_legacy(void **state)
{
    (void)state;
    struct tg t = rms_legacy("2,3,8", "8");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_rmsnorm(&t, 1e-6, 0, true);
    assert_int_equal(t.g->n_nodes, 1); /* Casts joined the match; Constants died */
    assert_int_equal(tg_hits(&rep, "rmsnorm"), 1);
    assert_int_equal(tg_hits(&rep, "rmsnorm_weight"), 1);
    assert_int_equal(rep.n_functions, 1);
    assert_int_equal(gf_model_opset(t.m, "graphfuse"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* Dynamo (opset 20): initializers, ReduceMean axes as input, Reciprocal. */
static void test_rms_dynamo(void **state)
{
    (void)state;
    struct tg t = tg_new(20);
    tg_input(&t, "x", GF_FLOAT, "batch,5,16");
    tg_init(&t, "w", GF_FLOAT, "16", NULL);
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_node(&t, "ReduceMean", "sq,$-1", "ms");
    tg_node(&t, "Add", "ms,#1e-5", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Reciprocal", "s", "inv");
    tg_node(&t, "Mul", "x,inv", "n");
    tg_node(&t, "Mul", "w,n", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_rmsnorm(&t, 1e-5, 0, true);
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

/* x / sqrt(mean(x*x) + eps) * w, operands in the other order. */
static void test_rms_div_xx(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_init(&t, "w", GF_FLOAT, "8", NULL);
    tg_node(&t, "Mul", "x,x", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), 1);
    tg_node(&t, "Add", "#1e-6,ms", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Div", "x,s", "n");
    tg_node(&t, "Mul", "n,w", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_rmsnorm(&t, 1e-6, 0, true);
    gf_model_free(t.m);
}

/* eps outside the root: x / (sqrt(mean(x^2)) + eps), no weight. */
static void test_rms_eps_outside(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "3,8");
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Sqrt", "ms", "s");
    tg_node(&t, "Add", "s,#1e-3", "d");
    tg_node(&t, "Div", "x,d", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_rmsnorm(&t, 1e-3, 1, false);
    gf_model_free(t.m);
}

/* Gemma: x * rsqrt(mean(x^2) + eps) * (1 + w), rsqrt written as Pow -0.5. */
static void test_rms_gemma(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_init(&t, "w", GF_FLOAT, "8", NULL);
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "a");
    tg_node(&t, "Pow", "a,#-0.5", "inv");
    tg_node(&t, "Mul", "inv,x", "n");
    tg_node(&t, "Add", "#1,w", "w1");
    tg_node(&t, "Mul", "n,w1", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_rmsnorm(&t, 1e-6, 0, true);
    const struct gf_node *n = tg_find_op(&t, "RMSNorm");
    assert_float_equal(gf_node_attr_float(n, "weight_offset", 0), 1.0, 0);
    assert_string_equal(n->inputs[1]->name, "w");
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

static void expect_no_fusion(struct tg *t)
{
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        if (n->domain && strcmp(n->domain, "graphfuse") == 0)
            fail_msg("unexpected fused node %s", n->op_type);
}

/* The Sqrt output is also a graph output: the norm cannot hide it. */
static void test_rms_interior_output(void **state)
{
    (void)state;
    struct tg t = rms_legacy("2,3,8", "8");
    tg_output(&t, "s");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The mean of squares has a second reader. */
static void test_rms_second_user(void **state)
{
    (void)state;
    struct tg t = rms_legacy("2,3,8", "8");
    tg_node(&t, "Mul", "ms,#3", "z");
    tg_output(&t, "z");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* x^3 is no square. */
static void test_rms_wrong_exponent(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    tg_node(&t, "Pow", "x,#3", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Div", "x,s", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* Mean over axis 1 of [2,3,8]: not the normalized (last) axis. */
static void test_rms_wrong_axis(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), 1);
    tg_node(&t, "Add", "ms,#1e-6", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Div", "x,s", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* A per-feature epsilon [8] is not the op's scalar epsilon. */
static void test_rms_eps_shape(void **state)
{
    (void)state;
    static const double e8[8] = {1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 2e-6};
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    tg_init(&t, "eps8", GF_FLOAT, "8", e8);
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,eps8", "a");
    tg_node(&t, "Sqrt", "a", "s");
    tg_node(&t, "Div", "x,s", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* A [3,8] "weight" scales more than the normalized axis: the norm fuses,
 * the multiply stays. */
static void test_rms_weight_shape(void **state)
{
    (void)state;
    struct tg t = rms_legacy("2,3,8", "3,8");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_rmsnorm(&t, 1e-6, 0, false);
    assert_int_equal(tg_count(&t, "Mul"), 1);
    assert_int_equal(tg_hits(&rep, "rmsnorm_weight"), 0);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* ---- AddRMSNorm -------------------------------------------------------------- */

/* s = a + r feeds the norm and is read again later (the residual stream). */
static struct tg add_rms(const char *rdims)
{
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "2,3,8");
    tg_input(&t, "r", GF_FLOAT, rdims);
    tg_init(&t, "w", GF_FLOAT, "8", NULL);
    tg_node(&t, "Add", "a,r", "x");
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "e");
    tg_node(&t, "Sqrt", "e", "s");
    tg_node(&t, "Reciprocal", "s", "inv");
    tg_node(&t, "Mul", "x,inv", "n");
    tg_node(&t, "Mul", "w,n", "y");
    tg_node(&t, "Mul", "y,#0.5", "h");
    tg_node(&t, "Add", "x,h", "z");
    tg_output(&t, "z");
    return t;
}

static void test_add_rms(void **state)
{
    (void)state;
    struct tg t = add_rms("2,3,8");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    assert_int_equal(tg_count(&t, "AddRMSNorm"), 1);
    assert_int_equal(tg_count(&t, "RMSNorm"), 0);
    const struct gf_node *n = tg_find_op(&t, "AddRMSNorm");
    assert_int_equal(n->n_inputs, 3);
    assert_int_equal(n->n_outputs, 2);
    assert_string_equal(n->outputs[0]->name, "y");
    assert_string_equal(n->outputs[1]->name, "x"); /* the sum keeps its name */
    assert_int_equal(tg_hits(&rep, "add_rmsnorm"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* The sum is a graph output: allowed, it is the op's output S. */
static void test_add_rms_sum_output(void **state)
{
    (void)state;
    struct tg t = add_rms("2,3,8");
    tg_output(&t, "x");
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "AddRMSNorm"), 1);
    gf_model_free(t.m);
}

/* A broadcasting add (r [8]) is a bias, not a residual of the same shape. */
static void test_add_rms_broadcast(void **state)
{
    (void)state;
    struct tg t = add_rms("8");
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "AddRMSNorm"), 0);
    assert_int_equal(tg_count(&t, "RMSNorm"), 1);
    gf_model_free(t.m);
}

/* The weight is computed from the sum: AddRMSNorm(a, r, w(S)) would read
 * its own output S.  AddRMSNorm(a, r) forms; absorbing w is refused. */
static void test_add_rms_cycle(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "2,3,8");
    tg_input(&t, "r", GF_FLOAT, "2,3,8");
    tg_node(&t, "Add", "a,r", "x");
    int64_t axes[2] = {0, 1};
    struct gf_node *rm = tg_node(&t, "ReduceMean", "x", "w");
    gf_node_set_attr_ints(rm, "axes", 2, axes);
    gf_node_set_attr_int(rm, "keepdims", 0);
    tg_node(&t, "Pow", "x,#2", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "ms"), -1);
    tg_node(&t, "Add", "ms,#1e-6", "e");
    tg_node(&t, "Sqrt", "e", "s");
    tg_node(&t, "Div", "x,s", "n");
    tg_node(&t, "Mul", "n,w", "y");
    tg_output(&t, "y");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    assert_int_equal(tg_count(&t, "AddRMSNorm"), 1);
    assert_int_equal(tg_find_op(&t, "AddRMSNorm")->n_inputs, 2);
    assert_int_equal(tg_count(&t, "Mul"), 1);
    assert_int_equal(tg_hits(&rep, "rmsnorm_weight"), 0);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* ---- LayerNorm ------------------------------------------------------------------ */

/* mean, x - mean, Pow 2, mean, + eps, Sqrt, Div, * w, + b. */
static struct tg ln_decomposed(const char *var_pow, int64_t var_axis, const char *wdims)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_init(&t, "w", GF_FLOAT, wdims, NULL);
    tg_init(&t, "b", GF_FLOAT, "8", NULL);
    tg_axes(tg_node(&t, "ReduceMean", "x", "mu"), -1);
    tg_node(&t, "Sub", "x,mu", "d");
    tg_node(&t, "Pow", var_pow, "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "var"), var_axis);
    tg_node(&t, "Add", "var,#1e-5", "e");
    tg_node(&t, "Sqrt", "e", "s");
    tg_node(&t, "Div", "d,s", "n");
    tg_node(&t, "Mul", "n,w", "nw");
    tg_node(&t, "Add", "b,nw", "y");
    tg_output(&t, "y");
    return t;
}

static void expect_layernorm(struct tg *t, int64_t axis, size_t n_inputs)
{
    assert_int_equal(tg_count(t, "LayerNorm"), 1);
    const struct gf_node *n = tg_find_op(t, "LayerNorm");
    assert_int_equal(gf_node_attr_int(n, "axis", 0), axis);
    assert_float_equal(gf_node_attr_float(n, "epsilon", 0), 1e-5, 1e-11);
    assert_int_equal(n->n_inputs, n_inputs);
    assert_string_equal(n->inputs[0]->name, "x");
}

static void test_ln_decomposed(void **state)
{
    (void)state;
    struct tg t = ln_decomposed("d,#2", -1, "8");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_layernorm(&t, -1, 3);
    assert_int_equal(t.g->n_nodes, 1);
    assert_int_equal(tg_hits(&rep, "layernorm"), 1);
    assert_int_equal(tg_hits(&rep, "layernorm_affine"), 2);
    assert_int_equal(tg_hits(&rep, "rmsnorm"), 0); /* not taken for its RMSNorm-like tail */
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* d*d and Reciprocal(std) * d, without weight or bias. */
static void test_ln_reciprocal(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "4,16");
    tg_axes(tg_node(&t, "ReduceMean", "x", "mu"), -1);
    tg_node(&t, "Sub", "x,mu", "d");
    tg_node(&t, "Mul", "d,d", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "var"), -1);
    tg_node(&t, "Add", "var,#1e-5", "e");
    tg_node(&t, "Sqrt", "e", "s");
    tg_node(&t, "Reciprocal", "s", "inv");
    tg_node(&t, "Mul", "inv,d", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_layernorm(&t, -1, 1);
    gf_model_free(t.m);
}

static void test_ln_var_axis(void **state)
{
    (void)state;
    struct tg t = ln_decomposed("d,#2", 1, "8");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

static void test_ln_wrong_exponent(void **state)
{
    (void)state;
    struct tg t = ln_decomposed("d,#2.5", -1, "8");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The deviation x - mean is read by another node: no LayerNorm (what is
 * left, an RMSNorm of the deviation with its weight, still fuses: it
 * computes the same). */
static void test_ln_second_user(void **state)
{
    (void)state;
    struct tg t = ln_decomposed("d,#2", -1, "8");
    tg_node(&t, "Neg", "d", "z");
    tg_output(&t, "z");
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "LayerNorm"), 0);
    assert_int_equal(tg_count(&t, "Sub"), 1);
    assert_int_equal(tg_count(&t, "RMSNorm"), 1);
    gf_model_free(t.m);
}

/* A [3,8] weight: LayerNorm fuses, the weight and bias stay outside. */
static void test_ln_weight_shape(void **state)
{
    (void)state;
    struct tg t = ln_decomposed("d,#2", -1, "3,8");
    tg_check_fused(&t, NULL, NULL);
    expect_layernorm(&t, -1, 1);
    assert_int_equal(tg_count(&t, "Mul"), 1);
    assert_int_equal(tg_count(&t, "Add"), 1);
    gf_model_free(t.m);
}

/* The ONNX op, normalizing the last two axes, with a residual Add before
 * it whose sum is read again. */
static struct tg ln_op(const char *rdims, bool mean_out)
{
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "2,3,8");
    tg_input(&t, "r", GF_FLOAT, rdims);
    tg_init(&t, "w", GF_FLOAT, "3,8", NULL);
    tg_init(&t, "b", GF_FLOAT, "3,8", NULL);
    tg_node(&t, "Add", "a,r", "x");
    struct gf_node *n = tg_node(&t, "LayerNormalization", "x,w,b", mean_out ? "y,mean" : "y");
    gf_node_set_attr_int(n, "axis", -2);
    gf_node_set_attr_float(n, "epsilon", 1e-5f);
    tg_node(&t, "Add", "x,y", "z");
    tg_output(&t, "z");
    if (mean_out)
        tg_output(&t, "mean");
    return t;
}

static void test_add_ln_op(void **state)
{
    (void)state;
    struct tg t = ln_op("2,3,8", false);
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    assert_int_equal(tg_count(&t, "AddLayerNorm"), 1);
    const struct gf_node *n = tg_find_op(&t, "AddLayerNorm");
    assert_int_equal(gf_node_attr_int(n, "axis", 0), -2);
    assert_int_equal(n->n_inputs, 4);
    assert_string_equal(n->outputs[1]->name, "x");
    assert_int_equal(tg_hits(&rep, "layernorm"), 1);
    assert_int_equal(tg_hits(&rep, "add_layernorm"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* The op's Mean output is a graph output: the fused op's Mean, which
 * AddLayerNorm keeps after S (the run compares it with the op's). */
static void test_ln_op_mean_used(void **state)
{
    (void)state;
    struct tg t = ln_op("2,3,8", true);
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "AddLayerNorm"), 1);
    const struct gf_node *n = tg_find_op(&t, "AddLayerNorm");
    assert_int_equal(n->n_outputs, 3);
    assert_string_equal(n->outputs[1]->name, "x");
    assert_string_equal(n->outputs[2]->name, "mean");
    gf_model_free(t.m);
}

/* A broadcasting residual: LayerNorm alone. */
static void test_add_ln_broadcast(void **state)
{
    (void)state;
    struct tg t = ln_op("3,8", false);
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "AddLayerNorm"), 0);
    assert_int_equal(tg_count(&t, "LayerNorm"), 1);
    gf_model_free(t.m);
}

/* The ONNX function body of LayerNormalization (the _expanded node tests,
 * Y only), as an exporter that inlines functions writes it. */
static struct tg ln_expanded(int64_t mean_axis)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,3,8");
    tg_init(&t, "w", GF_FLOAT, "3,8", NULL);
    tg_init(&t, "b", GF_FLOAT, "3,8", NULL);
    set_to(tg_node(&t, "Cast", "@1e-5", "eps"), 1);
    tg_node(&t, "Shape", "x", "xs");
    gf_node_set_attr_int(tg_node(&t, "Flatten", "x", "x2"), "axis", 1);
    set_to(tg_node(&t, "Cast", "x2", "xu"), 1);
    tg_axes(tg_node(&t, "ReduceMean", "xu", "mean"), mean_axis);
    tg_node(&t, "Mul", "xu,xu", "sq");
    tg_axes(tg_node(&t, "ReduceMean", "sq", "msq"), mean_axis);
    tg_node(&t, "Mul", "mean,mean", "sqm");
    tg_node(&t, "Sub", "msq,sqm", "var");
    tg_node(&t, "Add", "var,eps", "ve");
    tg_node(&t, "Sqrt", "ve", "std");
    tg_node(&t, "Sub", "xu,mean", "dev");
    tg_node(&t, "Div", "dev,std", "nrm");
    set_to(tg_node(&t, "Cast", "nrm", "nt"), 1);
    gf_node_set_attr_int(tg_node(&t, "Flatten", "w", "w2"), "axis", 0);
    tg_node(&t, "Mul", "nt,w2", "sc");
    gf_node_set_attr_int(tg_node(&t, "Flatten", "b", "b2"), "axis", 0);
    tg_node(&t, "Add", "sc,b2", "bi");
    tg_node(&t, "Reshape", "bi,xs", "y");
    tg_output(&t, "y");
    return t;
}

static void test_ln_expanded(void **state)
{
    (void)state;
    struct tg t = ln_expanded(1);
    tg_check_fused(&t, NULL, NULL);
    expect_layernorm(&t, 1, 3);
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

/* The body's Mean / InvStdDev tails, reshaped to x's shape with the
 * normalized dims 1 ([2, 1, 1]), or to `rdims` given. */
static void add_stats(struct tg *t, const double *rshape)
{
    tg_init(t, "rs", GF_INT64, "3", rshape);
    tg_node(t, "Reciprocal", "std", "istd2");
    tg_node(t, "Reshape", "mean,rs", "Mean");
    tg_node(t, "Reshape", "istd2,rs", "InvStdDev");
    tg_output(t, "Mean");
    tg_output(t, "InvStdDev");
}

static void test_ln_expanded_stats(void **state)
{
    (void)state;
    static const double rshape[3] = {2, 1, 1};
    struct tg t = ln_expanded(1);
    add_stats(&t, rshape);
    tg_check_fused(&t, NULL, NULL);
    expect_layernorm(&t, 1, 3);
    const struct gf_node *n = tg_find_op(&t, "LayerNorm");
    assert_int_equal(n->n_outputs, 3);
    assert_string_equal(n->outputs[1]->name, "Mean");
    assert_string_equal(n->outputs[2]->name, "InvStdDev");
    assert_int_equal(t.g->n_nodes, 1);
    gf_model_free(t.m);
}

/* Statistics reshaped to another shape than LayerNorm's: no fusion. */
static void test_ln_expanded_stats_shape(void **state)
{
    (void)state;
    static const double rshape[3] = {1, 2, 1};
    struct tg t = ln_expanded(1);
    add_stats(&t, rshape);
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The inverse std read by another node too: no fusion. */
static void test_ln_expanded_stats_second_user(void **state)
{
    (void)state;
    static const double rshape[3] = {2, 1, 1};
    struct tg t = ln_expanded(1);
    add_stats(&t, rshape);
    tg_node(&t, "Neg", "istd2", "other");
    tg_output(&t, "other");
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

static void test_ln_expanded_wrong_axis(void **state)
{
    (void)state;
    struct tg t = ln_expanded(0); /* statistics over the batch rows */
    tg_check_fused(&t, NULL, NULL);
    expect_no_fusion(&t);
    gf_model_free(t.m);
}

/* The libonnx-testdata models (after cleanup folded the static shapes):
 * the op and its _expanded body both become one LayerNorm, with Mean and
 * InvStdDev as its outputs 1 and 2 while they are graph outputs. */
static void check_onnx_ln(const char *test, bool drop)
{
    char path[512];
    snprintf(path, sizeof(path), NODE_TESTS "/%s/model.onnx", test);
    struct tg t = {0};
    if (gf_model_load(path, NULL, &t.m) != GF_OK)
        fail_msg("%s: %s", path, gf_last_error());
    t.g = t.m->graph;
    t.seed = 7;
    if (drop) {
        assert_int_equal(gf_pass_drop_output(t.g, "Mean"), GF_OK);
        assert_int_equal(gf_pass_drop_output(t.g, "InvStdDev"), GF_OK);
    }
    assert_int_equal(gf_pass_cleanup(t.g, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                                     NULL),
                     GF_OK);
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "LayerNorm"), 1);
    assert_int_equal(t.g->n_nodes, 1);
    const struct gf_node *n = tg_find_op(&t, "LayerNorm");
    assert_int_equal(n->n_outputs, drop ? 1 : 3);
    if (!drop) {
        assert_string_equal(n->outputs[1]->name, "Mean");
        assert_string_equal(n->outputs[2]->name, "InvStdDev");
    }
    gf_model_free(t.m);
}

static void test_ln_onnx_node_tests(void **state)
{
    (void)state;
    static const char *tests[] = {
        "test_layer_normalization_4d_axis_negative_2",
        "test_layer_normalization_4d_axis_negative_2_expanded",
        "test_layer_normalization_3d_axis1_epsilon",
        "test_layer_normalization_3d_axis1_epsilon_expanded",
        "test_layer_normalization_default_axis_expanded",
        "test_layer_normalization_2d_axis1_expanded", /* no Flatten, no Reshape */
        "test_layer_normalization_2d_axis0_expanded", /* statistics [1, 1] */
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        check_onnx_ln(tests[i], false);
        check_onnx_ln(tests[i], true);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_legacy),
        cmocka_unit_test(test_rms_dynamo),
        cmocka_unit_test(test_rms_div_xx),
        cmocka_unit_test(test_rms_eps_outside),
        cmocka_unit_test(test_rms_gemma),
        cmocka_unit_test(test_rms_interior_output),
        cmocka_unit_test(test_rms_second_user),
        cmocka_unit_test(test_rms_wrong_exponent),
        cmocka_unit_test(test_rms_wrong_axis),
        cmocka_unit_test(test_rms_eps_shape),
        cmocka_unit_test(test_rms_weight_shape),
        cmocka_unit_test(test_add_rms),
        cmocka_unit_test(test_add_rms_sum_output),
        cmocka_unit_test(test_add_rms_broadcast),
        cmocka_unit_test(test_add_rms_cycle),
        cmocka_unit_test(test_ln_decomposed),
        cmocka_unit_test(test_ln_reciprocal),
        cmocka_unit_test(test_ln_var_axis),
        cmocka_unit_test(test_ln_wrong_exponent),
        cmocka_unit_test(test_ln_second_user),
        cmocka_unit_test(test_ln_weight_shape),
        cmocka_unit_test(test_add_ln_op),
        cmocka_unit_test(test_ln_op_mean_used),
        cmocka_unit_test(test_add_ln_broadcast),
        cmocka_unit_test(test_ln_expanded),
        cmocka_unit_test(test_ln_expanded_stats),
        cmocka_unit_test(test_ln_expanded_stats_shape),
        cmocka_unit_test(test_ln_expanded_stats_second_user),
        cmocka_unit_test(test_ln_expanded_wrong_axis),
        cmocka_unit_test(test_ln_onnx_node_tests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
