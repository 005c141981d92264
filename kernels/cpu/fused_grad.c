/* CPU kernels of the fused backward ops (domain graphfuse, README "Training",
 * "Fused backward ops"), written by passes/grad_rules_fused.c:
 *
 *   RMSNormGrad         dY, X, W?, G? -> dX, dW?, dXl?  (RMSNorm, AddRMSNorm: X is S)
 *   SwiGLUGrad          dY, G, U -> dG, dU
 *   GeGLUGrad           dY, G, U -> dG, dU      (approximate "none" / "tanh")
 *   RoPEGrad            dY, Cos, Sin -> dX
 *   LayerNormGrad       dY, X, W?, Mean?, InvStdDev? -> dX, dW?, dB?  (AddLayerNorm too)
 *   MatMulEpilogueGrad  dY, Z -> dZ, dBias?     (MatMulEpilogue's bias and activation)
 *   CrossEntropyGrad    dLoss, G -> dL          (G: SoftmaxCrossEntropy's output 2)
 *   JSDGrad             dLoss, X, Y, T? -> dX, dY
 *
 * float and double (the rules keep fp16 / bf16 on the fallback).  r =
 * 1/rms, sigmoid and gelu are recomputed from the row / element;
 * LayerNormGrad reads the forward's Mean and InvStdDev.  Row sums are
 * accumulated in double (FU_LANES lanes, so they vectorize); dW, dB and
 * dBias are reduced through one row of double partial sums per slice of
 * rows (the workspace), then summed in slice order, so the result does not
 * depend on the thread count's scheduling and no [rows, n] temporary
 * exists.  The loss gradients of SoftmaxCrossEntropy and LinearCrossEntropy
 * are computed by their forward kernels (fused_loss.c).
 */
#include "fused.h"

#define FG_TYPES(X)            \
    X(GF_FLOAT, f32, float)    \
    X(GF_DOUBLE, f64, double)

static bool fg_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && (in[0].dtype == GF_FLOAT || in[0].dtype == GF_DOUBLE) &&
           in[0].rank <= GF_MAX_RANK;
}

/* ==== RMSNormGrad ============================================================
 * Per row x (n elements), g = dY (W + offset), ms = mean(x^2):
 *   eps inside:  r = 1/sqrt(ms + eps),   dr/dms = -r^3 / 2
 *   eps outside: r = 1/(sqrt(ms) + eps), dr/dms = -r^2 / (2 sqrt(ms))
 *   dX = r g - k x (+ G: AddRMSNorm's gradient of S),  k = -2 dr/dms * sum(g x) / n
 *   dW = sum over rows of dY x r;  dXl = dX (in dY's type)
 * eps outside with an all-zero row: k = 0 (the derivative of sqrt at 0 is
 * infinite; sum(g x) is 0 there, so this is the limit along the row). */

struct rmsg {
    const void *dy, *x; /* [rows, n] */
    const void *g;      /* [rows, n] added to dX, or NULL */
    void *dx, *dxl;     /* [rows, n]; dxl: a copy of dX (in dY's type: the half
                         * wrapper narrows it), or NULL */
    const void *w;      /* [n] W + weight_offset (1 without W), workspace */
    double *part;       /* [parts, n] dW partial sums, workspace; NULL: no dW */
    size_t rows, n;
    double eps;
    bool eps_outside;
};

#define DEF_RMS_GRAD(DT, sfx, T)                                                        \
    /* sum(x^2) and sum(dY w x) of one row, in double */                                \
    FU_HOT static void rms_sums_##sfx(const T *x, const T *dy, const T *w, size_t n,    \
                                      double *ss, double *gx)                           \
    {                                                                                   \
        double a[FU_LANES] = {0}, b[FU_LANES] = {0}, s = 0, t = 0;                      \
        size_t j = 0;                                                                   \
        for (; j + FU_LANES <= n; j += FU_LANES)                                        \
            for (int k = 0; k < FU_LANES; k++) {                                        \
                double v = x[j + k];                                                    \
                a[k] += v * v;                                                          \
                b[k] += (double)(dy[j + k] * w[j + k]) * v;                             \
            }                                                                           \
        for (; j < n; j++) {                                                            \
            double v = x[j];                                                            \
            s += v * v;                                                                 \
            t += (double)(dy[j] * w[j]) * v;                                            \
        }                                                                               \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += a[k], t += b[k];                                                       \
        *ss = s, *gx = t;                                                               \
    }                                                                                   \
    FU_HOT static void rms_part_##sfx(void *vc, size_t part, size_t r0, size_t r1)      \
    {                                                                                   \
        const struct rmsg *c = vc;                                                      \
        size_t n = c->n;                                                                \
        const T *w = c->w;                                                              \
        double *pw = c->part ? c->part + part * n : NULL;                               \
        if (pw)                                                                         \
            memset(pw, 0, n * sizeof(*pw));                                             \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *x = (const T *)c->x + r * n, *dy = (const T *)c->dy + r * n;       \
            T *dx = (T *)c->dx + r * n;                                                 \
            double ss, gx, rr, k;                                                       \
            rms_sums_##sfx(x, dy, w, n, &ss, &gx);                                      \
            double ms = ss / (double)n;                                                 \
            if (c->eps_outside) {                                                       \
                double rms = sqrt(ms);                                                  \
                rr = 1 / (rms + c->eps);                                                \
                k = rms > 0 ? rr * rr / rms * gx / (double)n : 0;                       \
            } else {                                                                    \
                rr = 1 / sqrt(ms + c->eps);                                             \
                k = rr * rr * rr * gx / (double)n;                                      \
            }                                                                           \
            T rt = (T)rr, kt = (T)k;                                                    \
            const T *g = c->g ? (const T *)c->g + r * n : NULL;                         \
            T *dl = c->dxl ? (T *)c->dxl + r * n : NULL;                                \
            /* dx may be dy, x or g (written in place): read element j first */         \
            for (size_t j = 0; j < n; j++) {                                            \
                T d = dy[j], v = x[j];                                                  \
                if (pw)                                                                 \
                    pw[j] += (double)d * ((double)v * rr);                              \
                T o = rt * (d * w[j]) - kt * v;                                         \
                if (g)                                                                  \
                    o = o + g[j];                                                       \
                dx[j] = o;                                                              \
                if (dl)                                                                 \
                    dl[j] = o;                                                          \
            }                                                                           \
        }                                                                               \
    }

