/*
 * fused_act.cu — SwiGLU, GeGLU, SiLU, Gelu (fused), their gradients, RoPE
 * and RoPEGrad (host side: fused_act.c; definitions: kernels/cpu/fused_act.c
 * and fused_grad.c).  Elementwise kernels are grid-stride, float4 where
 * the operands are dense (n % 4 elements left to the first threads), with
 * 64-bit indices.  Every element is read once and written once; Y may be
 * the memory of an input (each element is read before it is written, by
 * the same thread).  GeGLU's gradient is computed in double, as the CPU's.
 *
 * fp16 / bf16 storage: every kernel is a template over the storage type T;
 * an element is widened to fp32, computed as the fp32 kernel computes it,
 * and stored rounded to nearest even once, as the CPU's half kernels
 * (kernels/cpu/half.c) do.  The dense 16-bit kernels move 8 elements a
 * load (16 bytes, as float4 does for fp32), n % 8 left to a tail launch.
 * The fp32 instances are the fp32 kernels as they were.
 */
#include <math.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch_fused.h"
#include "half_io.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 132 * 16 ? 132 * 16 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- storage types -------------------------------------------------------------- */
/* gf_ld / gf_st / gf_round: half_io.h */

/* 8 16-bit elements of the 16-byte vector i, widened / rounded. */
template <typename T> __device__ __forceinline__ void ld8(const T *p, int64_t i, float *f)
{
    uint4 raw = ((const uint4 *)p)[i];
    const T *h = (const T *)&raw;
#pragma unroll
    for (int k = 0; k < 8; k++)
        f[k] = gf_ld(h + k);
}

template <typename T> __device__ __forceinline__ void st8(T *p, int64_t i, const float *f)
{
    uint4 raw;
    T *h = (T *)&raw;
#pragma unroll
    for (int k = 0; k < 8; k++)
        gf_st(h + k, f[k]);
    ((uint4 *)p)[i] = raw;
}

/* ---- activations ---------------------------------------------------------------- */

__device__ __forceinline__ float sigmoidf(float x)
{
    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

/* f(x): x sigmoid(x); x Phi(x) as x/2 erfc(-x/sqrt 2) (precise for x << 0);
 * the tanh form as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). */
__device__ __forceinline__ float act_f(int act, float x)
{
    if (act == GF_CU_ACT_SILU)
        return x * sigmoidf(x);
    if (act == GF_CU_ACT_GELU)
        return x * (0.5f * erfcf(x * -0.70710678118654752f));
    return x * sigmoidf(1.5957691216057308f * (x + 0.044715f * x * x * x));
}

template <typename T>
__global__ void k_glu_dense(int act, int gated, const T *g, const T *u, T *y, int64_t n)
{
    GRID_LOOP(i, n)
    {
        float a = act_f(act, gf_ld(g + i));
        gf_st(y + i, gated ? a * gf_ld(u + i) : a);
    }
}

__global__ void k_glu_vec(int act, int gated, const float4 *g, const float4 *u, float4 *y,
                          int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float4 v = g[i], o;
        o.x = act_f(act, v.x);
        o.y = act_f(act, v.y);
        o.z = act_f(act, v.z);
        o.w = act_f(act, v.w);
        if (gated) {
            float4 w = u[i];
            o.x = o.x * w.x;
            o.y = o.y * w.y;
            o.z = o.z * w.z;
            o.w = o.w * w.w;
        }
        y[i] = o;
    }
}

/* 16-bit: 8 elements (16 bytes) a vector. */
template <typename T>
__global__ void k_glu_vec8(int act, int gated, const T *g, const T *u, T *y, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float v[8], w[8];
        ld8(g, i, v);
        if (gated)
            ld8(u, i, w);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float a = act_f(act, v[k]);
            v[k] = gated ? a * w[k] : a;
        }
        st8(y, i, v);
    }
}

template <typename T>
__global__ void k_glu_bcast(int act, int gated, const T *g, const T *u, T *y, gf_cu_nd nd,
                            int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t r = i, og = 0, ou = 0;
        for (int d = nd.rank - 1; d >= 0; d--) {
            int64_t c = r % nd.dims[d];
            r /= nd.dims[d];
            og += c * nd.st[0][d];
            ou += c * nd.st[1][d];
        }
        float a = act_f(act, gf_ld(g + og));
        gf_st(y + i, gated ? a * gf_ld(u + ou) : a);
    }
}

