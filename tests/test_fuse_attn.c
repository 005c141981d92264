/* Attention fusion (opt-in pattern "attention"): softmax(scale q k^T + mask) v
 * after the matmul patterns fuses into one Attention node when enabled and
 * computes what it replaced (the unfused graph on the executor is the
 * reference, with and without the mask, k given transposed or not); it is
 * left alone when not enabled, and near misses stay unfused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* ---- under the precision pass (bf16) -------------------------------------------------------
 * The Hugging Face forms after gf_pass_precision: q, k, v cast to bf16 for the
 * MatMuls, the scores cast back to fp32 for the mask and the softmax, the
 * probabilities cast to bf16 for the MatMul with v.  They fuse into one
 * Attention taking bf16 q, k, v and mask, giving bf16 O; the outputs and the
 * gradients (through AttentionGrad with bf16 inputs) stay within bf16 noise
 * of the unfused bf16 graph's.  q, k, v are initializers, the parameters. */

/* vals[n] in [-2, 2), the same sequence for every call */
static void det_values(double *vals, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        vals[i] = (double)(seed >> 8) / (double)(1u << 24) * 4 - 2;
    }
}

/* sdpa: the SDPA math form (legacy), else MatMul(q, kᵀ) * 0.5 + mask. */
static struct tg bf16_graph(bool sdpa)
{
    struct tg t = tg_new(18);
    double q[120], k[168], v[252], w[180], mask[35];
    det_values(q, 120, 1), det_values(k, 168, 2), det_values(v, 252, 3), det_values(w, 180, 4);
    for (int i = 0; i < 35; i++)
        mask[i] = i % 7 > i / 7 + 2 ? -INFINITY : 0.0; /* causal-like, no full row */
    tg_init(&t, "q", GF_FLOAT, "2,3,5,4", q);
    tg_init(&t, "k", GF_FLOAT, "2,3,7,4", k);
    tg_init(&t, "v", GF_FLOAT, "2,3,7,6", v);
    tg_init(&t, "w", GF_FLOAT, "2,3,5,6", w);
    tg_init(&t, "mask", GF_FLOAT, "5,7", mask);
    struct gf_node *tr = tg_node(&t, "Transpose", "k", "kt");
    assert_int_equal(gf_node_set_attr_ints(tr, "perm", 4, (int64_t[]){0, 1, 3, 2}), GF_OK);
    if (sdpa) {
        tg_node(&t, "Mul", "q,#0.70710678", "qs");
        tg_node(&t, "Mul", "kt,#0.70710678", "ks");
        tg_node(&t, "MatMul", "qs,ks", "s");
        tg_node(&t, "Add", "s,mask", "sm");
        tg_node(&t, "Softmax", "sm", "pn");
        tg_node(&t, "IsNaN", "pn", "isnan");
        tg_node(&t, "Where", "isnan,#0,pn", "p");
    } else {
        tg_node(&t, "MatMul", "q,kt", "s");
        tg_node(&t, "Mul", "s,#0.5", "ss");
        tg_node(&t, "Add", "ss,mask", "sm");
        tg_node(&t, "Softmax", "sm", "p");
    }
    tg_node(&t, "MatMul", "p,v", "o");
    tg_node(&t, "Mul", "o,w", "ow");
    struct gf_node *r = tg_node(&t, "ReduceSum", "ow", "loss");
    assert_int_equal(gf_node_set_attr_int(r, "keepdims", 0), GF_OK);
    tg_output(&t, "o");
    tg_output(&t, "loss");
    return t;
}

/* Builds the graph, applies the bf16 pass, fuses (or not), differentiates
 * (or not), runs; out: o, loss[, dq, dk, dv]. */
