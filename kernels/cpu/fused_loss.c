/* CPU kernels of the fused losses (domain graphfuse, README "Fused ops"):
 *
 *   SoftmaxCrossEntropy  L, T, Wc? -> Loss, LogP?, G?   ONNX SoftmaxCrossEntropyLoss, or
 *                                              with shift=1 the causal-LM form on L[:, :-1];
 *                                              G = d Loss / d L (training, over L in place)
 *   LinearCrossEntropy   H, W, T, Bias? -> Loss, dH?, dW?, dBias?   the same on H @ W' +
 *                                              Bias, chunk by chunk (training: with the
 *                                              gradients, in the same pass)
 *   JSD                  X, Y, T? -> Loss           generalized Jensen-Shannon, batchmean
 *
 * A "position" is one row of class scores with its label.  Per position the
 * logits are read from memory once: a max sweep, then sum exp(x - max) in
 * double lanes while the row is in cache (and LogP, only when that output
 * is wanted).  Positions are split over threads in fixed slices whose
 * partial sums are added in order, so results do not depend on timing.
 * Labels are checked before anything is computed.
 */
#include <cblas.h>
#include <limits.h>

#include "fused.h"

/* LinearCrossEntropy: automatic rows of a chunk, bytes of a block of logits */
#define AUTO_ROWS 1024
#define CHUNK_BYTES (4u << 20)
#define MIN_COLS 256

/* ---- one row of logits ------------------------------------------------------------ */

/* Max and sum of exp(x - max) over n logits: stride 1 in lanes (so that it
 * vectorizes), any stride plainly.  n == 0 gives -inf and 0. */
#define DEF_CE_STATS(DT, sfx, T, C, LD, ST)                                             \
    FU_HOT static void ce_stats_##sfx(const T *x, size_t n, size_t stride, C *mo,       \
                                      double *so)                                       \
    {                                                                                   \
        C m = -INFINITY, ml[FU_LANES];                                                  \
        double s = 0, acc[FU_LANES] = {0};                                              \
        size_t j = 0;                                                                   \
        for (int k = 0; k < FU_LANES; k++)                                              \
            ml[k] = -INFINITY;                                                          \
        for (; stride == 1 && j + FU_LANES <= n; j += FU_LANES)                         \
            for (int k = 0; k < FU_LANES; k++) {                                        \
                C v = LD(x[j + k]);                                                     \
                ml[k] = v > ml[k] ? v : ml[k];                                          \
            }                                                                           \
        for (int k = 0; k < FU_LANES; k++)                                              \
            m = ml[k] > m ? ml[k] : m;                                                  \
        for (size_t i = j; i < n; i++)                                                  \
            m = LD(x[i * stride]) > m ? LD(x[i * stride]) : m;                          \
        for (j = 0; stride == 1 && j + FU_LANES <= n; j += FU_LANES)                    \
            for (int k = 0; k < FU_LANES; k++)                                          \
                acc[k] += (double)FU_EXP((C)LD(x[j + k]) - m);                          \
        for (size_t i = j; i < n; i++)                                                  \
            s += (double)FU_EXP((C)LD(x[i * stride]) - m);                              \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += acc[k];                                                                \
        *mo = m;                                                                        \
        *so = s;                                                                        \
    }                                                                                   \
    /* logp[j * stride] = x[j * stride] - m - log(s), rounded as LogSoftmax does */     \
    FU_HOT static void ce_logp_##sfx(const T *x, size_t n, size_t stride, C m, double s,\
                                     T *lp)                                             \
    {                                                                                   \
        C ls = (C)log(s);                                                               \
        if (stride == 1)                                                                \
            for (size_t j = 0; j < n; j++)                                              \
                lp[j] = ST(((C)LD(x[j]) - m) - ls);                                     \
        else                                                                            \
            for (size_t j = 0; j < n; j++)                                              \
                lp[j * stride] = ST(((C)LD(x[j * stride]) - m) - ls);                   \
    }
FU_TYPES(DEF_CE_STATS)

/* The gradient of one position's loss for a unit upstream gradient, written
 * over the row's n logits (g may be x: every element is read before it is
 * written): g = coef (softmax(x) - onehot(t)); an ignored position (t < 0)
 * gets zeros. */
#define DEF_CE_GRAD(DT, sfx, T, C, LD, ST)                                              \
    FU_HOT static void ce_grad_##sfx(const T *x, size_t n, size_t stride, C m, double s,\
                                     int64_t t, double coef, T *g)                      \
    {                                                                                   \
        if (t < 0) {                                                                    \
            for (size_t j = 0; j < n; j++)                                              \
                g[j * stride] = ST((C)0);                                               \
            return;                                                                     \
        }                                                                               \
        C inv = (C)(1 / s), cf = (C)coef;                                               \
        C pt = FU_EXP((C)LD(x[(size_t)t * stride]) - m) * inv;                          \
        if (stride == 1)                                                                \
            for (size_t j = 0; j < n; j++)                                              \
                g[j] = ST(FU_EXP((C)LD(x[j]) - m) * inv * cf);                          \
        else                                                                            \
            for (size_t j = 0; j < n; j++)                                              \
                g[j * stride] = ST(FU_EXP((C)LD(x[j * stride]) - m) * inv * cf);        \
        g[(size_t)t * stride] = ST((pt - 1) * cf);                                      \
    }
