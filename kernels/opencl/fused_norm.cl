/*
 * fused_norm.cl — the normalizations of domain graphfuse on the device
 * (host side: fused_norm.c; definitions: README "Fused ops"):
 *
 *   rms_fwd add_rms_fwd ln_fwd add_ln_fwd   RMSNorm, AddRMSNorm, LayerNorm,
 *                        AddLayerNorm: X [rows, n] -> Y (S, Mean, InvStdDev)
 *   rms_grad   RMSNormGrad: dX and per-slot dW partial rows
 *   ln_grad    LayerNormGrad: dX and per-slot dW, dB partial rows
 *   colsum     sum of P partial rows: [P, n] -> [n]
 *   expand     W or B broadcast over the normalized block
 *
 * A row is done by a slot of TPR work-items (a power of two, several slots
 * per work-group for short rows).  Slots walk rows slot, slot + n_slots,
 * ... (one row each when the grid covers the rows; persistent work-groups
 * otherwise: the backward always, for its dW partial rows).  Sums are fp32
 * per work-item, then added across the slot through local memory `red`
 * (a float2 per work-item, the last argument, sized by the host).
 *
 * Options:
 *   -DVEC=4   rows read as float4 (the host asks for it only when n % 4 == 0,
 *             so every row starts 16-byte aligned)
 *   -DPER=k   a work-item keeps its k vectors of the row in registers, read
 *             once from memory (the host picks k so that TPR * k covers the
 *             row); 0: each pass reads the row again (from the cache)
 *   -DPF=1    (PER > 0) the next row's vectors are loaded before the current
 *             row is reduced, so that memory stays busy during the sums
 *   -DONLY=k  only the kernels of group k: 1 rms_fwd, 2 add_rms_fwd, 3 ln_fwd,
 *             4 add_ln_fwd, 5 rms_grad, 6 ln_grad, 7 colsum and expand (each
 *             variant of the options compiles only what it serves); 0: all
 *   storage.cl's GF_STORE_F16 / GF_STORE_BF16: tensors in half / bfloat16
 *   (loaded to float, stored rounded); Mean, InvStdDev and the partial rows
 *   are float.
 * Buffers that may live in the workspace come with an offset: `wo`, `bo`
 * in elements, `po` in vectors of the partial rows.  Y may be the memory of
 * X (in place), dX that of dY or X: each work-item reads its elements of a
 * row before it writes them, and rows are prefetched only by the slot that
 * owns them.
 */
#ifndef VEC
#define VEC 1
#endif
#ifndef PER
#define PER 0
#endif
#ifndef PF
#define PF 0
#endif
#ifndef ONLY
#define ONLY 0
#endif

#if VEC == 4
typedef float4 vt;
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#if defined(GF_STORE_F16) || defined(GF_STORE_BF16)
#define LDV(p, i) LD4(p, i)
#define STV(p, i, v) ST4(p, i, v)
#else
#define LDV(p, i) (((__global const float4 *)(p))[i])
#define STV(p, i, v) (((__global float4 *)(p))[i] = (v))
#endif
#else
typedef float vt;
#define HSUM(v) (v)
#define LDV(p, i) LD(p, i)
#define STV(p, i, v) ST(p, i, v)
#endif

/* RND(v): v rounded to the storage type (S = X + R is normalized as stored). */
#if defined(GF_STORE_F16)
float rnd1(float v)
{
    ushort u;
    vstore_half_rte(v, 0, (__private half *)&u);
    return vload_half(0, (__private const half *)&u);
}
#elif defined(GF_STORE_BF16)
float rnd1(float v)
{
    return as_float((uint)gf_bf16(v) << 16);
}
#endif
#if !defined(GF_STORE_F16) && !defined(GF_STORE_BF16)
#define RND(v) (v)
#elif VEC == 4
#define RND(v) ((float4)(rnd1((v).x), rnd1((v).y), rnd1((v).z), rnd1((v).w)))
#else
#define RND(v) rnd1(v)
#endif

/* flags */
#define F_W 2u        /* W given */
#define F_B 4u        /* B given */
#define F_S 8u        /* S = X + R wanted */
#define F_MEAN 16u    /* Mean wanted */
#define F_ISTD 32u    /* InvStdDev wanted */
#define F_EPS_OUT 128u /* 1/(sqrt(ms) + eps) */
#define F_DW 256u     /* grads: dW (and dB) wanted */
#define F_STATS 512u  /* LayerNormGrad: Mean and InvStdDev given */

