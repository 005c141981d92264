/*
 * fused_attn.cl — fused attention on the device (host side: fused_attn.c;
 * definitions: README "Fused ops"):
 *
 *   attn_fwd   Attention: O = softmax(scale Q K' + Mask) V, one work-group
 *              per (item, block of BQ query rows)
 *   attn_dq    AttentionGrad over query blocks: each row's softmax max m
 *              and sum l and rowsum(dO O) into the workspace, then dQ
 *   attn_dkv   AttentionGrad over key blocks of BK keys: dK and dV, with P
 *              recomputed from the m and l attn_dq wrote
 *
 * Q [items, Sq, D], K [items, Sk, D] (F_TB) or [items, D, Sk], V [items,
 * Sk, Dv], O and dO [items, Sq, Dv]; the Mask is read through strides over
 * the scores [b..., Sq, Sk] (0 along broadcast axes).  Tiles of Q, K, V,
 * dO are staged in local memory (one buffer, cut by the kernel: the host
 * sizes it), rows padded to an odd length so that work-items walking a
 * column hit different banks.  The forward keeps each row's running max
 * and sum (online softmax), so the [Sq, Sk] scores never reach global
 * memory; the backward recomputes them tile by tile.  No atomics: every
 * output element is summed by one work-item in a fixed order.
 *
 * Accumulators (O, dQ, dK, dV) live in registers: entry e = lid + k * wg
 * (k < MAXO) of the tile's [rows, cols] block; the host picks MAXO and
 * the tile sizes so that every entry has a slot.
 */
#ifndef MAXO
#define MAXO 8
#endif

#define F_TB 1u   /* K is [Sk, D] */
#define F_MASK 2u /* Mask given */
#define F_DQ 4u   /* dQ wanted */
#define F_DK 8u   /* dK wanted */
#define F_DV 16u  /* dV wanted */
#define F_ZERO 32u /* zero_masked_rows: a row of -inf scores gives 0s, not NaN */
#define F_STATS 64u /* attn_fwd writes Stats: each row's max, then 1 / sum */

/* The shapes, tiles and Mask strides (struct attn_arg of fused_attn.c). */
struct attn_arg {
    uint rows;         /* items * Sq: rows of each workspace array */
    uint sq, sk, d, dv;
    uint bq, bk;       /* query rows, keys of a tile */
    uint flags;
    float scale;
    uint mrank;        /* Mask: batch axes, their sizes and strides */
    uint mdims[6], mst[6];
    uint mrs, mcs;     /* and its strides along Sq and Sk */
};

/* The padded row length of a local tile. */
uint odd(uint x)
{
    return x | 1u;
}

/* Offset of item it's [Sq, Sk] block of the Mask. */
uint mask_base(const struct attn_arg *a, uint it)
{
    uint off = 0;
    for (int i = (int)a->mrank - 1; i >= 0; i--) {
        off += it % a->mdims[i] * a->mst[i];
        it /= a->mdims[i];
    }
    return off;
}

/* dst[r * ld + c] = src[base + r * rs + c * cs] for r < nvalid, 0 for
 * nvalid <= r < rows; c < cols.  The walk runs along whichever stride is
 * 1, so that neighbouring work-items load neighbouring elements. */
void load_tile(__local float *dst, uint ld, __global const store_t *src, uint base, uint rs,
               uint cs, uint rows, uint nvalid, uint cols)
{
    uint lid = get_local_id(0), wg = get_local_size(0), n = rows * cols;
    for (uint e = lid; e < n; e += wg) {
        uint r = cs == 1 ? e / cols : e % rows, c = cs == 1 ? e % cols : e / rows;
        dst[r * ld + c] = r < nvalid ? LD(src, base + r * rs + c * cs) : 0.0f;
    }
}

/* The K tile of keys j0 .. j0 + nk of item it as [bk, D] rows. */
void load_k(__local float *ks, __global const store_t *k, const struct attn_arg *a, uint it,
            uint j0, uint nk)
{
    if (a->flags & F_TB)
        load_tile(ks, odd(a->d), k, (it * a->sk + j0) * a->d, a->d, 1, a->bk, nk, a->d);
    else
        load_tile(ks, odd(a->d), k, it * a->d * a->sk + j0, 1, a->sk, a->bk, nk, a->d);
}

/* Rows of n floats, x . y */
float dot_l(__local const float *x, __local const float *y, uint n)
{
    float s = 0.0f;
    for (uint c = 0; c < n; c++)
        s += x[c] * y[c];
    return s;
}

