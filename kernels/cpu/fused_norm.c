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
            double mu = c->rms ? 0 : fu_sum_##sfx(x, n) / (double)n;                       \
            double ms = fu_dev2_##sfx(x, n, mu) / (double)n;                               \
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

FU_TYPES(DEF_NORM_ROWS)

typedef void (*rows_fn)(void *ctx, size_t begin, size_t end);
#define NORM_ENTRY(DT, sfx, ...) [DT] = norm_rows_##sfx,
static const rows_fn norm_rows[GF_DTYPE_COUNT] = {FU_TYPES(NORM_ENTRY)};

/* ---- inputs and attributes ------------------------------------------------------ */

/* Every check (kernels/checks.c, the rule in graph/opcheck.c; the data and
 * outputs when `run`); fills c (but the buffers): the block X.shape[axis:]
 * (its rank and dims, pointing into X) and W's offset. */
static enum gf_status norm_check(const struct gf_kernel_args *a, bool run, struct norm *c,
                                 int *brank, const int64_t **bdims, double *offset)
{
    struct gf_norm_rule r;
    enum gf_status st = gf_norm_check(a, &r);
    if (st == GF_OK && run)
        st = gf_norm_check_run(a, &r);
    if (st != GF_OK)
        return st;
    c->rms = r.rms;
    c->add = gf_norm_slots_of(a->node->op).r >= 0;
    c->eps = r.eps;
    c->eps_outside = r.eps_outside;
    *offset = r.woff;
    *brank = r.block.rank;
    *bdims = a->in[0].dims + r.axis;
    return GF_OK;
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

/* ws = [W + offset: n][B: n, LayerNorm forms], compute type. */
static size_t norm_workspace(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    if (!a->n_in || !fu_axis(gf_node_attr_int(a->node, "axis", -1), x->rank, &ax))
        return 0;
    size_t n = gf_dims_prod(x->dims, ax, x->rank);
    bool rms = a->node->op == GF_OP_RMS_NORM || a->node->op == GF_OP_ADD_RMS_NORM;
    return n * fu_compute_size(x->dtype) * (rms ? 1 : 2);
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct norm c = {0};
    int brank = 0;
    const int64_t *bdims = NULL;
    double offset = 0;
    enum gf_status st = norm_check(a, true, &c, &brank, &bdims, &offset);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0];
    struct gf_norm_slots sl = gf_norm_slots_of(a->node->op);
    c.n = gf_dims_prod(bdims, 0, brank);
    c.rows = c.n ? x->nelem / c.n : 0;
    if (c.n == 0 || c.rows == 0)
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for W and B");
    size_t cs = fu_compute_size(x->dtype);
    void *w = a->workspace, *b = (char *)a->workspace + c.n * cs;
    norm_expand(gf_opt_in(a, sl.w), brank, bdims, x->dtype, w, c.n, offset, 1);
    if (!c.rms)
        norm_expand(gf_opt_in(a, sl.b), brank, bdims, x->dtype, b, c.n, 0, 0);
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

/* One float type; the mixed form (fp32 X, 16-bit R and Y) goes to the
 * half wrapper (half.c), which widens R and narrows Y around this kernel. */
static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in >= 1 && fu_is_float(in[0].dtype) && in[0].rank <= GF_MAX_RANK &&
           !gf_norm_low_type(n, in, n_in);
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
