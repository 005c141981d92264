/*
 * The trainer's precision option (gf_trainer_opts.precision,
 * docs/precision.md): the trainer rewrites its own copy of the model, so
 * exports keep the caller's fp32 graph with the trained fp32 weights.
 *
 * References are independent of the code under test: the caller's model
 * (node count, no precision recorded) and the weights before training.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gf_exec.h"
#include "gf_graph.h"
#include "gf_passes.h"

#define MLP "models/mlp/legacy/model.onnx"
#define MLP_DATA "models/mlp/train_data"

static struct gf_trainer *trainer_scaled(const struct gf_model *m, enum gf_precision p,
                                         double scale, int64_t window)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.steps = 20;
    o.exec.backend = "cpu";
    o.precision = p;
    o.loss_scale = scale;
    o.loss_scale_window = window;
    struct gf_trainer *t;
    if (gf_trainer_new(m, &o, &t) != GF_OK)
        fail_msg("%s", gf_last_error());
    return t;
}

static struct gf_trainer *trainer(const struct gf_model *m, enum gf_precision p)
{
    return trainer_scaled(m, p, 0, 0);
}

static void train(struct gf_trainer *t, int steps)
{
    struct gf_data *d;
    assert_int_equal(gf_data_open_dir(t, MLP_DATA, &d), GF_OK);
    for (int i = 0; i < steps; i++) {
        struct gf_train_stats st;
        if (gf_trainer_step(t, d, &st) != GF_OK)
            fail_msg("step %d: %s", i, gf_last_error());
    }
    gf_data_free(d);
}

static size_t count_op(const struct gf_graph *g, const char *op)
{
    size_t n = 0;
    for (const struct gf_node *nd = g->first; nd; nd = nd->next)
        n += strcmp(nd->op_type, op) == 0;
    return n;
}

/* bf16 training; the export is the caller's fp32 graph with new fp32 weights. */
static void test_bf16_export_keeps_fp32_graph(void **state)
{
    (void)state;
    struct gf_model *m;
    assert_int_equal(gf_model_load(MLP, NULL, &m), GF_OK);
    struct gf_trainer *t = trainer(m, GF_PRECISION_BF16);
    train(t, 3);
    struct gf_model *e;
    assert_int_equal(gf_trainer_export(t, &e), GF_OK);
    assert_int_equal(gf_model_precision(e), GF_PRECISION_FP32);
    assert_int_equal(e->graph->n_nodes, m->graph->n_nodes);
    assert_int_equal(count_op(e->graph, "Cast"), count_op(m->graph, "Cast"));
    size_t changed = 0;
    for (size_t i = 0; i < m->graph->n_inits; i++) {
        const struct gf_value *a = m->graph->inits[i];
        const struct gf_value *b = gf_graph_find(e->graph, a->name);
        assert_non_null(b);
        assert_non_null(b->init);
        assert_int_equal(b->init->dtype, a->init->dtype);
        if (a->init->dtype == GF_FLOAT && a->init->nelem >= 2)
            changed += memcmp(a->init->data, b->init->data,
                              a->init->nbytes) != 0;
    }
    assert_true(changed > 0); /* the trained weights, not the caller's */
    gf_model_free(e);
    gf_trainer_free(t);
    gf_model_free(m);
}

/* The losses and norms of 20 AdamW steps (lr 1e-3) of models/<name> at
 * precision p; with clipping, SGD steps (lr 0.5). */
static void losses(const char *name, enum gf_precision p, bool fuse, double clip,
                   double *loss, double *norm, int64_t *skipped)
{
    char path[512];
    snprintf(path, sizeof(path), "models/%s/legacy/model.onnx", name);
    struct gf_model *m;
    assert_int_equal(gf_model_load(path, NULL, &m), GF_OK);
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, clip > 0 ? GF_OPTIM_SGD : GF_OPTIM_ADAMW);
    if (clip > 0) /* SGD: the step is lr x the clipped gradient */
        o.optim.lr = 0.5;
    o.steps = 20;
    o.fuse = fuse;
    o.exec.backend = "cpu";
    o.precision = p;
    o.clip_grad_norm = clip;
    struct gf_trainer *t;
    if (gf_trainer_new(m, &o, &t) != GF_OK)
        fail_msg("%s: %s", name, gf_last_error());
    struct gf_data *d;
    snprintf(path, sizeof(path), "models/%s/train_data", name);
    assert_int_equal(gf_data_open_dir(t, path, &d), GF_OK);
    struct gf_train_stats st = {0};
    for (int i = 0; i < 20; i++) {
        if (gf_trainer_step(t, d, &st) != GF_OK)
            fail_msg("%s step %d: %s", name, i, gf_last_error());
        loss[i] = st.loss;
        norm[i] = st.grad_norm;
    }
    *skipped = st.n_skipped;
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

