/* CPU kernels: reductions, arg/top-k/scan along an axis, the softmax family,
 * layer normalization and the two classification losses.
 *
 *   Reduce{Sum,Mean,Max,Min,Prod,L1,L2,SumSquare,LogSumExp}  over any set of axes
 *   ArgMax ArgMin TopK CumSum                                 along one axis
 *   Softmax LogSoftmax Hardmax                                along one axis (or 2-D coerced)
 *   LayerNormalization                                        over the trailing block
 *   SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss         scores [N, C, d...], labels [N, d...]
 *
 * Element types come from X-macro tables (NUM_TYPES: every numeric type,
 * FLOAT_TYPES: the float ones) that stamp out one typed inner loop per type;
 * the drivers around those loops are type-free.  Floats are accumulated in
 * double (CumSum alone rounds each partial sum to the element type, as
 * numpy does); integers in 64 bits with wrap-around, as numpy does.
 * Work is split over gf_parallel_for by output (or by blocks of VB
 * neighbouring columns, so that strided axes still read memory
 * contiguously); a few long reductions are split along the reduction.
 */
#include <stdint.h>

#include "cpu.h"
#include "fused.h" /* fu_expf_acc, FU_HOT */

#define GRAIN 16384    /* elements worth a thread */
#define VB 64          /* neighbouring columns (or outputs) processed side by side */
#define MAX_THREADS 64 /* as gf_parallel_for */

static int n_threads(const struct gf_kernel_args *a)
{
    return a->n_threads < 1 ? 1 : a->n_threads > MAX_THREADS ? MAX_THREADS : a->n_threads;
}

/* Items per parallel chunk when each item costs `cost` elements. */
static size_t grain_for(size_t cost)
{
    return cost >= GRAIN ? 1 : GRAIN / (cost ? cost : 1);
}

/* ---- small shared helpers ---------------------------------------------- */

/* Element i of an integer input (axes, k, axis, labels). */
static int64_t idx_get(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_i64(&tmp, i);
}

/* A tensor seen as [outer, n, inner] around one axis. */
struct axis3 {
    size_t outer, n, inner;
};

static struct axis3 split_at(const struct gf_tview *t, int axis)
{
    struct axis3 s = {1, 1, 1};
    for (int i = 0; i < t->rank; i++) {
        size_t d = (size_t)t->dims[i];
        if (i < axis)
            s.outer *= d;
        else if (i == axis)
            s.n = d;
        else
            s.inner *= d;
    }
    return s;
}

/* Column blocks of [outer, n, inner]: block t holds columns [col, col + w)
 * (w <= VB) of outer index o; their row-k elements start at off + k * inner. */
struct colblk {
    size_t o, col, w, off;
};

static size_t colblk_width(struct axis3 s)
{
    return s.inner < VB ? s.inner : VB;
}

static size_t colblk_count(struct axis3 s)
{
    return s.outer * ((s.inner + VB - 1) / VB);
}

static struct colblk colblk_at(struct axis3 s, size_t t)
{
    size_t nb = (s.inner + VB - 1) / VB;
    struct colblk b = {.o = t / nb, .col = t % nb * VB};
    b.w = s.inner - b.col < VB ? s.inner - b.col : VB;
    b.off = b.o * s.n * s.inner + b.col;
    return b;
}

/* Stores v into element i of a float tensor of any float dtype. */
static void put_float(void *y, enum gf_dtype t, size_t i, double v)
{
    switch (t) {
    case GF_FLOAT: ((float *)y)[i] = (float)v; break;
    case GF_DOUBLE: ((double *)y)[i] = v; break;
    case GF_FLOAT16: ((uint16_t *)y)[i] = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: ((uint16_t *)y)[i] = gf_float_to_bf16((float)v); break;
    default: break;
    }
}

