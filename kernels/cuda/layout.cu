/*
 * layout.cu — the CUDA layout kernels (host side: layout.c): the strided
 * copy behind Transpose, Slice and Expand, Gather, and (launch_fused.h) Pad,
 * GatherND, GatherGrad and SliceGrad.  Elements are moved
 * by size (1, 2, 4 or 8 bytes: fp16 / bf16 are 2); 64-bit indices,
 * grid-stride loops.  GatherGrad adds: fp32, or fp16 / bf16 summed in fp32
 * and rounded once (half_io.h).
 */
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "half_io.h"
#include "launch_fused.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* I: the index type, 32-bit where every offset fits (its divisions are a
 * few times cheaper than 64-bit ones) */
template <typename T, typename I>
__global__ void k_copy_nd(const T *x, T *y, gf_cu_nd nd, int64_t n)
{
    GRID_LOOP(i, n)
    {
        I r = (I)i, o = 0;
        for (int d = nd.rank - 1; d >= 0; d--) {
            I c = r % (I)nd.dims[d];
            r /= (I)nd.dims[d];
            o += c * (I)nd.st[0][d];
        }
        y[i] = x[o];
    }
}

/* Whether every offset of nd's copy (n elements) fits a signed 32-bit
 * index. */
static bool fits32(const struct gf_cu_nd *nd, int64_t n)
{
    int64_t far = 0;
    for (int d = 0; d < nd->rank; d++)
        far += (nd->dims[d] - 1) * (nd->st[0][d] < 0 ? -nd->st[0][d] : nd->st[0][d]);
    return n < INT32_MAX && far < INT32_MAX;
}

template <typename T>
static void copy_nd(cudaStream_t s, const void *x, void *y, const struct gf_cu_nd *nd, int64_t n)
{
    if (fits32(nd, n))
        k_copy_nd<T, int32_t><<<grid_for(n), BLOCK, 0, s>>>((const T *)x, (T *)y, *nd, n);
    else
        k_copy_nd<T, int64_t><<<grid_for(n), BLOCK, 0, s>>>((const T *)x, (T *)y, *nd, n);
}

/* The copy in 16-byte elements where the innermost axis is contiguous in
 * x and every row starts 16-byte aligned (Transpose [B, S, H, D] -> [B, H,
 * S, D], Expand of a repeated row): nd and n in elements of `size` bytes;
 * false when that does not hold. */
static bool copy_nd16(cudaStream_t s, int size, const void *x, void *y,
                      const struct gf_cu_nd *nd, int64_t n)
{
    int v = 16 / size, r = nd->rank;
    if (r < 1 || nd->st[0][r - 1] != 1 || nd->dims[r - 1] % v || ((uintptr_t)x & 15u) ||
        ((uintptr_t)y & 15u))
        return false;
    struct gf_cu_nd w = *nd;
    for (int d = 0; d < r - 1; d++) {
        if (w.st[0][d] % v)
            return false;
        w.st[0][d] /= v;
    }
    w.dims[r - 1] /= v;
    copy_nd<uint4>(s, x, y, &w, n / v);
    return true;
}

