/* Tests of the CPU layout kernels: the ONNX node tests, then unit tests for
 * what those miss (odd and empty shapes, sizes that split across threads,
 * opset variants, every error path), each checked against a plain
 * reference loop written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nodetest.h"

static const char *const layout_ops[] = {
    "Constant", "ConstantOfShape", "Shape", "Size", "Range", "Transpose", "Reshape",
    "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Expand", "Tile", "Pad",
    "Trilu", "OneHot", NULL,
};

#define NODE_TESTS_PASSING 127 /* reached; a drop is a regression */

static void test_node_tests(void **state)
{
    (void)state;
    struct nodetest_counts c = nodetest_run_ops(layout_ops, true);
    assert_int_equal(c.failed, 0);
    assert_true(c.passed >= NODE_TESTS_PASSING);
}

/* ---- harness: one node, views, run ------------------------------------------ */

#define MAX_IO 8

struct kcase {
    struct gf_model *m;
    struct gf_node *n;
    struct gf_tview in[MAX_IO], out[MAX_IO];
    size_t n_in, n_out;
};

static void kc_init(struct kcase *c, int64_t opset, const char *op, size_t n_in, size_t n_out)
{
    memset(c, 0, sizeof(*c));
    c->m = gf_model_new(8, "t");
    assert_non_null(c->m);
    assert_int_equal(gf_model_set_opset(c->m, "", opset), GF_OK);
    struct gf_value *ins[MAX_IO], *outs[MAX_IO];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(c->m->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(c->m->graph, NULL, "out");
    c->n = gf_graph_add_node(c->m->graph, op, "", "n0", n_in, ins, n_out, outs);
    assert_non_null(c->n);
    c->n_in = n_in;
    c->n_out = n_out;
}

static void kc_in(struct kcase *c, size_t i, enum gf_dtype t, int rank, const int64_t *dims,
                  const void *data)
{
    c->in[i].dtype = t;
    gf_tview_set_shape(&c->in[i], rank, dims);
    c->in[i].data = (void *)data;
}

/* Scalar or 1-D int64 input. */
static void kc_ints(struct kcase *c, size_t i, size_t n, const int64_t *v)
{
    int64_t d = (int64_t)n;
    kc_in(c, i, GF_INT64, 1, &d, v);
}

static void *kc_out(struct kcase *c, size_t i, enum gf_dtype t, int rank, const int64_t *dims)
{
    c->out[i].dtype = t;
    gf_tview_set_shape(&c->out[i], rank, dims);
    size_t bytes = gf_tview_bytes(&c->out[i]);
    c->out[i].data = malloc(bytes ? bytes : 1);
    memset(c->out[i].data, 0xcd, bytes); /* garbage: every byte must be written */
    return c->out[i].data;
}

static enum gf_status kc_run(struct kcase *c, int threads)
{
    const struct gf_kernel *k = gf_kernel_find(gf_backend_get("cpu"), c->n, c->in, c->n_in);
    assert_non_null(k);
    struct gf_kernel_args a = {.node = c->n, .in = c->in, .n_in = c->n_in, .out = c->out,
                               .n_out = c->n_out, .n_threads = threads,
                               .backend = gf_backend_get("cpu")};
    void *ws = NULL;
    if (k->workspace)
        ws = a.workspace = malloc(k->workspace(&a)); /* exact size: ASan sees overruns */
    enum gf_status st = k->run(&a);
    free(ws);
    return st;
}

static void kc_free(struct kcase *c)
{
    for (size_t i = 0; i < MAX_IO; i++)
        free(c->out[i].data);
    gf_model_free(c->m);
}

/* The run fails with GF_ERR_INVALID and a message containing each needle. */
static void expect_invalid(struct kcase *c, const char *needle, const char *needle2)
{
    enum gf_status st = kc_run(c, 2);
    if (st != GF_ERR_INVALID)
        fail_msg("expected GF_ERR_INVALID, got %d (%s)", st, st ? gf_last_error() : "ok");
    const char *msg = gf_last_error();
    if (!strstr(msg, needle) || (needle2 && !strstr(msg, needle2)))
        fail_msg("message '%s' lacks '%s' / '%s'", msg, needle, needle2 ? needle2 : "");
    assert_non_null(strstr(msg, "node 'n0'"));
}

static void set_ints(struct kcase *c, const char *name, size_t n, const int64_t *v)
{
    assert_int_equal(gf_node_set_attr_ints(c->n, name, n, v), GF_OK);
}

/* ---- reference helpers -------------------------------------------------------- */

static size_t numel(int rank, const int64_t *dims)
{
    size_t n = 1;
    for (int k = 0; k < rank; k++)
        n *= (size_t)dims[k];
    return n;
}

static void unravel(size_t flat, int rank, const int64_t *dims, int64_t *idx)
{
    for (int k = rank - 1; k >= 0; k--) {
        idx[k] = (int64_t)(flat % (size_t)dims[k]);
        flat /= (size_t)dims[k];
    }
}

static size_t ravel(int rank, const int64_t *dims, const int64_t *idx)
{
    size_t f = 0;
    for (int k = 0; k < rank; k++)
        f = f * (size_t)dims[k] + (size_t)idx[k];
    return f;
}

/* n elements of es bytes, a byte pattern that differs between elements */
static void *pattern(size_t n, size_t es, unsigned seed)
{
    uint8_t *p = malloc(n * es + 1);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n * es; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = (uint8_t)(s >> 16);
    }
    return p;
}

static float *floats(size_t n, unsigned seed)
{
    float *f = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((i * 7919u + seed * 104729u) % 20011u) * 0.25f - 2000.0f;
    return f;
}

/* ---- Transpose ------------------------------------------------------------------ */

static void check_transpose(enum gf_dtype t, int rank, const int64_t *dims, const int64_t *perm,
                            int threads)
{
    size_t es = gf_dtype_size(t), n = numel(rank, dims);
    int64_t odims[GF_MAX_RANK], oi[GF_MAX_RANK], ii[GF_MAX_RANK];
    for (int k = 0; k < rank; k++)
        odims[k] = dims[perm ? perm[k] : rank - 1 - k];
    struct kcase c;
    kc_init(&c, 13, "Transpose", 1, 1);
    if (perm)
        set_ints(&c, "perm", (size_t)rank, perm);
    uint8_t *x = pattern(n, es, (unsigned)rank);
    kc_in(&c, 0, t, rank, dims, x);
    uint8_t *y = kc_out(&c, 0, t, rank, odims);
    assert_int_equal(kc_run(&c, threads), GF_OK);
    for (size_t o = 0; o < n; o++) {
        unravel(o, rank, odims, oi);
        for (int k = 0; k < rank; k++)
            ii[perm ? perm[k] : rank - 1 - k] = oi[k];
        assert_memory_equal(y + o * es, x + ravel(rank, dims, ii) * es, es);
    }
    free(x);
    kc_free(&c);
}

static void test_transpose(void **state)
{
    (void)state;
    static const enum gf_dtype types[] = {GF_INT8, GF_FLOAT16, GF_FLOAT, GF_DOUBLE, GF_BOOL};
    int64_t big[] = {67, 3, 129, 5}, p4[] = {2, 0, 3, 1}, id4[] = {0, 1, 2, 3};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        check_transpose(types[i], 4, big, p4, 2);
    check_transpose(GF_FLOAT, 4, big, id4, 3);  /* contiguous rows */
    check_transpose(GF_INT64, 4, big, NULL, 3); /* default: reversed */
    int64_t wide[] = {517, 300}, p2[] = {1, 0}; /* rows of 517 > one column block */
    check_transpose(GF_FLOAT, 2, wide, p2, 2);
    check_transpose(GF_INT8, 2, wide, p2, 3);
    int64_t odd[] = {1, 1, 7}, p3[] = {2, 1, 0};
    check_transpose(GF_UINT16, 3, odd, p3, 2);
    int64_t empty[] = {4, 0, 3}, pe[] = {1, 2, 0};
    check_transpose(GF_FLOAT, 3, empty, pe, 2);
    check_transpose(GF_FLOAT, 0, NULL, NULL, 2); /* scalar */

    struct kcase c;
    int64_t d2[] = {2, 3};
    float x[6] = {0};
    kc_init(&c, 13, "Transpose", 1, 1);
    set_ints(&c, "perm", 2, (int64_t[]){0, 0});
    kc_in(&c, 0, GF_FLOAT, 2, d2, x);
    kc_out(&c, 0, GF_FLOAT, 2, d2);
    expect_invalid(&c, "perm is not a permutation", NULL);
    set_ints(&c, "perm", 3, (int64_t[]){0, 1, 2});
    expect_invalid(&c, "perm has 3 entries", NULL);
    set_ints(&c, "perm", 2, (int64_t[]){0, 1});
    c.out[0].dims[0] = 3, c.out[0].dims[1] = 2; /* output shape disagrees */
    expect_invalid(&c, "output 0 has shape [3,2]", "[2,3]");
    kc_free(&c);
}

