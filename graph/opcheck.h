/*
 * opcheck.h — one place per op for its attribute and shape rules, shared by
 * shape inference (graph/shape.c) and every backend's kernels (through
 * kernels/checks.c).  Internal to graphfuse: graph/ and kernels/ include it.
 *
 *     struct gf_shape h, w, t;               // from value types, or tensor views
 *     struct gf_lce_rule r;
 *     if (gf_rule_lce(node, &h, &w, &t, NULL, &r) != GF_OK)
 *         return GF_ERR_INVALID;             // gf_last_error() names the node
 *     // r.v: the classes, r.pos: the positions (the loss shape with reduction none)
 *
 * A rule sees the node (its attributes) and the shapes of its inputs.  Shape
 * inference passes what it knows: a rank of -1 is unknown, a dim whose value
 * is -1 is unknown (its param the symbol, if any).  Kernels pass concrete
 * shapes.  A rule checks what is known (a dim it cannot see passes) and
 * gives the derived shapes, symbolic where the inputs are.  A violation is
 * GF_ERR_INVALID with a message "node 'x' (Op): ..." (gf_error).
 *
 * Element types, data and backend limits are the kernels' business
 * (kernels/checks.h); graph/ knows no backend.
 */
#ifndef GF_OPCHECK_H
#define GF_OPCHECK_H

#include "gf_graph.h"

#define GF_SHAPE_MAX_RANK 64 /* ranks above this are treated as unknown */

/* A shape as the rules see it. */
struct gf_shape {
    int rank; /* -1: unknown */
    struct gf_dim d[GF_SHAPE_MAX_RANK];
};

/* ---- dims and shapes ----------------------------------------------------- */

struct gf_dim gf_dim_of(int64_t v);
struct gf_dim gf_dim_unknown(void);
bool gf_dim_known(const struct gf_dim *d);
/* Two dims that must be equal: false on a contradiction; *out the more
 * precise of the two. */
bool gf_dim_unify(const struct gf_dim *a, const struct gf_dim *b, struct gf_dim *out);
/* "7", "batch" or "?". */
const char *gf_dim_str(const struct gf_dim *d, char *buf, size_t len);
/* "[batch,4,?]", or "[*]" for an unknown rank. */
const char *gf_shape_str(const struct gf_shape *s, char *buf, size_t len);
/* The known shape dims[rank]. */
void gf_shape_set(struct gf_shape *s, int rank, const int64_t *dims);
/* Multidirectional (numpy) broadcast of two dims or shapes; false when
 * they do not broadcast (out may alias a). */
bool gf_dim_broadcast(const struct gf_dim *a, const struct gf_dim *b, struct gf_dim *out);
bool gf_shape_broadcast(const struct gf_shape *a, const struct gf_shape *b,
                        struct gf_shape *out);
/* s and t can be the same shape (unknowns agree with anything). */
bool gf_shape_unify(const struct gf_shape *s, const struct gf_shape *t, struct gf_shape *out);

