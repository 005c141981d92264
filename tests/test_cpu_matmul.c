/* Tests of the CPU matmul family (MatMul, Gemm, Einsum): the ONNX node
 * tests, then odd shapes, broadcasting, every element type, the threading
 * splits and every error path, against plain reference loops below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/cpu.h"
#include "nodetest.h"

/* ---- tensors ------------------------------------------------------------ */

static struct gf_tview tv(enum gf_dtype dt, int rank, const int64_t *dims)
{
    struct gf_tview t = {.dtype = dt};
    gf_tview_set_shape(&t, rank, dims);
    t.data = calloc(1, gf_tview_bytes(&t) + 8);
    return t;
}

#define TV(dt, ...) tv(dt, sizeof((int64_t[]){__VA_ARGS__}) / 8, (int64_t[]){__VA_ARGS__})
#define TV0(dt) tv(dt, 0, NULL)

static bool is_int(enum gf_dtype dt)
{
    return dt != GF_FLOAT && dt != GF_DOUBLE && dt != GF_FLOAT16 && dt != GF_BFLOAT16;
}

static double get(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

static int64_t get_i(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_i64(&tmp, i);
}

/* Stores f (float types, rounded to the type) or u (integer types,
 * truncated: two's-complement wrap). */
static void set(struct gf_tview *t, size_t i, double f, uint64_t u)
{
    void *p = t->data;
    switch (t->dtype) {
    case GF_FLOAT: ((float *)p)[i] = (float)f; break;
    case GF_DOUBLE: ((double *)p)[i] = f; break;
    case GF_FLOAT16: ((uint16_t *)p)[i] = gf_float_to_half((float)f); break;
    case GF_BFLOAT16: ((uint16_t *)p)[i] = gf_float_to_bf16((float)f); break;
    case GF_INT8: case GF_UINT8: ((uint8_t *)p)[i] = (uint8_t)u; break;
    case GF_INT16: case GF_UINT16: ((uint16_t *)p)[i] = (uint16_t)u; break;
    case GF_INT32: case GF_UINT32: ((uint32_t *)p)[i] = (uint32_t)u; break;
    default: ((uint64_t *)p)[i] = u; break;
    }
}

/* Small values (-2 .. 2 in steps of 0.5; integers -4 .. 4 scaled by
 * `scale`) so that float sums are exact. */
static void fill(struct gf_tview *t, unsigned seed, int64_t scale)
{
    for (size_t i = 0; i < t->nelem; i++) {
        int64_t v = (int64_t)((i * 7 + seed * 13 + i / 5) % 9) - 4;
        set(t, i, v * 0.5, (uint64_t)(v * scale));
    }
}

/* Values read the way the reference needs them. */
struct val {
    double f;
    uint64_t u;
};

static struct val at(const struct gf_tview *t, size_t i)
{
    return (struct val){get(t, i), (uint64_t)get_i(t, i)};
}

static void expect_close(const struct gf_tview *got, const struct gf_tview *want)
{
    assert_int_equal(got->dtype, want->dtype);
    assert_int_equal(got->nelem, want->nelem);
    double tol = got->dtype == GF_BFLOAT16 ? 1e-2 : got->dtype == GF_FLOAT16 ? 1e-3 : 1e-5;
    for (size_t i = 0; i < got->nelem; i++) {
        if (is_int(got->dtype)) {
            if (get_i(got, i) != get_i(want, i))
                fail_msg("element %zu: got %lld, want %lld", i, (long long)get_i(got, i),
                         (long long)get_i(want, i));
        } else {
            double g = get(got, i), w = get(want, i);
            if (!(fabs(g - w) <= tol * (1 + fabs(w))))
                fail_msg("element %zu: got %g, want %g", i, g, w);
        }
    }
}

static void tv_free(struct gf_tview *t)
{
    free(t->data);
    t->data = NULL;
}

/* ---- nodes ---------------------------------------------------------------- */

/* A model with one node `op` (n_in inputs, NULL for omitted; one output). */
static struct gf_node *make_node(struct gf_model **m, const char *op, size_t n_in,
                                 const bool *present, int64_t opset)
{
    *m = gf_model_new(8, "t");
    assert_non_null(*m);
    assert_int_equal(gf_model_set_opset(*m, "", opset), GF_OK);
    struct gf_graph *g = (*m)->graph;
    struct gf_value *in[16] = {0};
    for (size_t i = 0; i < n_in; i++) {
        char name[32];
        snprintf(name, sizeof(name), "x%zu", i);
        in[i] = present && !present[i] ? NULL : gf_graph_new_value(g, name, NULL);
    }
    struct gf_value *y = gf_graph_new_value(g, "y", NULL);
    struct gf_node *n = gf_graph_add_node(g, op, "", "n", n_in, in, 1, &y);
    assert_non_null(n);
    return n;
}

static enum gf_status run_node(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                               struct gf_tview *out, int threads)
{
    const struct gf_kernel *k = gf_kernel_find(gf_backend_get("cpu"), n, in, n_in);
    assert_non_null(k);
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out, .n_out = 1,
                               .n_threads = threads, .backend = gf_backend_get("cpu")};
    void *ws = k->workspace ? calloc(1, k->workspace(&a) + 1) : NULL;
    a.workspace = ws;
    enum gf_status st = k->run(&a);
    free(ws);
    return st;
}

