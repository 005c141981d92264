/*
 * gf_pass_precision (passes/precision.c) and the CPU's fp16 / bf16 paths.
 *
 * Structure: the casts sit where autocast's policy puts them and nowhere
 * else, one per value, the pass is idempotent, Cast pairs fold, fp32 and
 * tf32 change no node.
 *
 * Numbers, always against an independent reference: the fp32 graph (the
 * same model without the pass), or an exact bf16 rounding written here
 * with frexp / ldexp (not gf_half.h's).  u is the unit roundoff of the low
 * type: 2^-9 for bf16 (8 significant bits), 2^-12 for fp16 (11).
 *
 *   inference (the bundled models' recorded inputs): a rounding of
 *   relative size <= u happens at each matmul input and output, at each
 *   cast, and in each low elementwise op; on the longest path of these
 *   models (llama_tiny: 2 layers x (norm cast, q/k/v, scores, probs, o,
 *   gate/up, SwiGLU, down) + the head) about 16 roundings add up, as
 *   independent errors, to sqrt(16) u = 4u of relative rms error, which
 *   the norms and softmax may amplify up to 2x: the bound on the logits'
 *   rms error over their rms is 8u (measured: 2.3u mlp, 3.0u gpt2_tiny,
 *   3.8u llama_tiny; fp16 the same multiples of its u), the largest error
 *   of one logit is at most 32u times their rms (measured <= 18.5u), and
 *   the loss, a mean over tokens in which the roundings average out, is
 *   within u relative (measured <= 0.07u).  The rms error must also be at
 *   least u/8: the graph really computes in the low type.
 *
 *   training (20 AdamW steps, lr 1e-3, on models/<m>/train_data): each
 *   step's loss differs from fp32 training's by the forward's rounding
 *   (<= u, above) plus the effect of updates computed from gradients with
 *   ~u relative error; AdamW's steps are lr-sized whatever the gradient's
 *   scale, so 20 steps of relative direction error u move the loss by far
 *   less than u.  Bound: every step's loss within u = 2^-9 relative
 *   (measured: at most 0.25u on mlp, llama_tiny and gpt2_tiny, fused and
 *   not).  fp16 training needs loss scaling (left): not tested.
 */
#include "fusetest.h"

#include <math.h>

#include "gf_half.h"

#define U_BF16 (1.0 / 512)  /* 2^-9 */
#define U_FP16 (1.0 / 4096) /* 2^-12 */

/* ---- helpers ----------------------------------------------------------------- */

static const struct gf_node *producer_of(const struct tg *t, const char *name)
{
    const struct gf_value *v = gf_graph_find(t->g, name);
    assert_non_null(v);
    return v->producer;
}

/* Input i of the first node of op type `op`. */
static const struct gf_value *input_of(const struct tg *t, const char *op, size_t i)
{
    const struct gf_node *n = tg_find_op(t, op);
    assert_true(i < n->n_inputs);
    return n->inputs[i];
}

static bool is_cast_to(const struct gf_value *v, enum gf_dtype to)
{
    return v->producer && v->producer->op == GF_OP_CAST &&
           gf_node_attr_int(v->producer, "to", 0) == to && v->type.dtype == to;
}

static void run_pass(struct tg *t, enum gf_precision p)
{
    enum gf_status st = gf_pass_precision(t->m, p, NULL);
    if (st != GF_OK)
        fail_msg("precision: %s", gf_last_error());
    assert_int_equal(gf_graph_validate(t->g), GF_OK);
}

/* x   W(init)  b(init)
 *  \   /        |
 *  MatMul ─ Add(b) ─ Relu ─ MatMul(W2) ─ Softmax ─ y     (W read twice)
 *                              z = MatMul(x, W) too: W's Cast is shared
 */
static struct tg mlp_graph(void)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "3,4");
    tg_init(&t, "W", GF_FLOAT, "4,4", NULL);
    tg_init(&t, "b", GF_FLOAT, "4", NULL);
    tg_init(&t, "W2", GF_FLOAT, "4,5", NULL);
    tg_node(&t, "MatMul", "x,W", "h");
    tg_node(&t, "Add", "h,b", "hb");
    tg_node(&t, "Relu", "hb", "r");
    tg_node(&t, "Mul", "r,#0.5", "rs"); /* a scalar: follows r */
    tg_node(&t, "MatMul", "rs,W2", "s");
    tg_node(&t, "Softmax", "s", "y");
    tg_node(&t, "MatMul", "r,W", "z");
    tg_output(&t, "y");
    tg_output(&t, "z");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    return t;
}

/* ---- the pass's structure ------------------------------------------------------ */

static void test_policy_bf16(void **state)
{
    (void)state;
    struct tg t = mlp_graph();
    struct gf_precision_stats st;
    assert_int_equal(gf_pass_precision(t.m, GF_PRECISION_BF16, &st), GF_OK);
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    /* matmul inputs: Casts to bf16; W's one Cast read by both of its MatMuls */
    const struct gf_value *x = input_of(&t, "MatMul", 0), *w = input_of(&t, "MatMul", 1);
    assert_true(is_cast_to(x, GF_BFLOAT16));
    assert_true(is_cast_to(w, GF_BFLOAT16));
    assert_string_equal(w->producer->inputs[0]->name, "W"); /* the fp32 master */
    assert_int_equal(gf_graph_find(t.g, "W")->type.dtype, GF_FLOAT);
    assert_int_equal(w->n_uses, 2);
    assert_int_equal(producer_of(&t, "z")->op, GF_OP_CAST); /* output cast back */
    /* Linear's bias goes low with its product; Relu and the scale follow */
    assert_int_equal(gf_graph_find(t.g, "h")->type.dtype, GF_BFLOAT16);
    assert_true(is_cast_to(input_of(&t, "Add", 1), GF_BFLOAT16));
    assert_int_equal(gf_graph_find(t.g, "hb")->type.dtype, GF_BFLOAT16);
    assert_int_equal(gf_graph_find(t.g, "r")->type.dtype, GF_BFLOAT16);
    assert_int_equal(input_of(&t, "Relu", 0)->producer->op, GF_OP_ADD); /* no Cast */
    assert_int_equal(gf_graph_find(t.g, "rs")->type.dtype, GF_BFLOAT16);
    /* Softmax in fp32 */
    assert_true(is_cast_to(input_of(&t, "Softmax", 0), GF_FLOAT));
    /* graph inputs and outputs keep their types and names */
    assert_int_equal(t.g->inputs[0]->type.dtype, GF_FLOAT);
    assert_string_equal(t.g->outputs[0]->name, "y");
    assert_int_equal(t.g->outputs[0]->type.dtype, GF_FLOAT);
    assert_string_equal(t.g->outputs[1]->name, "z");
    assert_int_equal(t.g->outputs[1]->type.dtype, GF_FLOAT);
    /* x, W, b, W2, #0.5 to bf16; s to fp32; z back to fp32 */
    assert_int_equal(st.casts, 7);
    assert_int_equal(tg_count(&t, "Cast"), 7);
    assert_int_equal(st.low_ops, 3);
    assert_int_equal(gf_model_precision(t.m), GF_PRECISION_BF16);
    /* raised for Cast-19's rounding */
    assert_int_equal(gf_model_opset(t.m, ""), 19);
    gf_model_free(t.m);
}

