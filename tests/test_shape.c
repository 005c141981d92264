/* Shape inference: unit tests on small graphs, and a reference check against
 * the output types declared by every node test of libonnx-testdata whose
 * ops graphfuse knows.  GF_SHAPE_VERBOSE=1 lists every difference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <limits.h>

#include "gf_graph.h"

#define NODE_TESTS "/usr/share/libonnx-testdata/data/node"

/* ---- building graphs ----------------------------------------------------- */

static struct gf_model *new_model(int64_t opset)
{
    struct gf_model *m = gf_model_new(8, "t");
    assert_non_null(m);
    assert_int_equal(gf_model_set_opset(m, "", opset), GF_OK);
    return m;
}

/* Parses "batch,4,?" into dims ("" is a scalar); returns the rank.
 * Symbol names live in the model's arena, as the loader's do. */
static int parse_dims(struct gf_model *m, const char *spec, struct gf_dim *d)
{
    int rank = 0;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        char tok[32];
        snprintf(tok, sizeof(tok), "%.*s", (int)n, p);
        d[rank] = (struct gf_dim){.value = -1};
        if (tok[0] >= '0' && tok[0] <= '9') {
            d[rank].value = atoll(tok);
        } else if (strcmp(tok, "?") != 0) {
            d[rank].param = gf_model_strdup(m, tok);
        }
        rank++;
        p += n + (p[n] == ',');
    }
    return rank;
}

/* Graph input `name` of dtype and shape spec (NULL: unknown rank). */
static struct gf_value *input(struct gf_graph *g, const char *name, enum gf_dtype dt,
                              const char *spec)
{
    struct gf_value *v = gf_graph_new_value(g, name, NULL);
    struct gf_dim d[16];
    assert_non_null(v);
    gf_value_set_tensor_type(v, dt, spec ? parse_dims(g->model, spec, d) : -1, d);
    assert_int_equal(gf_graph_add_input(g, v), GF_OK);
    return v;
}

static struct gf_value *init_i64(struct gf_graph *g, const char *name, int rank, size_t n,
                                 const int64_t *vals)
{
    int64_t dims[1] = {(int64_t)n};
    struct gf_tensor *t = gf_tensor_new(g->model, NULL, GF_INT64, rank, dims, vals);
    struct gf_value *v = gf_graph_add_initializer(g, name, t);
    assert_non_null(v);
    return v;
}

static struct gf_value *scalar_i64(struct gf_graph *g, const char *name, int64_t v)
{
    return init_i64(g, name, 0, 1, &v);
}

static struct gf_value *list_i64(struct gf_graph *g, const char *name, size_t n, ...)
{
    int64_t v[16];
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n && i < 16; i++)
        v[i] = va_arg(ap, int64_t);
    va_end(ap);
    return init_i64(g, name, 1, n, v);
}

/* Value by name; a new untyped one when absent ("" is an omitted input). */
static struct gf_value *val(struct gf_graph *g, const char *name)
{
    if (!name[0])
        return NULL;
    struct gf_value *v = gf_graph_find(g, name);
    return v ? v : gf_graph_new_value(g, name, NULL);
}

/* Node `op` reading the comma-separated inputs, writing the outputs. */
static struct gf_node *node(struct gf_graph *g, const char *op, const char *name,
                            const char *ins, const char *outs)
{
    struct gf_value *vi[8], *vo[8];
    size_t ni = 0, no = 0;
    char buf[256], *save, *tok;
    snprintf(buf, sizeof(buf), "%s", ins);
    for (char *p = buf; ni < 8 && (tok = strsep(&p, ","));)
        if (ins[0])
            vi[ni++] = val(g, tok);
    snprintf(buf, sizeof(buf), "%s", outs);
    for (tok = strtok_r(buf, ",", &save); tok && no < 8; tok = strtok_r(NULL, ",", &save))
        vo[no++] = val(g, tok);
    struct gf_node *n = gf_graph_add_node(g, op, "", name, ni, vi, no, vo);
    assert_non_null(n);
    return n;
}

/* Type of a value as "float[batch,4,?]"; "float[*]": unknown rank. */
static const char *format_type(const struct gf_type *t)
{
    static char buf[4][256];
    static int k;
    size_t n;
    k = (k + 1) % 4;
    if (t->kind != GF_TYPE_TENSOR)
        return t->kind == GF_TYPE_NONE ? "none" : "other";
    n = (size_t)snprintf(buf[k], 256, "%s[%s", gf_dtype_name(t->dtype), t->rank < 0 ? "*" : "");
    for (int i = 0; i < t->rank && n < 200; i++) {
        const struct gf_dim *d = &t->dims[i];
        if (d->value >= 0)
            n += (size_t)snprintf(buf[k] + n, 256 - n, "%s%lld", i ? "," : "", (long long)d->value);
        else
            n += (size_t)snprintf(buf[k] + n, 256 - n, "%s%.20s", i ? "," : "",
                                  d->param ? d->param : "?");
    }
    snprintf(buf[k] + n, 256 - n, "]");
    return buf[k];
}

static const char *type_of(struct gf_graph *g, const char *name)
{
    struct gf_value *v = gf_graph_find(g, name);
    assert_non_null(v);
    return format_type(&v->type);
}

static void infer_ok(struct gf_model *m)
{
    enum gf_status st = gf_graph_infer_shapes(m->graph);
    if (st != GF_OK)
        fail_msg("inference failed: %s", gf_last_error());
}

/* Inference fails with GF_ERR_INVALID and a message holding `part`. */
static void infer_fails(struct gf_model *m, const char *part)
{
    assert_int_equal(gf_graph_infer_shapes(m->graph), GF_ERR_INVALID);
    if (!strstr(gf_last_error(), part))
        fail_msg("message '%s' lacks '%s'", gf_last_error(), part);
}

/* ---- unit tests ---------------------------------------------------------- */

/* Add of [batch,4] and [1,4] is [batch,4]; symbols and ones broadcast. */
static void test_broadcast_symbolic(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,4");
    input(g, "b", GF_FLOAT, "1,4");
    input(g, "c", GF_FLOAT, "seq,1,1");
    input(g, "u", GF_FLOAT, "?,4");
    input(g, "cond", GF_BOOL, "batch,1");
    node(g, "Add", "add", "x,b", "y");
    node(g, "Mul", "mul", "y,c", "z");
    node(g, "Sub", "sub", "x,u", "w");
    node(g, "Less", "lt", "x,b", "l");
    node(g, "Where", "where", "cond,x,b", "s");
    node(g, "Sum", "sum", "x,b,c", "t");
    infer_ok(m);
    assert_string_equal(type_of(g, "y"), "float[batch,4]");
    assert_string_equal(type_of(g, "z"), "float[seq,batch,4]");
    assert_string_equal(type_of(g, "w"), "float[?,4]");
    assert_string_equal(type_of(g, "l"), "bool[batch,4]");
    assert_string_equal(type_of(g, "s"), "float[batch,4]");
    assert_string_equal(type_of(g, "t"), "float[seq,batch,4]");
    gf_model_free(m);
}

