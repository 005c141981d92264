/* Fused ops against the ONNX subgraphs they replace, on the same executor
 * in the same run: for each op the unfused and the fused graph of
 * tests/fused_graphs.h get the same random inputs and 2 threads; after a
 * warm-up run (which plans), runs alternate between the two and medians
 * are reported: "ms" is the graph's execution (the session profile's total
 * over its nodes), "run ms" all of gf_session_run, which also copies the
 * outputs out into a new tensor each run.  Peak bytes are the planned
 * activation block plus the workspace (gf_session_get_stats).  The CPU
 * backend unless $GRAPHFUSE_BACKEND names another.
 * Usage: bench_fused [outdir] (outdir unused) [op-name-filter]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "fused_graphs.h"

#define THREADS 2
#define REPS 5
#define BIG 4096

enum op {
    RMS, ADD_RMS, LN, ADD_LN, SWIGLU, GEGLU, GELU, SILU, ROPE, MME, SCE, SCE_SHIFT, LCE, JSD,
    N_OPS
};

struct spec {
    const char *name, *shape;
    double lo, hi;   /* float inputs */
    int64_t classes; /* labels in [0, classes), every 50th ignore_index */
    bool target2x;   /* README target: at least 2x faster */
};

static const int64_t ignore = -100;

static const struct spec specs[N_OPS] = {
    [RMS] = {"RMSNorm", "[4096,4096]", -2, 2, 0, true},
    [ADD_RMS] = {"AddRMSNorm", "[4096,4096]", -2, 2, 0, false},
    [LN] = {"LayerNorm", "[4096,4096]", -2, 3, 0, true},
    [ADD_LN] = {"AddLayerNorm", "[4096,4096]", -2, 3, 0, false},
    [SWIGLU] = {"SwiGLU", "[4096,4096]", -6, 6, 0, true},
    [GEGLU] = {"GeGLU", "[4096,4096]", -6, 6, 0, false},
    [GELU] = {"Gelu", "[4096,4096]", -6, 6, 0, false},
    [SILU] = {"SiLU", "[4096,4096]", -6, 6, 0, false},
    [ROPE] = {"RoPE", "[1,32,4096,128]", -2, 2, 0, false},
    [MME] = {"MatMulEpilogue gelu", "1024x1024x1024", -1, 1, 0, false},
    [SCE] = {"SoftmaxCrossEntropy", "[4096,32000]", -4, 4, 32000, true},
    [SCE_SHIFT] = {"SoftmaxCrossEntropy shift=1", "[4,1024,32000]", -4, 4, 32000, true},
    [LCE] = {"LinearCrossEntropy", "[4096,1024]x[1024,32000]", -1, 1, 32000, false},
    [JSD] = {"JSD beta=0.5", "[4096,32000]", -4, 4, 2, false},
};

static struct gf_model *build(enum op op, bool fused)
{
    static const int64_t sq[2] = {BIG, BIG};
    switch (op) {
    case RMS: return fg_rmsnorm(fused, 2, sq, 1e-6f, true);
    case ADD_RMS: return fg_add_rmsnorm(fused, 2, sq, 1e-6f);
    case LN: return fg_layernorm(fused, 2, sq, 1e-5f);
    case ADD_LN: return fg_add_layernorm(fused, 2, sq, 1e-5f);
    case SWIGLU: return fg_swiglu(fused, 2, sq);
    case GEGLU: return fg_geglu(fused, 2, sq, false);
    case GELU: return fg_gelu(fused, 2, sq, false);
    case SILU: return fg_silu(fused, 2, sq);
    case ROPE: return fg_rope(fused, 1, 32, BIG, 128);
    case MME: return fg_matmul_epilogue(fused, 1024, 1024, 1024, "gelu");
    case SCE: return fg_sce(fused, BIG, 32000, &ignore);
    case SCE_SHIFT: return fg_sce_shift(fused, 4, 1024, 32000, &ignore);
    case LCE: return fg_lce(fused, BIG, 1024, 32000, &ignore);
    default: return fg_jsd(fused, BIG, 32000, 0.5f, true, ignore);
    }
}

/* Inputs for the session's graph inputs, in holder's arena. */
static bool make_inputs(struct gf_session *s, const struct spec *sp, bool jsd,
                        struct gf_model *holder, struct gf_tensor **in, size_t *n)
{
    static uint64_t state = 42;
    *n = gf_session_input_count(s);
    for (size_t i = 0; i < *n; i++) {
        const struct gf_type *t = &gf_session_input(s, i)->type;
        int64_t dims[8];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->dims[d].value;
        bool lab = t->dtype == GF_INT64;
        in[i] = fg_random(holder, t->dtype, t->rank, dims, lab ? 0 : sp->lo,
                          lab ? (double)sp->classes : sp->hi, &state);
        if (!in[i])
            return false;
        for (size_t e = 0; lab && e < in[i]->nelem; e += 50)
            ((int64_t *)in[i]->data)[e] = ignore;
        if (jsd && !lab)
            fg_log_softmax_rows(in[i]);
    }
    return true;
}

/* Time of the node executions in the last run, from the profile text
 * ("profile: N nodes (...), T ms"); NAN if it cannot be read. */
