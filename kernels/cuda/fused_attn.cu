/*
 * fused_attn.cu — flash-style attention in fp32 on the tensor cores (host
 * side: fused_attn.c), with fp16 storage; bf16 runs fused_attn16.cu's
 * bf16 tensor-core kernels (same walks; helpers shared: attn_common.cuh).
 *
 * Forward: one block per (item, 16 W query rows), W warps of 16 rows each;
 * K and V in tiles of 64 keys through shared memory; scores, an online
 * softmax (running max and sum per row) and O accumulated in registers: no
 * [Sq, Sk] matrix in memory.
 * The forward writes each row's max and 1 / sum (Stats) when asked.
 * Backward: k_attn_dq walks the keys for dS = P (dP - delta), delta =
 * rowsum(dO O), into dQ = scale dS K, after a first walk that finds each
 * query row's max and sum where the forward's Stats are not given (the
 * same numbers: the same tiles in the same order); it leaves delta (and
 * those statistics) in the workspace for k_attn_dkv, one block per 16 W
 * keys, which walks the query tiles for dV += P^T dO and dK += scale dS^T
 * Q.  No atomics: results repeat exactly.
 *
 * Products: mma.sync m16n8k8 TF32 with the 3xTF32 split (as CUTLASS's
 * OpMultiplyAddFastF32, which PyTorch's fp32 SDPA uses): x = hi + lo, hi =
 * x rounded to TF32's 10 mantissa bits, lo = x - hi (exact in fp32), and
 * a b = lo_a hi_b + hi_a lo_b + hi_a hi_b in fp32 accumulators.  What is
 * dropped (lo_a lo_b, lo's own bits past TF32) is ~2^-22 of the product,
 * fp32's order, where one TF32 product would err by 2^-11.
 *
 * Fragments (PTX ISA, m16n8k8 .tf32; lane = 4 g + t): A a0 (g, t), a1 (g+8,
 * t), a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4, n g); C c0 (g,
 * 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).  A C fragment (scores,
 * P, dS) becomes the next product's A fragment without shuffles by ordering
 * that product's k (keys) as 0 2 4 6 1 3 5 7: {c0, c2, c1, c3} is then an A
 * fragment, and B reads its rows in the same order (frag_b_cols).
 * Shared tiles are [rows][D + 4]: with a row stride of 4 mod 32 banks,
 * every fragment read below touches 32 distinct banks.
 *
 * Causal masks (bottom-right aligned) skip the tiles above the diagonal,
 * and each warp the 8-column groups that none of its rows sees; with a mask
 * in memory, a tile whose every score the mask hides (-inf: the upper
 * triangle of the exporters' causal-and-padding mask) is skipped too, and
 * one whose mask is all 0 is computed as if unmasked.  Tiles stream in by
 * cp.async while the previous one is multiplied.
 * zero_rows (zero_masked_rows): a row that sees no key gives O = 0 and no
 * gradient, where the softmax alone gives NaN; with no keys at all (Sk =
 * 0) O is 0 either way, as the CPU's (a sum over nothing).
 *
 * fp16 (a.type; the kernels' T): Q, K, V, the mask, O and dO are
 * loaded widened to fp32 into the same fp32 tiles (synchronous 16-byte
 * loads of 8 values where rows are whole aligned vectors, else element by
 * element; no cp.async: it cannot convert), the fp32 algorithm runs, and
 * O, dQ, dK, dV are rounded to nearest even once at the store, as the
 * CPU's 16-bit nodes (Stats, delta and the accumulators stay fp32).  A
 * 16-bit value is a TF32 value (fp16's 11 significant bits; its
 * subnormals are normal in fp32), so its split has no lo part: products of
 * two 16-bit tiles (Q K^T, dO V^T and their transposes) take one mma, hi
 * hi, and those of a computed fp32 side with a 16-bit tile (P V, dS K,
 * P^T dO, dS^T Q) two, lo hi + hi hi, with the fp32 path's accuracy.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "attn_common.cuh"

/* ---- storage types ------------------------------------------------------------------------ */

/* fp16 and bf16 are storage only: loaded widened to fp32 (exact), computed
 * as fp32, stored rounded to nearest even once, as the CPU's 16-bit nodes
 * (gf_ld / gf_st: half_io.h). */

/* Whether T is a 16-bit type: every value of one is a TF32 value (bf16's 8
 * and fp16's 11 significant bits; fp16's subnormals are normal in fp32), so
 * its TF32 split has no lo part and a product with it needs fewer mma. */
template <typename T> struct narrow {
    static constexpr bool value = true;
};
template <> struct narrow<float> {
    static constexpr bool value = false;
};

extern "C" int gf_cu_attn_ok(int64_t d, int64_t dv)
{
    return d >= 1 && dv >= 1 && d <= 128 && dv <= 128;
}

/* The class of one 64 x 64 tile of a.tiles per block (scan_tile's), per
 * distinct mask slice (mask_slot): the mask read once per call instead of
 * by every block of every kernel, and once per slice, not per head; and
 * whether the tile is the causal mask's (else the flag is cleared). */
