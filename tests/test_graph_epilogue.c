/*
 * The session's epilogue and deferred checks (executor/session.c), without a
 * GPU, on the CPU backend with recording capture and check ops swapped in
 * (as tests/test_graph_capture.c does; the CPU kernels run at once, so a
 * "replay" launches nothing):
 *
 * - the epilogue (gf_session_set_epilogue: the trainer's optimizer) runs
 *   after the last node in the plan's first run, is captured with the last
 *   range in the second (when that range ends the plan) and is not called
 *   again by a replay; the profile says where it ran;
 * - an epilogue whose capture fails runs after the last node from then on;
 * - deferred checks: every run is one checks_begin ... checks_end on the
 *   session, whose report (a bad index found on the device) fails the run;
 *   a node reading a graph input is handed no host copy of it where its
 *   kernel supports that (Relu: any kernel), so it is captured too and the
 *   whole run is one graph ("the whole step is one graph"); the session's
 *   registrations are released when it is freed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exec_priv.h"
#include "fused_graphs.h"
#include "gf_exec.h"

static struct {
    int begins, ends, launches, live;
    bool capturing;
    /* the epilogue */
    int epi_calls, epi_captured;
    bool epi_fail_capture;
    /* the deferred checks */
    int check_begins, check_ends, check_reports, releases;
    bool checks_open, report_bad;
    const void *owner;
} rec;

static enum gf_status rec_begin(struct gf_backend *be)
{
    (void)be;
    assert_false(rec.capturing);
    rec.capturing = true;
    rec.begins++;
    return GF_OK;
}

static enum gf_status rec_end(struct gf_backend *be, void **graph, size_t *n)
{
    (void)be;
    assert_true(rec.capturing);
    rec.capturing = false;
    rec.ends++;
    *graph = malloc(1);
    *n = 5;
    rec.live++;
    return GF_OK;
}

static enum gf_status rec_launch(struct gf_backend *be, void *graph)
{
    (void)be;
    assert_non_null(graph);
    rec.launches++;
    return GF_OK;
}

static void rec_free(struct gf_backend *be, void *graph)
{
    (void)be;
    free(graph);
    rec.live--;
}

static enum gf_status chk_begin(struct gf_backend *be, const void *owner)
{
    (void)be;
    assert_false(rec.checks_open);
    assert_false(rec.capturing); /* outside any graph */
    rec.checks_open = true;
    rec.owner = owner;
    rec.check_begins++;
    return GF_OK;
}

static enum gf_status chk_end(struct gf_backend *be)
{
    (void)be;
    assert_true(rec.checks_open);
    assert_false(rec.capturing);
    rec.checks_open = false;
    rec.check_ends++;
    return GF_OK;
}

static enum gf_status chk_report(struct gf_backend *be)
{
    (void)be;
    assert_false(rec.checks_open);
    rec.check_reports++;
    if (rec.report_bad)
        return gf_error(GF_ERR_INVALID, "node 'g' (Gather): indices element 3 (value 99) is "
                        "out of range [-8, 7] for data axis 0");
    return GF_OK;
}

static void chk_release(struct gf_backend *be, const void *owner)
{
    (void)be;
    assert_ptr_equal(owner, rec.owner);
    rec.releases++;
}

static struct gf_backend_ops rec_ops;
static const struct gf_backend_ops *cpu_ops;

static int setup(bool checks)
{
    struct gf_backend *cpu = gf_backend_get("cpu");
    cpu_ops = cpu->ops;
    rec_ops = *cpu_ops;
    rec_ops.capture_begin = rec_begin;
    rec_ops.capture_end = rec_end;
    rec_ops.graph_launch = rec_launch;
    rec_ops.graph_free = rec_free;
    if (checks) {
        rec_ops.checks_begin = chk_begin;
        rec_ops.checks_end = chk_end;
        rec_ops.checks_report = chk_report;
        rec_ops.checks_release = chk_release;
    }
    cpu->ops = &rec_ops;
    memset(&rec, 0, sizeof(rec));
    unsetenv("GRAPHFUSE_NO_CUDA_GRAPH");
    return 0;
}

static int capture_setup(void **state)
{
    (void)state;
    return setup(false);
}

static int checks_setup(void **state)
{
    (void)state;
    return setup(true);
}

static int teardown(void **state)
{
    (void)state;
    gf_backend_get("cpu")->ops = cpu_ops;
    assert_int_equal(rec.live, 0);
    return 0;
}

#define N 8

/* y = Exp(Neg(Relu(x))) + 1, every value an output (none written in place). */
static struct gf_model *chain_model(void)
{
    int64_t dims[1] = {N};
    struct fg b = fg_begin("chain");
    struct gf_value *x = fg_input(&b, "x", GF_FLOAT, 1, dims);
    struct gf_value *r = FG(&b, "Relu", x), *n = FG(&b, "Neg", r), *e = FG(&b, "Exp", n);
    struct gf_value *y = FG(&b, "Add", e, fg_f32(&b, 1.0f));
    fg_output(&b, y);
    fg_output(&b, r);
    fg_output(&b, n);
    fg_output(&b, e);
    return fg_done(&b);
}

