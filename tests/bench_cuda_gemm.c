/*
 * cuBLASLt's candidates on the GEMMs of the 160M Llama training step
 * (kernels/cuda/matmul.c, knob "algo": the index into cuBLASLt's heuristic
 * list for the problem, 0 its first choice): default against tuned, in
 * one run.
 *
 *   build/tests/bench_cuda_gemm [--reps N] [--no-tune] [--only fp32|tf32|bf16]
 *
 * Three passes over the shapes, one per precision (--only: that one):
 * fp32 (CUBLAS_COMPUTE_32F, the default), tf32 (the model marked
 * --precision tf32: CUBLAS_COMPUTE_32F_FAST_TF32) and bf16 (bf16 operands
 * and output, fp32 accumulation, as a --precision bf16 graph runs them);
 * each row names its precision, so bf16 and tf32 TFLOP/s read next to
 * fp32's on the same card.
 *
 * Without a CUDA device it says so and exits 0.  Tokens T = 8 x 512 = 4096,
 * hidden 1024; weights q/o 1024x1024, k/v 1024x512, MLP 1024x2816 and
 * 2816x1024, lm head 1024x32000.  Each weight W [K, N] gives three GEMMs as
 * the trainer runs them:
 *
 *   fwd  Y  = X W          MatMul          X [8, 512, K]
 *   dX   dX = dY W^T       MatMulEpilogue  transB = 1, dY [8, 512, N]
 *   dW   dW = X^T dY       Gemm            transA = 1, X [T, K], dY [T, N]
 *
 * Every candidate the heuristic offers (algo 0..7; one past the last is
 * declined by the kernel) runs once and is compared with candidate 0's
 * output (max |got - ref| / max |ref|): one beyond 1e-4 (tf32 1e-3, bf16
 * 1e-2: the sum order shows through the output's rounding) is reported as
 * BAD and not timed.  The others: 3 warm-up runs, then the median of
 * --reps (default 20) samples of 5 launches and one sync, per launch.
 * TFLOP/s = 2 M N K / time.  Then the autotuner itself (gf_tuner_tune, a
 * throw-away cache file) tunes each node: its choice and its default and
 * best times (--no-tune: skipped).  The last lines add up one layer's
 * seven GEMMs (q, k, v, o, gate, up, down) times their three forms, and
 * the lm head's, default against the best candidate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "gf_kernels.h"
#include "gf_passes.h"
#include "gf_tune.h"

#define INNER 5
#define MAX_ALGOS 8

static struct gf_backend *be;
static int reps = 20;
static bool tune = true;
static struct gf_tuner *tuner;

/* The pass's precision: its name, operand type, whether the model says tf32
 * and the candidates' tolerance. */
struct prec {
    const char *name;
    enum gf_dtype dt;
    bool tf32;
    double tol;
};
static const struct prec precs[] = {
    {"fp32", GF_FLOAT, false, 1e-4}, {"tf32", GF_FLOAT, true, 1e-3},
    {"bf16", GF_BFLOAT16, false, 1e-2},
};
static const struct prec *prec = &precs[0];

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda_gemm: %s: %s\n", what, gf_last_error());
    exit(1);
}

/* bf16 of x, rounded to nearest even (finite x). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* A device tensor of the pass's type, uniform values in [-1, 1) (seed 0:
 * left as is). */
static struct gf_tview dev_tensor(int rank, const int64_t *dims, unsigned seed)
{
    struct gf_tview t = {.dtype = prec->dt};
    gf_tview_set_shape(&t, rank, dims);
    size_t bytes = gf_tview_bytes(&t);
    if (!(t.data = be->ops->alloc(be, bytes)))
        die("device memory");
    if (seed) {
        float *p = malloc(t.nelem * sizeof(float) + 4);
        if (!p)
            die("host memory");
        unsigned s = seed * 2654435761u + 1;
        for (size_t i = 0; i < t.nelem; i++) {
            s = s * 1664525u + 1013904223u;
            p[i] = -1.0f + 2.0f * (float)(s >> 8) / 16777216.0f;
        }
        if (t.dtype == GF_BFLOAT16) /* narrowed in place: the front half */
            for (size_t i = 0; i < t.nelem; i++)
                ((uint16_t *)p)[i] = to_bf16(p[i]);
        if (be->ops->copy_in(be, t.data, p, bytes) != GF_OK)
            die("copy_in");
        free(p);
    }
    return t;
}

