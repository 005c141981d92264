/*
 * fused_loss.cu — the CUDA cross-entropy rows (host side: fused_loss.c):
 * SoftmaxCrossEntropy, the ONNX SoftmaxCrossEntropyLoss and
 * NegativeLogLikelihoodLoss and their Grad ops, LinearCrossEntropy's chunks
 * of logits; and JSD, JSDGrad (at the end).  One "position" is a row of C
 * class scores with its label.
 *
 *   k_ce_rows     one block per position: an online max / sum (sum of
 *                 exp(x - max) in double) in one read, then the loss, LogP
 *                 and the gradient in a second (any stride, NLL too)
 *   k_ce_cluster  one cluster of CL blocks per position (stride 1): each
 *                 block keeps its slice of the row in shared memory, the
 *                 blocks exchange their max and sums through distributed
 *                 shared memory, and the gradient is written from shared
 *                 memory: the logits are read once and the gradient written
 *                 once (G may be the logits: every read is done before the
 *                 cluster's second barrier, every write after it)
 *
 * The gradient for a unit upstream gradient: g = coef (softmax(x) -
 * onehot(t)), coef = w[t] (/ the sum of the counted weights with mean;
 * times dLoss for the ONNX Grad ops); ignored positions (and bad labels,
 * recorded in *bad) get zeros.  The per-position (loss, weight) pairs are
 * summed by one block in a fixed order, so runs repeat exactly.
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <math.h>
#include <type_traits>

#include "half_io.h"
#include "launch_mla.h"

namespace cg = cooperative_groups;

#define RED_BLOCK 1024

__device__ __forceinline__ int64_t label_at(const struct gf_cu_ce &c, int64_t p)
{
    int64_t li = c.s1 ? p / c.s1 * (c.s1 + 1) + p % c.s1 + 1 : p;
    return c.t64 ? ((const int64_t *)c.t)[li] : (int64_t)((const int32_t *)c.t)[li];
}

__device__ __forceinline__ int64_t base_of(const struct gf_cu_ce &c, int64_t p)
{
    if (c.s1)
        return (p / c.s1 * (c.s1 + 1) + p % c.s1) * c.c;
    return p / c.d * c.c * c.d + p % c.d;
}

/* The label of p: t, or -1 when ignored (or bad: recorded). */
__device__ __forceinline__ int64_t label_use(const struct gf_cu_ce &c, int64_t p, bool record)
{
    int64_t t = label_at(c, p);
    if (c.has_ii && t == c.ii)
        return -1;
    if (t < 0 || t >= c.c) {
        if (record && c.bad)
            atomicMin(c.bad, (int)(p + c.pos0 < 0x7ffffffe ? p + c.pos0 : 0x7ffffffe));
        return -1;
    }
    return t;
}

/* Block-wide reductions (blockDim a multiple of 32); every thread gets the
 * result.  sh: 32 slots. */
