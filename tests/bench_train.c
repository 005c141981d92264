/* Training steps, fused against unfused, in the same run on the same data.
 *
 * 1. The bundled Llama-style model (models/llama_tiny, both exports) at
 *    batch 8, sequence 256, AdamW, 2 threads on the CPU backend.  Two
 *    trainers (gf_trainer_opts.fuse true and false) read the same random
 *    token file with the same seed, so every step sees the same batch in
 *    both; their steps alternate (after 2 warm-up steps each, which plan
 *    the sessions) and the medians of STEPS step times are reported with
 *    their ratio.  The losses of the two runs are compared step by step as
 *    well (the largest relative difference is printed; it must stay within
 *    1e-5).
 * 2. The lm head and loss of a large vocabulary alone, forward and
 *    backward (tests/fused_graphs.h's fg_lce, H and W made parameters):
 *    MatMul + SoftmaxCrossEntropyLoss against LinearCrossEntropy, which
 *    computes its gradients chunk by chunk in the forward: medians of REPS
 *    runs and the peak memory (planned block + workspace).
 * Usage: bench_train [outdir] (the token file is written there). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "fused_graphs.h"
#include "gf_passes.h"

#define THREADS 2
#define WARMUP 2
#define STEPS 9
#define BATCH 8
#define SEQ 256
#define VOCAB 64
#define N_TOKENS (1 << 17)
#define REPS 3
#define LCE_N 1024  /* positions */
#define LCE_K 256   /* hidden size */
#define LCE_V 32000 /* vocabulary */

/* N_TOKENS random uint16 ids below VOCAB (splitmix-like LCG, fixed seed). */
static int write_tokens(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_TOKENS; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint16_t t = (uint16_t)((s >> 33) % VOCAB);
        fwrite(&t, sizeof(t), 1, f);
    }
    return fclose(f);
}

struct run {
    struct gf_trainer *t;
    struct gf_data *d;
    double ms[STEPS], loss[WARMUP + STEPS];
};

static int open_run(struct run *r, const struct gf_model *m, const char *tokens, bool fuse,
                    const char *freeze)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.exec.backend = "cpu";
    o.exec.n_threads = THREADS;
    o.steps = WARMUP + STEPS;
    o.fuse = fuse;
    o.freeze = freeze;
    struct gf_token_opts to = {.batch = BATCH, .seq = SEQ, .seed = 1};
    if (gf_trainer_new(m, &o, &r->t) != GF_OK ||
        gf_data_open_tokens(r->t, tokens, &to, &r->d) != GF_OK) {
        fprintf(stderr, "bench_train: %s\n", gf_last_error());
        return -1;
    }
    if (fuse && gf_trainer_fuse_note(r->t)) {
        fprintf(stderr, "bench_train: not fused: %s\n", gf_trainer_fuse_note(r->t));
        return -1;
    }
    return 0;
}

static int step(struct run *r, int i)
{
    struct gf_train_stats st;
    if (gf_trainer_step(r->t, r->d, &st) != GF_OK) {
        fprintf(stderr, "bench_train: step %d: %s\n", i, gf_last_error());
        return -1;
    }
    r->loss[i] = st.loss;
    if (i >= WARMUP)
        r->ms[i - WARMUP] = st.ms;
    return 0;
}

static void close_run(struct run *r)
{
    gf_data_free(r->d);
    gf_trainer_free(r->t);
}

/* One model: both trainers, alternating steps; prints a table row. */
static int bench_model(const char *name, const char *path, const char *freeze,
                       const char *tokens)
{
    struct gf_model *m;
    if (gf_model_load(path, NULL, &m) != GF_OK) {
        fprintf(stderr, "bench_train: %s\n", gf_last_error());
        return -1;
    }
    struct run u = {0}, f = {0};
    int rc = open_run(&u, m, tokens, false, freeze);
    if (rc == 0)
        rc = open_run(&f, m, tokens, true, freeze);
    for (int i = 0; rc == 0 && i < WARMUP + STEPS; i++)
        rc = step(&u, i) || step(&f, i);
    if (rc == 0) {
        double worst = 0;
        for (int i = 0; i < WARMUP + STEPS; i++)
            worst = fmax(worst, fabs(f.loss[i] - u.loss[i]) / fabs(u.loss[i]));
        double mu = bench_median(u.ms, STEPS), mf = bench_median(f.ms, STEPS);
        printf("| %-18s | %9.1f | %9.1f | %6.2fx | %.1e |\n", name, mu, mf, mu / mf, worst);
        if (worst > 1e-5) {
            fprintf(stderr, "bench_train: %s: fused and unfused losses differ by %.2e\n", name,
                    worst);
            rc = -1;
        }
    }
    close_run(&u);
    close_run(&f);
    gf_model_free(m);
    return rc;
}

/* ---- the lm head and loss alone ------------------------------------------------------ */

