/*
 * fused_attn16.cu — attention in bf16 on the tensor cores: mma.sync
 * m16n8k16 .bf16 with fp32 accumulators (the fp32 and fp16 kernels are
 * fused_attn.cu's 3xTF32 ones; the host side is fused_attn.c).
 *
 * The same blocks, tiles, walks, masks and statistics as fused_attn.cu's
 * kernels (forward: one block per 16 W query rows, K and V streamed in
 * tiles of 64 keys, an online softmax; backward: k_attn16_dq for dQ and
 * the rows' statistics and delta, k_attn16_dkv for dK and dV, no atomics),
 * with the tiles kept in shared memory as bf16 — half the bytes, loaded by
 * cp.async straight from the tensors — and read into fragments by
 * ldmatrix.
 *
 * Products of two bf16 operands (Q K^T, dO V^T and their transposes) are
 * one mma per 16 of k.  The computed side of the others (P in P V and P^T
 * dO, dS in dS K and dS^T Q) is fp32 in the accumulators: it is split into
 * two bf16 parts, hi = x rounded to bf16 and lo = (x - hi) rounded to bf16
 * (x = hi + lo within 2^-17 x), and multiplied as lo b + hi b, two mma,
 * where flash attention rounds P and dS to bf16 once (2^-9): the result is
 * the fp32 computation's within fp32 accumulation error, as the CPU's
 * 16-bit Attention (which computes in fp32 on the rounded inputs).
 *
 * Fragments (PTX ISA, m16n8k16 .bf16; lane = 4 g + t): A regs {a0 a1}
 * (row g, k 2t, 2t+1), {a2 a3} (g + 8, same k), {a4 a5} (g, 2t + 8, 2t + 9),
 * {a6 a7} (g + 8, 2t + 8, 2t + 9); B {b0 b1} (k 2t, 2t+1, n g), {b2 b3} (k
 * 2t + 8, 2t + 9, n g); C as the m16n8k8 one (attn_common.cuh).  So the C
 * fragments of key groups 2kk and 2kk + 1 are, packed in pairs, the A
 * fragment of keys 16kk..16kk+15, without shuffles.  ldmatrix.x4 loads an
 * A fragment (16 rows x 16 of k) of a row-major tile, or the B fragments
 * of two groups of 8 n: non-transposed where the tile's rows are n (K in
 * Q K^T), transposed (.trans) where they are k (V in P V).
 * Shared tiles are [rows][D + 8] bf16: a row is D / 8 + 1 16-byte units,
 * an odd number, so the eight rows of one 8 x 8 matrix hit eight distinct
 * 16-byte bank groups.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "attn_common.cuh"

typedef __nv_bfloat16 bf16;

/* ---- tiles ------------------------------------------------------------------------------ */

/* Rows [r0, r0 + nr) x cols [0, n) of src (row stride ld; trans: src [n,
 * rows], element (r, c) at c * ld + r) into dst [nr][D + 8], zeros outside:
 * by cp.async where the rows are whole 16-byte aligned vectors (the caller
 * commits the group), else element by element (visible after the caller's
 * next barrier). */
template <int D>
__device__ __forceinline__ void fetch16(bf16 *dst, int nr, const bf16 *src, int64_t r0,
                                        int64_t rows, int n, int64_t ld, bool trans)
{
    constexpr int LD = D + 8;
    const uint16_t *s = (const uint16_t *)src;
    uint16_t *d = (uint16_t *)dst;
    if (!trans && n == D && ld % 8 == 0 && ((uintptr_t)src & 15) == 0) {
        /* each thread the same 16 bytes of every `step`-th row: a pointer
         * that steps, not a 64-bit index per vector (blockDim.x is a
         * multiple of D / 8) */
        int step = blockDim.x / (D / 8), r = threadIdx.x / (D / 8), c = threadIdx.x % (D / 8) * 8;
        int64_t left = rows - r0; /* rows in the tensor from r0 */
        const uint16_t *p = s + (r0 + r) * ld + c;
        int64_t ps = (int64_t)step * ld;
        for (; r < nr; r += step, p += ps)
            cp16(d + r * LD + c, r < left ? p : s, r < left);
    } else if (trans) { /* along r: the source's rows are contiguous */
        for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
            int c = e / nr, r = e % nr;
            d[r * LD + c] = c < n && r0 + r < rows ? s[(int64_t)c * ld + r0 + r] : 0;
        }
    } else {
        for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
            int r = e / D, c = e % D;
            d[r * LD + c] = c < n && r0 + r < rows ? s[(r0 + r) * ld + c] : 0;
        }
    }
}

