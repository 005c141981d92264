/* Every fused op the optimizer writes against the unfused subgraph it
 * replaces, at the shapes of issue 18's models (hidden 512, 8 heads of 64,
 * MLP 2048, vocabulary 32000; batch x seq 1 x 128 and 4 x 512), fp32 on the
 * CPU.  Each case builds the unfused ONNX subgraph, fuses a copy with
 * gf_pass_fuse (the default patterns plus "attention") and checks that the
 * expected op appeared; both sessions get the same random inputs, and after
 * a warm-up run each (which plans) rounds alternate unfused and fused.  The
 * table gives the medians of the node time (the session profile's total)
 * and the median of the per-round ratios fused / unfused; a ratio above
 * 1.05 is flagged SLOWER.
 *
 * Usage: bench_fused_models [outdir] [threads (2)] [case-name filter] [rounds (5)]
 * (outdir unused, for `make bench`).  Not part of `make test`.  The training
 * cases make H and W parameters and differentiate the graph (fused first).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "fused_graphs.h"
#include "gf_passes.h"

#define HID 512
#define HEADS 8
#define HDIM 64
#define FFN 2048
#define VOCAB 32000

static const int64_t ignore = -100;

/* ---- subgraphs the fused ops do not share with tests/fused_graphs.h ---------------- */

static struct gf_value *transpose2(struct fg *b, struct gf_value *w)
{
    struct gf_value *t = FG(b, "Transpose", w);
    fg_ints(b, t, "perm", 2, (const int64_t[]){1, 0});
    return t;
}

/* Y = act(X @ W + Bias) (+ Res).  X [B, S, k], W [k, n], Bias [n], Res [B, S, n]. */
static struct gf_model *mm_bias(int64_t bsz, int64_t seq, int64_t k, int64_t n, const char *act,
                                bool res)
{
    struct fg b = fg_begin("linear");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, 3, (const int64_t[]){bsz, seq, k});
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 2, (const int64_t[]){k, n});
    struct gf_value *bias = fg_input(&b, "Bias", GF_FLOAT, 1, &n);
    struct gf_value *y = FG(&b, "Add", FG(&b, "MatMul", x, w), bias);
    if (strcmp(act, "gelu") == 0)
        y = fg_gelu_chain(&b, y, false);
    else if (strcmp(act, "gelu_tanh") == 0)
        y = fg_gelu_chain(&b, y, true);
    else if (strcmp(act, "relu") == 0)
        y = FG(&b, "Relu", y);
    if (res)
        y = FG(&b, "Add", y, fg_input(&b, "Res", GF_FLOAT, 3, (const int64_t[]){bsz, seq, n}));
    fg_output(&b, y);
    return fg_done(&b);
}

/* GPT-2 dynamo's tied LM head: LayerNorm, Reshape to rows, then
 * MatMul(x, Transpose(W [V, k])).  X [B, S, k], W [V, k]. */
static struct gf_model *lm_head(int64_t bsz, int64_t seq, int64_t k, int64_t v)
{
    struct fg b = fg_begin("lm_head");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, 3, (const int64_t[]){bsz, seq, k});
    struct gf_value *g = fg_input(&b, "G", GF_FLOAT, 1, &k);
    struct gf_value *bb = fg_input(&b, "Beta", GF_FLOAT, 1, &k);
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 2, (const int64_t[]){v, k});
    struct gf_value *h = FG(&b, "LayerNormalization", x, g, bb);
    fg_float(&b, h, "epsilon", 1e-5f);
    h = FG(&b, "Reshape", h, fg_i64s(&b, 2, (const int64_t[]){-1, k}));
    fg_output(&b, FG(&b, "MatMul", h, transpose2(&b, w)));
    return fg_done(&b);
}

