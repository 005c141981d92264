/*
 * fused_norm.cu — RMSNorm, AddRMSNorm, LayerNorm, AddLayerNorm (and ONNX
 * LayerNormalization) forward and backward (host side: fused_norm.c,
 * reduce.c; definitions: kernels/cpu/fused_norm.c, fused_grad.c).
 *
 * A block of `block` threads (a multiple of 32) does a row.  With VPT > 0
 * the row is read as float4 and thread t keeps vectors t, t + block, ...
 * (VPT of them) in registers: every element is read from memory once.
 * VPT = 0 is the generic form (any n, any alignment): the row is re-read
 * for each pass (from the cache).  Row sums are in double (as the CPU's):
 * per thread, then a warp butterfly and one more over the warps' sums, so
 * every thread gets the same bits and runs repeat exactly.
 *
 * The forward has one block per row.  The backward is persistent: `grid`
 * blocks walk the rows grid-stride, each summing its rows' dW (and dB) in
 * registers (double), written once as the block's partial row; colsum adds
 * the grid's partial rows in a fixed order.  No [rows, n] temporary, no
 * atomics.  In place (Y over X, dX over dY or X) is safe: a thread reads
 * every element it writes before writing it.
 *
 * fp16 / bf16 storage (p.type): X, R, W, B, Y, S, dY, dX, dW, dB of the
 * storage type T, the statistics fp32.  Every kernel is a template over
 * T: an element is widened to fp32 where the fp32 kernel reads it, the
 * math is the fp32 kernel's, and each stored element is rounded to nearest
 * even once, as the CPU's half kernels (kernels/cpu/fused_norm.c), whose
 * Add forms round S = X + R to the type and normalize that rounded S.  A
 * vector is 4 elements (float4; 8 bytes of 16-bit), so the plan and the
 * geometry are fp32's.
 */
#include <math.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch_fused.h"
#include "half_io.h"

#define MAXB 1024

/* The largest block of a kernel keeping VPT vectors a thread (what its
 * registers allow without spilling); gf_cu_norm_plan keeps to it. */
#define BOUND(VPT) ((VPT) <= 1 ? 1024 : (VPT) == 2 ? 512 : 256)

/* ---- storage types ------------------------------------------------------- */
/* gf_ld / gf_st / gf_round: half_io.h */

/* Vector i (4 elements) of p, widened: a float4, or 8 bytes of 16-bit. */
template <typename T> __device__ __forceinline__ float4 ld4(const T *p, int64_t i)
{
    if constexpr (sizeof(T) == 4) {
        return ((const float4 *)p)[i];
    } else {
        uint2 raw = ((const uint2 *)p)[i];
        const T *h = (const T *)&raw;
        return make_float4(gf_ld(h), gf_ld(h + 1), gf_ld(h + 2), gf_ld(h + 3));
    }
}

template <typename T> __device__ __forceinline__ void st4(T *p, int64_t i, float4 v)
{
    if constexpr (sizeof(T) == 4) {
        ((float4 *)p)[i] = v;
    } else {
        uint2 raw;
        T *h = (T *)&raw;
        gf_st(h, v.x);
        gf_st(h + 1, v.y);
        gf_st(h + 2, v.z);
        gf_st(h + 3, v.w);
        ((uint2 *)p)[i] = raw;
    }
}

template <typename T> __device__ __forceinline__ float4 rnd4(float4 v)
{
    return make_float4(gf_round<T>(v.x), gf_round<T>(v.y), gf_round<T>(v.z), gf_round<T>(v.w));
}

/* ---- sums ------------------------------------------------------------------ */

