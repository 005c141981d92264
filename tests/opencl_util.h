/*
 * opencl_util.h — helpers for tests of OpenCL kernels (include from one test
 * file, after <cmocka.h>).  Each OpenCL kernel is checked against the CPU
 * kernel of the same node on the same inputs:
 *
 *     struct gf_backend *cl = oclt_backend();    // NULL: no OpenCL here
 *     if (!cl) skip();
 *     float x[7] = {...};
 *     struct gf_tview in[1] = {oclt_view(GF_FLOAT, x, DIMS(7))};
 *     struct gf_tview out[1] = {oclt_view(GF_FLOAT, NULL, DIMS(7))};
 *     oclt_compare(node, in, 1, 0, out, 1, 1e-5, 1e-6);   // fails the test on a mismatch
 *
 * In oclt_compare, inputs are host tensors (CPU views); each is uploaded
 * into its own cl_mem.  Bit k of `host_mask` set: input k's device view
 * also carries `host` (as the executor gives constants and initializers;
 * shape-like inputs need it).  Outputs are given with dtype and shape only;
 * the helper allocates them on both sides, runs the CPU kernel and the
 * OpenCL kernel (each with its workspace, if declared) and compares every
 * output: |cl - cpu| <= atol + rtol * |cpu|, NaN matching NaN, integer
 * and bool outputs exactly.  The OpenCL status is returned: a test of an
 * error path calls oclt_run_cl() instead and checks the status.
 *
 * Environment: GRAPHFUSE_TEST_NO_OPENCL=1 makes oclt_backend() return NULL
 * (the tests skip); GRAPHFUSE_TEST_DEVICE picks a device by name;
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 makes config sweeps (oclt_compare_configs)
 * run every config instead of a covering subset.  Under
 * `make test-asan` the tests run, with PoCL's own leaks suppressed
 * (tests/lsan.supp).
 */
#ifndef GF_OPENCL_UTIL_H
#define GF_OPENCL_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gf_kernels.h"

#define OCLT_MAX 8

/* The OpenCL backend on its default device (GRAPHFUSE_TEST_DEVICE picks
 * another), or NULL after printing why once. */
static inline struct gf_backend *oclt_backend(void)
{
    static struct gf_backend *be;
    static bool tried;
    if (!tried) {
        tried = true;
        const char *off = getenv("GRAPHFUSE_TEST_NO_OPENCL");
        if (off && *off && strcmp(off, "0") != 0)
            printf("SKIP: OpenCL tests disabled (GRAPHFUSE_TEST_NO_OPENCL)\n");
        else if (gf_backend_open("opencl", getenv("GRAPHFUSE_TEST_DEVICE"), &be) != GF_OK)
            printf("SKIP: %s\n", gf_last_error());
        else
            printf("OpenCL device: %s\n", be->ops->device_name(be));
    }
    return be;
}

/* A view of host data (NULL data: shape only, for outputs). */
static inline struct gf_tview oclt_view(enum gf_dtype t, void *data, int rank,
                                        const int64_t *dims)
{
    struct gf_tview v = {.dtype = t, .data = data, .host = data};
    gf_tview_set_shape(&v, rank, dims);
    return v;
}
#ifndef DIMS
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__}
#endif

/* A device copy of host view h (data: a new cl_mem, NULL when empty);
 * `host` is h's data when with_host. */
static inline struct gf_tview oclt_upload(struct gf_backend *be, const struct gf_tview *h,
                                   bool with_host)
{
    struct gf_tview d = *h;
    size_t bytes = gf_tview_bytes(h);
    d.data = NULL;
    d.host = with_host ? h->data : NULL;
    if (bytes == 0)
        return d;
    d.data = be->ops->alloc(be, bytes);
    if (!d.data)
        fail_msg("OpenCL alloc: %s", gf_last_error());
    if (h->data && be->ops->copy_in(be, d.data, h->data, bytes) != GF_OK)
        fail_msg("OpenCL upload: %s", gf_last_error());
    return d;
}

/* Reads a device view back into host memory (bytes of the view). */
static inline void oclt_download(struct gf_backend *be, const struct gf_tview *d, void *host)
{
    size_t bytes = gf_tview_bytes(d);
    if (bytes && be->ops->copy_out(be, host, d->data, bytes) != GF_OK)
        fail_msg("OpenCL download: %s", gf_last_error());
}

