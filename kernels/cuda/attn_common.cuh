/*
 * attn_common.cuh — what the fp32 (fused_attn.cu) and the bf16
 * (fused_attn16.cu) attention kernels share: the mask's slices, tile
 * classes and causal detection, the key ranges a block sees, cp.async
 * copies, the rows' statistics, the online softmax over one tile's C
 * fragments (the m16n8 accumulator layout both products share: c0, c1 at
 * row g, cols 2t, 2t + 1; c2, c3 at row g + 8), and the launch.  CUDA C++,
 * included by those two files only.
 */
#ifndef GF_CU_ATTN_COMMON_CUH
#define GF_CU_ATTN_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include "half_io.h"
#include "launch_mla.h"

#define BK 64 /* keys (queries in k_attn_dkv) of a streamed tile */

/* ---- scores and masks ---------------------------------------------------------------- */

/* The mask's element offset for item it. */
__device__ __forceinline__ int64_t mask_item(const gf_cu_attn &a, int64_t it)
{
    int64_t off = 0;
    for (int d = a.mrank - 1; d >= 0; d--) {
        off += it % a.mbd[d] * a.mbs[d];
        it /= a.mbd[d];
    }
    return off;
}

/* Which of the mask's distinct [Sq, Sk] slices item it reads: its index
 * over the batch dims the mask does not broadcast (the exporters' [B, 1,
 * Sq, Sk] mask is B slices for B x H items), in the order of a.tiles. */
__device__ __forceinline__ int64_t mask_slot(const gf_cu_attn &a, int64_t it)
{
    int64_t slot = 0, mul = 1;
    for (int d = a.mrank - 1; d >= 0; d--) {
        if (a.mbs[d]) {
            slot += it % a.mbd[d] * mul;
            mul *= a.mbd[d];
        }
        it /= a.mbd[d];
    }
    return slot;
}

/* The number of those slices (a.tiles holds the classes of each). */
__host__ __device__ __forceinline__ int64_t mask_slots(const gf_cu_attn *a)
{
    int64_t n = 1;
    for (int d = 0; d < a->mrank; d++)
        if (a->mbs[d])
            n *= a->mbd[d];
    return n;
}

/* The mask's element offset of slice `slot` (mask_slot's inverse). */
__device__ __forceinline__ int64_t slot_offset(const gf_cu_attn &a, int64_t slot)
{
    int64_t off = 0;
    for (int d = a.mrank - 1; d >= 0; d--)
        if (a.mbs[d]) {
            off += slot % a.mbd[d] * a.mbs[d];
            slot /= a.mbd[d];
        }
    return off;
}

/* Whether the block runs the call as causal: the causal attribute, or a
 * mask in memory that k_mask_tiles found to be exactly the causal mask (as
 * the exporters' causal-and-padding mask is without padding; set by
 * set_causal_seen at the top of each kernel).  Then no mask element is
 * read and no work is done past the diagonal; the scores there are -inf
 * either way, so the results are the same bits. */
static __shared__ int causal_seen;

__device__ __forceinline__ bool causal_of(const gf_cu_attn &a)
{
    return a.causal || causal_seen;
}

/* Score (i, j) finished: scale q.k + mask, -inf where masked or outside. */
template <typename M>
__device__ __forceinline__ float finish_score(const gf_cu_attn &a, const M *mk, float dot,
                                              int64_t i, int64_t j)
{
    if (j >= a.sk || i >= a.sq)
        return -INFINITY;
    if (causal_of(a))
        return j > i + (a.sk - a.sq) ? -INFINITY : a.scale * dot;
    float s = a.scale * dot;
    if (mk)
        s = s + gf_ld(mk + i * a.mst_i + j * a.mst_j);
    return s;
}

/* The mask over query rows [q0, q0 + nq) x keys [k0, k0 + nk): 0 when it
 * hides every score (-inf throughout, or outside the matrix: the tile adds
 * exp(-inf) = 0 to every sum and is skipped, as the upper triangle of the
 * exporters' causal-and-padding mask), 2 when every score is inside and
 * its mask 0 (the tile is computed as if unmasked), else 1; 1 without a
 * mask in memory.  Barriers: every thread of the block calls it, and all
 * get the same answer. */