__device__ __forceinline__ double warp_sum(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The block's sums of a and b, in every thread (sh: 32 double2). */
__device__ __forceinline__ double2 block_sum2(double a, double b, double2 *sh)
{
    a = warp_sum(a);
    b = warp_sum(b);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (l == 0)
        sh[w] = make_double2(a, b);
    __syncthreads();
    double2 t = l < nw ? sh[l] : make_double2(0.0, 0.0);
    t.x = warp_sum(t.x);
    t.y = warp_sum(t.y);
    __syncthreads(); /* sh is reused by the next call */
    return t;
}

__device__ __forceinline__ double hsum(float4 v)
{
    return (double)v.x + (double)v.y + (double)v.z + (double)v.w;
}

__device__ __forceinline__ double hsq(float4 v, double mu)
{
    double a = (double)v.x - mu, b = (double)v.y - mu, c = (double)v.z - mu,
           d = (double)v.w - mu;
    return a * a + b * b + c * c + d * d;
}

__device__ __forceinline__ float4 add4(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* W + woff as the CPU expands it: (float)((double)W + woff). */
template <typename T> __device__ __forceinline__ float wgt1(const T *w, int64_t j, float woff)
{
    if (!w)
        return 1.0f;
    float v = gf_ld(w + j);
    return woff != 0.0f ? (float)((double)v + (double)woff) : v;
}

template <typename T> __device__ __forceinline__ float4 wgt4(const T *w, int64_t i, float woff)
{
    if (!w)
        return make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    float4 v = ld4(w, i);
    if (woff != 0.0f) {
        double o = woff;
        v = make_float4((float)(v.x + o), (float)(v.y + o), (float)(v.z + o), (float)(v.w + o));
    }
    return v;
}

/* 1/den of the row's statistics (double), as the CPU. */
__device__ __forceinline__ double inv_of(double ms, double eps, bool eps_out)
{
    return 1.0 / (eps_out ? sqrt(ms) + eps : sqrt(ms + eps));
}

/* One element of Y. */
__device__ __forceinline__ float y_of(float v, bool rms, bool onnx, double mu, double invd,
                                      float inv, float w, float b)
{
    if (rms)
        return v * inv * w;
    if (onnx)
        return (float)(((double)v - mu) * invd * (double)w + (double)b);
    return (float)((double)v - mu) * inv * w + b;
}

__device__ __forceinline__ float4 y_of4(float4 v, bool rms, bool onnx, double mu, double invd,
                                        float inv, float4 w, float4 b)
{
    return make_float4(y_of(v.x, rms, onnx, mu, invd, inv, w.x, b.x),
                       y_of(v.y, rms, onnx, mu, invd, inv, w.y, b.y),
                       y_of(v.z, rms, onnx, mu, invd, inv, w.z, b.z),
                       y_of(v.w, rms, onnx, mu, invd, inv, w.w, b.w));
}

/* ---- forward ------------------------------------------------------------------ */

/* The row's statistics from its sums: mu, 1/std (double, and rounded). */
struct stats {
    double mu, invd;
    float inv;
};

/* T: X, W, B, S; L: R and Y (T, or 16-bit with an fp32 T: the mixed form) */
template <int VPT, bool RMS, bool ADD, typename T, typename L>
__global__ void __launch_bounds__(BOUND(VPT)) k_norm_fwd(gf_cu_norm p)
{
    __shared__ double2 sh[32];
    const T *px = (const T *)p.x, *pw = (const T *)p.w, *pb = (const T *)p.b;
    const L *pr = (const L *)p.r;
    T *ps = (T *)p.s;
    L *py = (L *)p.y;
    const bool onnx = p.flags & GF_CU_NORM_ONNX, eps_out = p.flags & GF_CU_NORM_EPS_OUT;
    const int t = threadIdx.x, bs = blockDim.x;
    const int64_t n = p.n;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        struct stats st;
        if constexpr (VPT > 0) {
            const int64_t m = n / 4, base = row * m;
            float4 c[VPT > 0 ? VPT : 1];
            double acc = 0.0;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                int64_t i = t + (int64_t)k * bs;
                c[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < m) {
                    c[k] = ld4(px, base + i);
                    if (ADD) {
                        c[k] = rnd4<T>(add4(c[k], ld4(pr, base + i)));
                        if (ps)
                            st4(ps, base + i, c[k]);
                    }
                    acc += RMS ? hsq(c[k], 0.0) : hsum(c[k]);
                }
            }
            double tot = block_sum2(acc, 0.0, sh).x;
            st.mu = RMS ? 0.0 : tot / (double)n;
            if (RMS) {
                st.invd = inv_of(tot / (double)n, p.eps, eps_out);
            } else {
                acc = 0.0;
#pragma unroll
                for (int k = 0; k < VPT; k++)
                    if (t + (int64_t)k * bs < m)
                        acc += hsq(c[k], st.mu);
                st.invd = inv_of(block_sum2(acc, 0.0, sh).x / (double)n, p.eps, false);
            }
            st.inv = (float)st.invd;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                int64_t i = t + (int64_t)k * bs;
                if (i < m) {
                    float4 w = wgt4(pw, i, p.woff);
                    float4 b = !RMS && pb ? ld4(pb, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    st4(py, base + i, y_of4(c[k], RMS, onnx, st.mu, st.invd, st.inv, w, b));
                }
            }
        } else {
            /* generic: the row re-read; with S, the later passes read S */
            const int64_t base = row * n;
            const T *x = px + base;
            const L *r = ADD ? pr + base : NULL;
            T *s = ADD && ps ? ps + base : NULL;
            double acc = 0.0;
            for (int64_t j = t; j < n; j += bs) {
                float v = gf_ld(x + j);
                if (ADD) {
                    v = gf_round<T>(v + gf_ld(r + j));
                    if (s)
                        gf_st(s + j, v);
                }
                acc += RMS ? (double)v * (double)v : (double)v;
            }
            double tot = block_sum2(acc, 0.0, sh).x;
            st.mu = RMS ? 0.0 : tot / (double)n;
            const T *src = s ? s : x;
            if (RMS) {
                st.invd = inv_of(tot / (double)n, p.eps, eps_out);
            } else {
                acc = 0.0;
                for (int64_t j = t; j < n; j += bs) {
                    float v = ADD && !s ? gf_round<T>(gf_ld(x + j) + gf_ld(r + j)) : gf_ld(src + j);
                    double d = (double)v - st.mu;
                    acc += d * d;
                }
                st.invd = inv_of(block_sum2(acc, 0.0, sh).x / (double)n, p.eps, false);
            }
            st.inv = (float)st.invd;
            for (int64_t j = t; j < n; j += bs) {
                float v = ADD && !s ? gf_round<T>(gf_ld(x + j) + gf_ld(r + j)) : gf_ld(src + j);
                float b = !RMS && pb ? gf_ld(pb + j) : 0.0f;
                gf_st(py + base + j, y_of(v, RMS, onnx, st.mu, st.invd, st.inv,
                                        wgt1(pw, j, p.woff), b));
            }
        }
        if (t == 0) {
            if (p.mean)
                p.mean[row] = (float)st.mu;
            if (p.istd)
                p.istd[row] = st.inv;
        }
    }
}

