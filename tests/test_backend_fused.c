/* The fused-op kernels of every backend (tests/backend_util.h: each
 * available one besides the CPU) against the CPU kernels of the same nodes
 * on the same inputs:
 * norms, GLUs, RoPE, the losses, and the fused backward ops, on row
 * lengths 1, 3, 7, 8, 33, 1000, 4096, 4097, 5000 and several row counts
 * (rows that fit the registers of a slot and rows that do not, persistent
 * work-groups walking many rows), every attribute form, every knob value
 * (on some shapes a sweep of the config space: a subset covering every pair
 * of values of two knobs, the whole space with GRAPHFUSE_TEST_ALL_CONFIGS=1,
 * as on the GPU machine; tests/backend_util.h), labels checked on the host and
 * on the device, and the error paths; then fp16 and bf16 tensors: against
 * the CPU kernel on the same half inputs where it takes them, else against
 * the CPU's fp32 kernel on their exact fp32 widening.  Skips without a
 * backend besides the CPU.
 * Tolerances: 1e-5 relative plus 1e-6 absolute; sums over rows (dW, the
 * reduced losses) get an absolute term that grows with the rows summed;
 * half outputs one rounding of the type (2^-10 fp16, 2^-7 bf16 relative). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gf_half.h"
#include "backend_util.h"
#include "backend_fixture.h"

#define RTOL 1e-5
#define ATOL 1e-6

/* ---- fixtures: opencl_fixture.h ---------------------------------------------- */

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

static unsigned seed = 1;

/* Random fp32 values in [lo, hi) of a shape. */
static struct gf_tview frand(float lo, float hi, int rank, const int64_t *dims)
{
    struct gf_tview t = bt_view(GF_FLOAT, NULL, rank, dims);
    float *p = keep(malloc(t.nelem * sizeof(float) + 4));
    bt_fill(p, t.nelem, lo, hi, seed++);
    t.data = p;
    t.host = p;
    return t;
}

/* Random fp32 values of magnitude [lo, hi) and either sign. */
static struct gf_tview frand_pm(float lo, float hi, int rank, const int64_t *dims)
{
    struct gf_tview t = frand(lo, hi, rank, dims);
    float *p = t.data;
    for (size_t i = 0; i < t.nelem; i += 2)
        p[i] = -p[i];
    return t;
}

/* An output of a shape (data allocated by the helpers). */
static struct gf_tview fout(int rank, const int64_t *dims)
{
    return bt_view(GF_FLOAT, NULL, rank, dims);
}

/* Labels in [0, classes) of a shape, every `ign_every`-th one `ii`. */
static struct gf_tview labels(enum gf_dtype dt, size_t classes, int ign_every, int64_t ii,
                              int rank, const int64_t *dims)
{
    struct gf_tview t = bt_view(dt, NULL, rank, dims);
    void *p = keep(malloc(t.nelem * 8 + 8));
    unsigned s = seed++ * 7919u;
    for (size_t i = 0; i < t.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        int64_t v = classes ? (int64_t)((s >> 8) % classes) : 0;
        if (ign_every && (int)(i % (size_t)ign_every) == ign_every - 1)
            v = ii;
        if (dt == GF_INT32)
            ((int32_t *)p)[i] = (int32_t)v;
        else
            ((int64_t *)p)[i] = v;
    }
    t.data = p;
    t.host = p;
    return t;
}

#define NONE ((struct gf_tview){0})
#define ALL_HOST 0xffu

/* The backend's kernel (config NULL: automatic) with output `ok` written over
 * input `ik` (the same cl_mem, as the executor's in-place plan gives it)
 * against the CPU kernel on separate buffers; every output compared. */
static void compare_inplace_cfg(const struct gf_node *nd, const struct gf_tview *in,
                                size_t n_in, unsigned host, const struct gf_tview *out,
                                size_t n_out, size_t ok, size_t ik, const int *config,
                                double rtol, double atol)
{
    struct gf_backend *be = bt_backend(), *cpu = gf_backend_get("cpu");
    struct gf_tview cout[BT_MAX], din[BT_MAX], dout[BT_MAX];
    for (size_t i = 0; i < n_out; i++) {
        cout[i] = out[i];
        cout[i].data = keep(calloc(1, gf_tview_bytes(&out[i]) + 8));
        cout[i].host = cout[i].data;
    }
    assert_int_equal(bt_run_on(cpu, nd, in, n_in, cout, n_out, NULL), GF_OK);
    for (size_t i = 0; i < n_in; i++)
        din[i] = bt_upload(be, &in[i], (host >> i) & 1);
    for (size_t i = 0; i < n_out; i++) {
        struct gf_tview h = out[i];
        h.data = NULL;
        dout[i] = i == ok ? din[ik] : bt_upload(be, &h, false);
        dout[i].dtype = out[i].dtype;
        dout[i].host = NULL;
    }
    if (bt_run_on(be, nd, din, n_in, dout, n_out, config) != GF_OK)
        fail_msg("%s %s in place failed: %s", bt_name(), nd->op_type, gf_last_error());
    for (size_t i = 0; i < n_out; i++) {
        void *got = keep(calloc(1, gf_tview_bytes(&out[i]) + 8));
        bt_download(be, &dout[i], got);
        bt_check(nd, i, &out[i], cout[i].data, got, rtol, atol);
        if (i != ok)
            bt_free(be, &dout[i]);
    }
    for (size_t i = 0; i < n_in; i++)
        bt_free(be, &din[i]);
}

static void compare_inplace(const struct gf_node *nd, const struct gf_tview *in, size_t n_in,
                            unsigned host, const struct gf_tview *out, size_t n_out, size_t ok,
                            size_t ik, double rtol, double atol)
{
    compare_inplace_cfg(nd, in, n_in, host, out, n_out, ok, ik, NULL, rtol, atol);
}

/* How much of a kernel's config space a case runs: the automatic config;
 * NARROW: that and 64-item work-groups (the knob "wg": rows too long for
 * the registers of a slot that narrow are re-read); SOME: each value of
 * each knob (the others automatic) but those of "wg" and "per_item" (they
 * pick the work-group and the vectors a work-item holds: each a build of
 * its own on PoCL, among its slowest on long rows), for a shape of a
 * kernel that another case sweeps EACH on a shorter row; EACH: each value
 * of each knob; or a sweep (a pairwise covering subset, or with
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 the cross product).  NARROW and SOME are
 * EACH with GRAPHFUSE_TEST_ALL_CONFIGS=1. */
enum sweep { AUTO, NARROW, SOME, EACH, ALL };

/* Whether SOME skips the values of knob kn. */
static bool some_skips(const struct gf_config_knob *kn)
{
    return strcmp(kn->name, "per_item") == 0 || strcmp(kn->name, "wg") == 0;
}

/* bt_compare over the configs of `sweep`; returns how many were run (ALL:
 * the size of the space swept). */
static int compare_sweep(const struct gf_node *nd, const struct gf_tview *in, size_t n_in,
                         unsigned host, const struct gf_tview *out, size_t n_out,
                         enum sweep sweep, double rtol, double atol)
{
    if (sweep == ALL)
        return bt_compare_configs(nd, in, n_in, host, out, n_out, rtol, atol);
    if ((sweep == NARROW || sweep == SOME) && bt_all_configs())
        sweep = EACH;
    bt_compare(nd, in, n_in, host, out, n_out, rtol, atol);
    if (sweep == AUTO)
        return 1;
    struct gf_tview din[BT_MAX];
    for (size_t i = 0; i < n_in; i++) {
        din[i] = in[i];
        din[i].host = (host >> i) & 1 ? in[i].data : NULL;
    }
    const struct gf_kernel *k = gf_kernel_find(bt_backend(), nd, din, n_in);
    if (!k) /* not supported there (counted by bt_compare) */
        return 0;
    int cfg[16], runs = 1;
    for (size_t i = 0; i < k->n_knobs; i++)
        for (int v = 1; v < k->knobs[i].n_values; v++) {
            int val = k->knobs[i].values[v];
            if (sweep == NARROW ? strcmp(k->knobs[i].name, "wg") != 0 || val != 64
                                : sweep == SOME && some_skips(&k->knobs[i]))
                continue;
            for (size_t j = 0; j < k->n_knobs; j++)
                cfg[j] = k->knobs[j].values[0];
            cfg[i] = val;
            bt_compare_cfg(nd, in, n_in, host, out, n_out, cfg, rtol, atol);
            runs++;
        }
    return runs;
}

/* ---- norms ----------------------------------------------------------------------------- */

/* compare_sweep's count for a norm kernel (5 knobs of 4, 4, 2, 3, 4 values:
 * wg, per_item, vec, prefetch, groups_per_cu). */
static int norm_configs(enum sweep sweep)
{
    if (sweep != ALL && sweep != AUTO && bt_all_configs())
        sweep = EACH;
    return sweep == ALL ? 384 : sweep == EACH ? 13 : sweep == SOME ? 7 : sweep == NARROW ? 2 : 1;
}

static const int64_t row_lens[] = {1, 3, 7, 8, 33, 1000, 4096, 4097, 5000};
static const int64_t row_counts[] = {1, 7, 64};

