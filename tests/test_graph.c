/* Unit tests of the IR, the loader and the saver. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gf_graph.h"
#include "internal.h" /* gf_save_test_stop */

static char dir[] = "/tmp/gf_test_graph_XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* y = Relu(x @ W + b), W and b initializers, x [batch, 4]. */
static struct gf_model *small_model(void)
{
    struct gf_model *m = gf_model_new(8, "small");
    assert_non_null(m);
    assert_int_equal(gf_model_set_opset(m, "", 17), GF_OK);
    struct gf_graph *g = m->graph;
    struct gf_value *x = gf_graph_new_value(g, "x", NULL);
    struct gf_dim dims[2] = {{-1, "batch", NULL}, {4, NULL, NULL}};
    gf_value_set_tensor_type(x, GF_FLOAT, 2, dims);
    gf_graph_add_input(g, x);
    float w[12], b[3] = {0.5f, -1, 2};
    for (int i = 0; i < 12; i++)
        w[i] = (float)i / 10;
    int64_t wd[2] = {4, 3}, bd[1] = {3};
    struct gf_value *W = gf_graph_add_initializer(g, "W", gf_tensor_new(m, NULL, GF_FLOAT, 2, wd, w));
    struct gf_value *B = gf_graph_add_initializer(g, "b", gf_tensor_new(m, NULL, GF_FLOAT, 1, bd, b));
    struct gf_value *mm = gf_graph_new_value(g, "mm", NULL);
    struct gf_value *s = gf_graph_new_value(g, "s", NULL);
    struct gf_value *y = gf_graph_new_value(g, "y", NULL);
    struct gf_value *in1[2] = {x, W}, *in2[2] = {mm, B};
    assert_non_null(gf_graph_add_node(g, "MatMul", NULL, "mm0", 2, in1, 1, &mm));
    assert_non_null(gf_graph_add_node(g, "Add", "", "add0", 2, in2, 1, &s));
    struct gf_node *r = gf_graph_add_node(g, "Relu", NULL, NULL, 1, &s, 1, &y);
    assert_non_null(r);
    gf_graph_add_output(g, y);
    return m;
}

static void test_build_and_uses(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    struct gf_graph *g = m->graph;
    struct gf_value *mm = gf_graph_find(g, "mm"), *s = gf_graph_find(g, "s");
    assert_int_equal(g->n_nodes, 3);
    assert_string_equal(mm->producer->op_type, "MatMul");
    assert_int_equal(mm->producer->op, GF_OP_MATMUL);
    assert_int_equal(mm->n_uses, 1);
    assert_string_equal(mm->uses[0].node->op_type, "Add");
    assert_int_equal(mm->uses[0].slot, 0);
    assert_null(gf_graph_find(g, "nope"));
    assert_null(gf_graph_new_value(g, "mm", NULL)); /* duplicate name refused */
    /* unique names avoid existing ones */
    const char *u = gf_graph_unique_name(g, "mm");
    assert_string_not_equal(u, "mm");
    assert_null(gf_graph_find(g, u));
    /* replace uses: Add reads x instead of mm */
    gf_value_replace_uses(mm, gf_graph_find(g, "x"));
    assert_int_equal(mm->n_uses, 0);
    assert_ptr_equal(s->producer->inputs[0], gf_graph_find(g, "x"));
    /* remove the MatMul: mm loses its producer, W its use */
    struct gf_value *W = gf_graph_find(g, "W");
    assert_int_equal(W->n_uses, 1);
    gf_graph_remove_node(g, mm->producer);
    assert_null(mm->producer);
    assert_int_equal(W->n_uses, 0);
    assert_int_equal(g->n_nodes, 2);
    gf_model_free(m);
}

static void test_attrs(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    struct gf_node *n = m->graph->first;
    int64_t axes[3] = {0, -1, 2};
    assert_int_equal(gf_node_set_attr_int(n, "axis", -1), GF_OK);
    assert_int_equal(gf_node_set_attr_float(n, "eps", 1e-5f), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(n, "axes", 3, axes), GF_OK);
    assert_int_equal(gf_node_set_attr_string(n, "mode", "tanh"), GF_OK);
    assert_int_equal(gf_node_attr_int(n, "axis", 7), -1);
    assert_int_equal(gf_node_attr_int(n, "eps", 7), 7); /* wrong type: default */
    assert_true(gf_node_attr_float(n, "eps", 0) == 1e-5f);
    size_t k;
    const int64_t *a = gf_node_attr_ints(n, "axes", &k);
    assert_int_equal(k, 3);
    assert_int_equal(a[1], -1);
    assert_string_equal(gf_node_attr_string(n, "mode", "none"), "tanh");
    assert_int_equal(gf_node_set_attr_int(n, "axis", 3), GF_OK); /* replaces */
    assert_int_equal(gf_node_attr_int(n, "axis", 7), 3);
    assert_int_equal(n->n_attrs, 4);
    gf_model_free(m);
}