FG_TYPES(DEF_RMS_GRAD)

#define RMS_ENTRY(DT, sfx, T) [DT] = rms_part_##sfx,
static const fu_part_fn rms_parts[GF_DTYPE_COUNT] = {FG_TYPES(RMS_ENTRY)};

/* RMSNormGrad and LayerNormGrad: every check (kernels/checks.c, the rule
 * in graph/opcheck.c; the data and outputs when `run`); *brank and *n the
 * rank and size of the normalized block X.shape[axis:]. */
static enum gf_status norm_grad_check(const struct gf_kernel_args *a, bool run,
                                      struct gf_norm_rule *r, int *brank, size_t *n)
{
    enum gf_status st = gf_norm_grad_check(a, r);
    if (st == GF_OK && run)
        st = gf_norm_grad_check_run(a, r);
    if (st != GF_OK)
        return st;
    *brank = r->block.rank;
    *n = gf_dims_prod(a->in[1].dims, r->axis, a->in[1].rank);
    return GF_OK;
}

static enum gf_status rms_check(const struct gf_kernel_args *a, struct rmsg *c, double *off,
                                int *brank)
{
    struct gf_norm_rule r;
    enum gf_status st = norm_grad_check(a, true, &r, brank, &c->n);
    c->eps = r.eps;
    c->eps_outside = r.eps_outside;
    *off = r.woff;
    return st;
}

/* ws = [W + offset: n, compute type][partials: threads x n doubles] */
static size_t rms_workspace(const struct gf_kernel_args *a)
{
    struct gf_norm_rule r;
    int brank;
    size_t n;
    if (a->n_in < 2 || norm_grad_check(a, false, &r, &brank, &n) != GF_OK)
        return 0;
    return n * (fu_compute_size(a->in[1].dtype) + (size_t)fu_threads(a) * sizeof(double)) +
           sizeof(double);
}

/* W (+ offset) broadcast over the block into w[n] (1 without W). */
static void rms_expand_w(const struct gf_kernel_args *a, int brank, size_t n, double off,
                         void *w)
{
    const struct gf_tview *x = &a->in[1], *t = fu_has(a, 2) ? &a->in[2] : NULL;
    const int64_t *bdims = x->dims + x->rank - brank;
    int64_t st[GF_MAX_RANK];
    if (t)
        fu_strides(t, brank, bdims, st);
    for (size_t j = 0; j < n; j++) {
        double v = t ? fu_get(t, fu_offset(brank, bdims, st, j)) + off : 1;
        fu_put(w, x->dtype, j, v);
    }
}

