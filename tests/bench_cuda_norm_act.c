/*
 * Bandwidth of the CUDA norm and activation kernels (kernels/cuda/
 * fused_norm.c, fused_act.c), fp32, next to the device's measured
 * device-to-device copy (be->ops->copy of 1 GiB, bytes read + written).
 *
 *   build/tests/bench_cuda_norm_act [--reps N] [--no-tune]
 *
 * Without a CUDA device it says so and exits 0.  First it checks RMSNorm,
 * RMSNormGrad, LayerNorm, LayerNormGrad, SwiGLU and SwiGLUGrad against the
 * CPU kernels on small shapes (one of them odd: the generic path), so that
 * no broken kernel is timed; then times RMSNorm 16384x4096, SwiGLU
 * 16384x11008 and LayerNorm 16384x4096, forward and backward: each run is
 * 5 launches then one sync, after 3 warm-up runs; the median of --reps
 * runs (default 20), per launch.  Bytes: RMSNorm and LayerNorm 5 M N
 * elements for forward + backward (forward X read, Y written; backward X,
 * dY read, dX written), SwiGLU 8 M N (forward G, U, Y; backward dY, G, U,
 * dG, dU).  The RMSNorm backward is also timed over its knobs (block,
 * blocks_per_sm), so a default can be judged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "gf_kernels.h"

#define INNER 5

static struct gf_backend *be, *cpu;
static int reps = 20;
static bool tune = true;
static double copy_gbs;

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda_norm_act: %s: %s\n", what, gf_last_error());
    exit(1);
}

/* ---- tensors: a host copy, and the device's ------------------------------------------ */

struct ten {
    struct gf_tview h, d; /* same shape; h on the host, d on the device */
};

static struct ten ten_new(int rank, const int64_t *dims, float lo, float hi, unsigned seed)
{
    struct ten t = {.h = {.dtype = GF_FLOAT}};
    gf_tview_set_shape(&t.h, rank, dims);
    t.d = t.h;
    float *p = malloc(t.h.nelem * sizeof(float) + 4);
    if (!p)
        die("host memory");
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < t.h.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
    t.h.data = p;
    t.h.host = p;
    if (!(t.d.data = be->ops->alloc(be, gf_tview_bytes(&t.h))) ||
        (seed && be->ops->copy_in(be, t.d.data, p, gf_tview_bytes(&t.h)) != GF_OK))
        die("device tensor");
    return t;
}

static void ten_free(struct ten *t)
{
    free(t->h.data);
    if (t->d.data)
        be->ops->release(be, t->d.data);
}

/* ---- one node on one backend ------------------------------------------------------------ */

struct call {
    struct gf_model *m;
    struct gf_node *node;
    struct ten *in[5], *out[3];
    size_t n_in, n_out;
    void *ws[2];
    size_t ws_size[2];
};

static void call_init(struct call *c, const char *op, size_t n_in, size_t n_out)
{
    memset(c, 0, sizeof(*c));
    c->n_in = n_in;
    c->n_out = n_out;
    c->m = gf_model_new(8, "bench");
    if (!c->m || gf_model_set_opset(c->m, "graphfuse", 1) != GF_OK)
        die("model");
    struct gf_value *ins[5], *outs[3];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(c->m->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(c->m->graph, NULL, "out");
    c->node = gf_graph_add_node(c->m->graph, op, "graphfuse", "bench", n_in, ins, n_out, outs);
    if (!c->node)
        die(op);
}

/* Runs the node on the device (dev) or the CPU, config NULL: automatic. */
static void call_run(struct call *c, bool dev, const int *config, bool sync)
{
    struct gf_backend *b = dev ? be : cpu;
    struct gf_tview in[5], out[3];
    for (size_t i = 0; i < c->n_in; i++)
        in[i] = dev ? c->in[i]->d : c->in[i]->h;
    for (size_t i = 0; i < c->n_out; i++)
        out[i] = dev ? c->out[i]->d : c->out[i]->h;
    const struct gf_kernel *k = gf_kernel_find(b, c->node, in, c->n_in);
    if (!k || strcmp(k->backend, dev ? "cuda" : "cpu") != 0) {
        fprintf(stderr, "bench_cuda_norm_act: no %s kernel for %s\n", dev ? "CUDA" : "CPU",
                c->node->op_type);
        exit(1);
    }
    struct gf_kernel_args a = {.node = c->node, .in = in, .n_in = c->n_in, .out = out,
                               .n_out = c->n_out, .config = config, .n_threads = 8,
                               .backend = b};
    size_t need = k->workspace ? k->workspace(&a) : 0;
    if (need > c->ws_size[dev]) {
        if (c->ws[dev])
            dev ? be->ops->release(be, c->ws[dev]) : free(c->ws[dev]);
        c->ws[dev] = dev ? be->ops->alloc(be, need) : malloc(need);
        if (!c->ws[dev])
            die("workspace");
        c->ws_size[dev] = need;
    }
    a.workspace = need ? c->ws[dev] : NULL;
    if (k->run(&a) != GF_OK || (sync && b->ops->sync(b) != GF_OK))
        die(c->node->op_type);
}

static void call_free(struct call *c)
{
    if (c->ws[1])
        be->ops->release(be, c->ws[1]);
    free(c->ws[0]);
    gf_model_free(c->m);
}

/* Median ms per launch. */
static double call_time(struct call *c, const int *config)
{
    double t[256];
    int n = reps > 256 ? 256 : reps;
    for (int i = 0; i < 3; i++)
        call_run(c, true, config, true);
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        for (int j = 0; j < INNER; j++)
            call_run(c, true, config, j == INNER - 1);
        t[i] = (bench_now_ms() - t0) / INNER;
    }
    return bench_median_upper(t, n);
}

