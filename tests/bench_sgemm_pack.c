/* The CPU's fp32 GEMM (kernels/cpu/sgemm.c) with B copied into panels on
 * every call against B packed once ahead of time (gf_cpu_sgemm_pack, what
 * an inference plan does with its weights): the 29 GEMMs of the issue-18
 * Llama forward at 1 x 128 tokens (hidden 512, intermediate 1376, 4 layers,
 * vocabulary 32000: 7.4 GFLOP, 116 MB of weights, more than the caches
 * hold, so each pass reads them from memory), one pass after the other,
 * and the same LM head given transposed (GPT-2's tied head, [32000, 512]).
 * Medians of REPS passes, the two ways interleaved, on 1 and 2 threads.
 * Usage: bench_sgemm_pack [outdir] (outdir unused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cpu/cpu.h"
#include "gf_kernels.h"

#define M 128
#define REPS 9
#define N_GEMMS 29

struct gemm {
    int64_t k, n;
    bool trans_b;
    float *b, *packed;
};

static float *alloc_fill(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_sgemm_pack: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 7 + seed * 13) % 17) * 0.01f - 0.08f;
    return p;
}

/* One pass over gemms [0, count): ms. */
static double pass(struct gemm *g, int count, const float *a, float *c, bool packed, int threads)
{
    double t0 = bench_now_ms();
    for (int i = 0; i < count; i++) {
        bool ok = packed ? gf_cpu_sgemm_packed(threads, M, g[i].n, g[i].k, a, g[i].k,
                                                g[i].packed, 0, c, g[i].n, false)
                         : gf_cpu_sgemm(threads, M, g[i].n, g[i].k, a, g[i].k, g[i].b,
                                        g[i].trans_b ? g[i].k : g[i].n, g[i].trans_b, c, g[i].n,
                                        false);
        if (!ok) {
            fprintf(stderr, "bench_sgemm_pack: the kernel declined (no AVX-512F?)\n");
            exit(0);
        }
    }
    return bench_now_ms() - t0;
}

static void row(const char *what, struct gemm *g, int count, const float *a, float *c)
{
    for (int t = 1; t <= 2; t++) {
        double ms[2][REPS];
        pass(g, count, a, c, false, t); /* warm-up */
        pass(g, count, a, c, true, t);
        for (int r = 0; r < REPS; r++)
            for (int w = 0; w < 2; w++)
                ms[(r + w) % 2][r] = pass(g, count, a, c, (r + w) % 2 == 1, t);
        double copied = bench_median(ms[0], REPS), packed = bench_median(ms[1], REPS);
        printf("  %-30s %7d %12.2f %12.2f %9.3f\n", what, t, copied, packed, packed / copied);
    }
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct gemm g[N_GEMMS + 1];
    int n = 0;
    for (int layer = 0; layer < 4; layer++) {
        for (int i = 0; i < 4; i++) /* q, k, v, o */
            g[n++] = (struct gemm){512, 512, false, NULL, NULL};
        g[n++] = (struct gemm){512, 1376, false, NULL, NULL}; /* gate */
        g[n++] = (struct gemm){512, 1376, false, NULL, NULL}; /* up */
        g[n++] = (struct gemm){1376, 512, false, NULL, NULL}; /* down */
    }
    g[n++] = (struct gemm){512, 32000, false, NULL, NULL};    /* LM head */
    g[n] = (struct gemm){512, 32000, true, NULL, NULL};       /* tied head, B^T */
    size_t bytes = 0;
    for (int i = 0; i <= N_GEMMS; i++) {
        g[i].b = alloc_fill((size_t)(g[i].k * g[i].n), (unsigned)i);
        size_t pb = gf_cpu_sgemm_pack_size(g[i].k, g[i].n);
        if (!pb) {
            printf("bench_sgemm_pack: no AVX-512F (or GF_CPU_SGEMM=0): nothing to time\n");
            return 0;
        }
        g[i].packed = aligned_alloc(64, pb);
        if (!g[i].packed)
            return 1;
        gf_cpu_sgemm_pack(2, g[i].k, g[i].n, g[i].b, g[i].trans_b ? g[i].k : g[i].n,
                          g[i].trans_b, g[i].packed);
        bytes += i < N_GEMMS ? pb : 0;
    }
    float *a = alloc_fill((size_t)M * 1376, 99), *c = alloc_fill((size_t)M * 32000, 7);
    printf("fp32 GEMMs of %d rows, B copied per call against packed once (%.1f MB packed), "
           "median of %d passes, ms\n", M, (double)bytes / 1e6, REPS);
    printf("  %-30s %7s %12s %12s %9s\n", "products", "threads", "copied", "packed",
           "packed/copied");
    row("Llama 1x128: 29 GEMMs", g, N_GEMMS, a, c);
    row("LM head B^T [32000, 512]", g + N_GEMMS, 1, a, c);
    for (int i = 0; i <= N_GEMMS; i++)
        free(g[i].b), free(g[i].packed);
    free(a), free(c);
    return 0;
}
