/*
 * Unit tests of the cleanup passes (passes/cleanup.c) and the constant
 * evaluator (executor/eval.c): a positive and a negative case per rewrite,
 * then semantics: cleaned graphs give the outputs the uncleaned graph (and,
 * for the bundled models, PyTorch) gives, also on input shapes other than
 * the recorded ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "gf_exec.h"
#include "gf_passes.h"

static const struct gf_cleanup_opts opts = {.eval = gf_exec_eval_node};

/* ---- building graphs ------------------------------------------------------- */

static struct gf_model *new_model(int64_t opset)
{
    struct gf_model *m = gf_model_new(8, "t");
    assert_non_null(m);
    assert_int_equal(gf_model_set_opset(m, "", opset), GF_OK);
    return m;
}

/* Dims from "2,batch,4" (a name is a symbolic dim; "" is a scalar). */
static int parse_dims(const char *spec, struct gf_dim *d, struct gf_model *m)
{
    char buf[128], *p = buf, *tok;
    int r = 0;
    snprintf(buf, sizeof(buf), "%s", spec);
    while (*spec && r < 8 && (tok = strsep(&p, ","))) {
        char *end;
        long long v = strtoll(tok, &end, 10);
        d[r++] = *end ? (struct gf_dim){-1, gf_model_strdup(m, tok), NULL}
                      : (struct gf_dim){v, NULL, NULL};
    }
    return r;
}

static struct gf_value *input(struct gf_model *m, const char *name, enum gf_dtype dt,
                              const char *dims)
{
    struct gf_dim d[8];
    int r = parse_dims(dims, d, m);
    struct gf_value *v = gf_graph_new_value(m->graph, name, NULL);
    assert_non_null(v);
    gf_value_set_tensor_type(v, dt, r, d);
    assert_int_equal(gf_graph_add_input(m->graph, v), GF_OK);
    return v;
}

static struct gf_tensor *tensor(struct gf_model *m, enum gf_dtype dt, const char *dims,
                                const void *data)
{
    struct gf_dim d[8];
    int64_t v[8];
    int r = parse_dims(dims, d, m);
    for (int i = 0; i < r; i++)
        v[i] = d[i].value;
    struct gf_tensor *t = gf_tensor_new(m, NULL, dt, r, v, data);
    assert_non_null(t);
    return t;
}

static struct gf_value *init(struct gf_model *m, const char *name, enum gf_dtype dt,
                             const char *dims, const void *data)
{
    struct gf_value *v = gf_graph_add_initializer(m->graph, name, tensor(m, dt, dims, data));
    assert_non_null(v);
    return v;
}

/* Value by name; a new one when absent ("" is an omitted input). */
static struct gf_value *val(struct gf_graph *g, const char *name)
{
    if (!name[0])
        return NULL;
    struct gf_value *v = gf_graph_find(g, name);
    return v ? v : gf_graph_new_value(g, name, NULL);
}

/* Node `op` reading the comma-separated inputs, writing the outputs. */
static struct gf_node *node(struct gf_graph *g, const char *op, const char *ins,
                            const char *outs)
{
    struct gf_value *vi[8], *vo[8];
    size_t ni = 0, no = 0;
    char buf[256], *p, *tok;
    snprintf(buf, sizeof(buf), "%s", ins);
    for (p = buf; ins[0] && ni < 8 && (tok = strsep(&p, ","));)
        vi[ni++] = val(g, tok);
    snprintf(buf, sizeof(buf), "%s", outs);
    for (p = buf; outs[0] && no < 8 && (tok = strsep(&p, ","));)
        vo[no++] = val(g, tok);
    struct gf_node *n = gf_graph_add_node(g, op, "", NULL, ni, vi, no, vo);
    assert_non_null(n);
    return n;
}

static struct gf_node *constant(struct gf_model *m, const char *out, enum gf_dtype dt,
                                const char *dims, const void *data)
{
    struct gf_node *n = node(m->graph, "Constant", "", out);
    assert_int_equal(gf_node_set_attr_tensor(n, "value", tensor(m, dt, dims, data)), GF_OK);
    return n;
}

static void output(struct gf_model *m, const char *name)
{
    assert_int_equal(gf_graph_add_output(m->graph, gf_graph_find(m->graph, name)), GF_OK);
}

static int count_op(const struct gf_graph *g, const char *op)
{
    int n = 0;
    for (const struct gf_node *nd = g->first; nd; nd = nd->next)
        n += strcmp(nd->op_type, op) == 0;
    return n;
}

static const struct gf_tensor *init_of(struct gf_model *m, const char *name)
{
    const struct gf_value *v = gf_graph_find(m->graph, name);
    assert_non_null(v);
    return v->init;
}

static void cleanup(struct gf_model *m, const struct gf_cleanup_opts *o,
                    struct gf_cleanup_stats *st)
{
    assert_int_equal(gf_pass_cleanup(m->graph, o, st), GF_OK);
    assert_int_equal(gf_graph_validate(m->graph), GF_OK);
}