/* ---- one GEMM node ------------------------------------------------------------------- */

enum form { FWD, DX, DW };
static const char *const form_names[] = {"fwd  Y = X W", "dX = dY W^T", "dW = X^T dY"};

struct gemm {
    struct gf_model *model;
    struct gf_node *node;
    struct gf_tview in[2], out;
    const struct gf_kernel *k;
    int64_t m, n, k_;
};

/* W [K, N] on T tokens (8 x 512) in the given form. */
static void gemm_init(struct gemm *g, enum form f, int64_t K, int64_t N)
{
    memset(g, 0, sizeof(*g));
    g->model = gf_model_new(8, "bench");
    if (!g->model || gf_model_set_opset(g->model, "", 17) != GF_OK ||
        gf_model_set_opset(g->model, "graphfuse", 1) != GF_OK)
        die("model");
    struct gf_value *ins[2], *outs[1];
    for (int i = 0; i < 2; i++)
        ins[i] = gf_graph_new_value(g->model->graph, NULL, "in");
    outs[0] = gf_graph_new_value(g->model->graph, NULL, "out");
    static const char *const ops[] = {"MatMul", "MatMulEpilogue", "Gemm"};
    g->node = gf_graph_add_node(g->model->graph, ops[f], f == DX ? "graphfuse" : "",
                                "gemm", 2, ins, 1, outs);
    if (!g->node)
        die(ops[f]);
    if (prec->tf32 && gf_pass_precision(g->model, GF_PRECISION_TF32, NULL) != GF_OK)
        die("--precision tf32");
    int64_t x3[3] = {8, 512, K}, w[2] = {K, N}, o3[3] = {8, 512, N};
    int64_t dy3[3] = {8, 512, N}, dx3[3] = {8, 512, K}, x2[2] = {4096, K}, dy2[2] = {4096, N};
    switch (f) {
    case FWD:
        g->in[0] = dev_tensor(3, x3, 1);
        g->in[1] = dev_tensor(2, w, 2);
        g->out = dev_tensor(3, o3, 0);
        g->m = 4096, g->n = N, g->k_ = K;
        break;
    case DX:
        if (gf_node_set_attr_int(g->node, "transB", 1) != GF_OK)
            die("transB");
        g->in[0] = dev_tensor(3, dy3, 3);
        g->in[1] = dev_tensor(2, w, 2);
        g->out = dev_tensor(3, dx3, 0);
        g->m = 4096, g->n = K, g->k_ = N;
        break;
    case DW:
        if (gf_node_set_attr_int(g->node, "transA", 1) != GF_OK)
            die("transA");
        g->in[0] = dev_tensor(2, x2, 1);
        g->in[1] = dev_tensor(2, dy2, 3);
        g->out = dev_tensor(2, w, 0);
        g->m = K, g->n = N, g->k_ = 4096;
        break;
    }
    g->k = gf_kernel_find(be, g->node, g->in, 2);
    if (!g->k || strcmp(g->k->backend, "cuda") != 0)
        die("no CUDA kernel");
}

static void gemm_free(struct gemm *g)
{
    for (int i = 0; i < 2; i++)
        be->ops->release(be, g->in[i].data);
    be->ops->release(be, g->out.data);
    gf_model_free(g->model);
}

/* One launch with algo `algo` (-1: the kernel's default, config NULL). */
static enum gf_status gemm_run(struct gemm *g, int algo)
{
    int cfg[GF_TUNE_MAX_KNOBS] = {algo};
    struct gf_kernel_args a = {.node = g->node, .in = g->in, .n_in = 2, .out = &g->out,
                               .n_out = 1, .config = algo < 0 ? NULL : cfg, .n_threads = 1,
                               .backend = be};
    return g->k->run(&a);
}

