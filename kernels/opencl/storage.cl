/*
 * storage.cl — the storage type of float tensors, prepended to every program.
 *
 * Kernels keep float tensors in `store_t` memory and compute in float:
 *
 *     __global const store_t *x;   float v = LD(x, i);   ST(y, i, v * 2.0f);
 *     float4 q = LD4(x, i);        ST4(y, i, q);        (element 4*i .. 4*i+3)
 *
 * The host picks the type with one build option (gf_cl_storage_opt):
 *   (none)          float
 *   -DGF_STORE_F16  IEEE half, through vload_half / vstore_half_rte, which
 *                   are core OpenCL: no cl_khr_fp16 needed for storage
 *   -DGF_STORE_BF16 bfloat16 as ushort bits; stores round to nearest even
 *                   and keep NaN a NaN
 */
#if defined(GF_STORE_F16)
typedef half store_t;
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half_rte((v), (i), (p))
#define LD4(p, i) vload_half4((i), (p))
#define ST4(p, i, v) vstore_half4_rte((v), (i), (p))
#elif defined(GF_STORE_BF16)
typedef ushort store_t;
inline ushort gf_bf16(float v)
{
    uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline ushort4 gf_bf16x4(float4 v)
{
    return (ushort4)(gf_bf16(v.x), gf_bf16(v.y), gf_bf16(v.z), gf_bf16(v.w));
}
#define LD(p, i) as_float((uint)(p)[i] << 16)
#define ST(p, i, v) ((p)[i] = gf_bf16(v))
#define LD4(p, i) as_float4(convert_uint4(vload4((i), (p))) << 16)
#define ST4(p, i, v) vstore4(gf_bf16x4(v), (i), (p))
#else
typedef float store_t;
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#define LD4(p, i) vload4((i), (p))
#define ST4(p, i, v) vstore4((v), (i), (p))
#endif
