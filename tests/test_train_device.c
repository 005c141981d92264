/*
 * Training on the device: the optimizer ops (graph/ops.def, "optimizer
 * ops": GradAccumulate, GradNorm, SGDStep, AdamWStep) and the trainer that
 * runs them.
 *
 * The CPU kernels must compute bit for bit what executor/optim.c computed
 * before the ops existed: its per-tensor SGD / AdamW and clipping, written
 * out again below as the reference (ref_*), fed the way the trainer fed
 * them (gradients accumulated from +0, then multiplied by the clipping
 * coefficient).  The OpenCL kernels (when a platform exists) must match the
 * CPU kernels within 1e-6 relative (GradNorm: 1e-12, and 1e-6 in its float
 * path); GradAccumulate is exact.  Then the trainer: on every backend here,
 * a small model trains to the same losses and weights as the CPU, and a
 * checkpoint written from the device resumes bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "exec_priv.h" /* gf_devop: the trainer's way of running an op */
#include "gf_exec.h"
#include "gf_kernels.h"
#include "optim_ops.h"

#define N 1037 /* odd on purpose */
#define R 37   /* a [R, C] tied copy, transposed */
#define C 53
#define STEPS 6

static uint64_t rng = 99;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Gradients with exact zeros of both signs among them. */
static void fill_grad(float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = i % 17 == 3 ? -0.0f : i % 19 == 5 ? 0.0f : frand() * (i % 7 == 0 ? 1e-3f : 1.0f);
}

/* ---- the reference: executor/optim.c before the optimizer ops -------------------- */

struct hp {
    double lr, beta1, beta2, eps, wd, momentum, dampening, clip_coef;
    bool nesterov, adamw;
};

static void ref_sgd(const struct hp *o, float *p, const float *grad, float *buf, size_t n,
                    int64_t step)
{
    const float wd = (float)o->wd, mom = (float)o->momentum;
    const float damp = (float)(1.0 - o->dampening), neg_lr = (float)-o->lr;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        if (o->wd != 0)
            g = fmaf(wd, p[i], g);
        if (o->momentum != 0) {
            if (step == 0)
                buf[i] = g;
            else
                buf[i] = fmaf(damp, g, buf[i] * mom);
            g = o->nesterov ? fmaf(mom, buf[i], g) : buf[i];
        }
        p[i] = fmaf(neg_lr, g, p[i]);
    }
}

static void ref_adamw(const struct hp *o, float *p, const float *grad, float *m, float *v,
                      size_t n, int64_t step)
{
    double t = (double)(step + 1), lr = o->lr;
    const float decay = (float)(1.0 - lr * o->wd);
    const float w = (float)(1.0 - o->beta1), b2 = (float)o->beta2;
    const float one_b2 = (float)(1.0 - o->beta2);
    const bool small = fabsf(w) < 0.5f;
    const float step_size = (float)-(lr / (1.0 - pow(o->beta1, t)));
    const float bc2_sqrt = (float)pow(1.0 - pow(o->beta2, t), 0.5);
    const float eps = (float)o->eps;
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i];
        if (o->wd != 0)
            p[i] = p[i] * decay;
        m[i] = small ? fmaf(w, g - m[i], m[i]) : fmaf(w - 1.0f, g - m[i], g);
        v[i] = v[i] * b2 + one_b2 * g * g;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + step_size * (m[i] / denom);
    }
}

/* The trainer's gradient before the update: accumulated from +0 (scale 1),
 * then clipped (every element multiplied, also by 1) when clipping is on. */
static void ref_grad(const struct hp *o, const float *g, float *acc, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        acc[i] = 0;
        acc[i] += g[i] * 1.0f;
        if (o->clip_coef != 1)
            acc[i] *= (float)o->clip_coef;
    }
}

/* ---- running one op on a backend ------------------------------------------------------ */

struct op {
    struct gf_model *m;
    struct gf_node *n;
};

static struct op make_op(const char *type, size_t n_in, size_t n_out)
{
    struct op o = {gf_model_new(8, "t"), NULL};
    struct gf_value *v[8];
    for (size_t i = 0; i < n_in + n_out; i++)
        v[i] = gf_graph_new_value(o.m->graph, NULL, "v");
    o.n = gf_graph_add_node(o.m->graph, type, "graphfuse", type, n_in, v, n_out, v + n_in);
    assert_non_null(o.n);
    return o;
}

