/*
 * fused_attn.cu — flash-style attention in fp32 (host side: fused_attn.c).
 *
 * Forward: one block per (item, 64 query rows); K and V in tiles of 64 keys
 * through shared memory; scores, an online softmax (running max and sum per
 * row) and O accumulated in registers: no [Sq, Sk] matrix in memory.
 * Backward (no statistics saved by the forward, as on the CPU): k_attn_dq
 * recomputes each query row's max and sum over the keys, delta = rowsum(dO
 * O), then dS = P (dP - delta) tile by tile into dQ = scale dS K; k_attn_dkv
 * (one block per 64 keys) walks the query tiles for dV += P^T dO and dK +=
 * scale dS^T Q.  No atomics: results repeat exactly.
 *
 * 256 threads as 16 x 16; thread (ty, tx) owns rows ty + 16 i and columns
 * tx + 16 j of a 64 x 64 tile; the 16 threads of a row are one half-warp, so
 * row reductions are shuffles.  The products use explicit fmaf (the build's
 * --fmad=false keeps the rest of the arithmetic unfused).  Causal masks
 * (bottom-right aligned) skip the tiles above the diagonal; with a mask in
 * memory, a tile whose every score the mask hides (-inf: the upper
 * triangle of the exporters' causal-and-padding mask) is skipped too.
 * zero_rows (zero_masked_rows): a row that sees no key gives O = 0 and no
 * gradient, where the softmax alone gives NaN.
 */
#include <math.h>

#include "launch_mla.h"

#define BT 64  /* rows (queries or keys) of a tile */
#define NT 256 /* threads */

extern "C" int gf_cu_attn_ok(int64_t d, int64_t dv)
{
    return d >= 1 && dv >= 1 && d <= 128 && dv <= 128;
}

/* The mask's element offset for item it, row i, column j. */
__device__ __forceinline__ int64_t mask_item(const gf_cu_attn &a, int64_t it)
{
    int64_t off = 0;
    for (int d = a.mrank - 1; d >= 0; d--) {
        off += it % a.mbd[d] * a.mbs[d];
        it /= a.mbd[d];
    }
    return off;
}

/* Score (i, j) finished: scale q.k + mask, -inf where masked or outside. */
__device__ __forceinline__ float finish_score(const gf_cu_attn &a, const float *mk, float dot,
                                              int64_t i, int64_t j)
{
    if (j >= a.sk || i >= a.sq)
        return -INFINITY;
    if (a.causal)
        return j > i + (a.sk - a.sq) ? -INFINITY : a.scale * dot;
    float s = a.scale * dot;
    if (mk)
        s = s + mk[i * a.mst_i + j * a.mst_j];
    return s;
}

/* Whether the mask hides every score of query rows [q0, q0 + BT) x keys
 * [k0, k0 + BT) (-inf throughout, or outside the matrix): such a tile adds
 * exp(-inf) = 0 to every sum and is skipped.  A barrier: every thread of the
 * block calls it, and all get the same answer. */
__device__ __forceinline__ bool tile_masked(const gf_cu_attn &a, const float *mk, int64_t q0,
                                            int64_t k0)
{
    if (!mk)
        return false;
    int open = 0;
    for (int e = threadIdx.x; e < BT * BT && !open; e += NT) {
        int64_t i = q0 + e / BT, j = k0 + e % BT;
        open = i < a.sq && j < a.sk && mk[i * a.mst_i + j * a.mst_j] != -INFINITY;
    }
    return !__syncthreads_or(open);
}

/* Rows [r0, r0 + BT) x cols [0, n) of src (row stride ld; transposed: src
 * [n, rows] with stride ld, element (r, c) at c * ld + r) into dst [BT][LD]
 * (zeros outside). */
