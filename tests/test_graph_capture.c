/*
 * CUDA Graphs in the executor (executor/session.c), without a GPU:
 *
 * - when capture is allowed at all (gf_capture_off_reason): a backend
 *   without the capture ops, --no-cuda-graph, GRAPHFUSE_NO_CUDA_GRAPH,
 *   check_finite;
 * - which steps are captured together (gf_capture_segments): ranges between
 *   steps that must run outside a graph, folded steps and views transparent,
 *   ranges too short left out;
 * - the run protocol, on a recording backend: the CPU backend's ops with
 *   capture ops that count calls (swapped in for the test).  The CPU kernels
 *   run at once, so a "replay" of the fake launches nothing: a run that
 *   replays leaves the captured nodes' outputs as the capture run wrote
 *   them, which shows that they were not launched again outside the graph.
 *   Run 1 launches node by node, run 2 captures and launches, run 3 replays;
 *   a node reading a graph input's host copy stays outside the graph; a
 *   failed capture falls back to node by node and is noted in the profile.
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

/* ---- when capture is allowed ------------------------------------------------------ */

static enum gf_status no_begin(struct gf_backend *be)
{
    (void)be;
    return GF_OK;
}

static enum gf_status no_end(struct gf_backend *be, void **graph, size_t *n)
{
    (void)be;
    *graph = NULL;
    *n = 0;
    return GF_OK;
}

static enum gf_status no_launch(struct gf_backend *be, void *graph)
{
    (void)be, (void)graph;
    return GF_OK;
}

static void no_free(struct gf_backend *be, void *graph)
{
    (void)be, (void)graph;
}

static void test_off_reason(void **state)
{
    (void)state;
    struct gf_backend_ops none = {.name = "x"};
    struct gf_backend_ops cap = {.name = "x", .capture_begin = no_begin, .capture_end = no_end,
                                 .graph_launch = no_launch, .graph_free = no_free};
    struct gf_exec_opts o = {0};
    unsetenv("GRAPHFUSE_NO_CUDA_GRAPH");
    assert_null(gf_capture_off_reason(&o, &cap));
    assert_null(gf_capture_off_reason(NULL, &cap));
    assert_string_equal(gf_capture_off_reason(&o, &none), "the backend cannot capture");
    assert_string_equal(gf_capture_off_reason(&o, NULL), "the backend cannot capture");
    struct gf_backend_ops half = cap;
    half.graph_free = NULL;
    assert_string_equal(gf_capture_off_reason(&o, &half), "the backend cannot capture");
    o.no_cuda_graph = true;
    assert_string_equal(gf_capture_off_reason(&o, &cap), "--no-cuda-graph");
    assert_string_equal(gf_capture_off_reason(&o, &none), "the backend cannot capture");
    o.no_cuda_graph = false;
    o.check_finite = true;
    assert_non_null(strstr(gf_capture_off_reason(&o, &cap), "check_finite"));
    o.check_finite = false;
    setenv("GRAPHFUSE_NO_CUDA_GRAPH", "1", 1);
    assert_string_equal(gf_capture_off_reason(&o, &cap), "GRAPHFUSE_NO_CUDA_GRAPH is set");
    setenv("GRAPHFUSE_NO_CUDA_GRAPH", "0", 1);
    assert_null(gf_capture_off_reason(&o, &cap));
    setenv("GRAPHFUSE_NO_CUDA_GRAPH", "", 1);
    assert_null(gf_capture_off_reason(&o, &cap));
    unsetenv("GRAPHFUSE_NO_CUDA_GRAPH");
}

/* ---- which steps are captured together --------------------------------------------- */

#define S GF_CAP_SKIP
#define G GF_CAP_GRAPH
#define E GF_CAP_EAGER

static size_t segs(const unsigned char *k, size_t n, size_t min, struct gf_capture_seg *out)
{
    return gf_capture_segments(k, n, min, out);
}