/* ---- Slice ------------------------------------------------------------------------ */

/* Indices a Python-style slice visits, by simulation. */
static int64_t ref_slice(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *list)
{
    if (start < 0)
        start += d;
    if (end < 0)
        end += d;
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? d : d - 1, n = 0;
    start = start < lo ? lo : start > hi ? hi : start;
    end = end < lo ? lo : end > hi ? hi : end;
    if (start < 0)
        return 0;
    for (int64_t i = start; step > 0 ? i < end : i > end; i += step)
        list[n++] = i;
    return n;
}

/* x [40, 33, 27] float; (starts, ends, axes, steps) given as inputs. */
static void check_slice(size_t ns, const int64_t *starts, const int64_t *ends,
                        const int64_t *axes, const int64_t *steps)
{
    int64_t dims[] = {40, 33, 27}, lists[3][64], cnt[3], st[3] = {0, 0, 0}, en[3], sp[3] = {1, 1, 1};
    for (int k = 0; k < 3; k++)
        en[k] = dims[k];
    for (size_t i = 0; i < ns; i++) {
        int64_t ax = axes ? (axes[i] < 0 ? axes[i] + 3 : axes[i]) : (int64_t)i;
        st[ax] = starts[i], en[ax] = ends[i], sp[ax] = steps ? steps[i] : 1;
    }
    for (int k = 0; k < 3; k++)
        cnt[k] = ref_slice(dims[k], st[k], en[k], sp[k], lists[k]);
    size_t n = numel(3, dims);
    float *x = floats(n, 3);
    struct kcase c;
    kc_init(&c, 13, "Slice", 5, 1);
    kc_in(&c, 0, GF_FLOAT, 3, dims, x);
    kc_ints(&c, 1, ns, starts);
    kc_ints(&c, 2, ns, ends);
    if (axes)
        kc_ints(&c, 3, ns, axes);
    if (steps)
        kc_ints(&c, 4, ns, steps);
    float *y = kc_out(&c, 0, GF_FLOAT, 3, cnt);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    size_t o = 0;
    for (int64_t i = 0; i < cnt[0]; i++)
        for (int64_t j = 0; j < cnt[1]; j++)
            for (int64_t k = 0; k < cnt[2]; k++, o++)
                assert_true(y[o] == x[(lists[0][i] * 33 + lists[1][j]) * 27 + lists[2][k]]);
    free(x);
    kc_free(&c);
}

static void test_slice(void **state)
{
    (void)state;
    check_slice(2, (int64_t[]){1, 0}, (int64_t[]){39, 33}, NULL, NULL);
    check_slice(3, (int64_t[]){-1, 100, 3}, (int64_t[]){INT64_MIN, -100, 40},
                (int64_t[]){0, 2, -2}, (int64_t[]){-3, -2, 1});
    check_slice(1, (int64_t[]){INT64_MAX}, (int64_t[]){INT64_MIN}, (int64_t[]){1},
                (int64_t[]){INT64_MIN}); /* one element: the last */
    check_slice(1, (int64_t[]){5}, (int64_t[]){5}, (int64_t[]){2}, NULL); /* empty */
    check_slice(1, (int64_t[]){-1000}, (int64_t[]){1000}, (int64_t[]){-1},
                (int64_t[]){INT64_MAX});
    check_slice(2, (int64_t[]){3, 30}, (int64_t[]){-2, 2}, (int64_t[]){-3, 1},
                (int64_t[]){7, -5});

    /* opset 1: attributes */
    struct kcase c;
    float x[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int64_t d[] = {3, 4}, od[] = {2, 2};
    kc_init(&c, 1, "Slice", 1, 1);
    set_ints(&c, "starts", 2, (int64_t[]){1, -3});
    set_ints(&c, "ends", 2, (int64_t[]){100, 3});
    kc_in(&c, 0, GF_FLOAT, 2, d, x);
    float *y = kc_out(&c, 0, GF_FLOAT, 2, od);
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_true(y[0] == 5 && y[1] == 6 && y[2] == 9 && y[3] == 10);
    set_ints(&c, "axes", 2, (int64_t[]){0, 0});
    expect_invalid(&c, "axis 0 is sliced twice", NULL);
    set_ints(&c, "axes", 2, (int64_t[]){0, 2});
    expect_invalid(&c, "axis 2 is out of range [-2, 1]", NULL);
    set_ints(&c, "ends", 1, (int64_t[]){1});
    expect_invalid(&c, "starts, ends, axes and steps have 2, 1", NULL);
    kc_free(&c);

    kc_init(&c, 13, "Slice", 5, 1);
    kc_in(&c, 0, GF_FLOAT, 2, d, x);
    kc_ints(&c, 1, 1, (int64_t[]){0});
    kc_ints(&c, 2, 1, (int64_t[]){2});
    kc_ints(&c, 4, 1, (int64_t[]){0});
    kc_out(&c, 0, GF_FLOAT, 2, od);
    expect_invalid(&c, "steps[0] is 0", NULL);
    kc_free(&c);
}

/* Small deterministic generator for the randomized cases below. */
static uint32_t rng_state = 12345;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (rng_state >> 8) % n;
}

/* Element types of every size the copies specialize (1, 2, 4, 8, 16 bytes). */
static const enum gf_dtype move_types[] = {GF_INT8,  GF_BOOL,  GF_FLOAT16,   GF_BFLOAT16,
                                           GF_FLOAT, GF_INT32, GF_DOUBLE,    GF_INT64,
                                           GF_UINT16, GF_COMPLEX64, GF_COMPLEX128};
#define N_MOVE_TYPES (sizeof(move_types) / sizeof(move_types[0]))

/* A random shape of `rank` dims, at most `cap` elements; size-1 axes often,
 * sizes around the tile edges (4, 8, 16, 64) and odd ones. */
static void random_dims(int rank, int64_t *dims, size_t cap)
{
    static const int64_t sizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 130};
    size_t n;
    do {
        n = 1;
        for (int k = 0; k < rank; k++)
            n *= (size_t)(dims[k] = sizes[rnd(sizeof(sizes) / sizeof(sizes[0]))]);
    } while (n > cap);
}

/* Many perms, shapes and element sizes against the reference loop: ranks 1
 * to 6, size-1 axes, kept inner axes, odd sizes, empty tensors, 1-3 threads. */
