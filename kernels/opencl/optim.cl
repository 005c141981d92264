/*
 * optim.cl — the optimizer ops on the device (host side: optim.c;
 * definitions: kernels/cpu/optim.c), over flat fp32 ranges:
 *
 *   grad_acc      GradAccumulate: y = (acc or 0) + g * scale
 *   grad_acc_t    the same with g [c, r] read transposed (32 x 32 tiles)
 *   sumsq_part    GradNorm, pass 1: one partial sum of squares per group
 *   sumsq_final   GradNorm, pass 2: one group adds the partials, sqrt
 *   sgd_step      SGDStep
 *   adamw_step    AdamWStep
 *
 * Contraction is off and fma() is written where the CPU kernels call
 * fmaf, so that with IEEE division and square root (the backend asks for
 * them) each element is computed as on the CPU.  Sums of squares are in
 * double where the device has it (-DGF_FP64=1); otherwise in float with
 * Kahan compensation, the result's float64 bits written by hand.  Every
 * sum has a fixed order: element i goes to work-item i % global size, the
 * groups' partials are added by one group in a fixed tree.  Outputs may be
 * the memory of their inputs (in place): each work-item reads its
 * elements before writing them.
 */
#pragma OPENCL FP_CONTRACT OFF

#ifndef WG
#define WG 256
#endif
#if GF_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

__kernel void grad_acc(__global float *y, __global const float *acc, __global const float *g,
                       float scale, int has_acc, ulong n)
{
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0))
        y[i] = (has_acc ? acc[i] : 0.0f) + g[i] * scale;
}

/* y, acc [r, c]; g [c, r].  Groups of 32 x 8 work-items, each a 32 x 32 tile. */
#define TILE 32
__kernel void grad_acc_t(__global float *y, __global const float *acc,
                         __global const float *g, float scale, int has_acc, int r, int c)
{
    __local float tile[TILE][TILE + 1];
    int k0 = (int)get_group_id(0) * TILE, a0 = (int)get_group_id(1) * TILE;
    int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
    for (int j = ly; j < TILE; j += 8) {
        int k = k0 + j, a = a0 + lx;
        tile[j][lx] = k < c && a < r ? g[(size_t)k * (size_t)r + (size_t)a] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = ly; j < TILE; j += 8) {
        int a = a0 + j, k = k0 + lx;
        if (a < r && k < c) {
            size_t o = (size_t)a * (size_t)c + (size_t)k;
            y[o] = (has_acc ? acc[o] : 0.0f) + tile[lx][j] * scale;
        }
    }
}

#if GF_FP64
typedef double acc_t;
/* s += x, exactly as written in double */
#define ADD(s, c, x) ((s) += (x))
#else
typedef float acc_t;
/* Kahan: s + c carries the sum */
#define ADD(s, c, x)                                                                     \
    do {                                                                                 \
        float y_ = (x) - (c);                                                            \
        float t_ = (s) + y_;                                                             \
        (c) = (t_ - (s)) - y_;                                                           \
        (s) = t_;                                                                        \
    } while (0)
#endif

/* part[group]: the sum of x[i]^2 over the group's work-items' elements. */
__kernel void sumsq_part(__global const float *x, ulong n, __global acc_t *part)
{
    __local acc_t sh[WG];
    acc_t s = 0, c = 0;
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        acc_t v = (acc_t)x[i];
        ADD(s, c, v * v);
    }
    int l = (int)get_local_id(0);
    sh[l] = s - c;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h /= 2) {
        if (l < h)
            sh[l] += sh[l + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0)
        part[get_group_id(0)] = sh[0];
}

#if !GF_FP64
/* The float64 bits of a float (subnormals as 0). */
static ulong f64_bits(float f)
{
    uint u = as_uint(f), e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
    ulong sign = (ulong)(u >> 31) << 63;
    if (e == 0)
        return sign;
    if (e == 255)
        return sign | (0x7ffUL << 52) | ((ulong)m << 29);
    return sign | ((ulong)(e - 127 + 1023) << 52) | ((ulong)m << 29);
}
#endif

/* out[0] = sqrt(sum of part[0..np)), as float64; one group of WG. */
__kernel void sumsq_final(__global const acc_t *part, uint np, __global ulong *out)
{
    __local acc_t sh[WG];
    int l = (int)get_local_id(0);
    acc_t s = 0, c = 0;
    for (uint i = (uint)l; i < np; i += WG)
        ADD(s, c, part[i]);
    sh[l] = s - c;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h /= 2) {
        if (l < h)
            sh[l] += sh[l + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) {
#if GF_FP64
        out[0] = as_ulong(sqrt(sh[0]));
#else
        out[0] = f64_bits(sqrt(sh[0]));
#endif
    }
}

/* SGDStep; buf0 / buf unused without momentum. */
__kernel void sgd_step(__global float *p, __global float *buf, __global const float *p0,
                       __global const float *buf0, __global const float *g, ulong n,
                       int decay_on, int momentum_on, int nesterov, int first, float wd,
                       float mom, float damp, float neg_lr, float grad_scale)
{
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float pi = p0[i];
        float gi = (0.0f + g[i]) * grad_scale;
        if (decay_on)
            gi = fma(wd, pi, gi);
        if (momentum_on) {
            const float b = first ? gi : fma(damp, gi, buf0[i] * mom);
            buf[i] = b;
            gi = nesterov ? fma(mom, b, gi) : b;
        }
        p[i] = fma(neg_lr, gi, pi);
    }
}

__kernel void adamw_step(__global float *p, __global float *m, __global float *v,
                         __global const float *p0, __global const float *m0,
                         __global const float *v0, __global const float *g, ulong n,
                         int decay_on, int small, float decay, float w, float b2, float one_b2,
                         float step_size, float bc2_sqrt, float eps, float grad_scale)
{
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float gi = (0.0f + g[i]) * grad_scale;
        float pi = p0[i];
        if (decay_on)
            pi = pi * decay;
        const float mo = m0[i];
        const float mi = small ? fma(w, gi - mo, mo) : fma(w - 1.0f, gi - mo, gi);
        const float vi = v0[i] * b2 + one_b2 * gi * gi;
        const float denom = sqrt(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + step_size * (mi / denom);
    }
}