FU_TYPES(DEF_CE_GRAD)

/* -log softmax(x)[t], from the row's max and sum. */
static double ce_nll(double xt, double m, double s)
{
    return -((xt - m) - log(s));
}

/* ---- labels and reductions ---------------------------------------------------------- */

/* Sum over the used positions of their class weight (1 without weights w):
 * the divisor of reduction "mean". */
static double counted_weight(const struct gf_labels *l, size_t n_pos, const struct gf_tview *w)
{
    double sum = 0;
    for (size_t p = 0; p < n_pos; p++) {
        int64_t t = fu_label(l->t, gf_label_index(l, p));
        if (!(l->has_ii && t == l->ii))
            sum += w ? fu_get(w, (size_t)t) : 1.0;
    }
    return sum;
}

/* Sum of the slices' (loss, weight) pairs, then the reduction. */
static void finish_loss(const struct gf_kernel_args *a, enum gf_reduction red, const double *part,
                        size_t parts)
{
    double ls = 0, ws = 0;
    for (size_t p = 0; p < parts; p++)
        ls += part[2 * p], ws += part[2 * p + 1];
    if (red != GF_RED_NONE)
        fu_put(a->out[0].data, a->out[0].dtype, 0, red == GF_RED_MEAN ? ls / ws : ls);
}

/* ==== SoftmaxCrossEntropy ============================================================ */

/* Position p has its C logits at base(p) + k * stride (stride D, the
 * product of the dims after the class axis; 1 with shift). */
struct sce {
    const void *x, *w; /* L; class weights [C] or NULL */
    void *loss, *logp; /* [positions] with reduction none, else NULL; LogP or NULL */
    void *grad;        /* G like L (may be L itself), or NULL */
    double gscale;     /* G's factor: 1 / (sum of the counted weights) for "mean", else 1 */
    struct gf_labels lab;
    size_t c, d;
    double part[2 * FU_MAX_THREADS];
};

static size_t sce_base(const struct sce *c, size_t p)
{
    if (c->lab.s1) /* [B, S, C]: row b*S + s */
        return (p / c->lab.s1 * (c->lab.s1 + 1) + p % c->lab.s1) * c->c;
    return p / c->d * c->c * c->d + p % c->d;
}

/* Positions [b, e): the loss of each and the slice's (loss, weight) sums. */
#define DEF_SCE(DT, sfx, T, C, LD, ST)                                                  \
    static void sce_part_##sfx(void *vc, size_t part, size_t b, size_t e)               \
    {                                                                                   \
        struct sce *c = vc;                                                             \
        const T *w = c->w;                                                              \
        size_t stride = c->lab.s1 ? 1 : c->d;                                           \
        double ls = 0, ws = 0;                                                          \
        for (size_t p = b; p < e; p++) {                                                \
            const T *x = (const T *)c->x + sce_base(c, p);                              \
            int64_t t = fu_label(c->lab.t, gf_label_index(&c->lab, p));                    \
            bool ign = c->lab.has_ii && t == c->lab.ii;                                 \
            double l = 0, wt = 0;                                                       \
            C m = 0;                                                                    \
            double s = 0;                                                               \
            if (!ign || c->logp) {                                                      \
                ce_stats_##sfx(x, c->c, stride, &m, &s);                                \
                if (c->logp)                                                            \
                    ce_logp_##sfx(x, c->c, stride, m, s,                                \
                                  (T *)c->logp +                                        \
                                      (c->lab.s1 ? p * c->c : sce_base(c, p)));         \
                if (!ign) {                                                             \
                    wt = w ? (double)LD(w[t]) : 1.0;                                    \
                    l = ce_nll((double)LD(x[(size_t)t * stride]), (double)m, s) * wt;   \
                }                                                                       \
            }                                                                           \
            if (c->grad) /* last: it may overwrite the logits */                        \
                ce_grad_##sfx(x, c->c, stride, m, s, ign ? -1 : t, wt * c->gscale,      \
                              (T *)c->grad + sce_base(c, p));                           \
            if (c->loss)                                                                \
                ((T *)c->loss)[p] = ST(l);                                              \
            ls += l;                                                                    \
            ws += wt;                                                                   \
        }                                                                               \
        c->part[2 * part] = ls;                                                         \
        c->part[2 * part + 1] = ws;                                                     \
    }
FU_TYPES(DEF_SCE)

#define SCE_ENTRY(DT, sfx, ...) [DT] = sce_part_##sfx,
static const fu_part_fn sce_parts[GF_DTYPE_COUNT] = {FU_TYPES(SCE_ENTRY)};