/*
 * The sum of v over the tpr work-items of a slot (tpr a power of two, t the
 * index within the slot, b = lid - t).  Every work-item of the group calls
 * it, live or not.  Each item stores its value; for tpr > 32 the slot's
 * first 32 items fold the values 32 apart into theirs; then every item
 * adds the min(tpr, 32) lanes in the same order, so all get the same sum.
 * Two or three barriers for any tpr (a tree would take log2 tpr + 1).
 */
float2 slot_sum(__local float2 *red, float2 v, uint lid, uint t, uint tpr)
{
    uint b = lid - t, lanes = tpr < 32 ? tpr : 32;
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tpr > 32) {
        if (t < 32) {
            float2 s = v;
            for (uint k = t + 32; k < tpr; k += 32)
                s += red[b + k];
            red[lid] = s; /* only this item reads element t < 32 */
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float2 s = red[b];
    for (uint k = 1; k < lanes; k++)
        s += red[b + k];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}

/* Vector i of W (+ woff) and B: 1 and 0 when absent. */
vt wgt(__global const store_t *w, uint i, uint flags, float woff)
{
    return (flags & F_W) ? LDV(w, i) + woff : (vt)(1.0f);
}

vt bias(__global const store_t *b, uint i, uint flags)
{
    return (flags & F_B) ? LDV(b, i) : (vt)(0.0f);
}

/* The slots: this item's t and slot, the slot count, the rows per slot. */
#define SLOTS()                                                                           \
    uint lid = get_local_id(0), t = lid & (tpr - 1), spw = get_local_size(0) / tpr;      \
    uint slot = get_group_id(0) * spw + lid / tpr, n_slots = get_num_groups(0) * spw;    \
    uint m = n / VEC, iters = (rows + n_slots - 1) / n_slots

#if PER > 0
/* This item's vectors of row `row` (of m vectors) of p into a[PER]: zeros
 * past the row or past the rows. */
void load_row(vt *a, __global const store_t *p, uint row, uint rows, uint m, uint t, uint tpr)
{
    size_t base = (size_t)row * m;
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        a[k] = row < rows && i < m ? LDV(p, base + i) : (vt)(0.0f);
    }
}
#define LOAD_ROW(a, p, row) load_row(a, p, row, rows, m, t, tpr)
#endif

/* ---- forward ------------------------------------------------------------------------- */

/*
 * Rows of n = m * VEC elements, v = X (+ R, rounded to the storage type):
 * Y = (v - mu) * inv * W + B (LayerNorm) or v * inv * (W + woff) (RMSNorm).
 * Mean / InvStdDev: one float per row.  rms and add are constants of each
 * kernel below, so that the unused registers and branches go away.
 */
void norm_fwd(__global const store_t *x, __global const store_t *r, __global const store_t *w,
              __global const store_t *b, __global store_t *y, __global store_t *s,
              __global float *mean, __global float *istd, uint wo, uint bo, uint rows,
              uint n, uint tpr, uint flags, float eps, float woff, __local float2 *red,
              const bool rms, const bool add)
{
    SLOTS();
    w += wo;
    b += bo;
#if PER > 0
    vt wv[PER], bv[PER], c[PER], ca[PER];
#if PF
    vt xn[PER], rn[PER];
#endif
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        wv[k] = i < m ? wgt(w, i, flags, woff) : (vt)(0.0f);
        bv[k] = !rms && i < m ? bias(b, i, flags) : (vt)(0.0f);
    }
#if PF
    LOAD_ROW(xn, x, slot);
    if (add)
        LOAD_ROW(rn, r, slot);
#endif
#endif
    for (uint it = 0; it < iters; it++) {
        uint row = slot + it * n_slots;
        bool live = row < rows;
        size_t base = (size_t)row * m;
        float acc = 0.0f;
#if PER > 0
#if PF
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            c[k] = xn[k];
            if (add)
                ca[k] = rn[k];
        }
        uint next = row + n_slots < row ? rows : row + n_slots;
        LOAD_ROW(xn, x, next);
        if (add)
            LOAD_ROW(rn, r, next);
