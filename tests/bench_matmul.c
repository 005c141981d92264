/* MatMul 1024 x 1024 x 1024 fp32, GFLOP/s, measured in one run:
 *   naive   the i-k-j triple loop a straightforward C kernel would be
 *   blas    cblas_sgemm called directly (OpenBLAS, 2 threads)
 *   gf      the registered MatMul kernel, found with gf_kernel_find and run
 *           on views with 2 threads (what the executor does)
 * Median of several repeats; the naive loop runs once or twice at the full
 * size (it takes seconds).  Usage: bench_matmul [outdir] (outdir unused). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_kernels.h"

#define N 1024
#define THREADS 2

/* C [n,n] = A [n,n] B [n,n], i-k-j order (rows of B streamed). */
static void naive(const float *a, const float *b, float *c, int n)
{
    memset(c, 0, sizeof(float) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            float aik = a[(size_t)i * n + k];
            for (int j = 0; j < n; j++)
                c[(size_t)i * n + j] += aik * b[(size_t)k * n + j];
        }
}

struct gf_run {
    const struct gf_kernel *k;
    struct gf_kernel_args args;
};

static void run_gf(struct gf_run *r)
{
    if (r->k->run(&r->args) != GF_OK) {
        fprintf(stderr, "bench_matmul: %s\n", gf_last_error());
        exit(1);
    }
}

static void run_blas(const float *a, const float *b, float *c)
{
    openblas_set_num_threads(THREADS);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
}

static float max_diff(const float *x, const float *y, size_t n)
{
    float d = 0;
    for (size_t i = 0; i < n; i++)
        d = fabsf(x[i] - y[i]) > d ? fabsf(x[i] - y[i]) : d;
    return d;
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    size_t nn = (size_t)N * N;
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c0 = malloc(nn * 4), *c1 = malloc(nn * 4),
          *c2 = malloc(nn * 4);
    if (!a || !b || !c0 || !c1 || !c2)
        return 1;
    srand(1);
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)rand() / RAND_MAX - 0.5f;
        b[i] = (float)rand() / RAND_MAX - 0.5f;
    }

    /* a one-node MatMul model and views over the same buffers */
    struct gf_model *m = gf_model_new(8, "bench");
    gf_model_set_opset(m, "", 13);
    struct gf_value *v[3] = {gf_graph_new_value(m->graph, "a", NULL),
                             gf_graph_new_value(m->graph, "b", NULL),
                             gf_graph_new_value(m->graph, "c", NULL)};
    struct gf_node *node = gf_graph_add_node(m->graph, "MatMul", "", "mm", 2, v, 1, &v[2]);
    int64_t dims[2] = {N, N};
    struct gf_tview in[2] = {{.dtype = GF_FLOAT, .data = a}, {.dtype = GF_FLOAT, .data = b}};
    struct gf_tview out = {.dtype = GF_FLOAT, .data = c2};
    gf_tview_set_shape(&in[0], 2, dims);
    gf_tview_set_shape(&in[1], 2, dims);
    gf_tview_set_shape(&out, 2, dims);
    struct gf_backend *be = gf_backend_get("cpu");
    struct gf_run r = {gf_kernel_find(be, node, in, 2),
                       {.node = node, .in = in, .n_in = 2, .out = &out, .n_out = 1,
                        .n_threads = THREADS, .backend = be}};
    if (!r.k || (r.k->workspace && r.k->workspace(&r.args))) {
        fprintf(stderr, "bench_matmul: no workspace-free fp32 MatMul kernel registered\n");
        return 1;
    }

    enum { REPS = 7, NAIVE_REPS = 2 };
    double flop = 2.0 * N * N * N, t_naive[NAIVE_REPS], t_blas[REPS], t_gf[REPS];
    for (int i = 0; i < NAIVE_REPS; i++) {
        double t = bench_now_s();
        naive(a, b, c0, N);
        t_naive[i] = bench_now_s() - t;
    }
    run_blas(a, b, c1); /* warm-up: OpenBLAS starts its threads */
    run_gf(&r);
    for (int i = 0; i < REPS; i++) { /* interleaved, so drift hits both alike */
        double t = bench_now_s();
        run_blas(a, b, c1);
        t_blas[i] = bench_now_s() - t;
        t = bench_now_s();
        run_gf(&r);
        t_gf[i] = bench_now_s() - t;
    }
    double g_naive = flop / bench_median(t_naive, NAIVE_REPS) / 1e9;
    double g_blas = flop / bench_median(t_blas, REPS) / 1e9;
    double g_gf = flop / bench_median(t_gf, REPS) / 1e9;
    double best = g_naive > g_blas ? g_naive : g_blas;

    printf("MatMul %dx%dx%d fp32, %d threads (naive: median of %d runs at full size; "
           "others: median of %d)\n", N, N, N, THREADS, NAIVE_REPS, REPS);
    printf("  %-34s %9s %14s\n", "path", "GFLOP/s", "vs best other");
    printf("  %-34s %9.2f %13.3fx\n", "naive i-k-j loop (1 thread)", g_naive, g_naive / best);
    printf("  %-34s %9.2f %13.3fx\n", "OpenBLAS cblas_sgemm direct", g_blas, g_blas / best);
    printf("  %-34s %9.2f %13.3fx\n", "graphfuse MatMul kernel", g_gf, g_gf / best);
    printf("  max |diff| vs naive: blas %.2e, graphfuse %.2e (impl '%s')\n",
           (double)max_diff(c0, c1, nn), (double)max_diff(c0, c2, nn), r.k->impl);
    printf("graphfuse path within 10%% of best: %s\n", g_gf >= 0.9 * best ? "yes" : "no");

    gf_model_free(m);
    free(a), free(b), free(c0), free(c1), free(c2);
    return 0;
}
