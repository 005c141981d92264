/* CPU softmax and elementwise kernels at the shapes of the unfused GPT-2 /
 * Llama forwards (hidden 512, 8 heads, batch 4 x 512 and 1 x 128): Softmax
 * and LogSoftmax over the attention probabilities, Tanh / Exp / Erf /
 * Sigmoid on the MLP activations, Where and IsNaN on the attention masks,
 * Pow with a scalar exponent and Mul / Add broadcasts.  Each case runs
 * through the registered CPU kernel on 1 and 2 threads; ns/elem counts
 * output elements, GB/s the bytes read plus written.  The fastest of REPS
 * runs after a warm-up; one thread is timed by the thread's CPU time (a
 * busy machine's preemptions left out), two threads by the wall clock.
 * Usage: bench_cpu_ops [outdir] (unused) [name-filter]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gf_kernels.h"

#define REPS 7

static clockid_t clk = CLOCK_MONOTONIC;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One input: rank -1 is a 0-d scalar holding `val`. */
struct bin {
    enum gf_dtype dtype;
    int rank;
    int64_t dims[4];
    float val;
};

struct bcase {
    const char *name, *op;
    int n_in;
    struct bin in[3];
    enum gf_dtype out_dtype;
};

#define F(R, ...) {GF_FLOAT, R, {__VA_ARGS__}, 0}
#define B(R, ...) {GF_BOOL, R, {__VA_ARGS__}, 0}
#define S(V) {GF_FLOAT, 0, {0}, V}
#define UN(NAME, OP, R, ...) {NAME, OP, 1, {F(R, __VA_ARGS__)}, GF_FLOAT}
static const struct bcase cases[] = {
    UN("Softmax [4,8,512,512]", "Softmax", 4, 4, 8, 512, 512),
    UN("Softmax [1,8,128,128]", "Softmax", 4, 1, 8, 128, 128),
    UN("LogSoftmax [4,8,512,512]", "LogSoftmax", 4, 4, 8, 512, 512),
    UN("LogSoftmax [512,32000]", "LogSoftmax", 2, 512, 32000),
    UN("Tanh [4,512,2048]", "Tanh", 3, 4, 512, 2048),
    UN("Exp [4,512,2048]", "Exp", 3, 4, 512, 2048),
    UN("Erf [4,512,2048]", "Erf", 3, 4, 512, 2048),
    UN("Sigmoid [4,512,1376]", "Sigmoid", 3, 4, 512, 1376),
    UN("Tanh [1,128,2048]", "Tanh", 3, 1, 128, 2048),
    {"Pow x^2 [4,512,512]", "Pow", 2, {F(3, 4, 512, 512), S(2)}, GF_FLOAT},
    {"Pow x^3 [4,512,2048]", "Pow", 2, {F(3, 4, 512, 2048), S(3)}, GF_FLOAT},
    {"Pow x^0.5 [4,512,512]", "Pow", 2, {F(3, 4, 512, 512), S(0.5f)}, GF_FLOAT},
    {"Mul scalar [4,512,2048]", "Mul", 2, {F(3, 4, 512, 2048), S(0.5f)}, GF_FLOAT},
    {"Sub 1-x [4,512,2048]", "Sub", 2, {S(1), F(3, 4, 512, 2048)}, GF_FLOAT},
    {"Mul same [4,512,2048]", "Mul", 2, {F(3, 4, 512, 2048), F(3, 4, 512, 2048)},
     GF_FLOAT},
    {"Mul col [4,512,512]x[4,512,1]", "Mul", 2, {F(3, 4, 512, 512), F(3, 4, 512, 1)},
     GF_FLOAT},
    {"Mul row [512]x[4,512,512]", "Mul", 2, {F(1, 512), F(3, 4, 512, 512)}, GF_FLOAT},
    {"Add mask [4,8,512,512]+[4,1,512,512]", "Add", 2,
     {F(4, 4, 8, 512, 512), F(4, 4, 1, 512, 512)}, GF_FLOAT},
    {"IsNaN [4,8,512,512]", "IsNaN", 1, {F(4, 4, 8, 512, 512)}, GF_BOOL},
    {"Where [4,8,512,512] c,0,x", "Where", 3,
     {B(4, 4, 8, 512, 512), S(0), F(4, 4, 8, 512, 512)}, GF_FLOAT},
    {"Where [4,1,512,512] c,0,-inf", "Where", 3, {B(4, 4, 1, 512, 512), S(0), S(-INFINITY)},
     GF_FLOAT},
};

