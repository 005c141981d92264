/* RoPE fusion: the rotate-half rotary embedding x*cos + rotate_half(x)*sin
 * fuses in the exporters' forms (two Slices with the bounds as initializers
 * or Constant nodes, INT64_MAX or d as end, axis -1 or its index; a Split
 * with the sizes as input or attribute or none; either Mul and Add order)
 * and computes what it replaced (the unfused graph on the executor is the
 * reference); near misses stay unfused. */
#include <stdint.h>

#include "fusetest.h"

/* ---- helpers ------------------------------------------------------------------ */

/* int64 initializer `name` holding vals[n] as a [n] tensor (tg_init goes
 * through double, which cannot hold INT64_MAX). */
static void i64_init(struct tg *t, const char *name, size_t n, const int64_t *vals)
{
    int64_t dim = (int64_t)n;
    struct gf_tensor *x = gf_tensor_new(t->m, NULL, GF_INT64, 1, &dim, vals);
    assert_non_null(x);
    assert_non_null(gf_graph_add_initializer(t->g, name, x));
}

/* The same as a Constant node (the legacy exporter's form). */
static void i64_const(struct tg *t, const char *name, int64_t v)
{
    int64_t dim = 1;
    struct gf_value *out = gf_graph_new_value(t->g, name, NULL);
    struct gf_node *n = gf_graph_add_node(t->g, "Constant", "", NULL, 0, NULL, 1, &out);
    assert_non_null(n);
    struct gf_tensor *x = gf_tensor_new(t->m, NULL, GF_INT64, 1, &dim, &v);
    assert_non_null(x);
    assert_int_equal(gf_node_set_attr_tensor(n, "value", x), GF_OK);
}

/* Slice bounds: s0 = 0, sh = h, sd = the end of the second half, sx =
 * the axis, s1 = step 1; as initializers or Constant nodes. */
static void slice_consts(struct tg *t, bool constant_nodes, int64_t h, int64_t end, int64_t axis)
{
    const char *names[] = {"s0", "sh", "sd", "sx", "s1"};
    int64_t vals[] = {0, h, end, axis, 1};
    for (int i = 0; i < 5; i++) {
        if (constant_nodes)
            i64_const(t, names[i], vals[i]);
        else
            i64_init(t, names[i], 1, &vals[i]);
    }
}

/* x [2,3,5,8], cos / sin [1,5,8] unsqueezed to [1,1,5,8] (the Llama form). */
static struct tg rope_inputs(int64_t opset)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "x", GF_FLOAT, "2,3,5,8");
    tg_input(&t, "cos3", GF_FLOAT, "1,5,8");
    tg_input(&t, "sin3", GF_FLOAT, "1,5,8");
    int64_t one = 1;
    i64_init(&t, "ax1", 1, &one);
    tg_node(&t, "Unsqueeze", "cos3,ax1", "cos");
    tg_node(&t, "Unsqueeze", "sin3,ax1", "sin");
    return t;
}

/* rotate_half(x) * sin added to x * cos, from halves "lo" and "hi"; the
 * operand orders as given ("x,cos" or "cos,x", ...). */
static void rope_tail(struct tg *t, const char *xcos, const char *rsin, const char *sum)
{
    tg_node(t, "Neg", "hi", "neg");
    struct gf_node *cat = tg_node(t, "Concat", "neg,lo", "rot");
    assert_int_equal(gf_node_set_attr_int(cat, "axis", -1), GF_OK);
    tg_node(t, "Mul", xcos, "xc");
    tg_node(t, "Mul", rsin, "rs");
    tg_node(t, "Add", sum, "y");
    tg_output(t, "y");
}

/* The dynamo form: Slices with initializer bounds, end INT64_MAX, axis 3. */
static struct tg rope_dynamo(void)
{
    struct tg t = rope_inputs(18);
    slice_consts(&t, false, 4, INT64_MAX, 3);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    return t;
}

/* Fused nodes of op `op` (a second function body of the op in a model
 * renames the node's op_type, "RoPE_2": count by op, not by name). */
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