/* fp16 training with loss scaling (S = 65536, GradScaler's default) tracks
 * fp32 training: at every step within 2^-9 relative, the bound
 * tests/test_precision.c gives bf16 training (the forward's rounding, <= u,
 * plus ~u-relative gradient errors moving AdamW's lr-sized steps), here
 * 8u for fp16's u = 2^-12 (measured: 1.8e-4 = 0.7u mlp, 4.1e-5 llama_tiny
 * fused).  No step is skipped: these models' scaled gradients stay below
 * fp16's largest value, 65504.  Then SGD (lr 0.5) clipped at 0.1 (mlp's norms
 * are about 0.5): each step moves lr x 0.1 and the loss falls only if
 * clipping sees the unscaled norm (the scaled one, 2^16 times larger,
 * would make the steps ~2^-16 as long).  The reported norms are within 2%
 * of fp32's (measured <= 0.25%; the scaled norm would be 2^16 off). */
static void test_fp16_tracks_fp32(void **state)
{
    (void)state;
    static const struct { const char *model; bool fuse; double clip; } runs[] = {
        {"mlp", false, 0}, {"llama_tiny", true, 0}, {"mlp", false, 0.1}};
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        double ref[20], got[20], nref[20], ngot[20], worst = 0, worst_n = 0;
        int64_t skipped;
        losses(runs[r].model, GF_PRECISION_FP32, runs[r].fuse, runs[r].clip, ref, nref,
               &skipped);
        assert_int_equal(skipped, 0);
        losses(runs[r].model, GF_PRECISION_FP16, runs[r].fuse, runs[r].clip, got, ngot,
               &skipped);
        for (int i = 0; i < 20; i++) {
            worst = fmax(worst, fabs(got[i] - ref[i]) / fabs(ref[i]));
            worst_n = fmax(worst_n, fabs(ngot[i] - nref[i]) / nref[i]);
        }
        print_message("%s clip %g: fp16 loss at most %.3g, norm %.3g relative from fp32's, "
                      "%lld skipped\n", runs[r].model, runs[r].clip, worst, worst_n,
                      (long long)skipped);
        /* the reported norm is the unscaled one (S times it would be 2^16 off);
         * the clipped run (the norms are ~0.5, clipped to 0.1) tracks fp32 only
         * if clipping saw it too */
        assert_true(worst_n <= 0.02);
        assert_int_equal(skipped, 0);
        if (!(worst <= ldexp(1, -9)))
            fail_msg("%s: fp16 loss %.3g relative from fp32's (bound 2^-9)", runs[r].model,
                     worst);
        assert_true(got[19] < got[0]);
    }
}

/* The parameters' values, concatenated (size: *n floats). */
static float *snapshot(const struct gf_trainer *t, size_t *n)
{
    size_t total = 0;
    for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
        struct gf_param_info p;
        gf_trainer_get_param(t, i, &p);
        total += p.nelem;
    }
    float *x = malloc(total * sizeof(float)), *at = x;
    assert_non_null(x);
    for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
        struct gf_param_info p;
        gf_trainer_get_param(t, i, &p);
        memcpy(at, p.data, p.nelem * sizeof(float));
        at += p.nelem;
    }
    *n = total;
    return x;
}

/* GradScaler.update(), written here as the reference: the scale after a
 * step with `finite` gradients, from scale s and good-step count *good. */
static double ref_update(double s, bool finite, int64_t *good, int64_t window)
{
    if (!finite) {
        *good = 0;
        return s * 0.5;
    }
    if (++*good == window) {
        *good = 0;
        return s * 2;
    }
    return s;
}

/* Steps `n` of t on d, checking each against the reference scaler and the
 * parameters against the ones before it; S of each step in s[]. */
static void scaled_steps(struct gf_trainer *t, struct gf_data *d, int n, double *s,
                         double *ref_s, int64_t *good, int64_t window, int *n_skip,
                         int *n_grow, double *loss)
{
    for (int i = 0; i < n; i++) {
        size_t np;
        float *before = snapshot(t, &np);
        struct gf_train_stats st;
        if (gf_trainer_step(t, d, &st) != GF_OK)
            fail_msg("step %d: %s", i, gf_last_error());
        size_t np2;
        float *after = snapshot(t, &np2);
        assert_int_equal(np, np2);
        bool same = memcmp(before, after, np * sizeof(float)) == 0;
        assert_true(st.loss_scale == *ref_s); /* the scale this step used */
        s[i] = st.loss_scale;
        loss[i] = st.loss;
        assert_int_equal(same, st.skipped); /* skipped: untouched; else updated */
        assert_true(st.skipped == !isfinite(st.grad_norm));
        double next = ref_update(*ref_s, !st.skipped, good, window);
        *n_skip += st.skipped;
        *n_grow += next > *ref_s;
        *ref_s = next;
        free(before);
        free(after);
    }
}

