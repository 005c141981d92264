/* reduce.cl — reductions, softmax, layer normalization and the
 * classification losses, forward and backward (host side: reduce.c).
 *
 * Tensors of the op's float type are store_t (storage.cl: float, half or
 * bfloat16 by the build option), loaded to float; sums and statistics are
 * float, and so are the workspaces, LayerNormalization's Mean and
 * InvStdDev.  Each result is stored once in its type.
 *
 * Rows: a row of n elements starting at `base`, `stride` apart, is reduced
 * by one work-group of WG threads (a power of two): each thread folds the
 * elements lid, lid + WG, ... in order, then the group combines the
 * threads' values by a tree in local memory.  Every sum has a fixed order,
 * so results are the same from run to run.  With VEC > 1 (rows contiguous,
 * n a multiple of VEC, the host checked) each step loads VEC floats.
 * Indices are int: the host refuses tensors of 2^31 elements or more.
 *
 * Options: WG (work-group size of the row kernels), VEC (1, 2, 4).
 */

/* ---- vector loads and stores -------------------------------------------------- */

#if defined(GF_STORE_F16) || defined(GF_STORE_BF16)
inline void ldv(float *e, __global const store_t *p)
{
#if VEC == 4
    float4 t = LD4(p, 0);
    e[0] = t.x, e[1] = t.y, e[2] = t.z, e[3] = t.w;
#else
    for (int c = 0; c < VEC; c++)
        e[c] = LD(p, c);
#endif
}

inline void stv(__global store_t *p, const float *e)
{
#if VEC == 4
    ST4(p, 0, (float4)(e[0], e[1], e[2], e[3]));
#else
    for (int c = 0; c < VEC; c++)
        ST(p, c, e[c]);
#endif
}

/* v rounded to store_t and back (Sum rounds each partial sum as the CPU's
 * pairwise folds do) */
inline float rt(float v)
{
#if defined(GF_STORE_F16)
    ushort h;
    vstore_half_rte(v, 0, (__private half *)&h);
    return vload_half(0, (__private const half *)&h);
#else
    return as_float((uint)gf_bf16(v) << 16);
#endif
}
#else
#define rt(v) (v)

inline void ldv(float *e, __global const float *p)
{
#if VEC == 4
    float4 t = *(__global const float4 *)p;
    e[0] = t.x, e[1] = t.y, e[2] = t.z, e[3] = t.w;
#elif VEC == 2
    float2 t = *(__global const float2 *)p;
    e[0] = t.x, e[1] = t.y;
#else
    e[0] = p[0];
#endif
}

inline void stv(__global float *p, const float *e)
{
#if VEC == 4
    *(__global float4 *)p = (float4)(e[0], e[1], e[2], e[3]);
#elif VEC == 2
    *(__global float2 *)p = (float2)(e[0], e[1]);
#else
    p[0] = e[0];
#endif
}
#endif

/* Steps v of a row: elements [v*VEC, v*VEC + VEC) at base + v*VEC*stride. */
#define ROW_LOOP(v, n) for (int v = get_local_id(0); v < (n) / VEC; v += WG)
#define AT(base, stride, v) ((base) + (v) * VEC * (stride))

/* ---- work-group combines (every thread gets the result) ------------------------- */

