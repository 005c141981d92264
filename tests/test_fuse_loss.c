/* Loss fusions (passes/patterns_loss.c): SoftmaxCrossEntropy from the ONNX
 * op, LogSoftmax + NegativeLogLikelihoodLoss and the ONNX function bodies;
 * the reductions of a fused "none" loss; the Hugging Face label shift;
 * LinearCrossEntropy; JSD from torch exports.  Each positive test runs the
 * graph before and after fusion on the executor (the reference) and checks
 * the fused structure; near misses must stay unfused. */
#include <math.h>
#include <stdint.h>

#include "fusetest.h"

#define NODE_TESTS "/usr/share/libonnx-testdata/data/node"
#define JSD_DATA "tests/data/jsd"

/* ---- helpers ------------------------------------------------------------------ */

static struct gf_value *i64s(struct tg *t, const char *name, size_t n, const int64_t *v)
{
    int64_t dims[1] = {(int64_t)n};
    struct gf_tensor *x = gf_tensor_new(t->m, NULL, GF_INT64, 1, dims, v);
    assert_non_null(x);
    struct gf_value *val = gf_graph_add_initializer(t->g, name, x);
    assert_non_null(val);
    return val;
}

#define I64S(t, name, ...)                                                                   \
    i64s(t, name, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static void set_int(struct gf_node *n, const char *name, int64_t v)
{
    assert_int_equal(gf_node_set_attr_int(n, name, v), GF_OK);
}

static void set_str(struct gf_node *n, const char *name, const char *v)
{
    assert_int_equal(gf_node_set_attr_string(n, name, v), GF_OK);
}

static void set_ints(struct gf_node *n, const char *name, size_t k, const int64_t *v)
{
    assert_int_equal(gf_node_set_attr_ints(n, name, k, v), GF_OK);
}

static size_t n_fused(const struct tg *t)
{
    size_t k = 0;
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        k += n->domain && strcmp(n->domain, "graphfuse") == 0;
    return k;
}

/* The graph is one fused node of op `op`; returns it. */
static const struct gf_node *expect_only(const struct tg *t, const char *op)
{
    if (t->g->n_nodes != 1) {
        for (const struct gf_node *n = t->g->first; n; n = n->next)
            fprintf(stderr, "  left: %s\n", n->op_type);
        fail_msg("expected one %s node, the graph has %zu nodes", op, t->g->n_nodes);
    }
    const struct gf_node *n = tg_find_op(t, op);
    assert_string_equal(n->domain, "graphfuse");
    return n;
}

/* Labels: element i of int64 tensor x becomes `v` when i % every == k. */
static void mark_labels(struct gf_tensor *x, size_t every, size_t k, int64_t v)
{
    assert_int_equal(x->dtype, GF_INT64);
    for (size_t i = k; i < x->nelem; i += every)
        ((int64_t *)x->data)[i] = v;
}

/* Labels modulo c (valid classes of a smaller class count). */
static void labels_mod(struct gf_tensor *x, int64_t c)
{
    for (size_t i = 0; i < x->nelem; i++)
        ((int64_t *)x->data)[i] %= c;
}

/* The input tensor named `name` among in[0..n). */
static struct gf_tensor *input_named(struct gf_tensor **in, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(in[i]->name, name) == 0)
            return in[i];
    fail_msg("no input %s", name);
    return NULL;
}

/* tg_check_fused with given inputs: run, fuse (o may be NULL), run, compare
 * every output within rtol 1e-5. */
static void check_with(struct tg *t, struct gf_tensor **in, size_t n_in,
                       const struct gf_fuse_opts *o, struct gf_fuse_report *rep)
{
    struct gf_tensor *want[8], *got[8];
    size_t n_want = tg_run(t, in, n_in, want, 8);
    if (gf_pass_fuse(t->m, o, rep) != GF_OK)
        fail_msg("fuse: %s", gf_last_error());
    assert_int_equal(gf_graph_validate(t->g), GF_OK);
    size_t n_got = tg_run(t, in, n_in, got, 8);
    assert_int_equal(n_got, n_want);
    for (size_t i = 0; i < n_got; i++) {
        double worst;
        if (!gf_tensor_allclose(got[i], want[i], 1e-5, 1e-6, &worst))
            fail_msg("output %zu ('%s') differs after fusion: worst error %g", i, got[i]->name,
                     worst);
    }
}

/* Random inputs for t (labels in [0, 8)); `ii_label` marks every third
 * position of input `labels` with that value unless it is INT64_MIN. */
static size_t inputs_with(struct tg *t, struct gf_tensor **in, const char *labels,
                          int64_t ii_label)
{
    assert_int_equal(gf_graph_infer_shapes(t->g), GF_OK);
    size_t n = tg_inputs(t, in);
    if (labels && ii_label != INT64_MIN)
        mark_labels(input_named(in, n, labels), 3, 1, ii_label);
    return n;
}

/* ---- SoftmaxCrossEntropyLoss op ---------------------------------------------------- */

static const char *const reductions[] = {"mean", "sum", "none"};

/* L [4, 8, 3], T [4, 3]; with weights, ignore_index 2, log_prob as an output. */
static struct tg sce_op(const char *red, bool weights, bool ii, bool log_prob)
{
    struct tg t = tg_new(13);
    tg_input(&t, "L", GF_FLOAT, "4,8,3");
    tg_input(&t, "T", GF_INT64, "4,3");
    if (weights)
        tg_init(&t, "W", GF_FLOAT, "8", NULL);
    struct gf_node *n = tg_node(&t, "SoftmaxCrossEntropyLoss", weights ? "L,T,W" : "L,T",
                                log_prob ? "loss,logp" : "loss");
    set_str(n, "reduction", red);
    if (ii)
        set_int(n, "ignore_index", 2);
    tg_output(&t, "loss");
    if (log_prob)
        tg_output(&t, "logp");
    return t;
}

