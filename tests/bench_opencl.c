/*
 * Bandwidth of the fused OpenCL kernels (kernels/opencl/fused_*.c), fp32, on
 * one OpenCL device, next to the device-to-device copy and the published
 * Liger Kernel numbers for an H200 (/work/shared/device/README.md).
 *
 *   make bench-opencl ARGS="--device H200"        the full sizes, on the GPU
 *   build/tests/bench_opencl --small              a smoke run (sizes / 64), e.g. PoCL
 *   options: --device NAME (substring; default: the first GPU, else the first
 *   device), --small, --reps N (>= 10, default 20), --tune (also time every
 *   config of each kernel's knobs and report the fastest), --only CASE
 *   (rmsnorm, swiglu or ce: that case alone, after the copy)
 *
 * Cases: RMSNorm 16384x4096 forward and backward (RMSNormGrad with dW),
 * SwiGLU 16384x11008 forward and backward (SwiGLUGrad), cross-entropy
 * 4096x128256 forward + backward (SoftmaxCrossEntropy, mean, with its
 * gradient G written over the logits), and a copy of a 1 GiB buffer.
 * Each is run 3 times to warm up, then timed --reps times (enqueue, then
 * clFinish) and the median reported.  Bytes are counted as the README does:
 * RMSNorm 5 M N elements for forward + backward (forward x, y; backward x,
 * dy, dx), SwiGLU 8 M N (forward g, u, y; backward dy, g, u, dg, du),
 * cross-entropy 2 BT V (the logits read, the gradient written), the copy
 * its bytes read + written.  Prints a markdown table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "gf_kernels.h"

/* Liger Kernel (Triton) and PyTorch eager on one H200, forward + backward
 * medians as published in /work/shared/device/README.md: reference numbers
 * from that table, not measured here. */
#define REF_COPY_TBS 4.25          /* device-to-device copy, read + write */
#define REF_RMS_F32_LIGER_MS 0.64  /* RMSNorm 16384x4096 fp32 (~2.11 TB/s) */
#define REF_RMS_F32_EAGER_MS 2.50
#define REF_SWIGLU_BF16_LIGER_MS 1.19 /* SwiGLU 16384x11008 bf16 (~2.42 TB/s) */
#define REF_SWIGLU_BF16_EAGER_MS 1.68
#define REF_CE_BF16_LIGER_MS 1.76  /* cross-entropy 4096x128256 bf16 */
#define REF_CE_BF16_EAGER_MS 7.53

struct opts {
    const char *device, *only;
    bool small, tune;
    int reps;
};

static struct gf_backend *be;
static struct opts opt = {.reps = 20};

static void die(const char *what)
{
    fprintf(stderr, "bench_opencl: %s: %s\n", what, gf_last_error());
    exit(1);
}

/* ---- device tensors ---------------------------------------------------------------- */

/* A device fp32 tensor of random values in [lo, hi). */
static struct gf_tview dev_rand(int rank, const int64_t *dims, float lo, float hi, unsigned seed)
{
    struct gf_tview t = {.dtype = GF_FLOAT};
    gf_tview_set_shape(&t, rank, dims);
    float *h = malloc(t.nelem * sizeof(float) + 4);
    if (!h)
        die("host memory");
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < t.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
    if (!(t.data = be->ops->alloc(be, gf_tview_bytes(&t))) ||
        be->ops->copy_in(be, t.data, h, gf_tview_bytes(&t)) != GF_OK)
        die("uploading an input");
    free(h);
    return t;
}

static struct gf_tview dev_empty(int rank, const int64_t *dims)
{
    struct gf_tview t = {.dtype = GF_FLOAT};
    gf_tview_set_shape(&t, rank, dims);
    if (!(t.data = be->ops->alloc(be, gf_tview_bytes(&t))))
        die("allocating an output");
    return t;
}

static void dev_free(struct gf_tview *t)
{
    if (t->data)
        be->ops->release(be, t->data);
    t->data = NULL;
}