static enum gf_status rms_grad_run(const struct gf_kernel_args *a)
{
    struct rmsg c = {0};
    double off = 0;
    int brank = 0;
    enum gf_status st = rms_check(a, &c, &off, &brank);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[1];
    c.rows = c.n ? x->nelem / c.n : 0;
    bool want_dw = fu_has_out(a, 1);
    if (c.n == 0 || (c.rows == 0 && !want_dw))
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and the dW partials");
    /* the partials start on a double boundary after w */
    size_t wbytes = c.n * fu_compute_size(x->dtype);
    wbytes = (wbytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    rms_expand_w(a, brank, c.n, off, a->workspace);
    c.dy = a->in[0].data, c.x = x->data, c.dx = a->out[0].data, c.w = a->workspace;
    c.g = fu_has(a, 3) ? a->in[3].data : NULL;
    c.dxl = fu_has_out(a, 2) ? a->out[2].data : NULL;
    c.part = want_dw ? (double *)((char *)a->workspace + wbytes) : NULL;
    size_t parts = 0;
    if (c.rows)
        parts = fu_run_parts(fu_threads(a), c.rows, c.n, rms_parts[x->dtype], &c);
    for (size_t j = 0; want_dw && j < c.n; j++) {
        double s = 0;
        for (size_t p = 0; p < parts; p++)
            s += c.part[p * c.n + j];
        fu_put(a->out[1].data, x->dtype, j, s);
    }
    return GF_OK;
}

/* ==== LayerNormGrad ==========================================================
 * Per row x (n elements) with mu and rstd = 1/sqrt(var + eps) (the
 * forward's Mean and InvStdDev when given, else recomputed in double):
 *   xh = (x - mu) rstd,  g = dY W,  a = mean(g),  b = mean(g xh)
 *   dX = rstd (g - a - xh b)
 *   dW = sum over rows of dY xh,  dB = sum over rows of dY
 * xh and the row sums are in double; dW and dB go through one row of
 * double partials each per slice of rows, as RMSNormGrad's dW. */

struct lng {
    const void *dy, *x;       /* [rows, n] */
    void *dx;                 /* [rows, n]; may be dy or x (in place) */
    const void *w;            /* [n] W (1 without W), workspace */
    const void *mean, *istd;  /* [rows] compute type, or NULL: recomputed */
    double *part;             /* [parts, 2n] dW then dB partials, or NULL */
    size_t rows, n;
    double eps;
};

#define DEF_LN_GRAD(DT, sfx, T)                                                         \
    /* mean and 1/sqrt(var + eps) of one row, in double */                              \
    FU_HOT static void ln_stats_##sfx(const T *x, size_t n, double eps, double *mu,     \
                                      double *rs)                                       \
    {                                                                                   \
        double a[FU_LANES] = {0}, s = 0, m, v = 0;                                      \
        size_t j = 0;                                                                   \
        for (; j + FU_LANES <= n; j += FU_LANES)                                        \
            for (int k = 0; k < FU_LANES; k++)                                          \
                a[k] += x[j + k];                                                       \
        for (; j < n; j++)                                                              \
            s += x[j];                                                                  \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += a[k], a[k] = 0;                                                        \
        m = s / (double)n;                                                              \
        for (j = 0; j + FU_LANES <= n; j += FU_LANES)                                   \
            for (int k = 0; k < FU_LANES; k++)                                          \
                a[k] += ((double)x[j + k] - m) * ((double)x[j + k] - m);                \
        for (; j < n; j++)                                                              \
            v += ((double)x[j] - m) * ((double)x[j] - m);                               \
        for (int k = 0; k < FU_LANES; k++)                                              \
            v += a[k];                                                                  \
        *mu = m;                                                                        \
        *rs = 1 / sqrt(v / (double)n + eps);                                            \
    }                                                                                   \
    /* sum(dY W) and sum(dY W xh) of one row */                                         \
    FU_HOT static void ln_sums_##sfx(const T *x, const T *dy, const T *w, size_t n,     \
                                     double mu, double rs, double *ga, double *gb)      \
    {                                                                                   \
        double a[FU_LANES] = {0}, b[FU_LANES] = {0}, s = 0, t = 0;                      \
        size_t j = 0;                                                                   \
        for (; j + FU_LANES <= n; j += FU_LANES)                                        \
            for (int k = 0; k < FU_LANES; k++) {                                        \
                double g = (double)(dy[j + k] * w[j + k]);                              \
                a[k] += g;                                                              \
                b[k] += g * (((double)x[j + k] - mu) * rs);                             \
            }                                                                           \
        for (; j < n; j++) {                                                            \
            double g = (double)(dy[j] * w[j]);                                          \
            s += g;                                                                     \
            t += g * (((double)x[j] - mu) * rs);                                        \
        }                                                                               \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += a[k], t += b[k];                                                       \
        *ga = s, *gb = t;                                                               \
    }                                                                                   \
    FU_HOT static void ln_part_##sfx(void *vc, size_t part, size_t r0, size_t r1)       \
    {                                                                                   \
        const struct lng *c = vc;                                                       \
        size_t n = c->n;                                                                \
        const T *w = c->w;                                                              \
        double *pw = c->part ? c->part + part * 2 * n : NULL, *pb = pw ? pw + n : NULL; \
        if (pw)                                                                         \
            memset(pw, 0, 2 * n * sizeof(*pw));                                         \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *x = (const T *)c->x + r * n, *dy = (const T *)c->dy + r * n;       \
            T *dx = (T *)c->dx + r * n;                                                 \
            double mu, rs, ga, gb;                                                      \
            if (c->mean) {                                                              \
                mu = ((const T *)c->mean)[r];                                           \
                rs = ((const T *)c->istd)[r];                                           \
            } else {                                                                    \
                ln_stats_##sfx(x, n, c->eps, &mu, &rs);                                 \
            }                                                                           \
            ln_sums_##sfx(x, dy, w, n, mu, rs, &ga, &gb);                               \
            double ma = ga / (double)n, mb = gb / (double)n;                            \
            /* dx may be dy or x (written in place): read element j first */            \
            if (pw)                                                                     \
                for (size_t j = 0; j < n; j++) {                                        \
                    T d = dy[j];                                                        \
                    double xh = ((double)x[j] - mu) * rs;                               \
                    pw[j] += (double)d * xh;                                            \
                    pb[j] += (double)d;                                                 \
                    dx[j] = (T)(rs * ((double)(d * w[j]) - ma - xh * mb));              \
                }                                                                       \
            else                                                                        \
                for (size_t j = 0; j < n; j++) {                                        \
                    double xh = ((double)x[j] - mu) * rs;                               \
                    dx[j] = (T)(rs * ((double)(dy[j] * w[j]) - ma - xh * mb));          \
                }                                                                       \
        }                                                                               \
    }

