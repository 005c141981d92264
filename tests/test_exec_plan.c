/*
 * The session's planner (executor/session.c) on every backend built in:
 *
 * - tune sites: the nodes `graphfuse tune` tunes are those a plan looks up
 *   in the autotune cache, keyed alike (folding rules included: Dropout is
 *   never folded, nor a node whose outputs pass the fold size limit), so a
 *   cache written through the sites is found entry by entry by a run.
 * - views: Reshape, Flatten, Squeeze, Unsqueeze and Identity of an
 *   intermediate alias its bytes (no kernel, no memory of their own), the
 *   bytes stay alive until the last view's last use (no in-place writer or
 *   later value takes them sooner), chains of views resolve, and a view of
 *   a graph input or one bound to the caller's memory is copied.  Outputs
 *   are checked against values computed here.
 * - outputs: reused run after run while the shapes stay; on the CPU written
 *   by their nodes straight into the tensors handed out, and correct when
 *   the last run's output is fed back as an input (it is kept apart).
 * - folding past the 16 MiB limit: a Transpose of a large initializer runs
 *   once while planning; a computing node of that size still runs.
 *
 * OpenCL cases skip without a platform (GRAPHFUSE_TEST_DEVICE picks the
 * device, as in the other OpenCL tests).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "exec_priv.h"
#include "fused_graphs.h"
#include "gf_exec.h"
#include "gf_tune.h"

static const char *const backends[] = {"cpu", "opencl"};

/* Whether backend `name` opens here (OpenCL needs a platform). */
static bool available(const char *name)
{
    struct gf_backend *be;
    return gf_backend_open(name, strcmp(name, "cpu") ? getenv("GRAPHFUSE_TEST_DEVICE") : NULL,
                           &be) == GF_OK;
}

static struct gf_exec_opts opts_for(const char *backend, const char *cache)
{
    return (struct gf_exec_opts){.backend = backend,
                                 .device = strcmp(backend, "cpu") ? getenv("GRAPHFUSE_TEST_DEVICE")
                                                                  : NULL,
                                 .n_threads = 1, .tune_cache = cache};
}

/* ---- tune sites --------------------------------------------------------------------- */

#define BIG_ROWS 1025 /* [1025, 4096] floats: 16.8 MB, past the fold limit of 16 MiB */
#define BIG_COLS 4096

/* y = x + Relu(S); r3 = Relu(Dropout(S)); r2 = ReduceMax(Relu(B)) with S a
 * small constant (Relu(S) is folded), B a big one (Relu(B) is not). */
static struct gf_model *sites_model(void)
{
    static float s[16], *big;
    big = calloc((size_t)BIG_ROWS * BIG_COLS, sizeof(float));
    for (int i = 0; i < 16; i++)
        s[i] = (float)i - 7.5f;
    for (size_t i = 0; big && i < (size_t)BIG_ROWS * BIG_COLS; i++)
        big[i] = (float)(i % 97) - 48.0f;
    struct fg b = fg_begin("sites");
    int64_t d[2] = {2, 8}, db[2] = {BIG_ROWS, BIG_COLS};
    struct gf_value *x = fg_input(&b, "x", GF_FLOAT, 2, d);
    struct gf_value *sc = fg_const(&b, GF_FLOAT, 2, d, s);
    struct gf_value *bc = big ? fg_const(&b, GF_FLOAT, 2, db, big) : NULL;
    free(big);
    b.ok = b.ok && bc;
    struct gf_value *y = FG(&b, "Add", x, FG(&b, "Relu", sc));
    struct gf_value *r3 = FG(&b, "Relu", FG(&b, "Dropout", sc));
    struct gf_value *r2 = FG(&b, "ReduceMax", FG(&b, "Relu", bc));
    fg_int(&b, r2, "keepdims", 0);
    fg_output(&b, y);
    fg_output(&b, r3);
    fg_output(&b, r2);
    return fg_done(&b);
}

/* Whether a site runs op on a value producer_op makes ("": an input or
 * initializer). */
static bool has_site(const struct gf_session *s, const char *op, const char *producer_op)
{
    struct gf_tune_site site;
    for (size_t i = 0; gf_session_tune_site(s, i, &site); i++) {
        const struct gf_node *p = site.node->inputs[0]->producer;
        if (strcmp(site.node->op_type, op) == 0 && strcmp(p ? p->op_type : "", producer_op) == 0)
            return true;
    }
    return false;
}