static double kernels_ms(const struct gf_session *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NAN;
    gf_session_print_profile(s, f);
    fclose(f);
    const char *p = buf ? strstr(buf, "), ") : NULL; /* "profile: ... views), T ms" */
    double ms = p ? strtod(p + 3, NULL) : NAN;
    free(buf);
    return ms;
}

struct result {
    double run[2], kern[2]; /* medians, [0] unfused, [1] fused */
    size_t peak[2];
    double diff;            /* largest |fused - unfused| over the outputs */
};

static bool run_once(struct gf_session *s, struct gf_tensor **in, size_t n, double *run_ms,
                     double *kern_ms, struct gf_tensor ***out, size_t *n_out)
{
    double t = bench_now_ms();
    if (gf_session_run(s, n, in, out, n_out) != GF_OK) {
        fprintf(stderr, "bench_fused: %s\n", gf_last_error());
        return false;
    }
    *run_ms = bench_now_ms() - t;
    *kern_ms = kernels_ms(s);
    return true;
}

static bool bench_op(enum op op, struct result *r)
{
    struct gf_model *m[2] = {build(op, false), build(op, true)}, *holder = gf_model_new(8, "in");
    struct gf_session *s[2] = {NULL, NULL};
    struct gf_exec_opts o = {.backend = getenv("GRAPHFUSE_BACKEND") ? NULL : "cpu",
                             .n_threads = THREADS, .profile = true};
    struct gf_tensor *in[8];
    size_t n = 0;
    bool ok = m[0] && m[1] && holder && gf_session_new(m[0], &o, &s[0]) == GF_OK &&
              gf_session_new(m[1], &o, &s[1]) == GF_OK &&
              make_inputs(s[1], &specs[op], op == JSD, holder, in, &n);
    double t_run[2][REPS], t_kern[2][REPS], d;
    struct gf_tensor **out;
    size_t n_out;
    r->diff = 0;
    for (int k = 0; ok && k < 2; k++) { /* warm-up: plans, first touch of the block */
        ok = run_once(s[k], in, n, &d, &d, &out, &n_out);
        struct gf_session_stats st;
        gf_session_get_stats(s[k], &st);
        r->peak[k] = st.activation_bytes + st.workspace_bytes;
    }
    for (int rep = 0; ok && rep < REPS; rep++)
        for (int k = 0; ok && k < 2; k++)
            ok = run_once(s[k], in, n, &t_run[k][rep], &t_kern[k][rep], &out, &n_out);
    if (ok) { /* outputs of the last fused run against a fresh unfused run */
        struct gf_tensor **ou;
        size_t nu;
        ok = gf_session_run(s[0], n, in, &ou, &nu) == GF_OK &&
             gf_session_run(s[1], n, in, &out, &n_out) == GF_OK && nu == n_out;
        for (size_t i = 0; ok && i < n_out; i++) {
            double worst;
            gf_tensor_allclose(out[i], ou[i], 0, 0, &worst);
            r->diff = worst > r->diff ? worst : r->diff;
        }
    }
    for (int k = 0; ok && k < 2; k++) {
        r->run[k] = bench_median(t_run[k], REPS);
        r->kern[k] = bench_median(t_kern[k], REPS);
    }
    gf_session_free(s[0]);
    gf_session_free(s[1]);
    gf_model_free(m[0]);
    gf_model_free(m[1]);
    gf_model_free(holder);
    return ok;
}

static void print_row(enum op op, const struct result *r)
{
    printf("| %s | %s | %.1f | %.1f | %.2fx | %zu | %zu | %.1f | %.1f | %.2g |\n",
           specs[op].name, specs[op].shape, r->kern[0], r->kern[1], r->kern[0] / r->kern[1],
           r->peak[0], r->peak[1], r->run[0], r->run[1], r->diff);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *only = argc > 2 ? argv[2] : NULL;
    printf("Fused ops against their unfused ONNX subgraphs, fp32, %d threads, same executor; "
           "median of %d runs after a warm-up\n", THREADS, REPS);
    printf("| op | shape | unfused ms | fused ms | speedup | unfused peak bytes | "
           "fused peak bytes | unfused run ms | fused run ms | max abs diff |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    bool faster = true, fast2 = true, leaner = true;
    double t0 = bench_now_ms();
    for (int op = 0; op < N_OPS; op++) {
        if (only && !strstr(specs[op].name, only))
            continue;
        struct result r;
        if (!bench_op((enum op)op, &r)) {
            fprintf(stderr, "bench_fused: %s failed\n", specs[op].name);
            return 1;
        }
        print_row((enum op)op, &r);
        faster = faster && r.kern[1] < r.kern[0];
        fast2 = fast2 && (!specs[op].target2x || r.kern[0] >= 2 * r.kern[1]);
        leaner = leaner && r.peak[1] <= r.peak[0];
    }
    printf("fused faster for every op: %s; at least 2x where targeted: %s; "
           "peak memory never higher: %s (%.0f s)\n", faster ? "yes" : "no", fast2 ? "yes" : "no",
           leaner ? "yes" : "no", (bench_now_ms() - t0) / 1e3);
    return 0;
}
