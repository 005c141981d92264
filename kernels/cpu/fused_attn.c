/* CPU kernels of fused attention (domain graphfuse, README "Fused ops" and
 * "Training"):
 *
 *   Attention      Q, K, V, Mask? -> O, Stats?   O = softmax(scale Q K' + Mask) V, the
 *                                          softmax over the last axis, K' = K^T with
 *                                          transB = 1; Stats each row's max and 1 / sum
 *   AttentionGrad  dO, Q, K, V, Mask?, O, Stats? -> dQ?, dK?, dV?  (Stats not read:
 *                                          the probabilities are recomputed whole)
 *
 * Q [b..., Sq, D], K [b..., Sk, D] (transB = 1) or [b..., D, Sk], V [b...,
 * Sk, Dv], O [b..., Sq, Dv]; the batch dims b... of Q, K, V are the same,
 * Mask broadcasts to the scores [b..., Sq, Sk].  float and double.
 *
 * Neither kernel holds more than a block of rows of scores: the forward
 * makes the scores of RB query rows at a time (one GEMM, the mask, the
 * softmax in place, one GEMM into O), so the [Sq, Sk] probabilities of
 * every head never exist; the backward recomputes each block's
 * probabilities the same way, bit for bit, instead of keeping them from
 * the forward (FlashAttention's recomputation, on the CPU), then
 *   dV += P^T dO,   dP = dO V^T,   dS = P (dP - rowsum(dO O)),
 *   dQ = scale dS K'^T,   dK' += scale Q^T dS.
 * A block's products stop at the last key that any of its rows can see
 * (live_cols): past it the mask is -inf in every row, the probabilities
 * exact zeros and their products nothing, so a causal mask costs about
 * half the unmasked work, as the GPU kernels' skipped tiles.
 * Work is split over the (batch, head) items, each thread with its own
 * workspace slice and single-threaded BLAS; dK and dV of an item are summed
 * by the one thread that owns it, so results do not depend on timing.
 */
#include <cblas.h>
#include <limits.h>

#include "fused.h"

#define ROW_BLOCK_ELEMS (64 * 1024) /* scores of a block of rows: RB x Sk */
#define MIN_ROWS 16
#define A64_BYTES(x) (((x) + 63) & ~(size_t)63)

struct attn {
    enum gf_dtype dt;
    bool tb;
    bool zero_rows; /* zero_masked_rows: a row of -inf scores gives 0s, not NaN */
    double scale;
    size_t items, sq, sk, d, dv; /* (batch, head) items, Sq, Sk, D, Dv */
    size_t rb;                   /* query rows of a block */
    const void *q, *k, *v, *mask, *o, *dout;
    void *out, *dq, *dk, *dv_;
    void *stats;                      /* the forward's Stats, or NULL */
    int brank;                        /* rank of the batch dims */
    int64_t bdims[GF_MAX_RANK];
    int64_t mst[GF_MAX_RANK + 2];     /* Mask's strides over [b..., Sq, Sk] */
    char *ws;                         /* the threads' slices */
    size_t slice;                     /* bytes of one */
};

