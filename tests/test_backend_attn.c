/* The fused attention kernels of every backend (tests/backend_util.h: each
 * available one besides the CPU) against the CPU kernels of the same nodes
 * on the same inputs:
 * Attention and AttentionGrad on Sq, Sk of 1, 7, 33, 100, head dims 16, 17,
 * 64 and up to 256 (tiles shrunk to fit local memory), Dv != D, batch dims
 * of rank 1 and 2, every Mask broadcast (full, over heads, [Sq, Sk], over
 * rows, over keys, a causal -inf mask), transB 0 and 1, scale given and
 * default, every subset of AttentionGrad's outputs, the forward's Stats
 * output and AttentionGrad's Stats input, a sweep of the knob
 * settings on two shapes of each op (every pair of values of two knobs;
 * every setting with GRAPHFUSE_TEST_ALL_CONFIGS=1, as on the GPU machine),
 * fp16 and bf16 storage (against the CPU kernel on the same values
 * widened to float; masks, causal, head dims 17 to 128, odd lengths, Stats
 * out of the forward and into the backward), results that do not depend
 * on timing,
 * and the error paths.  Skips without a backend besides the CPU.
 * Tolerances: 1e-5 relative plus 1e-5 absolute (the softmax sums and the
 * dK / dV sums over query rows are summed in another order than the CPU's);
 * fp16 / bf16 outputs allow their own rounding on top.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gf_half.h"
#include "backend_util.h"
#include "backend_fixture.h"

#define RTOL 1e-5
#define ATOL 1e-5

/* ---- fixtures: opencl_fixture.h ---------------------------------------------- */

static unsigned seed = 1;

/* Random fp32 values of magnitude [0, amp) and either sign. */
static struct gf_tview frand(float amp, int rank, const int64_t *dims)
{
    struct gf_tview t = bt_view(GF_FLOAT, NULL, rank, dims);
    float *p = keep(malloc(t.nelem * sizeof(float) + 4));
    bt_fill(p, t.nelem, -amp, amp, seed++);
    t.data = p;
    t.host = p;
    return t;
}

static struct gf_tview fout(int rank, const int64_t *dims)
{
    return bt_view(GF_FLOAT, NULL, rank, dims);
}

#define NONE ((struct gf_tview){0})
#define ALL_HOST 0xffu

/* ---- cases ------------------------------------------------------------------------ */

/* Mask forms: absent; the scores' shape; [b0, 1, Sq, Sk] (over heads;
 * [1, Sq, Sk] with one batch dim); [Sq, Sk]; [Sq, 1] (over keys); [1, Sk]
 * (over rows); [Sq, Sk] causal (-inf above the diagonal, 0 elsewhere). */
enum mask { M_NONE, M_FULL, M_HEADS, M_2D, M_ROWS, M_KEYS, M_CAUSAL };

struct acase {
    int brank;          /* 1: [b1, ...], 2: [b0, b1, ...] */
    int64_t b0, b1, sq, sk, d, dv;
    int tb;
    enum mask mask;
    float scale;        /* 0: the default */
};

/* A case's tensors: Q, K, V, Mask (NONE when absent); O's dims, Stats'. */
struct tensors {
    struct gf_tview q, k, v, m;
    int rank;
    int64_t od[GF_MAX_RANK], sd[GF_MAX_RANK];
};

/* dims of [batch..., x, y] */
static int dims_of(const struct acase *c, int64_t x, int64_t y, int64_t *dims)
{
    int r = 0;
    if (c->brank == 2)
        dims[r++] = c->b0;
    dims[r++] = c->b1;
    dims[r++] = x;
    dims[r++] = y;
    return r;
}

static struct gf_tview make_mask(const struct acase *c)
{
    int64_t dims[GF_MAX_RANK];
    int r;
    switch (c->mask) {
    case M_NONE: return NONE;
    case M_FULL: r = dims_of(c, c->sq, c->sk, dims); break;
    case M_HEADS:
        r = dims_of(c, c->sq, c->sk, dims);
        dims[r - 3] = 1;
        break;
    case M_ROWS: r = 2, dims[0] = c->sq, dims[1] = 1; break;
    case M_KEYS: r = 2, dims[0] = 1, dims[1] = c->sk; break;
    default: r = 2, dims[0] = c->sq, dims[1] = c->sk; break;
    }
    struct gf_tview m = frand(2, r, dims);
    if (c->mask == M_CAUSAL)
        for (int64_t i = 0; i < c->sq; i++)
            for (int64_t j = 0; j < c->sk; j++)
                ((float *)m.data)[i * c->sk + j] = j > i ? -INFINITY : 0.0f;
    return m;
}