#else
        LOAD_ROW(c, x, row);
        if (add)
            LOAD_ROW(ca, r, row);
#endif
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            uint i = t + k * tpr;
            if (add) {
                c[k] = RND(c[k] + ca[k]);
                if ((flags & F_S) && live && i < m)
                    STV(s, base + i, c[k]);
            }
            acc += rms ? HSUM(c[k] * c[k]) : HSUM(c[k]);
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt v = LDV(x, base + i);
            if (add) {
                v = RND(v + LDV(r, base + i));
                if (flags & F_S)
                    STV(s, base + i, v);
            }
            acc += rms ? HSUM(v * v) : HSUM(v);
        }
#endif
        float tot = slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x, mu = 0.0f, inv;
        if (rms) {
            float ms = tot / (float)n;
            inv = (flags & F_EPS_OUT) ? 1.0f / (sqrt(ms) + eps) : 1.0f / sqrt(ms + eps);
        } else {
            mu = tot / (float)n;
            acc = 0.0f;
#if PER > 0
#pragma unroll
            for (uint k = 0; k < PER; k++)
                if (t + k * tpr < m) {
                    vt d = c[k] - mu;
                    acc += HSUM(d * d);
                }
#else
            for (uint i = t; live && i < m; i += tpr) {
                vt d = (add ? ((flags & F_S) ? LDV(s, base + i)
                                             : RND(LDV(x, base + i) + LDV(r, base + i)))
                            : LDV(x, base + i)) - mu;
                acc += HSUM(d * d);
            }
#endif
            float var = slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x / (float)n;
            inv = 1.0f / sqrt(var + eps);
        }
        if (live && t == 0) {
            if (flags & F_MEAN)
                mean[row] = mu;
            if (flags & F_ISTD)
                istd[row] = inv;
        }
#if PER > 0
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            uint i = t + k * tpr;
            if (live && i < m)
                STV(y, base + i, rms ? c[k] * inv * wv[k] : (c[k] - mu) * inv * wv[k] + bv[k]);
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt v = add ? ((flags & F_S) ? LDV(s, base + i)
                                        : RND(LDV(x, base + i) + LDV(r, base + i)))
                       : LDV(x, base + i);
            STV(y, base + i, rms ? v * inv * wgt(w, i, flags, woff)
                                 : (v - mu) * inv * wgt(w, i, flags, woff) + bias(b, i, flags));
        }
#endif
    }
}

#define FWD_ARGS                                                                          \
    __global const store_t *x, __global const store_t *r, __global const store_t *w,     \
        __global const store_t *b, __global store_t *y, __global store_t *s,             \
        __global float *mean, __global float *istd, uint wo, uint bo, uint rows, uint n,    \
        uint tpr, uint flags, float eps, float woff, __local float2 *red
#define FWD_PASS x, r, w, b, y, s, mean, istd, wo, bo, rows, n, tpr, flags, eps, woff, red

#if ONLY == 0 || ONLY == 1
__kernel void rms_fwd(FWD_ARGS)
{
    norm_fwd(FWD_PASS, true, false);
}
#endif

#if ONLY == 0 || ONLY == 2
__kernel void add_rms_fwd(FWD_ARGS)
{
    norm_fwd(FWD_PASS, true, true);
}
#endif

#if ONLY == 0 || ONLY == 3
__kernel void ln_fwd(FWD_ARGS)
{
    norm_fwd(FWD_PASS, false, false);
}
#endif

#if ONLY == 0 || ONLY == 4
__kernel void add_ln_fwd(FWD_ARGS)
{
    norm_fwd(FWD_PASS, false, true);
}
#endif

/* ---- backward ------------------------------------------------------------------------ */

/*
 * RMSNormGrad, per row x with g = dY (W + woff), ms = mean(x^2):
 *   eps inside:  r = 1/sqrt(ms + eps), k = r^3 sum(g x) / n
 *   eps outside: r = 1/(sqrt(ms) + eps), k = r^2 / sqrt(ms) sum(g x) / n (0 if ms = 0)
 *   dX = r g - k x;  dW += dY x r
 * Each slot sums its rows' dW in a partial row part[slot] (float; in
 * registers with PER, else in part itself), which colsum adds up:
 * deterministic, no atomics.
 */