static void test_broadcast_errors(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,3");
    input(g, "y", GF_FLOAT, "4");
    node(g, "Add", "add0", "x,y", "z");
    infer_fails(m, "node 'add0' (Add): tensor 'y': cannot broadcast [batch,3] with [4]");
    gf_model_free(m);

    m = new_model(17); /* unnamed node: "#id"; element types must agree */
    g = m->graph;
    input(g, "x", GF_FLOAT, "3");
    input(g, "i", GF_INT64, "3");
    node(g, "Mul", NULL, "x,i", "z");
    infer_fails(m, "node #");
    assert_non_null(strstr(gf_last_error(), "(Mul): tensor 'i': element type int64"));
    gf_model_free(m);
}

static void test_matmul_gemm(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "a", GF_FLOAT, "batch,seq,4");
    input(g, "w", GF_FLOAT, "4,8");
    input(g, "v", GF_FLOAT, "4");
    input(g, "p", GF_FLOAT, "2,1,3,4");
    input(g, "q", GF_FLOAT, "5,4,6");
    input(g, "ta", GF_FLOAT, "4,m");
    input(g, "tb", GF_FLOAT, "n,4");
    input(g, "c", GF_FLOAT, "n");
    node(g, "MatMul", "mm1", "a,w", "y1");
    node(g, "MatMul", "mm2", "v,w", "y2");
    node(g, "MatMul", "mm3", "a,v", "y3");
    node(g, "MatMul", "mm4", "p,q", "y4");
    node(g, "MatMul", "mm5", "v,v", "y5");
    struct gf_node *gm = node(g, "Gemm", "gemm", "ta,tb,c", "y6");
    gf_node_set_attr_int(gm, "transA", 1);
    gf_node_set_attr_int(gm, "transB", 1);
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[batch,seq,8]");
    assert_string_equal(type_of(g, "y2"), "float[8]");
    assert_string_equal(type_of(g, "y3"), "float[batch,seq]");
    assert_string_equal(type_of(g, "y4"), "float[2,5,3,6]");
    assert_string_equal(type_of(g, "y5"), "float[]");
    assert_string_equal(type_of(g, "y6"), "float[m,n]");
    node(g, "MatMul", "bad", "w,p", "y7"); /* [4,8] x [..,3,4]: 8 vs 3 */
    infer_fails(m, "node 'bad' (MatMul): inner dims differ: A [4,8] has K = 8");
    gf_model_free(m);

    m = new_model(17);
    g = m->graph;
    input(g, "a", GF_FLOAT, "2,3,4");
    input(g, "b", GF_FLOAT, "4,5");
    node(g, "Gemm", "g3", "a,b", "y");
    infer_fails(m, "node 'g3' (Gemm): A [2,3,4] and B [4,5] must be 2-D");
    gf_model_free(m);
}

/* The exporters' chain: Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
 * with a symbolic batch dim, in the opset 13 (axes input) and opset 11
 * (axes attribute) forms. */
static void reshape_chain(int64_t opset)
{
    struct gf_model *m = new_model(opset);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,seq,8");
    scalar_i64(g, "i0", 0);
    scalar_i64(g, "i1", 1);
    list_i64(g, "tail", 2, (int64_t)2, (int64_t)-1);
    list_i64(g, "minus1", 1, (int64_t)-1);
    node(g, "Shape", "shape", "x", "s");
    node(g, "Gather", "g0", "s,i0", "b");
    node(g, "Gather", "g1", "s,i1", "q");
    if (opset >= 13) {
        list_i64(g, "ax0", 1, (int64_t)0);
        node(g, "Unsqueeze", "u0", "b,ax0", "b1");
        node(g, "Unsqueeze", "u1", "q,ax0", "q1");
    } else {
        int64_t ax0 = 0;
        gf_node_set_attr_ints(node(g, "Unsqueeze", "u0", "b", "b1"), "axes", 1, &ax0);
        gf_node_set_attr_ints(node(g, "Unsqueeze", "u1", "q", "q1"), "axes", 1, &ax0);
    }
    gf_node_set_attr_int(node(g, "Concat", "cat", "b1,q1,tail", "shp"), "axis", 0);
    node(g, "Reshape", "r1", "x,shp", "y");
    gf_node_set_attr_int(node(g, "Concat", "cat2", "b1,minus1", "shp2"), "axis", 0);
    node(g, "Reshape", "r2", "x,shp2", "y2");
    node(g, "Reshape", "r3", "y,s", "y3"); /* back to the original */
    infer_ok(m);
    assert_string_equal(type_of(g, "s"), "int64[3]");
    assert_string_equal(type_of(g, "b"), "int64[]");
    assert_string_equal(type_of(g, "shp"), "int64[4]");
    assert_string_equal(type_of(g, "y"), "float[batch,seq,2,4]");
    assert_string_equal(type_of(g, "y2"), "float[batch,?]");
    assert_string_equal(type_of(g, "y3"), "float[batch,seq,8]");
    gf_model_free(m);
}

static void test_reshape_from_shape_chain(void **state)
{
    (void)state;
    reshape_chain(13);
    reshape_chain(11);
}

static void test_reshape_rules(void **state)
{
    (void)state;
    struct gf_model *m = new_model(14);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "2,3,4");
    input(g, "e", GF_FLOAT, "0,3");
    list_i64(g, "s1", 3, (int64_t)0, (int64_t)-1, (int64_t)2);
    list_i64(g, "s2", 2, (int64_t)3, (int64_t)0);
    list_i64(g, "s3", 2, (int64_t)0, (int64_t)-1);
    node(g, "Reshape", "r1", "x,s1", "y1");
    gf_node_set_attr_int(node(g, "Reshape", "r2", "e,s2", "y2"), "allowzero", 1);
    node(g, "Reshape", "r3", "x,s3", "y3"); /* 0 copies the input's 2 */
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[2,6,2]");
    assert_string_equal(type_of(g, "y2"), "float[3,0]");
    assert_string_equal(type_of(g, "y3"), "float[2,12]");
    node(g, "Reshape", "r5", "e,s2", "y5"); /* without allowzero, 0 copies 3: 9 != 0 */
    infer_fails(m, "node 'r5' (Reshape): tensor 'e': cannot reshape [0,3] into [3,3]");
    gf_model_free(m);

    m = new_model(14);
    g = m->graph;
    input(g, "x", GF_FLOAT, "2,3,4");
    list_i64(g, "s4", 2, (int64_t)5, (int64_t)-1);
    node(g, "Reshape", "r4", "x,s4", "y4");
    infer_fails(m, "node 'r4' (Reshape): tensor 'x': cannot reshape [2,3,4]");
    gf_model_free(m);

    m = new_model(14);
    g = m->graph;
    input(g, "x", GF_FLOAT, "2,3,4");
    list_i64(g, "s", 2, (int64_t)-1, (int64_t)-1);
    node(g, "Reshape", "r", "x,s", "y");
    infer_fails(m, "more than one -1");
    gf_model_free(m);
}