static size_t bf16_run(bool sdpa, bool fuse, bool train, struct tg *t, struct gf_tensor **out)
{
    *t = bf16_graph(sdpa);
    assert_int_equal(gf_graph_infer_shapes(t->g), GF_OK);
    if (gf_pass_precision(t->m, GF_PRECISION_BF16, NULL) != GF_OK)
        fail_msg("precision: %s", gf_last_error());
    /* as the CLI and the trainer do: parameters made graph inputs (no pass
     * folds them), cleanup (folds the Casts of constants), fusion */
    static const char *const names[] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(gf_graph_add_input(t->g, gf_graph_find(t->g, names[i])), GF_OK);
    assert_int_equal(gf_pass_cleanup(t->g, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                                     NULL), GF_OK);
    if (fuse) {
        struct gf_fuse_report rep;
        tg_fuse(t, &enabled, &rep);
        assert_int_equal(tg_hits(&rep, "attention"), 1);
        gf_fuse_report_free(&rep);
        assert_int_equal(tg_count(t, "Softmax"), 0);
        const struct gf_node *n = tg_find_op(t, "Attention");
        assert_non_null(n);
        assert_int_equal(n->n_inputs, 4);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(n->inputs[i]->type.dtype, GF_BFLOAT16);
        assert_int_equal(n->outputs[0]->type.dtype, GF_BFLOAT16);
        assert_int_equal(gf_node_attr_int(n, "zero_masked_rows", 0), sdpa);
    }
    if (train) {
        struct gf_autodiff_opts o = {.loss = "loss", .n_params = 3, .params = names};
        struct gf_autodiff_result r;
        if (gf_pass_autodiff(t->m, &o, &r) != GF_OK)
            fail_msg("autodiff: %s", gf_last_error());
        if (fuse)
            assert_int_equal(tg_count(t, "AttentionGrad"), 1);
    }
    assert_int_equal(gf_graph_validate(t->g), GF_OK);
    return tg_run(t, NULL, 0, out, 8);
}

/* rms(a - b) / rms(b), float tensors */
static double rel_rms(const struct gf_tensor *a, const struct gf_tensor *b)
{
    assert_int_equal(a->dtype, GF_FLOAT);
    assert_int_equal(b->dtype, GF_FLOAT);
    assert_int_equal(a->nelem, b->nelem);
    const float *x = a->data, *y = b->data;
    double e = 0, r = 0;
    for (size_t i = 0; i < a->nelem; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        r += (double)y[i] * y[i];
    }
    return sqrt(e / (r > 0 ? r : 1));
}

/* Bound: 8u of the rms (u = 2^-9, bf16's unit roundoff; docs/precision.md's
 * bound for bf16 against fp32).  The fused node rounds fewer intermediates
 * (the scaled q and k, the probabilities, in the backward the gradients of
 * the probabilities and scores) than the unfused graph; measured 1.5u..2.4u
 * for o, 1.8u..3.8u for the gradients. */
static void test_bf16(void **state)
{
    (void)state;
    const double u = 1.0 / 512;
    for (int sdpa = 0; sdpa < 2; sdpa++)
        for (int train = 0; train < 2; train++) {
            struct tg a, b;
            struct gf_tensor *fused[8], *ref[8];
            size_t n = bf16_run(sdpa, true, train, &a, fused);
            assert_int_equal(bf16_run(sdpa, false, train, &b, ref), n);
            assert_int_equal(n, train ? 5u : 2u);
            for (size_t i = 0; i < n; i++) {
                if (i == 1)
                    continue; /* the loss, a sum of o w with cancellation: o says it */
                double e = rel_rms(fused[i], ref[i]);
                if (getenv("GF_TEST_VERBOSE"))
                    printf("%s %s %s: %.2f u\n", sdpa ? "sdpa" : "mme", train ? "train" : "fwd",
                           ref[i]->name, e / u);
                if (!(e <= 8 * u))
                    fail_msg("%s, %s: output %zu ('%s') rms error %.3g u", sdpa ? "sdpa" : "mme",
                             train ? "train" : "forward", i, ref[i]->name, e / u);
            }
            gf_model_free(a.m);
            gf_model_free(b.m);
        }
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
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
