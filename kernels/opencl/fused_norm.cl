/*
 * fused_norm.cl — the normalizations of domain graphfuse on the device
 * (host side: fused_norm.c; definitions: README "Fused ops"):
 *
 *   norm_fwd   RMSNorm, AddRMSNorm, LayerNorm, AddLayerNorm   X [rows, n] -> Y
 *   rms_grad   RMSNormGrad: dX and per-slot dW partial rows
 *   ln_grad    LayerNormGrad: dX and per-slot dW, dB partial rows
 *   colsum     sum of P partial rows: [P, n] -> [n]
 *
 * A row is done by a slot of TPR work-items (a power of two, several slots
 * per work-group for short rows); sums are fp32 per work-item, then a tree
 * in local memory.  Options: -DVEC=4 reads rows as float4 (the host asks
 * for it only when n % 4 == 0, so every row starts 16-byte aligned), and
 * -DMAXC=k keeps a work-item's k vectors of the row in registers between
 * the passes (0: read the row again, from the cache, for each pass).
 * Buffers that may live in the workspace come with an offset (`wo`, `po`
 * ...) in elements of their pointer type.
 * Y may be the memory of X (in place): each work-item reads its elements
 * of a row before it writes them.
 */
#ifndef VEC
#define VEC 1
#endif
#ifndef MAXC
#define MAXC 0
#endif
#define MAXWG 1024

#if VEC == 4
typedef float4 vt;
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#else
typedef float vt;
#define HSUM(v) (v)
#endif

/* norm_fwd flags */
#define F_ADD 1u      /* R given: the row is X + R */
#define F_W 2u        /* W given */
#define F_B 4u        /* B given */
#define F_S 8u        /* S = X + R wanted */
#define F_MEAN 16u    /* Mean wanted */
#define F_ISTD 32u    /* InvStdDev wanted */
#define F_RMS 64u     /* RMS forms (no mean) */
#define F_EPS_OUT 128u /* 1/(sqrt(ms) + eps) */
#define F_DW 256u     /* grads: dW (and dB) wanted */
#define F_STATS 512u  /* LayerNormGrad: Mean and InvStdDev given */

/* The sum of v over the tpr work-items of a row slot (tpr a power of
 * two; t the index within the slot).  Every work-item of the group calls
 * it, live or not. */
float slot_sum(__local float *red, float v, uint lid, uint t, uint tpr)
{
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = tpr >> 1; s > 0; s >>= 1) {
        if (t < s)
            red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid - t];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Two sums at once. */
float2 slot_sum2(__local float2 *red, float2 v, uint lid, uint t, uint tpr)
{
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = tpr >> 1; s > 0; s >>= 1) {
        if (t < s)
            red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float2 r = red[lid - t];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Element i of the row being normalized, on a pass after the first: the
 * stored S, or X + R again (the same fp32 sum), or X. */
#define ROW_AGAIN(i) ((flags & F_ADD) ? ((flags & F_S) ? s[base + (i)] : x[base + (i)] + r[base + (i)]) \
                                      : x[base + (i)])

/* The weight / bias vector at i (1 and 0 when absent). */
#define WGT(i) ((flags & F_W) ? w[i] + woff : (vt)(1.0f))
#define BIAS(i) ((flags & F_B) ? b[i] : (vt)(0.0f))

/* Rows of n = m * VEC elements: Y = (v - mu) * inv * W + B (LayerNorm) or
 * v * inv * W (RMSNorm), v = X (+ R).  Mean / InvStdDev one float per row. */
