/* Internal helpers of the fused-op CPU kernels (kernels/cpu/fused_*.c): the
 * element types, vectorizable fp32 exp / log / sigmoid / gelu, threading
 * over rows with deterministic partial sums, and checks of inputs, outputs
 * and broadcasting that end in a GF_ERR_INVALID naming the node.
 *
 * Include first in a fused_*.c file: the pragma below applies to the rest
 * of that file.  GCC 12 at -O2 vectorizes only loops whose trip count is
 * known (cost model "very cheap"), and with -ftrapping-math it will not
 * if-convert the selects of the math functions; neither changes a result
 * (no reassociation: every sum keeps the order the source gives it).
 */
#ifndef GF_CPU_FUSED_H
#define GF_CPU_FUSED_H

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <stdint.h>
#include <stdio.h>

#include "cpu.h"

/* Functions holding the hot loops are compiled twice, for x86-64-v3 (AVX2:
 * 8 floats a vector) and for the baseline, and the first the CPU supports
 * is chosen when the program loads (GCC function multiversioning through
 * a glibc ifunc).  Both compute the same thing in the same order: ISO C
 * mode does not contract a * b + c into an FMA.  The exp-bound kernels
 * (cross-entropy, SwiGLU, GeGLU ...) run about twice as fast. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(FU_NO_CLONES)
#define FU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FU_HOT
#endif

#define FU_GRAIN 16384    /* elements worth a thread */
#define FU_MAX_THREADS 64 /* as gf_parallel_for */
#define FU_LANES 8        /* independent accumulators of a row sum */

/* ---- element types ----------------------------------------------------------
 * X(dtype, suffix, storage type T, compute type C, load, store)
 * fp16 / bf16 are widened to fp32 and rounded back when stored; double is
 * computed in double; row sums are accumulated in double for every type. */
#define FU_TYPES(X)                                                   \
    X(GF_FLOAT, f32, float, float, FU_LD_SAME, FU_ST_F32)             \
    X(GF_DOUBLE, f64, double, double, FU_LD_SAME, FU_ST_F64)          \
    X(GF_FLOAT16, f16, uint16_t, float, gf_half_to_float, FU_ST_F16)  \
    X(GF_BFLOAT16, bf16, uint16_t, float, gf_bf16_to_float, FU_ST_BF16)

#define FU_LD_SAME(x) (x)
#define FU_ST_F32(v) ((float)(v))
#define FU_ST_F64(v) ((double)(v))
#define FU_ST_F16(v) gf_float_to_half((float)(v))
#define FU_ST_BF16(v) gf_float_to_bf16((float)(v))

static inline bool fu_is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

static inline bool fu_is_half(enum gf_dtype t)
{
    return t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* Bytes of the compute type of dtype t (double for double, else float). */
static inline size_t fu_compute_size(enum gf_dtype t)
{
    return t == GF_DOUBLE ? sizeof(double) : sizeof(float);
}

/* Element i of a float tensor of any float dtype, as double. */
static inline double fu_get(const struct gf_tview *t, size_t i)
{
    switch (t->dtype) {
    case GF_FLOAT: return ((const float *)t->data)[i];
    case GF_DOUBLE: return ((const double *)t->data)[i];
    case GF_FLOAT16: return gf_half_to_float(((const uint16_t *)t->data)[i]);
    case GF_BFLOAT16: return gf_bf16_to_float(((const uint16_t *)t->data)[i]);
    default: return NAN;
    }
}

/* Stores v into element i of a float tensor of any float dtype. */
static inline void fu_put(void *data, enum gf_dtype t, size_t i, double v)
{
    switch (t) {
    case GF_FLOAT: ((float *)data)[i] = (float)v; break;
    case GF_DOUBLE: ((double *)data)[i] = v; break;
    case GF_FLOAT16: ((uint16_t *)data)[i] = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: ((uint16_t *)data)[i] = gf_float_to_bf16((float)v); break;
    default: break;
    }
}

/* Element i of an int32 / int64 tensor (labels). */
static inline int64_t fu_label(const struct gf_tview *t, size_t i)
{
    return t->dtype == GF_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* ---- fp32 math that vectorizes --------------------------------------------------
 * Straight-line code: selects are written so that GCC if-converts them and
 * bit patterns move through memcpy, so a loop calling these functions
 * vectorizes.  Accuracy (checked against double libm on every float of
 * the ranges that matter): exp within 2 ulp, log within 2 ulp, gelu within
 * 6e-7 relative (its tanh form 4e-6 for |x| <= 6).  Double inputs use libm
 * in double instead. */

/* The math below must inline into the loops that call it: a call (even to
 * a function GCC knows to be pure) stops the loop from vectorizing. */
#define FU_MATH static inline __attribute__((always_inline))

FU_MATH float fu_f32_of_bits(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof(f));
    return f;
}

FU_MATH int32_t fu_bits_of_f32(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof(i));
    return i;
}