FG_TYPES(DEF_LN_GRAD)

#define LN_ENTRY(DT, sfx, T) [DT] = ln_part_##sfx,
static const fu_part_fn ln_parts[GF_DTYPE_COUNT] = {FG_TYPES(LN_ENTRY)};

static enum gf_status ln_check(const struct gf_kernel_args *a, struct lng *c, int *brank)
{
    struct gf_norm_rule r;
    enum gf_status st = norm_grad_check(a, true, &r, brank, &c->n);
    c->eps = r.eps;
    return st;
}

/* ws = [W: n, compute type][partials: threads x 2n doubles] */
static size_t ln_workspace(const struct gf_kernel_args *a)
{
    struct gf_norm_rule r;
    int brank;
    size_t n;
    if (a->n_in < 2 || norm_grad_check(a, false, &r, &brank, &n) != GF_OK)
        return 0;
    return n * (fu_compute_size(a->in[1].dtype) + 2 * (size_t)fu_threads(a) * sizeof(double)) +
           sizeof(double);
}

static enum gf_status ln_grad_run(const struct gf_kernel_args *a)
{
    struct lng c = {0};
    int brank = 0;
    enum gf_status st = ln_check(a, &c, &brank);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[1];
    c.rows = c.n ? x->nelem / c.n : 0;
    bool want_dw = fu_has_out(a, 1), want_db = fu_has_out(a, 2);
    if (c.n == 0 || (c.rows == 0 && !want_dw && !want_db))
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and the partials");
    size_t wbytes = c.n * fu_compute_size(x->dtype);
    wbytes = (wbytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    rms_expand_w(a, brank, c.n, 0, a->workspace);
    c.dy = a->in[0].data, c.x = x->data, c.dx = a->out[0].data, c.w = a->workspace;
    c.mean = fu_has(a, 3) ? a->in[3].data : NULL;
    c.istd = fu_has(a, 4) ? a->in[4].data : NULL;
    c.part = want_dw || want_db ? (double *)((char *)a->workspace + wbytes) : NULL;
    size_t parts = 0;
    if (c.rows)
        parts = fu_run_parts(fu_threads(a), c.rows, c.n, ln_parts[x->dtype], &c);
    for (size_t k = 1; k < 3; k++)
        for (size_t j = 0; fu_has_out(a, k) && j < c.n; j++) {
            double s = 0;
            for (size_t p = 0; p < parts; p++)
                s += c.part[(2 * p + k - 1) * c.n + j];
            fu_put(a->out[k].data, x->dtype, j, s);
        }
    return GF_OK;
}

/* ==== SwiGLUGrad, GeGLUGrad ==================================================
 * Elementwise over dY, G, U of one shape (the rule sums broadcast shapes):
 *   SwiGLU: s = sigmoid(G), dU = dY G s, dG = dY U s (1 + G (1 - s))
 *   GeGLU:  dU = dY gelu(G), dG = dY U gelu'(G)
 *     gelu'(g) = Phi(g) + g phi(g)  ("none")
 *     tanh form: with s = sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3),
 *     gelu = g s and gelu' = s + 2 g s (1 - s) sqrt(2/pi) (1 + 3 0.044715 g^2)
 *     (the sigmoid form of 1/2 (1 + tanh u): no cancellation for g << 0).
 * gelu' is computed in double (libm erfc / exp) for both types. */

struct glug {
    const void *dy, *g, *u; /* [n] */
    void *dg, *du;          /* [n]; either may be NULL (not wanted) */
    int kind;               /* 0 SwiGLU, 1 GeGLU erf, 2 GeGLU tanh */
};

static double gelu_d(double g, int kind, double *gelu)
{
    if (kind == 1) {
        double phi_c = 0.5 * erfc(-g * 0.70710678118654752440);
        *gelu = g * phi_c;
        return phi_c + g * 0.39894228040143267794 * exp(-0.5 * g * g);
    }
    const double c = 0.79788456080286535588; /* sqrt(2/pi) */
    double s = 1 / (1 + exp(-2 * c * (g + 0.044715 * g * g * g)));
    *gelu = g * s;
    return s + 2 * g * s * (1 - s) * c * (1 + 3 * 0.044715 * g * g);
}

#define DEF_GLU_GRAD(DT, sfx, T)                                                        \
    FU_HOT static void swiglu_grad_##sfx(const struct glug *c, size_t b, size_t e)      \
    {                                                                                   \
        const T *dy = c->dy, *g = c->g, *u = c->u;                                      \
        T *dg = c->dg, *du = c->du;                                                     \
        for (size_t i = b; i < e; i++) {                                                \
            T s = FU_SIGMOID(g[i]), gs = g[i] * s;                                      \
            if (du)                                                                     \
                du[i] = dy[i] * gs;                                                     \
            if (dg)                                                                     \
                dg[i] = dy[i] * u[i] * (s + gs * (1 - s));                              \
        }                                                                               \
    }                                                                                   \
    static void geglu_grad_##sfx(const struct glug *c, size_t b, size_t e)              \
    {                                                                                   \
        const T *dy = c->dy, *g = c->g, *u = c->u;                                      \
        T *dg = c->dg, *du = c->du;                                                     \
        for (size_t i = b; i < e; i++) {                                                \
            double ge, d = gelu_d(g[i], c->kind, &ge);                                  \
            if (du)                                                                     \
                du[i] = dy[i] * (T)ge;                                                  \
            if (dg)                                                                     \
                dg[i] = (T)((double)dy[i] * (double)u[i] * d);                          \
        }                                                                               \
    }                                                                                   \
    static void glu_grad_##sfx(void *vc, size_t b, size_t e)                            \
    {                                                                                   \
        const struct glug *c = vc;                                                      \
        if (c->kind == 0)                                                               \
            swiglu_grad_##sfx(c, b, e);                                                 \
        else                                                                            \
            geglu_grad_##sfx(c, b, e);                                                  \
    }

FG_TYPES(DEF_GLU_GRAD)

typedef void (*range_fn)(void *ctx, size_t begin, size_t end);
#define GLU_ENTRY(DT, sfx, T) [DT] = glu_grad_##sfx,
static const range_fn glu_grads[GF_DTYPE_COUNT] = {FG_TYPES(GLU_ENTRY)};

static enum gf_status glu_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *dy = &a->in[0];
    struct glug c = {0};
    enum gf_act act;
    enum gf_status st = gf_glu_grad_check(a, &act); /* kernels/checks.c */
    if (st != GF_OK)
        return st;
    c.kind = (int)act;
    c.dy = dy->data, c.g = a->in[1].data, c.u = a->in[2].data;
    c.dg = fu_has_out(a, 0) ? a->out[0].data : NULL;
    c.du = fu_has_out(a, 1) ? a->out[1].data : NULL;
    size_t grain = c.kind ? FU_GRAIN / 8 : FU_GRAIN; /* libm per element: dearer */
    gf_parallel_for(fu_threads(a), dy->nelem, grain, glu_grads[dy->dtype], &c);
    return GF_OK;
}

