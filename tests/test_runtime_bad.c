/*
 * Bad input at run time: wrong input dtype, rank or size, missing inputs,
 * dimension symbols given two sizes, unsupported ops, integer division by
 * zero, indices out of range, broadcasting mismatches, shape arithmetic
 * that does not add up, and allocations beyond the memory limit.  Each
 * must be a status (never a crash) with one message naming the tensor,
 * node or op.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gf_exec.h"

/* A dim: a size >= 0, or a symbol name (size -1). */
struct d {
    int64_t size;
    const char *sym;
};

struct fixture {
    struct gf_model *m;
    struct gf_model *data; /* arena for input tensors */
};

static struct gf_value *add_input(struct gf_model *m, const char *name, enum gf_dtype t,
                                  int rank, const struct d *dims)
{
    struct gf_graph *g = m->graph;
    struct gf_value *v = gf_graph_new_value(g, name, NULL);
    struct gf_dim gd[8];
    for (int i = 0; i < rank; i++)
        gd[i] = (struct gf_dim){dims[i].size, dims[i].sym, NULL};
    gf_value_set_tensor_type(v, t, rank, gd);
    assert_int_equal(gf_graph_add_input(g, v), GF_OK);
    return v;
}

/* One node `op` reading `ins`, writing one output "y" (a graph output). */
static struct gf_node *one_node(struct gf_model *m, const char *op, size_t n_in,
                                struct gf_value *const *ins)
{
    struct gf_graph *g = m->graph;
    struct gf_value *y = gf_graph_new_value(g, "y", NULL);
    struct gf_node *n = gf_graph_add_node(g, op, "", "the_node", n_in, ins, 1, &y);
    assert_non_null(n);
    assert_int_equal(gf_graph_add_output(g, y), GF_OK);
    return n;
}

static struct gf_model *new_model(void)
{
    struct gf_model *m = gf_model_new(8, "bad_runtime");
    assert_non_null(m);
    assert_int_equal(gf_model_set_opset(m, "", 17), GF_OK);
    return m;
}

static struct gf_tensor *tensor(struct gf_model *arena, const char *name, enum gf_dtype t,
                                int rank, const int64_t *dims, const void *data)
{
    struct gf_tensor *x = gf_tensor_new(arena, name, t, rank, dims, data);
    assert_non_null(x);
    return x;
}

/* Runs m on inputs; returns the status and leaves the message checkable. */
static enum gf_status run(struct gf_model *m, const struct gf_exec_opts *o, size_t n,
                          struct gf_tensor *const *in)
{
    struct gf_session *s = NULL;
    enum gf_status st = gf_session_new(m, o, &s);
    if (st != GF_OK)
        return st;
    struct gf_tensor **out;
    size_t n_out;
    st = gf_session_run(s, n, in, &out, &n_out);
    gf_session_free(s);
    return st;
}

static void expect_msg(const char *a, const char *b, const char *c)
{
    const char *msg = gf_last_error();
    const char *want[] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(msg, want[i]))
            fail_msg("message '%s' lacks '%s'", msg, want[i]);
    assert_null(strchr(msg, '\n'));
}

static int setup(void **state)
{
    static struct fixture f;
    f.m = new_model();
    f.data = gf_model_new(8, "data");
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    gf_model_free(f->m);
    gf_model_free(f->data);
    return 0;
}

/* Add(a: float[2,3], b: float[2,3]) */
static void add_model(struct gf_model *m)
{
    const struct d dims[2] = {{2, NULL}, {3, NULL}};
    struct gf_value *in[2] = {add_input(m, "a", GF_FLOAT, 2, dims),
                              add_input(m, "b", GF_FLOAT, 2, dims)};
    one_node(m, "Add", 2, in);
}

static void wrong_dtype(void **state)
{
    struct fixture *f = *state;
    add_model(f->m);
    int64_t dims[2] = {2, 3};
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 2, dims, NULL),
                               tensor(f->data, "b", GF_INT64, 2, dims, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("'b'", "int64", "float");
}

static void wrong_size(void **state)
{
    struct fixture *f = *state;
    add_model(f->m);
    int64_t dims[2] = {2, 3}, bad[2] = {2, 4};
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 2, dims, NULL),
                               tensor(f->data, "b", GF_FLOAT, 2, bad, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("'b'", "axis 1", "expects 3");
}

static void wrong_rank(void **state)
{
    struct fixture *f = *state;
    add_model(f->m);
    int64_t dims[2] = {2, 3}, bad[1] = {6};
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 1, bad, NULL),
                               tensor(f->data, "b", GF_FLOAT, 2, dims, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("'a'", "rank 1", "expects 2");
}