#if ONLY == 0 || ONLY == 5
__kernel void rms_grad(__global const store_t *dy, __global const store_t *x,
                       __global const store_t *w, __global store_t *dx, __global vt *part,
                       uint wo, uint po, uint rows, uint n, uint tpr, uint flags, float eps,
                       float woff, __local float2 *red)
{
    SLOTS();
    w += wo;
    bool dw = (flags & F_DW) != 0;
    __global vt *pw = part + po + (size_t)slot * m;
#if PER > 0
    vt wv[PER], ac[PER], xc[PER], gc[PER];
#if PF
    vt xn[PER], gn[PER];
    LOAD_ROW(xn, x, slot);
    LOAD_ROW(gn, dy, slot);
#endif
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        wv[k] = i < m ? wgt(w, i, flags, woff) : (vt)(0.0f);
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
#if PER > 0
#if PF
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            xc[k] = xn[k];
            gc[k] = gn[k];
        }
        uint next = row + n_slots < row ? rows : row + n_slots;
        LOAD_ROW(xn, x, next);
        LOAD_ROW(gn, dy, next);
#else
        LOAD_ROW(xc, x, row);
        LOAD_ROW(gc, dy, row);
#endif
#pragma unroll
        for (uint k = 0; k < PER; k++)
            acc += (float2)(HSUM(xc[k] * xc[k]), HSUM(gc[k] * wv[k] * xc[k]));
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt xv = LDV(x, base + i);
            acc += (float2)(HSUM(xv * xv), HSUM(LDV(dy, base + i) * wgt(w, i, flags, woff) * xv));
        }
#endif
        float2 tot = slot_sum(red, acc, lid, t, tpr);
        float ms = tot.x / (float)n, rr, kk;
        if (flags & F_EPS_OUT) {
            float rms = sqrt(ms);
            rr = 1.0f / (rms + eps);
            kk = rms > 0.0f ? rr * rr / rms * tot.y / (float)n : 0.0f;
        } else {
            rr = 1.0f / sqrt(ms + eps);
            kk = rr * rr * rr * tot.y / (float)n;
        }
#if PER > 0
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            uint i = t + k * tpr;
            if (live && i < m) {
                STV(dx, base + i, rr * (gc[k] * wv[k]) - kk * xc[k]);
                ac[k] += gc[k] * (xc[k] * rr);
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt xv = LDV(x, base + i), gv = LDV(dy, base + i);
            STV(dx, base + i, rr * (gv * wgt(w, i, flags, woff)) - kk * xv);
            if (dw)
                pw[i] += gv * (xv * rr);
        }
#endif
    }
#if PER > 0
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        if (dw && i < m)
            pw[i] = ac[k];
    }
#endif
}
#endif

/*
 * LayerNormGrad, per row x with mu, inv = 1/sqrt(var + eps), xh = (x - mu) inv,
 * g = dY W:  dX = inv (g - mean(g) - xh mean(g xh));  dW += dY xh;  dB += dY.
 * mu and inv are the forward's Mean and InvStdDev (F_STATS), else
 * recomputed from the row.  Slots and partial rows as rms_grad: part holds
 * 2 * n_slots rows (dW partials, then dB partials).
 */
#if ONLY == 0 || ONLY == 6
__kernel void ln_grad(__global const store_t *dy, __global const store_t *x,
                      __global const store_t *w, __global store_t *dx, __global vt *part,
                      __global const float *mean, __global const float *istd, uint wo,
                      uint po, uint rows, uint n, uint tpr, uint flags, float eps,
                      __local float2 *red)
{
    SLOTS();
    w += wo;
    const float woff = 0.0f;
    bool dw = (flags & F_DW) != 0;
    part += po;
    __global vt *pw = part + (size_t)slot * m, *pb = part + ((size_t)n_slots + slot) * m;
#if PER > 0
    vt wv[PER], aw[PER], ab[PER], xc[PER], gc[PER];
#if PF
    vt xn[PER], gn[PER];
    LOAD_ROW(xn, x, slot);
    LOAD_ROW(gn, dy, slot);
#endif
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        wv[k] = i < m ? wgt(w, i, flags, woff) : (vt)(0.0f);
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
        float mu, inv;
        if (flags & F_STATS) {
            mu = live ? mean[row] : 0.0f;
            inv = live ? istd[row] : 0.0f;
        }
#if PER > 0
#if PF
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            xc[k] = xn[k];
            gc[k] = gn[k];
        }
        uint next = row + n_slots < row ? rows : row + n_slots;
        LOAD_ROW(xn, x, next);
        LOAD_ROW(gn, dy, next);
