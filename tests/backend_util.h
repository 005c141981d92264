/*
 * backend_util.h — helpers for tests that check a backend's kernels against
 * the CPU's (include from one test file, after <cmocka.h>).  The backend
 * under test is a parameter: a test group runs once per available backend
 * other than the CPU (the reference), and every kernel is checked against
 * the CPU kernel of the same node on the same inputs:
 *
 *     static void test_exp(void **state)
 *     {
 *         float x[7] = {...};
 *         struct gf_tview in[1] = {bt_view(GF_FLOAT, x, DIMS(7))};
 *         struct gf_tview out[1] = {bt_view(GF_FLOAT, NULL, DIMS(7))};
 *         bt_compare(node, in, 1, 0, out, 1, 1e-5, 1e-6); // fails the test on a mismatch
 *     }
 *     int main(void)
 *     {
 *         const struct CMUnitTest tests[] = {cmocka_unit_test(test_exp)};
 *         return bt_run_tests(tests, NULL, NULL);     // once per backend
 *     }
 *
 * In bt_compare, inputs are host tensors (CPU views); each is uploaded
 * into its own block of the backend under test.  Bit k of `host_mask` set:
 * input k's device view also carries `host` (as the executor gives
 * constants and initializers; shape-like inputs need it).  Outputs are
 * given with dtype and shape only; the helper allocates them on both
 * sides, runs the CPU kernel and the backend's kernel (each with its
 * workspace, if declared) and compares every output: |be - cpu| <= atol +
 * rtol * |cpu|, NaN matching NaN, integer and bool outputs exactly.  A
 * node the backend has no kernel for is "not supported": counted (the
 * group prints them), not failed, and bt_compare returns
 * GF_ERR_UNSUPPORTED; a test of an error path calls bt_run() instead and
 * checks the status (it skips the test when the backend lacks the kernel).
 *
 * Environment: GRAPHFUSE_TEST_BACKEND=NAME tests that backend only (an
 * error when it cannot be opened); GRAPHFUSE_TEST_NO_OPENCL=1 leaves
 * OpenCL out; GRAPHFUSE_TEST_DEVICE picks a device by name;
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 makes config sweeps (bt_compare_configs)
 * run every config instead of a covering subset.  A backend that is
 * unavailable here (not built, no driver, no device) is skipped with one
 * "SKIP: ..." line.  Under `make test-asan` the tests run, with the
 * OpenCL runtime's own leaks suppressed (tests/lsan.supp).
 */
#ifndef GF_BACKEND_UTIL_H
#define GF_BACKEND_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gf_kernels.h"

#define BT_MAX 8
#define BT_MAX_BACKENDS 8

/* The backend under test (set by bt_run_group while its tests run). */
static struct gf_backend *bt_cur;

static inline struct gf_backend *bt_backend(void)
{
    return bt_cur;
}

static inline const char *bt_name(void)
{
    return bt_cur ? bt_cur->ops->name : "none";
}

static inline bool bt_is(const char *name)
{
    return bt_cur && strcmp(bt_cur->ops->name, name) == 0;
}

static inline bool bt_env_on(const char *var)
{
    const char *e = getenv(var);
    return e && *e && strcmp(e, "0") != 0;
}

/* The backends to test, opened once: every backend the registry lists but
 * the CPU, less those GRAPHFUSE_TEST_BACKEND / GRAPHFUSE_TEST_NO_OPENCL
 * leave out; one unavailable here is skipped, printing why once.  Returns
 * how many; *bad is set when a backend asked for by name cannot run. */