/* RMSNorm / AddRMSNorm on X [rows, n] with W [n] (or none), every form. */
static void rms_case(const char *op, int64_t rows, int64_t n, bool w, bool sum_out, int outside,
                     float offset, enum sweep sweep)
{
    bool add = strcmp(op, "AddRMSNorm") == 0;
    struct gf_node *nd = node(op, add ? 3 : 2, add ? 2 : 1);
    set_float(nd, "epsilon", 1e-5f);
    set_int(nd, "eps_outside", outside);
    if (offset != 0)
        set_float(nd, "weight_offset", offset);
    struct gf_tview in[3], out[2];
    size_t ni = 0;
    in[ni++] = frand(-2, 2, DIMS(rows, n));
    if (add)
        in[ni++] = frand(-1, 1, DIMS(rows, n));
    in[ni++] = w ? frand(0.5f, 1.5f, DIMS(n)) : NONE;
    out[0] = fout(DIMS(rows, n));
    out[1] = sum_out ? fout(DIMS(rows, n)) : NONE;
    size_t no = add ? 2 : 1;
    bt_expect_space(compare_sweep(nd, in, ni, ALL_HOST, out, no, sweep, RTOL, ATOL),
                    "opencl", norm_configs(sweep));
    release_bufs();
}

static void test_rmsnorm(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
        for (size_t j = 0; j < sizeof(row_counts) / sizeof(row_counts[0]); j++)
            rms_case("RMSNorm", row_counts[j], row_lens[i], true, false, 0, 0, AUTO);
    rms_case("RMSNorm", 5, 33, false, false, 0, 0, AUTO);
    rms_case("RMSNorm", 5, 1000, true, false, 1, 0, AUTO);     /* eps outside */
    rms_case("RMSNorm", 5, 1000, true, false, 0, 1.0f, AUTO);  /* Gemma (1 + w) */
    rms_case("RMSNorm", 7, 33, true, false, 1, 1.0f, EACH);
    rms_case("RMSNorm", 9, 4096, true, false, 0, 0, ALL);      /* every config */
    rms_case("RMSNorm", 3, 5000, true, false, 0, 0, NARROW);    /* fits some configs only */
    rms_case("RMSNorm", 4, 1, true, false, 0, 0, EACH);
    rms_case("RMSNorm", 500, 33, true, false, 0, 0, AUTO);     /* many rows a work-group */
    rms_case("RMSNorm", 300, 1000, true, false, 1, 0, AUTO);
    for (int64_t n = 33; n <= 4096; n += 4063) { /* Y over X */
        struct gf_node *nd = node("RMSNorm", 2, 1);
        struct gf_tview in[2] = {frand(-2, 2, DIMS(5, n)), frand(0.5f, 1.5f, DIMS(n))};
        struct gf_tview out[1] = {fout(DIMS(5, n))};
        compare_inplace(nd, in, 2, ALL_HOST, out, 1, 0, 0, RTOL, ATOL);
        release_bufs();
    }
}

static void test_add_rmsnorm(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++) {
        rms_case("AddRMSNorm", 7, row_lens[i], true, true, 0, 0, AUTO);
        rms_case("AddRMSNorm", 7, row_lens[i], true, false, 0, 0, AUTO); /* no S */
    }
    rms_case("AddRMSNorm", 3, 1000, true, true, 1, 1.0f, AUTO);
    rms_case("AddRMSNorm", 5, 8, true, true, 0, 0, EACH);
    rms_case("AddRMSNorm", 5, 1000, false, false, 0, 0, EACH);
}

/* LayerNorm / AddLayerNorm with optional W, B and statistics outputs. */
static void ln_case(const char *op, int64_t rows, int64_t n, bool w, bool b, bool stats,
                    enum sweep sweep)
{
    bool add = strcmp(op, "AddLayerNorm") == 0;
    struct gf_node *nd = node(op, add ? 4 : 3, add ? 4 : 3);
    set_float(nd, "epsilon", 1e-5f);
    struct gf_tview in[4], out[4];
    size_t ni = 0, no = 0;
    in[ni++] = frand(-2, 3, DIMS(rows, n));
    if (add)
        in[ni++] = frand(-1, 1, DIMS(rows, n));
    in[ni++] = w ? frand(0.5f, 1.5f, DIMS(n)) : NONE;
    in[ni++] = b ? frand(-1, 1, DIMS(n)) : NONE;
    out[no++] = fout(DIMS(rows, n));
    if (add)
        out[no++] = fout(DIMS(rows, n));
    out[no++] = stats ? fout(DIMS(rows, 1)) : NONE;
    out[no++] = stats ? fout(DIMS(rows, 1)) : NONE;
    bt_expect_space(compare_sweep(nd, in, ni, ALL_HOST, out, no, sweep, RTOL, ATOL),
                    "opencl", norm_configs(sweep));
    release_bufs();
}

static void test_layernorm(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++) {
        ln_case("LayerNorm", 7, row_lens[i], true, true, true, AUTO);
        ln_case("AddLayerNorm", 7, row_lens[i], true, true, true, AUTO);
    }
    ln_case("LayerNorm", 64, 33, true, false, false, AUTO);
    ln_case("LayerNorm", 1, 1000, false, false, true, AUTO);
    ln_case("AddLayerNorm", 64, 1000, false, true, false, AUTO);
    ln_case("LayerNorm", 7, 33, true, true, true, EACH);
    ln_case("AddLayerNorm", 5, 4096, true, true, true, EACH);
    ln_case("LayerNorm", 3, 5000, true, true, true, NARROW);
    ln_case("AddLayerNorm", 400, 64, true, true, true, AUTO);
    static const int reread[5] = {64, 2, 0, 1, 1}; /* 2 a work-item: 512 > 64 items */
    for (int c = 0; c < 2; c++) { /* Y over X */
        struct gf_node *nd = node("LayerNorm", 3, 1);
        struct gf_tview in[3] = {frand(-2, 3, DIMS(7, 1000)), frand(0.5f, 1.5f, DIMS(1000)),
                                 frand(-1, 1, DIMS(1000))};
        struct gf_tview out[1] = {fout(DIMS(7, 1000))};
        compare_inplace_cfg(nd, in, 3, ALL_HOST, out, 1, 0, 0, c ? reread : NULL, RTOL, ATOL);
        release_bufs();
    }
}

/* axis -2: the normalized block [4, n], W [n] broadcast over it and B [4, 1]
 * (expanded into the workspace). */
static void test_norm_axis_broadcast(void **state)
{
    (void)state;
    need_backend();
    const char *ops[] = {"RMSNorm", "LayerNorm"};
    for (int o = 0; o < 2; o++)
        for (int64_t n = 1; n <= 33; n += 32) {
            bool ln = o == 1;
            struct gf_node *nd = node(ops[o], ln ? 3 : 2, 1);
            set_int(nd, "axis", -2);
            struct gf_tview in[3] = {frand(-2, 2, DIMS(3, 4, n)), frand(0.5f, 1.5f, DIMS(n)),
                                     ln ? frand(-1, 1, DIMS(4, 1)) : NONE};
            struct gf_tview out[1] = {fout(DIMS(3, 4, n))};
            compare_sweep(nd, in, ln ? 3 : 2, ALL_HOST, out, 1, EACH, RTOL, ATOL);
            release_bufs();
        }
}

/* RMSNormGrad: dX with a tight tolerance (dW not asked), then dX and dW.
 * |X| >= 0.5, so that r g - k x (which cancels: for n = 1 it is
 * r g eps / (x^2 + eps)) stays within a few ulp of terms of order 1. */
static void rms_grad_case(int64_t rows, int64_t n, bool w, int outside, float offset,
                          enum sweep sweep)
{
    struct gf_node *nd = node("RMSNormGrad", 3, 2);
    set_float(nd, "epsilon", 1e-5f);
    set_int(nd, "eps_outside", outside);
    if (offset != 0)
        set_float(nd, "weight_offset", offset);
    struct gf_tview in[3] = {frand(-1, 1, DIMS(rows, n)), frand_pm(0.5f, 2, DIMS(rows, n)),
                             w ? frand(0.5f, 1.5f, DIMS(n)) : NONE};
    struct gf_tview out[2] = {fout(DIMS(rows, n)), NONE};
    bt_compare(nd, in, 3, ALL_HOST, out, 1, RTOL, 2 * ATOL);
    out[1] = fout(DIMS(n));
    double atol = 4e-6 * (double)rows;
    bt_expect_space(compare_sweep(nd, in, 3, ALL_HOST, out, 2, sweep, RTOL, atol),
                    "opencl", norm_configs(sweep));
    release_bufs();
}

static void test_rmsnorm_grad(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
        for (size_t j = 0; j < sizeof(row_counts) / sizeof(row_counts[0]); j++)
            rms_grad_case(row_counts[j], row_lens[i], true, 0, 0, AUTO);
    rms_grad_case(300, 64, true, 0, 0, AUTO); /* many rows per slot */
    rms_grad_case(7, 33, false, 0, 0, AUTO);
    rms_grad_case(7, 1000, true, 1, 0, AUTO);
    rms_grad_case(7, 1000, true, 0, 1.0f, AUTO);
    rms_grad_case(9, 33, true, 1, 1.0f, EACH);
    rms_grad_case(5, 4096, true, 0, 0, ALL);
    rms_grad_case(3, 5000, true, 0, 0, NARROW);
    rms_grad_case(1000, 40, true, 0, 0, AUTO);
    /* dX over dY and over X, automatic and with rows re-read (64 work-items a row) */
    static const int reread[5] = {64, 2, 0, 1, 1};
    for (size_t ik = 0; ik < 2; ik++)
        for (int c = 0; c < 2; c++) {
            struct gf_node *nd = node("RMSNormGrad", 3, 2);
            struct gf_tview in[3] = {frand(-1, 1, DIMS(9, 1000)), frand_pm(0.5f, 2, DIMS(9, 1000)),
                                     frand(0.5f, 1.5f, DIMS(1000))};
            struct gf_tview out[2] = {fout(DIMS(9, 1000)), fout(DIMS(1000))};
            compare_inplace_cfg(nd, in, 3, ALL_HOST, out, 2, 0, ik, c ? reread : NULL, RTOL,
                                4e-5);
            release_bufs();
        }
}