/* ---- running graphs ------------------------------------------------------------ */

/* Runs m on inputs in[]; the outputs are copied into `keep`'s arena. */
static size_t run(struct gf_model *m, struct gf_model *keep, struct gf_tensor **in, size_t n_in,
                  struct gf_tensor **out)
{
    struct gf_session *s;
    struct gf_tensor **res;
    size_t n;
    struct gf_exec_opts o = {.n_threads = 1};
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    if (gf_session_run(s, n_in, in, &res, &n) != GF_OK)
        fail_msg("run: %s", gf_last_error());
    for (size_t i = 0; i < n; i++) {
        out[i] = gf_tensor_new(keep, res[i]->name, res[i]->dtype, res[i]->rank, res[i]->dims,
                               res[i]->data);
        assert_non_null(out[i]);
    }
    gf_session_free(s);
    return n;
}

static void assert_close(const struct gf_tensor *got, const struct gf_tensor *want, double atol)
{
    double worst;
    if (!gf_tensor_allclose(got, want, 0, atol, &worst))
        fail_msg("output '%s' differs from the reference by %g", want->name, worst);
}

/* Builds a model twice, cleans one copy, and checks both give the same
 * outputs on in[] (built in the `keep` model). */
static void assert_same_outputs(struct gf_model *(*build)(void), struct gf_tensor **in,
                                size_t n_in, int *nodes_after)
{
    struct gf_model *ref = build(), *m = build(), *keep = gf_model_new(8, "keep");
    struct gf_tensor *want[8], *got[8];
    cleanup(m, &opts, NULL);
    size_t nw = run(ref, keep, in, n_in, want), ng = run(m, keep, in, n_in, got);
    assert_int_equal(nw, ng);
    for (size_t i = 0; i < nw; i++) {
        assert_string_equal(got[i]->name, want[i]->name);
        assert_close(got[i], want[i], 0);
    }
    if (nodes_after)
        *nodes_after = (int)m->graph->n_nodes;
    gf_model_free(ref);
    gf_model_free(m);
    gf_model_free(keep);
}

/* ---- constant folding -------------------------------------------------------------- */

/* y = x + (c1 + c2) * (c1 + c2), c1 a Constant node, c2 an initializer. */
static struct gf_model *chain_model(void)
{
    struct gf_model *m = new_model(17);
    float c1[2] = {1, 2}, c2[2] = {0.5f, -4};
    input(m, "x", GF_FLOAT, "2");
    constant(m, "c1", GF_FLOAT, "2", c1);
    init(m, "c2", GF_FLOAT, "2", c2);
    node(m->graph, "Add", "c1,c2", "a");
    node(m->graph, "Mul", "a,a", "b");
    node(m->graph, "Add", "x,b", "y");
    output(m, "y");
    return m;
}

static void test_fold_chain(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    size_t n;
    assert_int_equal(gf_pass_fold_constants(m->graph, &opts, &n), GF_OK);
    assert_int_equal(n, 3); /* Constant, Add, Mul */
    assert_int_equal(m->graph->n_nodes, 1);
    const struct gf_tensor *b = init_of(m, "b");
    assert_non_null(b);
    assert_int_equal(b->dtype, GF_FLOAT);
    assert_int_equal(b->nelem, 2);
    assert_true(((float *)b->data)[0] == 2.25f && ((float *)b->data)[1] == 4.0f);
    assert_string_equal(m->graph->first->op_type, "Add");
    assert_ptr_equal(m->graph->first->inputs[1], gf_graph_find(m->graph, "b"));
    gf_model_free(m);

    struct gf_model *keep = gf_model_new(8, "keep");
    struct gf_tensor *x = tensor(keep, GF_FLOAT, "2", (float[]){10, 20});
    int after;
    assert_same_outputs(chain_model, &x, 1, &after);
    assert_int_equal(after, 1);
    gf_model_free(keep);
}

/* Without an evaluator only Constant nodes become initializers. */
static void test_fold_without_eval(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    size_t n;
    assert_int_equal(gf_pass_fold_constants(m->graph, NULL, &n), GF_OK);
    assert_int_equal(n, 1);
    assert_non_null(init_of(m, "c1"));
    assert_int_equal(count_op(m->graph, "Add"), 2);
    assert_int_equal(count_op(m->graph, "Mul"), 1);
    gf_model_free(m);
}

/* Ops the evaluator cannot run stay, their constant inputs folded. */
static void test_fold_unknown_op(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float c[2] = {1, 2};
    assert_int_equal(gf_model_set_opset(m, "com.example", 1), GF_OK);
    constant(m, "c", GF_FLOAT, "2", c);
    struct gf_value *cv = gf_graph_find(m->graph, "c"), *y = val(m->graph, "y");
    assert_non_null(gf_graph_add_node(m->graph, "Mystery", "com.example", NULL, 1, &cv, 1, &y));
    output(m, "y");
    struct gf_cleanup_stats st;
    cleanup(m, &opts, &st);
    assert_int_equal(st.folded, 1); /* the Constant */
    assert_int_equal(m->graph->n_nodes, 1);
    assert_string_equal(m->graph->first->op_type, "Mystery");
    assert_non_null(init_of(m, "c"));
    gf_model_free(m);
}