static void test_sce_op(void **state)
{
    (void)state;
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 8; k++) {
            bool w = k & 1, ii = k & 2, lp = k & 4;
            struct tg t = sce_op(reductions[r], w, ii, lp);
            struct gf_fuse_report rep;
            struct gf_tensor *in[4];
            size_t n = inputs_with(&t, in, "T", INT64_MIN);
            check_with(&t, in, n, NULL, &rep);
            const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
            assert_string_equal(gf_node_attr_string(f, "reduction", "?"), reductions[r]);
            assert_int_equal(gf_node_attr(f, "ignore_index") != NULL, ii);
            assert_int_equal(f->n_inputs, w ? 3 : 2);
            assert_int_equal(f->n_outputs, lp ? 2 : 1);
            assert_int_equal(tg_hits(&rep, "cross_entropy"), 1);
            gf_fuse_report_free(&rep);
            gf_model_free(t.m);
        }
}

/* ---- LogSoftmax + NegativeLogLikelihoodLoss op ------------------------------------------ */

static struct tg lsm_nll(int64_t opset, const char *shape, const char *tshape, int64_t axis,
                         const char *red, bool weights)
{
    struct tg t = tg_new(opset);
    tg_input(&t, "L", GF_FLOAT, shape);
    tg_input(&t, "T", GF_INT64, tshape);
    if (weights)
        tg_init(&t, "W", GF_FLOAT, "8", NULL);
    set_int(tg_node(&t, "LogSoftmax", "L", "lp"), "axis", axis);
    struct gf_node *n = tg_node(&t, "NegativeLogLikelihoodLoss", weights ? "lp,T,W" : "lp,T",
                                "loss");
    set_str(n, "reduction", red);
    set_int(n, "ignore_index", 5);
    tg_output(&t, "loss");
    return t;
}

