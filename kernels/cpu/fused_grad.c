/* CPU kernels of the fused backward ops (domain graphfuse, README "Training",
 * "Fused backward ops"), written by passes/grad_rules_fused.c:
 *
 *   RMSNormGrad  dY, X, W?  -> dX, dW?   (RMSNorm, AddRMSNorm: X is S there)
 *   SwiGLUGrad   dY, G, U   -> dG, dU
 *   GeGLUGrad    dY, G, U   -> dG, dU    (approximate "none" / "tanh")
 *   RoPEGrad     dY, Cos, Sin -> dX
 *
 * float and double (the rules keep fp16 / bf16 on the fallback).  Nothing
 * is stored by the forward: r = 1/rms, sigmoid and gelu are recomputed
 * from the row / element.  Row sums are accumulated in double (FU_LANES
 * lanes, so they vectorize); dW is reduced through one row of double
 * partial sums per slice of rows (the workspace), then summed in slice
 * order, so the result does not depend on the thread count's scheduling
 * and no [rows, n] temporary exists.
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
 *   dX = r g - k x,  k = -2 dr/dms * sum(g x) / n
 *   dW = sum over rows of dY x r
 * eps outside with an all-zero row: k = 0 (the derivative of sqrt at 0 is
 * infinite; sum(g x) is 0 there, so this is the limit along the row). */

struct rmsg {
    const void *dy, *x; /* [rows, n] */
    void *dx;           /* [rows, n] */
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
            for (size_t j = 0; j < n; j++)                                              \
                dx[j] = rt * (dy[j] * w[j]) - kt * x[j];                                \
            if (pw)                                                                     \
                for (size_t j = 0; j < n; j++)                                          \
                    pw[j] += (double)dy[j] * ((double)x[j] * rr);                       \
        }                                                                               \
    }

FG_TYPES(DEF_RMS_GRAD)

#define RMS_ENTRY(DT, sfx, T) [DT] = rms_part_##sfx,
static const fu_part_fn rms_parts[GF_DTYPE_COUNT] = {FG_TYPES(RMS_ENTRY)};

/* The normalized block X.shape[axis:] of input 1 (X). */
static enum gf_status rms_block(const struct gf_kernel_args *a, int *brank, size_t *n)
{
    const struct gf_tview *x = &a->in[1];
    int64_t axis = gf_node_attr_int(a->node, "axis", -1);
    int ax;
    if (!fu_axis(axis, x->rank, &ax))
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %lld is out of range for X of rank %d",
                               (long long)axis, x->rank);
    *brank = x->rank - ax;
    *n = 1;
    for (int i = ax; i < x->rank; i++)
        *n *= (size_t)x->dims[i];
    return GF_OK;
}

/* Attributes as the forward's: epsilon >= 0, eps_outside 0/1, weight_offset
 * finite and 0 without W. */
