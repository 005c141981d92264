/*
 * layout.cu — the CUDA layout kernels (host side: layout.c): the strided
 * copy behind Transpose, Slice and Expand, and Gather.  Elements are moved
 * by size (1, 2, 4 or 8 bytes); 64-bit indices, grid-stride loops.
 */
#include "launch.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void k_copy_nd(const T *x, T *y, gf_cu_nd nd, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t r = i, o = 0;
        for (int d = nd.rank - 1; d >= 0; d--) {
            int64_t c = r % nd.dims[d];
            r /= nd.dims[d];
            o += c * nd.st[0][d];
        }
        y[i] = x[o];
    }
}

extern "C" cudaError_t gf_cu_copy_nd(cudaStream_t s, int size, const void *x, void *y,
                                     const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    unsigned g = grid_for(n);
    switch (size) {
    case 1: k_copy_nd<uint8_t><<<g, BLOCK, 0, s>>>((const uint8_t *)x, (uint8_t *)y, *nd, n); break;
    case 2: k_copy_nd<uint16_t><<<g, BLOCK, 0, s>>>((const uint16_t *)x, (uint16_t *)y, *nd, n); break;
    case 4: k_copy_nd<uint32_t><<<g, BLOCK, 0, s>>>((const uint32_t *)x, (uint32_t *)y, *nd, n); break;
    case 8: k_copy_nd<uint64_t><<<g, BLOCK, 0, s>>>((const uint64_t *)x, (uint64_t *)y, *nd, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T, typename I>
__global__ void k_gather(const T *x, const I *ind, T *y, int64_t ni, int64_t na, int64_t post,
                         int64_t n, int *flag)
{
    GRID_LOOP(i, n)
    {
        int64_t q = i % post, r = i / post, j = r % ni, p = r / ni;
        int64_t k = (int64_t)ind[j];
        if (k < 0)
            k += na;
        if (k < 0 || k >= na) {
            if (flag)
                atomicMin(flag, (int)(j < 0x7fffffff ? j : 0x7ffffffe));
            y[i] = 0;
        } else {
            y[i] = x[(p * na + k) * post + q];
        }
    }
}

template <typename T>
static void gather_t(cudaStream_t s, const void *x, const void *ind, int i64, void *y,
                     int64_t ni, int64_t na, int64_t post, int64_t n, int *flag)
{
    if (i64)
        k_gather<T, long long><<<grid_for(n), BLOCK, 0, s>>>((const T *)x,
                                                             (const long long *)ind, (T *)y,
                                                             ni, na, post, n, flag);
    else
        k_gather<T, int><<<grid_for(n), BLOCK, 0, s>>>((const T *)x, (const int *)ind, (T *)y,
                                                       ni, na, post, n, flag);
}

extern "C" cudaError_t gf_cu_gather(cudaStream_t s, int size, const void *x, const void *ind,
                                    int i64, void *y, int64_t pre, int64_t ni, int64_t na,
                                    int64_t post, int *flag)
{
    int64_t n = pre * ni * post;
    if (n <= 0)
        return cudaSuccess;
    switch (size) {
    case 1: gather_t<uint8_t>(s, x, ind, i64, y, ni, na, post, n, flag); break;
    case 2: gather_t<uint16_t>(s, x, ind, i64, y, ni, na, post, n, flag); break;
    case 4: gather_t<uint32_t>(s, x, ind, i64, y, ni, na, post, n, flag); break;
    case 8: gather_t<uint64_t>(s, x, ind, i64, y, ni, na, post, n, flag); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
