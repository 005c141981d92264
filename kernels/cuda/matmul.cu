/*
 * matmul.cu — what cuBLASLt cannot do for MatMulEpilogue and its gradient
 * (host side: matmul.c): the epilogue Y = act(Y) + Res where cuBLASLt's
 * fused epilogues do not apply exactly (erf GELU, SiLU, Tanh, Sigmoid, a
 * broadcast residual), and MatMulEpilogueGrad's dZ = dY act'(Z) with the
 * column sums of dZ (dBias) in double partial rows, summed in a fixed order.
 * The activations are computed as the CPU's fused kernels compute them
 * (kernels/cpu/fused.h, fused_grad.c): GELU and its derivatives in double.
 */
#include <math.h>

#include "launch_mla.h"

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
__global__ void k_mme_grad(int act, int from_y, const float *dy, const float *z, float *dz,
                           double *part, int64_t rows, int64_t n, int64_t rpg)
{
    int64_t j = (int64_t)blockIdx.x * COL_BLOCK + threadIdx.x;
    if (j >= n)
        return;
    int64_t r0 = blockIdx.y * rpg, r1 = r0 + rpg < rows ? r0 + rpg : rows;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = r * n + j;
        float d = dy[i] * act_d(act, from_y, z[i]);
        acc += (double)d;
        dz[i] = d;
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
    k_mme_grad<<<g, COL_BLOCK, 0, s>>>(act, from_y, dy, z, dz, part, rows, n, rpg);
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

__global__ void k_colsum_finish(const double *part, int groups, int64_t n, const double *acc,
                                double *acc_out, float *out, float scale)
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
        out[j] = (float)((double)scale * t);
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