static inline size_t bt_backends(struct gf_backend **out, bool *bad)
{
    static struct gf_backend *list[BT_MAX_BACKENDS];
    static size_t n;
    static bool tried, failed;
    if (!tried) {
        tried = true;
        const char *only = getenv("GRAPHFUSE_TEST_BACKEND");
        if (only && !*only)
            only = NULL;
        bool found = false;
        for (size_t i = 0; gf_backend_name(i) && n < BT_MAX_BACKENDS; i++) {
            const char *name = gf_backend_name(i);
            if (only && strcmp(only, name) != 0)
                continue;
            found = true;
            struct gf_backend *be = NULL;
            if (strcmp(name, "cpu") == 0) { /* the reference */
                if (only)
                    printf("SKIP: cpu: it is the reference the others are compared with\n");
            } else if (strcmp(name, "opencl") == 0 && bt_env_on("GRAPHFUSE_TEST_NO_OPENCL"))
                printf("SKIP: opencl: disabled (GRAPHFUSE_TEST_NO_OPENCL)\n");
            else if (gf_backend_open(name, getenv("GRAPHFUSE_TEST_DEVICE"), &be) != GF_OK) {
                printf("SKIP: %s: %s\n", name, gf_last_error());
                failed |= only != NULL;
            } else {
                printf("backend %s: device %s\n", name, be->ops->device_name(be));
                list[n++] = be;
            }
        }
        if (only && !found) {
            printf("GRAPHFUSE_TEST_BACKEND=%s: no such backend\n", only);
            failed = true;
        }
        if (n == 0)
            printf("SKIP: no backend besides the CPU to test here\n");
    }
    for (size_t i = 0; out && i < n; i++)
        out[i] = list[i];
    if (bad)
        *bad = failed;
    return n;
}

/* The backend `name` when it is one to test here (bt_backends), else NULL:
 * for the tests of one backend's own internals (test_opencl_core.c). */
static inline struct gf_backend *bt_only(const char *name)
{
    struct gf_backend *bes[BT_MAX_BACKENDS];
    size_t n = bt_backends(bes, NULL);
    for (size_t i = 0; i < n; i++)
        if (strcmp(bes[i]->ops->name, name) == 0)
            return bes[i];
    return NULL;
}

/* ---- what ran, and what the backend under test lacks --------------------------------
 * bt_used[b][op]: bit t set when a kernel of backend b (index in
 * bt_backends) ran op with input 0 of dtype t; bt_unsupported[b]: cases
 * with no kernel on b. */

static unsigned bt_used[BT_MAX_BACKENDS][GF_OP_COUNT];
static unsigned bt_unsupported[BT_MAX_BACKENDS];
static size_t bt_cur_index;

static inline void bt_note_unsupported(const struct gf_node *n, const struct gf_tview *in,
                                       size_t n_in)
{
    static unsigned seen[BT_MAX_BACKENDS][GF_OP_COUNT];
    enum gf_dtype t = n_in ? in[0].dtype : GF_UNDEFINED;
    bt_unsupported[bt_cur_index]++;
    if (!(seen[bt_cur_index][n->op] & (1u << t))) {
        seen[bt_cur_index][n->op] |= 1u << t;
        printf("not supported on %s: %s (%s)\n", bt_name(), n->op_type, gf_dtype_name(t));
    }
}

/* Runs every test of the group once per backend to test (bt_backends), with
 * bt_backend() that backend; without one, prints why and passes. */
static inline int bt_run_group(const char *name, const struct CMUnitTest *tests, size_t n,
                               CMFixtureFunction setup, CMFixtureFunction teardown)
{
    struct gf_backend *bes[BT_MAX_BACKENDS];
    bool bad;
    size_t nb = bt_backends(bes, &bad);
    int rc = bad ? 1 : 0;
    for (size_t b = 0; b < nb; b++) {
        char group[256];
        bt_cur = bes[b];
        bt_cur_index = b;
        snprintf(group, sizeof(group), "%s on %s", name, bt_name());
        rc |= _cmocka_run_group_tests(group, tests, n, setup, teardown);
        if (bt_unsupported[b])
            printf("%s: %u comparisons not supported on %s (no kernel; they run on the CPU)\n",
                   name, bt_unsupported[b], bt_name());
    }
    bt_cur = NULL;
    return rc;
}
#define bt_run_tests(tests, setup, teardown)                                                     \
    bt_run_group(#tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

/* Skips the current test when there is no backend under test. */
static inline void need_backend(void)
{
    if (!bt_cur)
        skip();
}

/* A view of host data (NULL data: shape only, for outputs). */
static inline struct gf_tview bt_view(enum gf_dtype t, void *data, int rank,
                                      const int64_t *dims)
{
    struct gf_tview v = {.dtype = t, .data = data, .host = data};
    gf_tview_set_shape(&v, rank, dims);
    return v;
}
#ifndef DIMS
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__}
#endif