template <int LD>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t r0, int64_t rows,
                                          int n, int64_t ld, bool trans)
{
    for (int e = threadIdx.x; e < BT * LD; e += NT) {
        int r = e / LD, c = e % LD;
        float v = 0.0f;
        if (c < n && r0 + r < rows)
            v = trans ? src[(int64_t)c * ld + r0 + r] : src[(r0 + r) * ld + c];
        dst[r * (LD + 1) + c] = v;
    }
}

/* acc[i][j] = sum_k A[ty + 16 i][k] B[tx + 16 j][k], A, B [BT][LD + 1]. */
template <int LD>
__device__ __forceinline__ void tile_dot(float acc[4][4], const float *A, const float *B, int n)
{
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k = 0; k < n; k++) {
        float av[4], bv[4];
        for (int i = 0; i < 4; i++)
            av[i] = A[(ty + 16 * i) * (LD + 1) + k];
        for (int j = 0; j < 4; j++)
            bv[j] = B[(tx + 16 * j) * (LD + 1) + k];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
}

/* o[i][c] += sum_k P[ty + 16 i][k] V[k][tx + 16 c], P [BT][BT + 1], V [BT][LD + 1]. */
template <int LD>
__device__ __forceinline__ void tile_acc(float o[4][LD / 16], const float *P, const float *V)
{
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    for (int k = 0; k < BT; k++) {
        float pv[4], vv[LD / 16];
        for (int i = 0; i < 4; i++)
            pv[i] = P[(ty + 16 * i) * (BT + 1) + k];
        for (int c = 0; c < LD / 16; c++)
            vv[c] = V[k * (LD + 1) + tx + 16 * c];
        for (int i = 0; i < 4; i++)
            for (int c = 0; c < LD / 16; c++)
                o[i][c] = fmaf(pv[i], vv[c], o[i][c]);
    }
}

__device__ __forceinline__ float half_max(float v)
{
    for (int o = 8; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float half_sum(float v)
{
    for (int o = 8; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Key tiles [0, end) that query tile q0 may see. */
__device__ __forceinline__ int64_t key_end(const gf_cu_attn &a, int64_t q0)
{
    if (!a.causal)
        return a.sk;
    int64_t e = q0 + BT - 1 + (a.sk - a.sq) + 1;
    return e < 0 ? 0 : e < a.sk ? e : a.sk;
}

template <int LD>
__global__ void __launch_bounds__(NT) k_attn_fwd(gf_cu_attn a)
{
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + BT * (LD + 1), *Vs = Ks + BT * (LD + 1), *Ps = Vs + BT * (LD + 1);
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    int64_t it = blockIdx.y, q0 = (int64_t)blockIdx.x * BT;
    const float *q = a.q + it * a.sq * a.d, *k = a.k + it * a.sk * a.d;
    const float *v = a.v + it * a.sk * a.dv;
    const float *mk = a.mask ? a.mask + mask_item(a, it) : NULL;
    load_tile<LD>(Qs, q, q0, a.sq, (int)a.d, a.d, false);
    float o[4][LD / 16], m[4], l[4];
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int c = 0; c < LD / 16; c++)
            o[i][c] = 0.0f;
    }
    int64_t kend = key_end(a, q0);
    for (int64_t k0 = 0; k0 < kend; k0 += BT) {
        __syncthreads();
        if (tile_masked(a, mk, q0, k0))
            continue;
        load_tile<LD>(Ks, a.tb ? k + k0 * a.d : k + k0, 0, a.sk - k0, (int)a.d,
                      a.tb ? a.d : a.sk, !a.tb);
        load_tile<LD>(Vs, v + k0 * a.dv, 0, a.sk - k0, (int)a.dv, a.dv, false);
        __syncthreads();
        float s[4][4];
        tile_dot<LD>(s, Qs, Ks, (int)a.d);
        for (int i = 0; i < 4; i++) {
            int64_t gi = q0 + ty + 16 * i;
            float mx = -INFINITY;
            for (int j = 0; j < 4; j++) {
                s[i][j] = finish_score(a, mk, s[i][j], gi, k0 + tx + 16 * j);
                mx = fmaxf(mx, s[i][j]);
            }
            float mn = fmaxf(m[i], half_max(mx));
            float mu = mn == -INFINITY ? 0.0f : mn;
            float sum = 0.0f;
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - mu);
                Ps[(ty + 16 * i) * (BT + 1) + tx + 16 * j] = p;
                sum += p;
            }
            float al = expf(m[i] - mu);
            l[i] = l[i] * al + half_sum(sum);
            m[i] = mn;
            for (int c = 0; c < LD / 16; c++)
                o[i][c] *= al;
        }
        __syncthreads();
        tile_acc<LD>(o, Ps, Vs);
    }
    for (int i = 0; i < 4; i++) {
        int64_t gi = q0 + ty + 16 * i;
        if (gi >= a.sq)
            continue;
        /* no key seen (l = 0): 0 with zero_rows or no keys at all (a sum
         * over nothing, as the CPU), else the softmax's NaN */
        bool none = l[i] == 0.0f && (a.zero_rows || a.sk == 0);
        for (int c = 0; c < LD / 16; c++) {
            int col = tx + 16 * c;
            if (col < a.dv)
                a.out[(it * a.sq + gi) * a.dv + col] = none ? 0.0f : o[i][c] / l[i];
        }
    }
}