static bool is_float_type(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* Runs fn(ctx, part, begin, end) for `parts` equal slices of [0, n) in
 * parallel: `part` lets each slice own a slot of the workspace. */
struct slices {
    void (*fn)(void *ctx, size_t part, size_t begin, size_t end);
    void *ctx;
    size_t n, parts;
};

static void slices_task(void *vs, size_t b, size_t e)
{
    const struct slices *s = vs;
    for (size_t p = b; p < e; p++)
        s->fn(s->ctx, p, s->n * p / s->parts, s->n * (p + 1) / s->parts);
}

static void run_slices(int nt, size_t n, size_t parts,
                       void (*fn)(void *, size_t, size_t, size_t), void *ctx)
{
    struct slices s = {fn, ctx, n, parts};
    gf_parallel_for(nt, parts, 1, slices_task, &s);
}

/* Runs fn(ctx, i) for every i in [0, n) in parallel, each item costing
 * about `cost` elements of work. */
typedef void (*item_fn)(const void *ctx, size_t i);

struct items {
    item_fn fn;
    const void *ctx;
};

static void items_task(void *vi, size_t b, size_t e)
{
    const struct items *it = vi;
    for (size_t i = b; i < e; i++)
        it->fn(it->ctx, i);
}

static void run_items(int nt, size_t n, size_t cost, item_fn fn, const void *ctx)
{
    struct items it = {fn, ctx};
    gf_parallel_for(nt, n, grain_for(cost), items_task, &it);
}

/* ---- element types ----------------------------------------------------------
 * X(dtype, suffix, C type, kind, load, store-from-double, lowest, highest)
 * kind FLT computes in double, SGN in int64_t, UNS in uint64_t.  Stores from
 * double saturate integers and truncate toward zero (numpy's astype).
 */
#define NUM_TYPES(X)                                                                        \
    X(GF_FLOAT, f32, float, FLT, LD_SAME, ST_F32, -INFINITY, INFINITY)                      \
    X(GF_DOUBLE, f64, double, FLT, LD_SAME, ST_F64, -INFINITY, INFINITY)                    \
    X(GF_FLOAT16, f16, uint16_t, FLT, gf_half_to_float, ST_F16, -INFINITY, INFINITY)        \
    X(GF_BFLOAT16, bf16, uint16_t, FLT, gf_bf16_to_float, ST_BF16, -INFINITY, INFINITY)     \
    X(GF_INT8, i8, int8_t, SGN, LD_SAME, ST_I8, INT8_MIN, INT8_MAX)                         \
    X(GF_INT16, i16, int16_t, SGN, LD_SAME, ST_I16, INT16_MIN, INT16_MAX)                   \
    X(GF_INT32, i32, int32_t, SGN, LD_SAME, ST_I32, INT32_MIN, INT32_MAX)                   \
    X(GF_INT64, i64, int64_t, SGN, LD_SAME, ST_I64, INT64_MIN, INT64_MAX)                   \
    X(GF_UINT8, u8, uint8_t, UNS, LD_SAME, ST_U8, 0, UINT8_MAX)                             \
    X(GF_UINT16, u16, uint16_t, UNS, LD_SAME, ST_U16, 0, UINT16_MAX)                        \
    X(GF_UINT32, u32, uint32_t, UNS, LD_SAME, ST_U32, 0, UINT32_MAX)                        \
    X(GF_UINT64, u64, uint64_t, UNS, LD_SAME, ST_U64, 0, UINT64_MAX)                        \
    X(GF_BOOL, b8, uint8_t, UNS, LD_SAME, ST_BOOL, 0, 1)

/* X(dtype, suffix, C type, compute type, load, store) */
#define FLOAT_TYPES(X)                                              \
    X(GF_FLOAT, f32, float, float, LD_SAME, ST_F32)                 \
    X(GF_DOUBLE, f64, double, double, LD_SAME, ST_F64)              \
    X(GF_FLOAT16, f16, uint16_t, float, gf_half_to_float, ST_F16)   \
    X(GF_BFLOAT16, bf16, uint16_t, float, gf_bf16_to_float, ST_BF16)

static inline int64_t sat_s(double v, int64_t lo, int64_t hi)
{
    if (isnan(v))
        return 0;
    if (v <= (double)lo)
        return lo;
    return v >= (double)hi ? hi : (int64_t)v;
}

static inline uint64_t sat_u(double v, uint64_t hi)
{
    if (isnan(v) || v <= 0)
        return 0;
    return v >= (double)hi ? hi : (uint64_t)v;
}

#define LD_SAME(x) (x)
#define ST_F32(v) ((float)(v))
#define ST_F64(v) ((double)(v))
#define ST_F16(v) gf_float_to_half((float)(v))
#define ST_BF16(v) gf_float_to_bf16((float)(v))
#define ST_I8(v) ((int8_t)sat_s(v, INT8_MIN, INT8_MAX))
#define ST_I16(v) ((int16_t)sat_s(v, INT16_MIN, INT16_MAX))
#define ST_I32(v) ((int32_t)sat_s(v, INT32_MIN, INT32_MAX))
#define ST_I64(v) sat_s(v, INT64_MIN, INT64_MAX)
#define ST_U8(v) ((uint8_t)sat_u(v, UINT8_MAX))
#define ST_U16(v) ((uint16_t)sat_u(v, UINT16_MAX))
#define ST_U32(v) ((uint32_t)sat_u(v, UINT32_MAX))
#define ST_U64(v) sat_u(v, UINT64_MAX)
#define ST_BOOL(v) ((uint8_t)((v) != 0))

/* Per-kind arithmetic: signed sums and products wrap (done unsigned). */
#define CT_FLT double
#define CT_SGN int64_t
#define CT_UNS uint64_t
#define ADD_FLT(a, b) ((a) + (b))
#define ADD_SGN(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define ADD_UNS(a, b) ((a) + (b))
#define MUL_FLT(a, b) ((a) * (b))
#define MUL_SGN(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define MUL_UNS(a, b) ((a) * (b))
#define ABS_FLT(x) fabs(x)
#define ABS_SGN(x) ((x) < 0 ? (int64_t)(0 - (uint64_t)(x)) : (x))
#define ABS_UNS(x) (x)
#define NAN_FLT(x) isnan(x)
#define NAN_SGN(x) 0
#define NAN_UNS(x) 0
/* Result of an exact accumulation stored as T. */
#define EX_FLT(T, ST, v) ST(v)
#define EX_SGN(T, ST, v) ((T)(v))
#define EX_UNS(T, ST, v) ((T)(v))

/* ==== Reduce* ================================================================ */

/* Accumulation primitives; the ONNX ops are built from them. */
enum prim { P_SUM, P_L1, P_SUMSQ, P_PROD, P_MAX, P_MIN, P_SUMEXP };

union acc {
    double f; /* FLT kinds, and P_SUMEXP for every kind */
    int64_t s;
    uint64_t u;
};
#define AM_FLT f
#define AM_SGN s
#define AM_UNS u

/* Keeps the larger (smaller) value; a NaN sticks once seen. */
#define KEEP_MAX(KIND, a, v) if ((v) > (a) || NAN_##KIND(v)) (a) = (v)
#define KEEP_MIN(KIND, a, v) if ((v) < (a) || NAN_##KIND(v)) (a) = (v)

/* a = a (+) v for every primitive but P_SUMEXP. */
#define FOLD(KIND, prim, a, v)                                                          \
    switch (prim) {                                                                     \
    case P_SUM: a = ADD_##KIND(a, v); break;                                            \
    case P_L1: a = ADD_##KIND(a, ABS_##KIND(v)); break;                                 \
    case P_SUMSQ: a = ADD_##KIND(a, MUL_##KIND(v, v)); break;                           \
    case P_PROD: a = MUL_##KIND(a, v); break;                                           \
    case P_MAX: KEEP_MAX(KIND, a, v); break;                                            \
    default: KEEP_MIN(KIND, a, v); break;                                               \
    }

struct red_type {
    void (*init)(int prim, union acc *a);
    /* folds x[off], x[off + s], ... (n of them) into *a; m: P_SUMEXP's max */
    void (*row)(int prim, const void *x, size_t off, size_t n, size_t s, union acc *a, double m);
    /* folds x[off + j] into a[j], j < n; mx[j]: P_SUMEXP's max */
    void (*vec)(int prim, const void *x, size_t off, size_t n, union acc *a,
                const union acc *mx);
    void (*merge)(int prim, union acc *a, const union acc *b);
    double (*as_double)(const union acc *a);
    /* y[i] = final value of op from the accumulator (mx: LogSumExp's max) */
    void (*store)(enum gf_op op, void *y, size_t i, const union acc *a, const union acc *mx,
                  size_t count);
};

/* log(sum(exp(x - m))) + m; an infinite or NaN max is the answer itself. */
static double lse_finish(double m, double s)
{
    return isfinite(m) ? log(s) + m : m;
}

#define DEF_RED_INIT(DT, sfx, T, KIND, LD, ST, LO, HI)                                  \
    static void red_init_##sfx(int prim, union acc *a)                                  \
    {                                                                                   \
        CT_##KIND v = 0;                                                                \
        if (prim == P_SUMEXP) {                                                         \
            a->f = 0;                                                                   \
            return;                                                                     \
        }                                                                               \
        if (prim == P_PROD)                                                             \
            v = 1;                                                                      \
        else if (prim == P_MAX)                                                         \
            v = (CT_##KIND)(LO);                                                        \
        else if (prim == P_MIN)                                                         \
            v = (CT_##KIND)(HI);                                                        \
        a->AM_##KIND = v;                                                               \
    }                                                                                   \
    static double red_double_##sfx(const union acc *a)                                  \
    {                                                                                   \
        return (double)a->AM_##KIND;                                                    \
    }

#define DEF_RED_ROW(DT, sfx, T, KIND, LD, ST, LO, HI)                                   \
    static void red_row_##sfx(int prim, const void *x, size_t off, size_t n, size_t s,  \
                              union acc *acc, double m)                                 \
    {                                                                                   \
        const T *p = (const T *)x + off;                                                \
        if (prim == P_SUMEXP) {                                                         \
            double e = acc->f;                                                          \
            for (size_t i = 0; i < n; i++)                                              \
                e += exp((double)LD(p[i * s]) - m);                                     \
            acc->f = e;                                                                 \
            return;                                                                     \
        }                                                                               \
        CT_##KIND a = acc->AM_##KIND;                                                   \
        for (size_t i = 0; i < n; i++) {                                                \
            CT_##KIND v = (CT_##KIND)LD(p[i * s]);                                      \
            FOLD(KIND, prim, a, v)                                                      \
        }                                                                               \
        acc->AM_##KIND = a;                                                             \
    }                                                                                   \
    static void red_vec_##sfx(int prim, const void *x, size_t off, size_t n,            \
                              union acc *acc, const union acc *mx)                      \
    {                                                                                   \
        const T *p = (const T *)x + off;                                                \
        for (size_t j = 0; j < n; j++) {                                                \
            if (prim == P_SUMEXP) {                                                     \
                acc[j].f += exp((double)LD(p[j]) - (double)mx[j].AM_##KIND);            \
                continue;                                                               \
            }                                                                           \
            CT_##KIND a = acc[j].AM_##KIND, v = (CT_##KIND)LD(p[j]);                    \
            FOLD(KIND, prim, a, v)                                                      \
            acc[j].AM_##KIND = a;                                                       \
        }                                                                               \
    }

#define DEF_RED_MERGE(DT, sfx, T, KIND, LD, ST, LO, HI)                                 \
    static void red_merge_##sfx(int prim, union acc *acc, const union acc *b)          \
    {                                                                                   \
        if (prim == P_SUMEXP) {                                                         \
            acc->f += b->f;                                                             \
            return;                                                                     \
        }                                                                               \
        CT_##KIND a = acc->AM_##KIND, v = b->AM_##KIND;                                 \
        switch (prim) {                                                                 \
        case P_PROD: a = MUL_##KIND(a, v); break;                                       \
        case P_MAX: KEEP_MAX(KIND, a, v); break;                                        \
        case P_MIN: KEEP_MIN(KIND, a, v); break;                                        \
        default: a = ADD_##KIND(a, v); break;                                           \
        }                                                                               \
        acc->AM_##KIND = a;                                                             \
    }

#define DEF_RED_STORE(DT, sfx, T, KIND, LD, ST, LO, HI)                                 \
    static void red_store_##sfx(enum gf_op op, void *y, size_t i, const union acc *acc, \
                                const union acc *mx, size_t count)                      \
    {                                                                                   \
        T *q = (T *)y + i;                                                              \
        CT_##KIND a = acc->AM_##KIND;                                                   \
        switch (op) {                                                                   \
        case GF_OP_REDUCE_MEAN: *q = ST((double)a / (double)count); break;              \
        case GF_OP_REDUCE_L2: *q = ST(sqrt((double)a)); break;                          \
        case GF_OP_REDUCE_LOG_SUM_EXP:                                                  \
            *q = ST(lse_finish((double)mx->AM_##KIND, acc->f));                         \
            break;                                                                      \
        default: *q = EX_##KIND(T, ST, a); break;                                       \
        }                                                                               \
    }

NUM_TYPES(DEF_RED_INIT)
NUM_TYPES(DEF_RED_ROW)
NUM_TYPES(DEF_RED_MERGE)
NUM_TYPES(DEF_RED_STORE)

#define RED_ENTRY(DT, sfx, ...) \
    [DT] = {red_init_##sfx,   red_row_##sfx,    red_vec_##sfx,                             \
            red_merge_##sfx,  red_double_##sfx, red_store_##sfx},
static const struct red_type red_types[GF_DTYPE_COUNT] = {NUM_TYPES(RED_ENTRY)};

/* The first accumulation primitive of each op (LogSumExp adds P_SUMEXP). */
static int red_prim(enum gf_op op)
{
    switch (op) {
    case GF_OP_REDUCE_L1: return P_L1;
    case GF_OP_REDUCE_L2: case GF_OP_REDUCE_SUM_SQUARE: return P_SUMSQ;
    case GF_OP_REDUCE_PROD: return P_PROD;
    case GF_OP_REDUCE_MAX: case GF_OP_REDUCE_LOG_SUM_EXP: return P_MAX;
    case GF_OP_REDUCE_MIN: return P_MIN;
    default: return P_SUM;
    }
}

/* The input as kept dims x reduced dims: runs of adjacent dims of one kind
 * are merged and size-1 dims dropped, so the innermost reduced run is as
 * long as possible.  kstr / rstr are input element strides. */
struct red_plan {
    int nk, nr;
    size_t kdim[GF_MAX_RANK], kstr[GF_MAX_RANK];
    size_t rdim[GF_MAX_RANK], rstr[GF_MAX_RANK];
    size_t nout, nred;
};

static void reverse_dims(size_t *d, size_t *s, int n)
{
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        size_t t = d[i];
        d[i] = d[j], d[j] = t;
        t = s[i];
        s[i] = s[j], s[j] = t;
    }
}

static void red_plan_init(struct red_plan *p, const struct gf_tview *x, const bool *reduce)
{
    memset(p, 0, sizeof(*p));
    p->nout = p->nred = 1;
    size_t stride = 1;
    int last = -1; /* kind of the group just added, walking inward-out */
    for (int i = x->rank - 1; i >= 0; i--) {
        size_t d = (size_t)x->dims[i];
        if (d == 1)
            continue;
        int r = reduce[i];
        size_t *dims = r ? p->rdim : p->kdim, *strs = r ? p->rstr : p->kstr;
        int *cnt = r ? &p->nr : &p->nk;
        if (last == r)
            dims[*cnt - 1] *= d; /* contiguous with the group inside it */
        else {
            dims[*cnt] = d;
            strs[(*cnt)++] = stride;
        }
        last = r;
        stride *= d;
        *(r ? &p->nred : &p->nout) *= d;
    }
    reverse_dims(p->kdim, p->kstr, p->nk);
    reverse_dims(p->rdim, p->rstr, p->nr);
    if (p->nr == 0) { /* nothing left to reduce: one element per output */
        p->rdim[0] = 1;
        p->nr = 1;
    }
}

/* Input offset of output element o. */
static size_t red_base(const struct red_plan *p, size_t o)
{
    size_t off = 0;
    for (int i = p->nk - 1; i >= 0; i--) {
        off += (o % p->kdim[i]) * p->kstr[i];
        o /= p->kdim[i];
    }
    return off;
}

/* Folds reduced elements [b, e) (row-major over the reduced dims) of the
 * output at `base` into *a, one innermost run at a time. */
static void red_range(const struct red_plan *p, const struct red_type *ty, int prim,
                      const void *x, size_t base, size_t b, size_t e, union acc *a, double m)
{
    if (b >= e)
        return;
    int last = p->nr - 1;
    size_t c[GF_MAX_RANK], r = b, off = base;
    for (int i = last; i >= 0; i--) {
        c[i] = r % p->rdim[i];
        r /= p->rdim[i];
        off += c[i] * p->rstr[i];
    }
    for (size_t pos = b; pos < e;) {
        size_t run = p->rdim[last] - c[last];
        if (run > e - pos)
            run = e - pos;
        ty->row(prim, x, off, run, p->rstr[last], a, m);
        pos += run;
        c[last] += run;
        off += run * p->rstr[last];
        for (int i = last; i > 0 && c[i] == p->rdim[i]; i--) { /* carry */
            off -= c[i] * p->rstr[i];
            c[i] = 0;
            c[i - 1]++;
            off += p->rstr[i - 1];
        }
    }
}

struct red_ctx {
    const struct red_plan *p;
    const struct red_type *ty;
    enum gf_op op;
    int prim;
    const void *x;
    void *y;
    /* split mode: parts[o * n_parts + k], results[o], max[o] */
    union acc *parts, *results, *max;
    size_t n_parts;
};

/* Output o reduced whole. */
static void red_one(const void *vc, size_t o)
{
    const struct red_ctx *c = vc;
    const struct red_plan *p = c->p;
    size_t base = red_base(p, o);
    union acc a, mx;
    c->ty->init(c->prim, &a);
    red_range(p, c->ty, c->prim, c->x, base, 0, p->nred, &a, 0);
    if (c->op == GF_OP_REDUCE_LOG_SUM_EXP) {
        mx = a;
        c->ty->init(P_SUMEXP, &a);
        red_range(p, c->ty, P_SUMEXP, c->x, base, 0, p->nred, &a, c->ty->as_double(&mx));
    }
    c->ty->store(c->op, c->y, o, &a, &mx, p->nred);
}

/* Folds, for w neighbouring outputs at once, every reduced element: one
 * contiguous read of w values per reduced element. */
static void red_walk(const struct red_ctx *c, int prim, size_t base, size_t w, union acc *a,
                     const union acc *mx)
{
    const struct red_plan *p = c->p;
    size_t idx[GF_MAX_RANK] = {0}, off = base;
    for (size_t r = 0; r < p->nred; r++) {
        c->ty->vec(prim, c->x, off, w, a, mx);
        for (int i = p->nr - 1; i >= 0; i--) { /* next reduced element */
            off += p->rstr[i];
            if (++idx[i] < p->rdim[i])
                break;
            off -= idx[i] * p->rstr[i];
            idx[i] = 0;
        }
    }
}

/* Block mode, when the innermost input dim is kept (outputs are contiguous
 * in the input): blocks of up to VB neighbouring outputs walk the reduced
 * elements together instead of each striding through memory alone. */
static void red_block(const void *vc, size_t t)
{
    const struct red_ctx *c = vc;
    size_t row = c->p->kdim[c->p->nk - 1], nb = (row + VB - 1) / VB;
    size_t col = t % nb * VB, o = t / nb * row + col;
    size_t w = row - col < VB ? row - col : VB, base = red_base(c->p, o);
    union acc a[VB], mx[VB];
    for (size_t j = 0; j < w; j++)
        c->ty->init(c->prim, &a[j]);
    red_walk(c, c->prim, base, w, a, NULL);
    if (c->op == GF_OP_REDUCE_LOG_SUM_EXP) {
        memcpy(mx, a, w * sizeof(union acc));
        for (size_t j = 0; j < w; j++)
            c->ty->init(P_SUMEXP, &a[j]);
        red_walk(c, P_SUMEXP, base, w, a, mx);
    }
    for (size_t j = 0; j < w; j++)
        c->ty->store(c->op, c->y, o + j, &a[j], &mx[j], c->p->nred);
}

/* Split mode, for few outputs with long reductions: part k of output o
 * folds the k-th slice of its reduced elements. */
static void red_part(const void *vc, size_t t)
{
    const struct red_ctx *c = vc;
    size_t o = t / c->n_parts, k = t % c->n_parts, n = c->p->nred;
    double m = c->prim == P_SUMEXP ? c->ty->as_double(&c->max[o]) : 0;
    c->ty->init(c->prim, &c->parts[t]);
    red_range(c->p, c->ty, c->prim, c->x, red_base(c->p, o), n * k / c->n_parts,
              n * (k + 1) / c->n_parts, &c->parts[t], m);
}

static void red_split_pass(struct red_ctx *c, int prim, int nt)
{
    c->prim = prim;
    run_items(nt, c->p->nout * c->n_parts, GRAIN, red_part, c);
    for (size_t o = 0; o < c->p->nout; o++) {
        c->ty->init(prim, &c->results[o]);
        for (size_t k = 0; k < c->n_parts; k++)
            c->ty->merge(prim, &c->results[o], &c->parts[o * c->n_parts + k]);
    }
}

static void red_split(struct red_ctx *c, int nt)
{
    red_split_pass(c, c->prim, nt);
    if (c->op == GF_OP_REDUCE_LOG_SUM_EXP) {
        memcpy(c->max, c->results, c->p->nout * sizeof(union acc));
        red_split_pass(c, P_SUMEXP, nt);
    }
    for (size_t o = 0; o < c->p->nout; o++)
        c->ty->store(c->op, c->y, o, &c->results[o], &c->max[o], c->p->nred);
}

/* Workspace of split mode: nout < threads, so it is small and bounded
 * (sized for a->n_threads, which run() must be given unchanged). */
static size_t red_workspace(const struct gf_kernel_args *a)
{
    size_t nt = (size_t)n_threads(a);
    return nt > 1 ? (nt * nt + 2 * nt) * sizeof(union acc) : 0;
}

static enum gf_status red_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    bool red[GF_MAX_RANK];
    enum gf_status st = gf_reduce_axes(a, red);
    if (st != GF_OK)
        return st;
    struct red_plan p;
    red_plan_init(&p, x, red);
    if ((st = gf_check_out_count(a, 0, x->dtype, p.nout)) != GF_OK || p.nout == 0)
        return st;
    int nt = n_threads(a);
    struct red_ctx c = {.p = &p, .ty = &red_types[x->dtype], .op = a->node->op,
                        .prim = red_prim(a->node->op), .x = x->data, .y = a->out[0].data};
    if (a->workspace && p.nout < (size_t)nt && p.nred >= 2 * GRAIN) {
        c.n_parts = (size_t)nt;
        c.parts = a->workspace;
        c.results = c.parts + p.nout * c.n_parts;
        c.max = c.results + p.nout;
        red_split(&c, nt);
    } else if (p.nk && p.kstr[p.nk - 1] == 1 && p.kdim[p.nk - 1] >= VB / 4 && p.nred > 1) {
        size_t row = p.kdim[p.nk - 1];
        run_items(nt, p.nout / row * ((row + VB - 1) / VB), p.nred * VB, red_block, &c);
    } else {
        run_items(nt, p.nout, p.nred, red_one, &c);
    }
    return GF_OK;
}

static bool red_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || in[0].dtype <= GF_UNDEFINED || in[0].dtype >= GF_DTYPE_COUNT ||
        !red_types[in[0].dtype].row || in[0].rank > GF_MAX_RANK)
        return false;
    /* booleans only make sense for ReduceMax / ReduceMin (opset 20) */
    return in[0].dtype != GF_BOOL || n->op == GF_OP_REDUCE_MAX || n->op == GF_OP_REDUCE_MIN;
}

