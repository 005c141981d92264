/*
 * elementwise.cu — the CUDA elementwise kernels (host side: elementwise.c):
 * unary, the activation gradients, binary with numpy broadcasting, Clip,
 * Where, Cast.  Ported from kernels/opencl/elementwise.cl, computed as the
 * CPU kernels compute (fp32, no FMA contraction: the Makefile's
 * --fmad=false; IEEE division and square root, nvcc's default).  The float
 * kernels are templates over the storage type (float, __half,
 * __nv_bfloat16: half_io.h): fp16 / bf16 load to fp32, compute as fp32 and
 * store rounded to nearest even, as the CPU's 16-bit nodes.
 *
 * Every kernel is a grid-stride loop over the output with 64-bit indices;
 * broadcasting operands are walked through gf_cu_nd (merged axes, element
 * strides, 0 where broadcast).  16-bit unary, gradient and same-shape
 * binary ops move 8 elements per 16-byte load where the operands are
 * aligned (the scalar kernel takes the tail), broadcast binary ops 8 per
 * thread where the innermost axis allows; fp32 runs as before.
 */
#include <cuda_fp16.h>

#include "half_io.h"
#include "launch.h"

#define BLOCK 256

/* Blocks for n items: enough to fill the device, the loop does the rest. */
static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* Offsets of output element i in operands 0..K-1. */
template <int K>
__device__ __forceinline__ void nd_offsets(const gf_cu_nd &nd, int64_t i, int64_t *o)
{
    for (int k = 0; k < K; k++)
        o[k] = 0;
    for (int d = nd.rank - 1; d >= 0; d--) {
        int64_t n = nd.dims[d], c = i % n;
        i /= n;
        for (int k = 0; k < K; k++)
            o[k] += c * nd.st[k][d];
    }
}

/* ---- unary ---------------------------------------------------------------- */

__device__ __forceinline__ float sigmoidf(float x)
{
    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

template <int OP>
__device__ __forceinline__ float un(float x)
{
    switch (OP) {
    case GF_CU_NEG: return -x;
    case GF_CU_SQRT: return sqrtf(x);
    case GF_CU_RECIP: return 1.0f / x;
    case GF_CU_EXP: return expf(x);
    case GF_CU_LOG: return logf(x);
    case GF_CU_TANH: return tanhf(x);
    case GF_CU_ABS: return fabsf(x);
    case GF_CU_ERF: return erff(x);
    case GF_CU_SIN: return sinf(x);
    case GF_CU_COS: return cosf(x);
    case GF_CU_FLOOR: return floorf(x);
    case GF_CU_CEIL: return ceilf(x);
    case GF_CU_RELU: return x < 0.0f ? 0.0f : x; /* NaN stays */
    case GF_CU_SIGMOID: return sigmoidf(x);
    case GF_CU_SOFTPLUS: return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case GF_CU_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case GF_CU_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    default: return x;
    }
}

template <int OP, typename T>
__global__ void k_unary(const T *__restrict__ x, T *__restrict__ y, int64_t n)
{
    GRID_LOOP(i, n) gf_st(y + i, un<OP>(gf_ld(x + i)));
}

__global__ void k_not(const uint8_t *x, uint8_t *y, int64_t n)
{
    GRID_LOOP(i, n) y[i] = !x[i];
}

template <typename T>
__global__ void k_isx(const T *x, uint8_t *y, int64_t n, int op)
{
    GRID_LOOP(i, n)
    {
        float v = gf_ld(x + i);
        if (op == GF_CU_ISNAN)
            y[i] = isnan(v) ? 1 : 0;
        else
            y[i] = isinf(v) && (v < 0.0f ? (op & GF_CU_ISINF_NEG) : (op & GF_CU_ISINF_POS)) ? 1
                                                                                       : 0;
    }
}

/* 16-bit x, y: 8 elements per thread and load (nv groups) */
template <int OP, typename T>
__global__ void k_unary8(const uint4 *__restrict__ x, uint4 *__restrict__ y, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float f[8];
        gf_ld8<T>(x[i], f);
#pragma unroll
        for (int k = 0; k < 8; k++)
            f[k] = un<OP>(f[k]);
        y[i] = gf_st8<T>(f);
    }
}