/* torch's Expand pattern: Where(Equal(shape, -1), ones, shape). */
static void test_expand_where_pattern(void **state)
{
    (void)state;
    struct gf_model *m = new_model(13);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,7");
    input(g, "z", GF_FLOAT, "1,5,1");
    scalar_i64(g, "i0", 0);
    list_i64(g, "ax0", 1, (int64_t)0);
    list_i64(g, "rest", 2, (int64_t)-1, (int64_t)8);
    list_i64(g, "three", 1, (int64_t)3);
    scalar_i64(g, "neg1", -1);
    node(g, "Shape", NULL, "x", "s");
    node(g, "Gather", NULL, "s,i0", "b");
    node(g, "Unsqueeze", NULL, "b,ax0", "b1");
    gf_node_set_attr_int(node(g, "Concat", NULL, "b1,rest", "shp"), "axis", 0);
    int64_t one = 1, dims1[1] = {1};
    gf_node_set_attr_tensor(node(g, "ConstantOfShape", NULL, "three", "ones"), "value",
                            gf_tensor_new(m, NULL, GF_INT64, 1, dims1, &one));
    node(g, "Mul", NULL, "ones,neg1", "negs");
    node(g, "Equal", NULL, "shp,negs", "eq");
    node(g, "Where", NULL, "eq,ones,shp", "tgt");
    node(g, "Expand", "expand", "z,tgt", "y");
    infer_ok(m);
    assert_string_equal(type_of(g, "ones"), "int64[3]");
    assert_string_equal(type_of(g, "eq"), "bool[3]");
    assert_string_equal(type_of(g, "y"), "float[batch,5,8]");
    gf_model_free(m);
}

static void test_reductions(void **state)
{
    (void)state;
    struct gf_model *m = new_model(13);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,3,4");
    list_i64(g, "ax1", 1, (int64_t)1);
    int64_t last = -1, both[2] = {0, 2};
    gf_node_set_attr_int(node(g, "ReduceSum", "rs", "x,ax1", "y1"), "keepdims", 0);
    gf_node_set_attr_ints(node(g, "ReduceMean", "rm", "x", "y2"), "axes", 1, &last);
    node(g, "ReduceMax", "rmax", "x", "y3"); /* all axes, keepdims */
    struct gf_node *n = node(g, "ReduceL2", "rl2", "x", "y4");
    gf_node_set_attr_ints(n, "axes", 2, both);
    gf_node_set_attr_int(n, "keepdims", 0);
    gf_node_set_attr_int(node(g, "ReduceProd", "rp", "x", "y5"), "keepdims", 0);
    n = node(g, "ArgMax", "am", "x", "y6");
    gf_node_set_attr_int(n, "axis", -1);
    gf_node_set_attr_int(n, "keepdims", 0);
    node(g, "ArgMin", "an", "x", "y7");
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[batch,4]");
    assert_string_equal(type_of(g, "y2"), "float[batch,3,1]");
    assert_string_equal(type_of(g, "y3"), "float[1,1,1]");
    assert_string_equal(type_of(g, "y4"), "float[3]");
    assert_string_equal(type_of(g, "y5"), "float[]");
    assert_string_equal(type_of(g, "y6"), "int64[batch,3]");
    assert_string_equal(type_of(g, "y7"), "int64[1,3,4]");
    gf_model_free(m);

    m = new_model(18); /* axes as input for every Reduce*, noop_with_empty_axes */
    g = m->graph;
    input(g, "x", GF_FLOAT, "batch,3,4");
    input(g, "dyn", GF_INT64, "1");
    list_i64(g, "ax", 2, (int64_t)-1, (int64_t)1);
    init_i64(g, "none", 1, 0, NULL);
    node(g, "ReduceMean", "rm", "x,ax", "y1");
    gf_node_set_attr_int(node(g, "ReduceLogSumExp", "rl", "x,none", "y2"),
                         "noop_with_empty_axes", 1);
    gf_node_set_attr_int(node(g, "ReduceSumSquare", "rq", "x,dyn", "y3"), "keepdims", 0);
    node(g, "ReduceL1", "r1", "x,dyn", "y4");
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[batch,1,1]");
    assert_string_equal(type_of(g, "y2"), "float[batch,3,4]");
    assert_string_equal(type_of(g, "y3"), "float[?,?]");
    assert_string_equal(type_of(g, "y4"), "float[?,?,?]");
    list_i64(g, "dup", 2, (int64_t)1, (int64_t)-2);
    node(g, "ReduceMin", "rdup", "x,dup", "y5");
    infer_fails(m, "node 'rdup' (ReduceMin): tensor 'x': axis -2 repeated");
    gf_model_free(m);
}

static void test_slice(void **state)
{
    (void)state;
    struct gf_model *m = new_model(13);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "20,10,5");
    input(g, "s", GF_FLOAT, "batch,seq,4");
    list_i64(g, "st", 2, (int64_t)0, (int64_t)1);
    list_i64(g, "en", 2, (int64_t)3, (int64_t)1000);
    list_i64(g, "ax", 2, (int64_t)0, (int64_t)-2);
    list_i64(g, "sp", 2, (int64_t)1, (int64_t)2);
    list_i64(g, "nst", 3, (int64_t)20, (int64_t)10, (int64_t)4);
    list_i64(g, "nen", 3, (int64_t)0, (int64_t)0, (int64_t)1);
    list_i64(g, "nsp", 3, (int64_t)-1, (int64_t)-3, (int64_t)-2);
    list_i64(g, "zero", 2, (int64_t)0, (int64_t)-2);
    list_i64(g, "max", 2, INT64_MAX, INT64_MAX);
    list_i64(g, "ax12", 2, (int64_t)1, (int64_t)2);
    node(g, "Slice", "s1", "x,st,en,ax,sp", "y1");
    node(g, "Slice", "s2", "x,nst,nen,,nsp", "y2");
    node(g, "Slice", "s3", "s,zero,max,ax12", "y3");
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[3,5,5]");
    assert_string_equal(type_of(g, "y2"), "float[19,3,2]");
    assert_string_equal(type_of(g, "y3"), "float[batch,seq,2]");
    gf_model_free(m);

    m = new_model(9); /* starts / ends / axes as attributes */
    g = m->graph;
    input(g, "x", GF_FLOAT, "20,10,5");
    struct gf_node *n = node(g, "Slice", "s", "x", "y");
    int64_t st[2] = {-3, 2}, en[2] = {-1, 100}, ax[2] = {2, 1};
    gf_node_set_attr_ints(n, "starts", 2, st);
    gf_node_set_attr_ints(n, "ends", 2, en);
    gf_node_set_attr_ints(n, "axes", 2, ax);
    infer_ok(m);
    assert_string_equal(type_of(g, "y"), "float[20,8,2]");
    gf_model_free(m);
}