static void test_transpose_random(void **state)
{
    (void)state;
    rng_state = 18;
    for (int it = 0; it < 600; it++) {
        int rank = 1 + (int)rnd(6);
        int64_t dims[6], perm[6];
        random_dims(rank, dims, it % 10 == 0 ? 300000 : 20000);
        if (it % 37 == 0)
            dims[rnd((uint32_t)rank)] = 0; /* empty */
        for (int k = 0; k < rank; k++)
            perm[k] = k;
        for (int k = rank - 1; k > 0; k--) { /* Fisher-Yates */
            int j = (int)rnd((uint32_t)k + 1);
            int64_t t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
        }
        check_transpose(move_types[rnd(N_MOVE_TYPES)], rank, dims, perm, 1 + (int)rnd(3));
    }
    /* the models' shapes, each element size, across threads */
    static const struct {
        int rank;
        int64_t dims[4], perm[4];
    } fixed[] = {
        {4, {1, 128, 8, 64}, {0, 2, 1, 3}}, {4, {2, 8, 128, 64}, {0, 2, 1, 3}},
        {4, {2, 33, 8, 64}, {0, 2, 3, 1}},  {4, {1, 8, 128, 64}, {0, 1, 3, 2}},
        {3, {8, 64, 128}, {0, 2, 1}},       {2, {513, 300}, {1, 0}},
        {2, {300, 513}, {1, 0}},            {2, {1, 4097}, {1, 0}},
        {2, {4097, 3}, {1, 0}},             {3, {3, 1000, 5}, {2, 1, 0}},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        for (size_t t = 0; t < N_MOVE_TYPES; t++)
            check_transpose(move_types[t], fixed[i].rank, fixed[i].dims, fixed[i].perm,
                            1 + (int)(t % 3));
}

/* Slices of random shapes, steps of either sign, every element size,
 * against ref_slice's index lists. */
static void test_slice_random(void **state)
{
    (void)state;
    rng_state = 7;
    for (int it = 0; it < 300; it++) {
        int rank = 1 + (int)rnd(4);
        int64_t dims[4], st[4], en[4], sp[4], axes[4], cnt[4], lists[4][140];
        random_dims(rank, dims, 40000);
        for (int k = 0; k < rank; k++) {
            int64_t d = dims[k];
            /* starts from -d: below, ONNX clamps into the axis and numpy (ref_slice) not */
            st[k] = (int64_t)rnd((uint32_t)(2 * d + 2)) - d;
            en[k] = (int64_t)rnd((uint32_t)(2 * d + 3)) - d - 1;
            sp[k] = rnd(3) ? 1 : (int64_t)rnd(4) - 2;
            sp[k] = sp[k] ? sp[k] : -1;
            if (sp[k] == 1 && rnd(2)) /* often the whole axis */
                st[k] = 0, en[k] = d;
            axes[k] = k;
            cnt[k] = ref_slice(d, st[k], en[k], sp[k], lists[k]);
        }
        enum gf_dtype t = move_types[rnd(N_MOVE_TYPES)];
        size_t es = gf_dtype_size(t), n = numel(rank, dims), on = numel(rank, cnt);
        uint8_t *x = pattern(n, es, (unsigned)it);
        struct kcase c;
        kc_init(&c, 13, "Slice", 5, 1);
        kc_in(&c, 0, t, rank, dims, x);
        kc_ints(&c, 1, (size_t)rank, st);
        kc_ints(&c, 2, (size_t)rank, en);
        kc_ints(&c, 3, (size_t)rank, axes);
        kc_ints(&c, 4, (size_t)rank, sp);
        uint8_t *y = kc_out(&c, 0, t, rank, cnt);
        assert_int_equal(kc_run(&c, 1 + it % 3), GF_OK);
        int64_t oi[4], ii[4];
        for (size_t o = 0; o < on; o++) {
            unravel(o, rank, cnt, oi);
            for (int k = 0; k < rank; k++)
                ii[k] = lists[k][oi[k]];
            assert_memory_equal(y + o * es, x + ravel(rank, dims, ii) * es, es);
        }
        free(x);
        kc_free(&c);
    }
}

/* Expand of random shapes with broadcast axes anywhere (the inner one
 * included), every element size. */
static void test_expand_random(void **state)
{
    (void)state;
    rng_state = 99;
    for (int it = 0; it < 300; it++) {
        int rank = 1 + (int)rnd(5), xr = 1 + (int)rnd((uint32_t)rank);
        int64_t od[5], xd[5], oi[5], ii[5];
        random_dims(rank, od, 30000);
        for (int k = 0; k < xr; k++) /* x aligns with the trailing axes */
            xd[k] = rnd(2) ? 1 : od[rank - xr + k];
        enum gf_dtype t = move_types[rnd(N_MOVE_TYPES)];
        size_t es = gf_dtype_size(t), n = numel(xr, xd), on = numel(rank, od);
        uint8_t *x = pattern(n, es, (unsigned)it);
        struct kcase c;
        kc_init(&c, 13, "Expand", 2, 1);
        kc_in(&c, 0, t, xr, xd, x);
        kc_ints(&c, 1, (size_t)rank, od);
        uint8_t *y = kc_out(&c, 0, t, rank, od);
        assert_int_equal(kc_run(&c, 1 + it % 3), GF_OK);
        for (size_t o = 0; o < on; o++) {
            unravel(o, rank, od, oi);
            for (int k = 0; k < xr; k++)
                ii[k] = xd[k] == 1 ? 0 : oi[rank - xr + k];
            assert_memory_equal(y + o * es, x + ravel(xr, xd, ii) * es, es);
        }
        free(x);
        kc_free(&c);
    }
}

/* ---- Gather family ----------------------------------------------------------------- */

static void test_gather(void **state)
{
    (void)state;
    /* data [300, 7, 11] int32, axis 1, indices [2, 3] int64 with negatives */
    int64_t dd[] = {300, 7, 11}, id[] = {2, 3}, od[] = {300, 2, 3, 11};
    int64_t ind[] = {-1, 0, 6, 3, -7, 2};
    size_t n = numel(3, dd), on = numel(4, od);
    int32_t *x = pattern(n, 4, 1);
    struct kcase c;
    kc_init(&c, 13, "Gather", 2, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", -2), GF_OK);
    kc_in(&c, 0, GF_INT32, 3, dd, x);
    kc_in(&c, 1, GF_INT64, 2, id, ind);
    int32_t *y = kc_out(&c, 0, GF_INT32, 4, od);
    assert_int_equal(kc_run(&c, 3), GF_OK);
    for (size_t o = 0; o < on; o++) {
        int64_t i[4];
        unravel(o, 4, od, i);
        int64_t v = ind[i[1] * 3 + i[2]];
        assert_int_equal(y[o], x[(i[0] * 7 + (v < 0 ? v + 7 : v)) * 11 + i[3]]);
    }
    ind[4] = 7;
    expect_invalid(&c, "indices element 4 (value 7) is out of range [-7, 6]", "axis 1");
    ind[4] = -8;
    expect_invalid(&c, "value -8", NULL);
    kc_free(&c);

    /* scalar int32 index on a 1-D tensor: scalar output; empty indices */
    float v[5] = {1, 2, 3, 4, 5};
    int32_t i32 = -2;
    int64_t five = 5, zero = 0;
    kc_init(&c, 13, "Gather", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &five, v);
    kc_in(&c, 1, GF_INT32, 0, NULL, &i32);
    float *s = kc_out(&c, 0, GF_FLOAT, 0, NULL);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_true(*s == 4);
    kc_in(&c, 1, GF_INT64, 1, &zero, NULL);
    free(c.out[0].data);
    kc_out(&c, 0, GF_FLOAT, 1, &zero);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 1), GF_OK);
    expect_invalid(&c, "axis 1 is out of range [-1, 0]", NULL);
    kc_free(&c);
    free(x);
}

