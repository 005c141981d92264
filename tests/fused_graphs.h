/*
 * Small graphs for the fused ops (README "Fused ops"), shared by
 * tests/test_cpu_fused.c and tests/bench_fused.c: each op once as the
 * decomposed ONNX subgraph (opset 17) that the fusion passes replace, and
 * once as the single graphfuse node.  Both forms of a builder take the
 * same graph inputs, in the order its comment gives; constants
 * (epsilon, exponents, Slice bounds ...) are initializers.
 *
 *     struct gf_model *u = fg_rmsnorm(false, 2, DIMS, 1e-6f, true);   // unfused
 *     struct gf_model *f = fg_rmsnorm(true, 2, DIMS, 1e-6f, true);    // fused
 *
 * A builder returns NULL (with gf_last_error() set) when the graph API
 * refuses something.  Also here: random input tensors.
 */
#ifndef GF_FUSED_GRAPHS_H
#define GF_FUSED_GRAPHS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gf_exec.h"
#include "gf_graph.h"
#include "gf_half.h"

/* ---- building --------------------------------------------------------------------- */

struct fg {
    struct gf_model *m;
    bool ok;
    int n_consts;
};

static inline struct fg fg_begin(const char *name)
{
    struct fg b = {gf_model_new(8, name), true, 0};
    b.ok = b.m && gf_model_set_opset(b.m, "", 17) == GF_OK &&
           gf_model_set_opset(b.m, "graphfuse", 1) == GF_OK;
    return b;
}

/* The finished model, or NULL (freed) if a step failed. */
static inline struct gf_model *fg_done(struct fg *b)
{
    if (b->ok && gf_graph_validate(b->m->graph) == GF_OK)
        return b->m;
    gf_model_free(b->m);
    return NULL;
}

/* A graph input of dtype dt and shape dims[rank]. */
static inline struct gf_value *fg_input(struct fg *b, const char *name, enum gf_dtype dt,
                                        int rank, const int64_t *dims)
{
    struct gf_value *v = b->ok ? gf_graph_new_value(b->m->graph, name, NULL) : NULL;
    struct gf_dim d[16];
    for (int i = 0; v && i < rank && i < 16; i++)
        d[i] = (struct gf_dim){dims[i], NULL, NULL};
    if (v) {
        gf_value_set_tensor_type(v, dt, rank, d);
        b->ok = gf_graph_add_input(b->m->graph, v) == GF_OK;
    }
    b->ok = b->ok && v;
    return v;
}

/* A constant (initializer) of dtype dt, shape dims[rank], data copied. */
static inline struct gf_value *fg_const(struct fg *b, enum gf_dtype dt, int rank,
                                        const int64_t *dims, const void *data)
{
    char name[32];
    snprintf(name, sizeof(name), "c%d", b->n_consts++);
    struct gf_tensor *t = b->ok ? gf_tensor_new(b->m, name, dt, rank, dims, data) : NULL;
    struct gf_value *v = t ? gf_graph_add_initializer(b->m->graph, name, t) : NULL;
    b->ok = b->ok && v;
    return v;
}

static inline struct gf_value *fg_f32(struct fg *b, float x)
{
    return fg_const(b, GF_FLOAT, 0, NULL, &x);
}

static inline struct gf_value *fg_i64s(struct fg *b, int64_t n, const int64_t *v)
{
    return fg_const(b, GF_INT64, 1, &n, v);
}

/* Node op (domain "" or "graphfuse") with n_out new outputs into out[]. */
static inline struct gf_node *fg_node(struct fg *b, const char *op, const char *domain,
                                      size_t n_in, struct gf_value *const *in, size_t n_out,
                                      struct gf_value **out)
{
    for (size_t i = 0; b->ok && i < n_out; i++)
        b->ok = (out[i] = gf_graph_new_value(b->m->graph, NULL, op)) != NULL;
    struct gf_node *n = b->ok ? gf_graph_add_node(b->m->graph, op, domain, NULL, n_in, in,
                                                  n_out, out)
                              : NULL;
    b->ok = b->ok && n;
    return n;
}

/* The single output of a new node. */
static inline struct gf_value *fg_op(struct fg *b, const char *op, const char *domain,
                                     size_t n_in, struct gf_value *const *in)
{
    struct gf_value *out = NULL;
    fg_node(b, op, domain, n_in, in, 1, &out);
    return b->ok ? out : NULL;
}

