/*
 * CPU kernels: the elementwise family.
 *
 *   binary    Add Sub Mul Div Pow Mod And Or Xor Equal Less LessOrEqual
 *             Greater GreaterOrEqual (multidirectional broadcasting)
 *   unary     Sqrt Reciprocal Neg Abs Exp Log Sin Cos Tanh Sigmoid Relu
 *             LeakyRelu Elu Selu Softplus Softsign HardSigmoid HardSwish Erf
 *             Gelu Floor Ceil Round Sign Not IsNaN IsInf Clip
 *   variadic  Max Min Mean Sum, and Where
 *   plumbing  Cast CastLike Identity Dropout
 *
 * One driver walks every op.  It aligns each input to the output by ONNX
 * broadcasting, drops size-1 axes and merges axes that are contiguous in
 * every operand (so same-shape and scalar operands become one flat run),
 * splits the output over threads and calls a typed inner loop on each run
 * of the innermost axis.  The inner loops are generated from one C
 * expression per op and element-type list; fp16 and bf16 run the fp32
 * loops on converted blocks; mixed-type Pow, Cast and Dropout go through
 * blocks of double (or int64, between integer types).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* GCC 12 at -O2 vectorizes only loops of known trip count; these inner
 * loops are the bulk of a transformer's elementwise time. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#include <float.h>
#include <stdint.h>
#include <tgmath.h>

#include "cpu.h"
#include "fused.h" /* fu_expf_acc fu_tanhf_acc fu_sigmoidf_acc, FU_HOT */

#define EW_MAX_IN 3
#define EW_GRAIN 16384 /* elements per thread chunk, at least */
#define EW_BLOCK 256   /* elements per converted block (fp16/bf16, casts) */

/* ---- the driver ---------------------------------------------------------- */

struct ew_param {
    float alpha, beta, gamma; /* activation attributes */
    int flag;                 /* Gelu: tanh form; IsInf: 1 +inf, 2 -inf; Pow, Cast: int64 */
    bool has_lo, has_hi;      /* Clip bounds given, stored as the loop's type */
    _Alignas(8) unsigned char lo[8];
    _Alignas(8) unsigned char hi[8];
};

struct ew_job;
/* One run of n output elements; input k advances st[k] (0 or 1) elements
 * per output element. */
typedef void (*ew_loop)(const struct ew_job *j, void *out, const void *const *in,
                        const ptrdiff_t *st, size_t n);

struct ew_job {
    int n_in, rank;                     /* rank >= 1 after merging axes */
    int64_t dims[GF_MAX_RANK];          /* merged output axes */
    int64_t st[EW_MAX_IN][GF_MAX_RANK]; /* element strides per input, 0: broadcast */
    const char *in[EW_MAX_IN];
    enum gf_dtype in_dt[EW_MAX_IN];
    size_t in_size[EW_MAX_IN];
    char *out;
    enum gf_dtype out_dt;
    size_t out_size;
    ew_loop loop;  /* called on each run */
    ew_loop inner; /* the fp32 loop that ew_half_loop calls */
    struct ew_param p;
};

/* Merges the output axes: size-1 axes go, and an axis joins the one inside
 * it when every input's strides are contiguous across the pair. */
static void ew_merge_axes(struct ew_job *j, const struct gf_tview *out,
                          int64_t st[][GF_MAX_RANK])
{
    int r = 0;
    for (int d = 0; d < out->rank; d++) {
        if (out->dims[d] == 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < j->n_in; k++)
            merge = j->st[k][r - 1] == st[k][d] * out->dims[d];
        if (merge) {
            j->dims[r - 1] *= out->dims[d];
        } else {
            j->dims[r] = out->dims[d];
            r++;
        }
        for (int k = 0; k < j->n_in; k++)
            j->st[k][r - 1] = st[k][d];
    }
    if (r == 0) { /* a single element */
        j->dims[0] = 1;
        for (int k = 0; k < j->n_in; k++)
            j->st[k][0] = 0;
        r = 1;
    }
    j->rank = r;
}

/* Sets up j to compute out from ins[0..n_in) broadcast to out's shape;
 * j->loop and j->p are the caller's. */
static enum gf_status ew_prepare(const struct gf_kernel_args *a, struct ew_job *j,
                                 const struct gf_tview *ins, int n_in,
                                 const struct gf_tview *out)
{
    int64_t st[EW_MAX_IN][GF_MAX_RANK];
    j->n_in = n_in;
    for (int k = 0; k < n_in; k++) {
        const struct gf_tview *t = &ins[k];
        enum gf_status s = gf_ew_bcast(a, k, t, out, st[k]);
        if (s != GF_OK)
            return s;
        j->in[k] = t->data;
        j->in_dt[k] = t->dtype;
        j->in_size[k] = gf_dtype_size(t->dtype);
    }
    j->out = out->data;
    j->out_dt = out->dtype;
    j->out_size = gf_dtype_size(out->dtype);
    ew_merge_axes(j, out, st);
    return GF_OK;
}

/* Output elements [begin, end): runs of the innermost merged axis. */
static void ew_chunk(void *ctx, size_t begin, size_t end)
{
    const struct ew_job *j = ctx;
    int last = j->rank - 1;
    int64_t idx[GF_MAX_RANK];
    ptrdiff_t off[EW_MAX_IN] = {0}, st[EW_MAX_IN];
    size_t rem = begin;
    for (int d = last; d >= 0; d--) {
        idx[d] = (int64_t)(rem % (size_t)j->dims[d]);
        rem /= (size_t)j->dims[d];
        for (int k = 0; k < j->n_in; k++)
            off[k] += idx[d] * j->st[k][d];
    }
    for (int k = 0; k < j->n_in; k++)
        st[k] = j->st[k][last];
    for (size_t pos = begin; pos < end;) {
        size_t n = (size_t)(j->dims[last] - idx[last]);
        if (n > end - pos)
            n = end - pos;
        const void *ip[EW_MAX_IN];
        for (int k = 0; k < j->n_in; k++)
            ip[k] = j->in[k] + off[k] * (ptrdiff_t)j->in_size[k];
        j->loop(j, j->out + pos * j->out_size, ip, st, n);
        pos += n;
        /* step to the next run, carrying into the outer axes */
        idx[last] += (int64_t)n;
        for (int k = 0; k < j->n_in; k++)
            off[k] += (ptrdiff_t)n * st[k];
        for (int d = last; d > 0 && idx[d] == j->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
            for (int k = 0; k < j->n_in; k++)
                off[k] += j->st[k][d - 1] - j->dims[d] * j->st[k][d];
        }
    }
}

static void ew_exec(const struct gf_kernel_args *a, const struct ew_job *j, size_t nelem)
{
    gf_parallel_for(a->n_threads, nelem, EW_GRAIN, ew_chunk, (void *)j);
}

/* ---- element types ------------------------------------------------------- */

/* X(dtype, C type, suffix, lowest, highest, ...) for each type of a list. */
#define EW_FLOATS(X, ...)                                                  \
    X(GF_FLOAT, float, f32, -FLT_MAX, FLT_MAX, __VA_ARGS__)                \
    X(GF_DOUBLE, double, f64, -DBL_MAX, DBL_MAX, __VA_ARGS__)
#define EW_SINTS(X, ...)                                                   \
    X(GF_INT8, int8_t, i8, INT8_MIN, INT8_MAX, __VA_ARGS__)                \
    X(GF_INT16, int16_t, i16, INT16_MIN, INT16_MAX, __VA_ARGS__)           \
    X(GF_INT32, int32_t, i32, INT32_MIN, INT32_MAX, __VA_ARGS__)           \
    X(GF_INT64, int64_t, i64, INT64_MIN, INT64_MAX, __VA_ARGS__)