static void test_toposort(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    struct gf_graph *g = m->graph;
    /* put Relu first: the sort must restore MatMul, Add, Relu */
    gf_node_move_before(g->last, g->first);
    assert_string_equal(g->first->op_type, "Relu");
    assert_int_equal(gf_graph_toposort(g), GF_OK);
    assert_string_equal(g->first->op_type, "MatMul");
    assert_string_equal(g->first->next->op_type, "Add");
    assert_string_equal(g->last->op_type, "Relu");
    /* a cycle: MatMul reads the Relu output */
    gf_node_set_input(g->first, 0, gf_graph_find(g, "y"));
    assert_int_equal(gf_graph_toposort(g), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "cycle"));
    gf_model_free(m);
}

static void test_save_load_equal(void **state)
{
    (void)state;
    struct gf_model *m = small_model(), *r;
    char why[256];
    m->producer_name = "test";
    m->doc_string = "doc";
    assert_int_equal(gf_model_save(m, tmp("a.onnx"), NULL), GF_OK);
    assert_int_equal(gf_model_load(tmp("a.onnx"), NULL, &r), GF_OK);
    assert_true(gf_model_equal(m, r, why, sizeof(why)));
    assert_string_equal(r->producer_name, "test");
    struct gf_value *W = gf_graph_find(r->graph, "W");
    assert_int_equal(W->init->nelem, 12);
    assert_true(gf_tensor_get_f64(W->init, 5) == (double)(5 / 10.0f));
    assert_string_equal(r->graph->inputs[0]->type.dims[0].param, "batch");
    /* equality notices a changed weight, a renamed node, an attribute */
    float saved = ((float *)W->init->data)[3];
    ((float *)W->init->data)[3] += 1;
    assert_false(gf_model_equal(m, r, why, sizeof(why)));
    assert_non_null(strstr(why, "'W'"));
    ((float *)W->init->data)[3] = saved;
    assert_true(gf_model_equal(m, r, why, sizeof(why)));
    r->graph->first->name = "other";
    assert_false(gf_model_equal(m, r, NULL, 0));
    r->graph->first->name = "mm0";
    gf_node_set_attr_int(r->graph->last, "x", 1);
    assert_false(gf_model_equal(m, r, NULL, 0));
    gf_model_free(r);
    gf_model_free(m);
}

static void test_out_of_order_file_is_sorted(void **state)
{
    (void)state;
    struct gf_model *m = small_model(), *r;
    gf_node_move_before(m->graph->last, m->graph->first); /* saved unsorted */
    assert_int_equal(gf_model_save(m, tmp("unsorted.onnx"), NULL), GF_OK);
    assert_int_equal(gf_model_load(tmp("unsorted.onnx"), NULL, &r), GF_OK);
    assert_string_equal(r->graph->first->op_type, "MatMul");
    assert_string_equal(r->graph->last->op_type, "Relu");
    gf_model_free(r);
    gf_model_free(m);
}

/* The side files of model `base` in the test folder (BASE.<16 hex>.data):
 * how many, and the name of the last one seen in `name`. */