/* The score of query row q0 + r and key j0 + jj: scale q . k + Mask. */
float score(const struct attn_arg *a, __local const float *qs, __local const float *ks,
            __global const store_t *mask, uint mb, uint r, uint jj, uint q0, uint j0)
{
    float s = a->scale * dot_l(qs + r * odd(a->d), ks + jj * odd(a->d), a->d);
    if (a->flags & F_MASK)
        s += LD(mask, mb + (q0 + r) * a->mrs + (j0 + jj) * a->mcs);
    return s;
}

/* The block of a work-group: item *it, first row *r0 of blocks of `blk`
 * rows over n; returns the rows it has. */
uint block_of(uint n, uint blk, uint *it, uint *r0)
{
    uint nb = (n + blk - 1) / blk, g = get_group_id(0);
    *it = g / nb;
    *r0 = g % nb * blk;
    return min(blk, n - *r0);
}

/* ---- forward ------------------------------------------------------------------------ */

/* Local memory (floats): Q tile [bq][odd D], a K or V tile [bk][odd max(D,
 * Dv)], scores [bq][odd bk], and per row the running max, sum and the
 * factor of this tile. */
__kernel void attn_fwd(__global const store_t *q, __global const store_t *k,
                       __global const store_t *v, __global const store_t *mask,
                       __global store_t *o, __global float *stats, __local float *lm,
                       struct attn_arg a)
{
    uint lid = get_local_id(0), wg = get_local_size(0), it, q0;
    uint nr = block_of(a.sq, a.bq, &it, &q0);
    uint ldq = odd(a.d), ldv = odd(a.dv), lds = odd(a.bk);
    __local float *qs = lm, *kv = qs + a.bq * ldq, *ss = kv + a.bk * max(ldq, ldv);
    __local float *mrow = ss + a.bq * lds, *lrow = mrow + a.bq, *frow = lrow + a.bq;
    uint mb = a.flags & F_MASK ? mask_base(&a, it) : 0, nacc = a.bq * a.dv;
    load_tile(qs, ldq, q, (it * a.sq + q0) * a.d, a.d, 1, a.bq, nr, a.d);
    for (uint r = lid; r < a.bq; r += wg) {
        mrow[r] = -INFINITY;
        lrow[r] = 0.0f;
    }
    float acc[MAXO];
#pragma unroll
    for (uint i = 0; i < MAXO; i++)
        acc[i] = 0.0f;
    for (uint j0 = 0; j0 < a.sk; j0 += a.bk) {
        uint nk = min(a.bk, a.sk - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_k(kv, k, &a, it, j0, nk);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            ss[r * lds + jj] = r < nr && jj < nk ? score(&a, qs, kv, mask, mb, r, jj, q0, j0)
                                                 : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the V tile over the K tile; each row's new max and the factor
         * of its old sums (a row that is -inf so far keeps 0s) */
        load_tile(kv, ldv, v, (it * a.sk + j0) * a.dv, a.dv, 1, a.bk, nk, a.dv);
        for (uint r = lid; r < a.bq; r += wg) {
            float m = mrow[r];
            for (uint jj = 0; jj < nk; jj++)
                m = fmax(m, ss[r * lds + jj]);
            frow[r] = m == -INFINITY ? 1.0f : exp(mrow[r] - m);
            mrow[r] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            float m = mrow[r];
            ss[r * lds + jj] = jj < nk && m != -INFINITY ? exp(ss[r * lds + jj] - m) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint r = lid; r < a.bq; r += wg) {
            float l = 0.0f;
            for (uint jj = 0; jj < nk; jj++)
                l += ss[r * lds + jj];
            lrow[r] = lrow[r] * frow[r] + l;
        }
#pragma unroll
        for (uint i = 0; i < MAXO; i++) {
            uint e = lid + i * wg;
            if (e < nacc) {
                uint r = e / a.dv, c = e % a.dv;
                float t = acc[i] * frow[r];
                for (uint jj = 0; jj < nk; jj++)
                    t += ss[r * lds + jj] * kv[jj * ldv + c];
                acc[i] = t;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (uint i = 0; i < MAXO; i++) {
        uint e = lid + i * wg;
        if (e < nacc && e / a.dv < nr) {
            float l = lrow[e / a.dv];
            ST(o, (it * a.sq + q0) * a.dv + e, l == 0.0f && (a.flags & F_ZERO) ? 0.0f : acc[i] / l);
        }
    }
    for (uint r = lid; r < nr && (a.flags & F_STATS); r += wg) { /* Stats [2, rows] */
        bool none = lrow[r] == 0.0f && (a.flags & F_ZERO);
        stats[it * a.sq + q0 + r] = none ? 0.0f : mrow[r];
        stats[a.rows + it * a.sq + q0 + r] = none ? 0.0f : 1.0f / lrow[r];
    }
}

/* ---- backward: query blocks ----------------------------------------------------------- */

/* Workspace: m [rows], l [rows], di [rows] (di = rowsum(dO O)).
 * Local memory (floats): Q tile [bq][odd D], dO tile [bq][odd Dv], a K or V
 * tile [bk][odd max(D, Dv)], dP and dS [bq][odd bk] each, m, l, di [bq]. */
__kernel void attn_dq(__global const store_t *dout, __global const store_t *q,
                      __global const store_t *k, __global const store_t *v,
                      __global const store_t *mask, __global const store_t *o,
                      __global store_t *dq, __global float *ws, __local float *lm,
                      struct attn_arg a)
{
    uint lid = get_local_id(0), wg = get_local_size(0), it, q0;
    uint nr = block_of(a.sq, a.bq, &it, &q0);
    uint ldq = odd(a.d), ldo = odd(a.dv), lds = odd(a.bk);
    __local float *qs = lm, *dos = qs + a.bq * ldq, *kv = dos + a.bq * ldo;
    __local float *dps = kv + a.bk * max(ldq, ldo), *dss = dps + a.bq * lds;
    __local float *mrow = dss + a.bq * lds, *lrow = mrow + a.bq, *drow = lrow + a.bq;
    uint mb = a.flags & F_MASK ? mask_base(&a, it) : 0, row0 = it * a.sq + q0;
    load_tile(qs, ldq, q, row0 * a.d, a.d, 1, a.bq, nr, a.d);
    load_tile(dos, ldo, dout, row0 * a.dv, a.dv, 1, a.bq, nr, a.dv);
    for (uint r = lid; r < a.bq; r += wg) {
        mrow[r] = -INFINITY;
        lrow[r] = 0.0f;
    }
    /* pass 1: each row's max and sum of exponentials, online */
    for (uint j0 = 0; j0 < a.sk; j0 += a.bk) {
        uint nk = min(a.bk, a.sk - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_k(kv, k, &a, it, j0, nk);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            if (r < nr && jj < nk)
                dss[r * lds + jj] = score(&a, qs, kv, mask, mb, r, jj, q0, j0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint r = lid; r < nr; r += wg) {
            float m = mrow[r], l = 0.0f;
            for (uint jj = 0; jj < nk; jj++)
                m = fmax(m, dss[r * lds + jj]);
            for (uint jj = 0; jj < nk && m != -INFINITY; jj++)
                l += exp(dss[r * lds + jj] - m);
            lrow[r] = m == -INFINITY ? 0.0f : lrow[r] * exp(mrow[r] - m) + l;
            mrow[r] = m;
        }
    }
    for (uint r = lid; r < nr; r += wg) {
        if ((a.flags & F_ZERO) && mrow[r] == -INFINITY) {
            mrow[r] = 0.0f; /* every p = exp(-inf) / inf = 0 */
            lrow[r] = INFINITY;
        }
        float di = 0.0f;
        for (uint c = 0; c < a.dv; c++)
            di += dos[r * ldo + c] * LD(o, (row0 + r) * a.dv + c);
        drow[r] = di;
        ws[row0 + r] = mrow[r];
        ws[a.rows + row0 + r] = lrow[r];
        ws[2 * a.rows + row0 + r] = di;
    }
    if (!(a.flags & F_DQ))
        return;
    /* pass 2: dP = dO V^T, dS = P (dP - di), dQ = scale dS K */
    uint nacc = a.bq * a.d;
    float acc[MAXO];
#pragma unroll
    for (uint i = 0; i < MAXO; i++)
        acc[i] = 0.0f;
    for (uint j0 = 0; j0 < a.sk; j0 += a.bk) {
        uint nk = min(a.bk, a.sk - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(kv, ldo, v, (it * a.sk + j0) * a.dv, a.dv, 1, a.bk, nk, a.dv);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            dps[r * lds + jj] = dot_l(dos + r * ldo, kv + jj * ldo, a.dv);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        load_k(kv, k, &a, it, j0, nk);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            float ds = 0.0f;
            if (r < nr && jj < nk) {
                float p = exp(score(&a, qs, kv, mask, mb, r, jj, q0, j0) - mrow[r]) / lrow[r];
                ds = p * (dps[r * lds + jj] - drow[r]);
            }
            dss[r * lds + jj] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (uint i = 0; i < MAXO; i++) {
            uint e = lid + i * wg;
            if (e < nacc) {
                uint r = e / a.d, c = e % a.d;
                float t = acc[i];
                for (uint jj = 0; jj < nk; jj++)
                    t += dss[r * lds + jj] * kv[jj * ldq + c];
                acc[i] = t;
            }
        }
    }
#pragma unroll
    for (uint i = 0; i < MAXO; i++) {
        uint e = lid + i * wg;
        if (e < nacc && e / a.d < nr)
            ST(dq, row0 * a.d + e, a.scale * acc[i]);
    }
}

/* ---- backward: key blocks ------------------------------------------------------------- */

/* Key block j0 .. j0 + bk of item it: over every query tile, P and dS of
 * the tile, then dV += P^T dO and dK += dS^T Q.  Local memory (floats): K
 * [bk][odd D], V [bk][odd Dv], Q tile [bq][odd D], dO tile [bq][odd Dv], P
 * and dS [bq][odd bk] each, m, l, di [bq]. */
__kernel void attn_dkv(__global const store_t *dout, __global const store_t *q,
                       __global const store_t *k, __global const store_t *v,
                       __global const store_t *mask, __global store_t *dk,
                       __global store_t *dv, __global const float *ws, __local float *lm,
                       struct attn_arg a)
{
    uint lid = get_local_id(0), wg = get_local_size(0), it, j0;
    uint nk = block_of(a.sk, a.bk, &it, &j0);
    uint ldq = odd(a.d), ldo = odd(a.dv), lds = odd(a.bk);
    __local float *ks = lm, *vs = ks + a.bk * ldq, *qs = vs + a.bk * ldo;
    __local float *dos = qs + a.bq * ldq, *ps = dos + a.bq * ldo, *dss = ps + a.bq * lds;
    __local float *mrow = dss + a.bq * lds, *lrow = mrow + a.bq, *drow = lrow + a.bq;
    uint mb = a.flags & F_MASK ? mask_base(&a, it) : 0;
    uint nk_acc = a.bk * a.d, nv_acc = a.bk * a.dv;
    load_k(ks, k, &a, it, j0, nk);
    load_tile(vs, ldo, v, (it * a.sk + j0) * a.dv, a.dv, 1, a.bk, nk, a.dv);
    float acck[MAXO], accv[MAXO];
#pragma unroll
    for (uint i = 0; i < MAXO; i++)
        acck[i] = accv[i] = 0.0f;
    for (uint q0 = 0; q0 < a.sq; q0 += a.bq) {
        uint nr = min(a.bq, a.sq - q0), row0 = it * a.sq + q0;
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(qs, ldq, q, row0 * a.d, a.d, 1, a.bq, nr, a.d);
        load_tile(dos, ldo, dout, row0 * a.dv, a.dv, 1, a.bq, nr, a.dv);
        for (uint r = lid; r < nr; r += wg) {
            mrow[r] = ws[row0 + r];
            lrow[r] = ws[a.rows + row0 + r];
            drow[r] = ws[2 * a.rows + row0 + r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < a.bq * a.bk; e += wg) {
            uint r = e / a.bk, jj = e % a.bk;
            float p = 0.0f, ds = 0.0f;
            if (r < nr && jj < nk) {
                p = exp(score(&a, qs, ks, mask, mb, r, jj, q0, j0) - mrow[r]) / lrow[r];
                if (a.flags & F_DK)
                    ds = p * (dot_l(dos + r * ldo, vs + jj * ldo, a.dv) - drow[r]);
            }
            ps[r * lds + jj] = p;
            dss[r * lds + jj] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (uint i = 0; i < MAXO; i++) {
            uint e = lid + i * wg;
            if ((a.flags & F_DV) && e < nv_acc) {
                uint jj = e / a.dv, c = e % a.dv;
                float t = accv[i];
                for (uint r = 0; r < nr; r++)
                    t += ps[r * lds + jj] * dos[r * ldo + c];
                accv[i] = t;
            }
            if ((a.flags & F_DK) && e < nk_acc) {
                uint jj = e / a.d, c = e % a.d;
                float t = acck[i];
                for (uint r = 0; r < nr; r++)
                    t += dss[r * lds + jj] * qs[r * ldq + c];
                acck[i] = t;
            }
        }
    }
#pragma unroll
    for (uint i = 0; i < MAXO; i++) {
        uint e = lid + i * wg;
        if ((a.flags & F_DV) && e < nv_acc && e / a.dv < nk)
            ST(dv, (it * a.sk + j0) * a.dv + e, accv[i]);
        if ((a.flags & F_DK) && e < nk_acc && e / a.d < nk) {
            uint jj = e / a.d, c = e % a.d;
            uint at = a.flags & F_TB ? (it * a.sk + j0 + jj) * a.d + c
                                     : it * a.d * a.sk + c * a.sk + j0 + jj;
            ST(dk, at, a.scale * acck[i]);
        }
    }
}
