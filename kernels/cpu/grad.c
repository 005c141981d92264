/*
 * CPU kernels: the backward ops the autodiff pass writes (graph/ops.def,
 * "backward ops"; definitions in README.md, "Autodiff").
 *
 *   SumToShape                                   broadcast reduction
 *   ReluGrad SigmoidGrad TanhGrad GeluGrad       elementwise, same shapes
 *   DropoutGrad
 *   SoftmaxGrad LogSoftmaxGrad                   along one axis
 *   GatherGrad GatherElementsGrad SliceGrad      scatter(-add) into zeros
 *   LayerNormalizationGrad                       rows of the trailing block
 *   SoftmaxCrossEntropyLossGrad NLLLossGrad      scores [N, C, d...]
 *
 * fp32 and double, accumulating in double.  Each typed loop is stamped out
 * from one macro per type (GRAD_TYPES); the drivers around them check
 * shapes, name the node in errors and split rows over gf_parallel_for.
 * Nothing allocates: LayerNormalizationGrad's per-thread partial sums of
 * dScale / dBias live in its declared workspace.
 */
#include <stdint.h>

#include "cpu.h"

#define GRAIN 16384 /* elements worth a thread */
#define MAXT 64     /* threads, as gf_parallel_for */
#define BLK 64      /* neighbouring outputs summed side by side */

#define GRAD_TYPES(X) X(f32, float) X(f64, double)

/* ---- shared helpers ------------------------------------------------------ */

static bool is_fp(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE;
}

static bool fp_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && is_fp(in[0].dtype);
}

static int threads(const struct gf_kernel_args *a)
{
    return a->n_threads < 1 ? 1 : a->n_threads > MAXT ? MAXT : a->n_threads;
}

static size_t grain_for(size_t cost)
{
    return cost >= GRAIN ? 1 : GRAIN / (cost ? cost : 1);
}

static int64_t idx_at(const struct gf_tview *t, size_t i)
{
    return t->dtype == GF_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static bool is_index(const struct gf_tview *t)
{
    return (t->dtype == GF_INT32 || t->dtype == GF_INT64) && (t->data || !t->nelem);
}

static const struct gf_tview *opt_in(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_in && a->in[i].data ? &a->in[i] : NULL;
}

static enum gf_status need_in(const struct gf_kernel_args *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (i >= a->n_in || (!a->in[i].data && a->in[i].nelem))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is missing", i);
    return GF_OK;
}

/* Output k must be of x's dtype with n elements. */
static enum gf_status check_out(const struct gf_kernel_args *a, size_t k, enum gf_dtype dt,
                                size_t n)
{
    const struct gf_tview *o = &a->out[k];
    if (o->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is %s, expected %s", k,
                               gf_dtype_name(o->dtype), gf_dtype_name(dt));
    if (o->nelem != n)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has %zu elements, expected %zu",
                               k, o->nelem, n);
    return GF_OK;
}

static enum gf_status same_type(const struct gf_kernel_args *a, size_t i, enum gf_dtype dt)
{
    if (a->in[i].dtype == dt)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "input %zu is %s, expected %s", i,
                           gf_dtype_name(a->in[i].dtype), gf_dtype_name(dt));
}

/* ==== SumToShape ============================================================ */

/* X's axes merged into runs that are all kept (target dim = X dim) or all
 * reduced (target dim 1 or absent); size-1 axes dropped.  The last kept
 * run, when it is X's innermost axis, is summed BLK outputs side by side;
 * the others are walked by an odometer. */
struct s2s_ctx {
    const void *x;
    void *y;
    int nk, nr;                     /* outer kept runs, reduced runs */
    size_t kd[GF_MAX_RANK], ks[GF_MAX_RANK]; /* kept: dims, X strides */
    size_t rd[GF_MAX_RANK], rs[GF_MAX_RANK]; /* reduced: dims, X strides */
    size_t inner;  /* length of the innermost kept run (1: innermost is reduced) */
    size_t blocks; /* ceil(inner / BLK) */
};

/* X offset of outer kept index o (kept runs, row-major). */
static size_t s2s_base(const struct s2s_ctx *c, size_t o)
{
    size_t off = 0;
    for (int i = c->nk - 1; i >= 0; i--) {
        off += (o % c->kd[i]) * c->ks[i];
        o /= c->kd[i];
    }
    return off;
}

#define DEF_S2S(sfx, T)                                                                    \
    static void s2s_items_##sfx(void *vc, size_t b, size_t e)                            \
    {                                                                                     \
        const struct s2s_ctx *c = vc;                                                     \
        const T *x = c->x;                                                                \
        T *y = c->y;                                                                      \
        size_t idx[GF_MAX_RANK];                                                          \
        for (size_t it = b; it < e; it++) {                                               \
            size_t o = it / c->blocks, j0 = it % c->blocks * BLK;                         \
            size_t jn = c->inner - j0 < BLK ? c->inner - j0 : BLK;                        \
            size_t base = s2s_base(c, o) + j0;                                            \
            double acc[BLK] = {0};                                                        \
            memset(idx, 0, sizeof(idx));                                                  \
            for (size_t off = 0;;) {                                                      \
                const T *p = x + base + off;                                              \
                if (c->inner == 1 && c->nr > 0 && c->rs[c->nr - 1] == 1) {                \
                    double s = 0; /* innermost reduced run: contiguous */                 \
                    for (size_t t = 0; t < c->rd[c->nr - 1]; t++)                         \
                        s += p[t];                                                        \
                    acc[0] += s;                                                          \
                    idx[c->nr - 1] = c->rd[c->nr - 1] - 1; /* as if walked */             \
                    off += c->rd[c->nr - 1] - 1;                                          \
                } else {                                                                  \
                    for (size_t j = 0; j < jn; j++)                                       \
                        acc[j] += p[j];                                                   \
                }                                                                         \
                int d = c->nr - 1; /* odometer over the reduced runs */                   \
                for (; d >= 0; d--) {                                                     \
                    if (++idx[d] < c->rd[d]) {                                            \
                        off += c->rs[d];                                                  \
                        break;                                                            \
                    }                                                                     \
                    off -= (c->rd[d] - 1) * c->rs[d];                                     \
                    idx[d] = 0;                                                           \
                }                                                                         \
                if (d < 0)                                                                \
                    break;                                                                \
            }                                                                             \
            for (size_t j = 0; j < jn; j++)                                               \
                y[o * c->inner + j0 + j] = (T)acc[j];                                     \
        }                                                                                 \
    }