#define FU_LOG2E 1.44269504088896341f
#define FU_LN2_HI 0.693145751953125f      /* ln 2 to 16 bits: n * LN2_HI is exact */
#define FU_LN2_LO 1.428606765330187045e-06f /* ln 2 - LN2_HI */
#define FU_ROUND_MAGIC 12582912.0f           /* 1.5 * 2^23: adding it rounds to an integer */

/* e^r * 2^n for |r| <= ~0.35 and integral n in [-252, 254]: a degree-7
 * Taylor polynomial (remainder < 6e-9 relative) scaled by 2^n in two
 * steps, so that results below 2^-126 become subnormals and those above
 * 2^128 infinity. */
FU_MATH float fu_exp_core(float r, float n)
{
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t k = (int32_t)n, k1 = k >> 1, k2 = k - k1;
    return p * fu_f32_of_bits((k1 + 127) << 23) * fu_f32_of_bits((k2 + 127) << 23);
}

/* x clamped to [lo, hi], NaN giving lo, in bit operations: from a ?: GCC
 * may compute what follows from the unclamped x and select afterwards, so
 * that lanes it throws away run the slow cases (subnormal results). */
FU_MATH float fu_clampf(float x, float lo, float hi)
{
    int32_t below = -(int32_t)!(x >= lo), above = -(int32_t)(x > hi);
    return fu_f32_of_bits((fu_bits_of_f32(x) & ~(below | above)) |
                          (fu_bits_of_f32(lo) & below) | (fu_bits_of_f32(hi) & above));
}

/* x if x is NaN, else v. */
FU_MATH float fu_keep_nan(float x, float v)
{
    int32_t bx = fu_bits_of_f32(x), nan = -((bx & 0x7fffffff) > 0x7f800000);
    return fu_f32_of_bits((fu_bits_of_f32(v) & ~nan) | (bx & nan));
}

/* exp(hi + lo) for hi in [-128, 128] and |lo| <= 8: lo carries bits that a
 * float sum of the two would lose (gelu's -x^2/2).  hi - n*LN2_HI is exact. */
FU_MATH float fu_exp_hilo(float hi, float lo)
{
    float n = ((hi + lo) * FU_LOG2E + FU_ROUND_MAGIC) - FU_ROUND_MAGIC;
    return fu_exp_core(((hi - n * FU_LN2_HI) - n * FU_LN2_LO) + lo, n);
}

/* Results below FLT_MIN (x < -87.3) are flushed to 0: computing a
 * subnormal costs the CPU a microcode assist of ~100 cycles, per element
 * (a softmax over a wide range of logits, a sigmoid of a large input).
 * Above 88.8 the result is infinite. */
FU_MATH float fu_expf(float x)
{
    float xc = fu_clampf(x, -87.3f, 120.0f); /* e^-87.3 is just above FLT_MIN */
    int32_t keep = -(int32_t)(x >= -87.3f);
    float e = fu_f32_of_bits(fu_bits_of_f32(fu_exp_hilo(xc, 0.0f)) & keep);
    return fu_keep_nan(x, e);
}

/* log(x): x = 2^e * f with f in [sqrt(1/2), sqrt(2)), log f = 2 atanh(s),
 * s = (f - 1) / (f + 1), |s| <= 0.172, by its series to s^9.  0 gives -inf,
 * negatives NaN, +inf and NaN themselves; subnormals are scaled first. */
FU_MATH float fu_logf(float x)
{
    int32_t bx = fu_bits_of_f32(x);
    int32_t sub = -(bx < 0x00800000); /* subnormal, zero or negative */
    int32_t b = (fu_bits_of_f32(x * 8388608.0f) & sub) | (bx & ~sub);
    int32_t e = ((b >> 23) & 0xff) - 127 + (sub & -23);
    float f = fu_f32_of_bits((b & 0x007fffff) | 0x3f800000); /* [1, 2) */
    int32_t big = -(f > 1.41421356f);
    f = f * fu_f32_of_bits(0x3f800000 - (big & 0x00800000)); /* halved when big */
    e -= big;
    float s = (f - 1.0f) / (f + 1.0f), s2 = s * s;
    float p = 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    float lf = 2.0f * s + 2.0f * s * (s2 * p), ef = (float)e;
    float res = ef * FU_LN2_HI + (lf + ef * FU_LN2_LO);
    int32_t zero = -((bx & 0x7fffffff) == 0), neg = -(bx < 0) & ~zero;
    int32_t self = -(bx >= 0x7f800000); /* +inf, or NaN with the sign bit clear */
    int32_t r = fu_bits_of_f32(res);
    r = (r & ~zero) | (zero & (int32_t)0xff800000);
    r = (r & ~neg) | (neg & 0x7fc00000);
    r = (r & ~self) | (self & bx);
    return fu_f32_of_bits(r);
}