/* dQ, and the rows' max (lse) and sum (delta's neighbour) for k_attn_dkv:
 * stats [items, sq] max, [items, sq] sum (in a.lse: 2 x items x sq), delta. */
template <int LD>
__global__ void __launch_bounds__(NT) k_attn_dq(gf_cu_attn a)
{
    extern __shared__ float sm[];
    float *Qs = sm, *Ds = Qs + BT * (LD + 1), *Ks = Ds + BT * (LD + 1), *Vs = Ks + BT * (LD + 1);
    float *Ps = Vs + BT * (LD + 1);
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    int64_t it = blockIdx.y, q0 = (int64_t)blockIdx.x * BT;
    const float *q = a.q + it * a.sq * a.d, *k = a.k + it * a.sk * a.d;
    const float *v = a.v + it * a.sk * a.dv;
    const float *mk = a.mask ? a.mask + mask_item(a, it) : NULL;
    load_tile<LD>(Qs, q, q0, a.sq, (int)a.d, a.d, false);
    load_tile<LD>(Ds, a.dout + it * a.sq * a.dv, q0, a.sq, (int)a.dv, a.dv, false);
    __syncthreads();
    float m[4], l[4], dl[4];
    /* delta = rowsum(dO O) in double, as the CPU */
    for (int i = 0; i < 4; i++) {
        int64_t gi = q0 + ty + 16 * i;
        double acc = 0;
        for (int c = tx; c < a.dv && gi < a.sq; c += 16)
            acc += (double)Ds[(ty + 16 * i) * (LD + 1) + c] *
                   (double)a.o[(it * a.sq + gi) * a.dv + c];
        for (int o = 8; o > 0; o /= 2)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
        dl[i] = (float)acc;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    int64_t kend = key_end(a, q0);
    for (int pass = 0; pass < 2; pass++) {
        float dq[4][LD / 16];
        for (int i = 0; i < 4; i++)
            for (int c = 0; c < LD / 16; c++)
                dq[i][c] = 0.0f;
        for (int64_t k0 = 0; k0 < kend; k0 += BT) {
            __syncthreads();
            if (tile_masked(a, mk, q0, k0))
                continue;
            load_tile<LD>(Ks, a.tb ? k + k0 * a.d : k + k0, 0, a.sk - k0, (int)a.d,
                          a.tb ? a.d : a.sk, !a.tb);
            if (pass)
                load_tile<LD>(Vs, v + k0 * a.dv, 0, a.sk - k0, (int)a.dv, a.dv, false);
            __syncthreads();
            float s[4][4];
            tile_dot<LD>(s, Qs, Ks, (int)a.d);
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    s[i][j] = finish_score(a, mk, s[i][j], q0 + ty + 16 * i, k0 + tx + 16 * j);
            if (!pass) { /* the rows' max and sum */
                for (int i = 0; i < 4; i++) {
                    float mx = -INFINITY;
                    for (int j = 0; j < 4; j++)
                        mx = fmaxf(mx, s[i][j]);
                    float mn = fmaxf(m[i], half_max(mx)), mu = mn == -INFINITY ? 0.0f : mn;
                    float sum = 0.0f;
                    for (int j = 0; j < 4; j++)
                        sum += expf(s[i][j] - mu);
                    l[i] = l[i] * expf(m[i] - mu) + half_sum(sum);
                    m[i] = mn;
                }
                continue;
            }
            float dp[4][4];
            tile_dot<LD>(dp, Ds, Vs, (int)a.dv);
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    float p = expf(s[i][j] - m[i]) / l[i];
                    Ps[(ty + 16 * i) * (BT + 1) + tx + 16 * j] = p * (dp[i][j] - dl[i]);
                }
            __syncthreads();
            tile_acc<LD>(dq, Ps, Ks);
        }
        if (!pass) {
            for (int i = 0; i < 4; i++) {
                int64_t gi = q0 + ty + 16 * i;
                if (a.zero_rows && m[i] == -INFINITY) { /* every p = exp(-inf - 0) / inf = 0 */
                    m[i] = 0.0f;
                    l[i] = INFINITY;
                }
                if (tx == 0 && gi < a.sq) {
                    a.lse[it * a.sq + gi] = m[i];
                    a.lse[(a.items + it) * a.sq + gi] = l[i];
                    a.delta[it * a.sq + gi] = dl[i];
                }
            }
            continue;
        }
        for (int i = 0; i < 4; i++) {
            int64_t gi = q0 + ty + 16 * i;
            for (int c = 0; c < LD / 16 && gi < a.sq; c++) {
                int col = tx + 16 * c;
                if (col < a.d && a.dq)
                    a.dq[(it * a.sq + gi) * a.d + col] = a.scale * dq[i][c];
            }
        }
    }
}