inline float wg_sum(float v, __local float *s)
{
    int l = get_local_id(0);
    s[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (l < h)
            s[l] += s[l + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* The larger of a and v; a NaN, once seen, stays (as the CPU kernels). */
inline float keep_max(float a, float v)
{
    return v > a || isnan(v) ? v : a;
}

inline float wg_max(float v, __local float *s)
{
    int l = get_local_id(0);
    s[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (l < h)
            s[l] = keep_max(s[l], s[l + h]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Online log-sum-exp: (m, s) holds sum exp(x - m) over the values folded
 * so far, m their max; s == 0 means none yet (or only -inf, which adds
 * nothing).  As in the CPU's sum of exp(x - max), a NaN or an infinite
 * max makes s NaN: exp(x - x) is 1 for a finite x, NaN for an infinite. */
inline void lse_add(float *m, float *s, float x)
{
    if (x > *m) {
        *s = *s * exp(*m - x) + exp(x - x);
        *m = x;
    } else if (x != -INFINITY) {
        *s += exp(x - *m);
    }
}

inline void lse_merge(float *m, float *s, float m2, float s2)
{
    if (s2 == 0.0f)
        return;
    if (*s == 0.0f) {
        *m = m2, *s = s2;
        return;
    }
    float mx = m2 > *m ? m2 : *m;
    *s = *s * exp(*m - mx) + s2 * exp(m2 - mx);
    *m = mx;
}

inline void wg_lse(float *m, float *s, __local float *lm, __local float *ls)
{
    int l = get_local_id(0);
    lm[l] = *m, ls[l] = *s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (l < h) {
            float a = lm[l], b = ls[l];
            lse_merge(&a, &b, lm[l + h], ls[l + h]);
            lm[l] = a, ls[l] = b;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *m = lm[0], *s = ls[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* ---- Reduce{Sum,Mean,Max}, SumToShape -------------------------------------------
 * The input seen as kept dims x reduced dims (adjacent dims of one kind
 * merged, size-1 dims dropped): output o starts at the offset of its kept
 * index, reduced element r at the offset of its reduced index.  op: 0 sum,
 * 1 mean, 2 max.  Must match struct red_geom in reduce.c. */
typedef struct {
    int kdim[8], kstr[8], rdim[8], rstr[8];
    int nk, nr, nout, nred;
} red_geom;

inline int red_koff(const red_geom *g, int o)
{
    int off = 0;
    for (int i = g->nk - 1; i >= 0; i--) {
        off += o % g->kdim[i] * g->kstr[i];
        o /= g->kdim[i];
    }
    return off;
}

inline int red_roff(const red_geom *g, int r)
{
    if (g->nr == 1) /* the usual case: no division */
        return r * g->rstr[0];
    int off = 0;
    for (int i = g->nr - 1; i >= 0; i--) {
        off += r % g->rdim[i] * g->rstr[i];
        r /= g->rdim[i];
    }
    return off;
}

inline float red_fold(int op, float a, float v)
{
    return op == 2 ? keep_max(a, v) : a + v;
}

inline float red_finish(int op, float a, int count)
{
    return op == 1 ? a / (float)count : a;
}

/* One work-group per output (the reduced elements are the inner ones). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce_rows(__global const store_t *x, __global store_t *y, const red_geom g,
                 const int op)
{
    __local float s[WG];
    int o = get_group_id(0), base = red_koff(&g, o);
    float a = op == 2 ? -INFINITY : 0.0f;
    for (int r = get_local_id(0); r < g.nred; r += WG)
        a = red_fold(op, a, LD(x, base + red_roff(&g, r)));
    a = op == 2 ? wg_max(a, s) : wg_sum(a, s);
    if (get_local_id(0) == 0)
        ST(y, o, red_finish(op, a, g.nred));
}

/* Work-groups of 32 neighbouring outputs x (WG / 32) slices of their
 * reduced elements: thread (c, p) folds elements p, p + WG/32, ... of
 * output 32 * group + c, then each column of the group is combined. */
#define RC (WG < 32 ? WG : 32)
#define RP (WG / RC)
__kernel __attribute__((reqd_work_group_size(RC, RP, 1)))
void reduce_cols(__global const store_t *x, __global store_t *y, const red_geom g,
                 const int op)
{
    __local float s[RP][RC];
    int c = get_local_id(0), p = get_local_id(1), o = get_group_id(0) * RC + c;
    float a = op == 2 ? -INFINITY : 0.0f;
    if (o < g.nout) {
        int base = red_koff(&g, o);
        for (int r = p; r < g.nred; r += RP)
            a = red_fold(op, a, LD(x, base + red_roff(&g, r)));
    }
    s[p][c] = a;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = RP / 2; h > 0; h >>= 1) {
        if (p < h)
            s[p][c] = red_fold(op, s[p][c], s[p + h][c]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (p == 0 && o < g.nout)
        ST(y, o, red_finish(op, s[0][c], g.nred));
}

/* ---- Sum: y = in0 + in1 + ... (up to 4 per launch, added in order, each
 * partial sum rounded to store_t) ----------------------------------------------------
 * Must match struct sum_geom in reduce.c: input k's element strides over
 * y's dims (0 where it broadcasts); flat[k]: it has y's shape. */
typedef struct {
    int dims[8], st[4][8];
    int flat[4];
    int rank, n_in, nelem;
} sum_geom;

inline float sum_in(__global const store_t *p, const sum_geom *g, int k, int i)
{
    if (g->flat[k])
        return LD(p, i);
    int off = 0;
    for (int d = g->rank - 1; d >= 0; d--) {
        off += i % g->dims[d] * g->st[k][d];
        i /= g->dims[d];
    }
    return LD(p, off);
}

__kernel void sum_n(__global store_t *y, __global const store_t *x0,
                    __global const store_t *x1, __global const store_t *x2,
                    __global const store_t *x3, const sum_geom g)
{
    for (int i = get_global_id(0); i < g.nelem; i += get_global_size(0)) {
        float v = sum_in(x0, &g, 0, i) + sum_in(x1, &g, 1, i);
        if (g.n_in > 2)
            v = rt(v) + sum_in(x2, &g, 2, i);
        if (g.n_in > 3)
            v = rt(v) + sum_in(x3, &g, 3, i);
        ST(y, i, v);
    }
}

/* ---- Softmax, LogSoftmax and their gradients ------------------------------------
 * Rows along the axis of [outer, n, inner]: row r starts at
 * (r / inner) * n * inner + r % inner, its elements inner apart. */
inline int row_base(int r, int n, int inner)
{
    return r / inner * n * inner + r % inner;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_rows(__global const store_t *x, __global store_t *y, const int n,
                  const int inner, const int logsm)
{
    __local float lm[WG], ls[WG];
    int base = row_base(get_group_id(0), n, inner);
    float m = -INFINITY, s = 0.0f;
    ROW_LOOP(v, n) {
        float e[VEC];
        ldv(e, x + AT(base, inner, v));
        for (int c = 0; c < VEC; c++)
            lse_add(&m, &s, e[c]);
    }
    wg_lse(&m, &s, lm, ls);
    float f = logsm ? log(s) : 1.0f / s;
    ROW_LOOP(v, n) {
        float e[VEC];
        ldv(e, x + AT(base, inner, v));
        for (int c = 0; c < VEC; c++)
            e[c] = logsm ? (e[c] - m) - f : exp(e[c] - m) * f;
        stv(y + AT(base, inner, v), e);
    }
}

/* softmax: dx = y (g - sum(g y)); log-softmax: dx = g - exp(y) sum(g) */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_grad_rows(__global const store_t *g, __global const store_t *y,
                       __global store_t *dx, const int n, const int inner, const int logsm)
{
    __local float ls[WG];
    int base = row_base(get_group_id(0), n, inner);
    float s = 0.0f;
    ROW_LOOP(v, n) {
        float eg[VEC], ey[VEC];
        ldv(eg, g + AT(base, inner, v));
        ldv(ey, y + AT(base, inner, v));
        for (int c = 0; c < VEC; c++)
            s += logsm ? eg[c] : eg[c] * ey[c];
    }
    s = wg_sum(s, ls);
    ROW_LOOP(v, n) {
        float eg[VEC], ey[VEC];
        ldv(eg, g + AT(base, inner, v));
        ldv(ey, y + AT(base, inner, v));
        for (int c = 0; c < VEC; c++)
            eg[c] = logsm ? eg[c] - exp(ey[c]) * s : ey[c] * (eg[c] - s);
        stv(dx + AT(base, inner, v), eg);
    }
}

/* ---- LayerNormalization and its gradient ----------------------------------------
 * Rows of n elements (the block X.shape[axis:]); Scale and B read at
 * element j of the block through bc_off.  Must match struct ln_geom in
 * reduce.c: block dims, Scale / B strides over them; full: it has the
 * block's shape (offset j). */
typedef struct {
    int dims[8], sw[8], sb[8];
    int rank, wfull, bfull;
} ln_geom;

inline int bc_off(const ln_geom *g, const int *st, int full, int j)
{
    if (full)
        return j;
    int off = 0;
    for (int d = g->rank - 1; d >= 0; d--) {
        off += j % g->dims[d] * st[d];
        j /= g->dims[d];
    }
    return off;
}

/* Two passes for the mean and the variance (the row is in cache for the
 * second), a third for Y. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_rows(__global const store_t *x, __global const store_t *w,
                    __global const store_t *b, __global store_t *y, __global float *mean_out,
                    __global float *inv_out, const int n, const float eps, const ln_geom g,
                    const int has_b)
{
    __local float ls[WG];
    int r = get_group_id(0), base = r * n;
    float s = 0.0f;
    ROW_LOOP(v, n) {
        float e[VEC];
        ldv(e, x + AT(base, 1, v));
        for (int c = 0; c < VEC; c++)
            s += e[c];
    }
    float mean = wg_sum(s, ls) / (float)n;
    s = 0.0f;
    ROW_LOOP(v, n) {
        float e[VEC];
        ldv(e, x + AT(base, 1, v));
        for (int c = 0; c < VEC; c++)
            s += (e[c] - mean) * (e[c] - mean);
    }
    float inv = 1.0f / sqrt(wg_sum(s, ls) / (float)n + eps);
    ROW_LOOP(v, n) {
        float e[VEC];
        ldv(e, x + AT(base, 1, v));
        for (int c = 0; c < VEC; c++) {
            int j = v * VEC + c;
            e[c] = (e[c] - mean) * inv * LD(w, bc_off(&g, g.sw, g.wfull, j));
            if (has_b)
                e[c] += LD(b, bc_off(&g, g.sb, g.bfull, j));
        }
        stv(y + AT(base, 1, v), e);
    }
    if (get_local_id(0) == 0) {
        if (mean_out)
            mean_out[r] = mean;
        if (inv_out)
            inv_out[r] = inv;
    }
}

/* dX = rstd (gw - mean(gw) - xh mean(gw xh)), xh = (x - mean) rstd,
 * gw = g Scale; the row's mean and rstd (given, or computed as the
 * forward does) go to stats[2r], stats[2r + 1] for the column sums. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_grad_rows(__global const store_t *g, __global const store_t *x,
                         __global const store_t *w, __global const float *mean_in,
                         __global const float *rstd_in, __global store_t *dx,
                         __global float *stats, const int n, const float eps, const ln_geom geo)
{
    __local float ls[WG];
    int r = get_group_id(0), base = r * n;
    /* the statistics recomputed as the forward does, unless given (then
     * the loops are empty: every thread still meets every barrier) */
    int nn = mean_in ? 0 : n;
    float s = 0.0f;
    ROW_LOOP(v, nn) {
        float e[VEC];
        ldv(e, x + AT(base, 1, v));
        for (int c = 0; c < VEC; c++)
            s += e[c];
    }
    float tot = wg_sum(s, ls);
    float mean = mean_in ? mean_in[r] : tot / (float)n;
    s = 0.0f;
    ROW_LOOP(v, nn) {
        float e[VEC];
        ldv(e, x + AT(base, 1, v));
        for (int c = 0; c < VEC; c++)
            s += (e[c] - mean) * (e[c] - mean);
    }
    tot = wg_sum(s, ls);
    float rstd = mean_in ? rstd_in[r] : 1.0f / sqrt(tot / (float)n + eps);
    float s1 = 0.0f, s2 = 0.0f;
    ROW_LOOP(v, n) {
        float ex[VEC], eg[VEC];
        ldv(ex, x + AT(base, 1, v));
        ldv(eg, g + AT(base, 1, v));
        for (int c = 0; c < VEC; c++) {
            float gw = eg[c] * LD(w, bc_off(&geo, geo.sw, geo.wfull, v * VEC + c));
            s1 += gw;
            s2 += gw * (ex[c] - mean) * rstd;
        }
    }
    s1 = wg_sum(s1, ls) / (float)n;
    s2 = wg_sum(s2, ls) / (float)n;
    ROW_LOOP(v, n) {
        float ex[VEC], eg[VEC];
        ldv(ex, x + AT(base, 1, v));
        ldv(eg, g + AT(base, 1, v));
        for (int c = 0; c < VEC; c++) {
            float gw = eg[c] * LD(w, bc_off(&geo, geo.sw, geo.wfull, v * VEC + c));
            eg[c] = rstd * (gw - s1 - (ex[c] - mean) * rstd * s2);
        }
        stv(dx + AT(base, 1, v), eg);
    }
    if (get_local_id(0) == 0) {
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
    }
}

/* Part p of the rows (rows * p / parts up to the next part's start):
 * part[p][0][j] = sum g xh, part[p][1][j] = sum g, one column j a thread;
 * ws = [stats: 2 rows][part: parts x 2 x n]. */
__kernel void layernorm_grad_cols(__global const store_t *g, __global const store_t *x,
                                  __global float *ws, const int rows, const int n,
                                  const int parts)
{
    __global const float *stats = ws;
    __global float *part = ws + 2 * rows;
    int j = get_global_id(0), p = get_global_id(1);
    if (j >= n || p >= parts)
        return;
    int r0 = (int)((long)rows * p / parts), r1 = (int)((long)rows * (p + 1) / parts);
    float ds = 0.0f, db = 0.0f;
    for (int r = r0; r < r1; r++) {
        float gv = LD(g, r * n + j);
        ds += gv * (LD(x, r * n + j) - stats[2 * r]) * stats[2 * r + 1];
        db += gv;
    }
    part[(2 * p) * n + j] = ds;
    part[(2 * p + 1) * n + j] = db;
}

/* dScale[j], dBias[j]: the parts added in order. */
__kernel void layernorm_grad_sum(__global const float *ws, __global store_t *dscale,
                                 __global store_t *dbias, const int rows, const int n,
                                 const int parts)
{
    __global const float *part = ws + 2 * rows;
    int j = get_global_id(0);
    if (j >= n)
        return;
    float ds = 0.0f, db = 0.0f;
    for (int p = 0; p < parts; p++) {
        ds += part[(2 * p) * n + j];
        db += part[(2 * p + 1) * n + j];
    }
    if (dscale)
        ST(dscale, j, ds);
    if (dbias)
        ST(dbias, j, db);
}

/* ---- SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, their gradients --------
 * Scores [N, C, D] (D the product of the trailing dims), labels [N, D]
 * (int32, or int64 when lab64); position pos = n * D + d has its class row
 * at n * C * D + d, D apart.  Must match struct loss_geom in reduce.c. */
typedef struct {
    long ii;
    int c, d, npos;
    int lab64, has_ii, has_w;
    int reduction; /* 0 none, 1 sum, 2 mean */
} loss_geom;

inline long label_at(__global const int *lab, const loss_geom *g, int pos)
{
    return g->lab64 ? ((__global const long *)lab)[pos] : (long)lab[pos];
}

/* 0: counted, 1: ignore_index, 2: out of [0, C) */
inline int label_kind(const loss_geom *g, long t)
{
    if (g->has_ii && t == g->ii)
        return 1;
    return t >= 0 && t < g->c ? 0 : 2;
}

/* Stores the loss l (weight wt) of position pos: reduction "none" into
 * y[pos]; else into lw[pos], the weight into lw[npos + pos], for
 * loss_total.  ws = [flag, wsum, -, -][lw: the npos losses][their weights]. */
inline void loss_store(const loss_geom *g, __global store_t *y, __global float *ws, int pos,
                       float l, float wt)
{
    if (g->reduction == 0) {
        ST(y, pos, l);
    } else {
        ws[4 + pos] = l;
        ws[4 + g->npos + pos] = wt;
    }
}

/* loss = -w[t] logp[t], logp[t] = lp; a label outside [0, C) sets the
 * flag and counts as NaN. */
inline void loss_at(const loss_geom *g, __global const store_t *w, __global store_t *y,
                    __global float *ws, int pos, long t, float lp)
{
    int kind = label_kind(g, t);
    float l = 0.0f, wt = 0.0f;
    if (kind == 2) {
        ((__global int *)ws)[0] = 1;
        l = wt = NAN;
    } else if (kind == 0) {
        wt = g->has_w ? LD(w, t) : 1.0f;
        l = -lp * wt;
    }
    loss_store(g, y, ws, pos, l, wt);
}

/* SoftmaxCrossEntropyLoss: one work-group per position; the log-softmax of
 * its class row written to logp when given. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void sce_rows(__global const store_t *x, __global const int *labels,
              __global const store_t *w, __global store_t *y, __global store_t *logp,
              __global float *ws, const loss_geom g)
{
    __local float lm[WG], ls[WG];
    int pos = get_group_id(0), base = pos / g.d * g.c * g.d + pos % g.d;
    float m = -INFINITY, s = 0.0f;
    ROW_LOOP(v, g.c) {
        float e[VEC];
        ldv(e, x + AT(base, g.d, v));
        for (int c = 0; c < VEC; c++)
            lse_add(&m, &s, e[c]);
    }
    wg_lse(&m, &s, lm, ls);
    float lse = log(s);
    if (logp) {
        ROW_LOOP(v, g.c) {
            float e[VEC];
            ldv(e, x + AT(base, g.d, v));
            for (int c = 0; c < VEC; c++)
                e[c] = (e[c] - m) - lse;
            stv(logp + AT(base, g.d, v), e);
        }
    }
    if (get_local_id(0) == 0) {
        long t = label_at(labels, &g, pos);
        float lp = label_kind(&g, t) == 0 ? (LD(x, base + (int)t * g.d) - m) - lse : 0.0f;
        loss_at(&g, w, y, ws, pos, t, lp);
    }
}

/* NegativeLogLikelihoodLoss: the scores are log-probabilities; one thread
 * per position. */
__kernel void nll_rows(__global const store_t *x, __global const int *labels,
                       __global const store_t *w, __global store_t *y, __global float *ws,
                       const loss_geom g)
{
    int pos = get_global_id(0);
    if (pos >= g.npos)
        return;
    long t = label_at(labels, &g, pos);
    float lp = label_kind(&g, t) == 0 ? LD(x, pos / g.d * g.c * g.d + (int)t * g.d + pos % g.d)
                                      : 0.0f;
    loss_at(&g, w, y, ws, pos, t, lp);
}

/* y[0] = sum of the losses (divided by the sum of the weights for
 * "mean"), one work-group: thread t adds a contiguous slice in order. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void loss_total(__global const float *ws, __global store_t *y, const int npos, const int mean)
{
    __global const float *lw = ws + 4;
    __local float ls[WG];
    int t = get_local_id(0);
    int b = (int)((long)npos * t / WG), e = (int)((long)npos * (t + 1) / WG);
    float l = 0.0f, w = 0.0f;
    for (int i = b; i < e; i++) {
        l += lw[i];
        w += lw[npos + i];
    }
    l = wg_sum(l, ls);
    w = wg_sum(w, ls);
    if (t == 0)
        ST(y, 0, mean ? l / w : l);
}

/* ws[1] = the weights of the counted positions (1 each without W), for
 * the "mean" gradients; one work-group. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void loss_wsum(__global const int *labels, __global const store_t *w, __global float *ws,
               const loss_geom g)
{
    __global int *flag = (__global int *)ws;
    __local float ls[WG];
    int t = get_local_id(0);
    int b = (int)((long)g.npos * t / WG), e = (int)((long)g.npos * (t + 1) / WG);
    float s = 0.0f;
    for (int i = b; i < e; i++) {
        long lab = label_at(labels, &g, i);
        int kind = label_kind(&g, lab);
        if (kind == 2)
            flag[0] = 1;
        else if (kind == 0)
            s += g.has_w ? LD(w, lab) : 1.0f;
    }
    s = wg_sum(s, ls);
    if (t == 0)
        ws[1] = s;
}

/* The gradient's coefficient at a counted position with label t:
 * w[t] dL[pos] ("none"), w[t] dL ("sum"), w[t] dL / wsum ("mean"; 0 when
 * wsum is 0), wsum in ws[1] (loss_wsum). */
inline float loss_coef(const loss_geom *g, __global const store_t *w,
                       __global const store_t *dl, __global const float *ws, int pos, long t)
{
    float wt = g->has_w ? LD(w, t) : 1.0f;
    if (g->reduction == 0)
        return wt * LD(dl, pos);
    if (g->reduction == 1)
        return wt * LD(dl, 0);
    return ws[1] != 0.0f ? wt * (LD(dl, 0) / ws[1]) : 0.0f;
}

/* dX[n, :, d] = coef (softmax(X[n, :, d]) - onehot(t)), 0 at ignored positions. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void sce_grad_rows(__global const store_t *dl, __global const store_t *x,
                   __global const int *labels, __global const store_t *w, __global float *ws,
                   __global store_t *dx, const loss_geom g)
{
    __local float lm[WG], ls[WG];
    int pos = get_group_id(0), base = pos / g.d * g.c * g.d + pos % g.d;
    long t = label_at(labels, &g, pos);
    int kind = label_kind(&g, t);
    float m = -INFINITY, s = 0.0f;
    ROW_LOOP(v, g.c) {
        float e[VEC];
        ldv(e, x + AT(base, g.d, v));
        for (int c = 0; c < VEC; c++)
            lse_add(&m, &s, e[c]);
    }
    wg_lse(&m, &s, lm, ls);
    if (kind == 2 && get_local_id(0) == 0)
        ((__global int *)ws)[0] = 1;
    float coef = kind == 0 ? loss_coef(&g, w, dl, ws, pos, t) : 0.0f, inv = 1.0f / s;
    ROW_LOOP(v, g.c) {
        float e[VEC];
        ldv(e, x + AT(base, g.d, v));
        for (int c = 0; c < VEC; c++)
            e[c] = kind == 2 ? NAN
                   : kind == 1 ? 0.0f
                               : coef * (exp(e[c] - m) * inv - (v * VEC + c == t ? 1.0f : 0.0f));
        stv(dx + AT(base, g.d, v), e);
    }
}

/* dX = zeros, dX[n, t, d] = -coef: one element of dX a thread. */
__kernel void nll_grad(__global const store_t *dl, __global const int *labels,
                       __global const store_t *w, __global float *ws, __global store_t *dx,
                       const loss_geom g)
{
    __global int *flag = (__global int *)ws;
    int i = get_global_id(0), cd = g.c * g.d;
    if (i >= (g.npos / (g.d ? g.d : 1)) * cd)
        return;
    int n = i / cd, k = i % cd / g.d, d = i % g.d, pos = n * g.d + d;
    long t = label_at(labels, &g, pos);
    int kind = label_kind(&g, t);
    if (kind == 2)
        flag[0] = 1;
    ST(dx, i, kind == 2 ? NAN : kind == 0 && k == t ? -loss_coef(&g, w, dl, ws, pos, t) : 0.0f);
}