/* No rows: dW is a sum over nothing. */
static void test_rmsnorm_grad_empty(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *nd = node("RMSNormGrad", 3, 2);
    struct gf_tview in[3] = {frand(-1, 1, DIMS(0, 5)), frand(-1, 1, DIMS(0, 5)),
                             frand(0.5f, 1.5f, DIMS(5))};
    struct gf_tview out[2] = {fout(DIMS(0, 5)), fout(DIMS(5))};
    bt_compare(nd, in, 3, ALL_HOST, out, 2, 0, 0);
}

/* ---- activations ------------------------------------------------------------------------ */

static void act_case(const char *op, const char *approx, int64_t rows, int64_t n, bool bcast,
                     bool all_configs)
{
    bool gated = strcmp(op, "SwiGLU") == 0 || strcmp(op, "GeGLU") == 0;
    struct gf_node *nd = node(op, gated ? 2 : 1, 1);
    if (approx)
        set_str(nd, "approximate", approx);
    struct gf_tview in[2] = {frand(-6, 6, DIMS(rows, n)),
                             bcast ? frand(-2, 2, DIMS(n)) : frand(-2, 2, DIMS(rows, n))};
    struct gf_tview out[1] = {fout(DIMS(rows, n))};
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, gated ? 2 : 1, ALL_HOST, out, 1, RTOL,
                                         ATOL), "opencl", 32);
    else
        bt_compare(nd, in, gated ? 2 : 1, ALL_HOST, out, 1, RTOL, ATOL);
    release_bufs();
}

static void test_activations(void **state)
{
    (void)state;
    need_backend();
    static const struct {
        const char *op, *approx;
    } forms[] = {{"SwiGLU", NULL}, {"GeGLU", "none"}, {"GeGLU", "tanh"},
                 {"SiLU", NULL},   {"Gelu", NULL},    {"Gelu", "tanh"}};
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
            act_case(forms[f].op, forms[f].approx, 3, row_lens[i], false, false);
        act_case(forms[f].op, forms[f].approx, 7, 33, false, true);
        act_case(forms[f].op, forms[f].approx, 2, 4097, false, true);
    }
    /* U broadcast over G's rows, and G over U's */
    act_case("SwiGLU", NULL, 7, 33, true, true);
    act_case("GeGLU", "tanh", 5, 1000, true, false);
    struct gf_node *nd = node("SwiGLU", 2, 1);
    struct gf_tview in[2] = {frand(-4, 4, DIMS(3, 1, 5)), frand(-2, 2, DIMS(4, 1))};
    struct gf_tview out[1] = {fout(DIMS(3, 4, 5))};
    bt_compare(nd, in, 2, ALL_HOST, out, 1, RTOL, ATOL);
}

static void glu_grad_case(const char *op, const char *approx, int64_t rows, int64_t n,
                          int want, bool all_configs)
{
    struct gf_node *nd = node(op, 3, 2);
    if (approx)
        set_str(nd, "approximate", approx);
    struct gf_tview in[3] = {frand(-1, 1, DIMS(rows, n)), frand(-6, 6, DIMS(rows, n)),
                             frand(-2, 2, DIMS(rows, n))};
    struct gf_tview out[2] = {want & 1 ? fout(DIMS(rows, n)) : NONE,
                              want & 2 ? fout(DIMS(rows, n)) : NONE};
    /* gelu' has a root near -0.75: an absolute term for the cancellation there */
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, 3, ALL_HOST, out, 2, RTOL, 4 * ATOL),
                        "opencl", 32);
    else
        bt_compare(nd, in, 3, ALL_HOST, out, 2, RTOL, 4 * ATOL);
    release_bufs();
}

static void test_glu_grads(void **state)
{
    (void)state;
    need_backend();
    static const struct {
        const char *op, *approx;
    } forms[] = {{"SwiGLUGrad", NULL}, {"GeGLUGrad", "none"}, {"GeGLUGrad", "tanh"}};
    for (size_t f = 0; f < 3; f++) {
        for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
            glu_grad_case(forms[f].op, forms[f].approx, 3, row_lens[i], 3, false);
        glu_grad_case(forms[f].op, forms[f].approx, 7, 33, 1, false);
        glu_grad_case(forms[f].op, forms[f].approx, 7, 33, 2, false);
        glu_grad_case(forms[f].op, forms[f].approx, 5, 1001, 3, true);
    }
}

/* RoPE / RoPEGrad on X [b, h, s, d] with Cos / Sin of the given shape. */
static void rope_case(const char *op, const int64_t *xd, int crank, const int64_t *cd,
                      bool all_configs)
{
    struct gf_node *nd = node(op, 3, 1);
    struct gf_tview in[3] = {frand(-2, 2, 4, xd), frand(-1, 1, crank, cd),
                             frand(-1, 1, crank, cd)};
    struct gf_tview out[1] = {fout(4, xd)};
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, 3, ALL_HOST, out, 1, RTOL, ATOL), "opencl", 32);
    else
        bt_compare(nd, in, 3, ALL_HOST, out, 1, RTOL, ATOL);
    release_bufs();
}

static void test_rope(void **state)
{
    (void)state;
    need_backend();
    const char *ops[] = {"RoPE", "RoPEGrad"};
    for (int o = 0; o < 2; o++) {
        rope_case(ops[o], (int64_t[]){2, 3, 5, 16}, 2, (int64_t[]){5, 16}, true);
        rope_case(ops[o], (int64_t[]){2, 3, 5, 6}, 4, (int64_t[]){1, 1, 5, 6}, true);
        rope_case(ops[o], (int64_t[]){2, 3, 7, 8}, 4, (int64_t[]){2, 1, 7, 8}, false);
        rope_case(ops[o], (int64_t[]){1, 2, 3, 2}, 1, (int64_t[]){2}, false);
        rope_case(ops[o], (int64_t[]){2, 2, 3, 8}, 4, (int64_t[]){2, 2, 3, 1}, false);
        rope_case(ops[o], (int64_t[]){1, 4, 33, 128}, 2, (int64_t[]){33, 128}, false);
    }
}

/* ---- losses ------------------------------------------------------------------------------ */

/* The absolute term of a loss summed over n positions. */
static double loss_atol(size_t n)
{
    return 1e-6 * (double)(n + 1);
}

/* SoftmaxCrossEntropy on L [N, C] (or [B, S, C] with shift, [N, C, d]). */
struct ce_form {
    const char *red;
    bool ii, wc, logp, shift, dlast;
    enum gf_dtype lt;
    bool grad;
};

static void ce_case(const struct ce_form *f, int64_t a0, int64_t c, int64_t a2, unsigned host,
                    bool all_configs)
{
    struct gf_node *nd = node("SoftmaxCrossEntropy", 3, 3);
    set_str(nd, "reduction", f->red);
    if (f->ii)
        set_int(nd, "ignore_index", -1);
    if (f->shift)
        set_int(nd, "shift", 1);
    struct gf_tview in[3], out[3];
    size_t n_pos;
    if (f->shift) {
        in[0] = frand(-8, 8, DIMS(a0, a2, c));
        in[1] = labels(f->lt, (size_t)c, f->ii ? 3 : 0, -1, DIMS(a0, a2));
        n_pos = (size_t)(a0 * (a2 - 1));
        out[1] = f->logp ? fout(DIMS((int64_t)n_pos, c)) : NONE;
    } else if (f->dlast) {
        in[0] = frand(-8, 8, DIMS(a0, c, a2));
        in[1] = labels(f->lt, (size_t)c, f->ii ? 3 : 0, -1, DIMS(a0, a2));
        n_pos = (size_t)(a0 * a2);
        out[1] = f->logp ? fout(DIMS(a0, c, a2)) : NONE;
    } else {
        in[0] = frand(-8, 8, DIMS(a0, c));
        in[1] = labels(f->lt, (size_t)c, f->ii ? 3 : 0, -1, DIMS(a0));
        n_pos = (size_t)a0;
        out[1] = f->logp ? fout(DIMS(a0, c)) : NONE;
    }
    in[2] = f->wc ? frand(0.5f, 2, DIMS(c)) : NONE;
    out[2] = f->grad ? fout(in[0].rank, in[0].dims) : NONE;
    bool none = strcmp(f->red, "none") == 0;
    if (none && f->shift)
        out[0] = fout(DIMS((int64_t)n_pos));
    else if (none && f->dlast)
        out[0] = fout(DIMS(a0, a2));
    else if (none)
        out[0] = fout(DIMS(a0));
    else
        out[0] = fout(0, NULL);
    /* the per-position loss is a difference of logits near each other */
    double atol = none ? 1e-5 : loss_atol(n_pos) * 8;
    if (all_configs)
        bt_compare_configs(nd, in, 3, host, out, 3, RTOL, atol);
    else
        bt_compare(nd, in, 3, host, out, 3, RTOL, atol);
    if (f->grad && !all_configs) /* G over L, as the executor writes it */
        compare_inplace(nd, in, 3, host, out, 3, 2, 0, RTOL, atol);
    release_bufs();
}