static void test_split(void **state)
{
    (void)state;
    struct gf_model *m = new_model(13);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "6,batch");
    list_i64(g, "sz", 2, (int64_t)2, (int64_t)4);
    node(g, "Split", "sp", "x,sz", "a,b");
    node(g, "Split", "eq", "x", "c,d,e");
    gf_node_set_attr_int(node(g, "Split", "sym", "x", "f,h"), "axis", 1);
    infer_ok(m);
    assert_string_equal(type_of(g, "a"), "float[2,batch]");
    assert_string_equal(type_of(g, "b"), "float[4,batch]");
    assert_string_equal(type_of(g, "e"), "float[2,batch]");
    assert_string_equal(type_of(g, "h"), "float[6,?]");
    node(g, "Split", "odd", "x", "o1,o2,o3,o4");
    infer_fails(m, "node 'odd' (Split): tensor 'x': dim 6 does not split evenly into 4");
    gf_model_free(m);

    m = new_model(18); /* num_outputs: the last chunk is smaller */
    g = m->graph;
    input(g, "x", GF_FLOAT, "7");
    gf_node_set_attr_int(node(g, "Split", "n3", "x", "a,b,c"), "num_outputs", 3);
    infer_ok(m);
    assert_string_equal(type_of(g, "a"), "float[3]");
    assert_string_equal(type_of(g, "c"), "float[1]");
    gf_model_free(m);

    m = new_model(11); /* split attribute; sizes must add up */
    g = m->graph;
    input(g, "x", GF_FLOAT, "2,7");
    int64_t sizes[2] = {3, 3};
    struct gf_node *n = node(g, "Split", "bad", "x", "a,b");
    gf_node_set_attr_int(n, "axis", -1);
    gf_node_set_attr_ints(n, "split", 2, sizes);
    infer_fails(m, "split sizes add up to 6, dim is 7");
    gf_model_free(m);
}

static void test_squeeze_unsqueeze(void **state)
{
    (void)state;
    struct gf_model *m = new_model(13);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "1,batch,1,4");
    list_i64(g, "ax", 2, (int64_t)0, (int64_t)-2);
    list_i64(g, "ua", 2, (int64_t)-1, (int64_t)1);
    node(g, "Squeeze", "sq", "x,ax", "y1");
    node(g, "Unsqueeze", "us", "y1,ua", "y2");
    node(g, "Squeeze", "all", "y2", "y3"); /* batch might be 1: rank unknown */
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[batch,4]");
    assert_string_equal(type_of(g, "y2"), "float[batch,1,4,1]");
    assert_string_equal(type_of(g, "y3"), "float[*]");
    list_i64(g, "bad", 1, (int64_t)3);
    node(g, "Squeeze", "sq4", "x,bad", "y4");
    infer_fails(m, "node 'sq4' (Squeeze): tensor 'x': cannot squeeze axis 3 of size 4");
    gf_model_free(m);

    m = new_model(11);
    g = m->graph;
    input(g, "x", GF_FLOAT, "1,3,1");
    int64_t ax = 1;
    node(g, "Squeeze", "all", "x", "y1");
    gf_node_set_attr_ints(node(g, "Unsqueeze", "us", "y1", "y2"), "axes", 1, &ax);
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[3]");
    assert_string_equal(type_of(g, "y2"), "float[3,1]");
    gf_model_free(m);
}

static void test_layout_and_indexing(void **state)
{
    (void)state;
    struct gf_model *m = new_model(18);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,3,4");
    input(g, "idx", GF_INT64, "5,6");
    input(g, "ind", GF_INT64, "batch,2,2");
    input(g, "k", GF_INT64, "1");
    input(g, "y", GF_FLOAT, "batch,2,4");
    int64_t perm[3] = {2, 0, 1};
    gf_node_set_attr_ints(node(g, "Transpose", "tr", "x", "t1"), "perm", 3, perm);
    node(g, "Transpose", "tr2", "x", "t2");
    gf_node_set_attr_int(node(g, "Flatten", "fl", "x", "f1"), "axis", -1);
    gf_node_set_attr_int(node(g, "Flatten", "fl0", "x", "f0"), "axis", 0);
    gf_node_set_attr_int(node(g, "Concat", "cat", "x,y", "c1"), "axis", -2);
    gf_node_set_attr_int(node(g, "Gather", "ga", "x,idx", "g1"), "axis", 1);
    node(g, "GatherND", "gnd", "x,ind", "g2");
    gf_node_set_attr_int(node(g, "GatherND", "gnd1", "x,ind", "g3"), "batch_dims", 1);
    node(g, "GatherElements", "ge", "x,ind", "g4");
    node(g, "ScatterND", "snd", "x,ind,y", "g5");
    list_i64(g, "pads", 4, (int64_t)1, (int64_t)0, (int64_t)2, (int64_t)-1);
    list_i64(g, "pax", 2, (int64_t)1, (int64_t)-1);
    node(g, "Pad", "pad", "x,pads,,pax", "p1");
    list_i64(g, "reps", 3, (int64_t)1, (int64_t)2, (int64_t)3);
    node(g, "Tile", "tile", "x,reps", "p2");
    list_i64(g, "five", 1, (int64_t)5);
    node(g, "TopK", "topk", "x,k", "v1,i1");
    gf_node_set_attr_int(node(g, "TopK", "topk2", "x,five", "v2,i2"), "axis", 0);
    input(g, "depth", GF_FLOAT, "");
    node(g, "OneHot", "oh", "idx,five,x", "o1");
    gf_node_set_attr_int(node(g, "OneHot", "oh2", "idx,depth,x", "o2"), "axis", 1);
    gf_node_set_attr_int(node(g, "Trilu", "tri", "x", "z1"), "upper", 0);
    node(g, "CumSum", "cs", "x,k", "z2");
    infer_ok(m);
    assert_string_equal(type_of(g, "t1"), "float[4,batch,3]");
    assert_string_equal(type_of(g, "t2"), "float[4,3,batch]");
    assert_string_equal(type_of(g, "f1"), "float[?,4]");
    assert_string_equal(type_of(g, "f0"), "float[1,?]");
    assert_string_equal(type_of(g, "c1"), "float[batch,5,4]");
    assert_string_equal(type_of(g, "g1"), "float[batch,5,6,4]");
    assert_string_equal(type_of(g, "g2"), "float[batch,2,4]");
    assert_string_equal(type_of(g, "g3"), "float[batch,2]");
    assert_string_equal(type_of(g, "g4"), "float[batch,2,2]");
    assert_string_equal(type_of(g, "g5"), "float[batch,3,4]");
    assert_string_equal(type_of(g, "p1"), "float[batch,6,3]");
    assert_string_equal(type_of(g, "p2"), "float[batch,6,12]");
    assert_string_equal(type_of(g, "v1"), "float[batch,3,?]");
    assert_string_equal(type_of(g, "i1"), "int64[batch,3,?]");
    assert_string_equal(type_of(g, "v2"), "float[5,3,4]");
    assert_string_equal(type_of(g, "o1"), "float[5,6,5]");
    assert_string_equal(type_of(g, "o2"), "float[5,?,6]");
    assert_string_equal(type_of(g, "z1"), "float[batch,3,4]");
    assert_string_equal(type_of(g, "z2"), "float[batch,3,4]");
    gf_model_free(m);
}