/* ---- backward ----------------------------------------------------------------- */

/*
 * RMSNormGrad, per row x, g = dY (W + woff) (float), ms = mean(x^2):
 *   eps inside:  r = 1/sqrt(ms + eps), k = r^3 sum(g x) / n
 *   eps outside: r = 1/(sqrt(ms) + eps), k = r^2 / sqrt(ms) sum(g x) / n (0 if ms = 0)
 *   dX = (float)r g - (float)k x;  dW += dY (x r)   (double)
 * LayerNormGrad, per row with mu, rs (the forward's, else recomputed):
 *   xh = (x - mu) rs, g = dY W, a = mean(g), b = mean(g xh)
 *   dX = rs (g - a - xh b);  dW += dY xh;  dB += dY   (double)
 */
struct grad_row {
    double rr, k, mu, rs, ma, mb;
    float rt, kt;
};

/* dX of one element, and its dW, dB terms. */
__device__ __forceinline__ float dx_of(bool rms, bool onnx, const grad_row &q, float g, float v,
                                       float w, double *aw, double *ab)
{
    if (rms) {
        *aw += (double)g * ((double)v * q.rr);
        return q.rt * (g * w) - q.kt * v;
    }
    double xh = ((double)v - q.mu) * q.rs;
    double gw = onnx ? (double)g * (double)w : (double)(g * w);
    *aw += (double)g * xh;
    *ab += (double)g;
    return (float)(q.rs * (gw - q.ma - xh * q.mb));
}

