/*
 * The session's planner (executor/session.c) on every backend built in:
 *
 * - tune sites: the nodes `graphfuse tune` tunes are those a plan looks up
 *   in the autotune cache, keyed alike (folding rules included: Dropout is
 *   never folded, nor a node whose outputs pass the fold size limit), so a
 *   cache written through the sites is found entry by entry by a run.
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

int main(void)
{
    (void)backends;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_sites_are_the_plans_lookups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