/* ---- one kernel call ---------------------------------------------------------------- */

/* A node and its tensors; the workspace grows to what a config asks. */
struct call {
    struct gf_model *m;
    struct gf_node *node;
    struct gf_tview in[4], out[3];
    size_t n_in, n_out;
    const struct gf_kernel *k;
    void *ws;
    size_t ws_size;
};

static void call_node(struct call *c, const char *op)
{
    c->m = gf_model_new(8, "bench");
    if (!c->m || gf_model_set_opset(c->m, "graphfuse", 1) != GF_OK)
        die("model");
    struct gf_value *ins[4], *outs[3];
    for (size_t i = 0; i < c->n_in; i++)
        ins[i] = gf_graph_new_value(c->m->graph, NULL, "in");
    for (size_t i = 0; i < c->n_out; i++)
        outs[i] = gf_graph_new_value(c->m->graph, NULL, "out");
    c->node = gf_graph_add_node(c->m->graph, op, "graphfuse", "bench", c->n_in, ins, c->n_out,
                                outs);
    if (!c->node)
        die(op);
}

static struct gf_kernel_args call_args(struct call *c, const int *config)
{
    return (struct gf_kernel_args){.node = c->node, .in = c->in, .n_in = c->n_in,
                                   .out = c->out, .n_out = c->n_out, .config = config,
                                   .n_threads = 1, .backend = be};
}

/* Runs the kernel once with config (NULL: automatic) and waits. */
static void call_run(struct call *c, const int *config)
{
    if (!c->k && !(c->k = gf_kernel_find(be, c->node, c->in, c->n_in))) {
        fprintf(stderr, "bench_opencl: no OpenCL kernel for %s\n", c->node->op_type);
        exit(1);
    }
    struct gf_kernel_args a = call_args(c, config);
    size_t ws = c->k->workspace ? c->k->workspace(&a) : 0;
    if (ws > c->ws_size) {
        if (c->ws)
            be->ops->release(be, c->ws);
        if (!(c->ws = be->ops->alloc(be, ws)))
            die("workspace");
        c->ws_size = ws;
    }
    a.workspace = ws ? c->ws : NULL;
    if (c->k->run(&a) != GF_OK || be->ops->sync(be) != GF_OK)
        die(c->node->op_type);
}

static void call_free(struct call *c)
{
    for (size_t i = 0; i < c->n_in; i++)
        dev_free(&c->in[i]);
    for (size_t i = 0; i < c->n_out; i++)
        dev_free(&c->out[i]);
    if (c->ws)
        be->ops->release(be, c->ws);
    gf_model_free(c->m);
}

/* Median ms of `reps` runs after 3 warm-up runs. */
static double call_time(struct call *c, const int *config, int reps)
{
    double t[1024];
    reps = reps > 1024 ? 1024 : reps;
    for (int i = 0; i < 3; i++)
        call_run(c, config);
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now_ms();
        call_run(c, config);
        t[i] = bench_now_ms() - t0;
    }
    return bench_median_upper(t, reps);
}

/* The automatic config's time, and with --tune the fastest config's (its
 * knob values in best_cfg, a line of text). */
static double call_best(struct call *c, double *auto_ms, char *best_cfg, size_t len)
{
    *auto_ms = call_time(c, NULL, opt.reps);
    snprintf(best_cfg, len, "auto");
    if (!opt.tune || !c->k->n_knobs)
        return *auto_ms;
    double best = *auto_ms;
    int cfg[16] = {0}, idx[16] = {0};
    for (;;) {
        for (size_t i = 0; i < c->k->n_knobs; i++)
            cfg[i] = c->k->knobs[i].values[idx[i]];
        double t = call_time(c, cfg, opt.reps / 2 > 5 ? opt.reps / 2 : 5);
        if (t < best) {
            best = t;
            size_t o = 0;
            for (size_t i = 0; i < c->k->n_knobs && o < len; i++)
                o += (size_t)snprintf(best_cfg + o, len - o, "%s%s=%d", i ? " " : "",
                                      c->k->knobs[i].name, cfg[i]);
        }
        size_t d = 0;
        while (d < c->k->n_knobs && ++idx[d] == c->k->knobs[d].n_values)
            idx[d++] = 0;
        if (d == c->k->n_knobs)
            return best;
    }
}