static void test_idempotent(void **state)
{
    (void)state;
    for (int p = GF_PRECISION_FP32; p <= GF_PRECISION_FP16; p++) {
        struct tg a = mlp_graph(), b = mlp_graph();
        run_pass(&a, (enum gf_precision)p);
        run_pass(&b, (enum gf_precision)p);
        run_pass(&b, (enum gf_precision)p);
        char why[256] = "";
        if (!gf_model_equal(a.m, b.m, why, sizeof(why)))
            fail_msg("%s twice differs from once: %s", gf_precision_name(p), why);
        gf_model_free(a.m);
        gf_model_free(b.m);
    }
}

static void test_fp32_tf32_unchanged(void **state)
{
    (void)state;
    struct tg a = mlp_graph(), b = mlp_graph();
    run_pass(&b, GF_PRECISION_FP32);
    assert_true(gf_model_equal(a.m, b.m, NULL, 0));
    run_pass(&b, GF_PRECISION_TF32);
    assert_int_equal(b.g->n_nodes, a.g->n_nodes);
    assert_int_equal(tg_count(&b, "Cast"), 0);
    assert_int_equal(gf_model_precision(b.m), GF_PRECISION_TF32);
    assert_int_equal(gf_model_precision(a.m), GF_PRECISION_FP32);
    enum gf_precision p;
    assert_true(gf_precision_parse("fp16", &p) && p == GF_PRECISION_FP16);
    assert_false(gf_precision_parse("half", &p));
    gf_model_free(a.m);
    gf_model_free(b.m);
}

/* x ─ Cast(bf16) ─ Cast(fp32) ─ Cast(bf16) ─ Relu ─ y: widening is exact,
 * so the last Cast gives back the first's output; Relu reads it directly. */
static void test_cast_pairs_fold(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "x", GF_FLOAT, "4");
    gf_node_set_attr_int(tg_node(&t, "Cast", "x", "a"), "to", GF_BFLOAT16);
    gf_node_set_attr_int(tg_node(&t, "Cast", "a", "b"), "to", GF_FLOAT);
    gf_node_set_attr_int(tg_node(&t, "Cast", "b", "c"), "to", GF_BFLOAT16);
    tg_node(&t, "Relu", "c", "r");
    gf_node_set_attr_int(tg_node(&t, "Cast", "r", "y"), "to", GF_FLOAT);
    tg_output(&t, "y");
    struct gf_precision_stats st;
    assert_int_equal(gf_pass_precision(t.m, GF_PRECISION_BF16, &st), GF_OK);
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    assert_int_equal(st.folded, 1);
    assert_string_equal(input_of(&t, "Relu", 0)->name, "a");
    assert_int_equal(tg_count(&t, "Cast"), 2); /* x -> a, r -> y */
    /* the narrowing pair x -> bf16 -> fp32 rounds: it must stay */
    struct tg u = tg_new(19);
    tg_input(&u, "x", GF_FLOAT, "4");
    gf_node_set_attr_int(tg_node(&u, "Cast", "x", "a"), "to", GF_BFLOAT16);
    gf_node_set_attr_int(tg_node(&u, "Cast", "a", "b"), "to", GF_FLOAT);
    tg_node(&u, "Relu", "b", "y");
    tg_output(&u, "y");
    run_pass(&u, GF_PRECISION_BF16);
    assert_int_equal(tg_count(&u, "Cast"), 2);
    gf_model_free(t.m);
    gf_model_free(u.m);
}

/* inv_freq x positions (integers made float) stays fp32: bf16 holds
 * integers exactly only up to 256. */
static void test_positions_stay_fp32(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "pos", GF_INT64, "1,1,300");
    tg_init(&t, "inv_freq", GF_FLOAT, "1,4,1", NULL);
    gf_node_set_attr_int(tg_node(&t, "Cast", "pos", "p"), "to", GF_FLOAT);
    tg_node(&t, "MatMul", "inv_freq,p", "f");
    tg_node(&t, "Cos", "f", "y");
    tg_output(&t, "y");
    run_pass(&t, GF_PRECISION_BF16);
    assert_int_equal(tg_count(&t, "Cast"), 1);
    assert_int_equal(gf_graph_find(t.g, "f")->type.dtype, GF_FLOAT);
    gf_model_free(t.m);
}

/* Dropout's data follows its input; its ratio keeps its own type (T1). */
static void test_dropout_ratio(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "x", GF_FLOAT, "2,4");
    tg_init(&t, "W", GF_FLOAT, "4,4", NULL);
    tg_node(&t, "MatMul", "x,W", "h");
    tg_node(&t, "Dropout", "h,#0.1", "y");
    tg_output(&t, "y");
    run_pass(&t, GF_PRECISION_BF16);
    assert_int_equal(input_of(&t, "Dropout", 0)->type.dtype, GF_BFLOAT16);
    assert_int_equal(input_of(&t, "Dropout", 1)->type.dtype, GF_FLOAT);
    assert_null(input_of(&t, "Dropout", 1)->producer);
    gf_model_free(t.m);
}

/* RoPE as autocast computes it: q = MatMul (low), q*cos fp32 (cos fp32
 * wins).  rotate_half(q) (Slices, Neg, Concat: exact in any type) moves
 * above the widening Cast its result had for rot*sin, so both products read
 * the one Cast(q): the fp32 rotary form, which the rope pattern fuses (the
 * fused graph computing what the unfused one does). */