static void test_segments(void **state)
{
    (void)state;
    struct gf_capture_seg o[16];
    /* everything capturable: one range */
    static const unsigned char all[] = {G, G, G, G};
    assert_int_equal(segs(all, 4, 2, o), 1);
    assert_int_equal(o[0].first, 0);
    assert_int_equal(o[0].end, 4);
    assert_int_equal(o[0].n, 4);
    /* an eager step splits; skipped steps are transparent, not part of the ends */
    static const unsigned char mix[] = {E, S, G, S, G, G, E, G, G, S};
    assert_int_equal(segs(mix, 10, 2, o), 2);
    assert_int_equal(o[0].first, 2);
    assert_int_equal(o[0].end, 6);
    assert_int_equal(o[0].n, 3);
    assert_int_equal(o[1].first, 7);
    assert_int_equal(o[1].end, 9);
    assert_int_equal(o[1].n, 2);
    /* a range shorter than min_steps runs node by node */
    static const unsigned char shrt[] = {G, E, G, G, E, G, S, S};
    assert_int_equal(segs(shrt, 8, 2, o), 1);
    assert_int_equal(o[0].first, 2);
    assert_int_equal(o[0].end, 4);
    assert_int_equal(segs(shrt, 8, 1, o), 3);
    assert_int_equal(o[2].first, 5);
    assert_int_equal(o[2].end, 6);
    assert_int_equal(segs(shrt, 8, 0, o), 3);
    /* nothing to capture */
    static const unsigned char none[] = {E, S, E, S};
    assert_int_equal(segs(none, 4, 1, o), 0);
    assert_int_equal(segs(none, 0, 1, o), 0);
    /* alternating: the most ranges there can be (n / 2 + 1 room) */
    static const unsigned char alt[] = {G, E, G, E, G};
    assert_int_equal(segs(alt, 5, 1, o), 3);
}

/* ---- the run protocol on a recording backend --------------------------------------- */

static struct {
    int begins, ends, launches, frees, live;
    int fail_ends;   /* capture_end calls still to fail */
    bool fail_begin;
    bool capturing;
} rec;

static enum gf_status rec_begin(struct gf_backend *be)
{
    (void)be;
    if (rec.fail_begin)
        return gf_error(GF_ERR_INTERNAL, "recording backend: no capture today");
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
    *graph = NULL;
    *n = 0;
    if (rec.fail_ends > 0) {
        rec.fail_ends--;
        return gf_error(GF_ERR_INTERNAL, "recording backend: capture refused");
    }
    *graph = malloc(1);
    *n = 7;
    rec.live++;
    return GF_OK;
}

static enum gf_status rec_launch(struct gf_backend *be, void *graph)
{
    (void)be;
    assert_non_null(graph);
    assert_false(rec.capturing);
    rec.launches++;
    return GF_OK;
}

static void rec_free(struct gf_backend *be, void *graph)
{
    (void)be;
    free(graph);
    rec.frees++;
    rec.live--;
}

static struct gf_backend_ops rec_ops;
static const struct gf_backend_ops *cpu_ops;

/* The CPU backend with the recording capture ops (cmocka setup / teardown). */
static int rec_setup(void **state)
{
    (void)state;
    struct gf_backend *cpu = gf_backend_get("cpu");
    cpu_ops = cpu->ops;
    rec_ops = *cpu_ops;
    rec_ops.capture_begin = rec_begin;
    rec_ops.capture_end = rec_end;
    rec_ops.graph_launch = rec_launch;
    rec_ops.graph_free = rec_free;
    cpu->ops = &rec_ops;
    memset(&rec, 0, sizeof(rec));
    unsetenv("GRAPHFUSE_NO_CUDA_GRAPH");
    return 0;
}

static int rec_teardown(void **state)
{
    (void)state;
    gf_backend_get("cpu")->ops = cpu_ops;
    assert_int_equal(rec.live, 0); /* every graph freed with its plan */
    return 0;
}

#define N 8

/* y = Exp(Neg(Relu(x))) + 1 (Relu reads the graph input x: outside the
 * graph); every value is an output, so that none is written in place (on
 * the fake a failed capture has run its kernels already, and runs them again). */
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

static float relu_out; /* output r[0] of the last run_once */

/* Runs the model on x filled with v; y[0] (r[0] in relu_out). */
static float run_once(struct gf_session *s, struct gf_model *m, float v)
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
    assert_int_equal(gf_session_run(s, 1, in, &out, &n_out), GF_OK);
    assert_int_equal(n_out, 4);
    relu_out = ((const float *)out[1]->data)[0];
    return ((const float *)out[0]->data)[0];
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

