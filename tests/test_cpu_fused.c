/* Tests of the fused-op CPU kernels (kernels/cpu/fused_*.c) and their shape
 * inference.  Every kernel is compared with a plain reference loop written
 * here from the README's "Fused ops" table, in double precision, on odd
 * shapes (1, 7, 33, 4097 columns ...), every attribute combination and
 * 1, 2 and 7 threads; then the error paths; then, through the executor,
 * the fused single-node graph against the unfused ONNX subgraph it
 * replaces (tests/fused_graphs.h) on the same random inputs.
 * Tolerances: 1e-5 relative (plus 1e-6 absolute for values near zero);
 * loss sums 1e-4; fp16 / bf16 one rounding of the output type. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fused_graphs.h"
#include "gf_kernels.h"

/* ---- fixtures: one model with one node; buffers freed after each test --- */

static struct gf_model *model;
static void **allocs;
static size_t n_allocs, cap_allocs;

static void *tcalloc(size_t n)
{
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, cap_allocs * sizeof(*allocs));
        assert_non_null(allocs);
    }
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return allocs[n_allocs++] = p;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_allocs; i++)
        free(allocs[i]);
    n_allocs = 0;
    free(allocs);
    allocs = NULL;
    cap_allocs = 0;
    gf_model_free(model);
    model = NULL;
    return 0;
}

/* A fresh model holding one graphfuse node `op` named n0. */
static struct gf_node *node(const char *op, size_t n_in, size_t n_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "graphfuse", 1), GF_OK);
    struct gf_value *ins[8], *outs[4];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(model->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(model->graph, op, "graphfuse", "n0", n_in, ins,
                                          n_out, outs);
    assert_non_null(n);
    assert_int_not_equal(n->op, GF_OP_UNKNOWN);
    return n;
}

static void set_int(struct gf_node *n, const char *name, int64_t v)
{
    assert_int_equal(gf_node_set_attr_int(n, name, v), GF_OK);
}

static void set_float(struct gf_node *n, const char *name, float v)
{
    assert_int_equal(gf_node_set_attr_float(n, name, v), GF_OK);
}

static void set_str(struct gf_node *n, const char *name, const char *v)
{
    assert_int_equal(gf_node_set_attr_string(n, name, v), GF_OK);
}

/* A view of freshly zeroed memory (`data` copied in when not NULL). */
static struct gf_tview tv(enum gf_dtype dt, const void *data, int rank, const int64_t *dims)
{
    struct gf_tview t = {.dtype = dt};
    gf_tview_set_shape(&t, rank, dims);
    t.data = tcalloc(gf_tview_bytes(&t));
    if (data)
        memcpy(t.data, data, gf_tview_bytes(&t));
    return t;
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) ((int)(sizeof(DIMS(__VA_ARGS__)) / sizeof(int64_t)))
#define TV(dt, data, ...) tv(dt, data, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))
#define NONE ((struct gf_tview){0})

static double elem(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

static void put(struct gf_tview *t, size_t i, double v)
{
    switch (t->dtype) {
    case GF_FLOAT: ((float *)t->data)[i] = (float)v; break;
    case GF_DOUBLE: ((double *)t->data)[i] = v; break;
    case GF_FLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_bf16((float)v); break;
    case GF_INT32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case GF_INT64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    default: fail();
    }
}

static uint64_t rng = 1;

/* Values uniform in [lo, hi), rounded to dt. */
static struct gf_tview rnd(enum gf_dtype dt, int rank, const int64_t *dims, double lo, double hi)
{
    struct gf_tview t = tv(dt, NULL, rank, dims);
    for (size_t i = 0; i < t.nelem; i++)
        put(&t, i, lo + (hi - lo) * fg_uniform(&rng));
    return t;
}

#define RND(dt, lo, hi, ...) rnd(dt, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__), lo, hi)

/* Runs the kernel the registry picks on `threads` threads, the workspace
 * allocated at its exact size (so that ASan sees an overrun); the
 * workspace size is asked with data-less views, as the executor does. */
static enum gf_status run_threads(const struct gf_node *n, const struct gf_tview *in,
                                  size_t n_in, struct gf_tview *out, size_t n_out, int threads)
{
    struct gf_backend *be = gf_backend_get("cpu");
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k)
        return GF_ERR_UNSUPPORTED;
    struct gf_tview vin[8], vout[4];
    for (size_t i = 0; i < n_in; i++)
        vin[i] = in[i], vin[i].data = NULL;
    for (size_t i = 0; i < n_out; i++)
        vout[i] = out[i], vout[i].data = NULL;
    struct gf_kernel_args a = {.node = n, .in = vin, .n_in = n_in, .out = vout, .n_out = n_out,
                               .n_threads = threads, .backend = be};
    size_t bytes = k->workspace ? k->workspace(&a) : 0;
    a.in = in;
    a.out = out;
    void *ws = bytes ? malloc(bytes) : NULL;
    a.workspace = ws;
    enum gf_status st = k->run(&a);
    free(ws);
    return st;
}

static enum gf_status run(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                          struct gf_tview *out, size_t n_out)
{
    return run_threads(n, in, n_in, out, n_out, 2);
}

/* The call fails with GF_ERR_INVALID and a message naming node n0 and
 * containing `what`. */
#define assert_invalid(call, what)                                                  \
    do {                                                                            \
        assert_int_equal((call), GF_ERR_INVALID);                                   \
        if (!strstr(gf_last_error(), what) || !strstr(gf_last_error(), "'n0'")) {   \
            print_error("message '%s' lacks '%s' or the node\n", gf_last_error(), what); \
            fail();                                                                 \
        }                                                                           \
    } while (0)

/* The call succeeds; else the message is printed. */
#define assert_ok(call)                                                             \
    do {                                                                            \
        enum gf_status st_ = (call);                                                \
        if (st_ != GF_OK) {                                                         \
            print_error("%s: %s\n", gf_status_name(st_), gf_last_error());          \
            fail();                                                                 \
        }                                                                           \
    } while (0)

/* |got - want| <= atol + rtol |want|; NaN matches NaN, equal infinities pass. */
static void expect_close(const struct gf_tview *got, const double *want, size_t n, double rtol,
                         double atol)
{
    assert_int_equal(got->nelem, n);
    for (size_t i = 0; i < n; i++) {
        double g = elem(got, i), w = want[i];
        if ((isnan(w) && isnan(g)) || (isinf(w) && g == w))
            continue;
        if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
            print_error("element %zu of %zu: got %.9g, want %.9g\n", i, n, g, w);
            fail();
        }
    }
}

/* Tolerances for outputs of dtype dt: rtol, and atol for values near 0. */
static double rtol_of(enum gf_dtype dt)
{
    return dt == GF_DOUBLE ? 1e-12 : dt == GF_FLOAT16 ? 2e-3 : dt == GF_BFLOAT16 ? 1.6e-2 : 1e-5;
}

static double atol_of(enum gf_dtype dt)
{
    return dt == GF_DOUBLE ? 1e-13 : dt == GF_FLOAT16 ? 1e-4 : dt == GF_BFLOAT16 ? 1e-3 : 1e-6;
}

/* The elements of a view as doubles (a tcalloc'ed copy). */
static double *values(const struct gf_tview *t)
{
    double *v = tcalloc(t->nelem * sizeof(double));
    for (size_t i = 0; i < t->nelem; i++)
        v[i] = elem(t, i);
    return v;
}

/* Offset into t, broadcast (numpy rules) to shape dims[rank], of that
 * shape's element i. */
static size_t bidx(const struct gf_tview *t, int rank, const int64_t *dims, size_t i)
{
    size_t off = 0, stride = 1;
    for (int d = rank - 1, e = t->rank - 1; d >= 0; d--, e--) {
        size_t c = i % (size_t)dims[d];
        i /= (size_t)dims[d];
        if (e >= 0) {
            if (t->dims[e] != 1)
                off += c * stride;
            stride *= (size_t)t->dims[e];
        }
    }
    return off;
}

static const enum gf_dtype float_types[] = {GF_FLOAT, GF_DOUBLE, GF_FLOAT16, GF_BFLOAT16};

/* ==== RMSNorm AddRMSNorm LayerNorm AddLayerNorm ====================================== */

/* One normalization case: X dims[rank] normalized from `axis`, W and B of
 * shape wdims[wrank] (rank -1: absent), R when adding. */
struct norm_case {
    const char *op;
    enum gf_dtype dt;
    int rank, axis, wrank, brank;
    int64_t dims[4], wdims[4], bdims[4];
    float eps, offset;
    int eps_outside;
    bool omit_s;
};

/* Reference, straight from the table: rows of n = prod(dims[axis:]); the
 * statistics (LayerNorm's Mean and InvStdDev) per row into stats[2 * row]
 * when stats is given. */
static void ref_norm(const struct norm_case *k, const struct gf_tview *x, const struct gf_tview *w,
                     const struct gf_tview *b, double *y, double *stats)
{
    bool rms = strstr(k->op, "RMS") != NULL;
    size_t n = 1;
    for (int i = k->axis; i < k->rank; i++)
        n *= (size_t)k->dims[i];
    for (size_t row = 0; row < x->nelem / n; row++) {
        double sum = 0, sq = 0;
        for (size_t j = 0; j < n; j++)
            sum += elem(x, row * n + j);
        double mean = rms ? 0 : sum / (double)n;
        for (size_t j = 0; j < n; j++)
            sq += (elem(x, row * n + j) - mean) * (elem(x, row * n + j) - mean);
        double den = k->eps_outside ? sqrt(sq / (double)n) + k->eps : sqrt(sq / (double)n + k->eps);
        if (stats)
            stats[2 * row] = mean, stats[2 * row + 1] = 1 / den;
        for (size_t j = 0; j < n; j++) {
            int br = k->rank - k->axis;
            const int64_t *bd = k->dims + k->axis;
            double wj = w ? elem(w, bidx(w, br, bd, j)) + k->offset : 1;
            double bj = b ? elem(b, bidx(b, br, bd, j)) : 0;
            y[row * n + j] = (elem(x, row * n + j) - mean) / den * wj + bj;
        }
    }
}

/* Rounds the values of S to dt, as the op stores S before normalizing it. */
static void round_to(enum gf_dtype dt, double *v, size_t n)
{
    struct gf_tview t = {.dtype = dt, .nelem = 1, .data = &(uint64_t){0}};
    for (size_t i = 0; i < n; i++) {
        put(&t, 0, v[i]);
        v[i] = elem(&t, 0);
    }
}