/* fg_lce with H and W as parameters (random initializers), differentiated. */
static struct gf_model *lce_training(bool fused)
{
    struct gf_model *m = fg_lce(fused, LCE_N, LCE_K, LCE_V, NULL);
    static const char *const params[2] = {"H", "W"};
    struct gf_autodiff_opts ao = {.n_params = 2, .params = params};
    uint64_t rng = 7;
    for (int i = 0; m && i < 2; i++) {
        struct gf_value *v = gf_graph_find(m->graph, params[i]);
        int64_t dims[2] = {i ? LCE_K : LCE_N, i ? LCE_V : LCE_K};
        struct gf_tensor *t = fg_random(m, GF_FLOAT, 2, dims, -0.5, 0.5, &rng);
        if (!t || gf_value_set_initializer(v, t) != GF_OK)
            return gf_model_free(m), NULL;
    }
    if (m && gf_pass_autodiff(m, &ao, NULL) != GF_OK)
        return gf_model_free(m), NULL;
    return m;
}

struct lce_run {
    struct gf_model *m;
    struct gf_session *s;
    double ms[REPS];
    size_t peak;
};

static int lce_open(struct lce_run *r, bool fused)
{
    struct gf_exec_opts eo = {.backend = "cpu", .n_threads = THREADS};
    if (!(r->m = lce_training(fused)) || gf_session_new(r->m, &eo, &r->s) != GF_OK) {
        fprintf(stderr, "bench_train: %s\n", gf_last_error());
        return -1;
    }
    return 0;
}

static int lce_run_once(struct lce_run *r, struct gf_tensor *labels, int i)
{
    struct gf_tensor **out;
    size_t n;
    double t0 = bench_now_ms();
    if (gf_session_run(r->s, 1, &labels, &out, &n) != GF_OK) {
        fprintf(stderr, "bench_train: %s\n", gf_last_error());
        return -1;
    }
    if (i >= 0)
        r->ms[i] = bench_now_ms() - t0;
    struct gf_session_stats st;
    gf_session_get_stats(r->s, &st);
    r->peak = st.activation_bytes + st.workspace_bytes;
    return 0;
}

static int bench_lce(void)
{
    struct lce_run u = {0}, f = {0};
    struct gf_model *lm = gf_model_new(8, "labels");
    int64_t n = LCE_N;
    struct gf_tensor *labels = lm ? gf_tensor_new(lm, "T", GF_INT64, 1, &n, NULL) : NULL;
    int rc = labels ? 0 : -1;
    for (int64_t i = 0; labels && i < n; i++)
        ((int64_t *)labels->data)[i] = (i * 7919) % LCE_V;
    if (rc == 0)
        rc = lce_open(&u, false) || lce_open(&f, true);
    for (int i = -1; rc == 0 && i < REPS; i++) /* -1: the warm-up run, which plans */
        rc = lce_run_once(&u, labels, i) || lce_run_once(&f, labels, i);
    if (rc == 0) {
        double mu = bench_median(u.ms, REPS), mf = bench_median(f.ms, REPS);
        printf("\nlm head + loss, forward and backward: H [%d,%d] x W [%d,%d] (medians of %d)\n\n",
               LCE_N, LCE_K, LCE_K, LCE_V, REPS);
        printf("| graph | ms | peak bytes |\n| --- | ---: | ---: |\n");
        printf("| MatMul + SoftmaxCrossEntropyLoss | %.1f | %zu |\n", mu, u.peak);
        printf("| LinearCrossEntropy | %.1f | %zu |\n", mf, f.peak);
        printf("speedup %.2fx, memory %.3f of the unfused\n", mu / mf,
               (double)f.peak / (double)u.peak);
    }
    gf_session_free(u.s);
    gf_session_free(f.s);
    gf_model_free(u.m);
    gf_model_free(f.m);
    gf_model_free(lm);
    return rc;
}

int main(int argc, char **argv)
{
    char tokens[4096];
    snprintf(tokens, sizeof(tokens), "%s/train_tokens.u16", argc > 1 ? argv[1] : ".");
    if (write_tokens(tokens) != 0) {
        perror(tokens);
        return 1;
    }
    printf("training step, batch %d x seq %d, AdamW, %d threads (medians of %d steps)\n\n",
           BATCH, SEQ, THREADS, STEPS);
    printf("| %-18s | %9s | %9s | %7s | %7s |\n", "model", "unfused ms", "fused ms", "speedup",
           "loss diff");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    int rc = bench_model("llama_tiny dynamo", "models/llama_tiny/dynamo/model.onnx", "^expand$",
                         tokens);
    rc |= bench_model("llama_tiny legacy", "models/llama_tiny/legacy/model.onnx", NULL, tokens);
    remove(tokens);
    rc |= bench_lce();
    return rc ? 1 : 0;
}
