/* The layout kernels of every backend besides the CPU
 * (tests/backend_util.h) against the CPU kernels: Reshape Flatten Squeeze
 * Unsqueeze, Transpose (tiled 2-d / batched and N-d, a sweep of the knob
 * configs: every pair of values of two knobs, every config with
 * GRAPHFUSE_TEST_ALL_CONFIGS=1; sizes off the tile), Slice (negative steps, clamping), Expand, Split,
 * Concat, Gather and GatherGrad (indices on the host and device only,
 * negative indices, repeats), SliceGrad, several element sizes (fp32,
 * int64, fp16, bf16, uint8), and the error paths (a bad index is an
 * error, not a crash).  The backward ops on fp16 and bf16, which the CPU
 * has in fp32 only, against the CPU on the inputs widened to fp32: the
 * same float sums, rounded once, so exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "backend_half.h"

static struct gf_model *model;

static struct gf_node *mk(const char *op, const char *domain, size_t n_in, size_t n_out)
{
    if (!model) {
        model = gf_model_new(8, "t");
        assert_non_null(model);
        gf_model_set_opset(model, "", 18);
        gf_model_set_opset(model, "graphfuse", 1);
    }
    struct gf_node *n = gf_graph_add_node(model->graph, op, domain, op, n_in, NULL, n_out, NULL);
    assert_non_null(n);
    return n;
}

static int teardown(void **state)
{
    (void)state;
    gf_model_free(model);
    return 0;
}

/* n elements of type t with distinct bit patterns (exact comparisons). */
static void *data_of(enum gf_dtype t, size_t n, unsigned seed)
{
    float *f = malloc(n * sizeof(float) + 8);
    bt_fill(f, n, -100, 100, seed);
    if (t == GF_FLOAT)
        return f;
    void *p = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++) {
        if (t == GF_INT64)
            ((int64_t *)p)[i] = (int64_t)(f[i] * 1000);
        else if (t == GF_FLOAT16)
            ((uint16_t *)p)[i] = gf_float_to_half(f[i]);
        else if (t == GF_BFLOAT16)
            ((uint16_t *)p)[i] = gf_float_to_bf16(f[i]);
        else
            ((uint8_t *)p)[i] = (uint8_t)(i * 37 + seed);
    }
    free(f);
    return p;
}

static size_t count(int r, const int64_t *d)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)d[i];
    return n;
}

static const enum gf_dtype types[] = {GF_FLOAT, GF_INT64, GF_FLOAT16, GF_BFLOAT16, GF_UINT8};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

/* ---- Reshape, Flatten, Squeeze, Unsqueeze ------------------------------------------ */

static void test_reshape_family(void **state)
{
    (void)state;
    need_backend();
    for (int t = 0; t < N_TYPES; t++) {
        void *x = data_of(types[t], 2 * 3 * 5, 1);
        struct gf_tview in[2] = {bt_view(types[t], x, DIMS(2, 3, 5))};
        int64_t shape[3] = {0, -1, 5};
        in[1] = bt_view(GF_INT64, shape, DIMS(3));
        struct gf_tview out = bt_view(types[t], NULL, DIMS(2, 3, 5));
        bt_compare(mk("Reshape", "", 2, 1), in, 2, 0x2, &out, 1, 0, 0);
        struct gf_node *fl = mk("Flatten", "", 1, 1);
        gf_node_set_attr_int(fl, "axis", 2);
        struct gf_tview fo = bt_view(types[t], NULL, DIMS(6, 5));
        bt_compare(fl, in, 1, 0, &fo, 1, 0, 0);
        free(x);
    }
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t ax0[1] = {0}, ax2[2] = {0, 3};
    struct gf_tview sq[2] = {bt_view(GF_FLOAT, x, DIMS(1, 6, 1)),
                             bt_view(GF_INT64, ax0, DIMS(1))};
    struct gf_tview sqo = bt_view(GF_FLOAT, NULL, DIMS(6, 1));
    bt_compare(mk("Squeeze", "", 2, 1), sq, 2, 0x2, &sqo, 1, 0, 0);
    struct gf_tview us[2] = {bt_view(GF_FLOAT, x, DIMS(2, 3)),
                             bt_view(GF_INT64, ax2, DIMS(2))};
    struct gf_tview uso = bt_view(GF_FLOAT, NULL, DIMS(1, 2, 3, 1));
    bt_compare(mk("Unsqueeze", "", 2, 1), us, 2, 0x2, &uso, 1, 0, 0);
}

