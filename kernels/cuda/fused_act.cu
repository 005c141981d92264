/*
 * fused_act.cu — SwiGLU, GeGLU, SiLU, Gelu (fused), their gradients, RoPE
 * and RoPEGrad (host side: fused_act.c; definitions: kernels/cpu/fused_act.c
 * and fused_grad.c).  Elementwise kernels are grid-stride, float4 where
 * the operands are dense (n % 4 elements left to the first threads), with
 * 64-bit indices.  Every element is read once and written once; Y may be
 * the memory of an input (each element is read before it is written, by
 * the same thread).  GeGLU's gradient is computed in double, as the CPU's.
 */
#include <math.h>

#include "launch_fused.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 132 * 16 ? 132 * 16 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

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

__global__ void k_glu_dense(int act, int gated, const float *g, const float *u, float *y,
                            int64_t n)
{
    GRID_LOOP(i, n)
    {
        float a = act_f(act, g[i]);
        y[i] = gated ? a * u[i] : a;
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

__global__ void k_glu_bcast(int act, int gated, const float *g, const float *u, float *y,
                            gf_cu_nd nd, int64_t n)
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
        float a = act_f(act, g[og]);
        y[i] = gated ? a * u[ou] : a;
    }
}

extern "C" cudaError_t gf_cu_glu(cudaStream_t s, int act, int gated, const float *g,
                                 const float *u, float *y, const struct gf_cu_nd *nd, int64_t n,
                                 int dense, int vec)
{
    if (n <= 0)
        return cudaSuccess;
    if (!dense) {
        k_glu_bcast<<<grid_for(n), BLOCK, 0, s>>>(act, gated, g, u, y, *nd, n);
    } else if (vec) {
        int64_t nv = n / 4, tail = n - nv * 4;
        if (nv)
            k_glu_vec<<<grid_for(nv), BLOCK, 0, s>>>(act, gated, (const float4 *)g,
                                                     (const float4 *)u, (float4 *)y, nv);
        if (tail)
            k_glu_dense<<<1, 32, 0, s>>>(act, gated, g + nv * 4, gated ? u + nv * 4 : u,
                                         y + nv * 4, tail);
    } else {
        k_glu_dense<<<grid_for(n), BLOCK, 0, s>>>(act, gated, g, u, y, n);
    }
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

__global__ void k_glu_grad(int act, const float *dy, const float *g, const float *u, float *dg,
                           float *du, int64_t n)
{
    GRID_LOOP(i, n)
    {
        float a, b;
        glu_grad1(act, dy[i], g[i], u[i], &a, &b);
        if (dg)
            dg[i] = a;
        if (du)
            du[i] = b;
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

extern "C" cudaError_t gf_cu_glu_grad(cudaStream_t s, int act, const float *dy, const float *g,
                                      const float *u, float *dg, float *du, int64_t n, int vec)
{
    if (n <= 0)
        return cudaSuccess;
    int64_t nv = vec ? n / 4 : 0, tail = n - nv * 4;
    if (nv) {
        const float4 *a = (const float4 *)dy, *b = (const float4 *)g, *c = (const float4 *)u;
        float4 *o = (float4 *)dg, *p = (float4 *)du;
        unsigned gr = grid_for(nv);
        if (act == GF_CU_ACT_SILU)
            k_glu_grad_vec<GF_CU_ACT_SILU><<<gr, BLOCK, 0, s>>>(a, b, c, o, p, nv);
        else if (act == GF_CU_ACT_GELU)
            k_glu_grad_vec<GF_CU_ACT_GELU><<<gr, BLOCK, 0, s>>>(a, b, c, o, p, nv);
        else
            k_glu_grad_vec<GF_CU_ACT_GELU_TANH><<<gr, BLOCK, 0, s>>>(a, b, c, o, p, nv);
    }
    if (tail) {
        int64_t o = nv * 4;
        k_glu_grad<<<grid_for(tail), BLOCK, 0, s>>>(act, dy + o, g + o, u + o, dg ? dg + o : dg,
                                                    du ? du + o : du, tail);
    }
    return cudaGetLastError();
}

/* ---- RoPE -------------------------------------------------------------------------- */

/* Pair (j, j + h) of a row: a = x[j], b = x[j + h]
 *   RoPE:     y[j] = a c[j] - b s[j],      y[j + h] = b c[j + h] + a s[j + h]
 *   RoPEGrad: y[j] = a c[j] + b s[j + h],  y[j + h] = b c[j + h] - a s[j] */
__global__ void k_rope(int grad, const float *x, const float *cs, const float *sn, float *y,
                       int64_t rows, int64_t h, gf_cu_nd lead, int64_t lc, int64_t ls)
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
        float a = x[base + j], b = x[base + j + h];
        float c0 = cs[oc + j * lc], c1 = cs[oc + (j + h) * lc];
        float s0 = sn[os + j * ls], s1 = sn[os + (j + h) * ls];
        if (!grad) {
            y[base + j] = a * c0 - b * s0;
            y[base + j + h] = b * c1 + a * s1;
        } else {
            y[base + j] = a * c0 + b * s1;
            y[base + j + h] = b * c1 - a * s0;
        }
    }
}

extern "C" cudaError_t gf_cu_rope(cudaStream_t s, int grad, const float *x, const float *cs,
                                  const float *sn, float *y, int64_t rows, int64_t h,
                                  const struct gf_cu_nd *lead, int64_t lc, int64_t ls)
{
    if (rows <= 0 || h <= 0)
        return cudaSuccess;
    k_rope<<<grid_for(rows * h), BLOCK, 0, s>>>(grad, x, cs, sn, y, rows, h, *lead, lc, ls);
    return cudaGetLastError();
}