static void test_rope_cast_hoisted(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "x", GF_FLOAT, "2,5,8");
    tg_init(&t, "W", GF_FLOAT, "8,8", NULL);
    tg_input(&t, "cos", GF_FLOAT, "5,8");
    tg_input(&t, "sin", GF_FLOAT, "5,8");
    tg_node(&t, "MatMul", "x,W", "q");
    tg_node(&t, "Slice", "q,$0,$4,$-1", "lo");
    tg_node(&t, "Slice", "q,$4,$8,$-1", "hi");
    tg_node(&t, "Neg", "hi", "neg");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "neg,lo", "rot"), "axis", -1),
                     GF_OK);
    tg_node(&t, "Mul", "q,cos", "xc");
    tg_node(&t, "Mul", "rot,sin", "rs");
    tg_node(&t, "Add", "xc,rs", "y");
    tg_output(&t, "y");
    struct gf_precision_stats st;
    assert_int_equal(gf_pass_precision(t.m, GF_PRECISION_BF16, &st), GF_OK);
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    assert_int_equal(st.hoisted, 4); /* Concat, Neg, both Slices */
    assert_int_equal(gf_graph_find(t.g, "q")->type.dtype, GF_BFLOAT16);
    const struct gf_value *qf = input_of(&t, "Slice", 0);
    assert_true(is_cast_to(qf, GF_FLOAT));
    assert_string_equal(qf->producer->inputs[0]->name, "q");
    assert_ptr_equal(producer_of(&t, "xc")->inputs[0], qf); /* one Cast of q, shared */
    assert_int_equal(gf_graph_find(t.g, "rot")->type.dtype, GF_FLOAT);
    assert_int_equal(tg_count(&t, "Cast"), 3); /* x, W to bf16; q to fp32 */
    tg_check_fused(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "RoPE"), 1);
    assert_int_equal(tg_count(&t, "Neg"), 0);
    gf_model_free(t.m);
}

/* The fused RoPE of that form, feeding a low op: its widening Cast of q and
 * the narrowing Cast of its output fold into it (gf_pass_precision_move_casts):
 * it reads and writes bf16 with the fp32 Cos and Sin, and the outputs are
 * the same bits (the CPU runs it as the fp32 kernel on the widened q). */
static void rope_casts_folded(bool concat)
{
    struct tg t = tg_new(19);
    tg_input(&t, "x", GF_FLOAT, "2,5,8");
    tg_init(&t, "W", GF_FLOAT, "8,8", NULL);
    tg_init(&t, "Wo", GF_FLOAT, "8,3", NULL);
    tg_input(&t, "cos", GF_FLOAT, "5,8");
    tg_input(&t, "sin", GF_FLOAT, "5,8");
    tg_node(&t, "MatMul", "x,W", "q");
    tg_node(&t, "Slice", "q,$0,$4,$-1", "lo");
    tg_node(&t, "Slice", "q,$4,$8,$-1", "hi");
    tg_node(&t, "Neg", "hi", "neg");
    assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "neg,lo", "rot"), "axis", -1),
                     GF_OK);
    tg_node(&t, "Mul", "q,cos", "xc");
    tg_node(&t, "Mul", "rot,sin", "rs");
    tg_node(&t, "Add", "xc,rs", "y");
    if (concat) { /* the exporters' KV cache, empty: Concat of k alone, its Shape taken */
        assert_int_equal(gf_node_set_attr_int(tg_node(&t, "Concat", "y", "yc"), "axis", -2),
                         GF_OK);
        tg_node(&t, "Shape", "yc", "ys");
    }
    tg_node(&t, "MatMul", concat ? "yc,Wo" : "y,Wo", "o");
    tg_output(&t, "o");
    if (concat)
        tg_output(&t, "ys");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    run_pass(&t, GF_PRECISION_BF16);
    assert_int_equal(gf_pass_fuse(t.m, NULL, NULL), GF_OK);
    assert_int_equal(tg_count(&t, "RoPE"), 1);
    struct gf_tensor *in[4], *want[2], *got[2];
    size_t n_in = tg_inputs(&t, in);
    assert_int_equal(tg_run(&t, in, n_in, want, 2), concat ? 2 : 1);
    int casts = tg_count(&t, "Cast");
    assert_int_equal(tg_find_op(&t, "RoPE")->inputs[0]->type.dtype, GF_FLOAT);
    size_t moved = 0;
    assert_int_equal(gf_pass_precision_move_casts(t.m, &moved), GF_OK);
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    assert_int_equal(moved, concat ? 2 : 1); /* (the Cast above the Concat,) the fold */
    assert_int_equal(tg_count(&t, "Cast"), casts - 2);
    const struct gf_node *r = tg_find_op(&t, "RoPE");
    assert_int_equal(r->inputs[0]->type.dtype, GF_BFLOAT16);
    assert_string_equal(r->inputs[0]->name, "q");
    assert_int_equal(r->inputs[1]->type.dtype, GF_FLOAT);
    assert_int_equal(r->outputs[0]->type.dtype, GF_BFLOAT16);
    assert_int_equal(tg_run(&t, in, n_in, got, 2), concat ? 2 : 1);
    assert_int_equal(got[0]->nelem, want[0]->nelem);
    assert_memory_equal(got[0]->data, want[0]->data, want[0]->nelem * sizeof(float));
    if (concat) /* the Shape */
        assert_memory_equal(got[1]->data, want[1]->data, want[1]->nelem * sizeof(int64_t));
    gf_model_free(t.m);
}

static void test_rope_casts_folded(void **state)
{
    (void)state;
    rope_casts_folded(false);
    rope_casts_folded(true);
}

/* After fusion the pass's Casts move past the data-movement ops beside
 * them (gf_pass_precision_move_casts): q's widening Cast below its Reshape
 * and Transpose, the narrowing Cast of a GQA-style Unsqueeze / Expand /
 * Reshape above the three, which then run in bf16.  The outputs are the
 * same bits (a Cast commutes with moving elements). */