__device__ float block_max(float v, float *sh)
{
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : -INFINITY;
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ double block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : 0.0;
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The upstream gradient of the ONNX losses' Grad ops (gf_cu_ce_dl): G is
 * scaled by dl[0], or by dl[p] per position; dl NULL: 1. */
struct ce_up {
    const float *dl;
    int per_pos;
};

/* Element i of an array of the float type T (fp32, fp16, bf16), as fp32;
 * and stored rounded once. */
template <typename T>
__device__ __forceinline__ float ld_at(const void *p, int64_t i)
{
    return gf_ld((const T *)p + i);
}

template <typename T>
__device__ __forceinline__ void st_at(void *p, int64_t i, float v)
{
    gf_st((T *)p + i, v);
}

/* The vectorized paths move 16 bytes at a time: VN<T> elements of T. */
template <typename T>
constexpr int VN = 16 / (int)sizeof(T);

template <typename T>
__device__ __forceinline__ void unpack16(const uint4 &v, float *f)
{
    const T *h = reinterpret_cast<const T *>(&v);
#pragma unroll
    for (int k = 0; k < VN<T>; k++)
        f[k] = gf_ld(h + k);
}

/* N values to p (N * sizeof(TG) bytes, that aligned), rounded to TG. */
template <typename TG, int N>
__device__ __forceinline__ void store_n(TG *p, const float *f)
{
    typedef typename std::conditional<N * sizeof(TG) == 16, uint4, uint2>::type R;
    R v;
    TG *h = reinterpret_cast<TG *>(&v);
#pragma unroll
    for (int k = 0; k < N; k++)
        gf_st(h + k, f[k]);
    *(R *)p = v;
}

/* G's coefficient for a position of weight wt: wt gscale (times the
 * upstream dl), / the counted weights with mean.  The Grad ops take a zero
 * sum as a zero scale (the CPU's loss_setup); SoftmaxCrossEntropy divides
 * (its CPU kernel does too). */
__device__ __forceinline__ double ce_coef(const struct gf_cu_ce &c, struct ce_up up, int64_t p,
                                          double wt)
{
    double coef = wt * (double)c.gscale;
    if (up.dl)
        coef *= (double)up.dl[up.per_pos ? p : 0];
    if (c.gsum)
        coef = up.dl && *c.gsum == 0 ? 0.0 : coef * (1.0 / *c.gsum);
    return coef;
}

/* VN<T> gradient values of position p's row from element j (a multiple of
 * VN<T>) on: to g, or (fp32 x) rounded to bf16 into gb (the same bits as
 * g's fp32 rounded afterwards). */
template <typename T>
__device__ __forceinline__ void put_gv(const struct gf_cu_ce &c, int64_t p, int64_t j,
                                       const float *o)
{
    if (c.gb)
        store_n<__nv_bfloat16, VN<T>>((__nv_bfloat16 *)c.gb + base_of(c, p) + j, o);
    else
        store_n<T, VN<T>>((T *)c.g + base_of(c, p) + j, o);
}

/* The position's loss and weight, and its coefficient of G. */
template <typename T>
__device__ __forceinline__ void ce_finish(const struct gf_cu_ce &c, struct ce_up up, int64_t p,
                                          int64_t t, float m, double s, float xt, float *cf)
{
    double wt = 0, l = 0;
    if (t >= 0) {
        wt = c.w ? (double)ld_at<T>(c.w, t) : 1.0;
        l = c.softmax ? -(((double)xt - (double)m) - log(s)) * wt : -(double)xt * wt;
    }
    *cf = (float)ce_coef(c, up, p, wt);
    if (threadIdx.x == 0) {
        if (c.loss)
            st_at<T>(c.loss, p, (float)l);
        if (c.lpart) {
            c.lpart[2 * p] = l;
            c.lpart[2 * p + 1] = wt;
        }
    }
}

/* exp in the rows of scores of type T: expf for fp32 (the CPU's values);
 * for 16-bit scores the hardware's ex2 (a few fp32 ulp, far below the
 * outputs' rounding), and a vector's 8 terms summed in fp32 before the
 * double sum (the kernels are bound by their arithmetic there, not by
 * memory: half the bytes per element of fp32's). */
template <typename T>
__device__ __forceinline__ float ce_exp(float x)
{
    if (sizeof(T) == 4)
        return expf(x);
    /* ex2.approx.ftz on x log2(e): __expf without its fix-ups for results
     * below 2^-126 (two multiplies and a compare an element), which here
     * are 0 (x <= 0: terms of a sum of at least 1, or a gradient below
     * the 16-bit outputs' smallest normal) */
    return gf_ex2_ftz(x * 1.4426950408889634f);
}

template <typename T>
using ce_vsum = typename std::conditional<sizeof(T) == 4, double, float>::type;

/* The gradient of VN<T> values f of the row from element j on (k0: the
 * label's index in them, if it is there), into o. */
template <typename T>
__device__ __forceinline__ void grad_vec(const float *f, float *o, int64_t t, int64_t k0,
                                         float m, float inv, float cf, float pt)
{
#pragma unroll
    for (int k = 0; k < VN<T>; k++)
        o[k] = t < 0 ? 0.0f : k == k0 ? (pt - 1.0f) * cf : ce_exp<T>(f[k] - m) * inv * cf;
}

/* The online max and sum of exp(x - max) of a thread, one vector of the
 * row at a time. */
template <typename T>
__device__ __forceinline__ void online_vec(const uint4 &v, float &mt, double &st)
{
    const int N = VN<T>;
    float f[N];
    unpack16<T>(v, f);
    float vm = f[0];
#pragma unroll
    for (int k = 1; k < N; k++)
        vm = fmaxf(vm, f[k]);
    if (vm > mt) {
        st = mt == -INFINITY ? 0.0 : st * exp((double)(mt - vm));
        mt = vm;
    }
    ce_vsum<T> sv = 0;
#pragma unroll
    for (int k = 0; k < N; k++)
        sv += (ce_vsum<T>)ce_exp<T>(f[k] - mt);
    st += (double)sv;
}

/* Vectors a thread of the rows kernel loads before it uses the first.  The
 * rows are bound by the loads' latency, not by DRAM: one block of 1024
 * threads an SM, the second pass mostly from L1 / L2; under ncu on an H100
 * (bf16 4096 x 128256) DRAM ran at 53% of its peak with one load in flight
 * a thread, 67% with 4 (1.14 -> 1.08 ms).  __launch_bounds__ keeps the
 * registers (64) within what 1024 threads may take. */
#define CE_DEPTH 4

template <bool VEC, typename T>
__global__ void __launch_bounds__(1024) k_ce_rows(struct gf_cu_ce c, struct ce_up up)
{
    const int N = VN<T>;
    __shared__ float shf[32];
    __shared__ double shd[32];
    int64_t stride = c.s1 ? 1 : c.d;
    for (int64_t p = blockIdx.x; p < c.n_pos; p += gridDim.x) {
        const T *x = (const T *)c.x + base_of(c, p);
        int64_t t = label_use(c, p, threadIdx.x == 0);
        float m = 0.0f;
        double s = 1.0;
        if (c.softmax && (t >= 0 || c.logp)) {
            /* online: per thread max and sum of exp(x - max) */
            float mt = -INFINITY;
            double st = 0;
            if (VEC) {
                /* each thread's vectors in the order of a plain stride loop,
                 * CE_DEPTH loads in flight */
                const uint4 *xv = (const uint4 *)x;
                int64_t nv = c.c / N, bd = blockDim.x, j = threadIdx.x;
                for (; j + (CE_DEPTH - 1) * bd < nv; j += CE_DEPTH * bd) {
                    uint4 v[CE_DEPTH];
#pragma unroll
                    for (int u = 0; u < CE_DEPTH; u++)
                        v[u] = xv[j + u * bd];
#pragma unroll
                    for (int u = 0; u < CE_DEPTH; u++)
                        online_vec<T>(v[u], mt, st);
                }
                for (; j < nv; j += bd)
                    online_vec<T>(xv[j], mt, st);
            } else {
                for (int64_t j = threadIdx.x; j < c.c; j += blockDim.x) {
                    float v = gf_ld(x + j * stride);
                    if (v > mt) {
                        st = mt == -INFINITY ? 0.0 : st * exp((double)(mt - v));
                        mt = v;
                    }
                    st += (double)ce_exp<T>(v - mt);
                }
            }
            m = block_max(mt, shf);
            s = block_sum(mt == -INFINITY ? 0.0 : st * exp((double)(mt - m)), shd);
        }
        float xt = t >= 0 ? gf_ld(x + t * stride) : 0.0f, cf;
        ce_finish<T>(c, up, p, t, m, s, xt, &cf);
        __syncthreads(); /* every read of x[t] before G may overwrite it */
        float inv = (float)(1.0 / s), ls = (float)log(s);
        float pt = t >= 0 ? ce_exp<T>(xt - m) * inv : 0.0f;
        T *g = c.g ? (T *)c.g + base_of(c, p) : NULL;
        __nv_bfloat16 *gb = c.gb ? (__nv_bfloat16 *)c.gb + base_of(c, p) : NULL;
        T *lp = c.logp ? (T *)c.logp + (c.s1 ? p * c.c : base_of(c, p)) : NULL;
        if (!g && !gb && !lp)
            continue;
        if (VEC && !lp) {
            /* as above; each vector is loaded before it is overwritten (G
             * may be X) */
            const uint4 *xv = (const uint4 *)x;
            int64_t nv = c.c / N, bd = blockDim.x, j = threadIdx.x;
            for (; j < nv; j += CE_DEPTH * bd) {
                uint4 v[CE_DEPTH];
#pragma unroll
                for (int u = 0; u < CE_DEPTH; u++)
                    if (j + u * bd < nv)
                        v[u] = xv[j + u * bd];
#pragma unroll
                for (int u = 0; u < CE_DEPTH; u++) {
                    int64_t ju = j + u * bd;
                    if (ju < nv) {
                        float f[N], o[N];
                        unpack16<T>(v[u], f);
                        grad_vec<T>(f, o, t, t - N * ju, m, inv, cf, pt);
                        put_gv<T>(c, p, N * ju, o);
                    }
                }
            }
        } else {
            int64_t ls_ = c.s1 ? 1 : stride;
            for (int64_t j = threadIdx.x; j < c.c; j += blockDim.x) {
                float v = gf_ld(x + j * stride);
                if (lp)
                    gf_st(lp + j * ls_, (v - m) - ls);
                float gv = t < 0 ? 0.0f : j == t ? (pt - 1.0f) * cf : ce_exp<T>(v - m) * inv * cf;
                if (g)
                    gf_st(g + j * stride, gv);
                if (gb)
                    gb[j * stride] = __float2bfloat16_rn(gv);
            }
        }
        __syncthreads();
    }
}

/* One cluster per position, the row's slice [rank * slice, ...) of this
 * block in shared memory as T (slice a multiple of VN<T>; C too). */
template <typename T>
__global__ void k_ce_cluster(struct gf_cu_ce c, int64_t slice, struct ce_up up)
{
    const int N = VN<T>;
    extern __shared__ uint4 rowv[];
    __shared__ float shf[32];
    __shared__ double shd[32];
    __shared__ float part_m;
    __shared__ double part_s;
    cg::cluster_group cl = cg::this_cluster();
    unsigned rank = cl.block_rank(), ncl = cl.num_blocks();
    int64_t first = blockIdx.x / ncl, step = gridDim.x / ncl;
    int64_t j0 = rank * slice, j1 = j0 + slice < c.c ? j0 + slice : c.c;
    int64_t nv = j1 > j0 ? (j1 - j0) / N : 0;
    for (int64_t p = first; p < c.n_pos; p += step) {
        const T *x = (const T *)c.x + base_of(c, p);
        int64_t t = label_use(c, p, rank == 0 && threadIdx.x == 0);
        const uint4 *xv = (const uint4 *)(x + j0);
        float mt = -INFINITY;
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
            uint4 v = xv[j];
            float f[N];
            rowv[j] = v;
            unpack16<T>(v, f);
#pragma unroll
            for (int k = 0; k < N; k++)
                mt = fmaxf(mt, f[k]);
        }
        mt = block_max(mt, shf);
        if (threadIdx.x == 0)
            part_m = mt;
        cl.sync(); /* (1) the blocks' maxima */
        float m = -INFINITY;
        for (unsigned r = 0; r < ncl; r++)
            m = fmaxf(m, *cl.map_shared_rank(&part_m, r));
        double st = 0;
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
            float f[N];
            unpack16<T>(rowv[j], f);
            ce_vsum<T> sv = 0;
#pragma unroll
            for (int k = 0; k < N; k++)
                sv += (ce_vsum<T>)ce_exp<T>(f[k] - m);
            st += (double)sv;
        }
        st = block_sum(st, shd);
        float xt = t >= 0 ? gf_ld(x + t) : 0.0f; /* read before any block writes G */
        if (threadIdx.x == 0)
            part_s = st;
        cl.sync(); /* (2) the blocks' sums; every read of x done */
        double s = 0;
        for (unsigned r = 0; r < ncl; r++)
            s += *cl.map_shared_rank(&part_s, r);
        float cf;
        if (rank == 0) {
            ce_finish<T>(c, up, p, t, m, s, xt, &cf);
        } else {
            struct gf_cu_ce c2 = c;
            c2.loss = NULL;
            c2.lpart = NULL;
            ce_finish<T>(c2, up, p, t, m, s, xt, &cf);
        }
        if (!c.g && !c.gb)
            continue;
        float inv = (float)(1.0 / s), pt = t >= 0 ? ce_exp<T>(xt - m) * inv : 0.0f;
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
            float f[N], o[N];
            unpack16<T>(rowv[j], f);
            grad_vec<T>(f, o, t, t - j0 - N * j, m, inv, cf, pt);
            put_gv<T>(c, p, j0 + N * j, o);
        }
        __syncthreads(); /* rowv reused by the next position */
    }
    cl.sync(); /* no block leaves while another may read its part_s */
}