static void test_constants_and_shape_ops(void **state)
{
    (void)state;
    struct gf_model *m = new_model(15);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT16, "batch,3,4");
    int64_t dims[1] = {2}, vals[2] = {3, 5};
    gf_node_set_attr_tensor(node(g, "Constant", "c", "", "c1"), "value",
                            gf_tensor_new(m, NULL, GF_INT64, 1, dims, vals));
    gf_node_set_attr_float(node(g, "Constant", "cf", "", "c2"), "value_float", 1.5f);
    gf_node_set_attr_ints(node(g, "Constant", "ci", "", "c3"), "value_ints", 2, vals);
    node(g, "ConstantOfShape", "cos", "c1", "z");
    struct gf_node *n = node(g, "Shape", "sh", "x", "s1");
    gf_node_set_attr_int(n, "start", 1);
    gf_node_set_attr_int(n, "end", -1);
    node(g, "Size", "sz", "x", "n");
    scalar_i64(g, "zero", 0);
    scalar_i64(g, "two", 2);
    node(g, "Range", "rg", "zero,n,two", "r");
    gf_node_set_attr_int(node(g, "Cast", "cast", "x", "f"), "to", GF_FLOAT);
    node(g, "CastLike", "cl", "x,c1", "xi");
    node(g, "Dropout", "dp", "x", "d,mask");
    node(g, "IsNaN", "nan", "x", "isnan");
    node(g, "ConstantOfShape", "cos2", "s1", "z2");
    infer_ok(m);
    assert_string_equal(type_of(g, "c1"), "int64[2]");
    assert_string_equal(type_of(g, "c2"), "float[]");
    assert_string_equal(type_of(g, "c3"), "int64[2]");
    assert_string_equal(type_of(g, "z"), "float[3,5]");
    assert_string_equal(type_of(g, "s1"), "int64[1]");
    assert_string_equal(type_of(g, "n"), "int64[]");
    assert_string_equal(type_of(g, "r"), "int64[?]");
    assert_string_equal(type_of(g, "f"), "float[batch,3,4]");
    assert_string_equal(type_of(g, "xi"), "int64[batch,3,4]");
    assert_string_equal(type_of(g, "mask"), "bool[batch,3,4]");
    assert_string_equal(type_of(g, "isnan"), "bool[batch,3,4]");
    assert_string_equal(type_of(g, "z2"), "float[3]");
    gf_model_free(m);

    m = new_model(13); /* Range of a known Size, Cast with "to" as a string */
    g = m->graph;
    input(g, "x", GF_FLOAT, "2,3,4");
    scalar_i64(g, "zero", 0);
    scalar_i64(g, "two", 2);
    node(g, "Size", "sz", "x", "n");
    node(g, "Range", "rg", "zero,n,two", "r");
    infer_ok(m);
    assert_string_equal(type_of(g, "r"), "int64[12]");
    gf_model_free(m);

    m = new_model(5);
    g = m->graph;
    input(g, "x", GF_FLOAT, "2");
    gf_node_set_attr_string(node(g, "Cast", "cast", "x", "y"), "to", "INT32");
    node(g, "Dropout", "dp", "x", "d,mask");
    infer_ok(m);
    assert_string_equal(type_of(g, "y"), "int32[2]");
    assert_string_equal(type_of(g, "mask"), "float[2]");
    gf_model_free(m);
}

static void test_norm_softmax_losses(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT16, "batch,seq,8");
    input(g, "w", GF_FLOAT16, "8");
    input(g, "scores", GF_FLOAT, "batch,5,seq");
    input(g, "labels", GF_INT64, "batch,seq");
    struct gf_node *n = node(g, "LayerNormalization", "ln", "x,w", "y,mean,inv");
    gf_node_set_attr_int(n, "axis", -2);
    node(g, "Softmax", "sm", "x", "p");
    gf_node_set_attr_int(node(g, "LogSoftmax", "lsm", "x", "lp"), "axis", 1);
    node(g, "SoftmaxCrossEntropyLoss", "sce", "scores,labels", "loss,logp");
    gf_node_set_attr_string(node(g, "SoftmaxCrossEntropyLoss", "sce2", "scores,labels", "l2"),
                            "reduction", "none");
    gf_node_set_attr_string(node(g, "NegativeLogLikelihoodLoss", "nll", "scores,labels", "l3"),
                            "reduction", "sum");
    gf_node_set_attr_string(node(g, "NegativeLogLikelihoodLoss", "nll2", "scores,labels", "l4"),
                            "reduction", "none");
    gf_node_set_attr_string(node(g, "Einsum", "ein", "x,x", "e1"), "equation",
                            "bik,bjk->bij");
    gf_node_set_attr_string(node(g, "Einsum", "ein2", "x,w", "e2"), "equation", "...k,k");
    gf_node_set_attr_string(node(g, "Einsum", "ein3", "x", "e3"), "equation", "abc->cb");
    input(g, "a", GF_FLOAT, "seq");
    gf_node_set_attr_string(node(g, "Gelu", "gelu", "a", "e4"), "approximate", "tanh");
    infer_ok(m);
    assert_string_equal(type_of(g, "y"), "float16[batch,seq,8]");
    assert_string_equal(type_of(g, "mean"), "float[batch,1,1]");
    assert_string_equal(type_of(g, "inv"), "float[batch,1,1]");
    assert_string_equal(type_of(g, "p"), "float16[batch,seq,8]");
    assert_string_equal(type_of(g, "loss"), "float[]");
    assert_string_equal(type_of(g, "logp"), "float[batch,5,seq]");
    assert_string_equal(type_of(g, "l2"), "float[batch,seq]");
    assert_string_equal(type_of(g, "l3"), "float[]");
    assert_string_equal(type_of(g, "l4"), "float[batch,seq]");
    assert_string_equal(type_of(g, "e1"), "float16[batch,seq,seq]");
    assert_string_equal(type_of(g, "e2"), "float16[batch,seq]");
    assert_string_equal(type_of(g, "e3"), "float16[8,seq]");
    assert_string_equal(type_of(g, "e4"), "float[seq]");
    gf_node_set_attr_string(node(g, "SoftmaxCrossEntropyLoss", "sce3", "scores,labels", "l5"),
                            "reduction", "avg");
    infer_fails(m, "node 'sce3' (SoftmaxCrossEntropyLoss): reduction 'avg' is not one of none, "
                   "sum, mean");
    gf_model_free(m);
}

/* A node of domain graphfuse (node() makes ai.onnx ones). */
static struct gf_node *gnode(struct gf_graph *g, const char *op, const char *name,
                             const char *ins, const char *outs)
{
    struct gf_node *n = node(g, op, name, ins, outs);
    n->domain = "graphfuse";
    n->op = gf_op_lookup("graphfuse", op);
    assert_int_not_equal(n->op, GF_OP_UNKNOWN);
    return n;
}

