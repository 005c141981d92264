/*
 * reduce.cu — the CUDA reductions (host side: reduce.c): Reduce{Sum,Mean,
 * Max} over any set of axes, and Softmax, LogSoftmax and their gradients
 * along one axis (one block per row), and (launch_fused.h) variadic Sum.
 * A reduction takes one block per output element (thread t takes elements
 * t, t + 256, ..., then a fixed tree), or, where the innermost kept axis is
 * contiguous or at most 16 elements are summed, one thread per output
 * (its elements one after another, as the CPU sums them).
 * fp32 data; sums in double, each in a fixed order, so runs repeat exactly.
 */
#include <math.h>

#include "launch_fused.h"

#define BLOCK 256

static unsigned blocks_for(int64_t n)
{
    return (unsigned)(n < 1 ? 1 : n > 65535 * 32 ? 65535 * 32 : n);
}

/* The block's sum (or max) of v, in a fixed tree; every thread gets it. */
template <typename T, bool MAX>
__device__ T block_all(T v, T *sh)
{
    int l = threadIdx.x;
    sh[l] = v;
    __syncthreads();
    for (int h = BLOCK / 2; h > 0; h /= 2) {
        if (l < h) {
            T a = sh[l], b = sh[l + h];
            sh[l] = MAX ? ((a > b || isnan(a)) ? a : b) : a + b;
        }
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

__global__ void k_reduce(int op, const float *x, float *y, gf_cu_red g)
{
    __shared__ double shd[BLOCK];
    __shared__ float shf[BLOCK];
    for (int64_t o = blockIdx.x; o < g.nout; o += gridDim.x) {
        int64_t base = 0, r = o;
        for (int d = g.nk - 1; d >= 0; d--) {
            base += r % g.kdim[d] * g.kstr[d];
            r /= g.kdim[d];
        }
        double sum = 0;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < g.nred; j += BLOCK) {
            int64_t off = base, q = j;
            for (int d = g.nr - 1; d >= 0; d--) {
                off += q % g.rdim[d] * g.rstr[d];
                q /= g.rdim[d];
            }
            float v = x[off];
            if (op == GF_CU_RED_MAX)
                mx = (v > mx || isnan(v)) ? v : mx;
            else
                sum += (double)v;
        }
        float res;
        if (op == GF_CU_RED_MAX) {
            res = block_all<float, true>(mx, shf);
        } else {
            double t = block_all<double, false>(sum, shd);
            res = (float)(op == GF_CU_RED_MEAN ? t / (double)g.nred : t);
        }
        if (threadIdx.x == 0)
            y[o] = res;
    }
}

/* One thread per output, its elements summed one after another: neighbour
 * threads read neighbour addresses when the innermost kept axis is
 * contiguous (SumToShape of a broadcast gradient, column sums). */
__global__ void k_reduce_rows(int op, const float *x, float *y, gf_cu_red g)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < g.nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = 0, r = o;
        for (int d = g.nk - 1; d >= 0; d--) {
            base += r % g.kdim[d] * g.kstr[d];
            r /= g.kdim[d];
        }
        double sum = 0;
        float mx = -INFINITY;
        int64_t idx[GF_CU_MAX_RANK] = {0}, off = base;
        for (int64_t j = 0; j < g.nred; j++) {
            float v = x[off];
            if (op == GF_CU_RED_MAX)
                mx = (v > mx || isnan(v)) ? v : mx;
            else
                sum += (double)v;
            for (int d = g.nr - 1; d >= 0; d--) { /* odometer over the reduced axes */
                off += g.rstr[d];
                if (++idx[d] < g.rdim[d])
                    break;
                off -= idx[d] * g.rstr[d];
                idx[d] = 0;
            }
        }
        y[o] = op == GF_CU_RED_MAX    ? mx
               : op == GF_CU_RED_MEAN ? (float)(sum / (double)g.nred)
                                      : (float)sum;
    }
}