GRAD_TYPES(DEF_S2S)

/* Fills c from X's shape and the target's; false when they do not fit. */
static bool s2s_plan(const struct gf_tview *x, const struct gf_tview *y, struct s2s_ctx *c)
{
    int lead = x->rank - y->rank, last = -1; /* kind of the previous run: 0 kept, 1 reduced */
    size_t stride = 1, sd[GF_MAX_RANK], kind[GF_MAX_RANK], n = 0;
    size_t dims[GF_MAX_RANK];
    if (lead < 0)
        return false;
    for (int i = x->rank - 1; i >= 0; i--) { /* innermost first */
        int64_t xd = x->dims[i], td = i >= lead ? y->dims[i - lead] : 1;
        if (td != xd && td != 1)
            return false;
        if (xd != 1) {
            int k = td == xd ? 0 : 1;
            if (last == k) {
                dims[n - 1] *= (size_t)xd;
            } else {
                dims[n] = (size_t)xd, sd[n] = stride, kind[n] = (size_t)k;
                n++;
            }
            last = k;
        }
        stride *= (size_t)xd;
    }
    c->nk = c->nr = 0;
    c->inner = n > 0 && kind[0] == 0 ? dims[0] : 1;
    for (size_t r = n; r-- > (c->inner > 1 ? 1 : 0);) { /* outermost first */
        if (kind[r] == 0)
            c->kd[c->nk] = dims[r], c->ks[c->nk++] = sd[r];
        else
            c->rd[c->nr] = dims[r], c->rs[c->nr++] = sd[r];
    }
    c->blocks = (c->inner + BLK - 1) / BLK;
    return true;
}

static enum gf_status s2s_run(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 2);
    if (st != GF_OK || (st = gf_check_shape_input(a, 1)) != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    struct s2s_ctx c = {.x = x->data, .y = y->data};
    if ((st = check_out(a, 0, x->dtype, y->nelem)) != GF_OK)
        return st;
    if (!s2s_plan(x, y, &c))
        return gf_kernel_error(a, GF_ERR_INVALID, "input 0 of rank %d cannot be summed to the "
                               "rank-%d target shape", x->rank, y->rank);
    if (y->nelem == 0)
        return GF_OK;
    if (x->nelem == 0) {
        memset(y->data, 0, gf_tview_bytes(y));
        return GF_OK;
    }
    size_t items = y->nelem / c.inner * c.blocks, per = x->nelem / (items ? items : 1);
    gf_parallel_for(threads(a), items, grain_for(per),
                    x->dtype == GF_FLOAT ? s2s_items_f32 : s2s_items_f64, &c);
    return GF_OK;
}

/* ==== elementwise gradients ================================================== */

struct ew_ctx {
    const void *g, *v; /* dY, and Y or X */
    void *dx;
    int approx;        /* GeluGrad: tanh form */
    double scale;      /* DropoutGrad */
    enum gf_dtype mask_dt;
};

/* dx = g * f(v) for the four activation gradients. */
#define EW_LOOP(name, sfx, T, EXPR)                                                       \
    static void name##_##sfx(void *vc, size_t b, size_t e)                               \
    {                                                                                    \
        const struct ew_ctx *c = vc;                                                     \
        const T *g = c->g, *v = c->v;                                                    \
        T *dx = c->dx;                                                                   \
        for (size_t i = b; i < e; i++) {                                                 \
            double y = v[i];                                                             \
            (void)y;                                                                     \
            dx[i] = (T)(EXPR);                                                           \
        }                                                                                \
    }