/* ---- fragments ---------------------------------------------------------------------------- */

__device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ void ldsm4t(uint32_t r[4], const bf16 *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* A = rows 0..15 x cols 0..15 of X (row stride LD). */
template <int LD>
__device__ __forceinline__ void frag_x(uint32_t a[4], const bf16 *X)
{
    int lane = threadIdx.x & 31;
    ldsm4(a, X + (lane & 15) * LD + (lane >> 4) * 8);
}

/* B (k x n) = Y^T for n the rows 0..15 of Y, k its cols 0..15: b[0], b[1]
 * rows 0..7, b[2], b[3] rows 8..15. */
template <int LD>
__device__ __forceinline__ void frag_yt(uint32_t b[4], const bf16 *Y)
{
    int lane = threadIdx.x & 31;
    ldsm4(b, Y + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8);
}

/* B (k x n) = Y for k the rows 0..15 of Y, n its cols 0..15: b[0], b[1]
 * cols 0..7, b[2], b[3] cols 8..15. */
template <int LD>
__device__ __forceinline__ void frag_y(uint32_t b[4], const bf16 *Y)
{
    int lane = threadIdx.x & 31;
    ldsm4t(b, Y + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8);
}

__device__ __forceinline__ void mma16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* x, y as bf16 pairs hi (x, y rounded) and lo (the rest, rounded). */
__device__ __forceinline__ void split2(float x, float y, uint32_t &hi, uint32_t &lo)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    float2 f = __bfloat1622float2(h);
    __nv_bfloat162 l = __floats2bfloat162_rn(x - f.x, y - f.y);
    hi = *(uint32_t *)&h;
    lo = *(uint32_t *)&l;
}

/* s[j] = X Y^T for the warp's 16 rows of X and rows 8j..8j+7 of Y (BK of
 * them), over D columns (zeros past the tensors' widths). */
template <int D>
__device__ __forceinline__ void xyt16(float s[BK / 8][4], const bf16 *X, const bf16 *Y)
{
    constexpr int LD = D + 8;
#pragma unroll
    for (int j = 0; j < BK / 8; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t x[4];
        frag_x<LD>(x, X + kk * 16);
#pragma unroll
        for (int jp = 0; jp < BK / 16; jp++) {
            uint32_t b[4];
            frag_yt<LD>(b, Y + jp * 16 * LD + kk * 16);
            mma16(s[2 * jp], x, b[0], b[1]);
            mma16(s[2 * jp + 1], x, b[2], b[3]);
        }
    }
}

/* o[n] += P Y: P the fp32 C fragments p[j] (its cols 8j..8j+7), Y [BK][D +
 * 8] (its rows P's cols), split into hi and lo parts: two mma each. */
template <int D>
__device__ __forceinline__ void py16(float o[D / 8][4], const float p[BK / 8][4], const bf16 *Y)
{
    constexpr int LD = D + 8;
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
        uint32_t h[4], l[4];
        split2(p[2 * kk][0], p[2 * kk][1], h[0], l[0]);
        split2(p[2 * kk][2], p[2 * kk][3], h[1], l[1]);
        split2(p[2 * kk + 1][0], p[2 * kk + 1][1], h[2], l[2]);
        split2(p[2 * kk + 1][2], p[2 * kk + 1][3], h[3], l[3]);
#pragma unroll
        for (int np = 0; np < D / 16; np++) {
            uint32_t b[4];
            frag_y<LD>(b, Y + kk * 16 * LD + np * 16);
            mma16(o[2 * np], l, b[0], b[1]);
            mma16(o[2 * np + 1], l, b[2], b[3]);
            mma16(o[2 * np], h, b[0], b[1]);
            mma16(o[2 * np + 1], h, b[2], b[3]);
        }
    }
}

/* ---- forward ---------------------------------------------------------------------------- */

/* As k_attn_fwd: per key tile, wait for K, S = Q K^T, refill K, the
 * softmax, wait for V, O += P V, refill V. */