template <typename T>
static void glu_dense(cudaStream_t s, int act, int gated, const T *g, const T *u, T *y,
                      int64_t n, int vec)
{
    const int w = sizeof(T) == 4 ? 4 : 8; /* elements of a 16-byte vector */
    int64_t nv = vec ? n / w : 0, tail = n - nv * w;
    if (nv) {
        if constexpr (sizeof(T) == 4)
            k_glu_vec<<<grid_for(nv), BLOCK, 0, s>>>(act, gated, (const float4 *)g,
                                                     (const float4 *)u, (float4 *)y, nv);
        else
            k_glu_vec8<T><<<grid_for(nv), BLOCK, 0, s>>>(act, gated, g, u, y, nv);
    }
    if (tail) {
        int64_t o = nv * w;
        k_glu_dense<T><<<nv ? 1 : grid_for(tail), nv ? 32 : BLOCK, 0, s>>>(
            act, gated, g + o, gated ? u + o : u, y + o, tail);
    }
}

extern "C" cudaError_t gf_cu_glu(cudaStream_t s, int act, int gated, int type, const void *g,
                                 const void *u, void *y, const struct gf_cu_nd *nd, int64_t n,
                                 int dense, int vec)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(type, {
        const T *gt = (const T *)g, *ut = (const T *)u;
        T *yt = (T *)y;
        if (!dense)
            k_glu_bcast<T><<<grid_for(n), BLOCK, 0, s>>>(act, gated, gt, ut, yt, *nd, n);
        else
            glu_dense<T>(s, act, gated, gt, ut, yt, n, vec);
    })
    return cudaGetLastError();
}

/* ---- gradients ------------------------------------------------------------------ */

/* One element of the gradient of Y = f(G) U, as kernels/cpu/fused_grad.c:
 *   SwiGLU (float): s = sigmoid(G), gs = G s, dU = dY gs, dG = dY U (s + gs (1 - s))
 *   GeGLU (double): dU = dY (float)gelu(G), dG = (float)(dY U gelu'(G)) */
__device__ __forceinline__ void glu_grad1(int act, float dy, float g, float u, float *dg,
                                          float *du)
{
    if (act == GF_CU_ACT_SILU) {
        float s = sigmoidf(g), gs = g * s;
        *du = dy * gs;
        *dg = dy * u * (s + gs * (1.0f - s));
        return;
    }
    double x = g, ge, d;
    if (act == GF_CU_ACT_GELU) {
        double phi_c = 0.5 * erfc(-x * 0.70710678118654752440);
        ge = x * phi_c;
        d = phi_c + x * 0.39894228040143267794 * exp(-0.5 * x * x);
    } else {
        const double c = 0.79788456080286535588;
        double sg = 1.0 / (1.0 + exp(-2.0 * c * (x + 0.044715 * x * x * x)));
        ge = x * sg;
        d = sg + 2.0 * x * sg * (1.0 - sg) * c * (1.0 + 3.0 * 0.044715 * x * x);
    }
    *du = dy * (float)ge;
    *dg = (float)((double)dy * (double)u * d);
}

template <typename T>
__global__ void k_glu_grad(int act, const T *dy, const T *g, const T *u, T *dg, T *du,
                           int64_t n)
{
    GRID_LOOP(i, n)
    {
        float a, b;
        glu_grad1(act, gf_ld(dy + i), gf_ld(g + i), gf_ld(u + i), &a, &b);
        if (dg)
            gf_st(dg + i, a);
        if (du)
            gf_st(du + i, b);
    }
}

template <int ACT>
__global__ void k_glu_grad_vec(const float4 *dy, const float4 *g, const float4 *u, float4 *dg,
                               float4 *du, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float4 d = dy[i], x = g[i], w = u[i], a, b;
        glu_grad1(ACT, d.x, x.x, w.x, &a.x, &b.x);
        glu_grad1(ACT, d.y, x.y, w.y, &a.y, &b.y);
        glu_grad1(ACT, d.z, x.z, w.z, &a.z, &b.z);
        glu_grad1(ACT, d.w, x.w, w.w, &a.w, &b.w);
        if (dg)
            dg[i] = a;
        if (du)
            du[i] = b;
    }
}

/* 16-bit: 8 elements a vector. */
template <int ACT, typename T>
__global__ void k_glu_grad_vec8(const T *dy, const T *g, const T *u, T *dg, T *du, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float d[8], x[8], w[8], a[8], b[8];
        ld8(dy, i, d);
        ld8(g, i, x);
        ld8(u, i, w);
#pragma unroll
        for (int k = 0; k < 8; k++)
            glu_grad1(ACT, d[k], x[k], w[k], &a[k], &b[k]);
        if (dg)
            st8(dg, i, a);
        if (du)
            st8(du, i, b);
    }
}

