/*
 * launch_mla.h — the launchers of matmul.cu (MatMulEpilogue's epilogue,
 * MatMulEpilogueGrad), fused_loss.cu (the cross-entropy rows, JSD) and
 * fused_attn.cu (flash attention forward and backward); internal to
 * kernels/cuda/, plain C, included by both sides like launch.h.  Each
 * launcher enqueues on `s` and returns the launch's cudaError_t; none waits.
 */
#ifndef GF_CU_LAUNCH_MLA_H
#define GF_CU_LAUNCH_MLA_H

#include "launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matmul.cu ---------------------------------------------------------- */

/* Activations, in gf_mme_act_names' order (none relu gelu gelu_tanh silu
 * tanh sigmoid). */
enum gf_cu_mact { GF_CU_MACT_NONE, GF_CU_MACT_RELU, GF_CU_MACT_GELU, GF_CU_MACT_GELU_TANH,
                  GF_CU_MACT_SILU, GF_CU_MACT_TANH, GF_CU_MACT_SIGMOID };

/* y[i] = act(y[i]) + res[offset of i under nd.st[0]] (res NULL: none), n
 * elements of y (dense). */
cudaError_t gf_cu_mme_epi(cudaStream_t s, int act, float *y, const float *res,
                          const struct gf_cu_nd *nd, int64_t n);

/* The 16-bit epilogue: y[i] = round(act(yf[i] + beta bias[st[0] offset of
 * i]) + res[st[1] offset]) in fp32, y of the float type `type` (gf_cu_type)
 * like bias and res; yf: the GEMM's fp32 alpha A'B' (NULL: 0, K = 0), bias
 * and res NULL when absent. */
cudaError_t gf_cu_mme_epi_t(cudaStream_t s, int type, int act, const float *yf,
                            const void *bias, float beta, const void *res,
                            const struct gf_cu_nd *nd, void *y, int64_t n);
/* y = round(beta y) over n elements of the float type `type`. */
cudaError_t gf_cu_scale_t(cudaStream_t s, int type, void *y, float beta, int64_t n);

/* MatMulEpilogueGrad: dz = dy act'(z) over [rows, n] (z: Y with from_y);
 * part: [groups, n] doubles of column sums (NULL: no dBias), groups =
 * gf_cu_colsum_groups(rows). */
int gf_cu_colsum_groups(int64_t rows);
cudaError_t gf_cu_mme_grad(cudaStream_t s, int act, int from_y, const float *dy, const float *z,
                           float *dz, double *part, int64_t rows, int64_t n);
/* The same over tensors of the float type `type` (dz rounded once, the
 * column sums of the unrounded fp32 values). */
cudaError_t gf_cu_mme_grad_t(cudaStream_t s, int type, int act, int from_y, const void *dy,
                             const void *z, void *dz, double *part, int64_t rows, int64_t n);
/* Column sums of x [rows, n] into part [groups, n] doubles (fixed order). */
cudaError_t gf_cu_colsum_part(cudaStream_t s, const float *x, double *part, int64_t rows,
                              int64_t n);
/* out[j] = scale * (acc[j] (NULL: 0) + sum over groups of part[g, j]);
 * acc_out (NULL: none) gets the double sum too. */
cudaError_t gf_cu_colsum_finish(cudaStream_t s, const double *part, int groups, int64_t n,
                                const double *acc, double *acc_out, float *out, float scale);

/* out[j] = round(scale * sum over groups of part[g, j]), out of the float
 * type `type`. */
cudaError_t gf_cu_colsum_finish_t(cudaStream_t s, int type, const double *part, int groups,
                                  int64_t n, void *out, float scale);

/* ---- fused_loss.cu ------------------------------------------------------ */

/* One cross-entropy launch over n_pos positions ("rows" of c classes). */
struct gf_cu_ce {
    int type;            /* gf_cu_type of x, w, loss, logp and g: fp32, fp16 or bf16
                          * (computed in fp32, stored rounded once) */
    const void *x;       /* scores: position p's class k at base(p) + k * stride */
    const void *t;       /* labels (int64 when t64, else int32) */
    int t64;
    const void *w;       /* class weights [c], or NULL */
    int64_t n_pos, c, d; /* d: positions per class plane (1 with shift / rows) */
    int64_t s1;          /* shift: S - 1 (rows of [B, S, C] but each batch's last), else 0 */
    int has_ii;
    int64_t ii;
    int softmax;         /* 0: NLL (x are log-probabilities) */
    void *loss;          /* per-position loss [n_pos] (reduction none), or NULL */
    double *lpart;       /* per-position (loss, weight) pairs [2 n_pos], or NULL */
    void *logp;          /* LogP like x (shift: [n_pos, c]), or NULL */
    void *g;             /* gradient like x (may be x), or NULL */
    uint16_t *gb;        /* or, for fp32 x, the gradient rounded to bf16, like x (a
                          * separate buffer; LinearCrossEntropy's bf16 chunks), or NULL */
    const double *gsum;  /* device: sum of the counted weights (G's mean divisor), or NULL */
    float gscale;        /* G's extra factor */
    int *bad;            /* device: smallest bad label position (atomicMin), or NULL */
    int64_t pos0;        /* added to the positions recorded in *bad */
    int block;           /* threads per position (0: automatic) */
    int cluster;         /* >1: the row in the shared memory of a cluster of this many
                          * blocks (stride 1, no logp) */
};
cudaError_t gf_cu_ce(cudaStream_t s, const struct gf_cu_ce *c);
/* Whether the cluster path can run c (device limits). */
int gf_cu_ce_cluster_ok(const struct gf_cu_ce *c, int cluster);
/* *gsum = sum over the counted positions of their weight (1 without w). */
cudaError_t gf_cu_ce_weights(cudaStream_t s, const struct gf_cu_ce *c, double *gsum);
/* out[0] = sum of lpart's losses (mean: / the sum of its weights), of the
 * float type `type`. */