static void test_reshape_errors(void **state)
{
    (void)state;
    need_backend();
    float x[6] = {0};
    int64_t shape[2] = {4, -1};
    struct gf_tview in[2] = {bt_view(GF_FLOAT, x, DIMS(6)), bt_view(GF_INT64, shape, DIMS(2))};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(4, 2));
    void *res[1];
    struct gf_node *n = mk("Reshape", "", 2, 1);
    assert_int_equal(bt_run(n, in, 2, 0x2, &out, 1, NULL, res), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "cannot infer the -1"));
    free(res[0]);
    /* the shape only on the device: declined (the executor runs it on the CPU) */
    struct gf_tview dev[2] = {in[0], in[1]};
    dev[1].host = NULL;
    assert_false(gf_kernel_find(bt_backend(), n, dev, 2));
}

/* ---- Transpose -------------------------------------------------------------------- */

static void check_transpose(enum gf_dtype t, int r, const int64_t *dims, const int64_t *perm,
                            bool all_configs)
{
    struct gf_node *n = mk("Transpose", "", 1, 1);
    if (perm)
        gf_node_set_attr_ints(n, "perm", (size_t)r, perm);
    int64_t od[GF_MAX_RANK];
    for (int k = 0; k < r; k++)
        od[k] = dims[perm ? perm[k] : r - 1 - k];
    void *x = data_of(t, count(r, dims), 3);
    struct gf_tview in = bt_view(t, x, r, dims);
    struct gf_tview out = bt_view(t, NULL, r, od);
    if (all_configs)
        bt_expect_space(bt_compare_configs(n, &in, 1, 0, &out, 1, 0, 0), "opencl", 30);
    else
        bt_compare(n, &in, 1, 0, &out, 1, 0, 0);
    free(x);
}

static void test_transpose(void **state)
{
    (void)state;
    need_backend();
    for (int t = 0; t < N_TYPES; t++) {
        check_transpose(types[t], 2, (int64_t[]){33, 65}, NULL, false);   /* tiled, ragged */
        check_transpose(types[t], 2, (int64_t[]){1, 7}, NULL, false);
        check_transpose(types[t], 3, (int64_t[]){3, 17, 40}, (int64_t[]){0, 2, 1}, false);
        check_transpose(types[t], 4, (int64_t[]){2, 5, 3, 7}, (int64_t[]){0, 2, 1, 3}, false);
        check_transpose(types[t], 4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){3, 1, 0, 2}, false);
    }
    check_transpose(GF_FLOAT, 3, (int64_t[]){2, 45, 70}, (int64_t[]){0, 2, 1}, true);
    check_transpose(GF_FLOAT, 4, (int64_t[]){3, 4, 5, 6}, (int64_t[]){2, 0, 3, 1}, true);
    check_transpose(GF_FLOAT, 1, (int64_t[]){9}, NULL, false);
}

/* ---- Slice, SliceGrad, Expand ------------------------------------------------------ */

struct slice_case {
    int r;
    int64_t dims[4];
    size_t n;
    int64_t starts[4], ends[4], axes[4], steps[4];
};

static const struct slice_case slices[] = {
    {2, {7, 33}, 2, {1, 3}, {6, 30}, {0, 1}, {2, 5}},
    {3, {4, 5, 6}, 1, {-1}, {-100}, {1}, {-2}},           /* negative step, clamped end */
    {3, {4, 5, 6}, 2, {0, 2}, {100, 3}, {-1, 0}, {1, 1}}, /* negative axis, clamped */
    {2, {5, 6}, 1, {3}, {3}, {1}, {1}},                   /* empty */
    {4, {2, 3, 4, 5}, 3, {1, 0, 4}, {2, 4, 0}, {0, 2, 3}, {1, 3, -3}},
};