template <int ACT, typename T>
static void glu_grad_vec(cudaStream_t s, const T *dy, const T *g, const T *u, T *dg, T *du,
                         int64_t nv)
{
    unsigned gr = grid_for(nv);
    if constexpr (sizeof(T) == 4)
        k_glu_grad_vec<ACT><<<gr, BLOCK, 0, s>>>((const float4 *)dy, (const float4 *)g,
                                                  (const float4 *)u, (float4 *)dg,
                                                  (float4 *)du, nv);
    else
        k_glu_grad_vec8<ACT, T><<<gr, BLOCK, 0, s>>>(dy, g, u, dg, du, nv);
}

template <typename T>
static void glu_grad(cudaStream_t s, int act, const T *dy, const T *g, const T *u, T *dg, T *du,
                     int64_t n, int vec)
{
    const int w = sizeof(T) == 4 ? 4 : 8; /* elements of a 16-byte vector */
    int64_t nv = vec ? n / w : 0, tail = n - nv * w;
    if (nv) {
        if (act == GF_CU_ACT_SILU)
            glu_grad_vec<GF_CU_ACT_SILU, T>(s, dy, g, u, dg, du, nv);
        else if (act == GF_CU_ACT_GELU)
            glu_grad_vec<GF_CU_ACT_GELU, T>(s, dy, g, u, dg, du, nv);
        else
            glu_grad_vec<GF_CU_ACT_GELU_TANH, T>(s, dy, g, u, dg, du, nv);
    }
    if (tail) {
        int64_t o = nv * w;
        k_glu_grad<T><<<grid_for(tail), BLOCK, 0, s>>>(act, dy + o, g + o, u + o,
                                                       dg ? dg + o : dg, du ? du + o : du,
                                                       tail);
    }
}

extern "C" cudaError_t gf_cu_glu_grad(cudaStream_t s, int act, int type, const void *dy,
                                      const void *g, const void *u, void *dg, void *du,
                                      int64_t n, int vec)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(type, glu_grad<T>(s, act, (const T *)dy, (const T *)g, (const T *)u, (T *)dg,
                                  (T *)du, n, vec))
    return cudaGetLastError();
}

/* ---- RoPE -------------------------------------------------------------------------- */

/* Pair (j, j + h) of a row: a = x[j], b = x[j + h]
 *   RoPE:     y[j] = a c[j] - b s[j],      y[j + h] = b c[j + h] + a s[j + h]
 *   RoPEGrad: y[j] = a c[j] + b s[j + h],  y[j + h] = b c[j + h] - a s[j]
 * X and Y of one storage type T, Cos and Sin of T or fp32 (C; the shared
 * check's rule), computed in fp32 and Y rounded once. */
template <typename T, typename C>
__global__ void k_rope(int grad, const T *x, const C *cs, const C *sn, T *y, int64_t rows,
                       int64_t h, gf_cu_nd lead, int64_t lc, int64_t ls)
{
    GRID_LOOP(id, rows * h)
    {
        int64_t row = id / h, j = id % h, r = row, oc = 0, os = 0;
        for (int d = lead.rank - 1; d >= 0; d--) {
            int64_t c = r % lead.dims[d];
            r /= lead.dims[d];
            oc += c * lead.st[0][d];
            os += c * lead.st[1][d];
        }
        int64_t base = row * 2 * h;
        float a = gf_ld(x + base + j), b = gf_ld(x + base + j + h);
        float c0 = gf_ld(cs + oc + j * lc), c1 = gf_ld(cs + oc + (j + h) * lc);
        float s0 = gf_ld(sn + os + j * ls), s1 = gf_ld(sn + os + (j + h) * ls);
        if (!grad) {
            gf_st(y + base + j, a * c0 - b * s0);
            gf_st(y + base + j + h, b * c1 + a * s1);
        } else {
            gf_st(y + base + j, a * c0 + b * s1);
            gf_st(y + base + j + h, b * c1 - a * s0);
        }
    }
}

/* k_rope by 8 pairs a thread (j, j + 1, ..., j + 7 and their partners):
 * h a multiple of 8, Cos and Sin contiguous along the row (lc = ls = 1),
 * every lead stride a multiple of 8, the pointers 16-byte aligned
 * (rope8's test): the same products, in 16-byte loads and stores, the
 * offsets once per 8 pairs in 32-bit arithmetic (the launcher checks that
 * they fit). */