#define FG_LIST(...) ((struct gf_value *const[]){__VA_ARGS__})
#define FG_COUNT(...) (sizeof(FG_LIST(__VA_ARGS__)) / sizeof(struct gf_value *))
/* FG(b, "Mul", x, y): an ai.onnx node; FGF: a graphfuse node. */
#define FG(b, op, ...) fg_op(b, op, "", FG_COUNT(__VA_ARGS__), FG_LIST(__VA_ARGS__))
#define FGF(b, op, ...) fg_op(b, op, "graphfuse", FG_COUNT(__VA_ARGS__), FG_LIST(__VA_ARGS__))

/* Attributes of the node producing v. */
static inline void fg_int(struct fg *b, struct gf_value *v, const char *name, int64_t x)
{
    b->ok = b->ok && v && gf_node_set_attr_int(v->producer, name, x) == GF_OK;
}

static inline void fg_float(struct fg *b, struct gf_value *v, const char *name, float x)
{
    b->ok = b->ok && v && gf_node_set_attr_float(v->producer, name, x) == GF_OK;
}

static inline void fg_str(struct fg *b, struct gf_value *v, const char *name, const char *x)
{
    b->ok = b->ok && v && gf_node_set_attr_string(v->producer, name, x) == GF_OK;
}

static inline void fg_ints(struct fg *b, struct gf_value *v, const char *name, size_t n,
                           const int64_t *x)
{
    b->ok = b->ok && v && gf_node_set_attr_ints(v->producer, name, n, x) == GF_OK;
}

static inline void fg_output(struct fg *b, struct gf_value *v)
{
    b->ok = b->ok && v && gf_graph_add_output(b->m->graph, v) == GF_OK;
}

/* ---- decompositions shared by several builders ------------------------------------ */

/* ReduceMean over the last axis, keepdims (opset 17: axes attribute). */
static inline struct gf_value *fg_mean_last(struct fg *b, struct gf_value *x)
{
    struct gf_value *m = FG(b, "ReduceMean", x);
    fg_ints(b, m, "axes", 1, (const int64_t[]){-1});
    fg_int(b, m, "keepdims", 1);
    return m;
}

/* x * rsqrt(mean(x^2) + eps): Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul. */
static inline struct gf_value *fg_rms_tail(struct fg *b, struct gf_value *x, float eps)
{
    struct gf_value *ms = fg_mean_last(b, FG(b, "Pow", x, fg_f32(b, 2.0f)));
    struct gf_value *r = FG(b, "Reciprocal", FG(b, "Sqrt", FG(b, "Add", ms, fg_f32(b, eps))));
    return FG(b, "Mul", x, r);
}

/* (x - mean) / sqrt(var + eps): ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div. */
static inline struct gf_value *fg_ln_tail(struct fg *b, struct gf_value *x, float eps)
{
    struct gf_value *d = FG(b, "Sub", x, fg_mean_last(b, x));
    struct gf_value *var = fg_mean_last(b, FG(b, "Pow", d, fg_f32(b, 2.0f)));
    return FG(b, "Div", d, FG(b, "Sqrt", FG(b, "Add", var, fg_f32(b, eps))));
}

/* gelu(x) = x/2 (1 + erf(x/sqrt 2)), or the tanh form. */
static inline struct gf_value *fg_gelu_chain(struct fg *b, struct gf_value *x, bool tanh_form)
{
    struct gf_value *t;
    if (tanh_form) {
        struct gf_value *cube = FG(b, "Mul", FG(b, "Pow", x, fg_f32(b, 3.0f)),
                                   fg_f32(b, 0.044715f));
        struct gf_value *u = FG(b, "Mul", FG(b, "Add", x, cube), fg_f32(b, 0.7978845608f));
        t = FG(b, "Tanh", u);
    } else {
        t = FG(b, "Erf", FG(b, "Div", x, fg_f32(b, 1.4142135624f)));
    }
    struct gf_value *one = FG(b, "Add", t, fg_f32(b, 1.0f));
    return FG(b, "Mul", FG(b, "Mul", x, one), fg_f32(b, 0.5f));
}

/* ---- the builders ------------------------------------------------------------------
 * fused selects the single-node form.  Shapes are fp32 unless a dtype is given. */

