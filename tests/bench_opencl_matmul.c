/* OpenCL MatMul N x N x N fp32, GFLOP/s, for the default config and, with
 * `all`, every config of the kernel's knob space (the autotuner's search
 * space).  Each config is run once (building its program), checked on 64
 * elements against a double dot product on the host, then timed over
 * enough runs to fill about 0.3 s (3 at least, queue drained before and
 * after).  Prints one line per config and the best one.
 *
 * Usage: bench_opencl_matmul [outdir] [N] [all]    (outdir unused; N 1024)
 *   make bench-opencl               N = 4096, every config (for a GPU)
 * Exits 0 with "SKIP" when there is no OpenCL device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gf_kernels.h"

#define CHECKS 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_opencl_matmul: %s: %s\n", what, gf_last_error());
    exit(1);
}

struct bench {
    struct gf_backend *be;
    const struct gf_kernel *k;
    struct gf_kernel_args args;
    const float *a, *b; /* host copies of the operands */
    float *y;           /* host copy of the result */
    int n;
};

/* Largest error of CHECKS elements of Y against a double dot product,
 * relative to sqrt(N) (the size of a sum of N products of [-1, 1]). */
static double check(struct bench *bm)
{
    size_t n = (size_t)bm->n;
    if (bm->be->ops->copy_out(bm->be, bm->y, bm->args.out[0].data, n * n * sizeof(float)) != GF_OK)
        die("download");
    double worst = 0;
    for (size_t c = 0; c < CHECKS; c++) {
        size_t i = (c * 2654435761u) % n, j = (c * 40503u + 17) % n;
        double want = 0;
        for (size_t p = 0; p < n; p++)
            want += (double)bm->a[i * n + p] * bm->b[p * n + j];
        double err = fabs(bm->y[i * n + j] - want) / sqrt((double)n);
        worst = err > worst ? err : worst;
    }
    return worst;
}

/* GFLOP/s of config cfg (NULL: the defaults); *err: check()'s error. */
static double time_config(struct bench *bm, const int *cfg, double *err)
{
    bm->args.config = cfg;
    if (bm->k->run(&bm->args) != GF_OK || bm->be->ops->sync(bm->be) != GF_OK)
        die("first run");
    *err = check(bm);
    double t0 = now();
    if (bm->k->run(&bm->args) != GF_OK || bm->be->ops->sync(bm->be) != GF_OK)
        die("timed run");
    double once = now() - t0;
    int reps = once > 0.1 ? 3 : (int)(0.3 / (once + 1e-9)) + 1;
    reps = reps < 3 ? 3 : reps > 200 ? 200 : reps;
    t0 = now();
    for (int r = 0; r < reps; r++)
        if (bm->k->run(&bm->args) != GF_OK)
            die("timed run");
    if (bm->be->ops->sync(bm->be) != GF_OK)
        die("sync");
    double t = (now() - t0) / reps, nn = bm->n;
    return 2 * nn * nn * nn / t * 1e-9;
}

static void print_config(const struct gf_kernel *k, const int *cfg)
{
    for (size_t i = 0; i < k->n_knobs; i++)
        printf("%s%s=%d", i ? " " : "", k->knobs[i].name,
               cfg ? cfg[i] : k->knobs[i].values[0]);
}

/* Device buffer holding n random floats in [-1, 1), also kept in *host. */
static void *operand(struct gf_backend *be, size_t n, unsigned seed, float **host)
{
    float *h = malloc(n * sizeof(float));
    if (!h)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    void *d = be->ops->alloc(be, n * sizeof(float));
    if (!d || be->ops->copy_in(be, d, h, n * sizeof(float)) != GF_OK)
        die("upload");
    *host = h;
    return d;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 1024;
    bool all = argc > 3 && strcmp(argv[3], "all") == 0;
    struct bench bm = {.n = n};
    if (n < 1) {
        fprintf(stderr, "usage: bench_opencl_matmul [outdir] [N] [all]\n");
        return 2;
    }
    if (gf_backend_open("opencl", getenv("GRAPHFUSE_TEST_DEVICE"), &bm.be) != GF_OK) {
        printf("SKIP: %s\n", gf_last_error());
        return 0;
    }
    struct gf_model *m = gf_model_new(8, "bench");
    if (!m || gf_model_set_opset(m, "", 17) != GF_OK)
        die("model");
    struct gf_value *io[3] = {gf_graph_new_value(m->graph, NULL, "A"),
                              gf_graph_new_value(m->graph, NULL, "B"),
                              gf_graph_new_value(m->graph, NULL, "Y")};
    struct gf_node *node = gf_graph_add_node(m->graph, "MatMul", "", "matmul", 2, io, 1, io + 2);
    size_t nn = (size_t)n * (size_t)n;
    float *ha, *hb, *hy;
    struct gf_tview in[2] = {{.dtype = GF_FLOAT}, {.dtype = GF_FLOAT}}, out = {.dtype = GF_FLOAT};
    int64_t dims[2] = {n, n};
    gf_tview_set_shape(&in[0], 2, dims);
    gf_tview_set_shape(&in[1], 2, dims);
    gf_tview_set_shape(&out, 2, dims);
    in[0].data = operand(bm.be, nn, 1, &ha);
    in[1].data = operand(bm.be, nn, 2, &hb);
    out.data = operand(bm.be, nn, 3, &hy);
    bm.a = ha, bm.b = hb, bm.y = hy;
    if (!node || !(bm.k = gf_kernel_find(bm.be, node, in, 2)))
        die("no OpenCL MatMul kernel");
    bm.args = (struct gf_kernel_args){.node = node, .in = in, .n_in = 2, .out = &out,
                                      .n_out = 1, .n_threads = 1, .backend = bm.be};
    printf("MatMul %d x %d x %d fp32 on %s (%s), GFLOP/s\n", n, n, n,
           bm.be->ops->device_name(bm.be), bm.be->ops->driver_version(bm.be));
    double err, gf = time_config(&bm, NULL, &err), best = gf;
    printf("default (");
    print_config(bm.k, NULL);
    printf("): %.1f  (error %.1e)\n", gf, err);
    int idx[16] = {0}, cfg[16], best_cfg[16];
    for (size_t i = 0; i < bm.k->n_knobs; i++)
        best_cfg[i] = bm.k->knobs[i].values[0];
    while (all) {
        for (size_t i = 0; i < bm.k->n_knobs; i++)
            cfg[i] = bm.k->knobs[i].values[idx[i]];
        gf = time_config(&bm, cfg, &err);
        print_config(bm.k, cfg);
        printf(": %.1f  (error %.1e)\n", gf, err);
        fflush(stdout);
        if (gf > best) {
            best = gf;
            memcpy(best_cfg, cfg, sizeof(cfg));
        }
        size_t d = 0;
        while (d < bm.k->n_knobs && ++idx[d] == bm.k->knobs[d].n_values)
            idx[d++] = 0;
        all = d < bm.k->n_knobs;
    }
    printf("best (");
    print_config(bm.k, best_cfg);
    printf("): %.1f GFLOP/s\n", best);
    for (int i = 0; i < 2; i++)
        bm.be->ops->release(bm.be, in[i].data);
    bm.be->ops->release(bm.be, out.data);
    free(ha);
    free(hb);
    free(hy);
    gf_model_free(m);
    return 0;
}