template <typename T, typename C>
__global__ void k_rope8(int grad, const T *x, const C *cs, const C *sn, T *y, int rows, int h,
                        gf_cu_nd lead)
{
    int h8 = h / 8;
    for (int id = blockIdx.x * blockDim.x + threadIdx.x; id < rows * h8;
         id += gridDim.x * blockDim.x) {
        int row = id / h8, j = id % h8 * 8, r = row, oc = 0, os = 0;
        for (int d = lead.rank - 1; d >= 0; d--) {
            int c = r % (int)lead.dims[d];
            r /= (int)lead.dims[d];
            oc += c * (int)lead.st[0][d];
            os += c * (int)lead.st[1][d];
        }
        int base = row * 2 * h;
        float a[8], b[8], c0[8], c1[8], s0[8], s1[8], u[8], w[8];
        gf_ld8f(x + base + j, a);
        gf_ld8f(x + base + j + h, b);
        gf_ld8f(cs + oc + j, c0);
        gf_ld8f(cs + oc + j + h, c1);
        gf_ld8f(sn + os + j, s0);
        gf_ld8f(sn + os + j + h, s1);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (!grad) {
                u[k] = a[k] * c0[k] - b[k] * s0[k];
                w[k] = b[k] * c1[k] + a[k] * s1[k];
            } else {
                u[k] = a[k] * c0[k] + b[k] * s1[k];
                w[k] = b[k] * c1[k] - a[k] * s0[k];
            }
        }
        gf_st8f(y + base + j, u);
        gf_st8f(y + base + j + h, w);
    }
}

/* Whether k_rope8 takes the call. */
static bool rope8(const void *x, const void *cs, const void *sn, const void *y, int64_t rows,
                  int64_t h, const struct gf_cu_nd *lead, int64_t lc, int64_t ls)
{
    if (h % 8 || lc != 1 || ls != 1 || !gf_al16(x) || !gf_al16(cs) || !gf_al16(sn) ||
        !gf_al16(y) || rows * 2 * h >= INT32_MAX)
        return false;
    int64_t far[2] = {h * 2, h * 2};
    for (int d = 0; d < lead->rank; d++)
        for (int k = 0; k < 2; k++) {
            if (lead->st[k][d] % 8)
                return false;
            far[k] += (lead->dims[d] - 1) * lead->st[k][d];
        }
    return far[0] < INT32_MAX && far[1] < INT32_MAX;
}

extern "C" cudaError_t gf_cu_rope(cudaStream_t s, int grad, int type, int ctype,
                                  const void *x, const void *cs, const void *sn, void *y,
                                  int64_t rows, int64_t h, const struct gf_cu_nd *lead,
                                  int64_t lc, int64_t ls)
{
    if (rows <= 0 || h <= 0)
        return cudaSuccess;
    if (rope8(x, cs, sn, y, rows, h, lead, lc, ls)) {
        unsigned g = grid_for(rows * (h / 8));
        if (ctype == GF_CU_F32 && type != GF_CU_F32) {
            GF_CU_TYPE_SWITCH(type, k_rope8<T, float><<<g, BLOCK, 0, s>>>(
                                  grad, (const T *)x, (const float *)cs, (const float *)sn,
                                  (T *)y, (int)rows, (int)h, *lead))
        } else {
            GF_CU_TYPE_SWITCH(type, k_rope8<T, T><<<g, BLOCK, 0, s>>>(
                                  grad, (const T *)x, (const T *)cs, (const T *)sn, (T *)y,
                                  (int)rows, (int)h, *lead))
        }
        return cudaGetLastError();
    }
    if (ctype == GF_CU_F32 && type != GF_CU_F32) { /* 16-bit X, fp32 tables */
        GF_CU_TYPE_SWITCH(type, k_rope<T, float><<<grid_for(rows * h), BLOCK, 0, s>>>(
                              grad, (const T *)x, (const float *)cs, (const float *)sn,
                              (T *)y, rows, h, *lead, lc, ls))
    } else {
        GF_CU_TYPE_SWITCH(type, k_rope<T, T><<<grid_for(rows * h), BLOCK, 0, s>>>(
                              grad, (const T *)x, (const T *)cs, (const T *)sn, (T *)y, rows,
                              h, *lead, lc, ls))
    }
    return cudaGetLastError();
}