/* ==== RoPEGrad ===============================================================
 * The adjoint of Y = X Cos + rot(X) Sin, rot(x) = concat(-x[h:], x[:h]),
 * h = d/2:  dX = dY Cos + rot^T(dY Sin), rot^T(z) = concat(z[h:], -z[:h]).
 * Rows of d along the last axis; Cos and Sin broadcast to dY's shape. */

struct ropeg {
    const void *dy, *cs, *sn; /* dY [rows, d]; Cos, Sin broadcast */
    void *dx;                 /* [rows, d] */
    size_t d;
    int rank;                      /* rank of the leading (row) axes */
    const int64_t *dims;           /* [rank] leading dims of dY */
    int64_t cst[GF_MAX_RANK + 1];  /* Cos strides over dY's shape */
    int64_t sst[GF_MAX_RANK + 1];  /* Sin strides */
};

#define DEF_ROPE_GRAD(DT, sfx, T)                                                       \
    FU_HOT static void rope_grad_##sfx(void *vc, size_t r0, size_t r1)                  \
    {                                                                                   \
        const struct ropeg *c = vc;                                                     \
        size_t d = c->d, h = d / 2;                                                     \
        size_t lc = (size_t)c->cst[c->rank], ls = (size_t)c->sst[c->rank];              \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *dy = (const T *)c->dy + r * d;                                     \
            const T *cs = (const T *)c->cs + fu_offset(c->rank, c->dims, c->cst, r);    \
            const T *sn = (const T *)c->sn + fu_offset(c->rank, c->dims, c->sst, r);    \
            T *dx = (T *)c->dx + r * d;                                                 \
            for (size_t j = 0; j < h; j++)                                              \
                dx[j] = dy[j] * cs[j * lc] + dy[j + h] * sn[(j + h) * ls];              \
            for (size_t j = h; j < d; j++)                                              \
                dx[j] = dy[j] * cs[j * lc] - dy[j - h] * sn[(j - h) * ls];              \
        }                                                                               \
    }

FG_TYPES(DEF_ROPE_GRAD)

#define ROPE_ENTRY(DT, sfx, T) [DT] = rope_grad_##sfx,
static const range_fn rope_grads[GF_DTYPE_COUNT] = {FG_TYPES(ROPE_ENTRY)};