static struct tensors make_tensors(const struct acase *c)
{
    struct tensors t;
    int64_t dims[GF_MAX_RANK];
    int r = dims_of(c, c->sq, c->d, dims);
    t.q = frand(1, r, dims);
    r = c->tb ? dims_of(c, c->sk, c->d, dims) : dims_of(c, c->d, c->sk, dims);
    t.k = frand(1, r, dims);
    r = dims_of(c, c->sk, c->dv, dims);
    t.v = frand(1, r, dims);
    t.m = make_mask(c);
    t.rank = dims_of(c, c->sq, c->dv, t.od);
    t.sd[0] = 2; /* Stats [2, b..., Sq] */
    memcpy(t.sd + 1, t.od, (size_t)(t.rank - 1) * sizeof(int64_t));
    return t;
}

static void set_attrs(struct gf_node *nd, const struct acase *c)
{
    assert_int_equal(gf_node_set_attr_int(nd, "transB", c->tb), GF_OK);
    if (c->scale != 0)
        assert_int_equal(gf_node_set_attr_float(nd, "scale", c->scale), GF_OK);
}

/* Attention with O, and Stats when n_out is 2. */
static struct gf_node *fwd_node(const struct acase *c, size_t n_out)
{
    struct gf_node *nd = node("Attention", c->mask ? 4 : 3, n_out);
    set_attrs(nd, c);
    return nd;
}

/* The CPU forward's O and Stats (out[0], out[1]) for these tensors (kept
 * until release_bufs). */
static void cpu_forward(const struct acase *c, const struct tensors *t, struct gf_tview *out)
{
    struct gf_node *nd = fwd_node(c, 2);
    struct gf_tview in[4] = {t->q, t->k, t->v, t->m};
    out[0] = fout(t->rank, t->od);
    out[1] = fout(t->rank, t->sd);
    for (int k = 0; k < 2; k++) {
        out[k].data = keep(calloc(1, gf_tview_bytes(&out[k]) + 8));
        out[k].host = out[k].data;
    }
    assert_int_equal(bt_run_on(gf_backend_get("cpu"), nd, in, c->mask ? 4 : 3, out, 2, NULL),
                     GF_OK);
}

/* Attention on the backend under test against the CPU, with the Stats
 * output when `stats`: with the default config, or a sweep of the configs
 * (bt_compare_configs; returns the size of the space).  Stats are compared
 * where a row sees a key (else they are unspecified: no case hides a whole
 * row, and Sk 0 is test_empty's). */
static int fwd_case(const struct acase *c, bool all_configs, bool stats)
{
    struct tensors t = make_tensors(c);
    size_t n_out = stats ? 2 : 1;
    struct gf_node *nd = fwd_node(c, n_out);
    struct gf_tview in[4] = {t.q, t.k, t.v, t.m};
    struct gf_tview out[2] = {fout(t.rank, t.od), fout(t.rank, t.sd)};
    size_t n_in = c->mask ? 4 : 3;
    int runs = 1;
    if (all_configs)
        runs = bt_compare_configs(nd, in, n_in, ALL_HOST, out, n_out, RTOL, ATOL);
    else
        bt_compare(nd, in, n_in, ALL_HOST, out, n_out, RTOL, ATOL);
    release_bufs();
    return runs;
}

/* The inputs of AttentionGrad: dO, Q, K, V, Mask, O, Stats (O and Stats
 * from the CPU's forward, which needs keys: with none, O is 0 and Stats
 * absent; dO random). */
static void grad_inputs(const struct acase *c, struct gf_tview *in)
{
    struct tensors t = make_tensors(c);
    in[0] = frand(1, t.rank, t.od);
    in[1] = t.q, in[2] = t.k, in[3] = t.v, in[4] = t.m;
    if (c->sk) {
        cpu_forward(c, &t, &in[5]);
    } else {
        in[5] = frand(1, t.rank, t.od);
        memset(in[5].data, 0, gf_tview_bytes(&in[5]));
        in[6] = NONE;
    }
}