/* A scale of 2^40 overflows the fp16 backward: steps are skipped with the
 * parameters unchanged and S halved until the gradient fits, then S doubles
 * after every 2 good steps (window 2), overflowing again: the sequence of S
 * is the hand-written GradScaler's above.  A checkpoint keeps S: the
 * resumed run takes the same scales and losses as the uninterrupted one. */
static void test_fp16_overflow_and_resume(void **state)
{
    (void)state;
    const char *ckpt = "test_train_precision.ckpt.onnx";
    struct gf_model *m;
    assert_int_equal(gf_model_load(MLP, NULL, &m), GF_OK);
    struct gf_trainer *t = trainer_scaled(m, GF_PRECISION_FP16, ldexp(1, 40), 2);
    struct gf_data *d;
    assert_int_equal(gf_data_open_dir(t, MLP_DATA, &d), GF_OK);
    double s[60], loss[60], ref_s = ldexp(1, 40);
    int64_t good = 0;
    int n_skip = 0, n_grow = 0;
    scaled_steps(t, d, 40, s, &ref_s, &good, 2, &n_skip, &n_grow, loss);
    print_message("S after 40 steps 2^%g, %d skipped, %d growths\n", log2(ref_s), n_skip,
                  n_grow);
    assert_true(n_skip >= 10); /* 2^40 down to at most 2^30 at least */
    assert_true(n_grow >= 1);
    assert_true(loss[39] < loss[0]);
    assert_int_equal(gf_trainer_save_checkpoint(t, d, ckpt), GF_OK);
    /* the uninterrupted run goes on */
    double s_ref[10], l_ref[10], ref_s2 = ref_s;
    int64_t good2 = good;
    int a = 0, b = 0;
    scaled_steps(t, d, 10, s_ref, &ref_s2, &good2, 2, &a, &b, l_ref);
    gf_data_free(d);
    gf_trainer_free(t);
    /* a new trainer resumed from the checkpoint takes the same steps */
    t = trainer_scaled(m, GF_PRECISION_FP16, ldexp(1, 40), 2);
    assert_int_equal(gf_data_open_dir(t, MLP_DATA, &d), GF_OK);
    assert_int_equal(gf_trainer_load_checkpoint(t, d, ckpt), GF_OK);
    double s_res[10], l_res[10];
    a = b = 0;
    scaled_steps(t, d, 10, s_res, &ref_s, &good, 2, &a, &b, l_res);
    for (int i = 0; i < 10; i++) {
        assert_true(s_res[i] == s_ref[i]);
        assert_true(l_res[i] == l_ref[i]);
    }
    remove(ckpt);
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

/* Casts of a parameter (an initializer) to a 16-bit type in g. */
static size_t param_casts(const struct gf_graph *g)
{
    size_t n = 0;
    for (const struct gf_node *nd = g->first; nd; nd = nd->next) {
        int64_t to = gf_node_attr_int(nd, "to", 0);
        n += nd->op == GF_OP_CAST && nd->inputs[0] && nd->inputs[0]->init &&
             (to == GF_BFLOAT16 || to == GF_FLOAT16);
    }
    return n;
}

/* The low copies (executor/train.c, low_copies): the masters' Casts to the
 * low type leave the training graph, one Cast over the parameters refreshes
 * them after each update, and training takes the same steps, bit for bit,
 * as with the per-parameter Casts (GRAPHFUSE_NO_LOW_COPIES=1), in bf16 and
 * in fp16 with loss scaling, on the host path and in the session's
 * epilogue (GRAPHFUSE_TRAIN_IN_GRAPH=1). */
static void test_low_copies(void **state)
{
    (void)state;
    struct gf_model *m;
    assert_int_equal(gf_model_load(MLP, NULL, &m), GF_OK);
    for (int c = 0; c < 4; c++) {
        enum gf_precision p = c & 1 ? GF_PRECISION_FP16 : GF_PRECISION_BF16;
        if (c & 2)
            setenv("GRAPHFUSE_TRAIN_IN_GRAPH", "1", 1);
        struct gf_trainer *t = trainer(m, p);
        setenv("GRAPHFUSE_NO_LOW_COPIES", "1", 1);
        struct gf_trainer *r = trainer(m, p);
        unsetenv("GRAPHFUSE_NO_LOW_COPIES");
        unsetenv("GRAPHFUSE_TRAIN_IN_GRAPH");
        size_t with = param_casts(gf_trainer_model(t)->graph);
        size_t without = param_casts(gf_trainer_model(r)->graph);
        printf("%s%s: parameter Casts %zu with low copies, %zu without\n",
               c & 1 ? "fp16" : "bf16", c & 2 ? " (in graph)" : "", with, without);
        assert_int_equal(with, 0);
        assert_true(without > 0);
        struct gf_data *dt, *dr;
        assert_int_equal(gf_data_open_dir(t, MLP_DATA, &dt), GF_OK);
        assert_int_equal(gf_data_open_dir(r, MLP_DATA, &dr), GF_OK);
        for (int i = 0; i < 6; i++) {
            struct gf_train_stats a, b;
            assert_int_equal(gf_trainer_step(t, dt, &a), GF_OK);
            assert_int_equal(gf_trainer_step(r, dr, &b), GF_OK);
            if (memcmp(&a.loss, &b.loss, sizeof(double)) != 0)
                fail_msg("step %d: loss %.9g with low copies, %.9g without", i, a.loss, b.loss);
        }
        for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
            struct gf_param_info a, b;
            gf_trainer_get_param(t, i, &a);
            gf_trainer_get_param(r, i, &b);
            assert_int_equal(a.nelem, b.nelem);
            if (memcmp(a.data, b.data, a.nelem * sizeof(float)) != 0)
                fail_msg("parameter '%s' differs after training", a.name);
        }
        gf_data_free(dt);
        gf_data_free(dr);
        gf_trainer_free(t);
        gf_trainer_free(r);
    }
    gf_model_free(m);
}

