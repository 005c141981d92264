/*
 * reduce.cu — the CUDA reductions (host side: reduce.c): Reduce{Sum,Mean,
 * Max} over any set of axes, and Softmax, LogSoftmax and their gradients
 * along one axis (one block per row), and (launch_fused.h) variadic Sum.
 * A reduction takes one block per output element (thread t takes elements
 * t, t + 256, ..., then a fixed tree), or, where the innermost kept axis is
 * contiguous or at most 16 elements are summed, one thread per output
 * (its elements one after another, as the CPU sums them).
 * fp32 data, or fp16 / bf16 storage (half_io.h: loaded as fp32, computed as
 * fp32 data is, stored rounded to nearest even once, as the CPU's 16-bit
 * nodes); sums in double, each in a fixed order, so runs repeat exactly.
 */
#include <math.h>

#include "half_io.h"
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

template <typename T>
__global__ void k_reduce(int op, const T *x, T *y, gf_cu_red g)
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
            float v = gf_ld(x + off);
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
            gf_st(y + o, res);
    }
}

/* One thread per output, its elements summed one after another: neighbour
 * threads read neighbour addresses when the innermost kept axis is
 * contiguous (SumToShape of a broadcast gradient, column sums). */
template <typename T, typename I>
__global__ void k_reduce_rows(int op, const T *x, T *y, gf_cu_red g)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < g.nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        I base = 0, r = (I)o; /* I: 32-bit where every offset fits, cheaper divisions */
        for (int d = g.nk - 1; d >= 0; d--) {
            base += r % (I)g.kdim[d] * (I)g.kstr[d];
            r /= (I)g.kdim[d];
        }
        double sum = 0;
        float mx = -INFINITY;
        int64_t idx[GF_CU_MAX_RANK] = {0}, off = base;
        for (int64_t j = 0; j < g.nred; j++) {
            float v = gf_ld(x + off);
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
        gf_st(y + o, op == GF_CU_RED_MAX    ? mx
                     : op == GF_CU_RED_MEAN ? (float)(sum / (double)g.nred)
                                            : (float)sum);
    }
}

/* k_reduce_rows with one reduced axis (stride g.rstr[0]) and 8 outputs a
 * thread, in 16-byte loads and stores: the innermost kept axis contiguous
 * with a length, and every stride, a multiple of 8 (rows8's test).  The
 * same sums (double) and maxima, element by element, as k_reduce_rows:
 * GQA's SumToShape of the expanded K, V gradients, the column sums of a
 * bias gradient. */
template <typename T>
__global__ void k_reduce_rows8(int op, const T *x, T *y, gf_cu_red g)
{
    for (int64_t o8 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o8 < g.nout / 8;
         o8 += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = 0, r = o8 * 8;
        for (int d = g.nk - 1; d >= 0; d--) {
            base += r % g.kdim[d] * g.kstr[d];
            r /= g.kdim[d];
        }
        double sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float mx[8], v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            mx[k] = -INFINITY;
        const T *p = x + base;
        for (int64_t j = 0; j < g.nred; j++, p += g.rstr[0]) {
            gf_ld8f(p, v);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (op == GF_CU_RED_MAX)
                    mx[k] = (v[k] > mx[k] || isnan(v[k])) ? v[k] : mx[k];
                else
                    sum[k] += (double)v[k];
            }
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = op == GF_CU_RED_MAX    ? mx[k]
                   : op == GF_CU_RED_MEAN ? (float)(sum[k] / (double)g.nred)
                                          : (float)sum[k];
        gf_st8f(y + o8 * 8, v);
    }
}

/* Whether k_reduce_rows8 takes g on x, y. */
static bool rows8(const struct gf_cu_red *g, const void *x, const void *y)
{
    if (g->nr != 1 || g->nk < 1 || g->kstr[g->nk - 1] != 1 || g->kdim[g->nk - 1] % 8 ||
        g->rstr[0] % 8 || !gf_al16(x) || !gf_al16(y))
        return false;
    for (int d = 0; d < g->nk - 1; d++) /* the outer kept strides */
        if (g->kstr[d] % 8)
            return false;
    return true;
}

template <typename T>
static void reduce_t(cudaStream_t s, int op, const T *x, T *y, const struct gf_cu_red *g)
{
    bool inner_kept = g->nk > 0 && g->kstr[g->nk - 1] == 1;
    if ((g->nred <= 16 || (inner_kept && g->nout >= 256)) && rows8(g, x, y)) {
        int64_t blocks = (g->nout / 8 + BLOCK - 1) / BLOCK;
        k_reduce_rows8<T><<<(unsigned)(blocks > 65535 * 32 ? 65535 * 32 : blocks), BLOCK, 0, s>>>(
            op, x, y, *g);
    } else if (g->nred <= 16 || (inner_kept && g->nout >= 256)) {
        int64_t blocks = (g->nout + BLOCK - 1) / BLOCK, far = 0;
        unsigned nb = (unsigned)(blocks > 65535 * 32 ? 65535 * 32 : blocks);
        for (int d = 0; d < g->nk; d++)
            far += (g->kdim[d] - 1) * g->kstr[d];
        if (g->nout < INT32_MAX && far < INT32_MAX)
            k_reduce_rows<T, int32_t><<<nb, BLOCK, 0, s>>>(op, x, y, *g);
        else
            k_reduce_rows<T, int64_t><<<nb, BLOCK, 0, s>>>(op, x, y, *g);
    } else {
        k_reduce<T><<<blocks_for(g->nout), BLOCK, 0, s>>>(op, x, y, *g);
    }
}

extern "C" cudaError_t gf_cu_reduce(cudaStream_t s, int op, int type, const void *x, void *y,
                                    const struct gf_cu_red *g)
{
    if (g->nout <= 0)
        return cudaSuccess;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       reduce_t<T>(s, op, (const T *)x, (T *)y, g))
    return cudaGetLastError();
}