__kernel void norm_fwd(__global const vt *x, __global const vt *r, __global const vt *w,
                       __global const vt *b, __global vt *y, __global vt *s,
                       __global float *mean, __global float *istd, uint wo, uint bo, uint rows,
                       uint n, uint tpr, uint flags, float eps, float woff)
{
    __local float red[MAXWG];
    w += wo;
    b += bo;
    uint lid = get_local_id(0), t = lid & (tpr - 1);
    uint row = get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    bool live = row < rows;
    uint m = n / VEC;
    size_t base = (size_t)row * m;
    bool rms = (flags & F_RMS) != 0;
    float acc = 0.0f;
#if MAXC > 0
    vt c[MAXC];
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        c[k] = (vt)(0.0f);
        if (live && i < m) {
            vt v = x[base + i];
            if (flags & F_ADD) {
                v += r[base + i];
                if (flags & F_S)
                    s[base + i] = v;
            }
            c[k] = v;
            acc += rms ? HSUM(v * v) : HSUM(v);
        }
    }
#else
    for (uint i = t; live && i < m; i += tpr) {
        vt v = x[base + i];
        if (flags & F_ADD) {
            v += r[base + i];
            if (flags & F_S)
                s[base + i] = v;
        }
        acc += rms ? HSUM(v * v) : HSUM(v);
    }
#endif
    float tot = slot_sum(red, acc, lid, t, tpr), mu = 0.0f, inv;
    if (rms) {
        float ms = tot / (float)n;
        inv = (flags & F_EPS_OUT) ? 1.0f / (sqrt(ms) + eps) : 1.0f / sqrt(ms + eps);
    } else {
        mu = tot / (float)n;
        acc = 0.0f;
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++)
            if (live && t + k * tpr < m) {
                vt d = c[k] - mu;
                acc += HSUM(d * d);
            }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt d = ROW_AGAIN(i) - mu;
            acc += HSUM(d * d);
        }
#endif
        inv = 1.0f / sqrt(slot_sum(red, acc, lid, t, tpr) / (float)n + eps);
    }
    if (live && t == 0) {
        if (flags & F_MEAN)
            mean[row] = mu;
        if (flags & F_ISTD)
            istd[row] = inv;
    }
#if MAXC > 0
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        if (live && i < m)
            y[base + i] = rms ? c[k] * inv * WGT(i) : (c[k] - mu) * inv * WGT(i) + BIAS(i);
    }
#else
    for (uint i = t; live && i < m; i += tpr) {
        vt v = ROW_AGAIN(i);
        y[base + i] = rms ? v * inv * WGT(i) : (v - mu) * inv * WGT(i) + BIAS(i);
    }
#endif
}

/*
 * RMSNormGrad, per row x with g = dY (W + woff), ms = mean(x^2):
 *   eps inside:  r = 1/sqrt(ms + eps), k = r^3 sum(g x) / n
 *   eps outside: r = 1/(sqrt(ms) + eps), k = r^2 / sqrt(ms) sum(g x) / n (0 if ms = 0)
 *   dX = r g - k x;  dW += dY x r
 * Group gid owns row slots gid * spw .. + spw - 1 and walks the rows
 * slot, slot + n_slots, ...; each slot sums its dW in a partial row
 * part[slot] (in registers with MAXC, else in part itself), which colsum
 * adds up: deterministic, no atomics.  dX may be the memory of dY.
 */
__kernel void rms_grad(__global const vt *dy, __global const vt *x, __global const vt *w,
                       __global vt *dx, __global vt *part, uint wo, uint po, uint rows, uint n,
                       uint tpr, uint flags, float eps, float woff)
{
    __local float2 red[MAXWG];
    w += wo;
    part += po;
    uint lid = get_local_id(0), t = lid & (tpr - 1), spw = get_local_size(0) / tpr;
    uint slot = get_group_id(0) * spw + lid / tpr, n_slots = get_num_groups(0) * spw;
    uint m = n / VEC;
    bool dw = (flags & F_DW) != 0;
    __global vt *pw = part + (size_t)slot * m;
    uint iters = (rows + n_slots - 1) / n_slots;
#if MAXC > 0
    vt wc[MAXC], ac[MAXC], xc[MAXC], gc[MAXC];
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        wc[k] = i < m ? WGT(i) : (vt)(0.0f);
        ac[k] = (vt)(0.0f);
    }
#else
    for (uint i = t; dw && i < m; i += tpr)
        pw[i] = (vt)(0.0f);