static void blas_threads(int n)
{
#ifdef OPENBLAS_VERSION
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

/* z = alpha op(x) op(y) + beta z, row-major, in the compute type. */
static void gemm(const struct attn *c, bool tx, bool ty, size_t m, size_t n, size_t k,
                 double alpha, const void *x, size_t ldx, const void *y, size_t ldy,
                 double beta, void *z, size_t ldz)
{
    enum CBLAS_TRANSPOSE a = tx ? CblasTrans : CblasNoTrans, b = ty ? CblasTrans : CblasNoTrans;
    if (c->dt == GF_DOUBLE)
        cblas_dgemm(CblasRowMajor, a, b, (int)m, (int)n, (int)k, alpha, x, (int)ldx, y,
                    (int)ldy, beta, z, (int)ldz);
    else
        cblas_sgemm(CblasRowMajor, a, b, (int)m, (int)n, (int)k, (float)alpha, x, (int)ldx, y,
                    (int)ldy, (float)beta, z, (int)ldz);
}

/* ---- typed row loops ------------------------------------------------------------------
 * Rows [0, n) of a block of scores s [n, Sk] starting at query row i0 of
 * item it: the mask added; the softmax in place; and dS = P (dP - rowsum(dO
 * O)) over dP. */
#define DEF_ATTN_ROWS(DT, sfx, T)                                                       \
    static void mask_rows_##sfx(const struct attn *c, size_t it, size_t i0, size_t n,  \
                                size_t w, T *s)                                         \
    {                                                                                   \
        if (!c->mask)                                                                   \
            return;                                                                     \
        const T *mk = (const T *)c->mask + fu_offset(c->brank, c->bdims, c->mst, it);   \
        size_t rs = (size_t)c->mst[c->brank], cs = (size_t)c->mst[c->brank + 1];        \
        for (size_t i = 0; i < n; i++) {                                                \
            const T *mr = mk + (i0 + i) * rs;                                           \
            T *sr = s + i * c->sk;                                                      \
            if (cs == 1)                                                                \
                for (size_t j = 0; j < w; j++)                                          \
                    sr[j] += mr[j];                                                     \
            else                                                                        \
                for (size_t j = 0; j < w; j++)                                          \
                    sr[j] += mr[j * cs];                                                \
        }                                                                               \
    }                                                                                   \
    FU_HOT static void softmax_rows_##sfx(const struct attn *c, size_t n, size_t w, T *s, \
                                          T *sm, T *sl)                                 \
    {                                                                                   \
        for (size_t i = 0; i < n; i++) {                                                \
            T *sr = s + i * c->sk, m = -INFINITY;                                       \
            for (size_t j = 0; j < w; j++)                                              \
                m = sr[j] > m ? sr[j] : m;                                              \
            if (m == -INFINITY && c->zero_rows) {                                       \
                memset(sr, 0, w * sizeof(T));                                           \
                if (sm)                                                                 \
                    sm[i] = 0, sl[i] = 0;                                               \
                continue;                                                               \
            }                                                                           \
            double acc[FU_LANES] = {0}, l = 0;                                          \
            size_t j = 0;                                                               \
            for (; j < w; j++)                                                          \
                sr[j] = FU_EXP(sr[j] - m);                                              \
            for (j = 0; j + FU_LANES <= w; j += FU_LANES)                               \
                for (int k = 0; k < FU_LANES; k++)                                      \
                    acc[k] += sr[j + k];                                                \
            for (; j < w; j++)                                                          \
                l += sr[j];                                                             \
            for (int k = 0; k < FU_LANES; k++)                                          \
                l += acc[k];                                                            \
            T lt = (T)l;                                                                \
            for (j = 0; j < w; j++)                                                     \
                sr[j] = sr[j] / lt;                                                     \
            if (sm)                                                                     \
                sm[i] = m, sl[i] = (T)1 / lt;                                           \
        }                                                                               \
    }                                                                                   \
    FU_HOT static void ds_rows_##sfx(const struct attn *c, size_t n, size_t w, const T *p, \
                                     T *dp, const T *dout, const T *o)                  \
    {                                                                                   \
        for (size_t i = 0; i < n; i++) {                                                \
            const T *dor = dout + i * c->dv, *orr = o + i * c->dv, *pr = p + i * c->sk; \
            T *dr = dp + i * c->sk;                                                     \
            double di = 0;                                                              \
            for (size_t j = 0; j < c->dv; j++)                                          \
                di += (double)dor[j] * (double)orr[j];                                  \
            T dt = (T)di;                                                               \
            for (size_t j = 0; j < w; j++)                                              \
                dr[j] = pr[j] * (dr[j] - dt);                                           \
        }                                                                               \
    }

DEF_ATTN_ROWS(GF_FLOAT, f32, float)
DEF_ATTN_ROWS(GF_DOUBLE, f64, double)

/* The keys [0, w) that rows [i0, i0 + n) of item it can see: past the last
 * column where some row's mask is not -inf, every probability of the block
 * is an exact zero.  Sk when there is no mask, the mask is the same down a
 * row (column stride 0), or every row is masked whole (those rows' 0s or
 * NaNs then come from the full rows, as before). */