/* ---- the table ------------------------------------------------------------------------- */

static double copy_tbs;

static void row(const char *op, const char *shape, double ms, double bytes, const char *ref,
                const char *cfg)
{
    double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("| %s | %s | %.3f | %.3f | %.3f | %.0f%% | %s | %s |\n", op, shape, ms, bytes / 1e9,
           tbs, 100 * tbs / copy_tbs, ref, cfg);
}

/* Liger's number, and ours against it in bandwidth (TB/s). */
static const char *ref_text(char *buf, size_t len, double liger_ms, double eager_ms,
                            double ref_bytes, const char *dt, double our_tbs)
{
    if (opt.small) {
        snprintf(buf, len, "(full sizes only)");
        return buf;
    }
    double lt = ref_bytes / (liger_ms * 1e-3) / 1e12;
    snprintf(buf, len, "%s: Liger %.2f ms = %.2f TB/s, eager %.2f ms; ours %.2fx Liger's TB/s",
             dt, liger_ms, lt, eager_ms, our_tbs / lt);
    return buf;
}

static double bench_copy(size_t bytes)
{
    void *src = be->ops->alloc(be, bytes), *dst = be->ops->alloc(be, bytes);
    if (!src || !dst)
        die("copy buffers");
    double t[1024];
    int reps = opt.reps;
    for (int i = 0; i < reps + 3; i++) {
        double t0 = bench_now_ms();
        if (be->ops->copy(be, dst, src, bytes) != GF_OK || be->ops->sync(be) != GF_OK)
            die("copy");
        if (i >= 3)
            t[i - 3] = bench_now_ms() - t0;
    }
    double med = bench_median_upper(t, reps);
    be->ops->release(be, src);
    be->ops->release(be, dst);
    return med;
}

static void bench_rmsnorm(int64_t m, int64_t n)
{
    struct call f = {.n_in = 2, .n_out = 1}, b = {.n_in = 3, .n_out = 2};
    call_node(&f, "RMSNorm");
    call_node(&b, "RMSNormGrad");
    f.in[0] = dev_rand(2, (int64_t[]){m, n}, -2, 2, 1);
    f.in[1] = dev_rand(1, (int64_t[]){n}, 0.5f, 1.5f, 2);
    f.out[0] = dev_empty(2, (int64_t[]){m, n});
    b.in[0] = dev_rand(2, (int64_t[]){m, n}, -1, 1, 3);
    b.in[1] = f.in[0]; /* shared: freed once, with f */
    b.in[2] = f.in[1];
    b.out[0] = dev_empty(2, (int64_t[]){m, n});
    b.out[1] = dev_empty(1, (int64_t[]){n});
    char shape[64], cf[128], cb[128], ref[256];
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)m, (long long)n);
    double af, ab, tf = call_best(&f, &af, cf, sizeof(cf)), tb = call_best(&b, &ab, cb, sizeof(cb));
    double mn = (double)m * (double)n * 4;
    row("RMSNorm fwd", shape, af, 2 * mn, "", "auto");
    row("RMSNorm bwd (dX, dW)", shape, ab, 3 * mn, "", "auto");
    row("RMSNorm fwd+bwd", shape, af + ab, 5 * mn,
        ref_text(ref, sizeof(ref), REF_RMS_F32_LIGER_MS, REF_RMS_F32_EAGER_MS, 5 * mn, "fp32",
                 5 * mn / ((af + ab) * 1e-3) / 1e12), "auto");
    if (opt.tune) {
        row("RMSNorm fwd, tuned", shape, tf, 2 * mn, "", cf);
        row("RMSNorm bwd, tuned", shape, tb, 3 * mn, "", cb);
        row("RMSNorm fwd+bwd, tuned", shape, tf + tb, 5 * mn,
            ref_text(ref, sizeof(ref), REF_RMS_F32_LIGER_MS, REF_RMS_F32_EAGER_MS, 5 * mn,
                     "fp32", 5 * mn / ((tf + tb) * 1e-3) / 1e12), "");
    }
    b.in[1].data = b.in[2].data = NULL;
    call_free(&f);
    call_free(&b);
}