static struct gf_tview view(enum gf_dtype dt, void *data, size_t n, int64_t rows)
{
    struct gf_tview t = {.dtype = dt, .data = data};
    if (rows)
        gf_tview_set_shape(&t, 2, (int64_t[]){rows, (int64_t)n / rows});
    else
        gf_tview_set_shape(&t, 1, (int64_t[]){(int64_t)n});
    return t;
}

static struct gf_tview hyper_view(double *h, size_t len, bool host_only)
{
    struct gf_tview t = view(GF_DOUBLE, host_only ? NULL : h, len, 0);
    t.host = h;
    return t;
}

static void run(struct gf_backend *be, const struct op *o, const struct gf_tview *in,
                size_t n_in, struct gf_tview *out, size_t n_out)
{
    const struct gf_kernel *k = gf_kernel_find(be, o->n, in, n_in);
    if (!k)
        fail_msg("no %s kernel for %s", be->ops->name, o->n->op_type);
    struct gf_kernel_args a = {.node = o->n, .in = in, .n_in = n_in, .out = out,
                               .n_out = n_out, .n_threads = 2, .backend = be};
    size_t ws = k->workspace ? k->workspace(&a) : 0;
    a.workspace = ws ? be->ops->alloc(be, ws) : NULL;
    if (k->run(&a) != GF_OK)
        fail_msg("%s on %s: %s", o->n->op_type, be->ops->name, gf_last_error());
    assert_int_equal(be->ops->sync(be), GF_OK);
    if (a.workspace)
        be->ops->release(be, a.workspace);
}

static struct gf_backend *cpu(void)
{
    return gf_backend_get("cpu");
}

static struct gf_backend *opencl(void)
{
    static struct gf_backend *be;
    static bool tried;
    const char *off = getenv("GRAPHFUSE_TEST_NO_OPENCL");
    if (!tried && !(off && *off && strcmp(off, "0") != 0)) {
        if (gf_backend_open("opencl", getenv("GRAPHFUSE_TEST_DEVICE"), &be) != GF_OK) {
            printf("SKIP OpenCL: %s\n", gf_last_error());
            be = NULL;
        }
    }
    tried = true;
    return be;
}

/* n floats of backend memory holding x (NULL: uninitialized). */
static void *dev_put(struct gf_backend *be, const void *x, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    assert_non_null(d);
    if (x)
        assert_int_equal(be->ops->copy_in(be, d, x, bytes), GF_OK);
    return d;
}

static void dev_get(struct gf_backend *be, void *x, void *d, size_t bytes)
{
    assert_int_equal(be->ops->copy_out(be, x, d, bytes), GF_OK);
}

/* ---- CPU kernels against the reference, bit for bit ------------------------------------ */

static const struct hp adamw_cases[] = {
    {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .wd = 0.01, .clip_coef = 1,
     .adamw = true},
    {.lr = 3e-2, .beta1 = 0.3, .beta2 = 0.95, .eps = 1e-6, .wd = 0, .clip_coef = 0.37,
     .adamw = true}, /* 1 - beta1 >= 0.5: lerp's second form */
};

static const struct hp sgd_cases[] = {
    {.lr = 0.1, .clip_coef = 1},
    {.lr = 0.05, .momentum = 0.9, .clip_coef = 1},
    {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .wd = 0.02, .clip_coef = 0.5},
    {.lr = 0.05, .momentum = 0.9, .wd = 0.01, .nesterov = true, .clip_coef = 1},
};

static void set_hyper(const struct hp *o, int64_t step, double *h)
{
    if (o->adamw) {
        double v[GF_ADAMW_HYPER] = {o->lr, o->beta1, o->beta2, o->eps, o->wd, (double)step,
                                    o->clip_coef};
        memcpy(h, v, sizeof(v));
    } else {
        double v[GF_SGD_HYPER] = {o->lr, o->momentum, o->dampening, o->wd, o->nesterov,
                                  (double)step, o->clip_coef};
        memcpy(h, v, sizeof(v));
    }
}