#define DEF_LIVE_COLS(T, sfx)                                                           \
    static size_t live_cols_##sfx(const struct attn *c, size_t it, size_t i0, size_t n) \
    {                                                                                   \
        size_t rs = (size_t)c->mst[c->brank], cs = (size_t)c->mst[c->brank + 1], w = 0; \
        if (!c->mask || cs == 0)                                                        \
            return c->sk;                                                               \
        const T *mk = (const T *)c->mask + fu_offset(c->brank, c->bdims, c->mst, it);   \
        for (size_t i = 0; i < n && w < c->sk; i++) {                                   \
            const T *mr = mk + (i0 + i) * rs;                                           \
            size_t j = c->sk;                                                           \
            while (j > w && mr[(j - 1) * cs] == -INFINITY)                              \
                j--;                                                                    \
            w = j > w ? j : w;                                                          \
        }                                                                               \
        return w ? w : c->sk;                                                                 \
    }
DEF_LIVE_COLS(float, f32)
DEF_LIVE_COLS(double, f64)

/* The block's probabilities s [n, Sk] = softmax(scale q K' + Mask) (rows
 * i0.. of item it), computed the same way in both kernels, in its first w
 * columns (returned; the rest are zeros, not written); with c->stats (the
 * forward's Stats output) the rows' max and 1 / sum too. */
static size_t probs(const struct attn *c, size_t it, size_t i0, size_t n, void *s)
{
    size_t at = it * c->sq + i0, far = c->items * c->sq; /* Stats [2, items, Sq] */
    size_t es = gf_dtype_size(c->dt);
    bool f64 = c->dt == GF_DOUBLE;
    size_t w = f64 ? live_cols_f64(c, it, i0, n) : live_cols_f32(c, it, i0, n);
    const char *q = (const char *)c->q + (it * c->sq + i0) * c->d * es;
    const char *k = (const char *)c->k + it * c->sk * c->d * es;
    gemm(c, false, c->tb, n, w, c->d, c->scale, q, c->d, k, c->tb ? c->d : c->sk, 0, s, c->sk);
    if (f64) {
        double *st = c->stats;
        mask_rows_f64(c, it, i0, n, w, s);
        softmax_rows_f64(c, n, w, s, st ? st + at : NULL, st ? st + far + at : NULL);
    } else {
        float *st = c->stats;
        mask_rows_f32(c, it, i0, n, w, s);
        softmax_rows_f32(c, n, w, s, st ? st + at : NULL, st ? st + far + at : NULL);
    }
    return w;
}

/* ---- forward -------------------------------------------------------------------------- */

/* Blocks [b, e) of part `part` (blocks numbered item by item). */
static void fwd_part(void *vc, size_t part, size_t b, size_t e)
{
    const struct attn *c = vc;
    size_t es = gf_dtype_size(c->dt), per = (c->sq + c->rb - 1) / c->rb;
    void *s = c->ws + part * c->slice;
    for (size_t blk = b; blk < e; blk++) {
        size_t it = blk / per, i0 = blk % per * c->rb;
        size_t n = c->sq - i0 < c->rb ? c->sq - i0 : c->rb;
        size_t w = probs(c, it, i0, n, s);
        gemm(c, false, false, n, c->dv, w, 1, s, c->sk,
             (const char *)c->v + it * c->sk * c->dv * es, c->dv, 0,
             (char *)c->out + (it * c->sq + i0) * c->dv * es, c->dv);
    }
}

/* ---- backward ------------------------------------------------------------------------- */