/* ==== ArgMax ArgMin ========================================================== */

struct arg_ctx {
    const void *x;
    int64_t *y; /* [outer, inner] */
    struct axis3 s;
    bool is_min, last;
};

/* Index of the largest (smallest) value down the axis of each column of a
 * block: the first one, or the last with select_last_index; a NaN wins, as
 * in numpy.  The running index lives in y itself. */
#define DEF_ARG(DT, sfx, T, KIND, LD, ST, LO, HI)                                       \
    static void arg_block_##sfx(const void *vc, size_t t)                               \
    {                                                                                   \
        const struct arg_ctx *c = vc;                                                   \
        struct colblk b = colblk_at(c->s, t);                                           \
        const T *p = (const T *)c->x + b.off;                                           \
        int64_t *y = c->y + b.o * c->s.inner + b.col;                                   \
        CT_##KIND best[VB];                                                             \
        for (size_t j = 0; j < b.w; j++)                                                \
            best[j] = (CT_##KIND)LD(p[j]), y[j] = 0;                                    \
        for (size_t k = 1; k < c->s.n; k++) {                                           \
            for (size_t j = 0; j < b.w; j++) {                                          \
                CT_##KIND v = (CT_##KIND)LD(p[k * c->s.inner + j]);                     \
                bool nv = NAN_##KIND(v), nb = NAN_##KIND(best[j]);                      \
                bool better = (c->is_min ? v < best[j] : v > best[j]) || (nv && !nb);   \
                if (better || (c->last && (v == best[j] || (nv && nb))))                \
                    best[j] = v, y[j] = (int64_t)k;                                     \
            }                                                                           \
        }                                                                               \
    }
NUM_TYPES(DEF_ARG)

#define ARG_ENTRY(DT, sfx, ...) [DT] = arg_block_##sfx,
static const item_fn arg_blocks[GF_DTYPE_COUNT] = {NUM_TYPES(ARG_ENTRY)};

static enum gf_status arg_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    enum gf_status st = gf_axis_attr(a, 0, a->in[0].rank, &ax);
    if (st != GF_OK)
        return st;
    struct axis3 s = split_at(x, ax);
    if ((st = gf_check_out_count(a, 0, GF_INT64, s.outer * s.inner)) != GF_OK ||
        s.outer * s.inner == 0)
        return st;
    if (s.n == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "axis %d has size 0: no element to select", ax);
    struct arg_ctx c = {x->data, a->out[0].data, s, a->node->op == GF_OP_ARG_MIN,
                        gf_node_attr_int(a->node, "select_last_index", 0) != 0};
    run_items(n_threads(a), colblk_count(s), s.n * colblk_width(s), arg_blocks[x->dtype], &c);
    return GF_OK;
}