/* ---- checks against the CPU ---------------------------------------------------------------- */

/* Max relative error of output k (device vs CPU) beyond atol + rtol |cpu|. */
static bool call_check(struct call *c, const char *what)
{
    call_run(c, false, NULL, true);
    call_run(c, true, NULL, true);
    bool ok = true;
    for (size_t k = 0; k < c->n_out; k++) {
        struct ten *o = c->out[k];
        size_t n = o->h.nelem;
        float *got = malloc(n * sizeof(float) + 4);
        if (!got || be->ops->copy_out(be, got, o->d.data, n * sizeof(float)) != GF_OK)
            die("copy_out");
        const float *want = o->h.data;
        double worst = 0;
        size_t bad = 0, at = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]), lim = 1e-6 + 1e-5 * fabs(want[i]);
            if (!(d <= lim))
                bad++;
            if (d / lim > worst || isnan(got[i]))
                worst = isnan(got[i]) ? INFINITY : d / lim, at = i;
        }
        printf("  check %-28s output %zu: %s (worst %.3g of the tolerance at %zu: %g vs %g)\n",
               what, k, bad ? "FAIL" : "ok", worst, at, got[at], want[at]);
        ok = ok && !bad;
        free(got);
    }
    return ok;
}

/* RMSNorm / LayerNorm forward and backward on m x n. */
struct norm_case {
    struct ten x, w, b, y, mean, istd, dy, dx, dw, db;
    struct call f, g;
};

static void norm_init(struct norm_case *c, bool rms, int64_t m, int64_t n)
{
    int64_t xd[2] = {m, n}, wd[1] = {n}, sd[2] = {m, 1};
    c->x = ten_new(2, xd, -2, 2, 1);
    c->w = ten_new(1, wd, 0.5f, 1.5f, 2);
    c->b = ten_new(1, wd, -0.5f, 0.5f, 3);
    c->dy = ten_new(2, xd, -1, 1, 4);
    c->y = ten_new(2, xd, 0, 0, 0);
    c->dx = ten_new(2, xd, 0, 0, 0);
    c->dw = ten_new(1, wd, 0, 0, 0);
    c->db = ten_new(1, wd, 0, 0, 0);
    c->mean = ten_new(2, sd, 0, 0, 0);
    c->istd = ten_new(2, sd, 0, 0, 0);
    if (rms) {
        call_init(&c->f, "RMSNorm", 2, 1);
        c->f.in[0] = &c->x, c->f.in[1] = &c->w, c->f.out[0] = &c->y;
        call_init(&c->g, "RMSNormGrad", 3, 2);
        c->g.in[0] = &c->dy, c->g.in[1] = &c->x, c->g.in[2] = &c->w;
        c->g.out[0] = &c->dx, c->g.out[1] = &c->dw;
    } else {
        call_init(&c->f, "LayerNorm", 3, 3);
        c->f.in[0] = &c->x, c->f.in[1] = &c->w, c->f.in[2] = &c->b;
        c->f.out[0] = &c->y, c->f.out[1] = &c->mean, c->f.out[2] = &c->istd;
        call_init(&c->g, "LayerNormGrad", 5, 3);
        c->g.in[0] = &c->dy, c->g.in[1] = &c->x, c->g.in[2] = &c->w;
        c->g.in[3] = &c->mean, c->g.in[4] = &c->istd;
        c->g.out[0] = &c->dx, c->g.out[1] = &c->dw, c->g.out[2] = &c->db;
    }
}