static enum gf_status run_once(struct gf_session *s, struct gf_model *m, float v)
{
    int64_t dims[1] = {N};
    float data[N];
    for (int i = 0; i < N; i++)
        data[i] = v;
    struct gf_tensor *x = gf_tensor_new(m, "x", GF_FLOAT, 1, dims, data);
    assert_non_null(x);
    struct gf_tensor *const in[1] = {x};
    struct gf_tensor **out;
    size_t n_out;
    return gf_session_run(s, 1, in, &out, &n_out);
}

static char *profile_of(const struct gf_session *s)
{
    static char buf[8192];
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    assert_non_null(f);
    gf_session_print_profile(s, f);
    fclose(f);
    return buf;
}

/* The trainer's stand-in: counts its calls, and those made while captured. */
static enum gf_status epilogue(void *ctx)
{
    assert_ptr_equal(ctx, &rec);
    rec.epi_calls++;
    rec.epi_captured += rec.capturing;
    if (rec.capturing && rec.epi_fail_capture)
        return gf_error(GF_ERR_INTERNAL, "the epilogue cannot be captured today");
    return GF_OK;
}

static void test_epilogue_captured(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    gf_session_set_epilogue(s, epilogue, &rec);
    /* run 1: node by node, the epilogue after the last node */
    assert_int_equal(run_once(s, m, 1.0f), GF_OK);
    assert_int_equal(rec.epi_calls, 1);
    assert_int_equal(rec.epi_captured, 0);
    assert_non_null(strstr(profile_of(s), "epilogue (optimizer)"));
    /* run 2: Neg, Exp, Add and the epilogue captured as one graph */
    assert_int_equal(run_once(s, m, 2.0f), GF_OK);
    assert_int_equal(rec.begins, 1);
    assert_int_equal(rec.epi_calls, 2);
    assert_int_equal(rec.epi_captured, 1);
    const char *p = profile_of(s);
    assert_non_null(strstr(p, "1 launched outside them: Relu x1; the epilogue (optimizer) in "
                              "the last graph"));
    assert_null(strstr(p, "the whole step is one graph")); /* Relu outside */
    /* run 3: a replay; the epilogue is in it, not called */
    assert_int_equal(run_once(s, m, 3.0f), GF_OK);
    assert_int_equal(rec.epi_calls, 2);
    assert_int_equal(rec.launches, 2);
    /* a new epilogue makes the graph stale: captured again */
    gf_session_set_epilogue(s, epilogue, &rec);
    assert_int_equal(rec.live, 0);
    assert_int_equal(run_once(s, m, 4.0f), GF_OK);
    assert_int_equal(rec.begins, 2);
    assert_int_equal(rec.epi_captured, 2);
    gf_session_free(s);
    gf_model_free(m);
}

static void test_epilogue_capture_fails(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    gf_session_set_epilogue(s, epilogue, &rec);
    rec.epi_fail_capture = true;
    for (int r = 1; r <= 4; r++)
        assert_int_equal(run_once(s, m, (float)r), GF_OK);
    /* run 2's capture failed in the epilogue: the range ran node by node,
     * the epilogue after it; run 3 captured the nodes only, run 4 replays */
    assert_int_equal(rec.epi_captured, 1);
    assert_int_equal(rec.epi_calls, 5);
    assert_int_equal(rec.begins, 2);
    const char *p = profile_of(s);
    assert_non_null(strstr(p, "the epilogue (optimizer) launched after it"));
    gf_session_free(s);
    gf_model_free(m);
}

static void test_deferred_checks(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    gf_session_set_epilogue(s, epilogue, &rec);
    for (int r = 1; r <= 3; r++) {
        assert_int_equal(run_once(s, m, (float)r), GF_OK);
        assert_int_equal(rec.check_begins, r);
        assert_int_equal(rec.check_ends, r);
        assert_int_equal(rec.check_reports, r);
        assert_ptr_equal(rec.owner, s);
    }
    /* Relu, handed no host copy of x, is captured too: one graph, nothing outside */
    const char *p = profile_of(s);
    assert_non_null(strstr(p, "cuda graph: 4 of 4 nodes replayed as 1 graph (5 CUDA nodes), "
                              "0 launched outside them; the epilogue (optimizer) in the last "
                              "graph"));
    assert_non_null(strstr(p, "cuda graph: the whole step is one graph"));
    /* a bad index the device found fails the run with the kernel's message */
    rec.report_bad = true;
    assert_int_equal(run_once(s, m, 4.0f), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "indices element 3 (value 99)"));
    rec.report_bad = false;
    assert_int_equal(run_once(s, m, 5.0f), GF_OK);
    gf_session_free(s);
    assert_int_equal(rec.releases, 1);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_epilogue_captured, capture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_epilogue_capture_fails, capture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_checks, checks_setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