static enum gf_status sce_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct sce c = {0};
    struct gf_sce_rule r;
    enum gf_status st = gf_sce_check(a, &r); /* kernels/checks.c */
    if (st == GF_OK)
        st = gf_sce_check_run(a, &r);
    if (st != GF_OK)
        return st;
    enum gf_reduction red = r.ce.red;
    bool shift = r.ce.shift;
    size_t n_pos = gf_shape_numel(&r.pos);
    c.c = (size_t)r.c.value;
    c.d = shift ? 1 : gf_dims_prod(x->dims, 2, x->rank);
    gf_labels_init(&c.lab, &a->in[1], 1, &r.ce, c.c, shift ? (size_t)x->dims[1] - 1 : 0);
    if ((st = gf_check_labels(a, "label T", &c.lab, c.lab.t->data, n_pos)) != GF_OK)
        return st;
    c.x = x->data;
    c.w = fu_has(a, 2) ? a->in[2].data : NULL;
    c.loss = red == GF_RED_NONE ? a->out[0].data : NULL;
    c.logp = fu_has_out(a, 1) ? a->out[1].data : NULL;
    c.grad = fu_has_out(a, 2) ? a->out[2].data : NULL;
    c.gscale = c.grad && red == GF_RED_MEAN ? 1 / counted_weight(&c.lab, n_pos, fu_has(a, 2) ?
                                                              &a->in[2] : NULL) : 1;
    size_t parts = fu_run_parts(fu_threads(a), n_pos, c.c + 1, sce_parts[x->dtype], &c);
    size_t row = c.c * gf_dtype_size(x->dtype); /* shift: each batch's last row is no position */
    for (size_t b = 0; c.grad && shift && b < (size_t)x->dims[0]; b++)
        memset((char *)c.grad + ((b + 1) * (c.lab.s1 + 1) - 1) * row, 0, row);
    finish_loss(a, red, c.part, parts);
    return GF_OK;
}

/* ==== LinearCrossEntropy ================================================================ */

/* Positions in chunks of R rows, each chunk done by one thread with its own
 * slice of the workspace.  A chunk's logits H[rows] @ W' + Bias are made one
 * column block [R, Vc] at a time (a single-threaded GEMM of about R x Vc x K
 * that BLAS runs at full speed; a chunk of all V columns would make BLAS
 * re-pack the whole W for a few rows) and folded into each row's running
 * max m, sum s = sum exp(z - m) and label logit: loss = -(z_t - m - log s).
 * H is [rows, K] (with shift the rows of [B, S, K] but each batch's last). */
struct lce {
    enum gf_dtype dt, ct; /* H's dtype; the compute type (GF_FLOAT or GF_DOUBLE) */
    const void *h, *w;    /* as given */
    const void *bias;     /* [V] compute type (workspace), or NULL */
    bool tb;
    bool shift;           /* shift=1: each batch's last row of H is no position */
    size_t k, v, chunk, cols; /* K, V, rows R of a chunk, columns Vc of a block */
    size_t n_pos, slice;  /* positions; bytes of a thread's workspace slice */
    char *slices;         /* the threads' slices */
    struct gf_labels lab;
    void *loss;           /* [positions] with reduction none */
    double part[2 * FU_MAX_THREADS];
};

/* One thread's chunk: its buffers (its workspace slice) and where it is. */
struct lce_work {
    const struct lce *c;
    double *m, *s, *zt;   /* [R] running max, sum, label logit */
    void *z;              /* [R, Vc] compute type: one block of logits */
    size_t p0, p1, c0, nc; /* positions [p0, p1), columns [c0, c0 + nc) */
};

/* Row of H holding position p. */
static size_t lce_row(const struct lce *c, size_t p)
{
    return c->lab.s1 ? p / c->lab.s1 * (c->lab.s1 + 1) + p % c->lab.s1 : p;
}

static int64_t lce_label(const struct lce *c, size_t p)
{
    return fu_label(c->lab.t, gf_label_index(&c->lab, p));
}

/* Folds block row i (nc logits from column c0) into row i's state. */
static void lce_fold_row(struct lce_work *w, size_t i)
{
    const struct lce *c = w->c;
    double m, s;
    if (c->ct == GF_DOUBLE) {
        ce_stats_f64((const double *)w->z + i * c->cols, w->nc, 1, &m, &s);
    } else {
        float mf;
        ce_stats_f32((const float *)w->z + i * c->cols, w->nc, 1, &mf, &s);
        m = mf;
    }
    int64_t t = lce_label(c, w->p0 + i);
    if (t >= (int64_t)w->c0 && t < (int64_t)(w->c0 + w->nc))
        w->zt[i] = fu_get(&(struct gf_tview){.dtype = c->ct, .data = w->z},
                          i * c->cols + (size_t)t - w->c0);
    if (m == -INFINITY) /* a block of -inf logits adds nothing */
        return;
    double mx = w->m[i] > m ? w->m[i] : m;
    w->s[i] = w->s[i] * exp(w->m[i] - mx) + s * exp(m - mx);
    w->m[i] = mx;
}

static void blas_threads(int n)
{
#ifdef OPENBLAS_VERSION
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

/* Block rows [r0, r1) (+)= H[row0 ...] @ W'[:, c0 : c0 + nc]. */
static void lce_gemm(const struct lce_work *w, size_t r0, size_t r1, size_t row0)
{
    const struct lce *c = w->c;
    int m = (int)(r1 - r0), n = (int)w->nc, k = (int)c->k, ldz = (int)c->cols;
    enum CBLAS_TRANSPOSE tb = c->tb ? CblasTrans : CblasNoTrans;
    /* W [K, V]: columns c0.. at W + c0, rows V apart; W [V, K]: rows c0.. */
    size_t woff = c->tb ? w->c0 * c->k : w->c0;
    int ldw = c->tb ? k : (int)c->v;
    if (c->ct == GF_DOUBLE) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0,
                    (const double *)c->h + row0 * c->k, k, (const double *)c->w + woff, ldw,
                    c->bias ? 1.0 : 0.0, (double *)w->z + r0 * c->cols, ldz);
        return;
    }
    const float *h = (const float *)c->h + row0 * c->k, *wt = (const float *)c->w + woff;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0f, h, k, wt, ldw,
                c->bias ? 1.0f : 0.0f, (float *)w->z + r0 * c->cols, ldz);
}