static void norm_free(struct norm_case *c)
{
    struct ten *ts[] = {&c->x, &c->w, &c->b, &c->y, &c->mean, &c->istd, &c->dy, &c->dx,
                        &c->dw, &c->db};
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
        ten_free(ts[i]);
    call_free(&c->f);
    call_free(&c->g);
}

/* SwiGLU forward and backward on m x n. */
struct glu_case {
    struct ten g, u, y, dy, dg, du;
    struct call f, b;
};

static void glu_init(struct glu_case *c, int64_t m, int64_t n)
{
    int64_t d[2] = {m, n};
    c->g = ten_new(2, d, -6, 6, 5);
    c->u = ten_new(2, d, -2, 2, 6);
    c->dy = ten_new(2, d, -1, 1, 7);
    c->y = ten_new(2, d, 0, 0, 0);
    c->dg = ten_new(2, d, 0, 0, 0);
    c->du = ten_new(2, d, 0, 0, 0);
    call_init(&c->f, "SwiGLU", 2, 1);
    c->f.in[0] = &c->g, c->f.in[1] = &c->u, c->f.out[0] = &c->y;
    call_init(&c->b, "SwiGLUGrad", 3, 2);
    c->b.in[0] = &c->dy, c->b.in[1] = &c->g, c->b.in[2] = &c->u;
    c->b.out[0] = &c->dg, c->b.out[1] = &c->du;
}

static void glu_free(struct glu_case *c)
{
    struct ten *ts[] = {&c->g, &c->u, &c->y, &c->dy, &c->dg, &c->du};
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
        ten_free(ts[i]);
    call_free(&c->f);
    call_free(&c->b);
}

static bool checks(void)
{
    bool ok = true;
    const int64_t shapes[][2] = {{64, 4096}, {37, 1000}, {5, 30}};
    for (size_t s = 0; s < 3; s++)
        for (int rms = 1; rms >= 0; rms--) {
            struct norm_case c;
            char what[64];
            norm_init(&c, rms, shapes[s][0], shapes[s][1]);
            snprintf(what, sizeof(what), "%s %lldx%lld", rms ? "RMSNorm" : "LayerNorm",
                     (long long)shapes[s][0], (long long)shapes[s][1]);
            ok = call_check(&c.f, what) && ok;
            snprintf(what, sizeof(what), "%s %lldx%lld", rms ? "RMSNormGrad" : "LayerNormGrad",
                     (long long)shapes[s][0], (long long)shapes[s][1]);
            ok = call_check(&c.g, what) && ok;
            norm_free(&c);
        }
    for (size_t s = 0; s < 2; s++) {
        struct glu_case c;
        char what[64];
        int64_t m = s ? 3 : 64, n = s ? 1001 : 11008;
        glu_init(&c, m, n);
        snprintf(what, sizeof(what), "SwiGLU %lldx%lld", (long long)m, (long long)n);
        ok = call_check(&c.f, what) && ok;
        snprintf(what, sizeof(what), "SwiGLUGrad %lldx%lld", (long long)m, (long long)n);
        ok = call_check(&c.b, what) && ok;
        glu_free(&c);
    }
    return ok;
}

/* ---- timings ---------------------------------------------------------------------------- */

static void row(const char *op, const char *shape, double ms, double bytes, const char *cfg)
{
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("| %s | %s | %.3f | %.0f | %.0f%% | %s |\n", op, shape, ms, gbs, 100 * gbs / copy_gbs,
           cfg);
}

static double bench_copy(size_t bytes)
{
    void *src = be->ops->alloc(be, bytes), *dst = be->ops->alloc(be, bytes);
    if (!src || !dst)
        die("copy buffers");
    double t[256];
    int n = reps > 256 ? 256 : reps;
    for (int i = 0; i < n + 3; i++) {
        double t0 = bench_now_ms();
        for (int j = 0; j < INNER; j++)
            if (be->ops->copy(be, dst, src, bytes) != GF_OK)
                die("copy");
        if (be->ops->sync(be) != GF_OK)
            die("sync");
        if (i >= 3)
            t[i - 3] = (bench_now_ms() - t0) / INNER;
    }
    double med = bench_median_upper(t, n);
    be->ops->release(be, src);
    be->ops->release(be, dst);
    return med;
}