static int sm_count(void)
{
    static int n = 0;
    if (!n) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            n = 0;
        n = n > 0 ? n : 80;
    }
    return n;
}

/* Elements of x's type in 16 bytes. */
static int vec_of(const struct gf_cu_ce *c)
{
    return c->type == GF_CU_F32 ? 4 : 8;
}

static int64_t cluster_slice(const struct gf_cu_ce *c, int cl)
{
    int64_t per = (c->c + cl - 1) / cl, n = vec_of(c);
    return (per + n - 1) / n * n;
}

#define CLUSTER_SMEM_MAX (200 << 10)

extern "C" int gf_cu_ce_cluster_ok(const struct gf_cu_ce *c, int cl)
{
    if (cl < 2 || cl > 16 || !c->softmax || c->logp || (!c->s1 && c->d != 1) ||
        c->c % vec_of(c) || ((uintptr_t)c->x % 16) || (c->g && (uintptr_t)c->g % 16) ||
        (c->gb && (uintptr_t)c->gb % 8))
        return 0;
    return cluster_slice(c, cl) * (16 / vec_of(c)) <= CLUSTER_SMEM_MAX;
}

template <typename T>
static cudaError_t launch_cluster(cudaStream_t s, const struct gf_cu_ce *c, struct ce_up up,
                                  int cl, int threads)
{
    int64_t slice = cluster_slice(c, cl);
    size_t bytes = (size_t)slice * sizeof(T);
    cudaError_t e = cudaFuncSetAttribute(k_ce_cluster<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && cl > 8)
        e = cudaFuncSetAttribute(k_ce_cluster<T>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                 1);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3((unsigned)cl);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, k_ce_cluster<T>, &cfg) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        fit = sm_count() / cl;
    }
    int64_t n = c->n_pos < fit ? c->n_pos : fit;
    cfg.gridDim = dim3((unsigned)(n * cl));
    return cudaLaunchKernelEx(&cfg, k_ce_cluster<T>, *c, slice, up);
}