static void test_tune_sites_are_the_plans_lookups(void **state)
{
    (void)state;
    if (!available("opencl"))
        skip();
    char path[] = "/tmp/gf_plan_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path); /* an empty cache: the tuner writes it */
    struct gf_model *m = sites_model();
    assert_non_null(m);
    float xv[16];
    for (int i = 0; i < 16; i++)
        xv[i] = 0.25f * (float)i;
    struct gf_tensor *x = gf_tensor_new(m, "x", GF_FLOAT, 2, (int64_t[]){2, 8}, xv);
    struct gf_exec_opts o = opts_for("opencl", "");
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    assert_int_equal(gf_session_plan(s, 1, &x), GF_OK);
    size_t n = gf_session_tune_count(s);
    /* Add, Relu(Dropout(S)), Relu(B), ReduceMax; not the folded Relu(S) */
    assert_true(has_site(s, "Add", ""));
    assert_true(has_site(s, "Relu", "Dropout")); /* Dropout is never folded */
    assert_true(has_site(s, "Relu", ""));
    assert_true(has_site(s, "ReduceMax", "Relu"));
    struct gf_tune_site site;
    for (size_t i = 0; gf_session_tune_site(s, i, &site); i++)
        if (strcmp(site.node->op_type, "Relu") == 0 && !site.node->inputs[0]->producer)
            assert_int_equal(site.in[0].nelem, (size_t)BIG_ROWS * BIG_COLS); /* B, not S */
    assert_true(n >= 4);
    struct gf_session_stats st;

    /* an entry per site (each the default kernel), then a run with the
     * cache: every node with a choice runs the cached pick */
    struct gf_tuner *t;
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    for (size_t i = 0; gf_session_tune_site(s, i, &site); i++) {
        struct gf_tune_result r = {0};
        r.choice.kernel = gf_kernel_find(site.be, site.node, site.in, site.n_in);
        assert_non_null(r.choice.kernel);
        gf_tune_config_at(r.choice.kernel, 0, r.choice.config);
        r.fallback = r.choice;
        assert_int_equal(gf_tuner_record(t, site.be, site.node, site.in, site.n_in, site.out,
                                         site.n_out, &r), GF_OK);
    }
    assert_int_equal(gf_tuner_save(t), GF_OK);
    gf_tuner_free(t);
    gf_session_free(s);

    o = opts_for("opencl", path);
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    struct gf_tensor **out;
    size_t n_out;
    assert_int_equal(gf_session_run(s, 1, &x, &out, &n_out), GF_OK);
    gf_session_get_stats(s, &st);
    assert_true(st.n_choice > 0);
    assert_int_equal(st.n_tuned, st.n_choice);
    assert_int_equal(st.n_tuned, n);
    assert_float_equal(gf_tensor_get_f64(out[2], 0), 48.0, 0); /* max of Relu(B) */
    gf_session_free(s);
    gf_model_free(m);
    unlink(path);
    char lock[64];
    snprintf(lock, sizeof(lock), "%s.lock", path);
    unlink(lock);
}

/* ---- views ------------------------------------------------------------------------- */

static float relu(float x)
{
    return x > 0 ? x : 0;
}

static void expect_close(const struct gf_tensor *t, const float *want, size_t n, const char *what,
                         const char *backend)
{
    assert_int_equal(t->nelem, n);
    for (size_t i = 0; i < n; i++) {
        double got = gf_tensor_get_f64(t, i), w = want[i];
        if (!(fabs(got - w) <= 1e-5 + 1e-5 * fabs(w)))
            fail_msg("%s on %s: element %zu is %g, want %g", what, backend, i, got, w);
    }
}

/* x [64, 64] -> Relu -> Reshape [4096] -> Unsqueeze [1, 4096] -> Squeeze
 * [4096] -> Identity -> Flatten [4096, 1] -> Exp: five views of Relu's
 * bytes, and Exp writes over them (the group dies there), so the block is
 * one tensor: 16 KiB (a copy per view would need two). */