__device__ __forceinline__ void rms_finish(grad_row &q, double ss, double gx, double n, double eps,
                                           bool eps_out)
{
    double ms = ss / n;
    if (eps_out) {
        double rms = sqrt(ms);
        q.rr = 1.0 / (rms + eps);
        q.k = rms > 0.0 ? q.rr * q.rr / rms * gx / n : 0.0;
    } else {
        q.rr = 1.0 / sqrt(ms + eps);
        q.k = q.rr * q.rr * q.rr * gx / n;
    }
    q.rt = (float)q.rr;
    q.kt = (float)q.k;
}

__device__ __forceinline__ double gw_d(bool onnx, float g, float w)
{
    return onnx ? (double)g * (double)w : (double)(g * w);
}

/* T: X, W, G, dX, dW, dB; L: dY, dXl (T, or 16-bit with an fp32 T) */
template <int VPT, bool RMS, typename T, typename L>
__global__ void __launch_bounds__(BOUND(VPT)) k_norm_grad(gf_cu_norm p)
{
    __shared__ double2 sh[32];
    const T *px = (const T *)p.x, *pwt = (const T *)p.w, *pg = (const T *)p.g;
    const L *pdy = (const L *)p.dy;
    T *pdx = (T *)p.dx;
    L *pdxl = (L *)p.dxl;
    const bool onnx = p.flags & GF_CU_NORM_ONNX, eps_out = p.flags & GF_CU_NORM_EPS_OUT;
    const int t = threadIdx.x, bs = blockDim.x;
    const int64_t n = p.n;
    const double dn = (double)n;
    const bool stats = !RMS && p.mean_in && p.istd_in;
    double *pw = p.part ? p.part + (int64_t)blockIdx.x * n : NULL;
    double *pb = p.part && !RMS ? p.part + ((int64_t)gridDim.x + blockIdx.x) * n : NULL;
    if constexpr (VPT > 0) {
        constexpr int V = VPT > 0 ? VPT : 1;
        const int64_t m = n / 4;
        double aw[V][4], ab[V][4];
#pragma unroll
        for (int k = 0; k < V; k++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                aw[k][c] = ab[k][c] = 0.0;
        for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
            const int64_t base = row * m;
            float4 xc[V], gc[V]; /* W is re-read (from L1) where needed */
            grad_row q;
            double s1 = 0.0, s2 = 0.0;
#pragma unroll
            for (int k = 0; k < V; k++) {
                int64_t i = t + (int64_t)k * bs;
                xc[k] = gc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < m) {
                    xc[k] = ld4(px, base + i);
                    gc[k] = ld4(pdy, base + i);
                }
            }
            if (RMS) {
#pragma unroll
                for (int k = 0; k < V; k++) {
                    if (t + (int64_t)k * bs >= m)
                        continue;
                    float4 w = wgt4(pwt, t + (int64_t)k * bs, p.woff);
                    s1 += hsq(xc[k], 0.0);
                    s2 += (double)(gc[k].x * w.x) * (double)xc[k].x +
                          (double)(gc[k].y * w.y) * (double)xc[k].y +
                          (double)(gc[k].z * w.z) * (double)xc[k].z +
                          (double)(gc[k].w * w.w) * (double)xc[k].w;
                }
                double2 tot = block_sum2(s1, s2, sh);
                rms_finish(q, tot.x, tot.y, dn, p.eps, eps_out);
            } else {
                if (stats) {
                    q.mu = (double)p.mean_in[row];
                    q.rs = (double)p.istd_in[row];
                } else {
#pragma unroll
                    for (int k = 0; k < V; k++)
                        s1 += hsum(xc[k]);
                    q.mu = block_sum2(s1, 0.0, sh).x / dn;
                    s1 = 0.0;
#pragma unroll
                    for (int k = 0; k < V; k++)
                        if (t + (int64_t)k * bs < m)
                            s1 += hsq(xc[k], q.mu);
                    q.rs = 1.0 / sqrt(block_sum2(s1, 0.0, sh).x / dn + (double)p.eps);
                }
                s1 = s2 = 0.0;
#pragma unroll
                for (int k = 0; k < V; k++) {
                    if (t + (int64_t)k * bs >= m)
                        continue;
                    float4 w = wgt4(pwt, t + (int64_t)k * bs, 0.0f);
                    const float *gv = &gc[k].x, *xv = &xc[k].x, *wv = &w.x;
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        double g = gw_d(onnx, gv[c], wv[c]);
                        s1 += g;
                        s2 += g * (((double)xv[c] - q.mu) * q.rs);
                    }
                }
                double2 tot = block_sum2(s1, s2, sh);
                q.ma = tot.x / dn;
                q.mb = tot.y / dn;
            }
#pragma unroll
            for (int k = 0; k < V; k++) {
                int64_t i = t + (int64_t)k * bs;
                if (i < m) {
                    float4 w = wgt4(pwt, i, RMS ? p.woff : 0.0f);
                    const float *gv = &gc[k].x, *xv = &xc[k].x, *wv = &w.x;
                    float o[4];
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        o[c] = dx_of(RMS, onnx, q, gv[c], xv[c], wv[c], &aw[k][c], &ab[k][c]);
                    float4 d4 = make_float4(o[0], o[1], o[2], o[3]);
                    if (pg) /* read before dX may overwrite it (in place) */
                        d4 = add4(d4, ld4(pg, base + i));
                    st4(pdx, base + i, d4);
                    if (pdxl)
                        st4(pdxl, base + i, d4);
                }
            }
        }
        if (pw)