static void test_cross_entropy(void **state)
{
    (void)state;
    need_backend();
    static const struct ce_form forms[] = {
        {"mean", false, false, false, false, false, GF_INT64, false},
        {"mean", true, false, true, false, false, GF_INT64, true},
        {"sum", true, true, false, false, false, GF_INT32, true},
        {"none", false, true, true, false, false, GF_INT64, false},
        {"mean", true, true, false, false, false, GF_INT64, true},
        {"none", true, false, false, false, false, GF_INT64, true},
    };
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
        for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
            ce_case(&forms[f], 7, row_lens[i], 0, ALL_HOST, false);
    ce_case(&forms[1], 33, 1000, 0, ALL_HOST, true);
    ce_case(&forms[3], 5, 12, 0, ALL_HOST, true);
    /* shift (Hugging Face causal LM), [N, C, d], labels only on the device */
    static const struct ce_form more[] = {
        {"mean", true, false, true, true, false, GF_INT64, true},
        {"none", false, false, true, true, false, GF_INT32, true},
        {"sum", true, true, true, false, true, GF_INT64, true},
        {"none", false, false, true, false, true, GF_INT32, false},
        {"mean", true, true, false, false, true, GF_INT32, true},
    };
    for (size_t f = 0; f < sizeof(more) / sizeof(more[0]); f++) {
        ce_case(&more[f], 2, 33, 5, ALL_HOST, false);
        ce_case(&more[f], 3, 1000, 4, 1u, false); /* labels without a host copy */
        ce_case(&more[f], 2, 8, 1, ALL_HOST, false);
    }
    ce_case(&more[0], 3, 40, 5, 1u, true);
}

/* LinearCrossEntropy: H [N, K] (or [B, S, K] with shift) @ W, transB, Bias,
 * small chunks and blocks so that both loops run several times. */
static void lce_case(int64_t a0, int64_t s, int64_t k, int64_t v, bool tb, bool bias,
                     bool shift, const char *red, int chunk, unsigned host, bool all_configs)
{
    struct gf_node *nd = node("LinearCrossEntropy", 4, 1);
    set_str(nd, "reduction", red);
    set_int(nd, "ignore_index", -100);
    if (tb)
        set_int(nd, "transB", 1);
    if (shift)
        set_int(nd, "shift", 1);
    if (chunk)
        set_int(nd, "chunk_rows", chunk);
    struct gf_tview in[4];
    size_t n_pos;
    if (shift) {
        in[0] = frand(-1, 1, DIMS(a0, s, k));
        in[2] = labels(GF_INT64, (size_t)v, 4, -100, DIMS(a0, s));
        n_pos = (size_t)(a0 * (s - 1));
    } else {
        in[0] = frand(-1, 1, DIMS(a0, k));
        in[2] = labels(GF_INT32, (size_t)v, 4, -100, DIMS(a0));
        n_pos = (size_t)a0;
    }
    in[1] = tb ? frand(-1, 1, DIMS(v, k)) : frand(-1, 1, DIMS(k, v));
    in[3] = bias ? frand(-1, 1, DIMS(v)) : NONE;
    bool none = strcmp(red, "none") == 0;
    struct gf_tview out[1] = {none ? fout(DIMS((int64_t)n_pos)) : fout(0, NULL)};
    /* logits are dot products of K terms: fp32 against BLAS's order */
    double atol = 2e-6 * (double)k * (none ? 1 : (double)n_pos);
    if (all_configs)
        bt_compare_configs(nd, in, bias ? 4 : 3, host, out, 1, RTOL * 10, atol);
    else
        bt_compare(nd, in, bias ? 4 : 3, host, out, 1, RTOL * 10, atol);
    release_bufs();
}

static void test_linear_cross_entropy(void **state)
{
    (void)state;
    need_backend();
    lce_case(7, 0, 33, 1000, false, false, false, "mean", 0, ALL_HOST, false);
    lce_case(7, 0, 33, 1000, true, true, false, "none", 3, ALL_HOST, false);
    lce_case(2, 9, 16, 300, false, true, true, "sum", 4, ALL_HOST, true);
    lce_case(2, 9, 16, 300, true, false, true, "none", 0, 1u, false);
    lce_case(70, 0, 65, 129, false, true, false, "mean", 64, 1u, false);
    lce_case(1, 0, 1, 1, false, false, false, "sum", 0, ALL_HOST, false);
    lce_case(5, 0, 0, 7, false, true, false, "none", 0, ALL_HOST, false); /* K = 0 */
}

/* LinearCrossEntropy with its training outputs dH, dW, dBias (bits of want). */
static void lce_train_case(int64_t a0, int64_t s, int64_t k, int64_t v, bool tb, bool shift,
                           const char *red, int chunk, int want, unsigned host, bool all_configs)
{
    struct gf_node *nd = node("LinearCrossEntropy", 4, 4);
    set_str(nd, "reduction", red);
    set_int(nd, "ignore_index", -100);
    if (tb)
        set_int(nd, "transB", 1);
    if (shift)
        set_int(nd, "shift", 1);
    if (chunk)
        set_int(nd, "chunk_rows", chunk);
    struct gf_tview in[4];
    size_t n_pos;
    if (shift) {
        in[0] = frand(-1, 1, DIMS(a0, s, k));
        in[2] = labels(GF_INT64, (size_t)v, 4, -100, DIMS(a0, s));
        n_pos = (size_t)(a0 * (s - 1));
    } else {
        in[0] = frand(-1, 1, DIMS(a0, k));
        in[2] = labels(GF_INT32, (size_t)v, 4, -100, DIMS(a0));
        n_pos = (size_t)a0;
    }
    in[1] = tb ? frand(-1, 1, DIMS(v, k)) : frand(-1, 1, DIMS(k, v));
    in[3] = frand(-1, 1, DIMS(v));
    struct gf_tview out[4] = {fout(0, NULL), want & 1 ? fout(in[0].rank, in[0].dims) : NONE,
                              want & 2 ? fout(in[1].rank, in[1].dims) : NONE,
                              want & 4 ? fout(DIMS(v)) : NONE};
    /* sums of K products (logits, dH) and of positions (dW, dBias, the loss) */
    double atol = 2e-6 * (double)(k + n_pos);
    if (all_configs)
        bt_compare_configs(nd, in, 4, host, out, 4, RTOL * 10, atol);
    else
        bt_compare(nd, in, 4, host, out, 4, RTOL * 10, atol);
    release_bufs();
}

static void test_linear_cross_entropy_train(void **state)
{
    (void)state;
    need_backend();
    lce_train_case(7, 0, 33, 100, false, false, "mean", 0, 7, ALL_HOST, false);
    lce_train_case(7, 0, 33, 100, true, false, "sum", 3, 7, ALL_HOST, false);
    lce_train_case(2, 9, 16, 300, false, true, "mean", 4, 7, 1u, false);
    lce_train_case(2, 9, 16, 300, true, true, "sum", 0, 3, ALL_HOST, false);
    lce_train_case(70, 0, 65, 129, false, false, "mean", 64, 1, 1u, false);
    lce_train_case(70, 0, 65, 129, true, false, "mean", 0, 6, ALL_HOST, false);
    lce_train_case(3, 5, 8, 40, false, true, "mean", 2, 7, ALL_HOST, true);
    /* shift, 4 batches of 8 positions, chunks of whole batches (CUDA: 3 + 1) */
    lce_train_case(4, 9, 16, 300, true, true, "mean", 0, 7, ALL_HOST, false);
}

static void jsd_case(int64_t rows, int64_t n, float beta, bool labels_in, bool all_configs)
{
    struct gf_node *nd = node("JSD", 3, 1);
    set_float(nd, "beta", beta);
    /* log-probabilities: log of a normalized random row */
    struct gf_tview in[3] = {frand(0.01f, 1, DIMS(rows, n)), frand(0.01f, 1, DIMS(rows, n)),
                             labels_in ? labels(GF_INT64, 5, 3, -100, DIMS(rows)) : NONE};
    for (int k = 0; k < 2; k++) {
        float *p = in[k].data;
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t j = 0; j < n; j++)
                s += p[r * n + j];
            for (int64_t j = 0; j < n; j++)
                p[r * n + j] = (float)log(p[r * n + j] / s);
        }
    }
    struct gf_tview out[1] = {fout(0, NULL)};
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, labels_in ? 3 : 2, ALL_HOST, out, 1, RTOL,
                                         loss_atol((size_t)(rows * n))), "opencl", 16);
    else
        bt_compare(nd, in, labels_in ? 3 : 2, ALL_HOST, out, 1, RTOL,
                     loss_atol((size_t)(rows * n)));
    release_bufs();
}

static void test_jsd(void **state)
{
    (void)state;
    need_backend();
    const float betas[] = {0, 1, 0.5f, 0.1f};
    for (int b = 0; b < 4; b++)
        for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
            jsd_case(5, row_lens[i], betas[b], b % 2 == 0, false);
    jsd_case(33, 100, 0.5f, true, true);
}

/* LayerNormGrad, statistics recomputed or given (random: the kernel uses
 * what it is given), outputs in every combination. */