/* One update of p / s0 / s1 (host arrays of N) on backend be. */
static void update_on(struct gf_backend *be, const struct hp *o, int64_t step, float *p,
                      const float *g, float *s0, float *s1)
{
    bool dev = !be->host_memory, sgd_buf = !o->adamw && o->momentum != 0;
    size_t bytes = N * sizeof(float);
    void *dp = dev ? dev_put(be, p, bytes) : p, *dg = dev ? dev_put(be, g, bytes) : (void *)g;
    void *d0 = dev ? dev_put(be, s0, bytes) : s0, *d1 = dev ? dev_put(be, s1, bytes) : s1;
    double h[8];
    set_hyper(o, step, h);
    struct op op = make_op(o->adamw ? "AdamWStep" : "SGDStep", o->adamw ? 5 : 4,
                           o->adamw ? 3 : 2);
    struct gf_tview in[5], out[3];
    in[0] = view(GF_FLOAT, dp, N, 0);
    in[1] = view(GF_FLOAT, dg, N, 0);
    out[0] = view(GF_FLOAT, dp, N, 0);
    if (o->adamw) {
        in[2] = view(GF_FLOAT, d0, N, 0);
        in[3] = view(GF_FLOAT, d1, N, 0);
        in[4] = hyper_view(h, GF_ADAMW_HYPER, dev);
        out[1] = view(GF_FLOAT, d0, N, 0);
        out[2] = view(GF_FLOAT, d1, N, 0);
        run(be, &op, in, 5, out, 3);
    } else {
        in[2] = hyper_view(h, GF_SGD_HYPER, dev);
        in[3] = view(GF_FLOAT, sgd_buf ? d0 : NULL, sgd_buf ? N : 0, 0);
        out[1] = view(GF_FLOAT, sgd_buf ? d0 : NULL, sgd_buf ? N : 0, 0);
        run(be, &op, in, 4, out, 2);
    }
    if (dev) {
        dev_get(be, p, dp, bytes);
        dev_get(be, s0, d0, bytes);
        dev_get(be, s1, d1, bytes);
        void *all[] = {dp, dg, d0, d1};
        for (int i = 0; i < 4; i++)
            be->ops->release(be, all[i]);
    }
    gf_model_free(op.m);
}

static void check_bits(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s[%zu]: %.9g (0x%08x), the reference %.9g (0x%08x)", what, i, got[i],
                     *(const uint32_t *)&got[i], want[i], *(const uint32_t *)&want[i]);
}

static void check_close(const float *got, const float *want, size_t n, double rtol,
                        const char *what, size_t *differ)
{
    for (size_t i = 0; i < n; i++) {
        *differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        if (!(fabs((double)got[i] - want[i]) <= rtol * fabs((double)want[i]) + 1e-30))
            fail_msg("%s[%zu]: %.9g, the CPU %.9g", what, i, got[i], want[i]);
    }
}

/* cases[c] for STEPS steps: the CPU kernel against the reference, bit for
 * bit, and (cl) the OpenCL kernel against the CPU kernel. */
static void updates(const struct hp *o, struct gf_backend *cl)
{
    static float p[3][N], s0[3][N], s1[3][N], g[N], acc[N];
    for (size_t i = 0; i < N; i++)
        p[0][i] = p[1][i] = p[2][i] = frand();
    memset(s0, 0, sizeof(s0));
    memset(s1, 0, sizeof(s1));
    size_t differ = 0;
    for (int64_t step = 0; step < STEPS; step++) {
        fill_grad(g, N);
        ref_grad(o, g, acc, N);
        if (o->adamw)
            ref_adamw(o, p[0], acc, s0[0], s1[0], N, step);
        else
            ref_sgd(o, p[0], acc, s0[0], N, step);
        update_on(cpu(), o, step, p[1], g, s0[1], s1[1]);
        check_bits(p[1], p[0], N, "parameter");
        check_bits(s0[1], s0[0], N, "state 0");
        check_bits(s1[1], s1[0], N, "state 1");
        if (!cl)
            continue;
        update_on(cl, o, step, p[2], g, s0[2], s1[2]);
        check_close(p[2], p[1], N, 1e-6, "OpenCL parameter", &differ);
        check_close(s0[2], s0[1], N, 1e-6, "OpenCL state 0", &differ);
        check_close(s1[2], s1[1], N, 1e-6, "OpenCL state 1", &differ);
        memcpy(p[2], p[1], sizeof(p[2])); /* each step from the CPU's values */
        memcpy(s0[2], s0[1], sizeof(s0[2]));
        memcpy(s1[2], s1[1], sizeof(s1[2]));
    }
    if (cl)
        printf("  %s: OpenCL: %zu of %d values differ in some bit\n",
               o->adamw ? "AdamWStep" : "SGDStep", differ, 3 * N * STEPS);
}