/* A device copy of host view h (data: a new block, NULL when empty);
 * `host` is h's data when with_host. */
static inline struct gf_tview bt_upload(struct gf_backend *be, const struct gf_tview *h,
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
        fail_msg("%s alloc: %s", be->ops->name, gf_last_error());
    if (h->data && be->ops->copy_in(be, d.data, h->data, bytes) != GF_OK)
        fail_msg("%s upload: %s", be->ops->name, gf_last_error());
    return d;
}

/* Reads a device view back into host memory (bytes of the view). */
static inline void bt_download(struct gf_backend *be, const struct gf_tview *d, void *host)
{
    size_t bytes = gf_tview_bytes(d);
    if (bytes && be->ops->copy_out(be, host, d->data, bytes) != GF_OK)
        fail_msg("%s download: %s", be->ops->name, gf_last_error());
}

static inline void bt_free(struct gf_backend *be, struct gf_tview *d)
{
    if (d->data)
        be->ops->release(be, d->data);
    d->data = NULL;
}

/* Runs the kernel `be` has for the node.  None (`supports` declined, or no
 * kernel registered): the CPU fails the test; another backend gives
 * GF_ERR_UNSUPPORTED, the case counted as not supported. */
static inline enum gf_status bt_run_on(struct gf_backend *be, const struct gf_node *n,
                                       const struct gf_tview *in, size_t n_in,
                                       struct gf_tview *out, size_t n_out, const int *config)
{
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k && be->host_memory)
        fail_msg("backend %s has no kernel for %s (%s)", be->ops->name, n->op_type,
                 gf_dtype_name(n_in ? in[0].dtype : GF_UNDEFINED));
    if (!k) {
        bt_note_unsupported(n, in, n_in);
        return GF_ERR_UNSUPPORTED;
    }
    if (be == bt_cur && n->op > 0 && n->op < GF_OP_COUNT)
        bt_used[bt_cur_index][n->op] |= 1u << (n_in ? in[0].dtype : 0);
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

/* Whether the backend under test has a kernel for the node on these
 * inputs (host_mask as in bt_compare). */
static inline bool bt_has_kernel(const struct gf_node *n, const struct gf_tview *in,
                                 size_t n_in, unsigned host_mask)
{
    struct gf_tview din[BT_MAX];
    assert_true(n_in <= BT_MAX);
    for (size_t i = 0; i < n_in; i++) {
        din[i] = in[i];
        din[i].host = (host_mask >> i) & 1 ? in[i].data : NULL;
    }
    return bt_cur && gf_kernel_find(bt_cur, n, din, n_in) != NULL;
}

/* Uploads host inputs (host_mask as above), allocates device outputs with
 * the shapes of `out`, runs the kernel of the backend under test (config:
 * NULL for defaults) and downloads the outputs into host buffers res[k]
 * (malloc'd, the caller frees).  Returns the kernel's status
 * (GF_ERR_UNSUPPORTED: no kernel; res still allocated). */