static void test_gather_elements(void **state)
{
    (void)state;
    /* data [3, 4] float, indices [2, 4] along axis 0 (negatives) */
    float x[12] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
    int64_t dd[] = {3, 4}, id[] = {2, 4};
    int64_t ind[] = {0, -1, 1, 2, -3, 0, 2, 1};
    struct kcase c;
    kc_init(&c, 13, "GatherElements", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 2, dd, x);
    kc_in(&c, 1, GF_INT64, 2, id, ind);
    float *y = kc_out(&c, 0, GF_FLOAT, 2, id);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int i = 0; i < 8; i++) {
        int64_t v = ind[i] < 0 ? ind[i] + 3 : ind[i];
        assert_true(y[i] == x[v * 4 + i % 4]);
    }
    ind[5] = 3;
    expect_invalid(&c, "indices element 5 (value 3) is out of range [-3, 2]", NULL);
    kc_free(&c);

    /* a large one across threads: data [50, 700], indices [50, 650] along axis 1 */
    int64_t bd[] = {50, 700}, bi[] = {50, 650};
    size_t n = numel(2, bi);
    uint16_t *bx = pattern(50 * 700, 2, 9);
    int32_t *bind = malloc((n + 650) * sizeof(int32_t)); /* room for 51 rows */
    for (size_t i = 0; i < n + 650; i++)
        bind[i] = (int32_t)((i * 31) % 1400) - 700;
    kc_init(&c, 13, "GatherElements", 2, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 1), GF_OK);
    kc_in(&c, 0, GF_UINT16, 2, bd, bx);
    kc_in(&c, 1, GF_INT32, 2, bi, bind);
    uint16_t *by = kc_out(&c, 0, GF_UINT16, 2, bi);
    assert_int_equal(kc_run(&c, 3), GF_OK);
    for (size_t i = 0; i < n; i++) {
        int64_t v = bind[i] < 0 ? bind[i] + 700 : bind[i];
        assert_int_equal(by[i], bx[i / 650 * 700 + (size_t)v]);
    }
    int64_t wide[] = {51, 650};
    kc_in(&c, 1, GF_INT32, 2, wide, bind); /* more rows than data has */
    free(c.out[0].data);
    kc_out(&c, 0, GF_UINT16, 2, wide);
    expect_invalid(&c, "indices dimension 0 is 51, larger than data's 50", NULL);
    kc_free(&c);
    free(bx);
    free(bind);
}

static void test_gather_nd(void **state)
{
    (void)state;
    /* batch_dims 1: data [2, 3, 4], indices [2, 5, 1] -> out [2, 5, 4] */
    int64_t dd[] = {2, 3, 4}, id[] = {2, 5, 1}, od[] = {2, 5, 4};
    int64_t ind[] = {0, 2, -1, 1, -3, 1, 1, 0, 2, -2};
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    struct kcase c;
    kc_init(&c, 13, "GatherND", 2, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "batch_dims", 1), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 3, dd, x);
    kc_in(&c, 1, GF_INT64, 3, id, ind);
    float *y = kc_out(&c, 0, GF_FLOAT, 3, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 5; t++) {
            int64_t v = ind[b * 5 + t];
            v = v < 0 ? v + 3 : v;
            for (int j = 0; j < 4; j++)
                assert_true(y[(b * 5 + t) * 4 + j] == x[(b * 3 + v) * 4 + j]);
        }
    ind[7] = 3;
    expect_invalid(&c, "indices element 7 (value 3) is out of range [-3, 2]", "axis 1");
    ind[7] = 0;
    int64_t bad[] = {3, 5, 1};
    kc_in(&c, 1, GF_INT64, 3, bad, ind);
    expect_invalid(&c, "batch dimension 0 differs", NULL);
    kc_in(&c, 1, GF_INT64, 3, id, ind);
    assert_int_equal(gf_node_set_attr_int(c.n, "batch_dims", 3), GF_OK);
    expect_invalid(&c, "batch_dims 3 must be in [0, 3)", NULL);
    kc_free(&c);

    /* full tuples: data [2, 3], indices [4, 2] -> out [4] */
    int64_t d2[] = {2, 3}, i2[] = {4, 2}, o2 = 4;
    int64_t tup[] = {0, 0, 1, 2, -1, -3, 0, 1};
    kc_init(&c, 13, "GatherND", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 2, d2, x);
    kc_in(&c, 1, GF_INT64, 2, i2, tup);
    y = kc_out(&c, 0, GF_FLOAT, 1, &o2);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_true(y[0] == 0 && y[1] == 5 && y[2] == 3 && y[3] == 1);
    int64_t i3[] = {4, 3};
    kc_in(&c, 1, GF_INT64, 2, i3, tup);
    expect_invalid(&c, "index tuples of length 3 exceed", NULL);
    kc_free(&c);
}

/* ---- Scatter ------------------------------------------------------------------------- */

static float ref_combine(const char *red, float a, float b)
{
    if (!strcmp(red, "add"))
        return a + b;
    if (!strcmp(red, "mul"))
        return a * b;
    if (!strcmp(red, "max"))
        return a > b ? a : b;
    if (!strcmp(red, "min"))
        return a < b ? a : b;
    return b;
}

static void test_scatter_nd(void **state)
{
    (void)state;
    /* data [4, 3] float, indices [3, 1] with a repeat, updates [3, 3] */
    static const char *const reds[] = {"none", "add", "mul", "max", "min"};
    int64_t dd[] = {4, 3}, id[] = {3, 1}, ud[] = {3, 3};
    int64_t ind[] = {1, -1, -3};
    float x[12], u[9];
    for (int i = 0; i < 12; i++)
        x[i] = (float)(i % 5) - 1.5f;
    for (int i = 0; i < 9; i++)
        u[i] = (float)(i * 3 % 7) - 2.0f;
    for (size_t r = 0; r < 5; r++) {
        struct kcase c;
        kc_init(&c, 18, "ScatterND", 3, 1);
        assert_int_equal(gf_node_set_attr_string(c.n, "reduction", reds[r]), GF_OK);
        kc_in(&c, 0, GF_FLOAT, 2, dd, x);
        kc_in(&c, 1, GF_INT64, 2, id, ind);
        kc_in(&c, 2, GF_FLOAT, 2, ud, u);
        float *y = kc_out(&c, 0, GF_FLOAT, 2, dd), want[12];
        memcpy(want, x, sizeof(want));
        for (int t = 0; t < 3; t++) /* -3 and 1 are the same row: combined in order */
            for (int j = 0; j < 3; j++) {
                int64_t row = ind[t] < 0 ? ind[t] + 4 : ind[t];
                want[row * 3 + j] = ref_combine(reds[r], want[row * 3 + j], u[t * 3 + j]);
            }
        assert_int_equal(kc_run(&c, 2), GF_OK);
        assert_memory_equal(y, want, sizeof(want));
        if (r == 0) {
            ind[1] = 4;
            expect_invalid(&c, "indices element 1 (value 4) is out of range [-4, 3]", NULL);
            ind[1] = -1;
            kc_in(&c, 2, GF_FLOAT, 2, (int64_t[]){3, 2}, u);
            expect_invalid(&c, "updates have shape [3,2]", NULL);
        }
        kc_free(&c);
    }

    /* int32 add wraps instead of overflowing; bool add is "or" */
    struct kcase c;
    int64_t two = 2, one[] = {1, 1};
    int32_t xi[2] = {INT32_MAX, 5}, ui[1] = {1};
    int64_t at[] = {0};
    kc_init(&c, 16, "ScatterND", 3, 1);
    assert_int_equal(gf_node_set_attr_string(c.n, "reduction", "add"), GF_OK);
    kc_in(&c, 0, GF_INT32, 1, &two, xi);
    kc_in(&c, 1, GF_INT64, 2, one, at);
    kc_in(&c, 2, GF_INT32, 1, (int64_t[]){1}, ui);
    int32_t *yi = kc_out(&c, 0, GF_INT32, 1, &two);
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_int_equal(yi[0], INT32_MIN);
    assert_int_equal(yi[1], 5);
    assert_int_equal(gf_node_set_attr_string(c.n, "reduction", "xor"), GF_OK);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), c.n, c.in, c.n_in));
    kc_free(&c);
}