static void adamw_step(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(adamw_cases) / sizeof(adamw_cases[0]); c++)
        updates(&adamw_cases[c], opencl());
}

static void sgd_step(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(sgd_cases) / sizeof(sgd_cases[0]); c++)
        updates(&sgd_cases[c], opencl());
}

/* gf_optim_step (the public per-tensor optimizer) runs the same kernels. */
static void public_optimizer(void **state)
{
    (void)state;
    static float p[2][N], g[N], acc[N], m[N], v[N];
    struct gf_optim_opts oo;
    gf_optim_opts_init(&oo, GF_OPTIM_ADAMW);
    struct hp o = {.lr = oo.lr, .beta1 = oo.beta1, .beta2 = oo.beta2, .eps = oo.eps,
                   .wd = oo.weight_decay, .clip_coef = 1, .adamw = true};
    struct gf_optim *opt;
    size_t n = N;
    assert_int_equal(gf_optim_new(&oo, 1, &n, &opt), GF_OK);
    for (size_t i = 0; i < N; i++)
        p[0][i] = p[1][i] = frand();
    memset(m, 0, sizeof(m));
    memset(v, 0, sizeof(v));
    for (int64_t step = 0; step < STEPS; step++) {
        fill_grad(g, N);
        ref_grad(&o, g, acc, N);
        ref_adamw(&o, p[0], acc, m, v, N, step);
        float *pp = p[1];
        const float *ga = acc;
        gf_optim_step(opt, &pp, &ga, oo.lr);
        check_bits(p[1], p[0], N, "gf_optim_step parameter");
        check_bits(gf_optim_get_state(opt, 0, 1), v, N, "gf_optim_step exp_avg_sq");
    }
    gf_optim_free(opt);
}

/* ---- GradNorm, GradAccumulate ------------------------------------------------------------ */

static double norm_on(struct gf_backend *be, const float *x, size_t n)
{
    bool dev = !be->host_memory;
    double out = -1;
    void *dx = dev ? dev_put(be, x, n * sizeof(float)) : (void *)x;
    void *dout = dev ? dev_put(be, NULL, sizeof(double)) : &out;
    struct op op = make_op("GradNorm", 1, 1);
    struct gf_tview in = view(GF_FLOAT, n ? dx : NULL, n, 0);
    struct gf_tview o = view(GF_DOUBLE, dout, 1, 0);
    run(be, &op, &in, 1, &o, 1);
    if (dev) {
        dev_get(be, &out, dout, sizeof(double));
        be->ops->release(be, dx);
        be->ops->release(be, dout);
    }
    gf_model_free(op.m);
    return out;
}

static void grad_norm(void **state)
{
    (void)state;
    static float x[3 * N * 100];
    size_t sizes[] = {0, 1, N, sizeof(x) / sizeof(x[0])};
    fill_grad(x, sizeof(x) / sizeof(x[0]));
    x[7] = 1e30f; /* squares beyond float's range */
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        size_t n = sizes[c];
        double want = 0;
        for (size_t i = 0; i < n; i++)
            want += (double)x[i] * x[i];
        want = sqrt(want);
        double got = norm_on(cpu(), x, n);
        assert_memory_equal(&got, &want, sizeof(double));
        struct gf_backend *cl = opencl();
        if (!cl)
            continue;
        got = norm_on(cl, x, n);
        if (!(fabs(got - want) <= 1e-12 * want))
            fail_msg("OpenCL GradNorm of %zu: %.17g, the CPU %.17g", n, got, want);
    }
    /* without float64 (devices lacking cl_khr_fp64): float with compensation */
    struct gf_backend *cl = opencl();
    if (cl) {
        x[7] = 0.5f;
        size_t n = sizes[3];
        double want = 0;
        for (size_t i = 0; i < n; i++)
            want += (double)x[i] * x[i];
        want = sqrt(want);
        setenv("GRAPHFUSE_CL_FP64", "0", 1);
        double got = norm_on(cl, x, n);
        unsetenv("GRAPHFUSE_CL_FP64");
        if (!(fabs(got - want) <= 1e-6 * want))
            fail_msg("OpenCL GradNorm in float: %.17g, the CPU %.17g", got, want);
    }
}