#pragma unroll
            for (int k = 0; k < V; k++) {
                int64_t i = t + (int64_t)k * bs;
                if (i < m)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        pw[4 * i + c] = aw[k][c];
                        if (pb)
                            pb[4 * i + c] = ab[k][c];
                    }
            }
    } else {
        /* generic: rows re-read, the partial rows summed in place */
        for (int64_t j = t; pw && j < n; j += bs) {
            pw[j] = 0.0;
            if (pb)
                pb[j] = 0.0;
        }
        for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
            const T *x = px + row * n;
            const L *dy = pdy + row * n;
            T *dx = pdx + row * n;
            grad_row q;
            double s1 = 0.0, s2 = 0.0;
            if (RMS) {
                for (int64_t j = t; j < n; j += bs) {
                    double v = gf_ld(x + j);
                    s1 += v * v;
                    s2 += (double)(gf_ld(dy + j) * wgt1(pwt, j, p.woff)) * v;
                }
                double2 tot = block_sum2(s1, s2, sh);
                rms_finish(q, tot.x, tot.y, dn, p.eps, eps_out);
            } else {
                if (stats) {
                    q.mu = (double)p.mean_in[row];
                    q.rs = (double)p.istd_in[row];
                } else {
                    for (int64_t j = t; j < n; j += bs)
                        s1 += (double)gf_ld(x + j);
                    q.mu = block_sum2(s1, 0.0, sh).x / dn;
                    s1 = 0.0;
                    for (int64_t j = t; j < n; j += bs) {
                        double d = (double)gf_ld(x + j) - q.mu;
                        s1 += d * d;
                    }
                    q.rs = 1.0 / sqrt(block_sum2(s1, 0.0, sh).x / dn + (double)p.eps);
                }
                s1 = 0.0;
                for (int64_t j = t; j < n; j += bs) {
                    double g = gw_d(onnx, gf_ld(dy + j), wgt1(pwt, j, 0.0f));
                    s1 += g;
                    s2 += g * (((double)gf_ld(x + j) - q.mu) * q.rs);
                }
                double2 tot = block_sum2(s1, s2, sh);
                q.ma = tot.x / dn;
                q.mb = tot.y / dn;
            }
            for (int64_t j = t; j < n; j += bs) {
                double a = 0.0, b = 0.0;
                float g = gf_ld(dy + j), v = gf_ld(x + j);
                float w = wgt1(pwt, j, RMS ? p.woff : 0.0f);
                float o = dx_of(RMS, onnx, q, g, v, w, &a, &b);
                if (pg)
                    o = o + gf_ld(pg + row * n + j);
                gf_st(dx + j, o);
                if (pdxl)
                    gf_st(pdxl + row * n + j, o);
                if (pw) {
                    pw[j] += a;
                    if (pb)
                        pb[j] += b;
                }
            }
        }
    }
}

/* out[j] = (float) sum over p < P of part[p * n + j], in a fixed order:
 * blocks of 32 columns x 16 partial-row strides, then a tree (16-bit out:
 * that float rounded, as the CPU rounds its fp32 dW). */
