/* CPU kernels of the fused activations (domain graphfuse, README "Fused ops"):
 *
 *   SwiGLU  G, U -> Y          Y = G sigmoid(G) U         (G, U broadcast)
 *   GeGLU   G, U -> Y          Y = gelu(G) U              (approximate none / tanh)
 *   SiLU    X -> Y             Y = X sigmoid(X)
 *   Gelu    X -> Y             Y = gelu(X)
 *   RoPE    X, Cos, Sin -> Y   Y = X Cos + rotate_half(X) Sin   (Cos, Sin broadcast)
 *
 * One pass: each element is read once and written once.  The gated ops
 * walk the output as runs along its innermost axis after merging the axes
 * that are contiguous in every operand (same-shape operands become one
 * run), split over threads by element ranges; RoPE goes by rows of the
 * last axis.  fp32 uses the vectorizable exp / gelu of fused.h.
 */
#include "fused.h"

/* ---- SwiGLU GeGLU SiLU Gelu --------------------------------------------------- */


/* Output elements of a gated op, as merged axes with per-operand strides. */
struct glu {
    enum gf_act act;
    bool gated;                  /* SwiGLU / GeGLU: times U */
    int rank;                    /* merged axes, >= 1 */
    int64_t dims[GF_MAX_RANK];
    int64_t st[2][GF_MAX_RANK];  /* G, U element strides, 0 along broadcast axes */
    const void *g, *u;
    void *y;
};

/* f(x) of the activation in the compute type. */
#define ACT_F(act, x) ((act) == GF_ACT_SILU ? (x) * FU_SIGMOID(x)                          \
                       : (act) == GF_ACT_GELU ? FU_GELU(x) : FU_GELU_TANH(x))

/* y[j] = f(g[j*sg]) (* u[j*su]), j < len; the contiguous case has its own
 * loops so that they vectorize. */
#define GLU_LOOP(ACT, GI, UI, C, LD, ST)                                                \
    do {                                                                                \
        if (!c->gated)                                                                  \
            for (size_t j = 0; j < len; j++) {                                          \
                C x = LD(g[GI]);                                                        \
                y[j] = ST(ACT_F(ACT, x));                                               \
            }                                                                           \
        else                                                                            \
            for (size_t j = 0; j < len; j++) {                                          \
                C x = LD(g[GI]);                                                        \
                y[j] = ST(ACT_F(ACT, x) * (C)LD(u[UI]));                                \
            }                                                                           \
    } while (0)

#define DEF_GLU(DT, sfx, T, C, LD, ST)                                                  \
    FU_HOT static void glu_span_##sfx(const struct glu *c, size_t pos, size_t og,       \
                                      size_t ou, size_t len)                            \
    {                                                                                   \
        const T *g = (const T *)c->g + og, *u = c->gated ? (const T *)c->u + ou : NULL; \
        T *y = (T *)c->y + pos;                                                         \
        size_t sg = (size_t)c->st[0][c->rank - 1], su = (size_t)c->st[1][c->rank - 1];  \
        bool dense = sg == 1 && (!c->gated || su == 1);                                 \
        switch (c->act) {                                                               \
        case GF_ACT_SILU:                                                                  \
            if (dense)                                                                  \
                GLU_LOOP(GF_ACT_SILU, j, j, C, LD, ST);                                    \
            else                                                                        \
                GLU_LOOP(GF_ACT_SILU, j * sg, j * su, C, LD, ST);                          \
            break;                                                                      \
        case GF_ACT_GELU:                                                                  \
            if (dense)                                                                  \
                GLU_LOOP(GF_ACT_GELU, j, j, C, LD, ST);                                    \
            else                                                                        \
                GLU_LOOP(GF_ACT_GELU, j * sg, j * su, C, LD, ST);                          \
            break;                                                                      \
        default:                                                                        \
            if (dense)                                                                  \
                GLU_LOOP(GF_ACT_GELU_TANH, j, j, C, LD, ST);                               \
            else                                                                        \
                GLU_LOOP(GF_ACT_GELU_TANH, j * sg, j * su, C, LD, ST);                     \
            break;                                                                      \
        }                                                                               \
    }