template <typename T>
static cudaError_t ce_launch_t(cudaStream_t s, const struct gf_cu_ce *c, struct ce_up up)
{
    if (c->cluster > 1 && gf_cu_ce_cluster_ok(c, c->cluster))
        return launch_cluster<T>(s, c, up, c->cluster, c->block > 0 ? c->block : 512);
    int n = vec_of(c);
    bool vec = (c->s1 || c->d == 1) && c->c % n == 0 && (uintptr_t)c->x % 16 == 0 &&
               (!c->g || (uintptr_t)c->g % 16 == 0) && (!c->gb || (uintptr_t)c->gb % 8 == 0);
    int64_t work = vec ? c->c / n : c->c;
    int threads = c->block;
    if (threads <= 0) {
        threads = 32;
        while (threads < 1024 && threads < work / 4)
            threads *= 2;
    }
    int64_t blocks = c->n_pos < (int64_t)sm_count() * 64 ? c->n_pos : (int64_t)sm_count() * 64;
    if (vec)
        k_ce_rows<true, T><<<(unsigned)blocks, threads, 0, s>>>(*c, up);
    else
        k_ce_rows<false, T><<<(unsigned)blocks, threads, 0, s>>>(*c, up);
    return cudaGetLastError();
}

static cudaError_t ce_launch(cudaStream_t s, const struct gf_cu_ce *c, struct ce_up up)
{
    if (c->n_pos <= 0)
        return cudaSuccess;
    GF_CU_TYPE_SWITCH(c->type, return ce_launch_t<T>(s, c, up));
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t gf_cu_ce(cudaStream_t s, const struct gf_cu_ce *c)
{
    return ce_launch(s, c, ce_up{NULL, 0});
}

extern "C" cudaError_t gf_cu_ce_dl(cudaStream_t s, const struct gf_cu_ce *c, const float *dl,
                                   int per_pos)
{
    return ce_launch(s, c, ce_up{dl, per_pos});
}

template <typename T>
__global__ void k_ce_weights(struct gf_cu_ce c, double *gsum)
{
    __shared__ double shd[32];
    double acc = 0;
    for (int64_t p = threadIdx.x; p < c.n_pos; p += blockDim.x) {
        int64_t t = label_use(c, p, false);
        if (t >= 0)
            acc += c.w ? (double)ld_at<T>(c.w, t) : 1.0;
    }
    acc = block_sum(acc, shd);
    if (threadIdx.x == 0)
        *gsum = acc;
}

extern "C" cudaError_t gf_cu_ce_weights(cudaStream_t s, const struct gf_cu_ce *c, double *gsum)
{
    GF_CU_TYPE_SWITCH(c->type, k_ce_weights<T><<<1, RED_BLOCK, 0, s>>>(*c, gsum));
    return cudaGetLastError();
}

template <typename T>
__global__ void k_loss_reduce(const double *lp, int64_t n, int mean, T *out)
{
    __shared__ double shd[32];
    double l = 0, w = 0;
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
        l += lp[2 * p];
        w += lp[2 * p + 1];
    }
    l = block_sum(l, shd);
    w = block_sum(w, shd);
    if (threadIdx.x == 0)
        gf_st(out, (float)(mean ? l / w : l));
}