FU_MATH float fu_sigmoidf(float x)
{
    return 1.0f / (1.0f + fu_expf(-x));
}

/* gelu(x) = x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, with erfc(z) for
 * z >= 0 from the Chebyshev fit of Numerical Recipes (erfcc: relative error
 * below 1.2e-7 everywhere): erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2).
 * Working from erfc keeps the tail x << 0 accurate in relative terms
 * (1 + erf(x/sqrt 2) would cancel), and z^2 = x^2/2 enters exp as an exact
 * head plus a tail so that exp's argument keeps its precision there. */
FU_MATH float fu_gelu_erff(float x)
{
    /* Phi(12.8) is 1 in float; below -12.8 the result (under 1e-36) is
     * flushed to 0, so that no step computes a subnormal (see fu_expf) */
    float ax = fu_clampf(fabsf(x), 0.0f, 12.8f);
    float z = ax * 0.70710678118654752f, t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float ah = fu_f32_of_bits(fu_bits_of_f32(ax) & (int32_t)0xfffff000); /* 12 bits */
    float al = ax - ah;
    float hi = -0.5f * (ah * ah); /* exact */
    float lo = -0.5f * (al * (ax + ah)) + p;
    float e = t * fu_exp_hilo(hi, lo); /* erfc(|x| / sqrt 2) */
    float phi = x < 0 ? 0.5f * e : 1.0f - 0.5f * e;
    int32_t keep = -(int32_t)(x >= -12.8f);
    return x * fu_f32_of_bits(fu_bits_of_f32(phi) & keep);
}

/* The tanh form: x/2 (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3);
 * the sigmoid form does not cancel for x << 0. */
FU_MATH float fu_gelu_tanhf(float x)
{
    return x / (1.0f + fu_expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}

static inline double fu_sigmoidd(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static inline double fu_gelu_erfd(double x)
{
    return 0.5 * x * erfc(-x * 0.70710678118654752440);
}

static inline double fu_gelu_tanhd(double x)
{
    return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

/* The same in the compute type of the expression (float or double). */
#define FU_EXP(x) _Generic((x), float: fu_expf, default: exp)(x)
#define FU_LOG(x) _Generic((x), float: fu_logf, default: log)(x)
#define FU_SIGMOID(x) _Generic((x), float: fu_sigmoidf, default: fu_sigmoidd)(x)
#define FU_GELU(x) _Generic((x), float: fu_gelu_erff, default: fu_gelu_erfd)(x)
#define FU_GELU_TANH(x) _Generic((x), float: fu_gelu_tanhf, default: fu_gelu_tanhd)(x)

/* ---- threads ------------------------------------------------------------------------ */

static inline int fu_threads(const struct gf_kernel_args *a)
{
    return a->n_threads < 1 ? 1 : a->n_threads > FU_MAX_THREADS ? FU_MAX_THREADS : a->n_threads;
}

/* Items per parallel chunk when each item costs `cost` elements. */
static inline size_t fu_grain(size_t cost)
{
    return cost >= FU_GRAIN ? 1 : FU_GRAIN / (cost ? cost : 1);
}

/* fn(ctx, part, begin, end) on `parts` equal slices of [0, n): a slice owns
 * slot `part` of the caller's partial sums, so the total does not depend
 * on which thread ran what. */
typedef void (*fu_part_fn)(void *ctx, size_t part, size_t begin, size_t end);

struct fu_parts {
    fu_part_fn fn;
    void *ctx;
    size_t n, parts;
};

static inline void fu_parts_task(void *vp, size_t b, size_t e)
{
    const struct fu_parts *p = vp;
    for (size_t i = b; i < e; i++)
        p->fn(p->ctx, i, p->n * i / p->parts, p->n * (i + 1) / p->parts);
}

/* Runs the slices of n items costing `cost` elements each on up to nt
 * threads; returns the number of slices (<= FU_MAX_THREADS). */
static inline size_t fu_run_parts(int nt, size_t n, size_t cost, fu_part_fn fn, void *ctx)
{
    size_t parts = n / fu_grain(cost);
    parts = parts < (size_t)nt ? parts : (size_t)nt;
    parts = parts ? parts : 1;
    struct fu_parts p = {fn, ctx, n, parts};
    gf_parallel_for(nt, parts, 1, fu_parts_task, &p);
    return parts;
}

/* ---- shapes, inputs, outputs ---------------------------------------------------------- */

/* "[2,3,4]" for messages. */
static inline const char *fu_shape_str(char *buf, size_t len, int rank, const int64_t *dims)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
    return buf;
}

#define FU_SHAPE(t) fu_shape_str((char[128]){0}, 128, (t)->rank, (t)->dims)
#define FU_DIMS(rank, dims) fu_shape_str((char[128]){0}, 128, rank, dims)

static inline bool fu_same_shape(const struct gf_tview *t, int rank, const int64_t *dims)
{
    if (t->rank != rank)
        return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i])
            return false;
    return true;
}