/* dK, dV of 64 keys: over the query tiles that see them. */
template <int LD>
__global__ void __launch_bounds__(NT) k_attn_dkv(gf_cu_attn a)
{
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + BT * (LD + 1), *Qs = Vs + BT * (LD + 1), *Ds = Qs + BT * (LD + 1);
    float *Ps = Ds + BT * (LD + 1), *Ss = Ps + BT * (BT + 1);
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    int64_t it = blockIdx.y, k0 = (int64_t)blockIdx.x * BT;
    const float *q = a.q + it * a.sq * a.d, *k = a.k + it * a.sk * a.d;
    const float *v = a.v + it * a.sk * a.dv, *dout = a.dout + it * a.sq * a.dv;
    const float *mk = a.mask ? a.mask + mask_item(a, it) : NULL;
    load_tile<LD>(Ks, a.tb ? k + k0 * a.d : k + k0, 0, a.sk - k0, (int)a.d, a.tb ? a.d : a.sk,
                  !a.tb);
    load_tile<LD>(Vs, v + k0 * a.dv, 0, a.sk - k0, (int)a.dv, a.dv, false);
    float dk[4][LD / 16], dv[4][LD / 16];
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < LD / 16; c++)
            dk[i][c] = dv[i][c] = 0.0f;
    /* causal: query i sees key j when j <= i + (sk - sq) */
    int64_t qstart = a.causal ? k0 - (a.sk - a.sq) : 0;
    qstart = qstart < 0 ? 0 : qstart / BT * BT;
    for (int64_t q0 = qstart; q0 < a.sq; q0 += BT) {
        __syncthreads();
        if (tile_masked(a, mk, q0, k0))
            continue;
        load_tile<LD>(Qs, q, q0, a.sq, (int)a.d, a.d, false);
        load_tile<LD>(Ds, dout, q0, a.sq, (int)a.dv, a.dv, false);
        __syncthreads();
        float s[4][4], dp[4][4];
        tile_dot<LD>(s, Ks, Qs, (int)a.d);   /* s[a][b]: key ty+16a, query tx+16b */
        tile_dot<LD>(dp, Vs, Ds, (int)a.dv); /* dP^T */
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                int64_t gq = q0 + tx + 16 * j, gk = k0 + ty + 16 * i;
                float p = 0.0f, ds = 0.0f;
                if (gq < a.sq) {
                    float sc = finish_score(a, mk, s[i][j], gq, gk);
                    int64_t r = it * a.sq + gq;
                    p = expf(sc - a.lse[r]) / a.lse[(a.items + it) * a.sq + gq];
                    ds = p * (dp[i][j] - a.delta[r]);
                }
                Ps[(ty + 16 * i) * (BT + 1) + tx + 16 * j] = p;
                Ss[(ty + 16 * i) * (BT + 1) + tx + 16 * j] = ds;
            }
        __syncthreads();
        tile_acc<LD>(dv, Ps, Ds);
        tile_acc<LD>(dk, Ss, Qs);
    }
    for (int i = 0; i < 4; i++) {
        int64_t gk = k0 + ty + 16 * i;
        if (gk >= a.sk)
            continue;
        for (int c = 0; c < LD / 16; c++) {
            int col = tx + 16 * c;
            if (a.dk && col < a.d) {
                int64_t off = a.tb ? (it * a.sk + gk) * a.d + col : it * a.sk * a.d + col * a.sk + gk;
                a.dk[off] = a.scale * dk[i][c];
            }
            if (a.dvv && col < a.dv)
                a.dvv[(it * a.sk + gk) * a.dv + col] = dv[i][c];
        }
    }
}