/* y = (acc or 0) + g * scale; transposed: g [C, R] into y [R, C]. */
static void accumulate_on(struct gf_backend *be, bool tr, bool with_acc, float scale,
                          const float *g, const float *acc, float *y)
{
    size_t n = R * C, bytes = n * sizeof(float);
    bool dev = !be->host_memory;
    void *dg = dev ? dev_put(be, g, bytes) : (void *)g;
    void *dacc = dev ? dev_put(be, acc, bytes) : (void *)acc;
    void *dy = dev ? dev_put(be, NULL, bytes) : y;
    struct op op = make_op("GradAccumulate", 2, 1);
    gf_node_set_attr_float(op.n, "scale", scale);
    gf_node_set_attr_int(op.n, "transpose", tr);
    struct gf_tview in[2] = {view(GF_FLOAT, dg, n, tr ? C : 0),
                             view(GF_FLOAT, with_acc ? dacc : NULL, n, tr ? R : 0)};
    struct gf_tview out = view(GF_FLOAT, dy, n, tr ? R : 0);
    run(be, &op, in, 2, &out, 1);
    if (dev) {
        dev_get(be, y, dy, bytes);
        void *all[] = {dg, dacc, dy};
        for (int i = 0; i < 3; i++)
            be->ops->release(be, all[i]);
    }
    gf_model_free(op.m);
}

static void grad_accumulate(void **state)
{
    (void)state;
    static float g[R * C], acc[R * C], want[R * C], got[R * C];
    fill_grad(g, R * C);
    fill_grad(acc, R * C);
    const float scale = (float)(1.0 / 3);
    for (int tr = 0; tr < 2; tr++)
        for (int with_acc = 0; with_acc < 2; with_acc++) {
            for (size_t a = 0; a < R; a++)
                for (size_t b = 0; b < C; b++) {
                    size_t o = a * C + b, gi = tr ? b * R + a : o;
                    want[o] = with_acc ? acc[o] : 0;
                    want[o] += g[gi] * scale;
                }
            accumulate_on(cpu(), tr, with_acc, scale, g, acc, got);
            check_bits(got, want, R * C, "GradAccumulate");
            if (opencl()) {
                memset(got, 0, sizeof(got));
                accumulate_on(opencl(), tr, with_acc, scale, g, acc, got);
                check_bits(got, want, R * C, "OpenCL GradAccumulate");
            }
        }
}

/* A backend without an op's kernel runs the CPU's on host copies
 * (gf_devop_run): AdamWStep forced that way on OpenCL, in place, gives the
 * CPU kernel's bits and counts its copies. */