extern "C" cudaError_t gf_cu_reduce(cudaStream_t s, int op, const float *x, float *y,
                                    const struct gf_cu_red *g)
{
    if (g->nout <= 0)
        return cudaSuccess;
    bool inner_kept = g->nk > 0 && g->kstr[g->nk - 1] == 1;
    if (g->nred <= 16 || (inner_kept && g->nout >= 256)) {
        int64_t blocks = (g->nout + BLOCK - 1) / BLOCK;
        k_reduce_rows<<<(unsigned)(blocks > 65535 * 32 ? 65535 * 32 : blocks), BLOCK, 0, s>>>(
            op, x, y, *g);
    } else {
        k_reduce<<<blocks_for(g->nout), BLOCK, 0, s>>>(op, x, y, *g);
    }
    return cudaGetLastError();
}

/* rows along the axis of [outer, n, inner]: row r starts at
 * (r / inner) * n * inner + r % inner, its elements inner apart */
__device__ __forceinline__ int64_t row_base(int64_t r, int64_t n, int64_t inner)
{
    return r / inner * n * inner + r % inner;
}

__global__ void k_softmax(int lg, const float *x, float *y, int64_t n, int64_t inner,
                          int64_t rows)
{
    __shared__ double shd[BLOCK];
    __shared__ float shf[BLOCK];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t b = row_base(r, n, inner);
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            float v = x[b + j * inner];
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_all<float, true>(m, shf);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK)
            sum += (double)expf(x[b + j * inner] - m);
        sum = block_all<double, false>(sum, shd);
        float f = lg ? (float)log(sum) : (float)(1.0 / sum);
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            float v = x[b + j * inner] - m;
            y[b + j * inner] = lg ? v - f : expf(v) * f;
        }
    }
}

__global__ void k_softmax_grad(int lg, const float *g, const float *y, float *dx, int64_t n,
                               int64_t inner, int64_t rows)
{
    __shared__ double shd[BLOCK];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t b = row_base(r, n, inner);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            int64_t i = b + j * inner;
            sum += lg ? (double)g[i] : (double)g[i] * (double)y[i];
        }
        float s = (float)block_all<double, false>(sum, shd);
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            int64_t i = b + j * inner;
            dx[i] = lg ? g[i] - expf(y[i]) * s : y[i] * (g[i] - s);
        }
    }
}

extern "C" cudaError_t gf_cu_softmax(cudaStream_t s, int log, const float *x, float *y,
                                     int64_t n, int64_t inner, int64_t rows)
{
    if (rows <= 0 || n <= 0)
        return cudaSuccess;
    k_softmax<<<blocks_for(rows), BLOCK, 0, s>>>(log, x, y, n, inner, rows);
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_softmax_grad(cudaStream_t s, int log, const float *g,
                                          const float *y, float *dx, int64_t n, int64_t inner,
                                          int64_t rows)
{
    if (rows <= 0 || n <= 0)
        return cudaSuccess;
    k_softmax_grad<<<blocks_for(rows), BLOCK, 0, s>>>(log, g, y, dx, n, inner, rows);
    return cudaGetLastError();
}

/* ---- Sum ------------------------------------------------------------------------ */

struct sum_src {
    const float *p[4];
};

/* y = ((s0 + s1) + s2) + s3 over nd, in float (the CPU's pairwise folds). */
__global__ void k_sum(sum_src src, int nops, float *y, gf_cu_nd nd, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o[4] = {0, 0, 0, 0}, r = i;
        for (int d = nd.rank - 1; d >= 0; d--) {
            int64_t c = r % nd.dims[d];
            r /= nd.dims[d];
            for (int k = 0; k < 4; k++)
                o[k] += c * nd.st[k][d];
        }
        float v = src.p[0][o[0]];
        for (int k = 1; k < nops; k++)
            v = v + src.p[k][o[k]];
        y[i] = v;
    }
}

extern "C" cudaError_t gf_cu_sum(cudaStream_t s, const float *const *src, int nops, float *y,
                                 const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0 || nops < 1 || nops > 4)
        return n <= 0 ? cudaSuccess : cudaErrorInvalidValue;
    sum_src ss = {{src[0], nops > 1 ? src[1] : src[0], nops > 2 ? src[2] : src[0],
                   nops > 3 ? src[3] : src[0]}};
    int64_t b = (n + BLOCK - 1) / BLOCK;
    unsigned g = (unsigned)(b > 65536 ? 65536 : b);
    k_sum<<<g, BLOCK, 0, s>>>(ss, nops, y, *nd, n);
    return cudaGetLastError();
}