static void test_view_chain_takes_no_memory(void **state)
{
    (void)state;
    for (size_t b = 0; b < 2; b++) {
        if (!available(backends[b]))
            continue;
        struct fg g = fg_begin("chain");
        struct gf_value *x = fg_input(&g, "x", GF_FLOAT, 2, (int64_t[]){64, 64});
        struct gf_value *v = FG(&g, "Relu", x);
        v = FG(&g, "Reshape", v, fg_i64s(&g, 1, (int64_t[]){4096}));
        v = FG(&g, "Unsqueeze", v, fg_i64s(&g, 1, (int64_t[]){0}));
        v = FG(&g, "Squeeze", v, fg_i64s(&g, 1, (int64_t[]){0}));
        v = FG(&g, "Identity", v);
        v = FG(&g, "Flatten", v);
        fg_int(&g, v, "axis", 1);
        struct gf_value *y = FG(&g, "Exp", v);
        fg_output(&g, y);
        struct gf_model *m = fg_done(&g);
        assert_non_null(m);
        float xv[4096], want[4096];
        for (int i = 0; i < 4096; i++) {
            xv[i] = (float)((i * 37) % 101) / 25.0f - 2.0f;
            want[i] = expf(relu(xv[i]));
        }
        struct gf_tensor *xt = gf_tensor_new(m, "x", GF_FLOAT, 2, (int64_t[]){64, 64}, xv);
        struct gf_exec_opts o = opts_for(backends[b], "");
        struct gf_session *s;
        struct gf_tensor **out;
        size_t n_out;
        assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
        assert_int_equal(gf_session_run(s, 1, &xt, &out, &n_out), GF_OK);
        expect_close(out[0], want, 4096, "exp(relu(x)) through five views", backends[b]);
        assert_int_equal(out[0]->rank, 2);
        assert_int_equal(out[0]->dims[0], 4096);
        struct gf_session_stats st;
        gf_session_get_stats(s, &st);
        assert_int_equal(st.n_views, 5);
        assert_int_equal(st.activation_bytes, 4096 * sizeof(float));
        assert_int_equal(gf_session_tune_count(s) > 0, strcmp(backends[b], "cpu") != 0);
        struct gf_tune_site site; /* views run no kernel: nothing to tune */
        for (size_t i = 0; gf_session_tune_site(s, i, &site); i++)
            assert_true(strcmp(site.node->op_type, "Relu") == 0 ||
                        strcmp(site.node->op_type, "Exp") == 0);
        gf_session_free(s);
        gf_model_free(m);
    }
}

/* Lifetimes and the cases that must not alias:
 *   a = Relu(x); f = Identity(Squeeze(Unsqueeze(Flatten(Reshape(a)))))
 *   t = Neg(a)           a's own last use, but its view f lives on: Neg must
 *   u = Exp(t)           not write over a (in place), nor may later values
 *   w = Sigmoid(u)       take a's bytes while f is alive
 *   z = Add(f, Reshape(w))                         output [6, 4]
 *   p = Tanh(x), q = Reshape(p) [4, 6]             both outputs: q is a view of p
 *   i = Identity(x)      a graph input: copied, not aliased      output
 *   r = Reshape(Sigmoid(x)) [24]   bound to the caller's memory: copied  output */
