/*
 * launch_fused.h — the launchers of fused_norm.cu, fused_act.cu and of the
 * plain ops added to layout.cu and reduce.cu for issue 14 (Pad, GatherND,
 * GatherGrad, SliceGrad, Sum, LayerNormalization and its Grad); internal
 * to kernels/cuda/, plain C, included by both sides like launch.h.  Each
 * launcher enqueues on `s` and returns the launch's cudaError_t; none waits.
 */
#ifndef GF_CU_LAUNCH_FUSED_H
#define GF_CU_LAUNCH_FUSED_H

#include "launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fused_norm.cu ------------------------------------------------------ */

/* flags of struct gf_cu_norm */
#define GF_CU_NORM_RMS 1     /* RMSNorm forms (else LayerNorm) */
#define GF_CU_NORM_ADD 2     /* S = X + R is normalized (the Add forms) */
#define GF_CU_NORM_EPS_OUT 4 /* RMS: 1/(sqrt(ms) + eps) */
#define GF_CU_NORM_ONNX 8    /* ONNX LayerNormalization: Y in double from the
                              * unrounded 1/std; its Grad: dY W in double */
#define GF_CU_NORM_VEC 16    /* 4-element vectors: n % 4 == 0, every pointer 16-byte aligned */

/* Rows of n elements of the float type `type` (gf_cu_type: F32, F16,
 * BF16; 16-bit computed in fp32, each output rounded once): X, R, W, B,
 * Y, S, dY, dX, dW, dB of that type, Mean and InvStdDev fp32.  Forward:
 * X (+ R) -> Y, S?, Mean?, InvStdDev?.  Backward: dY, X -> dX and the
 * partial rows of dW (and dB) in part.  W, B: n values each (expanded by
 * the host when they broadcast), NULL when absent (1 and 0); woff is
 * added to W (in double, as the CPU's expansion).  Sums are in double. */
struct gf_cu_norm {
    int flags, type;
    int ltype;                        /* R, Y (forward), dY (backward): type, or the
                                       * mixed form's fp16 / bf16 with an fp32 type */
    int64_t rows, n;
    float eps, woff;
    const void *x, *r, *w, *b;        /* forward: X, R?, W?, B? */
    void *y, *s;                      /* forward outputs (NULL: not wanted) */
    float *mean, *istd;
    const void *dy;                   /* backward: dY (X in x) */
    void *dx;
    const void *g;                    /* RMSNormGrad: G added to dX (type), or NULL */
    void *dxl;                        /* RMSNormGrad: dX again in ltype, or NULL */
    const float *mean_in, *istd_in;   /* LayerNormGrad: the forward's, or NULL */
    double *part;                     /* [parts, n] dW partial rows (then dB's); NULL: none */
    void *dw, *db;                    /* NULL: not wanted */
    /* geometry (gf_cu_norm_plan) */
    int block, vpt, grid;
};

/* Knob values of the norm kernels: threads per row (0: automatic), blocks
 * per SM of the backward's persistent grid (0: as many as fit). */
#define GF_CU_NORM_BLOCKS {0, 128, 256, 512, 1024}
#define GF_CU_NORM_BPS {0, 1, 2, 4, 8}

/* Sets p->block, p->vpt (4-element vectors a thread keeps; 0: the rows
 * re-read) and for the backward (grad) p->grid, the number of partial
 * rows, from p->flags, p->type, p->n and p->rows; sm_count, max_threads: the
 * device's.  Deterministic: workspace() and run() agree. */
void gf_cu_norm_plan(struct gf_cu_norm *p, int grad, int want_block, int want_bps, int sm_count,
                     int max_threads);
cudaError_t gf_cu_norm_fwd(cudaStream_t s, const struct gf_cu_norm *p);
/* dX, then dW (and dB for LayerNorm) from the partial rows. */
cudaError_t gf_cu_norm_grad(cudaStream_t s, const struct gf_cu_norm *p);

/* ---- fused_act.cu --------------------------------------------------------- */

enum gf_cu_act { GF_CU_ACT_SILU, GF_CU_ACT_GELU, GF_CU_ACT_GELU_TANH }; /* = enum gf_act */

/* Every operand of these is of the float type `type` (gf_cu_type: F32,
 * F16, BF16; 16-bit computed in fp32, stored rounded to nearest even). */