/* The groups of 8 of a 16-bit launch over n elements at the pointers ps
 * (0: none, 8 bits or not aligned). */
template <typename T>
static int64_t groups8(int64_t n, const void *p0, const void *p1, const void *p2)
{
    if (sizeof(T) != 2 || !gf_al16(p0) || !gf_al16(p1) || !gf_al16(p2))
        return 0;
    return n / 8;
}

template <typename T>
static cudaError_t unary_t(cudaStream_t s, int op, const T *x, T *y, int64_t n)
{
    int64_t nv = op <= GF_CU_GELU_TANH ? groups8<T>(n, x, y, y) : 0;
    if (nv) {
        unsigned gv = grid_for(nv);
        const uint4 *xv = (const uint4 *)x;
        uint4 *yv = (uint4 *)y;
        switch (op) {
#define U(OP)                                                                              \
    case OP: k_unary8<OP, T><<<gv, BLOCK, 0, s>>>(xv, yv, nv); break;
        U(GF_CU_NEG) U(GF_CU_SQRT) U(GF_CU_RECIP) U(GF_CU_EXP) U(GF_CU_LOG) U(GF_CU_TANH)
        U(GF_CU_ABS) U(GF_CU_ERF) U(GF_CU_SIN) U(GF_CU_COS) U(GF_CU_FLOOR) U(GF_CU_CEIL)
        U(GF_CU_RELU) U(GF_CU_SIGMOID) U(GF_CU_SOFTPLUS) U(GF_CU_GELU) U(GF_CU_GELU_TANH)
#undef U
        default: break;
        }
        x += nv * 8;
        y += nv * 8;
        n -= nv * 8;
        if (n == 0)
            return cudaGetLastError();
    }
    unsigned g = grid_for(n);
    switch (op) {
#define U(OP)                                                                              \
    case OP: k_unary<OP, T><<<g, BLOCK, 0, s>>>(x, y, n); break;
    U(GF_CU_NEG) U(GF_CU_SQRT) U(GF_CU_RECIP) U(GF_CU_EXP) U(GF_CU_LOG) U(GF_CU_TANH)
    U(GF_CU_ABS) U(GF_CU_ERF) U(GF_CU_SIN) U(GF_CU_COS) U(GF_CU_FLOOR) U(GF_CU_CEIL)
    U(GF_CU_RELU) U(GF_CU_SIGMOID) U(GF_CU_SOFTPLUS) U(GF_CU_GELU) U(GF_CU_GELU_TANH)
#undef U
    default: k_isx<T><<<g, BLOCK, 0, s>>>(x, (uint8_t *)y, n, op); break;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_unary(cudaStream_t s, int op, int type, const void *x, void *y,
                                   int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    if (op == GF_CU_NOT) {
        k_not<<<grid_for(n), BLOCK, 0, s>>>((const uint8_t *)x, (uint8_t *)y, n);
        return cudaGetLastError();
    }
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       return unary_t<T>(s, op, (const T *)x, (T *)y, n))
    return cudaErrorInvalidValue; /* not reached */
}

/* ---- activation gradients ----------------------------------------------------- */

template <int OP>
__device__ __forceinline__ float grad(float g, float v)
{
    switch (OP) {
    case GF_CU_RELU_GRAD: return v > 0.0f ? g : 0.0f;
    case GF_CU_SIGMOID_GRAD: return g * v * (1.0f - v);
    case GF_CU_TANH_GRAD: return g * (1.0f - v * v);
    case GF_CU_GELU_GRAD:
        return g * (0.5f * (1.0f + erff(v * 0.70710678118654752f)) +
                    v * expf(-0.5f * v * v) * 0.39894228040143268f);
    default: {
        const float k = 0.79788456080286536f, c = 0.044715f;
        float t = tanhf(k * (v + c * v * v * v));
        return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v));
    }
    }
}