/* gelu'(x) = Phi(x) + x phi(x); tanh form: d/dx of x/2 (1 + tanh(u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3) */
static double gelu_grad(double x, int approx)
{
    if (approx) {
        const double k = 0.7978845608028654, c = 0.044715;
        double t = tanh(k * (x + c * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    }
    return 0.5 * (1 + erf(x * 0.7071067811865476)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}

#define DEF_EW(sfx, T)                                                                    \
    EW_LOOP(relu_grad, sfx, T, y > 0 ? (double)g[i] : 0.0)                               \
    EW_LOOP(sigmoid_grad, sfx, T, g[i] * y * (1 - y))                                    \
    EW_LOOP(tanh_grad, sfx, T, g[i] * (1 - y * y))                                       \
    EW_LOOP(gelu_grad, sfx, T, g[i] * gelu_grad(y, c->approx))
GRAD_TYPES(DEF_EW)

typedef void (*range_fn)(void *, size_t, size_t);

static range_fn ew_fn(enum gf_op op, bool f32)
{
    switch (op) {
    case GF_OP_RELU_GRAD: return f32 ? relu_grad_f32 : relu_grad_f64;
    case GF_OP_SIGMOID_GRAD: return f32 ? sigmoid_grad_f32 : sigmoid_grad_f64;
    case GF_OP_TANH_GRAD: return f32 ? tanh_grad_f32 : tanh_grad_f64;
    default: return f32 ? gelu_grad_f32 : gelu_grad_f64;
    }
}

/* dY and its partner (input 1) of one dtype and element count. */
static enum gf_status ew_check(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 2);
    if (st != GF_OK || (st = same_type(a, 1, a->in[0].dtype)) != GF_OK ||
        (st = check_out(a, 0, a->in[0].dtype, a->in[0].nelem)) != GF_OK)
        return st;
    if (a->in[1].nelem != a->in[0].nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 1 has %zu elements, the gradient %zu",
                               a->in[1].nelem, a->in[0].nelem);
    return GF_OK;
}

static enum gf_status ew_run(const struct gf_kernel_args *a)
{
    enum gf_status st = ew_check(a);
    if (st != GF_OK)
        return st;
    struct ew_ctx c = {.g = a->in[0].data, .v = a->in[1].data, .dx = a->out[0].data};
    if (a->node->op == GF_OP_GELU_GRAD) {
        const char *ap = gf_node_attr_string(a->node, "approximate", "none");
        c.approx = strcmp(ap, "tanh") == 0;
        if (!c.approx && strcmp(ap, "none") != 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "approximate='%s' is neither 'none' nor "
                                   "'tanh'", ap);
    }
    gf_parallel_for(threads(a), a->in[0].nelem, GRAIN,
                    ew_fn(a->node->op, a->in[0].dtype == GF_FLOAT), &c);
    return GF_OK;
}

/* ---- DropoutGrad(dY, mask, ratio?, training_mode?) ---------------------------- */

#define DEF_DROP(sfx, T)                                                                  \
    static void dropout_grad_##sfx(void *vc, size_t b, size_t e)                         \
    {                                                                                    \
        const struct ew_ctx *c = vc;                                                     \
        const T *g = c->g;                                                               \
        T *dx = c->dx;                                                                   \
        for (size_t i = b; i < e; i++) {                                                 \
            bool keep = c->mask_dt == GF_BOOL     ? ((const uint8_t *)c->v)[i] != 0      \
                        : c->mask_dt == GF_FLOAT  ? ((const float *)c->v)[i] != 0        \
                                                  : ((const double *)c->v)[i] != 0;      \
            dx[i] = keep ? (T)(g[i] * c->scale) : (T)0;                                  \
        }                                                                                \
    }
GRAD_TYPES(DEF_DROP)

static enum gf_status dropout_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *g = &a->in[0], *m = &a->in[1];
    const struct gf_tview *r = opt_in(a, 2), *t = opt_in(a, 3);
    enum gf_status st = need_in(a, 2);
    if (st != GF_OK || (st = check_out(a, 0, g->dtype, g->nelem)) != GF_OK)
        return st;
    if (m->nelem != g->nelem || (m->dtype != GF_BOOL && !is_fp(m->dtype)))
        return gf_kernel_error(a, GF_ERR_INVALID, "mask (input 1) must be bool or float with "
                               "%zu elements", g->nelem);
    double ratio = gf_node_attr_float(a->node, "ratio", 0.5f);
    if (r && (!is_fp(r->dtype) || r->nelem != 1))
        return gf_kernel_error(a, GF_ERR_INVALID, "ratio (input 2) must be a float scalar");
    if (r)
        ratio = r->dtype == GF_FLOAT ? *(const float *)r->data : *(const double *)r->data;
    if (t && (t->dtype != GF_BOOL || t->nelem != 1))
        return gf_kernel_error(a, GF_ERR_INVALID, "training_mode (input 3) must be a bool");
    bool train = !t || *(const uint8_t *)t->data;
    if (train && !(ratio >= 0 && ratio < 1))
        return gf_kernel_error(a, GF_ERR_INVALID, "ratio %g is outside [0, 1)", ratio);
    if (!train) {
        memmove(a->out[0].data, g->data, gf_tview_bytes(g));
        return GF_OK;
    }
    struct ew_ctx c = {.g = g->data, .v = m->data, .dx = a->out[0].data,
                       .scale = 1.0 / (1.0 - ratio), .mask_dt = m->dtype};
    gf_parallel_for(threads(a), g->nelem, GRAIN,
                    g->dtype == GF_FLOAT ? dropout_grad_f32 : dropout_grad_f64, &c);
    return GF_OK;
}

/* ==== SoftmaxGrad LogSoftmaxGrad ============================================== */

/* Lines along the axis: [outer, n, inner], line l = (l / inner, l % inner). */
struct smx_ctx {
    const void *g, *y;
    void *dx;
    size_t n, inner;
    bool log;
};

/* softmax: dx = y (g - sum(g y)); log-softmax: dx = g - exp(y) sum(g) */
#define DEF_SMX(sfx, T)                                                                   \
    static void smx_lines_##sfx(void *vc, size_t b, size_t e)                            \
    {                                                                                    \
        const struct smx_ctx *c = vc;                                                    \
        for (size_t l = b; l < e; l++) {                                                 \
            size_t base = l / c->inner * c->n * c->inner + l % c->inner, s = c->inner;   \
            const T *g = (const T *)c->g + base, *y = (const T *)c->y + base;            \
            T *dx = (T *)c->dx + base;                                                   \
            double sum = 0;                                                              \
            for (size_t j = 0; j < c->n; j++)                                            \
                sum += c->log ? (double)g[j * s] : (double)g[j * s] * y[j * s];          \
            for (size_t j = 0; j < c->n; j++)                                            \
                dx[j * s] = c->log ? (T)(g[j * s] - exp((double)y[j * s]) * sum)         \
                                   : (T)(y[j * s] * (g[j * s] - sum));                   \
        }                                                                                \
    }
GRAD_TYPES(DEF_SMX)

static enum gf_status smx_run(const struct gf_kernel_args *a)
{
    enum gf_status st = ew_check(a);
    const struct gf_tview *g = &a->in[0];
    int ax = 0;
    if (st != GF_OK || (st = gf_axis_attr(a, -1, g->rank, &ax)) != GF_OK)
        return st;
    if (a->in[1].rank != g->rank || memcmp(a->in[1].dims, g->dims, sizeof(int64_t) * g->rank))
        return gf_kernel_error(a, GF_ERR_INVALID, "Y (input 1) and dY differ in shape");
    struct smx_ctx c = {.g = g->data, .y = a->in[1].data, .dx = a->out[0].data,
                        .n = (size_t)g->dims[ax], .inner = gf_dims_prod(g->dims, ax + 1, g->rank),
                        .log = a->node->op == GF_OP_LOG_SOFTMAX_GRAD};
    size_t lines = c.n ? g->nelem / c.n : 0;
    gf_parallel_for(threads(a), lines, grain_for(2 * c.n),
                    g->dtype == GF_FLOAT ? smx_lines_f32 : smx_lines_f64, &c);
    return GF_OK;
}

/* ==== GatherGrad ============================================================== */

/* out [pre, N, post] = 0; out[p, idx[i], q] += g[p, i, q].  Items are
 * (p, block of q): each owns its output columns, so threads never race. */
struct gg_ctx {
    const void *g;
    void *out;
    const struct gf_tview *idx;
    size_t pre, n, post, ni, qblocks;
};

#define DEF_GG(sfx, T)                                                                    \
    static void gg_items_##sfx(void *vc, size_t b, size_t e)                             \
    {                                                                                    \
        const struct gg_ctx *c = vc;                                                     \
        for (size_t it = b; it < e; it++) {                                              \
            size_t p = it / c->qblocks, q0 = it % c->qblocks * BLK;                      \
            size_t qn = c->post - q0 < BLK ? c->post - q0 : BLK;                         \
            for (size_t i = 0; i < c->ni; i++) {                                         \
                int64_t k = idx_at(c->idx, i);                                           \
                k = k < 0 ? k + (int64_t)c->n : k;                                       \
                const T *src = (const T *)c->g + (p * c->ni + i) * c->post + q0;         \
                T *dst = (T *)c->out + (p * c->n + (size_t)k) * c->post + q0;            \
                for (size_t q = 0; q < qn; q++)                                          \
                    dst[q] += src[q];                                                    \
            }                                                                            \
        }                                                                                \
    }
GRAD_TYPES(DEF_GG)

/* Every index in [-n, n). */
static enum gf_status check_indices(const struct gf_kernel_args *a, const struct gf_tview *idx,
                                    int64_t n)
{
    if (!is_index(idx))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices (input 2) must be int32 or int64");
    for (size_t i = 0; i < idx->nelem; i++) {
        int64_t k = idx_at(idx, i);
        if (k < -n || k >= n)
            return gf_kernel_error(a, GF_ERR_INVALID, "index %lld (element %zu) is out of "
                                   "range for a dim of %lld", (long long)k, i, (long long)n);
    }
    return GF_OK;
}

static enum gf_status gg_run(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 3);
    int ax = 0;
    if (st != GF_OK || (st = gf_check_shape_input(a, 1)) != GF_OK)
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    if ((st = check_out(a, 0, g->dtype, o->nelem)) != GF_OK ||
        (st = gf_axis_attr(a, 0, o->rank, &ax)) != GF_OK ||
        (st = check_indices(a, &a->in[2], o->dims[ax])) != GF_OK)
        return st;
    struct gg_ctx c = {.g = g->data, .out = o->data, .idx = &a->in[2],
                       .pre = gf_dims_prod(o->dims, 0, ax), .n = (size_t)o->dims[ax],
                       .post = gf_dims_prod(o->dims, ax + 1, o->rank), .ni = a->in[2].nelem};
    if (g->nelem != c.pre * c.ni * c.post)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, expected %zu",
                               g->nelem, c.pre * c.ni * c.post);
    memset(o->data, 0, gf_tview_bytes(o));
    c.qblocks = (c.post + BLK - 1) / BLK;
    gf_parallel_for(threads(a), c.pre * c.qblocks, grain_for(c.ni * BLK),
                    g->dtype == GF_FLOAT ? gg_items_f32 : gg_items_f64, &c);
    return GF_OK;
}

