/* OpenCL MatMul N x N x N, GFLOP/s of the default config and of every
 * config of the kernel's knob space (the autotuner's search space), then
 * the default and the best side by side.  Each config is run once
 * (building its program), checked on 64 elements against a double dot
 * product on the host (of the values as stored), then timed over enough
 * runs to fill about 0.3 s (3 at least; --reps sets the count), the queue
 * drained before and after.  A config the device refuses (too many
 * work-items, too little local memory) is listed as skipped.
 *
 * Usage: bench_opencl_matmul [--device NAME] [--small] [--n N]
 *                            [--dtype float|float16|bfloat16] [--default] [--reps N]
 *   make bench-opencl ARGS="--device H200"   N = 4096, every config (for a GPU)
 *   --small: N = 512 (e.g. PoCL); --default: the default config only; --tune
 *   (an option of bench_opencl, which make passes too) changes nothing here.
 * Exits 0 with "SKIP" when there is no OpenCL device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_half.h"
#include "gf_kernels.h"

#define CHECKS 64
#define MAX_KNOBS 16

static void die(const char *what)
{
    fprintf(stderr, "bench_opencl_matmul: %s: %s\n", what, gf_last_error());
    exit(1);
}

struct opts {
    const char *device;
    int n, reps;
    enum gf_dtype dtype;
    bool only_default;
};

struct bench {
    struct gf_backend *be;
    const struct gf_kernel *k;
    struct gf_kernel_args args;
    const float *a, *b; /* host copies of the operands, as stored */
    void *y;            /* host copy of the result */
    int n, reps;
    enum gf_dtype dtype;
};

static float stored(enum gf_dtype dt, const void *p, size_t i)
{
    const uint16_t *h = p;
    return dt == GF_FLOAT16 ? gf_half_to_float(h[i]) : dt == GF_BFLOAT16 ? gf_bf16_to_float(h[i])
                                                                         : ((const float *)p)[i];
}

/* Largest error of CHECKS elements of Y against a double dot product,
 * relative to sqrt(N) (the size of a sum of N products of [-1, 1]). */
static double check(struct bench *bm)
{
    size_t n = (size_t)bm->n, es = gf_dtype_size(bm->dtype);
    if (bm->be->ops->copy_out(bm->be, bm->y, bm->args.out[0].data, n * n * es) != GF_OK)
        die("download");
    double worst = 0;
    for (size_t c = 0; c < CHECKS; c++) {
        size_t i = (c * 2654435761u) % n, j = (c * 40503u + 17) % n;
        double want = 0;
        for (size_t p = 0; p < n; p++)
            want += (double)bm->a[i * n + p] * bm->b[p * n + j];
        double err = fabs(stored(bm->dtype, bm->y, i * n + j) - want) / sqrt((double)n);
        worst = err > worst ? err : worst;
    }
    return worst;
}

/* GFLOP/s of config cfg (NULL: the default), 0 when the device refuses it
 * (GF_ERR_UNSUPPORTED); *err: check()'s error. */
static double time_config(struct bench *bm, const int *cfg, double *err)
{
    bm->args.config = cfg;
    enum gf_status st = bm->k->run(&bm->args);
    if (st == GF_ERR_UNSUPPORTED)
        return 0;
    if (st != GF_OK || bm->be->ops->sync(bm->be) != GF_OK)
        die("first run");
    *err = check(bm);
    double t0 = bench_now_s();
    if (bm->k->run(&bm->args) != GF_OK || bm->be->ops->sync(bm->be) != GF_OK)
        die("timed run");
    double once = bench_now_s() - t0;
    int reps = bm->reps;
    if (reps < 1) {
        reps = once > 0.1 ? 3 : (int)(0.3 / (once + 1e-9)) + 1;
        reps = reps < 3 ? 3 : reps > 200 ? 200 : reps;
    }
    t0 = bench_now_s();
    for (int r = 0; r < reps; r++)
        if (bm->k->run(&bm->args) != GF_OK)
            die("timed run");
    if (bm->be->ops->sync(bm->be) != GF_OK)
        die("sync");
    double t = (bench_now_s() - t0) / reps, nn = bm->n;
    return 2 * nn * nn * nn / t * 1e-9;
}

static void print_config(const struct gf_kernel *k, const int *cfg)
{
    for (size_t i = 0; i < k->n_knobs; i++)
        printf("%s%s=%d", i ? " " : "", k->knobs[i].name, cfg[i]);
}

/* Device buffer holding n random values in [-1, 1) of type dt; *host
 * gets them as float (after rounding to dt). */
static void *operand(struct gf_backend *be, size_t n, enum gf_dtype dt, unsigned seed,
                     float **host)
{
    float *h = malloc(n * sizeof(float));
    uint16_t *s = malloc(n * sizeof(uint16_t));
    if (!h || !s)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
        if (dt != GF_FLOAT) {
            s[i] = dt == GF_FLOAT16 ? gf_float_to_half(h[i]) : gf_float_to_bf16(h[i]);
            h[i] = stored(dt, s, i);
        }
    }
    size_t bytes = n * gf_dtype_size(dt);
    void *d = be->ops->alloc(be, bytes);
    if (!d || be->ops->copy_in(be, d, dt == GF_FLOAT ? (void *)h : (void *)s, bytes) != GF_OK)
        die("upload");
    free(s);
    *host = h;
    return d;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_opencl_matmul [--device NAME] [--small] [--n N] [--dtype "
                    "float|float16|bfloat16] [--default] [--reps N]\n");
    exit(2);
}