static void ln_grad_case(int64_t rows, int64_t n, bool w, bool stats, int want,
                         enum sweep sweep)
{
    struct gf_node *nd = node("LayerNormGrad", 5, 3);
    set_float(nd, "epsilon", 1e-5f);
    struct gf_tview in[5] = {frand(-1, 1, DIMS(rows, n)), frand(-2, 3, DIMS(rows, n)),
                             w ? frand(0.5f, 1.5f, DIMS(n)) : NONE,
                             stats ? frand(-0.5f, 0.5f, DIMS(rows, 1)) : NONE,
                             stats ? frand(0.5f, 2, DIMS(rows, 1)) : NONE};
    struct gf_tview out[3] = {fout(DIMS(rows, n)), want & 1 ? fout(DIMS(n)) : NONE,
                              want & 2 ? fout(DIMS(n)) : NONE};
    /* dX cancels like RMSNormGrad's; dW, dB are sums over the rows */
    double atol = 4e-6 * (double)(rows + 1);
    bt_expect_space(compare_sweep(nd, in, 5, ALL_HOST, out, 3, sweep, RTOL, atol),
                    "opencl", norm_configs(sweep));
    release_bufs();
}

static void test_layernorm_grad(void **state)
{
    (void)state;
    need_backend();
    for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
        if (row_lens[i] > 1) /* n = 1: var 0, dX pure cancellation */
            for (size_t j = 0; j < sizeof(row_counts) / sizeof(row_counts[0]); j++)
                ln_grad_case(row_counts[j], row_lens[i], true, j == 1, 3, AUTO);
    ln_grad_case(300, 64, true, false, 3, AUTO);
    ln_grad_case(7, 33, false, true, 1, AUTO);
    ln_grad_case(7, 1000, true, false, 2, AUTO);
    ln_grad_case(7, 1000, true, true, 0, AUTO);
    ln_grad_case(9, 33, true, false, 3, EACH);
    ln_grad_case(5, 4096, true, true, 3, SOME); /* wg, per_item: on 33 above */
    static const int reread[5] = {64, 2, 0, 1, 1}; /* rows re-read */
    for (size_t ik = 0; ik < 2; ik++)
        for (int c = 0; c < 2; c++) {
            struct gf_node *nd = node("LayerNormGrad", 3, 3);
            struct gf_tview in[3] = {frand(-1, 1, DIMS(9, 1000)), frand(-2, 3, DIMS(9, 1000)),
                                     frand(0.5f, 1.5f, DIMS(1000))};
            struct gf_tview out[3] = {fout(DIMS(9, 1000)), fout(DIMS(1000)), fout(DIMS(1000))};
            compare_inplace_cfg(nd, in, 3, ALL_HOST, out, 3, 0, ik, c ? reread : NULL, RTOL,
                                4e-5);
            release_bufs();
        }
}

/* CrossEntropyGrad: G [N, C] / [N, C, d] / [B, S, C] times dLoss. */
static void ce_grad_case(const char *red, bool shift, int rank, const int64_t *gd, bool all)
{
    struct gf_node *nd = node("CrossEntropyGrad", 2, 1);
    set_str(nd, "reduction", red);
    if (shift)
        set_int(nd, "shift", 1);
    int64_t ld[GF_MAX_RANK];
    int lr = 0;
    if (strcmp(red, "none") != 0) {
        lr = 0;
    } else if (shift) {
        ld[lr++] = gd[0] * (gd[1] - 1);
    } else {
        ld[lr++] = gd[0];
        for (int i = 2; i < rank; i++)
            ld[lr++] = gd[i];
    }
    struct gf_tview in[2] = {frand(-2, 2, lr, ld), frand(-1, 1, rank, gd)};
    struct gf_tview out[1] = {fout(rank, gd)};
    if (all)
        bt_expect_space(bt_compare_configs(nd, in, 2, ALL_HOST, out, 1, RTOL, ATOL), "opencl", 32);
    else
        bt_compare(nd, in, 2, ALL_HOST, out, 1, RTOL, ATOL);
    compare_inplace(nd, in, 2, ALL_HOST, out, 1, 0, 1, RTOL, ATOL);
    release_bufs();
}

static void test_cross_entropy_grad(void **state)
{
    (void)state;
    need_backend();
    ce_grad_case("mean", false, 2, (int64_t[]){7, 33}, true);
    ce_grad_case("sum", true, 3, (int64_t[]){2, 5, 1001}, false);
    ce_grad_case("none", false, 2, (int64_t[]){7, 1000}, false);
    ce_grad_case("none", false, 4, (int64_t[]){3, 5, 2, 7}, true);
    ce_grad_case("none", true, 3, (int64_t[]){3, 6, 33}, true);
}

static void jsd_grad_case(int64_t rows, int64_t n, float beta, bool labels_in, int want,
                          bool all_configs)
{
    struct gf_node *nd = node("JSDGrad", 4, 2);
    set_float(nd, "beta", beta);
    struct gf_tview in[4] = {frand(0.5f, 2, DIMS(1)), frand(-6, 0, DIMS(rows, n)),
                             frand(-6, 0, DIMS(rows, n)),
                             labels_in ? labels(GF_INT32, 5, 3, -100, DIMS(rows)) : NONE};
    struct gf_tview out[2] = {want & 1 ? fout(DIMS(rows, n)) : NONE,
                              want & 2 ? fout(DIMS(rows, n)) : NONE};
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, 4, ALL_HOST, out, 2, RTOL, ATOL), "opencl", 32);
    else
        bt_compare(nd, in, 4, ALL_HOST, out, 2, RTOL, ATOL);
    release_bufs();
}

static void test_jsd_grad(void **state)
{
    (void)state;
    need_backend();
    const float betas[] = {0, 1, 0.5f, 0.3f};
    for (int b = 0; b < 4; b++)
        for (size_t i = 0; i < sizeof(row_lens) / sizeof(row_lens[0]); i++)
            jsd_grad_case(5, row_lens[i], betas[b], b % 2 == 1, 3, false);
    jsd_grad_case(7, 33, 0.5f, true, 1, false);
    jsd_grad_case(7, 33, 0.5f, false, 2, false);
    jsd_grad_case(33, 100, 0.7f, true, 3, true);
}

/* MatMulEpilogueGrad: dZ = dY act'(Z), dBias = beta * column sums. */
static void epi_grad_case(const char *act, int from_y, int64_t rows, int64_t n, bool db,
                          bool all_configs)
{
    struct gf_node *nd = node("MatMulEpilogueGrad", 2, 2);
    set_str(nd, "activation", act);
    set_int(nd, "from_output", from_y);
    set_float(nd, "beta", 0.5f);
    /* from Y: a value act can produce (tanh, sigmoid: (0, 1) is inside both) */
    struct gf_tview in[2] = {frand(-1, 1, DIMS(2, rows, n)),
                             from_y ? frand(0.05f, 0.95f, DIMS(2, rows, n))
                                    : frand(-5, 5, DIMS(2, rows, n))};
    struct gf_tview out[2] = {fout(DIMS(2, rows, n)), db ? fout(DIMS(n)) : NONE};
    double atol = 4e-6 * (double)(2 * rows);
    if (all_configs)
        bt_expect_space(bt_compare_configs(nd, in, 2, ALL_HOST, out, 2, RTOL, atol), "opencl", 32);
    else
        bt_compare(nd, in, 2, ALL_HOST, out, 2, RTOL, atol);
    release_bufs();
}