static void missing_input(void **state)
{
    struct fixture *f = *state;
    add_model(f->m);
    int64_t dims[2] = {2, 3};
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 2, dims, NULL), NULL};
    assert_int_equal(run(f->m, NULL, 1, in), GF_ERR_INVALID);
    expect_msg("missing", "'b'", NULL);
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("'b'", "missing", NULL);
}

/* Add(a: float[n], b: float[n]) given 3 and 4 elements */
static void symbol_two_sizes(void **state)
{
    struct fixture *f = *state;
    const struct d n[1] = {{-1, "n"}};
    struct gf_value *ins[2] = {add_input(f->m, "a", GF_FLOAT, 1, n),
                               add_input(f->m, "b", GF_FLOAT, 1, n)};
    one_node(f->m, "Add", 2, ins);
    int64_t three = 3, four = 4;
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 1, &three, NULL),
                               tensor(f->data, "b", GF_FLOAT, 1, &four, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("'n'", "3", "4");
}

/* Add(a: float[n], b: float[m]) given 3 and 4: broadcasting fails */
static void broadcast_mismatch(void **state)
{
    struct fixture *f = *state;
    const struct d n[1] = {{-1, "n"}}, mm[1] = {{-1, "m"}};
    struct gf_value *ins[2] = {add_input(f->m, "a", GF_FLOAT, 1, n),
                               add_input(f->m, "b", GF_FLOAT, 1, mm)};
    one_node(f->m, "Add", 2, ins);
    int64_t three = 3, four = 4;
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_FLOAT, 1, &three, NULL),
                               tensor(f->data, "b", GF_FLOAT, 1, &four, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("the_node", "Add", "broadcast");
}

static void unsupported_op(void **state)
{
    struct fixture *f = *state;
    const struct d dims[4] = {{1, NULL}, {1, NULL}, {4, NULL}, {4, NULL}};
    struct gf_value *ins[2] = {add_input(f->m, "x", GF_FLOAT, 4, dims),
                               add_input(f->m, "w", GF_FLOAT, 4, dims)};
    one_node(f->m, "Conv", 2, ins);
    int64_t d4[4] = {1, 1, 4, 4};
    struct gf_tensor *in[2] = {tensor(f->data, "x", GF_FLOAT, 4, d4, NULL),
                               tensor(f->data, "w", GF_FLOAT, 4, d4, NULL)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_UNSUPPORTED);
    expect_msg("the_node", "'Conv'", "ai.onnx");
    expect_msg("opset 17", NULL, NULL);
}

/* Div or Mod on int32[4] with a zero divisor */
static void int_by_zero(const char *op, void **state)
{
    struct fixture *f = *state;
    const struct d dims[1] = {{4, NULL}};
    struct gf_value *ins[2] = {add_input(f->m, "a", GF_INT32, 1, dims),
                               add_input(f->m, "b", GF_INT32, 1, dims)};
    one_node(f->m, op, 2, ins);
    int64_t four = 4;
    const int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 0, 4};
    struct gf_tensor *in[2] = {tensor(f->data, "a", GF_INT32, 1, &four, a),
                               tensor(f->data, "b", GF_INT32, 1, &four, b)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("the_node", "zero", NULL);
}

static void div_by_zero(void **state)
{
    int_by_zero("Div", state);
}

static void mod_by_zero(void **state)
{
    int_by_zero("Mod", state);
}