#define EW_UINTS(X, ...)                                                   \
    X(GF_UINT8, uint8_t, u8, 0, UINT8_MAX, __VA_ARGS__)                    \
    X(GF_UINT16, uint16_t, u16, 0, UINT16_MAX, __VA_ARGS__)                \
    X(GF_UINT32, uint32_t, u32, 0, UINT32_MAX, __VA_ARGS__)                \
    X(GF_UINT64, uint64_t, u64, 0, UINT64_MAX, __VA_ARGS__)
#define EW_BOOLS(X, ...) X(GF_BOOL, uint8_t, b8, 0, 1, __VA_ARGS__)
#define EW_INTS(X, ...) EW_SINTS(X, __VA_ARGS__) EW_UINTS(X, __VA_ARGS__)
#define EW_NUMS(X, ...) EW_FLOATS(X, __VA_ARGS__) EW_INTS(X, __VA_ARGS__)

static bool ew_is_int(enum gf_dtype t)
{
    return (t >= GF_UINT8 && t <= GF_INT64) || t == GF_BOOL || t == GF_UINT32 ||
           t == GF_UINT64;
}

static bool ew_is_half(enum gf_dtype t)
{
    return t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* Block conversions to and from double (any numeric type) and int64
 * (integer types: exact, wrapping like C).  Readers take a stride. */
typedef void (*ew_rdf)(const void *src, ptrdiff_t st, size_t n, double *dst);
typedef void (*ew_rdi)(const void *src, ptrdiff_t st, size_t n, int64_t *dst);
typedef void (*ew_wrf)(void *dst, const double *src, size_t n);
typedef void (*ew_wri)(void *dst, const int64_t *src, size_t n);

#define EW_DEF_READ(sfx, T, D, CONV)                                       \
    static void ew_rd##sfx(const void *src, ptrdiff_t st, size_t n, D *dst) \
    {                                                                      \
        const T *s = src;                                                  \
        for (size_t i = 0; i < n; i++)                                     \
            dst[i] = CONV(s[i * st]);                                      \
    }
#define EW_DEF_WRITE(sfx, T, D, CONV)                                      \
    static void ew_wr##sfx(void *dst, const D *src, size_t n)              \
    {                                                                      \
        T *d = dst;                                                        \
        for (size_t i = 0; i < n; i++)                                     \
            d[i] = CONV(src[i]);                                           \
    }
#define EW_AS_F64(v) ((double)(v))
#define EW_AS_I64(v) ((int64_t)(v))
#define EW_AS_BOOL(v) ((v) != 0)

/* Float to integer: truncation toward zero; NaN is 0 and values out of
 * range saturate (C leaves both undefined). */
#define EW_DEF_CONV_INT(DT, T, sfx, LO, HI, ...)                           \
    static T ew_sat_##sfx(double v)                                        \
    {                                                                      \
        return v != v ? (T)0 : v <= (double)(LO) ? (T)(LO)                 \
               : v >= (double)(HI) ? (T)(HI) : (T)v;                       \
    }                                                                      \
    EW_DEF_READ(f_##sfx, T, double, EW_AS_F64)                             \
    EW_DEF_READ(i_##sfx, T, int64_t, EW_AS_I64)                            \
    EW_DEF_WRITE(f_##sfx, T, double, ew_sat_##sfx)                         \
    EW_DEF_WRITE(i_##sfx, T, int64_t, (T))
#define EW_DEF_CONV_FLOAT(DT, T, sfx, LO, HI, ...)                         \
    EW_DEF_READ(f_##sfx, T, double, EW_AS_F64)                             \
    EW_DEF_WRITE(f_##sfx, T, double, (T))
EW_FLOATS(EW_DEF_CONV_FLOAT, _)
EW_INTS(EW_DEF_CONV_INT, _)
EW_DEF_READ(f_b8, uint8_t, double, EW_AS_BOOL)
EW_DEF_READ(i_b8, uint8_t, int64_t, EW_AS_BOOL)
EW_DEF_WRITE(f_b8, uint8_t, double, EW_AS_BOOL)
EW_DEF_WRITE(i_b8, uint8_t, int64_t, EW_AS_BOOL)

/* double -> float rounded to odd: rounding that float once more to fp16 or
 * bf16 then gives the correctly rounded double (no double rounding). */
static float ew_round_odd(double d)
{
    float f = (float)d;
    if ((double)f != d && f == f) {
        if (fabs((double)f) > fabs(d))
            f = nextafterf(f, 0.0f);
        uint32_t b;
        memcpy(&b, &f, 4);
        b |= 1;
        memcpy(&f, &b, 4);
    }
    return f;
}

#define EW_F64_TO_HALF(v) gf_float_to_half(ew_round_odd(v))
#define EW_F64_TO_BF16(v) gf_float_to_bf16(ew_round_odd(v))
EW_DEF_READ(f_f16, uint16_t, double, gf_half_to_float)
EW_DEF_READ(f_bf16, uint16_t, double, gf_bf16_to_float)
EW_DEF_WRITE(f_f16, uint16_t, double, EW_F64_TO_HALF)
EW_DEF_WRITE(f_bf16, uint16_t, double, EW_F64_TO_BF16)

static const struct ew_conv {
    ew_rdf rdf;
    ew_rdi rdi; /* integer types only */
    ew_wrf wrf;
    ew_wri wri; /* integer types only */
} ew_conv[GF_DTYPE_COUNT] = {
#define EW_CONV_F(DT, T, sfx, ...) [DT] = {ew_rdf_##sfx, NULL, ew_wrf_##sfx, NULL},
#define EW_CONV_I(DT, T, sfx, ...)                                                          \
    [DT] = {ew_rdf_##sfx, ew_rdi_##sfx, ew_wrf_##sfx, ew_wri_##sfx},
    EW_FLOATS(EW_CONV_F, _) EW_INTS(EW_CONV_I, _) EW_BOOLS(EW_CONV_I, _)
    [GF_FLOAT16] = {ew_rdf_f16, NULL, ew_wrf_f16, NULL},
    [GF_BFLOAT16] = {ew_rdf_bf16, NULL, ew_wrf_bf16, NULL},
#undef EW_CONV_F
#undef EW_CONV_I
};

static bool ew_numeric(enum gf_dtype t)
{
    return t > GF_UNDEFINED && t < GF_DTYPE_COUNT && ew_conv[t].rdf;
}

/* ---- typed inner loops --------------------------------------------------- */

#define EW_LOOP_HEAD(name)                                                    \
    static void name(const struct ew_job *j, void *out, const void *const *in, \
                     const ptrdiff_t *st, size_t n)

/* o[i] = EXPR of x = a[i * st[0]], y = b[i * st[1]] (elem: their type,
 * p: the parameters).  Strides are 0 or 1; the common cases get their own
 * loop so that the compiler vectorizes them. */
#define EW_BIN_LOOP(name, T, TO, EXPR)                                        \
    EW_LOOP_HEAD(name)                                                        \
    {                                                                         \
        typedef T elem;                                                       \
        const elem *a = in[0], *b = in[1];                                    \
        TO *o = out;                                                          \
        const struct ew_param *p = &j->p;                                     \
        (void)p;                                                              \
        if (st[0] && st[1]) {                                                 \
            for (size_t i = 0; i < n; i++) {                                  \
                elem x = a[i], y = b[i];                                      \
                o[i] = (TO)(EXPR);                                            \
            }                                                                 \
        } else if (st[0]) {                                                   \
            const elem y = b[0];                                              \
            for (size_t i = 0; i < n; i++) {                                  \
                elem x = a[i];                                                \
                o[i] = (TO)(EXPR);                                            \
            }                                                                 \
        } else if (st[1]) {                                                   \
            const elem x = a[0];                                              \
            for (size_t i = 0; i < n; i++) {                                  \
                elem y = b[i];                                                \
                o[i] = (TO)(EXPR);                                            \
            }                                                                 \
        } else {                                                              \
            const elem x = a[0], y = b[0];                                    \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = (TO)(EXPR);                                            \
        }                                                                     \
    }

/* o[i] = EXPR of x = a[i]; the input has the output's shape. */
#define EW_UN_LOOP(name, T, TO, EXPR)                                         \
    EW_LOOP_HEAD(name)                                                        \
    {                                                                         \
        typedef T elem;                                                       \
        const elem *a = in[0];                                                \
        TO *o = out;                                                          \
        const struct ew_param *p = &j->p;                                     \
        (void)p;                                                              \
        (void)st;                                                             \
        for (size_t i = 0; i < n; i++) {                                      \
            elem x = a[i];                                                    \
            o[i] = (TO)(EXPR);                                                \
        }                                                                     \
    }

/* Loops named ew_<op>_<suffix>, and the table entries naming them. */
#define EW_BIN(DT, T, sfx, LO, HI, op, EXPR) EW_BIN_LOOP(ew_##op##_##sfx, T, T, EXPR)
#define EW_CMP(DT, T, sfx, LO, HI, op, EXPR) EW_BIN_LOOP(ew_##op##_##sfx, T, uint8_t, EXPR)
#define EW_UN(DT, T, sfx, LO, HI, op, EXPR) EW_UN_LOOP(ew_##op##_##sfx, T, T, EXPR)
#define EW_UNB(DT, T, sfx, LO, HI, op, EXPR) EW_UN_LOOP(ew_##op##_##sfx, T, uint8_t, EXPR)
#define EW_ENTRY(DT, T, sfx, LO, HI, op) [DT] = ew_##op##_##sfx,

/* Python's % (fmod=0): the remainder takes the divisor's sign. */
#define EW_DEF_FMOD0(DT, T, sfx, ...)                                         \
    static inline T ew_fmod0_##sfx(T x, T y)                                  \
    {                                                                         \
        T r = fmod(x, y);                                                     \
        return r != 0 && (r < 0) != (y < 0) ? r + y : r;                      \
    }
EW_FLOATS(EW_DEF_FMOD0, _)
#define ew_fmod0(x, y) _Generic((x), float: ew_fmod0_f32, double: ew_fmod0_f64)(x, y)

static inline int64_t ew_imod0(int64_t x, int64_t y)
{
    int64_t r = y == -1 ? 0 : x % y; /* INT64_MIN % -1 traps */
    return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

/* x^e by squaring, modulo 2^64 (the caller truncates to its type). */
static inline uint64_t ew_ipow(uint64_t x, uint64_t e)
{
    uint64_t r = 1;
    for (; e; e >>= 1, x *= x)
        if (e & 1)
            r *= x;
    return r;
}

/* Signed integers wrap (computed in uint64); division by zero is refused
 * before the loops run. */
#define EW_WRAP(op) (uint64_t)x op(uint64_t) y
EW_FLOATS(EW_BIN, add, x + y)
EW_INTS(EW_BIN, add, EW_WRAP(+))
EW_FLOATS(EW_BIN, sub, x - y)
EW_INTS(EW_BIN, sub, EW_WRAP(-))
EW_FLOATS(EW_BIN, mul, x * y)
EW_INTS(EW_BIN, mul, EW_WRAP(*))
EW_FLOATS(EW_BIN, div, x / y)
EW_SINTS(EW_BIN, div, y == -1 ? 0 - (uint64_t)x : (uint64_t)(x / y))
EW_UINTS(EW_BIN, div, x / y)
EW_FLOATS(EW_BIN, pow_any, y == 2 ? x * x : pow(x, y))
/* Pow with a scalar exponent of 2, 3 or 0.5 (gelu_tanh's x^3, RMSNorm's
 * x^2, norms' sqrt): one branch per run, not a pow call per element.  x^3
 * of a float is computed in double (x * x exact there) and rounded once,
 * as accurate as powf; x^0.5 is sqrt (-0 -> +0 as pow), pow below zero. */
#define EW_CUBE_f32(x) ((float)((double)(x) * (x) * (x)))
#define EW_CUBE_f64(x) pow(x, 3.0)
#define EW_DEF_POW(DT, T, sfx, ...)                                           \
    EW_LOOP_HEAD(ew_pow_##sfx)                                                \
    {                                                                         \
        const T *restrict a = in[0];                                          \
        T *restrict o = out;                                                  \
        T y = st[1] ? (T)0 : *(const T *)in[1];                               \
        if (st[1] || !st[0] || (y != 2 && y != 3 && y != (T)0.5)) {           \
            ew_pow_any_##sfx(j, out, in, st, n);                              \
            return;                                                           \
        }                                                                     \
        if (y == 2) {                                                         \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = a[i] * a[i];                                           \
        } else if (y == 3) {                                                  \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = EW_CUBE_##sfx(a[i]);                                   \
        } else {                                                              \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = a[i] >= 0 ? sqrt(a[i]) + (T)0 : pow(a[i], y);           \
        }                                                                     \
    }
EW_FLOATS(EW_DEF_POW, _)
EW_INTS(EW_BIN, pow, ew_ipow((uint64_t)x, (uint64_t)y))
EW_FLOATS(EW_BIN, mod0, ew_fmod0(x, y))
EW_SINTS(EW_BIN, mod0, ew_imod0(x, y))
EW_UINTS(EW_BIN, mod0, x % y)
EW_FLOATS(EW_BIN, mod1, fmod(x, y))
EW_SINTS(EW_BIN, mod1, y == -1 ? 0 : x % y)
EW_UINTS(EW_BIN, mod1, x % y)
EW_FLOATS(EW_BIN, max, x > y || isnan(x) ? x : y)
EW_INTS(EW_BIN, max, x > y ? x : y)
EW_FLOATS(EW_BIN, min, x < y || isnan(x) ? x : y)
EW_INTS(EW_BIN, min, x < y ? x : y)
EW_NUMS(EW_CMP, eq, x == y)
EW_BOOLS(EW_CMP, eq, !x == !y)
EW_NUMS(EW_CMP, lt, x < y)
EW_NUMS(EW_CMP, le, x <= y)
EW_NUMS(EW_CMP, gt, x > y)
EW_NUMS(EW_CMP, ge, x >= y)
EW_BOOLS(EW_CMP, and, x && y)
EW_BOOLS(EW_CMP, or, x || y)
EW_BOOLS(EW_CMP, xor, !x != !y)

#define EW_CLAMP01(v) ((v) < 0 ? (elem)0 : (v) > 1 ? (elem)1 : (v))
#define EW_GELU_ERF(x) ((elem)0.5 * x * ((elem)1 + erf(x * (elem)0.70710678118654752)))
#define EW_GELU_TANH(x)                                                       \
    ((elem)0.5 * x *                                                          \
     ((elem)1 + tanh((elem)0.79788456080286536 * (x + (elem)0.044715 * x * x * x))))

EW_FLOATS(EW_UN, sqrt, sqrt(x))
EW_FLOATS(EW_UN, recip, (elem)1 / x)
EW_FLOATS(EW_UN, neg, -x)
EW_INTS(EW_UN, neg, 0 - (uint64_t)x)
EW_FLOATS(EW_UN, abs, fabs(x))
EW_SINTS(EW_UN, abs, x < 0 ? 0 - (uint64_t)x : (uint64_t)x)
EW_UINTS(EW_UN, abs, x)
/* fp32 Exp, Tanh and Sigmoid through double (fused.h): within 1 ulp, the
 * correctly rounded result but in rare ties, and vectorized; fp64 calls libm. */
#define EW_DEF_ACC(op, FN)                                                    \
    FU_HOT EW_LOOP_HEAD(ew_##op##_f32)                                        \
    {                                                                         \
        const float *restrict a = in[0];                                      \
        float *restrict o = out;                                              \
        (void)j;                                                              \
        (void)st;                                                             \
        for (size_t i = 0; i < n; i++)                                        \
            o[i] = FN(a[i]);                                                  \
    }
EW_DEF_ACC(exp, fu_expf_acc)
EW_DEF_ACC(tanh, fu_tanhf_acc)
EW_DEF_ACC(sigmoid, fu_sigmoidf_acc)
EW_UN_LOOP(ew_exp_f64, double, double, exp(x))
EW_FLOATS(EW_UN, log, log(x))
EW_FLOATS(EW_UN, sin, sin(x))
EW_FLOATS(EW_UN, cos, cos(x))
EW_UN_LOOP(ew_tanh_f64, double, double, tanh(x))
/* exp(-|x|) is exp(-x) for x >= 0 and exp(x) below: one exp call, not two */
#define EW_SIGMOID(e, x) (x >= 0 ? (elem)1 / ((elem)1 + e) : e / ((elem)1 + e))
EW_UN_LOOP(ew_sigmoid_f64, double, double, EW_SIGMOID(exp(-fabs(x)), x))
EW_FLOATS(EW_UN, relu, x < 0 ? (elem)0 : x)
EW_SINTS(EW_UN, relu, x < 0 ? 0 : x)
EW_FLOATS(EW_UN, leaky, x < 0 ? (elem)p->alpha * x : x)
EW_FLOATS(EW_UN, elu, x < 0 ? (elem)p->alpha * expm1(x) : x)
EW_FLOATS(EW_UN, selu, (elem)p->gamma * (x > 0 ? x : (elem)p->alpha * expm1(x)))
EW_FLOATS(EW_UN, softplus, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
EW_FLOATS(EW_UN, softsign, x / ((elem)1 + fabs(x)))
EW_FLOATS(EW_UN, hsigmoid, EW_CLAMP01((elem)p->alpha * x + (elem)p->beta))
EW_FLOATS(EW_UN, hswish, x * EW_CLAMP01(x / (elem)6 + (elem)0.5))
EW_FLOATS(EW_UN, erf, erf(x))
EW_FLOATS(EW_UN, gelu, p->flag ? EW_GELU_TANH(x) : EW_GELU_ERF(x))
EW_FLOATS(EW_UN, floor, floor(x))
EW_FLOATS(EW_UN, ceil, ceil(x))
EW_FLOATS(EW_UN, round, nearbyint(x)) /* half to even in the default mode */
EW_FLOATS(EW_UN, sign, x > 0 ? (elem)1 : x < 0 ? (elem)-1 : x)
EW_SINTS(EW_UN, sign, (x > 0) - (x < 0))
EW_UINTS(EW_UN, sign, x > 0)
EW_BOOLS(EW_UN, not, !x)
EW_FLOATS(EW_UNB, isnan, isnan(x))
EW_FLOATS(EW_UNB, isinf, isinf(x) && (p->flag & (x > 0 ? 1 : 2)))

/* Clip: min(max(x, lo), hi), so that lo > hi gives hi as ONNX asks. */
#define EW_DEF_CLIP(DT, T, sfx, LO, HI, ...)                                   \
    EW_LOOP_HEAD(ew_clip_##sfx)                                                \
    {                                                                          \
        const T *a = in[0];                                                    \
        T *o = out, lo = (T)(LO), hi = (T)(HI);                                \
        (void)st;                                                              \
        if (j->p.has_lo)                                                       \
            memcpy(&lo, j->p.lo, sizeof(lo));                                  \
        if (j->p.has_hi)                                                       \
            memcpy(&hi, j->p.hi, sizeof(hi));                                  \
        for (size_t i = 0; i < n; i++) {                                       \
            T v = a[i] < lo ? lo : a[i];                                       \
            o[i] = v > hi ? hi : v;                                            \
        }                                                                      \
    }
EW_NUMS(EW_DEF_CLIP, _)

/* Where(cond, x, y) copies elements of any type by size. */
/* Strides are 0 or 1; the common ones are constants in their own copy of
 * the loop, which loads both sides and selects, so that it vectorizes. */
#define EW_DEF_WHERE(T)                                                        \
    static inline __attribute__((always_inline)) void ew_where_run_##T(        \
        const uint8_t *restrict c, const T *restrict x, const T *restrict y,   \
        T *restrict o, size_t n, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t s2)     \
    {                                                                          \
        for (size_t i = 0; i < n; i++) {                                       \
            T xv = x[i * s1], yv = y[i * s2];                                  \
            o[i] = c[i * s0] ? xv : yv;                                        \
        }                                                                      \
    }                                                                          \
    EW_LOOP_HEAD(ew_where_##T)                                                 \
    {                                                                          \
        const uint8_t *c = in[0];                                              \
        const T *x = in[1], *y = in[2];                                        \
        T *o = out;                                                            \
        (void)j;                                                               \
        switch (st[0] * 4 + st[1] * 2 + st[2]) {                               \
        case 7: ew_where_run_##T(c, x, y, o, n, 1, 1, 1); break;               \
        case 6: ew_where_run_##T(c, x, y, o, n, 1, 1, 0); break;               \
        case 5: ew_where_run_##T(c, x, y, o, n, 1, 0, 1); break;               \
        case 4: ew_where_run_##T(c, x, y, o, n, 1, 0, 0); break;               \
        default: ew_where_run_##T(c, x, y, o, n, st[0], st[1], st[2]); break;  \
        }                                                                      \
    }
EW_DEF_WHERE(uint8_t)
EW_DEF_WHERE(uint16_t)
EW_DEF_WHERE(uint32_t)
EW_DEF_WHERE(uint64_t)

/* fp16 / bf16: converts blocks of the inputs to fp32, runs the fp32 loop
 * j->inner on them and converts the result back (a bool result is written
 * in place). */
EW_LOOP_HEAD(ew_half_loop)
{
    float buf[EW_MAX_IN][EW_BLOCK], res[EW_BLOCK];
    bool bf = j->in_dt[0] == GF_BFLOAT16, half_out = j->out_dt == j->in_dt[0];
    for (size_t done = 0; done < n; done += EW_BLOCK) {
        size_t m = n - done < EW_BLOCK ? n - done : EW_BLOCK;
        const void *bp[EW_MAX_IN];
        for (int k = 0; k < j->n_in; k++) {
            const uint16_t *s = (const uint16_t *)in[k] + done * (size_t)st[k];
            size_t cnt = st[k] ? m : 1;
            for (size_t i = 0; i < cnt; i++)
                buf[k][i] = bf ? gf_bf16_to_float(s[i]) : gf_half_to_float(s[i]);
            bp[k] = buf[k];
        }
        char *o = (char *)out + done * j->out_size;
        j->inner(j, half_out ? (void *)res : o, bp, st, m);
        uint16_t *h = (uint16_t *)(void *)o;
        for (size_t i = 0; half_out && i < m; i++)
            h[i] = bf ? gf_float_to_bf16(res[i]) : gf_float_to_half(res[i]);
    }
}

/* Pow with two different types, through double (int64 when both are
 * integers); the result has the base's type. */
EW_LOOP_HEAD(ew_pow_mixed)
{
    double fx[EW_BLOCK], fy[EW_BLOCK];
    int64_t ix[EW_BLOCK], iy[EW_BLOCK];
    const struct ew_conv *cx = &ew_conv[j->in_dt[0]], *cy = &ew_conv[j->in_dt[1]];
    for (size_t done = 0; done < n; done += EW_BLOCK) {
        size_t m = n - done < EW_BLOCK ? n - done : EW_BLOCK;
        const char *x = (const char *)in[0] + done * (size_t)st[0] * j->in_size[0];
        const char *y = (const char *)in[1] + done * (size_t)st[1] * j->in_size[1];
        char *o = (char *)out + done * j->out_size;
        if (j->p.flag) {
            cx->rdi(x, st[0], m, ix);
            cy->rdi(y, st[1], m, iy);
            for (size_t i = 0; i < m; i++)
                ix[i] = (int64_t)ew_ipow((uint64_t)ix[i], (uint64_t)iy[i]);
            ew_conv[j->out_dt].wri(o, ix, m);
        } else {
            cx->rdf(x, st[0], m, fx);
            cy->rdf(y, st[1], m, fy);
            for (size_t i = 0; i < m; i++)
                fx[i] = pow(fx[i], fy[i]);
            ew_conv[j->out_dt].wrf(o, fx, m);
        }
    }
}

/* Cast: through int64 between integer types (exact, wrapping), else
 * through double. */
EW_LOOP_HEAD(ew_cast_loop)
{
    double f[EW_BLOCK];
    int64_t v[EW_BLOCK];
    const struct ew_conv *src = &ew_conv[j->in_dt[0]], *dst = &ew_conv[j->out_dt];
    for (size_t done = 0; done < n; done += EW_BLOCK) {
        size_t m = n - done < EW_BLOCK ? n - done : EW_BLOCK;
        const char *s = (const char *)in[0] + done * (size_t)st[0] * j->in_size[0];
        char *o = (char *)out + done * j->out_size;
        if (j->p.flag) {
            src->rdi(s, st[0], m, v);
            dst->wri(o, v, m);
        } else {
            src->rdf(s, st[0], m, f);
            dst->wrf(o, f, m);
        }
    }
}

/* ---- the op table -------------------------------------------------------- */

enum ew_check { EW_CHECK_NONE, EW_CHECK_NONZERO, EW_CHECK_NONNEG };

struct ew_op {
    enum gf_op op;
    int n_in;            /* inputs the loops take */
    bool bool_out;       /* comparisons, logic, IsNaN, IsInf */
    int fmod;            /* Mod: the fmod attribute value this entry serves */
    enum ew_check check; /* integer input 1: no zeros (Div, Mod), none negative (Pow) */
    ew_loop loop[GF_DTYPE_COUNT]; /* by input dtype; fp16/bf16 run [GF_FLOAT] */
};

#define EW_TAB_F(op) {EW_FLOATS(EW_ENTRY, op)}
#define EW_TAB_N(op) {EW_NUMS(EW_ENTRY, op)}
#define EW_TAB_NB(op) {EW_NUMS(EW_ENTRY, op) EW_BOOLS(EW_ENTRY, op)}
#define EW_TAB_B(op) {EW_BOOLS(EW_ENTRY, op)}
#define EW_TAB_FS(op) {EW_FLOATS(EW_ENTRY, op) EW_SINTS(EW_ENTRY, op)}
#define EW_OP2(OP, tab, ...) {.op = GF_OP_##OP, .n_in = 2, .loop = tab, __VA_ARGS__}
#define EW_OP1(OP, tab, ...) {.op = GF_OP_##OP, .n_in = 1, .loop = tab, __VA_ARGS__}

static const struct ew_op ew_ops[] = {
    EW_OP2(ADD, EW_TAB_N(add), .check = EW_CHECK_NONE),
    EW_OP2(SUB, EW_TAB_N(sub), .check = EW_CHECK_NONE),
    EW_OP2(MUL, EW_TAB_N(mul), .check = EW_CHECK_NONE),
    EW_OP2(DIV, EW_TAB_N(div), .check = EW_CHECK_NONZERO),
    EW_OP2(POW, EW_TAB_N(pow), .check = EW_CHECK_NONNEG),
    EW_OP2(MOD, EW_TAB_N(mod0), .check = EW_CHECK_NONZERO, .fmod = 0),
    EW_OP2(MOD, EW_TAB_N(mod1), .check = EW_CHECK_NONZERO, .fmod = 1),
    EW_OP2(AND, EW_TAB_B(and), .bool_out = true),
    EW_OP2(OR, EW_TAB_B(or), .bool_out = true),
    EW_OP2(XOR, EW_TAB_B(xor), .bool_out = true),
    EW_OP2(EQUAL, EW_TAB_NB(eq), .bool_out = true),
    EW_OP2(LESS, EW_TAB_N(lt), .bool_out = true),
    EW_OP2(LESS_OR_EQUAL, EW_TAB_N(le), .bool_out = true),
    EW_OP2(GREATER, EW_TAB_N(gt), .bool_out = true),
    EW_OP2(GREATER_OR_EQUAL, EW_TAB_N(ge), .bool_out = true),
    /* the binary steps of the variadic ops (Mean divides at the end) */
    EW_OP2(MAX, EW_TAB_N(max), .check = EW_CHECK_NONE),
    EW_OP2(MIN, EW_TAB_N(min), .check = EW_CHECK_NONE),
    EW_OP2(SUM, EW_TAB_N(add), .check = EW_CHECK_NONE),
    EW_OP2(MEAN, EW_TAB_N(add), .check = EW_CHECK_NONE),
    EW_OP1(SQRT, EW_TAB_F(sqrt)),
    EW_OP1(RECIPROCAL, EW_TAB_F(recip)),
    EW_OP1(NEG, EW_TAB_N(neg)),
    EW_OP1(ABS, EW_TAB_N(abs)),
    EW_OP1(EXP, EW_TAB_F(exp)),
    EW_OP1(LOG, EW_TAB_F(log)),
    EW_OP1(SIN, EW_TAB_F(sin)),
    EW_OP1(COS, EW_TAB_F(cos)),
    EW_OP1(TANH, EW_TAB_F(tanh)),
    EW_OP1(SIGMOID, EW_TAB_F(sigmoid)),
    EW_OP1(RELU, EW_TAB_FS(relu)),
    EW_OP1(LEAKY_RELU, EW_TAB_F(leaky)),
    EW_OP1(ELU, EW_TAB_F(elu)),
    EW_OP1(SELU, EW_TAB_F(selu)),
    EW_OP1(SOFTPLUS, EW_TAB_F(softplus)),
    EW_OP1(SOFTSIGN, EW_TAB_F(softsign)),
    EW_OP1(HARD_SIGMOID, EW_TAB_F(hsigmoid)),
    EW_OP1(HARD_SWISH, EW_TAB_F(hswish)),
    EW_OP1(ERF, EW_TAB_F(erf)),
    EW_OP1(GELU, EW_TAB_F(gelu)),
    EW_OP1(FLOOR, EW_TAB_F(floor)),
    EW_OP1(CEIL, EW_TAB_F(ceil)),
    EW_OP1(ROUND, EW_TAB_F(round)),
    EW_OP1(SIGN, EW_TAB_N(sign)),
    EW_OP1(NOT, EW_TAB_B(not)),
    EW_OP1(IS_NAN, EW_TAB_F(isnan), .bool_out = true),
    EW_OP1(IS_INF, EW_TAB_F(isinf), .bool_out = true),
    EW_OP1(CLIP, EW_TAB_N(clip)),
};

static const struct ew_op *ew_lookup(enum gf_op op, int64_t fmod)
{
    for (size_t i = 0; i < sizeof(ew_ops) / sizeof(ew_ops[0]); i++)
        if (ew_ops[i].op == op && (op != GF_OP_MOD || ew_ops[i].fmod == fmod))
            return &ew_ops[i];
    return NULL;
}

static const struct ew_op *ew_find(const struct gf_node *n)
{
    return ew_lookup(n->op, gf_node_attr_int(n, "fmod", 0) == 1);
}

/* Chooses j's loop for op on inputs of type dt; false if there is none. */
static bool ew_pick(struct ew_job *j, const struct ew_op *op, enum gf_dtype dt)
{
    if (dt <= GF_UNDEFINED || dt >= GF_DTYPE_COUNT)
        return false;
    j->inner = op->loop[GF_FLOAT];
    j->loop = ew_is_half(dt) ? (j->inner ? ew_half_loop : NULL) : op->loop[dt];
    return j->loop != NULL;
}

/* ---- shared checks ------------------------------------------------------- */

/* Input k, or NULL where it is omitted. */
static const struct gf_tview *ew_in(const struct gf_kernel_args *a, size_t k)
{
    return k < a->n_in && a->in[k].data ? &a->in[k] : NULL;
}

/* out = in: same type and element count. */
static enum gf_status ew_copy(const struct gf_kernel_args *a, const struct gf_tview *in,
                              const struct gf_tview *out)
{
    enum gf_status st = gf_ew_check_dtype(a, "output 0", out->dtype, in->dtype);
    if (st != GF_OK || (st = gf_ew_check_count(a, in, out)))
        return st;
    if (in->data != out->data)
        memmove(out->data, in->data, gf_tview_bytes(out));
    return GF_OK;
}

/* Opsets before 7: with broadcast=1, B lines up with A from `axis` on;
 * padding B's shape with trailing 1s makes that the numpy rule. */
static enum gf_status ew_legacy_bcast(const struct gf_kernel_args *a, const struct gf_tview *x,
                                      struct gf_tview *b)
{
    const struct gf_attr *ax = gf_node_attr(a->node, "axis");
    if (gf_node_opset(a->node) >= 7 || !gf_node_attr_int(a->node, "broadcast", 0) || !ax)
        return GF_OK;
    int64_t axis = ax->i < 0 ? ax->i + x->rank : ax->i;
    int64_t rank = x->rank - axis;
    if (axis < 0 || rank < b->rank || rank > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID,
                               "axis=%lld cannot place input 1 (rank %d) in input 0 (rank %d)",
                               (long long)ax->i, b->rank, x->rank);
    for (int d = b->rank; d < rank; d++)
        b->dims[d] = 1;
    b->rank = (int)rank;
    return GF_OK;
}

/* Integer Div/Mod need nonzero divisors; integer Pow non-negative exponents. */
static enum gf_status ew_check_operand(const struct gf_kernel_args *a, const struct ew_op *op,
                                       const struct gf_tview *x, const struct gf_tview *b)
{
    bool ints = ew_is_int(x->dtype) && ew_is_int(b->dtype);
    bool unsig = b->dtype == GF_UINT8 || b->dtype == GF_UINT16 || b->dtype == GF_UINT32 ||
                 b->dtype == GF_UINT64 || b->dtype == GF_BOOL;
    if (op->check == EW_CHECK_NONE || !ints || (op->check == EW_CHECK_NONNEG && unsig))
        return GF_OK;
    int64_t v[EW_BLOCK];
    size_t size = gf_dtype_size(b->dtype);
    for (size_t i = 0; i < b->nelem; i += EW_BLOCK) {
        size_t m = b->nelem - i < EW_BLOCK ? b->nelem - i : EW_BLOCK;
        ew_conv[b->dtype].rdi((const char *)b->data + i * size, 1, m, v);
        for (size_t k = 0; k < m; k++) {
            if (op->check == EW_CHECK_NONZERO && v[k] == 0)
                return gf_kernel_error(a, GF_ERR_INVALID,
                                       "input 1 (divisor) element %zu is 0: integer %s by zero",
                                       i + k, op->op == GF_OP_MOD ? "modulo" : "division");
            if (op->check == EW_CHECK_NONNEG && v[k] < 0)
                return gf_kernel_error(a, GF_ERR_INVALID,
                                       "input 1 (exponent) element %zu is %lld: an integer "
                                       "base needs a non-negative integer exponent",
                                       i + k, (long long)v[k]);
        }
    }
    return GF_OK;
}

static enum gf_status ew_params(const struct gf_kernel_args *a, struct ew_param *p)
{
    const struct gf_node *n = a->node;
    switch (n->op) {
    case GF_OP_LEAKY_RELU:
        p->alpha = gf_node_attr_float(n, "alpha", 0.01f);
        break;
    case GF_OP_ELU:
        p->alpha = gf_node_attr_float(n, "alpha", 1.0f);
        break;
    case GF_OP_SELU:
        p->alpha = gf_node_attr_float(n, "alpha", 1.67326319217681884765625f);
        p->gamma = gf_node_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case GF_OP_HARD_SIGMOID:
        p->alpha = gf_node_attr_float(n, "alpha", 0.2f);
        p->beta = gf_node_attr_float(n, "beta", 0.5f);
        break;
    case GF_OP_IS_INF:
        p->flag = (gf_node_attr_int(n, "detect_positive", 1) != 0) |
                  (gf_node_attr_int(n, "detect_negative", 1) != 0) << 1;
        break;
    case GF_OP_GELU: {
        const struct gf_attr *at = gf_node_attr(n, "approximate");
        int len = at ? (int)at->s.len : 0;
        const char *s = at && at->s.data ? (const char *)at->s.data : "";
        p->flag = len == 4 && memcmp(s, "tanh", 4) == 0;
        if (at && !p->flag && !(len == 4 && memcmp(s, "none", 4) == 0))
            return gf_kernel_error(a, GF_ERR_INVALID,
                                   "approximate='%.*s' is neither 'none' nor 'tanh'", len, s);
        break;
    }
    default:
        break;
    }
    return GF_OK;
}

/* ---- kernels ------------------------------------------------------------- */

/* Unary and binary ops of the table. */
static enum gf_status ew_run(const struct gf_kernel_args *a)
{
    const struct ew_op *op = ew_find(a->node);
    int64_t fmod = gf_node_attr_int(a->node, "fmod", 0);
    if (a->node->op == GF_OP_MOD && fmod != 0 && fmod != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "fmod=%lld is neither 0 nor 1",
                               (long long)fmod);
    bool empty;
    enum gf_status st = gf_ew_begin(a, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    struct gf_tview v[2] = {{0}};
    for (int k = 0; k < op->n_in; k++) {
        if ((st = gf_ew_check_in(a, (size_t)k)) != GF_OK)
            return st;
        v[k] = a->in[k];
    }
    enum gf_dtype dt = v[0].dtype;
    struct ew_job j = {0};
    if (op->n_in == 2 && v[1].dtype != dt) {
        if (op->op != GF_OP_POW || !ew_numeric(dt) || !ew_numeric(v[1].dtype))
            return gf_kernel_error(a, GF_ERR_INVALID, "inputs 0 and 1 differ in type (%s, %s)",
                                   gf_dtype_name(dt), gf_dtype_name(v[1].dtype));
        j.loop = ew_pow_mixed;
        j.p.flag = ew_is_int(dt) && ew_is_int(v[1].dtype);
    } else if (!ew_pick(&j, op, dt)) {
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU kernel for type %s",
                               gf_dtype_name(dt));
    }
    if ((st = gf_ew_check_dtype(a, "output 0", a->out[0].dtype, op->bool_out ? GF_BOOL : dt)))
        return st;
    if (op->n_in == 1 && (st = gf_ew_check_count(a, &v[0], &a->out[0])))
        return st;
    if (op->n_in == 2 && ((st = ew_legacy_bcast(a, &v[0], &v[1])) ||
                          (st = ew_check_operand(a, op, &v[0], &v[1]))))
        return st;
    if ((st = ew_params(a, &j.p)) || (st = ew_prepare(a, &j, v, op->n_in, &a->out[0])))
        return st;
    ew_exec(a, &j, a->out[0].nelem);
    return GF_OK;
}

static bool ew_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    const struct ew_op *op = ew_find(n);
    struct ew_job j;
    if (!op || n_in < (size_t)op->n_in)
        return false;
    if (n->op == GF_OP_POW && ew_numeric(in[0].dtype))
        return true; /* mixed types go through double */
    return ew_pick(&j, op, in[0].dtype);
}

/* Max, Min, Sum, Mean: folded pairwise into the output. */
static enum gf_status ew_variadic_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *out = &a->out[0];
    if (a->n_in == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    for (size_t k = 0; k < a->n_in; k++)
        if ((st = gf_ew_check_operand(a, k, out->dtype)))
            return st;
    struct ew_job j = {0};
    if (!ew_pick(&j, ew_lookup(a->node->op, 0), out->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU kernel for type %s",
                               gf_dtype_name(out->dtype));
    if (a->n_in == 1)
        return ew_copy(a, &a->in[0], out);
    for (size_t k = 1; k < a->n_in; k++) {
        struct gf_tview pair[2] = {k == 1 ? a->in[0] : *out, a->in[k]};
        if ((st = ew_prepare(a, &j, pair, 2, out)))
            return st;
        ew_exec(a, &j, out->nelem);
    }
    if (a->node->op == GF_OP_MEAN) { /* out /= n_in, n_in as a scalar of the type */
        uint64_t count_buf;
        double count = (double)a->n_in;
        ew_conv[out->dtype].wrf(&count_buf, &count, 1);
        struct gf_tview pair[2] = {*out, {.dtype = out->dtype, .nelem = 1, .data = &count_buf}};
        ew_pick(&j, ew_lookup(GF_OP_DIV, 0), out->dtype);
        if ((st = ew_prepare(a, &j, pair, 2, out)))
            return st;
        ew_exec(a, &j, out->nelem);
    }
    return GF_OK;
}

static bool ew_variadic_supports(const struct gf_node *n, const struct gf_tview *in,
                                 size_t n_in)
{
    struct ew_job j;
    return n_in >= 1 && ew_pick(&j, ew_lookup(n->op, 0), in[0].dtype);
}

/* Clip bound k (1: min, 2: max): the old attribute, or the newer input,
 * stored as the loop's element type (fp32 for fp16/bf16). */
static enum gf_status ew_clip_bound(const struct gf_kernel_args *a, size_t k, const char *name,
                                    bool *has, unsigned char *dst)
{
    enum gf_dtype dt = a->in[0].dtype, lt = ew_is_half(dt) ? GF_FLOAT : dt;
    const struct gf_attr *at = gf_node_attr(a->node, name);
    if (at && at->type == GF_ATTR_FLOAT) {
        double v = at->f;
        ew_conv[lt].wrf(dst, &v, 1);
        *has = true;
    }
    const struct gf_tview *b = ew_in(a, k);
    enum gf_status st = gf_clip_bound_check(a, k, name);
    if (!b || st != GF_OK)
        return st;
    if (lt != dt) {
        double v;
        ew_conv[dt].rdf(b->data, 0, 1, &v);
        ew_conv[lt].wrf(dst, &v, 1);
    } else {
        memcpy(dst, b->data, gf_dtype_size(dt));
    }
    *has = true;
    return GF_OK;
}

static enum gf_status ew_clip_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    struct ew_job j = {0};
    const struct gf_tview *x = &a->in[0];
    if (!ew_pick(&j, ew_lookup(GF_OP_CLIP, 0), x->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU kernel for type %s",
                               gf_dtype_name(x->dtype));
    if ((st = ew_clip_bound(a, 1, "min", &j.p.has_lo, j.p.lo)) ||
        (st = ew_clip_bound(a, 2, "max", &j.p.has_hi, j.p.hi)) ||
        (st = gf_ew_check_dtype(a, "output 0", a->out[0].dtype, x->dtype)))
        return st;
    if ((st = gf_ew_check_count(a, x, &a->out[0])))
        return st;
    if ((st = ew_prepare(a, &j, x, 1, &a->out[0])))
        return st;
    ew_exec(a, &j, a->out[0].nelem);
    return GF_OK;
}

static bool ew_clip_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    struct ew_job j;
    (void)n;
    return n_in >= 1 && ew_pick(&j, ew_lookup(GF_OP_CLIP, 0), in[0].dtype);
}

static ew_loop ew_where_loop(enum gf_dtype t)
{
    switch (t == GF_STRING ? 0 : gf_dtype_size(t)) {
    case 1: return ew_where_uint8_t;
    case 2: return ew_where_uint16_t;
    case 4: return ew_where_uint32_t;
    case 8: return ew_where_uint64_t;
    default: return NULL;
    }
}

static enum gf_status ew_where_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 3, &empty);
    if (st != GF_OK || empty || (st = gf_where_check(a)))
        return st;
    enum gf_dtype dt = a->in[1].dtype;
    struct ew_job j = {.loop = ew_where_loop(dt)};
    if (!j.loop)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU kernel for type %s",
                               gf_dtype_name(dt));
    if ((st = ew_prepare(a, &j, a->in, 3, &a->out[0])))
        return st;
    ew_exec(a, &j, a->out[0].nelem);
    return GF_OK;
}

static bool ew_where_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 3 && ew_where_loop(in[1].dtype);
}

static bool ew_castable(enum gf_dtype from, enum gf_dtype to)
{
    return from == to || (ew_numeric(from) && ew_numeric(to));
}

/* float -> bfloat16 before opset 19 keeps the top 16 bits (truncation), as
 * the ONNX reference of that time does (its test data expects it); from
 * Cast-19 on, and for every other source type, we round to nearest even.
 * A NaN stays a NaN. */
static enum gf_status ew_cast_bf16_truncate(const struct gf_kernel_args *a,
                                            const struct gf_tview *x, const struct gf_tview *out)
{
    enum gf_status st = gf_ew_check_count(a, x, out);
    if (st)
        return st;
    const uint32_t *src = x->data;
    uint16_t *dst = out->data;
    for (size_t i = 0; i < x->nelem; i++) {
        bool nan = (src[i] & 0x7fffffffu) > 0x7f800000u;
        dst[i] = nan ? (uint16_t)((src[i] >> 16) | 0x0040u) : (uint16_t)(src[i] >> 16);
    }
    return GF_OK;
}

/* Cast and CastLike: the target type is the output's. */
static enum gf_status ew_cast_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *out = &a->out[0];
    if ((st = gf_cast_check(a)))
        return st;
    if (x->dtype == out->dtype)
        return ew_copy(a, x, out);
    if (!ew_castable(x->dtype, out->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU cast from %s to %s",
                               gf_dtype_name(x->dtype), gf_dtype_name(out->dtype));
    if ((st = gf_ew_check_count(a, x, out)))
        return st;
    if (x->dtype == GF_FLOAT && out->dtype == GF_BFLOAT16 && gf_node_opset(a->node) < 19)
        return ew_cast_bf16_truncate(a, x, out);
    struct ew_job j = {.loop = ew_cast_loop};
    j.p.flag = ew_is_int(x->dtype) && ew_is_int(out->dtype);
    if ((st = ew_prepare(a, &j, x, 1, out)))
        return st;
    ew_exec(a, &j, out->nelem);
    return GF_OK;
}

static bool ew_cast_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    enum gf_dtype to = GF_UNDEFINED;
    if (n->op == GF_OP_CAST_LIKE && n_in >= 2)
        to = in[1].dtype;
    else if (n->op == GF_OP_CAST)
        to = (enum gf_dtype)gf_node_attr_int(n, "to", GF_UNDEFINED);
    return n_in >= 1 && ew_castable(in[0].dtype, to) && to != GF_STRING;
}

static enum gf_status ew_identity_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    return ew_copy(a, &a->in[0], &a->out[0]);
}

static bool ew_identity_supports(const struct gf_node *n, const struct gf_tview *in,
                                 size_t n_in)
{
    (void)n;
    return n_in == 1 && in[0].dtype != GF_STRING && gf_dtype_size(in[0].dtype) > 0;
}

/* ---- Dropout ------------------------------------------------------------- */

/* MT19937 with numpy's legacy seeding and 53-bit doubles, so that a seed
 * drops the same elements as np.random.seed(seed); np.random.uniform(). */
struct ew_mt {
    uint32_t s[624];
    int i;
};

static void ew_mt_seed(struct ew_mt *m, uint32_t seed)
{
    m->s[0] = seed;
    for (uint32_t i = 1; i < 624; i++)
        m->s[i] = 1812433253u * (m->s[i - 1] ^ (m->s[i - 1] >> 30)) + i;
    m->i = 624;
}

static uint32_t ew_mt_next(struct ew_mt *m)
{
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % 624] & 0x7fffffffu);
            m->s[k] = m->s[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        m->i = 0;
    }
    uint32_t y = m->s[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static double ew_mt_double(struct ew_mt *m)
{
    uint32_t hi = ew_mt_next(m) >> 5, lo = ew_mt_next(m) >> 6;
    return (hi * 67108864.0 + lo) / 9007199254740992.0;
}

/* Ratio and mode: attributes before opset 12 (is_test before 7, where
 * training is the default), inputs 1 and 2 after. */
static enum gf_status ew_dropout_mode(const struct gf_kernel_args *a, double *ratio,
                                      bool *train)
{
    *ratio = gf_node_attr_float(a->node, "ratio", 0.5f);
    *train = gf_node_opset(a->node) < 7 && gf_node_attr_int(a->node, "is_test", 0) == 0;
    const struct gf_tview *r = ew_in(a, 1), *t = ew_in(a, 2);
    if (r && !ew_numeric(r->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "input 1 (ratio) has type %s",
                               gf_dtype_name(r->dtype));
    if ((r && r->nelem != 1) || (t && t->nelem != 1))
        return gf_kernel_error(a, GF_ERR_INVALID, "input %d (%s) must be a scalar",
                               r && r->nelem != 1 ? 1 : 2,
                               r && r->nelem != 1 ? "ratio" : "training_mode");
    enum gf_status st = t ? gf_ew_check_dtype(a, "input 2 (training_mode)", t->dtype, GF_BOOL)
                          : GF_OK;
    if (st != GF_OK)
        return st;
    if (r)
        ew_conv[r->dtype].rdf(r->data, 0, 1, ratio);
    if (t)
        *train = *(const uint8_t *)t->data != 0;
    if (*train && !(*ratio >= 0 && *ratio < 1))
        return gf_kernel_error(a, GF_ERR_INVALID, "ratio %g is outside [0, 1)", *ratio);
    return GF_OK;
}

/* Training: y = x / (1 - ratio) where kept, 0 where dropped; serial, as
 * the generator is.  Without a seed attribute the seed is 0 (ONNX would
 * pick one at random; a fixed one keeps runs reproducible). */
static enum gf_status ew_dropout_run(const struct gf_kernel_args *a)
{
    bool empty, train;
    double ratio;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty ||
        (st = ew_dropout_mode(a, &ratio, &train)))
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    const struct gf_tview *mask = a->n_out > 1 && a->out[1].data ? &a->out[1] : NULL;
    if (!ew_numeric(x->dtype) || (mask && !ew_numeric(mask->dtype)))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CPU kernel for type %s",
                               gf_dtype_name(x->dtype));
    if ((st = ew_copy(a, x, y)))
        return st;
    if (mask && mask->nelem != x->nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "output 1 (mask) has %zu elements, not %zu",
                               mask->nelem, x->nelem);
    train = train && ratio > 0;
    struct ew_mt mt;
    ew_mt_seed(&mt, (uint32_t)gf_node_attr_int(a->node, "seed", 0));
    double v[EW_BLOCK], keep[EW_BLOCK], scale = 1.0 / (1.0 - ratio);
    size_t size = gf_dtype_size(x->dtype);
    for (size_t done = 0; done < x->nelem && (train || mask); done += EW_BLOCK) {
        size_t m = x->nelem - done < EW_BLOCK ? x->nelem - done : EW_BLOCK;
        char *yo = (char *)y->data + done * size;
        if (train)
            ew_conv[x->dtype].rdf(yo, 1, m, v);
        for (size_t i = 0; i < m; i++) {
            keep[i] = !train || ew_mt_double(&mt) >= ratio;
            v[i] = keep[i] ? v[i] * scale : 0;
        }
        if (train)
            ew_conv[x->dtype].wrf(yo, v, m);
        if (mask)
            ew_conv[mask->dtype].wrf((char *)mask->data + done * gf_dtype_size(mask->dtype),
                                     keep, m);
    }
    return GF_OK;
}

static bool ew_dropout_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && ew_numeric(in[0].dtype) && !ew_is_int(in[0].dtype);
}

/* ---- registration -------------------------------------------------------- */

#define EW_KERNEL(OP, name, sup, fn)                                                          \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = name,                 \
     .supports = sup, .run = fn}
#define EW_SIMPLE(OP) EW_KERNEL(OP, "elementwise", ew_supports, ew_run)

static const struct gf_kernel kernels[] = {
    EW_SIMPLE(ADD), EW_SIMPLE(SUB), EW_SIMPLE(MUL), EW_SIMPLE(DIV), EW_SIMPLE(POW),
    EW_SIMPLE(MOD), EW_SIMPLE(AND), EW_SIMPLE(OR), EW_SIMPLE(XOR), EW_SIMPLE(EQUAL),
    EW_SIMPLE(LESS), EW_SIMPLE(LESS_OR_EQUAL), EW_SIMPLE(GREATER),
    EW_SIMPLE(GREATER_OR_EQUAL), EW_SIMPLE(SQRT), EW_SIMPLE(RECIPROCAL), EW_SIMPLE(NEG),
    EW_SIMPLE(ABS), EW_SIMPLE(EXP), EW_SIMPLE(LOG), EW_SIMPLE(SIN), EW_SIMPLE(COS),
    EW_SIMPLE(TANH), EW_SIMPLE(SIGMOID), EW_SIMPLE(RELU), EW_SIMPLE(LEAKY_RELU),
    EW_SIMPLE(ELU), EW_SIMPLE(SELU), EW_SIMPLE(SOFTPLUS), EW_SIMPLE(SOFTSIGN),
    EW_SIMPLE(HARD_SIGMOID), EW_SIMPLE(HARD_SWISH), EW_SIMPLE(ERF), EW_SIMPLE(GELU),
    EW_SIMPLE(FLOOR), EW_SIMPLE(CEIL), EW_SIMPLE(ROUND), EW_SIMPLE(SIGN), EW_SIMPLE(NOT),
    EW_SIMPLE(IS_NAN), EW_SIMPLE(IS_INF),
    EW_KERNEL(CLIP, "clip", ew_clip_supports, ew_clip_run),
    EW_KERNEL(MAX, "variadic", ew_variadic_supports, ew_variadic_run),
    EW_KERNEL(MIN, "variadic", ew_variadic_supports, ew_variadic_run),
    EW_KERNEL(MEAN, "variadic", ew_variadic_supports, ew_variadic_run),
    EW_KERNEL(SUM, "variadic", ew_variadic_supports, ew_variadic_run),
    EW_KERNEL(WHERE, "where", ew_where_supports, ew_where_run),
    EW_KERNEL(CAST, "cast", ew_cast_supports, ew_cast_run),
    EW_KERNEL(CAST_LIKE, "cast", ew_cast_supports, ew_cast_run),
    EW_KERNEL(IDENTITY, "copy", ew_identity_supports, ew_identity_run),
    EW_KERNEL(DROPOUT, "dropout", ew_dropout_supports, ew_dropout_run),
};

const struct gf_kernel_table gf_cpu_elementwise_table = {kernels,
                                                         sizeof(kernels) / sizeof(kernels[0])};