static void test_matmul_epilogue_grad(void **state)
{
    (void)state;
    need_backend();
    const char *acts[] = {"", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"};
    for (int i = 0; i < 7; i++) {
        epi_grad_case(acts[i], 0, 7, 33, true, false);
        epi_grad_case(acts[i], 0, 300, 64, true, false);
        epi_grad_case(acts[i], 0, 3, 1000, false, false);
    }
    epi_grad_case("relu", 1, 7, 33, true, false);
    epi_grad_case("tanh", 1, 5, 12, true, false);
    epi_grad_case("sigmoid", 1, 5, 4097, true, false);
    epi_grad_case("", 1, 1, 1, true, false);
    epi_grad_case("gelu", 0, 9, 33, true, true);
    epi_grad_case("silu", 0, 5, 4096, true, true);
    for (size_t ik = 0; ik < 2; ik++) { /* dZ over dY, over Z */
        struct gf_node *nd = node("MatMulEpilogueGrad", 2, 2);
        set_str(nd, "activation", "gelu_tanh");
        struct gf_tview in[2] = {frand(-1, 1, DIMS(40, 33)), frand(-5, 5, DIMS(40, 33))};
        struct gf_tview out[2] = {fout(DIMS(40, 33)), fout(DIMS(33))};
        compare_inplace(nd, in, 2, ALL_HOST, out, 2, 0, ik, RTOL, 2e-4);
        release_bufs();
    }
    struct gf_node *nd = node("MatMulEpilogueGrad", 2, 2); /* no rows: dBias 0 */
    struct gf_tview in[2] = {frand(-1, 1, DIMS(0, 5)), frand(-1, 1, DIMS(0, 5))};
    struct gf_tview out[2] = {fout(DIMS(0, 5)), fout(DIMS(5))};
    bt_compare(nd, in, 2, ALL_HOST, out, 2, 0, 0);
}

/* ---- fp16 and bf16 storage ---------------------------------------------------------- */

static const enum gf_dtype halves[2] = {GF_FLOAT16, GF_BFLOAT16};

/* One rounding of dt, relative. */
static double half_rtol(enum gf_dtype dt)
{
    return dt == GF_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
}

/* Random values in [lo, hi) rounded to dt (fp16 or bf16), of a shape. */
static struct gf_tview hrand(enum gf_dtype dt, float lo, float hi, int rank, const int64_t *dims)
{
    struct gf_tview f = frand(lo, hi, rank, dims), t = bt_view(dt, NULL, rank, dims);
    const float *fp = f.data;
    uint16_t *p = keep(malloc(t.nelem * sizeof(uint16_t) + 4));
    for (size_t i = 0; i < t.nelem; i++)
        p[i] = dt == GF_FLOAT16 ? gf_float_to_half(fp[i]) : gf_float_to_bf16(fp[i]);
    t.data = p;
    t.host = p;
    return t;
}

/* An output of dtype dt and a shape. */
static struct gf_tview hout(enum gf_dtype dt, int rank, const int64_t *dims)
{
    return bt_view(dt, NULL, rank, dims);
}

static bool is_half(enum gf_dtype dt)
{
    return dt == GF_FLOAT16 || dt == GF_BFLOAT16;
}

/* The exact fp32 copy of a half view (other views as they are). */
static struct gf_tview widen(const struct gf_tview *h)
{
    if (!is_half(h->dtype))
        return *h;
    struct gf_tview f = *h;
    float *p = keep(malloc(h->nelem * sizeof(float) + 4));
    for (size_t i = 0; i < h->nelem; i++)
        p[i] = (float)bt_elem(h->dtype, h->data, i);
    f.dtype = GF_FLOAT;
    f.data = p;
    f.host = p;
    return f;
}

/* The backend's kernel on half inputs against the CPU's fp32 kernel on their
 * exact widening (the CPU has no half kernel for the backward ops): every
 * element of every output within atol + rtol |fp32 result|. */
static void compare_widened(const struct gf_node *nd, const struct gf_tview *in, size_t n_in,
                            const struct gf_tview *out, size_t n_out, double rtol, double atol)
{
    struct gf_tview win[BT_MAX], wout[BT_MAX];
    void *res[BT_MAX];
    for (size_t i = 0; i < n_in; i++)
        win[i] = widen(&in[i]);
    for (size_t i = 0; i < n_out; i++) {
        wout[i] = out[i];
        wout[i].dtype = is_half(out[i].dtype) ? GF_FLOAT : out[i].dtype;
        wout[i].data = keep(calloc(1, gf_tview_bytes(&wout[i]) + 8));
        wout[i].host = wout[i].data;
    }
    if (bt_run_on(gf_backend_get("cpu"), nd, win, n_in, wout, n_out, NULL) != GF_OK)
        fail_msg("CPU kernel for %s failed: %s", nd->op_type, gf_last_error());
    if (bt_run(nd, in, n_in, ALL_HOST, out, n_out, NULL, res) != GF_OK)
        fail_msg("%s kernel for %s failed: %s", bt_name(), nd->op_type, gf_last_error());
    for (size_t k = 0; k < n_out; k++) {
        for (size_t i = 0; i < out[k].nelem; i++) {
            double w = bt_elem(wout[k].dtype, wout[k].data, i);
            double g = bt_elem(out[k].dtype, res[k], i);
            if (!(fabs(g - w) <= atol + rtol * fabs(w)))
                fail_msg("%s %s %s output %zu element %zu of %zu: %.9g, CPU fp32 %.9g",
                         bt_name(), nd->op_type, gf_dtype_name(out[k].dtype), k, i,
                         out[k].nelem, g, w);
        }
        free(res[k]);
    }
}

/* Norms on half X, R, W, B: against the CPU's half kernel (S rounded to the
 * type before it is normalized, Mean and InvStdDev float). */
static void half_norm_case(const char *op, enum gf_dtype dt, int64_t rows, int64_t n,
                           enum sweep sweep)
{
    bool add = strncmp(op, "Add", 3) == 0, ln = strstr(op, "LayerNorm") != NULL;
    size_t ni = 0, no = 0;
    struct gf_node *nd = node(op, 2 + add + ln, 1 + add + 2 * ln);
    set_float(nd, "epsilon", 1e-5f);
    struct gf_tview in[4], out[4];
    in[ni++] = hrand(dt, -2, 2, DIMS(rows, n));
    if (add)
        in[ni++] = hrand(dt, -1, 1, DIMS(rows, n));
    in[ni++] = hrand(dt, 0.5f, 1.5f, DIMS(n));
    if (ln)
        in[ni++] = hrand(dt, -1, 1, DIMS(n));
    out[no++] = hout(dt, DIMS(rows, n));
    if (add)
        out[no++] = hout(dt, DIMS(rows, n));
    if (ln) {
        out[no++] = fout(DIMS(rows, 1));
        out[no++] = fout(DIMS(rows, 1));
    }
    double rtol = half_rtol(dt), atol = 1e-5;
    bt_expect_space(compare_sweep(nd, in, ni, ALL_HOST, out, no, sweep, rtol, atol),
                    "opencl", norm_configs(sweep));
    release_bufs();
}

static void test_half_norms(void **state)
{
    (void)state;
    need_backend();
    static const char *const ops[] = {"RMSNorm", "AddRMSNorm", "LayerNorm", "AddLayerNorm"};
    /* scalar and float4 rows; rows wider than 256 work-items (5000) are
     * the same loads and stores as 4096's, in another build on PoCL: fp32 */
    static const int64_t lens[] = {1, 7, 33, 1000, 4096};
    for (int h = 0; h < 2; h++)
        for (int o = 0; o < 4; o++)
            for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
                half_norm_case(ops[o], halves[h], 5, lens[i], AUTO);
    half_norm_case("AddRMSNorm", GF_FLOAT16, 3, 1000, EACH);
    half_norm_case("LayerNorm", GF_BFLOAT16, 300, 64, AUTO);
    for (int h = 0; h < 2; h++) { /* W and B expanded over the block [4, 33] (axis -2) */
        struct gf_node *nd = node("LayerNorm", 3, 1);
        set_int(nd, "axis", -2);
        struct gf_tview in[3] = {hrand(halves[h], -2, 2, DIMS(3, 4, 33)),
                                 hrand(halves[h], 0.5f, 1.5f, DIMS(33)),
                                 hrand(halves[h], -1, 1, DIMS(4, 1))};
        struct gf_tview out[1] = {hout(halves[h], DIMS(3, 4, 33))};
        bt_compare(nd, in, 3, ALL_HOST, out, 1, half_rtol(halves[h]), 1e-5);
        release_bufs();
    }
}

/* RMSNormGrad and LayerNormGrad (statistics given as float, or not) on half
 * tensors, against fp32 on their widening: scalar rows (7) and float4
 * rows (1000, 4096), each kernel and each type with both, each kernel with
 * each type on one of them (every pair of the three; with
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 every length with both types). */
static void test_half_norm_grads(void **state)
{
    (void)state;
    need_backend();
    static const int64_t lens[] = {7, 1000, 4096};
    for (int h = 0; h < 2; h++)
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            enum gf_dtype dt = halves[h];
            int64_t n = lens[i], rows = 6;
            double rtol = half_rtol(dt), atol = 1e-5 * (double)rows;
            bool all = bt_all_configs(), scalar = i == 0;
            /* RMSNormGrad: fp16 scalar, bf16 float4; LayerNormGrad the
             * other way round, statistics given on 1000 and bf16's 7 */
            bool stats = i == 1 || (h == 1 && scalar);
            struct gf_tview in[5], out[3];
            struct gf_node *nd;
            if (all || scalar == (h == 0)) {
                nd = node("RMSNormGrad", 3, 2);
                set_float(nd, "epsilon", 1e-5f);
                in[0] = hrand(dt, -1, 1, DIMS(rows, n));
                in[1] = hrand(dt, 0.5f, 2, DIMS(rows, n));
                in[2] = hrand(dt, 0.5f, 1.5f, DIMS(n));
                out[0] = hout(dt, DIMS(rows, n));
                out[1] = hout(dt, DIMS(n));
                compare_widened(nd, in, 3, out, 2, rtol, atol);
                release_bufs();
            }
            if (all || scalar == (h == 1)) {
                nd = node("LayerNormGrad", 5, 3);
                set_float(nd, "epsilon", 1e-5f);
                in[0] = hrand(dt, -1, 1, DIMS(rows, n));
                in[1] = hrand(dt, -2, 3, DIMS(rows, n));
                in[2] = hrand(dt, 0.5f, 1.5f, DIMS(n));
                in[3] = stats ? frand(-0.5f, 0.5f, DIMS(rows, 1)) : NONE;
                in[4] = stats ? frand(0.5f, 2, DIMS(rows, 1)) : NONE;
                out[0] = hout(dt, DIMS(rows, n));
                out[1] = hout(dt, DIMS(n));
                out[2] = hout(dt, DIMS(n));
                compare_widened(nd, in, 5, out, 3, rtol, 4 * atol);
                release_bufs();
            }
        }
}

/* The norms' mixed form (kernels/checks.h: the precision pass's residual
 * add of a 16-bit product): AddRMSNorm / AddLayerNorm of an fp32 X and a
 * half R writing a half Y and an fp32 S, RMSNormGrad / LayerNormGrad of a
 * half dY with an fp32 X, against the CPU (which widens the half input and
 * narrows Y around its fp32 kernel).  (OpenCL has no such kernel: the node
 * runs on the CPU.) */
