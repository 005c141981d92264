/*
 * Elementwise kernels (elementwise.c): unary, binary with broadcasting,
 * Where, Clip, Cast, and the elementwise backward ops.
 *
 * Float tensors are store_t (storage.cl: float, half or bfloat16, chosen
 * by the build option): loaded to float, computed in float, stored once
 * in their type.  Kernels named _f32 hold store_t data; the exponent of
 * the _powx kernels is always float (Pow of a half base).  Kernels of the
 * other types (Not, integer and bool binaries, Where, Cast) do not depend
 * on it: elementwise.c asks for them in the fp32 build, and the fp16 and
 * bf16 builds leave them out (FP32_BUILD).
 *
 * Options: VEC (1, 2, 4 or 8; default 4) elements per work-item step.
 * Flat kernels (every operand has the output's shape, or is one element)
 * walk the output in VEC-wide vectors with a grid-stride loop, the tail
 * scalar.  Broadcasting kernels ("_nd") take the merged output shape
 * right-aligned in `dims` (outer axes 1) and each input's element strides
 * (0 on broadcast axes).  Indices are int: the host declines tensors of
 * 2^31 elements or more.
 */
#ifndef VEC
#define VEC 4
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if defined(GF_STORE_F16) || defined(GF_STORE_BF16)
#define FP32_BUILD 0
#else
#define FP32_BUILD 1
#endif

/* float -> bfloat16 bits on T (float or a float vector; U, S: its uint
 * and ushort forms): round to nearest even, a NaN stays a NaN (as
 * storage.cl's gf_bf16). */
#define DEF_TO_BF16(T, U, S)                                                       \
    inline S CAT(to_bf16_, T)(T v)                                                 \
    {                                                                              \
        U u = CAT(as_, U)(v);                                                      \
        U r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                              \
        return CAT(convert_, S)(select(r, (u >> 16) | 0x40u, CAT(as_, U)(isnan(v)))); \
    }

/* VF: VEC floats.  VLD(i, p) / VST(v, i, p): elements VEC*i .. VEC*i+VEC-1
 * of store_t memory as VF; VLDF the same from float memory. */
#if VEC == 1
#define VF float
#define VLD(i, p) LD(p, i)
#define VST(v, i, p) ST(p, i, v)
#define VLDF(i, p) ((p)[i])
#else
#define VF CAT(float, VEC)
#define VLDF(i, p) CAT(vload, VEC)(i, p)
#if defined(GF_STORE_F16)
#define VLD(i, p) CAT(vload_half, VEC)(i, p)
#define VST(v, i, p) CAT(CAT(vstore_half, VEC), _rte)(v, i, p)
#elif defined(GF_STORE_BF16)
#define VU CAT(uint, VEC)
#define VS CAT(ushort, VEC)
DEF_TO_BF16(VF, VU, VS)
#define VLD(i, p) CAT(as_float, VEC)(CAT(convert_uint, VEC)(CAT(vload, VEC)(i, p)) << 16)
#define VST(v, i, p) CAT(vstore, VEC)(CAT(to_bf16_float, VEC)(v), i, p)
#else
#define VLD(i, p) CAT(vload, VEC)(i, p)
#define VST(v, i, p) CAT(vstore, VEC)(v, i, p)
#endif
#endif

/* The offsets of output element i in up to three operands: dims and
 * strides right-aligned over 8 axes, `rank` of them used. */
#define ND_ARGS int rank, int8 dims_v, int8 s0_v, int8 s1_v, int8 s2_v
#define ND_WALK(i, o0, o1, o2)                                                     \
    int o0 = 0, o1 = 0, o2 = 0;                                                    \
    {                                                                              \
        int r_ = i;                                                                \
        for (int d_ = 7; d_ >= 8 - rank; d_--) {                                   \
            int n_ = dims[d_], c_ = r_ % n_;                                       \
            r_ /= n_;                                                              \
            o0 += c_ * s0[d_];                                                     \
            o1 += c_ * s1[d_];                                                     \
            o2 += c_ * s2[d_];                                                     \
        }                                                                          \
    }