static inline void oclt_free(struct gf_backend *be, struct gf_tview *d)
{
    if (d->data)
        be->ops->release(be, d->data);
    d->data = NULL;
}

/* Runs the kernel `be` has for the node; fails the test when there is none
 * (`supports` declined, or no kernel registered). */
static inline enum gf_status oclt_run_on(struct gf_backend *be, const struct gf_node *n,
                                  const struct gf_tview *in, size_t n_in, struct gf_tview *out,
                                  size_t n_out, const int *config)
{
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k)
        fail_msg("backend %s has no kernel for %s (%s)", be->ops->name, n->op_type,
                 gf_dtype_name(n_in ? in[0].dtype : GF_UNDEFINED));
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
                               .n_threads = 2, .backend = be, .config = config};
    size_t ws = k->workspace ? k->workspace(&a) : 0;
    if (ws)
        a.workspace = be->host_memory ? calloc(1, ws) : be->ops->alloc(be, ws);
    enum gf_status st = k->run(&a);
    if (be->ops->sync(be) != GF_OK && st == GF_OK)
        st = GF_ERR_INTERNAL;
    if (ws && be->host_memory)
        free(a.workspace);
    else if (ws)
        be->ops->release(be, a.workspace);
    return st;
}

/* Uploads host inputs (host_mask as above), allocates device outputs with
 * the shapes of `out`, runs the OpenCL kernel (config: NULL for defaults)
 * and downloads the outputs into host buffers res[k] (malloc'd, the
 * caller frees).  Returns the kernel's status. */
static inline enum gf_status oclt_run_cl(const struct gf_node *n, const struct gf_tview *in,
                                  size_t n_in, unsigned host_mask, const struct gf_tview *out,
                                  size_t n_out, const int *config, void **res)
{
    struct gf_backend *be = oclt_backend();
    struct gf_tview din[OCLT_MAX], dout[OCLT_MAX];
    assert_true(n_in <= OCLT_MAX && n_out <= OCLT_MAX);
    for (size_t i = 0; i < n_in; i++)
        din[i] = oclt_upload(be, &in[i], (host_mask >> i) & 1);
    for (size_t i = 0; i < n_out; i++) {
        struct gf_tview h = out[i];
        h.data = NULL;
        dout[i] = oclt_upload(be, &h, false);
    }
    enum gf_status st = oclt_run_on(be, n, din, n_in, dout, n_out, config);
    for (size_t i = 0; i < n_out; i++) {
        res[i] = calloc(1, gf_tview_bytes(&out[i]) + 8);
        if (st == GF_OK)
            oclt_download(be, &dout[i], res[i]);
        oclt_free(be, &dout[i]);
    }
    for (size_t i = 0; i < n_in; i++)
        oclt_free(be, &din[i]);
    return st;
}

static inline double oclt_elem(enum gf_dtype t, const void *p, size_t i)
{
    struct gf_tensor tmp = {.dtype = t, .nelem = i + 1, .data = (void *)p};
    return gf_tensor_get_f64(&tmp, i);
}

/* The config a sweep is running, named by a failing comparison ("" outside
 * sweeps: the config given, or the default). */
static char oclt_config_name[256];

static inline void oclt_name_config(const struct gf_kernel *k, const int *cfg)
{
    size_t len = 0;
    oclt_config_name[0] = 0;
    for (size_t i = 0; cfg && i < k->n_knobs && len < sizeof(oclt_config_name); i++)
        len += (size_t)snprintf(oclt_config_name + len, sizeof(oclt_config_name) - len,
                                "%s%s=%d", i ? " " : "config ", k->knobs[i].name, cfg[i]);
}

/* Compares output k of both backends; fails the test naming the first bad
 * element (and the config of a sweep). */
static inline void oclt_check(const struct gf_node *n, size_t k, const struct gf_tview *o,
                       const void *want, const void *got, double rtol, double atol)
{
    bool exact = o->dtype != GF_FLOAT && o->dtype != GF_DOUBLE && o->dtype != GF_FLOAT16 &&
                 o->dtype != GF_BFLOAT16;
    for (size_t i = 0; i < o->nelem; i++) {
        double w = oclt_elem(o->dtype, want, i), g = oclt_elem(o->dtype, got, i);
        if (isnan(w) && isnan(g))
            continue;
        bool ok = exact ? w == g : (w == g || fabs(g - w) <= atol + rtol * fabs(w));
        if (!ok)
            fail_msg("%s output %zu element %zu of %zu%s%s: OpenCL %.9g, CPU %.9g",
                     n->op_type, k, i, o->nelem, *oclt_config_name ? ", " : "",
                     oclt_config_name, g, w);
    }
}