template <typename T>
__global__ void k_mask_tiles(gf_cu_attn a)
{
    int64_t nqt = (a.sq + 63) / 64, nkt = (a.sk + 63) / 64, b = blockIdx.x;
    int64_t kt = b % nkt, qt = b / nkt % nqt, slot = b / nkt / nqt;
    const T *mk = (const T *)a.mask + slot_offset(a, slot);
    int open = 0, plain = 1, causal = 1;
    /* 8 keys a thread: one 16-byte load (32 for fp32) where the row is
     * contiguous and aligned, else element by element */
    bool vec = a.mst_j == 1 && a.mst_i % 8 == 0 && ((uintptr_t)mk & 15) == 0;
    for (int e = threadIdx.x; e < 64 * 8; e += blockDim.x) {
        int64_t i = qt * 64 + e / 8, j0 = kt * 64 + e % 8 * 8;
        float x[8];
        if (vec && i < a.sq && j0 + 8 <= a.sk) {
            gf_ld8f(mk + i * a.mst_i + j0, x);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++)
                x[k] = i < a.sq && j0 + k < a.sk ? gf_ld(mk + i * a.mst_i + (j0 + k) * a.mst_j)
                                                 : -INFINITY;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int64_t j = j0 + k;
            if (i < a.sq && j < a.sk)
                causal &= j <= i + (a.sk - a.sq) ? x[k] == 0.0f : x[k] == -INFINITY;
            open |= x[k] != -INFINITY;
            plain &= x[k] == 0.0f;
        }
    }
    open = __syncthreads_or(open);
    plain = __syncthreads_and(plain);
    causal = __syncthreads_and(causal);
    if (threadIdx.x == 0) {
        a.tiles[b] = (unsigned char)(!open ? 0 : plain ? 2 : 1);
        if (!causal)
            *causal_flag(a) = 0; /* every writer writes 0: no race on the value */
    }
}

/* ---- tiles ------------------------------------------------------------------------------ */

/* Rows [r0, r0 + nr) x cols [0, n) of src (row stride ld; trans: src [n,
 * rows] with stride ld, element (r, c) at c * ld + r) into dst [nr][D + 4]
 * (fp32, T widened), zeros outside, element by element: fetch_tile's path
 * for tiles that are not whole 16-byte aligned rows. */
template <int D, typename T>
__device__ __forceinline__ void load_tile(float *dst, int nr, const T *src, int64_t r0,
                                          int64_t rows, int n, int64_t ld, bool trans)
{
    constexpr int LD = D + 4;
    if (trans) { /* along r: the source's rows are contiguous */
        for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
            int c = e / nr, r = e % nr;
            float v = 0.0f;
            if (c < n && r0 + r < rows)
                v = gf_ld(src + (int64_t)c * ld + r0 + r);
            dst[r * LD + c] = v;
        }
    } else {
        for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
            int r = e / D, c = e % D;
            float v = 0.0f;
            if (c < n && r0 + r < rows)
                v = gf_ld(src + (r0 + r) * ld + c);
            dst[r * LD + c] = v;
        }
    }
}

/* 8 16-bit values (16 bytes) widened into dst[0..7] (16-byte aligned). */
__device__ __forceinline__ void widen8(float *dst, uint4 u, const __half *)
{
    const __half2 *h = (const __half2 *)&u;
    float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]);
    float2 f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
    *(float4 *)dst = make_float4(f0.x, f0.y, f1.x, f1.y);
    *(float4 *)(dst + 4) = make_float4(f2.x, f2.y, f3.x, f3.y);
}