#define ND_UNPACK                                                                  \
    int dims[8], s0[8], s1[8], s2[8];                                              \
    vstore8(dims_v, 0, dims);                                                      \
    vstore8(s0_v, 0, s0);                                                          \
    vstore8(s1_v, 0, s1);                                                          \
    vstore8(s2_v, 0, s2)

/* ---- unary ---------------------------------------------------------------- */

/* f(x) on T vectors or scalars; select() keeps NaN where the CPU's
 * ternaries do. */
#define U_NEG(x, T) (-(x))
#define U_SQRT(x, T) sqrt(x)
#define U_RECIP(x, T) ((T)1.0f / (x))
#define U_EXP(x, T) exp(x)
#define U_LOG(x, T) log(x)
#define U_TANH(x, T) tanh(x)
#define U_ABS(x, T) fabs(x)
#define U_ERF(x, T) erf(x)
#define U_SIN(x, T) sin(x)
#define U_COS(x, T) cos(x)
#define U_FLOOR(x, T) floor(x)
#define U_CEIL(x, T) ceil(x)
#define U_RELU(x, T) select(x, (T)0.0f, (x) < (T)0.0f)
#define U_SIGMOID(x, T) sigmoid_##T(x)
#define U_SOFTPLUS(x, T) select(log1p(exp(x)), (x) + log1p(exp(-(x))), (x) > (T)0.0f)
#define U_GELU(x, T) ((T)0.5f * (x) * ((T)1.0f + erf((x) * (T)0.70710678118654752f)))
#define U_GELU_TANH(x, T)                                                          \
    ((T)0.5f * (x) *                                                               \
     ((T)1.0f + tanh((T)0.79788456080286536f * ((x) + (T)0.044715f * (x) * (x) * (x)))))

/* 1 / (1 + e^-x) without overflow: e^-|x| <= 1 */
#define DEF_SIGMOID(T)                                                             \
    inline T sigmoid_##T(T x)                                                      \
    {                                                                              \
        T e = exp(-fabs(x)), r = (T)1.0f / ((T)1.0f + e);                          \
        return select(e * r, r, x >= (T)0.0f);                                     \
    }
DEF_SIGMOID(float)
#if VEC > 1
DEF_SIGMOID(VF)
#else
#define sigmoid_VF sigmoid_float
#endif

/* y[i] = f(x[i]), n elements; one VEC-wide step per work-item per turn. */
#define DEF_UNARY(name, F)                                                         \
    __kernel void un_##name(__global const store_t *x, __global store_t *y, int n) \
    {                                                                              \
        int nv = n / VEC;                                                          \
        for (int i = get_global_id(0); i < nv; i += get_global_size(0)) {          \
            VF v = VLD(i, x);                                                      \
            VST(F(v, VF), i, y);                                                   \
        }                                                                          \
        for (int i = nv * VEC + get_global_id(0); i < n; i += get_global_size(0)) \
            ST(y, i, F(LD(x, i), float));                                          \
    }

DEF_UNARY(neg, U_NEG)
DEF_UNARY(sqrt, U_SQRT)
DEF_UNARY(recip, U_RECIP)
DEF_UNARY(exp, U_EXP)
DEF_UNARY(log, U_LOG)
DEF_UNARY(tanh, U_TANH)
DEF_UNARY(abs, U_ABS)
DEF_UNARY(erf, U_ERF)
DEF_UNARY(sin, U_SIN)
DEF_UNARY(cos, U_COS)
DEF_UNARY(floor, U_FLOOR)
DEF_UNARY(ceil, U_CEIL)
DEF_UNARY(relu, U_RELU)
DEF_UNARY(sigmoid, U_SIGMOID)
DEF_UNARY(softplus, U_SOFTPLUS)
DEF_UNARY(gelu, U_GELU)
DEF_UNARY(gelu_tanh, U_GELU_TANH)

/* IsNaN; IsInf of the signs asked for (neg, pos): one bool per element. */
__kernel void un_isnan(__global const store_t *x, __global uchar *y, int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        y[i] = isnan(LD(x, i)) ? 1 : 0;
}