extern "C" cudaError_t gf_cu_copy_nd(cudaStream_t s, int size, const void *x, void *y,
                                     const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    if (size <= 16 && copy_nd16(s, size, x, y, nd, n))
        return cudaGetLastError();
    switch (size) {
    case 1: copy_nd<uint8_t>(s, x, y, nd, n); break;
    case 2: copy_nd<uint16_t>(s, x, y, nd, n); break;
    case 4: copy_nd<uint32_t>(s, x, y, nd, n); break;
    case 8: copy_nd<uint64_t>(s, x, y, nd, n); break;
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

/* ---- Pad, GatherND, GatherGrad, SliceGrad ------------------------------------------ */

template <typename T>
__global__ void k_pad(const T *x, T *y, gf_cu_pad_geom p, T fill, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t r = i, ox = 0;
        bool out = false;
        for (int d = p.rank - 1; d >= 0 && !out; d--) {
            int64_t c = r % p.dims[d] - p.lead[d], k = p.keep[d], s = c;
            r /= p.dims[d];
            if (c < 0 || c >= k) {
                int64_t q = 2 * (k - 1);
                if (p.mode == 0)
                    out = true;
                else if (p.mode == 2)
                    s = c < 0 ? 0 : k - 1;
                else if (p.mode == 3)
                    s = (c % k + k) % k;
                else if (k == 1)
                    s = 0;
                else {
                    int64_t m = (c % q + q) % q;
                    s = m < k ? m : q - m;
                }
            }
            ox += (p.crop[d] + s) * p.sx[d];
        }
        y[i] = out ? fill : x[ox];
    }
}

template <typename T>
static void pad_t(cudaStream_t s, const void *x, void *y, const gf_cu_pad_geom *p, int64_t n)
{
    T fill;
    memcpy(&fill, &p->fill, sizeof(T));
    k_pad<T><<<grid_for(n), BLOCK, 0, s>>>((const T *)x, (T *)y, *p, fill, n);
}

extern "C" cudaError_t gf_cu_pad(cudaStream_t s, int size, const void *x, void *y,
                                 const struct gf_cu_pad_geom *p, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    switch (size) {
    case 1: pad_t<uint8_t>(s, x, y, p, n); break;
    case 2: pad_t<uint16_t>(s, x, y, p, n); break;
    case 4: pad_t<uint32_t>(s, x, y, p, n); break;
    case 8: pad_t<uint64_t>(s, x, y, p, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T>
__global__ void k_gather_nd(const T *x, const int64_t *off, T *y, int64_t slice, int64_t n)
{
    GRID_LOOP(i, n) y[i] = x[off[i / slice] + i % slice];
}

extern "C" cudaError_t gf_cu_gather_nd(cudaStream_t s, int size, const void *x,
                                       const int64_t *off, void *y, int64_t slice, int64_t n)
{
    if (n <= 0 || slice <= 0)
        return cudaSuccess;
    unsigned g = grid_for(n);
    switch (size) {
    case 1: k_gather_nd<uint8_t><<<g, BLOCK, 0, s>>>((const uint8_t *)x, off, (uint8_t *)y, slice, n); break;
    case 2: k_gather_nd<uint16_t><<<g, BLOCK, 0, s>>>((const uint16_t *)x, off, (uint16_t *)y, slice, n); break;
    case 4: k_gather_nd<uint32_t><<<g, BLOCK, 0, s>>>((const uint32_t *)x, off, (uint32_t *)y, slice, n); break;
    case 8: k_gather_nd<uint64_t><<<g, BLOCK, 0, s>>>((const uint64_t *)x, off, (uint64_t *)y, slice, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- GatherGrad: the lists of positions per index value, on the device ------------
 * keys[i] = the index of position i, unsigned (negative ones from the end; n, past
 * every value, for one out of range, whose position goes to flag), vals[i]
 * = i; a radix sort by key, which is stable (CUB's DeviceRadixSort), keeps
 * each value's positions increasing, as the CPU adds them; start[k] = the
 * first sorted entry whose key is k or more (k = 0..n).  Deterministic:
 * the same lists every run. */

static size_t a256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static int key_bits(int64_t n)
{
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) <= n)
        b++;
    return b; /* keys 0..n */
}

/* The workspace's parts: keys, sorted keys, positions, sorted positions,
 * start[n + 1], then CUB's temporary storage. */
struct gg_ws {
    size_t keys, keys2, vals, vals2, start, temp, temp_bytes, end;
};

static cudaError_t gg_layout(int64_t ni, int64_t n, gg_ws *w)
{
    size_t b = (size_t)ni * sizeof(int);
    w->keys = 0;
    w->keys2 = a256(b);
    w->vals = w->keys2 + a256(b);
    w->vals2 = w->vals + a256(b);
    w->start = w->vals2 + a256(b);
    w->temp = w->start + a256((size_t)(n + 1) * sizeof(int));
    w->temp_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs((void *)nullptr, w->temp_bytes,
                                                    (const unsigned *)nullptr,
                                                    (unsigned *)nullptr, (const int *)nullptr,
                                                    (int *)nullptr, (int)ni, 0, key_bits(n));
    w->end = w->temp + a256(w->temp_bytes);
    return e;
}

extern "C" size_t gf_cu_gather_grad_workspace(int64_t ni, int64_t n)
{
    gg_ws w;
    return ni > 0 && gg_layout(ni, n, &w) == cudaSuccess ? w.end : 256;
}

template <typename I>
__global__ void k_gg_keys(const I *ind, int64_t ni, int64_t n, unsigned *keys, int *vals,
                          int *flag)
{
    GRID_LOOP(i, ni)
    {
        int64_t k = (int64_t)ind[i];
        if (k < 0)
            k += n;
        if (k < 0 || k >= n) {
            if (flag)
                atomicMin(flag, (int)i);
            k = n;
        }
        keys[i] = (unsigned)k;
        vals[i] = (int)i;
    }
}

__global__ void k_gg_start(const unsigned *keys, int64_t ni, int64_t n, int *start)
{
    GRID_LOOP(k, n + 1)
    {
        int64_t lo = 0, hi = ni; /* the first sorted key >= k */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if ((int64_t)keys[mid] < k)
                lo = mid + 1;
            else
                hi = mid;
        }
        start[k] = (int)lo;
    }
}

/* y [pre, na, post]: each element sums its index value's rows of g in
 * increasing position (float, from 0), as the CPU's scatter-add; a 16-bit
 * g is summed in fp32 and y rounded once, as the CPU's widened node. */
template <typename T>
__global__ void k_gather_grad(const T *g, const int *start, const int *order, T *y,
                              int64_t ni, int64_t na, int64_t post, int64_t n)
{
    GRID_LOOP(o, n)
    {
        int64_t q = o % post, t = o / post, k = t % na, p = t / na;
        float s = 0.0f;
        for (int j = start[k]; j < start[k + 1]; j++)
            s += gf_ld(g + (p * ni + order[j]) * post + q);
        gf_st(y + o, s);
    }
}

extern "C" cudaError_t gf_cu_gather_grad(cudaStream_t s, int type, const void *g,
                                         const void *ind, int i64, void *y, int64_t pre,
                                         int64_t ni, int64_t na, int64_t post, void *ws,
                                         int *flag)
{
    if (type != GF_CU_F32 && type != GF_CU_F16 && type != GF_CU_BF16)
        return cudaErrorInvalidValue;
    int64_t n = pre * na * post;
    if (n <= 0)
        return cudaSuccess;
    gg_ws w;
    cudaError_t e = gg_layout(ni, na, &w);
    char *b = (char *)ws;
    unsigned *keys = (unsigned *)(b + w.keys), *keys2 = (unsigned *)(b + w.keys2);
    int *vals = (int *)(b + w.vals), *vals2 = (int *)(b + w.vals2);
    int *start = (int *)(b + w.start);
    if (e == cudaSuccess && ni > 0) {
        if (i64)
            k_gg_keys<long long><<<grid_for(ni), BLOCK, 0, s>>>((const long long *)ind, ni, na,
                                                              keys, vals, flag);
        else
            k_gg_keys<int><<<grid_for(ni), BLOCK, 0, s>>>((const int *)ind, ni, na, keys,
                                                        vals, flag);
        size_t tb = w.temp_bytes;
        e = cub::DeviceRadixSort::SortPairs((void *)(b + w.temp), tb, keys, keys2, vals, vals2,
                                            (int)ni, 0, key_bits(na), s);
    }
    if (e == cudaSuccess) {
        k_gg_start<<<grid_for(na + 1), BLOCK, 0, s>>>(keys2, ni, na, start);
        GF_CU_FLOAT_SWITCH(type, break,
                           k_gather_grad<T><<<grid_for(n), BLOCK, 0, s>>>(
                               (const T *)g, start, vals2, (T *)y, ni, na, post, n))
    }
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename T>
__global__ void k_slice_grad(const T *g, T *y, gf_cu_sg_geom p, int64_t n)
{
    GRID_LOOP(o, n)
    {
        int64_t r = o, gi = 0, gs = 1;
        bool on = true;
        for (int d = p.rank - 1; d >= 0; d--) {
            int64_t c = r % p.dims[d], t = c - p.first[d], q = t / p.step[d];
            r /= p.dims[d];
            on = on && q * p.step[d] == t && q >= 0 && q < p.gdims[d];
            gi += q * gs;
            gs *= p.gdims[d];
        }
        y[o] = on ? g[gi] : (T)0;
    }
}

extern "C" cudaError_t gf_cu_slice_grad(cudaStream_t s, int size, const void *g, void *y,
                                        const struct gf_cu_sg_geom *p, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    unsigned gr = grid_for(n);
    switch (size) {
    case 2: k_slice_grad<uint16_t><<<gr, BLOCK, 0, s>>>((const uint16_t *)g, (uint16_t *)y, *p, n); break;
    case 4: k_slice_grad<uint32_t><<<gr, BLOCK, 0, s>>>((const uint32_t *)g, (uint32_t *)y, *p, n); break;
    case 8: k_slice_grad<uint64_t><<<gr, BLOCK, 0, s>>>((const uint64_t *)g, (uint64_t *)y, *p, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