cudaError_t gf_cu_loss_reduce(cudaStream_t s, const double *lpart, int64_t n, int mean,
                              void *out, int type);
/* Rows of [B, S, C] that are no position (shift): zeros (g fp32, or 16-bit
 * when half). */
cudaError_t gf_cu_ce_zero_rows(cudaStream_t s, void *g, int half, int64_t b, int64_t s_,
                               int64_t c);
/* CrossEntropyGrad: out = g * dl[0] (scalar), or per position: row of
 * position p scaled by dl[p] (d: positions per class plane; s: S with
 * shift, the last row of each batch zero). */
cudaError_t gf_cu_ce_scale(cudaStream_t s, const float *g, const float *dl, float *out,
                           int64_t n, int per_pos, int64_t c, int64_t d, int64_t s_);

/* ---- fused_attn.cu ------------------------------------------------------ */

struct gf_cu_attn {
    int type;             /* gf_cu_type of q, k, v, mask, o, dout, out, dq, dk, dvv: F32,
                           * F16 or BF16 (16-bit: stored so, through the float pointers
                           * below; lse, delta, stats stay fp32) */
    int64_t items, sq, sk, d, dv;
    int tb;               /* K [Sk, D] (else [D, Sk]) */
    float scale;
    int causal;           /* the mask is causal (bottom-right aligned): not read */
    int zero_rows;        /* zero_masked_rows: a row that sees no key gives 0s */
    unsigned char *tiles; /* with a mask in memory: each 64 x 64 tile's class (0 hidden,
                           * 1 mixed, 2 all 0) per distinct [Sq, Sk] slice of the mask
                           * ([B, 1, Sq, Sk]: B of them), then an int flag: the mask is
                           * exactly the causal one (then run as causal); made once per
                           * call (gf_cu_attn_tiles_bytes); NULL: each block reads the
                           * mask tiles itself */
    int warps;            /* per block (knob): 16 query rows (keys in dK, dV's) each; 4 or 8 */
    const float *mask;    /* additive, or NULL */
    int64_t mst_it, mst_i, mst_j; /* its strides: per item (flat; see below), row, column */
    int mrank;            /* batch dims for the mask's item offset */
    int64_t mbd[GF_CU_MAX_RANK], mbs[GF_CU_MAX_RANK];
    const float *q, *k, *v, *o, *dout;
    float *out, *dq, *dk, *dvv;
    float *lse, *delta;   /* backward: [2, items, sq] row max and 1 / sum (the forward's
                           * Stats when have_stats, else found and written by
                           * k_attn_dq), [items, sq] rowsum(dO O) */
    int have_stats;       /* lse holds the forward's Stats */
    float *stats;         /* forward: its Stats output [2, items, sq], or NULL */
};
/* Bytes of a.tiles for these shapes. */
size_t gf_cu_attn_tiles_bytes(const struct gf_cu_attn *a);
/* Whether the head dims fit the kernels. */
int gf_cu_attn_ok(int64_t d, int64_t dv);
cudaError_t gf_cu_attn_fwd(cudaStream_t s, const struct gf_cu_attn *a);
cudaError_t gf_cu_attn_bwd(cudaStream_t s, const struct gf_cu_attn *a);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include <stdbool.h>
struct gf_kernel_args;
/* Host side (matmul.c): row-major C [m, n] (ld n) = alpha op(A) op(B) +
 * beta C through cuBLASLt on the node's stream (fp32; TF32 only when the
 * node's model runs with --precision tf32); A is [m, k]
 * (ta: [k, m]) with row stride lda, B [k, n] (tb: [n, k]) with ldb. */
enum gf_status gf_cu_gemm(const struct gf_kernel_args *a, bool ta, bool tb, int64_t m,
                          int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C);
/* The same with A and B of float dtype dt and C of ct (fp16 / bf16 A, B: fp32
 * accumulation, C rounded once; C fp32 or of A's type, as cuBLASLt allows). */
enum gf_status gf_cu_gemm_t(const struct gf_kernel_args *a, enum gf_dtype dt, enum gf_dtype ct,
                            bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C);
#endif
#endif /* GF_CU_LAUNCH_MLA_H */