static float want(float v)
{
    return expf(-(v > 0 ? v : 0)) + 1.0f;
}

static void test_capture_then_replay(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    assert_non_null(m);
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    /* run 1: node by node, nothing captured */
    assert_float_equal(run_once(s, m, 1.0f), want(1.0f), 1e-6);
    assert_int_equal(rec.begins, 0);
    assert_non_null(strstr(profile_of(s), "cuda graph: none yet"));
    /* run 2: Neg, Exp, Add captured as one graph and launched (here: run at capture) */
    assert_float_equal(run_once(s, m, 2.0f), want(2.0f), 1e-6);
    assert_int_equal(rec.begins, 1);
    assert_int_equal(rec.ends, 1);
    assert_int_equal(rec.launches, 1);
    const char *p = profile_of(s);
    assert_non_null(strstr(p, "CUDA graph (replay)"));
    assert_float_equal(relu_out, 2.0f, 0);
    assert_non_null(strstr(p, "cuda graph: 3 of 4 nodes replayed as 1 graph (7 CUDA nodes), "
                              "1 launched outside them: Relu x1"));
    /* run 3: a replay; the fake's replay runs nothing, so y stays run 2's (the
     * captured nodes were not launched again outside the graph), while Relu,
     * outside it, saw the new input */
    assert_float_equal(run_once(s, m, 3.0f), want(2.0f), 1e-6);
    assert_float_equal(relu_out, 3.0f, 0);
    assert_int_equal(rec.begins, 1);
    assert_int_equal(rec.launches, 2);
    assert_int_equal(rec.frees, 0);
    /* the graphs go with the plan */
    gf_session_free(s);
    assert_int_equal(rec.frees, 1);
    gf_model_free(m);
}

static void test_off_runs_node_by_node(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true,
                             .no_cuda_graph = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    for (int r = 1; r <= 3; r++)
        assert_float_equal(run_once(s, m, (float)r), want((float)r), 1e-6);
    assert_int_equal(rec.begins + rec.launches, 0);
    assert_non_null(strstr(profile_of(s), "cuda graph: off (--no-cuda-graph)"));
    gf_session_free(s);
    /* check_finite and the environment turn it off too */
    o.no_cuda_graph = false;
    o.check_finite = true;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    for (int r = 1; r <= 3; r++)
        assert_float_equal(run_once(s, m, (float)r), want((float)r), 1e-6);
    gf_session_free(s);
    o.check_finite = false;
    setenv("GRAPHFUSE_NO_CUDA_GRAPH", "1", 1);
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    for (int r = 1; r <= 3; r++)
        assert_float_equal(run_once(s, m, (float)r), want((float)r), 1e-6);
    unsetenv("GRAPHFUSE_NO_CUDA_GRAPH");
    gf_session_free(s);
    assert_int_equal(rec.begins + rec.launches, 0);
    gf_model_free(m);
}

static void test_failed_capture(void **state)
{
    (void)state;
    struct gf_model *m = chain_model();
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .profile = true};
    struct gf_session *s;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    rec.fail_ends = 1;
    for (int r = 1; r <= 3; r++) /* the failed capture's range ran node by node */
        assert_float_equal(run_once(s, m, (float)r), want((float)r), 1e-6);
    assert_int_equal(rec.begins, 1);
    assert_int_equal(rec.launches, 0);
    const char *p = profile_of(s);
    assert_non_null(strstr(p, "failed, they run outside the graphs: recording backend: "
                              "capture refused"));
    gf_session_free(s);
    /* a capture that cannot begin: this plan runs node by node */
    memset(&rec, 0, sizeof(rec));
    rec.fail_begin = true;
    assert_int_equal(gf_session_new(m, &o, &s), GF_OK);
    for (int r = 1; r <= 3; r++)
        assert_float_equal(run_once(s, m, (float)r), want((float)r), 1e-6);
    assert_non_null(strstr(profile_of(s), "cuda graph: off for this plan"));
    gf_session_free(s);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_reason),
        cmocka_unit_test(test_segments),
        cmocka_unit_test_setup_teardown(test_capture_then_replay, rec_setup, rec_teardown),
        cmocka_unit_test_setup_teardown(test_off_runs_node_by_node, rec_setup, rec_teardown),
        cmocka_unit_test_setup_teardown(test_failed_capture, rec_setup, rec_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