#else
        LOAD_ROW(xc, x, row);
        LOAD_ROW(gc, dy, row);
#endif
        if (!(flags & F_STATS)) {
            float acc = 0.0f;
#pragma unroll
            for (uint k = 0; k < PER; k++)
                acc += HSUM(xc[k]);
            mu = slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x / (float)n;
            acc = 0.0f;
#pragma unroll
            for (uint k = 0; k < PER; k++)
                if (t + k * tpr < m) {
                    vt d = xc[k] - mu;
                    acc += HSUM(d * d);
                }
            inv = 1.0f / sqrt(slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x / (float)n + eps);
        }
        float2 a2 = (float2)(0.0f);
#pragma unroll
        for (uint k = 0; k < PER; k++)
            if (t + k * tpr < m) {
                vt g = gc[k] * wv[k], xh = (xc[k] - mu) * inv;
                a2 += (float2)(HSUM(g), HSUM(g * xh));
            }
#else
        if (!(flags & F_STATS)) {
            float acc = 0.0f;
            for (uint i = t; live && i < m; i += tpr)
                acc += HSUM(LDV(x, base + i));
            mu = slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x / (float)n;
            acc = 0.0f;
            for (uint i = t; live && i < m; i += tpr) {
                vt d = LDV(x, base + i) - mu;
                acc += HSUM(d * d);
            }
            inv = 1.0f / sqrt(slot_sum(red, (float2)(acc, 0.0f), lid, t, tpr).x / (float)n + eps);
        }
        float2 a2 = (float2)(0.0f);
        for (uint i = t; live && i < m; i += tpr) {
            vt g = LDV(dy, base + i) * wgt(w, i, flags, woff), xh = (LDV(x, base + i) - mu) * inv;
            a2 += (float2)(HSUM(g), HSUM(g * xh));
        }
#endif
        float2 tot = slot_sum(red, a2, lid, t, tpr) / (float)n;
#if PER > 0
#pragma unroll
        for (uint k = 0; k < PER; k++) {
            uint i = t + k * tpr;
            if (live && i < m) {
                vt xh = (xc[k] - mu) * inv;
                STV(dx, base + i, inv * ((gc[k] * wv[k] - tot.x) - xh * tot.y));
                aw[k] += gc[k] * xh;
                ab[k] += gc[k];
            }
        }
#else
        for (uint i = t; live && i < m; i += tpr) {
            vt gv = LDV(dy, base + i), xh = (LDV(x, base + i) - mu) * inv;
            STV(dx, base + i, inv * ((gv * wgt(w, i, flags, woff) - tot.x) - xh * tot.y));
            if (dw) {
                pw[i] += gv * xh;
                pb[i] += gv;
            }
        }
#endif
    }
#if PER > 0
#pragma unroll
    for (uint k = 0; k < PER; k++) {
        uint i = t + k * tpr;
        if (dw && i < m) {
            pw[i] = aw[k];
            pb[i] = ab[k];
        }
    }
#endif
}
#endif

/* ---- helpers ------------------------------------------------------------------------- */

/* out[j] = scale * (sum over p < P of part[p * n + j]), j < n: a work-group
 * of (lx columns, ly row strides), ly a power of two, summed in a fixed
 * order; red has lx * ly floats. */
#if ONLY == 0 || ONLY == 7
__kernel void colsum(__global const float *part, __global store_t *out, uint po, uint P,
                     uint n, float scale, __local float *red)
{
    part += po;
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
        ST(out, j, red[cx] * scale);
}

/* dst[j] = src[offset of j] for j < n: a parameter (W, B) broadcast over
 * the normalized block of rank <= 8, dims and src strides given. */
typedef struct {
    uint rank;
    uint dims[8];
    uint st[8];
} expand_t;

__kernel void expand(__global const store_t *src, __global store_t *dst, uint dsto, uint n,
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
    ST(dst, j, LD(src, off)); /* exact for every storage type */
}
#endif