/* The CPU kernel and the OpenCL kernel (config NULL: defaults) on the same
 * node and inputs; every output compared.  Returns the OpenCL status (the
 * CPU kernel must succeed, and so must OpenCL for outputs to be compared). */
static inline enum gf_status oclt_compare_cfg(const struct gf_node *n, const struct gf_tview *in,
                                       size_t n_in, unsigned host_mask,
                                       const struct gf_tview *out, size_t n_out,
                                       const int *config, double rtol, double atol)
{
    struct gf_tview cout[OCLT_MAX];
    void *res[OCLT_MAX];
    assert_true(n_out <= OCLT_MAX);
    for (size_t i = 0; i < n_out; i++) {
        cout[i] = out[i];
        cout[i].data = calloc(1, gf_tview_bytes(&out[i]) + 8);
        cout[i].host = cout[i].data;
    }
    enum gf_status st = oclt_run_on(gf_backend_get("cpu"), n, in, n_in, cout, n_out, NULL);
    if (st != GF_OK)
        fail_msg("CPU kernel for %s failed: %s", n->op_type, gf_last_error());
    st = oclt_run_cl(n, in, n_in, host_mask, out, n_out, config, res);
    if (st != GF_OK)
        fail_msg("OpenCL kernel for %s failed%s%s: %s", n->op_type, *oclt_config_name ? ", " : "",
                 oclt_config_name, gf_last_error());
    for (size_t i = 0; i < n_out; i++) {
        oclt_check(n, i, &out[i], cout[i].data, res[i], rtol, atol);
        free(cout[i].data);
        free(res[i]);
    }
    return st;
}

static inline enum gf_status oclt_compare(const struct gf_node *n, const struct gf_tview *in,
                                   size_t n_in, unsigned host_mask,
                                   const struct gf_tview *out, size_t n_out, double rtol,
                                   double atol)
{
    return oclt_compare_cfg(n, in, n_in, host_mask, out, n_out, NULL, rtol, atol);
}

/* ---- config sweeps ------------------------------------------------------------------
 *
 * A sweep of a kernel's knob space runs a covering subset of it by default:
 * the default config (values[0] of every knob) first, then, greedily, the
 * config covering the most pairs not yet run (value a of knob i together
 * with value b of knob j), until every such pair has run in some config —
 * "all-pairs" coverage, so every value of every knob runs too, and so
 * does every interaction of two knobs.  A space of one or two knobs is run
 * whole.  A kernel's configs are its own compiled programs on most knobs
 * (each a program build, and on PoCL a compile per work-group size), so
 * this is what keeps the tests' compile time bounded on a CPU device:
 * 384 configs of the norm kernels become 18, 100 of Attention 25.
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 runs every config of the cross product
 * (what the GPU machine runs). */

#define OCLT_MAX_KNOBS 16
#define OCLT_MAX_VALUES 16

static inline bool oclt_all_configs(void)
{
    const char *e = getenv("GRAPHFUSE_TEST_ALL_CONFIGS");
    return e && *e && strcmp(e, "0") != 0;
}

/* Configs of k: the product of its knobs' value counts (1 without knobs). */
static inline size_t oclt_space_size(const struct gf_kernel *k)
{
    size_t n = 1;
    for (size_t i = 0; i < k->n_knobs; i++)
        n *= (size_t)k->knobs[i].n_values;
    return n;
}

/* The value indices of config c of k (knob 0 varies fastest; 0: defaults). */
static inline void oclt_config_idx(const struct gf_kernel *k, size_t c, int *idx)
{
    for (size_t i = 0; i < k->n_knobs; i++) {
        idx[i] = (int)(c % (size_t)k->knobs[i].n_values);
        c /= (size_t)k->knobs[i].n_values;
    }
}

/* Config c of k as knob values into cfg[k->n_knobs]. */
static inline void oclt_config_at(const struct gf_kernel *k, size_t c, int *cfg)
{
    int idx[OCLT_MAX_KNOBS];
    oclt_config_idx(k, c, idx);
    for (size_t i = 0; i < k->n_knobs; i++)
        cfg[i] = k->knobs[i].values[idx[i]];
}