static void test_casts_moved(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    static const double shp[4] = {2, 5, 2, 4}, perm_in[5] = {2, 2, 3, 5, 4},
                        shp2[4] = {2, 6, 5, 4};
    tg_input(&t, "x", GF_FLOAT, "2,5,8");
    tg_input(&t, "c", GF_FLOAT, "2,2,5,4");
    tg_init(&t, "W", GF_FLOAT, "8,8", NULL);
    tg_init(&t, "Wk", GF_FLOAT, "4,3", NULL);
    tg_init(&t, "shp", GF_INT64, "4", shp);
    tg_init(&t, "ex", GF_INT64, "5", perm_in);
    tg_init(&t, "shp2", GF_INT64, "4", shp2);
    tg_node(&t, "MatMul", "x,W", "q");
    tg_node(&t, "Reshape", "q,shp", "r");
    static const int64_t perm[4] = {0, 2, 1, 3};
    assert_int_equal(gf_node_set_attr_ints(tg_node(&t, "Transpose", "r", "tr"), "perm", 4, perm),
                     GF_OK);
    tg_node(&t, "Mul", "tr,c", "u"); /* fp32: c is */
    tg_node(&t, "Unsqueeze", "u,$2", "e1");
    tg_node(&t, "Expand", "e1,ex", "e2");
    tg_node(&t, "Reshape", "e2,shp2", "kx");
    tg_node(&t, "MatMul", "kx,Wk", "o");
    tg_output(&t, "o");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    run_pass(&t, GF_PRECISION_BF16);
    struct gf_tensor *in[4], *want[2], *got[2];
    size_t n_in = tg_inputs(&t, in);
    assert_int_equal(tg_run(&t, in, n_in, want, 2), 1);
    int casts = tg_count(&t, "Cast");
    assert_int_equal(producer_of(&t, "tr")->op, GF_OP_TRANSPOSE);
    assert_int_equal(gf_graph_find(t.g, "tr")->type.dtype, GF_FLOAT);
    size_t moved = 0;
    assert_int_equal(gf_pass_precision_move_casts(t.m, &moved), GF_OK);
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    assert_int_equal(moved, 5); /* past Reshape, Transpose; Reshape, Expand, Unsqueeze */
    assert_int_equal(tg_count(&t, "Cast"), casts);
    const struct gf_node *tp = tg_find_op(&t, "Transpose"), *ex = tg_find_op(&t, "Expand");
    assert_int_equal(tp->outputs[0]->type.dtype, GF_BFLOAT16);
    assert_int_equal(tp->inputs[0]->type.dtype, GF_BFLOAT16);
    assert_int_equal(ex->outputs[0]->type.dtype, GF_BFLOAT16);
    assert_true(is_cast_to(tg_find_op(&t, "Unsqueeze")->inputs[0], GF_BFLOAT16));
    assert_true(is_cast_to(input_of(&t, "Mul", 0), GF_FLOAT));
    assert_int_equal(tg_run(&t, in, n_in, got, 2), 1);
    assert_int_equal(got[0]->nelem, want[0]->nelem);
    assert_memory_equal(got[0]->data, want[0]->data, want[0]->nelem * sizeof(float));
    size_t again = 1; /* nothing left to move; an fp32 model: nothing at all */
    assert_int_equal(gf_pass_precision_move_casts(t.m, &again), GF_OK);
    assert_int_equal(again, 0);
    gf_model_free(t.m);
}

/* The lm head under autocast: MatMul (low) -> Cast(fp32) -> loss.  The
 * linear_cross_entropy pattern absorbs the widening Cast: one
 * LinearCrossEntropy of bf16 H and W with an fp32 loss, whose logits are
 * computed in fp32 and not rounded to bf16 as the unfused graph rounds
 * them.  Its loss is within u relative of the unfused bf16 graph's and of
 * the fp32 graph's.  A graph whose loss is itself 16-bit (an fp16 model,
 * no pass) keeps its loss: LinearCrossEntropy's would be fp32. */
static float lce_loss(struct tg *t, struct gf_tensor *const *in, size_t n_in)
{
    struct gf_tensor *out[2];
    assert_int_equal(tg_run(t, in, n_in, out, 2), 1);
    assert_int_equal(out[0]->dtype, GF_FLOAT);
    return *(const float *)out[0]->data;
}

static struct tg lm_head(enum gf_dtype dt)
{
    struct tg t = tg_new(19);
    tg_input(&t, "h", dt, "6,8");
    tg_input(&t, "W", dt, "8,10");
    tg_input(&t, "labels", GF_INT64, "6");
    tg_node(&t, "MatMul", "h,W", "logits");
    tg_node(&t, "SoftmaxCrossEntropyLoss", "logits,labels", "loss");
    tg_output(&t, "loss");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    return t;
}

static void test_lce_bf16(void **state)
{
    (void)state;
    struct tg t = lm_head(GF_FLOAT);
    struct gf_tensor *in[4];
    size_t n_in = tg_inputs(&t, in);
    float fp32 = lce_loss(&t, in, n_in);
    run_pass(&t, GF_PRECISION_BF16);
    float unfused = lce_loss(&t, in, n_in);
    tg_fuse(&t, NULL, NULL);
    assert_int_equal(tg_count(&t, "LinearCrossEntropy"), 1);
    const struct gf_node *f = tg_find_op(&t, "LinearCrossEntropy");
    assert_int_equal(f->inputs[0]->type.dtype, GF_BFLOAT16);
    assert_int_equal(f->inputs[1]->type.dtype, GF_BFLOAT16);
    assert_int_equal(f->outputs[0]->type.dtype, GF_FLOAT);
    assert_int_equal(tg_count(&t, "MatMul"), 0);
    float fused = lce_loss(&t, in, n_in);
    assert_true(fused != unfused); /* the logits are not rounded */
    assert_true(fabs(fused - unfused) <= U_BF16 * fabs(unfused));
    assert_true(fabs(fused - fp32) <= U_BF16 * fabs(fp32));
    gf_model_free(t.m);

    struct tg h = lm_head(GF_FLOAT16);
    tg_fuse(&h, NULL, NULL);
    assert_int_equal(tg_count(&h, "LinearCrossEntropy"), 0);
    assert_int_equal(tg_count(&h, "MatMul"), 1);
    gf_model_free(h.m);
}

/* A model's own Cast to fp32 (HF's logits.float(), a no-op in the fp32 graph)
 * widens the low logits now; its output, declared with the exporter's
 * symbols, gets its input's dims (a Cast keeps the shape), so that the
 * shifted-loss pattern sees the logits' batch and sequence as the labels'. */
static void test_model_cast_shape(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "h", GF_FLOAT, "batch,seq,8");
    tg_init(&t, "W", GF_FLOAT, "8,10", NULL);
    tg_node(&t, "MatMul", "h,W", "z");
    struct gf_node *c = tg_node(&t, "Cast", "z", "logits");
    assert_int_equal(gf_node_set_attr_int(c, "to", GF_FLOAT), GF_OK);
    struct gf_dim d[3] = {{.value = -1, .param = "Castlogits_dim_0"},
                          {.value = -1, .param = "Castlogits_dim_1"},
                          {.value = 10}};
    gf_value_set_tensor_type(gf_graph_find(t.g, "logits"), GF_FLOAT, 3, d);
    tg_node(&t, "Relu", "logits", "y");
    tg_output(&t, "y");
    run_pass(&t, GF_PRECISION_BF16);
    const struct gf_value *z = gf_graph_find(t.g, "z"), *l = gf_graph_find(t.g, "logits");
    assert_int_equal(z->type.dtype, GF_BFLOAT16);
    assert_int_equal(l->type.dtype, GF_FLOAT);
    assert_int_equal(l->type.rank, 3);
    assert_string_equal(l->type.dims[0].param, "batch");
    assert_string_equal(l->type.dims[1].param, "seq");
    assert_int_equal(l->type.dims[2].value, 10);
    gf_model_free(t.m);
}

