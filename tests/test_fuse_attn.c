/* Attention fusion (opt-in pattern "attention"): softmax(scale q k^T + mask) v
 * after the matmul patterns fuses into one Attention node when enabled and
 * computes what it replaced (the unfused graph on the executor is the
 * reference, with and without the mask, k given transposed or not); it is
 * left alone when not enabled, and near misses stay unfused. */
#include <math.h>

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

/* The exporters' SDPA math (Hugging Face Llama, both exporters): q and kᵀ
 * each scaled by sqrt(scale), kᵀ as a Transpose (legacy) or as Reshape,
 * Transpose(0,2,1), Reshape over flattened batch dims (dynamo), the mask
 * added, Where(IsNaN(P), 0, P) after the softmax.  The mask is constant
 * with query row 0 fully masked: the unfused graph makes NaN there and
 * zeroes it, the Attention node must give the same 0s. */
static struct tg sdpa_graph(bool dynamo, bool nan_guard)
{
    struct tg t = tg_new(18);
    tg_input(&t, "q", GF_FLOAT, "2,3,5,4");
    tg_input(&t, "k", GF_FLOAT, "2,3,7,4");
    tg_input(&t, "v", GF_FLOAT, "2,3,7,6");
    double mask[35];
    for (int i = 0; i < 35; i++)
        mask[i] = i < 7 || (i / 7 == 2 && i % 7 > 3) || (i % 7 > i / 7 + 2) ? -INFINITY : 0.0;
    tg_init(&t, "mask", GF_FLOAT, "5,7", mask);
    if (dynamo) {
        tg_init(&t, "flat", GF_INT64, "3", (double[]){6, 7, 4});
        tg_init(&t, "back", GF_INT64, "4", (double[]){2, 3, 4, 7});
        tg_node(&t, "Reshape", "k,flat", "kf");
        struct gf_node *tr = tg_node(&t, "Transpose", "kf", "kft");
        assert_int_equal(gf_node_set_attr_ints(tr, "perm", 3, (int64_t[]){0, 2, 1}), GF_OK);
        tg_node(&t, "Reshape", "kft,back", "kt");
    } else {
        struct gf_node *tr = tg_node(&t, "Transpose", "k", "kt");
        assert_int_equal(gf_node_set_attr_ints(tr, "perm", 4, (int64_t[]){0, 1, 3, 2}), GF_OK);
    }
    tg_node(&t, "Mul", "q,#0.70710678", "qs");
    tg_node(&t, "Mul", "kt,#0.70710678", "ks");
    tg_node(&t, "MatMul", "qs,ks", "s");
    tg_node(&t, "Add", "s,mask", "sm");
    tg_node(&t, "Softmax", "sm", nan_guard ? "pn" : "p");
    if (nan_guard) {
        tg_node(&t, "IsNaN", "pn", "isnan");
        tg_node(&t, "Where", "isnan,#0,pn", "p");
    }
    tg_node(&t, "MatMul", "p,v", "o");
    tg_output(&t, "o");
    return t;
}

static void test_sdpa_math(void **state)
{
    (void)state;
    for (int dynamo = 0; dynamo < 2; dynamo++) {
        struct tg t = sdpa_graph(dynamo, true);
        struct gf_fuse_report rep;
        tg_check_fused(&t, &enabled, &rep);
        assert_int_equal(tg_hits(&rep, "attention"), 1);
        assert_int_equal(tg_count(&t, "Attention"), 1);
        assert_int_equal(tg_count(&t, "Softmax") + tg_count(&t, "IsNaN") + tg_count(&t, "Where") +
                             tg_count(&t, "Transpose") + tg_count(&t, "Reshape"), 0);
        const struct gf_node *n = tg_find_op(&t, "Attention");
        assert_int_equal(n->n_inputs, 4);
        assert_float_equal(gf_node_attr_float(n, "scale", 1), 0.5f, 1e-7);
        assert_int_equal(gf_node_attr_int(n, "transB", 0), 1);
        assert_int_equal(gf_node_attr_int(n, "zero_masked_rows", 0), 1);
        gf_fuse_report_free(&rep);
        gf_model_free(t.m);
    }
}

/* Without the NaN guard the fused node keeps the softmax's NaN rows: no
 * zero_masked_rows (the mask here has no fully masked row but row 0). */
static void test_sdpa_no_guard(void **state)
{
    (void)state;
    struct tg t = sdpa_graph(false, false);
    tg_fuse(&t, &enabled, NULL);
    const struct gf_node *n = tg_find_op(&t, "Attention");
    assert_non_null(n);
    assert_int_equal(gf_node_attr_int(n, "zero_masked_rows", 0), 0);
    gf_model_free(t.m);
}

/* A transpose of other axes than the last two is not kᵀ: it stays, and
 * Attention reads its output as K [b..., D, Sk] (transB = 0). */
static void test_sdpa_wrong_perm(void **state)
{
    (void)state;
    struct tg t = tg_new(18);
    tg_input(&t, "q", GF_FLOAT, "2,3,5,4");
    tg_input(&t, "k", GF_FLOAT, "3,2,4,7");
    tg_input(&t, "v", GF_FLOAT, "2,3,7,6");
    struct gf_node *tr = tg_node(&t, "Transpose", "k", "kt");
    assert_int_equal(gf_node_set_attr_ints(tr, "perm", 4, (int64_t[]){1, 0, 2, 3}), GF_OK);
    tg_node(&t, "Mul", "q,#0.5", "qs");
    tg_node(&t, "MatMul", "qs,kt", "s");
    tg_node(&t, "Softmax", "s", "p");
    tg_node(&t, "MatMul", "p,v", "o");
    tg_output(&t, "o");
    tg_check_fused(&t, &enabled, NULL);
    assert_int_equal(tg_count(&t, "Attention"), 1);
    assert_int_equal(tg_count(&t, "Transpose"), 1);
    assert_int_equal(gf_node_attr_int(tg_find_op(&t, "Attention"), "transB", 0), 0);
    gf_model_free(t.m);
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
        cmocka_unit_test(test_sdpa_math),
        cmocka_unit_test(test_sdpa_no_guard),
        cmocka_unit_test(test_sdpa_wrong_perm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
