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

/* ---- fp32 math through double, within 1 ulp -------------------------------------
 * For the plain Exp / Tanh / Sigmoid / Softmax kernels, which promise libm's
 * accuracy: each is computed in double to about 1e-14 relative and rounded
 * once to float, so the result is the correctly rounded one but in rare
 * ties (never more than 1 ulp off; tests/test_cpu_elementwise.c checks
 * millions of floats against double libm).  Vectorizes as the code above. */

FU_MATH double fu_f64_of_bits(uint64_t i)
{
    double f;
    memcpy(&f, &i, sizeof(f));
    return f;
}

FU_MATH uint64_t fu_bits_of_f64(double f)
{
    uint64_t i;
    memcpy(&i, &f, sizeof(i));
    return i;
}

/* e^y for |y| <= 200 (the caller clamps): y = k ln 2 + r with |r| <= 0.35
 * (k ln2_hi exact), a degree-11 Taylor polynomial of e^r (remainder below
 * 7e-15 relative), and k added to the exponent bits. */
FU_MATH double fu_exp_dbl(double y)
{
    double kd = y * 0x1.71547652b82fep0 + 0x1.8p52;
    uint64_t ki = fu_bits_of_f64(kd);
    kd -= 0x1.8p52;
    double r = (y - kd * 0x1.62e42fefa3800p-1) - kd * 0x1.ef35793c76730p-45;
    /* Estrin's scheme: a short dependency chain, so that the loop runs at
     * the multipliers' throughput rather than their latency */
    double r2 = r * r, r4 = r2 * r2;
    double q0 = (1.0 + r) + r2 * (0.5 + r * (1.0 / 6));
    double q1 = (1.0 / 24 + r * (1.0 / 120)) + r2 * (1.0 / 720 + r * (1.0 / 5040));
    double q2 = (1.0 / 40320 + r * (1.0 / 362880)) + r2 * (1.0 / 3628800 + r * (1.0 / 39916800));
    double p = q0 + r4 * (q1 + r4 * q2);
    return fu_f64_of_bits(fu_bits_of_f64(p) + (ki << 52));
}

/* expf.  Below -104 the result is 0: those lanes compute e^0 and are
 * zeroed, so that no lane rounds a tiny double to a float needlessly (a
 * subnormal or underflowing conversion costs a microcode assist). */
FU_MATH float fu_expf_acc(float x)
{
    int32_t keep = -(int32_t)(x > -104.0f);
    float xc = fu_f32_of_bits(fu_bits_of_f32(fu_clampf(x, -104.0f, 89.0f)) & keep);
    float e = (float)fu_exp_dbl((double)xc);
    return fu_keep_nan(x, fu_f32_of_bits(fu_bits_of_f32(e) & keep));
}

/* 1 / (1 + e^-x); below -110 the double result rounds to 0. */
FU_MATH float fu_sigmoidf_acc(float x)
{
    float xc = fu_clampf(x, -110.0f, 40.0f);
    return fu_keep_nan(x, (float)(1.0 / (1.0 + fu_exp_dbl(-(double)xc))));
}

/* tanh |x|: below 0.55 its odd Taylor series to x^23 (remainder below 1e-11
 * relative), above 1 - 2 / (e^2|x| + 1) (which no longer cancels); |x| is
 * clamped to 10, where the float result is 1.  The sign is x's. */
FU_MATH float fu_tanhf_acc(float x)
{
    float ac = fu_clampf(fu_f32_of_bits(fu_bits_of_f32(x) & 0x7fffffff), 0.0f, 10.0f);
    double a = (double)ac, a2 = a * a;
    double p = -0x1.497d8eea25259p-15;
    p = p * a2 + 0x1.967e18afcafadp-14;
    p = p * a2 - 0x1.f57d7734d1664p-13;
    p = p * a2 + 0x1.3558248036744p-11;
    p = p * a2 - 0x1.7da36452b75e3p-10;
    p = p * a2 + 0x1.d6d3d0e157de0p-9;
    p = p * a2 - 0x1.226e355e6c23dp-7;
    p = p * a2 + 0x1.664f4882c10fap-6;
    p = p * a2 - 0x1.ba1ba1ba1ba1cp-5;
    p = p * a2 + 0x1.1111111111111p-3;
    p = p * a2 - 0x1.5555555555555p-2;
    double small = a + a * (a2 * p);
    double big = 1.0 - 2.0 / (fu_exp_dbl(2.0 * a) + 1.0);
    float t = (float)(ac < 0.55f ? small : big);
    int32_t sign = fu_bits_of_f32(x) & (int32_t)0x80000000;
    return fu_keep_nan(x, fu_f32_of_bits(fu_bits_of_f32(t) | sign));
}

/* Row sums in double, FU_LANES lanes wide so that they vectorize (the
 * lanes, the tail, then the lanes in order): sum(x) and sum((x - mu)^2).
 * Inlined into the caller's clone (FU_HOT). */
#define FU_DEF_ROW_SUMS(DT, sfx, T, C, LD, ST)                                          \
    FU_MATH double fu_sum_##sfx(const T *x, size_t n)                                   \
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
    FU_MATH double fu_dev2_##sfx(const T *x, size_t n, double mu)                       \
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
FU_TYPES(FU_DEF_ROW_SUMS)

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

#endif
