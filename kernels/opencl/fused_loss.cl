/*
 * fused_loss.cl — the fused losses of domain graphfuse on the device (host
 * side: fused_loss.c; definitions: README "Fused ops"):
 *
 *   ce_fwd       SoftmaxCrossEntropy: per position loss (and weight), LogP, and
 *                G = d Loss / d L (may be L itself: in place)
 *   ce_weights   the positions' weights (for G's mean divisor, before ce_fwd)
 *   ce_zero_rows G's rows that are no position (shift: each batch's last)
 *   ce_scale_all, ce_scale_rows   CrossEntropyGrad: dL = G dLoss
 *   loss_reduce  sum / mean of the per-position losses -> the scalar Loss
 *   gemm         a tiled matrix product, operands transposed by strides
 *   lce_gather, lce_scatter   LinearCrossEntropy: a chunk's rows of H / dH
 *   lce_init, lce_fold, lce_finish   running max / sum of exp / label logit
 *   lce_rows_grad, lce_dbias, lce_count   its training outputs dH, dW, dBias
 *   jsd_rows     JSD: per row value and count
 *   jsd_grad     JSDGrad: dX, dY elementwise
 *
 * A position (one row of class scores) is done by a slot of TPR work-items
 * (a power of two; several slots per work-group for short rows) with an
 * online max and sum of exponentials per work-item, merged in a local tree.
 * Per-position results go to buffers that loss_reduce adds in a fixed
 * order: no atomics on floats, the same result on every run.  A label out
 * of range (not ignore_index) is counted as nothing and its position
 * recorded in *bad (atomic_min), which the host reads when it could not
 * check the labels itself.  Buffers that may live in the workspace come
 * with an element offset (`lo`, `wo` ...).  -DVEC=4: logits rows read as float4 (stride 1
 * and C % 4 == 0 only).  Tensors are of storage.cl's store_t (fp32, fp16,
 * bf16: loaded to float, stored rounded); the workspace is float.
 */
#ifndef VEC
#define VEC 1
#endif
#define MAXWG 1024

#if VEC == 4
typedef float4 vt;
#define VMAX(v) fmax(fmax((v).x, (v).y), fmax((v).z, (v).w))
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
#define VMAX(v) (v)
#define HSUM(v) (v)
#define LDV(p, i) LD(p, i)
#define STV(p, i, v) ST(p, i, v)
#endif

/* flags */
#define L_LAB64 1u   /* labels are int64 (else int32) */
#define L_II 2u      /* ignore_index given */
#define L_WC 4u      /* class weights */
#define L_LOSS 8u    /* per-position losses wanted */
#define L_LOGP 16u   /* LogP wanted */
#define L_BAD 32u    /* record bad labels in *bad */
#define L_LABELS 64u /* JSD: labels given */
#define L_G 128u     /* G wanted */
#define L_GMEAN 256u /* G scaled by 1 / (sum of the weights at *gsum) */
#define L_LOSS_OUT 512u /* per-position losses to the Loss output (reduction none) */

long label_at(__global const int *t, uint flags, size_t i)
{
    return (flags & L_LAB64) ? ((__global const long *)t)[i] : (long)t[i];
}

/* Folds e^(v - m) for a vector v into the running (m, s). */
void online(float *m, float *s, vt v)
{
    float mv = VMAX(v);
    if (mv > *m) {
        *s *= exp(*m - mv);
        *m = mv;
    }
    if (*m != -INFINITY)
        *s += HSUM(exp(v - *m));
}