static void check_norm(const struct norm_case *k, int threads)
{
    bool add = strncmp(k->op, "Add", 3) == 0, ln = strstr(k->op, "Layer") != NULL;
    size_t n_in = (add ? 2 : 1) + 1 + (ln ? 1 : 0), wi = add ? 2 : 1, ks = add ? 2 : 1;
    size_t n_out = ks + (ln ? 2 : 0);
    struct gf_node *n = node(k->op, n_in, n_out);
    set_int(n, "axis", k->axis - k->rank); /* negative form */
    set_float(n, "epsilon", k->eps);
    if (!ln) {
        set_int(n, "eps_outside", k->eps_outside);
        set_float(n, "weight_offset", k->offset);
    }
    struct gf_tview in[4] = {0}, out[4] = {0};
    in[0] = rnd(k->dt, k->rank, k->dims, -2, 3);
    if (add)
        in[1] = rnd(k->dt, k->rank, k->dims, -1, 1);
    if (k->wrank >= 0)
        in[wi] = rnd(k->dt, k->wrank, k->wdims, -1.5, 1.5);
    if (ln && k->brank >= 0)
        in[wi + 1] = rnd(k->dt, k->brank, k->bdims, -1, 1);
    out[0] = tv(k->dt, NULL, k->rank, k->dims);
    if (add && !k->omit_s)
        out[1] = tv(k->dt, NULL, k->rank, k->dims);
    int64_t sd[4]; /* LayerNorm's Mean and InvStdDev: the normalized axes 1 */
    for (int i = 0; i < k->rank; i++)
        sd[i] = i < k->axis ? k->dims[i] : 1;
    enum gf_dtype st = k->dt == GF_DOUBLE ? GF_DOUBLE : GF_FLOAT;
    for (size_t i = ks; ln && !k->omit_s && i < n_out; i++) /* omit_s: no statistics */
        out[i] = tv(st, NULL, k->rank, sd);
    assert_ok(run_threads(n, in, n_in, out, n_out, threads));
    size_t nel = in[0].nelem;
    double *y = tcalloc(nel * sizeof(double)), *s = tcalloc(nel * sizeof(double));
    if (add) { /* the reference normalizes S as stored: rounded to dt */
        for (size_t i = 0; i < nel; i++)
            s[i] = elem(&in[0], i) + elem(&in[1], i);
        round_to(k->dt, s, nel);
    }
    struct gf_tview sv = {.dtype = GF_DOUBLE, .nelem = nel, .data = s};
    size_t rows = 1; /* rows of the normalization: X's leading dims */
    for (int i = 0; i < k->axis; i++)
        rows *= (size_t)k->dims[i];
    double *stats = tcalloc(2 * nel * sizeof(double) + 16);
    ref_norm(k, add ? &sv : &in[0], k->wrank >= 0 ? &in[wi] : NULL,
             ln && k->brank >= 0 ? &in[wi + 1] : NULL, y, stats);
    expect_close(&out[0], y, nel, rtol_of(k->dt), atol_of(k->dt));
    if (add && !k->omit_s)
        expect_close(&out[1], s, nel, 0, 0);
    for (size_t i = 0; ln && !k->omit_s && i < 2; i++) {
        double *want = tcalloc(rows * sizeof(double) + 8);
        for (size_t r = 0; r < rows; r++)
            want[r] = stats[2 * r + i];
        expect_close(&out[ks + i], want, rows, k->dt == GF_DOUBLE ? 1e-12 : 1e-6, 1e-7);
    }
}

static void test_rmsnorm(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    for (size_t c = 0; c < 4; c++)
        for (int outside = 0; outside < 2; outside++)
            for (int off = 0; off < 2; off++)
                for (int w = 0; w < 2; w++) {
                    if (off && !w)
                        continue;
                    struct norm_case k = {"RMSNorm", GF_FLOAT, 2, 1, w ? 1 : -1, -1,
                                          {5, cols[c]}, {cols[c]}, {0}, outside ? 0.5f : 1e-6f,
                                          (float)off, outside, false};
                    check_norm(&k, c == 1 ? 7 : 2);
                }
    /* two normalized axes, W broadcast over one of them */
    struct norm_case k2 = {"RMSNorm", GF_FLOAT, 3, 1, 2, -1, {2, 3, 33}, {1, 33}, {0}, 1e-5f, 0, 0,
                           false};
    check_norm(&k2, 2);
    k2.wrank = 0; /* a scalar W */
    check_norm(&k2, 1);
    /* the whole tensor is one row (axis 0), rows of a rank-1 X */
    struct norm_case k3 = {"RMSNorm", GF_FLOAT, 1, 0, 1, -1, {4097}, {4097}, {0}, 1e-6f, 1, 0,
                           false};
    check_norm(&k3, 2);
    for (size_t t = 1; t < 4; t++) {
        struct norm_case k4 = {"RMSNorm", float_types[t], 3, 2, 1, -1, {2, 3, 33}, {33}, {0},
                               1e-6f, 1, 0, false};
        check_norm(&k4, 2);
    }
}

static void test_add_rmsnorm(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    for (size_t c = 0; c < 4; c++)
        for (int w = 0; w < 2; w++)
            for (int omit = 0; omit < 2; omit++) {
                struct norm_case k = {"AddRMSNorm", GF_FLOAT, 2, 1, w ? 1 : -1, -1, {3, cols[c]},
                                      {cols[c]}, {0}, 1e-6f, 0, c & 1, omit};
                check_norm(&k, c == 2 ? 7 : 2);
            }
    for (size_t t = 1; t < 4; t++) {
        struct norm_case k = {"AddRMSNorm", float_types[t], 2, 1, 1, -1, {4, 33}, {33}, {0},
                              1e-6f, 1, 0, false};
        check_norm(&k, 2);
    }
}

static void test_layernorm(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    for (size_t c = 0; c < 4; c++)
        for (int w = 0; w < 2; w++)
            for (int b = 0; b < 2; b++) {
                struct norm_case k = {"LayerNorm", GF_FLOAT, 2, 1, w ? 1 : -1, b ? 1 : -1,
                                      {6, cols[c]}, {cols[c]}, {cols[c]}, c == 3 ? 0.25f : 1e-5f,
                                      0, 0, false};
                check_norm(&k, c == 0 ? 7 : 2);
            }
    struct norm_case k2 = {"LayerNorm", GF_FLOAT, 3, 1, 2, 1, {2, 3, 33}, {3, 1}, {33}, 1e-5f,
                           0, 0, false};
    check_norm(&k2, 2);
    for (size_t t = 1; t < 4; t++) {
        struct norm_case k3 = {"LayerNorm", float_types[t], 2, 1, 1, 1, {3, 33}, {33}, {33},
                               1e-5f, 0, 0, false};
        check_norm(&k3, 2);
    }
    /* a mean far from zero costs no precision: rows of 1000 + small values */
    struct gf_node *n = node("LayerNorm", 1, 1);
    struct gf_tview x = RND(GF_FLOAT, 1000, 1001, 3, 7), y = TV(GF_FLOAT, NULL, 3, 7);
    assert_ok(run(n, &x, 1, &y, 1));
    struct norm_case k4 = {"LayerNorm", GF_FLOAT, 2, 1, -1, -1, {3, 7}, {0}, {0}, 1e-5f, 0, 0,
                           false};
    double *want = tcalloc(21 * sizeof(double));
    ref_norm(&k4, &x, NULL, NULL, want, NULL);
    expect_close(&y, want, 21, 2e-5, 1e-6);
}

static void test_add_layernorm(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    for (size_t c = 0; c < 4; c++)
        for (int wb = 0; wb < 3; wb++) {
            struct norm_case k = {"AddLayerNorm", GF_FLOAT, 2, 1, wb ? 1 : -1, wb == 2 ? 1 : -1,
                                  {3, cols[c]}, {cols[c]}, {cols[c]}, 1e-5f, 0, 0, c == 1};
            check_norm(&k, 2);
        }
    for (size_t t = 1; t < 4; t++) {
        struct norm_case k = {"AddLayerNorm", float_types[t], 2, 1, 1, 1, {5, 33}, {33}, {33},
                              1e-5f, 0, 0, false};
        check_norm(&k, 2);
    }
}

static void test_norm_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("RMSNorm", 2, 1);
    struct gf_tview in[2] = {RND(GF_FLOAT, -1, 1, 3, 5), RND(GF_FLOAT, -1, 1, 4)};
    struct gf_tview y = TV(GF_FLOAT, NULL, 3, 5);
    assert_invalid(run(n, in, 2, &y, 1), "W (input 1) [4] does not broadcast");
    in[1] = RND(GF_DOUBLE, -1, 1, 5);
    assert_invalid(run(n, in, 2, &y, 1), "W (input 1) is double, expected float");
    in[1] = RND(GF_FLOAT, -1, 1, 5);
    set_float(n, "epsilon", -1e-6f);
    assert_invalid(run(n, in, 2, &y, 1), "must be finite and >= 0");
    set_float(n, "epsilon", 1e-6f);
    set_int(n, "eps_outside", 2);
    assert_invalid(run(n, in, 2, &y, 1), "eps_outside 2 must be 0 or 1");
    set_int(n, "eps_outside", 0);
    set_int(n, "axis", 2);
    assert_invalid(run(n, in, 2, &y, 1), "axis 2 is out of range");
    set_int(n, "axis", -1);
    set_float(n, "weight_offset", 1);
    assert_invalid(run(n, in, 1, &y, 1), "weight_offset 1 needs the weight W");
    struct gf_tview bad = TV(GF_FLOAT, NULL, 5, 3);
    assert_invalid(run(n, in, 2, &bad, 1), "output 0 has shape [5,3], expected [3,5]");
    n = node("AddLayerNorm", 4, 2);
    struct gf_tview in4[4] = {RND(GF_FLOAT, -1, 1, 3, 5), RND(GF_FLOAT, -1, 1, 5, 3), NONE, NONE};
    struct gf_tview out2[2] = {TV(GF_FLOAT, NULL, 3, 5), TV(GF_FLOAT, NULL, 3, 5)};
    assert_invalid(run(n, in4, 4, out2, 2), "R [5,3] must have X's shape [3,5]");
    in4[1] = RND(GF_FLOAT, -1, 1, 3, 5);
    in4[3] = RND(GF_FLOAT, -1, 1, 2, 5);
    assert_invalid(run(n, in4, 4, out2, 2), "B (input 3) [2,5] does not broadcast");
    in4[3] = NONE;
    out2[1] = TV(GF_FLOAT, NULL, 15);
    assert_invalid(run(n, in4, 4, out2, 2), "output 1 has shape [15], expected [3,5]");
}

/* ==== SwiGLU GeGLU SiLU Gelu =========================================================== */