/* One item: every block of query rows; dK and dV summed over them. */
static void bwd_item(const struct attn *c, size_t it, char *ws)
{
    size_t es = gf_dtype_size(c->dt);
    void *p = ws, *dp = ws + A64_BYTES(c->rb * c->sk * es);
    const char *v = (const char *)c->v + it * c->sk * c->dv * es;
    const char *k = (const char *)c->k + it * c->sk * c->d * es;
    char *dk = c->dk ? (char *)c->dk + it * c->sk * c->d * es : NULL;
    char *dv = c->dv_ ? (char *)c->dv_ + it * c->sk * c->dv * es : NULL;
    if (dk)
        memset(dk, 0, c->sk * c->d * es);
    if (dv)
        memset(dv, 0, c->sk * c->dv * es);
    for (size_t i0 = 0; i0 < c->sq; i0 += c->rb) {
        size_t n = c->sq - i0 < c->rb ? c->sq - i0 : c->rb, row = it * c->sq + i0;
        const char *dout = (const char *)c->dout + row * c->dv * es;
        const char *o = (const char *)c->o + row * c->dv * es;
        const char *q = (const char *)c->q + row * c->d * es;
        size_t w = probs(c, it, i0, n, p); /* keys past w: P, dS 0, nothing added */
        if (dv) /* dV [w, Dv] += P^T dO */
            gemm(c, true, false, w, c->dv, n, 1, p, c->sk, dout, c->dv, 1, dv, c->dv);
        if (!c->dq && !dk)
            continue;
        /* dP [n, w] = dO V^T, then dS = P (dP - rowsum(dO O)) over it */
        gemm(c, false, true, n, w, c->dv, 1, dout, c->dv, v, c->dv, 0, dp, c->sk);
        if (c->dt == GF_DOUBLE)
            ds_rows_f64(c, n, w, p, dp, (const double *)dout, (const double *)o);
        else
            ds_rows_f32(c, n, w, p, dp, (const float *)dout, (const float *)o);
        if (c->dq) /* dQ [n, D] = scale dS K'^T: K [Sk, D] as is, or [D, Sk] transposed */
            gemm(c, false, !c->tb, n, c->d, w, c->scale, dp, c->sk, k, c->tb ? c->d : c->sk, 0,
                 (char *)c->dq + row * c->d * es, c->d);
        if (dk && c->tb) /* dK [w, D] += scale dS^T Q */
            gemm(c, true, false, w, c->d, n, c->scale, dp, c->sk, q, c->d, 1, dk, c->d);
        else if (dk) /* dK [D, w] += scale Q^T dS */
            gemm(c, true, false, c->d, w, n, c->scale, q, c->d, dp, c->sk, 1, dk, c->sk);
    }
}

static void bwd_part(void *vc, size_t part, size_t b, size_t e)
{
    const struct attn *c = vc;
    for (size_t it = b; it < e; it++)
        bwd_item(c, it, c->ws + part * c->slice);
}

/* ---- checks ------------------------------------------------------------------------------ */

/* The checks of Attention (qi 0) or AttentionGrad (qi 1): inputs, shapes,
 * attributes (kernels/checks.c, the rule in graph/opcheck.c), and the
 * outputs when `outs`; fills c but for the data. */
static enum gf_status attn_check(const struct gf_kernel_args *a, size_t qi, bool outs,
                                 struct attn *c)
{
    struct gf_attn_rule r;
    enum gf_status st = gf_attn_check(a, qi, &r);
    if (st == GF_OK && outs)
        st = gf_attn_check_run(a, qi, &r);
    const struct gf_tview *q = &a->in[qi];
    if (st != GF_OK)
        return st;
    if (q->dtype != GF_FLOAT && q->dtype != GF_DOUBLE)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "Q is %s: float and double only",
                               gf_dtype_name(q->dtype));
    int rk = q->rank;
    c->dt = q->dtype, c->tb = r.tb, c->zero_rows = r.zero_rows;
    c->brank = rk - 2, c->scale = r.scale;
    c->sq = (size_t)r.sq.value, c->sk = (size_t)r.sk.value;
    c->d = (size_t)r.d.value, c->dv = (size_t)r.dv.value;
    if (c->sq > INT_MAX || c->sk > INT_MAX || c->d > INT_MAX || c->dv > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "a matrix dim exceeds BLAS's int");
    c->items = 1;
    for (int i = 0; i < rk - 2; i++)
        c->items *= (size_t)(c->bdims[i] = q->dims[i]);
    if (fu_has(a, qi + 3)) {
        int64_t sdims[GF_MAX_RANK];
        gf_shape_dims(&r.scores, sdims);
        fu_strides(&a->in[qi + 3], rk, sdims, c->mst);
    }
    size_t rb = ROW_BLOCK_ELEMS / (c->sk ? c->sk : 1);
    /* at least four blocks an item, so that a causal mask's keys past each
     * block's last (live_cols) are skipped at short sequences too: 128
     * query rows in one block did all of their products, and the fused
     * forward at 1 x 128 took 1.06-1.11x the unfused graph's time on one
     * thread; in blocks of 32, 0.73-0.76x (tests/bench_fused_models) */
    rb = rb > c->sq / 4 ? c->sq / 4 : rb;
    rb = rb < MIN_ROWS ? MIN_ROWS : rb;
    c->rb = rb < c->sq ? rb : c->sq ? c->sq : 1;
    return GF_OK;
}