/* The block's logits: Bias (or 0 when K = 0), then one GEMM per run of
 * consecutive H rows. */
static void lce_block(struct lce_work *w)
{
    const struct lce *c = w->c;
    size_t cs = fu_compute_size(c->dt);
    for (size_t r = 0; (c->bias || c->k == 0) && r < w->p1 - w->p0; r++) {
        char *z = (char *)w->z + r * c->cols * cs;
        if (c->bias)
            memcpy(z, (const char *)c->bias + w->c0 * cs, w->nc * cs);
        else
            memset(z, 0, w->nc * cs);
    }
    if (c->k == 0)
        return;
    for (size_t p = w->p0; p < w->p1;) {
        size_t q = p + 1;
        while (q < w->p1 && lce_row(c, q) == lce_row(c, p) + (q - p))
            q++;
        lce_gemm(w, p - w->p0, q - w->p0, lce_row(c, p));
        p = q;
    }
}

/* The chunk [p0, p1): every column block, then the losses, added to sums. */
static void lce_chunk(struct lce_work *w, double *sums)
{
    const struct lce *c = w->c;
    size_t n = w->p1 - w->p0;
    bool needed = !c->lab.has_ii;
    for (size_t i = 0; i < n; i++) {
        w->m[i] = -INFINITY, w->s[i] = 0, w->zt[i] = NAN;
        needed = needed || lce_label(c, w->p0 + i) != c->lab.ii;
    }
    for (w->c0 = 0; needed && w->c0 < c->v; w->c0 += c->cols) {
        w->nc = c->v - w->c0 < c->cols ? c->v - w->c0 : c->cols;
        lce_block(w);
        for (size_t i = 0; i < n; i++)
            lce_fold_row(w, i);
    }
    for (size_t i = 0; i < n; i++) { /* every label ignored: no block was made */
        double l = 0;
        if (!(c->lab.has_ii && lce_label(c, w->p0 + i) == c->lab.ii)) {
            l = ce_nll(w->zt[i], w->m[i], w->s[i]);
            sums[1] += 1;
        }
        if (c->loss)
            fu_put(c->loss, c->dt, w->p0 + i, l);
        sums[0] += l;
    }
}

/* Thread `part` does chunks [b, e) in its workspace slice:
 * [m, s, zt: 3 x R doubles][z: R x Vc compute type] */
static void lce_worker(void *vc, size_t part, size_t b, size_t e)
{
    struct lce *c = vc;
    struct lce_work w = {.c = c};
    w.m = (double *)(c->slices + part * c->slice);
    w.s = w.m + c->chunk;
    w.zt = w.s + c->chunk;
    w.z = w.zt + c->chunk;
    double sums[2] = {0, 0};
    for (size_t ch = b; ch < e; ch++) {
        w.p0 = ch * c->chunk;
        w.p1 = w.p0 + c->chunk < c->n_pos ? w.p0 + c->chunk : c->n_pos;
        lce_chunk(&w, sums);
    }
    c->part[2 * part] = sums[0];
    c->part[2 * part + 1] = sums[1];
}

/* Rows R (chunk_rows; automatic: up to AUTO_ROWS, and a chunk per thread
 * at least) and columns Vc (a block of logits about CHUNK_BYTES). */
static enum gf_status lce_tiles(const struct gf_kernel_args *a, struct lce *c)
{
    int64_t chunk = gf_node_attr_int(a->node, "chunk_rows", 0);
    if (chunk < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "chunk_rows %lld is negative",
                               (long long)chunk);
    size_t cs = fu_compute_size(a->in[0].dtype), nt = (size_t)fu_threads(a);
    size_t spread = (c->n_pos + nt - 1) / nt;
    c->chunk = chunk ? (size_t)chunk : spread < AUTO_ROWS ? spread : AUTO_ROWS;
    c->chunk = c->chunk < c->n_pos ? c->chunk : c->n_pos;
    c->chunk = c->chunk ? c->chunk : 1;
    c->cols = CHUNK_BYTES / (cs * c->chunk);
    c->cols = c->cols < MIN_COLS ? MIN_COLS : c->cols;
    c->cols = c->cols < c->v ? c->cols : c->v ? c->v : 1;
    size_t b = 3 * c->chunk * sizeof(double) + c->chunk * c->cols * cs;
    c->slice = (b + 63) & ~(size_t)63;
    return GF_OK;
}

/* Every check but the labels' values (kernels/checks.c, the rule in
 * graph/opcheck.c); fills c but for the buffers: k, v, the positions, the
 * labels and the tiles. */
