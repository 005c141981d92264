/*
 * Bandwidth of the OpenCL elementwise, softmax, layer-norm and reduction
 * kernels (kernels/opencl/elementwise.c, reduce.c) with fp32, fp16 and bf16
 * storage, next to a device-to-device copy.
 *
 *   make build/tests/bench_opencl_storage && build/tests/bench_opencl_storage --device H200
 *   build/tests/bench_opencl_storage --small      a smoke run (rows / 64), e.g. PoCL
 *   options: --device NAME (substring; default: the first GPU, else the first
 *   device), --small, --reps N (default 20)
 *
 * Cases on [M, N] = [16384, 4096]: Add (both [M, N]), Mul by a row ([N]),
 * Gelu, Softmax along N, LayerNormalization over N (Scale and B [N]),
 * ReduceSum over N.  Bytes count each tensor read or written once (the
 * element size of the storage type); the row vectors and per-row outputs
 * are left out.  Each case runs 3 times to warm up, then --reps times
 * (enqueue, then clFinish), the median reported as a markdown table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "gf_half.h"
#include "gf_kernels.h"

static struct gf_backend *be;
static int reps = 20;

static void die(const char *what)
{
    fprintf(stderr, "bench_opencl_storage: %s: %s\n", what, gf_last_error());
    exit(1);
}

/* A device tensor of type t: random values in [lo, hi) (lo < hi), else
 * uninitialized (an output). */
static struct gf_tview dev_tensor(enum gf_dtype t, int rank, const int64_t *dims, float lo,
                                  float hi)
{
    struct gf_tview v = {.dtype = t};
    gf_tview_set_shape(&v, rank, dims);
    if (!(v.data = be->ops->alloc(be, gf_tview_bytes(&v))))
        die("device memory");
    if (lo >= hi)
        return v;
    unsigned char *h = malloc(gf_tview_bytes(&v) + 4);
    if (!h)
        die("host memory");
    unsigned s = 12345;
    for (size_t i = 0; i < v.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        float f = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
        if (t == GF_FLOAT)
            ((float *)h)[i] = f;
        else
            ((uint16_t *)h)[i] = t == GF_FLOAT16 ? gf_float_to_half(f) : gf_float_to_bf16(f);
    }
    if (be->ops->copy_in(be, v.data, h, gf_tview_bytes(&v)) != GF_OK)
        die("upload");
    free(h);
    return v;
}

/* Median ms of one node's OpenCL kernel (default config). */
static double time_node(const char *op, const char *attr, int64_t attr_v, struct gf_tview *in,
                        size_t n_in, struct gf_tview *out, size_t n_out)
{
    struct gf_model *m = gf_model_new(8, "bench");
    if (!m || gf_model_set_opset(m, "", 18) != GF_OK)
        die("model");
    struct gf_node *n = gf_graph_add_node(m->graph, op, "", op, n_in, NULL, n_out, NULL);
    if (!n || (attr && gf_node_set_attr_int(n, attr, attr_v) != GF_OK))
        die(op);
    const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
    if (!k) {
        fprintf(stderr, "bench_opencl_storage: no OpenCL kernel for %s (%s)\n", op,
                gf_dtype_name(in[0].dtype));
        exit(1);
    }
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
                               .n_threads = 1, .backend = be};
    size_t ws = k->workspace ? k->workspace(&a) : 0;
    if (ws && !(a.workspace = be->ops->alloc(be, ws)))
        die("workspace");
    double t[1024];
    for (int i = 0; i < reps + 3; i++) {
        double t0 = bench_now_ms();
        if (k->run(&a) != GF_OK || be->ops->sync(be) != GF_OK)
            die(op);
        if (i >= 3)
            t[i - 3] = bench_now_ms() - t0;
    }
    if (ws)
        be->ops->release(be, a.workspace);
    gf_model_free(m);
    return bench_median_upper(t, reps);
}

static double copy_tbs;

static void row(const char *op, enum gf_dtype t, double ms, double bytes)
{
    double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("| %s | %s | %.3f | %.3f | %.3f | %.0f%% |\n", op, gf_dtype_name(t), ms, bytes / 1e9,
           tbs, 100 * tbs / copy_tbs);
}