/* (m, s) merged over the tpr work-items of a slot (see fused_norm.cl). */
float2 slot_merge(__local float2 *red, float2 v, uint lid, uint t, uint tpr)
{
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = tpr >> 1; h > 0; h >>= 1) {
        if (t < h) {
            float2 a = red[lid], b = red[lid + h];
            float mx = fmax(a.x, b.x);
            if (mx != -INFINITY)
                red[lid] = (float2)(mx, a.y * exp(a.x - mx) + b.y * exp(b.x - mx));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float2 r = red[lid - t];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Position p of n_pos: the offset of its first logit, the stride between
 * its logits and the index of its label (see ce_fwd). */
void ce_position(uint p, uint C, uint d, uint s1, size_t *base, size_t *stride, size_t *lab)
{
    if (s1) {
        size_t row = (size_t)p + p / s1;
        *base = row * C;
        *stride = 1;
        *lab = row + 1;
    } else {
        *base = (size_t)(p / d) * C * d + p % d;
        *stride = d;
        *lab = p;
    }
}

/* wt[p] = the weight of position p's label (1 without class weights), 0
 * when ignored or out of range. */
__kernel void ce_weights(__global const int *t, __global const store_t *wc, __global float *wt,
                         uint wo, uint n_pos, uint C, uint d, uint s1, uint flags, long ii)
{
    wt += wo;
    uint p = get_global_id(0);
    if (p >= n_pos)
        return;
    size_t base, stride, lab;
    ce_position(p, C, d, s1, &base, &stride, &lab);
    long tl = label_at(t, flags, lab);
    bool use = !((flags & L_II) && tl == ii) && tl >= 0 && tl < (long)C;
    wt[p] = use ? ((flags & L_WC) ? LD(wc, tl) : 1.0f) : 0.0f;
}

/*
 * Position p of n_pos: its C logits at base + k * stride; s1 = S - 1 with
 * shift (L [B, S, C], row p + p / s1, label at that row + 1), else L
 * [N, C, d...] with base (p / d) C d + p % d, stride d, label p.
 * loss[p] = -w[t] (x[t] - m - log s) (into the Loss output lout instead with
 * L_LOSS_OUT), wt[p] = w[t]; both 0 when ignored.
 * LogP at p * C with shift, else at L's own layout.  G at L's layout:
 * c (softmax(x) - onehot(t)), c = w[t] (/ *gsum for mean), zeros when
 * ignored.  G (and LogP) may be L: each work-item reads its elements
 * before it writes them, and x[t] is read before anything is written.
 */
__kernel void ce_fwd(__global const store_t *x, __global const int *t,
                     __global const store_t *wc, __global float *loss, __global store_t *lout,
                     __global float *wt, __global store_t *logp, __global store_t *g,
                     __global const float *gsum, __global int *bad, uint lo, uint wo, uint go,
                     uint bo, uint n_pos, uint C, uint d, uint s1, uint tpr, uint flags, long ii)
{
    __local float2 red[MAXWG];
    loss += lo;
    wt += wo;
    gsum += go;
    bad += bo;
    uint lid = get_local_id(0), k0 = lid & (tpr - 1);
    uint p = get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    bool live = p < n_pos;
    size_t base, stride, lab;
    ce_position(p, C, d, s1, &base, &stride, &lab);
    long tl = live ? label_at(t, flags, lab) : 0;
    bool ign = (flags & L_II) && tl == ii;
    bool badl = !ign && (tl < 0 || tl >= (long)C);
    bool use = live && !ign && !badl;
    bool need = live && (!(ign || badl) || (flags & L_LOGP));
    float xt = use && k0 == 0 ? LD(x, base + (size_t)tl * stride) : 0.0f;
    float w = use ? ((flags & L_WC) ? LD(wc, tl) : 1.0f) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    if (need && stride == 1) {
        __global const store_t *xv = x + base;
        for (uint k = k0; k < C / VEC; k += tpr)
            online(&m, &s, LDV(xv, k));
    } else if (need) {
        for (uint k = k0; k < C; k += tpr) {
            float v = LD(x, base + k * stride);
            if (v > m) {
                s *= exp(m - v);
                m = v;
            }
            if (m != -INFINITY)
                s += exp(v - m);
        }
    }
    float2 ms = slot_merge(red, (float2)(m, s), lid, k0, tpr);
    float ls = log(ms.y);
    if (need && (flags & L_LOGP)) {
        size_t ob = s1 ? (size_t)p * C : base;
        if (stride == 1) {
            __global const store_t *xv = x + base;
            __global store_t *lv = logp + ob;
            for (uint k = k0; k < C / VEC; k += tpr)
                STV(lv, k, (LDV(xv, k) - ms.x) - ls);
        } else {
            for (uint k = k0; k < C; k += tpr)
                ST(logp, ob + k * stride, (LD(x, base + k * stride) - ms.x) - ls);
        }
    }
    if (live && (flags & L_G)) {
        float cf = (flags & L_GMEAN) ? w / gsum[0] : w, inv = 1.0f / ms.y;
        /* the elements of each work-item as in the passes before (in place) */
        if (!use && stride == 1) {
            __global store_t *gv = g + base;
            for (uint k = k0; k < C / VEC; k += tpr)
                STV(gv, k, (vt)(0.0f));
        } else if (!use) {
            for (uint k = k0; k < C; k += tpr)
                ST(g, base + k * stride, 0.0f);
        } else if (stride == 1) {
            __global const store_t *xv = x + base;
            __global store_t *gv = g + base;
            uint kt = (uint)tl / VEC, lane = (uint)tl % VEC;
            for (uint k = k0; k < C / VEC; k += tpr) {
                vt q = exp(LDV(xv, k) - ms.x) * inv;
#if VEC == 4
                if (k == kt)
                    q -= convert_float4((int4)(lane == 0, lane == 1, lane == 2, lane == 3));
#else
                if (k == kt)
                    q -= 1.0f;
#endif
                STV(gv, k, q * cf);
            }
        } else {
            for (uint k = k0; k < C; k += tpr) {
                float q = exp(LD(x, base + k * stride) - ms.x) * inv;
                ST(g, base + k * stride, (k == (uint)tl ? q - 1.0f : q) * cf);
            }
        }
    }
    if (!live || k0 != 0)
        return;
    if (badl && (flags & L_BAD))
        atomic_min(bad, (int)p);
    float l = use ? -((xt - ms.x) - ls) * w : 0.0f;
    if (flags & L_LOSS_OUT)
        ST(lout, p, l);
    else if (flags & L_LOSS)
        loss[p] = l;
    wt[p] = w;
}

/* G's rows that are no position: row b S + S - 1 of L [B, S, C] (shift). */
__kernel void ce_zero_rows(__global store_t *g, uint B, uint S, uint C)
{
    size_t id = get_global_id(0);
    if (id >= (size_t)B * C)
        return;
    size_t b = id / C, k = id % C;
    ST(g, (b * S + S - 1) * C + k, 0.0f);
}

/* CrossEntropyGrad with a scalar dLoss (reduction mean / sum): out = G dLoss;
 * nv vectors, the n % 4 tail by work-item 0.  out may be G. */
__kernel void ce_scale_all(__global const store_t *g, __global const store_t *dl,
                           __global store_t *out, ulong nv, ulong n)
{
    float k = LD(dl, 0);
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0))
        STV(out, i, LDV(g, i) * k);
#if VEC == 4
    if (get_global_id(0) == 0)
        for (size_t j = nv * 4; j < n; j++)
            ST(out, j, LD(g, j) * k);
#endif
}