static double ref_gelu(double x, bool tanh_form)
{
    if (tanh_form) /* x/2 (1 + tanh(u)), the tanh written so that it cannot cancel */
        return x / (1 + exp(-2 * 0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * erfc(-x / sqrt(2.0));
}

static double ref_act(const char *op, const char *approx, double x)
{
    if (strcmp(op, "SwiGLU") == 0 || strcmp(op, "SiLU") == 0)
        return x / (1 + exp(-x));
    return ref_gelu(x, strcmp(approx, "tanh") == 0);
}

/* G gdims[gr], U udims[ur] (ur -1: a unary op). */
static void check_act(const char *op, const char *approx, enum gf_dtype dt, int gr,
                      const int64_t *gdims, int ur, const int64_t *udims, int threads)
{
    bool gated = ur >= 0;
    struct gf_node *n = node(op, gated ? 2 : 1, 1);
    if (approx)
        set_str(n, "approximate", approx);
    struct gf_tview in[2] = {rnd(dt, gr, gdims, -6, 6), gated ? rnd(dt, ur, udims, -2, 2) : NONE};
    int rank = gr > ur ? gr : ur;
    int64_t dims[8];
    for (int i = 0; i < rank; i++) {
        int ig = i - (rank - gr), iu = i - (rank - ur);
        int64_t dg = ig >= 0 ? gdims[ig] : 1, du = gated && iu >= 0 ? udims[iu] : 1;
        dims[i] = dg == 1 ? du : dg;
    }
    struct gf_tview y = tv(dt, NULL, rank, dims);
    assert_ok(run_threads(n, in, gated ? 2 : 1, &y, 1, threads));
    double *want = tcalloc(y.nelem * sizeof(double) + 8);
    for (size_t i = 0; i < y.nelem; i++) {
        want[i] = ref_act(op, approx ? approx : "none", elem(&in[0], bidx(&in[0], rank, dims, i)));
        if (gated)
            want[i] *= elem(&in[1], bidx(&in[1], rank, dims, i));
    }
    expect_close(&y, want, y.nelem, rtol_of(dt), atol_of(dt));
}

static void test_gated(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    static const char *const ops[][2] = {{"SwiGLU", NULL}, {"GeGLU", NULL}, {"GeGLU", "none"},
                                         {"GeGLU", "tanh"}};
    for (size_t o = 0; o < 4; o++) {
        for (size_t c = 0; c < 4; c++) {
            int64_t d[2] = {3, cols[c]};
            check_act(ops[o][0], ops[o][1], GF_FLOAT, 2, d, 2, d, c == 2 ? 7 : 2);
        }
        /* broadcasting: U over rows, G over columns, both ways, scalars */
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 3, DIMS(2, 3, 33), 1, DIMS(33), 2);
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 3, DIMS(2, 1, 5), 2, DIMS(3, 1), 3);
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 2, DIMS(4, 33), 2, DIMS(4, 1), 2);
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 0, DIMS(0), 2, DIMS(7, 9), 2);
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 2, DIMS(1, 4097), 0, DIMS(0), 2);
        for (size_t t = 1; t < 4; t++)
            check_act(ops[o][0], ops[o][1], float_types[t], 2, DIMS(3, 33), 1, DIMS(33), 2);
    }
}

static void test_unary_act(void **state)
{
    (void)state;
    static const int64_t cols[] = {1, 7, 33, 4097};
    static const char *const ops[][2] = {{"SiLU", NULL}, {"Gelu", NULL}, {"Gelu", "tanh"}};
    for (size_t o = 0; o < 3; o++) {
        for (size_t c = 0; c < 4; c++)
            check_act(ops[o][0], ops[o][1], GF_FLOAT, 2, DIMS(5, cols[c]), -1, NULL, 2);
        check_act(ops[o][0], ops[o][1], GF_FLOAT, 1, DIMS(100003), -1, NULL, 7);
        for (size_t t = 1; t < 4; t++)
            check_act(ops[o][0], ops[o][1], float_types[t], 2, DIMS(3, 33), -1, NULL, 2);
    }
    /* the tails and the special values */
    static const float xs[] = {-30, -12, -9.5f, -5, -1e-3f, 0, 1e-30f, 2.5f, 9, 80, 100,
                               INFINITY, -INFINITY, NAN};
    for (size_t o = 0; o < 3; o++) {
        struct gf_node *n = node(ops[o][0], 1, 1);
        if (ops[o][1])
            set_str(n, "approximate", ops[o][1]);
        struct gf_tview x = tv(GF_FLOAT, xs, 1, DIMS(14)), y = TV(GF_FLOAT, NULL, 14);
        assert_ok(run(n, &x, 1, &y, 1));
        double want[14];
        for (size_t i = 0; i < 14; i++) {
            want[i] = ref_act(ops[o][0], ops[o][1] ? ops[o][1] : "none", xs[i]); /* -inf: NaN */
            if (fabs(want[i]) < 1e-37)
                want[i] = 0; /* below float's normal range */
        }
        expect_close(&y, want, 14, 3e-5, 1e-37);
    }
}

static void test_act_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("SwiGLU", 2, 1);
    struct gf_tview in[2] = {RND(GF_FLOAT, -1, 1, 3, 5), RND(GF_FLOAT, -1, 1, 4)};
    struct gf_tview y = TV(GF_FLOAT, NULL, 3, 5);
    assert_invalid(run(n, in, 2, &y, 1), "G [3,5] and U [4] do not broadcast");
    in[1] = RND(GF_DOUBLE, -1, 1, 5);
    assert_invalid(run(n, in, 2, &y, 1), "U (input 1) is double, expected float");
    in[1] = RND(GF_FLOAT, -1, 1, 2, 1, 5);
    assert_invalid(run(n, in, 2, &y, 1), "output 0 has shape [3,5], expected [2,3,5]");
    n = node("GeGLU", 2, 1);
    in[1] = RND(GF_FLOAT, -1, 1, 5);
    set_str(n, "approximate", "fast");
    assert_invalid(run(n, in, 2, &y, 1), "approximate 'fast' is not none or tanh");
    n = node("SiLU", 1, 1);
    struct gf_tview yd = TV(GF_DOUBLE, NULL, 3, 5);
    assert_invalid(run(n, in, 1, &yd, 1), "output 0 is double, expected float");
    struct gf_tview yi = TV(GF_INT32, NULL, 3, 5);
    assert_int_equal(run(n, &yi, 1, &y, 1), GF_ERR_UNSUPPORTED); /* integer X */
}

/* ==== RoPE ============================================================================ */

static void check_rope(enum gf_dtype dt, int xr, const int64_t *xd, int cr, const int64_t *cd,
                       int threads)
{
    struct gf_node *n = node("RoPE", 3, 1);
    struct gf_tview in[3] = {rnd(dt, xr, xd, -2, 2), rnd(dt, cr, cd, -1, 1),
                             rnd(dt, cr, cd, -1, 1)};
    struct gf_tview y = tv(dt, NULL, xr, xd);
    assert_ok(run_threads(n, in, 3, &y, 1, threads));
    size_t d = (size_t)xd[xr - 1], h = d / 2;
    double *want = tcalloc(y.nelem * sizeof(double) + 8);
    for (size_t i = 0; i < y.nelem; i++) {
        size_t j = i % d, row = i - j;
        double rot = j < h ? -elem(&in[0], row + j + h) : elem(&in[0], row + j - h);
        want[i] = elem(&in[0], i) * elem(&in[1], bidx(&in[1], xr, xd, i)) +
                  rot * elem(&in[2], bidx(&in[2], xr, xd, i));
    }
    expect_close(&y, want, y.nelem, rtol_of(dt), atol_of(dt));
}

static void test_rope(void **state)
{
    (void)state;
    check_rope(GF_FLOAT, 4, DIMS(2, 3, 5, 8), 2, DIMS(5, 8), 2);
    check_rope(GF_FLOAT, 4, DIMS(2, 3, 5, 8), 4, DIMS(1, 1, 5, 8), 7);
    check_rope(GF_FLOAT, 4, DIMS(2, 3, 5, 8), 4, DIMS(2, 1, 5, 8), 1);
    check_rope(GF_FLOAT, 4, DIMS(2, 3, 5, 8), 1, DIMS(8), 2);
    check_rope(GF_FLOAT, 3, DIMS(7, 33, 2), 3, DIMS(7, 33, 1), 2); /* Cos constant per row */
    check_rope(GF_FLOAT, 2, DIMS(3, 4098), 2, DIMS(3, 4098), 2);
    check_rope(GF_FLOAT, 4, DIMS(1, 32, 64, 128), 2, DIMS(64, 128), 2);
    for (size_t t = 1; t < 4; t++)
        check_rope(float_types[t], 4, DIMS(2, 3, 5, 8), 2, DIMS(5, 8), 2);
}

static void test_rope_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("RoPE", 3, 1);
    struct gf_tview in[3] = {RND(GF_FLOAT, -1, 1, 2, 7), RND(GF_FLOAT, -1, 1, 7),
                             RND(GF_FLOAT, -1, 1, 7)};
    struct gf_tview y = TV(GF_FLOAT, NULL, 2, 7);
    assert_invalid(run(n, in, 3, &y, 1), "X [2,7] needs a last axis of even length");
    in[0] = RND(GF_FLOAT, -1, 1, 2, 8);
    in[1] = RND(GF_FLOAT, -1, 1, 3, 8);
    in[2] = RND(GF_FLOAT, -1, 1, 8);
    y = TV(GF_FLOAT, NULL, 2, 8);
    assert_invalid(run(n, in, 3, &y, 1), "Cos (input 1) [3,8] does not broadcast to X [2,8]");
    in[1] = RND(GF_FLOAT, -1, 1, 8);
    in[2] = RND(GF_FLOAT16, -1, 1, 8);
    assert_invalid(run(n, in, 3, &y, 1), "Sin (input 2) is float16, expected float");
    in[2] = NONE;
    assert_invalid(run(n, in, 3, &y, 1), "Sin (input 2) is missing");
}

/* ==== MatMulEpilogue =================================================================== */

static double ref_mact(const char *act, double v)
{
    if (strcmp(act, "relu") == 0)
        return v < 0 ? 0 : v;
    if (strcmp(act, "gelu") == 0)
        return ref_gelu(v, false);
    if (strcmp(act, "gelu_tanh") == 0)
        return ref_gelu(v, true);
    if (strcmp(act, "silu") == 0)
        return v / (1 + exp(-v));
    if (strcmp(act, "tanh") == 0)
        return tanh(v);
    if (strcmp(act, "sigmoid") == 0)
        return 1 / (1 + exp(-v));
    return v;
}

struct mm_case {
    enum gf_dtype dt;
    int ar, br, biasr, resr; /* ranks; -1: absent */
    int64_t ad[4], bd[4], biasd[4], resd[4];
    int ta, tb;
    float alpha, beta;
    const char *act;
};

/* Y's shape: MatMul of A' and B' (trans swaps the last two axes). */
static int mm_shape(const struct mm_case *k, int64_t *yd, int64_t *m, int64_t *kk, int64_t *n)
{
    int64_t a0 = k->ar > 1 ? k->ad[k->ar - 2] : 1, a1 = k->ad[k->ar - 1];
    int64_t b0 = k->br > 1 ? k->bd[k->br - 2] : k->bd[0], b1 = k->br > 1 ? k->bd[k->br - 1] : 1;
    *m = k->ta ? a1 : a0, *kk = k->ta ? a0 : a1, *n = k->tb ? b0 : b1;
    int ra = k->ar > 2 ? k->ar - 2 : 0, rb = k->br > 2 ? k->br - 2 : 0, r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? k->ad[ia] : 1, db = ib >= 0 ? k->bd[ib] : 1;
        yd[i] = da == 1 ? db : da;
    }
    int yr = r;
    if (k->ar > 1)
        yd[yr++] = *m;
    if (k->br > 1)
        yd[yr++] = *n;
    return yr;
}