#endif
    for (uint it = 0; it < iters; it++) {
        uint row = slot + it * n_slots;
        bool live = row < rows;
        size_t base = (size_t)row * m;
        float2 acc = (float2)(0.0f);
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++) {
            uint i = t + k * tpr;
            xc[k] = gc[k] = (vt)(0.0f);
            if (live && i < m) {
                xc[k] = x[base + i];
                gc[k] = dy[base + i];
                acc += (float2)(HSUM(xc[k] * xc[k]), HSUM(gc[k] * wc[k] * xc[k]));
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt xv = x[base + i];
            acc += (float2)(HSUM(xv * xv), HSUM(dy[base + i] * WGT(i) * xv));
        }
#endif
        float2 tot = slot_sum2(red, acc, lid, t, tpr);
        float ms = tot.x / (float)n, rr, kk;
        if (flags & F_EPS_OUT) {
            float rms = sqrt(ms);
            rr = 1.0f / (rms + eps);
            kk = rms > 0.0f ? rr * rr / rms * tot.y / (float)n : 0.0f;
        } else {
            rr = 1.0f / sqrt(ms + eps);
            kk = rr * rr * rr * tot.y / (float)n;
        }
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++) {
            uint i = t + k * tpr;
            if (live && i < m) {
                dx[base + i] = rr * (gc[k] * wc[k]) - kk * xc[k];
                ac[k] += gc[k] * (xc[k] * rr);
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt xv = x[base + i], gv = dy[base + i];
            dx[base + i] = rr * (gv * WGT(i)) - kk * xv;
            if (dw)
                pw[i] += gv * (xv * rr);
        }
#endif
    }
#if MAXC > 0
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        if (dw && i < m)
            pw[i] = ac[k];
    }
#endif
}

/*
 * LayerNormGrad, per row x with mu, inv = 1/sqrt(var + eps), xh = (x - mu) inv,
 * g = dY W:  dX = inv (g - mean(g) - xh mean(g xh));  dW += dY xh;  dB += dY.
 * mu and inv are the forward's Mean and InvStdDev (F_STATS), else
 * recomputed from the row.  Slots and partial rows as rms_grad: part holds
 * 2 * n_slots rows (dW partials, then dB partials).
 */
__kernel void ln_grad(__global const vt *dy, __global const vt *x, __global const vt *w,
                      __global vt *dx, __global vt *part, __global const float *mean,
                      __global const float *istd, uint wo, uint po, uint rows, uint n, uint tpr,
                      uint flags, float eps)
{
    __local float2 red[MAXWG];
    w += wo;
    part += po;
    uint lid = get_local_id(0), t = lid & (tpr - 1), spw = get_local_size(0) / tpr;
    uint slot = get_group_id(0) * spw + lid / tpr, n_slots = get_num_groups(0) * spw;
    uint m = n / VEC;
    const float woff = 0.0f;
    bool dw = (flags & F_DW) != 0;
    __global vt *pw = part + (size_t)slot * m, *pb = part + ((size_t)n_slots + slot) * m;
    uint iters = (rows + n_slots - 1) / n_slots;
#if MAXC > 0
    vt wc[MAXC], aw[MAXC], ab[MAXC], xc[MAXC], gc[MAXC];
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        wc[k] = i < m ? WGT(i) : (vt)(0.0f);
        aw[k] = ab[k] = (vt)(0.0f);
    }
#else
    for (uint i = t; dw && i < m; i += tpr)
        pw[i] = pb[i] = (vt)(0.0f);