extern "C" cudaError_t gf_cu_loss_reduce(cudaStream_t s, const double *lpart, int64_t n,
                                         int mean, void *out, int type)
{
    GF_CU_TYPE_SWITCH(type, k_loss_reduce<T><<<1, RED_BLOCK, 0, s>>>(lpart, n, mean, (T *)out));
    return cudaGetLastError();
}

template <typename T>
__global__ void k_zero_rows(T *g, int64_t b, int64_t s_, int64_t c)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < b * c;
         i += (int64_t)gridDim.x * blockDim.x)
        g[((i / c + 1) * s_ - 1) * c + i % c] = 0; /* 0.0 in every float type */
}

extern "C" cudaError_t gf_cu_ce_zero_rows(cudaStream_t s, void *g, int half, int64_t b,
                                          int64_t s_, int64_t c)
{
    if (b * c <= 0)
        return cudaSuccess;
    int64_t blocks = (b * c + 255) / 256;
    unsigned n = (unsigned)(blocks > 65536 ? 65536 : blocks);
    if (half)
        k_zero_rows<uint16_t><<<n, 256, 0, s>>>((uint16_t *)g, b, s_, c);
    else
        k_zero_rows<float><<<n, 256, 0, s>>>((float *)g, b, s_, c);
    return cudaGetLastError();
}

