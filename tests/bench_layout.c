/* CPU layout kernels at model shapes against memcpy of the same bytes:
 * Transpose (the attention head splits and merges, K^T, the tied LM head's
 * weight), Slice (RoPE's halves) and Expand (a broadcast mask), run through
 * the registered CPU kernel on 1 and 2 threads.  GB/s counts the bytes
 * read plus written (2x the output); "memcpy" copies the output's bytes
 * once on one thread, counted the same way.  The fastest of REPS runs after
 * a warm-up; one thread (and memcpy) timed by the thread's CPU time, so
 * that other work on the machine costs less noise, two threads by the wall
 * clock.  Usage: bench_layout [outdir] (unused) [name-filter]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_kernels.h"

#define REPS 15

/* 1 thread: the thread's CPU time (a busy machine's preemptions left out);
 * 2 threads: wall time. */
static clockid_t clk = CLOCK_MONOTONIC;

struct bcase {
    const char *name, *op;
    enum gf_dtype dtype;
    int rank;
    int64_t dims[6];
    int64_t perm[6];       /* Transpose */
    int64_t out_rank;      /* Expand: target rank */
    int64_t out_dims[6];   /* Expand target / Slice: unused */
    int64_t start, end, axis; /* Slice: one axis */
};

#define TR(NAME, T, R, D, P) {.name = NAME, .op = "Transpose", .dtype = T, .rank = R, \
                              .dims = D, .perm = P}
#define A(...) {__VA_ARGS__}
static const struct bcase cases[] = {
    TR("heads split [1,128,8,64] 0,2,1,3", GF_FLOAT, 4, A(1, 128, 8, 64), A(0, 2, 1, 3)),
    TR("heads split [4,512,8,64] 0,2,1,3", GF_FLOAT, 4, A(4, 512, 8, 64), A(0, 2, 1, 3)),
    TR("K^T [4,512,8,64] 0,2,3,1", GF_FLOAT, 4, A(4, 512, 8, 64), A(0, 2, 3, 1)),
    TR("K^T [1,8,128,64] 0,1,3,2", GF_FLOAT, 4, A(1, 8, 128, 64), A(0, 1, 3, 2)),
    TR("[8,64,128] 0,2,1", GF_FLOAT, 3, A(8, 64, 128), A(0, 2, 1)),
    TR("LM head [512,32000] 1,0", GF_FLOAT, 2, A(512, 32000), A(1, 0)),
    TR("LM head [32000,512] 1,0", GF_FLOAT, 2, A(32000, 512), A(1, 0)),
    TR("bf16 [32000,512] 1,0", GF_BFLOAT16, 2, A(32000, 512), A(1, 0)),
    TR("int8 [4096,4096] 1,0", GF_INT8, 2, A(4096, 4096), A(1, 0)),
    TR("f64 [2048,2048] 1,0", GF_DOUBLE, 2, A(2048, 2048), A(1, 0)),
    {.name = "RoPE half [4,8,512,64] [...,32:]", .op = "Slice", .dtype = GF_FLOAT, .rank = 4,
     .dims = {4, 8, 512, 64}, .start = 32, .end = 64, .axis = 3},
    {.name = "mask [4,1,512,512] -> [4,8,512,512]", .op = "Expand", .dtype = GF_BOOL, .rank = 4,
     .dims = {4, 1, 512, 512}, .out_rank = 4, .out_dims = {4, 8, 512, 512}},
    {.name = "bias [512] -> [2048,512]", .op = "Expand", .dtype = GF_FLOAT, .rank = 1,
     .dims = {512}, .out_rank = 2, .out_dims = {2048, 512}},
};