static void test_lsm_nll(void **state)
{
    (void)state;
    struct {
        int64_t opset;
        const char *shape, *tshape;
        int64_t axis;
    } cases[] = {
        {13, "6,8", "6", 1}, {13, "6,8", "6", -1}, {12, "6,8", "6", 1},
        {13, "4,8,3", "4,3", 1}, {13, "2,8,3,2", "2,3,2", -3},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        for (int r = 0; r < 3; r++) {
            struct tg t = lsm_nll(cases[c].opset, cases[c].shape, cases[c].tshape, cases[c].axis,
                                  reductions[r], r != 1);
            struct gf_tensor *in[4];
            size_t n = inputs_with(&t, in, "T", INT64_MIN);
            check_with(&t, in, n, NULL, NULL);
            const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
            assert_int_equal(gf_node_attr_int(f, "ignore_index", 0), 5);
            assert_string_equal(gf_node_attr_string(f, "reduction", "?"), reductions[r]);
            gf_model_free(t.m);
        }
}

/* The log-probabilities are also read elsewhere: they become LogP. */
static void test_lsm_nll_logp_read(void **state)
{
    (void)state;
    struct tg t = lsm_nll(13, "6,8", "6", 1, "mean", false);
    tg_node(&t, "Exp", "lp", "p");
    tg_output(&t, "p");
    struct gf_tensor *in[4];
    size_t n = inputs_with(&t, in, "T", INT64_MIN);
    check_with(&t, in, n, NULL, NULL);
    assert_int_equal(t.g->n_nodes, 2);
    const struct gf_node *f = tg_find_op(&t, "SoftmaxCrossEntropy");
    assert_int_equal(f->n_outputs, 2);
    assert_string_equal(f->outputs[1]->name, "lp");
    gf_model_free(t.m);
}

/* Softmax over the batch axis, or (before opset 13) over C and d together. */
static void test_lsm_nll_wrong_axis(void **state)
{
    (void)state;
    struct tg a = lsm_nll(13, "8,8", "8", 0, "mean", false);
    struct tg b = lsm_nll(12, "4,8,3", "4,3", 1, "mean", false);
    struct tg c = lsm_nll(13, "4,8,3", "4,3", 2, "sum", true);
    struct tg *ts[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        struct gf_tensor *in[4];
        size_t n = inputs_with(ts[i], in, "T", INT64_MIN);
        check_with(ts[i], in, n, NULL, NULL);
        assert_int_equal(n_fused(ts[i]), 0);
        assert_int_equal(tg_count(ts[i], "LogSoftmax"), 1);
        gf_model_free(ts[i]->m);
    }
}

/* ---- SoftmaxCrossEntropyLoss's function body --------------------------------------------
 * L [N, C, d...] -> Reshape [0,0,-1] -> Transpose -> LogSoftmax(2) -> Transpose
 * -> Reshape(Shape(L)) -> NLL; `reshapes` false: the 3-D form without them. */
static struct tg sce_body(const char *shape, const char *tshape, bool reshapes, int64_t perm2,
                          bool logp_out)
{
    static const int64_t p021[] = {0, 2, 1}, p012[] = {0, 1, 2};
    struct tg t = tg_new(13);
    tg_input(&t, "L", GF_FLOAT, shape);
    tg_input(&t, "T", GF_INT64, tshape);
    if (reshapes) {
        I64S(&t, "ncd", 0, 0, -1);
        tg_node(&t, "Reshape", "L,ncd", "x3");
        tg_node(&t, "Shape", "L", "ls");
    }
    set_ints(tg_node(&t, "Transpose", reshapes ? "x3" : "L", "ndc"), "perm", 3, p021);
    set_int(tg_node(&t, "LogSoftmax", "ndc", "lsm"), "axis", 2);
    set_ints(tg_node(&t, "Transpose", "lsm", reshapes ? "lncd" : "logp"), "perm", 3,
             perm2 ? p021 : p012);
    if (reshapes)
        tg_node(&t, "Reshape", "lncd,ls", "logp");
    set_str(tg_node(&t, "NegativeLogLikelihoodLoss", "logp,T", "loss"), "reduction", "mean");
    tg_output(&t, "loss");
    if (logp_out)
        tg_output(&t, "logp");
    return t;
}

static void test_sce_body(void **state)
{
    (void)state;
    struct {
        const char *shape, *tshape;
        bool reshapes, logp;
    } cases[] = {
        {"6,8", "6", true, false}, {"2,8,3,2", "2,3,2", true, true}, {"4,8,3", "4,3", false, true},
    };
    for (size_t c = 0; c < 3; c++) {
        struct tg t = sce_body(cases[c].shape, cases[c].tshape, cases[c].reshapes, 1,
                               cases[c].logp);
        struct gf_tensor *in[4];
        size_t n = inputs_with(&t, in, "T", INT64_MIN);
        check_with(&t, in, n, NULL, NULL);
        const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
        assert_int_equal(f->n_outputs, cases[c].logp ? 2 : 1);
        gf_model_free(t.m);
    }
}

/* The transpose back does not swap the axes: the log-probabilities are
 * read in [N, D, C] order. */
static void test_sce_body_wrong_perm(void **state)
{
    (void)state;
    struct tg t = sce_body("4,8,8", "4,8", false, 0, false);
    struct gf_tensor *in[4];
    size_t n = inputs_with(&t, in, "T", INT64_MIN);
    check_with(&t, in, n, NULL, NULL);
    assert_int_equal(n_fused(&t), 0);
    gf_model_free(t.m);
}

/* The [N, D, C] log-probabilities, or the [N, C, D] ones before the
 * reshape back, are a graph output too. */
static void test_sce_body_interior_read(void **state)
{
    (void)state;
    const char *outs[] = {"lsm", "lncd"};
    for (int i = 0; i < 2; i++) {
        struct tg t = sce_body("6,8", "6", true, 1, false);
        tg_output(&t, outs[i]);
        struct gf_tensor *in[4];
        size_t n = inputs_with(&t, in, "T", INT64_MIN);
        check_with(&t, in, n, NULL, NULL);
        assert_int_equal(n_fused(&t), 0);
        gf_model_free(t.m);
    }
}

/* ---- NegativeLogLikelihoodLoss's function body ----------------------------------------------
 * Every test_nllloss_*_expanded body, with a LogSoftmax(axis 1) put in front
 * of its input, is a softmax cross-entropy: it must fuse to one node (its
 * recorded inputs are valid labels, with ignore_index where it has one). */
static const char *const nll_expanded[] = {
    "test_nllloss_NC_expanded", "test_nllloss_NCd1_expanded", "test_nllloss_NCd1_ii_expanded",
    "test_nllloss_NCd1_mean_weight_negative_ii_expanded", "test_nllloss_NCd1_weight_expanded",
    "test_nllloss_NCd1_weight_ii_expanded", "test_nllloss_NCd1d2_expanded",
    "test_nllloss_NCd1d2_no_weight_reduction_mean_ii_expanded",
    "test_nllloss_NCd1d2_reduction_mean_expanded", "test_nllloss_NCd1d2_reduction_sum_expanded",
    "test_nllloss_NCd1d2_with_weight_expanded",
    "test_nllloss_NCd1d2_with_weight_reduction_mean_expanded",
    "test_nllloss_NCd1d2_with_weight_reduction_sum_expanded",
    "test_nllloss_NCd1d2_with_weight_reduction_sum_ii_expanded",
    "test_nllloss_NCd1d2d3_none_no_weight_negative_ii_expanded",
    "test_nllloss_NCd1d2d3_sum_weight_high_ii_expanded",
    "test_nllloss_NCd1d2d3d4d5_mean_weight_expanded",
    "test_nllloss_NCd1d2d3d4d5_none_no_weight_expanded",
};

/* Loads an ONNX node test and its recorded inputs. */
static struct tg load_node_test(const char *dir, const char *test, struct gf_tensor **in,
                                size_t *n_in)
{
    char path[512];
    struct tg t = {0};
    snprintf(path, sizeof(path), "%s/%s/model.onnx", dir, test);
    if (gf_model_load(path, NULL, &t.m) != GF_OK)
        fail_msg("%s: %s", path, gf_last_error());
    t.g = t.m->graph;
    *n_in = 0;
    for (size_t i = 0; i < t.g->n_inputs; i++) {
        if (t.g->inputs[i]->init)
            continue;
        snprintf(path, sizeof(path), "%s/%s/test_data_set_0/input_%zu.pb", dir, test, *n_in);
        if (gf_tensor_load(t.m, path, &in[*n_in]) != GF_OK)
            fail_msg("%s: %s", path, gf_last_error());
        (*n_in)++;
    }
    return t;
}

/* input -> LogSoftmax(axis 1) -> what read input before. */
static void logsoftmax_in_front(struct tg *t, const char *name)
{
    struct gf_value *x = gf_graph_find(t->g, name);
    struct gf_value *lp = gf_graph_new_value(t->g, "logsoftmax_of_input", NULL);
    assert_non_null(x);
    assert_non_null(lp);
    gf_value_replace_uses(x, lp);
    struct gf_node *n = gf_graph_add_node(t->g, "LogSoftmax", "", "lsm", 1, &x, 1, &lp);
    assert_non_null(n);
    set_int(n, "axis", 1);
    gf_node_move_before(n, t->g->first);
    assert_int_equal(gf_graph_infer_shapes(t->g), GF_OK);
}

static void test_nll_expanded_bodies(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(nll_expanded) / sizeof(nll_expanded[0]); i++) {
        struct gf_tensor *in[4];
        size_t n;
        struct tg t = load_node_test(NODE_TESTS, nll_expanded[i], in, &n);
        logsoftmax_in_front(&t, "input");
        check_with(&t, in, n, NULL, NULL);
        if (t.g->n_nodes != 1 || !tg_count(&t, "SoftmaxCrossEntropy"))
            fail_msg("%s: %zu nodes left, expected one SoftmaxCrossEntropy", nll_expanded[i],
                     t.g->n_nodes);
        gf_model_free(t.m);
    }
}