/* A'[batch][i][p] for the batch index of Y's batch dims (broadcast). */
static double mm_at(const struct gf_tview *t, int trans, const int64_t *ydims, int nb,
                    size_t batch, size_t i, size_t p)
{
    int r = t->rank;
    size_t rows = r > 1 ? (size_t)t->dims[r - 2] : 1, cols = (size_t)t->dims[r - 1];
    size_t off = 0, stride = rows * cols;
    for (int d = nb - 1, e = r - 3; d >= 0; d--, e--) {
        size_t c = batch % (size_t)ydims[d];
        batch /= (size_t)ydims[d];
        if (e >= 0) {
            off += (t->dims[e] == 1 ? 0 : c) * stride;
            stride *= (size_t)t->dims[e];
        }
    }
    return elem(t, off + (trans ? p * cols + i : i * cols + p));
}

static void check_mm(const struct mm_case *k, int threads)
{
    struct gf_node *n = node("MatMulEpilogue", 4, 1);
    set_int(n, "transA", k->ta);
    set_int(n, "transB", k->tb);
    set_float(n, "alpha", k->alpha);
    set_float(n, "beta", k->beta);
    set_str(n, "activation", k->act);
    struct gf_tview in[4] = {rnd(k->dt, k->ar, k->ad, -1, 1), rnd(k->dt, k->br, k->bd, -1, 1),
                             k->biasr >= 0 ? rnd(k->dt, k->biasr, k->biasd, -1, 1) : NONE,
                             k->resr >= 0 ? rnd(k->dt, k->resr, k->resd, -1, 1) : NONE};
    int64_t yd[8], m, kk, nn;
    int yr = mm_shape(k, yd, &m, &kk, &nn);
    struct gf_tview y = tv(k->dt, NULL, yr, yd);
    assert_ok(run_threads(n, in, 4, &y, 1, threads));
    int nb = yr - (k->ar > 1) - (k->br > 1);
    /* B' as the [K, N] operand: B'[p][j] is mm_at of B with roles swapped */
    struct gf_tview bt = in[1];
    double *want = tcalloc(y.nelem * sizeof(double) + 8);
    for (size_t o = 0; o < y.nelem; o++) {
        size_t j = o % (size_t)nn, i = o / (size_t)nn % (size_t)m, batch = o / (size_t)(m * nn);
        double acc = 0;
        for (size_t p = 0; p < (size_t)kk; p++) {
            double a = mm_at(&in[0], k->ta, yd, nb, batch, i, p);
            double b = k->br == 1 ? elem(&bt, p) : mm_at(&bt, !k->tb, yd, nb, batch, j, p);
            acc += a * b;
        }
        double v = k->alpha * acc;
        if (k->biasr >= 0)
            v += k->beta * elem(&in[2], bidx(&in[2], yr, yd, o));
        v = ref_mact(k->act, v);
        if (k->resr >= 0)
            v += elem(&in[3], bidx(&in[3], yr, yd, o));
        want[o] = v;
    }
    double rt = k->dt == GF_FLOAT ? 2e-5 : rtol_of(k->dt); /* K-term sums in fp32 */
    expect_close(&y, want, y.nelem, rt, k->dt == GF_FLOAT ? 1e-5 : atol_of(k->dt) * 10);
}

static void test_matmul_epilogue(void **state)
{
    (void)state;
    static const char *const acts[] = {"", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"};
    static const int64_t mkn[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 9}, {5, 33, 300}};
    for (size_t s = 0; s < 4; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t a = 0; a < 7; a++) {
                    int64_t m = mkn[s][0], kk = mkn[s][1], nn = mkn[s][2];
                    struct mm_case k = {GF_FLOAT, 2, 2, 1, 2, {ta ? kk : m, ta ? m : kk},
                                        {tb ? nn : kk, tb ? kk : nn}, {nn}, {m, nn}, ta, tb,
                                        a & 1 ? 0.5f : 1.0f, a & 2 ? -2.0f : 1.0f, acts[a]};
                    check_mm(&k, (s + a) % 3 == 0 ? 7 : 2);
                }
    /* bias and residual shapes: [M, 1], scalar, absent; residual [N] */
    struct mm_case k1 = {GF_FLOAT, 2, 2, 2, 1, {7, 5}, {5, 3}, {7, 1}, {3}, 0, 0, 1, 1, "relu"};
    check_mm(&k1, 2);
    struct mm_case k2 = {GF_FLOAT, 2, 2, 0, -1, {7, 5}, {5, 3}, {0}, {0}, 0, 0, 1, 0.5f, ""};
    check_mm(&k2, 2);
    struct mm_case k3 = {GF_FLOAT, 2, 2, -1, -1, {7, 5}, {5, 3}, {0}, {0}, 0, 0, 2, 1, "gelu"};
    check_mm(&k3, 2);
    /* batches: broadcast both ways, B shared (one GEMM), 1-D operands */
    struct mm_case k4 = {GF_FLOAT, 4, 2, 1, 4, {2, 3, 7, 5}, {5, 9}, {9}, {2, 3, 7, 9}, 0, 0,
                         1, 1, "silu"};
    check_mm(&k4, 2);
    struct mm_case k5 = {GF_FLOAT, 4, 3, 2, 3, {2, 1, 5, 7}, {3, 9, 5}, {7, 1}, {3, 7, 9}, 1, 1,
                         1, 1, "gelu"};
    check_mm(&k5, 2);
    struct mm_case k6 = {GF_FLOAT, 1, 3, 1, 2, {5}, {4, 5, 6}, {6}, {4, 6}, 0, 0, 1, 1, "tanh"};
    check_mm(&k6, 2);
    struct mm_case k7 = {GF_FLOAT, 3, 1, 1, 1, {4, 6, 5}, {5}, {1}, {6}, 0, 0, 1, 1, "sigmoid"};
    check_mm(&k7, 2);
    struct mm_case k8 = {GF_FLOAT, 3, 3, 1, 3, {64, 9, 8}, {64, 10, 8}, {10}, {64, 9, 10}, 0, 1,
                         1, 1, "relu"}; /* many small batches: one per thread */
    check_mm(&k8, 2);
    struct mm_case k9 = {GF_FLOAT, 2, 2, 1, 2, {600, 3}, {3, 700}, {700}, {600, 700}, 0, 0, 1, 1,
                         "gelu"}; /* several output tiles */
    check_mm(&k9, 2);
    struct mm_case k10 = {GF_FLOAT, 2, 2, 1, -1, {4, 0}, {0, 6}, {6}, {0}, 0, 0, 1, 1, "relu"};
    check_mm(&k10, 2); /* K = 0: Y = act(beta Bias) */
    /* wide outputs (N > 1024): column blocks too; the LM head's transB, a
     * bias down the rows, a residual, batches that do not share B */
    struct mm_case k11 = {GF_FLOAT, 2, 2, 1, 2, {37, 20}, {2100, 20}, {2100}, {37, 2100}, 0, 1,
                          0.5f, -2.0f, "gelu_tanh"};
    check_mm(&k11, 2);
    check_mm(&k11, 7);
    check_mm(&k11, 1);
    struct mm_case k12 = {GF_FLOAT, 3, 3, 2, 1, {2, 9, 16}, {2, 16, 1500}, {9, 1}, {1500}, 0, 0,
                          1, 1, "relu"};
    check_mm(&k12, 3);
    struct mm_case k13 = {GF_FLOAT, 2, 2, -1, -1, {3, 12}, {12, 4100}, {0}, {0}, 1, 0, 1, 1, ""};
    k13.ad[0] = 12, k13.ad[1] = 3; /* transA: A [K, M] */
    check_mm(&k13, 2);
    /* past GF_CPU_SGEMM_MAX_M rows, B a plain input: tiles with an epilogue
     * (batches of A merged into one product); without an activation or
     * Res (the tied LM head: transB, nothing after; a bias), one BLAS call
     * onto beta Bias */
    struct mm_case k14 = {GF_FLOAT, 2, 2, 1, 2, {300, 24}, {1100, 24}, {1100}, {300, 1100}, 0,
                          1, 1, 1, "silu"};
    check_mm(&k14, 1);
    check_mm(&k14, 3);
    struct mm_case k15 = {GF_FLOAT, 3, 2, 2, -1, {2, 150, 40}, {40, 700}, {150, 1}, {0}, 0, 0,
                          1, 0.5f, "relu"};
    check_mm(&k15, 2);
    struct mm_case k16 = {GF_FLOAT, 3, 2, -1, -1, {2, 150, 64}, {1100, 64}, {0}, {0}, 0, 1, 1,
                          1, ""};
    check_mm(&k16, 2);
    k16.alpha = 0.25f, k16.ta = 1, k16.ar = 2, k16.ad[0] = 64, k16.ad[1] = 300;
    check_mm(&k16, 1);
    struct mm_case k17 = {GF_DOUBLE, 2, 2, 1, -1, {300, 60}, {60, 1000}, {1000}, {0}, 0, 0, 1,
                          -0.5f, ""};
    check_mm(&k17, 2);
    k17.dt = GF_FLOAT, k17.biasr = 2, k17.biasd[0] = 300, k17.biasd[1] = 1; /* bias [M, 1] */
    check_mm(&k17, 2);
    for (size_t t = 1; t < 4; t++) {
        struct mm_case kt = {float_types[t], 3, 2, 1, 3, {2, 7, 5}, {3, 5}, {3}, {2, 7, 3}, 0, 1,
                             1, 1, "gelu"};
        check_mm(&kt, 2);
        struct mm_case kw = {float_types[t], 2, 2, 1, 2, {6, 8}, {1100, 8}, {1100}, {6, 1100},
                             0, 1, 1, 1, "silu"};
        check_mm(&kw, 2);
    }
}

static void test_matmul_epilogue_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("MatMulEpilogue", 4, 1);
    struct gf_tview in[4] = {RND(GF_FLOAT, -1, 1, 7, 5), RND(GF_FLOAT, -1, 1, 4, 3), NONE, NONE};
    struct gf_tview y = TV(GF_FLOAT, NULL, 7, 3);
    assert_invalid(run(n, in, 4, &y, 1), "inner dims differ: A [7,5] has K = 5, B [4,3] has K = 4");
    set_int(n, "transB", 1);
    in[0] = RND(GF_FLOAT, -1, 1, 5);
    in[1] = RND(GF_FLOAT, -1, 1, 5);
    assert_invalid(run(n, in, 4, &y, 1), "transA / transB need an operand of rank >= 2");
    set_int(n, "transB", 0);
    in[0] = RND(GF_FLOAT, -1, 1, 2, 7, 5);
    in[1] = RND(GF_FLOAT, -1, 1, 3, 5, 3);
    assert_invalid(run(n, in, 4, &y, 1), "batch dims of A [2,7,5] and B [3,5,3] do not broadcast");
    in[0] = RND(GF_FLOAT, -1, 1, 7, 5);
    in[1] = RND(GF_FLOAT, -1, 1, 5, 3);
    in[2] = RND(GF_FLOAT, -1, 1, 7);
    assert_invalid(run(n, in, 4, &y, 1), "Bias (input 2) [7] does not broadcast to Y [7,3]");
    in[2] = NONE;
    in[3] = RND(GF_FLOAT, -1, 1, 2, 7, 3);
    assert_invalid(run(n, in, 4, &y, 1), "Res (input 3) [2,7,3] does not broadcast to Y [7,3]");
    in[3] = NONE;
    set_str(n, "activation", "elu");
    assert_invalid(run(n, in, 4, &y, 1), "activation 'elu' is not one of");
    set_str(n, "activation", "relu");
    struct gf_tview bad = TV(GF_FLOAT, NULL, 3, 7);
    assert_invalid(run(n, in, 4, &bad, 1), "output 0 has shape [3,7], expected [7,3]");
}

