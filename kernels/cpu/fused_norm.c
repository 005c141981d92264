/* CPU kernels of the fused normalizations (domain graphfuse, README "Fused ops"):
 *
 *   RMSNorm       X, W?        -> Y      Y = x r (W + weight_offset), r = 1/sqrt(mean(x^2) + eps)
 *   AddRMSNorm    X, R, W?     -> Y, S   S = X + R, Y = RMSNorm(S)
 *   LayerNorm     X, W?, B?    -> Y, Mean?, InvStdDev?
 *                               Y = (x - mean) / sqrt(var + eps) W + B
 *   AddLayerNorm  X, R, W?, B? -> Y, S, Mean?, InvStdDev?   S = X + R, Y = LayerNorm(S)
 *
 * X is seen as [rows, n], n the product of the normalized dims (axis..).
 * Rows are split over threads; each row is read from memory once: its sums
 * are accumulated in double over FU_LANES lanes, then Y is written while the
 * row is still in cache (the Add forms write S = X + R first, rounded to
 * X's type, and normalize that).  W (+ weight_offset) and B are expanded
 * once per run into the workspace as n values of the compute type, 1 and 0
 * when absent, so the row loops read two dense vectors.  LayerNorm's Mean
 * and InvStdDev = 1/sqrt(var + eps) (ONNX LayerNormalization's outputs 1
 * and 2) are one value per row, in the compute type.
 */
#include "fused.h"

struct norm {
    bool rms, add, eps_outside;
    const void *x, *r; /* X [rows, n]; R [rows, n] (Add forms) */
    void *y, *s;       /* Y [rows, n]; S [rows, n], NULL when omitted */
    const void *w, *b; /* [n] compute type (workspace); b unused by RMS */
    void *mean, *istd; /* [rows] compute type, NULL when omitted (LayerNorm forms) */
    size_t rows, n;
    double eps;
};

/* Row sums in double, FU_LANES lanes wide so that they vectorize:
 * sum(x) and sum((x - mu)^2). */
#define DEF_NORM_SUMS(DT, sfx, T, C, LD, ST)                                            \
    FU_HOT static double sum_##sfx(const T *x, size_t n)                                \
    {                                                                                   \
        double acc[FU_LANES] = {0}, s = 0;                                              \
        size_t j = 0;                                                                   \
        for (; j + FU_LANES <= n; j += FU_LANES)                                        \
            for (int k = 0; k < FU_LANES; k++)                                          \
                acc[k] += (double)LD(x[j + k]);                                         \
        for (; j < n; j++)                                                              \
            s += (double)LD(x[j]);                                                      \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += acc[k];                                                                \
        return s;                                                                       \
    }                                                                                   \
    FU_HOT static double dev2_##sfx(const T *x, size_t n, double mu)                    \
    {                                                                                   \
        double acc[FU_LANES] = {0}, s = 0;                                              \
        size_t j = 0;                                                                   \
        for (; j + FU_LANES <= n; j += FU_LANES)                                        \
            for (int k = 0; k < FU_LANES; k++) {                                        \
                double d = (double)LD(x[j + k]) - mu;                                   \
                acc[k] += d * d;                                                        \
            }                                                                           \
        for (; j < n; j++) {                                                            \
            double d = (double)LD(x[j]) - mu;                                           \
            s += d * d;                                                                 \
        }                                                                               \
        for (int k = 0; k < FU_LANES; k++)                                              \
            s += acc[k];                                                                \
        return s;                                                                       \
    }

/* One row: S = X + R when adding (into Y when S is omitted), the
 * statistics, then Y.  LayerNorm forms x - mean in double, so that a mean
 * far from zero costs the row no precision. */
#define DEF_NORM_ROWS(DT, sfx, T, C, LD, ST)                                            \
    FU_HOT static void norm_rows_##sfx(void *vc, size_t r0, size_t r1)                  \
    {                                                                                   \
        const struct norm *c = vc;                                                      \
        size_t n = c->n;                                                                \
        const C *w = c->w, *b = c->b;                                                   \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *x = (const T *)c->x + r * n;                                       \
            T *y = (T *)c->y + r * n;                                                   \
            if (c->add) {                                                               \
                const T *q = (const T *)c->r + r * n;                                   \
                T *s = c->s ? (T *)c->s + r * n : y;                                    \
                for (size_t j = 0; j < n; j++)                                          \
                    s[j] = ST((C)LD(x[j]) + (C)LD(q[j]));                               \
                x = s;                                                                  \
            }                                                                           \
            double mu = c->rms ? 0 : sum_##sfx(x, n) / (double)n;                       \
            double ms = dev2_##sfx(x, n, mu) / (double)n;                               \
            double den = c->eps_outside ? sqrt(ms) + c->eps : sqrt(ms + c->eps);        \
            C inv = (C)(1 / den);                                                       \
            if (c->mean)                                                                \
                ((C *)c->mean)[r] = (C)mu;                                              \
            if (c->istd)                                                                \
                ((C *)c->istd)[r] = inv;                                                \
            if (c->rms) {                                                               \
                for (size_t j = 0; j < n; j++)                                          \
                    y[j] = ST((C)LD(x[j]) * inv * w[j]);                                \
            } else {                                                                    \
                for (size_t j = 0; j < n; j++)                                          \
                    y[j] = ST((C)((double)LD(x[j]) - mu) * inv * w[j] + b[j]);          \
            }                                                                           \
        }                                                                               \
    }