static enum gf_status lce_plan(const struct gf_kernel_args *a, struct lce *c,
                               struct gf_lce_rule *r)
{
    enum gf_status st = gf_lce_check(a, r);
    if (st != GF_OK)
        return st;
    c->tb = r->tb;
    c->shift = r->ce.shift;
    c->k = (size_t)r->k.value;
    c->v = (size_t)r->v.value;
    if (c->k > INT_MAX || c->v > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "K or V exceeds BLAS's int");
    c->n_pos = gf_shape_numel(&r->pos);
    gf_labels_init(&c->lab, &a->in[2], 2, &r->ce, c->v,
                   r->ce.shift ? (size_t)a->in[0].dims[1] - 1 : 0);
    return lce_tiles(a, c);
}

/* ws = [Bias: V compute type, rounded to 64 bytes][one slice per thread] */
static size_t lceg_workspace(const struct gf_kernel_args *a, const struct lce *c);
static bool lce_training(const struct gf_kernel_args *a);

static size_t lce_workspace(const struct gf_kernel_args *a)
{
    struct lce c = {0};
    struct gf_lce_rule r;
    if (a->n_in < 3 || !fu_is_float(a->in[0].dtype) || lce_plan(a, &c, &r) != GF_OK)
        return 0;
    if (lce_training(a))
        return lceg_workspace(a, &c);
    size_t bias = (c.v * fu_compute_size(a->in[0].dtype) + 63) & ~(size_t)63;
    return bias + (size_t)fu_threads(a) * c.slice;
}

/* Every check; fills c but for the buffers. */
static enum gf_status lce_check(const struct gf_kernel_args *a, struct lce *c,
                                enum gf_reduction *red)
{
    struct gf_lce_rule r;
    enum gf_status st = lce_plan(a, c, &r);
    *red = r.ce.red;
    if (st == GF_OK)
        st = gf_loss_check_run(a, r.ce.red, &r.pos);
    if (st == GF_OK && lce_training(a))
        st = gf_lce_train_check(a, &r);
    if (st == GF_OK)
        st = gf_check_labels(a, "label T", &c->lab, c->lab.t->data, c->n_pos);
    return st;
}

static enum gf_status lce_grad_run(const struct gf_kernel_args *a, struct lce *c,
                                   enum gf_reduction red);

static enum gf_status lce_run(const struct gf_kernel_args *a)
{
    struct lce c = {0};
    enum gf_reduction red;
    enum gf_status st = lce_check(a, &c, &red);
    if (st != GF_OK)
        return st;
    c.dt = a->in[0].dtype;
    c.ct = c.dt == GF_DOUBLE ? GF_DOUBLE : GF_FLOAT;
    c.h = a->in[0].data;
    c.w = a->in[1].data;
    if (lce_training(a))
        return lce_grad_run(a, &c, red);
    c.loss = red == GF_RED_NONE ? a->out[0].data : NULL;
    size_t parts = 0;
    if (c.n_pos && c.v) {
        if (!a->workspace)
            return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the logits blocks");
        size_t cs = fu_compute_size(c.dt);
        for (size_t j = 0; fu_has(a, 3) && j < c.v; j++)
            fu_put(a->workspace, c.ct, j, fu_get(&a->in[3], j));
        c.bias = fu_has(a, 3) ? a->workspace : NULL;
        c.slices = (char *)a->workspace + ((c.v * cs + 63) & ~(size_t)63);
        blas_threads(1);
        size_t chunks = (c.n_pos + c.chunk - 1) / c.chunk;
        parts = fu_run_parts(fu_threads(a), chunks, c.chunk * c.v * (c.k + 1), lce_worker, &c);
    } else { /* no class, or no position: nothing counted */
        for (size_t p = 0; c.loss && p < c.n_pos; p++)
            fu_put(c.loss, c.dt, p, 0);
    }
    finish_loss(a, red, c.part, parts);
    return GF_OK;
}

/* ---- LinearCrossEntropy in training: the gradients in the same pass ----------------------
 * With outputs dH, dW and dBias (the gradients of Loss for a unit upstream
 * gradient; reduction mean or sum), chunks of R positions run one after the
 * other, each GEMM on BLAS's threads:
 *   Hc = the chunk's rows of H                [R, K]
 *   Z = Hc W' + Bias                          [R, V]  the chunk's logits
 *   per row: its loss, then Z = c (softmax(Z) - onehot(t))  (c = 1/count for mean)
 *   dH's rows = Z W'^T                        [R, K]
 *   dW' += Hc^T Z,  dBias += Z's column sums
 * so the logits exist one chunk at a time (R x V, about GRAD_BYTES; chunk_rows
 * sets R) and no second pass over them is needed in the backward. */
#define GRAD_BYTES (32u << 20)
/* but at least GRAD_ROWS rows while they fit GRAD_MAX_BYTES: BLAS runs a
 * GEMM of a few hundred rows well below its speed on whole matrices (the
 * 45M Llama's V = 32000 gets 512 rows, 64 MB, rather than 262) */
#define GRAD_ROWS 512
#define GRAD_MAX_BYTES (128u << 20)

struct lceg {
    const struct lce *c;
    void *hc, *z, *dhc; /* [R, K], [R, V], [R, K] compute type (workspace) */
    double *rl;         /* [R] each row's loss */
    double *db;         /* [V] dBias sums, or NULL */
    size_t p0, n;       /* the chunk: positions [p0, p0 + n) */
    double scale;
};