/* ==== SoftmaxCrossEntropy LinearCrossEntropy =========================================== */

/* Cross-entropy of positions (rows of C logits at stride st), the
 * reference: loss[p] = -w[t] log softmax(x)[t]; mean divides by the sum of
 * the weights of the positions kept.  Returns the reduced value. */
struct ce_ref {
    size_t n_pos, c;
    const double *logits; /* position p, class k at base[p] + k * st */
    const size_t *base;
    size_t st;
    const int64_t *labels;
    const double *w;      /* class weights or NULL */
    bool has_ii;
    int64_t ii;
};

static double ref_ce(const struct ce_ref *r, const char *red, double *per_pos, double *logp_rows)
{
    double ls = 0, ws = 0;
    for (size_t p = 0; p < r->n_pos; p++) {
        const double *x = r->logits + r->base[p];
        double m = -INFINITY, s = 0;
        for (size_t k = 0; k < r->c; k++)
            m = fmax(m, x[k * r->st]);
        for (size_t k = 0; k < r->c; k++)
            s += exp(x[k * r->st] - m);
        for (size_t k = 0; logp_rows && k < r->c; k++)
            logp_rows[p * r->c + k] = x[k * r->st] - m - log(s);
        int64_t t = r->labels[p];
        double l = 0, wt = 0;
        if (!(r->has_ii && t == r->ii)) {
            wt = r->w ? r->w[t] : 1;
            l = -(x[t * r->st] - m - log(s)) * wt;
        }
        per_pos[p] = l;
        ls += l;
        ws += wt;
    }
    return strcmp(red, "mean") == 0 ? ls / ws : ls;
}

/* Labels in [0, c), every third one ignore_index when given. */
static struct gf_tview labels(enum gf_dtype dt, int rank, const int64_t *dims, int64_t c,
                              const int64_t *ii)
{
    struct gf_tview t = tv(dt, NULL, rank, dims);
    for (size_t i = 0; i < t.nelem; i++)
        put(&t, i, ii && i % 3 == 1 ? (double)*ii
                                    : (double)(int64_t)(fg_uniform(&rng) * (double)c));
    return t;
}

struct sce_case {
    enum gf_dtype dt, lt;
    int rank;
    int64_t dims[4];
    const char *red;
    const int64_t *ii;
    bool weights, logp;
    int shift;
};

static void check_sce(const struct sce_case *k, int threads)
{
    struct gf_node *n = node("SoftmaxCrossEntropy", 3, 2);
    set_str(n, "reduction", k->red);
    set_int(n, "shift", k->shift);
    if (k->ii)
        set_int(n, "ignore_index", *k->ii);
    int64_t c = k->shift ? k->dims[2] : k->dims[1], s1 = k->shift ? k->dims[1] - 1 : 0;
    int64_t tdims[4], d = 1;
    int tr = k->shift ? 2 : k->rank - 1;
    tdims[0] = k->dims[0];
    for (int i = 1; i < tr; i++)
        tdims[i] = k->dims[k->shift ? i : i + 1];
    for (int i = 2; !k->shift && i < k->rank; i++)
        d *= k->dims[i];
    struct gf_tview in[3] = {rnd(k->dt, k->rank, k->dims, -4, 4),
                             labels(k->lt, tr, tdims, c, k->ii),
                             k->weights ? rnd(k->dt, 1, &c, 0.1, 2) : NONE};
    size_t n_pos = k->shift ? (size_t)(k->dims[0] * s1) : in[1].nelem;
    /* the reference's view of the positions */
    double *x = values(&in[0]), *w = k->weights ? values(&in[2]) : NULL;
    size_t *base = tcalloc(n_pos * sizeof(size_t) + 8);
    int64_t *lab = tcalloc(n_pos * sizeof(int64_t) + 8);
    for (size_t p = 0; p < n_pos; p++) {
        if (k->shift) { /* L[b, s, :] against T[b, s + 1] */
            size_t b = p / (size_t)s1, s = p % (size_t)s1;
            base[p] = (b * (size_t)(s1 + 1) + s) * (size_t)c;
            lab[p] = (int64_t)elem(&in[1], b * (size_t)(s1 + 1) + s + 1);
        } else {
            base[p] = p / (size_t)d * (size_t)(c * d) + p % (size_t)d;
            lab[p] = (int64_t)elem(&in[1], p);
        }
    }
    struct ce_ref r = {n_pos, (size_t)c, x, base, k->shift ? 1 : (size_t)d, lab, w,
                       k->ii != NULL, k->ii ? *k->ii : 0};
    double *per = tcalloc(n_pos * sizeof(double) + 8);
    double *lp = tcalloc(n_pos * (size_t)c * sizeof(double) + 8);
    double total = ref_ce(&r, k->red, per, lp);
    bool none = strcmp(k->red, "none") == 0;
    struct gf_tview out[2] = {none ? (k->shift ? tv(k->dt, NULL, 1, (int64_t[]){(int64_t)n_pos})
                                               : tv(k->dt, NULL, tr, tdims))
                                   : tv(k->dt, NULL, 0, NULL),
                              NONE};
    if (k->logp)
        out[1] = k->shift ? tv(k->dt, NULL, 2, (int64_t[]){(int64_t)n_pos, c})
                          : tv(k->dt, NULL, k->rank, k->dims);
    assert_ok(run_threads(n, in, 3, out, 2, threads));
    double rt = k->dt == GF_FLOAT ? 1e-5 : rtol_of(k->dt);
    if (none)
        expect_close(&out[0], per, n_pos, rt, atol_of(k->dt));
    else
        expect_close(&out[0], &total, 1, k->dt == GF_FLOAT ? 1e-4 : rt, atol_of(k->dt));
    if (k->logp) {
        double *want = tcalloc(out[1].nelem * sizeof(double) + 8);
        for (size_t p = 0; p < n_pos; p++) /* LogP in L's layout (shift: [positions, C]) */
            for (size_t j = 0; j < (size_t)c; j++)
                want[k->shift ? p * (size_t)c + j : base[p] + j * (size_t)d] =
                    lp[p * (size_t)c + j];
        expect_close(&out[1], want, out[1].nelem, rt, atol_of(k->dt) * 10);
    }
}

static void test_softmax_cross_entropy(void **state)
{
    (void)state;
    static const char *const reds[] = {"mean", "sum", "none"};
    static const int64_t ii = -100, ii2 = 2;
    static const int64_t nc[][2] = {{1, 1}, {7, 5}, {33, 4097}, {9, 33}};
    for (size_t s = 0; s < 4; s++)
        for (size_t r = 0; r < 3; r++)
            for (int opt = 0; opt < 8; opt++) {
                struct sce_case k = {GF_FLOAT, opt & 4 ? GF_INT32 : GF_INT64, 2,
                                     {nc[s][0], nc[s][1]}, reds[r],
                                     opt & 1 ? (s == 3 ? &ii2 : &ii) : NULL, opt & 2, opt & 4, 0};
                check_sce(&k, opt == 5 ? 7 : 2);
            }
    /* the class axis strided: [N, C, d1, d2] */
    for (size_t r = 0; r < 3; r++) {
        struct sce_case k = {GF_FLOAT, GF_INT64, 4, {3, 5, 2, 3}, reds[r], &ii2, true, true, 0};
        check_sce(&k, 2);
    }
    /* shift = 1: [B, S, C] against T[:, 1:]; S = 1 leaves no position */
    static const int64_t bsc[][3] = {{2, 5, 7}, {3, 9, 33}, {1, 2, 4097}, {3, 1, 4}};
    for (size_t s = 0; s < 4; s++)
        for (size_t r = 0; r < 3; r++)
            for (int opt = 0; opt < 4; opt++) {
                struct sce_case k = {GF_FLOAT, GF_INT64, 3, {bsc[s][0], bsc[s][1], bsc[s][2]},
                                     reds[r], opt & 1 ? &ii : NULL, opt & 2, opt == 3, 1};
                check_sce(&k, 2);
            }
    for (size_t t = 1; t < 4; t++) {
        struct sce_case k = {float_types[t], GF_INT64, 2, {7, 33}, "mean", &ii, true, true, 0};
        check_sce(&k, 2);
        struct sce_case k2 = {float_types[t], GF_INT32, 3, {2, 5, 33}, "none", NULL, false, true,
                              1};
        check_sce(&k2, 2);
    }
}

/* LinearCrossEntropy: logits H @ W' + Bias, then the cross-entropy. */
struct lce_case {
    enum gf_dtype dt;
    int hr;
    int64_t hd[3], v;
    int tb, shift;
    bool bias;
    const char *red;
    const int64_t *ii;
    int64_t chunk;
};

static void check_lce(const struct lce_case *k, int threads)
{
    struct gf_node *n = node("LinearCrossEntropy", 4, 1);
    set_int(n, "transB", k->tb);
    set_int(n, "shift", k->shift);
    set_int(n, "chunk_rows", k->chunk);
    set_str(n, "reduction", k->red);
    if (k->ii)
        set_int(n, "ignore_index", *k->ii);
    int64_t kk = k->hd[k->hr - 1], rows = 1;
    for (int i = 0; i < k->hr - 1; i++)
        rows *= k->hd[i];
    struct gf_tview in[4] = {rnd(k->dt, k->hr, k->hd, -1, 1),
                             k->tb ? rnd(k->dt, 2, (int64_t[]){k->v, kk}, -1, 1)
                                   : rnd(k->dt, 2, (int64_t[]){kk, k->v}, -1, 1),
                             labels(GF_INT64, k->hr - 1, k->hd, k->v, k->ii),
                             k->bias ? rnd(k->dt, 1, &k->v, -1, 1) : NONE};
    /* the full logits, the thing the kernel never holds */
    double *z = tcalloc((size_t)(rows * k->v) * sizeof(double) + 8);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k->v; j++) {
            double acc = k->bias ? elem(&in[3], (size_t)j) : 0;
            for (int64_t p = 0; p < kk; p++)
                acc += elem(&in[0], (size_t)(r * kk + p)) *
                       elem(&in[1], (size_t)(k->tb ? j * kk + p : p * k->v + j));
            z[r * k->v + j] = acc;
        }
    int64_t s1 = k->shift ? k->hd[1] - 1 : 0;
    size_t n_pos = k->shift ? (size_t)(k->hd[0] * s1) : (size_t)rows;
    size_t *base = tcalloc(n_pos * sizeof(size_t) + 8);
    int64_t *lab = tcalloc(n_pos * sizeof(int64_t) + 8);
    for (size_t p = 0; p < n_pos; p++) {
        size_t row = k->shift ? p / (size_t)s1 * (size_t)(s1 + 1) + p % (size_t)s1 : p;
        base[p] = row * (size_t)k->v;
        lab[p] = (int64_t)elem(&in[2], k->shift ? row + 1 : row);
    }
    struct ce_ref r = {n_pos, (size_t)k->v, z, base, 1, lab, NULL, k->ii != NULL,
                       k->ii ? *k->ii : 0};
    double *per = tcalloc(n_pos * sizeof(double) + 8);
    double total = ref_ce(&r, k->red, per, NULL);
    bool none = strcmp(k->red, "none") == 0;
    struct gf_tview y = none ? (k->shift ? tv(k->dt, NULL, 1, (int64_t[]){(int64_t)n_pos})
                                         : tv(k->dt, NULL, k->hr - 1, k->hd))
                             : tv(k->dt, NULL, 0, NULL);
    assert_ok(run_threads(n, in, 4, &y, 1, threads));
    double rt = k->dt == GF_FLOAT ? (none ? 2e-5 : 1e-4) : rtol_of(k->dt) * 2;
    if (none)
        expect_close(&y, per, n_pos, rt, 1e-5);
    else
        expect_close(&y, &total, 1, rt, 1e-5);
}