/* Runs the node and expects GF_ERR_INVALID with `what` in the message. */
static void expect_invalid(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                           struct gf_tview *out, const char *what)
{
    enum gf_status st = run_node(n, in, n_in, out, 2);
    if (st != GF_ERR_INVALID || !strstr(gf_last_error(), what))
        fail_msg("expected an error with '%s', got status %d: %s", what, st,
                 st == GF_OK ? "ok" : gf_last_error());
}

/* ---- reference loops -------------------------------------------------------- */

/* Y = A @ B per numpy, 1-D operands promoted, batch dims broadcast. */
static void ref_matmul(const struct gf_tview *A, const struct gf_tview *B, struct gf_tview *Y)
{
    int ra = A->rank, rb = B->rank;
    int64_t M = ra > 1 ? A->dims[ra - 2] : 1, K = A->dims[ra - 1];
    int64_t N = rb > 1 ? B->dims[rb - 1] : 1;
    int nb = Y->rank - (ra > 1) - (rb > 1), na = ra > 1 ? ra - 2 : 0, nbb = rb > 1 ? rb - 2 : 0;
    for (size_t y = 0; y < Y->nelem; y++) {
        int64_t r = (int64_t)y, j = r % N, i = (r / N) % M, bidx[8];
        r /= M * N;
        for (int d = nb - 1; d >= 0; d--) {
            bidx[d] = r % Y->dims[d];
            r /= Y->dims[d];
        }
        int64_t oa = 0, ob = 0;
        for (int d = 0; d < na; d++) {
            int64_t x = A->dims[d] == 1 ? 0 : bidx[nb - na + d];
            oa = oa * A->dims[d] + x;
        }
        for (int d = 0; d < nbb; d++) {
            int64_t x = B->dims[d] == 1 ? 0 : bidx[nb - nbb + d];
            ob = ob * B->dims[d] + x;
        }
        struct val s = {0, 0};
        for (int64_t p = 0; p < K; p++) {
            struct val va = at(A, (size_t)((oa * M + i) * K + p));
            struct val vb = at(B, (size_t)((ob * K + p) * N + j));
            s.f += va.f * vb.f;
            s.u += va.u * vb.u;
        }
        set(Y, y, s.f, s.u);
    }
}

/* Y = alpha op(A) op(B) + beta C (C [], [N], [1,N], [M,1], [M,N] or absent). */
static void ref_gemm(const struct gf_tview *A, const struct gf_tview *B, const struct gf_tview *C,
                     bool ta, bool tb, double alpha, double beta, struct gf_tview *Y)
{
    int64_t M = Y->dims[0], N = Y->dims[1], K = ta ? A->dims[0] : A->dims[1];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            struct val s = {0, 0};
            for (int64_t p = 0; p < K; p++) {
                struct val va = at(A, (size_t)(ta ? p * M + i : i * K + p));
                struct val vb = at(B, (size_t)(tb ? j * K + p : p * N + j));
                s.f += va.f * vb.f;
                s.u += va.u * vb.u;
            }
            s.f *= alpha;
            s.u *= (uint64_t)(int64_t)alpha;
            if (C) {
                int64_t cm = C->rank == 2 ? C->dims[0] : 1, cn = C->rank ? C->dims[C->rank - 1] : 1;
                struct val vc = at(C, (size_t)((cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)));
                s.f += beta * vc.f;
                s.u += (uint64_t)(int64_t)beta * vc.u;
            }
            set(Y, (size_t)(i * N + j), s.f, s.u);
        }
}

/* Brute-force Einsum for explicit letter-only equations: visits every
 * assignment of every label and adds the product of the inputs' elements
 * into the output element it names. */