/* Gather(data: float[3,2], idx: int64[2]) with an index past the end */
static void gather_out_of_range(void **state)
{
    struct fixture *f = *state;
    const struct d dd[2] = {{3, NULL}, {2, NULL}}, di[1] = {{2, NULL}};
    struct gf_value *ins[2] = {add_input(f->m, "data", GF_FLOAT, 2, dd),
                               add_input(f->m, "idx", GF_INT64, 1, di)};
    one_node(f->m, "Gather", 2, ins);
    int64_t d32[2] = {3, 2}, two = 2;
    const int64_t idx[2] = {0, 7};
    struct gf_tensor *in[2] = {tensor(f->data, "data", GF_FLOAT, 2, d32, NULL),
                               tensor(f->data, "idx", GF_INT64, 1, &two, idx)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("the_node", "7", "range");
    /* a negative index in range counts from the end and is fine */
    const int64_t ok[2] = {0, -3};
    in[1] = tensor(f->data, "idx", GF_INT64, 1, &two, ok);
    assert_int_equal(run(f->m, NULL, 2, in), GF_OK);
    const int64_t neg[2] = {0, -4};
    in[1] = tensor(f->data, "idx", GF_INT64, 1, &two, neg);
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("the_node", "-4", NULL);
}

/* ScatterND(data: float[4], idx: int64[1,1], upd: float[1]), index 9 */
static void scatter_out_of_range(void **state)
{
    struct fixture *f = *state;
    const struct d dd[1] = {{4, NULL}}, di[2] = {{1, NULL}, {1, NULL}}, du[1] = {{1, NULL}};
    struct gf_value *ins[3] = {add_input(f->m, "data", GF_FLOAT, 1, dd),
                               add_input(f->m, "idx", GF_INT64, 2, di),
                               add_input(f->m, "upd", GF_FLOAT, 1, du)};
    one_node(f->m, "ScatterND", 3, ins);
    int64_t four = 4, one = 1, d11[2] = {1, 1};
    const int64_t idx[1] = {9};
    struct gf_tensor *in[3] = {tensor(f->data, "data", GF_FLOAT, 1, &four, NULL),
                               tensor(f->data, "idx", GF_INT64, 2, d11, idx),
                               tensor(f->data, "upd", GF_FLOAT, 1, &one, NULL)};
    assert_int_equal(run(f->m, NULL, 3, in), GF_ERR_INVALID);
    expect_msg("the_node", "9", NULL);
}

/* Reshape(x: float[n], shape: int64[2]) with a shape whose size differs */
static void reshape_mismatch(void **state)
{
    struct fixture *f = *state;
    const struct d dx[1] = {{-1, "n"}}, ds[1] = {{2, NULL}};
    struct gf_value *ins[2] = {add_input(f->m, "x", GF_FLOAT, 1, dx),
                               add_input(f->m, "shape", GF_INT64, 1, ds)};
    one_node(f->m, "Reshape", 2, ins);
    int64_t six = 6, two = 2;
    const int64_t shape[2] = {4, 2};
    struct gf_tensor *in[2] = {tensor(f->data, "x", GF_FLOAT, 1, &six, NULL),
                               tensor(f->data, "shape", GF_INT64, 1, &two, shape)};
    assert_int_equal(run(f->m, NULL, 2, in), GF_ERR_INVALID);
    expect_msg("the_node", "Reshape", NULL);
}

/* MatMul of float[64,64] by itself under a 1 KiB limit */
static void over_memory_limit(void **state)
{
    struct fixture *f = *state;
    const struct d dims[2] = {{64, NULL}, {64, NULL}};
    struct gf_value *x = add_input(f->m, "x", GF_FLOAT, 2, dims);
    struct gf_value *ins[2] = {x, x};
    struct gf_node *mm = one_node(f->m, "MatMul", 2, ins);
    /* a second node so the MatMul output is an intermediate */
    struct gf_value *z = gf_graph_new_value(f->m->graph, "z", NULL);
    struct gf_value *y = mm->outputs[0];
    gf_graph_set_output(f->m->graph, 0, z);
    y->is_output = false;
    struct gf_value *rin[1] = {y};
    assert_non_null(gf_graph_add_node(f->m->graph, "Relu", "", "relu", 1, rin, 1, &z));
    int64_t d[2] = {64, 64};
    struct gf_tensor *in[1] = {tensor(f->data, "x", GF_FLOAT, 2, d, NULL)};
    struct gf_exec_opts o = {.max_memory = 1024};
    assert_int_equal(run(f->m, &o, 1, in), GF_ERR_NOMEM);
    expect_msg("16384", "1024", "limit");
    o.max_memory = 1 << 20;
    assert_int_equal(run(f->m, &o, 1, in), GF_OK);
}

/* A graph output past the memory limit: on the CPU outputs live in memory
 * of their own, outside the block, and count towards the limit too (a
 * fuzzed model's Expand to 1.3 GB under a 64 MB limit was allocated). */
static void output_over_memory_limit(void **state)
{
    struct fixture *f = *state;
    const struct d one[1] = {{1, NULL}};
    int64_t n1 = 1, big = INT64_C(1) << 26; /* 256 MiB of floats */
    struct gf_value *sv = gf_graph_new_value(f->m->graph, "s", NULL);
    assert_int_equal(gf_value_set_initializer(sv, tensor(f->m, "s", GF_INT64, 1, &n1, &big)),
                     GF_OK);
    struct gf_value *ins[2] = {add_input(f->m, "x", GF_FLOAT, 1, one), sv};
    struct gf_value *y = gf_graph_new_value(f->m->graph, "y", NULL);
    assert_non_null(gf_graph_add_node(f->m->graph, "Expand", "", "e", 2, ins, 1, &y));
    assert_int_equal(gf_graph_add_output(f->m->graph, y), GF_OK);
    float x1 = 1;
    struct gf_tensor *in[1] = {tensor(f->data, "x", GF_FLOAT, 1, &n1, &x1)};
    struct gf_exec_opts o = {.max_memory = 64u << 20};
    assert_int_equal(run(f->m, &o, 1, in), GF_ERR_NOMEM);
    expect_msg("268435456 of outputs", "67108864", "limit");
}

/* Eight Expands of float[1] to [2^60] (2^62 bytes each) all live at a
 * Sum: the activations add up to 2^65 bytes, which once wrapped in the
 * planner's offsets; now refused before anything is allocated. */
static void activations_overflow(void **state)
{
    struct fixture *f = *state;
    struct gf_graph *g = f->m->graph;
    const struct d one[1] = {{1, NULL}};
    int64_t n1 = 1, big = INT64_C(1) << 60;
    struct gf_value *sv = gf_graph_new_value(g, "s", NULL);
    assert_int_equal(gf_value_set_initializer(sv, tensor(f->m, "s", GF_INT64, 1, &n1, &big)),
                     GF_OK);
    struct gf_value *ys[8];
    struct gf_tensor *in[8];
    float x1 = 1;
    for (int i = 0; i < 8; i++) {
        char xn[16], yn[16];
        snprintf(xn, sizeof(xn), "x%d", i);
        snprintf(yn, sizeof(yn), "e%d", i);
        struct gf_value *ins[2] = {add_input(f->m, xn, GF_FLOAT, 1, one), sv};
        ys[i] = gf_graph_new_value(g, yn, NULL);
        assert_non_null(gf_graph_add_node(g, "Expand", "", yn, 2, ins, 1, &ys[i]));
        in[i] = tensor(f->data, xn, GF_FLOAT, 1, &n1, &x1);
    }
    struct gf_value *y = gf_graph_new_value(g, "y", NULL);
    assert_non_null(gf_graph_add_node(g, "Sum", "", "sum", 8, ys, 1, &y));
    assert_int_equal(gf_graph_add_output(g, y), GF_OK);
    assert_int_equal(run(f->m, &(struct gf_exec_opts){0}, 8, in), GF_ERR_NOMEM);
    expect_msg("activations", "need more than", NULL);
}

/* Floats read as int64: NaN gives 0, inf and out-of-range values saturate
 * (a plain cast is undefined), as do byte counts; empty strings compare equal without a
 * memcmp on their NULL data. */
static void hostile_values(void **state)
{
    (void)state;
    float f[5] = {NAN, INFINITY, -INFINITY, 1e30f, -2.5f};
    int64_t dims[1] = {5};
    struct gf_tensor t = {.dtype = GF_FLOAT, .rank = 1, .dims = dims, .nelem = 5,
                          .nbytes = sizeof(f), .data = f};
    assert_int_equal(gf_tensor_get_i64(&t, 0), 0);
    assert_true(gf_tensor_get_i64(&t, 1) == INT64_MAX);
    assert_true(gf_tensor_get_i64(&t, 2) == INT64_MIN);
    assert_true(gf_tensor_get_i64(&t, 3) == INT64_MAX);
    assert_int_equal(gf_tensor_get_i64(&t, 4), -2);

    /* byte counts saturate instead of wrapping */
    assert_true(gf_dtype_bytes(GF_FLOAT, (size_t)1 << 62) == SIZE_MAX);
    assert_true(gf_dtype_bytes(GF_INT4, SIZE_MAX) == SIZE_MAX / 2 + 1);
    assert_int_equal(gf_dtype_bytes(GF_DOUBLE, 3), 24);

    struct gf_bytes empty[2] = {{NULL, 0}, {NULL, 0}}, other[2] = {{NULL, 0}, {NULL, 0}};
    int64_t sd[1] = {2};
    struct gf_tensor a = {.dtype = GF_STRING, .rank = 1, .dims = sd, .nelem = 2,
                          .strings = empty};
    struct gf_tensor b = a;
    b.strings = other;
    double worst;
    assert_true(gf_tensor_allclose(&a, &b, 0, 0, &worst));
    other[1] = (struct gf_bytes){(const uint8_t *)"x", 1};
    assert_false(gf_tensor_allclose(&a, &b, 0, 0, &worst));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(wrong_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_size, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(missing_input, setup, teardown),
        cmocka_unit_test_setup_teardown(symbol_two_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(broadcast_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(unsupported_op, setup, teardown),
        cmocka_unit_test_setup_teardown(div_by_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(mod_by_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(gather_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(scatter_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(reshape_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(over_memory_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(activations_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(output_over_memory_limit, setup, teardown),
        cmocka_unit_test(hostile_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