/* ==== GatherElementsGrad ========================================================== */

/* out = 0; out[i with axis coord idx[i]] += g[i] over the index tensor's
 * elements.  Lines along the axis (in index space) write distinct data
 * lines, so they are the parallel items. */
struct ge_ctx {
    const void *g;
    void *out;
    const struct gf_tview *idx;
    int rank, ax;
    size_t n;                        /* data dim along axis */
    int64_t idims[GF_MAX_RANK];      /* index (and dY) dims */
    size_t is[GF_MAX_RANK], ds[GF_MAX_RANK]; /* index and data strides */
};

#define DEF_GE(sfx, T)                                                                    \
    static void ge_lines_##sfx(void *vc, size_t b, size_t e)                             \
    {                                                                                    \
        const struct ge_ctx *c = vc;                                                     \
        for (size_t l = b; l < e; l++) {                                                 \
            size_t ib = 0, db = 0, rem = l;                                              \
            for (int d = c->rank - 1; d >= 0; d--) {                                     \
                if (d == c->ax)                                                          \
                    continue;                                                            \
                size_t k = rem % (size_t)c->idims[d];                                    \
                rem /= (size_t)c->idims[d];                                              \
                ib += k * c->is[d];                                                      \
                db += k * c->ds[d];                                                      \
            }                                                                            \
            for (int64_t t = 0; t < c->idims[c->ax]; t++) {                              \
                size_t i = ib + (size_t)t * c->is[c->ax];                                \
                int64_t k = idx_at(c->idx, i);                                           \
                k = k < 0 ? k + (int64_t)c->n : k;                                       \
                ((T *)c->out)[db + (size_t)k * c->ds[c->ax]] += ((const T *)c->g)[i];    \
            }                                                                            \
        }                                                                                \
    }
GRAD_TYPES(DEF_GE)