static size_t lceg_rows_of(const struct gf_kernel_args *a, const struct lce *c)
{
    int64_t chunk = gf_node_attr_int(a->node, "chunk_rows", 0);
    size_t row = fu_compute_size(a->in[0].dtype) * (c->v ? c->v : 1);
    size_t lo = GRAD_MAX_BYTES / row < GRAD_ROWS ? GRAD_MAX_BYTES / row : GRAD_ROWS;
    size_t r = chunk > 0 ? (size_t)chunk : GRAD_BYTES / row > lo ? GRAD_BYTES / row : lo;
    r = chunk <= 0 && r > AUTO_ROWS ? AUTO_ROWS : r;
    r = r < c->n_pos ? r : c->n_pos;
    return r ? r : 1;
}

#define A64(x) (((x) + 63) & ~(size_t)63)

/* ws = [Bias: V][Hc: R x K][Z: R x V][dHc: R x K] compute type, [row losses: R][dBias: V]
 * doubles, each part 64-byte aligned */
static size_t lceg_workspace(const struct gf_kernel_args *a, const struct lce *c)
{
    size_t r = lceg_rows_of(a, c), cs = fu_compute_size(a->in[0].dtype);
    return A64(c->v * cs) + 2 * A64(r * c->k * cs) + A64(r * c->v * cs) +
           A64(r * sizeof(double)) + A64(c->v * sizeof(double));
}

static void gemm(enum gf_dtype ct, bool ta, bool tb, size_t m, size_t n, size_t k,
                 const void *x, size_t ldx, const void *y, size_t ldy, double beta, void *z,
                 size_t ldz)
{
    enum CBLAS_TRANSPOSE a = ta ? CblasTrans : CblasNoTrans, b = tb ? CblasTrans : CblasNoTrans;
    if (ct == GF_DOUBLE)
        cblas_dgemm(CblasRowMajor, a, b, (int)m, (int)n, (int)k, 1.0, x, (int)ldx, y,
                    (int)ldy, beta, z, (int)ldz);
    else
        cblas_sgemm(CblasRowMajor, a, b, (int)m, (int)n, (int)k, 1.0f, x, (int)ldx, y,
                    (int)ldy, (float)beta, z, (int)ldz);
}

/* Rows [b, e) of the chunk: the loss, then the logits become the gradient. */
static void lceg_rows(void *vg, size_t b, size_t e)
{
    const struct lceg *g = vg;
    const struct lce *c = g->c;
    for (size_t i = b; i < e; i++) {
        int64_t t = lce_label(c, g->p0 + i);
        bool ign = c->lab.has_ii && t == c->lab.ii;
        double s;
        if (c->ct == GF_DOUBLE) {
            double *z = (double *)g->z + i * c->v, m;
            ce_stats_f64(z, c->v, 1, &m, &s);
            g->rl[i] = ign ? 0 : ce_nll(z[t], m, s);
            ce_grad_f64(z, c->v, 1, m, s, ign ? -1 : t, g->scale, z);
        } else {
            float *z = (float *)g->z + i * c->v, m;
            ce_stats_f32(z, c->v, 1, &m, &s);
            g->rl[i] = ign ? 0 : ce_nll(z[t], m, s);
            ce_grad_f32(z, c->v, 1, m, s, ign ? -1 : t, g->scale, z);
        }
    }
}

/* dBias columns [b, e) += the chunk's column sums (rows in order). */
static void lceg_cols(void *vg, size_t b, size_t e)
{
    const struct lceg *g = vg;
    const struct lce *c = g->c;
    for (size_t i = 0; i < g->n; i++) {
        if (c->ct == GF_DOUBLE) {
            const double *z = (const double *)g->z + i * c->v;
            for (size_t j = b; j < e; j++)
                g->db[j] += z[j];
        } else {
            const float *z = (const float *)g->z + i * c->v;
            for (size_t j = b; j < e; j++)
                g->db[j] += z[j];
        }
    }
}

/* One chunk: Z, the rows, then dH's rows, dW and dBias. */
static double lceg_chunk(const struct gf_kernel_args *a, struct lceg *g)
{
    const struct lce *c = g->c;
    size_t cs = fu_compute_size(c->dt), k = c->k, v = c->v, n = g->n;
    for (size_t i = 0; i < n; i++) {
        memcpy((char *)g->hc + i * k * cs, (const char *)c->h + lce_row(c, g->p0 + i) * k * cs,
               k * cs);
        if (c->bias)
            memcpy((char *)g->z + i * v * cs, c->bias, v * cs);
        else
            memset((char *)g->z + i * v * cs, 0, v * cs);
    }
    if (k)
        gemm(c->ct, false, c->tb, n, v, k, g->hc, k, c->w, c->tb ? k : v, 1, g->z, v);
    gf_parallel_for(fu_threads(a), n, fu_grain(v), lceg_rows, g);
    double loss = 0;
    for (size_t i = 0; i < n; i++)
        loss += g->rl[i];
    if (k && fu_has_out(a, 1)) { /* dHc = Z W'^T: W [K, V] transposed, or W [V, K] */
        gemm(c->ct, false, !c->tb, n, k, v, g->z, v, c->w, c->tb ? k : v, 0, g->dhc, k);
        for (size_t i = 0; i < n; i++)
            memcpy((char *)a->out[1].data + lce_row(c, g->p0 + i) * k * cs,
                   (const char *)g->dhc + i * k * cs, k * cs);
    }
    if (k && fu_has_out(a, 2)) { /* dW [K, V] += Hc^T Z, or dW [V, K] += Z^T Hc */
        if (c->tb)
            gemm(c->ct, true, false, v, k, n, g->z, v, g->hc, k, 1, a->out[2].data, k);
        else
            gemm(c->ct, true, false, k, v, n, g->hc, k, g->z, v, 1, a->out[2].data, v);
    }
    if (g->db)
        gf_parallel_for(fu_threads(a), v, FU_GRAIN / (n ? n : 1) + 1, lceg_cols, g);
    return loss;
}