/* Median ms per launch. */
static double gemm_time(struct gemm *g, int algo)
{
    double t[256];
    int n = reps > 256 ? 256 : reps;
    for (int i = 0; i < 3; i++)
        if (gemm_run(g, algo) != GF_OK || be->ops->sync(be) != GF_OK)
            die("warm-up");
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        for (int j = 0; j < INNER; j++)
            if (gemm_run(g, algo) != GF_OK)
                die("run");
        if (be->ops->sync(be) != GF_OK)
            die("sync");
        t[i] = (bench_now_ms() - t0) / INNER;
    }
    return bench_median_upper(t, n);
}

/* The output copied to the host as floats (buf: room for n floats). */
static void out_floats(const struct gemm *g, float *buf)
{
    if (be->ops->copy_out(be, buf, g->out.data, gf_tview_bytes(&g->out)) != GF_OK)
        die("copy_out");
    if (g->out.dtype == GF_BFLOAT16) /* widen from the back, in place */
        for (size_t i = g->out.nelem; i-- > 0;)
            buf[i] = from_bf16(((const uint16_t *)buf)[i]);
}

static double rel_diff(const float *got, const float *ref, size_t n)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        worst = fmax(worst, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return worst / (scale > 0 ? scale : 1);
}

struct shape {
    const char *name;
    int64_t k, n;
    int per_layer; /* how many of it one layer has (0: the lm head) */
};

static double sum_dflt[2], sum_best[2], sum_tuned[2]; /* per pass */
static int n_bad;