static void staged_fallback(void **state)
{
    (void)state;
    struct gf_backend *cl = opencl();
    if (!cl)
        skip();
    static float p[2][N], g[N], m[2][N], v[2][N];
    for (size_t i = 0; i < N; i++) {
        p[0][i] = p[1][i] = frand();
        m[0][i] = m[1][i] = frand() * 0.1f;
        v[0][i] = v[1][i] = fabsf(frand()) * 0.01f;
    }
    fill_grad(g, N);
    const struct hp *o = &adamw_cases[0];
    update_on(cpu(), o, 3, p[0], g, m[0], v[0]);
    size_t bytes = N * sizeof(float);
    void *dp = dev_put(cl, p[1], bytes), *dg = dev_put(cl, g, bytes);
    void *dm = dev_put(cl, m[1], bytes), *dv = dev_put(cl, v[1], bytes);
    double h[8];
    set_hyper(o, 3, h);
    struct op op = make_op("AdamWStep", 5, 3);
    struct gf_tview in[5] = {view(GF_FLOAT, dp, N, 0), view(GF_FLOAT, dg, N, 0),
                             view(GF_FLOAT, dm, N, 0), view(GF_FLOAT, dv, N, 0),
                             hyper_view(h, GF_ADAMW_HYPER, true)};
    struct gf_tview out[3] = {view(GF_FLOAT, dp, N, 0), view(GF_FLOAT, dm, N, 0),
                              view(GF_FLOAT, dv, N, 0)};
    struct gf_traffic tr = {0};
    struct gf_devop d = {.be = cl, .node = op.n, .traffic = &tr, .staged = true,
                         .k = gf_kernel_find(cpu(), op.n, in, 5)};
    assert_non_null(d.k);
    assert_int_equal(gf_devop_run(&d, in, 5, out, 3, 2), GF_OK);
    dev_get(cl, p[1], dp, bytes);
    dev_get(cl, m[1], dm, bytes);
    dev_get(cl, v[1], dv, bytes);
    check_bits(p[1], p[0], N, "staged parameter");
    check_bits(m[1], m[0], N, "staged exp_avg");
    check_bits(v[1], v[0], N, "staged exp_avg_sq");
    assert_int_equal(tr.d2h, 4 * bytes); /* P, G, M, V out; P, M, V back */
    assert_int_equal(tr.h2d, 3 * bytes);
    gf_devop_release(&d);
    void *all[] = {dp, dg, dm, dv};
    for (int i = 0; i < 4; i++)
        cl->ops->release(cl, all[i]);
    gf_model_free(op.m);
}

/* ---- the trainer on every backend ---------------------------------------------------- */

static const char *const backends[] = {"cpu", "opencl"};

static bool have(const char *be)
{
    return strcmp(be, "cpu") == 0 || opencl();
}

/* gpt2_tiny (a tied, transposed lm head), AdamW with clipping and two
 * micro-batches per step, fused, on backend `be`. */
static struct gf_trainer *gpt2_trainer(const char *be, struct gf_model **m, struct gf_data **d)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.steps = STEPS;
    o.clip_grad_norm = 0.5;
    o.accumulate = 2;
    o.fuse = true;
    o.exec.backend = be;
    struct gf_trainer *t;
    if (gf_model_load("models/gpt2_tiny/legacy/model.onnx", NULL, m) != GF_OK ||
        gf_trainer_new(*m, &o, &t) != GF_OK ||
        gf_data_open_dir(t, "models/gpt2_tiny/train_data", d) != GF_OK)
        fail_msg("gpt2_tiny on %s: %s", be, gf_last_error());
    return t;
}

static void steps(struct gf_trainer *t, struct gf_data *d, int n, double *loss, double *norm)
{
    for (int i = 0; i < n; i++) {
        struct gf_train_stats st;
        if (gf_trainer_step(t, d, &st) != GF_OK)
            fail_msg("step %d: %s", i, gf_last_error());
        loss[i] = st.loss;
        norm[i] = st.grad_norm;
    }
}

/* Every parameter, as the trainer's host copies hold them. */
static float *params(const struct gf_trainer *t, size_t *n)
{
    size_t total = 0;
    struct gf_param_info p;
    for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
        gf_trainer_get_param(t, i, &p);
        total += p.nelem;
    }
    float *all = malloc(total * sizeof(float) + 1), *at = all;
    for (size_t i = 0; i < gf_trainer_param_count(t); i++, at += p.nelem) {
        gf_trainer_get_param(t, i, &p);
        memcpy(at, p.data, p.nelem * sizeof(float));
    }
    *n = total;
    return all;
}