template <typename M>
__device__ __forceinline__ int scan_tile(const gf_cu_attn &a, const M *mk, int64_t q0, int nq,
                                         int64_t k0, int nk)
{
    if (!mk)
        return 1;
    int open = 0, plain = 1;
    for (int e = threadIdx.x; e < nq * nk; e += blockDim.x) {
        int64_t i = q0 + e / nk, j = k0 + e % nk;
        float x = i < a.sq && j < a.sk ? gf_ld(mk + i * a.mst_i + j * a.mst_j) : -INFINITY;
        open |= x != -INFINITY;
        plain &= x == 0.0f;
    }
    if (!__syncthreads_or(open))
        return 0;
    return __syncthreads_and(plain) ? 2 : 1;
}

/* The class of one 64 x 64 tile of a.tiles per block: the mask read once
 * per call instead of by every block of every kernel (the exporters' mask
 * is one [Sq, Sk] per batch item, read by every head). */
/* The flag after a.tiles' classes: nonzero while every mask element seen
 * is the causal mask's (0 where key j <= i + Sk - Sq, -inf above). */
__device__ __forceinline__ int *causal_flag(const gf_cu_attn &a)
{
    int64_t n = mask_slots(&a) * ((a.sq + 63) / 64) * ((a.sk + 63) / 64);
    return (int *)(a.tiles + (n + 15) / 16 * 16);
}

/* causal_seen for this block (every thread calls it first). */
__device__ __forceinline__ void set_causal_seen(const gf_cu_attn &a)
{
    if (threadIdx.x == 0)
        causal_seen = !a.causal && a.mask && a.tiles && *causal_flag(a);
    __syncthreads();
}

/* mask_tile's answer from a.tiles (q0, k0, nq, nk multiples of 64; slot:
 * the item's mask_slot): the entries it covers combined as one scan would
 * (an entry outside the matrix counts as hidden). */
template <typename M>
__device__ __forceinline__ int mask_tile(const gf_cu_attn &a, const M *mk, int64_t slot,
                                         int64_t q0, int nq, int64_t k0, int nk)
{
    if (!mk || !a.tiles)
        return scan_tile(a, mk, q0, nq, k0, nk);
    int64_t nqt = (a.sq + 63) / 64, nkt = (a.sk + 63) / 64;
    const unsigned char *t = a.tiles + slot * nqt * nkt;
    int open = 0, plain = 1;
    for (int64_t qt = q0 / 64; qt * 64 < q0 + nq; qt++)
        for (int64_t kt = k0 / 64; kt * 64 < k0 + nk; kt++) {
            int c = qt < nqt && kt < nkt ? t[qt * nkt + kt] : 0;
            open |= c != 0;
            plain &= c == 2;
        }
    return !open ? 0 : plain ? 2 : 1;
}

/* Keys [0, end) that query rows up to qlast may see. */
__device__ __forceinline__ int64_t key_end(const gf_cu_attn &a, int64_t qlast)
{
    if (!causal_of(a))
        return a.sk;
    int64_t e = qlast + (a.sk - a.sq) + 1;
    return e < 0 ? 0 : e < a.sk ? e : a.sk;
}

/* Groups of 8 keys of the tile at k0 that rows up to qlast may see: [0, n). */
__device__ __forceinline__ int key_groups(const gf_cu_attn &a, int64_t k0, int64_t qlast)
{
    int64_t e = key_end(a, qlast) - k0;
    return e <= 0 ? 0 : e >= BK ? BK / 8 : (int)((e + 7) / 8);
}