static void test_scatter_elements(void **state)
{
    (void)state;
    /* data [3, 5] double, axis 1, indices/updates [3, 4] with repeats */
    static const char *const reds[] = {"none", "add", "mul", "max", "min"};
    int64_t dd[] = {3, 5}, id[] = {3, 4};
    int64_t ind[] = {0, -1, 4, 0, 2, 2, 2, -5, 1, 3, -2, 1};
    double x[15], u[12];
    for (int i = 0; i < 15; i++)
        x[i] = i * 0.5 - 3;
    for (int i = 0; i < 12; i++)
        u[i] = (i * 5 % 9) - 4.0;
    for (size_t r = 0; r < 5; r++) {
        struct kcase c;
        kc_init(&c, 18, "ScatterElements", 3, 1);
        assert_int_equal(gf_node_set_attr_int(c.n, "axis", -1), GF_OK);
        assert_int_equal(gf_node_set_attr_string(c.n, "reduction", reds[r]), GF_OK);
        kc_in(&c, 0, GF_DOUBLE, 2, dd, x);
        kc_in(&c, 1, GF_INT64, 2, id, ind);
        kc_in(&c, 2, GF_DOUBLE, 2, id, u);
        double *y = kc_out(&c, 0, GF_DOUBLE, 2, dd), want[15];
        memcpy(want, x, sizeof(want));
        for (int i = 0; i < 12; i++) {
            int64_t col = ind[i] < 0 ? ind[i] + 5 : ind[i];
            double *w = &want[i / 4 * 5 + col];
            *w = !strcmp(reds[r], "none") ? u[i] : ref_combine(reds[r], (float)*w, (float)u[i]);
        }
        assert_int_equal(kc_run(&c, 2), GF_OK);
        for (int i = 0; i < 15; i++)
            assert_true(y[i] == want[i]);
        if (r == 1) {
            ind[6] = -6;
            expect_invalid(&c, "indices element 6 (value -6) is out of range [-5, 4]", NULL);
            ind[6] = 2;
            kc_in(&c, 2, GF_DOUBLE, 2, (int64_t[]){3, 3}, u);
            expect_invalid(&c, "updates have shape [3,3], indices [3,4]", NULL);
        }
        kc_free(&c);
    }
}

/* ---- Pad -------------------------------------------------------------------------------- */

/* numpy-style source index by repeated reflection / wrapping, -1 for the pad value */
static int64_t ref_pad_src(const char *mode, int64_t x, int64_t n)
{
    if (x >= 0 && x < n)
        return x;
    if (!strcmp(mode, "constant"))
        return -1;
    if (!strcmp(mode, "edge"))
        return x < 0 ? 0 : n - 1;
    if (!strcmp(mode, "wrap")) {
        while (x < 0)
            x += n;
        while (x >= n)
            x -= n;
        return x;
    }
    if (n == 1)
        return 0;
    while (x < 0 || x >= n)
        x = x < 0 ? -x : 2 * (n - 1) - x;
    return x;
}

/* x [r0, r1] int16 padded by (b0, b1, e0, e1): crop negatives, then pad */
static void check_pad(const char *mode, int64_t r0, int64_t r1, const int64_t *pads, int threads)
{
    int64_t dims[] = {r0, r1}, od[] = {r0 + pads[0] + pads[2], r1 + pads[1] + pads[3]};
    int16_t *x = pattern((size_t)(r0 * r1), 2, 5), cv = -77;
    struct kcase c;
    kc_init(&c, 19, "Pad", 3, 1);
    assert_int_equal(gf_node_set_attr_string(c.n, "mode", mode), GF_OK);
    kc_in(&c, 0, GF_INT16, 2, dims, x);
    kc_ints(&c, 1, 4, pads);
    kc_in(&c, 2, GF_INT16, 0, NULL, &cv);
    int16_t *y = kc_out(&c, 0, GF_INT16, 2, od);
    assert_int_equal(kc_run(&c, threads), GF_OK);
    int64_t c0 = pads[0] < 0 ? -pads[0] : 0, c1 = pads[1] < 0 ? -pads[1] : 0;
    int64_t n0 = r0 - c0 - (pads[2] < 0 ? -pads[2] : 0), n1 = r1 - c1 - (pads[3] < 0 ? -pads[3] : 0);
    int64_t l0 = pads[0] > 0 ? pads[0] : 0, l1 = pads[1] > 0 ? pads[1] : 0;
    for (int64_t i = 0; i < od[0]; i++)
        for (int64_t j = 0; j < od[1]; j++) {
            int64_t s0 = ref_pad_src(mode, i - l0, n0), s1 = ref_pad_src(mode, j - l1, n1);
            int16_t want = s0 < 0 || s1 < 0 ? cv : x[(c0 + s0) * r1 + c1 + s1];
            assert_int_equal(y[i * od[1] + j], want);
        }
    free(x);
    kc_free(&c);
}

static void test_pad(void **state)
{
    (void)state;
    static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
    for (int m = 0; m < 4; m++) {
        check_pad(modes[m], 200, 150, (int64_t[]){3, 170, 5, -2}, 2); /* pad > axis, crop */
        check_pad(modes[m], 3, 1, (int64_t[]){7, 2, 8, 0}, 3);
        check_pad(modes[m], 9, 6, (int64_t[]){-4, -1, -5, 2}, 2); /* one row kept */
        check_pad(modes[m], 2, 2, (int64_t[]){0, 0, 0, 0}, 1);
    }
    check_pad("constant", 0, 3, (int64_t[]){1, 1, 2, 0}, 2); /* empty input */

    /* opset 18 axes input; constant_value omitted pads with 0 */
    struct kcase c;
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t d[] = {2, 3}, od[] = {2, 6};
    kc_init(&c, 18, "Pad", 4, 1);
    kc_in(&c, 0, GF_FLOAT, 2, d, x);
    kc_ints(&c, 1, 2, (int64_t[]){1, 2});
    kc_ints(&c, 3, 1, (int64_t[]){-1});
    float *y = kc_out(&c, 0, GF_FLOAT, 2, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    static const float want[] = {0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0};
    assert_memory_equal(y, want, sizeof(want));
    kc_ints(&c, 1, 3, (int64_t[]){1, 2, 3});
    expect_invalid(&c, "pads has 3 entries, expected 2", NULL);
    kc_ints(&c, 1, 4, (int64_t[]){1, 2, 0, 0});
    kc_ints(&c, 3, 2, (int64_t[]){1, -1});
    expect_invalid(&c, "axis 1 is listed twice", NULL);
    kc_free(&c);

    /* opset 2: pads and a float value attribute, converted to int32 */
    int32_t xi[2] = {7, 8};
    int64_t two = 2, four = 4;
    kc_init(&c, 2, "Pad", 1, 1);
    set_ints(&c, "pads", 2, (int64_t[]){1, 1});
    assert_int_equal(gf_node_set_attr_float(c.n, "value", -3.0f), GF_OK);
    kc_in(&c, 0, GF_INT32, 1, &two, xi);
    int32_t *yi = kc_out(&c, 0, GF_INT32, 1, &four);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_true(yi[0] == -3 && yi[1] == 7 && yi[2] == 8 && yi[3] == -3);
    set_ints(&c, "pads", 2, (int64_t[]){-2, -1});
    expect_invalid(&c, "crop more than the axis", NULL);
    kc_free(&c);

    /* reflect / edge need elements to copy */
    int64_t zd[] = {0, 2}, zo[] = {2, 2};
    kc_init(&c, 13, "Pad", 2, 1);
    assert_int_equal(gf_node_set_attr_string(c.n, "mode", "edge"), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 2, zd, NULL);
    kc_ints(&c, 1, 4, (int64_t[]){1, 0, 1, 0});
    kc_out(&c, 0, GF_FLOAT, 2, zo);
    expect_invalid(&c, "cannot pad axis 0 in mode 'edge'", NULL);
    assert_int_equal(gf_node_set_attr_string(c.n, "mode", "mirror"), GF_OK);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), c.n, c.in, c.n_in));
    kc_free(&c);
}

/* ---- Concat and Split ---------------------------------------------------------------- */

/* An empty result (no rows): every pointer may be NULL, none may be offset
 * (UBSan: "applying zero offset to null pointer"; found by fuzz_run). */
static void test_concat_empty(void **state)
{
    (void)state;
    struct kcase c;
    kc_init(&c, 13, "Concat", 2, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 1), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 2, (int64_t[]){0, 2}, NULL);
    kc_in(&c, 1, GF_FLOAT, 2, (int64_t[]){0, 3}, NULL);
    c.out[0].dtype = GF_FLOAT;
    gf_tview_set_shape(&c.out[0], 2, (int64_t[]){0, 5});
    c.out[0].data = NULL;
    assert_int_equal(kc_run(&c, 2), GF_OK);
    kc_free(&c);
}