__device__ __forceinline__ void widen8(float *dst, uint4 u, const __nv_bfloat16 *)
{
    /* bf16 is fp32's top half: a shift widens it */
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    float f[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
    *(float4 *)dst = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)(dst + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

/* load_tile, asynchronous where the rows are whole 16-byte aligned float4s
 * (the caller commits the group); else synchronous (visible after the
 * caller's next barrier).  16-bit T: synchronous, 16-byte loads of 8
 * values widened into the fp32 tile where the rows are whole 16-byte
 * aligned vectors (the layout and the products stay the fp32 path's). */
template <int D, typename T>
__device__ __forceinline__ void fetch_tile(float *dst, int nr, const T *src, int64_t r0,
                                           int64_t rows, int n, int64_t ld, bool trans)
{
    constexpr int LD = D + 4;
    if constexpr (narrow<T>::value) {
        if (!trans && n == D && ld % 8 == 0 && ((uintptr_t)src & 15) == 0) {
            for (int e = threadIdx.x; e < nr * (D / 8); e += blockDim.x) {
                int r = e / (D / 8), c = e % (D / 8) * 8;
                uint4 u = make_uint4(0, 0, 0, 0); /* zeros widen to zeros */
                if (r0 + r < rows)
                    u = __ldg((const uint4 *)(src + (r0 + r) * ld + c));
                widen8(dst + r * LD + c, u, src);
            }
        } else {
            load_tile<D>(dst, nr, src, r0, rows, n, ld, trans);
        }
    } else if (!trans && n == D && ld % 4 == 0 && ((uintptr_t)src & 15) == 0) {
        /* each thread the same 16 bytes of every `step`-th row: a pointer
         * that steps (blockDim.x is a multiple of D / 4) */
        int step = blockDim.x / (D / 4), r = threadIdx.x / (D / 4), c = threadIdx.x % (D / 4) * 4;
        int64_t left = rows - r0;
        const T *p = src + (r0 + r) * ld + c;
        int64_t ps = (int64_t)step * ld;
        for (; r < nr; r += step, p += ps)
            cp16(dst + r * LD + c, (const float *)(r < left ? p : src), r < left);
    } else {
        load_tile<D>(dst, nr, src, r0, rows, n, ld, trans);
    }
}

/* ---- 3xTF32 fragments ------------------------------------------------------------------- */

struct frag_a {
    uint32_t h[4], l[4];
};
struct frag_b {
    uint32_t h[2], l[2];
};

/* x = hi + lo: hi rounded to TF32 (half an ulp of the 13 dropped bits
 * added, then cut: to nearest, ties away), lo = x - hi exactly; the tensor
 * cores read lo's top 19 bits. */
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo)
{
    uint32_t h = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    hi = h;
    lo = __float_as_uint(x - __uint_as_float(h));
}

__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* c += a b, the small terms first; EA, EB: a, b exact in TF32 (16-bit
 * inputs: lo = 0, so its products are left out, the result the same) */
template <bool EA = false, bool EB = false>
__device__ __forceinline__ void mma3(float c[4], const frag_a &a, const frag_b &b)
{
    if (!EA)
        mma(c, a.l, b.h);
    if (!EB)
        mma(c, a.h, b.l);
    mma(c, a.h, b.h);
}

/* A = rows 0..15 x cols 0..7 of X (row stride LD). */
template <int LD>
__device__ __forceinline__ frag_a load_a(const float *X)
{
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    frag_a f;
    split(X[g * LD + t], f.h[0], f.l[0]);
    split(X[(g + 8) * LD + t], f.h[1], f.l[1]);
    split(X[g * LD + t + 4], f.h[2], f.l[2]);
    split(X[(g + 8) * LD + t + 4], f.h[3], f.l[3]);
    return f;
}

/* A from a C fragment, k in the order 0 2 4 6 1 3 5 7 (see the top). */
__device__ __forceinline__ frag_a acc_a(const float c[4])
{
    frag_a f;
    split(c[0], f.h[0], f.l[0]);
    split(c[2], f.h[1], f.l[1]);
    split(c[1], f.h[2], f.l[2]);
    split(c[3], f.h[3], f.l[3]);
    return f;
}

/* B (k x n) = X^T: n the rows 0..7 of X, k its cols 0..7. */
template <int LD>
__device__ __forceinline__ frag_b load_b_rows(const float *X)
{
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    frag_b f;
    split(X[g * LD + t], f.h[0], f.l[0]);
    split(X[g * LD + t + 4], f.h[1], f.l[1]);
    return f;
}

/* B (k x n) = X: k the rows 0..7 of X in acc_a's order, n its cols 0..7. */
template <int LD>
__device__ __forceinline__ frag_b load_b_cols(const float *X)
{
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    frag_b f;
    split(X[2 * t * LD + g], f.h[0], f.l[0]);
    split(X[(2 * t + 1) * LD + g], f.h[1], f.l[1]);
    return f;
}

/* s[j] = X Y^T for the warp's 16 rows of X and rows 8j..8j+7 of Y, j in [js,
 * je) (the others 0), over nk steps of 8 columns.  ALL: every j and step
 * (the tiles off the causal diagonal, d a multiple of 8) with no branch
 * between the products, which the compiler then interleaves (fwd+bwd
 * 1.074 -> 0.875 ms at 8x16x512x64 on an H200; loading every j's B
 * fragment first, or two at a time, was slower: more registers). */
template <int D, bool ALL, bool E>
__device__ __forceinline__ void warp_xyt_as(float s[BK / 8][4], const float *X, const float *Y,
                                            int nk, int js, int je)
{
    constexpr int LD = D + 4;
#pragma unroll
    for (int j = 0; j < BK / 8; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 8; kk++) {
        if (ALL || kk < nk) {
            frag_a x = load_a<LD>(X + kk * 8);
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
                if (ALL || (j >= js && j < je))
                    mma3<E, E>(s[j], x, load_b_rows<LD>(Y + j * 8 * LD + kk * 8));
        }
    }
}

/* E: X and Y hold 16-bit values (exact in TF32): one mma per product. */
template <int D, bool E = false>
__device__ __forceinline__ void warp_xyt(float s[BK / 8][4], const float *X, const float *Y,
                                         int nk, int js, int je)
{
    if (nk == D / 8 && js == 0 && je == BK / 8)
        warp_xyt_as<D, true, E>(s, X, Y, nk, js, je);
    else
        warp_xyt_as<D, false, E>(s, X, Y, nk, js, je);
}

/* o[n] += P Y: P the C fragments p[j] (its cols 8j..8j+7, j in [js, je)),
 * Y [BK][LD], output col groups n < nn.  ALL as in warp_xyt_as. */
template <int D, bool ALL, bool EY>
__device__ __forceinline__ void warp_py_as(float o[D / 8][4], const float p[BK / 8][4],
                                           const float *Y, int js, int je, int nn)
{
    constexpr int LD = D + 4;
#pragma unroll
    for (int j = 0; j < BK / 8; j++) {
        if (ALL || (j >= js && j < je)) {
            frag_a x = acc_a(p[j]);
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                if (ALL || n < nn)
                    mma3<false, EY>(o[n], x, load_b_cols<LD>(Y + j * 8 * LD + n * 8));
        }
    }
}

/* EY: Y holds 16-bit values: P's hi and lo parts times Y's (exact) hi,
 * two mma per product where fp32's take three. */
template <int D, bool EY = false>
__device__ __forceinline__ void warp_py(float o[D / 8][4], const float p[BK / 8][4],
                                        const float *Y, int js, int je, int nn)
{
    if (nn == D / 8 && js == 0 && je == BK / 8)
        warp_py_as<D, true, EY>(o, p, Y, js, je, nn);
    else
        warp_py_as<D, false, EY>(o, p, Y, js, je, nn);
}

/* ---- forward ---------------------------------------------------------------------------- */

/* Per key tile: wait for K, S = Q K^T, refill K with the next tile, the
 * softmax, wait for V, O += P V, refill V: each load overlaps half a tile's
 * work (and the other resident blocks' work). */
template <int D, int W, typename T>
__global__ void __launch_bounds__(32 * W) k_attn_fwd(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 4, R = 16 * W;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + R * LD, *Vs = Ks + BK * LD;
    int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t it, qt;
    block_tile(a, (a.sq + R - 1) / R, true, &it, &qt);
    int64_t q0 = qt * R, rw = q0 + 16 * w, row = rw + g; /* this thread's rows: row, row + 8 */
    constexpr bool E = narrow<T>::value;
    const T *q = (const T *)a.q + it * a.sq * a.d, *k = (const T *)a.k + it * a.sk * a.d;
    const T *v = (const T *)a.v + it * a.sk * a.dv;
    const T *mk = a.mask && !causal_seen ? (const T *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0; /* a.tiles' slice */
    int nk = (int)(a.d + 7) / 8, nn = (int)(a.dv + 7) / 8;
    int64_t kld = a.tb ? a.d : a.sk, kend = key_end(a, q0 + R - 1);
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    fetch_tile<D>(Qs, R, q, q0, a.sq, (int)a.d, a.d, false);
    int st = 1, stn = 1;
    int64_t k0 = open_key_tile(a, mk, ms, q0, R, 0, kend, &st);
    if (k0 < kend)
        fetch_tile<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    if (k0 < kend)
        fetch_tile<D>(Vs, BK, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    while (k0 < kend) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        cp_wait<1>(); /* Q and K */
        __syncthreads();
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        float s[BK / 8][4], al[2];
        warp_xyt<D, E>(s, Qs + 16 * w * LD, Ks, nk, 0, jn);
        __syncthreads(); /* every warp is done with K */
        if (kn < kend)
            fetch_tile<D>(Ks, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        online_rows(a, mk, full, s, row, k0, jn, m, l, al);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= al[0], o[n][1] *= al[0];
            o[n][2] *= al[1], o[n][3] *= al[1];
        }
        cp_wait<1>(); /* V */
        __syncthreads();
        warp_py<D, E>(o, s, Vs, 0, jn, nn);
        __syncthreads(); /* every warp is done with V */
        if (kn < kend)
            fetch_tile<D>(Vs, BK, v, kn, a.sk, (int)a.dv, a.dv, false);
        cp_commit();
        k0 = kn, st = stn;
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (gi >= a.sq)
            continue;
        /* no key seen (l = 0): 0 with zero_rows or no keys at all (a sum
         * over nothing, as the CPU's), else the softmax's NaN */
        bool none = l[h] == 0.0f && (a.zero_rows || a.sk == 0);
        if (a.stats && t == 0) { /* as k_attn_dq's first pass finds them */
            bool zr = a.zero_rows && m[h] == -INFINITY;
            a.stats[it * a.sq + gi] = zr ? 0.0f : m[h];
            a.stats[(a.items + it) * a.sq + gi] = zr ? 0.0f : 1.0f / l[h];
        }
        T *out = (T *)a.out + (it * a.sq + gi) * a.dv;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = 8 * n + 2 * t + e;
                if (col < a.dv)
                    gf_st(out + col, none ? 0.0f : o[n][2 * h + e] / l[h]);
            }
    }
}

/* ---- backward: dQ and the rows' statistics ---------------------------------------------- */

/* ws: [items, sq] row max, [items, sq] 1 / row sum (a.lse: 2 x items x sq),
 * [items, sq] delta (a.delta).  Pass 1 streams K tiles through both tile
 * buffers in turn; pass 2 per key tile: wait for V, dP = dO V^T, refill V,
 * wait for K, S = Q K^T, dS, dQ += dS K, refill K. */
template <int D, int W, typename T>
__global__ void __launch_bounds__(32 * W) k_attn_dq(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 4, R = 16 * W;
    extern __shared__ float sm[];
    float *Qs = sm, *Ds = Qs + R * LD, *Ks = Ds + R * LD, *Vs = Ks + BK * LD;
    int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int64_t it, qt;
    block_tile(a, (a.sq + R - 1) / R, true, &it, &qt);
    int64_t q0 = qt * R, rw = q0 + 16 * w, row = rw + g;
    constexpr bool E = narrow<T>::value;
    const T *q = (const T *)a.q + it * a.sq * a.d, *k = (const T *)a.k + it * a.sk * a.d;
    const T *v = (const T *)a.v + it * a.sk * a.dv;
    const T *mk = a.mask && !causal_seen ? (const T *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0; /* a.tiles' slice */
    int nk = (int)(a.d + 7) / 8, nn = (int)(a.dv + 7) / 8;
    int64_t kld = a.tb ? a.d : a.sk, kend = key_end(a, q0 + R - 1);
    fetch_tile<D>(Qs, R, q, q0, a.sq, (int)a.d, a.d, false);
    fetch_tile<D>(Ds, R, (const T *)a.dout + it * a.sq * a.dv, q0, a.sq, (int)a.dv, a.dv, false);
    cp_commit();
    int st = 1, stn = 1;
    int64_t k0 = a.have_stats ? kend : open_key_tile(a, mk, ms, q0, R, 0, kend, &st);
    if (k0 < kend)
        fetch_tile<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    cp_wait<1>(); /* Q and dO */
    __syncthreads();
    /* delta = rowsum(dO O) in double, as the CPU's: each warp its 16 rows */
    float dl[2] = {0.0f, 0.0f};
    const T *ob = (const T *)a.o + it * a.sq * a.dv;
    constexpr int VE = 16 / sizeof(T); /* values in 16 bytes */
    if (a.dv % VE == 0 && ((uintptr_t)ob & 15) == 0) {
        /* lanes 2r, 2r + 1 row r, alternate 16-byte vectors of it, loaded
         * four at a time before their products (one load per row in a
         * dependent loop waited on each) */
        constexpr int NV = D / VE / 2, G = NV < 4 ? NV : 4;
        int r = lane >> 1;
        int64_t gi = rw + r;
        double acc = 0;
#pragma unroll
        for (int u0 = 0; u0 < NV; u0 += G) {
            uint4 ov[G];
#pragma unroll
            for (int u = 0; u < G; u++) {
                int c = (2 * (u0 + u) + (lane & 1)) * VE;
                ov[u] = c < a.dv && gi < a.sq ? *(const uint4 *)(ob + gi * a.dv + c)
                                              : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < G; u++) {
                int c = (2 * (u0 + u) + (lane & 1)) * VE;
                const T *ov8 = (const T *)&ov[u];
#pragma unroll
                for (int e = 0; e < VE; e++)
                    if (c < a.dv)
                        acc += (double)Ds[(16 * w + r) * LD + c + e] * (double)gf_ld(ov8 + e);
            }
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        dl[0] = (float)__shfl_sync(0xffffffffu, acc, 2 * g);
        dl[1] = (float)__shfl_sync(0xffffffffu, acc, 2 * g + 16);
    } else {
        for (int r = 0; r < 16; r++) {
            int64_t gi = rw + r;
            double acc = 0;
            for (int c = lane; c < a.dv && gi < a.sq; c += 32)
                acc += (double)Ds[(16 * w + r) * LD + c] * (double)gf_ld(ob + gi * a.dv + c);
            for (int o = 16; o > 0; o /= 2)
                acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (r == g)
                dl[0] = (float)acc;
            if (r == g + 8)
                dl[1] = (float)acc;
        }
    }
    /* pass 1: the rows' max and sum (none with the forward's Stats: k0 =
     * kend) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int cur = 0; k0 < kend; cur ^= 1) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        if (kn < kend)
            fetch_tile<D>(cur ? Ks : Vs, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        cp_wait<1>(); /* K(k0) */
        __syncthreads();
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        float s[BK / 8][4], al[2];
        warp_xyt<D, E>(s, Qs + 16 * w * LD, cur ? Vs : Ks, nk, 0, jn);
        online_rows(a, mk, full, s, row, k0, jn, m, l, al);
        __syncthreads(); /* every warp is done with this buffer */
        k0 = kn, st = stn;
    }
    /* p = exp(s - m) / l; zero_rows: a row that sees no key gets m = 0, 1 / l
     * = 0, so every p = exp(-inf) 0 = 0 and the row adds nothing anywhere;
     * else its p = exp(-inf + inf) inf = NaN, as the CPU's softmax */
    float li[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (a.have_stats) { /* rows past Sq: p = 0 */
            m[h] = gi < a.sq ? a.lse[it * a.sq + gi] : 0.0f;
            li[h] = gi < a.sq ? a.lse[(a.items + it) * a.sq + gi] : 0.0f;
        } else if (a.zero_rows && m[h] == -INFINITY) {
            m[h] = 0.0f, li[h] = 0.0f;
        } else {
            li[h] = 1.0f / l[h];
        }
        if (t == 0 && gi < a.sq) {
            if (!a.have_stats) {
                a.lse[it * a.sq + gi] = m[h];
                a.lse[(a.items + it) * a.sq + gi] = li[h];
            }
            a.delta[it * a.sq + gi] = dl[h];
        }
    }
    if (!a.dq) {
        cp_wait<0>();
        return;
    }
    /* pass 2: dS = P (dP - delta), dQ += dS K */
    float dq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    k0 = open_key_tile(a, mk, ms, q0, R, 0, kend, &st);
    if (k0 < kend)
        fetch_tile<D>(Vs, BK, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    if (k0 < kend)
        fetch_tile<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    while (k0 < kend) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        cp_wait<1>(); /* V */
        __syncthreads();
        float s[BK / 8][4], dp[BK / 8][4];
        warp_xyt<D, E>(dp, Ds + 16 * w * LD, Vs, nn, 0, jn);
        __syncthreads(); /* every warp is done with V */
        if (kn < kend)
            fetch_tile<D>(Vs, BK, v, kn, a.sk, (int)a.dv, a.dv, false);
        cp_commit();
        cp_wait<1>(); /* K */
        __syncthreads();
        warp_xyt<D, E>(s, Qs + 16 * w * LD, Ks, nk, 0, jn);
        if (full && jn == BK / 8) { /* the common case without a test per score */
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int h = e >> 1;
                    float p = expf(a.scale * s[j][e] - m[h]) * li[h];
                    s[j][e] = p * (dp[j][e] - dl[h]);
                }
        } else {
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int h = e >> 1;
                    float ds = 0.0f;
                    if (j < jn) {
                        float x = score(a, mk, full, s[j][e], row + 8 * h,
                                        k0 + 8 * j + 2 * t + (e & 1));
                        float p = expf(x - m[h]) * li[h];
                        ds = p * (dp[j][e] - dl[h]);
                    }
                    s[j][e] = ds;
                }
        }
        warp_py<D, E>(dq, s, Ks, 0, jn, nk);
        __syncthreads(); /* every warp is done with K */
        if (kn < kend)
            fetch_tile<D>(Ks, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        k0 = kn, st = stn;
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (gi >= a.sq)
            continue;
        T *out = (T *)a.dq + (it * a.sq + gi) * a.d;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = 8 * n + 2 * t + e;
                if (col < a.d)
                    gf_st(out + col, a.scale * dq[n][2 * h + e]);
            }
    }
}