static void ref_einsum(const char *eq, const struct gf_tview *in, size_t n_in, struct gf_tview *Y)
{
    char terms[17][16] = {{0}};
    int nt = 0, len = 0;
    for (const char *c = eq; *c; c++) {
        if (*c == ',' || *c == '-') {
            nt++, len = 0;
            c += *c == '-';
        } else if (*c != ' ') {
            terms[nt][len++] = *c;
        }
    }
    int64_t size[128] = {0};
    char labels[64];
    int nl = 0;
    for (size_t i = 0; i < n_in; i++)
        for (int d = 0; terms[i][d]; d++) {
            int c = terms[i][d];
            if (!size[c])
                labels[nl++] = (char)c;
            if (in[i].dims[d] > size[c])
                size[c] = in[i].dims[d];
        }
    struct val *acc = calloc(Y->nelem + 1, sizeof(*acc));
    int64_t idx[128] = {0};
    for (;;) {
        bool empty = false;
        for (int l = 0; l < nl; l++)
            empty |= size[(int)labels[l]] == 0;
        if (empty)
            break;
        struct val p = {1, 1};
        for (size_t i = 0; i < n_in; i++) {
            int64_t off = 0;
            for (int d = 0; terms[i][d]; d++)
                off = off * in[i].dims[d] + (in[i].dims[d] == 1 ? 0 : idx[(int)terms[i][d]]);
            struct val v = at(&in[i], (size_t)off);
            p.f *= v.f;
            p.u *= v.u;
        }
        int64_t o = 0;
        for (int d = 0; terms[n_in][d]; d++)
            o = o * size[(int)terms[n_in][d]] + idx[(int)terms[n_in][d]];
        acc[o].f += p.f;
        acc[o].u += p.u;
        int l = nl - 1; /* odometer over every label */
        for (; l >= 0 && ++idx[(int)labels[l]] == size[(int)labels[l]]; l--)
            idx[(int)labels[l]] = 0;
        if (l < 0)
            break;
    }
    for (size_t y = 0; y < Y->nelem; y++)
        set(Y, y, acc[y].f, acc[y].u);
    free(acc);
}

/* ---- ONNX node tests ------------------------------------------------------------- */

static void test_node_tests(void **state)
{
    (void)state;
    static const char *const ops[] = {"MatMul", "Gemm", "Einsum", NULL};
    struct nodetest_counts c = nodetest_run_ops(ops, true);
    assert_int_equal(c.failed, 0);
    assert_true(c.passed >= 19);
}

/* ---- MatMul ------------------------------------------------------------------ */

static const enum gf_dtype all_types[] = {GF_FLOAT,  GF_DOUBLE, GF_FLOAT16, GF_BFLOAT16,
                                          GF_INT32,  GF_INT64,  GF_UINT32,  GF_UINT64,
                                          GF_INT8,   GF_UINT16};

struct shape {
    int rank;
    int64_t d[4];
};

/* Runs MatMul on A and B (filled, scaled by `scale` for integers) with 1
 * and 2 threads and compares both with ref_matmul. */
static void check_matmul(enum gf_dtype dt, struct shape a, struct shape b, struct shape y,
                         int64_t scale)
{
    struct gf_model *m;
    struct gf_node *n = make_node(&m, "MatMul", 2, NULL, 13);
    struct gf_tview in[2] = {tv(dt, a.rank, a.d), tv(dt, b.rank, b.d)};
    struct gf_tview out = tv(dt, y.rank, y.d), want = tv(dt, y.rank, y.d);
    fill(&in[0], 1, scale);
    fill(&in[1], 2, scale);
    ref_matmul(&in[0], &in[1], &want);
    for (int threads = 1; threads <= 2; threads++) {
        memset(out.data, 0x5a, gf_tview_bytes(&out)); /* K = 0 must still write zeros */
        assert_int_equal(run_node(n, in, 2, &out, threads), GF_OK);
        expect_close(&out, &want);
    }
    tv_free(&in[0]), tv_free(&in[1]), tv_free(&out), tv_free(&want);
    gf_model_free(m);
}