template <int OP, typename T>
__global__ void k_grad(const T *__restrict__ g, const T *__restrict__ v, T *__restrict__ dx,
                       int64_t n)
{
    GRID_LOOP(i, n) gf_st(dx + i, grad<OP>(gf_ld(g + i), gf_ld(v + i)));
}

template <int OP, typename T>
__global__ void k_grad8(const uint4 *__restrict__ g, const uint4 *__restrict__ v,
                        uint4 *__restrict__ dx, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float fg[8], fv[8];
        gf_ld8<T>(g[i], fg);
        gf_ld8<T>(v[i], fv);
#pragma unroll
        for (int k = 0; k < 8; k++)
            fg[k] = grad<OP>(fg[k], fv[k]);
        dx[i] = gf_st8<T>(fg);
    }
}

template <typename T>
static cudaError_t act_grad_t(cudaStream_t s, int op, const T *g, const T *v, T *dx, int64_t n)
{
    int64_t nv = groups8<T>(n, g, v, dx);
    if (nv) {
        unsigned bv = grid_for(nv);
        const uint4 *gv = (const uint4 *)g, *vv = (const uint4 *)v;
        uint4 *dv = (uint4 *)dx;
        switch (op) {
#define G(OP)                                                                              \
    case OP: k_grad8<OP, T><<<bv, BLOCK, 0, s>>>(gv, vv, dv, nv); break;
        G(GF_CU_RELU_GRAD) G(GF_CU_SIGMOID_GRAD) G(GF_CU_TANH_GRAD) G(GF_CU_GELU_GRAD)
        G(GF_CU_GELU_TANH_GRAD)
#undef G
        default: break;
        }
        g += nv * 8;
        v += nv * 8;
        dx += nv * 8;
        n -= nv * 8;
        if (n == 0)
            return cudaGetLastError();
    }
    unsigned b = grid_for(n);
    switch (op) {
    case GF_CU_RELU_GRAD: k_grad<GF_CU_RELU_GRAD, T><<<b, BLOCK, 0, s>>>(g, v, dx, n); break;
    case GF_CU_SIGMOID_GRAD:
        k_grad<GF_CU_SIGMOID_GRAD, T><<<b, BLOCK, 0, s>>>(g, v, dx, n);
        break;
    case GF_CU_TANH_GRAD: k_grad<GF_CU_TANH_GRAD, T><<<b, BLOCK, 0, s>>>(g, v, dx, n); break;
    case GF_CU_GELU_GRAD: k_grad<GF_CU_GELU_GRAD, T><<<b, BLOCK, 0, s>>>(g, v, dx, n); break;
    default: k_grad<GF_CU_GELU_TANH_GRAD, T><<<b, BLOCK, 0, s>>>(g, v, dx, n); break;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t gf_cu_act_grad(cudaStream_t s, int op, int type, const void *g,
                                      const void *v, void *dx, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       return act_grad_t<T>(s, op, (const T *)g, (const T *)v, (T *)dx, n))
    return cudaErrorInvalidValue; /* not reached */
}

/* ---- binary --------------------------------------------------------------------- */

/* float: as the CPU (Pow of 2 is x * x; Max / Min keep a NaN of x) */
template <int OP>
__device__ __forceinline__ float binf(float x, float y)
{
    switch (OP) {
    case GF_CU_ADD: return x + y;
    case GF_CU_SUB: return x - y;
    case GF_CU_MUL: return x * y;
    case GF_CU_DIV: return x / y;
    case GF_CU_POW: return y == 2.0f ? x * x : powf(x, y);
    case GF_CU_MAX: return (x > y || isnan(x)) ? x : y;
    case GF_CU_MIN: return (x < y || isnan(x)) ? x : y;
    case GF_CU_EQ: return x == y;
    case GF_CU_LT: return x < y;
    case GF_CU_LE: return x <= y;
    case GF_CU_GT: return x > y;
    default: return x >= y;
    }
}

/* integers wrap as the CPU's (computed unsigned); a zero divisor is
 * refused on the host */
template <int OP, typename T>
__device__ __forceinline__ T bini(T x, T y)
{
    typedef unsigned long long U;
    switch (OP) {
    case GF_CU_ADD: return (T)((U)x + (U)y);
    case GF_CU_SUB: return (T)((U)x - (U)y);
    case GF_CU_MUL: return (T)((U)x * (U)y);
    case GF_CU_DIV: return y == (T)-1 ? (T)(0 - (U)x) : x / y;
    case GF_CU_MAX: return x > y ? x : y;
    case GF_CU_MIN: return x < y ? x : y;
    case GF_CU_EQ: return x == y;
    case GF_CU_LT: return x < y;
    case GF_CU_LE: return x <= y;
    case GF_CU_GT: return x > y;
    default: return x >= y;
    }
}

__device__ __forceinline__ uint8_t binb(int op, uint8_t x, uint8_t y)
{
    switch (op) {
    case GF_CU_AND: return x && y;
    case GF_CU_OR: return x || y;
    case GF_CU_XOR: return !x != !y;
    default: return !x == !y; /* Equal */
    }
}

static __host__ __device__ constexpr bool is_cmp(int op)
{
    return op >= GF_CU_EQ && op <= GF_CU_GE;
}

/* a and y of type T, b of TB (T but for Pow's fp32 exponent of a half base) */
template <int OP, typename T, typename TB>
__global__ void k_bin_f(const T *a, const TB *b, void *y, gf_cu_nd nd, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t o[2];
        nd_offsets<2>(nd, i, o);
        float r = binf<OP>(gf_ld(a + o[0]), gf_ld(b + o[1]));
        if (is_cmp(OP))
            ((uint8_t *)y)[i] = r != 0.0f;
        else
            gf_st((T *)y + i, r);
    }
}