#endif
    for (uint it = 0; it < iters; it++) {
        uint row = slot + it * n_slots;
        bool live = row < rows;
        size_t base = (size_t)row * m;
        float acc = 0.0f;
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++) {
            uint i = t + k * tpr;
            xc[k] = gc[k] = (vt)(0.0f);
            if (live && i < m) {
                xc[k] = x[base + i];
                gc[k] = dy[base + i];
                acc += HSUM(xc[k]);
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr)
            acc += HSUM(x[base + i]);
#endif
        float mu, inv;
        if (flags & F_STATS) {
            mu = live ? mean[row] : 0.0f;
            inv = live ? istd[row] : 0.0f;
        } else {
            mu = slot_sum((__local float *)red, acc, lid, t, tpr) / (float)n;
            acc = 0.0f;
#if MAXC > 0
#pragma unroll
            for (uint k = 0; k < MAXC; k++)
                if (live && t + k * tpr < m) {
                    vt d = xc[k] - mu;
                    acc += HSUM(d * d);
                }
#else
            for (uint i = t; live && i < m; i += tpr) {
                vt d = x[base + i] - mu;
                acc += HSUM(d * d);
            }
#endif
            inv = 1.0f / sqrt(slot_sum((__local float *)red, acc, lid, t, tpr) / (float)n + eps);
        }
        float2 a2 = (float2)(0.0f);
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++)
            if (live && t + k * tpr < m) {
                vt g = gc[k] * wc[k], xh = (xc[k] - mu) * inv;
                a2 += (float2)(HSUM(g), HSUM(g * xh));
            }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt g = dy[base + i] * WGT(i), xh = (x[base + i] - mu) * inv;
            a2 += (float2)(HSUM(g), HSUM(g * xh));
        }
#endif
        float2 tot = slot_sum2(red, a2, lid, t, tpr) / (float)n;
#if MAXC > 0
#pragma unroll
        for (uint k = 0; k < MAXC; k++) {
            uint i = t + k * tpr;
            if (live && i < m) {
                vt xh = (xc[k] - mu) * inv;
                dx[base + i] = inv * ((gc[k] * wc[k] - tot.x) - xh * tot.y);
                aw[k] += gc[k] * xh;
                ab[k] += gc[k];
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt gv = dy[base + i], xh = (x[base + i] - mu) * inv;
            dx[base + i] = inv * ((gv * WGT(i) - tot.x) - xh * tot.y);
            if (dw) {
                pw[i] += gv * xh;
                pb[i] += gv;
            }
        }
#endif
    }
#if MAXC > 0
#pragma unroll
    for (uint k = 0; k < MAXC; k++) {
        uint i = t + k * tpr;
        if (dw && i < m) {
            pw[i] = aw[k];
            pb[i] = ab[k];
        }
    }
#endif
}

/* out[j] = scale * (sum over p < P of part[p * n + j]), j < n: a work-group
 * of (lx columns, ly row strides), ly a power of two, summed in a fixed
 * order. */
__kernel void colsum(__global const float *part, __global float *out, uint po, uint P, uint n,
                     float scale)
{
    part += po;
    __local float red[MAXWG];
    uint cx = get_local_id(0), cy = get_local_id(1), lx = get_local_size(0);
    uint ly = get_local_size(1), j = get_group_id(0) * lx + cx;
    float acc = 0.0f;
    for (uint p = cy; j < n && p < P; p += ly)
        acc += part[(size_t)p * n + j];
    red[cy * lx + cx] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = ly >> 1; h > 0; h >>= 1) {
        if (cy < h)
            red[cy * lx + cx] += red[(cy + h) * lx + cx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (cy == 0 && j < n)
        out[j] = red[cx] * scale;
}

/* dst[j] = src[offset of j] for j < n: a parameter (W, B) broadcast over
 * the normalized block of rank <= 8, dims and src strides given. */
typedef struct {
    uint rank;
    uint dims[8];
    uint st[8];
} expand_t;

__kernel void expand(__global const float *src, __global float *dst, uint dsto, uint n,
                     expand_t e)
{
    dst += dsto;
    uint j = get_global_id(0);
    if (j >= n)
        return;
    uint rem = j, off = 0;
    for (int d = (int)e.rank - 1; d >= 0; d--) {
        off += rem % e.dims[d] * e.st[d];
        rem /= e.dims[d];
    }
    dst[j] = src[off];
}