/* The configs a sweep of k runs (above), as config numbers into
 * out[0..max); returns how many.  Every value pair of two knobs is checked
 * to be in one of them. */
static inline size_t oclt_sweep(const struct gf_kernel *k, size_t *out, size_t max)
{
    size_t space = oclt_space_size(k), n = 0, nk = k->n_knobs;
    assert_true(nk <= OCLT_MAX_KNOBS);
    for (size_t i = 0; i < nk; i++)
        assert_true(k->knobs[i].n_values >= 1 && k->knobs[i].n_values <= OCLT_MAX_VALUES);
    if (oclt_all_configs() || nk <= 2) {
        assert_true(space <= max);
        for (size_t c = 0; c < space; c++)
            out[n++] = c;
        return n;
    }
    /* covered[i][j][a][b]: value a of knob i with value b of knob j (i < j) */
    static bool covered[OCLT_MAX_KNOBS][OCLT_MAX_KNOBS][OCLT_MAX_VALUES][OCLT_MAX_VALUES];
    memset(covered, 0, sizeof(covered));
    size_t left = 0;
    for (size_t i = 0; i < nk; i++)
        for (size_t j = i + 1; j < nk; j++)
            left += (size_t)k->knobs[i].n_values * (size_t)k->knobs[j].n_values;
    int idx[OCLT_MAX_KNOBS];
    for (size_t best = 0; left > 0;) { /* best: the default first */
        oclt_config_idx(k, best, idx);
        for (size_t i = 0; i < nk; i++)
            for (size_t j = i + 1; j < nk; j++)
                if (!covered[i][j][idx[i]][idx[j]]) {
                    covered[i][j][idx[i]][idx[j]] = true;
                    left--;
                }
        assert_true(n < max);
        out[n++] = best;
        size_t gain_best = 0;
        for (size_t c = 0; c < space && left > 0; c++) {
            oclt_config_idx(k, c, idx);
            size_t gain = 0;
            for (size_t i = 0; i < nk; i++)
                for (size_t j = i + 1; j < nk; j++)
                    gain += !covered[i][j][idx[i]][idx[j]];
            if (gain > gain_best) {
                gain_best = gain;
                best = c;
            }
        }
    }
    return n;
}

/* The OpenCL kernel for node n on these inputs (host_mask as in
 * oclt_compare); fails the test when there is none. */
static inline const struct gf_kernel *oclt_kernel_for(const struct gf_node *n,
                                                      const struct gf_tview *in, size_t n_in,
                                                      unsigned host_mask)
{
    struct gf_tview din[OCLT_MAX];
    assert_true(n_in <= OCLT_MAX);
    for (size_t i = 0; i < n_in; i++) {
        din[i] = in[i];
        din[i].host = (host_mask >> i) & 1 ? in[i].data : NULL;
    }
    const struct gf_kernel *k = gf_kernel_find(oclt_backend(), n, din, n_in);
    if (!k)
        fail_msg("no OpenCL kernel for %s", n->op_type);
    return k;
}

/* The sweep of the OpenCL kernel's knob space (above: a covering subset,
 * or with GRAPHFUSE_TEST_ALL_CONFIGS=1 every config), each config compared
 * as in oclt_compare.  Returns the size of the knob space (the cross
 * product, however much of it ran). */
static inline int oclt_compare_configs(const struct gf_node *n, const struct gf_tview *in,
                                       size_t n_in, unsigned host_mask,
                                       const struct gf_tview *out, size_t n_out, double rtol,
                                       double atol)
{
    const struct gf_kernel *k = oclt_kernel_for(n, in, n_in, host_mask);
    static size_t sweep[4096];
    size_t runs = oclt_sweep(k, sweep, sizeof(sweep) / sizeof(sweep[0]));
    for (size_t r = 0; r < runs; r++) {
        int cfg[OCLT_MAX_KNOBS];
        oclt_config_at(k, sweep[r], cfg);
        oclt_name_config(k, cfg);
        oclt_compare_cfg(n, in, n_in, host_mask, out, n_out, k->n_knobs ? cfg : NULL, rtol,
                         atol);
    }
    oclt_config_name[0] = 0;
    return (int)oclt_space_size(k);
}

/* Deterministic pseudo-random floats in [lo, hi). */
static inline void oclt_fill(float *x, size_t n, float lo, float hi, unsigned seed)
{
    unsigned s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
}

#endif /* GF_OPENCL_UTIL_H */