/* Input i is given (an omitted optional input has no dtype). */
static inline bool fu_has(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_in && a->in[i].dtype != GF_UNDEFINED;
}

/* Output i is wanted. */
static inline bool fu_has_out(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_out && a->out[i].dtype != GF_UNDEFINED;
}

/* Input i (named `name` in messages) is present, holds data, and has the
 * element type `dt`. */
static inline enum gf_status fu_check_in(const struct gf_kernel_args *a, size_t i,
                                         const char *name, enum gf_dtype dt)
{
    if (!fu_has(a, i))
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is missing", name, i);
    const struct gf_tview *t = &a->in[i];
    if (t->nelem && !t->data)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) has no data", name, i);
    if (dt != GF_UNDEFINED && t->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, expected %s", name, i,
                               gf_dtype_name(t->dtype), gf_dtype_name(dt));
    return GF_OK;
}

/* Output i exists (unless optional and omitted) with dtype dt and shape
 * dims[rank]. */
static inline enum gf_status fu_check_out(const struct gf_kernel_args *a, size_t i,
                                          enum gf_dtype dt, int rank, const int64_t *dims)
{
    if (!fu_has_out(a, i))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is missing", i);
    const struct gf_tview *o = &a->out[i];
    if (o->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is %s, expected %s", i,
                               gf_dtype_name(o->dtype), gf_dtype_name(dt));
    if (!fu_same_shape(o, rank, dims))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has shape %s, expected %s", i,
                               FU_SHAPE(o), FU_DIMS(rank, dims));
    if (o->nelem && !o->data)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has no buffer", i);
    return GF_OK;
}

/* t broadcasts (numpy rules) to shape dims[rank] without enlarging it. */
static inline bool fu_bcasts_to(const struct gf_tview *t, int rank, const int64_t *dims)
{
    for (int i = 1; i <= t->rank; i++) {
        int64_t d = t->dims[t->rank - i];
        if (d != 1 && (i > rank || d != dims[rank - i]))
            return false;
    }
    return true;
}

/* Element strides of t over shape dims[rank] (0 along broadcast axes);
 * t must broadcast to it (fu_bcasts_to). */
static inline void fu_strides(const struct gf_tview *t, int rank, const int64_t *dims,
                              int64_t *st)
{
    struct gf_tview shape = {.dtype = t->dtype};
    gf_tview_set_shape(&shape, rank, dims);
    gf_bcast_strides(t, &shape, st);
}

/* Offset, under strides st, of element `flat` of shape dims[rank]. */
static inline size_t fu_offset(int rank, const int64_t *dims, const int64_t *st, size_t flat)
{
    size_t off = 0;
    for (int i = rank - 1; i >= 0 && flat; i--) {
        size_t d = (size_t)dims[i];
        off += flat % d * (size_t)st[i];
        flat /= d;
    }
    return off;
}

/* Resolves a possibly negative axis against rank; false when out of range. */
static inline bool fu_axis(int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

/* Cross-entropy attributes and labels, shared by the backends (cpu/fused_loss.c). */
enum reduction { RED_NONE, RED_SUM, RED_MEAN };
/* reduction, shift (0 or 1) and ignore_index (has_ii: given) of a node. */
enum gf_status fu_ce_attrs(const struct gf_kernel_args *a, enum reduction *red, bool *shift,
                           bool *has_ii, int64_t *ii);
/* Input i is int32 / int64 labels of shape dims[rank]. */
enum gf_status fu_check_label_shape(const struct gf_kernel_args *a, size_t i, int rank,
                                    const int64_t *dims);

#endif