static void free_all(struct gf_tview *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].data)
            be->ops->release(be, v[i].data);
}

static void bench_type(enum gf_dtype t, int64_t M, int64_t N)
{
    int64_t mn[2] = {M, N}, m1[2] = {M, 1};
    double e = (double)M * (double)N * (double)gf_dtype_size(t);
    struct gf_tview x = dev_tensor(t, 2, mn, -3, 3), x2 = dev_tensor(t, 2, mn, -3, 3);
    struct gf_tview w = dev_tensor(t, 1, &N, 0.5f, 1.5f), b = dev_tensor(t, 1, &N, -1, 1);
    struct gf_tview y = dev_tensor(t, 2, mn, 0, 0), r = dev_tensor(t, 2, m1, 0, 0);
    struct gf_tview in2[2] = {x, x2}, row_in[2] = {x, w}, ln_in[3] = {x, w, b};
    row("Add [M,N] + [M,N]", t, time_node("Add", NULL, 0, in2, 2, &y, 1), 3 * e);
    row("Mul [M,N] * [N]", t, time_node("Mul", NULL, 0, row_in, 2, &y, 1), 2 * e);
    row("Gelu", t, time_node("Gelu", NULL, 0, &x, 1, &y, 1), 2 * e);
    row("Softmax along N", t, time_node("Softmax", "axis", -1, &x, 1, &y, 1), 2 * e);
    row("LayerNormalization over N", t,
        time_node("LayerNormalization", "axis", -1, ln_in, 3, &y, 1), 2 * e);
    int64_t ax = -1;
    struct gf_tview red_in[2] = {x, {.dtype = GF_INT64, .host = &ax}};
    gf_tview_set_shape(&red_in[1], 1, (int64_t[]){1});
    red_in[1].data = be->ops->alloc(be, sizeof(ax));
    if (!red_in[1].data || be->ops->copy_in(be, red_in[1].data, &ax, sizeof(ax)) != GF_OK)
        die("axes");
    row("ReduceSum over N", t, time_node("ReduceSum", "keepdims", 1, red_in, 2, &r, 1), e);
    struct gf_tview all[7] = {x, x2, w, b, y, r, red_in[1]};
    free_all(all, 7);
}

int main(int argc, char **argv)
{
    const char *device = NULL;
    bool small = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[++i];
        else if (strcmp(argv[i], "--small") == 0)
            small = true;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            reps = atoi(argv[++i]);
            reps = reps < 1024 ? reps : 1024;
        } else {
            fprintf(stderr, "usage: bench_opencl_storage [--device NAME] [--small] "
                            "[--reps N]\n");
            return 2;
        }
    }
    if (gf_backend_open("opencl", device, &be) != GF_OK)
        die("opening OpenCL");
    int64_t M = small ? 16384 / 64 : 16384, N = 4096;
    size_t copy_bytes = (size_t)M * (size_t)N * 4;
    void *src = be->ops->alloc(be, copy_bytes), *dst = be->ops->alloc(be, copy_bytes);
    if (!src || !dst)
        die("copy buffers");
    double t[1024];
    for (int i = 0; i < reps + 3; i++) {
        double t0 = bench_now_ms();
        if (be->ops->copy(be, dst, src, copy_bytes) != GF_OK || be->ops->sync(be) != GF_OK)
            die("copy");
        if (i >= 3)
            t[i - 3] = bench_now_ms() - t0;
    }
    copy_tbs = 2.0 * (double)copy_bytes / (bench_median_upper(t, reps) * 1e-3) / 1e12;
    be->ops->release(be, src);
    be->ops->release(be, dst);
    printf("device: %s; M=%lld N=%lld; copy of %.3f GB: %.3f TB/s (read + write)\n\n",
           be->ops->device_name(be), (long long)M, (long long)N, copy_bytes / 1e9, copy_tbs);
    printf("| op | type | ms | GB | TB/s | of copy |\n|---|---|---|---|---|---|\n");
    enum gf_dtype types[3] = {GF_FLOAT, GF_FLOAT16, GF_BFLOAT16};
    for (int i = 0; i < 3; i++)
        bench_type(types[i], M, N);
    return 0;
}