/* The same bodies without the LogSoftmax: an NLL of arbitrary scores is
 * not a cross-entropy. */
static void test_nll_expanded_no_logsoftmax(void **state)
{
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        struct gf_tensor *in[4];
        size_t n;
        struct tg t = load_node_test(NODE_TESTS, nll_expanded[i * 7], in, &n);
        check_with(&t, in, n, NULL, NULL);
        assert_int_equal(n_fused(&t), 0);
        gf_model_free(t.m);
    }
}

/* The softmax cross-entropy bodies as ONNX writes them, before any
 * cleanup (Constant nodes, the Identity to log_prob, Shape nodes). */
static void test_sce_expanded_raw(void **state)
{
    (void)state;
    static const char *const tests[] = {
        "test_sce_mean_expanded", "test_sce_mean_weight_ii_3d_log_prob_expanded",
        "test_sce_NCd1d2d3_none_no_weight_negative_ii_expanded",
        "test_sce_NCd1d2d3d4d5_mean_weight_log_prob_expanded", "test_sce_sum_log_prob_expanded",
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        struct gf_tensor *in[4];
        size_t n;
        struct tg t = load_node_test(NODE_TESTS, tests[i], in, &n);
        check_with(&t, in, n, NULL, NULL);
        assert_int_equal(tg_count(&t, "SoftmaxCrossEntropy"), 1);
        assert_int_equal(tg_count(&t, "NegativeLogLikelihoodLoss"), 0);
        assert_int_equal(tg_count(&t, "LogSoftmax"), 0);
        gf_model_free(t.m);
    }
}

/* A hand-written NLL body (no weights, no ignore_index) on LogSoftmax:
 * `gather_axis` 0 gathers along the batch instead of the classes. */
static struct tg nll_body(int64_t gather_axis, int64_t slice_end, bool gather_out)
{
    struct tg t = tg_new(13);
    tg_input(&t, "L", GF_FLOAT, "8,8");
    tg_input(&t, "T", GF_INT64, "8");
    I64S(&t, "one", 1);
    I64S(&t, "zero", 0);
    I64S(&t, "end", slice_end);
    set_int(tg_node(&t, "LogSoftmax", "L", "lp"), "axis", 1);
    tg_node(&t, "Unsqueeze", "T,one", "t1");
    set_int(tg_node(&t, "GatherElements", "lp,t1", "g"), "axis", gather_axis);
    tg_node(&t, "Neg", "g", "ng");
    tg_node(&t, "Slice", "ng,zero,end,one", "sl");
    tg_node(&t, "Squeeze", "sl,one", "loss");
    tg_output(&t, "loss");
    if (gather_out)
        tg_output(&t, "g");
    return t;
}

static void test_nll_body(void **state)
{
    (void)state;
    struct tg ok = nll_body(1, 1, false), axis0 = nll_body(0, 1, false);
    struct tg end2 = nll_body(1, 2, false), second = nll_body(1, 1, true);
    struct tg *ts[] = {&ok, &axis0, &end2, &second};
    for (int i = 0; i < 4; i++) {
        struct gf_tensor *in[4];
        size_t n = inputs_with(ts[i], in, "T", INT64_MIN);
        check_with(ts[i], in, n, NULL, NULL);
        if (i == 0)
            expect_only(ts[i], "SoftmaxCrossEntropy");
        else
            assert_int_equal(n_fused(ts[i]), 0);
        gf_model_free(ts[i]->m);
    }
}

/* ---- reductions of a fused "none" loss -------------------------------------------------- */

static struct tg sce_reduced(const char *rop, bool weights, bool ii, int64_t keepdims)
{
    struct tg t = sce_op("none", weights, ii, false);
    assert_int_equal(gf_pass_drop_output(t.g, "loss"), GF_OK); /* only the total is returned */
    struct gf_node *r = tg_node(&t, rop, "loss", "total");
    set_int(r, "keepdims", keepdims);
    tg_output(&t, "total");
    return t;
}

static void test_reduce_none(void **state)
{
    (void)state;
    struct {
        const char *op;
        bool w, ii;
        const char *want;
    } cases[] = {
        {"ReduceMean", false, false, "mean"}, {"ReduceSum", true, true, "sum"},
        {"ReduceSum", false, false, "sum"},
    };
    for (size_t c = 0; c < 3; c++) {
        struct tg t = sce_reduced(cases[c].op, cases[c].w, cases[c].ii, 0);
        struct gf_tensor *in[4];
        size_t n = inputs_with(&t, in, "T", INT64_MIN);
        check_with(&t, in, n, NULL, NULL);
        const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
        assert_string_equal(gf_node_attr_string(f, "reduction", "?"), cases[c].want);
        assert_string_equal(f->outputs[0]->name, "total");
        gf_model_free(t.m);
    }
}

/* ReduceMean counts ignored positions (the loss's mean does not), or
 * keeps the reduced dims: the reduction stays a node. */
static void test_reduce_none_refused(void **state)
{
    (void)state;
    struct tg a = sce_reduced("ReduceMean", false, true, 0);
    struct tg b = sce_reduced("ReduceSum", false, false, 1);
    struct tg c = sce_reduced("ReduceMean", true, false, 0);
    struct tg *ts[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        struct gf_tensor *in[4];
        size_t n = inputs_with(ts[i], in, "T", INT64_MIN);
        check_with(ts[i], in, n, NULL, NULL);
        assert_int_equal(ts[i]->g->n_nodes, 2);
        const struct gf_node *f = tg_find_op(ts[i], "SoftmaxCrossEntropy");
        assert_string_equal(gf_node_attr_string(f, "reduction", "?"), "none");
        gf_model_free(ts[i]->m);
    }
}

/* ---- the Hugging Face label shift, and LinearCrossEntropy ---------------------------------- */