/* Graph inputs are not constants, even with a default initializer; only
 * their declared static shape is known (the executor enforces it). */
static void test_no_fold_graph_input(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float c[2] = {1, 2}, w[2] = {3, 4};
    int64_t shape[1] = {2};
    input(m, "x", GF_FLOAT, "2");
    init(m, "c", GF_FLOAT, "2", c);
    struct gf_value *wv = init(m, "w", GF_FLOAT, "2", w);
    struct gf_value *sv = init(m, "s", GF_INT64, "1", shape);
    assert_int_equal(gf_graph_add_input(m->graph, wv), GF_OK); /* overridable defaults */
    assert_int_equal(gf_graph_add_input(m->graph, sv), GF_OK);
    node(m->graph, "Add", "x,c", "y");
    node(m->graph, "Neg", "w", "z");
    node(m->graph, "Shape", "w", "ws");
    node(m->graph, "Reshape", "x,s", "xr"); /* [2] with the default, not always */
    node(m->graph, "Relu", "xr", "xo");
    output(m, "y");
    output(m, "z");
    output(m, "ws");
    output(m, "xo");
    size_t n;
    assert_int_equal(gf_pass_fold_constants(m->graph, &opts, &n), GF_OK);
    assert_int_equal(n, 1); /* Shape(w) */
    assert_int_equal(gf_tensor_get_i64(init_of(m, "ws"), 0), 2);
    cleanup(m, &opts, NULL);
    assert_int_equal(m->graph->n_nodes, 4);
    assert_int_equal(count_op(m->graph, "Reshape"), 1);
    assert_non_null(init_of(m, "w")); /* a graph input keeps its initializer */
    assert_non_null(init_of(m, "s"));
    gf_model_free(m);
}