/* An If (a subgraph may read any main-graph value) is refused, and the
 * model left as it was. */
static void test_subgraph_refused(void **state)
{
    (void)state;
    struct tg t = tg_new(19), u = tg_new(19);
    struct tg *v[2] = {&t, &u};
    for (int k = 0; k < 2; k++) {
        tg_input(v[k], "c", GF_BOOL, "");
        tg_input(v[k], "x", GF_FLOAT, "2,2");
        tg_node(v[k], "MatMul", "x,x", "y");
        struct gf_node *n = tg_node(v[k], "If", "c", "z");
        struct gf_graph *b[2] = {gf_node_add_subgraph(n, "then_branch"),
                                 gf_node_add_subgraph(n, "else_branch")};
        for (int i = 0; i < 2; i++) {
            struct gf_value *in = gf_graph_lookup(b[i], "y"), *out;
            out = gf_graph_new_value(b[i], i ? "e" : "t", NULL);
            assert_non_null(gf_graph_add_node(b[i], "Identity", "", NULL, 1, &in, 1, &out));
            assert_int_equal(gf_graph_add_output(b[i], out), GF_OK);
        }
        tg_output(v[k], "z");
    }
    assert_int_equal(gf_pass_precision(t.m, GF_PRECISION_BF16, NULL), GF_ERR_UNSUPPORTED);
    assert_non_null(strstr(gf_last_error(), "subgraph"));
    assert_true(gf_model_equal(t.m, u.m, NULL, 0));
    gf_model_free(t.m);
    gf_model_free(u.m);
}

/* ---- kernels ----------------------------------------------------------------------- */

/* x rounded to 8 significant bits, to nearest even: the reference bf16
 * rounding, independent of gf_half.h (normal numbers). */
static float ref_bf16(float x)
{
    if (x == 0 || !isfinite(x))
        return x;
    int e;
    double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return (float)ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

static struct gf_tensor *rand_tensor(struct tg *t, const char *name, int rank,
                                     const int64_t *dims, bool round)
{
    struct gf_tensor *x = gf_tensor_new(t->m, name, GF_FLOAT, rank, dims, NULL);
    assert_non_null(x);
    float *f = x->data;
    for (size_t i = 0; i < x->nelem; i++)
        f[i] = round ? ref_bf16((float)tg_rand(t)) : (float)tg_rand(t);
    return x;
}

/* Cast between fp32, bf16 and fp16 both ways, and bf16's rounding against
 * ref_bf16 (ties to even included). */
static void test_cast_kernels(void **state)
{
    (void)state;
    struct tg t = tg_new(19);
    tg_input(&t, "x", GF_FLOAT, "8");
    gf_node_set_attr_int(tg_node(&t, "Cast", "x", "b"), "to", GF_BFLOAT16);
    gf_node_set_attr_int(tg_node(&t, "Cast", "b", "yb"), "to", GF_FLOAT);
    gf_node_set_attr_int(tg_node(&t, "Cast", "x", "h"), "to", GF_FLOAT16);
    gf_node_set_attr_int(tg_node(&t, "Cast", "h", "yh"), "to", GF_FLOAT);
    gf_node_set_attr_int(tg_node(&t, "Cast", "h", "hb"), "to", GF_BFLOAT16);
    gf_node_set_attr_int(tg_node(&t, "Cast", "hb", "yhb"), "to", GF_FLOAT);
    tg_output(&t, "yb");
    tg_output(&t, "yh");
    tg_output(&t, "yhb");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    /* 1 + 2^-8 and 1 + 3*2^-8 are ties: to even gives 1 and 1 + 2^-6 */
    const float xs[8] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.14159265f, -2.71828183f,
                         1e-3f, 65504.0f, -0.1f, 1234.5678f};
    int64_t n = 8;
    struct gf_tensor *in = gf_tensor_new(t.m, "x", GF_FLOAT, 1, &n, xs), *out[3];
    assert_int_equal(tg_run(&t, &in, 1, out, 3), 3);
    const float *yb = out[0]->data, *yh = out[1]->data, *yhb = out[2]->data;
    for (int i = 0; i < 8; i++) {
        assert_float_equal(yb[i], ref_bf16(xs[i]), 0);
        /* fp16: 11 significant bits here (all normal) */
        int e;
        double m = frexp((double)xs[i], &e);
        assert_float_equal(yh[i], (float)ldexp(nearbyint(ldexp(m, 11)), e - 11), 0);
        assert_float_equal(yhb[i], ref_bf16(yh[i]), 0);
    }
    assert_float_equal(yb[0], 1.0f, 0);
    assert_float_equal(yb[1], 1.0f + 1.0f / 64, 0);
    gf_model_free(t.m);
}

/* Attention (no 16-bit kernel of its own: half.c's fp32-on-half path) on
 * bf16 q, k, v equals the fp32 kernel on the same rounded values, rounded. */
static void test_attention_bf16(void **state)
{
    (void)state;
    struct tg t[2] = {tg_new(19), tg_new(19)};
    int64_t dims[4] = {1, 2, 5, 8};
    struct gf_tensor *in[3];
    for (int k = 0; k < 2; k++) {
        enum gf_dtype dt = k ? GF_BFLOAT16 : GF_FLOAT;
        assert_int_equal(gf_model_set_opset(t[k].m, "graphfuse", 1), GF_OK);
        struct gf_value *qkv[3], *o;
        const char *nm[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++)
            qkv[i] = tg_input(&t[k], nm[i], dt, "1,2,5,8");
        o = gf_graph_new_value(t[k].g, "o", NULL);
        struct gf_node *n = gf_graph_add_node(t[k].g, "Attention", "graphfuse", "attn", 3, qkv,
                                              1, &o);
        assert_non_null(n);
        assert_int_equal(gf_node_set_attr_int(n, "transB", 1), GF_OK);
        assert_int_equal(gf_node_set_attr_float(n, "scale", 0.35f), GF_OK);
        tg_output(&t[k], "o");
        assert_int_equal(gf_graph_infer_shapes(t[k].g), GF_OK);
    }
    struct gf_tensor *want, *got, *bin[3];
    for (int i = 0; i < 3; i++) {
        in[i] = rand_tensor(&t[0], t[0].g->inputs[i]->name, 4, dims, true);
        bin[i] = gf_tensor_new(t[1].m, in[i]->name, GF_BFLOAT16, 4, dims, NULL);
        for (size_t k = 0; k < in[i]->nelem; k++) /* exact: the values are bf16 already */
            ((uint16_t *)bin[i]->data)[k] = (uint16_t)(*(uint32_t *)&((float *)in[i]->data)[k] >> 16);
    }
    assert_int_equal(tg_run(&t[0], in, 3, &want, 1), 1);
    assert_int_equal(tg_run(&t[1], bin, 3, &got, 1), 1);
    assert_int_equal(got->dtype, GF_BFLOAT16);
    for (size_t k = 0; k < want->nelem; k++) {
        float g = gf_bf16_to_float(((uint16_t *)got->data)[k]);
        assert_float_equal(g, ref_bf16(((float *)want->data)[k]), 0);
    }
    gf_model_free(t[0].m);
    gf_model_free(t[1].m);
}