static int side_files(const char *base, char *name, size_t len)
{
    DIR *d = opendir(dir);
    int n = 0;
    size_t bl = strlen(base);
    for (struct dirent *e; (e = readdir(d));) {
        size_t el = strlen(e->d_name);
        if (el == bl + 1 + 16 + 5 && strncmp(e->d_name, base, bl) == 0 &&
            e->d_name[bl] == '.' && strcmp(e->d_name + el - 5, ".data") == 0) {
            snprintf(name, len, "%s", e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void test_external_data(void **state)
{
    (void)state;
    struct gf_model *m = small_model(), *r;
    struct gf_save_opts o = {.external_data = true, .external_threshold = 16};
    assert_int_equal(gf_model_save(m, tmp("ext.onnx"), &o), GF_OK);
    char side[256];
    assert_int_equal(side_files("ext.onnx", side, sizeof(side)), 1); /* ext.onnx.HASH.data */
    struct stat sb;
    assert_int_equal(stat(tmp(side), &sb), 0);
    assert_int_equal(sb.st_size, 48); /* W only: b (12 bytes) stays inline */
    assert_int_equal(gf_model_load(tmp("ext.onnx"), NULL, &r), GF_OK);
    struct gf_value *W = gf_graph_find(r->graph, "W"), *b = gf_graph_find(r->graph, "b");
    assert_non_null(W->init->ext);
    assert_string_equal(W->init->ext->location, side);
    assert_null(b->init->ext); /* 12 bytes: under the threshold, inline */
    char why[256];
    assert_true(gf_model_equal(m, r, why, sizeof(why)));
    /* external data refused when loading from memory without a folder */
    FILE *f = fopen(tmp("ext.onnx"), "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    struct gf_model *x;
    assert_int_equal(gf_model_load_buffer(buf, n, NULL, NULL, &x), GF_ERR_UNSUPPORTED);
    assert_null(x);
    assert_int_equal(gf_model_load_buffer(buf, n, dir, NULL, &x), GF_OK);
    gf_model_free(x);
    gf_model_free(r);
    gf_model_free(m);
}

static bool stop_after_side_file(const char *stage)
{
    return strcmp(stage, "side file renamed") == 0;
}

/* W[0] of the model saved at `name`, loaded again. */
static float saved_w0(const char *name)
{
    struct gf_model *r;
    assert_int_equal(gf_model_load(tmp(name), NULL, &r), GF_OK);
    float w0 = ((const float *)gf_graph_find(r->graph, "W")->init->data)[0];
    gf_model_free(r);
    return w0;
}

/* The model and its external data are replaced as a pair: a save that dies
 * between the side file's rename and the model's leaves the old model
 * reading its old values; the next save removes the orphan and the old
 * side file, and an unchanged model keeps its side file's name. */
static void test_external_data_pair(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    struct gf_save_opts o = {.external_data = true, .external_threshold = 16};
    float *w = (float *)gf_graph_find(m->graph, "W")->init->data;
    assert_int_equal(gf_model_save(m, tmp("pair.onnx"), &o), GF_OK);
    char first[256], name[256];
    assert_int_equal(side_files("pair.onnx", first, sizeof(first)), 1);
    assert_true(saved_w0("pair.onnx") == w[0]);
    float old = w[0];
    w[0] = 64;
    gf_save_test_stop = stop_after_side_file;
    assert_int_equal(gf_model_save(m, tmp("pair.onnx"), &o), GF_ERR_IO);
    gf_save_test_stop = NULL;
    /* the new side file is in place beside the old one; the model is the old */
    assert_int_equal(side_files("pair.onnx", name, sizeof(name)), 2);
    assert_true(saved_w0("pair.onnx") == old);
    int before = count_files();
    assert_int_equal(gf_model_save(m, tmp("pair.onnx"), &o), GF_OK);
    assert_true(saved_w0("pair.onnx") == 64);
    assert_int_equal(side_files("pair.onnx", name, sizeof(name)), 1);
    assert_string_not_equal(name, first);
    assert_int_equal(count_files(), before - 1);
    /* the same bytes again: the same name, nothing else changes */
    char again[256];
    assert_int_equal(gf_model_save(m, tmp("pair.onnx"), &o), GF_OK);
    assert_int_equal(side_files("pair.onnx", again, sizeof(again)), 1);
    assert_string_equal(again, name);
    /* saved inline: its side file goes too */
    assert_int_equal(gf_model_save(m, tmp("pair.onnx"), NULL), GF_OK);
    assert_int_equal(side_files("pair.onnx", name, sizeof(name)), 0);
    assert_true(saved_w0("pair.onnx") == 64);
    gf_model_free(m);
}

static void test_atomic_save_failure(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    int before = count_files();
    /* the target is a directory: rename fails, nothing may be left over */
    assert_int_equal(mkdir(tmp("adir"), 0755), 0);
    assert_int_equal(gf_model_save(m, tmp("adir"), NULL), GF_ERR_IO);
    assert_non_null(strstr(gf_last_error(), "adir"));
    assert_int_equal(count_files(), before + 1);
    rmdir(tmp("adir"));
    /* a missing folder */
    assert_int_equal(gf_model_save(m, tmp("no/such/dir.onnx"), NULL), GF_ERR_IO);
    assert_int_equal(count_files(), before);
    gf_model_free(m);
}

static void test_unknown_fields_preserved(void **state)
{
    (void)state;
    struct gf_model *m = small_model(), *r;
    uint8_t *buf;
    size_t n;
    assert_int_equal(gf_model_save_buffer(m, &buf, &n), GF_OK);
    /* append field 99 (varint 42) and field 98 (bytes "hey") to ModelProto */
    uint8_t extra[] = {0x98, 0x06, 42, 0x92, 0x06, 3, 'h', 'e', 'y'};
    buf = realloc(buf, n + sizeof(extra));
    memcpy(buf + n, extra, sizeof(extra));
    assert_int_equal(gf_model_load_buffer(buf, n + sizeof(extra), NULL, NULL, &r), GF_OK);
    uint8_t *out;
    size_t on;
    assert_int_equal(gf_model_save_buffer(r, &out, &on), GF_OK);
    assert_int_equal(on, n + sizeof(extra));
    assert_non_null(memmem(out, on, extra, 3));
    assert_non_null(memmem(out, on, extra + 3, 6));
    free(out);
    free(buf);
    gf_model_free(r);
    gf_model_free(m);
}

static void test_tensor_files(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(8, "t");
    int64_t d[2] = {2, 3};
    int64_t v[6] = {1, -2, 3, 1LL << 40, 5, 6};
    struct gf_tensor *t = gf_tensor_new(m, "ids", GF_INT64, 2, d, v), *r;
    assert_int_equal(gf_tensor_save(t, tmp("ids.pb")), GF_OK);
    assert_int_equal(gf_tensor_load(m, tmp("ids.pb"), &r), GF_OK);
    assert_string_equal(r->name, "ids");
    assert_int_equal(r->rank, 2);
    assert_int_equal(gf_tensor_get_i64(r, 3), 1LL << 40);
    assert_int_equal(gf_tensor_load(m, tmp("missing.pb"), &r), GF_ERR_IO);
    assert_non_null(strstr(gf_last_error(), "missing.pb"));
    gf_model_free(m);
}

static void test_subgraph_outer_use_orders_owner(void **state)
{
    (void)state;
    /* If's branch reads `a`, produced by a node placed after the If: the
     * implicit use must make the sort move the producer first, in memory
     * and after a save/load round trip. */
    struct gf_model *m = gf_model_new(8, "sub"), *r;
    gf_model_set_opset(m, "", 17);
    struct gf_graph *g = m->graph;
    struct gf_value *c = gf_graph_new_value(g, "c", NULL), *x = gf_graph_new_value(g, "x", NULL);
    gf_value_set_tensor_type(c, GF_BOOL, 0, NULL);
    gf_value_set_tensor_type(x, GF_FLOAT, 1, (struct gf_dim[]){{2, NULL, NULL}});
    gf_graph_add_input(g, c);
    gf_graph_add_input(g, x);
    struct gf_value *a = gf_graph_new_value(g, "a", NULL), *y = gf_graph_new_value(g, "y", NULL);
    struct gf_node *ifn = gf_graph_add_node(g, "If", NULL, "if0", 1, &c, 1, &y);
    const char *branches[2] = {"then_branch", "else_branch"};
    for (int i = 0; i < 2; i++) {
        struct gf_graph *b = gf_node_add_subgraph(ifn, branches[i]);
        assert_non_null(b);
        struct gf_value *o = gf_graph_new_value(b, i ? "else_out" : "then_out", NULL);
        assert_non_null(gf_graph_add_node(b, i ? "Neg" : "Identity", NULL, NULL, 1, &a, 1, &o));
        gf_graph_add_output(b, o);
    }
    gf_graph_add_node(g, "Abs", NULL, "abs0", 1, &x, 1, &a);
    gf_graph_add_output(g, y);
    /* a: two explicit uses inside the branches, two implicit ones by If */
    assert_int_equal(a->n_uses, 4);
    int implicit = 0;
    for (size_t i = 0; i < a->n_uses; i++)
        implicit += a->uses[i].slot == -1 && a->uses[i].node == ifn;
    assert_int_equal(implicit, 2);
    assert_string_equal(g->first->op_type, "If");
    assert_int_equal(gf_model_save(m, tmp("sub.onnx"), NULL), GF_OK);
    assert_int_equal(gf_graph_toposort(g), GF_OK);
    assert_string_equal(g->first->op_type, "Abs");
    assert_int_equal(gf_model_load(tmp("sub.onnx"), NULL, &r), GF_OK);
    assert_string_equal(r->graph->first->op_type, "Abs");
    assert_int_equal(gf_graph_find(r->graph, "a")->n_uses, 4);
    /* removing the If drops all four uses */
    gf_graph_remove_node(g, ifn);
    assert_int_equal(a->n_uses, 0);
    gf_model_free(r);
    gf_model_free(m);
}

static void test_remove_output(void **state)
{
    (void)state;
    struct gf_model *m = small_model();
    struct gf_graph *g = m->graph;
    struct gf_value *y = gf_graph_find(g, "y"), *mm = gf_graph_find(g, "mm");
    gf_graph_add_output(g, mm);
    gf_graph_add_output(g, y); /* y listed twice: outputs y, mm, y */
    assert_int_equal(gf_graph_remove_output(g, 0), GF_OK);
    assert_int_equal(g->n_outputs, 2);
    assert_ptr_equal(g->outputs[0], mm);
    assert_ptr_equal(g->outputs[1], y);
    assert_true(y->is_output); /* still listed once */
    assert_int_equal(gf_graph_remove_output(g, 1), GF_OK);
    assert_false(y->is_output);
    assert_non_null(y->producer); /* the value and its node stay */
    assert_int_equal(gf_graph_remove_output(g, 1), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "no output 1"));
    assert_int_equal(gf_graph_remove_output(g, 0), GF_OK);
    assert_int_equal(g->n_outputs, 0);
    assert_false(mm->is_output);
    gf_model_free(m);
}

/* small_model's Relu moved into function local.Act(X) -> Y. */
static void test_add_function(void **state)
{
    (void)state;
    struct gf_model *m = small_model(), *r;
    struct gf_function *f = gf_function_new(m, "Act", "local");
    assert_non_null(f);
    assert_string_equal(f->name, "Act");
    assert_string_equal(f->domain, "local");
    struct gf_graph *b = f->body;
    assert_non_null(b);
    assert_null(b->parent);
    assert_null(b->owner);
    assert_ptr_equal(b->model, m);
    assert_int_equal(b->n_nodes, 0);
    assert_int_equal(m->n_functions, 0); /* not yet added */
    struct gf_value *fx = gf_graph_new_value(b, "X", NULL), *fy = gf_graph_new_value(b, "Y", NULL);
    assert_non_null(gf_graph_add_node(b, "Relu", "", NULL, 1, &fx, 1, &fy));
    gf_graph_add_input(b, fx);
    gf_graph_add_output(b, fy);
    static struct gf_opset ops[1] = {{"", 17}};
    f->opsets = ops;
    f->n_opsets = 1;
    assert_int_equal(gf_model_add_function(m, f), GF_OK);
    assert_int_equal(m->n_functions, 1);
    assert_ptr_equal(m->functions[0], f);
    /* the main graph calls it instead of Relu */
    struct gf_graph *g = m->graph;
    struct gf_value *s = gf_graph_find(g, "s"), *y = gf_graph_find(g, "y");
    gf_graph_remove_node(g, g->last);
    assert_int_equal(gf_model_set_opset(m, "local", 1), GF_OK);
    assert_non_null(gf_graph_add_node(g, "Act", "local", "act0", 1, &s, 1, &y));
    struct gf_function *f2 = gf_function_new(m, "Other", "local");
    assert_int_equal(gf_model_add_function(m, f2), GF_OK);
    assert_int_equal(m->n_functions, 2);
    assert_ptr_equal(m->functions[0], f);
    /* a save / load round trip keeps both, bodies included */
    assert_int_equal(gf_model_save(m, tmp("fn.onnx"), NULL), GF_OK);
    assert_int_equal(gf_model_load(tmp("fn.onnx"), NULL, &r), GF_OK);
    assert_int_equal(r->n_functions, 2);
    assert_string_equal(r->functions[0]->name, "Act");
    assert_string_equal(r->functions[0]->domain, "local");
    assert_string_equal(r->functions[0]->body->first->op_type, "Relu");
    assert_string_equal(r->functions[1]->name, "Other");
    assert_string_equal(r->graph->last->op_type, "Act");
    gf_model_free(r);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_and_uses),
        cmocka_unit_test(test_attrs),
        cmocka_unit_test(test_toposort),
        cmocka_unit_test(test_save_load_equal),
        cmocka_unit_test(test_out_of_order_file_is_sorted),
        cmocka_unit_test(test_external_data),
        cmocka_unit_test(test_external_data_pair),
        cmocka_unit_test(test_atomic_save_failure),
        cmocka_unit_test(test_unknown_fields_preserved),
        cmocka_unit_test(test_tensor_files),
        cmocka_unit_test(test_subgraph_outer_use_orders_owner),
        cmocka_unit_test(test_remove_output),
        cmocka_unit_test(test_add_function),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