static void test_views_keep_their_bytes_alive(void **state)
{
    (void)state;
    for (size_t b = 0; b < 2; b++) {
        if (!available(backends[b]))
            continue;
        struct fg g = fg_begin("alive");
        int64_t dx[3] = {2, 3, 4};
        struct gf_value *x = fg_input(&g, "x", GF_FLOAT, 3, dx);
        struct gf_value *a = FG(&g, "Relu", x);
        struct gf_value *f = FG(&g, "Reshape", a, fg_i64s(&g, 2, (int64_t[]){6, 4}));
        f = FG(&g, "Flatten", f);
        fg_int(&g, f, "axis", 1);
        f = FG(&g, "Unsqueeze", f, fg_i64s(&g, 1, (int64_t[]){0}));
        f = FG(&g, "Squeeze", f, fg_i64s(&g, 1, (int64_t[]){0}));
        f = FG(&g, "Identity", f);
        struct gf_value *w = FG(&g, "Sigmoid", FG(&g, "Exp", FG(&g, "Neg", a)));
        struct gf_value *z = FG(&g, "Add", f, FG(&g, "Reshape", w,
                                                fg_i64s(&g, 2, (int64_t[]){6, 4})));
        struct gf_value *p = FG(&g, "Tanh", x);
        struct gf_value *q = FG(&g, "Reshape", p, fg_i64s(&g, 2, (int64_t[]){4, 6}));
        struct gf_value *i = FG(&g, "Identity", x);
        struct gf_value *r = FG(&g, "Reshape", FG(&g, "Sigmoid", x),
                                fg_i64s(&g, 1, (int64_t[]){24}));
        fg_output(&g, z);
        fg_output(&g, p);
        fg_output(&g, q);
        fg_output(&g, i);
        fg_output(&g, r);
        struct gf_model *m = fg_done(&g);
        assert_non_null(m);
        float xv[24], wz[24], wp[24], ws[24];
        for (int k = 0; k < 24; k++) {
            xv[k] = (float)k / 4.0f - 3.0f;
            float ak = relu(xv[k]);
            wz[k] = ak + 1.0f / (1.0f + expf(-expf(-ak)));
            wp[k] = tanhf(xv[k]);
            ws[k] = 1.0f / (1.0f + expf(-xv[k]));
        }
        struct gf_tensor *xt = gf_tensor_new(m, "x", GF_FLOAT, 3, dx, xv);
        struct gf_exec_opts o = opts_for(backends[b], "");
        struct gf_session *s;
        struct gf_tensor **out;
        size_t n_out;
        assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
        struct gf_backend *be = gf_session_get_backend(s);
        void *rbuf = be->ops->alloc(be, sizeof(ws));
        assert_non_null(rbuf);
        assert_int_equal(gf_session_bind_output(s, 4, rbuf, sizeof(ws)), GF_OK);
        for (int run = 0; run < 2; run++) { /* the plan, then a run of it */
            assert_int_equal(gf_session_run(s, 1, &xt, &out, &n_out), GF_OK);
            assert_int_equal(n_out, 5);
            expect_close(out[0], wz, 24, "z = f + w (a's bytes kept for f)", backends[b]);
            expect_close(out[1], wp, 24, "p = tanh(x)", backends[b]);
            expect_close(out[2], wp, 24, "q = Reshape(p), both outputs", backends[b]);
            assert_int_equal(out[2]->rank, 2);
            assert_int_equal(out[2]->dims[1], 6);
            expect_close(out[3], xv, 24, "i = Identity(x)", backends[b]);
            float got[24];
            assert_int_equal(be->ops->copy_out(be, got, rbuf, sizeof(got)), GF_OK);
            for (int k = 0; k < 24; k++)
                assert_float_equal(got[k], ws[k], 1e-6);
        }
        struct gf_session_stats st;
        gf_session_get_stats(s, &st);
        /* 5 of a, Reshape(w), q; not i, not r; on the CPU not q either: p is
         * written into its own output memory, q (an output too) copies it */
        assert_int_equal(st.n_views, strcmp(backends[b], "cpu") ? 7 : 6);
        gf_session_free(s);
        be->ops->release(be, rbuf);
        gf_model_free(m);
    }
}

/* ---- folding past the size limit ---------------------------------------------------- */

/* y = MatMul(x, Transpose(W)) and r = ReduceMax(Relu(W)) with W a [1025,
 * 4096] initializer (16.8 MB, past FOLD_LIMIT): the Transpose only moves
 * W's bytes, so it runs once while planning (the transposed weight of a
 * tied LM head); Relu computes, so it keeps the 16 MiB limit and runs. */