static enum gf_status ge_run(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 3);
    int ax = 0;
    if (st != GF_OK || (st = gf_check_shape_input(a, 1)) != GF_OK)
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *idx = &a->in[2];
    if ((st = check_out(a, 0, g->dtype, o->nelem)) != GF_OK ||
        (st = gf_axis_attr(a, 0, o->rank, &ax)) != GF_OK ||
        (st = check_indices(a, idx, o->dims[ax])) != GF_OK)
        return st;
    bool fits = idx->rank == o->rank && g->nelem == idx->nelem;
    for (int d = 0; fits && d < o->rank; d++)
        fits = idx->dims[d] <= o->dims[d] || d == ax;
    if (!fits)
        return gf_kernel_error(a, GF_ERR_INVALID, "indices and dY must have the data's rank "
                               "and fit in its shape");
    struct ge_ctx c = {.g = g->data, .out = o->data, .idx = idx, .rank = o->rank, .ax = ax,
                       .n = (size_t)o->dims[ax]};
    size_t s1 = 1, s2 = 1;
    for (int d = o->rank - 1; d >= 0; d--) {
        c.idims[d] = idx->dims[d];
        c.is[d] = s1;
        c.ds[d] = s2;
        s1 *= (size_t)idx->dims[d];
        s2 *= (size_t)o->dims[d];
    }
    memset(o->data, 0, gf_tview_bytes(o));
    size_t len = (size_t)idx->dims[ax], lines = len ? idx->nelem / len : 0;
    gf_parallel_for(threads(a), lines, grain_for(len),
                    g->dtype == GF_FLOAT ? ge_lines_f32 : ge_lines_f64, &c);
    return GF_OK;
}

/* ==== SliceGrad ================================================================ */

/* out = 0; out[start + i * step] = g[i] per axis (the forward Slice's
 * elements, ONNX clamping).  Rows of g (all but its last axis) are items. */
struct sg_ctx {
    const void *g;
    void *out;
    int rank;
    int64_t gd[GF_MAX_RANK];
    int64_t off0;                  /* output offset of g's first element */
    int64_t step[GF_MAX_RANK];     /* output stride per step of each g axis */
};

#define DEF_SG(sfx, T)                                                                    \
    static void sg_rows_##sfx(void *vc, size_t b, size_t e)                              \
    {                                                                                    \
        const struct sg_ctx *c = vc;                                                     \
        int last = c->rank - 1;                                                          \
        size_t len = (size_t)c->gd[last];                                                \
        for (size_t r = b; r < e; r++) {                                                 \
            int64_t off = c->off0;                                                       \
            size_t rem = r;                                                              \
            for (int d = last - 1; d >= 0; d--) {                                        \
                off += (int64_t)(rem % (size_t)c->gd[d]) * c->step[d];                   \
                rem /= (size_t)c->gd[d];                                                 \
            }                                                                            \
            const T *src = (const T *)c->g + r * len;                                    \
            T *dst = c->out;                                                             \
            for (size_t j = 0; j < len; j++)                                             \
                dst[off + (int64_t)j * c->step[last]] = src[j];                          \
        }                                                                                \
    }
GRAD_TYPES(DEF_SG)

/* Start and count of a slice of a dim of n (ONNX rules, as Slice). */
static int64_t slice_span(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first)
{
    start = start < 0 ? start + n : start;
    end = end < 0 ? end + n : end;
    if (step > 0) {
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < 0 ? 0 : end > n ? n : end;
        *first = start;
        return end > start ? (end - start - 1) / step + 1 : 0;
    }
    start = start < 0 ? 0 : start > n - 1 ? n - 1 : start;
    end = end < -1 ? -1 : end > n - 1 ? n - 1 : end;
    *first = start;
    uint64_t ustep = (uint64_t)0 - (uint64_t)step;
    return start > end ? (int64_t)((uint64_t)(start - end - 1) / ustep + 1) : 0;
}

/* Per output axis: first element and step of the slice (whole axis when
 * the slice does not name it). */
static enum gf_status sg_axes(const struct gf_kernel_args *a, int64_t *first, int64_t *step)
{
    const struct gf_tview *o = &a->out[0], *st_ = &a->in[2], *en = &a->in[3];
    const struct gf_tview *axes = opt_in(a, 4), *steps = opt_in(a, 5);
    bool seen[GF_MAX_RANK] = {false};
    if (!is_index(st_) || !is_index(en) || en->nelem != st_->nelem ||
        (axes && (!is_index(axes) || axes->nelem != st_->nelem)) ||
        (steps && (!is_index(steps) || steps->nelem != st_->nelem)))
        return gf_kernel_error(a, GF_ERR_INVALID, "starts, ends, axes and steps must be "
                               "integer lists of one length");
    for (int d = 0; d < o->rank; d++)
        first[d] = 0, step[d] = 1;
    for (size_t i = 0; i < st_->nelem; i++) {
        int64_t ax = axes ? idx_at(axes, i) : (int64_t)i, sp = steps ? idx_at(steps, i) : 1;
        ax = ax < 0 ? ax + o->rank : ax;
        if (ax < 0 || ax >= o->rank || seen[ax] || sp == 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "bad axis or zero step at entry %zu", i);
        seen[ax] = true;
        step[ax] = sp;
        int64_t cnt = slice_span(o->dims[ax], idx_at(st_, i), idx_at(en, i), sp, &first[ax]);
        if (cnt != a->in[0].dims[ax])
            return gf_kernel_error(a, GF_ERR_INVALID, "the slice takes %lld elements on axis "
                                   "%lld, dY has %lld", (long long)cnt, (long long)ax,
                                   (long long)a->in[0].dims[ax]);
    }
    return GF_OK;
}