/* AttentionGrad (dO, Q, K, V, no mask, O -> dQ, dK, dV) the same way:
 * an omitted input and three 16-bit outputs through half.c. */
static void test_attention_grad_bf16(void **state)
{
    (void)state;
    struct tg t[2] = {tg_new(19), tg_new(19)};
    int64_t dims[4] = {1, 2, 5, 8};
    const char *nm[5] = {"dO", "q", "k", "v", "o"};
    struct gf_tensor *in[5], *bin[5], *want[3], *got[3];
    for (int k = 0; k < 2; k++) {
        enum gf_dtype dt = k ? GF_BFLOAT16 : GF_FLOAT;
        assert_int_equal(gf_model_set_opset(t[k].m, "graphfuse", 1), GF_OK);
        struct gf_value *v[6], *o[3];
        for (int i = 0; i < 5; i++)
            v[i < 4 ? i : 5] = tg_input(&t[k], nm[i], dt, "1,2,5,8");
        v[4] = NULL;
        const char *on[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++)
            o[i] = gf_graph_new_value(t[k].g, on[i], NULL);
        struct gf_node *n = gf_graph_add_node(t[k].g, "AttentionGrad", "graphfuse", "ag", 6, v,
                                              3, o);
        assert_non_null(n);
        assert_int_equal(gf_node_set_attr_int(n, "transB", 1), GF_OK);
        assert_int_equal(gf_node_set_attr_float(n, "scale", 0.35f), GF_OK);
        for (int i = 0; i < 3; i++)
            tg_output(&t[k], on[i]);
        assert_int_equal(gf_graph_infer_shapes(t[k].g), GF_OK);
    }
    for (int i = 0; i < 5; i++) {
        in[i] = rand_tensor(&t[0], nm[i], 4, dims, true);
        bin[i] = gf_tensor_new(t[1].m, nm[i], GF_BFLOAT16, 4, dims, NULL);
        for (size_t k = 0; k < in[i]->nelem; k++)
            ((uint16_t *)bin[i]->data)[k] = (uint16_t)(*(uint32_t *)&((float *)in[i]->data)[k] >> 16);
    }
    assert_int_equal(tg_run(&t[0], in, 5, want, 3), 3);
    assert_int_equal(tg_run(&t[1], bin, 5, got, 3), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(got[i]->dtype, GF_BFLOAT16);
        for (size_t k = 0; k < want[i]->nelem; k++)
            assert_float_equal(gf_bf16_to_float(((uint16_t *)got[i]->data)[k]),
                               ref_bf16(((float *)want[i]->data)[k]), 0);
    }
    gf_model_free(t[0].m);
    gf_model_free(t[1].m);
}

/* ---- gradients ------------------------------------------------------------------------ */

/* loss = sum(MatMul(x, W) * R): with the pass, autodiff's Cast rule casts
 * the bf16 gradient of W's Cast back to fp32.  dW = x^T R exactly in fp32;
 * through bf16 it is x_bf16^T R_bf16 rounded to bf16 (the MatMul's output)
 * — within 2u of the fp32 gradient, relative to its rms. */
static void test_cast_gradient(void **state)
{
    (void)state;
    struct tg t[2] = {tg_new(19), tg_new(19)};
    struct gf_tensor *in[2][2], *out[2][4];
    int64_t xd[2] = {6, 4}, rd[2] = {6, 3};
    for (int k = 0; k < 2; k++) {
        tg_input(&t[k], "x", GF_FLOAT, "6,4");
        tg_input(&t[k], "R", GF_FLOAT, "6,3");
        tg_init(&t[k], "W", GF_FLOAT, "4,3", NULL);
        tg_node(&t[k], "MatMul", "x,W", "y");
        tg_node(&t[k], "Mul", "y,R", "yr");
        tg_node(&t[k], "ReduceSum", "yr", "loss");
        tg_output(&t[k], "loss");
        if (k)
            run_pass(&t[k], GF_PRECISION_BF16);
        const char *params[1] = {"W"};
        struct gf_autodiff_opts ao = {.loss = "loss", .n_params = 1, .params = params};
        struct gf_autodiff_result r;
        if (gf_pass_autodiff(t[k].m, &ao, &r) != GF_OK)
            fail_msg("autodiff: %s", gf_last_error());
        assert_int_equal(r.grads[0]->type.dtype, GF_FLOAT); /* fp32 gradient of the master */
        t[k].seed = 777;
        in[k][0] = rand_tensor(&t[k], "x", 2, xd, false);
        in[k][1] = rand_tensor(&t[k], "R", 2, rd, false);
        assert_int_equal(tg_run(&t[k], in[k], 2, out[k], 4), 2);
    }
    const float *g32 = out[0][1]->data, *g16 = out[1][1]->data;
    double rms = 0, err = 0;
    for (int i = 0; i < 12; i++) {
        rms += (double)g32[i] * g32[i];
        err += ((double)g16[i] - g32[i]) * ((double)g16[i] - g32[i]);
        assert_float_equal(g16[i], ref_bf16(g16[i]), 0); /* bf16 values, widened */
    }
    assert_true(sqrt(err / rms) <= 2 * U_BF16);
    assert_true(sqrt(err / rms) > 0);
    gf_model_free(t[0].m);
    gf_model_free(t[1].m);
}

/* The residual add of a bf16 product and its RMSNorm feeding GEMMs (a
 * decoder layer's o projection + post-attention norm): after fusion,
 * AddRMSNorm(x, Cast(p), g) -> Cast(y) -> MatMul.  gf_pass_precision_move_casts
 * folds both Casts into the node (its mixed form: fp32 X and S, bf16 R and
 * Y); autodiff's RMSNormGrad then reads the bf16 dY, adds S's other
 * gradient itself (its G) and writes R's gradient in bf16 too (its dXl).
 * The loss and every gradient are the same bits as without the fold. */