/* out dims of a slice per the CPU's rule (for building the views). */
static void slice_dims(const struct slice_case *c, int64_t *od)
{
    memcpy(od, c->dims, sizeof(c->dims));
    for (size_t i = 0; i < c->n; i++) {
        int ax = (int)(c->axes[i] < 0 ? c->axes[i] + c->r : c->axes[i]);
        int64_t d = c->dims[ax], s = c->starts[i] < 0 ? c->starts[i] + d : c->starts[i];
        int64_t e = c->ends[i] < 0 ? c->ends[i] + d : c->ends[i], st = c->steps[i], cnt;
        if (st > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            cnt = e > s ? (e - s + st - 1) / st : 0;
        } else {
            s = s < 0 ? 0 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            cnt = s > e ? (s - e - st - 1) / -st : 0;
        }
        od[ax] = cnt;
    }
}

static void test_slice(void **state)
{
    (void)state;
    need_backend();
    for (size_t s = 0; s < sizeof(slices) / sizeof(slices[0]); s++) {
        const struct slice_case *c = &slices[s];
        int64_t od[4];
        slice_dims(c, od);
        for (int t = 0; t < N_TYPES; t++) {
            void *x = data_of(types[t], count(c->r, c->dims), (unsigned)s);
            struct gf_tview in[5] = {bt_view(types[t], x, c->r, c->dims),
                                     bt_view(GF_INT64, (void *)c->starts, DIMS((int64_t)c->n)),
                                     bt_view(GF_INT64, (void *)c->ends, DIMS((int64_t)c->n)),
                                     bt_view(GF_INT64, (void *)c->axes, DIMS((int64_t)c->n)),
                                     bt_view(GF_INT64, (void *)c->steps, DIMS((int64_t)c->n))};
            struct gf_tview out = bt_view(types[t], NULL, c->r, od);
            bt_compare(mk("Slice", "", 5, 1), in, 5, 0x1e, &out, 1, 0, 0);
            free(x);
            if (types[t] != GF_FLOAT && !bth_is(types[t]))
                continue;
            /* SliceGrad(dY of the slice's shape, shape, starts, ends, axes, steps) */
            void *g = data_of(types[t], count(c->r, od), (unsigned)s + 9);
            int64_t shape[4];
            memcpy(shape, c->dims, sizeof(shape));
            struct gf_tview gin[6] = {bt_view(types[t], g, c->r, od),
                                      bt_view(GF_INT64, shape, DIMS(c->r)), in[1], in[2], in[3],
                                      in[4]};
            struct gf_tview gout = bt_view(types[t], NULL, c->r, c->dims);
            struct gf_node *sg = mk("SliceGrad", "graphfuse", 6, 1);
            if (types[t] == GF_FLOAT)
                bt_compare(sg, gin, 6, 0x3e, &gout, 1, 0, 0);
            else
                bth_compare_wide(sg, gin, 6, 0x3e, &gout, 1, NULL, 0, 0);
            free(g);
        }
    }
}

static void test_expand(void **state)
{
    (void)state;
    need_backend();
    for (int t = 0; t < N_TYPES; t++) {
        void *x = data_of(types[t], 3 * 5, 4);
        int64_t shape[4] = {2, 3, 7, 5};
        struct gf_tview in[2] = {bt_view(types[t], x, DIMS(3, 1, 5)),
                                 bt_view(GF_INT64, shape, DIMS(4))};
        struct gf_tview out = bt_view(types[t], NULL, DIMS(2, 3, 7, 5));
        bt_compare(mk("Expand", "", 2, 1), in, 2, 0x2, &out, 1, 0, 0);
        int64_t s2[2] = {1, 1};
        struct gf_tview in2[2] = {in[0], bt_view(GF_INT64, s2, DIMS(2))};
        struct gf_tview out2 = bt_view(types[t], NULL, DIMS(3, 1, 5));
        bt_compare(mk("Expand", "", 2, 1), in2, 2, 0x2, &out2, 1, 0, 0);
        free(x);
    }
}

/* ---- Split, Concat ------------------------------------------------------------------- */