/* CrossEntropyGrad: per_pos 0: out = g dl[0]; else element i of G [N, C, d]
 * (s_: [B, S, C]) scaled by its position's dl.  With shift the last row of
 * each batch is no position: copied, as the CPU does (SoftmaxCrossEntropy
 * leaves zeros there). */
__global__ void k_ce_scale(const float *g, const float *dl, float *out, int64_t n, int per_pos,
                           int64_t c, int64_t d, int64_t s_)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = g[i];
        if (!per_pos) {
            v *= dl[0];
        } else if (s_) {
            int64_t row = i / c, b = row / s_, si = row % s_;
            if (si != s_ - 1)
                v *= dl[b * (s_ - 1) + si];
        } else {
            v *= dl[i / (c * d) * d + i % d];
        }
        out[i] = v;
    }
}

extern "C" cudaError_t gf_cu_ce_scale(cudaStream_t s, const float *g, const float *dl,
                                      float *out, int64_t n, int per_pos, int64_t c, int64_t d,
                                      int64_t s_)
{
    if (n <= 0)
        return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    k_ce_scale<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 256, 0, s>>>(g, dl, out, n,
                                                                           per_pos, c, d, s_);
    return cudaGetLastError();
}

/* NLLLossGrad: dx[base(p) + t * d] = -coef of each counted position (dx
 * zeroed before). */