template <typename K>
static cudaError_t launch(K kern, dim3 grid, size_t smem, cudaStream_t s, const gf_cu_attn *a)
{
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return e;
    kern<<<grid, NT, smem, s>>>(*a);
    return cudaGetLastError();
}

static size_t tiles_bytes(int ld, int n_ld, int n_p)
{
    return ((size_t)n_ld * BT * (ld + 1) + (size_t)n_p * BT * (BT + 1)) * sizeof(float);
}

extern "C" cudaError_t gf_cu_attn_fwd(cudaStream_t s, const struct gf_cu_attn *a)
{
    if (a->items <= 0 || a->sq <= 0)
        return cudaSuccess;
    dim3 g((unsigned)((a->sq + BT - 1) / BT), (unsigned)a->items);
    int big = a->d > 64 || a->dv > 64;
    return big ? launch(k_attn_fwd<128>, g, tiles_bytes(128, 3, 1), s, a)
               : launch(k_attn_fwd<64>, g, tiles_bytes(64, 3, 1), s, a);
}

extern "C" cudaError_t gf_cu_attn_bwd(cudaStream_t s, const struct gf_cu_attn *a)
{
    if (a->items <= 0)
        return cudaSuccess;
    int big = a->d > 64 || a->dv > 64;
    cudaError_t e = cudaSuccess;
    if (a->sq > 0) {
        dim3 g((unsigned)((a->sq + BT - 1) / BT), (unsigned)a->items);
        e = big ? launch(k_attn_dq<128>, g, tiles_bytes(128, 4, 1), s, a)
                : launch(k_attn_dq<64>, g, tiles_bytes(64, 4, 1), s, a);
    }
    if (e == cudaSuccess && a->sk > 0 && (a->dk || a->dvv)) {
        dim3 g((unsigned)((a->sk + BT - 1) / BT), (unsigned)a->items);
        e = big ? launch(k_attn_dkv<128>, g, tiles_bytes(128, 4, 2), s, a)
                : launch(k_attn_dkv<64>, g, tiles_bytes(64, 4, 2), s, a);
    }
    return e;
}