static void test_big_transpose_of_a_weight_is_folded(void **state)
{
    (void)state;
    const size_t rows = BIG_ROWS, cols = BIG_COLS;
    float *w = malloc(rows * cols * sizeof(float));
    assert_non_null(w);
    for (size_t i = 0; i < rows * cols; i++)
        w[i] = (float)((i * 7) % 13) - 6.0f;
    float xv[2 * BIG_COLS], want[2 * BIG_ROWS];
    for (size_t i = 0; i < 2 * cols; i++)
        xv[i] = (float)((i * 5) % 9) - 4.0f;
    for (size_t i = 0; i < 2; i++) /* small integers: every sum exact */
        for (size_t j = 0; j < rows; j++) {
            double acc = 0;
            for (size_t k = 0; k < cols; k++)
                acc += (double)xv[i * cols + k] * w[j * cols + k];
            want[i * rows + j] = (float)acc;
        }
    for (size_t b = 0; b < 2; b++) {
        if (!available(backends[b]))
            continue;
        struct fg g = fg_begin("fold_transpose");
        struct gf_value *x = fg_input(&g, "x", GF_FLOAT, 2, (int64_t[]){2, BIG_COLS});
        struct gf_value *wc = fg_const(&g, GF_FLOAT, 2, (int64_t[]){BIG_ROWS, BIG_COLS}, w);
        struct gf_value *wt = FG(&g, "Transpose", wc);
        fg_ints(&g, wt, "perm", 2, (int64_t[]){1, 0});
        struct gf_value *y = FG(&g, "MatMul", x, wt);
        struct gf_value *r = FG(&g, "ReduceMax", FG(&g, "Relu", wc));
        fg_int(&g, r, "keepdims", 0);
        fg_output(&g, y);
        fg_output(&g, r);
        struct gf_model *m = fg_done(&g);
        assert_non_null(m);
        struct gf_tensor *xt = gf_tensor_new(m, "x", GF_FLOAT, 2, (int64_t[]){2, BIG_COLS}, xv);
        struct gf_exec_opts o = opts_for(backends[b], "");
        o.profile = true;
        struct gf_session *s;
        struct gf_tensor **out;
        size_t n_out;
        assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
        for (int run = 0; run < 2; run++) { /* the plan, then a run of it */
            assert_int_equal(gf_session_run(s, 1, &xt, &out, &n_out), GF_OK);
            assert_int_equal(n_out, 2);
            expect_close(out[0], want, 2 * rows, "x @ Transpose(W), folded", backends[b]);
            assert_float_equal(gf_tensor_get_f64(out[1], 0), 6.0, 0);
        }
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        gf_session_print_profile(s, f);
        fclose(f);
        /* 1 folded (the Transpose), its 16.8 MB kept as a constant; the
         * run executes MatMul, Relu, ReduceMax and no Transpose */
        char head[128];
        snprintf(head, sizeof(head), "profile: 4 nodes (1 folded into constants while "
                 "planning, %zu bytes;", rows * cols * sizeof(float));
        if (!strstr(text, head) || strstr(text, "Transpose") || !strstr(text, "Relu") ||
            !strstr(text, "MatMul"))
            fail_msg("on %s, want '%s', no Transpose run:\n%s", backends[b], head, text);
        free(text);
        struct gf_session_stats st;
        gf_session_get_stats(s, &st);
        /* Relu(W)'s 16.8 MB is an activation; the transposed W is not */
        assert_true(st.activation_bytes < 2 * rows * cols * sizeof(float));
        gf_session_free(s);
        gf_model_free(m);
    }
    free(w);
}

/* The outputs belong to the session until the next run: a run whose
 * outputs have the last run's types and shapes reads into the same
 * tensors (no allocation per run), with this run's values; a new shape
 * gets new tensors. */
static void test_outputs_reused_across_runs(void **state)
{
    (void)state;
    for (size_t b = 0; b < 2; b++) {
        if (!available(backends[b]))
            continue;
        struct fg g = fg_begin("reuse");
        struct gf_value *x = fg_input(&g, "x", GF_FLOAT, 2, (int64_t[]){4, 8});
        gf_value_set_tensor_type(x, GF_FLOAT, 2,
                                 (struct gf_dim[]){{-1, "N", NULL}, {8, NULL, NULL}});
        fg_output(&g, FG(&g, "Exp", x));
        fg_output(&g, FG(&g, "Neg", x));
        struct gf_model *m = fg_done(&g);
        assert_non_null(m);
        struct gf_exec_opts o = opts_for(backends[b], "");
        struct gf_session *s;
        assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
        void *first[2] = {NULL, NULL};
        for (int r = 0; r < 4; r++) {
            int64_t n = r < 3 ? 4 : 2;
            float xv[32], e[32], ng[32];
            for (int i = 0; i < n * 8; i++) {
                xv[i] = (float)((i * 7 + r * 13) % 19) / 8.0f - 1.0f;
                e[i] = expf(xv[i]);
                ng[i] = -xv[i];
            }
            struct gf_tensor *xt = gf_tensor_new(m, "x", GF_FLOAT, 2, (int64_t[]){n, 8}, xv);
            struct gf_tensor **out;
            size_t n_out;
            assert_int_equal(gf_session_run(s, 1, &xt, &out, &n_out), GF_OK);
            assert_int_equal(n_out, 2);
            expect_close(out[0], e, (size_t)n * 8, "Exp(x), run after run", backends[b]);
            expect_close(out[1], ng, (size_t)n * 8, "Neg(x), run after run", backends[b]);
            assert_int_equal(out[0]->dims[0], n);
            for (int k = 0; k < 2; k++) {
                if (r == 0)
                    first[k] = out[k]->data;
                else if (r < 3) /* the same shape: the same tensors */
                    assert_ptr_equal(out[k]->data, first[k]);
            }
        }
        gf_session_free(s);
        gf_model_free(m);
    }
}