static void test_norm_mixed(void **state)
{
    (void)state;
    need_backend();
    static const int64_t lens[] = {7, 1000, 4096};
    for (int h = 0; h < 2; h++)
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            enum gf_dtype dt = halves[h];
            int64_t n = lens[i], rows = 6;
            double rtol = half_rtol(dt), atol = 1e-5 * (double)rows;
            for (int ln = 0; ln < 2; ln++) {
                struct gf_node *nd = node(ln ? "AddLayerNorm" : "AddRMSNorm", 3 + ln, 2 + 2 * ln);
                set_float(nd, "epsilon", 1e-5f);
                struct gf_tview in[5] = {frand(-2, 2, DIMS(rows, n)), hrand(dt, -1, 1, DIMS(rows, n)),
                                         frand(0.5f, 1.5f, DIMS(n)), frand(-1, 1, DIMS(n))};
                struct gf_tview out[4] = {hout(dt, DIMS(rows, n)), fout(DIMS(rows, n)),
                                          fout(DIMS(rows, 1)), fout(DIMS(rows, 1))};
                bt_compare(nd, in, 3 + ln, ALL_HOST, out, 2 + 2 * ln, rtol, 1e-5);
                release_bufs();
                nd = node(ln ? "LayerNormGrad" : "RMSNormGrad", 3 + 2 * ln, 2 + ln);
                set_float(nd, "epsilon", 1e-5f);
                in[0] = hrand(dt, -1, 1, DIMS(rows, n));
                in[1] = frand(-2, 3, DIMS(rows, n));
                in[2] = frand(0.5f, 1.5f, DIMS(n));
                in[3] = in[4] = NONE;
                out[0] = fout(DIMS(rows, n));
                out[1] = fout(DIMS(n));
                out[2] = fout(DIMS(n));
                bt_compare(nd, in, 3 + 2 * ln, ALL_HOST, out, 2 + ln, RTOL, atol);
                release_bufs();
            }
            /* RMSNormGrad adding G to dX and writing dX in dY's type too (dXl):
             * AddRMSNorm's backward, mixed and all fp32 */
            for (int mixed = 0; mixed < 2; mixed++) {
                struct gf_node *nd = node("RMSNormGrad", 4, 3);
                set_float(nd, "epsilon", 1e-5f);
                enum gf_dtype lt = mixed ? dt : GF_FLOAT;
                struct gf_tview in[4] = {mixed ? hrand(dt, -1, 1, DIMS(rows, n))
                                               : frand(-1, 1, DIMS(rows, n)),
                                         frand(-2, 3, DIMS(rows, n)), frand(0.5f, 1.5f, DIMS(n)),
                                         frand(-1, 1, DIMS(rows, n))};
                struct gf_tview out[3] = {fout(DIMS(rows, n)), fout(DIMS(n)),
                                          mixed ? hout(lt, DIMS(rows, n)) : fout(DIMS(rows, n))};
                bt_compare(nd, in, 4, ALL_HOST, out, 3, mixed ? rtol : RTOL, atol);
                release_bufs();
            }
        }
}

/* GLUs and RoPE on half tensors against the CPU's half kernels; their
 * gradients and MatMulEpilogueGrad against fp32 on the widening. */
static void test_half_acts(void **state)
{
    (void)state;
    need_backend();
    static const struct {
        const char *op, *approx;
    } forms[] = {{"SwiGLU", NULL}, {"GeGLU", "none"}, {"GeGLU", "tanh"}, {"SiLU", NULL},
                 {"Gelu", NULL}};
    static const int64_t lens[] = {7, 1000, 4097};
    for (int h = 0; h < 2; h++) {
        enum gf_dtype dt = halves[h];
        double rtol = half_rtol(dt);
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
            for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
                bool gated = strstr(forms[f].op, "GLU") != NULL;
                struct gf_node *nd = node(forms[f].op, gated ? 2 : 1, 1);
                if (forms[f].approx)
                    set_str(nd, "approximate", forms[f].approx);
                struct gf_tview in[2] = {hrand(dt, -6, 6, DIMS(3, lens[i])),
                                         i == 0 ? hrand(dt, -2, 2, DIMS(lens[i]))
                                                : hrand(dt, -2, 2, DIMS(3, lens[i]))};
                struct gf_tview out[1] = {hout(dt, DIMS(3, lens[i]))};
                bt_compare(nd, in, gated ? 2 : 1, ALL_HOST, out, 1, rtol, 1e-6);
                release_bufs();
            }
        static const char *const grads[3][2] = {{"SwiGLUGrad", NULL}, {"GeGLUGrad", "none"},
                                                {"GeGLUGrad", "tanh"}};
        for (int f = 0; f < 3; f++)
            for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
                struct gf_node *nd = node(grads[f][0], 3, 2);
                if (grads[f][1])
                    set_str(nd, "approximate", grads[f][1]);
                struct gf_tview in[3] = {hrand(dt, -1, 1, DIMS(3, lens[i])),
                                         hrand(dt, -6, 6, DIMS(3, lens[i])),
                                         hrand(dt, -2, 2, DIMS(3, lens[i]))};
                struct gf_tview out[2] = {hout(dt, DIMS(3, lens[i])),
                                          hout(dt, DIMS(3, lens[i]))};
                compare_widened(nd, in, 3, out, 2, rtol, 1e-5);
                release_bufs();
            }
        for (int o = 0; o < 2; o++) { /* RoPE: half kernel; RoPEGrad: widened */
            struct gf_node *nd = node(o ? "RoPEGrad" : "RoPE", 3, 1);
            struct gf_tview in[3] = {hrand(dt, -2, 2, DIMS(2, 3, 5, 16)),
                                     hrand(dt, -1, 1, DIMS(5, 16)), hrand(dt, -1, 1, DIMS(5, 16))};
            struct gf_tview out[1] = {hout(dt, DIMS(2, 3, 5, 16))};
            if (o)
                compare_widened(nd, in, 3, out, 1, rtol, 1e-5);
            else
                bt_compare(nd, in, 3, ALL_HOST, out, 1, rtol, 1e-5);
            release_bufs();
        }
        struct gf_node *nd = node("MatMulEpilogueGrad", 2, 2);
        set_str(nd, "activation", "gelu");
        set_float(nd, "beta", 0.5f);
        struct gf_tview in[2] = {hrand(dt, -1, 1, DIMS(40, 36)), hrand(dt, -5, 5, DIMS(40, 36))};
        struct gf_tview out[2] = {hout(dt, DIMS(40, 36)), hout(dt, DIMS(36))};
        compare_widened(nd, in, 2, out, 2, rtol, 1e-4);
        release_bufs();
    }
}

/* RoPE and RoPEGrad of a half X with fp32 Cos and Sin (the precision
 * pass's RoPE of a low q, k: docs/precision.md) against fp32 on the widened
 * X, Y rounded once.  (OpenCL has no such kernel: the node runs on the CPU.) */
static void test_half_rope_wide(void **state)
{
    (void)state;
    need_backend();
    for (int h = 0; h < 2; h++)
        for (int o = 0; o < 2; o++) {
            struct gf_node *nd = node(o ? "RoPEGrad" : "RoPE", 3, 1);
            struct gf_tview in[3] = {hrand(halves[h], -2, 2, DIMS(2, 3, 5, 16)),
                                     frand(-1, 1, DIMS(5, 16)), frand(-1, 1, DIMS(1, 5, 16))};
            struct gf_tview out[1] = {hout(halves[h], DIMS(2, 3, 5, 16))};
            compare_widened(nd, in, 3, out, 1, half_rtol(halves[h]), 1e-5);
            release_bufs();
        }
}

/* SoftmaxCrossEntropy (LogP, G), JSD and LinearCrossEntropy on half
 * tensors against the CPU's half kernels; CrossEntropyGrad and JSDGrad
 * against fp32 on the widening; LinearCrossEntropy's gradients refused. */