static double run_case(const struct bcase *b, int threads, double *bytes_out)
{
    struct gf_model *m = gf_model_new(8, "bench");
    gf_model_set_opset(m, "", 17);
    size_t n_in = strcmp(b->op, "Transpose") == 0 ? 1 : strcmp(b->op, "Expand") == 0 ? 2 : 4;
    struct gf_value *ins[4], *outs[1];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(m->graph, NULL, "in");
    outs[0] = gf_graph_new_value(m->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(m->graph, b->op, "", "n0", n_in, ins, 1, outs);
    struct gf_tview in[4], out;
    memset(in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    in[0].dtype = out.dtype = b->dtype;
    gf_tview_set_shape(&in[0], b->rank, b->dims);
    int64_t od[6], one = 1, sl[3] = {b->start, b->end, b->axis}, shape_len = b->out_rank;
    int orank = b->rank;
    memcpy(od, b->dims, sizeof(od));
    if (n_in == 1) {
        gf_node_set_attr_ints(n, "perm", (size_t)b->rank, b->perm);
        for (int k = 0; k < b->rank; k++)
            od[k] = b->dims[b->perm[k]];
    } else if (n_in == 2) {
        in[1].dtype = GF_INT64;
        gf_tview_set_shape(&in[1], 1, &shape_len);
        in[1].data = (void *)b->out_dims;
        orank = (int)b->out_rank;
        memcpy(od, b->out_dims, sizeof(od));
    } else {
        for (int i = 1; i < 4; i++) {
            in[i].dtype = GF_INT64;
            gf_tview_set_shape(&in[i], 1, &one);
            in[i].data = &sl[i - 1];
        }
        od[b->axis] = b->end - b->start;
    }
    gf_tview_set_shape(&out, orank, od);
    size_t ib = gf_tview_bytes(&in[0]), ob = gf_tview_bytes(&out);
    in[0].data = malloc(ib);
    out.data = malloc(ob);
    memset(in[0].data, 1, ib);
    memset(out.data, 0, ob);
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = &out, .n_out = 1,
                               .n_threads = threads, .backend = gf_backend_get("cpu")};
    const struct gf_kernel *k = gf_kernel_find(a.backend, n, in, n_in);
    void *ws = k && k->workspace ? malloc(k->workspace(&a)) : NULL;
    a.workspace = ws;
    double t[REPS], med = -1;
    if (k && k->run(&a) == GF_OK) {
        for (int r = 0; r < REPS; r++) {
            double t0 = bench_clock_s(clk);
            k->run(&a);
            t[r] = bench_clock_s(clk) - t0;
        }
        med = bench_min(t, REPS);
    } else {
        fprintf(stderr, "%s: %s\n", b->name, k ? gf_last_error() : "no kernel");
    }
    *bytes_out = 2.0 * (double)ob;
    free(ws);
    free(in[0].data);
    free(out.data);
    gf_model_free(m);
    return med;
}

static double memcpy_time(size_t bytes)
{
    char *s = malloc(bytes), *d = malloc(bytes);
    memset(s, 1, bytes);
    memset(d, 0, bytes);
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = bench_clock_s(clk);
        memcpy(d, s, bytes);
        t[r] = bench_clock_s(clk) - t0;
        __asm__ volatile("" : : "r"(d) : "memory");
    }
    free(s);
    free(d);
    return bench_min(t, REPS);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 2 ? argv[2] : NULL;
    printf("%-38s %9s %9s %9s %9s %9s %9s\n", "case", "MB moved", "cpy GB/s", "1T ms", "1T GB/s",
           "2T ms", "2T GB/s");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bcase *b = &cases[i];
        if (filter && !strstr(b->name, filter))
            continue;
        double bytes;
        clk = CLOCK_THREAD_CPUTIME_ID;
        double t1 = run_case(b, 1, &bytes), tm = memcpy_time((size_t)(bytes / 2));
        clk = CLOCK_MONOTONIC;
        double t2 = run_case(b, 2, &bytes);
        printf("%-38s %9.2f %9.1f %9.3f %9.1f %9.3f %9.1f\n", b->name, bytes / 1e6,
               bytes / tm / 1e9, t1 * 1e3, bytes / t1 / 1e9, t2 * 1e3, bytes / t2 / 1e9);
    }
    return 0;
}