FU_TYPES(DEF_NORM_SUMS)
FU_TYPES(DEF_NORM_ROWS)

typedef void (*rows_fn)(void *ctx, size_t begin, size_t end);
#define NORM_ENTRY(DT, sfx, ...) [DT] = norm_rows_##sfx,
static const rows_fn norm_rows[GF_DTYPE_COUNT] = {FU_TYPES(NORM_ENTRY)};

/* ---- inputs and attributes ------------------------------------------------------ */

/* Input slots: X R W B, -1 where the op has none. */
struct norm_slots {
    int r, w, b;
};

static struct norm_slots slots_of(enum gf_op op)
{
    switch (op) {
    case GF_OP_RMS_NORM: return (struct norm_slots){-1, 1, -1};
    case GF_OP_ADD_RMS_NORM: return (struct norm_slots){1, 2, -1};
    case GF_OP_LAYER_NORM: return (struct norm_slots){-1, 1, 2};
    default: return (struct norm_slots){1, 2, 3}; /* AddLayerNorm */
    }
}

static bool is_rms(enum gf_op op)
{
    return op == GF_OP_RMS_NORM || op == GF_OP_ADD_RMS_NORM;
}

/* Optional input slot (or none) of a given node. */
static const struct gf_tview *opt_in(const struct gf_kernel_args *a, int slot)
{
    return slot >= 0 && fu_has(a, (size_t)slot) ? &a->in[slot] : NULL;
}

/* The normalized block X.shape[axis:]: rank and dims (pointing into X). */
static enum gf_status norm_block(const struct gf_kernel_args *a, int *brank,
                                 const int64_t **bdims)
{
    const struct gf_tview *x = &a->in[0];
    int64_t axis = gf_node_attr_int(a->node, "axis", -1);
    int ax;
    if (!fu_axis(axis, x->rank, &ax))
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %lld is out of range for X of rank %d",
                               (long long)axis, x->rank);
    *brank = x->rank - ax;
    *bdims = x->dims + ax;
    return GF_OK;
}

/* W or B (slot i): X's dtype, broadcastable to the normalized block. */
static enum gf_status norm_param(const struct gf_kernel_args *a, int i, const char *name,
                                 int brank, const int64_t *bdims)
{
    enum gf_status st = fu_check_in(a, (size_t)i, name, a->in[0].dtype);
    if (st == GF_OK && !fu_bcasts_to(&a->in[i], brank, bdims))
        return gf_kernel_error(a, GF_ERR_INVALID,
                               "%s (input %d) %s does not broadcast to the normalized dims %s",
                               name, i, FU_SHAPE(&a->in[i]), FU_DIMS(brank, bdims));
    return st;
}

/* Attributes: epsilon >= 0, eps_outside 0/1, weight_offset only with W. */
static enum gf_status norm_attrs(const struct gf_kernel_args *a, struct norm *c, bool has_w,
                                 double *offset)
{
    c->eps = gf_node_attr_float(a->node, "epsilon", c->rms ? 1e-6f : 1e-5f);
    if (!(c->eps >= 0) || isinf(c->eps))
        return gf_kernel_error(a, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", c->eps);
    *offset = 0;
    if (!c->rms)
        return GF_OK;
    int64_t outside = gf_node_attr_int(a->node, "eps_outside", 0);
    if (outside != 0 && outside != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "eps_outside %lld must be 0 or 1",
                               (long long)outside);
    c->eps_outside = outside;
    *offset = gf_node_attr_float(a->node, "weight_offset", 0.0f);
    if (!isfinite(*offset))
        return gf_kernel_error(a, GF_ERR_INVALID, "weight_offset must be finite");
    if (*offset != 0 && !has_w)
        return gf_kernel_error(a, GF_ERR_INVALID, "weight_offset %g needs the weight W",
                               *offset);
    return GF_OK;
}

/* LayerNorm's Mean and InvStdDev (outputs k, k + 1), when present:
 * X's shape with the normalized axes set to 1, in the compute type. */
static enum gf_status norm_stats_check(const struct gf_kernel_args *a, size_t k, int brank)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_dtype dt = x->dtype == GF_DOUBLE ? GF_DOUBLE : GF_FLOAT;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = GF_OK;
    for (int i = 0; i < x->rank; i++)
        dims[i] = i < x->rank - brank ? x->dims[i] : 1;
    for (size_t i = k; st == GF_OK && i < k + 2; i++)
        if (fu_has_out(a, i))
            st = fu_check_out(a, i, dt, x->rank, dims);
    return st;
}