/* The losses' gradients, and the rules' messages (graph/opcheck.c). */
static void test_loss_rules(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "dl", GF_FLOAT, "");
    input(g, "dn", GF_FLOAT, "3");
    input(g, "scores", GF_FLOAT, "3,5");
    input(g, "labels", GF_INT64, "3");
    input(g, "w", GF_FLOAT, "5");
    list_i64(g, "shape", 2, (int64_t)3, (int64_t)5);
    gnode(g, "SoftmaxCrossEntropyLossGrad", "sg", "dl,scores,labels,w", "ds");
    gnode(g, "NLLLossGrad", "ng", "dl,shape,labels", "dx");
    gf_node_set_attr_string(gnode(g, "NLLLossGrad", "ng2", "dn,shape,labels,w", "dx2"),
                            "reduction", "none");
    infer_ok(m);
    assert_string_equal(type_of(g, "ds"), "float[3,5]");
    assert_string_equal(type_of(g, "dx"), "float[3,5]");
    assert_string_equal(type_of(g, "dx2"), "float[3,5]");
    gf_model_free(m);

    static const struct {
        const char *op, *labels, *w, *red, *want;
    } bad[] = {
        {"SoftmaxCrossEntropyLoss", "4", "5", "mean", "node 'n' (SoftmaxCrossEntropyLoss): "
         "labels (input 1) dim 0 is 4, scores need 3"},
        {"NegativeLogLikelihoodLoss", "3,5", "5", "mean", "labels (input 1) must be [N, d1...] "
         "of rank 1, got [3,5]"},
        {"NegativeLogLikelihoodLoss", "3", "4", "sum", "weights (input 2) must be [5], got [4]"},
        {"SoftmaxCrossEntropyLossGrad", "3", "5", "none", "node 'n' (SoftmaxCrossEntropyLossGrad)"
         ": dLoss (input 0) is [], expected [3]"},
        {"SoftmaxCrossEntropyLossGrad", "2", "5", "mean", "labels (input 2) dim 0 is 2, scores "
         "need 3"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = new_model(17);
        g = m->graph;
        bool grad = strstr(bad[i].op, "Grad") != NULL;
        input(g, "dl", GF_FLOAT, "");
        input(g, "scores", GF_FLOAT, "3,5");
        input(g, "labels", GF_INT64, bad[i].labels);
        input(g, "w", GF_FLOAT, bad[i].w);
        struct gf_node *n = grad ? gnode(g, bad[i].op, "n", "dl,scores,labels,w", "y")
                                 : node(g, bad[i].op, "n", "scores,labels,w", "y");
        gf_node_set_attr_string(n, "reduction", bad[i].red);
        infer_fails(m, bad[i].want);
        gf_model_free(m);
    }
}

/* The optimizer ops (graph/ops.def): outputs from the inputs, and the
 * operands that disagree named. */