/* Relu(Gemm(X, W, C, transB)).  X [R, k], W [n, k], C [n]. */
static struct gf_model *gemm_tb(int64_t rows, int64_t k, int64_t n)
{
    struct fg b = fg_begin("gemm");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, 2, (const int64_t[]){rows, k});
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 2, (const int64_t[]){n, k});
    struct gf_value *c = fg_input(&b, "C", GF_FLOAT, 1, &n);
    struct gf_value *y = FG(&b, "Gemm", x, w, c);
    fg_int(&b, y, "transB", 1);
    fg_output(&b, FG(&b, "Relu", y));
    return fg_done(&b);
}

/* Mean cross-entropy of H @ Transpose(W).  H [R, k], W [V, k], T [R]. */
static struct gf_model *lce_tb(int64_t rows, int64_t k, int64_t v)
{
    struct fg b = fg_begin("lce_tb");
    struct gf_value *h = fg_input(&b, "H", GF_FLOAT, 2, (const int64_t[]){rows, k});
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 2, (const int64_t[]){v, k});
    struct gf_value *t = fg_input(&b, "T", GF_INT64, 1, &rows);
    struct gf_value *y = FG(&b, "SoftmaxCrossEntropyLoss", FG(&b, "MatMul", h, transpose2(&b, w)),
                            t);
    fg_str(&b, y, "reduction", "mean");
    fg_int(&b, y, "ignore_index", ignore);
    fg_output(&b, y);
    return fg_done(&b);
}

/* softmax(Q K^T / 8 + Mask) V.  Q, K, V [B, H, S, D], Mask [B, 1, S, S]. */
static struct gf_model *attention(int64_t bsz, int64_t seq)
{
    struct fg b = fg_begin("attention");
    const int64_t qd[4] = {bsz, HEADS, seq, HDIM};
    struct gf_value *q = fg_input(&b, "Q", GF_FLOAT, 4, qd);
    struct gf_value *k = fg_input(&b, "K", GF_FLOAT, 4, qd);
    struct gf_value *v = fg_input(&b, "V", GF_FLOAT, 4, qd);
    struct gf_value *mask = fg_input(&b, "Mask", GF_FLOAT, 4, (const int64_t[]){bsz, 1, seq, seq});
    struct gf_value *kt = FG(&b, "Transpose", k);
    fg_ints(&b, kt, "perm", 4, (const int64_t[]){0, 1, 3, 2});
    struct gf_value *s = FG(&b, "Mul", FG(&b, "MatMul", q, kt), fg_f32(&b, 0.125f));
    struct gf_value *p = FG(&b, "Softmax", FG(&b, "Add", s, mask));
    fg_int(&b, p, "axis", -1);
    fg_output(&b, FG(&b, "MatMul", p, v));
    return fg_done(&b);
}

/* ---- the cases -------------------------------------------------------------------- */

enum kind {
    K_RMS, K_ADD_RMS, K_LN, K_ADD_LN, K_SWIGLU, K_GEGLU, K_GELU, K_ROPE, K_MME_BIAS,
    K_MME_GELU, K_MME_RES, K_MME_TB, K_GEMM_TB, K_SCE, K_SCE_SHIFT, K_LCE, K_LCE_TB, K_ATTN,
    K_LCE_TRAIN, K_LCE_TB_TRAIN, N_KINDS
};

struct kcase {
    const char *name, *op; /* op: the graphfuse op the fuser must write */
    double lo, hi;         /* float inputs */
    int64_t classes;       /* labels in [0, classes), every 50th ignore_index */
};