/* ---- backward: dK, dV ------------------------------------------------------------------- */

/* dK, dV of 16 W keys (16 per warp): over the query tiles that see them.
 * (Three blocks of 4 warps per SM at d 64: 168 registers, a few spilled.)
 * Per query tile: wait for dO, dP^T = V dO^T, wait for Q (and the rows'
 * statistics), S^T = K Q^T, dS^T, dV += P^T dO, refill dO, dK += dS^T Q,
 * refill Q. */
template <int D, int W, typename T>
__global__ void __launch_bounds__(32 * W, D == 64 && W == 4 ? 3 : 1) k_attn_dkv(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 4, R = 16 * W;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + R * LD, *Qs = Vs + R * LD, *Ds = Qs + BK * LD;
    float *St = Ds + BK * LD; /* [3][BK]: the tile's rows' max, 1 / sum, delta */
    int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t it, kt;
    block_tile(a, (a.sk + R - 1) / R, false, &it, &kt);
    int64_t k0 = kt * R, kw = k0 + 16 * w, key = kw + g; /* this thread's keys: key, key + 8 */
    constexpr bool E = narrow<T>::value;
    const T *q = (const T *)a.q + it * a.sq * a.d, *k = (const T *)a.k + it * a.sk * a.d;
    const T *v = (const T *)a.v + it * a.sk * a.dv, *dout = (const T *)a.dout + it * a.sq * a.dv;
    const T *mk = a.mask && !causal_seen ? (const T *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0; /* a.tiles' slice */
    int nk = (int)(a.d + 7) / 8, nn = (int)(a.dv + 7) / 8;
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    fetch_tile<D>(Ks, R, k, k0, a.sk, (int)a.d, a.tb ? a.d : a.sk, !a.tb);
    fetch_tile<D>(Vs, R, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    /* causal: query i sees key j when j <= i + (sk - sq) */
    int64_t qstart = causal_of(a) ? k0 - (a.sk - a.sq) : 0;
    qstart = qstart < 0 ? 0 : qstart / BK * BK;
    int st = 1, stn = 1;
    int64_t q0 = open_query_tile(a, mk, ms, k0, R, qstart, a.sq, &st);
    if (q0 < a.sq)
        fetch_tile<D>(Ds, BK, dout, q0, a.sq, (int)a.dv, a.dv, false);
    cp_commit();
    if (q0 < a.sq) {
        fetch_tile<D>(Qs, BK, q, q0, a.sq, (int)a.d, a.d, false);
        fetch_stats(St, a, it, q0);
    }
    cp_commit();
    while (q0 < a.sq) {
        int64_t qn = open_query_tile(a, mk, ms, k0, R, q0 + BK, a.sq, &stn);
        /* the groups of 8 queries [js, je) that may see this warp's keys */
        int64_t rem = a.sq - q0;
        int je = rem >= BK ? BK / 8 : (int)((rem + 7) / 8), js = 0;
        if (causal_of(a)) {
            int64_t first = kw - (a.sk - a.sq) - q0; /* the first query that sees key kw */
            js = first <= 0 ? 0 : first >= BK ? BK / 8 : (int)(first / 8);
        }
        bool full = tile_full(a, st, q0, BK, kw, 16);
        float s[BK / 8][4], dp[BK / 8][4];
        cp_wait<1>(); /* K, V and dO */
        __syncthreads();
        warp_xyt<D, E>(dp, Vs + 16 * w * LD, Ds, nn, js, je); /* dP^T: keys x queries */
        cp_wait<0>(); /* Q and the statistics */
        __syncthreads();
        warp_xyt<D, E>(s, Ks + 16 * w * LD, Qs, nk, js, je); /* S^T */
        if (full && js == 0 && je == BK / 8) { /* the common case without a test per score */
#pragma unroll
            for (int j = 0; j < BK / 8; j++) {
                float2 mx = *(const float2 *)&St[8 * j + 2 * t];
                float2 li = *(const float2 *)&St[BK + 8 * j + 2 * t];
                float2 dl = *(const float2 *)&St[2 * BK + 8 * j + 2 * t];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = expf(a.scale * s[j][e] - (e & 1 ? mx.y : mx.x)) *
                              (e & 1 ? li.y : li.x);
                    dp[j][e] = p * (dp[j][e] - (e & 1 ? dl.y : dl.x));
                    s[j][e] = p;
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < BK / 8; j++) {
                float2 mx = *(const float2 *)&St[8 * j + 2 * t];
                float2 li = *(const float2 *)&St[BK + 8 * j + 2 * t];
                float2 dl = *(const float2 *)&St[2 * BK + 8 * j + 2 * t];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = 8 * j + 2 * t + (e & 1);
                    float p = 0.0f, ds = 0.0f;
                    if (j >= js && j < je) {
                        float x = score(a, mk, full, s[j][e], q0 + qi, key + 8 * (e >> 1));
                        p = expf(x - (e & 1 ? mx.y : mx.x)) * (e & 1 ? li.y : li.x);
                        ds = p * (dp[j][e] - (e & 1 ? dl.y : dl.x));
                    }
                    s[j][e] = p;
                    dp[j][e] = ds;
                }
            }
        }
        if (a.dvv)
            warp_py<D, E>(dv, s, Ds, js, je, nn);
        __syncthreads(); /* every warp is done with dO */
        if (qn < a.sq)
            fetch_tile<D>(Ds, BK, dout, qn, a.sq, (int)a.dv, a.dv, false);
        cp_commit();
        if (a.dk)
            warp_py<D, E>(dk, dp, Qs, js, je, nk);
        __syncthreads(); /* every warp is done with Q and the statistics */
        if (qn < a.sq) {
            fetch_tile<D>(Qs, BK, q, qn, a.sq, (int)a.d, a.d, false);
            fetch_stats(St, a, it, qn);
        }
        cp_commit();
        q0 = qn, st = stn;
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gk = key + 8 * h;
        if (gk >= a.sk)
            continue;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = 8 * n + 2 * t + e;
                if (a.dk && col < a.d) {
                    int64_t off = a.tb ? (it * a.sk + gk) * a.d + col
                                       : it * a.sk * a.d + col * a.sk + gk;
                    gf_st((T *)a.dk + off, a.scale * dk[n][2 * h + e]);
                }
                if (a.dvv && col < a.dv)
                    gf_st((T *)a.dvv + (it * a.sk + gk) * a.dv + col, dv[n][2 * h + e]);
            }
    }
}