static const struct {
    struct shape a, b, y;
} mm_cases[] = {
    {{2, {1, 1}}, {2, {1, 1}}, {2, {1, 1}}},
    {{2, {7, 13}}, {2, {13, 5}}, {2, {7, 5}}},
    {{1, {6}}, {1, {6}}, {0, {0}}},                         /* dot product */
    {{1, {4}}, {3, {2, 4, 3}}, {2, {2, 3}}},                /* 1-D A */
    {{3, {2, 3, 4}}, {1, {4}}, {2, {2, 3}}},                /* 1-D B */
    {{4, {2, 1, 3, 4}}, {3, {5, 4, 6}}, {4, {2, 5, 3, 6}}}, /* batch broadcast */
    {{3, {3, 4, 5}}, {2, {5, 2}}, {3, {3, 4, 2}}},          /* one flattened GEMM */
    {{2, {4, 5}}, {3, {3, 5, 2}}, {3, {3, 4, 2}}},          /* A shared */
    {{3, {1, 4, 5}}, {3, {3, 5, 2}}, {3, {3, 4, 2}}},       /* A batch dim 1 */
    {{3, {50, 7, 9}}, {3, {50, 9, 5}}, {3, {50, 7, 5}}},    /* batches split on threads */
    {{2, {3, 0}}, {2, {0, 4}}, {2, {3, 4}}},                /* K = 0: zeros */
    {{2, {0, 3}}, {2, {3, 4}}, {2, {0, 4}}},                /* M = 0 */
    {{3, {0, 2, 3}}, {3, {1, 3, 4}}, {3, {0, 2, 4}}},       /* no batches */
    {{2, {130, 140}}, {2, {140, 150}}, {2, {130, 150}}},    /* rows split on threads */
    /* attention's per-head products past 256 rows, the heads split on
     * threads (fp32: kernels/cpu/sgemm.c's, one head per call) */
    {{4, {1, 4, 300, 40}}, {4, {1, 4, 40, 300}}, {4, {1, 4, 300, 300}}},
    {{4, {1, 4, 300, 300}}, {4, {1, 4, 300, 40}}, {4, {1, 4, 300, 40}}},
};

static void test_matmul_shapes_and_types(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++)
        for (size_t i = 0; i < sizeof(mm_cases) / sizeof(mm_cases[0]); i++)
            check_matmul(all_types[t], mm_cases[i].a, mm_cases[i].b, mm_cases[i].y, 1);
}

/* Integer products past the type's range wrap (two's complement). */
static void test_matmul_int_wraps(void **state)
{
    (void)state;
    struct shape a = {2, {3, 17}}, b = {2, {17, 4}}, y = {2, {3, 4}};
    check_matmul(GF_INT32, a, b, y, 100000);
    check_matmul(GF_INT64, a, b, y, 3037000499LL);
    check_matmul(GF_UINT32, a, b, y, 70000);
}

static void test_matmul_errors(void **state)
{
    (void)state;
    struct gf_model *m;
    struct gf_node *n = make_node(&m, "MatMul", 2, NULL, 13);
    struct gf_tview in[2] = {TV(GF_FLOAT, 2, 3), TV(GF_FLOAT, 4, 5)};
    struct gf_tview out = TV(GF_FLOAT, 2, 5);
    expect_invalid(n, in, 2, &out, "inner dims differ");
    tv_free(&in[1]);
    in[1] = TV(GF_FLOAT, 3, 5);
    tv_free(&out);
    out = TV(GF_FLOAT, 2, 4);
    expect_invalid(n, in, 2, &out, "output has shape [2,4], expected [2,5]");
    tv_free(&in[0]), tv_free(&in[1]), tv_free(&out);

    in[0] = TV(GF_FLOAT, 2, 2, 3);
    in[1] = TV(GF_FLOAT, 3, 3, 5);
    out = TV(GF_FLOAT, 3, 2, 5);
    expect_invalid(n, in, 2, &out, "batch dims of A [2,2,3] and B [3,3,5] do not broadcast");
    tv_free(&in[0]), tv_free(&in[1]);

    in[0] = TV0(GF_FLOAT);
    in[1] = TV(GF_FLOAT, 3);
    expect_invalid(n, in, 2, &out, "rank >= 1");
    tv_free(&in[0]), tv_free(&in[1]), tv_free(&out);

    in[0] = TV(GF_FLOAT, 2, 3);
    in[1] = TV(GF_DOUBLE, 3, 2);
    out = TV(GF_FLOAT, 2, 2);
    expect_invalid(n, in, 2, &out, "input 1 is double but input 0 is float");
    tv_free(&in[1]);
    in[1] = TV(GF_FLOAT, 3, 2);
    out.dtype = GF_INT32;
    expect_invalid(n, in, 2, &out, "output is int32");
    tv_free(&in[0]), tv_free(&in[1]), tv_free(&out);

    in[0] = TV(GF_FLOAT, 2, 3);
    in[1] = (struct gf_tview){.dtype = GF_FLOAT}; /* omitted */
    out = TV(GF_FLOAT, 2, 2);
    expect_invalid(n, in, 2, &out, "needs two inputs");
    tv_free(&in[0]), tv_free(&out);

    /* types the kernel lacks are refused up front */
    in[0] = TV(GF_BOOL, 2, 2);
    assert_null(gf_kernel_find(gf_backend_get("cpu"), n, in, 2));
    tv_free(&in[0]);
    gf_model_free(m);
}