enum lm_head { HEAD_NONE, HEAD_MATMUL, HEAD_TRANSPOSE };

/* logits [2, 5, 8] (an input, or H [2, 5, 16] @ W) -> L[:, :-1] / T[:, 1:]
 * (lo_start, lo_end, t_start: the slice bounds) -> Reshape ->
 * SoftmaxCrossEntropyLoss (ignore_index -100, `red`, `weights`). */
static struct tg shifted_at(enum lm_head head, int64_t lo_start, int64_t lo_end, int64_t t_start,
                            const char *red, bool weights)
{
    static const int64_t p10[] = {1, 0};
    struct tg t = tg_new(18);
    tg_input(&t, "labels", GF_INT64, "2,5");
    if (head == HEAD_NONE)
        tg_input(&t, "logits", GF_FLOAT, "2,5,8");
    else
        tg_input(&t, "h", GF_FLOAT, "2,5,16");
    if (head == HEAD_MATMUL) {
        tg_init(&t, "w", GF_FLOAT, "16,8", NULL);
        tg_node(&t, "MatMul", "h,w", "logits");
    } else if (head == HEAD_TRANSPOSE) {
        tg_init(&t, "wt", GF_FLOAT, "8,16", NULL);
        set_ints(tg_node(&t, "Transpose", "wt", "w"), "perm", 2, p10);
        tg_node(&t, "MatMul", "h,w", "logits");
    }
    if (weights)
        tg_init(&t, "cw", GF_FLOAT, "8", NULL);
    I64S(&t, "one", 1);
    I64S(&t, "lo_start", lo_start);
    I64S(&t, "lo_end", lo_end);
    I64S(&t, "t_start", t_start);
    I64S(&t, "big", INT64_MAX);
    I64S(&t, "rows_v", -1, 8);
    I64S(&t, "flat", -1);
    tg_node(&t, "Slice", "logits,lo_start,lo_end,one,one", "ls");
    tg_node(&t, "Slice", "labels,t_start,big,one,one", "ts");
    set_int(tg_node(&t, "Reshape", "ls,rows_v", "lv"), "allowzero", 1);
    tg_node(&t, "Reshape", "ts,flat", "tv");
    struct gf_node *n = tg_node(&t, "SoftmaxCrossEntropyLoss", weights ? "lv,tv,cw" : "lv,tv",
                                "loss");
    set_int(n, "ignore_index", -100);
    set_str(n, "reduction", red);
    tg_output(&t, "loss");
    return t;
}

static struct tg shifted(enum lm_head head, int64_t lo_end, int64_t t_start, const char *red,
                         bool weights)
{
    return shifted_at(head, 0, lo_end, t_start, red, weights);
}

static void run_shifted(struct tg *t, struct gf_fuse_report *rep)
{
    struct gf_tensor *in[4];
    size_t n = inputs_with(t, in, "labels", -100);
    check_with(t, in, n, NULL, rep);
}

static void test_shift(void **state)
{
    (void)state;
    for (int r = 0; r < 3; r++) {
        struct tg t = shifted(HEAD_NONE, r == 2 ? 4 : -1, 1, reductions[r], r == 1);
        tg_output(&t, "logits"); /* an input: nothing to hide */
        run_shifted(&t, NULL);
        const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 1);
        assert_int_equal(gf_node_attr_int(f, "ignore_index", 0), -100);
        assert_string_equal(f->inputs[0]->name, "logits");
        assert_string_equal(f->inputs[1]->name, "labels");
        assert_int_equal(f->n_inputs, r == 1 ? 3 : 2);
        gf_model_free(t.m);
    }
}

/* Not the [:-1] / [1:] pair: the loss fuses unshifted, the slices stay. */
static void test_shift_wrong_slices(void **state)
{
    (void)state;
    struct tg a = shifted(HEAD_NONE, -2, 2, "mean", false);   /* a shift by two */
    struct tg b = shifted(HEAD_NONE, -1, 0, "mean", false);   /* labels not shifted: [0:] */
    struct tg c = shifted_at(HEAD_NONE, 1, INT64_MAX, 1, "sum", false); /* logits [1:] */
    struct tg *ts[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        if (i == 1) { /* T[:, 0:] has 5 positions: compare 4 of them by cutting T too */
            I64S(ts[i], "four", 4);
            struct gf_node *s = ts[i]->g->first;
            while (strcmp(s->op_type, "Slice") || strcmp(s->inputs[0]->name, "labels"))
                s = s->next;
            gf_node_set_input(s, 2, gf_graph_find(ts[i]->g, "four"));
        }
        run_shifted(ts[i], NULL);
        assert_int_equal(tg_count(ts[i], "Slice"), 2);
        const struct gf_node *f = tg_find_op(ts[i], "SoftmaxCrossEntropy");
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 0);
        gf_model_free(ts[i]->m);
    }
}

/* The flattened logits are read elsewhere. */
static void test_shift_second_user(void **state)
{
    (void)state;
    struct tg t = shifted(HEAD_NONE, -1, 1, "mean", false);
    tg_output(&t, "lv");
    run_shifted(&t, NULL);
    assert_int_equal(gf_node_attr_int(tg_find_op(&t, "SoftmaxCrossEntropy"), "shift", 0), 0);
    assert_int_equal(tg_count(&t, "Slice"), 2);
    gf_model_free(t.m);
}

/* Logits [2, 4, 8] and labels [3, 3]: 2·3 rows either way, so the unfused
 * graph runs, but B and S differ and the shift would pair other positions. */
static void test_shift_shape_mismatch(void **state)
{
    (void)state;
    struct tg t = shifted(HEAD_NONE, -1, 1, "mean", false);
    struct gf_dim l[3] = {{.value = 2}, {.value = 4}, {.value = 8}};
    struct gf_dim b[2] = {{.value = 3}, {.value = 3}};
    gf_value_set_tensor_type(gf_graph_find(t.g, "logits"), GF_FLOAT, 3, l);
    gf_value_set_tensor_type(gf_graph_find(t.g, "labels"), GF_INT64, 2, b);
    run_shifted(&t, NULL);
    assert_int_equal(gf_node_attr_int(tg_find_op(&t, "SoftmaxCrossEntropy"), "shift", 0), 0);
    assert_int_equal(tg_count(&t, "Slice"), 2);
    gf_model_free(t.m);
}