/* ---- launches ------------------------------------------------------------------------------ */

/* Shared bytes: n_r tiles of r rows and n_k of BK rows, [D + 4] each, plus extra floats. */
static size_t smem_bytes(int d, int r, int n_r, int n_k, int extra)
{
    return ((size_t)(n_r * r + n_k * BK) * (d + 4) + extra) * sizeof(float);
}

template <int D, int W, typename T>
static cudaError_t fwd_as(cudaStream_t s, const gf_cu_attn *a)
{
    int64_t tiles = (a->sq + 16 * W - 1) / (16 * W);
    return launch(k_attn_fwd<D, W, T>, tiles * a->items, 32 * W, smem_bytes(D, 16 * W, 1, 2, 0), s,
                  a);
}

template <int D, int W, typename T>
static cudaError_t dq_as(cudaStream_t s, const gf_cu_attn *a)
{
    int64_t tiles = (a->sq + 16 * W - 1) / (16 * W);
    return launch(k_attn_dq<D, W, T>, tiles * a->items, 32 * W, smem_bytes(D, 16 * W, 2, 2, 0), s,
                  a);
}

template <int D, int W, typename T>
static cudaError_t dkv_as(cudaStream_t s, const gf_cu_attn *a)
{
    int64_t tiles = (a->sk + 16 * W - 1) / (16 * W);
    return launch(k_attn_dkv<D, W, T>, tiles * a->items, 32 * W,
                  smem_bytes(D, 16 * W, 2, 2, 3 * BK), s, a);
}