static void test_half_losses(void **state)
{
    (void)state;
    need_backend();
    for (int h = 0; h < 2; h++) {
        enum gf_dtype dt = halves[h];
        double rtol = half_rtol(dt);
        for (int none = 0; none < 2; none++)
            for (int64_t c = 7; c <= 1000; c += 993) {
                struct gf_node *nd = node("SoftmaxCrossEntropy", 3, 3);
                set_str(nd, "reduction", none ? "none" : "mean");
                set_int(nd, "ignore_index", -1);
                struct gf_tview in[3] = {hrand(dt, -8, 8, DIMS(9, c)),
                                         labels(GF_INT64, (size_t)c, 3, -1, DIMS(9)),
                                         hrand(dt, 0.5f, 2, DIMS(c))};
                struct gf_tview out[3] = {none ? hout(dt, DIMS(9)) : hout(dt, 0, NULL),
                                          hout(dt, DIMS(9, c)), hout(dt, DIMS(9, c))};
                bt_compare(nd, in, 3, ALL_HOST, out, 3, rtol, 1e-5);
                release_bufs();
            }
        /* G alone: the 16-byte vector path (C = 1000) and, on CUDA, rows
         * shared by a cluster of blocks (C = 40000, 80 KB a row) */
        for (int64_t c = 1000; c <= 40000; c += 39000) {
            struct gf_node *nd = node("SoftmaxCrossEntropy", 3, 3);
            set_str(nd, "reduction", c > 1000 ? "sum" : "mean");
            struct gf_tview in[3] = {hrand(dt, -8, 8, DIMS(5, c)),
                                     labels(GF_INT32, (size_t)c, 0, 0, DIMS(5)),
                                     c > 1000 ? hrand(dt, 0.5f, 2, DIMS(c)) : NONE};
            struct gf_tview out[3] = {hout(dt, 0, NULL), NONE, hout(dt, DIMS(5, c))};
            bt_compare(nd, in, 3, ALL_HOST, out, 3, rtol, 1e-6);
            release_bufs();
        }
        struct gf_node *nd = node("JSD", 2, 1);
        set_float(nd, "beta", 0.3f);
        struct gf_tview ji[2] = {hrand(dt, -4, -0.5f, DIMS(5, 33)),
                                 hrand(dt, -4, -0.5f, DIMS(5, 33))};
        struct gf_tview jo[1] = {hout(dt, 0, NULL)};
        bt_compare(nd, ji, 2, ALL_HOST, jo, 1, rtol, 1e-5);
        release_bufs();
        for (int none = 0; none < 2; none++) {
            nd = node("LinearCrossEntropy", 4, 1);
            set_str(nd, "reduction", none ? "none" : "sum");
            set_int(nd, "chunk_rows", 3);
            struct gf_tview li[4] = {hrand(dt, -1, 1, DIMS(7, 33)), hrand(dt, -1, 1, DIMS(33, 100)),
                                     labels(GF_INT32, 100, 0, 0, DIMS(7)),
                                     hrand(dt, -1, 1, DIMS(100))};
            struct gf_tview lo[1] = {none ? hout(dt, DIMS(7)) : hout(dt, 0, NULL)};
            bt_compare(nd, li, 4, ALL_HOST, lo, 1, rtol, 1e-4);
            release_bufs();
        }
        nd = node("CrossEntropyGrad", 2, 1);
        set_str(nd, "reduction", "none");
        struct gf_tview ci[2] = {hrand(dt, -2, 2, DIMS(7)), hrand(dt, -1, 1, DIMS(7, 1000))};
        struct gf_tview co[1] = {hout(dt, DIMS(7, 1000))};
        compare_widened(nd, ci, 2, co, 1, rtol, 1e-6);
        release_bufs();
        nd = node("JSDGrad", 4, 2);
        set_float(nd, "beta", 0.5f);
        struct gf_tview gi[4] = {hrand(dt, 0.5f, 2, DIMS(1)), hrand(dt, -6, 0, DIMS(5, 33)),
                                 hrand(dt, -6, 0, DIMS(5, 33)),
                                 labels(GF_INT32, 5, 3, -100, DIMS(5))};
        struct gf_tview go[2] = {hout(dt, DIMS(5, 33)), hout(dt, DIMS(5, 33))};
        compare_widened(nd, gi, 4, go, 2, rtol, 1e-5);
        release_bufs();
        nd = node("LinearCrossEntropy", 4, 2); /* dH of half H: not on the CPU either */
        struct gf_tview ti[3] = {hrand(dt, -1, 1, DIMS(4, 8)), hrand(dt, -1, 1, DIMS(8, 16)),
                                 labels(GF_INT32, 16, 0, 0, DIMS(4))};
        struct gf_tview to[2] = {hout(dt, 0, NULL), hout(dt, DIMS(4, 8))};
        void *res[2];
        assert_int_equal(bt_run(nd, ti, 3, ALL_HOST, to, 2, NULL, res), GF_ERR_UNSUPPORTED);
        free(res[0]);
        free(res[1]);
        release_bufs();
    }
}

/* ---- errors ---------------------------------------------------------------------------- */

/* Bad input is GF_ERR_INVALID naming the node, never a crash. */
static void expect_invalid(struct gf_node *nd, struct gf_tview *in, size_t n_in, unsigned host,
                           struct gf_tview *out, size_t n_out, const char *needle)
{
    void *res[BT_MAX];
    enum gf_status st = bt_run(nd, in, n_in, host, out, n_out, NULL, res);
    for (size_t i = 0; i < n_out; i++)
        free(res[i]);
    assert_int_equal(st, GF_ERR_INVALID);
    const char *msg = gf_last_error();
    if (!strstr(msg, "n0") || !strstr(msg, needle))
        fail_msg("message '%s' lacks the node or '%s'", msg, needle);
}

static void test_errors(void **state)
{
    (void)state;
    need_backend();
    /* a label out of range: found on the host, and on the device */
    for (unsigned host = 0; host < 2; host++) {
        struct gf_node *nd = node("SoftmaxCrossEntropy", 2, 1);
        struct gf_tview in[2] = {frand(-1, 1, DIMS(6, 5)), labels(GF_INT64, 5, 0, 0, DIMS(6))};
        ((int64_t *)in[1].data)[4] = 9;
        struct gf_tview out[1] = {fout(0, NULL)};
        expect_invalid(nd, in, 2, host ? ALL_HOST : 1u, out, 1, "element 4 is 9");
        release_bufs();
    }
    struct gf_node *nd = node("LinearCrossEntropy", 3, 1);
    struct gf_tview li[3] = {frand(-1, 1, DIMS(4, 3)), frand(-1, 1, DIMS(3, 6)),
                             labels(GF_INT32, 6, 0, 0, DIMS(4))};
    ((int32_t *)li[2].data)[2] = -3;
    struct gf_tview lo[1] = {fout(0, NULL)};
    expect_invalid(nd, li, 3, 1u, lo, 1, "element 2 is -3");
    release_bufs();
    nd = node("RMSNorm", 2, 1);
    set_float(nd, "epsilon", -1);
    struct gf_tview ri[2] = {frand(-1, 1, DIMS(2, 3)), frand(-1, 1, DIMS(3))};
    struct gf_tview ro[1] = {fout(DIMS(2, 3))};
    expect_invalid(nd, ri, 2, ALL_HOST, ro, 1, "epsilon");
    release_bufs();
    nd = node("SwiGLU", 2, 1);
    struct gf_tview si[2] = {frand(-1, 1, DIMS(2, 3)), frand(-1, 1, DIMS(2, 4))};
    struct gf_tview so[1] = {fout(DIMS(2, 3))};
    expect_invalid(nd, si, 2, ALL_HOST, so, 1, "do not broadcast");
    release_bufs();
    nd = node("GeGLUGrad", 3, 2);
    set_str(nd, "approximate", "fast");
    struct gf_tview gi[3] = {frand(-1, 1, DIMS(4)), frand(-1, 1, DIMS(4)), frand(-1, 1, DIMS(4))};
    struct gf_tview go[2] = {fout(DIMS(4)), fout(DIMS(4))};
    expect_invalid(nd, gi, 3, ALL_HOST, go, 2, "approximate");
    release_bufs();
    nd = node("RoPE", 3, 1);
    struct gf_tview pi[3] = {frand(-1, 1, DIMS(2, 5)), frand(-1, 1, DIMS(5)),
                             frand(-1, 1, DIMS(5))};
    struct gf_tview po[1] = {fout(DIMS(2, 5))};
    expect_invalid(nd, pi, 3, ALL_HOST, po, 1, "even length");
}

/* fp64 inputs are left to the CPU: the registry finds no kernel on the backend. */
static void test_declines_double(void **state)
{
    (void)state;
    need_backend();
    struct gf_node *nd = node("SiLU", 1, 1);
    double x[4] = {0};
    struct gf_tview in[1] = {bt_view(GF_DOUBLE, x, DIMS(4))};
    assert_null(gf_kernel_find(bt_backend(), nd, in, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_rmsnorm, teardown),
        cmocka_unit_test_teardown(test_add_rmsnorm, teardown),
        cmocka_unit_test_teardown(test_layernorm, teardown),
        cmocka_unit_test_teardown(test_norm_axis_broadcast, teardown),
        cmocka_unit_test_teardown(test_rmsnorm_grad, teardown),
        cmocka_unit_test_teardown(test_rmsnorm_grad_empty, teardown),
        cmocka_unit_test_teardown(test_activations, teardown),
        cmocka_unit_test_teardown(test_glu_grads, teardown),
        cmocka_unit_test_teardown(test_rope, teardown),
        cmocka_unit_test_teardown(test_cross_entropy, teardown),
        cmocka_unit_test_teardown(test_linear_cross_entropy, teardown),
        cmocka_unit_test_teardown(test_linear_cross_entropy_train, teardown),
        cmocka_unit_test_teardown(test_jsd, teardown),
        cmocka_unit_test_teardown(test_layernorm_grad, teardown),
        cmocka_unit_test_teardown(test_cross_entropy_grad, teardown),
        cmocka_unit_test_teardown(test_jsd_grad, teardown),
        cmocka_unit_test_teardown(test_matmul_epilogue_grad, teardown),
        cmocka_unit_test_teardown(test_half_norms, teardown),
        cmocka_unit_test_teardown(test_half_norm_grads, teardown),
        cmocka_unit_test_teardown(test_norm_mixed, teardown),
        cmocka_unit_test_teardown(test_half_acts, teardown),
        cmocka_unit_test_teardown(test_half_rope_wide, teardown),
        cmocka_unit_test_teardown(test_half_losses, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_declines_double, teardown),
    };
    return bt_run_tests(tests, NULL, NULL);
}