static void test_norm_casts_folded(void **state)
{
    (void)state;
    struct tg t[2] = {tg_new(19), tg_new(19)};
    struct gf_tensor *in[2][4], *out[2][6];
    int64_t hd[3] = {2, 5, 8}, rd[3] = {2, 5, 3};
    for (int k = 0; k < 2; k++) {
        tg_input(&t[k], "x", GF_FLOAT, "2,5,8");
        tg_input(&t[k], "h", GF_FLOAT, "2,5,8");
        tg_input(&t[k], "R", GF_FLOAT, "2,5,3");
        tg_input(&t[k], "R2", GF_FLOAT, "2,5,8");
        tg_init(&t[k], "W", GF_FLOAT, "8,8", NULL);
        tg_init(&t[k], "Wo", GF_FLOAT, "8,3", NULL);
        tg_init(&t[k], "g", GF_FLOAT, "8", NULL);
        tg_node(&t[k], "MatMul", "h,W", "p");
        tg_node(&t[k], "Add", "x,p", "s");
        tg_node(&t[k], "Pow", "s,#2", "sq");
        tg_node(&t[k], "ReduceMean", "sq,$-1", "ms");
        tg_node(&t[k], "Add", "ms,#1e-5", "a");
        tg_node(&t[k], "Sqrt", "a", "sd");
        tg_node(&t[k], "Reciprocal", "sd", "inv");
        tg_node(&t[k], "Mul", "s,inv", "n");
        tg_node(&t[k], "Mul", "g,n", "y");
        tg_node(&t[k], "MatMul", "y,Wo", "o");
        tg_node(&t[k], "Mul", "o,R", "or");
        tg_node(&t[k], "ReduceSum", "or", "l1");
        tg_node(&t[k], "Mul", "s,R2", "sr"); /* S read past the norm: the residual */
        tg_node(&t[k], "ReduceSum", "sr", "l2");
        tg_node(&t[k], "Add", "l1,l2", "loss");
        tg_node(&t[k], "Shape", "y", "ys"); /* the legacy exporter's hidden_states.shape */
        tg_output(&t[k], "loss");
        tg_output(&t[k], "ys");
        assert_int_equal(gf_graph_infer_shapes(t[k].g), GF_OK);
        run_pass(&t[k], GF_PRECISION_BF16);
        assert_int_equal(gf_pass_fuse(t[k].m, NULL, NULL), GF_OK);
        assert_int_equal(tg_count(&t[k], "AddRMSNorm"), 1);
        const struct gf_node *nm = tg_find_op(&t[k], "AddRMSNorm");
        if (k) {
            int casts = tg_count(&t[k], "Cast");
            size_t moved = 0;
            assert_int_equal(gf_pass_precision_move_casts(t[k].m, &moved), GF_OK);
            assert_int_equal(gf_graph_validate(t[k].g), GF_OK);
            assert_int_equal(moved, 1);
            assert_int_equal(tg_count(&t[k], "Cast"), casts - 2);
            assert_int_equal(nm->inputs[0]->type.dtype, GF_FLOAT);
            assert_int_equal(nm->inputs[1]->type.dtype, GF_BFLOAT16);
            assert_string_equal(nm->inputs[1]->name, "p");
            assert_int_equal(nm->outputs[0]->type.dtype, GF_BFLOAT16);
            assert_int_equal(nm->outputs[1]->type.dtype, GF_FLOAT);
        } else {
            assert_int_equal(nm->outputs[0]->type.dtype, GF_FLOAT);
        }
        const char *params[3] = {"W", "Wo", "g"};
        struct gf_autodiff_opts ao = {.loss = "loss", .n_params = 3, .params = params};
        struct gf_autodiff_result r;
        if (gf_pass_autodiff(t[k].m, &ao, &r) != GF_OK)
            fail_msg("autodiff: %s", gf_last_error());
        for (int i = 0; i < 3; i++)
            assert_int_equal(r.grads[i]->type.dtype, GF_FLOAT);
        assert_int_equal(tg_count(&t[k], "RMSNormGrad"), 1);
        const struct gf_node *ng = tg_find_op(&t[k], "RMSNormGrad");
        assert_int_equal(ng->inputs[0]->type.dtype, k ? GF_BFLOAT16 : GF_FLOAT);
        /* the mixed form: S's other gradient added by the node (G), dR as its
         * dXl; the fp32 form: an Add, then the Cast's rule (the reference) */
        assert_int_equal(ng->n_inputs, k ? 4 : 3);
        assert_int_equal(ng->n_outputs, k ? 3 : 2);
        if (k) {
            assert_int_equal(ng->inputs[3]->type.dtype, GF_FLOAT);
            assert_int_equal(ng->outputs[2]->type.dtype, GF_BFLOAT16);
        }
        t[k].seed = 99;
        in[k][0] = rand_tensor(&t[k], "x", 3, hd, false);
        in[k][1] = rand_tensor(&t[k], "h", 3, hd, false);
        in[k][2] = rand_tensor(&t[k], "R", 3, rd, false);
        in[k][3] = rand_tensor(&t[k], "R2", 3, hd, false);
        assert_int_equal(tg_run(&t[k], in[k], 4, out[k], 6), 5);
    }
    for (int i = 0; i < 5; i++) { /* loss, the Shape, three gradients */
        assert_int_equal(out[1][i]->nelem, out[0][i]->nelem);
        assert_int_equal(out[1][i]->dtype, out[0][i]->dtype);
        assert_memory_equal(out[1][i]->data, out[0][i]->data,
                            out[0][i]->nelem * gf_dtype_size(out[0][i]->dtype));
    }
    gf_model_free(t[0].m);
    gf_model_free(t[1].m);
}

/* ---- the bundled models ---------------------------------------------------------------- */

static const char *const dirs[] = {"models/mlp/legacy", "models/gpt2_tiny/legacy",
                                   "models/llama_tiny/dynamo"};

static size_t run_model(const char *dir, enum gf_precision p, struct gf_model **m,
                        struct gf_tensor ***out)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    assert_int_equal(gf_model_load(path, NULL, m), GF_OK);
    if (gf_pass_precision(*m, p, NULL) != GF_OK)
        fail_msg("%s: %s", dir, gf_last_error());
    struct gf_session *s;
    assert_int_equal(gf_session_new(*m, NULL, &s), GF_OK);
    struct gf_tensor *in[8], **got;
    size_t n_in = gf_session_input_count(s), n_out;
    for (size_t i = 0; i < n_in; i++) {
        snprintf(path, sizeof(path), "%s/test_data_set_0/input_%zu.pb", dir, i);
        assert_int_equal(gf_tensor_load(*m, path, &in[i]), GF_OK);
    }
    if (gf_session_run(s, n_in, in, &got, &n_out) != GF_OK)
        fail_msg("%s %s: %s", dir, gf_precision_name(p), gf_last_error());
    *out = calloc(n_out, sizeof(**out));
    for (size_t i = 0; i < n_out; i++)
        (*out)[i] = gf_tensor_new(*m, got[i]->name, got[i]->dtype, got[i]->rank, got[i]->dims,
                                  got[i]->data);
    gf_session_free(s);
    return n_out;
}