template <int OP, typename T>
__global__ void k_bin_int(const T *a, const T *b, void *y, gf_cu_nd nd, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t o[2];
        nd_offsets<2>(nd, i, o);
        T r = bini<OP, T>(a[o[0]], b[o[1]]);
        if (is_cmp(OP))
            ((uint8_t *)y)[i] = r != 0;
        else
            ((T *)y)[i] = r;
    }
}

__global__ void k_bin_b8(int op, const uint8_t *a, const uint8_t *b, uint8_t *y, gf_cu_nd nd,
                         int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t o[2];
        nd_offsets<2>(nd, i, o);
        y[i] = binb(op, a[o[0]], b[o[1]]);
    }
}

/* 16-bit a, b, y of one shape (contiguous), arithmetic: 8 per thread (a
 * may be y: Max / Min of more than two) */
template <int OP, typename T>
__global__ void k_bin8(const uint4 *a, const uint4 *b, uint4 *y, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float fa[8], fb[8];
        gf_ld8<T>(a[i], fa);
        gf_ld8<T>(b[i], fb);
#pragma unroll
        for (int k = 0; k < 8; k++)
            fa[k] = binf<OP>(fa[k], fb[k]);
        y[i] = gf_st8<T>(fa);
    }
}

/* 16-bit, broadcast: 8 outputs per thread along the innermost axis (a
 * multiple of 8), each operand read as one 16-byte load there (stride 1)
 * or one element (stride 0, broadcast); the offsets once per 8 */