static void bench_swiglu(int64_t m, int64_t n)
{
    struct call f = {.n_in = 2, .n_out = 1}, b = {.n_in = 3, .n_out = 2};
    call_node(&f, "SwiGLU");
    call_node(&b, "SwiGLUGrad");
    f.in[0] = dev_rand(2, (int64_t[]){m, n}, -6, 6, 4);
    f.in[1] = dev_rand(2, (int64_t[]){m, n}, -2, 2, 5);
    f.out[0] = dev_empty(2, (int64_t[]){m, n});
    b.in[0] = dev_rand(2, (int64_t[]){m, n}, -1, 1, 6);
    b.in[1] = f.in[0]; /* shared: freed once, with f */
    b.in[2] = f.in[1];
    b.out[0] = dev_empty(2, (int64_t[]){m, n});
    b.out[1] = dev_empty(2, (int64_t[]){m, n});
    char shape[64], cf[128], cb[128], ref[256];
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)m, (long long)n);
    double af, ab, tf = call_best(&f, &af, cf, sizeof(cf)), tb = call_best(&b, &ab, cb, sizeof(cb));
    double mn = (double)m * (double)n * 4, ref_bytes = (double)m * (double)n * 2 * 8;
    row("SwiGLU fwd", shape, af, 3 * mn, "", "auto");
    row("SwiGLU bwd (dG, dU)", shape, ab, 5 * mn, "", "auto");
    row("SwiGLU fwd+bwd", shape, af + ab, 8 * mn,
        ref_text(ref, sizeof(ref), REF_SWIGLU_BF16_LIGER_MS, REF_SWIGLU_BF16_EAGER_MS,
                 ref_bytes, "bf16", 8 * mn / ((af + ab) * 1e-3) / 1e12), "auto");
    if (opt.tune) {
        row("SwiGLU fwd, tuned", shape, tf, 3 * mn, "", cf);
        row("SwiGLU bwd, tuned", shape, tb, 5 * mn, "", cb);
        row("SwiGLU fwd+bwd, tuned", shape, tf + tb, 8 * mn,
            ref_text(ref, sizeof(ref), REF_SWIGLU_BF16_LIGER_MS, REF_SWIGLU_BF16_EAGER_MS,
                     ref_bytes, "bf16", 8 * mn / ((tf + tb) * 1e-3) / 1e12), "");
    }
    b.in[1].data = b.in[2].data = NULL;
    call_free(&f);
    call_free(&b);
}

/* SoftmaxCrossEntropy (mean) with G over the logits: forward and backward
 * in one kernel, as Liger Kernel's cross-entropy. */