static bool num_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && in[0].dtype > GF_UNDEFINED && in[0].dtype < GF_DTYPE_COUNT &&
           in[0].dtype != GF_BOOL && arg_blocks[in[0].dtype] && in[0].rank <= GF_MAX_RANK;
}

/* ==== TopK =================================================================== */

struct tk_ctx {
    const void *x; /* [outer, n, inner] */
    void *v;       /* values [outer, k, inner] */
    int64_t *idx;  /* indices [outer, k, inner] */
    struct axis3 s;
    size_t k;
    bool largest;
};

/* tk_before: element i of a column (stride s) ranks before element j:
 * larger first (or smaller first), NaN counting as the largest value, ties
 * to the lower index.  tk_sift: restores the heap h[0], h[s], ... of n
 * entries, whose top is the candidate ranking last, below pos.  tk_col:
 * column j; its slice of the indices output doubles as the heap. */
#define DEF_TOPK(DT, sfx, T, KIND, LD, ST, LO, HI)                                      \
    static bool tk_before_##sfx(const T *p, size_t s, bool largest, int64_t i, int64_t j) \
    {                                                                                   \
        CT_##KIND u = (CT_##KIND)LD(p[(size_t)i * s]), v = (CT_##KIND)LD(p[(size_t)j * s]); \
        bool nu = NAN_##KIND(u), nv = NAN_##KIND(v);                                    \
        if (nu || nv)                                                                   \
            return nu && nv ? i < j : largest == nu;                                    \
        if (u != v)                                                                     \
            return largest ? u > v : u < v;                                             \
        return i < j;                                                                   \
    }                                                                                   \
    static void tk_sift_##sfx(const T *p, size_t s, bool largest, int64_t *h, size_t n, \
                              size_t pos)                                               \
    {                                                                                   \
        for (size_t c; (c = 2 * pos + 1) < n; pos = c) {                                \
            if (c + 1 < n && tk_before_##sfx(p, s, largest, h[c * s], h[(c + 1) * s]))  \
                c++;                                                                    \
            if (!tk_before_##sfx(p, s, largest, h[pos * s], h[c * s]))                  \
                break;                                                                  \
            int64_t t = h[pos * s];                                                     \
            h[pos * s] = h[c * s];                                                      \
            h[c * s] = t;                                                               \
        }                                                                               \
    }                                                                                   \
    static void tk_col_##sfx(const void *vc, size_t j)                                  \
    {                                                                                   \
        const struct tk_ctx *c = vc;                                                    \
        size_t k = c->k, s = c->s.inner, o = j / s, i = j % s;                          \
        const T *p = (const T *)c->x + o * c->s.n * s + i;                              \
        int64_t *h = c->idx + o * k * s + i;                                            \
        T *v = (T *)c->v + o * k * s + i;                                               \
        for (size_t r = 0; r < k; r++)                                                  \
            h[r * s] = (int64_t)r;                                                      \
        for (size_t r = k / 2; r-- > 0;)                                                \
            tk_sift_##sfx(p, s, c->largest, h, k, r);                                   \
        for (size_t m = k; m < c->s.n; m++) {                                           \
            if (tk_before_##sfx(p, s, c->largest, (int64_t)m, h[0])) {                  \
                h[0] = (int64_t)m;                                                      \
                tk_sift_##sfx(p, s, c->largest, h, k, 0);                               \
            }                                                                           \
        }                                                                               \
        for (size_t end = k; end-- > 1;) { /* heap sort: best first */                  \
            int64_t t = h[0];                                                           \
            h[0] = h[end * s];                                                          \
            h[end * s] = t;                                                             \
            tk_sift_##sfx(p, s, c->largest, h, end, 0);                                 \
        }                                                                               \
        for (size_t r = 0; r < k; r++)                                                  \
            v[r * s] = p[(size_t)h[r * s] * s];                                         \
    }
NUM_TYPES(DEF_TOPK)

#define TOPK_ENTRY(DT, sfx, ...) [DT] = tk_col_##sfx,
static const item_fn tk_cols[GF_DTYPE_COUNT] = {NUM_TYPES(TOPK_ENTRY)};

/* k from input 1 (opset 10+) or the attribute (opset 1). */
static enum gf_status tk_get_k(const struct gf_kernel_args *a, int64_t *k)
{
    if (a->n_in > 1 && a->in[1].data) {
        const struct gf_tview *t = &a->in[1];
        if (!gf_is_index_type(t->dtype) || t->nelem != 1)
            return gf_kernel_error(a, GF_ERR_INVALID,
                                   "K (input 1) must hold one int64, got %zu %s elements",
                                   t->nelem, gf_dtype_name(t->dtype));
        *k = idx_get(t, 0);
        return GF_OK;
    }
    const struct gf_attr *at = gf_node_attr(a->node, "k");
    if (!at)
        return gf_kernel_error(a, GF_ERR_INVALID, "k is missing (neither input 1 nor attribute)");
    *k = at->i;
    return GF_OK;
}

/* sorted = 0 leaves the order open: sorted output is one valid answer. */
static enum gf_status topk_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    int64_t k = 0;
    enum gf_status st = gf_axis_attr(a, -1, a->in[0].rank, &ax);
    if (st != GF_OK || (st = tk_get_k(a, &k)) != GF_OK)
        return st;
    struct axis3 s = split_at(x, ax);
    if (k < 0 || (uint64_t)k > s.n)
        return gf_kernel_error(a, GF_ERR_INVALID, "k = %lld is out of range [0, %zu] (axis %d)",
                               (long long)k, s.n, ax);
    size_t nout = s.outer * (size_t)k * s.inner;
    if ((st = gf_check_out_count(a, 0, x->dtype, nout)) != GF_OK ||
        (st = gf_check_out_count(a, 1, GF_INT64, nout)) != GF_OK || nout == 0)
        return st;
    struct tk_ctx c = {x->data, a->out[0].data, a->out[1].data, s, (size_t)k,
                       gf_node_attr_int(a->node, "largest", 1) != 0};
    run_items(n_threads(a), s.outer * s.inner, s.n, tk_cols[x->dtype], &c);
    return GF_OK;
}

/* ==== CumSum ================================================================= */

struct cs_ctx {
    const void *x;
    void *y;
    struct axis3 s;
    bool exclusive, reverse;
};

/* Each column of a block summed down the axis.  Every partial sum is
 * rounded to the element type, as numpy, PyTorch and ONNX Runtime do (and
 * so the ONNX reference outputs). */
#define RND_FLT(LD, ST, v) ((double)LD(ST(v)))
#define RND_SGN(LD, ST, v) (v)
#define RND_UNS(LD, ST, v) (v)
#define DEF_CUMSUM(DT, sfx, T, KIND, LD, ST, LO, HI)                                    \
    static void cs_block_##sfx(const void *vc, size_t blk)                              \
    {                                                                                   \
        const struct cs_ctx *c = vc;                                                    \
        struct colblk b = colblk_at(c->s, blk);                                         \
        const T *p = (const T *)c->x + b.off;                                           \
        T *q = (T *)c->y + b.off;                                                       \
        CT_##KIND acc[VB] = {0};                                                        \
        for (size_t t = 0; t < c->s.n; t++) {                                           \
            size_t r = (c->reverse ? c->s.n - 1 - t : t) * c->s.inner;                  \
            for (size_t j = 0; j < b.w; j++) {                                          \
                CT_##KIND v = (CT_##KIND)LD(p[r + j]);                                  \
                if (c->exclusive)                                                       \
                    q[r + j] = EX_##KIND(T, ST, acc[j]);                                \
                acc[j] = RND_##KIND(LD, ST, ADD_##KIND(acc[j], v));                     \
                if (!c->exclusive)                                                      \
                    q[r + j] = EX_##KIND(T, ST, acc[j]);                                \
            }                                                                           \
        }                                                                               \
    }
NUM_TYPES(DEF_CUMSUM)

#define CS_ENTRY(DT, sfx, ...) [DT] = cs_block_##sfx,
static const item_fn cs_blocks[GF_DTYPE_COUNT] = {NUM_TYPES(CS_ENTRY)};

static enum gf_status cumsum_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *t = a->n_in > 1 ? &a->in[1] : NULL;
    if (!t || !t->data || !gf_is_index_type(t->dtype) || t->nelem != 1 || t->rank > 1)
        return gf_kernel_error(a, GF_ERR_INVALID,
                               "axis (input 1) must be one int32 or int64 value");
    int64_t axis = idx_get(t, 0);
    int ax;
    enum gf_status st = gf_norm_axis(a, "axis", axis, x->rank, &ax);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, x->dtype, x->nelem);
    if (st != GF_OK || x->nelem == 0)
        return st;
    struct cs_ctx c = {x->data, a->out[0].data, split_at(x, ax),
                       gf_node_attr_int(a->node, "exclusive", 0) != 0,
                       gf_node_attr_int(a->node, "reverse", 0) != 0};
    run_items(n_threads(a), colblk_count(c.s), c.s.n * colblk_width(c.s), cs_blocks[x->dtype],
              &c);
    return GF_OK;
}