FU_TYPES(DEF_GLU)

typedef void (*glu_span_fn)(const struct glu *c, size_t pos, size_t og, size_t ou, size_t len);
#define GLU_ENTRY(DT, sfx, ...) [DT] = glu_span_##sfx,
static const glu_span_fn glu_spans[GF_DTYPE_COUNT] = {FU_TYPES(GLU_ENTRY)};

struct glu_job {
    const struct glu *c;
    glu_span_fn span;
};

/* Output elements [b, e): one span per run of the innermost axis. */
static void glu_task(void *vj, size_t b, size_t e)
{
    const struct glu_job *job = vj;
    const struct glu *c = job->c;
    int last = c->rank - 1;
    for (size_t pos = b; pos < e;) {
        size_t rem = pos, og = 0, ou = 0, inner = 0;
        for (int i = last; i >= 0; i--) {
            size_t d = (size_t)c->dims[i], ix = rem % d;
            rem /= d;
            og += ix * (size_t)c->st[0][i];
            ou += ix * (size_t)c->st[1][i];
            if (i == last)
                inner = ix;
        }
        size_t len = (size_t)c->dims[last] - inner;
        len = len < e - pos ? len : e - pos;
        job->span(c, pos, og, ou, len);
        pos += len;
    }
}

/* Drops size-1 axes and merges an axis into the next when both operands
 * are contiguous across the pair. */
static void glu_merge(struct glu *c, int rank, const int64_t *dims)
{
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        if (r > 0 && c->st[0][r - 1] == c->st[0][i] * dims[i] &&
            c->st[1][r - 1] == c->st[1][i] * dims[i]) {
            c->dims[r - 1] *= dims[i];
            c->st[0][r - 1] = c->st[0][i];
            c->st[1][r - 1] = c->st[1][i];
            continue;
        }
        c->dims[r] = dims[i];
        c->st[0][r] = c->st[0][i];
        c->st[1][r] = c->st[1][i];
        r++;
    }
    if (r == 0) { /* a single element */
        c->dims[0] = 1;
        c->st[0][0] = c->st[1][0] = 1;
        r = 1;
    }
    c->rank = r;
}

static enum gf_status glu_run(const struct gf_kernel_args *a)
{
    enum gf_op op = a->node->op;
    struct glu c = {.gated = op == GF_OP_SWIGLU || op == GF_OP_GEGLU};
    const struct gf_tview *g = &a->in[0];
    int rank;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_glu_check(a, &c.act, &rank, dims); /* kernels/checks.c */
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    fu_strides(g, rank, dims, c.st[0]);
    if (c.gated)
        fu_strides(&a->in[1], rank, dims, c.st[1]);
    glu_merge(&c, rank, dims);
    c.g = g->data;
    c.u = c.gated ? a->in[1].data : NULL;
    c.y = a->out[0].data;
    struct glu_job job = {&c, glu_spans[g->dtype]};
    gf_parallel_for(fu_threads(a), a->out[0].nelem, FU_GRAIN, glu_task, &job);
    return GF_OK;
}

/* ---- RoPE ------------------------------------------------------------------------ */

/* X [rows, d] with d = 2h; Cos and Sin broadcast over X's shape. */
struct rope {
    const void *x, *cos, *sin;
    void *y;
    size_t d, h;
    int rank;                         /* X's rank */
    int64_t dims[GF_MAX_RANK];        /* X's shape */
    int64_t sc[GF_MAX_RANK], ss[GF_MAX_RANK]; /* Cos, Sin strides over it */
};

/* Row r: y[j] = x[j] c[j] - x[j+h] s[j] (j < h), x[j] c[j] + x[j-h] s[j]
 * (j >= h); the inner strides of Cos and Sin are 1 or 0 (broadcast). */