/* A signed or unsigned integer type (not bool). */
bool gf_dtype_is_int(enum gf_dtype t);
/* GF_ERR_* st with "node 'x' (Op): message"; returns st. */
enum gf_status gf_node_error(const struct gf_node *n, enum gf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- cross-entropy ---------------------------------------------------------
 * SoftmaxCrossEntropy (domain graphfuse; shift=0 is SoftmaxCrossEntropyLoss),
 * LinearCrossEntropy, CrossEntropyGrad.  A position is one row of logits
 * and its label; with shift=1 the logits of [B, S] positions are scored
 * against the labels one step on (B * (S - 1) positions). */

enum gf_reduction { GF_RED_NONE, GF_RED_SUM, GF_RED_MEAN };

struct gf_ce_attrs {
    enum gf_reduction red; /* "reduction": none, sum, mean (default) */
    bool shift;         /* "shift": 0 or 1 */
    bool has_ii;        /* "ignore_index" given */
    int64_t ii;
};

/* reduction, shift and ignore_index of a cross-entropy node. */
enum gf_status gf_rule_ce_attrs(const struct gf_node *n, struct gf_ce_attrs *ce);

/* SoftmaxCrossEntropy(L, T, Wc?): L [N, C, d...] (shift: [B, S, C]), T the
 * positions' labels [N, d...] (shift: [B, S]), Wc [C]. */
struct gf_sce_rule {
    struct gf_ce_attrs ce;
    struct gf_dim c;     /* classes */
    struct gf_shape pos; /* positions: [N, d...], or [B * (S - 1)] with shift */
    struct gf_shape logp;/* LogP: L's shape, or [B * (S - 1), C] with shift */
};
enum gf_status gf_rule_sce(const struct gf_node *n, const struct gf_shape *l,
                           const struct gf_shape *t, const struct gf_shape *wc,
                           struct gf_sce_rule *r);

/* LinearCrossEntropy(H, W, T, Bias?): H [..., K] (shift: [B, S, K]), W [K, V]
 * ([V, K] with transB), T H's leading dims ([B, S]), Bias [V]. */
struct gf_lce_rule {
    struct gf_ce_attrs ce;
    bool tb;             /* transB */
    struct gf_dim k, v;
    struct gf_shape pos; /* positions: H's leading dims, or [B * (S - 1)] */
};
enum gf_status gf_rule_lce(const struct gf_node *n, const struct gf_shape *h,
                           const struct gf_shape *w, const struct gf_shape *t,
                           const struct gf_shape *bias, struct gf_lce_rule *r);

/* CrossEntropyGrad(dLoss, G): G like the logits, [N, C, d...] ([B, S, C]
 * with shift); dLoss a scalar, or the positions' shape with reduction none. */
struct gf_ceg_rule {
    struct gf_ce_attrs ce;
    struct gf_shape dloss; /* what dLoss must be */
};
enum gf_status gf_rule_ce_grad(const struct gf_node *n, const struct gf_shape *dloss,
                               const struct gf_shape *g, struct gf_ceg_rule *r);

/* ---- the ONNX losses --------------------------------------------------------
 * SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss (scores, labels,
 * weights?) -> loss, log_prob? (SCE's, like the scores); their gradients
 * SoftmaxCrossEntropyLossGrad (dLoss, scores, labels, weights?) and
 * NLLLossGrad (dLoss, shape, labels, weights?) -> dScores like the scores:
 * scores [N, C, d1...], labels [N, d1...], weights [C]; reduction none, sum
 * or mean (no shift); the loss, and dLoss, [N, d1...] with none, else a
 * scalar.  The forward ops pass dloss NULL; NLLLossGrad passes as scores
 * the shape its input 1 holds. */
struct gf_loss_rule {
    struct gf_ce_attrs ce;
    size_t si, ti, wi;    /* input slots of scores, labels, weights */
    struct gf_dim c;      /* classes */
    struct gf_shape pos;  /* positions: [N, d1...] */
    struct gf_shape loss; /* the loss (dLoss): pos with reduction none, else [] */
};
enum gf_status gf_rule_loss(const struct gf_node *n, const struct gf_shape *dloss,
                            const struct gf_shape *scores, const struct gf_shape *labels,
                            const struct gf_shape *w, struct gf_loss_rule *r);

/* ---- attention -------------------------------------------------------------
 * Attention(Q, K, V, Mask?) -> O, Stats?: Q [b..., Sq, D], K [b..., Sk, D]
 * with transB = 1 (else [b..., D, Sk]), V [b..., Sk, Dv], Mask broadcasting
 * to the scores [b..., Sq, Sk]; O [b..., Sq, Dv].  Stats [2, b..., Sq] (of
 * Q's compute type: double for double, else float): each query row's max
 * score m (scale q.k + mask) and 1 / l, l = sum over keys of exp(score - m)
 * (the softmax's statistics, which a backward reads instead of recomputing
 * them).  AttentionGrad(dO, Q, K, V, Mask?, O, Stats?): dO and O like O,
 * Stats as the forward's.  zero_masked_rows = 1: a row whose scores are all
 * -inf (every key masked) gives O = 0 and no gradient, where the softmax
 * alone gives NaN (the exporters' Where(IsNaN(P), 0, P)); its statistics
 * are m = 0, 1 / l = 0. */
struct gf_attn_rule {
    bool tb;
    bool zero_rows; /* zero_masked_rows: a row whose scores are all -inf gives 0s, not NaN */
    float scale;
    struct gf_dim sq, sk, d, dv;
    struct gf_shape scores; /* [b..., Sq, Sk] */
    struct gf_shape o;      /* [b..., Sq, Dv] */
    struct gf_shape stats;  /* [2, b..., Sq] */
};
enum gf_status gf_rule_attention(const struct gf_node *n, const struct gf_shape *q,
                                 const struct gf_shape *k, const struct gf_shape *v,
                                 const struct gf_shape *mask, struct gf_attn_rule *r);
/* AttentionGrad: the same, dO and O like O, Stats (NULL: not given) like
 * r->stats. */
enum gf_status gf_rule_attention_grad(const struct gf_node *n, const struct gf_shape *dout,
                                      const struct gf_shape *q, const struct gf_shape *k,
                                      const struct gf_shape *v, const struct gf_shape *mask,
                                      const struct gf_shape *o, const struct gf_shape *stats,
                                      struct gf_attn_rule *r);

/* ---- normalizations --------------------------------------------------------
 * RMSNorm(X, W?), AddRMSNorm(X, R, W?), LayerNorm(X, W?, B?), AddLayerNorm(X,
 * R, W?, B?) -> Y, S? (the Add forms' sum), Mean?, InvStdDev? (LayerNorm's,
 * outputs after Y and S): X normalized over its axes axis.. (the block), R
 * like X, W and B broadcasting to the block; epsilon finite and >= 0; the
 * RMS forms' eps_outside 0 or 1 and weight_offset finite, only with W.
 * RMSNormGrad(dY, X, W?) -> dX, dW?; LayerNormGrad(dY, X, W?, Mean?,
 * InvStdDev?) -> dX, dW?, dB?: dY like X, Mean and InvStdDev both or
 * neither, shaped like the statistics; dW and dB like the block. */
struct gf_norm_rule {
    bool rms;               /* RMSNorm, AddRMSNorm, RMSNormGrad */
    int axis;               /* the block: X's axes axis.. (when X's rank is known) */
    float eps;
    bool eps_outside;       /* RMS: epsilon added outside the square root */
    float woff;             /* RMS: weight_offset (0 without) */
    struct gf_shape block;  /* X.shape[axis:]: dW, dB of the gradients */
    struct gf_shape stats;  /* X's shape with the block's axes 1: Mean, InvStdDev */
};
enum gf_status gf_rule_norm(const struct gf_node *n, const struct gf_shape *x,
                            const struct gf_shape *r, const struct gf_shape *w,
                            const struct gf_shape *b, struct gf_norm_rule *o);
/* RMSNormGrad's G (input 3, added to dX) has X's shape; NULL: absent. */
enum gf_status gf_rule_norm_grad(const struct gf_node *n, const struct gf_shape *dy,
                                 const struct gf_shape *x, const struct gf_shape *w,
                                 const struct gf_shape *mean, const struct gf_shape *istd,
                                 const struct gf_shape *g, struct gf_norm_rule *o);

/* ---- activations -------------------------------------------------------------
 * SwiGLU(G, U), GeGLU(G, U), SiLU(X), Gelu(X) -> Y: G and U broadcast;
 * GeGLU's and Gelu's approximate is none or tanh.  SwiGLUGrad and
 * GeGLUGrad (dY, G, U) -> dG, dU: G and U of dY's shape.  RoPE(X, Cos, Sin)
 * -> Y and RoPEGrad(dY, Cos, Sin) -> dX: X's last axis has an even length,
 * Cos and Sin broadcast to X. */
enum gf_act { GF_ACT_SILU, GF_ACT_GELU, GF_ACT_GELU_TANH };
enum gf_status gf_rule_act(const struct gf_node *n, enum gf_act *act);
/* u NULL: the ungated forms (SiLU, Gelu); *y the output's shape. */
enum gf_status gf_rule_glu(const struct gf_node *n, const struct gf_shape *g,
                           const struct gf_shape *u, enum gf_act *act, struct gf_shape *y);
enum gf_status gf_rule_glu_grad(const struct gf_node *n, const struct gf_shape *dy,
                                const struct gf_shape *g, const struct gf_shape *u,
                                enum gf_act *act);
enum gf_status gf_rule_rope(const struct gf_node *n, const struct gf_shape *x,
                            const struct gf_shape *cos, const struct gf_shape *sin);

/* ---- MatMulEpilogue ---------------------------------------------------------
 * MatMulEpilogue(A, B, Bias?, Res?) -> Y = act(alpha A' B' + beta Bias) + Res:
 * A' = A, or A with its last two axes swapped (transA; B' likewise), a 1-D
 * A is [1, K] and a 1-D B [K, 1] (their axis dropped from Y); the batch
 * dims broadcast; Bias and Res broadcast to Y; activation one of
 * gf_mme_act_names. */
struct gf_matmul_rule {
    struct gf_dim m, k, n;
    struct gf_shape batch; /* broadcast batch dims */
    struct gf_shape y;
};
/* A' x B' (MatMul's rule with transposes). */
enum gf_status gf_rule_matmul(const struct gf_node *n, const struct gf_shape *a,
                              const struct gf_shape *b, bool ta, bool tb,
                              struct gf_matmul_rule *r);
/* Gemm(A, B, C?) -> Y [M, N] = alpha A' B' + beta C: A and B 2-D (A' = A^T
 * with transA, B' likewise), K agreeing; C of rank <= 2 broadcast to
 * [M, N], before opset 7 with broadcast = 0 exactly [M, N] (strict). */
struct gf_gemm_rule {
    bool ta, tb, strict;
    float alpha, beta;
    struct gf_matmul_rule mm; /* y: [M, N] once A and B have ranks */
};
enum gf_status gf_rule_gemm(const struct gf_node *n, const struct gf_shape *a,
                            const struct gf_shape *b, const struct gf_shape *c,
                            struct gf_gemm_rule *r);
extern const char *const gf_mme_act_names[7]; /* "", relu, gelu, gelu_tanh, silu, tanh, sigmoid */
struct gf_mme_rule {
    bool ta, tb;
    float alpha, beta;
    int act; /* index into gf_mme_act_names */
    struct gf_matmul_rule mm;
};
enum gf_status gf_rule_mme(const struct gf_node *n, const struct gf_shape *a,
                           const struct gf_shape *b, const struct gf_shape *bias,
                           const struct gf_shape *res, struct gf_mme_rule *r);
/* MatMulEpilogueGrad(dY, Z) -> dZ, dBias?: Z (Y with from_output=1, which
 * needs an activation invertible from its output: none, relu, tanh,
 * sigmoid) of dY's shape, dY of rank >= 1; dBias is [N], dY's last dim. */
struct gf_mme_grad_rule {
    int act;
    bool from_y;
    struct gf_shape dbias;
};
enum gf_status gf_rule_mme_grad(const struct gf_node *n, const struct gf_shape *dy,
                                const struct gf_shape *z, struct gf_mme_grad_rule *r);

/* ---- optimizer ops ----------------------------------------------------------
 * (graph/ops.def; the kernels: kernels/cpu/optim.c, kernels/optim_ops.h)
 * GradAccumulate(G, Acc?) -> Y: Y like Acc, else like G; with transpose=1
 * G is 2-D and Y (and Acc) [G's dim 1, G's dim 0]; Acc has Y's elements.
 * GradNorm(X) -> N: float64 [1].
 * SGDStep(P, G, hyper, Buf?, N?) -> P', Buf'; AdamWStep(P, G, M, V, hyper,
 * N?) -> P', M', V': every operand but hyper and N has P's elements (flat
 * ranges), the outputs P's shape; hyper is GF_OPTIM_HYPER float64 values,
 * N (GradNorm's output) one. */
#define GF_OPTIM_HYPER 7 /* the length of SGDStep's and AdamWStep's hyper */
struct gf_optim_rule {
    bool transpose;  /* GradAccumulate */
    float scale;     /* GradAccumulate */
    size_t hyper;    /* input slot of hyper (the steps) */
    struct gf_shape y; /* output 0 (and the steps' other outputs) */
};
/* in[i]: input i's shape, NULL where omitted (n_in of them). */
enum gf_status gf_rule_optim(const struct gf_node *n, const struct gf_shape *const *in,
                             size_t n_in, struct gf_optim_rule *r);

#endif /* GF_OPCHECK_H */