__kernel void un_isinf(__global const store_t *x, __global uchar *y, int n, int neg, int pos)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
        float v = LD(x, i);
        y[i] = isinf(v) && (v < 0.0f ? neg : pos) ? 1 : 0;
    }
}

#if FP32_BUILD
__kernel void un_not(__global const uchar *x, __global uchar *y, int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        y[i] = !x[i];
}
#endif

/* ---- binary, float, flat: a and b each the output's shape (sa, sb = 1) or
 * one element (0) ------------------------------------------------------------ */

#define B_ADD(x, y, T) ((x) + (y))
#define B_SUB(x, y, T) ((x) - (y))
#define B_MUL(x, y, T) ((x) * (y))
#define B_DIV(x, y, T) ((x) / (y))
#define B_POW(x, y, T) select(pow(x, y), (x) * (x), (y) == (T)2.0f)
#define B_MAX(x, y, T) select(y, x, ((x) > (y)) | isnan(x))
#define B_MIN(x, y, T) select(y, x, ((x) < (y)) | isnan(x))

/* b is store_t (VLD, LD) or, for _powx, float (VLDF, LDF) */
#define LDF(p, i) ((p)[i])
#define DEF_BINARY_FLAT(name, F, TB, VLDB, LDB)                                    \
    __kernel void binf_##name(__global const store_t *a, __global const TB *b,    \
                              __global store_t *y, int n, int sa, int sb)         \
    {                                                                              \
        int nv = n / VEC;                                                          \
        for (int i = get_global_id(0); i < nv; i += get_global_size(0)) {          \
            VF x = sa ? VLD(i, a) : (VF)(LD(a, 0));                                \
            VF z = sb ? VLDB(i, b) : (VF)(LDB(b, 0));                              \
            VST(F(x, z, VF), i, y);                                                \
        }                                                                          \
        for (int i = nv * VEC + get_global_id(0); i < n; i += get_global_size(0)) \
            ST(y, i, F(LD(a, sa ? i : 0), LDB(b, sb ? i : 0), float));             \
    }

DEF_BINARY_FLAT(add, B_ADD, store_t, VLD, LD)
DEF_BINARY_FLAT(sub, B_SUB, store_t, VLD, LD)
DEF_BINARY_FLAT(mul, B_MUL, store_t, VLD, LD)
DEF_BINARY_FLAT(div, B_DIV, store_t, VLD, LD)
DEF_BINARY_FLAT(pow, B_POW, store_t, VLD, LD)
DEF_BINARY_FLAT(max, B_MAX, store_t, VLD, LD)
DEF_BINARY_FLAT(min, B_MIN, store_t, VLD, LD)
DEF_BINARY_FLAT(powx, B_POW, float, VLDF, LDF)

/* ---- Clip: max then min, as the CPU's (lo > hi gives hi; a NaN stays NaN);
 * each bound from a one-element tensor (lo_t, hi_t) when given, else the
 * float argument ---------------------------------------------------------------- */

__kernel void clip(__global const store_t *x, __global store_t *y, int n,
                   __global const store_t *lo_t, __global const store_t *hi_t, float lo,
                   float hi)
{
    float l = lo_t ? LD(lo_t, 0) : lo, h = hi_t ? LD(hi_t, 0) : hi;
    int nv = n / VEC;
    for (int i = get_global_id(0); i < nv; i += get_global_size(0)) {
        VF v = VLD(i, x);
        v = select(v, (VF)(l), v < (VF)(l));
        VST(select(v, (VF)(h), v > (VF)(h)), i, y);
    }
    for (int i = nv * VEC + get_global_id(0); i < n; i += get_global_size(0)) {
        float v = LD(x, i);
        v = v < l ? l : v;
        ST(y, i, v > h ? h : v);
    }
}

/* ---- binary, any layout (broadcasting), every type ---------------------------- */

/* integers wrap like the CPU's (computed unsigned); dividing by zero is
 * refused on the host before the kernel runs */