/* AttentionGrad on the backend under test against the CPU; `want` bit k:
 * output k (dQ, dK, dV) wanted; the forward's Stats given when `stats` (a
 * backend may read them instead of finding them).  A sweep of the configs
 * when all_configs (returns the size of the space). */
static int grad_case(const struct acase *c, unsigned want, bool all_configs, bool stats)
{
    struct gf_tview in[7], out[3];
    grad_inputs(c, in);
    size_t n_in = stats && in[6].rank ? 7 : 6;
    struct gf_node *nd = node("AttentionGrad", n_in, 3);
    set_attrs(nd, c);
    for (int k = 0; k < 3; k++)
        out[k] = (want >> k) & 1 ? fout(in[1 + k].rank, in[1 + k].dims) : NONE;
    int runs = 1;
    if (all_configs)
        runs = bt_compare_configs(nd, in, n_in, ALL_HOST, out, 3, RTOL, ATOL);
    else
        bt_compare(nd, in, n_in, ALL_HOST, out, 3, RTOL, ATOL);
    release_bufs();
    return runs;
}

/* Sq / Sk pairs: equal and not, 1, 7, 33, 100. */
static const int64_t lens[][2] = {{1, 1}, {7, 7}, {1, 100}, {100, 1}, {7, 33},
                                  {33, 7}, {33, 100}, {100, 100}};
static const int64_t heads[][2] = {{16, 16}, {17, 17}, {64, 64}, {16, 24}, {17, 5}};

/* A spread of cases over lens x heads, with the other parameters cycling
 * so that each value meets several shapes. */
static void each_case(void (*fn)(const struct acase *c, unsigned i))
{
    static const enum mask masks[] = {M_NONE, M_FULL, M_HEADS, M_2D, M_ROWS, M_KEYS, M_CAUSAL};
    static const float scales[] = {0, 0.25f, 0.125f};
    unsigned i = 0;
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++, i++) {
            struct acase c = {.brank = 1 + (int)(i % 2), .b0 = 2, .b1 = 3, .sq = lens[l][0],
                              .sk = lens[l][1], .d = heads[h][0], .dv = heads[h][1],
                              .tb = (int)(i / 2 % 2), .mask = masks[i % 7],
                              .scale = scales[i % 3]};
            if (c.mask == M_CAUSAL && c.sq > c.sk) /* rows past Sk keep key 0: not empty */
                c.mask = M_2D;
            fn(&c, i);
        }
}

static void fwd_each(const struct acase *c, unsigned i)
{
    fwd_case(c, false, i % 2 == 1);
}