static void bench_one(const struct shape *s, enum form f)
{
    struct gemm g;
    gemm_init(&g, f, s->k, s->n);
    size_t n = g.out.nelem, bytes = n * sizeof(float);
    float *ref = malloc(bytes + 4), *got = malloc(bytes + 4);
    if (!ref || !got)
        die("host memory");
    double ms[MAX_ALGOS], worst = 0;
    bool bad[MAX_ALGOS] = {false};
    int n_algo = 0, best = 0;
    for (int i = 0; i < MAX_ALGOS; i++) {
        memset(got, 0xff, bytes); /* NaN in fp32 and bf16: a candidate that leaves Y
                                   * unwritten shows */
        if (be->ops->copy_in(be, g.out.data, got, gf_tview_bytes(&g.out)) != GF_OK)
            die("copy_in");
        enum gf_status st = gemm_run(&g, i);
        if (st == GF_ERR_UNSUPPORTED) /* past the heuristic's candidates */
            break;
        if (st != GF_OK || be->ops->sync(be) != GF_OK)
            die("a candidate failed");
        n_algo++;
        out_floats(&g, i ? got : ref);
        double d = i ? rel_diff(got, ref, n) : rel_diff(ref, ref, n);
        if (!(d <= prec->tol)) {
            bad[i] = true;
            n_bad++;
            ms[i] = INFINITY;
            printf("    %s %-6s %-12s algo %d: BAD, max rel diff %.3g against algo 0: not timed\n",
                   prec->name, s->name, form_names[f], i, d);
            continue;
        }
        worst = fmax(worst, d);
        ms[i] = gemm_time(&g, i);
        if (ms[i] < ms[best])
            best = i;
    }
    if (n_algo == 0)
        die("no candidate ran");
    double flop = 2.0 * (double)g.m * (double)g.n * (double)g.k_;
    char times[MAX_ALGOS * 16] = "";
    size_t p = 0;
    for (int i = 0; i < n_algo; i++)
        p += (size_t)(bad[i] ? snprintf(times + p, sizeof(times) - p, "%sBAD", i ? " " : "")
                             : snprintf(times + p, sizeof(times) - p, "%s%.3f", i ? " " : "",
                                        ms[i]));
    char shape[64];
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld", (long long)g.m, (long long)g.k_,
             (long long)g.n);
    double tuned_ms = NAN;
    int tuned_algo = -1;
    if (tune) {
        struct gf_tune_result r;
        struct gf_tune_opts o = {.repeats = 7};
        if (gf_tuner_tune(tuner, be, g.node, g.in, 2, &g.out, 1, &o, &r) != GF_OK)
            die("autotune");
        tuned_algo = r.choice.kernel && r.choice.kernel->n_knobs ? r.choice.config[0] : 0;
        tuned_ms = r.best_ms;
        printf("    autotuner %s %-6s %-12s: default %.3f ms, choice algo=%d %.3f ms "
               "(%zu tried, %zu declined, %zu rejected)\n",
               prec->name, s->name, form_names[f], r.default_ms, tuned_algo, r.best_ms, r.n_tried,
               r.n_failed, r.n_rejected);
    }
    printf("| %s | %s | %s | %s | %d | %.3f | %.1f | %d | %.3f | %.1f | %.2fx | %.1e | %s |\n",
           prec->name, s->name, form_names[f], shape, n_algo, ms[0], flop / (ms[0] * 1e-3) / 1e12, best,
           ms[best], flop / (ms[best] * 1e-3) / 1e12, ms[0] / ms[best], worst, times);
    int w = s->per_layer ? 0 : 1, mult = s->per_layer ? s->per_layer : 1;
    sum_dflt[w] += mult * ms[0];
    sum_best[w] += mult * ms[best];
    sum_tuned[w] += mult * (tune ? tuned_ms : ms[best]);
    free(ref);
    free(got);
    gemm_free(&g);
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-tune") == 0)
            tune = false;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        /* anything else (make bench's output folder) is ignored */
    }
    reps = reps < 5 ? 5 : reps;
    if (gf_backend_open("cuda", NULL, &be) != GF_OK) {
        printf("bench_cuda_gemm: skipped, no CUDA device (%s)\n", gf_last_error());
        return 0;
    }
    char path[] = "/tmp/bench_cuda_gemm_tune.XXXXXX";
    int fd = tune ? mkstemp(path) : -1;
    if (tune && fd < 0)
        die("temporary cache file");
    if (fd >= 0) {
        close(fd);
        unlink(path); /* a missing file is an empty cache; never saved */
        if (gf_tuner_open(path, &tuner) != GF_OK)
            die("tuner");
    }
    printf("device: %s (%s)\n", be->ops->device_name(be), be->ops->driver_version(be));
    printf("fp32 (no TF32), tf32 (--precision tf32), bf16 (fp32 accumulation), T = 4096 "
           "tokens; median of %d samples of %d launches; algo = index into cuBLASLt's "
           "heuristic list (0: its first choice)\n",
           reps, INNER);
    static const struct shape shapes[] = {
        {"q/o", 1024, 1024, 2}, {"k/v", 1024, 512, 2}, {"up", 1024, 2816, 2},
        {"down", 2816, 1024, 1}, {"lmhead", 1024, 32000, 0},
    };
    for (size_t pi = 0; pi < sizeof(precs) / sizeof(precs[0]); pi++) {
        prec = &precs[pi];
        if (only && strcmp(only, prec->name) != 0)
            continue;
        memset(sum_dflt, 0, sizeof(sum_dflt));
        memset(sum_best, 0, sizeof(sum_best));
        memset(sum_tuned, 0, sizeof(sum_tuned));
        printf("\n| prec | W | form | MxKxN | cands | default ms | TFLOP/s | best algo | ms | "
               "TFLOP/s | speedup | max rel diff | ms per algo |\n"
               "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            for (int f = FWD; f <= DW; f++)
                bench_one(&shapes[i], (enum form)f);
        printf("\n%s: one layer (q k v o gate up down, fwd + dX + dW): default %.3f ms, "
               "best %.3f ms (%.2fx), autotuner %.3f ms\n",
               prec->name, sum_dflt[0], sum_best[0], sum_dflt[0] / sum_best[0], sum_tuned[0]);
        printf("%s: lm head (fwd + dX + dW): default %.3f ms, best %.3f ms (%.2fx), "
               "autotuner %.3f ms\n",
               prec->name, sum_dflt[1], sum_best[1], sum_dflt[1] / sum_best[1], sum_tuned[1]);
    }
    if (tuner)
        gf_tuner_free(tuner);
    if (n_bad) {
        printf("bench_cuda_gemm: %d candidate(s) disagree with the heuristic's first choice\n",
               n_bad);
        return 1;
    }
    return 0;
}