static enum gf_status rope_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *dy = &a->in[0];
    enum gf_status st = gf_rope_check(a); /* kernels/checks.c */
    if (st != GF_OK || dy->nelem == 0)
        return st;
    struct ropeg c = {.dy = dy->data, .cs = a->in[1].data, .sn = a->in[2].data,
                      .dx = a->out[0].data, .d = (size_t)dy->dims[dy->rank - 1],
                      .rank = dy->rank - 1, .dims = dy->dims};
    fu_strides(&a->in[1], dy->rank, dy->dims, c.cst);
    fu_strides(&a->in[2], dy->rank, dy->dims, c.sst);
    gf_parallel_for(fu_threads(a), dy->nelem / c.d, fu_grain(c.d), rope_grads[dy->dtype], &c);
    return GF_OK;
}

/* ==== MatMulEpilogueGrad =====================================================
 * The epilogue of MatMulEpilogue, Y = act(Z) + Res with Z = alpha A'B' +
 * beta Bias, backwards: dZ = dY act'(Z) and dBias = beta (column sums of
 * dZ), rows being every axis but the last.  Input 1 is Z (the rule
 * recomputes it with a MatMulEpilogue without activation), or with
 * from_output = 1 Y = act(Z) itself (relu, tanh, sigmoid without Res):
 *   relu: Z > 0 (Y > 0)      tanh: 1 - tanh(Z)^2      sigmoid: s (1 - s)
 *   silu: s + Z s (1 - s)    gelu, gelu_tanh: as GeGLUGrad's gelu', in double
 * dBias is reduced through one row of double partials per slice of rows. */

enum eact { EACT_NONE, EACT_RELU, EACT_GELU, EACT_GELU_TANH, EACT_SILU, EACT_TANH, EACT_SIGMOID };

struct mmeg {
    const void *dy, *z; /* [rows, n]; z is Y with from_y */
    void *dz;           /* [rows, n]; may be dy or z (in place) */
    double *part;       /* [parts, n] dBias partials, or NULL */
    size_t rows, n;
    enum eact act;
    bool from_y;
};

#define FU_TANH(x) _Generic((x), float: tanhf, default: tanh)(x)

/* act'(v) of one element, in T; v is Z, or Y with from_y. */
#define DEF_EPI_D(DT, sfx, T)                                                           \
    static inline T epi_d_##sfx(enum eact act, bool from_y, T v)                        \
    {                                                                                   \
        T s;                                                                            \
        double ge;                                                                      \
        switch (act) {                                                                  \
        case EACT_RELU: return v > 0 ? (T)1 : (T)0;                                     \
        case EACT_TANH: s = from_y ? v : FU_TANH(v); return 1 - s * s;                  \
        case EACT_SIGMOID: s = from_y ? v : FU_SIGMOID(v); return s * (1 - s);          \
        case EACT_SILU: s = FU_SIGMOID(v); return s + v * s * (1 - s);                  \
        case EACT_GELU: return (T)gelu_d(v, 1, &ge);                                    \
        case EACT_GELU_TANH: return (T)gelu_d(v, 2, &ge);                               \
        default: return 1;                                                              \
        }                                                                               \
    }                                                                                   \
    static void mmeg_part_##sfx(void *vc, size_t part, size_t r0, size_t r1)            \
    {                                                                                   \
        const struct mmeg *c = vc;                                                      \
        size_t n = c->n;                                                                \
        double *pb = c->part ? c->part + part * n : NULL;                               \
        if (pb)                                                                         \
            memset(pb, 0, n * sizeof(*pb));                                             \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *dy = (const T *)c->dy + r * n, *z = (const T *)c->z + r * n;       \
            T *dz = (T *)c->dz + r * n;                                                 \
            for (size_t j = 0; j < n; j++) {                                            \
                T d = dy[j] * epi_d_##sfx(c->act, c->from_y, z[j]);                     \
                if (pb)                                                                 \
                    pb[j] += (double)d;                                                 \
                dz[j] = d;                                                              \
            }                                                                           \
        }                                                                               \
    }

FG_TYPES(DEF_EPI_D)

#define MMEG_ENTRY(DT, sfx, T) [DT] = mmeg_part_##sfx,
static const fu_part_fn mmeg_parts[GF_DTYPE_COUNT] = {FG_TYPES(MMEG_ENTRY)};

/* The checks (kernels/checks.c, the rule in graph/opcheck.c). */
static enum gf_status mmeg_check(const struct gf_kernel_args *a, struct mmeg *c)
{
    struct gf_mme_grad_rule r;
    enum gf_status st = gf_mme_grad_check(a, &r);
    c->act = (enum eact)r.act; /* the order of gf_mme_act_names */
    c->from_y = r.from_y;
    return st;
}

/* ws = [dBias partials: threads x n doubles] */
static size_t mmeg_workspace(const struct gf_kernel_args *a)
{
    if (a->n_in < 1 || a->in[0].rank < 1 || !fu_has_out(a, 1))
        return 0;
    return (size_t)a->in[0].dims[a->in[0].rank - 1] * (size_t)fu_threads(a) * sizeof(double);
}