static const struct kcase kinds[N_KINDS] = {
    [K_RMS] = {"RMSNorm", "RMSNorm", -2, 2, 0},
    [K_ADD_RMS] = {"AddRMSNorm", "AddRMSNorm", -2, 2, 0},
    [K_LN] = {"LayerNorm", "LayerNorm", -2, 2, 0},
    [K_ADD_LN] = {"AddLayerNorm", "AddLayerNorm", -2, 2, 0},
    [K_SWIGLU] = {"SwiGLU", "SwiGLU", -6, 6, 0},
    [K_GEGLU] = {"GeGLU", "GeGLU", -6, 6, 0},
    [K_GELU] = {"Gelu", "Gelu", -6, 6, 0},
    [K_ROPE] = {"RoPE", "RoPE", -2, 2, 0},
    [K_MME_BIAS] = {"MatMulEpilogue bias (qkv)", "MatMulEpilogue", -1, 1, 0},
    [K_MME_GELU] = {"MatMulEpilogue bias+gelu (mlp up)", "MatMulEpilogue", -1, 1, 0},
    [K_MME_RES] = {"MatMulEpilogue bias+residual (mlp down)", "MatMulEpilogue", -1, 1, 0},
    [K_MME_TB] = {"MatMulEpilogue transB (lm head)", "MatMulEpilogue", -1, 1, 0},
    [K_GEMM_TB] = {"Gemm transB+relu", "MatMulEpilogue", -1, 1, 0},
    [K_SCE] = {"SoftmaxCrossEntropy", "SoftmaxCrossEntropy", -4, 4, VOCAB},
    [K_SCE_SHIFT] = {"SoftmaxCrossEntropy shift", "SoftmaxCrossEntropy", -4, 4, VOCAB},
    [K_LCE] = {"LinearCrossEntropy", "LinearCrossEntropy", -1, 1, VOCAB},
    [K_LCE_TB] = {"LinearCrossEntropy transB", "LinearCrossEntropy", -1, 1, VOCAB},
    [K_ATTN] = {"Attention", "Attention", -1, 1, 0},
    [K_LCE_TRAIN] = {"LinearCrossEntropy fwd+bwd", "LinearCrossEntropy", -1, 1, VOCAB},
    [K_LCE_TB_TRAIN] = {"LinearCrossEntropy transB fwd+bwd", "LinearCrossEntropy", -1, 1, VOCAB},
};

/* The unfused subgraph of kind k at batch x seq. */
static struct gf_model *build(enum kind k, int64_t bsz, int64_t seq)
{
    const int64_t hid[3] = {bsz, seq, HID}, ffn[3] = {bsz, seq, FFN}, rows = bsz * seq;
    switch (k) {
    case K_RMS: return fg_rmsnorm(false, 3, hid, 1e-6f, true);
    case K_ADD_RMS: return fg_add_rmsnorm(false, 3, hid, 1e-6f);
    case K_LN: return fg_layernorm(false, 3, hid, 1e-5f);
    case K_ADD_LN: return fg_add_layernorm(false, 3, hid, 1e-5f);
    case K_SWIGLU: return fg_swiglu(false, 3, ffn);
    case K_GEGLU: return fg_geglu(false, 3, ffn, false);
    case K_GELU: return fg_gelu(false, 3, ffn, false);
    case K_ROPE: return fg_rope(false, bsz, HEADS, seq, HDIM);
    case K_MME_BIAS: return mm_bias(bsz, seq, HID, 3 * HID, "", false);
    case K_MME_GELU: return mm_bias(bsz, seq, HID, FFN, "gelu", false);
    case K_MME_RES: return mm_bias(bsz, seq, FFN, HID, "", true);
    case K_MME_TB: return lm_head(bsz, seq, HID, VOCAB);
    case K_GEMM_TB: return gemm_tb(rows, HID, FFN);
    case K_SCE: return fg_sce(false, rows, VOCAB, &ignore);
    case K_SCE_SHIFT: return fg_sce_shift(false, bsz, seq, VOCAB, &ignore);
    case K_LCE:
    case K_LCE_TRAIN: return fg_lce(false, rows, HID, VOCAB, &ignore);
    case K_LCE_TB:
    case K_LCE_TB_TRAIN: return lce_tb(rows, HID, VOCAB);
    default: return attention(bsz, seq);
    }
}