static void test_lce_shift(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        struct tg t = shifted(k == 1 ? HEAD_TRANSPOSE : HEAD_MATMUL, -1, 1, reductions[k],
                              false);
        struct gf_fuse_report rep;
        run_shifted(&t, &rep);
        const struct gf_node *f = expect_only(&t, "LinearCrossEntropy");
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 1);
        assert_int_equal(gf_node_attr_int(f, "transB", 0), k == 1);
        assert_string_equal(f->inputs[1]->name, k == 1 ? "wt" : "w");
        assert_string_equal(gf_node_attr_string(f, "reduction", "?"), reductions[k]);
        assert_int_equal(tg_hits(&rep, "linear_cross_entropy"), 1);
        assert_int_equal(tg_hits(&rep, "cross_entropy_shift"), 1);
        gf_fuse_report_free(&rep);
        gf_model_free(t.m);
    }
}

/* transformers' ForCausalLMLoss: logits [2, 5, 8] (an input, or H @ W)
 * flattened; labels Pad(pads, value) -> [:, 1:] -> flattened ->
 * SoftmaxCrossEntropyLoss (ignore_index -100, `red`). */
static struct tg padded(enum lm_head head, const int64_t pads[4], int64_t value, const char *red)
{
    struct tg t = tg_new(18);
    tg_input(&t, "labels", GF_INT64, "2,5");
    if (head == HEAD_NONE) {
        tg_input(&t, "logits", GF_FLOAT, "2,5,8");
    } else {
        tg_input(&t, "h", GF_FLOAT, "2,5,16");
        tg_init(&t, "w", GF_FLOAT, "16,8", NULL);
        tg_node(&t, "MatMul", "h,w", "logits");
    }
    I64S(&t, "pads", pads[0], pads[1], pads[2], pads[3]);
    double fill = (double)value;
    tg_init(&t, "fill", GF_INT64, "", &fill);
    I64S(&t, "one", 1);
    I64S(&t, "big", INT64_MAX);
    I64S(&t, "rows_v", -1, 8);
    I64S(&t, "flat", -1);
    tg_node(&t, "Reshape", "logits,rows_v", "lv");
    tg_node(&t, "Pad", "labels,pads,fill", "tp");
    tg_node(&t, "Slice", "tp,one,big,one,one", "ts");
    tg_node(&t, "Reshape", "ts,flat", "tv");
    struct gf_node *n = tg_node(&t, "SoftmaxCrossEntropyLoss", "lv,tv", "loss");
    set_int(n, "ignore_index", -100);
    set_str(n, "reduction", red);
    tg_output(&t, "loss");
    return t;
}

static const int64_t pad_end1[4] = {0, 0, 0, 1};

static void test_pad_shift(void **state)
{
    (void)state;
    for (int r = 0; r < 3; r++) {
        if (strcmp(reductions[r], "none") == 0)
            continue; /* [B*S] against [B*(S-1)]... per-position output: stays */
        struct tg t = padded(HEAD_NONE, pad_end1, -100, reductions[r]);
        tg_output(&t, "logits");
        run_shifted(&t, NULL);
        const struct gf_node *f = expect_only(&t, "SoftmaxCrossEntropy");
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 1);
        assert_string_equal(f->inputs[0]->name, "logits");
        assert_string_equal(f->inputs[1]->name, "labels");
        gf_model_free(t.m);
    }
}

static void test_lce_pad_shift(void **state)
{
    (void)state;
    struct tg t = padded(HEAD_MATMUL, pad_end1, -100, "mean");
    struct gf_fuse_report rep;
    run_shifted(&t, &rep);
    const struct gf_node *f = expect_only(&t, "LinearCrossEntropy");
    assert_int_equal(gf_node_attr_int(f, "shift", 0), 1);
    assert_int_equal(tg_hits(&rep, "cross_entropy_shift"), 1);
    assert_int_equal(tg_hits(&rep, "linear_cross_entropy"), 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* A pad value that is not the ignore index (the last position then counts),
 * or pads that are not one column after the sequence: no shift. */
static void test_pad_shift_refused(void **state)
{
    (void)state;
    static const int64_t before[4] = {0, 1, 0, 0}, two[4] = {0, 0, 0, 2};
    struct tg a = padded(HEAD_NONE, pad_end1, 0, "mean");
    struct tg b = padded(HEAD_NONE, before, -100, "mean");
    struct tg c = padded(HEAD_NONE, two, -100, "sum");
    struct tg *ts[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        if (i == 2) { /* [:, 1:] of S+2 columns has S+1: cut one more to stay runnable */
            I64S(ts[i], "six", 6);
            struct gf_node *sl = ts[i]->g->first;
            while (strcmp(sl->op_type, "Slice"))
                sl = sl->next;
            gf_node_set_input(sl, 2, gf_graph_find(ts[i]->g, "six"));
        }
        run_shifted(ts[i], NULL);
        assert_int_equal(tg_count(ts[i], "Pad"), 1);
        const struct gf_node *f = tg_find_op(ts[i], "SoftmaxCrossEntropy");
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 0);
        gf_model_free(ts[i]->m);
    }
}

/* The logits are a graph output: MatMul + SoftmaxCrossEntropy(shift 1);
 * once the output is dropped, one LinearCrossEntropy. */
static void test_lce_logits_output(void **state)
{
    (void)state;
    struct tg t = shifted(HEAD_MATMUL, -1, 1, "mean", false);
    tg_output(&t, "logits");
    run_shifted(&t, NULL);
    assert_int_equal(t.g->n_nodes, 2);
    assert_int_equal(tg_count(&t, "MatMul"), 1);
    assert_int_equal(gf_node_attr_int(tg_find_op(&t, "SoftmaxCrossEntropy"), "shift", 0), 1);
    assert_int_equal(gf_pass_drop_output(t.g, "logits"), GF_OK);
    run_shifted(&t, NULL);
    expect_only(&t, "LinearCrossEntropy");
    gf_model_free(t.m);
}

/* The logits are read by another node; or the loss has class weights
 * (LinearCrossEntropy has none). */
static void test_lce_refused(void **state)
{
    (void)state;
    struct tg a = shifted(HEAD_MATMUL, -1, 1, "mean", false);
    tg_node(&a, "Neg", "logits", "neg");
    tg_output(&a, "neg");
    struct tg b = shifted(HEAD_MATMUL, -1, 1, "sum", true);
    struct tg *ts[] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        run_shifted(ts[i], NULL);
        assert_int_equal(tg_count(ts[i], "LinearCrossEntropy"), 0);
        assert_int_equal(tg_count(ts[i], "MatMul"), 1);
        assert_int_equal(tg_count(ts[i], "SoftmaxCrossEntropy"), 1);
        gf_model_free(ts[i]->m);
    }
}