static void test_concat_split(void **state)
{
    (void)state;
    /* three inputs [3, 5001, 2], [3, 1, 2], [3, 0, 2] along axis -2 */
    int64_t d0[] = {3, 5001, 2}, d1[] = {3, 1, 2}, d2[] = {3, 0, 2}, od[] = {3, 5002, 2};
    float *a = floats(numel(3, d0), 1), b[6] = {-1, -2, -3, -4, -5, -6};
    struct kcase c;
    kc_init(&c, 13, "Concat", 3, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", -2), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 3, d0, a);
    kc_in(&c, 1, GF_FLOAT, 3, d1, b);
    kc_in(&c, 2, GF_FLOAT, 3, d2, NULL);
    float *y = kc_out(&c, 0, GF_FLOAT, 3, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 5002; j++)
            for (int64_t k = 0; k < 2; k++) {
                float want = j < 5001 ? a[(i * 5001 + j) * 2 + k] : b[i * 2 + k];
                assert_true(y[(i * 5002 + j) * 2 + k] == want);
            }
    kc_in(&c, 1, GF_FLOAT, 3, (int64_t[]){3, 1, 3}, b);
    expect_invalid(&c, "input 1 (float [3,1,3]) does not match input 0", NULL);
    kc_in(&c, 1, GF_INT32, 3, d1, b);
    expect_invalid(&c, "input 1 (int32", NULL);
    c.out[0].data = NULL; /* y is kept for the Split below */
    kc_free(&c);

    /* Split the result back: split input {5001, 0, 1} */
    kc_init(&c, 13, "Split", 2, 3);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 1), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 3, od, y);
    int64_t sizes[] = {5001, 0, 1};
    kc_ints(&c, 1, 3, sizes);
    float *s0 = kc_out(&c, 0, GF_FLOAT, 3, d0);
    kc_out(&c, 1, GF_FLOAT, 3, d2);
    float *s2 = kc_out(&c, 2, GF_FLOAT, 3, d1);
    assert_int_equal(kc_run(&c, 3), GF_OK);
    assert_memory_equal(s0, a, numel(3, d0) * sizeof(float));
    assert_memory_equal(s2, b, sizeof(b));
    sizes[1] = 2;
    expect_invalid(&c, "split sizes add up to 5004, not 5002", NULL);
    sizes[1] = -1, sizes[2] = 2;
    expect_invalid(&c, "split[1] = -1 is negative", NULL);
    kc_ints(&c, 1, 2, sizes);
    expect_invalid(&c, "split has 2 entries for 3 outputs", NULL);
    kc_free(&c);
    free(a);
    free(y);

    /* opset 18 num_outputs: 7 -> 3, 3, 1; equal parts need a divisor */
    int64_t x7[7] = {0, 1, 2, 3, 4, 5, 6}, seven = 7, three = 3, one = 1;
    kc_init(&c, 18, "Split", 1, 3);
    assert_int_equal(gf_node_set_attr_int(c.n, "num_outputs", 3), GF_OK);
    kc_in(&c, 0, GF_INT64, 1, &seven, x7);
    int64_t *o0 = kc_out(&c, 0, GF_INT64, 1, &three), *o1 = kc_out(&c, 1, GF_INT64, 1, &three);
    int64_t *o2 = kc_out(&c, 2, GF_INT64, 1, &one);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_true(o0[0] == 0 && o0[2] == 2 && o1[0] == 3 && o1[2] == 5 && o2[0] == 6);
    assert_int_equal(gf_node_set_attr_int(c.n, "num_outputs", 2), GF_OK);
    expect_invalid(&c, "num_outputs is 2 but the node has 3 outputs", NULL);
    kc_free(&c);
    kc_init(&c, 13, "Split", 1, 3);
    kc_in(&c, 0, GF_INT64, 1, &seven, x7);
    kc_out(&c, 0, GF_INT64, 1, &three);
    expect_invalid(&c, "does not split into 3 equal parts", NULL);
    kc_free(&c);

    /* opset 11: split attribute; an omitted output is skipped */
    kc_init(&c, 11, "Split", 1, 2);
    set_ints(&c, "split", 2, (int64_t[]){2, 5});
    kc_in(&c, 0, GF_INT64, 1, &seven, x7);
    int64_t *p1 = kc_out(&c, 1, GF_INT64, 1, (int64_t[]){5});
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_true(p1[0] == 2 && p1[4] == 6);
    kc_free(&c);
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze -------------------------------------------------- */

static void test_reshape_family(void **state)
{
    (void)state;
    int64_t d[] = {2, 3, 4}, n = 24;
    uint8_t *x = pattern(24, 1, 2);
    struct kcase c;
    kc_init(&c, 14, "Reshape", 2, 1);
    kc_in(&c, 0, GF_UINT8, 3, d, x);
    int64_t shape[] = {0, -1, 2}, od[] = {2, 6, 2};
    kc_ints(&c, 1, 3, shape);
    uint8_t *y = kc_out(&c, 0, GF_UINT8, 3, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_memory_equal(y, x, 24);
    shape[0] = -1;
    expect_invalid(&c, "shape has more than one -1", NULL);
    shape[0] = 5, shape[1] = 5;
    expect_invalid(&c, "shape has 50 elements but the input has 24", NULL);
    shape[0] = 0, shape[1] = -1, shape[2] = 7;
    expect_invalid(&c, "cannot infer the -1 of shape: 24 elements are not a multiple of 14", NULL);
    shape[1] = -2;
    expect_invalid(&c, "shape[1] = -2 is invalid", NULL);
    kc_ints(&c, 1, 4, (int64_t[]){1, 1, 1, 0});
    expect_invalid(&c, "shape[3] is 0", "rank 3");
    /* allowzero: 0 is a real zero, so 24 elements do not fit */
    assert_int_equal(gf_node_set_attr_int(c.n, "allowzero", 1), GF_OK);
    kc_ints(&c, 1, 3, (int64_t[]){0, 4, 6});
    expect_invalid(&c, "shape has 0 elements", NULL);
    kc_free(&c);

    /* Flatten axis -1 -> [6, 4]; axis 4 out of range */
    kc_init(&c, 13, "Flatten", 1, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", -1), GF_OK);
    kc_in(&c, 0, GF_UINT8, 3, d, x);
    y = kc_out(&c, 0, GF_UINT8, 2, (int64_t[]){6, 4});
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_memory_equal(y, x, 24);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 4), GF_OK);
    expect_invalid(&c, "axis 4 is out of range [-3, 3]", NULL);
    kc_free(&c);

    /* Squeeze: axes input (13) and attribute (11); no axes: every 1 */
    int64_t s[] = {1, 24, 1};
    kc_init(&c, 13, "Squeeze", 2, 1);
    kc_in(&c, 0, GF_UINT8, 3, s, x);
    kc_ints(&c, 1, 1, (int64_t[]){-1});
    y = kc_out(&c, 0, GF_UINT8, 2, (int64_t[]){1, 24});
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_memory_equal(y, x, 24);
    kc_ints(&c, 1, 1, (int64_t[]){1});
    expect_invalid(&c, "cannot squeeze axis 1 of size 24", NULL);
    c.in[1].data = NULL;
    c.n_in = 1;
    free(c.out[0].data);
    kc_out(&c, 0, GF_UINT8, 1, &n);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    kc_free(&c);
    kc_init(&c, 11, "Squeeze", 1, 1);
    set_ints(&c, "axes", 2, (int64_t[]){0, -3});
    kc_in(&c, 0, GF_UINT8, 3, s, x);
    kc_out(&c, 0, GF_UINT8, 2, (int64_t[]){24, 1});
    expect_invalid(&c, "axis 0 is listed twice", NULL);
    kc_free(&c);

    /* Unsqueeze: [2, 3, 4] with axes {-1, 0} -> [1, 2, 3, 4, 1] */
    kc_init(&c, 13, "Unsqueeze", 2, 1);
    kc_in(&c, 0, GF_UINT8, 3, d, x);
    kc_ints(&c, 1, 2, (int64_t[]){-1, 0});
    y = kc_out(&c, 0, GF_UINT8, 5, (int64_t[]){1, 2, 3, 4, 1});
    assert_int_equal(kc_run(&c, 2), GF_OK);
    assert_memory_equal(y, x, 24);
    kc_ints(&c, 1, 2, (int64_t[]){4, -1});
    expect_invalid(&c, "axis 4 is listed twice", NULL);
    kc_ints(&c, 1, 2, (int64_t[]){5, 0});
    expect_invalid(&c, "axis 5 is out of range [-5, 4]", NULL);
    kc_free(&c);
    free(x);
}

