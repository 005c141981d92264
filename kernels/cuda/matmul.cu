/*
 * matmul.cu — what cuBLASLt cannot do for MatMulEpilogue and its gradient
 * (host side: matmul.c): the epilogue Y = act(Y) + Res where cuBLASLt's
 * fused epilogues do not apply exactly (erf GELU, SiLU, Tanh, Sigmoid, a
 * broadcast residual), and MatMulEpilogueGrad's dZ = dY act'(Z) with the
 * column sums of dZ (dBias) in double partial rows, summed in a fixed order.
 * The activations are computed as the CPU's fused kernels compute them
 * (kernels/cpu/fused.h, fused_grad.c): GELU and its derivatives in double.
 *
 * fp16 / bf16 (storage): the 16-bit epilogue reads the GEMM's fp32 product
 * from a workspace, adds beta Bias, applies the activation and Res in fp32
 * and rounds once to nearest even, as the CPU's MatMulEpilogue does (fp32
 * tile, one narrowing store); the 16-bit gradient computes dZ in fp32,
 * rounds it once and sums the unrounded values into dBias, rounded once.
 */
#include <math.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch_mla.h"
#include "half_io.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

__device__ __forceinline__ float sigm(float x)
{
    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

__device__ __forceinline__ float act_f(int act, float x)
{
    switch (act) {
    case GF_CU_MACT_RELU: return x < 0.0f ? 0.0f : x;
    case GF_CU_MACT_GELU: return (float)(0.5 * (double)x * erfc(-(double)x * 0.70710678118654752440));
    case GF_CU_MACT_GELU_TANH:
        return x / (1.0f + expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
    case GF_CU_MACT_SILU: return x * sigm(x);
    case GF_CU_MACT_TANH: return tanhf(x);
    case GF_CU_MACT_SIGMOID: return sigm(x);
    default: return x;
    }
}

__global__ void k_mme_epi(int act, float *y, const float *res, gf_cu_nd nd, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = act_f(act, y[i]);
        if (res) {
            int64_t off = 0, r = i;
            for (int d = nd.rank - 1; d >= 0; d--) {
                off += r % nd.dims[d] * nd.st[0][d];
                r /= nd.dims[d];
            }
            v = v + res[off];
        }
        y[i] = v;
    }
}

extern "C" cudaError_t gf_cu_mme_epi(cudaStream_t s, int act, float *y, const float *res,
                                     const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    k_mme_epi<<<grid_for(n), BLOCK, 0, s>>>(act, y, res, *nd, n);
    return cudaGetLastError();
}

/* 16-bit storage: load as fp32, store rounded to nearest even once (gf_ld /
 * gf_st: half_io.h). */

__device__ __forceinline__ int64_t nd_off(const gf_cu_nd &nd, int k, int64_t i)
{
    int64_t off = 0;
    for (int d = nd.rank - 1; d >= 0; d--) {
        off += i % nd.dims[d] * nd.st[k][d];
        i /= nd.dims[d];
    }
    return off;
}

template <typename T>
__global__ void k_mme_epi_t(int act, const float *yf, const T *bias, float beta, const T *res,
                            gf_cu_nd nd, T *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = yf ? yf[i] : 0.0f;
        if (bias)
            v = v + beta * gf_ld(bias + nd_off(nd, 0, i));
        v = act_f(act, v);
        if (res)
            v = v + gf_ld(res + nd_off(nd, 1, i));
        gf_st(y + i, v);
    }
}

extern "C" cudaError_t gf_cu_mme_epi_t(cudaStream_t s, int type, int act, const float *yf,
                                       const void *bias, float beta, const void *res,
                                       const struct gf_cu_nd *nd, void *y, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(type, k_mme_epi_t<T><<<grid_for(n), BLOCK, 0, s>>>(
                        act, yf, (const T *)bias, beta, (const T *)res, *nd, (T *)y, n));
    return cudaGetLastError();
}

template <typename T> __global__ void k_scale_t(T *y, float beta, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        gf_st(y + i, beta * gf_ld(y + i));
}

extern "C" cudaError_t gf_cu_scale_t(cudaStream_t s, int type, void *y, float beta, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(type, k_scale_t<T><<<grid_for(n), BLOCK, 0, s>>>((T *)y, beta, n));
    return cudaGetLastError();
}

/* act'(v) (v: Z, or Y with from_y), as fused_grad.c's epi_d. */
__device__ __forceinline__ float act_d(int act, int from_y, float v)
{
    float s;
    switch (act) {
    case GF_CU_MACT_RELU: return v > 0.0f ? 1.0f : 0.0f;
    case GF_CU_MACT_TANH: s = from_y ? v : tanhf(v); return 1.0f - s * s;
    case GF_CU_MACT_SIGMOID: s = from_y ? v : sigm(v); return s * (1.0f - s);
    case GF_CU_MACT_SILU: s = sigm(v); return s + v * s * (1.0f - s);
    case GF_CU_MACT_GELU: {
        double g = v, phi = 0.5 * erfc(-g * 0.70710678118654752440);
        return (float)(phi + g * 0.39894228040143267794 * exp(-0.5 * g * g));
    }
    case GF_CU_MACT_GELU_TANH: {
        const double c = 0.79788456080286535588;
        double g = v, t = 1.0 / (1.0 + exp(-2.0 * c * (g + 0.044715 * g * g * g)));
        return (float)(t + 2.0 * g * t * (1.0 - t) * c * (1.0 + 3.0 * 0.044715 * g * g));
    }
    default: return 1.0f;
    }
}