/* Deterministic inputs: floats spread over [-8, 8] (a few NaN when asked),
 * bools about half set. */
static void fill(void *p, enum gf_dtype t, size_t n, float val, int scalar)
{
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        if (t == GF_BOOL)
            ((uint8_t *)p)[i] = (uint8_t)(s >> 31);
        else
            ((float *)p)[i] = scalar ? val : ((float)(s >> 8) / 16777216.0f - 0.5f) * 16.0f;
    }
}

static double run_case(const struct bcase *b, int threads, double *elems, double *bytes)
{
    struct gf_model *m = gf_model_new(8, "bench");
    gf_model_set_opset(m, "", 17);
    struct gf_value *ins[3], *outs[1];
    for (int i = 0; i < b->n_in; i++)
        ins[i] = gf_graph_new_value(m->graph, NULL, "in");
    outs[0] = gf_graph_new_value(m->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(m->graph, b->op, "", "n0", (size_t)b->n_in, ins, 1,
                                          outs);
    if (strstr(b->op, "Softmax"))
        gf_node_set_attr_int(n, "axis", -1);
    struct gf_tview in[3], out;
    memset(in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    int orank = 0;
    int64_t od[4] = {1, 1, 1, 1};
    double moved = 0;
    for (int i = 0; i < b->n_in; i++) {
        const struct bin *x = &b->in[i];
        in[i].dtype = x->dtype;
        gf_tview_set_shape(&in[i], x->rank, x->dims);
        size_t nb = gf_tview_bytes(&in[i]);
        in[i].data = malloc(nb ? nb : 1);
        fill(in[i].data, x->dtype, in[i].nelem, x->val, x->rank == 0);
        moved += (double)nb;
        if (x->rank > orank) { /* ranks align on the right */
            for (int k = 0; k < 4; k++)
                od[k] = 1;
            orank = x->rank;
        }
    }
    for (int i = 0; i < b->n_in; i++)
        for (int k = 0; k < b->in[i].rank; k++) {
            int64_t d = b->in[i].dims[b->in[i].rank - 1 - k];
            if (d > od[orank - 1 - k] || od[orank - 1 - k] == 1)
                od[orank - 1 - k] = d;
        }
    out.dtype = b->out_dtype;
    gf_tview_set_shape(&out, orank, od);
    size_t ob = gf_tview_bytes(&out);
    out.data = malloc(ob);
    memset(out.data, 0, ob);
    *elems = (double)out.nelem;
    *bytes = moved + (double)ob;
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = (size_t)b->n_in, .out = &out,
                               .n_out = 1, .n_threads = threads,
                               .backend = gf_backend_get("cpu")};
    const struct gf_kernel *k = gf_kernel_find(a.backend, n, in, (size_t)b->n_in);
    void *ws = k && k->workspace ? malloc(k->workspace(&a)) : NULL;
    a.workspace = ws;
    double best = -1;
    if (k && k->run(&a) == GF_OK) {
        for (int r = 0; r < REPS; r++) {
            double t0 = now_s();
            k->run(&a);
            double t = now_s() - t0;
            if (best < 0 || t < best)
                best = t;
        }
    } else {
        fprintf(stderr, "%s: %s\n", b->name, k ? gf_last_error() : "no kernel");
    }
    free(ws);
    for (int i = 0; i < b->n_in; i++)
        free(in[i].data);
    free(out.data);
    gf_model_free(m);
    return best;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 2 ? argv[2] : NULL;
    printf("%-38s %8s %9s %8s %8s %9s %8s %8s\n", "case", "Melem", "1T ms", "ns/el",
           "GB/s", "2T ms", "ns/el", "GB/s");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bcase *b = &cases[i];
        if (filter && !strstr(b->name, filter))
            continue;
        double el, by;
        clk = CLOCK_THREAD_CPUTIME_ID;
        double t1 = run_case(b, 1, &el, &by);
        clk = CLOCK_MONOTONIC;
        double t2 = run_case(b, 2, &el, &by);
        printf("%-38s %8.2f %9.3f %8.3f %8.2f %9.3f %8.3f %8.2f\n", b->name, el / 1e6, t1 * 1e3,
               t1 * 1e9 / el, by / t1 / 1e9, t2 * 1e3, t2 * 1e9 / el, by / t2 / 1e9);
    }
    return 0;
}