static inline enum gf_status bt_run_dev(const struct gf_node *n, const struct gf_tview *in,
                                        size_t n_in, unsigned host_mask,
                                        const struct gf_tview *out, size_t n_out,
                                        const int *config, void **res)
{
    struct gf_backend *be = bt_cur;
    struct gf_tview din[BT_MAX], dout[BT_MAX];
    assert_non_null(be);
    assert_true(n_in <= BT_MAX && n_out <= BT_MAX);
    for (size_t i = 0; i < n_in; i++)
        din[i] = bt_upload(be, &in[i], (host_mask >> i) & 1);
    for (size_t i = 0; i < n_out; i++) {
        struct gf_tview h = out[i];
        h.data = NULL;
        dout[i] = bt_upload(be, &h, false);
    }
    enum gf_status st = bt_run_on(be, n, din, n_in, dout, n_out, config);
    for (size_t i = 0; i < n_out; i++) {
        res[i] = calloc(1, gf_tview_bytes(&out[i]) + 8);
        if (st == GF_OK)
            bt_download(be, &dout[i], res[i]);
        bt_free(be, &dout[i]);
    }
    for (size_t i = 0; i < n_in; i++)
        bt_free(be, &din[i]);
    return st;
}

/* bt_run_dev for tests of error paths: skips the test when the backend
 * under test has no kernel for the node (nothing to check there). */
static inline enum gf_status bt_run(const struct gf_node *n, const struct gf_tview *in,
                                    size_t n_in, unsigned host_mask, const struct gf_tview *out,
                                    size_t n_out, const int *config, void **res)
{
    if (!bt_has_kernel(n, in, n_in, host_mask)) {
        bt_note_unsupported(n, in, n_in);
        skip();
    }
    return bt_run_dev(n, in, n_in, host_mask, out, n_out, config, res);
}

static inline double bt_elem(enum gf_dtype t, const void *p, size_t i)
{
    struct gf_tensor tmp = {.dtype = t, .nelem = i + 1, .data = (void *)p};
    return gf_tensor_get_f64(&tmp, i);
}

/* The case and the config a comparison is running, named by a failing
 * comparison ("" when not set: the config given, or the default). */
static char bt_case_name[256];
static char bt_config_name[256];

static inline void bt_name_config(const struct gf_kernel *k, const int *cfg)
{
    size_t len = 0;
    bt_config_name[0] = 0;
    for (size_t i = 0; cfg && i < k->n_knobs && len < sizeof(bt_config_name); i++)
        len += (size_t)snprintf(bt_config_name + len, sizeof(bt_config_name) - len,
                                "%s%s=%d", i ? " " : "config ", k->knobs[i].name, cfg[i]);
}

/* Compares output k of both backends; fails the test naming the backend,
 * the case, the op, the first bad element and the config of a sweep. */
static inline void bt_check(const struct gf_node *n, size_t k, const struct gf_tview *o,
                            const void *want, const void *got, double rtol, double atol)
{
    bool exact = o->dtype != GF_FLOAT && o->dtype != GF_DOUBLE && o->dtype != GF_FLOAT16 &&
                 o->dtype != GF_BFLOAT16;
    for (size_t i = 0; i < o->nelem; i++) {
        double w = bt_elem(o->dtype, want, i), g = bt_elem(o->dtype, got, i);
        if (isnan(w) && isnan(g))
            continue;
        bool ok = exact ? w == g : (w == g || fabs(g - w) <= atol + rtol * fabs(w));
        if (!ok)
            fail_msg("%s%s%s %s output %zu element %zu of %zu%s%s: %s %.9g, CPU %.9g",
                     bt_name(), *bt_case_name ? " " : "", bt_case_name, n->op_type, k, i,
                     o->nelem, *bt_config_name ? ", " : "", bt_config_name, bt_name(), g, w);
    }
}

/* The CPU kernel and the kernel of the backend under test (config NULL:
 * defaults) on the same node and inputs; every output compared.  Returns
 * the backend's status (the CPU kernel must succeed, and so must the
 * backend for outputs to be compared; GF_ERR_UNSUPPORTED: no kernel there,
 * nothing compared). */