/* On the exported graphs: idempotent, and the result saves and loads back
 * as a valid model (what optimize and dump write). */
static void test_models_idempotent_saved(void **state)
{
    (void)state;
    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++)
        for (enum gf_precision p = GF_PRECISION_BF16; p <= GF_PRECISION_FP16; p++) {
            char path[512], why[256] = "";
            snprintf(path, sizeof(path), "%s/model.onnx", dirs[d]);
            struct gf_model *a, *b, *c;
            assert_int_equal(gf_model_load(path, NULL, &a), GF_OK);
            assert_int_equal(gf_model_load(path, NULL, &b), GF_OK);
            assert_int_equal(gf_pass_precision(a, p, NULL), GF_OK);
            assert_int_equal(gf_pass_precision(b, p, NULL), GF_OK);
            assert_int_equal(gf_pass_precision(b, p, NULL), GF_OK);
            if (!gf_model_equal(a, b, why, sizeof(why)))
                fail_msg("%s %s: twice differs from once: %s", dirs[d], gf_precision_name(p),
                         why);
            uint8_t *buf;
            size_t len;
            assert_int_equal(gf_model_save_buffer(a, &buf, &len), GF_OK);
            if (gf_model_load_buffer(buf, len, dirs[d], NULL, &c) != GF_OK)
                fail_msg("%s %s: saved model does not load: %s", dirs[d], gf_precision_name(p),
                         gf_last_error());
            assert_int_equal(gf_model_precision(c), p);
            free(buf);
            gf_model_free(a);
            gf_model_free(b);
            gf_model_free(c);
        }
}

static void test_models_inference(void **state)
{
    (void)state;
    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
        struct gf_model *m32, *m16;
        struct gf_tensor **ref, **got;
        size_t n = run_model(dirs[d], GF_PRECISION_FP32, &m32, &ref);
        for (enum gf_precision p = GF_PRECISION_BF16; p <= GF_PRECISION_FP16; p++) {
            double u = p == GF_PRECISION_BF16 ? U_BF16 : U_FP16;
            assert_int_equal(run_model(dirs[d], p, &m16, &got), n);
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(got[i]->dtype, GF_FLOAT); /* outputs keep their type */
                double rms = 0, err = 0, worst = 0;
                for (size_t k = 0; k < ref[i]->nelem; k++) {
                    double r = ((float *)ref[i]->data)[k], g = ((float *)got[i]->data)[k];
                    rms += r * r;
                    err += (g - r) * (g - r);
                    worst = fmax(worst, fabs(g - r));
                }
                rms = sqrt(rms / ref[i]->nelem);
                err = sqrt(err / ref[i]->nelem);
                if (ref[i]->nelem == 1) { /* the loss */
                    if (!(worst <= u * rms))
                        fail_msg("%s %s loss: relative error %g > u", dirs[d],
                                 gf_precision_name(p), worst / rms);
                    continue;
                }
                if (!(err <= 8 * u * rms && worst <= 32 * u * rms && err >= u / 8 * rms))
                    fail_msg("%s %s '%s': rms error %.3g u, largest %.3g u (of the rms)",
                             dirs[d], gf_precision_name(p), ref[i]->name, err / rms / u,
                             worst / rms / u);
            }
            free(got);
            gf_model_free(m16);
        }
        free(ref);
        gf_model_free(m32);
    }
}

/* ---- training ---------------------------------------------------------------------------- */

static void train_losses(const char *model, enum gf_precision p, bool fuse, double *loss)
{
    char path[512];
    snprintf(path, sizeof(path), "models/%s/legacy/model.onnx", model);
    struct gf_model *m;
    assert_int_equal(gf_model_load(path, NULL, &m), GF_OK);
    if (gf_pass_precision(m, p, NULL) != GF_OK)
        fail_msg("%s: %s", model, gf_last_error());
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.steps = 20;
    o.fuse = fuse;
    o.exec.backend = "cpu";
    struct gf_trainer *t;
    if (gf_trainer_new(m, &o, &t) != GF_OK)
        fail_msg("%s: %s", model, gf_last_error());
    struct gf_data *d;
    snprintf(path, sizeof(path), "models/%s/train_data", model);
    assert_int_equal(gf_data_open_dir(t, path, &d), GF_OK);
    for (int i = 0; i < 20; i++) {
        struct gf_train_stats st;
        if (gf_trainer_step(t, d, &st) != GF_OK)
            fail_msg("%s step %d: %s", model, i, gf_last_error());
        loss[i] = st.loss;
    }
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

static void test_models_training_bf16(void **state)
{
    (void)state;
    static const struct { const char *model; bool fuse; } runs[] = {
        {"mlp", false}, {"llama_tiny", true}, {"gpt2_tiny", true}};
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        double ref[20], got[20], worst = 0;
        train_losses(runs[r].model, GF_PRECISION_FP32, runs[r].fuse, ref);
        train_losses(runs[r].model, GF_PRECISION_BF16, runs[r].fuse, got);
        for (int i = 0; i < 20; i++)
            worst = fmax(worst, fabs(got[i] - ref[i]) / fabs(ref[i]));
        if (!(worst <= U_BF16))
            fail_msg("%s: bf16 loss %.3g relative from fp32's (bound 2^-9)", runs[r].model,
                     worst);
        assert_true(got[19] < got[0]); /* and it learns */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_bf16),
        cmocka_unit_test(test_idempotent),
        cmocka_unit_test(test_fp32_tf32_unchanged),
        cmocka_unit_test(test_cast_pairs_fold),
        cmocka_unit_test(test_positions_stay_fp32),
        cmocka_unit_test(test_dropout_ratio),
        cmocka_unit_test(test_rope_cast_hoisted),
        cmocka_unit_test(test_casts_moved),
        cmocka_unit_test(test_rope_casts_folded),
        cmocka_unit_test(test_norm_casts_folded),
        cmocka_unit_test(test_lce_bf16),
        cmocka_unit_test(test_model_cast_shape),
        cmocka_unit_test(test_subgraph_refused),
        cmocka_unit_test(test_cast_kernels),
        cmocka_unit_test(test_attention_bf16),
        cmocka_unit_test(test_attention_grad_bf16),
        cmocka_unit_test(test_cast_gradient),
        cmocka_unit_test(test_models_idempotent_saved),
        cmocka_unit_test(test_models_inference),
        cmocka_unit_test(test_models_training_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