/* Y = f(G) (* U when gated) over nd (st[0]: G, st[1]: U), n elements;
 * dense: same shapes (nd unused; vec: every pointer 16-byte aligned, 16
 * bytes a load). */
cudaError_t gf_cu_glu(cudaStream_t s, int act, int gated, int type, const void *g,
                      const void *u, void *y, const struct gf_cu_nd *nd, int64_t n, int dense,
                      int vec);
/* dG?, dU? of Y = f(G) U (dY, G, U of one shape). */
cudaError_t gf_cu_glu_grad(cudaStream_t s, int act, int type, const void *dy, const void *g,
                           const void *u, void *dg, void *du, int64_t n, int vec);

/* RoPE (grad 0) / RoPEGrad (grad 1) of rows of d = 2h: the rows' leading
 * axes (merged) with the strides of Cos (st[0]) and Sin (st[1]) over
 * them, and their inner strides lc, ls (0 or 1).  X and Y of `type`, Cos
 * and Sin of ctype (type, or F32 with a 16-bit type). */
cudaError_t gf_cu_rope(cudaStream_t s, int grad, int type, int ctype, const void *x,
                       const void *cs, const void *sn, void *y, int64_t rows, int64_t h,
                       const struct gf_cu_nd *lead, int64_t lc, int64_t ls);

/* ---- layout.cu (the additions) ------------------------------------------- */

/* Pad: y [dims] from x: per axis the output coordinate minus lead[d] is
 * inside [0, keep[d]) (then x at crop[d] + it, strides sx), else by mode
 * (0 constant: fill, 1 reflect, 2 edge, 3 wrap). */
struct gf_cu_pad_geom {
    int rank, mode;
    int64_t dims[GF_CU_MAX_RANK], lead[GF_CU_MAX_RANK], crop[GF_CU_MAX_RANK];
    int64_t keep[GF_CU_MAX_RANK], sx[GF_CU_MAX_RANK];
    uint64_t fill; /* the fill value's bytes */
};
cudaError_t gf_cu_pad(cudaStream_t s, int size, const void *x, void *y,
                      const struct gf_cu_pad_geom *p, int64_t n);
/* GatherND: y[t * slice + j] = x[off[t] + j] (off: one per tuple, device). */
cudaError_t gf_cu_gather_nd(cudaStream_t s, int size, const void *x, const int64_t *off,
                            void *y, int64_t slice, int64_t n);
/* GatherGrad: y [pre, na, post] = 0, then y[p, k, q] += g[p, i, q] for every
 * i with index k (ind: ni int32 or int64 indices on the device, negative
 * from the end), in increasing i; the lists are made on the device in ws
 * (gf_cu_gather_grad_workspace(ni, na) bytes: a stable radix sort).  An
 * index out of range is skipped, its position atomicMin'd into flag (when
 * not NULL).  ni and na below 2^31.  g and y of the float type `type`
 * (gf_cu_type: fp16 / bf16 summed in fp32, y rounded once). */
size_t gf_cu_gather_grad_workspace(int64_t ni, int64_t na);
cudaError_t gf_cu_gather_grad(cudaStream_t s, int type, const void *g, const void *ind, int i64,
                              void *y, int64_t pre, int64_t ni, int64_t na, int64_t post,
                              void *ws, int *flag);
/* SliceGrad: y (the data's shape, dims) = 0 but on the slice's grid (per
 * axis first + q step, q < gdims) where it takes g's element. */
struct gf_cu_sg_geom {
    int rank;
    int64_t dims[GF_CU_MAX_RANK], first[GF_CU_MAX_RANK], step[GF_CU_MAX_RANK];
    int64_t gdims[GF_CU_MAX_RANK];
};
cudaError_t gf_cu_slice_grad(cudaStream_t s, int size, const void *g, void *y,
                             const struct gf_cu_sg_geom *p, int64_t n);

/* ---- reduce.cu (the additions) ------------------------------------------- */

/* Sum: y = a + b (+ c + d) over nd (st[k]: operand k's strides), k < nops
 * operands added left to right in float (of the float type `type`: each
 * partial sum rounded to it, as the CPU's folds into its output). */
cudaError_t gf_cu_sum(cudaStream_t s, int type, const void *const *src, int nops, void *y,
                      const struct gf_cu_nd *nd, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* GF_CU_LAUNCH_FUSED_H */