/* 2-D heads: Gemm(H, Wt, b, transB 1) (alpha 2: refused), MatMul + Add(b). */
static struct tg head_2d(const char *form, float alpha)
{
    struct tg t = tg_new(13);
    tg_input(&t, "h", GF_FLOAT, "6,16");
    tg_input(&t, "T", GF_INT64, "6");
    tg_init(&t, "b", GF_FLOAT, "8", NULL);
    if (strcmp(form, "gemm") == 0) {
        tg_init(&t, "wt", GF_FLOAT, "8,16", NULL);
        struct gf_node *g = tg_node(&t, "Gemm", "h,wt,b", "logits");
        set_int(g, "transB", 1);
        assert_int_equal(gf_node_set_attr_float(g, "alpha", alpha), GF_OK);
    } else {
        tg_init(&t, "w", GF_FLOAT, "16,8", NULL);
        tg_node(&t, "MatMul", "h,w", "mm");
        tg_node(&t, "Add", "b,mm", "logits");
    }
    struct gf_node *n = tg_node(&t, "SoftmaxCrossEntropyLoss", "logits,T", "loss");
    set_int(n, "ignore_index", 3);
    tg_output(&t, "loss");
    return t;
}

static void test_lce_2d(void **state)
{
    (void)state;
    const char *forms[] = {"gemm", "matmul+add"};
    for (int i = 0; i < 2; i++) {
        struct tg t = head_2d(forms[i], 1.0f);
        struct gf_tensor *in[4];
        size_t n = inputs_with(&t, in, "T", INT64_MIN);
        check_with(&t, in, n, NULL, NULL);
        const struct gf_node *f = expect_only(&t, "LinearCrossEntropy");
        assert_int_equal(f->n_inputs, 4);
        assert_string_equal(f->inputs[3]->name, "b");
        assert_int_equal(gf_node_attr_int(f, "transB", 0), i == 0);
        assert_int_equal(gf_node_attr_int(f, "shift", 0), 0);
        gf_model_free(t.m);
    }
    struct tg t = head_2d("gemm", 2.0f);
    struct gf_tensor *in[4];
    size_t n = inputs_with(&t, in, "T", INT64_MIN);
    check_with(&t, in, n, NULL, NULL);
    assert_int_equal(tg_count(&t, "LinearCrossEntropy"), 0);
    assert_int_equal(tg_count(&t, "Gemm"), 1);
    gf_model_free(t.m);
}

/* Logits [4, 3, 8] = H @ W without a shift: the loss's class axis is 1
 * (size 3), not the projection's last axis. */
static void test_lce_class_axis(void **state)
{
    (void)state;
    struct tg t = tg_new(13);
    tg_input(&t, "h", GF_FLOAT, "4,3,16");
    tg_input(&t, "T", GF_INT64, "4,8");
    tg_init(&t, "w", GF_FLOAT, "16,8", NULL);
    tg_node(&t, "MatMul", "h,w", "logits");
    tg_node(&t, "SoftmaxCrossEntropyLoss", "logits,T", "loss");
    tg_output(&t, "loss");
    struct gf_tensor *in[4];
    size_t n = inputs_with(&t, in, "T", INT64_MIN);
    labels_mod(input_named(in, n, "T"), 3);
    check_with(&t, in, n, NULL, NULL);
    assert_int_equal(tg_count(&t, "LinearCrossEntropy"), 0);
    assert_int_equal(tg_count(&t, "SoftmaxCrossEntropy"), 1);
    gf_model_free(t.m);
}

/* ---- JSD ------------------------------------------------------------------------------------ */

/* Liger Kernel's torch reference exported by torch.onnx (tests/data/jsd/export.py):
 * after cleanup each is one JSD node, computing what the unfused graph and
 * PyTorch eager computed.  The beta 1 exports fuse as beta 0 with x and y
 * swapped (the same function). */