static void test_linear_cross_entropy(void **state)
{
    (void)state;
    static const char *const reds[] = {"mean", "sum", "none"};
    static const int64_t ii = -100, chunks[] = {0, 1, 4, 7, 100};
    for (size_t c = 0; c < 5; c++)
        for (size_t r = 0; r < 3; r++)
            for (int opt = 0; opt < 8; opt++) {
                struct lce_case k = {GF_FLOAT, 2, {7, 5}, 11, opt & 1, 0, opt & 2, reds[r],
                                     opt & 4 ? &ii : NULL, chunks[c]};
                check_lce(&k, c == 3 ? 7 : 2);
            }
    /* rank 3 H, 4097 classes, chunks not dividing the rows */
    struct lce_case k1 = {GF_FLOAT, 3, {3, 11, 17}, 4097, 0, 0, true, "mean", &ii, 5};
    check_lce(&k1, 2);
    k1.tb = 1, k1.chunk = 0;
    check_lce(&k1, 2);
    /* shift = 1: chunks across batch boundaries */
    for (size_t c = 0; c < 5; c++)
        for (size_t r = 0; r < 3; r++) {
            struct lce_case k = {GF_FLOAT, 3, {3, 5, 6}, 13, (int)(c & 1), 1, c & 2, reds[r],
                                 c & 1 ? &ii : NULL, chunks[c]};
            check_lce(&k, 2);
        }
    for (size_t t = 1; t < 4; t++) {
        struct lce_case k = {float_types[t], 2, {9, 8}, 33, 1, 0, true, "sum", &ii, 4};
        check_lce(&k, 2);
        struct lce_case k2 = {float_types[t], 3, {2, 5, 8}, 33, 0, 1, false, "none", NULL, 3};
        check_lce(&k2, 2);
    }
}

/* Chunks of 1024 rows and more: the logits of a row come in blocks of
 * columns, folded one after the other. */
static void test_lce_blocks(void **state)
{
    (void)state;
    static const int64_t ii = -100;
    struct lce_case k2 = {GF_FLOAT, 2, {1100, 6}, 4097, 0, 0, true, "none", &ii, 1024};
    check_lce(&k2, 2);
    k2.tb = 1, k2.red = "mean";
    check_lce(&k2, 2);
    struct lce_case k3 = {GF_FLOAT, 3, {2, 600, 5}, 2500, 1, 1, false, "sum", NULL, 2000};
    check_lce(&k3, 2);
    struct lce_case k4 = {GF_FLOAT16, 2, {1030, 4}, 1500, 1, 0, true, "mean", NULL, 1024};
    check_lce(&k4, 2);
    /* a block of logits that are all -inf (from Bias) adds nothing */
    struct gf_node *nb = node("LinearCrossEntropy", 4, 1);
    set_str(nb, "reduction", "none");
    set_int(nb, "chunk_rows", 1024); /* blocks of 1024 columns: the first all -inf */
    struct gf_tview bi[4] = {RND(GF_FLOAT, -1, 1, 1024, 2), RND(GF_FLOAT, -1, 1, 2, 1500),
                             RND(GF_INT64, 1024, 1500, 1024), RND(GF_FLOAT, -1, 1, 1500)};
    for (size_t j = 0; j < 1024; j++)
        put(&bi[3], j, -INFINITY);
    struct gf_tview yl = TV(GF_FLOAT, NULL, 1024);
    assert_ok(run(nb, bi, 4, &yl, 1));
    double *wl = tcalloc(1024 * sizeof(double)), *z = tcalloc(1500 * sizeof(double));
    for (size_t r = 0; r < 1024; r++) {
        double m = -INFINITY, s = 0;
        for (size_t j = 0; j < 1500; j++) {
            z[j] = elem(&bi[3], j) + elem(&bi[0], 2 * r) * elem(&bi[1], j) +
                   elem(&bi[0], 2 * r + 1) * elem(&bi[1], 1500 + j);
            m = fmax(m, z[j]);
        }
        for (size_t j = 0; j < 1500; j++)
            s += exp(z[j] - m);
        wl[r] = -(z[(size_t)elem(&bi[2], r)] - m - log(s));
    }
    expect_close(&yl, wl, 1024, 1e-5, 1e-5);
    /* every label ignored: mean 0/0, the others 0 */
    struct gf_node *n = node("LinearCrossEntropy", 3, 1);
    set_int(n, "ignore_index", 3);
    struct gf_tview in[3] = {RND(GF_FLOAT, -1, 1, 2, 4), RND(GF_FLOAT, -1, 1, 4, 5),
                             TV(GF_INT64, DIMS(3, 3), 2)};
    struct gf_tview y = tv(GF_FLOAT, NULL, 0, NULL);
    assert_ok(run(n, in, 3, &y, 1));
    assert_true(isnan(elem(&y, 0)));
    set_str(n, "reduction", "sum");
    assert_ok(run(n, in, 3, &y, 1));
    assert_true(elem(&y, 0) == 0);
}

static void test_sce_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("SoftmaxCrossEntropy", 3, 2);
    struct gf_tview in[3] = {RND(GF_FLOAT, -1, 1, 3, 5), TV(GF_INT64, DIMS(0, 5, 1), 3), NONE};
    struct gf_tview out[2] = {tv(GF_FLOAT, NULL, 0, NULL), NONE};
    assert_invalid(run(n, in, 3, out, 2), "label T (input 1) element 1 is 5: outside [0, 5)");
    set_int(n, "ignore_index", -1);
    in[1] = TV(GF_INT64, DIMS(0, -2, 1), 3);
    assert_invalid(run(n, in, 3, out, 2),
                   "element 1 is -2: outside [0, 5) and not ignore_index -1");
    in[1] = TV(GF_INT64, DIMS(0, -1, 1, 2), 4);
    assert_invalid(run(n, in, 3, out, 2), "label T (input 1) has shape [4], expected [3]");
    in[1] = TV(GF_FLOAT, NULL, 3);
    assert_invalid(run(n, in, 3, out, 2), "label T (input 1) is float, expected int32 or int64");
    in[1] = TV(GF_INT32, ((const int32_t[]){0, -1, 1}), 3);
    in[2] = RND(GF_FLOAT, 0, 1, 4);
    assert_invalid(run(n, in, 3, out, 2), "class weights Wc (input 2) [4] must be [5]");
    in[2] = NONE;
    out[1] = TV(GF_FLOAT, NULL, 3, 4);
    assert_invalid(run(n, in, 3, out, 2), "output 1 has shape [3,4], expected [3,5]");
    out[1] = NONE;
    set_str(n, "reduction", "avg");
    assert_invalid(run(n, in, 3, out, 2), "reduction 'avg' is not one of none, sum, mean");
    set_str(n, "reduction", "none");
    assert_invalid(run(n, in, 3, out, 2), "output 0 has shape [], expected [3]");
    set_int(n, "shift", 2);
    assert_invalid(run(n, in, 3, out, 2), "shift 2 must be 0 or 1");
    set_int(n, "shift", 1);
    assert_invalid(run(n, in, 3, out, 2), "with shift=1 the logits L must be [B, S, C]");
    /* shift = 1 reads T[:, 1:]: a bad T[:, 0] is never used */
    set_str(n, "reduction", "sum");
    in[0] = RND(GF_FLOAT, -1, 1, 1, 3, 5);
    in[1] = TV(GF_INT64, DIMS(99, 1, 2), 1, 3);
    assert_ok(run(n, in, 3, out, 2));
    in[1] = TV(GF_INT64, DIMS(1, 99, 2), 1, 3);
    assert_invalid(run(n, in, 3, out, 2), "element 1 is 99: outside [0, 5)");
}

static void test_lce_jsd_errors(void **state)
{
    (void)state;
    struct gf_node *n = node("LinearCrossEntropy", 4, 1);
    struct gf_tview li[4] = {RND(GF_FLOAT, -1, 1, 3, 4), RND(GF_FLOAT, -1, 1, 4, 6),
                             TV(GF_INT64, DIMS(0, 6, 1), 3), NONE};
    struct gf_tview y = tv(GF_FLOAT, NULL, 0, NULL);
    assert_invalid(run(n, li, 4, &y, 1), "label T (input 2) element 1 is 6: outside [0, 6)");
    li[2] = TV(GF_INT64, DIMS(0, 5, 1), 3);
    li[1] = RND(GF_FLOAT, -1, 1, 5, 6);
    assert_invalid(run(n, li, 4, &y, 1), "W [5,6] does not have K = 4 rows");
    li[1] = RND(GF_FLOAT, -1, 1, 4, 6);
    li[3] = RND(GF_FLOAT, -1, 1, 5);
    assert_invalid(run(n, li, 4, &y, 1), "Bias (input 3) [5] must be [6]");
    li[3] = NONE;
    set_int(n, "chunk_rows", -3);
    assert_invalid(run(n, li, 4, &y, 1), "chunk_rows -3 is negative");

    n = node("JSD", 3, 1);
    struct gf_tview ji[3] = {RND(GF_FLOAT, -3, 0, 2, 5), RND(GF_FLOAT, -3, 0, 2, 4), NONE};
    assert_invalid(run(n, ji, 3, &y, 1), "Y [2,4] must have X's shape [2,5]");
    ji[1] = RND(GF_FLOAT, -3, 0, 2, 5);
    set_float(n, "beta", 1.5f);
    assert_invalid(run(n, ji, 3, &y, 1), "beta 1.5 is outside [0, 1]");
    set_float(n, "beta", 0.5f);
    ji[2] = TV(GF_INT64, DIMS(0, 1, 2), 3);
    assert_invalid(run(n, ji, 3, &y, 1), "label T (input 2) has shape [3], expected [2]");
}

