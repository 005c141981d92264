/*
 * launch.h — the launchers the .cu files export to the backend's host code
 * (internal to kernels/cuda/; plain C, included by both sides).  Each
 * enqueues its kernels on `s` and returns the launch's cudaError_t; none
 * waits.  Pointers are device memory; counts are elements.
 */
#ifndef GF_CU_LAUNCH_H
#define GF_CU_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GF_CU_MAX_RANK 8

/* An N-d walk over an output shape for up to 4 operands: merged axes in
 * dims[0..rank) (outermost first), operand k's element strides in st[k]
 * (0 where it is broadcast). */
struct gf_cu_nd {
    int rank;
    int64_t dims[GF_CU_MAX_RANK];
    int64_t st[4][GF_CU_MAX_RANK];
};

/* ---- elementwise.cu --------------------------------------------------- */

/* Element types of the launchers (storage of fp16 / bf16: raw 16 bits). */
enum gf_cu_type { GF_CU_F32, GF_CU_F16, GF_CU_BF16, GF_CU_I64, GF_CU_I32, GF_CU_U8, GF_CU_B8 };

/* y = f(x), n elements of the float type `type` (GF_CU_F32, F16, BF16:
 * fp16 / bf16 computed in fp32, stored rounded to nearest even; GF_CU_NOT:
 * bool, type unused; IsNaN, IsInf: `type` in, bool out). */
enum gf_cu_unary_op {
    GF_CU_NEG, GF_CU_SQRT, GF_CU_RECIP, GF_CU_EXP, GF_CU_LOG, GF_CU_TANH, GF_CU_ABS, GF_CU_ERF,
    GF_CU_SIN, GF_CU_COS, GF_CU_FLOOR, GF_CU_CEIL, GF_CU_RELU, GF_CU_SIGMOID, GF_CU_SOFTPLUS,
    GF_CU_GELU, GF_CU_GELU_TANH, GF_CU_NOT, GF_CU_ISNAN,
    GF_CU_ISINF_POS = 32, GF_CU_ISINF_NEG = 64 /* IsInf: either or both bits */
};
cudaError_t gf_cu_unary(cudaStream_t s, int op, int type, const void *x, void *y, int64_t n);

/* dx = g * f'(v), n of the float type `type` (v: Relu / Sigmoid / Tanh's
 * output, Gelu's input). */
enum gf_cu_grad_op { GF_CU_RELU_GRAD, GF_CU_SIGMOID_GRAD, GF_CU_TANH_GRAD, GF_CU_GELU_GRAD,
                     GF_CU_GELU_TANH_GRAD };
cudaError_t gf_cu_act_grad(cudaStream_t s, int op, int type, const void *g, const void *v,
                           void *dx, int64_t n);

/* y[i] = f(a[.], b[.]) over nd (st[0]: a's strides, st[1]: b's), n elements
 * of type `type` (GF_CU_F32, F16, BF16, I64, I32, B8), b of btype (`type`
 * but for Pow of a half base with an fp32 exponent); comparisons write
 * bool. */
enum gf_cu_binary_op { GF_CU_ADD, GF_CU_SUB, GF_CU_MUL, GF_CU_DIV, GF_CU_POW, GF_CU_MAX,
                       GF_CU_MIN, GF_CU_EQ, GF_CU_LT, GF_CU_LE, GF_CU_GT, GF_CU_GE, GF_CU_AND,
                       GF_CU_OR, GF_CU_XOR };
cudaError_t gf_cu_binary(cudaStream_t s, int op, int type, int btype, const void *a,
                         const void *b, void *y, const struct gf_cu_nd *nd, int64_t n);

/* Clip of n of the float type `type`: bounds from one-element tensors of
 * that type when given, else lo, hi. */
cudaError_t gf_cu_clip(cudaStream_t s, int type, const void *x, void *y, int64_t n,
                       const void *lo_t, const void *hi_t, float lo, float hi);

/* y = c ? x : z over nd (st[0..2]: c, x, z), elements of `size` bytes. */
cudaError_t gf_cu_where(cudaStream_t s, int size, const uint8_t *c, const void *x,
                        const void *z, void *y, const struct gf_cu_nd *nd, int64_t n);

/* y = (to) x, n elements (trunc_bf16: fp32 -> bf16 by truncation). */
cudaError_t gf_cu_cast(cudaStream_t s, int from, int to, const void *x, void *y, int64_t n,
                       int trunc_bf16);

/* ---- layout.cu -------------------------------------------------------- */

/* y[i] = x[offset of i under nd.st[0]], n elements of `size` bytes (y
 * dense): Transpose, Slice (x at its first element), Expand. */
cudaError_t gf_cu_copy_nd(cudaStream_t s, int size, const void *x, void *y,
                          const struct gf_cu_nd *nd, int64_t n);

/* Gather: y [pre, ni, post] from x [pre, na, post] at indices ind (int64
 * when i64, else int32; negative counts from the end).  A bad index: the
 * smallest such position goes to *flag (atomicMin; the host sets it to
 * INT32_MAX first; NULL: the host checked them) and its rows are 0. */
cudaError_t gf_cu_gather(cudaStream_t s, int size, const void *x, const void *ind, int i64,
                         void *y, int64_t pre, int64_t ni, int64_t na, int64_t post,
                         int *flag);

/* ---- optim.cu --------------------------------------------------------- */

/* GradAccumulate: y = (acc or 0) + g * scale over n; transposed: y, acc
 * [r, c], g [c, r]. */
cudaError_t gf_cu_grad_acc(cudaStream_t s, float *y, const float *acc, const float *g,
                           float scale, int64_t n);