/* reduction none: each position's row times its dLoss.  shift (S > 0): G
 * [B, S, C], row (b, s) by dLoss[b (S - 1) + s], each batch's last row
 * copied; else G [N, C, d...] by dLoss [N, d...]. */
__kernel void ce_scale_rows(__global const store_t *g, __global const store_t *dl,
                            __global store_t *out, ulong n, uint C, uint d, uint S)
{
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        float v = LD(g, i);
        if (S) {
            size_t r = i / C, b = r / S, s = r % S;
            ST(out, i, s + 1 == S ? v : v * LD(dl, b * (S - 1) + s));
        } else {
            ST(out, i, v * LD(dl, i / ((size_t)C * d) * d + i % d));
        }
    }
}

/* sum(loss) (mean: / sum(wt)) over n values, for work-item 0 of a
 * work-group of a power-of-two size. */
float loss_sum(__global const float *loss, __global const float *wt, __local float2 *red,
               uint n, uint mean)
{
    uint lid = get_local_id(0), L = get_local_size(0);
    float2 acc = (float2)(0.0f);
    for (uint i = lid; i < n; i += L)
        acc += (float2)(loss[i], mean ? wt[i] : 0.0f);
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = L >> 1; h > 0; h >>= 1) {
        if (lid < h)
            red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return mean ? red[0].x / red[0].y : red[0].x;
}