/* ==== JSD ============================================================================= */

static void check_jsd(enum gf_dtype dt, int64_t rows, int64_t v, float beta, bool with_t,
                      int threads)
{
    struct gf_node *n = node("JSD", 3, 1);
    set_float(n, "beta", beta);
    set_int(n, "ignore_index", -7);
    struct gf_tview in[3] = {rnd(dt, 2, DIMS(rows, v), -3, 3), rnd(dt, 2, DIMS(rows, v), -3, 3),
                             with_t ? labels(GF_INT32, 1, &rows, 5, &(int64_t){-7}) : NONE};
    for (int i = 0; i < 2; i++) { /* rows of log-probabilities, stored in dt */
        double *x = values(&in[i]);
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t j = 0; j < v; j++)
                s += exp(x[r * v + j]);
            for (int64_t j = 0; j < v; j++)
                put(&in[i], (size_t)(r * v + j), x[r * v + j] - log(s));
        }
    }
    struct gf_tview y = tv(dt, NULL, 0, NULL);
    assert_ok(run_threads(n, in, 3, &y, 1, threads));
    double total = 0, count = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (with_t && elem(&in[2], (size_t)r) == -7)
            continue;
        double s = 0;
        for (int64_t j = 0; j < v; j++) {
            double lq = elem(&in[0], (size_t)(r * v + j)), lp = elem(&in[1], (size_t)(r * v + j));
            double p = exp(lp), q = exp(lq), lm = log(beta * p + (1 - beta) * q);
            if (beta == 0)
                s += p * (lp - lq);
            else if (beta == 1)
                s += q * (lq - lp);
            else
                s += beta * p * (lp - lm) + (1 - beta) * q * (lq - lm);
        }
        total += s;
        count += 1;
    }
    double want = total / count;
    expect_close(&y, &want, 1, dt == GF_FLOAT ? 1e-4 : rtol_of(dt) * 4, 1e-6);
}

static void test_jsd(void **state)
{
    (void)state;
    static const float betas[] = {0, 1, 0.5f, 0.3f};
    static const int64_t shapes[][2] = {{1, 1}, {7, 33}, {5, 4097}, {64, 7}};
    for (size_t s = 0; s < 4; s++)
        for (size_t b = 0; b < 4; b++)
            for (int t = 0; t < 2; t++)
                check_jsd(GF_FLOAT, shapes[s][0], shapes[s][1], betas[b], t, s == 3 ? 7 : 2);
    for (size_t t = 1; t < 4; t++)
        check_jsd(float_types[t], 6, 33, 0.5f, true, 2);
    /* a zero probability (log -inf) contributes nothing; every row ignored: 0/0 */
    struct gf_node *n = node("JSD", 3, 1);
    float lq[4] = {-INFINITY, logf(0.5f), logf(0.25f), logf(0.25f)};
    float lp[4] = {logf(0.5f), -INFINITY, logf(0.25f), logf(0.25f)};
    struct gf_tview in[3] = {tv(GF_FLOAT, lq, 1, DIMS(4)), tv(GF_FLOAT, lp, 1, DIMS(4)), NONE};
    struct gf_tview y = tv(GF_FLOAT, NULL, 0, NULL);
    /* beta 0: sum P log(P/Q) is infinite (P > 0 where Q = 0); beta 1 too;
     * 0.5: each side has its zero where the other is 0.5 */
    static const float zbeta[] = {0, 1, 0.5f};
    double zwant[] = {INFINITY, INFINITY, 0.5 * 0.5 * log(0.5 / 0.25) * 2};
    for (int i = 0; i < 3; i++) {
        set_float(n, "beta", zbeta[i]);
        assert_ok(run(n, in, 2, &y, 1));
        expect_close(&y, &zwant[i], 1, 1e-6, 0);
    }
    /* KL with a zero on the other side only: 0 log 0 = 0, not NaN */
    float lq2[2] = {logf(0.5f), logf(0.5f)}, lp2[2] = {0, -INFINITY};
    in[0] = tv(GF_FLOAT, lq2, 1, DIMS(2));
    in[1] = tv(GF_FLOAT, lp2, 1, DIMS(2));
    set_float(n, "beta", 0);
    assert_ok(run(n, in, 2, &y, 1));
    double want = log(2.0);
    expect_close(&y, &want, 1, 1e-6, 0);
    set_float(n, "beta", 1);
    assert_ok(run(n, in, 2, &y, 1));
    want = INFINITY;
    expect_close(&y, &want, 1, 1e-6, 0);
    in[0] = tv(GF_FLOAT, lp2, 1, DIMS(2));
    in[1] = tv(GF_FLOAT, lq2, 1, DIMS(2));
    assert_ok(run(n, in, 2, &y, 1));
    want = log(2.0);
    expect_close(&y, &want, 1, 1e-6, 0);
    in[0] = TV(GF_FLOAT, NULL, 2, 4);
    in[1] = TV(GF_FLOAT, NULL, 2, 4);
    in[2] = TV(GF_INT64, DIMS(-100, -100), 2);
    assert_ok(run(n, in, 3, &y, 1));
    assert_true(isnan(elem(&y, 0)));
}

/* ==== shape inference ======================================================================= */

/* A graph input "name" of dtype dt and shape `spec`: comma-separated dims,
 * a name for a symbolic one ("B,S,32"). */
static struct gf_value *sym_input(struct gf_graph *g, const char *name, enum gf_dtype dt,
                                  const char *spec)
{
    struct gf_value *v = gf_graph_new_value(g, name, NULL);
    struct gf_dim d[8];
    int rank = 0;
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *tok = strtok(buf, ","); tok && rank < 8; tok = strtok(NULL, ","), rank++)
        d[rank] = isdigit((unsigned char)tok[0])
                      ? (struct gf_dim){atoll(tok), NULL, NULL}
                      : (struct gf_dim){-1, gf_model_strdup(g->model, tok), NULL};
    gf_value_set_tensor_type(v, dt, rank, d);
    assert_int_equal(gf_graph_add_input(g, v), GF_OK);
    return v;
}

/* The inferred shape of output o of the last node, as "[2,S,?]". */
static const char *shape_of_out(struct gf_graph *g, size_t o, char *buf)
{
    assert_int_equal(gf_graph_infer_shapes(g), GF_OK);
    return gf_type_format(&g->last->outputs[o]->type, buf, 64);
}

/* One graphfuse node over named inputs ("" omitted), with n_out outputs. */
static struct gf_node *infer_node(const char *op, size_t n_in, struct gf_value **in, size_t n_out)
{
    struct gf_value *outs[4];
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(model->graph, NULL, "y");
    struct gf_node *n = gf_graph_add_node(model->graph, op, "graphfuse", "n0", n_in, in, n_out,
                                          outs);
    assert_non_null(n);
    return n;
}

static void new_model(void)
{
    gf_model_free(model);
    model = gf_model_new(8, "s");
    assert_int_equal(gf_model_set_opset(model, "graphfuse", 1), GF_OK);
}

static void test_shape_losses(void **state)
{
    (void)state;
    char buf[64];
    struct gf_graph *g;
    /* SoftmaxCrossEntropy, shift 1: [B*(S-1)] and LogP [B*(S-1), C] */
    new_model(), g = model->graph;
    struct gf_value *in[4] = {sym_input(g, "L", GF_FLOAT, "4,9,32"),
                              sym_input(g, "T", GF_INT64, "4,9")};
    struct gf_node *n = infer_node("SoftmaxCrossEntropy", 2, in, 2);
    set_int(n, "shift", 1);
    set_str(n, "reduction", "none");
    assert_string_equal(shape_of_out(g, 0, buf), "[32]");
    assert_string_equal(shape_of_out(g, 1, buf), "[32,32]");
    assert_int_equal(g->last->outputs[1]->type.dtype, GF_FLOAT);
    new_model(), g = model->graph;
    in[0] = sym_input(g, "L", GF_FLOAT16, "B,S,32"), in[1] = sym_input(g, "T", GF_INT64, "B,S");
    n = infer_node("SoftmaxCrossEntropy", 2, in, 2);
    set_int(n, "shift", 1);
    assert_string_equal(shape_of_out(g, 0, buf), "[]");
    assert_string_equal(shape_of_out(g, 1, buf), "[?,32]");
    assert_int_equal(g->last->outputs[0]->type.dtype, GF_FLOAT16);
    /* shift 0 is SoftmaxCrossEntropyLoss's */
    new_model(), g = model->graph;
    in[0] = sym_input(g, "L", GF_FLOAT, "N,10,3"), in[1] = sym_input(g, "T", GF_INT64, "N,3");
    n = infer_node("SoftmaxCrossEntropy", 2, in, 2);
    set_str(n, "reduction", "none");
    assert_string_equal(shape_of_out(g, 0, buf), "[N,3]");
    assert_string_equal(shape_of_out(g, 1, buf), "[N,10,3]");
    /* LinearCrossEntropy */
    static const char *const lce_want[] = {"[2,S]", "[?]", NULL};
    for (int v = 0; v < 3; v++) {
        new_model(), g = model->graph;
        in[0] = sym_input(g, "H", GF_FLOAT, "2,S,64");
        in[1] = sym_input(g, "W", GF_FLOAT, "100,64");
        in[2] = sym_input(g, "T", GF_INT64, "2,S");
        n = infer_node("LinearCrossEntropy", 3, in, 1);
        set_int(n, "transB", v < 2);
        set_int(n, "shift", v == 1);
        set_str(n, "reduction", "none");
        if (lce_want[v]) {
            assert_string_equal(shape_of_out(g, 0, buf), lce_want[v]);
        } else {
            assert_int_equal(gf_graph_infer_shapes(g), GF_ERR_INVALID);
            assert_non_null(strstr(gf_last_error(), "does not have K = 64 rows"));
        }
    }
}