static enum gf_status rms_attrs(const struct gf_kernel_args *a, struct rmsg *c, double *off)
{
    c->eps = gf_node_attr_float(a->node, "epsilon", 1e-6f);
    int64_t outside = gf_node_attr_int(a->node, "eps_outside", 0);
    *off = gf_node_attr_float(a->node, "weight_offset", 0.0f);
    if (!(c->eps >= 0) || isinf(c->eps))
        return gf_kernel_error(a, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", c->eps);
    if (outside != 0 && outside != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "eps_outside %lld must be 0 or 1",
                               (long long)outside);
    if (!isfinite(*off) || (*off != 0 && !fu_has(a, 2)))
        return gf_kernel_error(a, GF_ERR_INVALID, "weight_offset %g needs a finite value and W",
                               *off);
    c->eps_outside = outside;
    return GF_OK;
}

static enum gf_status rms_check(const struct gf_kernel_args *a, struct rmsg *c, double *off,
                                int *brank)
{
    const struct gf_tview *x = &a->in[1];
    enum gf_status st = fu_check_in(a, 1, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = fu_check_in(a, 0, "dY", x->dtype);
    if (st == GF_OK && !fu_same_shape(&a->in[0], x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY %s must have X's shape %s",
                             FU_SHAPE(&a->in[0]), FU_SHAPE(x));
    if (st == GF_OK)
        st = rms_block(a, brank, &c->n);
    if (st == GF_OK && fu_has(a, 2) && (st = fu_check_in(a, 2, "W", x->dtype)) == GF_OK &&
        !fu_bcasts_to(&a->in[2], *brank, x->dims + x->rank - *brank))
        st = gf_kernel_error(a, GF_ERR_INVALID, "W %s does not broadcast to the normalized dims",
                             FU_SHAPE(&a->in[2]));
    if (st == GF_OK)
        st = rms_attrs(a, c, off);
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    if (st == GF_OK && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, *brank, x->dims + x->rank - *brank);
    return st;
}

/* ws = [W + offset: n, compute type][partials: threads x n doubles] */
static size_t rms_workspace(const struct gf_kernel_args *a)
{
    int brank;
    size_t n;
    if (a->n_in < 2 || rms_block(a, &brank, &n) != GF_OK)
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

static enum gf_status glu_kind(const struct gf_kernel_args *a, int *kind)
{
    *kind = 0;
    if (a->node->op == GF_OP_SWIGLU_GRAD)
        return GF_OK;
    const char *ap = gf_node_attr_string(a->node, "approximate", "none");
    if (strcmp(ap, "none") && strcmp(ap, "tanh"))
        return gf_kernel_error(a, GF_ERR_INVALID, "approximate '%s' is not none or tanh", ap);
    *kind = strcmp(ap, "none") == 0 ? 1 : 2;
    return GF_OK;
}

static enum gf_status glu_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *dy = &a->in[0];
    static const char *const names[3] = {"dY", "G", "U"};
    struct glug c = {0};
    enum gf_status st = glu_kind(a, &c.kind);
    for (size_t i = 0; i < 3 && st == GF_OK; i++)
        if ((st = fu_check_in(a, i, names[i], dy->dtype)) == GF_OK &&
            !fu_same_shape(&a->in[i], dy->rank, dy->dims))
            st = gf_kernel_error(a, GF_ERR_INVALID, "%s %s must have dY's shape %s", names[i],
                                 FU_SHAPE(&a->in[i]), FU_SHAPE(dy));
    for (size_t k = 0; k < 2 && st == GF_OK; k++)
        if (fu_has_out(a, k))
            st = fu_check_out(a, k, dy->dtype, dy->rank, dy->dims);
    if (st != GF_OK)
        return st;
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
    static const char *const names[3] = {"dY", "Cos", "Sin"};
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < 3 && st == GF_OK; i++)
        if ((st = fu_check_in(a, i, names[i], dy->dtype)) == GF_OK && i &&
            !fu_bcasts_to(&a->in[i], dy->rank, dy->dims))
            st = gf_kernel_error(a, GF_ERR_INVALID, "%s %s does not broadcast to dY %s",
                                 names[i], FU_SHAPE(&a->in[i]), FU_SHAPE(dy));
    if (st == GF_OK && (dy->rank == 0 || dy->dims[dy->rank - 1] % 2))
        st = gf_kernel_error(a, GF_ERR_INVALID, "dY %s needs a last axis of even length",
                             FU_SHAPE(dy));
    if (st == GF_OK)
        st = fu_check_out(a, 0, dy->dtype, dy->rank, dy->dims);
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

/* ==== the table ============================================================== */

#define KERNEL(OP, RUN, WS)                                                             \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "fused-grad",   \
     .supports = fg_supports, .workspace = WS, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM_GRAD, rms_grad_run, rms_workspace),
    KERNEL(SWIGLU_GRAD, glu_grad_run, NULL),
    KERNEL(GEGLU_GRAD, glu_grad_run, NULL),
    KERNEL(ROPE_GRAD, rope_grad_run, NULL),
};

const struct gf_kernel_table gf_cpu_fused_grad_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