#define DEF_ROPE(DT, sfx, T, C, LD, ST)                                                 \
    FU_HOT static void rope_rows_##sfx(void *vc, size_t r0, size_t r1)                  \
    {                                                                                   \
        const struct rope *c = vc;                                                      \
        size_t h = c->h, d = c->d, lc = (size_t)c->sc[c->rank - 1],                     \
               ls = (size_t)c->ss[c->rank - 1];                                         \
        for (size_t r = r0; r < r1; r++) {                                              \
            const T *x = (const T *)c->x + r * d;                                       \
            size_t oc = fu_offset(c->rank - 1, c->dims, c->sc, r); /* X lead dims */    \
            size_t os = fu_offset(c->rank - 1, c->dims, c->ss, r);                      \
            const T *cs = (const T *)c->cos + oc, *sn = (const T *)c->sin + os;         \
            T *y = (T *)c->y + r * d;                                                   \
            if (lc == 1 && ls == 1) {                                                   \
                for (size_t j = 0; j < h; j++)                                          \
                    y[j] = ST((C)LD(x[j]) * (C)LD(cs[j]) -                              \
                              (C)LD(x[j + h]) * (C)LD(sn[j]));                          \
                for (size_t j = h; j < d; j++)                                          \
                    y[j] = ST((C)LD(x[j]) * (C)LD(cs[j]) +                              \
                              (C)LD(x[j - h]) * (C)LD(sn[j]));                          \
            } else {                                                                    \
                for (size_t j = 0; j < h; j++)                                          \
                    y[j] = ST((C)LD(x[j]) * (C)LD(cs[j * lc]) -                         \
                              (C)LD(x[j + h]) * (C)LD(sn[j * ls]));                     \
                for (size_t j = h; j < d; j++)                                          \
                    y[j] = ST((C)LD(x[j]) * (C)LD(cs[j * lc]) +                         \
                              (C)LD(x[j - h]) * (C)LD(sn[j * ls]));                     \
            }                                                                           \
        }                                                                               \
    }
FU_TYPES(DEF_ROPE)

typedef void (*rows_fn)(void *ctx, size_t begin, size_t end);
#define ROPE_ENTRY(DT, sfx, ...) [DT] = rope_rows_##sfx,
static const rows_fn rope_rows[GF_DTYPE_COUNT] = {FU_TYPES(ROPE_ENTRY)};

static enum gf_status rope_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_rope_check(a); /* kernels/checks.c */
    if (st != GF_OK || x->nelem == 0)
        return st;
    struct rope c = {.x = x->data, .cos = a->in[1].data, .sin = a->in[2].data,
                     .y = a->out[0].data, .d = (size_t)x->dims[x->rank - 1], .rank = x->rank};
    c.h = c.d / 2;
    memcpy(c.dims, x->dims, sizeof(c.dims));
    fu_strides(&a->in[1], x->rank, x->dims, c.sc);
    fu_strides(&a->in[2], x->rank, x->dims, c.ss);
    gf_parallel_for(fu_threads(a), x->nelem / c.d, fu_grain(c.d), rope_rows[x->dtype], &c);
    return GF_OK;
}

/* ---- the table ------------------------------------------------------------------- */

/* (RoPE with fp32 Cos / Sin and a 16-bit X: the fp32 rows on widened X, half.c) */
static bool act_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n->op == GF_OP_ROPE && gf_rope_wide_tables(in, n_in))
        return false;
    return n_in >= 1 && fu_is_float(in[0].dtype) && in[0].rank <= GF_MAX_RANK;
}

#define KERNEL(OP, IMPL, RUN)                                                           \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = IMPL,           \
     .supports = act_supports, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(SWIGLU, "fused-elementwise", glu_run),
    KERNEL(GEGLU, "fused-elementwise", glu_run),
    KERNEL(SILU, "fused-elementwise", glu_run),
    KERNEL(FUSED_GELU, "fused-elementwise", glu_run),
    KERNEL(ROPE, "fused-rows", rope_run),
};

const struct gf_kernel_table gf_cpu_fused_act_table = {kernels,
                                                       sizeof(kernels) / sizeof(kernels[0])};