static void test_shape_others(void **state)
{
    (void)state;
    char buf[64];
    struct gf_graph *g;
    struct gf_value *in[4];
    struct gf_node *n;
    /* MatMulEpilogue with transposes and batch broadcasting */
    new_model(), g = model->graph;
    in[0] = sym_input(g, "A", GF_FLOAT, "B,1,64,7"), in[1] = sym_input(g, "W", GF_FLOAT, "3,5,64");
    in[2] = sym_input(g, "Bias", GF_FLOAT, "5"), in[3] = sym_input(g, "Res", GF_FLOAT, "7,5");
    n = infer_node("MatMulEpilogue", 4, in, 1);
    set_int(n, "transA", 1);
    set_int(n, "transB", 1);
    assert_string_equal(shape_of_out(g, 0, buf), "[B,3,7,5]");
    /* the normalizations, activations, RoPE, JSD */
    static const char *const like_x[] = {"RMSNorm", "LayerNorm", "SiLU", "Gelu"};
    for (size_t i = 0; i < 4; i++) {
        new_model(), g = model->graph;
        in[0] = sym_input(g, "X", GF_BFLOAT16, "B,S,48");
        infer_node(like_x[i], 1, in, 1);
        assert_string_equal(shape_of_out(g, 0, buf), "[B,S,48]");
        assert_int_equal(g->last->outputs[0]->type.dtype, GF_BFLOAT16);
    }
    new_model(), g = model->graph; /* LayerNorm's Mean and InvStdDev: fp32 for bf16 X */
    in[0] = sym_input(g, "X", GF_BFLOAT16, "B,S,48");
    n = infer_node("LayerNorm", 1, in, 3);
    set_int(n, "axis", -2);
    assert_string_equal(shape_of_out(g, 2, buf), "[B,1,1]");
    assert_int_equal(g->last->outputs[2]->type.dtype, GF_FLOAT);
    new_model(), g = model->graph;
    in[0] = sym_input(g, "X", GF_FLOAT, "B,S,48"), in[1] = sym_input(g, "R", GF_FLOAT, "2,S,48");
    infer_node("AddRMSNorm", 2, in, 2);
    assert_string_equal(shape_of_out(g, 0, buf), "[2,S,48]");
    assert_string_equal(shape_of_out(g, 1, buf), "[2,S,48]");
    new_model(), g = model->graph;
    in[0] = sym_input(g, "G", GF_FLOAT, "B,1,48"), in[1] = sym_input(g, "U", GF_FLOAT, "7,48");
    infer_node("SwiGLU", 2, in, 1);
    assert_string_equal(shape_of_out(g, 0, buf), "[B,7,48]");
    new_model(), g = model->graph;
    in[0] = sym_input(g, "X", GF_FLOAT, "B,H,S,63"), in[1] = sym_input(g, "C", GF_FLOAT, "S,63");
    in[2] = in[1];
    infer_node("RoPE", 3, in, 1);
    assert_int_equal(gf_graph_infer_shapes(g), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "needs a last axis of even length"));
    new_model(), g = model->graph;
    in[0] = sym_input(g, "X", GF_FLOAT, "N,32000"), in[1] = sym_input(g, "Y", GF_FLOAT, "N,32000");
    infer_node("JSD", 2, in, 1);
    assert_string_equal(shape_of_out(g, 0, buf), "[]");
}

/* ==== fused against unfused, through the executor ===================================== */

/* Runs both models on the same random inputs (floats in [lo, hi), int64
 * labels in [0, classes) with every fifth one `ignore` when given) and
 * compares every output: |f - u| <= atol + rtol |u|. */
static void check_equivalent(struct gf_model *unfused, struct gf_model *fused, double lo,
                             double hi, int64_t classes, const int64_t *ignore, double rtol,
                             double atol)
{
    assert_non_null(unfused);
    assert_non_null(fused);
    struct gf_session *su, *sf;
    struct gf_exec_opts o = {.n_threads = 2};
    assert_int_equal(gf_session_new(unfused, &o, &su), GF_OK);
    assert_int_equal(gf_session_new(fused, &o, &sf), GF_OK);
    size_t n = gf_session_input_count(sf);
    assert_int_equal(n, gf_session_input_count(su));
    struct gf_tensor *in[8];
    for (size_t i = 0; i < n; i++) {
        const struct gf_type *t = &gf_session_input(sf, i)->type;
        int64_t dims[8];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->dims[d].value;
        bool lab = t->dtype == GF_INT64;
        in[i] = fg_random(fused, t->dtype, t->rank, dims, lab ? 0 : lo, lab ? (double)classes : hi,
                          &rng);
        assert_non_null(in[i]);
        for (size_t e = 0; lab && ignore && e < in[i]->nelem; e += 5)
            ((int64_t *)in[i]->data)[e] = *ignore;
        if (!lab && strcmp(fused->graph->name, "jsd") == 0) /* log-probabilities */
            fg_log_softmax_rows(in[i]);
    }
    struct gf_tensor **ou, **of;
    size_t nu, nf;
    if (gf_session_run(su, n, in, &ou, &nu) != GF_OK ||
        gf_session_run(sf, n, in, &of, &nf) != GF_OK) {
        print_error("%s: %s\n", fused->graph->name, gf_last_error());
        fail();
    }
    assert_int_equal(nu, nf);
    for (size_t i = 0; i < nf; i++) {
        double worst;
        if (!gf_tensor_allclose(of[i], ou[i], rtol, atol, &worst)) {
            print_error("%s output %zu: fused and unfused differ by %g\n", fused->graph->name,
                        i, worst);
            fail();
        }
    }
    struct gf_session_stats st;
    gf_session_get_stats(sf, &st);
    assert_int_equal(st.n_nodes, 1);
    gf_session_free(su);
    gf_session_free(sf);
    gf_model_free(unfused);
    gf_model_free(fused);
}

static void test_equivalence(void **state)
{
    (void)state;
    static const int64_t d2[] = {37, 4097}, d3[] = {2, 33, 64};
    for (int i = 0; i < 2; i++) {
        int rank = i ? 3 : 2;
        const int64_t *d = i ? d3 : d2;
        check_equivalent(fg_rmsnorm(false, rank, d, 1e-6f, true),
                         fg_rmsnorm(true, rank, d, 1e-6f, true), -2, 2, 0, NULL, 1e-5, 1e-6);
        check_equivalent(fg_rmsnorm(false, rank, d, 1e-5f, false),
                         fg_rmsnorm(true, rank, d, 1e-5f, false), -2, 2, 0, NULL, 1e-5, 1e-6);
        check_equivalent(fg_add_rmsnorm(false, rank, d, 1e-6f),
                         fg_add_rmsnorm(true, rank, d, 1e-6f), -2, 2, 0, NULL, 1e-5, 1e-6);
        check_equivalent(fg_layernorm(false, rank, d, 1e-5f), fg_layernorm(true, rank, d, 1e-5f),
                         -2, 3, 0, NULL, 1e-5, 1e-5);
        check_equivalent(fg_add_layernorm(false, rank, d, 1e-5f),
                         fg_add_layernorm(true, rank, d, 1e-5f), -2, 3, 0, NULL, 1e-5, 1e-5);
        check_equivalent(fg_swiglu(false, rank, d), fg_swiglu(true, rank, d), -6, 6, 0, NULL,
                         1e-5, 1e-6);
        /* the unfused 1 + erf(x/sqrt 2) and 1 + tanh(u) cancel for x << 0
         * (about 1e-7 absolute); the fused forms do not */
        check_equivalent(fg_geglu(false, rank, d, false), fg_geglu(true, rank, d, false), -5, 5,
                         0, NULL, 1e-5, 1e-6);
        check_equivalent(fg_geglu(false, rank, d, true), fg_geglu(true, rank, d, true), -5, 5, 0,
                         NULL, 1e-5, 1e-6);
        check_equivalent(fg_gelu(false, rank, d, false), fg_gelu(true, rank, d, false), -5, 5, 0,
                         NULL, 1e-5, 1e-6);
        check_equivalent(fg_silu(false, rank, d), fg_silu(true, rank, d), -8, 8, 0, NULL, 1e-5,
                         1e-6);
    }
    check_equivalent(fg_rope(false, 2, 4, 33, 64), fg_rope(true, 2, 4, 33, 64), -2, 2, 0, NULL,
                     1e-5, 1e-6);
    check_equivalent(fg_rope(false, 1, 3, 7, 2), fg_rope(true, 1, 3, 7, 2), -2, 2, 0, NULL,
                     1e-5, 1e-6);
    check_equivalent(fg_matmul_epilogue(false, 65, 33, 129, "gelu"),
                     fg_matmul_epilogue(true, 65, 33, 129, "gelu"), -1, 1, 0, NULL, 1e-5, 1e-6);
    check_equivalent(fg_matmul_epilogue(false, 7, 300, 5, "relu"),
                     fg_matmul_epilogue(true, 7, 300, 5, "relu"), -1, 1, 0, NULL, 1e-5, 1e-6);
    check_equivalent(fg_matmul_epilogue(false, 7, 3, 5, ""),
                     fg_matmul_epilogue(true, 7, 3, 5, ""), -1, 1, 0, NULL, 1e-5, 1e-6);
    static const int64_t ii = -100;
    check_equivalent(fg_sce(false, 37, 4097, NULL), fg_sce(true, 37, 4097, NULL), -4, 4, 4097,
                     NULL, 1e-5, 0);
    check_equivalent(fg_sce(false, 37, 33, &ii), fg_sce(true, 37, 33, &ii), -4, 4, 33, &ii, 1e-5,
                     0);
    check_equivalent(fg_sce_shift(false, 3, 17, 4097, &ii), fg_sce_shift(true, 3, 17, 4097, &ii),
                     -4, 4, 4097, &ii, 1e-5, 0);
    check_equivalent(fg_sce_shift(false, 2, 5, 7, NULL), fg_sce_shift(true, 2, 5, 7, NULL), -4, 4,
                     7, NULL, 1e-5, 0);
    check_equivalent(fg_lce(false, 37, 64, 4097, &ii), fg_lce(true, 37, 64, 4097, &ii), -1, 1,
                     4097, &ii, 1e-5, 0);
    check_equivalent(fg_jsd(false, 13, 4097, 0.5f, true, -100),
                     fg_jsd(true, 13, 4097, 0.5f, true, -100), -3, 3, 2, NULL, 1e-4, 1e-7);
    check_equivalent(fg_jsd(false, 13, 33, 0.0f, false, -100),
                     fg_jsd(true, 13, 33, 0.0f, false, -100), -3, 3, 2, NULL, 1e-4, 1e-7);
    check_equivalent(fg_jsd(false, 13, 33, 1.0f, true, 1), fg_jsd(true, 13, 33, 1.0f, true, 1),
                     -3, 3, 2, NULL, 1e-4, 1e-7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_rmsnorm, teardown),
        cmocka_unit_test_teardown(test_add_rmsnorm, teardown),
        cmocka_unit_test_teardown(test_layernorm, teardown),
        cmocka_unit_test_teardown(test_add_layernorm, teardown),
        cmocka_unit_test_teardown(test_norm_errors, teardown),
        cmocka_unit_test_teardown(test_gated, teardown),
        cmocka_unit_test_teardown(test_unary_act, teardown),
        cmocka_unit_test_teardown(test_act_errors, teardown),
        cmocka_unit_test_teardown(test_rope, teardown),
        cmocka_unit_test_teardown(test_rope_errors, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue_errors, teardown),
        cmocka_unit_test_teardown(test_softmax_cross_entropy, teardown),
        cmocka_unit_test_teardown(test_linear_cross_entropy, teardown),
        cmocka_unit_test_teardown(test_lce_blocks, teardown),
        cmocka_unit_test_teardown(test_jsd, teardown),
        cmocka_unit_test_teardown(test_sce_errors, teardown),
        cmocka_unit_test_teardown(test_lce_jsd_errors, teardown),
        cmocka_unit_test_teardown(test_shape_losses, teardown),
        cmocka_unit_test_teardown(test_shape_others, teardown),
        cmocka_unit_test_teardown(test_equivalence, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