static enum gf_status mmeg_run(const struct gf_kernel_args *a)
{
    struct mmeg c = {0};
    enum gf_status st = mmeg_check(a, &c);
    if (st != GF_OK)
        return st;
    const struct gf_tview *dy = &a->in[0];
    double beta = gf_node_attr_float(a->node, "beta", 1.0f);
    c.n = (size_t)dy->dims[dy->rank - 1];
    c.rows = c.n ? dy->nelem / c.n : 0;
    if (c.n == 0)
        return GF_OK;
    bool want_db = fu_has_out(a, 1);
    if (want_db && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the dBias partials");
    c.dy = dy->data, c.z = a->in[1].data, c.dz = a->out[0].data;
    c.part = want_db ? a->workspace : NULL;
    size_t parts = 0;
    if (c.rows)
        parts = fu_run_parts(fu_threads(a), c.rows, c.n, mmeg_parts[dy->dtype], &c);
    for (size_t j = 0; want_db && j < c.n; j++) {
        double s = 0;
        for (size_t p = 0; p < parts; p++)
            s += c.part[p * c.n + j];
        fu_put(a->out[1].data, dy->dtype, j, beta * s);
    }
    return GF_OK;
}

/* ==== CrossEntropyGrad =======================================================
 * dL = G dLoss, G being SoftmaxCrossEntropy's gradient for a unit upstream
 * gradient (its output 2).  reduction "mean" / "sum": dLoss is a scalar.
 * "none": each position's row is scaled by its own dLoss: shift=0, G [N, C,
 * d...] and dLoss [N, d...]; shift=1, G [B, S, C] and dLoss [B*(S-1)], row
 * (b, s) by dLoss[b*(S-1) + s], the last row of each batch (no position,
 * zeros in G) copied. */

struct ceg {
    const void *g, *dl; /* G; dLoss */
    void *out;          /* like G; may be G (in place) */
    bool none, shift;
    size_t c, d, s;     /* classes; positions per class plane (shift=0); S (shift=1) */
};

#define DEF_CE_SCALE(DT, sfx, T)                                                        \
    static void ceg_##sfx(void *vc, size_t b, size_t e)                                 \
    {                                                                                   \
        const struct ceg *c = vc;                                                       \
        const T *g = c->g, *dl = c->dl;                                                 \
        T *o = c->out;                                                                  \
        if (!c->none) {                                                                 \
            T k = dl[0];                                                                \
            for (size_t i = b; i < e; i++)                                              \
                o[i] = g[i] * k;                                                        \
        } else if (c->shift) {                                                          \
            for (size_t i = b; i < e; i++) {                                            \
                size_t r = i / c->c, bt = r / c->s, st = r % c->s;                      \
                o[i] = st + 1 == c->s ? g[i] : g[i] * dl[bt * (c->s - 1) + st];         \
            }                                                                           \
        } else {                                                                        \
            for (size_t i = b; i < e; i++)                                              \
                o[i] = g[i] * dl[i / (c->c * c->d) * c->d + i % c->d];                  \
        }                                                                               \
    }

FG_TYPES(DEF_CE_SCALE)

#define CEG_ENTRY(DT, sfx, T) [DT] = ceg_##sfx,
static const range_fn ceg_fns[GF_DTYPE_COUNT] = {FG_TYPES(CEG_ENTRY)};

/* The checks (kernels/checks.c, the rule in graph/opcheck.c), and G's
 * geometry: C classes, S steps, D positions per class plane (none). */
static enum gf_status ceg_check(const struct gf_kernel_args *a, struct ceg *c)
{
    const struct gf_tview *g = &a->in[1];
    struct gf_ceg_rule r;
    enum gf_status st = gf_ce_grad_check(a, &r);
    if (st != GF_OK)
        return st;
    c->none = r.ce.red == GF_RED_NONE;
    c->shift = r.ce.shift;
    c->c = (size_t)g->dims[c->shift ? 2 : 1];
    c->s = (size_t)g->dims[1];
    c->d = c->none && !c->shift ? gf_dims_prod(g->dims, 2, g->rank) : 1;
    return GF_OK;
}

static enum gf_status ceg_run(const struct gf_kernel_args *a)
{
    struct ceg c = {0};
    enum gf_status st = ceg_check(a, &c);
    if (st != GF_OK || a->in[1].nelem == 0)
        return st;
    c.g = a->in[1].data, c.dl = a->in[0].data, c.out = a->out[0].data;
    gf_parallel_for(fu_threads(a), a->in[1].nelem, FU_GRAIN, ceg_fns[a->in[1].dtype], &c);
    return GF_OK;
}

/* ==== JSDGrad ================================================================
 * The gradient of JSD (X = log Q, Y = log P, rows over the last axis, the
 * loss the mean over the rows counted) times dLoss: with c = dLoss / rows
 * counted, on a counted row (ignored rows get zeros)
 *   beta 0 (KL(P || Q)):  dX = -c P,                dY = c P (Y - X + 1)
 *   beta 1 (KL(Q || P)):  dX = c Q (X - Y + 1),     dY = -c Q
 *   else, M = beta P + (1 - beta) Q:
 *                         dX = c (1 - beta) Q (X - log M),  dY = c beta P (Y - log M)
 * A zero probability contributes nothing (0 log 0 = 0), as in the forward. */

struct jsdg {
    const void *x, *y;        /* [rows, n] */
    void *dx, *dy;            /* [rows, n]; either may be NULL */
    const struct gf_tview *t; /* [rows] labels, or NULL */
    int64_t ii;
    size_t n;
    double beta, c;
};

#define DEF_JSD_GRAD(DT, sfx, T)                                                        \
    FU_HOT static void jsdg_row_##sfx(const struct jsdg *g, const T *x, const T *y,    \
                                      T *dx, T *dy)                                     \
    {                                                                                   \
        T c = (T)g->c, b = (T)g->beta, b1 = (T)(1 - g->beta);                           \
        for (size_t j = 0; j < g->n; j++) {                                             \
            T p = FU_EXP(y[j]), q = FU_EXP(x[j]), gx, gy;                               \
            if (g->beta == 0) {                                                         \
                gx = -p;                                                                \
                gy = p > 0 ? p * (y[j] - x[j] + 1) : 0;                                 \
            } else if (g->beta == 1) {                                                  \
                gx = q > 0 ? q * (x[j] - y[j] + 1) : 0;                                 \
                gy = -q;                                                                \
            } else {                                                                    \
                T lm = FU_LOG(b * p + b1 * q);                                          \
                gx = q > 0 ? b1 * q * (x[j] - lm) : 0;                                  \
                gy = p > 0 ? b * p * (y[j] - lm) : 0;                                   \
            }                                                                           \
            if (dx)                                                                     \
                dx[j] = c * gx;                                                         \
            if (dy)                                                                     \
                dy[j] = c * gy;                                                         \
        }                                                                               \
    }                                                                                   \
    static void jsdg_##sfx(void *vg, size_t r0, size_t r1)                              \
    {                                                                                   \
        const struct jsdg *g = vg;                                                      \
        for (size_t r = r0; r < r1; r++) {                                              \
            size_t o = r * g->n;                                                        \
            T *dx = g->dx ? (T *)g->dx + o : NULL, *dy = g->dy ? (T *)g->dy + o : NULL; \
            if (g->t && fu_label(g->t, r) == g->ii) {                                   \
                for (size_t j = 0; j < g->n; j++) {                                     \
                    if (dx)                                                             \
                        dx[j] = 0;                                                      \
                    if (dy)                                                             \
                        dy[j] = 0;                                                      \
                }                                                                       \
                continue;                                                               \
            }                                                                           \
            jsdg_row_##sfx(g, (const T *)g->x + o, (const T *)g->y + o, dx, dy);        \
        }                                                                               \
    }