/* ---- Gemm ----------------------------------------------------------------------- */

struct gemm_case {
    bool ta, tb;
    double alpha, beta;
    int c_rank; /* -1: no C */
    int64_t c[2];
};

/* Gemm with M = m, K = k, N = n against ref_gemm, on 1 and 2 threads. */
static void check_gemm(enum gf_dtype dt, int64_t M, int64_t K, int64_t N, struct gemm_case g)
{
    struct gf_model *m;
    bool present[3] = {true, true, g.c_rank >= 0};
    struct gf_node *n = make_node(&m, "Gemm", 3, present, 13);
    gf_node_set_attr_int(n, "transA", g.ta);
    gf_node_set_attr_int(n, "transB", g.tb);
    gf_node_set_attr_float(n, "alpha", (float)g.alpha);
    gf_node_set_attr_float(n, "beta", (float)g.beta);
    int64_t ad[2] = {g.ta ? K : M, g.ta ? M : K}, bd[2] = {g.tb ? N : K, g.tb ? K : N};
    struct gf_tview in[3] = {tv(dt, 2, ad), tv(dt, 2, bd), {0}};
    if (g.c_rank >= 0) {
        in[2] = tv(dt, g.c_rank, g.c);
        fill(&in[2], 3, 1);
    }
    struct gf_tview out = TV(dt, M, N), want = TV(dt, M, N);
    fill(&in[0], 1, 1);
    fill(&in[1], 2, 1);
    ref_gemm(&in[0], &in[1], g.c_rank >= 0 ? &in[2] : NULL, g.ta, g.tb, g.alpha, g.beta, &want);
    for (int threads = 1; threads <= 2; threads++) {
        memset(out.data, 0x5a, gf_tview_bytes(&out));
        if (run_node(n, in, 3, &out, threads) != GF_OK)
            fail_msg("Gemm M=%lld K=%lld N=%lld: %s", (long long)M, (long long)K, (long long)N,
                     gf_last_error());
        expect_close(&out, &want);
    }
    for (int i = 0; i < 3; i++)
        tv_free(&in[i]);
    tv_free(&out), tv_free(&want);
    gf_model_free(m);
}

static void test_gemm_attributes_and_bias(void **state)
{
    (void)state;
    const int64_t M = 5, K = 4, N = 3;
    const struct {
        int rank;
        int64_t d[2];
    } cs[] = {{-1, {0}}, {0, {0}}, {1, {1}}, {1, {N}}, {2, {1, N}}, {2, {M, 1}}, {2, {M, N}},
              {2, {1, 1}}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
                struct gemm_case g = {ta, tb, 0.5, 2, cs[c].rank, {cs[c].d[0], cs[c].d[1]}};
                check_gemm(GF_FLOAT, M, K, N, g);
                check_gemm(GF_DOUBLE, M, K, N, g);
                check_gemm(GF_FLOAT16, M, K, N, g);
                check_gemm(GF_BFLOAT16, M, K, N, g);
                g.alpha = 3, g.beta = -2; /* integers take integral scales */
                check_gemm(GF_INT32, M, K, N, g);
                check_gemm(GF_UINT64, M, K, N, g);
            }
}

static void test_gemm_odd_sizes(void **state)
{
    (void)state;
    struct gemm_case bias = {false, true, 1, 1, 2, {1, 129}};
    check_gemm(GF_FLOAT, 67, 45, 129, bias);    /* threaded bias fill and BLAS */
    check_gemm(GF_INT64, 67, 45, 129, bias);    /* threaded integer rows */
    check_gemm(GF_FLOAT, 1, 1, 1, (struct gemm_case){1, 1, 2, 3, 2, {1, 1}});
    struct gemm_case k0 = {true, false, 1, 0.5, 2, {3, 1}};
    check_gemm(GF_FLOAT, 3, 0, 2, k0);          /* K = 0: Y = beta C */
    check_gemm(GF_INT32, 3, 0, 2, (struct gemm_case){0, 0, 1, 1, -1, {0}});
    check_gemm(GF_FLOAT, 0, 3, 2, (struct gemm_case){0, 0, 1, 1, 2, {1, 2}}); /* empty Y */
    check_gemm(GF_FLOAT, 2, 3, 2, (struct gemm_case){0, 0, 1, 0, 1, {2}});  /* beta = 0 */
}