static int by_value(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The device trains as the CPU does: losses within 1e-6, gradient norms
 * within 1e-5, and the tied copy still the transpose of its master. */
static void device_matches_cpu(void **state)
{
    (void)state;
    if (!opencl())
        skip();
    double loss[2][STEPS], norm[2][STEPS];
    for (int b = 0; b < 2; b++) {
        struct gf_model *m;
        struct gf_data *d;
        struct gf_trainer *t = gpt2_trainer(backends[b], &m, &d);
        steps(t, d, STEPS, loss[b], norm[b]);
        struct gf_param_info p, q;
        bool tied = false;
        for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
            gf_trainer_get_param(t, i, &p);
            if (!p.tied_to)
                continue;
            for (size_t j = 0; j < gf_trainer_param_count(t); j++) {
                gf_trainer_get_param(t, j, &q);
                if (strcmp(q.name, p.tied_to) != 0)
                    continue;
                /* the copy holds the master's values (transposed: in another order) */
                float *a = malloc(p.nelem * sizeof(float)), *c = malloc(p.nelem * sizeof(float));
                memcpy(a, p.data, p.nelem * sizeof(float));
                memcpy(c, q.data, p.nelem * sizeof(float));
                qsort(a, p.nelem, sizeof(float), by_value);
                qsort(c, p.nelem, sizeof(float), by_value);
                if (memcmp(a, c, p.nelem * sizeof(float)) != 0)
                    fail_msg("%s: %s is no copy of %s after training", backends[b], p.name,
                             q.name);
                tied = true;
                free(a);
                free(c);
            }
        }
        assert_true(tied);
        gf_data_free(d);
        gf_trainer_free(t);
        gf_model_free(m);
    }
    for (int i = 0; i < STEPS; i++) {
        double rl = fabs(loss[1][i] - loss[0][i]) / fabs(loss[0][i]);
        double rn = fabs(norm[1][i] - norm[0][i]) / fabs(norm[0][i]);
        printf("  step %d: loss %.9g (OpenCL rel. %.2g), norm %.9g (rel. %.2g)\n", i,
               loss[0][i], rl, norm[0][i], rn);
        if (!(rl <= 1e-6) || !(rn <= 1e-5))
            fail_msg("step %d: OpenCL loss %.9g / norm %.9g, the CPU's %.9g / %.9g", i,
                     loss[1][i], norm[1][i], loss[0][i], norm[0][i]);
    }
}

/* 3 steps, a checkpoint, a new trainer resuming it, 3 more: the same
 * losses and weights, bit for bit, as 6 steps straight; on each backend. */
static void checkpoint_resumes_exactly(void **state)
{
    (void)state;
    const char *ckpt = "/tmp/gf_test_train_device.ckpt.onnx";
    for (int b = 0; b < 2; b++) {
        if (!have(backends[b]))
            continue;
        double l0[STEPS], n0[STEPS], l1[STEPS], n1[STEPS];
        size_t np0, np1;
        struct gf_model *m;
        struct gf_data *d;
        struct gf_trainer *t = gpt2_trainer(backends[b], &m, &d);
        steps(t, d, STEPS, l0, n0);
        float *p0 = params(t, &np0);
        gf_data_free(d);
        gf_trainer_free(t);
        gf_model_free(m);
        t = gpt2_trainer(backends[b], &m, &d);
        steps(t, d, STEPS / 2, l1, n1);
        assert_int_equal(gf_trainer_save_checkpoint(t, d, ckpt), GF_OK);
        gf_data_free(d);
        gf_trainer_free(t);
        gf_model_free(m);
        t = gpt2_trainer(backends[b], &m, &d);
        assert_int_equal(gf_trainer_load_checkpoint(t, d, ckpt), GF_OK);
        assert_int_equal(gf_trainer_get_step(t), STEPS / 2);
        steps(t, d, STEPS - STEPS / 2, l1 + STEPS / 2, n1 + STEPS / 2);
        float *p1 = params(t, &np1);
        assert_memory_equal(l0, l1, sizeof(l0));
        assert_memory_equal(n0, n1, sizeof(n0));
        assert_int_equal(np0, np1);
        assert_memory_equal(p0, p1, np0 * sizeof(float));
        free(p0);
        free(p1);
        gf_data_free(d);
        gf_trainer_free(t);
        gf_model_free(m);
    }
    remove(ckpt);
}

/* A finite loss with a NaN gradient: the step stops naming the gradient and
 * the node that made the NaN, with every micro-batch count, and leaves the
 * parameters alone.  loss = mean(x @ w); the "gradient" sqrt(-w). */