static enum gf_dtype dtype_of(const char *s)
{
    return strcmp(s, "float") == 0      ? GF_FLOAT
           : strcmp(s, "float16") == 0  ? GF_FLOAT16
           : strcmp(s, "bfloat16") == 0 ? GF_BFLOAT16
                                        : GF_UNDEFINED;
}

static struct opts parse(int argc, char **argv)
{
    struct opts o = {.device = getenv("GRAPHFUSE_TEST_DEVICE"), .n = 4096, .dtype = GF_FLOAT};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        bool val = i + 1 < argc;
        if (strcmp(s, "--small") == 0)
            o.n = 512;
        else if (strcmp(s, "--default") == 0)
            o.only_default = true;
        else if (strcmp(s, "--tune") == 0)
            continue;
        else if (strcmp(s, "--device") == 0 && val)
            o.device = argv[++i];
        else if (strcmp(s, "--n") == 0 && val)
            o.n = atoi(argv[++i]);
        else if (strcmp(s, "--reps") == 0 && val)
            o.reps = atoi(argv[++i]);
        else if (strcmp(s, "--dtype") == 0 && val)
            o.dtype = dtype_of(argv[++i]);
        else
            usage();
    }
    if (o.n < 1 || o.reps < 0 || o.dtype == GF_UNDEFINED)
        usage();
    return o;
}

int main(int argc, char **argv)
{
    struct opts o = parse(argc, argv);
    int n = o.n;
    struct bench bm = {.n = n, .reps = o.reps, .dtype = o.dtype};
    if (gf_backend_open("opencl", o.device, &bm.be) != GF_OK) {
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
    struct gf_tview in[2] = {{.dtype = o.dtype}, {.dtype = o.dtype}}, out = {.dtype = o.dtype};
    int64_t dims[2] = {n, n};
    gf_tview_set_shape(&in[0], 2, dims);
    gf_tview_set_shape(&in[1], 2, dims);
    gf_tview_set_shape(&out, 2, dims);
    in[0].data = operand(bm.be, nn, o.dtype, 1, &ha);
    in[1].data = operand(bm.be, nn, o.dtype, 2, &hb);
    out.data = operand(bm.be, nn, o.dtype, 3, &hy);
    bm.a = ha, bm.b = hb, bm.y = hy;
    if (!node || !(bm.k = gf_kernel_find(bm.be, node, in, 2)) || bm.k->n_knobs > MAX_KNOBS)
        die("no OpenCL MatMul kernel");
    bm.args = (struct gf_kernel_args){.node = node, .in = in, .n_in = 2, .out = &out,
                                      .n_out = 1, .n_threads = 1, .backend = bm.be};
    printf("MatMul %d x %d x %d %s on %s (%s), GFLOP/s\n", n, n, n, gf_dtype_name(o.dtype),
           bm.be->ops->device_name(bm.be), bm.be->ops->driver_version(bm.be));
    int idx[MAX_KNOBS] = {0}, cfg[MAX_KNOBS], dflt[MAX_KNOBS], best_cfg[MAX_KNOBS];
    for (size_t i = 0; i < bm.k->n_knobs; i++)
        dflt[i] = best_cfg[i] = bm.k->knobs[i].values[0];
    double err = 0, dflt_gf = time_config(&bm, NULL, &err), best = dflt_gf;
    if (dflt_gf == 0)
        die("the default config");
    printf("default: ");
    print_config(bm.k, dflt);
    printf(": %.1f  (error %.1e)\n", dflt_gf, err);
    for (bool more = !o.only_default; more;) {
        for (size_t i = 0; i < bm.k->n_knobs; i++)
            cfg[i] = bm.k->knobs[i].values[idx[i]];
        if (memcmp(cfg, dflt, bm.k->n_knobs * sizeof(int)) != 0) {
            double gf = time_config(&bm, cfg, &err);
            print_config(bm.k, cfg);
            if (gf == 0)
                printf(": skipped: %s\n", gf_last_error());
            else
                printf(": %.1f  (error %.1e)\n", gf, err);
            fflush(stdout);
            if (gf > best) {
                best = gf;
                memcpy(best_cfg, cfg, sizeof(cfg));
            }
        }
        size_t d = 0;
        while (d < bm.k->n_knobs && ++idx[d] == bm.k->knobs[d].n_values)
            idx[d++] = 0;
        more = d < bm.k->n_knobs;
    }
    printf("default (");
    print_config(bm.k, dflt);
    printf("): %.1f GFLOP/s\nbest    (", dflt_gf);
    print_config(bm.k, best_cfg);
    printf("): %.1f GFLOP/s, %.2fx the default\n", best, best / dflt_gf);
    for (int i = 0; i < 2; i++)
        bm.be->ops->release(bm.be, in[i].data);
    bm.be->ops->release(bm.be, out.data);
    free(ha);
    free(hb);
    free(hy);
    gf_model_free(m);
    return 0;
}