cudaError_t gf_cu_grad_acc_t(cudaStream_t s, float *y, const float *acc, const float *g,
                             float scale, int r, int c);
/* GradNorm: out[0] = sqrt(sum of x^2) as float64, summed in double in a
 * fixed order; part: gf_cu_sumsq_parts() doubles of scratch. */
#define GF_CU_SUMSQ_PARTS 1024
cudaError_t gf_cu_sumsq(cudaStream_t s, const float *x, int64_t n, double *part, double *out);

/* What the updates read on the device when they run (so that a replayed
 * graph sees the values of that step): hyper (kernels/optim_ops.h's
 * layout, float64), else NULL and the args hold the scalars; norm (N,
 * float64), else NULL: the gradient scale is then multiplied by torch's
 * clipping coefficient for max_norm, and the update skipped (the outputs
 * keep the inputs' values) when the scale or the norm is not finite. */
struct gf_cu_step {
    const double *hyper;
    const double *norm;
    float max_norm;
};

struct gf_cu_sgd_args {
    int decay_on, momentum_on, nesterov, first;
    float wd, mom, damp, neg_lr, grad_scale;
};
/* SGDStep: p, buf (may be the inputs' memory) from p0, buf0, g (buf NULL:
 * no momentum buffer). */
cudaError_t gf_cu_sgd(cudaStream_t s, float *p, float *buf, const float *p0, const float *buf0,
                      const float *g, int64_t n, const struct gf_cu_sgd_args *c,
                      const struct gf_cu_step *st);

struct gf_cu_adamw_args {
    int decay_on, small;
    float decay, w, b2, one_b2, step_size, bc2_sqrt, eps, grad_scale;
};
cudaError_t gf_cu_adamw(cudaStream_t s, float *p, float *m, float *v, const float *p0,
                        const float *m0, const float *v0, const float *g, int64_t n,
                        const struct gf_cu_adamw_args *c, const struct gf_cu_step *st);

/* ---- reduce.cu -------------------------------------------------------- */

/* x seen as kept x reduced axes (outermost first, element strides): each
 * output element reduces nred inputs. */
struct gf_cu_red {
    int nk, nr;
    int64_t kdim[GF_CU_MAX_RANK], kstr[GF_CU_MAX_RANK];
    int64_t rdim[GF_CU_MAX_RANK], rstr[GF_CU_MAX_RANK];
    int64_t nout, nred;
};
enum gf_cu_red_op { GF_CU_RED_SUM, GF_CU_RED_MEAN, GF_CU_RED_MAX };
/* y[nout] = sum / mean / max of x's reduced elements (x, y of the float type
 * `type`: fp16 / bf16 computed as fp32, y rounded once; sums in double). */
cudaError_t gf_cu_reduce(cudaStream_t s, int op, int type, const void *x, void *y,
                         const struct gf_cu_red *g);

/* Softmax (log: LogSoftmax) of rows of n elements `inner` apart in
 * [outer, n, inner], rows = outer * inner (of the float type `type`, as
 * gf_cu_reduce; sums in double). */
cudaError_t gf_cu_softmax(cudaStream_t s, int log, int type, const void *x, void *y, int64_t n,
                          int64_t inner, int64_t rows);
/* Their gradients from dY and Y: softmax dx = y (g - sum(g y)); log-softmax
 * dx = g - exp(y) sum(g). */
cudaError_t gf_cu_softmax_grad(cudaStream_t s, int log, int type, const void *g, const void *y,
                               void *dx, int64_t n, int64_t inner, int64_t rows);

/* ---- fused_loss.cu (the cross-entropy launch itself: launch_mla.h) ---- */

struct gf_cu_ce;
/* gf_cu_ce for SoftmaxCrossEntropyLossGrad: G scaled by the upstream
 * gradient dl[0] (per_pos: dl[p]); with gsum a zero sum of the weights
 * gives zeros. */
cudaError_t gf_cu_ce_dl(cudaStream_t s, const struct gf_cu_ce *c, const float *dl, int per_pos);
/* NLLLossGrad: dx[base(p) + t d] = -(G's coefficient of p) for each counted
 * position p of label t, the upstream dl as in gf_cu_ce_dl (dx zeroed by
 * the caller; c->x unused). */
cudaError_t gf_cu_nll_grad(cudaStream_t s, const struct gf_cu_ce *c, const float *dl,
                           int per_pos, float *dx);

/* JSD over rows of n log-probabilities X = log Q, Y = log P [rows, n]. */
struct gf_cu_jsd {
    const float *x, *y;
    const void *t;       /* labels [rows] (int64 when t64, else int32), or NULL */
    int t64;
    int64_t ii;          /* a row whose label is ii is not counted */
    int64_t rows, n;
    float beta;
    int block;           /* threads (0: automatic) */
    double *lpart;       /* JSD: per row (sum, counted) [2 rows] */
    const float *dl;     /* JSDGrad: dLoss [1] */
    double *cnt;         /* JSDGrad with labels: scratch for the rows counted */
    float *dx, *dy;      /* JSDGrad: like X, either NULL */
};
/* JSD: lpart per row; the loss is gf_cu_loss_reduce(lpart, rows, mean). */
cudaError_t gf_cu_jsd(cudaStream_t s, const struct gf_cu_jsd *j);
/* JSDGrad: dX, dY for dLoss (the rows counted first, with labels). */
cudaError_t gf_cu_jsd_grad(cudaStream_t s, const struct gf_cu_jsd *j);

#ifdef __cplusplus
}
#endif
#endif /* GF_CU_LAUNCH_H */