static void expect_rope(struct tg *t, const char *cos, const char *sin)
{
    assert_int_equal(count_op(t, GF_OP_ROPE), 1);
    const struct gf_node *n = find_op(t, GF_OP_ROPE);
    assert_string_equal(n->domain, "graphfuse");
    assert_int_equal(n->n_inputs, 3);
    assert_string_equal(n->inputs[0]->name, "x");
    assert_string_equal(n->inputs[1]->name, cos);
    assert_string_equal(n->inputs[2]->name, sin);
    assert_string_equal(n->outputs[0]->name, "y");
    /* nothing of the rotation is left: Slice / Split, Neg, Concat, Mul, Add */
    const char *gone[] = {"Slice", "Split", "Neg", "Concat", "Mul", "Add"};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        assert_int_equal(tg_count(t, gone[i]), 0);
}

static void expect_no_rope(struct tg *t)
{
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        if (n->domain && strcmp(n->domain, "graphfuse") == 0)
            fail_msg("unexpected fused node %s", n->op_type);
    assert_int_equal(tg_count(t, "Neg"), 1);
    assert_string_equal(tg_find_op(t, "Neg")->outputs[0]->name, "neg");
}

/* ---- the forms ------------------------------------------------------------------- */

static void test_rope_dynamo(void **state)
{
    (void)state;
    struct tg t = rope_dynamo();
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    expect_rope(&t, "cos", "sin");
    assert_int_equal(tg_hits(&rep, "rope"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* The legacy form: bounds from Constant nodes, end = d, axis -1, and every
 * commutative operand the other way round. */
static void test_rope_legacy(void **state)
{
    (void)state;
    struct tg t = rope_inputs(17);
    slice_consts(&t, true, 4, 8, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "cos,x", "sin,rot", "rs,xc");
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* Slices without axes and steps on a rank-1 x, negative bounds (x[-4:],
 * x[:-4]), cos and sin as plain inputs. */
static void test_rope_negative_bounds(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "8");
    tg_input(&t, "cos", GF_FLOAT, "8");
    tg_input(&t, "sin", GF_FLOAT, "1");
    int64_t z = 0, m4 = -4, big = INT64_MAX;
    i64_init(&t, "zero", 1, &z);
    i64_init(&t, "m4", 1, &m4);
    i64_init(&t, "big", 1, &big);
    tg_node(&t, "Slice", "x,zero,m4", "lo");
    tg_node(&t, "Slice", "x,m4,big", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* Opset 9: Slice bounds and axes as attributes, Split without sizes. */
static void test_rope_opset9(void **state)
{
    (void)state;
    struct tg t = tg_new(9);
    tg_input(&t, "x", GF_FLOAT, "3,5,8");
    tg_input(&t, "cos", GF_FLOAT, "5,8");
    tg_input(&t, "sin", GF_FLOAT, "5,8");
    int64_t zero = 0, h = 4, end = 8, axis = 2;
    struct gf_node *lo = tg_node(&t, "Slice", "x", "lo");
    struct gf_node *hi = tg_node(&t, "Slice", "x", "hi");
    assert_int_equal(gf_node_set_attr_ints(lo, "starts", 1, &zero), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(lo, "ends", 1, &h), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(lo, "axes", 1, &axis), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(hi, "starts", 1, &h), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(hi, "ends", 1, &end), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(hi, "axes", 1, &axis), GF_OK);
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    struct gf_node *cat = (struct gf_node *)tg_find_op(&t, "Concat");
    assert_int_equal(gf_node_set_attr_int(cat, "axis", 2), GF_OK); /* no -1 before opset 11 */
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* Split into halves, the sizes as input (opset 13..17). */
static void test_rope_split_input(void **state)
{
    (void)state;
    struct tg t = rope_inputs(17);
    int64_t sizes[2] = {4, 4};
    i64_init(&t, "halves", 2, sizes);
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Split", "x,halves", "lo,hi"), "axis",
                                          -1), GF_OK);
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* Split with the sizes as attribute (opset 11), cos / sin of rank 2. */
static void test_rope_split_attr(void **state)
{
    (void)state;
    struct tg t = tg_new(11);
    tg_input(&t, "x", GF_FLOAT, "2,batch,6,12");
    tg_input(&t, "cos", GF_FLOAT, "6,12");
    tg_input(&t, "sin", GF_FLOAT, "6,12");
    int64_t sizes[2] = {6, 6};
    struct gf_node *sp = tg_node(&t, "Split", "x", "lo,hi");
    assert_int_equal(gf_node_set_attr_int(sp, "axis", 3), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(sp, "split", 2, sizes), GF_OK);
    rope_tail(&t, "cos,x", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* Split without sizes (opset 18: num_outputs 2). */
static void test_rope_split_num_outputs(void **state)
{
    (void)state;
    struct tg t = rope_inputs(18);
    struct gf_node *sp = tg_node(&t, "Split", "x", "lo,hi");
    assert_int_equal(gf_node_set_attr_int(sp, "axis", -1), GF_OK);
    assert_int_equal(gf_node_set_attr_int(sp, "num_outputs", 2), GF_OK);
    rope_tail(&t, "x,cos", "sin,rot", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_rope(&t, "cos", "sin");
    gf_model_free(t.m);
}

/* q and k share cos and sin (the Llama attention): two RoPEs. */
static void test_rope_q_and_k(void **state)
{
    (void)state;
    struct tg t = rope_dynamo();
    tg_input(&t, "k", GF_FLOAT, "2,3,5,8");
    tg_node(&t, "Slice", "k,s0,sh,sx,s1", "klo");
    tg_node(&t, "Slice", "k,sh,sd,sx,s1", "khi");
    tg_node(&t, "Neg", "khi", "kneg");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "kneg,klo", "krot"), "axis", 3),
                     GF_OK);
    tg_node(&t, "Mul", "k,cos", "kc");
    tg_node(&t, "Mul", "krot,sin", "ks");
    tg_node(&t, "Add", "kc,ks", "ky");
    tg_output(&t, "ky");
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    assert_int_equal(count_op(&t, GF_OP_ROPE), 2);
    assert_int_equal(tg_hits(&rep, "rope"), 2);
    assert_int_equal(tg_count(&t, "Slice"), 0);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* ---- near misses ------------------------------------------------------------------ */

/* Halves cut at d/3 (d = 12): not rotate_half. */
static void test_rope_wrong_split_point(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "2,5,12");
    tg_input(&t, "cos", GF_FLOAT, "5,12");
    tg_input(&t, "sin", GF_FLOAT, "5,12");
    slice_consts(&t, false, 4, INT64_MAX, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* The Neg on the first half: concat(-x[:d/2], x[d/2:]). */
static void test_rope_neg_first_half(void **state)
{
    (void)state;
    struct tg t = rope_inputs(18);
    slice_consts(&t, false, 4, INT64_MAX, 3);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "hi"); /* rope_tail negates "hi" */
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "lo");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* Unequal Split sizes [3, 5]. */
static void test_rope_unequal_split(void **state)
{
    (void)state;
    struct tg t = rope_inputs(17);
    int64_t sizes[2] = {3, 5};
    i64_init(&t, "parts", 2, sizes);
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Split", "x,parts", "lo,hi"), "axis", 3),
                     GF_OK);
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* Halves and Concat on axis 2 instead of the last axis. */
static void test_rope_other_axis(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "2,3,8,8");
    tg_input(&t, "cos", GF_FLOAT, "8,8");
    tg_input(&t, "sin", GF_FLOAT, "8,8");
    slice_consts(&t, false, 4, INT64_MAX, 2);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    tg_node(&t, "Neg", "hi", "neg");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "neg,lo", "rot"), "axis", 2),
                     GF_OK);
    tg_node(&t, "Mul", "x,cos", "xc");
    tg_node(&t, "Mul", "rot,sin", "rs");
    tg_node(&t, "Add", "xc,rs", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* The rotated value is also a graph output (an interior value escapes). */
static void test_rope_rot_reused(void **state)
{
    (void)state;
    struct tg t = rope_dynamo();
    tg_output(&t, "rot");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* A half is read again (the Slices, absorbed by the check, must stay). */
static void test_rope_half_reused(void **state)
{
    (void)state;
    const char *half[] = {"hi", "lo"};
    for (int i = 0; i < 2; i++) {
        struct tg t = rope_dynamo();
        tg_node(&t, "Relu", half[i], "r");
        tg_output(&t, "r");
        tg_check_fused(&t, NULL, NULL);
        expect_no_rope(&t);
        gf_model_free(t.m);
    }
}

/* d = 7 is odd: there is no half. */
static void test_rope_odd_dim(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "2,5,7");
    tg_input(&t, "cos", GF_FLOAT, "5,7");
    tg_input(&t, "sin", GF_FLOAT, "5,7");
    slice_consts(&t, false, 3, INT64_MAX, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* Halves of the last axis (d = 2) concatenated on axis 0: rot is [2,1],
 * rot*sin broadcasts to [2,2], bigger than x [1,2]. */
static void test_rope_concat_axis(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "1,2");
    tg_input(&t, "cos", GF_FLOAT, "2");
    tg_input(&t, "sin", GF_FLOAT, "2");
    slice_consts(&t, false, 1, INT64_MAX, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    tg_node(&t, "Neg", "hi", "neg");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "neg,lo", "rot"), "axis", 0),
                     GF_OK);
    tg_node(&t, "Mul", "x,cos", "xc");
    tg_node(&t, "Mul", "rot,sin", "rs");
    tg_node(&t, "Add", "xc,rs", "y");
    tg_output(&t, "y");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* A Split half is read again. */
static void test_rope_split_half_reused(void **state)
{
    (void)state;
    struct tg t = rope_inputs(18);
    struct gf_node *sp = tg_node(&t, "Split", "x", "lo,hi");
    assert_int_equal(gf_node_set_attr_int(sp, "axis", -1), GF_OK);
    assert_int_equal(gf_node_set_attr_int(sp, "num_outputs", 2), GF_OK);
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_output(&t, "lo");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* x*cos is taken of another tensor than the halves. */
static void test_rope_other_x(void **state)
{
    (void)state;
    struct tg t = rope_dynamo();
    struct gf_node *xc = NULL;
    for (struct gf_node *n = t.g->first; n; n = n->next)
        if (n->outputs[0] && strcmp(n->outputs[0]->name, "xc") == 0)
            xc = n;
    assert_non_null(xc);
    gf_node_set_input(xc, 0, tg_input(&t, "z", GF_FLOAT, "2,3,5,8"));
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* cos [2,1,5,8] would enlarge x [1,3,5,8]: the fused op keeps x's shape. */
static void test_rope_cos_enlarges(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "1,3,5,8");
    tg_input(&t, "cos", GF_FLOAT, "2,1,5,8");
    tg_input(&t, "sin", GF_FLOAT, "5,8");
    slice_consts(&t, false, 4, INT64_MAX, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

/* The last dim is symbolic: d/2 cannot be checked. */
static void test_rope_symbolic_dim(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "x", GF_FLOAT, "3,d");
    tg_input(&t, "cos", GF_FLOAT, "3,d");
    tg_input(&t, "sin", GF_FLOAT, "3,d");
    slice_consts(&t, false, 1, INT64_MAX, -1);
    tg_node(&t, "Slice", "x,s0,sh,sx,s1", "lo");
    tg_node(&t, "Slice", "x,sh,sd,sx,s1", "hi");
    rope_tail(&t, "x,cos", "rot,sin", "xc,rs");
    tg_check_fused(&t, NULL, NULL);
    expect_no_rope(&t);
    gf_model_free(t.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_dynamo),
        cmocka_unit_test(test_rope_legacy),
        cmocka_unit_test(test_rope_negative_bounds),
        cmocka_unit_test(test_rope_opset9),
        cmocka_unit_test(test_rope_split_input),
        cmocka_unit_test(test_rope_split_attr),
        cmocka_unit_test(test_rope_split_num_outputs),
        cmocka_unit_test(test_rope_q_and_k),
        cmocka_unit_test(test_rope_wrong_split_point),
        cmocka_unit_test(test_rope_neg_first_half),
        cmocka_unit_test(test_rope_unequal_split),
        cmocka_unit_test(test_rope_other_axis),
        cmocka_unit_test(test_rope_rot_reused),
        cmocka_unit_test(test_rope_half_reused),
        cmocka_unit_test(test_rope_split_half_reused),
        cmocka_unit_test(test_rope_odd_dim),
        cmocka_unit_test(test_rope_concat_axis),
        cmocka_unit_test(test_rope_other_x),
        cmocka_unit_test(test_rope_cos_enlarges),
        cmocka_unit_test(test_rope_symbolic_dim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