/* Asynchronous copies (cp.async): global to shared without registers, so
 * the next tile streams in while the current one is multiplied.  A group
 * per tile; cp_wait<n> waits for all but the newest n groups.  in = false
 * fills zeros (nothing is read). */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool in)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(in ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp4(float *dst, const float *src, bool in)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(in ? 4 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* The row max, 1 / sum and delta of query rows [q0, q0 + BK) into St
 * [3][BK] (0 past Sq). */
__device__ __forceinline__ void fetch_stats(float *St, const gf_cu_attn &a, int64_t it,
                                            int64_t q0)
{
    for (int e = threadIdx.x; e < 3 * BK; e += blockDim.x) {
        int which = e / BK;
        int64_t gq = q0 + e % BK;
        const float *src = which == 0   ? a.lse + it * a.sq
                           : which == 1 ? a.lse + (a.items + it) * a.sq
                                        : a.delta + it * a.sq;
        bool in = gq < a.sq;
        cp4(St + e, in ? src + gq : a.lse, in);
    }
}

/* The first tile at or after t0 (step BK, before end) that the mask leaves
 * open, and its mask_tile state in *st: query rows [q0, q0 + nq) x keys
 * [t0, t0 + BK) (the tiles walk the keys), or queries [t0, t0 + BK) x keys
 * [k0, k0 + nk). */
template <typename M>
__device__ __forceinline__ int64_t open_key_tile(const gf_cu_attn &a, const M *mk,
                                                 int64_t slot, int64_t q0, int nq, int64_t t0,
                                                 int64_t end, int *st)
{
    for (; t0 < end; t0 += BK)
        if ((*st = mask_tile(a, mk, slot, q0, nq, t0, BK)) != 0)
            break;
    return t0;
}

template <typename M>
__device__ __forceinline__ int64_t open_query_tile(const gf_cu_attn &a, const M *mk,
                                                   int64_t slot, int64_t k0, int nk, int64_t t0,
                                                   int64_t end, int *st)
{
    for (; t0 < end; t0 += BK)
        if ((*st = mask_tile(a, mk, slot, t0, BK, k0, nk)) != 0)
            break;
    return t0;
}

__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Score s (the dot q.k) of row i, key j finished: scale s + mask, or just
 * scale s where the warp's tile is full (every score in the matrix and
 * unmasked, checked once per tile). */
template <typename M>
__device__ __forceinline__ float score(const gf_cu_attn &a, const M *mk, bool full, float s,
                                       int64_t i, int64_t j)
{
    return full ? a.scale * s : finish_score(a, mk, s, i, j);
}

/* Whether the scores of rows [r0, r0 + nr) x keys [c0, c0 + nc) are all in
 * the matrix and none masked: no mask in memory or its tile all 0 (st 2),
 * and with a causal one the whole block on or below the diagonal. */
__device__ __forceinline__ bool tile_full(const gf_cu_attn &a, int st, int64_t r0, int nr,
                                          int64_t c0, int nc)
{
    return (!a.mask || st == 2 || causal_seen) && r0 + nr <= a.sq && c0 + nc <= a.sk &&
           (!causal_of(a) || c0 + nc - 1 <= r0 + (a.sk - a.sq));
}

/* exp(x): libm's expf (the fp32 and fp16 kernels), or with FAST the
 * hardware's 2^x on x log2(e) (__expf: a relative error within (2 +
 * 1.17 |x|) 2^-24, x <= 0 here; what the bf16 kernels take, whose P and
 * dS meet bf16 operands: 2^-9) */
template <bool FAST> __device__ __forceinline__ float attn_exp(float x)
{
    if constexpr (FAST)
        return __expf(x);
    else
        return expf(x);
}

/* Online softmax over one tile's scores s (finished in place into P, up to
 * the running max), rows g and g + 8 of the warp: m, l the running max and
 * sum; al[h] each row's factor for what was summed before. */
template <bool FAST, bool ALL, typename M>
__device__ __forceinline__ void online_rows_as(const gf_cu_attn &a, const M *mk, bool full,
                                               float s[BK / 8][4], int64_t row, int64_t k0, int jn,
                                               float m[2], float l[2], float al[2])
{
    int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = -INFINITY;
                if (ALL)
                    x = a.scale * s[j][2 * h + e];
                else if (j < jn)
                    x = score(a, mk, full, s[j][2 * h + e], row + 8 * h, k0 + 8 * j + 2 * t + e);
                s[j][2 * h + e] = x;
                mx = fmaxf(mx, x);
            }
        float mn = fmaxf(m[h], quad_max(mx));
        float mu = mn == -INFINITY ? 0.0f : mn;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = ALL || j < jn ? attn_exp<FAST>(s[j][2 * h + e] - mu) : 0.0f;
                s[j][2 * h + e] = p;
                sum += p;
            }
        al[h] = attn_exp<FAST>(m[h] - mu);
        l[h] = l[h] * al[h] + quad_sum(sum);
        m[h] = mn;
    }
}