template <typename T>
__global__ void k_colsum(const double *part, T *out, int64_t P, int64_t n)
{
    __shared__ double sh[16][33];
    int cx = threadIdx.x, cy = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * 32 + cx;
    double acc = 0.0;
    for (int64_t q = cy; j < n && q < P; q += 16)
        acc += part[q * n + j];
    sh[cy][cx] = acc;
    __syncthreads();
    for (int h = 8; h > 0; h >>= 1) {
        if (cy < h)
            sh[cy][cx] += sh[cy + h][cx];
        __syncthreads();
    }
    if (cy == 0 && j < n)
        gf_st(out + j, (float)sh[0][cx]);
}

/* ---- launchers ---------------------------------------------------------------- */

typedef void (*kfn)(gf_cu_norm);

template <bool RMS, bool ADD, typename T, typename L>
static kfn fwd_pick(int vpt)
{
    switch (vpt) {
    case 1: return k_norm_fwd<1, RMS, ADD, T, L>;
    case 2: return k_norm_fwd<2, RMS, ADD, T, L>;
    case 4: return k_norm_fwd<4, RMS, ADD, T, L>;
    case 8: return k_norm_fwd<8, RMS, ADD, T, L>;
    default: return k_norm_fwd<0, RMS, ADD, T, L>;
    }
}

template <typename T, typename L>
static kfn fwd_typed(int flags, int vpt)
{
    bool rms = flags & GF_CU_NORM_RMS, add = flags & GF_CU_NORM_ADD;
    return rms ? (add ? fwd_pick<true, true, T, L>(vpt) : fwd_pick<true, false, T, L>(vpt))
               : (add ? fwd_pick<false, true, T, L>(vpt) : fwd_pick<false, false, T, L>(vpt));
}

/* The kernel for p->type and p->ltype (gf_cu_type F32, F16, BF16: one
 * type, or F32 with a 16-bit ltype) from P::get<T, L> (forward or
 * backward); NULL for another pair. */
template <class P>
static kfn by_types(int type, int ltype, int flags, int vpt)
{
    if (type == GF_CU_F32 && ltype == GF_CU_BF16)
        return P::template get<float, __nv_bfloat16>(flags, vpt);
    if (type == GF_CU_F32 && ltype == GF_CU_F16)
        return P::template get<float, __half>(flags, vpt);
    if (ltype != type)
        return NULL;
    switch (type) {
    case GF_CU_F32: return P::template get<float, float>(flags, vpt);
    case GF_CU_F16: return P::template get<__half, __half>(flags, vpt);
    case GF_CU_BF16: return P::template get<__nv_bfloat16, __nv_bfloat16>(flags, vpt);
    default: return NULL;
    }
}

struct fwd_of {
    template <typename T, typename L> static kfn get(int flags, int vpt)
    {
        return fwd_typed<T, L>(flags, vpt);
    }
};

template <bool RMS, typename T, typename L>
static kfn grad_pick(int vpt)
{
    switch (vpt) {
    case 1: return k_norm_grad<1, RMS, T, L>;
    case 2: return k_norm_grad<2, RMS, T, L>;
    case 4: return k_norm_grad<4, RMS, T, L>;
    case 8: return k_norm_grad<8, RMS, T, L>;
    default: return k_norm_grad<0, RMS, T, L>;
    }
}

template <typename T, typename L>
static kfn grad_typed(int flags, int vpt)
{
    return (flags & GF_CU_NORM_RMS) ? grad_pick<true, T, L>(vpt) : grad_pick<false, T, L>(vpt);
}

struct grad_of {
    template <typename T, typename L> static kfn get(int flags, int vpt)
    {
        return grad_typed<T, L>(flags, vpt);
    }
};

/* dW (or dB) from the partial rows, in p->type. */
static void colsum(cudaStream_t s, const struct gf_cu_norm *p, const double *part, void *out)
{
    dim3 cb(32, 16), cg((unsigned)((p->n + 31) / 32));
    if (p->type == GF_CU_F16)
        k_colsum<<<cg, cb, 0, s>>>(part, (__half *)out, p->grid, p->n);
    else if (p->type == GF_CU_BF16)
        k_colsum<<<cg, cb, 0, s>>>(part, (__nv_bfloat16 *)out, p->grid, p->n);
    else
        k_colsum<<<cg, cb, 0, s>>>(part, (float *)out, p->grid, p->n);
}