static enum gf_status lce_grad_run(const struct gf_kernel_args *a, struct lce *c,
                                   enum gf_reduction red)
{
    size_t cs = fu_compute_size(c->dt), r = lceg_rows_of(a, c), k = c->k, v = c->v;
    if (!a->workspace && c->n_pos && v)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the logits chunks");
    for (size_t i = 2; i < 4; i++)
        if (fu_has_out(a, i))
            memset(a->out[i].data, 0, a->out[i].nelem * cs);
    if (fu_has_out(a, 1)) /* rows that are no position (shift) get no gradient */
        for (size_t row = 0; row < a->in[0].nelem / (k ? k : 1) && k; row++)
            if (c->shift && row % (c->lab.s1 + 1) == c->lab.s1) /* S = 1: every row */
                memset((char *)a->out[1].data + row * k * cs, 0, k * cs);
    double count = counted_weight(&c->lab, c->n_pos, NULL), loss = 0;
    char *ws = a->workspace;
    struct lceg g = {.c = c, .scale = red == GF_RED_MEAN ? 1 / count : 1};
    if (c->n_pos && v) {
        for (size_t j = 0; fu_has(a, 3) && j < v; j++)
            fu_put(ws, c->ct, j, fu_get(&a->in[3], j));
        c->bias = fu_has(a, 3) ? ws : NULL;
        g.hc = ws + A64(v * cs);
        g.z = (char *)g.hc + A64(r * k * cs);
        g.dhc = (char *)g.z + A64(r * v * cs);
        g.rl = (double *)((char *)g.dhc + A64(r * k * cs));
        g.db = fu_has_out(a, 3) ? (double *)((char *)g.rl + A64(r * sizeof(double))) : NULL;
        if (g.db)
            memset(g.db, 0, v * sizeof(double));
        /* large chunks: BLAS's threads inside each GEMM (as the MatMul kernel,
         * from the same size: kernels/cpu/matmul.c, MM_BLAS_MT_WORK) */
        blas_threads((double)r * (double)v * (double)k >= 256.0 * 256 * 256
                         ? gf_parallel_width(fu_threads(a))
                         : 1);
        for (g.p0 = 0; g.p0 < c->n_pos; g.p0 += r) {
            g.n = c->n_pos - g.p0 < r ? c->n_pos - g.p0 : r;
            loss += lceg_chunk(a, &g);
        }
        for (size_t j = 0; g.db && j < v; j++)
            fu_put(a->out[3].data, c->dt, j, g.db[j]);
    }
    fu_put(a->out[0].data, c->dt, 0, red == GF_RED_MEAN ? loss / count : loss);
    return GF_OK;
}

static bool lce_training(const struct gf_kernel_args *a)
{
    return fu_has_out(a, 1) || fu_has_out(a, 2) || fu_has_out(a, 3);
}

/* ==== JSD ============================================================================== */

/* Rows of n log-probabilities: X = log Q, Y = log P. */
struct jsd {
    const void *x, *y;
    const struct gf_tview *t; /* [rows] labels, or NULL */
    int64_t ii;
    size_t n;
    double beta;
    double part[2 * FU_MAX_THREADS]; /* per slice: sum of row values, rows counted */
};

/* One element's share: a (a - b) e^a with 0 log 0 = 0 (a zero probability
 * contributes nothing, even against a -inf log), and the mixture form
 * beta P (log P - log M) + (1 - beta) Q (log Q - log M). */
FU_MATH float jsd_kl_f(float la, float lb)
{
    float p = fu_expf(la);
    return p > 0 ? p * (la - lb) : 0.0f;
}

FU_MATH double jsd_kl_d(double la, double lb)
{
    double p = exp(la);
    return p > 0 ? p * (la - lb) : 0.0;
}

FU_MATH float jsd_mix_f(float lq, float lp, float bp, float bq)
{
    float p = fu_expf(lp), q = fu_expf(lq), lm = fu_logf(bp * p + bq * q);
    return bp * (p > 0 ? p * (lp - lm) : 0.0f) + bq * (q > 0 ? q * (lq - lm) : 0.0f);
}

FU_MATH double jsd_mix_d(double lq, double lp, double bp, double bq)
{
    double p = exp(lp), q = exp(lq), lm = log(bp * p + bq * q);
    return bp * (p > 0 ? p * (lp - lm) : 0.0) + bq * (q > 0 ? q * (lq - lm) : 0.0);
}