/* ---- Expand and Tile ------------------------------------------------------------------- */

static void test_expand_tile(void **state)
{
    (void)state;
    /* Expand [3, 1] to shape [2, 1, 6]: [2, 3, 6] */
    float x[3] = {1, 2, 3};
    int64_t d[] = {3, 1}, od[] = {2, 3, 6};
    struct kcase c;
    kc_init(&c, 13, "Expand", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 2, d, x);
    kc_ints(&c, 1, 3, (int64_t[]){2, 1, 6});
    float *y = kc_out(&c, 0, GF_FLOAT, 3, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int i = 0; i < 36; i++)
        assert_true(y[i] == x[i / 6 % 3]);
    kc_ints(&c, 1, 2, (int64_t[]){4, 6});
    expect_invalid(&c, "cannot broadcast input dimension 3 to shape entry 4", NULL);
    kc_ints(&c, 1, 1, (int64_t[]){-2});
    expect_invalid(&c, "shape entry -2", NULL);
    kc_free(&c);

    /* a large Expand over threads: [1, 513] -> [97, 513] bf16 */
    int64_t e1[] = {1, 513}, e2[] = {97, 513};
    uint16_t *ex = pattern(513, 2, 4);
    kc_init(&c, 13, "Expand", 2, 1);
    kc_in(&c, 0, GF_BFLOAT16, 2, e1, ex);
    kc_ints(&c, 1, 2, e2);
    uint16_t *ey = kc_out(&c, 0, GF_BFLOAT16, 2, e2);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int i = 0; i < 97 * 513; i++)
        assert_int_equal(ey[i], ex[i % 513]);
    kc_free(&c);
    free(ex);

    /* Tile [5, 7] int8 by [41, 3] -> [205, 21] */
    int64_t td[] = {5, 7}, to[] = {205, 21};
    int8_t *tx = pattern(35, 1, 6);
    kc_init(&c, 13, "Tile", 2, 1);
    kc_in(&c, 0, GF_INT8, 2, td, tx);
    kc_ints(&c, 1, 2, (int64_t[]){41, 3});
    int8_t *ty = kc_out(&c, 0, GF_INT8, 2, to);
    assert_int_equal(kc_run(&c, 3), GF_OK);
    for (int i = 0; i < 205; i++)
        for (int j = 0; j < 21; j++)
            assert_int_equal(ty[i * 21 + j], tx[i % 5 * 7 + j % 7]);
    kc_ints(&c, 1, 2, (int64_t[]){-1, 3});
    expect_invalid(&c, "repeats[0] = -1 is invalid", NULL);
    kc_ints(&c, 1, 1, (int64_t[]){2});
    expect_invalid(&c, "repeats has 1 entries for rank 2", NULL);
    kc_free(&c);
    free(tx);
}

/* ---- Trilu ------------------------------------------------------------------------------ */

static void check_trilu(int64_t b, int64_t n, int64_t m, int64_t k, bool upper, bool give_k)
{
    int64_t d[] = {b, n, m};
    size_t total = numel(3, d);
    double *x = malloc(total * sizeof(double) + 1);
    for (size_t i = 0; i < total; i++)
        x[i] = (double)i + 1;
    struct kcase c;
    kc_init(&c, 14, "Trilu", 2, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "upper", upper), GF_OK);
    kc_in(&c, 0, GF_DOUBLE, 3, d, x);
    if (give_k)
        kc_in(&c, 1, GF_INT64, 0, NULL, &k);
    double *y = kc_out(&c, 0, GF_DOUBLE, 3, d);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    if (!give_k)
        k = 0;
    for (size_t e = 0; e < total; e++) {
        int64_t i = (int64_t)(e / (size_t)m % (size_t)n), j = (int64_t)(e % (size_t)m);
        /* compare as doubles: j - i may be far from k */
        bool keep = upper ? (double)j - (double)i >= (double)k : (double)j - (double)i <= (double)k;
        assert_true(y[e] == (keep ? x[e] : 0));
    }
    free(x);
    kc_free(&c);
}

static void test_trilu(void **state)
{
    (void)state;
    static const int64_t ks[] = {0, 1, -1, 3, -4, 100, -100, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        check_trilu(3, 4, 7, ks[i], true, true);
        check_trilu(2, 6, 3, ks[i], false, true);
    }
    check_trilu(40, 50, 30, 2, false, true); /* threads */
    check_trilu(1, 5, 5, 0, true, false);    /* k omitted */
    check_trilu(2, 0, 4, 1, true, true);     /* empty */

    struct kcase c;
    float x[3] = {1, 2, 3};
    int64_t three = 3;
    kc_init(&c, 14, "Trilu", 1, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &three, x);
    kc_out(&c, 0, GF_FLOAT, 1, &three);
    expect_invalid(&c, "input has rank 1; Trilu needs 2 or more", NULL);
    kc_free(&c);
}

/* ---- OneHot -------------------------------------------------------------------------------- */

static void test_one_hot(void **state)
{
    (void)state;
    /* indices [2, 3] int64, depth 5, axis 1 -> [2, 5, 3]; 5 and -6 are out of range */
    int64_t ind[] = {1, -1, 5, 0, -6, -5}, id[] = {2, 3}, od[] = {2, 5, 3};
    int32_t depth = 5;
    int16_t vals[2] = {-1, 9};
    struct kcase c;
    kc_init(&c, 11, "OneHot", 3, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "axis", 1), GF_OK);
    kc_in(&c, 0, GF_INT64, 2, id, ind);
    kc_in(&c, 1, GF_INT32, 0, NULL, &depth);
    kc_in(&c, 2, GF_INT16, 1, (int64_t[]){2}, vals);
    int16_t *y = kc_out(&c, 0, GF_INT16, 3, od);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < 5; d++)
            for (int j = 0; j < 3; j++) {
                int64_t v = ind[i * 3 + j];
                bool on = v >= -5 && v < 5 && (v < 0 ? v + 5 : v) == d;
                assert_int_equal(y[(i * 5 + d) * 3 + j], on ? 9 : -1);
            }
    depth = -2;
    expect_invalid(&c, "depth -2 must be a non-negative integer", NULL);
    depth = 5;
    kc_in(&c, 2, GF_INT16, 1, (int64_t[]){1}, vals);
    expect_invalid(&c, "values must hold [off, on]", NULL);
    kc_free(&c);

    /* float indices are truncated; NaN gives an all-off row; default axis -1 */
    float fi[] = {2.7f, -1.2f, NAN}, fd = 3;
    float fv[] = {0, 1};
    kc_init(&c, 11, "OneHot", 3, 1);
    kc_in(&c, 0, GF_FLOAT, 1, (int64_t[]){3}, fi);
    kc_in(&c, 1, GF_FLOAT, 1, (int64_t[]){1}, &fd);
    kc_in(&c, 2, GF_FLOAT, 1, (int64_t[]){2}, fv);
    float *fy = kc_out(&c, 0, GF_FLOAT, 2, (int64_t[]){3, 3});
    assert_int_equal(kc_run(&c, 2), GF_OK);
    static const float want[] = {0, 0, 1, 0, 0, 1, 0, 0, 0};
    assert_memory_equal(fy, want, sizeof(want));
    kc_free(&c);
}