static void test_optimizer_ops(void **state)
{
    (void)state;
    struct gf_model *m = new_model(18);
    struct gf_graph *g = m->graph;
    input(g, "g", GF_FLOAT, "4,3");
    input(g, "acc", GF_FLOAT, "4,3");
    input(g, "gt", GF_FLOAT, "3,4");
    input(g, "x", GF_FLOAT, "batch,8");
    input(g, "p", GF_FLOAT, "12");
    input(g, "gp", GF_FLOAT, "12");
    input(g, "buf", GF_FLOAT, "12");
    input(g, "ea", GF_FLOAT, "12");
    input(g, "eas", GF_FLOAT, "12");
    input(g, "hyper", GF_DOUBLE, "7");
    input(g, "ps", GF_FLOAT, "n");
    input(g, "gs", GF_FLOAT, "n");
    gnode(g, "GradAccumulate", "acc1", "g,acc", "y1");
    gnode(g, "GradAccumulate", "acc2", "g", "y2");
    gf_node_set_attr_int(gnode(g, "GradAccumulate", "acc3", "g,gt", "y3"), "transpose", 1);
    gf_node_set_attr_int(gnode(g, "GradAccumulate", "acc4", "g", "y4"), "transpose", 1);
    gnode(g, "GradNorm", "norm", "x", "nrm");
    gnode(g, "SGDStep", "sgd", "p,gp,hyper,buf", "p1,b1");
    gnode(g, "SGDStep", "sgd2", "ps,gs,hyper", "p3");
    gnode(g, "AdamWStep", "adamw", "p,gp,ea,eas,hyper", "p2,ea2,eas2");
    infer_ok(m);
    assert_string_equal(type_of(g, "y1"), "float[4,3]");
    assert_string_equal(type_of(g, "y2"), "float[4,3]");
    assert_string_equal(type_of(g, "y3"), "float[3,4]");
    assert_string_equal(type_of(g, "y4"), "float[3,4]");
    assert_string_equal(type_of(g, "nrm"), "double[1]");
    assert_string_equal(type_of(g, "p1"), "float[12]");
    assert_string_equal(type_of(g, "b1"), "float[12]");
    assert_string_equal(type_of(g, "p3"), "float[n]");
    assert_string_equal(type_of(g, "p2"), "float[12]");
    assert_string_equal(type_of(g, "eas2"), "float[12]");
    gf_model_free(m);

    static const struct {
        const char *op, *ins, *a, *b, *want;
        int transpose;
    } bad[] = {
        {"SGDStep", "a,b,hyper", "12", "10", "node 'n' (SGDStep): G (input 1) [10] has 10 "
         "elements, P [12] has 12", 0},
        {"SGDStep", "a,a,hyper,b", "12", "3,5", "Buf (input 3) [3,5] has 15 elements, P [12] "
         "has 12", 0},
        {"AdamWStep", "a,a,b,a,hyper", "12", "6", "node 'n' (AdamWStep): ExpAvg (input 2) [6] "
         "has 6 elements, P [12] has 12", 0},
        {"AdamWStep", "a,a,a,a,b", "12", "5", "hyper (input 4) [5] must be [7]", 0},
        {"GradAccumulate", "a,b", "4,3", "5", "node 'n' (GradAccumulate): Acc (input 1) [5] "
         "has 5 elements, G [4,3] has 12", 0},
        {"GradAccumulate", "a,b", "4,3", "4,3", "Acc (input 1) [4,3] is not G [4,3] "
         "transposed", 1},
        {"GradAccumulate", "a", "12", "12", "transpose=1 needs a 2-D G, got [12]", 1},
        {"GradAccumulate", "a", "12", "12", "transpose 2 must be 0 or 1", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = new_model(18);
        g = m->graph;
        input(g, "a", GF_FLOAT, bad[i].a);
        input(g, "b", GF_FLOAT, bad[i].b);
        input(g, "hyper", GF_DOUBLE, "7");
        struct gf_node *n = gnode(g, bad[i].op, "n", bad[i].ins,
                                  !strcmp(bad[i].op, "AdamWStep") ? "y,y2,y3" : "y");
        if (bad[i].transpose)
            gf_node_set_attr_int(n, "transpose", bad[i].transpose);
        infer_fails(m, bad[i].want);
        gf_model_free(m);
    }
}

/* Types from the file are refined (symbols, unknown dims) and checked. */
static void test_declared_types(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    struct gf_dim d[4];
    input(g, "x", GF_FLOAT, "batch,4");
    input(g, "w", GF_FLOAT, "4,5");
    node(g, "MatMul", "mm", "x,w", "y");
    node(g, "Relu", "relu", "y", "z");
    gf_value_set_tensor_type(gf_graph_find(g, "y"), GF_FLOAT, parse_dims(m, "2,?", d), d);
    gf_value_set_tensor_type(gf_graph_find(g, "z"), GF_UNDEFINED, parse_dims(m, "n,m", d), d);
    infer_ok(m);
    assert_string_equal(type_of(g, "y"), "float[2,5]");
    assert_string_equal(type_of(g, "z"), "float[2,5]");
    const struct gf_dim *dims = gf_graph_find(g, "z")->type.dims;
    infer_ok(m); /* a second run agrees and leaves the types alone */
    assert_ptr_equal(gf_graph_find(g, "z")->type.dims, dims);
    gf_model_free(m);

    m = new_model(17);
    g = m->graph;
    input(g, "x", GF_FLOAT, "batch,4");
    input(g, "w", GF_FLOAT, "4,7");
    node(g, "MatMul", "mm", "x,w", "y");
    gf_value_set_tensor_type(gf_graph_find(g, "y"), GF_FLOAT, parse_dims(m, "batch,5", d), d);
    infer_fails(m, "node 'mm' (MatMul): tensor 'y': the model says shape [batch,5], "
                   "inference gives [batch,7]");
    gf_value_set_tensor_type(gf_graph_find(g, "y"), GF_INT32, -1, NULL);
    infer_fails(m, "tensor 'y': the model says int32, inference gives float");
    gf_value_set_tensor_type(gf_graph_find(g, "y"), GF_FLOAT, parse_dims(m, "batch", d), d);
    infer_fails(m, "the model says shape [batch], inference gives [batch,7]");
    gf_model_free(m);
}

/* Bad input is reported, naming the node, never a crash. */
static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *op, *ins, *attr;
        int64_t value;
        const char *msg;
    } cases[] = {
        {"Add", "x,", NULL, 0, "node 'n' (Add): missing input 1"},
        {"Concat", "x,x", NULL, 0, "missing attribute 'axis'"},
        {"Concat", "x,x", "axis", 3, "tensor 'x': axis 3 out of range for rank 2"},
        {"Softmax", "x", "axis", -3, "axis -3 out of range"},
        {"Cast", "x", "to", 99, "attribute 'to' is not a valid element type"},
        {"Flatten", "x", "axis", 4, "axis 4 out of range"},
        {"Gather", "x,x", "axis", -5, "axis -5 out of range"},
        {"LayerNormalization", "x,x", "stash_type", 0, "bad stash_type 0"},
        {"Unsqueeze", "x", NULL, 0, "missing axes"},
        {"Reshape", "x", NULL, 0, "missing the target shape"},
        {"Transpose", "x", NULL, 0, NULL},
        {"Split", "x", "num_outputs", 3, "num_outputs 3 does not fit 1 outputs"},
        {"TopK", "x", NULL, 0, "missing k"},
        {"Constant", "", NULL, 0, "no value attribute"},
        {"Einsum", "x", NULL, 0, "missing attribute 'equation'"},
        {"Range", "x,x,x", NULL, 0, "tensor 'x': must be a scalar"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gf_model *m = new_model(17);
        struct gf_graph *g = m->graph;
        input(g, "x", GF_FLOAT, "2,3");
        struct gf_node *n = node(g, cases[i].op, "n", cases[i].ins, "y");
        if (cases[i].attr)
            gf_node_set_attr_int(n, cases[i].attr, cases[i].value);
        if (cases[i].msg)
            infer_fails(m, cases[i].msg);
        else
            infer_ok(m);
        gf_model_free(m);
    }

    struct gf_model *m = new_model(17); /* an attribute of the wrong type */
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "2,3");
    gf_node_set_attr_float(node(g, "ArgMax", "am", "x", "y"), "axis", 1.0f);
    infer_fails(m, "node 'am' (ArgMax): attribute 'axis' is float, expected int");
    gf_model_free(m);

    m = new_model(17); /* a shape whose element count overflows int64 */
    g = m->graph;
    input(g, "x", GF_FLOAT, NULL);
    list_i64(g, "huge", 2, INT64_MAX, INT64_MAX);
    node(g, "Reshape", "r", "x,huge", "y1");
    infer_fails(m, "node 'r' (Reshape): tensor 'y1': shape "
                   "[9223372036854775807,9223372036854775807]: element count overflows");
    gf_model_free(m);

    /* 2^60 floats (2^62 bytes) fit in int64 bytes; 2^61 floats do not */
    m = new_model(17);
    g = m->graph;
    list_i64(g, "s60", 1, INT64_C(1) << 60);
    list_i64(g, "s61", 1, INT64_C(1) << 61);
    node(g, "ConstantOfShape", "c60", "s60", "z60");
    infer_ok(m);
    assert_string_equal(type_of(g, "z60"), "float[1152921504606846976]");
    node(g, "ConstantOfShape", "c61", "s61", "z61");
    infer_fails(m, "node 'c61' (ConstantOfShape): tensor 'z61': shape "
                   "[2305843009213693952] of float: byte count overflows");
    gf_model_free(m);

    m = new_model(17); /* absurd dims and untyped inputs */
    g = m->graph;
    input(g, "x", GF_FLOAT, NULL);
    list_i64(g, "huge", 2, INT64_MAX, INT64_MAX);
    list_i64(g, "neg", 1, (int64_t)-7);
    node(g, "Tile", "t", "x,huge", "y2");
    node(g, "Add", "a", "x,y2", "y3");
    node(g, "MatMul", "mm", "x,x", "y4");
    infer_ok(m);
    assert_string_equal(type_of(g, "y2"), "float[?,?]");
    assert_string_equal(type_of(g, "y3"), "float[*]");
    node(g, "ConstantOfShape", "cos", "neg", "y5");
    infer_fails(m, "node 'cos' (ConstantOfShape): tensor 'neg': negative dim -7");
    gf_model_free(m);
}

/* Subgraphs are inferred too, reading values of the enclosing graph. */
static void test_subgraph(void **state)
{
    (void)state;
    struct gf_model *m = new_model(17);
    struct gf_graph *g = m->graph;
    input(g, "x", GF_FLOAT, "batch,4");
    input(g, "w", GF_FLOAT, "4,batch");
    input(g, "cond", GF_BOOL, "");
    node(g, "Shape", "shape", "x", "s");
    struct gf_node *n = node(g, "If", "if", "cond", "out");
    struct gf_graph *sub = gf_node_add_subgraph(n, "then_branch");
    assert_non_null(sub);
    struct gf_value *w = gf_graph_find(g, "w"), *s = gf_graph_find(g, "s");
    struct gf_value *r = gf_graph_new_value(sub, "r", NULL), *ins[2] = {w, s};
    assert_non_null(gf_graph_add_node(sub, "Reshape", "", "inner", 2, ins, 1, &r));
    gf_graph_add_output(sub, r);
    infer_ok(m);
    assert_string_equal(format_type(&r->type), "float[batch,4]");
    assert_string_equal(type_of(g, "out"), "none"); /* If: not an op we infer */
    gf_model_free(m);
}

/* ---- reference check against libonnx-testdata ---------------------------- */

struct tally {
    int models, skipped, load_failed, outputs, exact, unresolved, mismatches;
};