/* RMSNorm over the last axis.  Inputs X dims[rank], W [n] (when weight). */
static inline struct gf_model *fg_rmsnorm(bool fused, int rank, const int64_t *dims, float eps,
                                          bool weight)
{
    struct fg b = fg_begin("rmsnorm");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims), *y;
    struct gf_value *w = weight ? fg_input(&b, "W", GF_FLOAT, 1, &dims[rank - 1]) : NULL;
    if (fused) {
        y = weight ? FGF(&b, "RMSNorm", x, w) : FGF(&b, "RMSNorm", x);
        fg_float(&b, y, "epsilon", eps);
    } else {
        y = fg_rms_tail(&b, x, eps);
        y = weight ? FG(&b, "Mul", y, w) : y;
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* AddRMSNorm.  Inputs X, R dims[rank], W [n].  Outputs Y, S. */
static inline struct gf_model *fg_add_rmsnorm(bool fused, int rank, const int64_t *dims,
                                              float eps)
{
    struct fg b = fg_begin("add_rmsnorm");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims);
    struct gf_value *r = fg_input(&b, "R", GF_FLOAT, rank, dims);
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 1, &dims[rank - 1]), *out[2] = {0};
    if (fused) {
        struct gf_node *n = fg_node(&b, "AddRMSNorm", "graphfuse", 3, FG_LIST(x, r, w), 2, out);
        b.ok = b.ok && gf_node_set_attr_float(n, "epsilon", eps) == GF_OK;
    } else {
        out[1] = FG(&b, "Add", x, r);
        out[0] = FG(&b, "Mul", fg_rms_tail(&b, out[1], eps), w);
    }
    fg_output(&b, out[0]);
    fg_output(&b, out[1]);
    return fg_done(&b);
}

/* LayerNorm over the last axis.  Inputs X dims[rank], W [n], B [n]. */
static inline struct gf_model *fg_layernorm(bool fused, int rank, const int64_t *dims, float eps)
{
    struct fg b = fg_begin("layernorm");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims), *y;
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 1, &dims[rank - 1]);
    struct gf_value *bias = fg_input(&b, "B", GF_FLOAT, 1, &dims[rank - 1]);
    if (fused) {
        y = FGF(&b, "LayerNorm", x, w, bias);
        fg_float(&b, y, "epsilon", eps);
    } else {
        y = FG(&b, "Add", FG(&b, "Mul", fg_ln_tail(&b, x, eps), w), bias);
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* AddLayerNorm.  Inputs X, R dims[rank], W [n], B [n].  Outputs Y, S. */
static inline struct gf_model *fg_add_layernorm(bool fused, int rank, const int64_t *dims,
                                                float eps)
{
    struct fg b = fg_begin("add_layernorm");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims);
    struct gf_value *r = fg_input(&b, "R", GF_FLOAT, rank, dims);
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 1, &dims[rank - 1]);
    struct gf_value *bias = fg_input(&b, "B", GF_FLOAT, 1, &dims[rank - 1]), *out[2] = {0};
    if (fused) {
        struct gf_node *n = fg_node(&b, "AddLayerNorm", "graphfuse", 4,
                                    FG_LIST(x, r, w, bias), 2, out);
        b.ok = b.ok && gf_node_set_attr_float(n, "epsilon", eps) == GF_OK;
    } else {
        out[1] = FG(&b, "Add", x, r);
        out[0] = FG(&b, "Add", FG(&b, "Mul", fg_ln_tail(&b, out[1], eps), w), bias);
    }
    fg_output(&b, out[0]);
    fg_output(&b, out[1]);
    return fg_done(&b);
}

/* SwiGLU G sigmoid(G) U.  Inputs G, U dims[rank]. */
static inline struct gf_model *fg_swiglu(bool fused, int rank, const int64_t *dims)
{
    struct fg b = fg_begin("swiglu");
    struct gf_value *g = fg_input(&b, "G", GF_FLOAT, rank, dims);
    struct gf_value *u = fg_input(&b, "U", GF_FLOAT, rank, dims);
    fg_output(&b, fused ? FGF(&b, "SwiGLU", g, u)
                        : FG(&b, "Mul", FG(&b, "Mul", g, FG(&b, "Sigmoid", g)), u));
    return fg_done(&b);
}