extern "C" size_t gf_cu_attn_tiles_bytes(const struct gf_cu_attn *a)
{
    size_t n = (size_t)(mask_slots(a) * ((a->sq + 63) / 64) * ((a->sk + 63) / 64));
    return n ? (n + 15) / 16 * 16 + sizeof(int) : 0; /* + causal_flag */
}

/* a->tiles from the mask (of a->type), when both are there. */
static cudaError_t mask_tiles(cudaStream_t s, const gf_cu_attn *a)
{
    size_t n = gf_cu_attn_tiles_bytes(a);
    if (!a->mask || !a->tiles || n == 0)
        return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(a->tiles + (n - sizeof(int)), 1, sizeof(int), s);
    if (e != cudaSuccess)
        return e;
    n = (size_t)(mask_slots(a) * ((a->sq + 63) / 64) * ((a->sk + 63) / 64)); /* tiles */
    if (a->type == GF_CU_F16)
        k_mask_tiles<__half><<<(unsigned)n, 256, 0, s>>>(*a);
    else if (a->type == GF_CU_BF16)
        k_mask_tiles<__nv_bfloat16><<<(unsigned)n, 256, 0, s>>>(*a);
    else
        k_mask_tiles<float><<<(unsigned)n, 256, 0, s>>>(*a);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t fwd_t(cudaStream_t s, const gf_cu_attn *a)
{
    bool big = a->d > 64 || a->dv > 64, w8 = a->warps == 8;
    return big ? (w8 ? fwd_as<128, 8, T>(s, a) : fwd_as<128, 4, T>(s, a))
               : (w8 ? fwd_as<64, 8, T>(s, a) : fwd_as<64, 4, T>(s, a));
}

extern "C" cudaError_t gf_cu_attn_fwd(cudaStream_t s, const struct gf_cu_attn *a)
{
    if (a->items <= 0 || a->sq <= 0)
        return cudaSuccess;
    cudaError_t e = mask_tiles(s, a);
    if (e != cudaSuccess)
        return e;
    return a->type == GF_CU_F16    ? fwd_t<__half>(s, a)
           : a->type == GF_CU_BF16 ? gf_cu_attn16_fwd(s, a)
                                   : fwd_t<float>(s, a);
}

template <typename T>
static cudaError_t bwd_t(cudaStream_t s, const gf_cu_attn *a)
{
    bool big = a->d > 64 || a->dv > 64, w8 = a->warps == 8;
    cudaError_t e = a->sq > 0 ? mask_tiles(s, a) : cudaSuccess;
    if (e == cudaSuccess && a->sq > 0)
        e = big ? (w8 ? dq_as<128, 8, T>(s, a) : dq_as<128, 4, T>(s, a))
                : (w8 ? dq_as<64, 8, T>(s, a) : dq_as<64, 4, T>(s, a));
    if (e != cudaSuccess || a->sk <= 0 || !(a->dk || a->dvv))
        return e;
    return big ? (w8 ? dkv_as<128, 8, T>(s, a) : dkv_as<128, 4, T>(s, a))
               : (w8 ? dkv_as<64, 8, T>(s, a) : dkv_as<64, 4, T>(s, a));
}

extern "C" cudaError_t gf_cu_attn_bwd(cudaStream_t s, const struct gf_cu_attn *a)
{
    if (a->items <= 0)
        return cudaSuccess;
    if (a->type == GF_CU_BF16) {
        cudaError_t e = a->sq > 0 ? mask_tiles(s, a) : cudaSuccess;
        return e == cudaSuccess ? gf_cu_attn16_bwd(s, a) : e;
    }
    return a->type == GF_CU_F16 ? bwd_t<__half>(s, a) : bwd_t<float>(s, a);
}