#define JSD_KL(a, b) _Generic((a), float: jsd_kl_f, default: jsd_kl_d)(a, b)
#define JSD_MIX(q, p, bp, bq) _Generic((q), float: jsd_mix_f, default: jsd_mix_d)(q, p, bp, bq)

/* s = sum over the row of V(lq, lp): blocks of values computed in a plain
 * loop (it vectorizes), then added in double lanes. */
#define JSD_BLOCK 256
#define JSD_SUM(T, C, LD, V)                                                            \
    do {                                                                                \
    for (size_t j0 = 0; j0 < n; j0 += JSD_BLOCK) {                                      \
        size_t len = n - j0 < JSD_BLOCK ? n - j0 : JSD_BLOCK, i = 0;                    \
        const T *xb = x + j0, *yb = y + j0;                                             \
        C val[JSD_BLOCK];                                                               \
        for (size_t b = 0; b < len; b++) {                                              \
            C lq = LD(xb[b]), lp = LD(yb[b]);                                           \
            val[b] = V;                                                                 \
        }                                                                               \
        for (; i + FU_LANES <= len; i += FU_LANES)                                      \
            for (int k = 0; k < FU_LANES; k++)                                          \
                acc[k] += (double)val[i + k];                                           \
        for (; i < len; i++)                                                            \
            s += (double)val[i];                                                        \
    }                                                                                   \
    } while (0)

/* One row: beta 0 is KL(P || Q), beta 1 KL(Q || P), else the mixture form;
 * then the rows [b, e) of a slice, skipping ignored labels. */
#define DEF_JSD(DT, sfx, T, C, LD, ST)                                                  \
    FU_HOT static double jsd_row_##sfx(const T *x, const T *y, size_t n, double beta)   \
    {                                                                                   \
        double acc[FU_LANES] = {0}, s = 0;                                              \
        C bp = (C)beta, bq = (C)(1 - beta);                                             \
        if (beta == 0)                                                                  \
            JSD_SUM(T, C, LD, JSD_KL(lp, lq));                                          \
        else if (beta == 1)                                                             \
            JSD_SUM(T, C, LD, JSD_KL(lq, lp));                                          \
        else                                                                            \
            JSD_SUM(T, C, LD, JSD_MIX(lq, lp, bp, bq));                                 \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += acc[k];                                                                \
        return s;                                                                       \
    }                                                                                   \
    static void jsd_part_##sfx(void *vc, size_t part, size_t b, size_t e)               \
    {                                                                                   \
        struct jsd *c = vc;                                                             \
        double s = 0, cnt = 0;                                                          \
        for (size_t r = b; r < e; r++) {                                                \
            if (c->t && fu_label(c->t, r) == c->ii)                                     \
                continue;                                                               \
            s += jsd_row_##sfx((const T *)c->x + r * c->n, (const T *)c->y + r * c->n,  \
                               c->n, c->beta);                                          \
            cnt += 1;                                                                   \
        }                                                                               \
        c->part[2 * part] = s;                                                          \
        c->part[2 * part + 1] = cnt;                                                    \
    }
FU_TYPES(DEF_JSD)

#define JSD_ENTRY(DT, sfx, ...) [DT] = jsd_part_##sfx,
static const fu_part_fn jsd_parts[GF_DTYPE_COUNT] = {FU_TYPES(JSD_ENTRY)};

static enum gf_status jsd_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct jsd c = {0};
    float beta;
    enum gf_status st = gf_jsd_check(a, &beta, &c.ii);
    if (st != GF_OK)
        return st;
    c.beta = beta;
    c.t = fu_has(a, 2) ? &a->in[2] : NULL;
    c.x = x->data;
    c.y = a->in[1].data;
    c.n = (size_t)x->dims[x->rank - 1];
    size_t rows = c.n ? x->nelem / c.n : 0;
    for (int i = 0; !c.n && i < x->rank - 1; i++)
        rows = (i ? rows : 1) * (size_t)x->dims[i];
    size_t parts = fu_run_parts(fu_threads(a), rows, c.n + 1, jsd_parts[x->dtype], &c);
    double s = 0, cnt = 0;
    for (size_t p = 0; p < parts; p++)
        s += c.part[2 * p], cnt += c.part[2 * p + 1];
    fu_put(a->out[0].data, x->dtype, 0, s / cnt);
    return GF_OK;
}

/* ==== the table ========================================================================== */

static bool loss_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 2 && fu_is_float(in[0].dtype) && in[0].rank <= GF_MAX_RANK;
}

/* fp16 / bf16 H: the loss is fp32 (graph/shape.c), which kernels/cpu/half.c's
 * fp32 run on the widened inputs gives. */
static bool lce_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return loss_supports(n, in, n_in) && !fu_is_half(in[0].dtype);
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_SOFTMAX_CROSS_ENTROPY, .backend = "cpu", .dtype = GF_UNDEFINED,
     .impl = "fused-rows", .supports = loss_supports, .run = sce_run},
    {.op = GF_OP_LINEAR_CROSS_ENTROPY, .backend = "cpu", .dtype = GF_UNDEFINED,
     .impl = "chunked-openblas", .supports = lce_supports, .workspace = lce_workspace,
     .run = lce_run},
    {.op = GF_OP_JSD, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "fused-rows",
     .supports = loss_supports, .run = jsd_run},
};

const struct gf_kernel_table gf_cpu_fused_loss_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