#define COL_BLOCK 128
#define MAX_GROUPS 512

extern "C" int gf_cu_colsum_groups(int64_t rows)
{
    int64_t g = (rows + 31) / 32;
    return (int)(g < 1 ? 1 : g > MAX_GROUPS ? MAX_GROUPS : g);
}

/* grid (column blocks, groups): group g takes rows [g rpg, (g+1) rpg). */
template <typename T>
__global__ void k_mme_grad(int act, int from_y, const T *dy, const T *z, T *dz,
                           double *part, int64_t rows, int64_t n, int64_t rpg)
{
    int64_t j = (int64_t)blockIdx.x * COL_BLOCK + threadIdx.x;
    if (j >= n)
        return;
    int64_t r0 = blockIdx.y * rpg, r1 = r0 + rpg < rows ? r0 + rpg : rows;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = r * n + j;
        float d = gf_ld(dy + i) * act_d(act, from_y, gf_ld(z + i));
        acc += (double)d;
        gf_st(dz + i, d);
    }
    if (part)
        part[blockIdx.y * n + j] = acc;
}

__global__ void k_colsum(const float *x, double *part, int64_t rows, int64_t n, int64_t rpg)
{
    int64_t j = (int64_t)blockIdx.x * COL_BLOCK + threadIdx.x;
    if (j >= n)
        return;
    int64_t r0 = blockIdx.y * rpg, r1 = r0 + rpg < rows ? r0 + rpg : rows;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++)
        acc += (double)x[r * n + j];
    part[blockIdx.y * n + j] = acc;
}

static dim3 col_grid(int64_t rows, int64_t n, int64_t *rpg)
{
    int g = gf_cu_colsum_groups(rows);
    *rpg = (rows + g - 1) / g;
    int64_t used = *rpg ? (rows + *rpg - 1) / *rpg : 1;
    return dim3((unsigned)((n + COL_BLOCK - 1) / COL_BLOCK), (unsigned)(used < 1 ? 1 : used));
}

extern "C" cudaError_t gf_cu_mme_grad(cudaStream_t s, int act, int from_y, const float *dy,
                                      const float *z, float *dz, double *part, int64_t rows,
                                      int64_t n)
{
    return gf_cu_mme_grad_t(s, GF_CU_F32, act, from_y, dy, z, dz, part, rows, n);
}

extern "C" cudaError_t gf_cu_mme_grad_t(cudaStream_t s, int type, int act, int from_y,
                                        const void *dy, const void *z, void *dz, double *part,
                                        int64_t rows, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    int64_t rpg;
    dim3 g = col_grid(rows, n, &rpg);
    if (rows <= 0) { /* no rows: partials of zero */
        if (part)
            return cudaMemsetAsync(part, 0, (size_t)gf_cu_colsum_groups(rows) * n * 8, s);
        return cudaSuccess;
    }
    if (part) /* groups past the used ones stay zero */
        cudaMemsetAsync(part, 0, (size_t)gf_cu_colsum_groups(rows) * n * 8, s);
    GF_CU_TYPE_SWITCH(type, k_mme_grad<T><<<g, COL_BLOCK, 0, s>>>(act, from_y, (const T *)dy,
                                                          (const T *)z, (T *)dz, part, rows, n,
                                                          rpg));
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_colsum_part(cudaStream_t s, const float *x, double *part,
                                         int64_t rows, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    cudaMemsetAsync(part, 0, (size_t)gf_cu_colsum_groups(rows) * n * 8, s);
    if (rows <= 0)
        return cudaGetLastError();
    int64_t rpg;
    dim3 g = col_grid(rows, n, &rpg);
    k_colsum<<<g, COL_BLOCK, 0, s>>>(x, part, rows, n, rpg);
    return cudaGetLastError();
}

template <typename T>
__global__ void k_colsum_finish(const double *part, int groups, int64_t n, const double *acc,
                                double *acc_out, T *out, float scale)
{
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    double t = acc ? acc[j] : 0.0;
    for (int g = 0; g < groups; g++)
        t += part[(int64_t)g * n + j];
    if (acc_out)
        acc_out[j] = t;
    if (out)
        gf_st(out + j, (float)((double)scale * t));
}

extern "C" cudaError_t gf_cu_colsum_finish(cudaStream_t s, const double *part, int groups,
                                           int64_t n, const double *acc, double *acc_out,
                                           float *out, float scale)
{
    if (n <= 0)
        return cudaSuccess;
    k_colsum_finish<<<grid_for(n), BLOCK, 0, s>>>(part, groups, n, acc, acc_out, out, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_colsum_finish_t(cudaStream_t s, int type, const double *part,
                                             int groups, int64_t n, void *out, float scale)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(type, k_colsum_finish<T><<<grid_for(n), BLOCK, 0, s>>>(
                        part, groups, n, (const double *)NULL, (double *)NULL, (T *)out, scale));
    return cudaGetLastError();
}