__global__ void k_nll_grad(struct gf_cu_ce c, struct ce_up up, float *dx)
{
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < c.n_pos;
         p += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = label_use(c, p, true);
        if (t >= 0)
            dx[base_of(c, p) + t * c.d] = -(float)ce_coef(c, up, p, c.w ? (double)ld_at<float>(c.w, t) : 1.0);
    }
}

extern "C" cudaError_t gf_cu_nll_grad(cudaStream_t s, const struct gf_cu_ce *c, const float *dl,
                                      int per_pos, float *dx)
{
    if (c->n_pos <= 0)
        return cudaSuccess;
    int64_t blocks = (c->n_pos + 255) / 256;
    k_nll_grad<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 256, 0, s>>>(*c, ce_up{dl, per_pos},
                                                                           dx);
    return cudaGetLastError();
}

/* ==== JSD, JSDGrad ====================================================================== */

__device__ __forceinline__ int64_t jsd_label(const struct gf_cu_jsd &j, int64_t r)
{
    return j.t64 ? ((const int64_t *)j.t)[r] : (int64_t)((const int32_t *)j.t)[r];
}

/* One element's share of a row (X = log Q, Y = log P), 0 log 0 = 0: beta 0
 * is KL(P || Q), beta 1 KL(Q || P), else beta KL(P || M) + (1 - beta)
 * KL(Q || M), M = beta P + (1 - beta) Q (the CPU's jsd_kl_f, jsd_mix_f). */
__device__ __forceinline__ float jsd_term(float lq, float lp, float beta)
{
    if (beta == 0.0f) {
        float p = expf(lp);
        return p > 0.0f ? p * (lp - lq) : 0.0f;
    }
    if (beta == 1.0f) {
        float q = expf(lq);
        return q > 0.0f ? q * (lq - lp) : 0.0f;
    }
    float p = expf(lp), q = expf(lq), bq = 1.0f - beta, lm = logf(beta * p + bq * q);
    return beta * (p > 0.0f ? p * (lp - lm) : 0.0f) + bq * (q > 0.0f ? q * (lq - lm) : 0.0f);
}

/* One block per row: lpart[2 r] = the row's sum (double), lpart[2 r + 1] =
 * 1, both 0 on an ignored row; gf_cu_loss_reduce's mean is then JSD's
 * batchmean over the rows counted. */