#define ATTN_LOG2E 1.4426950408889634f

/* exp(scale s - mu) for the bf16 kernels' whole tiles, as 2^(s c - mu
 * log2(e)) with c = scale log2(e): one fma and one ex2 a score where
 * __expf(scale s - mu) takes a multiply, a subtraction, a multiply and
 * ex2's range fix-ups.  mul = mu log2(e).  It differs from __expf's by a
 * few fp32 ulp of the exponent (relative 2^-20 for scores up to ~30),
 * below the bf16 operands' 2^-9. */
__device__ __forceinline__ float exp_scaled(float s, float c, float mul)
{
    return gf_ex2_ftz(__fmaf_rn(s, c, -mul));
}

/* online_rows_as<true, true> for scale > 0: the max taken over the raw
 * dots and scaled once (rounding is monotone, so it is the max of the
 * scaled scores, bit for bit), the probabilities by exp_scaled. */
__device__ __forceinline__ void online_rows_fast(const gf_cu_attn &a, float s[BK / 8][4],
                                                 float m[2], float l[2], float al[2])
{
    float c = a.scale * ATTN_LOG2E;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
            mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        float mn = fmaxf(m[h], a.scale * quad_max(mx));
        float mu = mn == -INFINITY ? 0.0f : mn, mul = mu * ATTN_LOG2E;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp_scaled(s[j][2 * h + e], c, mul);
                s[j][2 * h + e] = p;
                sum += p;
            }
        al[h] = gf_ex2_ftz((m[h] - mu) * ATTN_LOG2E);
        l[h] = l[h] * al[h] + quad_sum(sum);
        m[h] = mn;
    }
}

/* The same, with the common case — every key of the tile seen, none masked
 * (full, all BK / 8 groups: the same for the warp's 32 lanes) — taken by a
 * copy without a test per score (the same operations: the results do not
 * change), or with FAST (the bf16 kernels) by online_rows_fast. */
template <bool FAST = false, typename M>
__device__ __forceinline__ void online_rows(const gf_cu_attn &a, const M *mk, bool full,
                                            float s[BK / 8][4], int64_t row, int64_t k0, int jn,
                                            float m[2], float l[2], float al[2])
{
    if (FAST && full && jn == BK / 8 && a.scale > 0.0f)
        online_rows_fast(a, s, m, l, al);
    else if (full && jn == BK / 8)
        online_rows_as<FAST, true>(a, mk, full, s, row, k0, jn, m, l, al);
    else
        online_rows_as<FAST, false>(a, mk, full, s, row, k0, jn, m, l, al);
}

/* Block b of a grid of ntile x items: its item and tile; the tiles in
 * order of decreasing work (rev: the last tile first) for the causal case. */
__device__ __forceinline__ void block_tile(const gf_cu_attn &a, int64_t ntile, bool rev,
                                           int64_t *it, int64_t *tile)
{
    int64_t b = blockIdx.x;
    *it = b % a.items;
    *tile = rev ? ntile - 1 - b / a.items : b / a.items;
}

template <typename K>
static cudaError_t launch(K kern, int64_t blocks, int threads, size_t smem, cudaStream_t s,
                          const gf_cu_attn *a)
{
    /* the largest shared memory carve-out: several blocks of 50-100 KiB per SM */
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess)
        return e;
    kern<<<(unsigned)blocks, threads, smem, s>>>(*a);
    return cudaGetLastError();
}

/* The bf16 kernels (fused_attn16.cu), after the mask's tile classes. */
cudaError_t gf_cu_attn16_fwd(cudaStream_t s, const gf_cu_attn *a);
cudaError_t gf_cu_attn16_bwd(cudaStream_t s, const gf_cu_attn *a);

#endif /* GF_CU_ATTN_COMMON_CUH */
