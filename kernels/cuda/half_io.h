/*
 * half_io.h — loads and stores of the float storage types for the CUDA
 * device code (every .cu file that takes fp16 / bf16; CUDA C++ only,
 * included by no .c file).
 *
 * fp16 and bf16 are storage: a kernel loads its element as fp32, computes
 * in fp32 as the fp32 kernel does, and stores rounded to nearest even once
 * (__float2half_rn, __float2bfloat16_rn), which is what the CPU does for a
 * 16-bit node (kernels/cpu/half.c): widen, fp32 kernel, round.  So the
 * 16-bit results are the CPU's bit for bit wherever the fp32 ones are.
 *
 *     template <typename T> __global__ void k(const T *x, T *y, int64_t n)
 *     {
 *         GRID_LOOP(i, n) gf_st(y + i, f(gf_ld(x + i)));
 *     }
 *
 * The launchers take the type as a gf_cu_type (GF_CU_F32 / F16 / BF16) and
 * pick the instance with GF_CU_FLOAT_SWITCH.
 */
#ifndef GF_CU_HALF_IO_H
#define GF_CU_HALF_IO_H

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float gf_ld(const float *p) { return *p; }
__device__ __forceinline__ float gf_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float gf_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

__device__ __forceinline__ void gf_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void gf_st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void gf_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* v rounded to T and back (float: v itself) */
template <typename T>
__device__ __forceinline__ float gf_round(float v)
{
    T t;
    gf_st(&t, v);
    return gf_ld(&t);
}

/* 2^x by the hardware's ex2, results below 2^-126 flushed to 0 (what the
 * 16-bit attention and cross-entropy kernels take for their exp: __expf
 * adds fix-ups for those results). */
__device__ __forceinline__ float gf_ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Vectorized 16-bit storage: 8 elements in one 16-byte load or store
 * (uint4), where the operands are contiguous and 16-byte aligned; the
 * launcher runs the scalar kernel on the tail. */
template <typename T>
__device__ __forceinline__ void gf_ld8(const uint4 &v, float *f)
{
    const T *h = reinterpret_cast<const T *>(&v);
#pragma unroll
    for (int k = 0; k < 8; k++)
        f[k] = gf_ld(h + k);
}

template <typename T>
__device__ __forceinline__ uint4 gf_st8(const float *f)
{
    uint4 v;
    T *h = reinterpret_cast<T *>(&v);
#pragma unroll
    for (int k = 0; k < 8; k++)
        gf_st(h + k, f[k]);
    return v;
}

/* 8 consecutive elements at p (16-byte aligned) as fp32, and back: one
 * 16-byte load or store of a 16-bit type, two of fp32. */
__device__ __forceinline__ void gf_ld8f(const float *p, float f[8])
{
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
    f[7] = b.w;
}

template <typename T>
__device__ __forceinline__ void gf_ld8f(const T *p, float f[8])
{
    gf_ld8<T>(*(const uint4 *)p, f);
}

__device__ __forceinline__ void gf_st8f(float *p, const float f[8])
{
    *(float4 *)p = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)(p + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

template <typename T>
__device__ __forceinline__ void gf_st8f(T *p, const float f[8])
{
    *(uint4 *)p = gf_st8<T>(f);
}

/* p is 16-byte aligned (a uint4 may be loaded there) */
static inline bool gf_al16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* The statement(s) after DFLT with T the storage type of gf_cu_type `type`
 * (a float type); any other type runs DFLT. */
#define GF_CU_FLOAT_SWITCH(type, DFLT, ...)                                                 \
    switch (type) {                                                                         \
    case GF_CU_F32: { typedef float T; __VA_ARGS__; break; }                                \
    case GF_CU_F16: { typedef __half T; __VA_ARGS__; break; }                               \
    case GF_CU_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; break; }                       \
    default: DFLT;                                                                          \
    }

/* A launcher's: any other type returns cudaErrorInvalidValue. */
#define GF_CU_TYPE_SWITCH(type, ...)                                                        \
    GF_CU_FLOAT_SWITCH(type, return cudaErrorInvalidValue, __VA_ARGS__)

#endif /* GF_CU_HALF_IO_H */