/* The model fused; false unless the expected op is in it. */
static bool fuse(struct gf_model *m, const char *op)
{
    static const char *const on[] = {"attention"};
    struct gf_fuse_opts fo = {.target = GF_TARGET_GRAPHFUSE, .enabled = on, .n_enabled = 1};
    if (gf_pass_fuse(m, &fo, NULL) != GF_OK)
        return false;
    for (const struct gf_node *n = m->graph->first; n; n = n->next)
        if (strcmp(n->op_type, op) == 0)
            return true;
    return false;
}

/* Training cases: H and W become parameters (the same random initializers
 * in both models); after fusing, the graph is differentiated for them. */
static bool make_params(struct gf_model *m)
{
    static const char *const names[2] = {"H", "W"};
    uint64_t rng = 7;
    for (int i = 0; i < 2; i++) {
        struct gf_value *v = gf_graph_find(m->graph, names[i]);
        struct gf_tensor *t = v ? fg_random(m, GF_FLOAT, v->type.rank,
                                            (const int64_t[]){v->type.dims[0].value,
                                                              v->type.dims[1].value},
                                            -0.5, 0.5, &rng)
                                : NULL;
        if (!t || gf_value_set_initializer(v, t) != GF_OK)
            return false;
    }
    return true;
}

static bool differentiate(struct gf_model *m)
{
    static const char *const names[2] = {"H", "W"};
    struct gf_autodiff_opts ao = {.n_params = 2, .params = names};
    return gf_pass_autodiff(m, &ao, NULL) == GF_OK;
}

static bool make_inputs(struct gf_session *s, const struct kcase *kc, struct gf_model *holder,
                        struct gf_tensor **in, size_t *n)
{
    static uint64_t state = 42;
    *n = gf_session_input_count(s);
    for (size_t i = 0; i < *n; i++) {
        const struct gf_value *v = gf_session_input(s, i);
        const struct gf_type *t = &v->type;
        int64_t dims[8];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->dims[d].value;
        bool lab = t->dtype == GF_INT64, mask = strcmp(v->name, "Mask") == 0;
        in[i] = fg_random(holder, t->dtype, t->rank, dims, lab ? 0 : kc->lo,
                          lab ? (double)kc->classes : kc->hi, &state);
        if (!in[i])
            return false;
        for (size_t e = 0; lab && e < in[i]->nelem; e += 50)
            ((int64_t *)in[i]->data)[e] = ignore;
        if (mask) { /* causal: -inf above the diagonal */
            int64_t sq = dims[3];
            float *x = in[i]->data;
            for (size_t e = 0; e < in[i]->nelem; e++)
                x[e] = (int64_t)(e % (size_t)sq) > (int64_t)(e / (size_t)sq % (size_t)sq)
                           ? -INFINITY : 0.0f;
        }
    }
    return true;
}

/* Node time of the last run (the profile's total), NAN if unreadable. */
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

static bool run_once(struct gf_session *s, struct gf_tensor **in, size_t n, double *ms,
                     struct gf_tensor ***out, size_t *n_out)
{
    if (gf_session_run(s, n, in, out, n_out) != GF_OK) {
        fprintf(stderr, "bench_fused_models: %s\n", gf_last_error());
        return false;
    }
    *ms = kernels_ms(s);
    return true;
}

#define MAX_ROUNDS 64

struct result {
    double ms[2], ratio, diff;
};