/* ---- Constant, ConstantOfShape, Shape, Size, Range ----------------------------------------- */

static void test_constants(void **state)
{
    (void)state;
    struct kcase c;
    kc_init(&c, 13, "Constant", 0, 1);
    set_ints(&c, "value_ints", 3, (int64_t[]){4, -5, 6});
    int64_t *yi = kc_out(&c, 0, GF_INT64, 1, (int64_t[]){3});
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_true(yi[0] == 4 && yi[1] == -5 && yi[2] == 6);
    free(c.out[0].data);
    kc_out(&c, 0, GF_INT64, 1, (int64_t[]){2});
    expect_invalid(&c, "output 0 has shape [2] but the inputs give [3]", NULL);
    kc_free(&c);
    kc_init(&c, 13, "Constant", 0, 1);
    assert_int_equal(gf_node_set_attr_float(c.n, "value_float", 2.5f), GF_OK);
    float *yf = kc_out(&c, 0, GF_FLOAT, 0, NULL);
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_true(*yf == 2.5f);
    kc_free(&c);
    kc_init(&c, 13, "Constant", 0, 1);
    assert_int_equal(gf_node_set_attr_string(c.n, "value_string", "x"), GF_OK);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), c.n, c.in, 0));
    kc_free(&c);

    /* ConstantOfShape: int32 7 over [3, 9000] (threads); negative dimension */
    int32_t seven = 7;
    kc_init(&c, 13, "ConstantOfShape", 1, 1);
    struct gf_tensor *t = gf_tensor_new(c.m, "v", GF_INT32, 1, (int64_t[]){1}, &seven);
    assert_int_equal(gf_node_set_attr_tensor(c.n, "value", t), GF_OK);
    int64_t shape[] = {3, 9000};
    kc_ints(&c, 0, 2, shape);
    int32_t *y = kc_out(&c, 0, GF_INT32, 2, shape);
    assert_int_equal(kc_run(&c, 2), GF_OK);
    for (int i = 0; i < 27000; i++)
        assert_int_equal(y[i], 7);
    shape[1] = -1;
    expect_invalid(&c, "input element 1 is -1", NULL);
    kc_free(&c);

    /* Shape with start/end; Size */
    float dummy[1];
    int64_t xd[] = {2, 3, 5, 7};
    kc_init(&c, 15, "Shape", 1, 1);
    assert_int_equal(gf_node_set_attr_int(c.n, "start", -3), GF_OK);
    assert_int_equal(gf_node_set_attr_int(c.n, "end", -1), GF_OK);
    kc_in(&c, 0, GF_FLOAT, 4, xd, dummy);
    yi = kc_out(&c, 0, GF_INT64, 1, (int64_t[]){2});
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_true(yi[0] == 3 && yi[1] == 5);
    kc_free(&c);
    kc_init(&c, 13, "Size", 1, 1);
    kc_in(&c, 0, GF_FLOAT, 4, xd, dummy);
    yi = kc_out(&c, 0, GF_INT64, 0, NULL);
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_int_equal(*yi, 210);
    kc_free(&c);
}

static void test_range(void **state)
{
    (void)state;
    struct kcase c;
    int16_t s16 = 10, l16 = -3, d16 = -4; /* 10, 6, 2, -2 */
    kc_init(&c, 11, "Range", 3, 1);
    kc_in(&c, 0, GF_INT16, 0, NULL, &s16);
    kc_in(&c, 1, GF_INT16, 0, NULL, &l16);
    kc_in(&c, 2, GF_INT16, 0, NULL, &d16);
    int16_t *y = kc_out(&c, 0, GF_INT16, 1, (int64_t[]){4});
    assert_int_equal(kc_run(&c, 1), GF_OK);
    assert_true(y[0] == 10 && y[1] == 6 && y[2] == 2 && y[3] == -2);
    d16 = 0;
    expect_invalid(&c, "delta is 0", NULL);
    d16 = 4; /* empty range, but the output says 4 */
    expect_invalid(&c, "output 0 has shape [4] but the inputs give [0]", NULL);
    kc_free(&c);

    int64_t s = INT64_MIN, l = INT64_MAX, d = 1;
    kc_init(&c, 11, "Range", 3, 1);
    kc_in(&c, 0, GF_INT64, 0, NULL, &s);
    kc_in(&c, 1, GF_INT64, 0, NULL, &l);
    kc_in(&c, 2, GF_INT64, 0, NULL, &d);
    kc_out(&c, 0, GF_INT64, 1, (int64_t[]){1});
    expect_invalid(&c, "limit - start overflows", NULL);
    kc_free(&c);

    double ds = 0.5, dl = 2.0, dd = 0.25;
    kc_init(&c, 11, "Range", 3, 1);
    kc_in(&c, 0, GF_DOUBLE, 0, NULL, &ds);
    kc_in(&c, 1, GF_DOUBLE, 0, NULL, &dl);
    kc_in(&c, 2, GF_DOUBLE, 0, NULL, &dd);
    double *yd = kc_out(&c, 0, GF_DOUBLE, 1, (int64_t[]){6});
    assert_int_equal(kc_run(&c, 1), GF_OK);
    for (int i = 0; i < 6; i++)
        assert_true(yd[i] == 0.5 + 0.25 * i);
    dd = NAN;
    expect_invalid(&c, "delta is nan", NULL);
    dd = 0.25, dl = INFINITY;
    expect_invalid(&c, "no finite element count", NULL);
    kc_free(&c);
}

/* ---- cross-cutting: refused types, missing inputs, wrong output shapes --------------------- */

static void test_refusals(void **state)
{
    (void)state;
    struct kcase c;
    int64_t two = 2;
    struct gf_bytes strs[2] = {{(const uint8_t *)"a", 1}, {(const uint8_t *)"b", 1}};
    kc_init(&c, 13, "Transpose", 1, 1);
    kc_in(&c, 0, GF_STRING, 1, &two, strs);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), c.n, c.in, c.n_in));
    kc_free(&c);

    /* float indices are refused by Gather (not cast) */
    float x[2] = {1, 2}, fi[1] = {0};
    kc_init(&c, 13, "Gather", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &two, x);
    kc_in(&c, 1, GF_FLOAT, 1, (int64_t[]){1}, fi);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), c.n, c.in, c.n_in));
    kc_free(&c);

    /* Reshape without its shape input */
    kc_init(&c, 13, "Reshape", 2, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &two, x);
    kc_out(&c, 0, GF_FLOAT, 1, &two);
    expect_invalid(&c, "input 'shape' is missing", NULL);
    kc_free(&c);

    /* Concat without axis (opset 13 requires it) */
    kc_init(&c, 13, "Concat", 1, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &two, x);
    kc_out(&c, 0, GF_FLOAT, 1, &two);
    expect_invalid(&c, "attribute 'axis' is missing", NULL);
    kc_free(&c);

    /* ScatterElements updates typed differently from data */
    int64_t i0 = 0;
    int32_t u = 1;
    kc_init(&c, 13, "ScatterElements", 3, 1);
    kc_in(&c, 0, GF_FLOAT, 1, &two, x);
    kc_in(&c, 1, GF_INT64, 1, (int64_t[]){1}, &i0);
    kc_in(&c, 2, GF_INT32, 1, (int64_t[]){1}, &u);
    kc_out(&c, 0, GF_FLOAT, 1, &two);
    expect_invalid(&c, "updates is int32, expected float", NULL);
    kc_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_tests),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_transpose_random),
        cmocka_unit_test(test_slice_random),
        cmocka_unit_test(test_expand_random),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_gather_elements),
        cmocka_unit_test(test_gather_nd),
        cmocka_unit_test(test_scatter_nd),
        cmocka_unit_test(test_scatter_elements),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_concat_split),
        cmocka_unit_test(test_concat_empty),
        cmocka_unit_test(test_reshape_family),
        cmocka_unit_test(test_expand_tile),
        cmocka_unit_test(test_trilu),
        cmocka_unit_test(test_one_hot),
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