template <int OP, typename T>
__global__ void k_bin8_nd(const T *a, const T *b, uint4 *y, gf_cu_nd nd, int64_t nv)
{
    int in = nd.rank - 1;
    GRID_LOOP(i, nv)
    {
        int64_t o[2];
        nd_offsets<2>(nd, i * 8, o);
        float fa[8], fb[8];
        if (nd.st[0][in])
            gf_ld8<T>(*(const uint4 *)(a + o[0]), fa);
        else
            for (int k = 0; k < 8; k++)
                fa[k] = gf_ld(a + o[0]);
        if (nd.st[1][in])
            gf_ld8<T>(*(const uint4 *)(b + o[1]), fb);
        else
            for (int k = 0; k < 8; k++)
                fb[k] = gf_ld(b + o[1]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            fa[k] = binf<OP>(fa[k], fb[k]);
        y[i] = gf_st8<T>(fa);
    }
}

/* nd walks 16-bit operands a, b in groups of 8 (k_bin8_nd): the innermost
 * axis a multiple of 8 with strides 0 or 1, the outer strides multiples of
 * 8, the pointers aligned. */
template <typename T>
static bool groups8_nd(const gf_cu_nd &nd, const T *a, const T *b, const void *y)
{
    int in = nd.rank - 1;
    if (sizeof(T) != 2 || nd.dims[in] % 8 || !gf_al16(a) || !gf_al16(b) || !gf_al16(y))
        return false;
    for (int k = 0; k < 2; k++) {
        if (nd.st[k][in] != 0 && nd.st[k][in] != 1)
            return false;
        for (int d = 0; d < in; d++)
            if (nd.st[k][d] % 8)
                return false;
    }
    return true;
}

/* A 16-bit float binary op: the same-shape groups of 8 vectorized, the
 * rest element by element; broadcast by 8 along the innermost axis where
 * it allows, else element by element. */
template <int OP, typename T>
static void bin_half(const T *a, const T *b, void *y, const gf_cu_nd &nd, int64_t n,
                     cudaStream_t s)
{
    bool flat = !is_cmp(OP) && nd.rank == 1 && nd.st[0][0] == 1 && nd.st[1][0] == 1;
    int64_t nv = flat ? groups8<T>(n, a, b, y) : 0;
    if (nv) {
        k_bin8<OP, T><<<grid_for(nv), BLOCK, 0, s>>>((const uint4 *)a, (const uint4 *)b,
                                                     (uint4 *)y, nv);
        if (n == nv * 8)
            return;
        gf_cu_nd tail = nd; /* one axis: the rest */
        tail.dims[0] = n - nv * 8;
        k_bin_f<OP, T, T><<<grid_for(n - nv * 8), BLOCK, 0, s>>>(a + nv * 8, b + nv * 8,
                                                                (T *)y + nv * 8, tail,
                                                                n - nv * 8);
        return;
    }
    if (!is_cmp(OP) && groups8_nd<T>(nd, a, b, y)) { /* broadcast, by 8 */
        k_bin8_nd<OP, T><<<grid_for(n / 8), BLOCK, 0, s>>>(a, b, (uint4 *)y, nd, n / 8);
        return;
    }
    k_bin_f<OP, T, T><<<grid_for(n), BLOCK, 0, s>>>(a, b, y, nd, n);
}

/* fp32 a, b, y of one shape (contiguous), arithmetic: 4 per thread */
template <int OP>
__global__ void k_bin4(const float4 *a, const float4 *b, float4 *y, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        float4 u = a[i], v = b[i];
        y[i] = make_float4(binf<OP>(u.x, v.x), binf<OP>(u.y, v.y), binf<OP>(u.z, v.z),
                           binf<OP>(u.w, v.w));
    }
}

/* An fp32 binary op: same-shape groups of 4 vectorized, the rest (and
 * broadcasts, comparisons) element by element. */
template <int OP>
static void bin_f32(const float *a, const float *b, void *y, const gf_cu_nd &nd, int64_t n,
                    cudaStream_t s)
{
    bool flat = !is_cmp(OP) && nd.rank == 1 && nd.st[0][0] == 1 && nd.st[1][0] == 1 &&
                gf_al16(a) && gf_al16(b) && gf_al16(y);
    int64_t nv = flat ? n / 4 : 0;
    if (nv)
        k_bin4<OP><<<grid_for(nv), BLOCK, 0, s>>>((const float4 *)a, (const float4 *)b,
                                                  (float4 *)y, nv);
    if (n == nv * 4)
        return;
    gf_cu_nd rest = nd; /* flat: one axis, the tail */
    if (nv)
        rest.dims[0] = n - nv * 4;
    k_bin_f<OP, float, float><<<grid_for(n - nv * 4), BLOCK, 0, s>>>(
        a + nv * 4, b + nv * 4, (float *)y + nv * 4, rest, n - nv * 4);
}