/* ==== Softmax LogSoftmax Hardmax ============================================= */

/* exp in the compute type: expf for float, exp for double. */
#define EXP(x) _Generic((x), float: expf, default: exp)(x)

/* Model opset of ai.onnx (the newest when the import is missing). */
static int64_t onnx_opset(const struct gf_kernel_args *a)
{
    int64_t v = a->node->graph ? gf_model_opset(a->node->graph->model, "") : 0;
    return v > 0 ? v : 23;
}

struct smx_ctx {
    enum gf_op op;
    const void *x;
    void *y;
    struct axis3 s;
};

/* Each column of a block (n >= 1 rows): the max is subtracted before exp
 * and the sum kept in double; f is 1/sum (Softmax) or log(sum) (LogSoftmax). */
#define DEF_SMX(DT, sfx, T, C, LD, ST)                                                  \
    static void smx_block_##sfx(const void *vc, size_t t)                               \
    {                                                                                   \
        const struct smx_ctx *c = vc;                                                   \
        struct colblk b = colblk_at(c->s, t);                                           \
        const T *p = (const T *)c->x + b.off;                                           \
        T *q = (T *)c->y + b.off;                                                       \
        size_t n = c->s.n, s = c->s.inner, am[VB];                                      \
        C m[VB], f[VB];                                                                 \
        double sum[VB];                                                                 \
        for (size_t j = 0; j < b.w; j++)                                                \
            m[j] = LD(p[j]), am[j] = 0, sum[j] = 0;                                     \
        for (size_t k = 1; k < n; k++)                                                  \
            for (size_t j = 0; j < b.w; j++)                                            \
                if (LD(p[k * s + j]) > m[j])                                            \
                    m[j] = LD(p[k * s + j]), am[j] = k;                                 \
        if (c->op == GF_OP_HARDMAX) {                                                   \
            for (size_t k = 0; k < n; k++)                                              \
                for (size_t j = 0; j < b.w; j++)                                        \
                    q[k * s + j] = ST(k == am[j] ? 1 : 0);                              \
            return;                                                                     \
        }                                                                               \
        for (size_t k = 0; k < n; k++)                                                  \
            for (size_t j = 0; j < b.w; j++)                                            \
                sum[j] += EXP((C)LD(p[k * s + j]) - m[j]);                              \
        for (size_t j = 0; j < b.w; j++)                                                \
            f[j] = (C)(c->op == GF_OP_SOFTMAX ? 1 / sum[j] : log(sum[j]));              \
        for (size_t k = 0; k < n; k++) {                                                \
            for (size_t j = 0; j < b.w; j++) {                                          \
                C d = (C)LD(p[k * s + j]) - m[j];                                       \
                q[k * s + j] = ST(c->op == GF_OP_SOFTMAX ? EXP(d) * f[j] : d - f[j]);   \
            }                                                                           \
        }                                                                               \
    }