static enum gf_status sg_run(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 4);
    if (st != GF_OK || (st = gf_check_shape_input(a, 1)) != GF_OK)
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK];
    if ((st = check_out(a, 0, g->dtype, o->nelem)) != GF_OK)
        return st;
    if (g->rank != o->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has rank %d, the data %d", g->rank,
                               o->rank);
    if ((st = sg_axes(a, first, step)) != GF_OK)
        return st;
    memset(o->data, 0, gf_tview_bytes(o));
    if (g->nelem == 0)
        return GF_OK;
    struct sg_ctx c = {.g = g->data, .out = o->data, .rank = g->rank};
    int64_t stride = 1;
    for (int d = o->rank - 1; d >= 0; d--) {
        c.gd[d] = g->dims[d];
        c.off0 += first[d] * stride;
        c.step[d] = step[d] * stride;
        stride *= o->dims[d];
    }
    if (g->rank == 0) {
        memcpy(o->data, g->data, gf_tview_bytes(g));
        return GF_OK;
    }
    size_t rows = g->nelem / (size_t)g->dims[g->rank - 1];
    gf_parallel_for(threads(a), rows, grain_for((size_t)g->dims[g->rank - 1]),
                    g->dtype == GF_FLOAT ? sg_rows_f32 : sg_rows_f64, &c);
    return GF_OK;
}

/* ==== LayerNormalizationGrad ===================================================== */

/* Rows of X [rows, d] over the normalized block; per row, with
 * xh = (x - mean) * rstd and gw = g * Scale:
 *   dX = rstd * (gw - mean(gw) - xh * mean(gw * xh)),
 *   dScale += g * xh, dBias += g  (per-part partial sums, then added). */
struct ln_ctx {
    const void *g, *x, *w;
    const struct gf_tview *mean, *rstd; /* the forward's statistics, or NULL */
    void *dx;
    size_t rows, d, parts;
    double eps;
    double *part;    /* [parts][2][d] partial dScale, dBias (workspace) */
    int wrank;       /* Scale broadcast over the block: rank and strides */
    size_t wdims[GF_MAX_RANK], wstr[GF_MAX_RANK];
    bool wfull;
};

static size_t ln_woff(const struct ln_ctx *c, size_t j)
{
    if (c->wfull)
        return j;
    size_t off = 0;
    for (int i = c->wrank - 1; i >= 0; i--) {
        off += (j % c->wdims[i]) * c->wstr[i];
        j /= c->wdims[i];
    }
    return off;
}

static double stat_at(const struct gf_tview *t, size_t r)
{
    return t->dtype == GF_FLOAT ? ((const float *)t->data)[r] : ((const double *)t->data)[r];
}