FG_TYPES(DEF_JSD_GRAD)

#define JSDG_ENTRY(DT, sfx, T) [DT] = jsdg_##sfx,
static const range_fn jsdg_fns[GF_DTYPE_COUNT] = {FG_TYPES(JSDG_ENTRY)};

static enum gf_status jsdg_run(const struct gf_kernel_args *a)
{
    struct jsdg g = {0};
    float beta;
    enum gf_status st = gf_jsd_grad_check(a, &beta, &g.ii); /* kernels/checks.c */
    if (st != GF_OK)
        return st;
    g.beta = beta;
    g.t = fu_has(a, 3) ? &a->in[3] : NULL;
    const struct gf_tview *x = &a->in[1];
    g.n = (size_t)x->dims[x->rank - 1];
    size_t rows = 1;
    for (int i = 0; i < x->rank - 1; i++)
        rows *= (size_t)x->dims[i];
    double counted = 0;
    for (size_t r = 0; r < rows; r++)
        counted += !(g.t && fu_label(g.t, r) == g.ii);
    g.c = fu_get(&a->in[0], 0) / counted;
    g.x = x->data, g.y = a->in[2].data;
    g.dx = fu_has_out(a, 0) ? a->out[0].data : NULL;
    g.dy = fu_has_out(a, 1) ? a->out[1].data : NULL;
    if (g.n && rows)
        gf_parallel_for(fu_threads(a), rows, fu_grain(g.n), jsdg_fns[x->dtype], &g);
    return GF_OK;
}

/* ==== the table ============================================================== */

#define KERNEL(OP, RUN, WS)                                                             \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "fused-grad",   \
     .supports = fg_supports, .workspace = WS, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM_GRAD, rms_grad_run, rms_workspace),
    KERNEL(SWIGLU_GRAD, glu_grad_run, NULL),
    KERNEL(GEGLU_GRAD, glu_grad_run, NULL),
    KERNEL(ROPE_GRAD, rope_grad_run, NULL),
    KERNEL(LAYER_NORM_GRAD, ln_grad_run, ln_workspace),
    KERNEL(MATMUL_EPILOGUE_GRAD, mmeg_run, mmeg_workspace),
    KERNEL(CROSS_ENTROPY_GRAD, ceg_run, NULL),
    KERNEL(JSD_GRAD, jsdg_run, NULL),
};

const struct gf_kernel_table gf_cpu_fused_grad_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