/* Checks every input, output and attribute; fills c (but w, b). */
static enum gf_status norm_check(const struct gf_kernel_args *a, struct norm *c,
                                 int *brank, const int64_t **bdims, double *offset)
{
    const struct gf_tview *x = &a->in[0];
    struct norm_slots sl = slots_of(a->node->op);
    c->rms = is_rms(a->node->op);
    c->add = sl.r >= 0;
    enum gf_status st = fu_check_in(a, 0, "X", GF_UNDEFINED);
    if (st == GF_OK)
        st = norm_block(a, brank, bdims);
    if (st == GF_OK && c->add && (st = fu_check_in(a, (size_t)sl.r, "R", x->dtype)) == GF_OK &&
        !fu_same_shape(&a->in[sl.r], x->rank, x->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "R %s must have X's shape %s",
                             FU_SHAPE(&a->in[sl.r]), FU_SHAPE(x));
    if (st == GF_OK && opt_in(a, sl.w))
        st = norm_param(a, sl.w, "W", *brank, *bdims);
    if (st == GF_OK && opt_in(a, sl.b))
        st = norm_param(a, sl.b, "B", *brank, *bdims);
    if (st == GF_OK)
        st = norm_attrs(a, c, opt_in(a, sl.w) != NULL, offset);
    if (st == GF_OK)
        st = fu_check_out(a, 0, x->dtype, x->rank, x->dims);
    if (st == GF_OK && c->add && fu_has_out(a, 1))
        st = fu_check_out(a, 1, x->dtype, x->rank, x->dims);
    if (st == GF_OK && !c->rms)
        st = norm_stats_check(a, c->add ? 2 : 1, *brank);
    return st;
}

/* ---- the kernel ---------------------------------------------------------------- */

/* n values of param t (or dflt when absent) broadcast over the block,
 * plus `add`, stored in the compute type of dt. */
static void norm_expand(const struct gf_tview *t, int brank, const int64_t *bdims,
                        enum gf_dtype dt, void *dst, size_t n, double add, double dflt)
{
    int64_t st[GF_MAX_RANK];
    if (t)
        fu_strides(t, brank, bdims, st);
    for (size_t j = 0; j < n; j++) {
        double v = t ? fu_get(t, fu_offset(brank, bdims, st, j)) + add : dflt;
        if (dt == GF_DOUBLE)
            ((double *)dst)[j] = v;
        else
            ((float *)dst)[j] = (float)v;
    }
}

static size_t block_elems(int brank, const int64_t *bdims)
{
    size_t n = 1;
    for (int i = 0; i < brank; i++)
        n *= (size_t)bdims[i];
    return n;
}

/* ws = [W + offset: n][B: n, LayerNorm forms], compute type. */
static size_t norm_workspace(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    if (!a->n_in || !fu_axis(gf_node_attr_int(a->node, "axis", -1), x->rank, &ax))
        return 0;
    size_t n = block_elems(x->rank - ax, x->dims + ax);
    return n * fu_compute_size(x->dtype) * (is_rms(a->node->op) ? 1 : 2);
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct norm c = {0};
    int brank = 0;
    const int64_t *bdims = NULL;
    double offset = 0;
    enum gf_status st = norm_check(a, &c, &brank, &bdims, &offset);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0];
    struct norm_slots sl = slots_of(a->node->op);
    c.n = block_elems(brank, bdims);
    c.rows = c.n ? x->nelem / c.n : 0;
    if (c.n == 0 || c.rows == 0)
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and B");
    size_t cs = fu_compute_size(x->dtype);
    void *w = a->workspace, *b = (char *)a->workspace + c.n * cs;
    norm_expand(opt_in(a, sl.w), brank, bdims, x->dtype, w, c.n, offset, 1);
    if (!c.rms)
        norm_expand(opt_in(a, sl.b), brank, bdims, x->dtype, b, c.n, 0, 0);
    c.x = x->data;
    c.r = c.add ? a->in[sl.r].data : NULL;
    c.y = a->out[0].data;
    c.s = c.add && fu_has_out(a, 1) ? a->out[1].data : NULL;
    c.w = w;
    c.b = c.rms ? NULL : b;
    size_t ks = c.add ? 2 : 1; /* Mean, InvStdDev */
    c.mean = !c.rms && fu_has_out(a, ks) ? a->out[ks].data : NULL;
    c.istd = !c.rms && fu_has_out(a, ks + 1) ? a->out[ks + 1].data : NULL;
    gf_parallel_for(fu_threads(a), c.rows, fu_grain(c.n), norm_rows[x->dtype], &c);
    return GF_OK;
}

static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && fu_is_float(in[0].dtype) && in[0].rank <= GF_MAX_RANK;
}

#define KERNEL(OP)                                                                      \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "fused-rows",   \
     .supports = norm_supports, .workspace = norm_workspace, .run = norm_run}

static const struct gf_kernel kernels[] = {
    KERNEL(RMS_NORM),
    KERNEL(ADD_RMS_NORM),
    KERNEL(LAYER_NORM),
    KERNEL(ADD_LAYER_NORM),
};

const struct gf_kernel_table gf_cpu_fused_norm_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