static inline enum gf_status bt_compare_cfg(const struct gf_node *n, const struct gf_tview *in,
                                            size_t n_in, unsigned host_mask,
                                            const struct gf_tview *out, size_t n_out,
                                            const int *config, double rtol, double atol)
{
    struct gf_tview cout[BT_MAX];
    void *res[BT_MAX];
    assert_true(n_out <= BT_MAX);
    if (!bt_has_kernel(n, in, n_in, host_mask)) {
        bt_note_unsupported(n, in, n_in);
        return GF_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < n_out; i++) {
        cout[i] = out[i];
        cout[i].data = calloc(1, gf_tview_bytes(&out[i]) + 8);
        cout[i].host = cout[i].data;
    }
    enum gf_status st = bt_run_on(gf_backend_get("cpu"), n, in, n_in, cout, n_out, NULL);
    if (st != GF_OK)
        fail_msg("CPU kernel for %s%s%s failed: %s", n->op_type, *bt_case_name ? " " : "",
                 bt_case_name, gf_last_error());
    st = bt_run_dev(n, in, n_in, host_mask, out, n_out, config, res);
    if (st != GF_OK)
        fail_msg("%s kernel for %s%s%s failed%s%s: %s", bt_name(), n->op_type,
                 *bt_case_name ? " " : "", bt_case_name, *bt_config_name ? ", " : "",
                 bt_config_name, gf_last_error());
    for (size_t i = 0; i < n_out; i++) {
        bt_check(n, i, &out[i], cout[i].data, res[i], rtol, atol);
        free(cout[i].data);
        free(res[i]);
    }
    return st;
}