static void grad_each(const struct acase *c, unsigned i)
{
    grad_case(c, 7, false, i % 2 == 0);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_forward(void **state)
{
    (void)state;
    need_backend();
    each_case(fwd_each);
    /* every Mask form and both layouts on one odd shape */
    for (int m = M_NONE; m <= M_CAUSAL; m++)
        for (int tb = 0; tb < 2; tb++)
            fwd_case(&(struct acase){2, 2, 3, 33, 40, 17, 24, tb, (enum mask)m, 0.3f}, false,
                     tb == 1);
}

static void test_forward_large_heads(void **state)
{
    (void)state;
    need_backend();
    fwd_case(&(struct acase){1, 1, 2, 33, 70, 128, 128, 1, M_HEADS, 0.1f}, false, true);
    fwd_case(&(struct acase){1, 1, 2, 33, 70, 256, 256, 0, M_2D, 0.0625f}, false, true);
    fwd_case(&(struct acase){1, 1, 1, 9, 17, 200, 256, 1, M_NONE, 0}, false, false);
    fwd_case(&(struct acase){1, 1, 1, 9, 17, 256, 40, 1, M_CAUSAL, 0}, false, false);
}

static void test_forward_configs(void **state)
{
    (void)state;
    need_backend();
    bt_expect_space(fwd_case(&(struct acase){2, 2, 2, 33, 70, 17, 24, 0, M_HEADS, 0.2f}, true, true),
                    "opencl", 5 * 5 * 4);
    bt_expect_space(fwd_case(&(struct acase){1, 1, 2, 20, 9, 96, 64, 1, M_FULL, 0}, true, false),
                    "opencl", 5 * 5 * 4);
}

static void test_grad(void **state)
{
    (void)state;
    need_backend();
    each_case(grad_each);
    for (int m = M_NONE; m <= M_CAUSAL; m++)
        for (int tb = 0; tb < 2; tb++)
            grad_case(&(struct acase){2, 2, 3, 33, 40, 17, 24, tb, (enum mask)m, 0.3f}, 7, false,
                      tb == 0);
}

static void test_grad_subsets(void **state)
{
    (void)state;
    need_backend();
    for (unsigned want = 1; want < 8; want++)
        for (int tb = 0; tb < 2; tb++)
            grad_case(&(struct acase){1, 1, 3, 7, 33, 16, 9, tb, M_KEYS, 0.5f}, want, false,
                      tb == 1);
}

static void test_grad_large_heads(void **state)
{
    (void)state;
    need_backend();
    grad_case(&(struct acase){1, 1, 2, 33, 70, 128, 128, 1, M_HEADS, 0.1f}, 7, false, true);
    grad_case(&(struct acase){1, 1, 1, 20, 37, 256, 256, 0, M_2D, 0.0625f}, 7, false, false);
    grad_case(&(struct acase){1, 1, 1, 9, 17, 200, 64, 1, M_NONE, 0}, 7, false, true);
}

static void test_grad_configs(void **state)
{
    (void)state;
    need_backend();
    bt_expect_space(grad_case(&(struct acase){2, 2, 2, 33, 70, 17, 24, 0, M_HEADS, 0.2f}, 7,
                               true, true), "opencl", 5 * 5 * 4);
    bt_expect_space(grad_case(&(struct acase){1, 1, 2, 20, 9, 96, 64, 1, M_FULL, 0}, 7, true, false),
                    "opencl", 5 * 5 * 4);
}

/* No queries: dK and dV are 0; no keys: O is 0 (a sum over nothing) and so
 * is dQ. */
static void test_empty(void **state)
{
    (void)state;
    need_backend();
    grad_case(&(struct acase){1, 1, 3, 0, 7, 16, 8, 1, M_NONE, 0}, 7, false, true);
    grad_case(&(struct acase){1, 1, 3, 5, 0, 16, 8, 0, M_NONE, 0}, 7, false, true);
    struct acase c = {1, 1, 3, 5, 0, 16, 8, 1, M_NONE, 0};
    struct tensors t = make_tensors(&c);
    struct gf_node *nd = fwd_node(&c, 1);
    struct gf_tview in[3] = {t.q, t.k, t.v}, out[1] = {fout(t.rank, t.od)};
    void *res[1];
    assert_int_equal(bt_run(nd, in, 3, ALL_HOST, out, 1, NULL, res), GF_OK);
    for (size_t i = 0; i < out[0].nelem; i++)
        assert_true(((float *)res[0])[i] == 0.0f);
    free(res[0]);
}

/* The backward twice on the same inputs: bit for bit the same. */
static void test_deterministic(void **state)
{
    (void)state;
    need_backend();
    struct acase c = {2, 2, 4, 100, 100, 32, 32, 1, M_CAUSAL, 0.17f};
    struct gf_tview in[7], out[3];
    grad_inputs(&c, in);
    struct gf_node *nd = node("AttentionGrad", 7, 3);
    set_attrs(nd, &c);
    for (int k = 0; k < 3; k++)
        out[k] = fout(in[1 + k].rank, in[1 + k].dims);
    void *r1[3], *r2[3];
    assert_int_equal(bt_run(nd, in, 7, ALL_HOST, out, 3, NULL, r1), GF_OK);
    assert_int_equal(bt_run(nd, in, 7, ALL_HOST, out, 3, NULL, r2), GF_OK);
    for (int k = 0; k < 3; k++) {
        assert_memory_equal(r1[k], r2[k], gf_tview_bytes(&out[k]));
        free(r1[k]);
        free(r2[k]);
    }
}

/* ---- fp16 / bf16 storage ------------------------------------------------------------ */

/* t rounded to dtype dt: the rounded values as float (the CPU's inputs,
 * t itself) and in dt (the backend's inputs, returned). */
static struct gf_tview narrow(struct gf_tview *t, enum gf_dtype dt)
{
    if (!t->data)
        return NONE;
    struct gf_tview h = *t;
    h.dtype = dt;
    uint16_t *p = keep(malloc(t->nelem * 2 + 2));
    float *f = t->data;
    for (size_t i = 0; i < t->nelem; i++) {
        p[i] = dt == GF_FLOAT16 ? gf_float_to_half(f[i]) : gf_float_to_bf16(f[i]);
        f[i] = dt == GF_FLOAT16 ? gf_half_to_float(p[i]) : gf_bf16_to_float(p[i]);
    }
    h.data = p;
    h.host = p;
    return h;
}

/* Runs node nd on the backend under test with inputs narrowed to dt and on the CPU with
 * the same values as float; outputs compared within `rtol` relative (the
 * rounding of dt) plus ATOL.  With `fstats`, Stats (input 6 of
 * AttentionGrad, output 1 of Attention) stay float. */
static void compare_narrow(const struct gf_node *nd, struct gf_tview *in, size_t n_in,
                           const struct gf_tview *out, size_t n_out, enum gf_dtype dt,
                           double rtol, bool fstats)
{
    struct gf_tview hin[7], hout[3], cout[3];
    for (size_t i = 0; i < n_in; i++)
        hin[i] = fstats && i == 6 ? in[i] : narrow(&in[i], dt);
    for (size_t k = 0; k < n_out; k++) {
        hout[k] = out[k];
        if (out[k].dtype && !(fstats && n_out == 2 && k == 1)) /* Attention's Stats */
            hout[k].dtype = dt;
        cout[k] = out[k];
        cout[k].data = keep(calloc(1, gf_tview_bytes(&out[k]) + 8));
        cout[k].host = cout[k].data;
    }
    assert_int_equal(bt_run_on(gf_backend_get("cpu"), nd, in, n_in, cout, n_out, NULL),
                     GF_OK);
    void *res[3];
    if (bt_run(nd, hin, n_in, ALL_HOST, hout, n_out, NULL, res) != GF_OK)
        fail_msg("%s %s (%s) failed: %s", bt_name(), nd->op_type, gf_dtype_name(dt),
                 gf_last_error());
    for (size_t k = 0; k < n_out; k++) {
        for (size_t i = 0; i < out[k].nelem; i++) {
            double w = ((float *)cout[k].data)[i], g = bt_elem(hout[k].dtype, res[k], i);
            if (!(fabs(g - w) <= ATOL + rtol * fabs(w)))
                fail_msg("%s %s (%s) output %zu element %zu: %.7g, CPU %.7g", bt_name(),
                         nd->op_type, gf_dtype_name(dt), k, i, g, w);
        }
        free(res[k]);
    }
}

/* Attention and AttentionGrad in dt against the CPU; with Stats (the
 * forward's output, the backward's input, fp32) when `stats`. */
static void half_case_s(enum gf_dtype dt, double rtol, const struct acase *c, bool stats)
{
    struct tensors t = make_tensors(c);
    struct gf_node *nd = fwd_node(c, stats ? 2 : 1);
    struct gf_tview in[4] = {t.q, t.k, t.v, t.m};
    struct gf_tview out[2] = {fout(t.rank, t.od), fout(t.rank, t.sd)};
    compare_narrow(nd, in, c->mask ? 4 : 3, out, stats ? 2 : 1, dt, rtol, stats);
    release_bufs();
    struct gf_tview gin[7], gout[3];
    grad_inputs(c, gin);
    if (stats && gin[6].rank) {
        /* O and Stats of the rounded inputs: the CPU may find the rows'
         * statistics itself where a backend reads them */
        struct tensors rt = make_tensors(c);
        for (int i = 1; i <= 4; i++)
            narrow(&gin[i], dt); /* rounds gin[i]'s floats in place */
        rt.q = gin[1], rt.k = gin[2], rt.v = gin[3], rt.m = gin[4];
        cpu_forward(c, &rt, &gin[5]);
    }
    size_t n_in = stats && gin[6].rank ? 7 : 6;
    nd = node("AttentionGrad", n_in, 3);
    set_attrs(nd, c);
    for (int k = 0; k < 3; k++)
        gout[k] = fout(gin[1 + k].rank, gin[1 + k].dims);
    compare_narrow(nd, gin, n_in, gout, 3, dt, rtol, stats);
    release_bufs();
}

static void half_case(enum gf_dtype dt, double rtol, const struct acase *c)
{
    half_case_s(dt, rtol, c, false);
}

static void test_half_storage(void **state)
{
    (void)state;
    need_backend();
    /* outputs rounded to fp16 (11 bits) / bf16 (8 bits), and the backward's
     * sums of products of rounded values */
    half_case(GF_FLOAT16, 2e-3, &(struct acase){2, 2, 3, 33, 40, 17, 24, 1, M_HEADS, 0.3f});
    half_case(GF_FLOAT16, 2e-3, &(struct acase){1, 1, 2, 7, 100, 64, 64, 0, M_CAUSAL, 0});
    half_case(GF_BFLOAT16, 1.6e-2, &(struct acase){2, 2, 3, 33, 40, 17, 24, 0, M_FULL, 0.3f});
    /* whole 16-byte rows (the CUDA kernels' vector loads), causal, Stats
     * both ways, odd lengths, head dim 128, a [Sq, Sk] mask; lengths just
     * over one 64-key tile, so that a cold PoCL run stays short */
    half_case_s(GF_BFLOAT16, 1.6e-2, &(struct acase){2, 1, 2, 72, 72, 64, 64, 1, M_CAUSAL, 0},
                true);
    half_case_s(GF_FLOAT16, 2e-3, &(struct acase){1, 1, 2, 67, 70, 64, 64, 1, M_NONE, 0}, true);
    half_case(GF_BFLOAT16, 1.6e-2, &(struct acase){1, 1, 2, 17, 65, 128, 128, 1, M_2D, 0});
    half_case(GF_FLOAT16, 2e-3, &(struct acase){2, 1, 2, 33, 33, 128, 96, 0, M_ROWS, 0.2f});
    half_case(GF_FLOAT16, 2e-3, &(struct acase){1, 1, 2, 40, 100, 64, 64, 1, M_CAUSAL, 0});
}

/* ---- errors ---------------------------------------------------------------------------- */

/* Bad input is a status naming the node and the problem, never a crash. */
static void expect_error(struct gf_node *nd, struct gf_tview *in, size_t n_in,
                         struct gf_tview *out, size_t n_out, enum gf_status want,
                         const char *needle)
{
    void *res[BT_MAX];
    enum gf_status st = bt_run(nd, in, n_in, ALL_HOST, out, n_out, NULL, res);
    for (size_t i = 0; i < n_out; i++)
        free(res[i]);
    assert_int_equal(st, want);
    const char *msg = gf_last_error();
    if (!strstr(msg, "n0") || !strstr(msg, needle))
        fail_msg("message '%s' lacks the node or '%s'", msg, needle);
}

static void test_errors(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *nd = node("Attention", 3, 1); /* K's D is not Q's */
    struct gf_tview in[6] = {frand(1, DIMS(2, 4, 8)), frand(1, DIMS(2, 5, 9)),
                             frand(1, DIMS(2, 5, 3))};
    struct gf_tview out[3] = {fout(DIMS(2, 4, 3))};
    assert_int_equal(gf_node_set_attr_int(nd, "transB", 1), GF_OK);
    expect_error(nd, in, 3, out, 1, GF_ERR_INVALID, "do not fit");
    release_bufs();
    nd = node("Attention", 3, 1); /* batch dims differ */
    in[0] = frand(1, DIMS(2, 4, 8)), in[1] = frand(1, DIMS(3, 8, 5));
    in[2] = frand(1, DIMS(2, 5, 3));
    out[0] = fout(DIMS(2, 4, 3));
    expect_error(nd, in, 3, out, 1, GF_ERR_INVALID, "do not fit");
    release_bufs();
    nd = node("Attention", 4, 1); /* a Mask that does not broadcast */
    in[0] = frand(1, DIMS(2, 4, 8)), in[1] = frand(1, DIMS(2, 8, 5));
    in[2] = frand(1, DIMS(2, 5, 3)), in[3] = frand(1, DIMS(3, 5));
    out[0] = fout(DIMS(2, 4, 3));
    expect_error(nd, in, 4, out, 1, GF_ERR_INVALID, "does not broadcast");
    release_bufs();
    nd = node("Attention", 4, 1); /* a bool Mask */
    in[0] = frand(1, DIMS(2, 4, 8)), in[1] = frand(1, DIMS(2, 8, 5));
    in[2] = frand(1, DIMS(2, 5, 3));
    in[3] = bt_view(GF_BOOL, keep(calloc(1, 20)), DIMS(4, 5));
    out[0] = fout(DIMS(2, 4, 3));
    expect_error(nd, in, 4, out, 1, GF_ERR_INVALID, "Mask (input 3) is bool");
    release_bufs();
    nd = node("Attention", 3, 1); /* transB 2 */
    assert_int_equal(gf_node_set_attr_int(nd, "transB", 2), GF_OK);
    in[0] = frand(1, DIMS(4, 8)), in[1] = frand(1, DIMS(8, 5)), in[2] = frand(1, DIMS(5, 3));
    out[0] = fout(DIMS(4, 3));
    expect_error(nd, in, 3, out, 1, GF_ERR_INVALID, "transB");
    release_bufs();
    nd = node("Attention", 3, 1); /* O of the wrong shape */
    in[0] = frand(1, DIMS(4, 8)), in[1] = frand(1, DIMS(8, 5)), in[2] = frand(1, DIMS(5, 3));
    out[0] = fout(DIMS(4, 8));
    expect_error(nd, in, 3, out, 1, GF_ERR_INVALID, "output 0 has shape");
    release_bufs();
    nd = node("AttentionGrad", 6, 3); /* dO of the wrong shape */
    in[0] = frand(1, DIMS(4, 2)), in[1] = frand(1, DIMS(4, 8)), in[2] = frand(1, DIMS(8, 5));
    in[3] = frand(1, DIMS(5, 3)), in[4] = NONE, in[5] = frand(1, DIMS(4, 3));
    out[0] = fout(DIMS(4, 8)), out[1] = fout(DIMS(8, 5)), out[2] = fout(DIMS(5, 3));
    expect_error(nd, in, 6, out, 3, GF_ERR_INVALID, "dO [4,2] must be [4,3]");
    release_bufs();
    nd = node("AttentionGrad", 6, 3); /* dK of the wrong shape */
    in[0] = frand(1, DIMS(4, 3)), in[1] = frand(1, DIMS(4, 8)), in[2] = frand(1, DIMS(8, 5));
    in[3] = frand(1, DIMS(5, 3)), in[4] = NONE, in[5] = frand(1, DIMS(4, 3));
    out[0] = NONE, out[1] = fout(DIMS(5, 8)), out[2] = NONE;
    expect_error(nd, in, 6, out, 3, GF_ERR_INVALID, "output 1 has shape");
}

/* Double inputs go to the CPU: the registry finds no kernel on the
 * backend; on OpenCL so do head dims past its kernel's limit (local
 * memory). */
static void test_declines(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *nd = node("Attention", 3, 1);
    double x[16] = {0};
    struct gf_tview in[3] = {bt_view(GF_DOUBLE, x, DIMS(2, 2)),
                             bt_view(GF_DOUBLE, x, DIMS(2, 2)),
                             bt_view(GF_DOUBLE, x, DIMS(2, 2))};
    assert_null(gf_kernel_find(bt_backend(), nd, in, 3));
    if (!bt_is("opencl"))
        return;
    static float f[2 * 2000];
    in[0] = bt_view(GF_FLOAT, f, DIMS(2, 2000));
    in[1] = bt_view(GF_FLOAT, f, DIMS(2000, 2));
    in[2] = bt_view(GF_FLOAT, f, DIMS(2, 2));
    assert_null(gf_kernel_find(bt_backend(), nd, in, 3));
    in[0] = bt_view(GF_FLOAT, f, DIMS(2, 1000));
    in[1] = bt_view(GF_FLOAT, f, DIMS(1000, 2));
    assert_non_null(gf_kernel_find(bt_backend(), nd, in, 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_forward, teardown),
        cmocka_unit_test_teardown(test_forward_large_heads, teardown),
        cmocka_unit_test_teardown(test_forward_configs, teardown),
        cmocka_unit_test_teardown(test_grad, teardown),
        cmocka_unit_test_teardown(test_grad_subsets, teardown),
        cmocka_unit_test_teardown(test_grad_large_heads, teardown),
        cmocka_unit_test_teardown(test_grad_configs, teardown),
        cmocka_unit_test_teardown(test_empty, teardown),
        cmocka_unit_test_teardown(test_deterministic, teardown),
        cmocka_unit_test_teardown(test_half_storage, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_declines, teardown),
    };
    return bt_run_tests(tests, NULL, NULL);
}