static int round32(int64_t v)
{
    int64_t r = (v + 31) / 32 * 32;
    return (int)(r < 32 ? 32 : r);
}

extern "C" void gf_cu_norm_plan(struct gf_cu_norm *p, int grad, int want_block, int want_bps,
                                int sm_count, int max_threads)
{
    int maxb = max_threads >= 32 && max_threads < MAXB ? max_threads / 32 * 32 : MAXB;
    int64_t m = p->n / 4;
    p->vpt = 0;
    p->block = 256;
    if ((p->flags & GF_CU_NORM_VEC) && m > 0) {
        /* the fewest vectors a thread keeps for a block of at most `target`
         * threads (the knob's block, else 256 forward, 512 backward) */
        int target = want_block > 0 ? want_block : grad ? 512 : 256;
        target = target > maxb ? maxb : target;
        for (int v = 1; v <= 8 && !p->vpt; v *= 2)
            if ((m + v - 1) / v <= target && target <= BOUND(v)) {
                p->vpt = v;
                p->block = want_block > 0 ? target : round32((m + v - 1) / v);
            }
        for (int v = 1; v <= 8 && !p->vpt; v *= 2) /* a wider block before the generic form */
            if ((m + v - 1) / v <= (maxb < BOUND(v) ? maxb : BOUND(v))) {
                p->vpt = v;
                p->block = round32((m + v - 1) / v);
            }
    }
    if (!p->vpt) {
        int64_t want = want_block > 0 ? want_block : p->n >= 1024 ? 256 : round32(p->n);
        p->block = (int)(want > maxb ? maxb : want < 32 ? 32 : want / 32 * 32);
    }
    p->grid = 1;
    if (grad) {
        int bps = want_bps;
        if (bps <= 0) {
            bps = 0;
            kfn k = by_types<grad_of>(p->type, p->ltype, p->flags, p->vpt);
            if (!k || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, p->block, 0) !=
                          cudaSuccess) {
                cudaGetLastError();
                bps = 0;
            }
            bps = bps < 1 ? 1 : bps;
        }
        int64_t g = (int64_t)(sm_count > 0 ? sm_count : 1) * bps;
        p->grid = (int)(g < p->rows ? g : p->rows > 0 ? p->rows : 1);
    }
}

extern "C" cudaError_t gf_cu_norm_fwd(cudaStream_t s, const struct gf_cu_norm *p)
{
    if (p->rows <= 0 || p->n <= 0)
        return cudaSuccess;
    unsigned grid = (unsigned)(p->rows < 0x7fffffff ? p->rows : 0x7fffffff);
    kfn k = by_types<fwd_of>(p->type, p->ltype, p->flags, p->vpt);
    if (!k)
        return cudaErrorInvalidValue;
    k<<<grid, p->block, 0, s>>>(*p);
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_norm_grad(cudaStream_t s, const struct gf_cu_norm *p)
{
    if (p->n <= 0)
        return cudaSuccess;
    bool rms = p->flags & GF_CU_NORM_RMS;
    kfn k = by_types<grad_of>(p->type, p->ltype, p->flags, p->vpt);
    if (!k)
        return cudaErrorInvalidValue;
    size_t es = p->type == GF_CU_F32 ? sizeof(float) : 2; /* 0 is all-zero bits in each */
    if (p->rows <= 0) { /* sums over no rows */
        cudaError_t e = cudaSuccess;
        if (p->dw)
            e = cudaMemsetAsync(p->dw, 0, (size_t)p->n * es, s);
        if (e == cudaSuccess && p->db && !rms)
            e = cudaMemsetAsync(p->db, 0, (size_t)p->n * es, s);
        return e;
    }
    k<<<p->grid, p->block, 0, s>>>(*p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !p->part)
        return e;
    if (p->dw)
        colsum(s, p, p->part, p->dw);
    if (p->db && !rms)
        colsum(s, p, p->part + (int64_t)p->grid * p->n, p->db);
    return cudaGetLastError();
}