FLOAT_TYPES(DEF_SMX)

#define SMX_ENTRY(DT, sfx, ...) [DT] = smx_block_##sfx,
static const item_fn smx_blocks[GF_DTYPE_COUNT] = {FLOAT_TYPES(SMX_ENTRY)};

/* Contiguous rows (the axis is the last one) of fp32 / fp64, the common
 * case.  fp64: the same arithmetic as smx_block (max, then exp(x - max)
 * summed in double in index order, then * 1/sum or - log(sum)), so the
 * same bits, but exp runs once per element (Softmax keeps it in the output
 * and scales it in place), the max and the scaling are plain loops that
 * vectorize, and there is no column-block bookkeeping.  The max is taken
 * in SMX_LANES independent lanes: in a row without NaN that is the same
 * maximum, and a row with a NaN comes out all NaN either way (as does a
 * row of -inf). */
#define SMX_LANES 8
#define DEF_SMX_MAX(T, sfx)                                                             \
    static inline __attribute__((always_inline)) T smx_max_##sfx(const T *restrict p,   \
                                                                 size_t n)              \
    {                                                                                   \
        T m = p[0];                                                                     \
        size_t i = 0;                                                                   \
        if (n >= 2 * SMX_LANES) {                                                       \
            T v[SMX_LANES];                                                             \
            for (size_t k = 0; k < SMX_LANES; k++)                                      \
                v[k] = p[k];                                                            \
            for (i = SMX_LANES; i + SMX_LANES <= n; i += SMX_LANES)                     \
                for (size_t k = 0; k < SMX_LANES; k++)                                  \
                    v[k] = p[i + k] > v[k] ? p[i + k] : v[k];                           \
            for (size_t k = 0; k < SMX_LANES; k++)                                      \
                m = v[k] > m || v[k] != v[k] ? v[k] : m;                                \
        }                                                                               \
        for (; i < n; i++)                                                              \
            m = p[i] > m || p[i] != p[i] ? p[i] : m;                                    \
        return m;                                                                       \
    }
DEF_SMX_MAX(float, f32x)
DEF_SMX_MAX(double, f64)
#define DEF_SMX_ROW(T, sfx)                                                             \
    static void smx_row_##sfx(const void *vc, size_t r)                                 \
    {                                                                                   \
        const struct smx_ctx *c = vc;                                                   \
        size_t n = c->s.n;                                                              \
        const T *restrict p = (const T *)c->x + r * n;                                  \
        T *restrict q = (T *)c->y + r * n;                                              \
        T m = smx_max_##sfx(p, n);                                                      \
        double sum = 0;                                                                 \
        if (c->op == GF_OP_SOFTMAX) {                                                   \
            for (size_t i = 0; i < n; i++) {                                            \
                T e = EXP(p[i] - m);                                                    \
                q[i] = e;                                                               \
                sum += e;                                                               \
            }                                                                           \
            T f = (T)(1 / sum);                                                         \
            for (size_t i = 0; i < n; i++)                                              \
                q[i] *= f;                                                              \
        } else {                                                                        \
            for (size_t i = 0; i < n; i++)                                              \
                sum += EXP(p[i] - m);                                                   \
            T f = (T)log(sum);                                                          \
            for (size_t i = 0; i < n; i++)                                              \
                q[i] = (p[i] - m) - f;                                                  \
        }                                                                               \
    }
DEF_SMX_ROW(double, f64)

/* fp32 rows: exp through fu_expf (float arithmetic, within 2 ulp; the
 * fused Attention's softmax takes the same), 8 lanes a vector; the sum in
 * double over FU_LANES lanes. */
FU_HOT static void smx_row_f32(const void *vc, size_t r)
{
    const struct smx_ctx *c = vc;
    size_t n = c->s.n;
    const float *restrict p = (const float *)c->x + r * n;
    float *restrict q = (float *)c->y + r * n;
    float m = smx_max_f32x(p, n);
    for (size_t k = 0; k < n; k++)
        q[k] = fu_expf(p[k] - m);
    double sum = fu_sum_f32(q, n);
    if (c->op == GF_OP_SOFTMAX) {
        float f = (float)(1 / sum);
        for (size_t k = 0; k < n; k++)
            q[k] *= f;
    } else {
        float f = (float)log(sum);
        for (size_t k = 0; k < n; k++)
            q[k] = (p[k] - m) - f;
    }
}