/* rows along the axis of [outer, n, inner]: row r starts at
 * (r / inner) * n * inner + r % inner, its elements inner apart */
__device__ __forceinline__ int64_t row_base(int64_t r, int64_t n, int64_t inner)
{
    return r / inner * n * inner + r % inner;
}

template <typename T>
__global__ void k_softmax(int lg, const T *x, T *y, int64_t n, int64_t inner, int64_t rows)
{
    __shared__ double shd[BLOCK];
    __shared__ float shf[BLOCK];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t b = row_base(r, n, inner);
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            float v = gf_ld(x + b + j * inner);
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_all<float, true>(m, shf);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK)
            sum += (double)expf(gf_ld(x + b + j * inner) - m);
        sum = block_all<double, false>(sum, shd);
        float f = lg ? (float)log(sum) : (float)(1.0 / sum);
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            float v = gf_ld(x + b + j * inner) - m;
            gf_st(y + b + j * inner, lg ? v - f : expf(v) * f);
        }
    }
}

template <typename T>
__global__ void k_softmax_grad(int lg, const T *g, const T *y, T *dx, int64_t n, int64_t inner,
                               int64_t rows)
{
    __shared__ double shd[BLOCK];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t b = row_base(r, n, inner);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            int64_t i = b + j * inner;
            float gi = gf_ld(g + i);
            sum += lg ? (double)gi : (double)gi * (double)gf_ld(y + i);
        }
        float s = (float)block_all<double, false>(sum, shd);
        for (int64_t j = threadIdx.x; j < n; j += BLOCK) {
            int64_t i = b + j * inner;
            float gi = gf_ld(g + i), yi = gf_ld(y + i);
            gf_st(dx + i, lg ? gi - expf(yi) * s : yi * (gi - s));
        }
    }
}

extern "C" cudaError_t gf_cu_softmax(cudaStream_t s, int log, int type, const void *x,
                                     void *y, int64_t n, int64_t inner, int64_t rows)
{
    if (rows <= 0 || n <= 0)
        return cudaSuccess;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       k_softmax<T><<<blocks_for(rows), BLOCK, 0, s>>>(log, (const T *)x,
                                                                       (T *)y, n, inner, rows))
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_softmax_grad(cudaStream_t s, int log, int type, const void *g,
                                          const void *y, void *dx, int64_t n, int64_t inner,
                                          int64_t rows)
{
    if (rows <= 0 || n <= 0)
        return cudaSuccess;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       k_softmax_grad<T><<<blocks_for(rows), BLOCK, 0, s>>>(
                           log, (const T *)g, (const T *)y, (T *)dx, n, inner, rows))
    return cudaGetLastError();
}

/* ---- Sum ------------------------------------------------------------------------ */

template <typename T>
struct sum_src {
    const T *p[4];
};

/* y = ((s0 + s1) + s2) + s3 over nd, in float, each partial sum rounded
 * to T: the CPU's pairwise folds into its output (of T). */
template <typename T>
__global__ void k_sum(sum_src<T> src, int nops, T *y, gf_cu_nd nd, int64_t n)
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
        float v = gf_ld(src.p[0] + o[0]);
        for (int k = 1; k < nops; k++)
            v = gf_round<T>(v + gf_ld(src.p[k] + o[k]));
        gf_st(y + i, v);
    }
}

/* 16-bit operands of y's shape: 8 elements per 16-byte load (y may be
 * operand 0: the sum so far) */
template <typename T>
__global__ void k_sum8(sum_src<T> src, int nops, T *y, int64_t nv)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v[8], w[8];
        gf_ld8<T>(((const uint4 *)src.p[0])[i], v);
        for (int k = 1; k < nops; k++) {
            gf_ld8<T>(((const uint4 *)src.p[k])[i], w);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = gf_round<T>(v[j] + w[j]);
        }
        ((uint4 *)y)[i] = gf_st8<T>(v);
    }
}

template <typename T>
static void sum_t(cudaStream_t s, const void *const *src, int nops, T *y, const gf_cu_nd &nd,
                  int64_t n)
{
    sum_src<T> ss;
    bool flat = sizeof(T) == 2 && nd.rank == 1 && gf_al16(y);
    for (int k = 0; k < 4; k++) {
        ss.p[k] = (const T *)src[k < nops ? k : 0];
        flat = flat && (k >= nops || (nd.st[k][0] == 1 && gf_al16(ss.p[k])));
    }
    int64_t nv = flat ? n / 8 : 0;
    if (nv) {
        int64_t b = (nv + BLOCK - 1) / BLOCK;
        k_sum8<T><<<(unsigned)(b > 65536 ? 65536 : b), BLOCK, 0, s>>>(ss, nops, y, nv);
        for (int k = 0; k < 4; k++)
            ss.p[k] += nv * 8;
        y += nv * 8;
        n -= nv * 8;
        if (n == 0)
            return;
    }
    gf_cu_nd rest = nd; /* flat: one axis, the tail */
    if (nv)
        rest.dims[0] = n;
    int64_t b = (n + BLOCK - 1) / BLOCK;
    unsigned g = (unsigned)(b > 65536 ? 65536 : b);
    k_sum<T><<<g, BLOCK, 0, s>>>(ss, nops, y, rest, n);
}

extern "C" cudaError_t gf_cu_sum(cudaStream_t s, int type, const void *const *src, int nops,
                                 void *y, const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0 || nops < 1 || nops > 4)
        return n <= 0 ? cudaSuccess : cudaErrorInvalidValue;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue, sum_t<T>(s, src, nops, (T *)y, *nd, n))
    return cudaGetLastError();
}