static inline enum gf_status bt_compare(const struct gf_node *n, const struct gf_tview *in,
                                        size_t n_in, unsigned host_mask,
                                        const struct gf_tview *out, size_t n_out, double rtol,
                                        double atol)
{
    return bt_compare_cfg(n, in, n_in, host_mask, out, n_out, NULL, rtol, atol);
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
 * (on OpenCL each a program build, and on PoCL a compile per work-group
 * size), so this is what keeps the tests' compile time bounded on a CPU
 * device: 384 configs of the norm kernels become 18, 100 of Attention 25.
 * GRAPHFUSE_TEST_ALL_CONFIGS=1 runs every config of the cross product
 * (what the GPU machine runs). */

#define BT_MAX_KNOBS 16
#define BT_MAX_VALUES 16

static inline bool bt_all_configs(void)
{
    return bt_env_on("GRAPHFUSE_TEST_ALL_CONFIGS");
}

/* Configs of k: the product of its knobs' value counts (1 without knobs). */
static inline size_t bt_space_size(const struct gf_kernel *k)
{
    size_t n = 1;
    for (size_t i = 0; i < k->n_knobs; i++)
        n *= (size_t)k->knobs[i].n_values;
    return n;
}

/* The value indices of config c of k (knob 0 varies fastest; 0: defaults). */
static inline void bt_config_idx(const struct gf_kernel *k, size_t c, int *idx)
{
    for (size_t i = 0; i < k->n_knobs; i++) {
        idx[i] = (int)(c % (size_t)k->knobs[i].n_values);
        c /= (size_t)k->knobs[i].n_values;
    }
}

/* Config c of k as knob values into cfg[k->n_knobs]. */
static inline void bt_config_at(const struct gf_kernel *k, size_t c, int *cfg)
{
    int idx[BT_MAX_KNOBS];
    bt_config_idx(k, c, idx);
    for (size_t i = 0; i < k->n_knobs; i++)
        cfg[i] = k->knobs[i].values[idx[i]];
}

/* The configs a sweep of k runs (above), as config numbers into
 * out[0..max); returns how many.  Every value pair of two knobs is checked
 * to be in one of them. */
static inline size_t bt_sweep(const struct gf_kernel *k, size_t *out, size_t max)
{
    size_t space = bt_space_size(k), n = 0, nk = k->n_knobs;
    assert_true(nk <= BT_MAX_KNOBS);
    for (size_t i = 0; i < nk; i++)
        assert_true(k->knobs[i].n_values >= 1 && k->knobs[i].n_values <= BT_MAX_VALUES);
    if (bt_all_configs() || nk <= 2) {
        assert_true(space <= max);
        for (size_t c = 0; c < space; c++)
            out[n++] = c;
        return n;
    }
    /* covered[i][j][a][b]: value a of knob i with value b of knob j (i < j) */
    static bool covered[BT_MAX_KNOBS][BT_MAX_KNOBS][BT_MAX_VALUES][BT_MAX_VALUES];
    memset(covered, 0, sizeof(covered));
    size_t left = 0;
    for (size_t i = 0; i < nk; i++)
        for (size_t j = i + 1; j < nk; j++)
            left += (size_t)k->knobs[i].n_values * (size_t)k->knobs[j].n_values;
    int idx[BT_MAX_KNOBS];
    for (size_t best = 0; left > 0;) { /* best: the default first */
        bt_config_idx(k, best, idx);
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
            bt_config_idx(k, c, idx);
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

/* The kernel of the backend under test for node n on these inputs
 * (host_mask as in bt_compare), or NULL (counted as not supported). */
static inline const struct gf_kernel *bt_kernel_for(const struct gf_node *n,
                                                    const struct gf_tview *in, size_t n_in,
                                                    unsigned host_mask)
{
    struct gf_tview din[BT_MAX];
    assert_true(n_in <= BT_MAX);
    for (size_t i = 0; i < n_in; i++) {
        din[i] = in[i];
        din[i].host = (host_mask >> i) & 1 ? in[i].data : NULL;
    }
    const struct gf_kernel *k = bt_cur ? gf_kernel_find(bt_cur, n, din, n_in) : NULL;
    if (!k)
        bt_note_unsupported(n, in, n_in);
    return k;
}

/* The sweep of the backend's kernel's knob space (above: a covering
 * subset, or with GRAPHFUSE_TEST_ALL_CONFIGS=1 every config), each config
 * compared as in bt_compare.  Returns the size of the knob space (the
 * cross product, however much of it ran); 0 when the backend has no
 * kernel for the node. */
static inline int bt_compare_configs(const struct gf_node *n, const struct gf_tview *in,
                                     size_t n_in, unsigned host_mask,
                                     const struct gf_tview *out, size_t n_out, double rtol,
                                     double atol)
{
    const struct gf_kernel *k = bt_kernel_for(n, in, n_in, host_mask);
    if (!k)
        return 0;
    static size_t sweep[4096];
    size_t runs = bt_sweep(k, sweep, sizeof(sweep) / sizeof(sweep[0]));
    for (size_t r = 0; r < runs; r++) {
        int cfg[BT_MAX_KNOBS];
        bt_config_at(k, sweep[r], cfg);
        bt_name_config(k, cfg);
        bt_compare_cfg(n, in, n_in, host_mask, out, n_out, k->n_knobs ? cfg : NULL, rtol,
                       atol);
    }
    bt_config_name[0] = 0;
    return (int)bt_space_size(k);
}

/* A config space's size as a backend's kernel declares it: checked on
 * `backend` (whose knobs the number is), on another backend only that the
 * sweep ran (or that the backend lacks the kernel: 0). */
static inline void bt_expect_space(int got, const char *backend, int want)
{
    if (bt_is(backend))
        assert_int_equal(got, want);
    else
        assert_true(got >= 0);
}

/* Deterministic pseudo-random floats in [lo, hi). */
static inline void bt_fill(float *x, size_t n, float lo, float hi, unsigned seed)
{
    unsigned s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
}

#endif /* GF_BACKEND_UTIL_H */