__global__ void k_jsd_rows(struct gf_cu_jsd j)
{
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < j.rows; r += gridDim.x) {
        bool ign = j.t && jsd_label(j, r) == j.ii;
        const float *x = j.x + r * j.n, *y = j.y + r * j.n;
        double acc = 0;
        for (int64_t k = threadIdx.x; !ign && k < j.n; k += blockDim.x)
            acc += (double)jsd_term(x[k], y[k], j.beta);
        acc = block_sum(acc, shd);
        if (threadIdx.x == 0) {
            j.lpart[2 * r] = ign ? 0.0 : acc;
            j.lpart[2 * r + 1] = ign ? 0.0 : 1.0;
        }
    }
}

extern "C" cudaError_t gf_cu_jsd(cudaStream_t s, const struct gf_cu_jsd *j)
{
    if (j->rows <= 0)
        return cudaSuccess;
    int threads = j->block;
    if (threads <= 0) {
        threads = 32;
        while (threads < 1024 && threads < j->n / 4)
            threads *= 2;
    }
    int64_t cap = (int64_t)sm_count() * 64, blocks = j->rows < cap ? j->rows : cap;
    k_jsd_rows<<<(unsigned)blocks, threads, 0, s>>>(*j);
    return cudaGetLastError();
}

/* *cnt = the rows whose label is not ignore_index (one block). */
__global__ void k_jsd_count(struct gf_cu_jsd j)
{
    __shared__ double shd[32];
    double acc = 0;
    for (int64_t r = threadIdx.x; r < j.rows; r += blockDim.x)
        acc += jsd_label(j, r) == j.ii ? 0.0 : 1.0;
    acc = block_sum(acc, shd);
    if (threadIdx.x == 0)
        *j.cnt = acc;
}

/* JSDGrad, c = dLoss / (rows counted), per element of a counted row (zeros
 * on an ignored one), P = e^Y, Q = e^X:
 *   beta 0: dX = -c P,               dY = c P (Y - X + 1)
 *   beta 1: dX = c Q (X - Y + 1),    dY = -c Q
 *   else:   dX = c (1 - beta) Q (X - log M),   dY = c beta P (Y - log M)
 * a zero probability contributing nothing.  dX / dY may be X / Y. */
__global__ void k_jsd_grad(struct gf_cu_jsd j, int64_t total)
{
    float c = (float)((double)j.dl[0] / (j.t ? *j.cnt : (double)j.rows));
    float b = j.beta, b1 = 1.0f - b;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float gx = 0.0f, gy = 0.0f;
        if (!(j.t && jsd_label(j, i / j.n) == j.ii)) {
            float xv = j.x[i], yv = j.y[i], p = expf(yv), q = expf(xv);
            if (b == 0.0f) {
                gx = -p;
                gy = p > 0.0f ? p * (yv - xv + 1.0f) : 0.0f;
            } else if (b == 1.0f) {
                gx = q > 0.0f ? q * (xv - yv + 1.0f) : 0.0f;
                gy = -q;
            } else {
                float lm = logf(b * p + b1 * q);
                gx = q > 0.0f ? b1 * q * (xv - lm) : 0.0f;
                gy = p > 0.0f ? b * p * (yv - lm) : 0.0f;
            }
            gx *= c;
            gy *= c;
        }
        if (j.dx)
            j.dx[i] = gx;
        if (j.dy)
            j.dy[i] = gy;
    }
}

extern "C" cudaError_t gf_cu_jsd_grad(cudaStream_t s, const struct gf_cu_jsd *j)
{
    int64_t total = j->rows * j->n;
    if (total <= 0 || (!j->dx && !j->dy))
        return cudaSuccess;
    if (j->t) {
        k_jsd_count<<<1, RED_BLOCK, 0, s>>>(*j);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    int threads = j->block > 0 ? j->block : 256;
    int64_t blocks = (total + threads - 1) / threads;
    k_jsd_grad<<<(unsigned)(blocks > 65536 ? 65536 : blocks), threads, 0, s>>>(*j, total);
    return cudaGetLastError();
}