static void test_gemm_errors(void **state)
{
    (void)state;
    struct gf_model *m;
    struct gf_node *n = make_node(&m, "Gemm", 3, NULL, 13);
    struct gf_tview in[3] = {TV(GF_FLOAT, 2, 3, 1), TV(GF_FLOAT, 3, 4), TV(GF_FLOAT, 4)};
    struct gf_tview out = TV(GF_FLOAT, 2, 4);
    expect_invalid(n, in, 3, &out, "must be 2-D");
    tv_free(&in[0]);
    in[0] = TV(GF_FLOAT, 2, 5);
    expect_invalid(n, in, 3, &out, "inner dims differ: A [2,5] has K = 5, B [3,4] has K = 3");
    gf_node_set_attr_int(n, "transA", 1);
    expect_invalid(n, in, 3, &out, "A^T [2,5] has K = 2");
    gf_node_set_attr_int(n, "transA", 0);
    tv_free(&in[0]);
    in[0] = TV(GF_FLOAT, 2, 3);
    tv_free(&in[2]);
    in[2] = TV(GF_FLOAT, 3);
    expect_invalid(n, in, 3, &out, "C [3] does not broadcast to Y [2,4]");
    tv_free(&in[2]);
    in[2] = TV(GF_FLOAT, 1, 2, 4);
    expect_invalid(n, in, 3, &out, "C [1,2,4] does not broadcast");
    tv_free(&in[2]);
    in[2] = TV(GF_FLOAT, 4);
    tv_free(&out);
    out = TV(GF_FLOAT, 4, 2);
    expect_invalid(n, in, 3, &out, "output has shape [4,2], expected [2,4]");
    tv_free(&out);
    out = TV(GF_FLOAT, 2, 4);
    /* before opset 7, C broadcasts only with broadcast=1 */
    gf_model_set_opset(m, "", 6);
    expect_invalid(n, in, 3, &out, "C [4] does not match Y [2,4] (broadcast=0)");
    gf_node_set_attr_int(n, "broadcast", 1);
    assert_int_equal(run_node(n, in, 3, &out, 2), GF_OK);
    /* integer Gemm with a fractional alpha is not supported */
    gf_node_set_attr_float(n, "alpha", 0.5f);
    struct gf_tview ii[2] = {TV(GF_INT32, 2, 3), TV(GF_INT32, 3, 4)};
    assert_null(gf_kernel_find(gf_backend_get("cpu"), n, ii, 2));
    for (int i = 0; i < 3; i++)
        tv_free(&in[i]);
    tv_free(&ii[0]), tv_free(&ii[1]), tv_free(&out);
    gf_model_free(m);
}

/* ---- Einsum ------------------------------------------------------------------------ */

struct ein_case {
    const char *eq, *ref_eq; /* ref_eq: explicit letters-only form for ref_einsum */
    int n_in;
    struct shape in[3], out;
};