#define I_ADD(x, y, T) ((T)((ulong)(x) + (ulong)(y)))
#define I_SUB(x, y, T) ((T)((ulong)(x) - (ulong)(y)))
#define I_MUL(x, y, T) ((T)((ulong)(x) * (ulong)(y)))
#define I_DIV(x, y, T) ((y) == (T)-1 ? (T)(0 - (ulong)(x)) : (x) / (y))
#define I_MAX(x, y, T) max(x, y)
#define I_MIN(x, y, T) min(x, y)
#define C_EQ(x, y, T) ((x) == (y))
#define C_LT(x, y, T) ((x) < (y))
#define C_LE(x, y, T) ((x) <= (y))
#define C_GT(x, y, T) ((x) > (y))
#define C_GE(x, y, T) ((x) >= (y))
#define L_EQ(x, y, T) (!(x) == !(y))
#define L_AND(x, y, T) ((x) && (y))
#define L_OR(x, y, T) ((x) || (y))
#define L_XOR(x, y, T) (!(x) != !(y))

#define DEF_BINARY_ND(name, T, TO, F)                                              \
    __kernel void bnd_##name(__global const T *a, __global const T *b,            \
                             __global TO *y, int n, ND_ARGS)                      \
    {                                                                              \
        ND_UNPACK;                                                                 \
        for (int i = get_global_id(0); i < n; i += get_global_size(0)) {           \
            ND_WALK(i, oa, ob, o2_);                                               \
            y[i] = (TO)(F(a[oa], b[ob], T));                                       \
        }                                                                          \
    }

/* Float operands: a store_t, b store_t (float for powx), computed in
 * float; the result stored as store_t, or as bool (comparisons). */
#define WR_ST(p, i, v) ST(p, i, v)
#define WR_B8(p, i, v) ((p)[i] = (uchar)(v))
#define DEF_FLOAT_ND(name, TB, LDB, TO, WR, F)                                     \
    __kernel void bnd_##name(__global const store_t *a, __global const TB *b,     \
                             __global TO *y, int n, ND_ARGS)                      \
    {                                                                              \
        ND_UNPACK;                                                                 \
        for (int i = get_global_id(0); i < n; i += get_global_size(0)) {           \
            ND_WALK(i, oa, ob, o2_);                                               \
            WR(y, i, F(LD(a, oa), LDB(b, ob), float));                             \
        }                                                                          \
    }
#define DEF_FLOAT_ARITH(name, F) DEF_FLOAT_ND(name, store_t, LD, store_t, WR_ST, F)
#define DEF_FLOAT_CMP(name, F) DEF_FLOAT_ND(name, store_t, LD, uchar, WR_B8, F)

DEF_FLOAT_ARITH(add_f32, B_ADD)
DEF_FLOAT_ARITH(sub_f32, B_SUB)
DEF_FLOAT_ARITH(mul_f32, B_MUL)
DEF_FLOAT_ARITH(div_f32, B_DIV)
DEF_FLOAT_ARITH(pow_f32, B_POW)
DEF_FLOAT_ARITH(max_f32, B_MAX)
DEF_FLOAT_ARITH(min_f32, B_MIN)
DEF_FLOAT_ND(powx_f32, float, LDF, store_t, WR_ST, B_POW)
DEF_FLOAT_CMP(eq_f32, C_EQ)
DEF_FLOAT_CMP(lt_f32, C_LT)
DEF_FLOAT_CMP(le_f32, C_LE)
DEF_FLOAT_CMP(gt_f32, C_GT)
DEF_FLOAT_CMP(ge_f32, C_GE)