static void bench_cross_entropy(int64_t bt, int64_t v)
{
    struct call c = {.n_in = 2, .n_out = 3};
    call_node(&c, "SoftmaxCrossEntropy");
    c.in[0] = dev_rand(2, (int64_t[]){bt, v}, -8, 8, 7);
    int64_t *lab = malloc((size_t)bt * sizeof(int64_t));
    if (!lab)
        die("host memory");
    for (int64_t i = 0; i < bt; i++)
        lab[i] = (i * 7919) % v;
    c.in[1] = (struct gf_tview){.dtype = GF_INT64};
    gf_tview_set_shape(&c.in[1], 1, (int64_t[]){bt});
    if (!(c.in[1].data = be->ops->alloc(be, gf_tview_bytes(&c.in[1]))) ||
        be->ops->copy_in(be, c.in[1].data, lab, gf_tview_bytes(&c.in[1])) != GF_OK)
        die("labels");
    c.in[1].host = lab; /* as the executor hands a graph input */
    c.out[0] = dev_empty(0, NULL);
    c.out[2] = c.in[0]; /* G over L */
    char shape[64], cfg[128], ref[256];
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)bt, (long long)v);
    double au, t = call_best(&c, &au, cfg, sizeof(cfg));
    double bytes = 2.0 * (double)bt * (double)v * 4, ref_bytes = 2.0 * (double)bt * (double)v * 2;
    row("cross-entropy fwd+bwd (G in place)", shape, au, bytes,
        ref_text(ref, sizeof(ref), REF_CE_BF16_LIGER_MS, REF_CE_BF16_EAGER_MS, ref_bytes, "bf16",
                 bytes / (au * 1e-3) / 1e12), "auto");
    if (opt.tune)
        row("cross-entropy fwd+bwd, tuned", shape, t, bytes,
            ref_text(ref, sizeof(ref), REF_CE_BF16_LIGER_MS, REF_CE_BF16_EAGER_MS, ref_bytes,
                     "bf16", bytes / (t * 1e-3) / 1e12), cfg);
    c.in[1].host = NULL;
    c.out[2].data = NULL;
    call_free(&c);
    free(lab);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_opencl [--device NAME] [--small] [--reps N] [--tune] "
                    "[--only rmsnorm|swiglu|ce]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            opt.device = argv[++i];
        else if (strcmp(argv[i], "--small") == 0)
            opt.small = true;
        else if (strcmp(argv[i], "--tune") == 0)
            opt.tune = true;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            opt.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            opt.only = argv[++i];
        else
            usage();
    }
    if (opt.only && strcmp(opt.only, "rmsnorm") && strcmp(opt.only, "swiglu") &&
        strcmp(opt.only, "ce"))
        usage();
    if (opt.reps < 10 || opt.reps > 1024) {
        fprintf(stderr, "bench_opencl: --reps must be 10 to 1024\n");
        return 2;
    }
    if (gf_backend_open("opencl", opt.device, &be) != GF_OK)
        die("opening the OpenCL backend");
    int64_t div = opt.small ? 64 : 1;
    size_t copy_bytes = ((size_t)1 << 30) / (size_t)div;
    printf("OpenCL device: %s (driver %s)%s\n\n", be->ops->device_name(be),
           be->ops->driver_version(be),
           opt.small ? "; --small: sizes / 64, not comparable with the references" : "");
    double cms = bench_copy(copy_bytes);
    copy_tbs = 2.0 * (double)copy_bytes / (cms * 1e-3) / 1e12;
    printf("| op, fp32 | shape | ms | GB counted | TB/s | of copy | reference (H200, "
           "/work/shared/device/README.md) | config |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    char ref[128], shape[64];
    if (opt.small)
        snprintf(ref, sizeof(ref), "(full sizes only)");
    else
        snprintf(ref, sizeof(ref), "copy on the H200: %.2f TB/s; ours %.0f%% of it",
                 REF_COPY_TBS, 100 * copy_tbs / REF_COPY_TBS);
    snprintf(shape, sizeof(shape), "%zu MiB", copy_bytes >> 20);
    row("device-to-device copy", shape, cms, 2.0 * (double)copy_bytes, ref, "");
    if (!opt.only || strcmp(opt.only, "rmsnorm") == 0)
        bench_rmsnorm(16384 / div, 4096);
    if (!opt.only || strcmp(opt.only, "swiglu") == 0)
        bench_swiglu(16384 / div, 11008);
    if (!opt.only || strcmp(opt.only, "ce") == 0)
        bench_cross_entropy(4096 / div, 128256);
    return 0;
}