static bool bench(enum kind k, int64_t bsz, int64_t seq, int threads, int rounds,
                  struct result *r)
{
    struct gf_model *m[2] = {build(k, bsz, seq), build(k, bsz, seq)};
    struct gf_model *holder = gf_model_new(8, "in");
    struct gf_session *s[2] = {NULL, NULL};
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = threads, .profile = true};
    struct gf_tensor *in[8], **out[2];
    size_t n = 0, n_out[2];
    bool ok = m[0] && m[1] && holder, train = k == K_LCE_TRAIN || k == K_LCE_TB_TRAIN;
    if (ok && train)
        ok = make_params(m[0]) && make_params(m[1]);
    if (ok && !fuse(m[1], kinds[k].op)) {
        fprintf(stderr, "bench_fused_models: %s: the fuser wrote no %s\n", kinds[k].name,
                kinds[k].op);
        ok = false;
    }
    if (ok && train && !(differentiate(m[0]) && differentiate(m[1]))) {
        fprintf(stderr, "bench_fused_models: %s: %s\n", kinds[k].name, gf_last_error());
        ok = false;
    }
    ok = ok && gf_session_new(m[0], &o, &s[0]) == GF_OK &&
         gf_session_new(m[1], &o, &s[1]) == GF_OK &&
         make_inputs(s[0], &kinds[k], holder, in, &n);
    double t[2][MAX_ROUNDS], ratio[MAX_ROUNDS], d;
    for (int i = 0; ok && i < 2; i++) /* warm-up: plans, first touch */
        ok = run_once(s[i], in, n, &d, &out[i], &n_out[i]);
    r->diff = 0;
    for (size_t i = 0; ok && i < n_out[0] && i < n_out[1]; i++) {
        double worst;
        gf_tensor_allclose(out[1][i], out[0][i], 0, 0, &worst);
        r->diff = worst > r->diff ? worst : r->diff;
    }
    for (int rd = 0; ok && rd < rounds; rd++) {
        for (int j = 0; ok && j < 2; j++) { /* alternate which goes first */
            int i = (rd + j) % 2;
            ok = run_once(s[i], in, n, &t[i][rd], &out[i], &n_out[i]);
        }
        ratio[rd] = t[1][rd] / t[0][rd];
    }
    if (ok) {
        r->ms[0] = bench_median(t[0], rounds);
        r->ms[1] = bench_median(t[1], rounds);
        r->ratio = bench_median(ratio, rounds);
    }
    gf_session_free(s[0]);
    gf_session_free(s[1]);
    gf_model_free(m[0]);
    gf_model_free(m[1]);
    gf_model_free(holder);
    return ok;
}

int main(int argc, char **argv)
{
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    const char *only = argc > 3 && argv[3][0] ? argv[3] : NULL;
    int rounds = argc > 4 ? atoi(argv[4]) : 5;
    rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    static const int64_t shapes[][2] = {{1, 128}, {4, 512}};
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = NAN;
        fclose(la);
    }
    printf("Fused ops against their unfused subgraphs (fused by gf_pass_fuse), fp32, CPU, "
           "%d thread%s, %d interleaved rounds, load average %.2f %.2f %.2f\n", threads,
           threads == 1 ? "" : "s", rounds, load[0], load[1], load[2]);
    printf("| op | batch x seq | unfused ms | fused ms | fused / unfused | max abs diff | |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | --- |\n");
    int slower = 0, failed = 0;
    for (int k = 0; k < N_KINDS; k++) {
        if (only && !strstr(kinds[k].name, only))
            continue;
        for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
            struct result r;
            if (!bench((enum kind)k, shapes[sh][0], shapes[sh][1], threads, rounds, &r)) {
                printf("| %s | %lldx%lld | | | | | FAILED |\n", kinds[k].name,
                       (long long)shapes[sh][0], (long long)shapes[sh][1]);
                failed++;
                continue;
            }
            bool slow = r.ratio > 1.05;
            slower += slow;
            printf("| %s | %lldx%lld | %.2f | %.2f | %.2f | %.2g | %s |\n", kinds[k].name,
                   (long long)shapes[sh][0], (long long)shapes[sh][1], r.ms[0], r.ms[1],
                   r.ratio, r.diff, slow ? "SLOWER" : "");
            fflush(stdout);
        }
    }
    printf("%d case%s slower fused than unfused (ratio > 1.05), %d failed\n", slower,
           slower == 1 ? "" : "s", failed);
    return failed ? 1 : 0;
}