template <int D, int W>
__global__ void __launch_bounds__(32 * W) k_attn16_fwd(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 8, R = 16 * W;
    extern __shared__ __align__(16) unsigned char sm16[];
    bf16 *Qs = (bf16 *)sm16, *Ks = Qs + R * LD, *Vs = Ks + BK * LD;
    int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t it, qt;
    block_tile(a, (a.sq + R - 1) / R, true, &it, &qt);
    int64_t q0 = qt * R, rw = q0 + 16 * w, row = rw + g; /* this thread's rows: row, row + 8 */
    const bf16 *q = (const bf16 *)a.q + it * a.sq * a.d, *k = (const bf16 *)a.k + it * a.sk * a.d;
    const bf16 *v = (const bf16 *)a.v + it * a.sk * a.dv;
    const bf16 *mk = a.mask && !causal_seen ? (const bf16 *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0; /* a.tiles' slice */
    int64_t kld = a.tb ? a.d : a.sk, kend = key_end(a, q0 + R - 1);
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    fetch16<D>(Qs, R, q, q0, a.sq, (int)a.d, a.d, false);
    int st = 1, stn = 1;
    int64_t k0 = open_key_tile(a, mk, ms, q0, R, 0, kend, &st);
    if (k0 < kend)
        fetch16<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    if (k0 < kend)
        fetch16<D>(Vs, BK, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    while (k0 < kend) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        cp_wait<1>(); /* Q and K */
        __syncthreads();
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        float s[BK / 8][4], al[2];
        xyt16<D>(s, Qs + 16 * w * LD, Ks);
        __syncthreads(); /* every warp is done with K */
        if (kn < kend)
            fetch16<D>(Ks, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        online_rows<true>(a, mk, full, s, row, k0, jn, m, l, al);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= al[0], o[n][1] *= al[0];
            o[n][2] *= al[1], o[n][3] *= al[1];
        }
        cp_wait<1>(); /* V */
        __syncthreads();
        py16<D>(o, s, Vs);
        __syncthreads(); /* every warp is done with V */
        if (kn < kend)
            fetch16<D>(Vs, BK, v, kn, a.sk, (int)a.dv, a.dv, false);
        cp_commit();
        k0 = kn, st = stn;
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (gi >= a.sq)
            continue;
        bool none = l[h] == 0.0f && (a.zero_rows || a.sk == 0); /* as k_attn_fwd */
        if (a.stats && t == 0) {
            bool zr = a.zero_rows && m[h] == -INFINITY;
            a.stats[it * a.sq + gi] = zr ? 0.0f : m[h];
            a.stats[(a.items + it) * a.sq + gi] = zr ? 0.0f : 1.0f / l[h];
        }
        bf16 *out = (bf16 *)a.out + (it * a.sq + gi) * a.dv;
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

/* As k_attn_dq: the rows' statistics (pass 1, without the forward's Stats)
 * and delta into the workspace, then per key tile dP = dO V^T, S = Q K^T,
 * dS = P (dP - delta), dQ += dS K. */
template <int D, int W>
__global__ void __launch_bounds__(32 * W, D == 64 && W == 4 ? 4 : 0) k_attn16_dq(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 8, R = 16 * W;
    extern __shared__ __align__(16) unsigned char sm16[];
    bf16 *Qs = (bf16 *)sm16, *Ds = Qs + R * LD, *Ks = Ds + R * LD, *Vs = Ks + BK * LD;
    int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int64_t it, qt;
    block_tile(a, (a.sq + R - 1) / R, true, &it, &qt);
    int64_t q0 = qt * R, rw = q0 + 16 * w, row = rw + g;
    const bf16 *q = (const bf16 *)a.q + it * a.sq * a.d, *k = (const bf16 *)a.k + it * a.sk * a.d;
    const bf16 *v = (const bf16 *)a.v + it * a.sk * a.dv;
    const bf16 *mk = a.mask && !causal_seen ? (const bf16 *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0;
    int64_t kld = a.tb ? a.d : a.sk, kend = key_end(a, q0 + R - 1);
    fetch16<D>(Qs, R, q, q0, a.sq, (int)a.d, a.d, false);
    fetch16<D>(Ds, R, (const bf16 *)a.dout + it * a.sq * a.dv, q0, a.sq, (int)a.dv, a.dv, false);
    cp_commit();
    int st = 1, stn = 1;
    int64_t k0 = a.have_stats ? kend : open_key_tile(a, mk, ms, q0, R, 0, kend, &st);
    if (k0 < kend)
        fetch16<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    cp_wait<1>(); /* Q and dO */
    __syncthreads();
    /* delta = rowsum(dO O) in double, as the CPU's: each warp its 16 rows */
    float dl[2] = {0.0f, 0.0f};
    const bf16 *ob = (const bf16 *)a.o + it * a.sq * a.dv;
    if (a.dv % 8 == 0 && ((uintptr_t)ob & 15) == 0) {
        /* lanes 2r, 2r + 1 row r, alternate 8-value vectors of it: every
         * load of the warp issued before the first product waits */
        int r = lane >> 1;
        int64_t gi = rw + r;
        uint4 ov[D / 16];
#pragma unroll
        for (int u = 0; u < D / 16; u++) {
            int c = (2 * u + (lane & 1)) * 8;
            ov[u] = c < a.dv && gi < a.sq ? *(const uint4 *)(ob + gi * a.dv + c)
                                          : make_uint4(0, 0, 0, 0);
        }
        double acc = 0;
#pragma unroll
        for (int u = 0; u < D / 16; u++) {
            int c = (2 * u + (lane & 1)) * 8;
            const bf16 *ov8 = (const bf16 *)&ov[u];
#pragma unroll
            for (int e = 0; e < 8; e++)
                if (c < a.dv)
                    acc += (double)__bfloat162float(Ds[(16 * w + r) * LD + c + e]) *
                           (double)__bfloat162float(ov8[e]);
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        dl[0] = (float)__shfl_sync(0xffffffffu, acc, 2 * g);
        dl[1] = (float)__shfl_sync(0xffffffffu, acc, 2 * g + 16);
    } else {
        for (int r = 0; r < 16; r++) {
            int64_t gi = rw + r;
            double acc = 0;
            for (int c = lane; c < a.dv && gi < a.sq; c += 32)
                acc += (double)__bfloat162float(Ds[(16 * w + r) * LD + c]) *
                       (double)gf_ld(ob + gi * a.dv + c);
            for (int o = 16; o > 0; o /= 2)
                acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (r == g)
                dl[0] = (float)acc;
            if (r == g + 8)
                dl[1] = (float)acc;
        }
    }
    /* pass 1: the rows' max and sum (none with the forward's Stats) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int cur = 0; k0 < kend; cur ^= 1) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        if (kn < kend)
            fetch16<D>(cur ? Ks : Vs, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        cp_wait<1>(); /* K(k0) */
        __syncthreads();
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        float s[BK / 8][4], al[2];
        xyt16<D>(s, Qs + 16 * w * LD, cur ? Vs : Ks);
        online_rows<true>(a, mk, full, s, row, k0, jn, m, l, al);
        __syncthreads(); /* every warp is done with this buffer */
        k0 = kn, st = stn;
    }
    float li[2]; /* as k_attn_dq */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (a.have_stats) {
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
        fetch16<D>(Vs, BK, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    if (k0 < kend)
        fetch16<D>(Ks, BK, k, k0, a.sk, (int)a.d, kld, !a.tb);
    cp_commit();
    while (k0 < kend) {
        int64_t kn = open_key_tile(a, mk, ms, q0, R, k0 + BK, kend, &stn);
        int jn = key_groups(a, k0, rw + 15);
        bool full = tile_full(a, st, rw, 16, k0, BK);
        cp_wait<1>(); /* V */
        __syncthreads();
        float s[BK / 8][4], dp[BK / 8][4];
        xyt16<D>(dp, Ds + 16 * w * LD, Vs);
        __syncthreads(); /* every warp is done with V */
        if (kn < kend)
            fetch16<D>(Vs, BK, v, kn, a.sk, (int)a.dv, a.dv, false);
        cp_commit();
        cp_wait<1>(); /* K */
        __syncthreads();
        xyt16<D>(s, Qs + 16 * w * LD, Ks);
        if (full && jn == BK / 8 && a.scale > 0.0f) { /* the common case: no test per score */
            float c = a.scale * ATTN_LOG2E, ml[2] = {m[0] * ATTN_LOG2E, m[1] * ATTN_LOG2E};
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int h = e >> 1;
                    float p = exp_scaled(s[j][e], c, ml[h]) * li[h];
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
                        float p = attn_exp<true>(x - m[h]) * li[h];
                        ds = p * (dp[j][e] - dl[h]);
                    }
                    s[j][e] = ds;
                }
        }
        py16<D>(dq, s, Ks);
        __syncthreads(); /* every warp is done with K */
        if (kn < kend)
            fetch16<D>(Ks, BK, k, kn, a.sk, (int)a.d, kld, !a.tb);
        cp_commit();
        k0 = kn, st = stn;
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t gi = row + 8 * h;
        if (gi >= a.sq)
            continue;
        bf16 *out = (bf16 *)a.dq + (it * a.sq + gi) * a.d;
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

/* As k_attn_dkv: dK, dV of 16 W keys over the query tiles that see them;
 * per query tile dP^T = V dO^T, S^T = K Q^T, dS^T, dV += P^T dO, dK +=
 * dS^T Q. */
template <int D, int W>
__global__ void __launch_bounds__(32 * W, D == 64 && W == 4 ? 2 : 1) k_attn16_dkv(gf_cu_attn a)
{
    set_causal_seen(a);
    constexpr int LD = D + 8, R = 16 * W;
    extern __shared__ __align__(16) unsigned char sm16[];
    float *St = (float *)sm16; /* [3][BK]: the tile's rows' max, 1 / sum, delta */
    bf16 *Ks = (bf16 *)(St + 3 * BK), *Vs = Ks + R * LD, *Qs = Vs + R * LD, *Ds = Qs + BK * LD;
    int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t it, kt;
    block_tile(a, (a.sk + R - 1) / R, false, &it, &kt);
    int64_t k0 = kt * R, kw = k0 + 16 * w, key = kw + g; /* this thread's keys: key, key + 8 */
    const bf16 *q = (const bf16 *)a.q + it * a.sq * a.d, *k = (const bf16 *)a.k + it * a.sk * a.d;
    const bf16 *v = (const bf16 *)a.v + it * a.sk * a.dv;
    const bf16 *dout = (const bf16 *)a.dout + it * a.sq * a.dv;
    const bf16 *mk = a.mask && !causal_seen ? (const bf16 *)a.mask + mask_item(a, it) : NULL;
    const int64_t ms = mk && a.tiles ? mask_slot(a, it) : 0;
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    fetch16<D>(Ks, R, k, k0, a.sk, (int)a.d, a.tb ? a.d : a.sk, !a.tb);
    fetch16<D>(Vs, R, v, k0, a.sk, (int)a.dv, a.dv, false);
    cp_commit();
    int64_t qstart = causal_of(a) ? k0 - (a.sk - a.sq) : 0; /* as k_attn_dkv */
    qstart = qstart < 0 ? 0 : qstart / BK * BK;
    int st = 1, stn = 1;
    int64_t q0 = open_query_tile(a, mk, ms, k0, R, qstart, a.sq, &st);
    if (q0 < a.sq)
        fetch16<D>(Ds, BK, dout, q0, a.sq, (int)a.dv, a.dv, false);
    cp_commit();
    if (q0 < a.sq) {
        fetch16<D>(Qs, BK, q, q0, a.sq, (int)a.d, a.d, false);
        fetch_stats(St, a, it, q0);
    }
    cp_commit();
    while (q0 < a.sq) {
        int64_t qn = open_query_tile(a, mk, ms, k0, R, q0 + BK, a.sq, &stn);
        int64_t rem = a.sq - q0;
        int je = rem >= BK ? BK / 8 : (int)((rem + 7) / 8), js = 0;
        if (causal_of(a)) {
            int64_t first = kw - (a.sk - a.sq) - q0;
            js = first <= 0 ? 0 : first >= BK ? BK / 8 : (int)(first / 8);
        }
        bool full = tile_full(a, st, q0, BK, kw, 16);
        float s[BK / 8][4], dp[BK / 8][4];
        cp_wait<1>(); /* K, V and dO */
        __syncthreads();
        xyt16<D>(dp, Vs + 16 * w * LD, Ds); /* dP^T: keys x queries */
        cp_wait<0>(); /* Q and the statistics */
        __syncthreads();
        xyt16<D>(s, Ks + 16 * w * LD, Qs); /* S^T */
        if (full && js == 0 && je == BK / 8 && a.scale > 0.0f) { /* no test per score */
            float c = a.scale * ATTN_LOG2E;
#pragma unroll
            for (int j = 0; j < BK / 8; j++) {
                float2 mx = *(const float2 *)&St[8 * j + 2 * t];
                float2 li = *(const float2 *)&St[BK + 8 * j + 2 * t];
                float2 dl = *(const float2 *)&St[2 * BK + 8 * j + 2 * t];
                float mlx = mx.x * ATTN_LOG2E, mly = mx.y * ATTN_LOG2E;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp_scaled(s[j][e], c, e & 1 ? mly : mlx) * (e & 1 ? li.y : li.x);
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
                        p = attn_exp<true>(x - (e & 1 ? mx.y : mx.x)) * (e & 1 ? li.y : li.x);
                        ds = p * (dp[j][e] - (e & 1 ? dl.y : dl.x));
                    }
                    s[j][e] = p;
                    dp[j][e] = ds;
                }
            }
        }
        if (a.dvv)
            py16<D>(dv, s, Ds);
        __syncthreads(); /* every warp is done with dO */
        if (qn < a.sq)
            fetch16<D>(Ds, BK, dout, qn, a.sq, (int)a.dv, a.dv, false);
        cp_commit();
        if (a.dk)
            py16<D>(dk, dp, Qs);
        __syncthreads(); /* every warp is done with Q and the statistics */
        if (qn < a.sq) {
            fetch16<D>(Qs, BK, q, qn, a.sq, (int)a.d, a.d, false);
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
                    gf_st((bf16 *)a.dk + off, a.scale * dk[n][2 * h + e]);
                }
                if (a.dvv && col < a.dv)
                    gf_st((bf16 *)a.dvv + (it * a.sk + gk) * a.dv + col, dv[n][2 * h + e]);
            }
    }
}

/* ---- launches ------------------------------------------------------------------------------ */

/* Shared bytes: n_r tiles of r rows and n_k of BK rows, [D + 8] bf16 each,
 * after `extra` floats. */
static size_t smem16(int d, int r, int n_r, int n_k, int extra)
{
    return (size_t)extra * sizeof(float) + (size_t)(n_r * r + n_k * BK) * (d + 8) * sizeof(bf16);
}

template <int D, int W>
static cudaError_t fwd16_as(cudaStream_t s, const gf_cu_attn *a)
{
    int64_t tiles = (a->sq + 16 * W - 1) / (16 * W);
    size_t sm = smem16(D, 16 * W, 1, 2, 0);
    return launch(k_attn16_fwd<D, W>, tiles * a->items, 32 * W, sm, s, a);
}

template <int D, int W>
static cudaError_t bwd16_as(cudaStream_t s, const gf_cu_attn *a)
{
    int64_t qtiles = (a->sq + 16 * W - 1) / (16 * W), ktiles = (a->sk + 16 * W - 1) / (16 * W);
    cudaError_t e = cudaSuccess;
    size_t sq = smem16(D, 16 * W, 2, 2, 0), sk = smem16(D, 16 * W, 2, 2, 3 * BK);
    if (a->sq > 0)
        e = launch(k_attn16_dq<D, W>, qtiles * a->items, 32 * W, sq, s, a);
    if (e != cudaSuccess || a->sk <= 0 || !(a->dk || a->dvv))
        return e;
    return launch(k_attn16_dkv<D, W>, ktiles * a->items, 32 * W, sk, s, a);
}

cudaError_t gf_cu_attn16_fwd(cudaStream_t s, const gf_cu_attn *a)
{
    bool big = a->d > 64 || a->dv > 64, w8 = a->warps == 8;
    return big ? (w8 ? fwd16_as<128, 8>(s, a) : fwd16_as<128, 4>(s, a))
               : (w8 ? fwd16_as<64, 8>(s, a) : fwd16_as<64, 4>(s, a));
}

cudaError_t gf_cu_attn16_bwd(cudaStream_t s, const gf_cu_attn *a)
{
    bool big = a->d > 64 || a->dv > 64, w8 = a->warps == 8;
    return big ? (w8 ? bwd16_as<128, 8>(s, a) : bwd16_as<128, 4>(s, a))
               : (w8 ? bwd16_as<64, 8>(s, a) : bwd16_as<64, 4>(s, a));
}