/* GeGLU gelu(G) U.  Inputs G, U dims[rank]. */
static inline struct gf_model *fg_geglu(bool fused, int rank, const int64_t *dims, bool tanh_form)
{
    struct fg b = fg_begin("geglu");
    struct gf_value *g = fg_input(&b, "G", GF_FLOAT, rank, dims);
    struct gf_value *u = fg_input(&b, "U", GF_FLOAT, rank, dims), *y;
    if (fused) {
        y = FGF(&b, "GeGLU", g, u);
        fg_str(&b, y, "approximate", tanh_form ? "tanh" : "none");
    } else {
        y = FG(&b, "Mul", fg_gelu_chain(&b, g, tanh_form), u);
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* Gelu.  Input X dims[rank]. */
static inline struct gf_model *fg_gelu(bool fused, int rank, const int64_t *dims, bool tanh_form)
{
    struct fg b = fg_begin("gelu");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims), *y;
    if (fused) {
        y = FGF(&b, "Gelu", x);
        fg_str(&b, y, "approximate", tanh_form ? "tanh" : "none");
    } else {
        y = fg_gelu_chain(&b, x, tanh_form);
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* SiLU X sigmoid(X).  Input X dims[rank]. */
static inline struct gf_model *fg_silu(bool fused, int rank, const int64_t *dims)
{
    struct fg b = fg_begin("silu");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, rank, dims);
    fg_output(&b, fused ? FGF(&b, "SiLU", x) : FG(&b, "Mul", x, FG(&b, "Sigmoid", x)));
    return fg_done(&b);
}

/* RoPE, rotate-half.  Inputs X [B, H, S, D], Cos and Sin [S, D]. */
static inline struct gf_model *fg_rope(bool fused, int64_t bsz, int64_t heads, int64_t seq,
                                       int64_t d)
{
    struct fg b = fg_begin("rope");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, 4, (const int64_t[]){bsz, heads, seq, d});
    struct gf_value *cs = fg_input(&b, "Cos", GF_FLOAT, 2, (const int64_t[]){seq, d});
    struct gf_value *sn = fg_input(&b, "Sin", GF_FLOAT, 2, (const int64_t[]){seq, d}), *y;
    if (fused) {
        y = FGF(&b, "RoPE", x, cs, sn);
    } else {
        struct gf_value *axis = fg_i64s(&b, 1, (const int64_t[]){-1});
        struct gf_value *zero = fg_i64s(&b, 1, (const int64_t[]){0});
        struct gf_value *half = fg_i64s(&b, 1, (const int64_t[]){d / 2});
        struct gf_value *end = fg_i64s(&b, 1, (const int64_t[]){d});
        struct gf_value *x1 = FG(&b, "Slice", x, zero, half, axis);
        struct gf_value *x2 = FG(&b, "Slice", x, half, end, axis);
        struct gf_value *rot = FG(&b, "Concat", FG(&b, "Neg", x2), x1);
        fg_int(&b, rot, "axis", -1);
        y = FG(&b, "Add", FG(&b, "Mul", x, cs), FG(&b, "Mul", rot, sn));
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* act(A @ B + Bias) + Res, act "" / "relu" / "gelu".  Inputs A [M, K],
 * B [K, N], Bias [N], Res [M, N]. */
static inline struct gf_model *fg_matmul_epilogue(bool fused, int64_t m, int64_t k, int64_t n,
                                                  const char *act)
{
    struct fg b = fg_begin("matmul_epilogue");
    struct gf_value *a = fg_input(&b, "A", GF_FLOAT, 2, (const int64_t[]){m, k});
    struct gf_value *w = fg_input(&b, "B", GF_FLOAT, 2, (const int64_t[]){k, n});
    struct gf_value *bias = fg_input(&b, "Bias", GF_FLOAT, 1, &n);
    struct gf_value *res = fg_input(&b, "Res", GF_FLOAT, 2, (const int64_t[]){m, n}), *y;
    if (fused) {
        y = FGF(&b, "MatMulEpilogue", a, w, bias, res);
        fg_str(&b, y, "activation", act);
    } else {
        y = FG(&b, "Add", FG(&b, "MatMul", a, w), bias);
        if (strcmp(act, "relu") == 0)
            y = FG(&b, "Relu", y);
        else if (strcmp(act, "gelu") == 0)
            y = fg_gelu_chain(&b, y, false);
        y = FG(&b, "Add", y, res);
    }
    fg_output(&b, y);
    return fg_done(&b);
}

/* Mean cross-entropy, class axis last.  Inputs L [N, C], T [N] (int64).
 * Unfused: LogSoftmax + NegativeLogLikelihoodLoss. */
static inline struct gf_model *fg_sce(bool fused, int64_t n, int64_t c, const int64_t *ignore)
{
    struct fg b = fg_begin("softmax_cross_entropy");
    struct gf_value *l = fg_input(&b, "L", GF_FLOAT, 2, (const int64_t[]){n, c});
    struct gf_value *t = fg_input(&b, "T", GF_INT64, 1, &n), *y;
    if (fused) {
        y = FGF(&b, "SoftmaxCrossEntropy", l, t);
    } else {
        struct gf_value *lp = FG(&b, "LogSoftmax", l);
        fg_int(&b, lp, "axis", -1);
        y = FG(&b, "NegativeLogLikelihoodLoss", lp, t);
    }
    fg_str(&b, y, "reduction", "mean");
    if (ignore)
        fg_int(&b, y, "ignore_index", *ignore);
    fg_output(&b, y);
    return fg_done(&b);
}

/* The Hugging Face causal-LM loss: logits[:, :-1] against labels[:, 1:].
 * Inputs L [B, S, C], T [B, S] (int64).  Unfused: Slice, Reshape,
 * LogSoftmax, NegativeLogLikelihoodLoss. */
static inline struct gf_model *fg_sce_shift(bool fused, int64_t bsz, int64_t seq, int64_t c,
                                            const int64_t *ignore)
{
    struct fg b = fg_begin("causal_lm_loss");
    struct gf_value *l = fg_input(&b, "L", GF_FLOAT, 3, (const int64_t[]){bsz, seq, c});
    struct gf_value *t = fg_input(&b, "T", GF_INT64, 2, (const int64_t[]){bsz, seq}), *y;
    if (fused) {
        y = FGF(&b, "SoftmaxCrossEntropy", l, t);
        fg_int(&b, y, "shift", 1);
    } else {
        struct gf_value *one = fg_i64s(&b, 1, (const int64_t[]){1});
        struct gf_value *ls = FG(&b, "Slice", l, fg_i64s(&b, 1, (const int64_t[]){0}),
                                 fg_i64s(&b, 1, (const int64_t[]){-1}), one);
        struct gf_value *ts = FG(&b, "Slice", t, one,
                                 fg_i64s(&b, 1, (const int64_t[]){INT64_MAX}), one);
        ls = FG(&b, "Reshape", ls, fg_i64s(&b, 2, (const int64_t[]){-1, c}));
        ts = FG(&b, "Reshape", ts, fg_i64s(&b, 1, (const int64_t[]){-1}));
        struct gf_value *lp = FG(&b, "LogSoftmax", ls);
        fg_int(&b, lp, "axis", -1);
        y = FG(&b, "NegativeLogLikelihoodLoss", lp, ts);
    }
    fg_str(&b, y, "reduction", "mean");
    if (ignore)
        fg_int(&b, y, "ignore_index", *ignore);
    fg_output(&b, y);
    return fg_done(&b);
}

/* Mean cross-entropy of H @ W.  Inputs H [N, K], W [K, V], T [N] (int64).
 * Unfused: MatMul + SoftmaxCrossEntropyLoss. */
static inline struct gf_model *fg_lce(bool fused, int64_t n, int64_t k, int64_t v,
                                      const int64_t *ignore)
{
    struct fg b = fg_begin("linear_cross_entropy");
    struct gf_value *h = fg_input(&b, "H", GF_FLOAT, 2, (const int64_t[]){n, k});
    struct gf_value *w = fg_input(&b, "W", GF_FLOAT, 2, (const int64_t[]){k, v});
    struct gf_value *t = fg_input(&b, "T", GF_INT64, 1, &n), *y;
    y = fused ? FGF(&b, "LinearCrossEntropy", h, w, t)
              : FG(&b, "SoftmaxCrossEntropyLoss", FG(&b, "MatMul", h, w), t);
    fg_str(&b, y, "reduction", "mean");
    if (ignore)
        fg_int(&b, y, "ignore_index", *ignore);
    fg_output(&b, y);
    return fg_done(&b);
}

/* p * (a - b) summed over the last axis (keepdims 0): one term of JSD. */
static inline struct gf_value *fg_kl_rows(struct fg *b, struct gf_value *p, struct gf_value *a,
                                          struct gf_value *bb)
{
    struct gf_value *s = FG(b, "ReduceSum", FG(b, "Mul", p, FG(b, "Sub", a, bb)),
                            fg_i64s(b, 1, (const int64_t[]){-1}));
    fg_int(b, s, "keepdims", 0);
    return s;
}

/* JSD with batchmean.  Inputs X, Y [N, V] (log-probabilities), T [N]
 * (int64, when labels).  Unfused: Exp, Log, Mul, Sub, ReduceSum and the
 * mean over the rows kept (Equal, Not, Cast, Mul, ReduceSum, Div). */
static inline struct gf_model *fg_jsd(bool fused, int64_t n, int64_t v, float beta, bool labels,
                                      int64_t ignore)
{
    struct fg b = fg_begin("jsd");
    struct gf_value *x = fg_input(&b, "X", GF_FLOAT, 2, (const int64_t[]){n, v});
    struct gf_value *y = fg_input(&b, "Y", GF_FLOAT, 2, (const int64_t[]){n, v});
    struct gf_value *t = labels ? fg_input(&b, "T", GF_INT64, 1, &n) : NULL, *loss, *rows;
    if (fused) {
        loss = labels ? FGF(&b, "JSD", x, y, t) : FGF(&b, "JSD", x, y);
        fg_float(&b, loss, "beta", beta);
        fg_int(&b, loss, "ignore_index", ignore);
        fg_output(&b, loss);
        return fg_done(&b);
    }
    struct gf_value *q = FG(&b, "Exp", x), *p = FG(&b, "Exp", y);
    if (beta == 0) {
        rows = fg_kl_rows(&b, p, y, x);
    } else if (beta == 1) {
        rows = fg_kl_rows(&b, q, x, y);
    } else {
        struct gf_value *m = FG(&b, "Add", FG(&b, "Mul", p, fg_f32(&b, beta)),
                                FG(&b, "Mul", q, fg_f32(&b, 1 - beta)));
        struct gf_value *lm = FG(&b, "Log", m);
        rows = FG(&b, "Add", FG(&b, "Mul", fg_kl_rows(&b, p, y, lm), fg_f32(&b, beta)),
                  FG(&b, "Mul", fg_kl_rows(&b, q, x, lm), fg_f32(&b, 1 - beta)));
    }
    if (labels) {
        struct gf_value *keep = FG(&b, "Cast", FG(&b, "Not", FG(&b, "Equal", t,
                                                                fg_i64s(&b, 1, &ignore))));
        fg_int(&b, keep, "to", GF_FLOAT);
        struct gf_value *num = FG(&b, "ReduceSum", FG(&b, "Mul", rows, keep));
        struct gf_value *den = FG(&b, "ReduceSum", keep);
        fg_int(&b, num, "keepdims", 0);
        fg_int(&b, den, "keepdims", 0);
        loss = FG(&b, "Div", num, den);
    } else {
        loss = FG(&b, "ReduceMean", rows);
        fg_int(&b, loss, "keepdims", 0);
    }
    fg_output(&b, loss);
    return fg_done(&b);
}

/* ---- inputs ---------------------------------------------------------------------- */

/* Deterministic uniform values in [0, 1). */
static inline double fg_uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* A tensor (in holder's arena) of uniform values in [lo, hi): floats, or
 * for integer dtypes integers in [lo, hi). */
static inline struct gf_tensor *fg_random(struct gf_model *holder, enum gf_dtype dt, int rank,
                                          const int64_t *dims, double lo, double hi,
                                          uint64_t *state)
{
    struct gf_tensor *t = gf_tensor_new(holder, NULL, dt, rank, dims, NULL);
    for (size_t i = 0; t && i < t->nelem; i++) {
        double u = lo + (hi - lo) * fg_uniform(state);
        switch (dt) {
        case GF_FLOAT: ((float *)t->data)[i] = (float)u; break;
        case GF_DOUBLE: ((double *)t->data)[i] = u; break;
        case GF_FLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_half((float)u); break;
        case GF_BFLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_bf16((float)u); break;
        case GF_INT32: ((int32_t *)t->data)[i] = (int32_t)floor(u); break;
        case GF_INT64: ((int64_t *)t->data)[i] = (int64_t)floor(u); break;
        default: break;
        }
    }
    return t;
}

/* Rows of the last axis of an fp32 tensor replaced by their log-softmax
 * (computed in double): log-probabilities for JSD. */
static inline void fg_log_softmax_rows(struct gf_tensor *t)
{
    size_t n = t->rank ? (size_t)t->dims[t->rank - 1] : 1;
    float *x = t->data;
    for (size_t r = 0; n && r < t->nelem / n; r++, x += n) {
        double m = -INFINITY, s = 0;
        for (size_t j = 0; j < n; j++)
            m = x[j] > m ? x[j] : m;
        for (size_t j = 0; j < n; j++)
            s += exp(x[j] - m);
        for (size_t j = 0; j < n; j++)
            x[j] = (float)(x[j] - m - log(s));
    }
}

#endif