static size_t attn_workspace(const struct gf_kernel_args *a)
{
    struct attn c = {0};
    bool bwd = a->node->op == GF_OP_ATTENTION_GRAD;
    if (a->n_in < (bwd ? 6u : 3u) || attn_check(a, bwd ? 1 : 0, false, &c) != GF_OK)
        return 0;
    size_t blk = A64_BYTES(c.rb * c.sk * gf_dtype_size(c.dt));
    return (size_t)fu_threads(a) * (bwd ? 2 * blk : blk);
}

/* ---- the kernels -------------------------------------------------------------------------- */

static enum gf_status attn_run(const struct gf_kernel_args *a)
{
    struct attn c = {0};
    enum gf_status st = attn_check(a, 0, true, &c);
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the blocks of scores");
    c.q = a->in[0].data, c.k = a->in[1].data, c.v = a->in[2].data;
    c.mask = fu_has(a, 3) ? a->in[3].data : NULL;
    c.out = a->out[0].data;
    c.stats = fu_has_out(a, 1) ? a->out[1].data : NULL;
    c.ws = a->workspace;
    c.slice = A64_BYTES(c.rb * c.sk * gf_dtype_size(c.dt));
    blas_threads(1);
    size_t blocks = c.items * ((c.sq + c.rb - 1) / c.rb);
    fu_run_parts(fu_threads(a), blocks, c.rb * c.sk * (c.d + c.dv + 1), fwd_part, &c);
    return GF_OK;
}

static enum gf_status attn_grad_run(const struct gf_kernel_args *a)
{
    struct attn c = {0};
    enum gf_status st = attn_check(a, 1, true, &c);
    if (st != GF_OK || c.items == 0)
        return st;
    if (!a->workspace && c.sq && c.sk)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the blocks of scores");
    c.dout = a->in[0].data, c.q = a->in[1].data, c.k = a->in[2].data, c.v = a->in[3].data;
    c.mask = fu_has(a, 4) ? a->in[4].data : NULL;
    c.o = a->in[5].data;
    c.dq = fu_has_out(a, 0) ? a->out[0].data : NULL;
    c.dk = fu_has_out(a, 1) ? a->out[1].data : NULL;
    c.dv_ = fu_has_out(a, 2) ? a->out[2].data : NULL;
    c.ws = a->workspace;
    c.slice = 2 * A64_BYTES(c.rb * c.sk * gf_dtype_size(c.dt));
    blas_threads(1);
    fu_run_parts(fu_threads(a), c.items, c.sq * c.sk * (2 * c.d + 3 * c.dv + 2), bwd_part, &c);
    return GF_OK;
}

static bool attn_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    size_t qi = n->op == GF_OP_ATTENTION_GRAD ? 1 : 0;
    return n_in > qi && (in[qi].dtype == GF_FLOAT || in[qi].dtype == GF_DOUBLE) &&
           in[qi].rank <= GF_MAX_RANK;
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_ATTENTION, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "row-blocks",
     .supports = attn_supports, .workspace = attn_workspace, .run = attn_run},
    {.op = GF_OP_ATTENTION_GRAD, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "row-blocks",
     .supports = attn_supports, .workspace = attn_workspace, .run = attn_grad_run},
};

const struct gf_kernel_table gf_cpu_fused_attn_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