template <int OP>
static void bin_launch(int type, int btype, const void *a, const void *b, void *y,
                       const gf_cu_nd &nd, int64_t n, cudaStream_t s)
{
    unsigned g = grid_for(n);
    (void)btype; /* Pow's alone */
    if (type == GF_CU_F32)
        bin_f32<OP>((const float *)a, (const float *)b, y, nd, n, s);
    else if (type == GF_CU_F16)
        bin_half<OP, __half>((const __half *)a, (const __half *)b, y, nd, n, s);
    else if (type == GF_CU_BF16)
        bin_half<OP, __nv_bfloat16>((const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, y, nd,
                                    n, s);
    else if (type == GF_CU_I64)
        k_bin_int<OP, long long><<<g, BLOCK, 0, s>>>((const long long *)a, (const long long *)b,
                                                     y, nd, n);
    else
        k_bin_int<OP, int><<<g, BLOCK, 0, s>>>((const int *)a, (const int *)b, y, nd, n);
}

/* Pow: float types only; a half base may have an fp32 exponent */
template <typename T>
static void pow_launch(int btype, const void *a, const void *b, void *y, const gf_cu_nd &nd,
                       int64_t n, cudaStream_t s)
{
    if (btype == GF_CU_F32)
        k_bin_f<GF_CU_POW, T, float><<<grid_for(n), BLOCK, 0, s>>>((const T *)a,
                                                                  (const float *)b, y, nd, n);
    else
        k_bin_f<GF_CU_POW, T, T><<<grid_for(n), BLOCK, 0, s>>>((const T *)a, (const T *)b, y,
                                                              nd, n);
}

template <>
void bin_launch<GF_CU_POW>(int type, int btype, const void *a, const void *b, void *y,
                           const gf_cu_nd &nd, int64_t n, cudaStream_t s)
{
    GF_CU_FLOAT_SWITCH(type, break, pow_launch<T>(btype, a, b, y, nd, n, s))
}

extern "C" cudaError_t gf_cu_binary(cudaStream_t s, int op, int type, int btype,
                                    const void *a, const void *b, void *y,
                                    const struct gf_cu_nd *nd, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    if (type == GF_CU_B8) {
        k_bin_b8<<<grid_for(n), BLOCK, 0, s>>>(op, (const uint8_t *)a, (const uint8_t *)b,
                                                (uint8_t *)y, *nd, n);
        return cudaGetLastError();
    }
    switch (op) {
#define B(OP)                                                                              \
    case OP: bin_launch<OP>(type, btype, a, b, y, *nd, n, s); break;
    B(GF_CU_ADD) B(GF_CU_SUB) B(GF_CU_MUL) B(GF_CU_DIV) B(GF_CU_POW) B(GF_CU_MAX)
    B(GF_CU_MIN) B(GF_CU_EQ) B(GF_CU_LT) B(GF_CU_LE) B(GF_CU_GT) B(GF_CU_GE)
#undef B
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- Clip: max then min, as the CPU's (lo > hi gives hi; NaN stays) ------------ */

template <typename T>
__global__ void k_clip(const T *x, T *y, int64_t n, const T *lo_t, const T *hi_t, float lo,
                       float hi)
{
    float l = lo_t ? gf_ld(lo_t) : lo, h = hi_t ? gf_ld(hi_t) : hi;
    GRID_LOOP(i, n)
    {
        float v = gf_ld(x + i);
        v = v < l ? l : v;
        gf_st(y + i, v > h ? h : v);
    }
}

extern "C" cudaError_t gf_cu_clip(cudaStream_t s, int type, const void *x, void *y, int64_t n,
                                  const void *lo_t, const void *hi_t, float lo, float hi)
{
    if (n <= 0)
        return cudaSuccess;
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue,
                       k_clip<T><<<grid_for(n), BLOCK, 0, s>>>((const T *)x, (T *)y, n,
                                                               (const T *)lo_t,
                                                               (const T *)hi_t, lo, hi))
    return cudaGetLastError();
}

/* ---- Where: elements moved by size ------------------------------------------------ */

template <typename T>
__global__ void k_where(const uint8_t *c, const T *x, const T *z, T *y, gf_cu_nd nd, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t o[3];
        nd_offsets<3>(nd, i, o);
        y[i] = c[o[0]] ? x[o[1]] : z[o[2]];
    }
}

extern "C" cudaError_t gf_cu_where(cudaStream_t s, int size, const uint8_t *c, const void *x,
                                   const void *z, void *y, const struct gf_cu_nd *nd,
                                   int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    unsigned g = grid_for(n);
    switch (size) {
    case 1: k_where<uint8_t><<<g, BLOCK, 0, s>>>(c, (const uint8_t *)x, (const uint8_t *)z,
                                                 (uint8_t *)y, *nd, n); break;
    case 2: k_where<uint16_t><<<g, BLOCK, 0, s>>>(c, (const uint16_t *)x, (const uint16_t *)z,
                                                  (uint16_t *)y, *nd, n); break;
    case 4: k_where<uint32_t><<<g, BLOCK, 0, s>>>(c, (const uint32_t *)x, (const uint32_t *)z,
                                                  (uint32_t *)y, *nd, n); break;
    case 8: k_where<uint64_t><<<g, BLOCK, 0, s>>>(c, (const uint64_t *)x, (const uint64_t *)z,
                                                  (uint64_t *)y, *nd, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- Cast: through float from floating types, through long long from
 * integer ones; float to integer saturates (NaN gives 0), as the CPU's; an
 * integer goes to bfloat16 through a float rounded to odd, so that it is
 * rounded once ----------------------------------------------------------------------- */

__device__ __forceinline__ uint16_t to_bf16(float v)
{
    uint32_t u = __float_as_uint(v);
    if (isnan(v))
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float long_to_float_odd(long long v)
{
    float f = __ll2float_rz(v);
    return (long long)f == v ? f : __uint_as_float(__float_as_uint(f) | 1u);
}

__device__ __forceinline__ bool is_float_type(int t)
{
    return t == GF_CU_F32 || t == GF_CU_F16 || t == GF_CU_BF16;
}

__device__ __forceinline__ float read_f(int t, const void *p, int64_t i)
{
    if (t == GF_CU_F32)
        return ((const float *)p)[i];
    if (t == GF_CU_F16)
        return __half2float(__ushort_as_half(((const uint16_t *)p)[i]));
    return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
}

__device__ __forceinline__ long long read_i(int t, const void *p, int64_t i)
{
    switch (t) {
    case GF_CU_I64: return ((const long long *)p)[i];
    case GF_CU_I32: return ((const int *)p)[i];
    case GF_CU_U8: return ((const uint8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0;
    }
}

__device__ __forceinline__ void write_f(int t, void *p, int64_t i, float v)
{
    switch (t) {
    case GF_CU_F32: ((float *)p)[i] = v; break;
    case GF_CU_F16: ((uint16_t *)p)[i] = __half_as_ushort(__float2half_rn(v)); break;
    case GF_CU_BF16: ((uint16_t *)p)[i] = to_bf16(v); break;
    case GF_CU_I64: ((long long *)p)[i] = isnan(v) ? 0 : __float2ll_rz(v); break;
    case GF_CU_I32: ((int *)p)[i] = isnan(v) ? 0 : __float2int_rz(v); break;
    case GF_CU_U8: {
        unsigned u = isnan(v) ? 0u : __float2uint_rz(v);
        ((uint8_t *)p)[i] = (uint8_t)(u > 255u ? 255u : u);
        break;
    }
    default: ((uint8_t *)p)[i] = v != 0.0f; break;
    }
}

__device__ __forceinline__ void write_i(int t, void *p, int64_t i, long long v)
{
    switch (t) {
    case GF_CU_F32: ((float *)p)[i] = (float)v; break;
    case GF_CU_F16: ((uint16_t *)p)[i] = __half_as_ushort(__float2half_rn((float)v)); break;
    case GF_CU_BF16: ((uint16_t *)p)[i] = to_bf16(long_to_float_odd(v)); break;
    case GF_CU_I64: ((long long *)p)[i] = v; break;
    case GF_CU_I32: ((int *)p)[i] = (int)v; break;
    case GF_CU_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}

__global__ void k_cast(int from, int to, const void *x, void *y, int64_t n)
{
    GRID_LOOP(i, n)
    {
        if (is_float_type(from))
            write_f(to, y, i, read_f(from, x, i));
        else
            write_i(to, y, i, read_i(from, x, i));
    }
}

/* fp32 -> bf16 by truncation, as Cast before opset 19; NaN stays NaN */
__global__ void k_cast_bf16_trunc(const uint32_t *x, uint16_t *y, int64_t n)
{
    GRID_LOOP(i, n)
    {
        uint32_t u = x[i];
        y[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : u >> 16);
    }
}

/* Float to float, 8 elements a thread in 16-byte loads and stores (FROM,
 * TO: F32, F16 or BF16; x, y 16-byte aligned), read_f / write_f's values:
 * the precision pass's Casts, one per activation between fp32 and 16-bit
 * ops, are a few 100 per training step. */
template <int FROM, int TO>
__global__ void k_cast8(const void *x, void *y, int64_t nv)
{
    GRID_LOOP(i, nv)
    {
        uint4 in[2], out[2];
        in[0] = ((const uint4 *)x)[(FROM == GF_CU_F32 ? 2 : 1) * i];
        if (FROM == GF_CU_F32)
            in[1] = ((const uint4 *)x)[2 * i + 1];
#pragma unroll
        for (int k = 0; k < 8; k++)
            write_f(TO, out, k, read_f(FROM, in, k));
        ((uint4 *)y)[(TO == GF_CU_F32 ? 2 : 1) * i] = out[0];
        if (TO == GF_CU_F32)
            ((uint4 *)y)[2 * i + 1] = out[1];
    }
}

/* k_cast8 for floats from -> to over the first nv * 8 elements; false
 * when it does not apply (the caller runs k_cast on everything). */
static bool cast8(cudaStream_t s, int from, int to, const void *x, void *y, int64_t nv)
{
    if (nv <= 0 || ((uintptr_t)x & 15u) || ((uintptr_t)y & 15u))
        return false;
#define GF_CAST8(F, T)                                                                      \
    if (from == F && to == T) {                                                             \
        k_cast8<F, T><<<grid_for(nv), BLOCK, 0, s>>>(x, y, nv);                             \
        return true;                                                                        \
    }
    GF_CAST8(GF_CU_F32, GF_CU_BF16)
    GF_CAST8(GF_CU_F32, GF_CU_F16)
    GF_CAST8(GF_CU_BF16, GF_CU_F32)
    GF_CAST8(GF_CU_F16, GF_CU_F32)
    GF_CAST8(GF_CU_F16, GF_CU_BF16)
    GF_CAST8(GF_CU_BF16, GF_CU_F16)
#undef GF_CAST8
    return false;
}

static int cu_type_size(int t)
{
    switch (t) {
    case GF_CU_I64: return 8;
    case GF_CU_F32: case GF_CU_I32: return 4;
    case GF_CU_F16: case GF_CU_BF16: return 2;
    default: return 1;
    }
}

extern "C" cudaError_t gf_cu_cast(cudaStream_t s, int from, int to, const void *x, void *y,
                                  int64_t n, int trunc_bf16)
{
    if (n <= 0)
        return cudaSuccess;
    if (!trunc_bf16 && cast8(s, from, to, x, y, n / 8)) {
        int64_t done = n / 8 * 8;
        if (done < n) /* the tail, element by element */
            k_cast<<<1, BLOCK, 0, s>>>(from, to, (const char *)x + done * cu_type_size(from),
                                       (char *)y + done * cu_type_size(to), n - done);
        return cudaGetLastError();
    }
    if (trunc_bf16)
        k_cast_bf16_trunc<<<grid_for(n), BLOCK, 0, s>>>((const uint32_t *)x, (uint16_t *)y, n);
    else
        k_cast<<<grid_for(n), BLOCK, 0, s>>>(from, to, x, y, n);
    return cudaGetLastError();
}