/* On the CPU the nodes write graph outputs straight into the tensors the
 * run hands out.  y = Neg(x) is written first, then z = x + y and w =
 * Reshape(y) (a graph output that is a view, and an output another node
 * reads); run after run the last run's y is fed back as x, so the node
 * writing y would overwrite the x that Add still reads unless the input
 * is kept apart: z must stay 0, and each run's y is the last one's x
 * negated.  A new shape (a new plan) between runs: its x is the last
 * plan's y. */
static void test_outputs_fed_back_as_inputs(void **state)
{
    (void)state;
    for (size_t b = 0; b < 2; b++) {
        if (!available(backends[b]))
            continue;
        struct fg g = fg_begin("feed");
        struct gf_value *x = fg_input(&g, "x", GF_FLOAT, 2, (int64_t[]){4, 8});
        gf_value_set_tensor_type(x, GF_FLOAT, 2,
                                 (struct gf_dim[]){{-1, "N", NULL}, {8, NULL, NULL}});
        struct gf_value *y = FG(&g, "Neg", x);
        fg_output(&g, y);
        fg_output(&g, FG(&g, "Add", x, y));
        struct gf_value *shape = fg_const(&g, GF_INT64, 1, (int64_t[]){1}, (int64_t[]){-1});
        fg_output(&g, FG(&g, "Reshape", y, shape));
        struct gf_model *m = fg_done(&g);
        assert_non_null(m);
        struct gf_exec_opts o = opts_for(backends[b], "");
        struct gf_session *s;
        assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
        float xv[32], want[32], zeros[32] = {0};
        for (int i = 0; i < 32; i++)
            xv[i] = (float)(i % 11) - 4.5f;
        struct gf_tensor *xt = gf_tensor_new(m, "x", GF_FLOAT, 2, (int64_t[]){4, 8}, xv);
        for (int r = 0; r < 5; r++) {
            int64_t n = xt->dims[0];
            for (int i = 0; i < n * 8; i++)
                want[i] = -((const float *)xt->data)[i];
            struct gf_tensor **out;
            size_t n_out;
            assert_int_equal(gf_session_run(s, 1, &xt, &out, &n_out), GF_OK);
            assert_int_equal(n_out, 3);
            expect_close(out[0], want, (size_t)n * 8, "Neg(x), x the last run's output",
                         backends[b]);
            expect_close(out[1], zeros, (size_t)n * 8, "x + Neg(x)", backends[b]);
            expect_close(out[2], want, (size_t)n * 8, "Reshape(Neg(x))", backends[b]);
            if (r == 2) { /* a new plan: x [2, 8] over the first rows of the last y */
                struct gf_tensor h = *out[0];
                int64_t hd[2] = {2, 8};
                h.dims = hd, h.nelem = 16, h.nbytes = 16 * sizeof(float);
                for (int i = 0; i < 16; i++)
                    want[i] = -((const float *)h.data)[i];
                struct gf_tensor *in2[1] = {&h};
                assert_int_equal(gf_session_run(s, 1, in2, &out, &n_out), GF_OK);
                expect_close(out[0], want, 16, "Neg(x) after a new plan", backends[b]);
                expect_close(out[1], zeros, 16, "x + Neg(x) after a new plan", backends[b]);
            }
            xt = out[0];
        }
        gf_session_free(s);
        gf_model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_sites_are_the_plans_lookups),
        cmocka_unit_test(test_view_chain_takes_no_memory),
        cmocka_unit_test(test_views_keep_their_bytes_alive),
        cmocka_unit_test(test_big_transpose_of_a_weight_is_folded),
        cmocka_unit_test(test_outputs_reused_across_runs),
        cmocka_unit_test(test_outputs_fed_back_as_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