static void bench_norm(bool rms, int64_t m, int64_t n)
{
    struct norm_case c;
    norm_init(&c, rms, m, n);
    char shape[64];
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)m, (long long)n);
    double mn = (double)m * (double)n * 4, tf = call_time(&c.f, NULL), tg = call_time(&c.g, NULL);
    const char *name = rms ? "RMSNorm" : "LayerNorm";
    char op[64];
    snprintf(op, sizeof(op), "%s fwd", name);
    row(op, shape, tf, 2 * mn, "auto");
    snprintf(op, sizeof(op), "%s bwd", name);
    row(op, shape, tg, 3 * mn, "auto");
    snprintf(op, sizeof(op), "**%s fwd+bwd**", name);
    row(op, shape, tf + tg, 5 * mn, "auto");
    if (tune && rms) { /* the knobs: block x blocks_per_sm */
        const int blocks[] = {0, 128, 256, 512, 1024}, bps[] = {0, 1, 2, 4, 8};
        double best = tg;
        char bc[64] = "auto";
        for (size_t i = 0; i < 5; i++)
            for (size_t j = 0; j < 5; j++) {
                int cfg[2] = {blocks[i], bps[j]};
                double t = call_time(&c.g, cfg);
                char s[64];
                snprintf(s, sizeof(s), "block=%d blocks_per_sm=%d", cfg[0], cfg[1]);
                row("  RMSNorm bwd", shape, t, 3 * mn, s);
                if (t < best)
                    best = t, snprintf(bc, sizeof(bc), "%s", s);
            }
        for (size_t i = 1; i < 5; i++) {
            int cfg[2] = {blocks[i], 0};
            double t = call_time(&c.f, cfg);
            char s[64];
            snprintf(s, sizeof(s), "block=%d", cfg[0]);
            row("  RMSNorm fwd", shape, t, 2 * mn, s);
            tf = t < tf ? t : tf;
        }
        row("**RMSNorm fwd+bwd, best knobs**", shape, tf + best, 5 * mn, bc);
    }
    norm_free(&c);
}

static void bench_swiglu(int64_t m, int64_t n)
{
    struct glu_case c;
    glu_init(&c, m, n);
    char shape[64];
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)m, (long long)n);
    double mn = (double)m * (double)n * 4, tf = call_time(&c.f, NULL), tb = call_time(&c.b, NULL);
    row("SwiGLU fwd", shape, tf, 3 * mn, "auto");
    row("SwiGLU bwd", shape, tb, 5 * mn, "auto");
    row("**SwiGLU fwd+bwd**", shape, tf + tb, 8 * mn, "auto");
    glu_free(&c);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-tune") == 0)
            tune = false;
        /* anything else (make bench's output folder) is ignored */
    }
    reps = reps < 5 ? 5 : reps;
    if (gf_backend_open("cuda", NULL, &be) != GF_OK) {
        printf("bench_cuda_norm_act: skipped, no CUDA device (%s)\n", gf_last_error());
        return 0;
    }
    if (!(cpu = gf_backend_get("cpu")))
        die("cpu backend");
    printf("device: %s (%s)\n", be->ops->device_name(be), be->ops->driver_version(be));
    printf("checks against the CPU (rtol 1e-5, atol 1e-6):\n");
    if (!checks()) {
        printf("bench_cuda_norm_act: a kernel disagrees with the CPU: not timed\n");
        return 1;
    }
    size_t cb = (size_t)1 << 30;
    double cms = bench_copy(cb);
    copy_gbs = 2.0 * (double)cb / (cms * 1e-3) / 1e9;
    printf("\ndevice-to-device copy of 1 GiB: %.3f ms, %.0f GB/s (read + write)\n\n", cms,
           copy_gbs);
    printf("| op | shape | ms | GB/s | %% of copy | config |\n|---|---|---:|---:|---:|---|\n");
    bench_norm(true, 16384, 4096);
    bench_swiglu(16384, 11008);
    bench_norm(false, 16384, 4096);
    return 0;
}