static void test_split_concat(void **state)
{
    (void)state;
    need_backend();
    for (int t = 0; t < N_TYPES; t++) {
        void *x = data_of(types[t], 3 * 10 * 7, 5);
        int64_t sizes[3] = {2, 5, 3};
        struct gf_tview in[2] = {bt_view(types[t], x, DIMS(3, 10, 7)),
                                 bt_view(GF_INT64, sizes, DIMS(3))};
        struct gf_tview outs[3] = {bt_view(types[t], NULL, DIMS(3, 2, 7)),
                                   bt_view(types[t], NULL, DIMS(3, 5, 7)),
                                   bt_view(types[t], NULL, DIMS(3, 3, 7))};
        struct gf_node *sp = mk("Split", "", 2, 3);
        gf_node_set_attr_int(sp, "axis", 1);
        bt_compare(sp, in, 2, 0x2, outs, 3, 0, 0);
        /* equal parts of the last axis, from the attribute-less form */
        struct gf_node *sp2 = mk("Split", "", 1, 2);
        gf_node_set_attr_int(sp2, "axis", -1);
        struct gf_tview xin = bt_view(types[t], x, DIMS(3, 7, 10));
        struct gf_tview o2[2] = {bt_view(types[t], NULL, DIMS(3, 7, 5)),
                                 bt_view(types[t], NULL, DIMS(3, 7, 5))};
        bt_compare(sp2, &xin, 1, 0, o2, 2, 0, 0);
        /* Concat of three pieces along axis 1, one empty */
        void *b = data_of(types[t], 3 * 4 * 7, 6);
        struct gf_tview cin[3] = {bt_view(types[t], x, DIMS(3, 10, 7)),
                                  bt_view(types[t], NULL, DIMS(3, 0, 7)),
                                  bt_view(types[t], b, DIMS(3, 4, 7))};
        struct gf_node *cc = mk("Concat", "", 3, 1);
        gf_node_set_attr_int(cc, "axis", 1);
        struct gf_tview co = bt_view(types[t], NULL, DIMS(3, 14, 7));
        bt_compare(cc, cin, 3, 0, &co, 1, 0, 0);
        free(x);
        free(b);
    }
}

/* ---- Gather, GatherGrad -------------------------------------------------------------- */

static void test_gather(void **state)
{
    (void)state;
    need_backend();
    int64_t idx64[7] = {3, 0, -1, 4, 3, 3, -5};
    int32_t idx32[7] = {3, 0, -1, 4, 3, 3, -5};
    for (int t = 0; t < N_TYPES; t++) {
        for (int axis = 0; axis < 3; axis++) {
            int64_t dims[3] = {5, 5, 5};
            void *x = data_of(types[t], 125, (unsigned)axis);
            int64_t od[4], id[2] = {1, 7};
            int r = 0;
            for (int k = 0; k < 3; k++) {
                if (k == axis) {
                    od[r++] = id[0];
                    od[r++] = id[1];
                } else {
                    od[r++] = dims[k];
                }
            }
            for (int it = 0; it < 2; it++) {
                struct gf_node *n = mk("Gather", "", 2, 1);
                gf_node_set_attr_int(n, "axis", axis - (axis == 2 ? 3 : 0));
                struct gf_tview in[2] = {bt_view(types[t], x, 3, dims),
                                         bt_view(it ? GF_INT32 : GF_INT64,
                                                   it ? (void *)idx32 : (void *)idx64, 2, id)};
                struct gf_tview out = bt_view(types[t], NULL, 4, od);
                bt_compare(n, in, 2, 0x2, &out, 1, 0, 0); /* indices on the host */
                bt_compare(n, in, 2, 0, &out, 1, 0, 0);   /* device only */
            }
            free(x);
        }
    }
}

static void test_gather_errors(void **state)
{
    (void)state;
    need_backend();
    float x[12] = {0};
    int64_t idx[4] = {0, 2, 3, -4};
    struct gf_tview in[2] = {bt_view(GF_FLOAT, x, DIMS(3, 4)), bt_view(GF_INT64, idx, DIMS(4))};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(4, 4));
    void *res[1];
    struct gf_node *n = mk("Gather", "", 2, 1);
    for (unsigned mask = 0; mask <= 2; mask += 2) {
        assert_int_equal(bt_run(n, in, 2, mask, &out, 1, NULL, res), GF_ERR_INVALID);
        if (!strstr(gf_last_error(), "indices element 2 (value 3) is out of range [-3, 2]"))
            fail_msg("unexpected message: %s", gf_last_error());
        free(res[0]);
    }
    /* GatherGrad with a bad index, on the host and on the device */
    float g[4 * 4] = {0};
    int64_t shape[2] = {3, 4};
    struct gf_tview gin[3] = {bt_view(GF_FLOAT, g, DIMS(4, 4)),
                              bt_view(GF_INT64, shape, DIMS(2)),
                              bt_view(GF_INT64, idx, DIMS(4))};
    struct gf_tview gout = bt_view(GF_FLOAT, NULL, DIMS(3, 4));
    struct gf_node *gg = mk("GatherGrad", "graphfuse", 3, 1);
    for (unsigned mask = 0x2; mask <= 0x6; mask += 4) {
        assert_int_equal(bt_run(gg, gin, 3, mask, &gout, 1, NULL, res), GF_ERR_INVALID);
        if (!strstr(gf_last_error(), "(value 3) is out of range"))
            fail_msg("unexpected message: %s", gf_last_error());
        free(res[0]);
    }
}