#if FP32_BUILD
#define DEF_BINARY_INT(sfx, T)                                                     \
    DEF_BINARY_ND(add_##sfx, T, T, I_ADD)                                          \
    DEF_BINARY_ND(sub_##sfx, T, T, I_SUB)                                          \
    DEF_BINARY_ND(mul_##sfx, T, T, I_MUL)                                          \
    DEF_BINARY_ND(div_##sfx, T, T, I_DIV)                                          \
    DEF_BINARY_ND(max_##sfx, T, T, I_MAX)                                          \
    DEF_BINARY_ND(min_##sfx, T, T, I_MIN)                                          \
    DEF_BINARY_ND(eq_##sfx, T, uchar, C_EQ)                                        \
    DEF_BINARY_ND(lt_##sfx, T, uchar, C_LT)                                        \
    DEF_BINARY_ND(le_##sfx, T, uchar, C_LE)                                        \
    DEF_BINARY_ND(gt_##sfx, T, uchar, C_GT)                                        \
    DEF_BINARY_ND(ge_##sfx, T, uchar, C_GE)
DEF_BINARY_INT(i64, long)
DEF_BINARY_INT(i32, int)

DEF_BINARY_ND(eq_b8, uchar, uchar, L_EQ)
DEF_BINARY_ND(and_b8, uchar, uchar, L_AND)
DEF_BINARY_ND(or_b8, uchar, uchar, L_OR)
DEF_BINARY_ND(xor_b8, uchar, uchar, L_XOR)

/* ---- Where(cond, x, y): elements moved by size ----------------------------------- */

#define DEF_WHERE(S, T)                                                            \
    __kernel void where_##S(__global const uchar *c, __global const T *x,         \
                            __global const T *z, __global T *y, int n, ND_ARGS)   \
    {                                                                              \
        ND_UNPACK;                                                                 \
        for (int i = get_global_id(0); i < n; i += get_global_size(0)) {           \
            ND_WALK(i, oc, ox, oz);                                                \
            y[i] = c[oc] ? x[ox] : z[oz];                                          \
        }                                                                          \
    }
DEF_WHERE(1, uchar)
DEF_WHERE(2, ushort)
DEF_WHERE(4, uint)
DEF_WHERE(8, ulong)

/* ---- Cast: through float from floating types, through long from integer
 * ones; float to integer saturates (NaN gives 0), as the CPU's; an integer
 * goes to bfloat16 through a float rounded to odd, so that it is rounded
 * once (as the CPU's through double) ---------------------------------------- */

DEF_TO_BF16(float, uint, ushort)

inline float long_to_float_odd(long v)
{
    float f = convert_float_rtz(v);
    return (long)f == v ? f : as_float(as_uint(f) | 1u);
}

#define RD_f32(p, i) ((p)[i])
#define RD_f16(p, i) vload_half(i, p)
#define RD_bf16(p, i) as_float((uint)(p)[i] << 16)
#define RD_i64(p, i) ((p)[i])
#define RD_i32(p, i) ((long)(p)[i])
#define RD_u8(p, i) ((long)(p)[i])
#define RD_b8(p, i) ((long)((p)[i] != 0))
#define KIND_f32 F
#define KIND_f16 F
#define KIND_bf16 F
#define KIND_i64 I
#define KIND_i32 I
#define KIND_u8 I
#define KIND_b8 I
#define TY_f32 float
#define TY_f16 half
#define TY_bf16 ushort
#define TY_i64 long
#define TY_i32 int
#define TY_u8 uchar
#define TY_b8 uchar

#define WR_F_f32(p, i, v) ((p)[i] = (v))
#define WR_I_f32(p, i, v) ((p)[i] = convert_float(v))
#define WR_F_f16(p, i, v) vstore_half_rte(v, i, p)
#define WR_I_f16(p, i, v) vstore_half_rte(convert_float(v), i, p)
#define WR_F_bf16(p, i, v) ((p)[i] = to_bf16_float(v))
#define WR_I_bf16(p, i, v) ((p)[i] = to_bf16_float(long_to_float_odd(v)))
/* NaN is tested explicitly: NVIDIA's convert_long_sat_rtz(NaN) gives
 * LONG_MIN where the OpenCL spec says 0 */
#define WR_F_i64(p, i, v) ((p)[i] = isnan(v) ? 0 : convert_long_sat_rtz(v))
#define WR_I_i64(p, i, v) ((p)[i] = (v))
#define WR_F_i32(p, i, v) ((p)[i] = isnan(v) ? 0 : convert_int_sat_rtz(v))
#define WR_I_i32(p, i, v) ((p)[i] = (int)(v))
#define WR_F_u8(p, i, v) ((p)[i] = isnan(v) ? 0 : convert_uchar_sat_rtz(v))
#define WR_I_u8(p, i, v) ((p)[i] = (uchar)(v))
#define WR_F_b8(p, i, v) ((p)[i] = (v) != 0.0f)
#define WR_I_b8(p, i, v) ((p)[i] = (v) != 0)

#define WR(kind, dst, p, i, v) CAT(CAT(CAT(WR_, kind), _), dst)(p, i, v)
#define DEF_CAST(src, dst)                                                         \
    __kernel void cast_##src##_##dst(__global const TY_##src *x,                  \
                                     __global TY_##dst *y, int n)                 \
    {                                                                              \
        for (int i = get_global_id(0); i < n; i += get_global_size(0))             \
            WR(KIND_##src, dst, y, i, RD_##src(x, i));                             \
    }
#define DEF_CASTS_FROM(src)                                                        \
    DEF_CAST(src, f32) DEF_CAST(src, f16) DEF_CAST(src, bf16) DEF_CAST(src, i64)   \
    DEF_CAST(src, i32) DEF_CAST(src, u8) DEF_CAST(src, b8)
DEF_CASTS_FROM(f32)
DEF_CASTS_FROM(f16)
DEF_CASTS_FROM(bf16)
DEF_CASTS_FROM(i64)
DEF_CASTS_FROM(i32)
DEF_CASTS_FROM(u8)
DEF_CASTS_FROM(b8)

/* float -> bfloat16 by truncation, as Cast before opset 19 (the CPU's
 * rule); a NaN stays a NaN */
__kernel void cast_f32_bf16_trunc(__global const uint *x, __global ushort *y, int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
        uint u = x[i];
        y[i] = (ushort)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : u >> 16);
    }
}
#endif /* FP32_BUILD */

/* ---- activation gradients: dx = g * f'(v), v the forward's output (Relu,
 * Sigmoid, Tanh) or input (Gelu) -------------------------------------------- */

#define G_RELU(g, v, T) select((T)0.0f, g, (v) > (T)0.0f)
#define G_SIGMOID(g, v, T) ((g) * (v) * ((T)1.0f - (v)))
#define G_TANH(g, v, T) ((g) * ((T)1.0f - (v) * (v)))
/* gelu'(x) = Phi(x) + x phi(x) */
#define G_GELU(g, x, T)                                                            \
    ((g) * ((T)0.5f * ((T)1.0f + erf((x) * (T)0.70710678118654752f)) +            \
            (x) * exp((T)-0.5f * (x) * (x)) * (T)0.39894228040143268f))
/* d/dx of x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
#define G_GELU_TANH(g, x, T) ((g) * gelu_tanh_grad_##T(x))
#define DEF_GELU_TANH_GRAD(T)                                                      \
    inline T gelu_tanh_grad_##T(T x)                                               \
    {                                                                              \
        const T k = (T)0.79788456080286536f, c = (T)0.044715f;                     \
        T t = tanh(k * (x + c * x * x * x));                                       \
        return (T)0.5f * ((T)1.0f + t) +                                           \
               (T)0.5f * x * ((T)1.0f - t * t) * k * ((T)1.0f + (T)3.0f * c * x * x); \
    }
DEF_GELU_TANH_GRAD(float)
#if VEC > 1
DEF_GELU_TANH_GRAD(VF)
#else
#define gelu_tanh_grad_VF gelu_tanh_grad_float
#endif

#define DEF_GRAD(name, F)                                                          \
    __kernel void grad_##name(__global const store_t *g, __global const store_t *v, \
                              __global store_t *dx, int n)                        \
    {                                                                              \
        int nv = n / VEC;                                                          \
        for (int i = get_global_id(0); i < nv; i += get_global_size(0)) {          \
            VF a = VLD(i, g), b = VLD(i, v);                                       \
            VST(F(a, b, VF), i, dx);                                               \
        }                                                                          \
        for (int i = nv * VEC + get_global_id(0); i < n; i += get_global_size(0)) \
            ST(dx, i, F(LD(g, i), LD(v, i), float));                               \
    }
DEF_GRAD(relu, G_RELU)
DEF_GRAD(sigmoid, G_SIGMOID)
DEF_GRAD(tanh, G_TANH)
DEF_GRAD(gelu, G_GELU)
DEF_GRAD(gelu_tanh, G_GELU_TANH)