/* The fold limit keeps large results as nodes. */
static void test_fold_limit(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    int64_t shape[2] = {64, 64};
    init(m, "s", GF_INT64, "2", shape);
    node(m->graph, "ConstantOfShape", "s", "y");
    output(m, "y");
    struct gf_cleanup_opts small = {.eval = gf_exec_eval_node, .fold_limit = 1024};
    size_t n;
    assert_int_equal(gf_pass_fold_constants(m->graph, &small, &n), GF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(gf_pass_fold_constants(m->graph, &opts, &n), GF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(init_of(m, "y")->nelem, 64 * 64);
    assert_int_equal(m->graph->n_nodes, 0);
    assert_string_equal(m->graph->outputs[0]->name, "y");
    gf_model_free(m);
}

/* Shape / Size of a static shape fold; of a symbolic one they stay, but a
 * static dim taken out of a partly symbolic shape folds. */
static void test_fold_shape(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    int64_t one = 1, zero = 0;
    input(m, "xs", GF_FLOAT, "2,3");
    input(m, "xd", GF_FLOAT, "batch,3");
    init(m, "one", GF_INT64, "", &one);
    init(m, "zero", GF_INT64, "", &zero);
    node(m->graph, "Shape", "xs", "s_static");
    node(m->graph, "Size", "xs", "n_static");
    node(m->graph, "Shape", "xd", "s_dyn");
    node(m->graph, "Size", "xd", "n_dyn");
    node(m->graph, "Gather", "s_dyn,one", "d1");  /* 3: static */
    node(m->graph, "Gather", "s_dyn,zero", "d0"); /* batch: symbolic */
    const char *outs[] = {"s_static", "n_static", "s_dyn", "n_dyn", "d1", "d0"};
    for (int i = 0; i < 6; i++)
        output(m, outs[i]);
    cleanup(m, &opts, NULL);
    const struct gf_tensor *s = init_of(m, "s_static");
    assert_non_null(s);
    assert_int_equal(s->nelem, 2);
    assert_int_equal(gf_tensor_get_i64(s, 0), 2);
    assert_int_equal(gf_tensor_get_i64(s, 1), 3);
    assert_int_equal(gf_tensor_get_i64(init_of(m, "n_static"), 0), 6);
    assert_int_equal(gf_tensor_get_i64(init_of(m, "d1"), 0), 3);
    assert_null(init_of(m, "s_dyn"));
    assert_null(init_of(m, "n_dyn"));
    assert_null(init_of(m, "d0"));
    assert_int_equal(count_op(m->graph, "Shape"), 1);
    assert_int_equal(count_op(m->graph, "Size"), 1);
    assert_int_equal(count_op(m->graph, "Gather"), 1);
    for (int i = 0; i < 6; i++) /* graph outputs keep their names and order */
        assert_string_equal(m->graph->outputs[i]->name, outs[i]);
    gf_model_free(m);
}

/* A static shape an exporter declared for an intermediate value (the size
 * of the traced example) does not make a symbolic shape static. */
static void test_no_fold_declared_dims(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_dim traced[2] = {{2, NULL, NULL}, {4, NULL, NULL}};
    input(m, "x", GF_FLOAT, "batch,4");
    node(m->graph, "Relu", "x", "r");
    gf_value_set_tensor_type(gf_graph_find(m->graph, "r"), GF_FLOAT, 2, traced);
    gf_graph_find(m->graph, "r")->has_value_info = true;
    node(m->graph, "Shape", "r", "s");
    output(m, "s");
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Shape"), 1);
    assert_null(init_of(m, "s"));
    /* the model's own types are left as they were */
    assert_int_equal(gf_graph_find(m->graph, "r")->type.dims[0].value, 2);
    gf_model_free(m);
}

/* A folded value that is a graph output keeps its name and survives a
 * save / load round trip. */
static void test_fold_output_roundtrip(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17), *back;
    float c[3] = {1, -2, 3};
    constant(m, "c", GF_FLOAT, "3", c);
    node(m->graph, "Relu", "c", "y");
    output(m, "y");
    cleanup(m, &opts, NULL);
    assert_int_equal(m->graph->n_nodes, 0);
    uint8_t *buf;
    size_t len;
    assert_int_equal(gf_model_save_buffer(m, &buf, &len), GF_OK);
    assert_int_equal(gf_model_load_buffer(buf, len, NULL, NULL, &back), GF_OK);
    free(buf);
    assert_string_equal(back->graph->outputs[0]->name, "y");
    assert_int_equal(back->graph->n_inits, 1); /* c is dead and gone */
    const struct gf_tensor *y = init_of(back, "y");
    assert_true(((float *)y->data)[0] == 1 && ((float *)y->data)[1] == 0 &&
                ((float *)y->data)[2] == 3);
    gf_model_free(back);
    gf_model_free(m);
}

/* ---- the evaluator --------------------------------------------------------------------- */

static void test_eval_node(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float a[4] = {1, 2, 3, 4}, b[2] = {1, -1};
    init(m, "a", GF_FLOAT, "2,2", a);
    init(m, "b", GF_FLOAT, "2,1", b);
    struct gf_node *mm = node(m->graph, "MatMul", "a,b", "y");
    struct gf_tensor *in[2] = {(struct gf_tensor *)init_of(m, "a"),
                               (struct gf_tensor *)init_of(m, "b")}, *out[1];
    assert_int_equal(gf_exec_eval_node(m, mm, in, out), GF_OK);
    assert_int_equal(out[0]->rank, 2);
    assert_int_equal(out[0]->dims[0], 2);
    assert_int_equal(out[0]->dims[1], 1);
    assert_true(((float *)out[0]->data)[0] == -1 && ((float *)out[0]->data)[1] == -1);

    /* an op without a kernel, and a random one */
    struct gf_node *u = node(m->graph, "NoSuchOp", "a", "u");
    assert_int_equal(gf_exec_eval_node(m, u, in, out), GF_ERR_UNSUPPORTED);
    assert_null(out[0]);
    bool yes = true;
    float r = 0.5f;
    init(m, "ratio", GF_FLOAT, "", &r);
    init(m, "train", GF_BOOL, "", &yes);
    struct gf_node *d = node(m->graph, "Dropout", "a,ratio,train", "dy");
    struct gf_tensor *din[3] = {in[0], (struct gf_tensor *)init_of(m, "ratio"),
                                (struct gf_tensor *)init_of(m, "train")};
    assert_int_equal(gf_exec_eval_node(m, d, din, out), GF_ERR_UNSUPPORTED);
    gf_model_free(m);
}

/* ---- no-op removal ---------------------------------------------------------------------- */

static void test_identity(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    input(m, "x", GF_FLOAT, "batch,4");
    node(m->graph, "Identity", "x", "i1");
    node(m->graph, "Relu", "i1", "r");
    node(m->graph, "Identity", "r", "y");   /* graph output: Relu takes the name */
    node(m->graph, "Identity", "x", "xo");  /* input -> output: must stay */
    output(m, "y");
    output(m, "xo");
    size_t n;
    assert_int_equal(gf_pass_remove_identities(m->graph, false, &n), GF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(m->graph->n_nodes, 2);
    struct gf_value *y = gf_graph_find(m->graph, "y");
    assert_non_null(y->producer);
    assert_string_equal(y->producer->op_type, "Relu");
    assert_ptr_equal(y->producer->inputs[0], gf_graph_find(m->graph, "x"));
    assert_ptr_equal(m->graph->outputs[0], y);
    assert_string_equal(m->graph->outputs[1]->name, "xo");
    assert_string_equal(m->graph->outputs[1]->producer->op_type, "Identity");
    assert_int_equal(gf_graph_validate(m->graph), GF_OK);
    gf_model_free(m);
}

/* Dropout: training_mode absent or false and the mask unread: removed. */
static struct gf_model *dropout_model(bool training, bool mask_out)
{
    struct gf_model *m = new_model(17);
    float r = 0.5f;
    input(m, "x", GF_FLOAT, "2,3");
    init(m, "ratio", GF_FLOAT, "", &r);
    init(m, "mode", GF_BOOL, "", &training);
    node(m->graph, "Dropout", "x,ratio,mode", mask_out ? "d,mask" : "d");
    node(m->graph, "Relu", "d", "y");
    output(m, "y");
    if (mask_out)
        output(m, "mask");
    return m;
}

static void test_dropout(void **state)
{
    (void)state;
    size_t n;
    struct gf_model *m = dropout_model(false, false);
    assert_int_equal(gf_pass_remove_identities(m->graph, false, &n), GF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(count_op(m->graph, "Dropout"), 0);
    gf_model_free(m);

    m = dropout_model(false, false); /* training graphs keep it when asked */
    assert_int_equal(gf_pass_remove_identities(m->graph, true, &n), GF_OK);
    assert_int_equal(n, 0);
    gf_model_free(m);

    m = dropout_model(true, false); /* training mode: random, never folded */
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Dropout"), 1);
    gf_model_free(m);

    m = dropout_model(false, true); /* the mask is read */
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Dropout"), 1);
    gf_model_free(m);

    m = new_model(17); /* no training_mode input at all */
    input(m, "x", GF_FLOAT, "2");
    node(m->graph, "Dropout", "x", "d");
    node(m->graph, "Neg", "d", "y");
    output(m, "y");
    cleanup(m, &opts, NULL);
    assert_int_equal(m->graph->n_nodes, 1);
    gf_model_free(m);
}

static void test_cast(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    input(m, "x", GF_FLOAT, "batch,2");
    struct gf_node *same = node(m->graph, "Cast", "x", "c1");
    struct gf_node *other = node(m->graph, "Cast", "c1", "c2");
    gf_node_set_attr_int(same, "to", GF_FLOAT);
    gf_node_set_attr_int(other, "to", GF_DOUBLE);
    node(m->graph, "CastLike", "x,x", "c3");
    node(m->graph, "Add", "c1,c3", "s");
    output(m, "s");
    output(m, "c2");
    size_t n;
    assert_int_equal(gf_pass_remove_identities(m->graph, false, &n), GF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(count_op(m->graph, "Cast"), 1);
    assert_int_equal(count_op(m->graph, "CastLike"), 0);
    assert_int_equal(gf_node_attr_int(m->graph->first, "to", 0), GF_DOUBLE);
    assert_string_equal(gf_graph_find(m->graph, "c2")->producer->inputs[0]->name, "x");
    gf_model_free(m);
}

/* Reshape / Expand / Transpose that change nothing, static and symbolic,
 * and ones that do change the shape. */
static struct gf_model *layout_model(void)
{
    struct gf_model *m = new_model(17);
    int64_t same[2] = {2, 3}, other[2] = {3, 2}, four = 4, zero = 0;
    input(m, "x", GF_FLOAT, "2,3");
    input(m, "z", GF_FLOAT, "batch,4");
    init(m, "same", GF_INT64, "2", same);
    init(m, "other", GF_INT64, "2", other);
    init(m, "four", GF_INT64, "1", &four);
    init(m, "zero", GF_INT64, "", &zero);
    init(m, "axes0", GF_INT64, "1", &zero);
    node(m->graph, "Reshape", "x,same", "r1");     /* no-op */
    node(m->graph, "Reshape", "r1,other", "r2");   /* changes the shape */
    node(m->graph, "Expand", "x,same", "e1");      /* no-op */
    struct gf_node *t1 = node(m->graph, "Transpose", "x", "t1");
    struct gf_node *t2 = node(m->graph, "Transpose", "x", "t2");
    gf_node_set_attr_ints(t1, "perm", 2, (int64_t[]){0, 1});
    gf_node_set_attr_ints(t2, "perm", 2, (int64_t[]){1, 0});
    node(m->graph, "Add", "e1,t1", "s1");
    /* z reshaped to [Shape(z)[0], 4]: the same symbolic shape */
    node(m->graph, "Shape", "z", "zs");
    node(m->graph, "Gather", "zs,zero", "zb");
    node(m->graph, "Unsqueeze", "zb,axes0", "zb1");
    node(m->graph, "Concat", "zb1,four", "zshape");
    gf_node_set_attr_int(m->graph->last, "axis", 0);
    node(m->graph, "Reshape", "z,zshape", "zr");
    node(m->graph, "Relu", "zr", "zy");
    output(m, "r2");
    output(m, "s1");
    output(m, "t2");
    output(m, "zy");
    return m;
}

static void test_reshape_expand_transpose(void **state)
{
    (void)state;
    struct gf_model *m = layout_model();
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Reshape"), 1); /* the one to [3,2] */
    assert_int_equal(count_op(m->graph, "Expand"), 0);
    assert_int_equal(count_op(m->graph, "Transpose"), 1);
    assert_int_equal(count_op(m->graph, "Shape"), 0); /* the chain died with its Reshape */
    struct gf_value *r2 = gf_graph_find(m->graph, "r2");
    assert_string_equal(r2->producer->inputs[0]->name, "x");
    assert_string_equal(gf_graph_find(m->graph, "zy")->producer->inputs[0]->name, "z");
    gf_model_free(m);

    /* same results, on another batch size too */
    struct gf_model *keep = gf_model_new(8, "keep");
    float xv[6] = {1, -2, 3, -4, 5, -6}, zv[12];
    for (int i = 0; i < 12; i++)
        zv[i] = (float)(i % 5) - 2;
    struct gf_tensor *in[2] = {tensor(keep, GF_FLOAT, "2,3", xv),
                               tensor(keep, GF_FLOAT, "3,4", zv)};
    int after;
    assert_same_outputs(layout_model, in, 2, &after);
    assert_int_equal(after, 4);
    gf_model_free(keep);
}

/* ---- CSE ----------------------------------------------------------------------------------- */

static void test_cse(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float k1[2] = {1, 2}, k2[2] = {1, 2};
    input(m, "x", GF_FLOAT, "2");
    input(m, "train", GF_BOOL, "");
    init(m, "k1", GF_FLOAT, "2", k1);
    init(m, "k2", GF_FLOAT, "2", k2);
    node(m->graph, "Relu", "x", "r1");
    node(m->graph, "Relu", "x", "r2");
    node(m->graph, "Add", "r1,k1", "a1");
    node(m->graph, "Add", "r2,k2", "a2"); /* equal once r2 -> r1 and k2 -> k1 */
    struct gf_node *l1 = node(m->graph, "LeakyRelu", "x", "l1");
    struct gf_node *l2 = node(m->graph, "LeakyRelu", "x", "l2");
    gf_node_set_attr_float(l1, "alpha", 0.1f);
    gf_node_set_attr_float(l2, "alpha", 0.2f);
    node(m->graph, "Dropout", "x,,train", "d1");
    node(m->graph, "Dropout", "x,,train", "d2");
    node(m->graph, "Sum", "a1,a2,l1,l2,d1,d2", "y");
    output(m, "y");
    size_t n;
    assert_int_equal(gf_pass_cse(m->graph, &n), GF_OK);
    assert_int_equal(n, 3); /* k2, Relu, Add */
    assert_int_equal(count_op(m->graph, "Relu"), 1);
    assert_int_equal(count_op(m->graph, "Add"), 1);
    assert_int_equal(count_op(m->graph, "LeakyRelu"), 2);
    assert_int_equal(count_op(m->graph, "Dropout"), 2);
    struct gf_node *sum = m->graph->last;
    assert_ptr_equal(sum->inputs[0], sum->inputs[1]);
    assert_int_equal(gf_pass_dce(m->graph, &n), GF_OK);
    assert_int_equal(n, 1); /* k2, now unread */
    assert_null(gf_graph_find(m->graph, "k2")->init);
    gf_model_free(m);
}

/* Two equal nodes both producing graph outputs stay; when only the later
 * one does, it is the one kept, so the output name stays. */
static void test_cse_outputs(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    input(m, "x", GF_FLOAT, "2");
    node(m->graph, "Neg", "x", "n1");
    node(m->graph, "Neg", "x", "n2");
    node(m->graph, "Exp", "x", "e1");
    node(m->graph, "Exp", "x", "e2");
    node(m->graph, "Abs", "e1", "a");
    output(m, "n1");
    output(m, "n2");
    output(m, "e2");
    output(m, "a");
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Neg"), 2);
    assert_int_equal(count_op(m->graph, "Exp"), 1);
    struct gf_value *e2 = gf_graph_find(m->graph, "e2");
    assert_non_null(e2->producer);
    assert_ptr_equal(gf_graph_find(m->graph, "a")->producer->inputs[0], e2);
    const char *names[] = {"n1", "n2", "e2", "a"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(m->graph->outputs[i]->name, names[i]);
    gf_model_free(m);
}

/* Equal Constant nodes merge; a large initializer is not compared. */
static void test_cse_constants(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float c[1] = {2}, *big = calloc(2048, sizeof(float));
    input(m, "x", GF_FLOAT, "2048");
    constant(m, "c1", GF_FLOAT, "", c);
    constant(m, "c2", GF_FLOAT, "", c);
    init(m, "big1", GF_FLOAT, "2048", big);
    init(m, "big2", GF_FLOAT, "2048", big);
    node(m->graph, "Mul", "x,c1", "m1");
    node(m->graph, "Mul", "x,c2", "m2");
    node(m->graph, "Add", "m1,big1", "a1");
    node(m->graph, "Add", "m2,big2", "a2");
    node(m->graph, "Sub", "a1,a2", "y");
    output(m, "y");
    cleanup(m, &opts, NULL);
    assert_int_equal(count_op(m->graph, "Mul"), 1);
    assert_int_equal(count_op(m->graph, "Add"), 2);
    assert_non_null(init_of(m, "big1"));
    assert_non_null(init_of(m, "big2"));
    free(big);
    gf_model_free(m);
}

/* ---- DCE ---------------------------------------------------------------------------------- */

static void test_dce(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float w[2] = {1, 2};
    input(m, "x", GF_FLOAT, "2");
    input(m, "unused_in", GF_FLOAT, "2");
    init(m, "w_unused", GF_FLOAT, "2", w);
    struct gf_value *d = init(m, "w_default", GF_FLOAT, "2", w);
    gf_graph_add_input(m->graph, d);
    node(m->graph, "Exp", "x", "dead1");
    node(m->graph, "Log", "dead1", "dead2");
    node(m->graph, "Relu", "x", "y");
    output(m, "y");
    size_t n;
    assert_int_equal(gf_pass_dce(m->graph, &n), GF_OK);
    assert_int_equal(n, 3); /* Log, Exp, w_unused */
    assert_int_equal(m->graph->n_nodes, 1);
    assert_int_equal(m->graph->n_inits, 1);
    assert_non_null(init_of(m, "w_default")); /* a graph input's default stays */
    assert_int_equal(m->graph->n_inputs, 3);
    assert_int_equal(gf_pass_dce(m->graph, &n), GF_OK);
    assert_int_equal(n, 0);
    gf_model_free(m);
}

/* Subgraphs are left alone; what they read from the main graph stays, and
 * renames in the main graph reach them. */
static void test_subgraph_untouched(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    float c[1] = {3};
    input(m, "x", GF_FLOAT, "2");
    input(m, "cond", GF_BOOL, "");
    node(m->graph, "Neg", "x", "t");
    node(m->graph, "Identity", "t", "ti");
    struct gf_node *iff = node(m->graph, "If", "cond", "y");
    output(m, "y");
    const char *branches[2] = {"then_branch", "else_branch"};
    for (int b = 0; b < 2; b++) {
        struct gf_graph *sg = gf_node_add_subgraph(iff, branches[b]);
        assert_non_null(sg);
        char out[16];
        snprintf(out, sizeof(out), "o%d", b);
        struct gf_value *k = gf_graph_new_value(sg, b ? "k1" : "k0", NULL);
        struct gf_value *o = gf_graph_new_value(sg, out, NULL);
        struct gf_node *kn = gf_graph_add_node(sg, "Constant", "", NULL, 0, NULL, 1, &k);
        gf_node_set_attr_tensor(kn, "value", tensor(m, GF_FLOAT, "", c));
        struct gf_value *ins[2] = {gf_graph_find(m->graph, "ti"), k};
        assert_non_null(gf_graph_add_node(sg, "Add", "", NULL, 2, ins, 1, &o));
        gf_graph_add_output(sg, o);
    }
    assert_int_equal(gf_pass_dce(iff->attrs[0].g, NULL), GF_ERR_ARG); /* main graph only */
    cleanup(m, &opts, NULL);
    assert_int_equal(m->graph->n_nodes, 2); /* Neg, If */
    for (size_t b = 0; b < 2; b++) {
        struct gf_graph *sg = iff->attrs[b].g;
        assert_int_equal(sg->n_nodes, 2); /* Constant still a node */
        assert_string_equal(sg->last->inputs[0]->name, "t");
    }
    gf_model_free(m);
}

/* ---- bundled models ------------------------------------------------------------------- */

static const char *const bundled[] = {
    "models/llama_tiny/legacy", "models/llama_tiny/dynamo", "models/gpt2_tiny/legacy",
    "models/gpt2_tiny/dynamo",  "models/mlp/legacy",        "models/mlp/dynamo",
};

static struct gf_model *load(const char *dir)
{
    char path[512];
    struct gf_model *m;
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    if (gf_model_load(path, NULL, &m) != GF_OK)
        fail_msg("%s", gf_last_error());
    return m;
}

static struct gf_tensor *load_pb(struct gf_model *keep, const char *dir, const char *file)
{
    char path[512];
    struct gf_tensor *t;
    snprintf(path, sizeof(path), "%s/test_data_set_0/%s", dir, file);
    if (gf_tensor_load(keep, path, &t) != GF_OK)
        fail_msg("%s", gf_last_error());
    return t;
}

/* Made-up inputs of another batch / sequence size: token ids (int64 below
 * `vocab`) or floats, for each graph input. */
static size_t other_inputs(struct gf_model *m, struct gf_model *keep, struct gf_tensor **in)
{
    unsigned seed = 7;
    for (size_t i = 0; i < m->graph->n_inputs; i++) {
        const struct gf_type *t = &m->graph->inputs[i]->type;
        int64_t dims[8];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->dims[d].value >= 0 ? t->dims[d].value : d == 0 ? 3 : 7;
        in[i] = gf_tensor_new(keep, NULL, t->dtype, t->rank, dims, NULL);
        assert_non_null(in[i]);
        for (size_t e = 0; e < in[i]->nelem; e++) {
            seed = seed * 1103515245u + 12345u;
            if (t->dtype == GF_INT64) /* ids and labels: < 10 fits every vocab */
                ((int64_t *)in[i]->data)[e] = (seed >> 16) % 10;
            else
                ((float *)in[i]->data)[e] = (float)((seed >> 16) % 2000) / 1000.0f - 1.0f;
        }
    }
    return m->graph->n_inputs;
}

static void check_bundled(const char *dir)
{
    struct gf_model *ref = load(dir), *m = load(dir), *keep = gf_model_new(8, "keep");
    struct gf_tensor *in[8], *want[8], *got[8];
    struct gf_cleanup_stats st;
    size_t before = m->graph->n_nodes, inits = m->graph->n_inits;
    cleanup(m, &opts, &st);
    printf("    %-26s nodes %3zu -> %3zu, initializers %2zu -> %2zu (folded %zu, no-ops %zu, "
           "merged %zu, dead %zu + %zu initializers, %zu rounds)\n", dir, before,
           m->graph->n_nodes, inits, m->graph->n_inits, st.folded, st.identities, st.cse,
           st.dead, st.dead_inits, st.rounds);
    if (strstr(dir, "legacy") && !strstr(dir, "mlp"))
        assert_true(m->graph->n_nodes < before);
    assert_true(m->graph->n_nodes <= before);
    assert_int_equal(count_op(m->graph, "Constant"), 0);
    /* the recorded inputs give PyTorch's outputs */
    size_t n_in = 0;
    for (; n_in < m->graph->n_inputs; n_in++) {
        char f[32];
        snprintf(f, sizeof(f), "input_%zu.pb", n_in);
        in[n_in] = load_pb(keep, dir, f);
    }
    size_t n = run(m, keep, in, n_in, got);
    assert_int_equal(n, m->graph->n_outputs);
    for (size_t i = 0; i < n; i++) {
        char f[32];
        snprintf(f, sizeof(f), "output_%zu.pb", i);
        assert_string_equal(got[i]->name, ref->graph->outputs[i]->name);
        assert_close(got[i], load_pb(keep, dir, f), 1e-5);
    }
    /* other shapes give what the uncleaned graph gives: nothing folded
     * depended on the batch or sequence size */
    n_in = other_inputs(m, keep, in);
    size_t nr = run(ref, keep, in, n_in, want);
    assert_int_equal(run(m, keep, in, n_in, got), nr);
    for (size_t i = 0; i < nr; i++)
        assert_close(got[i], want[i], 1e-6);
    gf_model_free(ref);
    gf_model_free(m);
    gf_model_free(keep);
}

static void test_bundled_models(void **state)
{
    (void)state;
    if (access("models/llama_tiny/legacy/model.onnx", R_OK) != 0)
        fail_msg("run from the repository root (models/ not found)");
    for (size_t i = 0; i < sizeof(bundled) / sizeof(bundled[0]); i++)
        check_bundled(bundled[i]);
}

/* A second cleanup finds nothing left to do. */
static void test_fixpoint(void **state)
{
    (void)state;
    struct gf_model *m = load("models/llama_tiny/legacy");
    struct gf_cleanup_stats st;
    cleanup(m, &opts, &st);
    size_t after = m->graph->n_nodes;
    cleanup(m, &opts, &st);
    assert_int_equal(m->graph->n_nodes, after);
    assert_int_equal(st.folded + st.identities + st.cse + st.dead + st.dead_inits, 0);
    assert_int_equal(st.rounds, 1);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_chain),
        cmocka_unit_test(test_fold_without_eval),
        cmocka_unit_test(test_fold_unknown_op),
        cmocka_unit_test(test_no_fold_graph_input),
        cmocka_unit_test(test_fold_limit),
        cmocka_unit_test(test_fold_shape),
        cmocka_unit_test(test_no_fold_declared_dims),
        cmocka_unit_test(test_fold_output_roundtrip),
        cmocka_unit_test(test_eval_node),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_reshape_expand_transpose),
        cmocka_unit_test(test_cse),
        cmocka_unit_test(test_cse_outputs),
        cmocka_unit_test(test_cse_constants),
        cmocka_unit_test(test_dce),
        cmocka_unit_test(test_subgraph_untouched),
        cmocka_unit_test(test_bundled_models),
        cmocka_unit_test(test_fixpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