static void test_gather_grad(void **state)
{
    (void)state;
    need_backend();
    /* an embedding gradient: dY [B, T, D] into [V, D], many repeats */
    enum { V = 37, D = 19, NI = 2 * 65 };
    int64_t idx[NI];
    int32_t idx32[NI];
    for (int i = 0; i < NI; i++)
        idx32[i] = (int32_t)(idx[i] = (i * 7 + i / 3) % V - (i % 5 == 0 ? V : 0));
    float *g = malloc(NI * D * sizeof(float));
    bt_fill(g, NI * D, -1, 1, 3);
    int64_t shape[2] = {V, D};
    struct gf_node *n = mk("GatherGrad", "graphfuse", 3, 1);
    for (int it = 0; it < 2; it++) {
        struct gf_tview in[3] = {bt_view(GF_FLOAT, g, DIMS(2, 65, D)),
                                 bt_view(GF_INT64, shape, DIMS(2)),
                                 bt_view(it ? GF_INT32 : GF_INT64, it ? (void *)idx32 : idx,
                                           DIMS(2, 65))};
        struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(V, D));
        /* same summation order as the CPU: equal bit for bit */
        bt_compare(n, in, 3, 0x6, &out, 1, 0, 0);
        bt_compare(n, in, 3, 0x2, &out, 1, 0, 0);
    }
    /* along axis 1: dY [3, 4, 5] for data [3, 6, 5] */
    struct gf_node *n1 = mk("GatherGrad", "graphfuse", 3, 1);
    gf_node_set_attr_int(n1, "axis", 1);
    int64_t i4[4] = {5, 0, 5, -1}, s1[3] = {3, 6, 5};
    struct gf_tview in[3] = {bt_view(GF_FLOAT, g, DIMS(3, 4, 5)),
                             bt_view(GF_INT64, s1, DIMS(3)), bt_view(GF_INT64, i4, DIMS(4))};
    struct gf_tview out = bt_view(GF_FLOAT, NULL, DIMS(3, 6, 5));
    bt_expect_space(bt_compare_configs(n1, in, 3, 0x6, &out, 1, 0, 0), "opencl", 5);
    bt_compare(n1, in, 3, 0x2, &out, 1, 0, 0);
    /* fp16 and bf16 (the same float sums as the CPU's on the widened dY) */
    for (int h = 0; h < 2; h++) {
        enum gf_dtype t = h ? GF_BFLOAT16 : GF_FLOAT16;
        uint16_t *gh = bth_from(t, g, NI * D);
        for (unsigned mask = 0x2; mask <= 0x6; mask += 4) {
            struct gf_tview hin[3] = {bt_view(t, gh, DIMS(2, 65, D)),
                                      bt_view(GF_INT64, shape, DIMS(2)),
                                      bt_view(GF_INT64, idx, DIMS(2, 65))};
            struct gf_tview hout = bt_view(t, NULL, DIMS(V, D));
            bth_compare_wide(n, hin, 3, mask, &hout, 1, NULL, 0, 0);
            struct gf_tview h1[3] = {bt_view(t, gh, DIMS(3, 4, 5)), in[1], in[2]};
            struct gf_tview h1out = bt_view(t, NULL, DIMS(3, 6, 5));
            bth_compare_wide(n1, h1, 3, mask, &h1out, 1, NULL, 0, 0);
        }
        free(gh);
    }
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshape_family),
        cmocka_unit_test(test_reshape_errors),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_split_concat),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_gather_errors),
        cmocka_unit_test(test_gather_grad),
    };
    return bt_run_tests(tests, NULL, teardown);
}