#define DEF_LN(sfx, T)                                                                    \
    static void ln_parts_##sfx(void *vc, size_t pb, size_t pe)                           \
    {                                                                                    \
        const struct ln_ctx *c = vc;                                                     \
        size_t d = c->d;                                                                 \
        for (size_t p = pb; p < pe; p++) {                                               \
            double *ds = c->part + p * 2 * d, *db = ds + d;                              \
            memset(ds, 0, 2 * d * sizeof(double));                                      \
            for (size_t r = c->rows * p / c->parts; r < c->rows * (p + 1) / c->parts; r++) { \
                const T *x = (const T *)c->x + r * d, *g = (const T *)c->g + r * d;      \
                const T *w = c->w;                                                       \
                T *dx = (T *)c->dx + r * d;                                              \
                double mean = 0, var = 0, rstd, s1 = 0, s2 = 0;                          \
                if (c->mean) {                                                           \
                    mean = stat_at(c->mean, r);                                          \
                    rstd = stat_at(c->rstd, r);                                          \
                } else {                                                                 \
                    for (size_t j = 0; j < d; j++)                                       \
                        mean += x[j];                                                    \
                    mean /= (double)d;                                                   \
                    for (size_t j = 0; j < d; j++)                                       \
                        var += ((double)x[j] - mean) * ((double)x[j] - mean);            \
                    rstd = 1.0 / sqrt(var / (double)d + c->eps);                         \
                }                                                                        \
                for (size_t j = 0; j < d; j++) {                                         \
                    double xh = ((double)x[j] - mean) * rstd;                            \
                    double gw = (double)g[j] * w[ln_woff(c, j)];                         \
                    s1 += gw;                                                            \
                    s2 += gw * xh;                                                       \
                    ds[j] += (double)g[j] * xh;                                          \
                    db[j] += g[j];                                                       \
                }                                                                        \
                s1 /= (double)d;                                                         \
                s2 /= (double)d;                                                         \
                for (size_t j = 0; j < d; j++) {                                         \
                    double xh = ((double)x[j] - mean) * rstd;                            \
                    double gw = (double)g[j] * w[ln_woff(c, j)];                         \
                    dx[j] = (T)(rstd * (gw - s1 - xh * s2));                             \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    }
GRAD_TYPES(DEF_LN)

static size_t ln_block(const struct gf_kernel_args *a, size_t *rows)
{
    const struct gf_tview *x = &a->in[1];
    int64_t axis = gf_node_attr_int(a->node, "axis", -1);
    int ax = (int)(axis < 0 ? axis + x->rank : axis);
    if (ax < 0 || ax >= x->rank)
        ax = x->rank > 0 ? x->rank - 1 : 0;
    size_t d = gf_dims_prod(x->dims, ax, x->rank);
    *rows = d ? x->nelem / d : 0;
    return d;
}

static size_t ln_parts(const struct gf_kernel_args *a, size_t rows, size_t d)
{
    size_t p = rows * d / GRAIN + 1, t = (size_t)threads(a);
    p = p < t ? p : t;
    return p < rows ? p : rows ? rows : 1;
}

static size_t ln_workspace(const struct gf_kernel_args *a)
{
    size_t rows, d = ln_block(a, &rows);
    return ln_parts(a, rows, d) * 2 * d * sizeof(double);
}

/* Scale (input 2): X's dtype, broadcastable to the normalized block. */
static enum gf_status ln_scale(const struct gf_kernel_args *a, int ax, struct ln_ctx *c)
{
    const struct gf_tview *w = &a->in[2], *x = &a->in[1];
    int br = x->rank - ax;
    if (w->dtype != x->dtype || w->rank > br)
        return gf_kernel_error(a, GF_ERR_INVALID, "Scale (input 2) must be %s of rank <= %d",
                               gf_dtype_name(x->dtype), br);
    c->wrank = br;
    c->wfull = w->nelem == c->d;
    size_t s = 1;
    for (int i = br - 1; i >= 0; i--) {
        int wi = i - (br - w->rank);
        int64_t wd = wi >= 0 ? w->dims[wi] : 1;
        if (wd != 1 && wd != x->dims[ax + i])
            return gf_kernel_error(a, GF_ERR_INVALID, "Scale (input 2) does not broadcast to "
                                   "the normalized dims of X");
        c->wdims[i] = (size_t)x->dims[ax + i];
        c->wstr[i] = wd == 1 ? 0 : s;
        s *= (size_t)wd;
    }
    return GF_OK;
}

/* The forward's Mean / InvStdDev (inputs 3, 4): float or double, one per row. */
static enum gf_status ln_stats(const struct gf_kernel_args *a, struct ln_ctx *c)
{
    c->mean = opt_in(a, 3);
    c->rstd = opt_in(a, 4);
    if (!c->mean || !c->rstd) {
        c->mean = c->rstd = NULL;
        return GF_OK;
    }
    if (!is_fp(c->mean->dtype) || !is_fp(c->rstd->dtype) || c->mean->nelem != c->rows ||
        c->rstd->nelem != c->rows)
        return gf_kernel_error(a, GF_ERR_INVALID, "Mean and InvStdDev must be float or double "
                               "with one element per row (%zu)", c->rows);
    return GF_OK;
}

/* Sums the parts into dScale (output 1) and dBias (output 2), when wanted. */
#define DEF_LN_SUM(sfx, T)                                                                \
    static void ln_sum_##sfx(const struct gf_kernel_args *a, const struct ln_ctx *c)     \
    {                                                                                    \
        for (size_t k = 1; k <= 2; k++) {                                                \
            if (k >= a->n_out || !a->out[k].data)                                        \
                continue;                                                                \
            T *o = a->out[k].data;                                                       \
            for (size_t j = 0; j < c->d; j++) {                                          \
                double s = 0;                                                            \
                for (size_t p = 0; p < c->parts; p++)                                    \
                    s += c->part[(p * 2 + (k - 1)) * c->d + j];                          \
                o[j] = (T)s;                                                             \
            }                                                                            \
        }                                                                                \
    }
GRAD_TYPES(DEF_LN_SUM)

static enum gf_status ln_run(const struct gf_kernel_args *a)
{
    enum gf_status st = need_in(a, 3);
    const struct gf_tview *g = &a->in[0], *x = &a->in[1];
    int ax = 0;
    if (st != GF_OK || (st = same_type(a, 1, g->dtype)) != GF_OK ||
        (st = gf_axis_attr(a, -1, x->rank, &ax)) != GF_OK ||
        (st = check_out(a, 0, g->dtype, x->nelem)) != GF_OK)
        return st;
    if (g->nelem != x->nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, X %zu", g->nelem,
                               x->nelem);
    struct ln_ctx c = {.g = g->data, .x = x->data, .w = a->in[2].data, .dx = a->out[0].data,
                       .eps = gf_node_attr_float(a->node, "epsilon", 1e-5f),
                       .part = a->workspace};
    c.d = ln_block(a, &c.rows);
    c.parts = ln_parts(a, c.rows, c.d);
    for (size_t k = 1; k < a->n_out; k++)
        if (a->out[k].data && (st = check_out(a, k, g->dtype, c.d)) != GF_OK)
            return st;
    if ((st = ln_scale(a, ax, &c)) != GF_OK || (st = ln_stats(a, &c)) != GF_OK)
        return st;
    if (c.d == 0 || c.rows == 0) {
        for (size_t k = 1; k < a->n_out; k++)
            if (a->out[k].data)
                memset(a->out[k].data, 0, gf_tview_bytes(&a->out[k]));
        return GF_OK;
    }
    gf_parallel_for(threads(a), c.parts, 1, g->dtype == GF_FLOAT ? ln_parts_f32 : ln_parts_f64,
                    &c);
    (g->dtype == GF_FLOAT ? ln_sum_f32 : ln_sum_f64)(a, &c);
    return GF_OK;
}

/* ==== SoftmaxCrossEntropyLossGrad NLLLossGrad ========================================== */

/* Scores [N, C, D...] seen as [N, C, D]; labels [N, D]; per position pos
 * (= n * D + d) with label t not ignored and weight w = W[t] (1 without W):
 *   coef = w * dL[pos] ("none"), w * dL ("sum"), w * dL / sum of w ("mean");
 *   SCE: dX[n, :, d] = coef * (softmax(X[n, :, d]) - onehot(t));
 *   NLL: dX[n, t, d] = -coef, 0 elsewhere. */
struct loss_ctx {
    const void *x, *w, *dl;
    const struct gf_tview *labels;
    void *dx;
    size_t c, d;
    bool per_pos, has_ii;
    int64_t ii;
    double scale; /* dL / denominator, when not per position */
};

static bool loss_ignored(const struct loss_ctx *c, int64_t t)
{
    return c->has_ii && t == c->ii;
}

#define DEF_LOSS(sfx, T)                                                                  \
    static double loss_coef_##sfx(const struct loss_ctx *c, size_t pos, int64_t t)       \
    {                                                                                    \
        double w = c->w ? (double)((const T *)c->w)[t] : 1.0;                            \
        return w * (c->per_pos ? (double)((const T *)c->dl)[pos] : c->scale);            \
    }                                                                                    \
    static void sce_pos_##sfx(void *vc, size_t b, size_t e)                              \
    {                                                                                    \
        const struct loss_ctx *c = vc;                                                   \
        for (size_t pos = b; pos < e; pos++) {                                           \
            size_t base = pos / c->d * c->c * c->d + pos % c->d, s = c->d;               \
            const T *x = (const T *)c->x + base;                                         \
            T *dx = (T *)c->dx + base;                                                   \
            int64_t t = idx_at(c->labels, pos);                                          \
            if (loss_ignored(c, t)) {                                                    \
                for (size_t k = 0; k < c->c; k++)                                        \
                    dx[k * s] = 0;                                                       \
                continue;                                                                \
            }                                                                            \
            double coef = loss_coef_##sfx(c, pos, t), m = x[0], sum = 0;                 \
            for (size_t k = 1; k < c->c; k++)                                            \
                m = x[k * s] > m ? x[k * s] : m;                                         \
            for (size_t k = 0; k < c->c; k++)                                            \
                sum += exp((double)x[k * s] - m);                                        \
            for (size_t k = 0; k < c->c; k++) {                                          \
                double p = exp((double)x[k * s] - m) / sum;                              \
                dx[k * s] = (T)(coef * (p - ((int64_t)k == t)));                         \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    static void nll_pos_##sfx(void *vc, size_t b, size_t e)                              \
    {                                                                                    \
        const struct loss_ctx *c = vc;                                                   \
        for (size_t pos = b; pos < e; pos++) {                                           \
            int64_t t = idx_at(c->labels, pos);                                          \
            if (!loss_ignored(c, t))                                                     \
                ((T *)c->dx)[pos / c->d * c->c * c->d + (size_t)t * c->d + pos % c->d] = \
                    (T)-loss_coef_##sfx(c, pos, t);                                      \
        }                                                                                \
    }
GRAD_TYPES(DEF_LOSS)

/* The checks (kernels/checks.c, the rule in graph/opcheck.c) and c: the
 * scores' [N, C, D...] (sd, rank sr) seen as [N, C, D], the weights of the
 * counted positions summed for "mean". */
static enum gf_status loss_setup(const struct gf_kernel_args *a, const int64_t *sd,
                                 struct loss_ctx *c)
{
    const struct gf_tview *dl = &a->in[0], *t = &a->in[2], *w = opt_in(a, 3);
    struct gf_loss_rule r;
    struct gf_labels l;
    enum gf_status st = gf_nll_check(a, &r, &l);
    if (st != GF_OK)
        return st;
    *c = (struct loss_ctx){.dl = dl->data, .labels = t, .c = l.classes,
                           .per_pos = r.ce.red == GF_RED_NONE, .has_ii = l.has_ii, .ii = l.ii,
                           .w = w ? w->data : NULL, .dx = a->out[0].data};
    c->d = sd[0] ? t->nelem / (size_t)sd[0] : 1;
    double wsum = 0;
    for (size_t i = 0; r.ce.red == GF_RED_MEAN && i < t->nelem; i++) {
        int64_t v = idx_at(t, i);
        if (!loss_ignored(c, v))
            wsum += !c->w ? 1.0 : dl->dtype == GF_FLOAT ? ((const float *)c->w)[v]
                                                         : ((const double *)c->w)[v];
    }
    double g0 = c->per_pos ? 0 : dl->dtype == GF_FLOAT ? *(const float *)dl->data
                                                       : *(const double *)dl->data;
    c->scale = r.ce.red == GF_RED_MEAN ? (wsum != 0 ? g0 / wsum : 0) : g0;
    return GF_OK;
}

static enum gf_status sce_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[1];
    struct loss_ctx c;
    enum gf_status st = loss_setup(a, x->dims, &c);
    if (st != GF_OK)
        return st;
    c.x = x->data;
    gf_parallel_for(threads(a), a->in[2].nelem, grain_for(3 * c.c),
                    x->dtype == GF_FLOAT ? sce_pos_f32 : sce_pos_f64, &c);
    return GF_OK;
}

static enum gf_status nll_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *o = &a->out[0];
    struct loss_ctx c;
    enum gf_status st = loss_setup(a, o->dims, &c);
    if (st != GF_OK)
        return st;
    if (o->nelem)
        memset(o->data, 0, gf_tview_bytes(o));
    gf_parallel_for(threads(a), a->in[2].nelem, GRAIN,
                    o->dtype == GF_FLOAT ? nll_pos_f32 : nll_pos_f64, &c);
    return GF_OK;
}

/* ==== the table ====================================================================== */

#define KERNEL(OP, IMPL, WS, RUN)                                                        \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = IMPL,            \
     .supports = fp_supports, .workspace = WS, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(SUM_TO_SHAPE, "sum_to_shape", NULL, s2s_run),
    KERNEL(RELU_GRAD, "act_grad", NULL, ew_run),
    KERNEL(SIGMOID_GRAD, "act_grad", NULL, ew_run),
    KERNEL(TANH_GRAD, "act_grad", NULL, ew_run),
    KERNEL(GELU_GRAD, "act_grad", NULL, ew_run),
    KERNEL(DROPOUT_GRAD, "dropout_grad", NULL, dropout_grad_run),
    KERNEL(SOFTMAX_GRAD, "softmax_grad", NULL, smx_run),
    KERNEL(LOG_SOFTMAX_GRAD, "softmax_grad", NULL, smx_run),
    KERNEL(GATHER_GRAD, "scatter_add", NULL, gg_run),
    KERNEL(GATHER_ELEMENTS_GRAD, "scatter_add", NULL, ge_run),
    KERNEL(SLICE_GRAD, "scatter", NULL, sg_run),
    KERNEL(LAYER_NORMALIZATION_GRAD, "layernorm_grad", ln_workspace, ln_run),
    KERNEL(SOFTMAX_CROSS_ENTROPY_LOSS_GRAD, "loss_grad", NULL, sce_run),
    KERNEL(NLL_LOSS_GRAD, "loss_grad", NULL, nll_run),
};

const struct gf_kernel_table gf_cpu_grad_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};