/* Opset 13+: along `axis` (default -1).  Before 13 the input is coerced to
 * 2-D [prod(dims[:axis]), prod(dims[axis:])] (axis default 1) and the op
 * runs along the second dim. */
static enum gf_status smx_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    bool old = onnx_opset(a) < 13;
    int ax;
    enum gf_status st = gf_axis_attr(a, old ? 1 : -1, a->in[0].rank, &ax);
    if (st != GF_OK)
        return st;
    struct axis3 s = split_at(x, ax);
    if (old) {
        s.n *= s.inner;
        s.inner = 1;
    }
    if ((st = gf_check_out_count(a, 0, x->dtype, x->nelem)) != GF_OK || x->nelem == 0)
        return st;
    struct smx_ctx c = {a->node->op, x->data, a->out[0].data, s};
    if (s.inner == 1 && s.n > 0 && c.op != GF_OP_HARDMAX &&
        (x->dtype == GF_FLOAT || x->dtype == GF_DOUBLE)) {
        run_items(n_threads(a), s.outer, s.n, x->dtype == GF_FLOAT ? smx_row_f32 : smx_row_f64,
                  &c);
        return GF_OK;
    }
    run_items(n_threads(a), colblk_count(s), s.n * colblk_width(s), smx_blocks[x->dtype], &c);
    return GF_OK;
}

static bool float_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && is_float_type(in[0].dtype) && in[0].rank <= GF_MAX_RANK;
}

/* ==== LayerNormalization ===================================================== */

/* Offsets into Scale or B broadcast (numpy rules) over the normalized block. */
struct bcast {
    int rank;
    size_t dims[GF_MAX_RANK];
    int64_t strides[GF_MAX_RANK];
    bool full; /* same element count as the block: offset j is j */
};

static bool bcast_init(struct bcast *b, const struct gf_tview *t, const struct gf_tview *block)
{
    for (int i = 1; i <= t->rank; i++) { /* dims beyond the block's rank must be 1 */
        int64_t d = t->dims[t->rank - i];
        if (d != 1 && (i > block->rank || d != block->dims[block->rank - i]))
            return false;
    }
    b->rank = block->rank;
    for (int i = 0; i < block->rank; i++)
        b->dims[i] = (size_t)block->dims[i];
    gf_bcast_strides(t, block, b->strides);
    b->full = t->nelem == block->nelem;
    return true;
}

static inline size_t bcast_off(const struct bcast *b, size_t j)
{
    if (b->full)
        return j;
    size_t off = 0;
    for (int i = b->rank - 1; i >= 0; i--) {
        off += (j % b->dims[i]) * (size_t)b->strides[i];
        j /= b->dims[i];
    }
    return off;
}

/* Rows of n elements: X [rows, n], Mean and InvStdDev [rows] (optional). */
struct ln_ctx {
    const void *x, *w, *b;
    void *y, *mean, *inv;
    enum gf_dtype mean_dt, inv_dt;
    size_t n;
    double eps;
    struct bcast bw, bb;
};

/* Two-pass mean and variance, and Y, in double, rounded once: a mean
 * rounded to float first would cost rows far from zero their precision. */
#define DEF_LN(DT, sfx, T, C, LD, ST)                                                   \
    static void ln_row_##sfx(const void *vc, size_t r)                                  \
    {                                                                                   \
        const struct ln_ctx *c = vc;                                                    \
        const T *p = (const T *)c->x + r * c->n, *w = c->w, *b = c->b;                  \
        T *q = (T *)c->y + r * c->n;                                                    \
        double s = 0, var = 0;                                                          \
        for (size_t j = 0; j < c->n; j++)                                               \
            s += LD(p[j]);                                                              \
        double mean = s / (double)c->n;                                                 \
        for (size_t j = 0; j < c->n; j++) {                                             \
            double d = LD(p[j]) - mean;                                                 \
            var += d * d;                                                               \
        }                                                                               \
        double inv = 1.0 / sqrt(var / (double)c->n + c->eps);                           \
        for (size_t j = 0; j < c->n; j++) {                                             \
            double v = (LD(p[j]) - mean) * inv * LD(w[bcast_off(&c->bw, j)]);           \
            if (b)                                                                      \
                v += LD(b[bcast_off(&c->bb, j)]);                                       \
            q[j] = ST(v);                                                               \
        }                                                                               \
        if (c->mean)                                                                    \
            put_float(c->mean, c->mean_dt, r, mean);                                    \
        if (c->inv)                                                                     \
            put_float(c->inv, c->inv_dt, r, inv);                                       \
    }
FLOAT_TYPES(DEF_LN)

/* fp32 rows with Scale and B (if any) as dense as the row (the usual [n]
 * over the last axis): the same two-pass double statistics and double Y,
 * the sums over SMX_LANES lanes and no broadcast offsets, so that it
 * vectorizes (GPT-2's [2048, 512] LayerNormalization 3.0 -> ~0.3 ms). */
FU_HOT static void ln_row_f32_dense(const void *vc, size_t r)
{
    const struct ln_ctx *c = vc;
    size_t n = c->n;
    const float *restrict p = (const float *)c->x + r * n, *restrict w = c->w,
                          *restrict b = c->b;
    float *restrict q = (float *)c->y + r * n;
    double mean = fu_sum_f32(p, n) / (double)n;
    double inv = 1.0 / sqrt(fu_dev2_f32(p, n, mean) / (double)n + c->eps);
    if (b)
        for (size_t j = 0; j < n; j++)
            q[j] = (float)((p[j] - mean) * inv * w[j] + b[j]);
    else
        for (size_t j = 0; j < n; j++)
            q[j] = (float)((p[j] - mean) * inv * w[j]);
    if (c->mean)
        put_float(c->mean, c->mean_dt, r, mean);
    if (c->inv)
        put_float(c->inv, c->inv_dt, r, inv);
}

#define LN_ENTRY(DT, sfx, ...) [DT] = ln_row_##sfx,
static const item_fn ln_rows[GF_DTYPE_COUNT] = {FLOAT_TYPES(LN_ENTRY)};

/* Scale (input 1) or B (input 2): same dtype as X, broadcastable to X.shape[axis:]. */
static enum gf_status ln_param(const struct gf_kernel_args *a, size_t i, const char *name,
                               const struct gf_tview *block, struct bcast *bc)
{
    const struct gf_tview *t = &a->in[i];
    if (t->dtype != a->in[0].dtype)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, X is %s", name, i,
                               gf_dtype_name(t->dtype), gf_dtype_name(a->in[0].dtype));
    if (!bcast_init(bc, t, block))
        return gf_kernel_error(a, GF_ERR_INVALID,
                               "%s (input %zu) of rank %d does not broadcast to the %d "
                               "normalized dims of X", name, i, t->rank, block->rank);
    return GF_OK;
}

/* Optional output i ([rows], a float type): its buffer, or NULL if omitted. */
static enum gf_status ln_stat_out(const struct gf_kernel_args *a, size_t i, size_t rows,
                                  void **data, enum gf_dtype *dt)
{
    *data = NULL;
    if (i >= a->n_out || !a->out[i].data)
        return GF_OK;
    const struct gf_tview *o = &a->out[i];
    if (!is_float_type(o->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is %s, expected a float type", i,
                               gf_dtype_name(o->dtype));
    if (o->nelem != rows)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has %zu elements, expected %zu",
                               i, o->nelem, rows);
    *data = o->data;
    *dt = o->dtype;
    return GF_OK;
}