static void test_jsd_exports(void **state)
{
    (void)state;
    static const struct {
        const char *dir;
        double beta;
        bool labels, swapped;
    } cases[] = {
        {"0.5_legacy", 0.5, false, false}, {"0.5_dynamo_label", 0.5, true, false},
        {"0.25_dynamo", 0.25, false, false}, {"0.75_legacy_label", 0.75, true, false},
        {"0_legacy_label", 0.0, true, false}, {"0_dynamo", 0.0, false, false},
        {"1_dynamo_label", 0.0, true, true}, {"1_legacy", 0.0, false, true},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct gf_tensor *in[4], *torch, *got[2];
        char path[256];
        size_t n;
        struct tg t = load_node_test(JSD_DATA, cases[c].dir, in, &n);
        struct gf_cleanup_opts co = {.eval = gf_exec_eval_node};
        assert_int_equal(gf_pass_cleanup(t.g, &co, NULL), GF_OK);
        check_with(&t, in, n, NULL, NULL);
        const struct gf_node *f = expect_only(&t, "JSD");
        assert_true(fabs(gf_node_attr_float(f, "beta", -1.0f) - cases[c].beta) < 1e-7);
        assert_int_equal(f->n_inputs, cases[c].labels ? 3 : 2);
        assert_string_equal(f->inputs[0]->name, cases[c].swapped ? "y" : "x");
        if (cases[c].labels)
            assert_int_equal(gf_node_attr_int(f, "ignore_index", 0), -100);
        snprintf(path, sizeof(path), JSD_DATA "/%s/test_data_set_0/output_0.pb", cases[c].dir);
        assert_int_equal(gf_tensor_load(t.m, path, &torch), GF_OK);
        tg_run(&t, in, n, got, 2);
        double worst;
        if (!gf_tensor_allclose(got[0], torch, 1e-5, 1e-6, &worst))
            fail_msg("%s: fused JSD differs from PyTorch by %g", cases[c].dir, worst);
        gf_model_free(t.m);
    }
}

/* x, y [4, 8]: M = beta·P + (1 - beta)·Q, row = beta·Σ P(y - log M) + cq·Σ Q(x - log M)
 * (row sums over `axis`), loss = Σ row / 4. */
static struct tg jsd_graph(double beta, double cq, int64_t axis, bool logm_out)
{
    double mq = 1.0 - beta;
    struct tg t = tg_new(17);
    char ax[32], in[64];
    snprintf(ax, sizeof(ax), "$%lld", (long long)axis);
    tg_input(&t, "x", GF_FLOAT, "4,8");
    tg_input(&t, "y", GF_FLOAT, "4,8");
    tg_node(&t, "Exp", "x", "q");
    tg_node(&t, "Exp", "y", "p");
    tg_init(&t, "beta", GF_FLOAT, "", &beta);
    tg_init(&t, "cq", GF_FLOAT, "", &cq);
    tg_init(&t, "mq", GF_FLOAT, "", &mq);
    tg_node(&t, "Mul", "p,beta", "bp");
    tg_node(&t, "Mul", "mq,q", "bq");
    tg_node(&t, "Add", "bp,bq", "m");
    tg_node(&t, "Log", "m", "lm");
    tg_node(&t, "Sub", "y,lm", "sp");
    tg_node(&t, "Mul", "p,sp", "kp");
    snprintf(in, sizeof(in), "kp,%s", ax);
    set_int(tg_node(&t, "ReduceSum", in, "rp"), "keepdims", 0);
    tg_node(&t, "Mul", "rp,beta", "cp");
    tg_node(&t, "Sub", "x,lm", "sq");
    tg_node(&t, "Mul", "sq,q", "kq");
    snprintf(in, sizeof(in), "kq,%s", ax);
    set_int(tg_node(&t, "ReduceSum", in, "rq"), "keepdims", 0);
    tg_node(&t, "Mul", "rq,cq", "cqr");
    tg_node(&t, "Add", "cp,cqr", "row");
    tg_node(&t, "Div", "row,#4", "d");
    set_int(tg_node(&t, "ReduceSum", "d", "loss"), "keepdims", 0);
    tg_output(&t, "loss");
    if (logm_out)
        tg_output(&t, "lm");
    return t;
}

static void test_jsd_mixture(void **state)
{
    (void)state;
    struct tg t = jsd_graph(0.3, 0.7, -1, false);
    tg_check_fused(&t, NULL, NULL);
    const struct gf_node *f = expect_only(&t, "JSD");
    assert_true(fabs(gf_node_attr_float(f, "beta", -1.0f) - 0.3) < 1e-7);
    gf_model_free(t.m);
}

/* The Q term's KL weighted 0.6 instead of 1 - 0.3; row sums over the rows
 * (axis 0); log M also a graph output. */
static void test_jsd_refused(void **state)
{
    (void)state;
    struct tg a = jsd_graph(0.3, 0.6, -1, false), b = jsd_graph(0.3, 0.7, 0, false);
    struct tg c = jsd_graph(0.3, 0.7, 1, true);
    struct tg *ts[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        tg_check_fused(ts[i], NULL, NULL);
        assert_int_equal(n_fused(ts[i]), 0);
        gf_model_free(ts[i]->m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sce_op),
        cmocka_unit_test(test_lsm_nll),
        cmocka_unit_test(test_lsm_nll_logp_read),
        cmocka_unit_test(test_lsm_nll_wrong_axis),
        cmocka_unit_test(test_sce_body),
        cmocka_unit_test(test_sce_body_wrong_perm),
        cmocka_unit_test(test_sce_body_interior_read),
        cmocka_unit_test(test_nll_expanded_bodies),
        cmocka_unit_test(test_nll_expanded_no_logsoftmax),
        cmocka_unit_test(test_sce_expanded_raw),
        cmocka_unit_test(test_nll_body),
        cmocka_unit_test(test_reduce_none),
        cmocka_unit_test(test_reduce_none_refused),
        cmocka_unit_test(test_shift),
        cmocka_unit_test(test_shift_wrong_slices),
        cmocka_unit_test(test_shift_second_user),
        cmocka_unit_test(test_shift_shape_mismatch),
        cmocka_unit_test(test_lce_shift),
        cmocka_unit_test(test_pad_shift),
        cmocka_unit_test(test_lce_pad_shift),
        cmocka_unit_test(test_pad_shift_refused),
        cmocka_unit_test(test_lce_logits_output),
        cmocka_unit_test(test_lce_refused),
        cmocka_unit_test(test_lce_2d),
        cmocka_unit_test(test_lce_class_axis),
        cmocka_unit_test(test_jsd_exports),
        cmocka_unit_test(test_jsd_mixture),
        cmocka_unit_test(test_jsd_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