static bool verbose(void)
{
    const char *e = getenv("GF_SHAPE_VERBOSE");
    return e && *e && strcmp(e, "0") != 0;
}

/* True when every node (subgraphs included) has an op graphfuse knows. */
static bool all_ops_known(const struct gf_graph *g)
{
    for (const struct gf_node *n = g->first; n; n = n->next) {
        if (n->op == GF_OP_UNKNOWN)
            return false;
        for (size_t i = 0; i < n->n_attrs; i++)
            if (n->attrs[i].type == GF_ATTR_GRAPH && !all_ops_known(n->attrs[i].g))
                return false;
    }
    return true;
}

/* Binds the graph inputs to test_data_set_0's tensors, as if they were
 * initializers, so that value-dependent shapes become decidable. */
static void bind_inputs(struct gf_model *m, const char *dir)
{
    struct gf_graph *g = m->graph;
    for (size_t i = 0; i < g->n_inputs; i++) {
        char path[4200];
        struct gf_tensor *t;
        snprintf(path, sizeof(path), "%s/test_data_set_0/input_%zu.pb", dir, i);
        if (g->inputs[i]->init || gf_tensor_load(m, path, &t) != GF_OK)
            continue;
        struct gf_value *v = t->name && t->name[0] ? gf_graph_find(g, t->name) : NULL;
        (v && v->is_input && !v->init ? v : g->inputs[i])->init = t;
    }
}

/* Compares one declared output type with the inferred one. */
static void compare(struct tally *ty, const char *test, const struct gf_value *v,
                    const struct gf_type *want)
{
    const struct gf_type *got = &v->type;
    bool unresolved = got->kind != GF_TYPE_TENSOR || got->dtype == GF_UNDEFINED ||
                      (want->rank >= 0 && got->rank < 0);
    bool mismatch = !unresolved && (got->dtype != want->dtype ||
                                    (want->rank >= 0 && got->rank != want->rank));
    for (int i = 0; !unresolved && !mismatch && want->rank >= 0 && i < want->rank; i++) {
        const struct gf_dim *w = &want->dims[i], *h = &got->dims[i];
        if (w->value >= 0 && h->value >= 0 && w->value != h->value)
            mismatch = true;
        else if (w->value >= 0 && h->value < 0)
            unresolved = true;
    }
    ty->outputs++;
    ty->mismatches += mismatch;
    ty->unresolved += unresolved && !mismatch;
    ty->exact += !unresolved && !mismatch;
    if ((mismatch || unresolved) && (mismatch || verbose()))
        printf("  %s %s '%s': declared %s, inferred %s\n", mismatch ? "MISMATCH" : "unresolved",
               test, v->name, format_type(want), format_type(got));
}

/* Loads one test model, clears its output types, infers, compares. */
static void check_model(struct tally *ty, const char *dir, const char *test, bool bind)
{
    char path[4200];
    struct gf_model *m;
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    if (gf_model_load(path, NULL, &m) != GF_OK) {
        ty->load_failed++;
        return;
    }
    if (!all_ops_known(m->graph)) {
        ty->skipped++;
        gf_model_free(m);
        return;
    }
    ty->models++;
    if (bind)
        bind_inputs(m, dir);
    struct gf_graph *g = m->graph;
    struct gf_type *want = calloc(g->n_outputs + 1, sizeof(*want));
    assert_non_null(want);
    for (size_t i = 0; i < g->n_outputs; i++) {
        want[i] = g->outputs[i]->type; /* dims stay valid: arena memory */
        g->outputs[i]->type = (struct gf_type){.kind = GF_TYPE_NONE, .rank = -1};
    }
    if (gf_graph_infer_shapes(g) != GF_OK) {
        printf("  MISMATCH %s: inference failed: %s\n", test, gf_last_error());
        ty->mismatches++;
    } else {
        for (size_t i = 0; i < g->n_outputs; i++)
            if (want[i].kind == GF_TYPE_TENSOR)
                compare(ty, test, g->outputs[i], &want[i]);
    }
    free(want);
    gf_model_free(m);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct tally check_testdata(bool bind)
{
    struct tally ty = {0};
    DIR *d = opendir(NODE_TESTS);
    char *names[4096];
    size_t n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), by_name);
    for (size_t i = 0; i < n; i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/%s", NODE_TESTS, names[i]);
        check_model(&ty, dir, names[i], bind);
        free(names[i]);
    }
    printf("shape inference vs libonnx-testdata%s: %d models covered, %d skipped "
           "(ops not supported), %d not loadable; %d outputs: %d exact, %d unresolved, "
           "%d mismatches\n", bind ? " (inputs bound to test data)" : "", ty.models,
           ty.skipped, ty.load_failed, ty.outputs, ty.exact, ty.unresolved, ty.mismatches);
    return ty;
}

static void test_testdata_declared_outputs(void **state)
{
    (void)state;
    struct tally ty = check_testdata(false);
    assert_true(ty.models >= 600);
    assert_int_equal(ty.mismatches, 0);
}

/* With the inputs' values known, every declared output must be inferred. */
static void test_testdata_bound_inputs(void **state)
{
    (void)state;
    struct tally ty = check_testdata(true);
    assert_true(ty.models >= 600);
    assert_int_equal(ty.mismatches, 0);
    assert_int_equal(ty.unresolved, 0);
}

/* Every test model, whatever its ops, keeping the file's declared types:
 * inference must refine them without reporting a contradiction. */
static void test_testdata_declared_types_agree(void **state)
{
    (void)state;
    DIR *d = opendir(NODE_TESTS);
    int n = 0, failed = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        char path[4200];
        struct gf_model *m;
        snprintf(path, sizeof(path), "%s/%s/model.onnx", NODE_TESTS, e->d_name);
        if (e->d_name[0] == '.' || gf_model_load(path, NULL, &m) != GF_OK)
            continue;
        n++;
        if (gf_graph_infer_shapes(m->graph) != GF_OK) {
            printf("  FAIL %s: %s\n", e->d_name, gf_last_error());
            failed++;
        }
        gf_model_free(m);
    }
    closedir(d);
    printf("shape inference over all %d test models with their declared types: %d failures\n",
           n, failed);
    assert_true(n >= 900);
    assert_int_equal(failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast_symbolic),
        cmocka_unit_test(test_broadcast_errors),
        cmocka_unit_test(test_matmul_gemm),
        cmocka_unit_test(test_reshape_from_shape_chain),
        cmocka_unit_test(test_reshape_rules),
        cmocka_unit_test(test_expand_where_pattern),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_squeeze_unsqueeze),
        cmocka_unit_test(test_layout_and_indexing),
        cmocka_unit_test(test_constants_and_shape_ops),
        cmocka_unit_test(test_norm_softmax_losses),
        cmocka_unit_test(test_loss_rules),
        cmocka_unit_test(test_optimizer_ops),
        cmocka_unit_test(test_declared_types),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_subgraph),
        cmocka_unit_test(test_testdata_declared_outputs),
        cmocka_unit_test(test_testdata_bound_inputs),
        cmocka_unit_test(test_testdata_declared_types_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