static void nan_gradient_named(void **state)
{
    (void)state;
    for (int b = 0; b < 2; b++)
        for (int acc = 1; acc <= 3; acc += 2) {
            if (!have(backends[b]))
                continue;
            struct gf_model *m = gf_model_new(8, "nan");
            assert_int_equal(gf_model_set_opset(m, "", 13), GF_OK);
            struct gf_dim xd[2] = {{-1, "batch", NULL}, {32, NULL, NULL}};
            struct gf_dim ld[1] = {{-1, "batch", NULL}};
            struct gf_value *x = gf_graph_new_value(m->graph, "x", NULL);
            struct gf_value *lab = gf_graph_new_value(m->graph, "labels", NULL);
            gf_value_set_tensor_type(x, GF_FLOAT, 2, xd);
            gf_value_set_tensor_type(lab, GF_INT64, 1, ld);
            gf_graph_add_input(m->graph, x);
            gf_graph_add_input(m->graph, lab);
            float w[32 * 4];
            for (int i = 0; i < 32 * 4; i++)
                w[i] = 0.5f + (float)i / 64;
            struct gf_tensor *wt = gf_tensor_new(m, "w.weight", GF_FLOAT, 2,
                                                 (int64_t[]){32, 4}, w);
            struct gf_value *W = gf_graph_add_initializer(m->graph, "w.weight", wt);
            gf_graph_add_input(m->graph, W);
            struct gf_value *v[6];
            const char *names[] = {"p", "loss", "negw", "root", "w.weight_grad"};
            for (int i = 0; i < 5; i++)
                v[i] = gf_graph_new_value(m->graph, names[i], NULL);
            struct gf_value *mm[2] = {x, W};
            gf_graph_add_node(m->graph, "MatMul", "", "the_p", 2, mm, 1, &v[0]);
            struct gf_node *rm = gf_graph_add_node(m->graph, "ReduceMean", "", "the_loss", 1,
                                                   &v[0], 1, &v[1]);
            gf_node_set_attr_int(rm, "keepdims", 0);
            gf_graph_add_node(m->graph, "Neg", "", "the_negw", 1, &W, 1, &v[2]);
            gf_graph_add_node(m->graph, "Sqrt", "", "the_root", 1, &v[2], 1, &v[3]);
            gf_graph_add_node(m->graph, "Identity", "", "the_grad", 1, &v[3], 1, &v[4]);
            gf_graph_add_output(m->graph, v[1]);
            gf_graph_add_output(m->graph, v[4]);
            struct gf_trainer_opts o;
            gf_trainer_opts_init(&o, GF_OPTIM_SGD);
            o.differentiated = true;
            o.accumulate = acc;
            o.exec.backend = backends[b];
            struct gf_trainer *t;
            struct gf_data *d;
            if (gf_trainer_new(m, &o, &t) != GF_OK ||
                gf_data_open_dir(t, "models/mlp/train_data", &d) != GF_OK)
                fail_msg("%s: %s", backends[b], gf_last_error());
            struct gf_train_stats st;
            assert_int_equal(gf_trainer_step(t, d, &st), GF_ERR_INVALID);
            assert_true(st.diverged);
            const char *msg = gf_last_error();
            if (!strstr(msg, "step 0: the gradient of 'w.weight' is not finite: node "
                        "'the_root' (Sqrt) produced NaN"))
                fail_msg("%s, %d micro-batches: %s", backends[b], acc, msg);
            struct gf_param_info p;
            gf_trainer_get_param(t, 0, &p);
            assert_memory_equal(p.data, w, sizeof(w));
            assert_int_equal(gf_trainer_get_step(t), 0);
            gf_data_free(d);
            gf_trainer_free(t);
            gf_model_free(m);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adamw_step),
        cmocka_unit_test(sgd_step),
        cmocka_unit_test(public_optimizer),
        cmocka_unit_test(grad_norm),
        cmocka_unit_test(grad_accumulate),
        cmocka_unit_test(staged_fallback),
        cmocka_unit_test(device_matches_cpu),
        cmocka_unit_test(checkpoint_resumes_exactly),
        cmocka_unit_test(nan_gradient_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
