/* Attention fusion (opt-in pattern "attention"): softmax(scale q k^T + mask) v
 * after the matmul patterns fuses into one Attention node when enabled and
 * computes what it replaced (the unfused graph on the executor is the
 * reference, with and without the mask, k given transposed or not); it is
 * left alone when not enabled, and near misses stay unfused. */
#include "fusetest.h"

static const char *const attention[] = {"attention"};
static const struct gf_fuse_opts enabled = {.enabled = attention, .n_enabled = 1};

/* q [2,3,5,4] k [2,3,7,4] v [2,3,7,6]: scores [2,3,5,7]; the Llama form
 * MatMul(q, Transpose(k)) * scale (+ mask) -> Softmax -> MatMul(., v).
 * kt: k is given as [2,3,4,7] (GPT-2 transposes it before the MatMul). */
static struct tg attn_graph(bool mask, bool kt, int64_t axis)
{
    struct tg t = tg_new(18);
    tg_input(&t, "q", GF_FLOAT, "2,3,5,4");
    tg_input(&t, "k", GF_FLOAT, kt ? "2,3,4,7" : "2,3,7,4");
    tg_input(&t, "v", GF_FLOAT, "2,3,7,6");
    if (kt) {
        tg_node(&t, "MatMul", "q,k", "s");
    } else {
        struct gf_node *tr = tg_node(&t, "Transpose", "k", "kt");
        assert_int_equal(gf_node_set_attr_ints(tr, "perm", 4, (int64_t[]){0, 1, 3, 2}), GF_OK);
        tg_node(&t, "MatMul", "q,kt", "s");
    }
    tg_node(&t, "Mul", "s,#0.5", "ss");
    if (mask) {
        tg_input(&t, "mask", GF_FLOAT, "5,7");
        tg_node(&t, "Add", "mask,ss", "sm");
    }
    struct gf_node *sm = tg_node(&t, "Softmax", mask ? "sm" : "ss", "p");
    assert_int_equal(gf_node_set_attr_int(sm, "axis", axis), GF_OK);
    tg_node(&t, "MatMul", "p,v", "o");
    tg_output(&t, "o");
    return t;
}

static void fuses(bool mask, bool kt)
{
    struct tg t = attn_graph(mask, kt, -1);
    struct gf_fuse_report rep;
    tg_check_fused(&t, &enabled, &rep);
    assert_int_equal(tg_hits(&rep, "attention"), 1);
    assert_int_equal(tg_count(&t, "Attention"), 1);
    assert_int_equal(tg_count(&t, "Softmax"), 0);
    const struct gf_node *n = tg_find_op(&t, "Attention");
    assert_int_equal(n->n_inputs, mask ? 4 : 3);
    assert_float_equal(gf_node_attr_float(n, "scale", 1), 0.5f, 0);
    assert_int_equal(gf_node_attr_int(n, "transB", 0), !kt);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

static void test_fuses(void **state)
{
    (void)state;
    fuses(true, false);
    fuses(false, false);
    fuses(true, true);
    fuses(false, true);
}

/* Softmax axis 3 (the last, by index) fuses too; axis 2 does not. */
static void test_softmax_axis(void **state)
{
    (void)state;
    struct tg t = attn_graph(true, false, 3);
    tg_check_fused(&t, &enabled, NULL);
    assert_int_equal(tg_count(&t, "Attention"), 1);
    gf_model_free(t.m);
    t = attn_graph(true, false, 2);
    tg_check_fused(&t, &enabled, NULL);
    assert_int_equal(tg_count(&t, "Attention"), 0);
    assert_int_equal(tg_count(&t, "Softmax"), 1);
    gf_model_free(t.m);
}

/* Opt-in: the default options leave attention to the other patterns. */
static void test_opt_in(void **state)
{
    (void)state;
    struct tg t = attn_graph(true, false, -1);
    struct gf_fuse_report rep;
    tg_check_fused(&t, NULL, &rep);
    assert_int_equal(tg_count(&t, "Attention"), 0);
    assert_int_equal(tg_count(&t, "MatMulEpilogue"), 1);
    assert_int_equal(tg_hits(&rep, "attention"), 0);
    assert_true(gf_fuse_pattern_opt_in("attention"));
    assert_false(gf_fuse_pattern_opt_in("rmsnorm"));
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
    /* enabling a pattern that is not opt-in is an error */
    static const char *const bad[] = {"rmsnorm"};
    t = attn_graph(true, false, -1);
    assert_int_equal(gf_pass_fuse(t.m, &(struct gf_fuse_opts){.enabled = bad, .n_enabled = 1},
                                  NULL), GF_ERR_ARG);
    gf_model_free(t.m);
}

/* The probabilities read elsewhere (a second output): not fused. */
static void test_escape(void **state)
{
    (void)state;
    struct tg t = attn_graph(true, false, -1);
    tg_output(&t, "p");
    tg_check_fused(&t, &enabled, NULL);
    assert_int_equal(tg_count(&t, "Attention"), 0);
    gf_model_free(t.m);
}

/* An activation on the scores: not attention. */
static void test_activation(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "q", GF_FLOAT, "2,5,4");
    tg_input(&t, "k", GF_FLOAT, "2,4,7");
    tg_input(&t, "v", GF_FLOAT, "2,7,6");
    tg_node(&t, "MatMul", "q,k", "s");
    tg_node(&t, "Relu", "s", "r");
    tg_node(&t, "Softmax", "r", "p");
    tg_node(&t, "MatMul", "p,v", "o");
    tg_output(&t, "o");
    tg_check_fused(&t, &enabled, NULL);
    assert_int_equal(tg_count(&t, "Attention"), 0);
    gf_model_free(t.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuses),
        cmocka_unit_test(test_softmax_axis),
        cmocka_unit_test(test_opt_in),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_activation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