/* out[oo] = loss_sum, into the workspace (float). */
__kernel void loss_reduce(__global const float *loss, __global const float *wt,
                          __global float *out, uint lo, uint wo, uint oo, uint n, uint mean)
{
    __local float2 red[MAXWG];
    float v = loss_sum(loss + lo, wt + wo, red, n, mean);
    if (get_local_id(0) == 0)
        out[oo] = v;
}

/* The Loss output = loss_sum, in the storage type. */
__kernel void loss_out(__global const float *loss, __global const float *wt,
                       __global store_t *out, uint lo, uint wo, uint n, uint mean)
{
    __local float2 red[MAXWG];
    float v = loss_sum(loss + lo, wt + wo, red, n, mean);
    if (get_local_id(0) == 0)
        ST(out, 0, v);
}

/* ---- LinearCrossEntropy ------------------------------------------------------------ */

#define TM 64
#define TN 64
#define TK 16

/*
 * c[i ldc + j] = (beta ? c : 0) + (bias ? bias[bio + j] : 0) + sum_r A(i, r) B(r, j)
 * for i < m, j < n, r < k, with A(i, r) = a[i sa0 + r sa1] and B(r, j) =
 * b[r sb0 + j sb1]: any of the operands transposed by its strides.  B and
 * bias are of the storage type (W, Bias; B in the workspace only in
 * training, which is fp32 only), A and C float (the workspace, or dW).  16 x 16
 * work-items, each a 4 x 4 block of a 64 x 64 tile (rows ty + 16 u,
 * columns tx + 16 v: stores coalesced), r in steps of 16 through local
 * memory, each tile loaded along the operand's contiguous axis.
 */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void gemm(__global const float *a, __global const store_t *b, __global float *c,
          __global const store_t *bias, uint ao, uint bo, uint co, uint bio, uint sa0, uint sa1,
          uint sb0, uint sb1, uint ldc, uint m, uint n, uint k, uint beta)
{
    __local float tile_a[TK][TM + 1];
    __local float tile_b[TK][TN + 1];
    a += ao;
    b += bo;
    c += co;
    bias += bio;
    uint tx = get_local_id(0), ty = get_local_id(1), tid = ty * 16 + tx;
    uint i0 = get_group_id(1) * TM, j0 = get_group_id(0) * TN;
    float acc[4][4];
    for (int u = 0; u < 4; u++)
        for (int v = 0; v < 4; v++)
            acc[u][v] = 0.0f;
    for (uint r0 = 0; r0 < k; r0 += TK) {
        for (uint e = tid; e < TM * TK; e += 256) {
            uint i, r;
            if (sa1 == 1) {
                i = e / TK;
                r = e % TK;
            } else {
                r = e / TM;
                i = e % TM;
            }
            uint gi = i0 + i, gr = r0 + r;
            tile_a[r][i] = gi < m && gr < k ? a[(size_t)gi * sa0 + (size_t)gr * sa1] : 0.0f;
        }
        for (uint e = tid; e < TK * TN; e += 256) {
            uint r, j;
            if (sb1 == 1) {
                r = e / TN;
                j = e % TN;
            } else {
                j = e / TK;
                r = e % TK;
            }
            uint gr = r0 + r, gj = j0 + j;
            tile_b[r][j] = gr < k && gj < n ? LD(b, (size_t)gr * sb0 + (size_t)gj * sb1) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint r = 0; r < TK; r++) {
            float av[4], bv[4];
            for (int u = 0; u < 4; u++)
                av[u] = tile_a[r][ty + 16 * u];
            for (int v = 0; v < 4; v++)
                bv[v] = tile_b[r][tx + 16 * v];
            for (int u = 0; u < 4; u++)
                for (int v = 0; v < 4; v++)
                    acc[u][v] += av[u] * bv[v];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int u = 0; u < 4; u++)
        for (int v = 0; v < 4; v++) {
            uint gi = i0 + ty + 16 * u, gj = j0 + tx + 16 * v;
            if (gi < m && gj < n) {
                __global float *o = c + (size_t)gi * ldc + gj;
                *o = (beta ? *o : 0.0f) + (bias ? LD(bias, gj) : 0.0f) + acc[u][v];
            }
        }
}

/* Row of H holding position p: p + p / s1 with shift (s1 = S - 1), else p. */
size_t lce_row(size_t p, uint s1)
{
    return s1 ? p + p / s1 : p;
}

/* hc[i, :] = H[row(p0 + i), :], i < nr: the chunk's rows of H, contiguous,
 * as float. */
__kernel void lce_gather(__global const store_t *h, __global float *hc, uint hco, uint nr,
                         uint K, uint p0, uint s1)
{
    hc += hco;
    for (size_t e = get_global_id(0); e < (size_t)nr * K; e += get_global_size(0)) {
        size_t i = e / K, q = e % K;
        hc[e] = LD(h, lce_row((size_t)p0 + i, s1) * K + q);
    }
}

/* dH[row(p0 + i), :] = dhc[i, :]. */
__kernel void lce_scatter(__global const float *dhc, __global store_t *dh, uint dho, uint nr,
                          uint K, uint p0, uint s1)
{
    dhc += dho;
    for (size_t e = get_global_id(0); e < (size_t)nr * K; e += get_global_size(0)) {
        size_t i = e / K, q = e % K;
        ST(dh, lce_row((size_t)p0 + i, s1) * K + q, dhc[e]);
    }
}

/* st = [m: nr][s: nr][zt: nr], reset for a chunk. */
__kernel void lce_init(__global float *st, uint so, uint nr)
{
    st += so;
    uint i = get_global_id(0);
    if (i < nr) {
        st[i] = -INFINITY;
        st[nr + i] = 0.0f;
        st[2 * nr + i] = NAN;
    }
}

/* Label of position p (shift: row p + p / s1, label at that row + 1). */
size_t lce_label_index(size_t p, uint s1)
{
    return s1 ? p + p / s1 + 1 : p;
}

/* Folds the block's row i (nc logits from column c0) into st; one slot of
 * tpr work-items per row. */
__kernel void lce_fold(__global const float *z, __global float *st, __global const int *t,
                       uint zo, uint so, uint nr, uint nc, uint ldz, uint p0, uint s1, uint c0,
                       uint tpr, uint flags)
{
    z += zo;
    st += so;
    __local float2 red[MAXWG];
    uint lid = get_local_id(0), k0 = lid & (tpr - 1);
    uint i = get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    bool live = i < nr;
    float m = -INFINITY, s = 0.0f;
    for (uint k = k0; live && k < nc; k += tpr) {
        float v = z[(size_t)i * ldz + k];
        if (v > m) {
            s *= exp(m - v);
            m = v;
        }
        if (m != -INFINITY)
            s += exp(v - m);
    }
    float2 b = slot_merge(red, (float2)(m, s), lid, k0, tpr);
    if (!live || k0 != 0)
        return;
    long tl = label_at(t, flags, lce_label_index((size_t)p0 + i, s1));
    if (tl >= (long)c0 && tl < (long)c0 + (long)nc)
        st[2 * nr + i] = z[(size_t)i * ldz + (size_t)(tl - (long)c0)];
    if (b.x == -INFINITY)
        return;
    float mo = st[i], mx = fmax(mo, b.x);
    st[nr + i] = st[nr + i] * exp(mo - mx) + b.y * exp(b.x - mx);
    st[i] = mx;
}

/* Losses of the chunk's positions: -(zt - m - log s), 0 when ignored (into
 * the Loss output lout with L_LOSS_OUT). */
__kernel void lce_finish(__global const float *st, __global const int *t, __global float *loss,
                         __global store_t *lout, __global float *wt, __global int *bad,
                         uint so, uint lo, uint wo, uint bo, uint nr, uint p0, uint s1, uint V,
                         uint flags, long ii)
{
    st += so;
    loss += lo;
    wt += wo;
    bad += bo;
    uint i = get_global_id(0);
    if (i >= nr)
        return;
    size_t p = (size_t)p0 + i;
    long tl = label_at(t, flags, lce_label_index(p, s1));
    bool ign = (flags & L_II) && tl == ii;
    bool badl = !ign && (tl < 0 || tl >= (long)V);
    if (badl && (flags & L_BAD))
        atomic_min(bad, (int)p);
    float l = 0.0f, w = 0.0f;
    if (!ign && !badl) {
        l = -((st[2 * nr + i] - st[i]) - log(st[nr + i]));
        w = 1.0f;
    }
    if (flags & L_LOSS_OUT)
        ST(lout, p, l);
    else if (flags & L_LOSS)
        loss[p] = l;
    wt[p] = w;
}

/* Training: each row of the chunk's logits z [nr, V] (all V columns) gives
 * its loss (loss[p0 + i], wt[p0 + i] 1 or 0) and becomes its gradient in
 * place, c (softmax(z) - onehot(t)), c = 1 / *cnt for mean (L_GMEAN), else
 * 1; zeros when ignored.  One slot of tpr work-items per row. */
__kernel void lce_rows_grad(__global float *z, __global const int *t, __global float *loss,
                            __global float *wt, __global int *bad, __global const float *cnt,
                            uint zo, uint lo, uint wo, uint bo, uint co, uint nr, uint V,
                            uint p0, uint s1, uint tpr, uint flags, long ii)
{
    __local float2 red[MAXWG];
    z += zo;
    loss += lo;
    wt += wo;
    bad += bo;
    cnt += co;
    uint lid = get_local_id(0), k0 = lid & (tpr - 1);
    uint i = get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    bool live = i < nr;
    size_t p = (size_t)p0 + i, base = (size_t)i * V;
    long tl = live ? label_at(t, flags, lce_label_index(p, s1)) : 0;
    bool ign = (flags & L_II) && tl == ii;
    bool badl = !ign && (tl < 0 || tl >= (long)V);
    bool use = live && !ign && !badl;
    float zt = use && k0 == 0 ? z[base + (size_t)tl] : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (uint k = k0; use && k < V; k += tpr) {
        float v = z[base + k];
        if (v > m) {
            s *= exp(m - v);
            m = v;
        }
        if (m != -INFINITY)
            s += exp(v - m);
    }
    float2 ms = slot_merge(red, (float2)(m, s), lid, k0, tpr);
    float cf = (flags & L_GMEAN) ? 1.0f / cnt[0] : 1.0f, inv = 1.0f / ms.y;
    for (uint k = k0; live && k < V; k += tpr) {
        float q = use ? exp(z[base + k] - ms.x) * inv : 0.0f;
        z[base + k] = (use && k == (uint)tl ? q - 1.0f : q) * cf;
    }
    if (!live || k0 != 0)
        return;
    if (badl && (flags & L_BAD))
        atomic_min(bad, (int)p);
    loss[p] = use ? -((zt - ms.x) - log(ms.y)) : 0.0f;
    wt[p] = use ? 1.0f : 0.0f;
}

/* db[j] += sum over i < nr of z[i V + j] (rows in order). */
__kernel void lce_dbias(__global const float *z, __global store_t *db, uint zo, uint nr, uint V)
{
    z += zo;
    uint j = get_global_id(0);
    if (j >= V)
        return;
    float acc = 0.0f;
    for (uint i = 0; i < nr; i++)
        acc += z[(size_t)i * V + j];
    ST(db, j, LD(db, j) + acc);
}

/* *out = the positions whose label is not ignore_index (the divisor of
 * mean); one work-group of a power-of-two size. */
__kernel void lce_count(__global const int *t, __global float *out, uint oo, uint n_pos,
                        uint s1, uint flags, long ii)
{
    __local float red[MAXWG];
    out += oo;
    uint lid = get_local_id(0), L = get_local_size(0);
    float acc = 0.0f;
    for (uint p = lid; p < n_pos; p += L)
        acc += (flags & L_II) && label_at(t, flags, lce_label_index(p, s1)) == ii ? 0.0f : 1.0f;
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = L >> 1; h > 0; h >>= 1) {
        if (lid < h)
            red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[0] = red[0];
}

/* ---- JSD ------------------------------------------------------------------------------ */

/* One element's share (X = log Q, Y = log P), 0 log 0 = 0. */
float jsd_term(float lq, float lp, float beta)
{
    if (beta == 0.0f) {
        float p = exp(lp);
        return p > 0.0f ? p * (lp - lq) : 0.0f;
    }
    if (beta == 1.0f) {
        float q = exp(lq);
        return q > 0.0f ? q * (lq - lp) : 0.0f;
    }
    float p = exp(lp), q = exp(lq), bq = 1.0f - beta, lm = log(beta * p + bq * q);
    return beta * (p > 0.0f ? p * (lp - lm) : 0.0f) + bq * (q > 0.0f ? q * (lq - lm) : 0.0f);
}

/* val[r] = the row's sum, cnt[r] = 1 (both 0 when T[r] = ignore_index). */
__kernel void jsd_rows(__global const store_t *x, __global const store_t *y, __global const int *t,
                       __global float *val, __global float *cnt, uint vo, uint co, uint rows,
                       uint n, uint tpr, uint flags, float beta, long ii)
{
    val += vo;
    cnt += co;
    __local float red[MAXWG];
    uint lid = get_local_id(0), k0 = lid & (tpr - 1);
    uint r = get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    bool live = r < rows;
    bool ign = live && (flags & L_LABELS) && label_at(t, flags, r) == ii;
    size_t base = (size_t)r * n;
    float acc = 0.0f;
    for (uint k = k0; live && !ign && k < n; k += tpr)
        acc += jsd_term(LD(x, base + k), LD(y, base + k), beta);
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = tpr >> 1; h > 0; h >>= 1) {
        if (k0 < h)
            red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (live && k0 == 0) {
        val[r] = ign ? 0.0f : red[lid];
        cnt[r] = ign ? 0.0f : 1.0f;
    }
}

/* JSDGrad, c = dLoss / (rows counted: *cnt, else `rows`), per element of a
 * counted row (zeros on an ignored one), P = e^Y, Q = e^X:
 *   beta 0: dX = -c P,               dY = c P (Y - X + 1)
 *   beta 1: dX = c Q (X - Y + 1),    dY = -c Q
 *   else, log M = log(beta P + (1 - beta) Q):
 *           dX = c (1 - beta) Q (X - log M),   dY = c beta P (Y - log M)
 * a zero probability contributing nothing.  dX / dY may be X / Y. */
#define W_DX 1u
#define W_DY 2u

__kernel void jsd_grad(__global const store_t *x, __global const store_t *y,
                       __global const int *t, __global const store_t *dl,
                       __global const float *cnt, __global store_t *dx, __global store_t *dy,
                       uint co, ulong total, uint n, float rows, uint flags, uint want,
                       float beta, long ii)
{
    cnt += co;
    float c = LD(dl, 0) / ((flags & L_LABELS) ? cnt[0] : rows), b1 = 1.0f - beta;
    for (size_t i = get_global_id(0); i < total; i += get_global_size(0)) {
        float gx = 0.0f, gy = 0.0f;
        if (!((flags & L_LABELS) && label_at(t, flags, i / n) == ii)) {
            float xv = LD(x, i), yv = LD(y, i), p = exp(yv), q = exp(xv);
            if (beta == 0.0f) {
                gx = -p;
                gy = p > 0.0f ? p * (yv - xv + 1.0f) : 0.0f;
            } else if (beta == 1.0f) {
                gx = q > 0.0f ? q * (xv - yv + 1.0f) : 0.0f;
                gy = -q;
            } else {
                float lm = log(beta * p + b1 * q);
                gx = q > 0.0f ? b1 * q * (xv - lm) : 0.0f;
                gy = p > 0.0f ? beta * p * (yv - lm) : 0.0f;
            }
            gx *= c;
            gy *= c;
        }
        if (want & W_DX)
            ST(dx, i, gx);
        if (want & W_DY)
            ST(dy, i, gy);
    }
}

/* *out = the number of rows whose label is not ignore_index; one
 * work-group of a power-of-two size. */
__kernel void count_rows(__global const int *t, __global float *out, uint oo, uint rows,
                         uint flags, long ii)
{
    __local float red[MAXWG];
    out += oo;
    uint lid = get_local_id(0), L = get_local_size(0);
    float acc = 0.0f;
    for (uint r = lid; r < rows; r += L)
        acc += label_at(t, flags, r) == ii ? 0.0f : 1.0f;
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = L >> 1; h > 0; h >>= 1) {
        if (lid < h)
            red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[0] = red[0];
}