/* fp16 loss scaling in the session's epilogue (the update staged with
 * grad_scale 1 / S, clipping on the norm times it; on CUDA the whole step
 * one graph) takes the host path's steps bit for bit: losses, norms, S,
 * the skipped steps (from S = 2^40, window 2: overflows, then growth), and
 * the parameters, with and without clipping. */
static void test_fp16_in_graph(void **state)
{
    (void)state;
    struct gf_model *m;
    assert_int_equal(gf_model_load(MLP, NULL, &m), GF_OK);
    for (int clip = 0; clip < 2; clip++) {
        struct gf_trainer *t[2];
        for (int g = 0; g < 2; g++) {
            struct gf_trainer_opts o;
            gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
            o.steps = 40;
            o.exec.backend = "cpu";
            o.precision = GF_PRECISION_FP16;
            o.loss_scale = 0x1p40;
            o.loss_scale_window = 2;
            o.clip_grad_norm = clip ? 0.05 : 0;
            setenv("GRAPHFUSE_TRAIN_IN_GRAPH", g ? "1" : "0", 1);
            if (gf_trainer_new(m, &o, &t[g]) != GF_OK)
                fail_msg("%s", gf_last_error());
        }
        unsetenv("GRAPHFUSE_TRAIN_IN_GRAPH");
        struct gf_data *d[2];
        for (int g = 0; g < 2; g++)
            assert_int_equal(gf_data_open_dir(t[g], MLP_DATA, &d[g]), GF_OK);
        int skipped = 0;
        for (int i = 0; i < 30; i++) {
            struct gf_train_stats a, b;
            assert_int_equal(gf_trainer_step(t[0], d[0], &a), GF_OK);
            assert_int_equal(gf_trainer_step(t[1], d[1], &b), GF_OK);
            if (memcmp(&a.loss, &b.loss, sizeof(double)) || a.loss_scale != b.loss_scale ||
                a.skipped != b.skipped || a.n_skipped != b.n_skipped ||
                (!a.skipped && memcmp(&a.grad_norm, &b.grad_norm, sizeof(double))))
                fail_msg("clip %d step %d: host loss %.9g S %g skipped %d norm %.9g; in graph "
                         "%.9g S %g skipped %d norm %.9g", clip, i, a.loss, a.loss_scale,
                         a.skipped, a.grad_norm, b.loss, b.loss_scale, b.skipped, b.grad_norm);
            skipped += a.skipped;
        }
        printf("clip %d: 30 steps, %d skipped, the same in the epilogue\n", clip, skipped);
        assert_true(skipped >= 10);
        for (size_t i = 0; i < gf_trainer_param_count(t[0]); i++) {
            struct gf_param_info a, b;
            gf_trainer_get_param(t[0], i, &a);
            gf_trainer_get_param(t[1], i, &b);
            if (memcmp(a.data, b.data, a.nelem * sizeof(float)) != 0)
                fail_msg("clip %d: parameter '%s' differs", clip, a.name);
        }
        for (int g = 0; g < 2; g++) {
            gf_data_free(d[g]);
            gf_trainer_free(t[g]);
        }
    }
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_export_keeps_fp32_graph),
        cmocka_unit_test(test_fp16_tracks_fp32),
        cmocka_unit_test(test_fp16_overflow_and_resume),
        cmocka_unit_test(test_low_copies),
        cmocka_unit_test(test_fp16_in_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