/* stash_type picks the precision of Mean / InvStdDev; they are computed in
 * double here whatever it says, and stored in the outputs' own dtype. */
static enum gf_status ln_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int ax;
    enum gf_status st = gf_axis_attr(a, -1, a->in[0].rank, &ax);
    if (st != GF_OK)
        return st;
    if (a->n_in < 2 || !a->in[1].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "Scale (input 1) is missing");
    struct gf_tview block = {.dtype = x->dtype};
    gf_tview_set_shape(&block, x->rank - ax, x->dims + ax);
    struct ln_ctx c = {.x = x->data, .w = a->in[1].data, .y = a->out[0].data,
                       .n = block.nelem, .eps = gf_node_attr_float(a->node, "epsilon", 1e-5f)};
    size_t rows = block.nelem ? x->nelem / block.nelem : split_at(x, ax).outer;
    st = ln_param(a, 1, "Scale", &block, &c.bw);
    if (st == GF_OK && a->n_in > 2 && a->in[2].data) {
        c.b = a->in[2].data;
        st = ln_param(a, 2, "B", &block, &c.bb);
    }
    if (st != GF_OK || (st = gf_check_out_count(a, 0, x->dtype, x->nelem)) != GF_OK ||
        (st = ln_stat_out(a, 1, rows, &c.mean, &c.mean_dt)) != GF_OK ||
        (st = ln_stat_out(a, 2, rows, &c.inv, &c.inv_dt)) != GF_OK)
        return st;
    bool dense = x->dtype == GF_FLOAT && c.bw.full && (!c.b || c.bb.full);
    run_items(n_threads(a), rows, c.n, dense ? ln_row_f32_dense : ln_rows[x->dtype], &c);
    return GF_OK;
}

/* ==== SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss ====================== */

/* Scores [N, C, D...] seen as [N, C, D]; labels [N, D]. */
struct loss_ctx {
    const void *x, *w;
    const struct gf_tview *labels;
    void *y, *logp; /* y: [N, D] for reduction "none", else unused here */
    size_t c, d;
    bool softmax, per_pos, has_ii;
    int64_t ii;
    double part[2 * MAX_THREADS]; /* per slice: loss sum, weight sum */
};

/* Positions [b, e) of [N, D]: loss = -w[t] * logp[t] with t the label, and
 * logp the scores (NLL) or their log-softmax over C (SCE). */
#define DEF_LOSS(DT, sfx, T, C, LD, ST)                                                 \
    static void loss_part_##sfx(void *vc, size_t part, size_t b, size_t e)             \
    {                                                                                   \
        struct loss_ctx *c = vc;                                                        \
        const T *w = c->w;                                                              \
        size_t D = c->d;                                                                \
        double ls = 0, ws = 0;                                                          \
        for (size_t pos = b; pos < e; pos++) {                                          \
            size_t base = pos / D * c->c * D + pos % D;                                 \
            const T *p = (const T *)c->x + base;                                        \
            C m = 0, lse = 0;                                                           \
            if (c->softmax) {                                                           \
                m = LD(p[0]);                                                           \
                for (size_t k = 1; k < c->c; k++)                                       \
                    m = LD(p[k * D]) > m ? LD(p[k * D]) : m;                            \
                double s = 0;                                                           \
                for (size_t k = 0; k < c->c; k++)                                       \
                    s += EXP((C)LD(p[k * D]) - m);                                      \
                lse = (C)log(s);                                                        \
                for (size_t k = 0; c->logp && k < c->c; k++)                            \
                    ((T *)c->logp)[base + k * D] = ST(((C)LD(p[k * D]) - m) - lse);     \
            }                                                                           \
            int64_t t = idx_get(c->labels, pos);                                        \
            double l = 0, wt = 0;                                                       \
            if (!(c->has_ii && t == c->ii)) {                                           \
                wt = w ? (double)LD(w[t]) : 1.0;                                        \
                l = -(double)(((C)LD(p[(size_t)t * D]) - m) - lse) * wt;                \
            }                                                                           \
            if (c->per_pos)                                                             \
                ((T *)c->y)[pos] = ST(l);                                               \
            ls += l;                                                                    \
            ws += wt;                                                                   \
        }                                                                               \
        c->part[2 * part] = ls;                                                         \
        c->part[2 * part + 1] = ws;                                                     \
    }
FLOAT_TYPES(DEF_LOSS)

typedef void (*loss_fn)(void *c, size_t part, size_t b, size_t e);
#define LOSS_ENTRY(DT, sfx, ...) [DT] = loss_part_##sfx,
static const loss_fn loss_parts[GF_DTYPE_COUNT] = {FLOAT_TYPES(LOSS_ENTRY)};

static enum gf_status loss_run(const struct gf_kernel_args *a)
{
    struct gf_loss_rule r;
    struct gf_labels l;
    enum gf_status st = gf_nll_check(a, &r, &l);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0];
    bool none = r.ce.red == GF_RED_NONE;
    struct loss_ctx c = {.x = x->data, .labels = &a->in[1], .y = a->out[0].data,
                         .c = l.classes, .softmax = a->node->op ==
                         GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS, .per_pos = none,
                         .has_ii = l.has_ii, .ii = l.ii};
    c.w = fu_has(a, 2) ? a->in[2].data : NULL;
    size_t npos = a->in[1].nelem;
    c.d = (size_t)x->dims[0] ? npos / (size_t)x->dims[0] : 1;
    if (c.softmax && fu_has_out(a, 1))
        c.logp = a->out[1].data;
    if (c.c == 0 && npos) /* every label was ignore_index: nothing to softmax over */
        c.softmax = false, c.logp = NULL;
    int nt = n_threads(a);
    size_t parts = npos * (c.c + 1) / GRAIN + 1;
    parts = parts < (size_t)nt ? parts : (size_t)nt;
    run_slices(nt, npos, parts, loss_parts[x->dtype], &c);
    double ls = 0, ws = 0;
    for (size_t p = 0; p < parts; p++)
        ls += c.part[2 * p], ws += c.part[2 * p + 1];
    if (!none)
        put_float(c.y, x->dtype, 0, r.ce.red == GF_RED_MEAN ? ls / ws : ls);
    return GF_OK;
}

/* ==== the table ============================================================== */

#define KERNEL(OP, IMPL, SUPPORTS, WORKSPACE, RUN)                                      \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = IMPL,           \
     .supports = SUPPORTS, .workspace = WORKSPACE, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(REDUCE_SUM, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_MEAN, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_MAX, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_MIN, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_PROD, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_L1, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_L2, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_SUM_SQUARE, "reduce", red_supports, red_workspace, red_run),
    KERNEL(REDUCE_LOG_SUM_EXP, "reduce", red_supports, red_workspace, red_run),
    KERNEL(ARG_MAX, "argext", num_supports, NULL, arg_run),
    KERNEL(ARG_MIN, "argext", num_supports, NULL, arg_run),
    KERNEL(TOP_K, "heap", num_supports, NULL, topk_run),
    KERNEL(CUM_SUM, "scan", num_supports, NULL, cumsum_run),
    KERNEL(SOFTMAX, "softmax", float_supports, NULL, smx_run),
    KERNEL(LOG_SOFTMAX, "softmax", float_supports, NULL, smx_run),
    KERNEL(HARDMAX, "softmax", float_supports, NULL, smx_run),
    KERNEL(LAYER_NORMALIZATION, "layernorm", float_supports, NULL, ln_run),
    KERNEL(SOFTMAX_CROSS_ENTROPY_LOSS, "loss", float_supports, NULL, loss_run),
    KERNEL(NEGATIVE_LOG_LIKELIHOOD_LOSS, "loss", float_supports, NULL, loss_run),
};

const struct gf_kernel_table gf_cpu_reduce_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};