static const struct ein_case ein_cases[] = {
    {"ij,jk->ik", "ij,jk->ik", 2, {{2, {3, 4}}, {2, {4, 5}}}, {2, {3, 5}}},
    {"ij,jk", "ij,jk->ik", 2, {{2, {3, 4}}, {2, {4, 5}}}, {2, {3, 5}}},
    {" i j , j k -> i k ", "ij,jk->ik", 2, {{2, {3, 4}}, {2, {4, 5}}}, {2, {3, 5}}},
    {"bij,bjk->bik", "bij,bjk->bik", 2, {{3, {3, 2, 4}}, {3, {3, 4, 5}}}, {3, {3, 2, 5}}},
    {"Bij,Bjk->Bik", "bij,bjk->bik", 2, {{3, {3, 2, 4}}, {3, {3, 4, 5}}}, {3, {3, 2, 5}}},
    {"bij,bkj->bik", "bij,bkj->bik", 2, {{3, {3, 2, 4}}, {3, {3, 5, 4}}}, {3, {3, 2, 5}}},
    {"ibj,bjk->bik", "ibj,bjk->bik", 2, {{3, {2, 3, 4}}, {3, {3, 4, 5}}}, {3, {3, 2, 5}}},
    {"bij,bjk->bki", "bij,bjk->bki", 2, {{3, {3, 2, 4}}, {3, {3, 4, 5}}}, {3, {3, 5, 2}}},
    {"bij,bjk->kib", "bij,bjk->kib", 2, {{3, {3, 2, 4}}, {3, {3, 4, 5}}}, {3, {5, 2, 3}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {{2, {3, 1}}, {2, {4, 5}}}, {2, {3, 5}}}, /* j broadcast */
    {"ji,kj->ik", "ji,kj->ik", 2, {{2, {4, 3}}, {2, {5, 4}}}, {2, {3, 5}}},
    {"ik,jk->ji", "ik,jk->ji", 2, {{2, {3, 4}}, {2, {5, 4}}}, {2, {5, 3}}},
    {"abc,cd->abd", "abc,cd->abd", 2, {{3, {2, 3, 4}}, {2, {4, 5}}}, {3, {2, 3, 5}}},
    {"abc,bcd->ad", "abc,bcd->ad", 2, {{3, {2, 3, 4}}, {3, {3, 4, 5}}}, {2, {2, 5}}},
    {"acb,bcd->ad", "acb,bcd->ad", 2, {{3, {2, 4, 3}}, {3, {3, 4, 5}}}, {2, {2, 5}}},
    {"i,i", "i,i->", 2, {{1, {7}}, {1, {7}}}, {0, {0}}},
    {"i,j->ij", "i,j->ij", 2, {{1, {3}}, {1, {4}}}, {2, {3, 4}}},
    {"i,j", "i,j->ij", 2, {{1, {3}}, {1, {4}}}, {2, {3, 4}}},
    {"ij,ij->ij", "ij,ij->ij", 2, {{2, {1, 3}}, {2, {2, 3}}}, {2, {2, 3}}},
    {"ij,ij->", "ij,ij->", 2, {{2, {3, 4}}, {2, {3, 4}}}, {0, {0}}},
    {"ij,jk->i", "ij,jk->i", 2, {{2, {3, 4}}, {2, {4, 5}}}, {1, {3}}},
    {"ii->i", "ii->i", 1, {{2, {4, 4}}}, {1, {4}}},
    {"ii", "ii->", 1, {{2, {4, 4}}}, {0, {0}}},
    {"ij->ji", "ij->ji", 1, {{2, {3, 4}}}, {2, {4, 3}}},
    {"ij->i", "ij->i", 1, {{2, {3, 4}}}, {1, {3}}},
    {"ij->", "ij->", 1, {{2, {3, 4}}}, {0, {0}}},
    {"iij,jk->ik", "iij,jk->ik", 2, {{3, {3, 3, 4}}, {2, {4, 2}}}, {2, {3, 2}}},
    {"ij,jk,kl->il", "ij,jk,kl->il", 3, {{2, {2, 3}}, {2, {3, 4}}, {2, {4, 5}}}, {2, {2, 5}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {{2, {3, 0}}, {2, {0, 5}}}, {2, {3, 5}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {{2, {0, 2}}, {2, {2, 5}}}, {2, {0, 5}}},
    {"ij->ji", "ij->ji", 1, {{2, {300, 233}}}, {2, {233, 300}}}, /* threaded loop */
    {"bij,bjk->bik", "bij,bjk->bik", 2, {{3, {40, 6, 7}}, {3, {40, 7, 3}}}, {3, {40, 6, 3}}},
};

static void check_einsum(enum gf_dtype dt, const struct ein_case *c)
{
    struct gf_model *m;
    struct gf_node *n = make_node(&m, "Einsum", (size_t)c->n_in, NULL, 12);
    gf_node_set_attr_string(n, "equation", c->eq);
    struct gf_tview in[3];
    for (int i = 0; i < c->n_in; i++) {
        in[i] = tv(dt, c->in[i].rank, c->in[i].d);
        fill(&in[i], (unsigned)i + 1, 1);
    }
    struct gf_tview out = tv(dt, c->out.rank, c->out.d), want = tv(dt, c->out.rank, c->out.d);
    ref_einsum(c->ref_eq, in, (size_t)c->n_in, &want);
    for (int threads = 1; threads <= 2; threads++) {
        memset(out.data, 0x5a, gf_tview_bytes(&out));
        if (run_node(n, in, (size_t)c->n_in, &out, threads) != GF_OK)
            fail_msg("%s: %s", c->eq, gf_last_error());
        expect_close(&out, &want);
    }
    for (int i = 0; i < c->n_in; i++)
        tv_free(&in[i]);
    tv_free(&out), tv_free(&want);
    gf_model_free(m);
}

static void test_einsum_forms(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++)
        for (size_t i = 0; i < sizeof(ein_cases) / sizeof(ein_cases[0]); i++)
            check_einsum(all_types[t], &ein_cases[i]);
}

/* '...' broadcasts like MatMul's batch dims: compare with ref_matmul. */
static void test_einsum_ellipsis(void **state)
{
    (void)state;
    const char *eqs[] = {"...ij,...jk->...ik", "...ij,...jk"};
    for (int e = 0; e < 2; e++) {
        struct gf_model *m;
        struct gf_node *n = make_node(&m, "Einsum", 2, NULL, 12);
        gf_node_set_attr_string(n, "equation", eqs[e]);
        struct gf_tview in[2] = {TV(GF_FLOAT, 2, 1, 3, 4), TV(GF_FLOAT, 5, 4, 2)};
        struct gf_tview out = TV(GF_FLOAT, 2, 5, 3, 2), want = TV(GF_FLOAT, 2, 5, 3, 2);
        fill(&in[0], 1, 1);
        fill(&in[1], 2, 1);
        ref_matmul(&in[0], &in[1], &want);
        assert_int_equal(run_node(n, in, 2, &out, 2), GF_OK);
        expect_close(&out, &want);
        tv_free(&in[0]), tv_free(&in[1]), tv_free(&out), tv_free(&want);
        gf_model_free(m);
    }
}

static void test_einsum_errors(void **state)
{
    (void)state;
    const struct {
        const char *eq;
        int n_in;
        struct shape in[2], out;
        const char *what;
    } bad[] = {
        {"ij,jk->ik", 1, {{2, {2, 3}}}, {2, {2, 3}}, "has 2 input terms but the node has 1"},
        {"ij->i$", 1, {{2, {2, 3}}}, {1, {2}}, "not a letter"},
        {"i.j->ij", 1, {{2, {2, 3}}}, {2, {2, 3}}, "'.' not part of a single '...'"},
        {"...i...->i", 1, {{2, {2, 3}}}, {1, {3}}, "'.' not part of a single '...'"},
        {"ij-i", 1, {{2, {2, 3}}}, {1, {2}}, "'-' not followed by '>'"},
        {"ij->i,j", 1, {{2, {2, 3}}}, {1, {2}}, "text after the output term"},
        {"ijk->i", 1, {{2, {2, 3}}}, {1, {2}}, "input 0 has rank 2 but its term names 3"},
        {"i->i", 1, {{2, {2, 3}}}, {1, {2}}, "input 0 has rank 2 but its term names 1"},
        {"abcdefghij->a", 1, {{2, {2, 3}}}, {1, {2}}, "more labels than the largest rank"},
        {"ij,jk->ik", 2, {{2, {2, 3}}, {2, {4, 5}}}, {2, {2, 5}}, "label 'j' has size 4"},
        {"ij->k", 1, {{2, {2, 3}}}, {1, {2}}, "output label 'k' appears in no input"},
        {"ij->ii", 1, {{2, {2, 3}}}, {2, {2, 2}}, "output label 'i' is repeated"},
        {"ii->i", 1, {{2, {2, 3}}}, {1, {2}}, "label 'i' repeats in input 0 [2,3]"},
        {"...i->i", 1, {{2, {2, 3}}}, {1, {3}}, "output term has no '...'"},
        {"ij->ji", 1, {{2, {2, 3}}}, {2, {2, 3}}, "output has shape [2,3], expected [3,2]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gf_model *m;
        struct gf_node *n = make_node(&m, "Einsum", (size_t)bad[i].n_in, NULL, 12);
        gf_node_set_attr_string(n, "equation", bad[i].eq);
        struct gf_tview in[2];
        for (int k = 0; k < bad[i].n_in; k++)
            in[k] = tv(GF_FLOAT, bad[i].in[k].rank, bad[i].in[k].d);
        struct gf_tview out = tv(GF_FLOAT, bad[i].out.rank, bad[i].out.d);
        expect_invalid(n, in, (size_t)bad[i].n_in, &out, bad[i].what);
        for (int k = 0; k < bad[i].n_in; k++)
            tv_free(&in[k]);
        tv_free(&out);
        gf_model_free(m);
    }
    /* no equation at all; mixed element types */
    struct gf_model *m;
    struct gf_node *n = make_node(&m, "Einsum", 2, NULL, 12);
    struct gf_tview in[2] = {TV(GF_FLOAT, 3), TV(GF_FLOAT, 3)}, out = TV0(GF_FLOAT);
    expect_invalid(n, in, 2, &out, "needs a string attribute 'equation'");
    gf_node_set_attr_string(n, "equation", "i,i");
    in[1].dtype = GF_DOUBLE;
    expect_invalid(n, in, 2, &out, "input 1 is double");
    tv_free(&in[0]), tv_free(&in[1]), tv_free(&out);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_tests),
        cmocka_unit_test(test_matmul_shapes_and_types),
        cmocka_unit_test(test_matmul_int_wraps),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_gemm_attributes_and_bias),
        cmocka_unit_test(test_gemm_odd_sizes),
        cmocka_unit_test(test_gemm_errors),
        cmocka_unit_test(test_einsum_forms),
        cmocka_unit_test(test_einsum_ellipsis),
        cmocka_unit_test(test_einsum_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
