/*
 * optim.cu — the optimizer ops on the device (host side: optim.c;
 * definitions: kernels/cpu/optim.c), ported from kernels/opencl/optim.cl:
 * fp32, each element computed as the CPU computes it (no contraction:
 * --fmad=false; fmaf where the CPU calls fmaf).  GradNorm sums squares in
 * double in a fixed order (element i to thread i % threads, a fixed tree in
 * each block, then one block over the partials), so a run repeats exactly.
 * Outputs may be their inputs' memory: each thread reads its elements
 * before writing them.  The updates read hyper and N on the device when
 * given there (gf_cu_step): a replayed CUDA graph then takes each step's
 * learning rate, step count and clipping from memory.
 */
#include "launch.h"

#define BLOCK 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_grad_acc(float *y, const float *acc, const float *g, float scale, int64_t n)
{
    GRID_LOOP(i, n) y[i] = (acc ? acc[i] : 0.0f) + g[i] * scale;
}

extern "C" cudaError_t gf_cu_grad_acc(cudaStream_t s, float *y, const float *acc,
                                      const float *g, float scale, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    k_grad_acc<<<grid_for(n), BLOCK, 0, s>>>(y, acc, g, scale, n);
    return cudaGetLastError();
}

/* y, acc [r, c]; g [c, r]: 32 x 32 tiles, blocks of 32 x 8 threads */
#define TILE 32
__global__ void k_grad_acc_t(float *y, const float *acc, const float *g, float scale, int r,
                             int c)
{
    __shared__ float tile[TILE][TILE + 1];
    int k0 = blockIdx.x * TILE, a0 = blockIdx.y * TILE, lx = threadIdx.x, ly = threadIdx.y;
    for (int j = ly; j < TILE; j += 8) {
        int k = k0 + j, a = a0 + lx;
        tile[j][lx] = k < c && a < r ? g[(size_t)k * (size_t)r + (size_t)a] : 0.0f;
    }
    __syncthreads();
    for (int j = ly; j < TILE; j += 8) {
        int a = a0 + j, k = k0 + lx;
        if (a < r && k < c) {
            size_t o = (size_t)a * (size_t)c + (size_t)k;
            y[o] = (acc ? acc[o] : 0.0f) + tile[lx][j] * scale;
        }
    }
}

extern "C" cudaError_t gf_cu_grad_acc_t(cudaStream_t s, float *y, const float *acc,
                                        const float *g, float scale, int r, int c)
{
    if (r <= 0 || c <= 0)
        return cudaSuccess;
    dim3 grid((unsigned)((c + TILE - 1) / TILE), (unsigned)((r + TILE - 1) / TILE)), block(TILE, 8);
    k_grad_acc_t<<<grid, block, 0, s>>>(y, acc, g, scale, r, c);
    return cudaGetLastError();
}

/* part[block]: the sum of x[i]^2 over the block's threads' elements */
__global__ void k_sumsq_part(const float *x, int64_t n, double *part)
{
    __shared__ double sh[BLOCK];
    double sum = 0;
    GRID_LOOP(i, n)
    {
        double v = (double)x[i];
        sum += v * v;
    }
    int l = threadIdx.x;
    sh[l] = sum;
    __syncthreads();
    for (int h = BLOCK / 2; h > 0; h /= 2) {
        if (l < h)
            sh[l] += sh[l + h];
        __syncthreads();
    }
    if (l == 0)
        part[blockIdx.x] = sh[0];
}

/* out[0] = sqrt(sum of part[0..np)); one block */
__global__ void k_sumsq_final(const double *part, int np, double *out)
{
    __shared__ double sh[BLOCK];
    int l = threadIdx.x;
    double sum = 0;
    for (int i = l; i < np; i += BLOCK)
        sum += part[i];
    sh[l] = sum;
    __syncthreads();
    for (int h = BLOCK / 2; h > 0; h /= 2) {
        if (l < h)
            sh[l] += sh[l + h];
        __syncthreads();
    }
    if (l == 0)
        out[0] = sqrt(sh[0]);
}

extern "C" cudaError_t gf_cu_sumsq(cudaStream_t s, const float *x, int64_t n, double *part,
                                   double *out)
{
    int64_t b = (n + BLOCK - 1) / BLOCK;
    int np = (int)(b > GF_CU_SUMSQ_PARTS ? GF_CU_SUMSQ_PARTS : b);
    if (np > 0)
        k_sumsq_part<<<np, BLOCK, 0, s>>>(x, n, part);
    k_sumsq_final<<<1, BLOCK, 0, s>>>(part, np, out);
    return cudaGetLastError();
}

/* ---- the updates ------------------------------------------------------------------
 * The scalars of kernels/optim_ops.h: by value, or computed from hyper on
 * the device when the kernel runs (the same double arithmetic as
 * gf_sgd_scalars / gf_adamw_scalars, pow being CUDA's); the layouts'
 * indices are optim_ops.h's (checked in optim.c). */
enum { H_LR, H_B1_MOM, H_B2_DAMP, H_EPS_WD, H_WD_NEST, H_STEP, H_SCALE };

/* torch.nn.utils.clip_grad_norm_'s coefficient in float: gf_clip_scale */
__device__ static bool clip_scale(float *scale, const gf_cu_step &st)
{
    if (!isfinite(*scale))
        return false;
    if (!st.norm)
        return true;
    const double norm = *st.norm;
    if (!isfinite(norm))
        return false;
    float coef = 1.0f; /* of the scaled gradient, norm x scale (loss scaling: 1 / S) */
    if (st.max_norm > 0) {
        coef = st.max_norm / ((float)(norm * (double)*scale) + 1e-6f);
        coef = coef > 1.0f ? 1.0f : coef;
    }
    *scale = *scale * coef;
    return true;
}

__device__ static bool sgd_prep(gf_cu_sgd_args *c, const gf_cu_step &st, bool has_buf)
{
    if (st.hyper) {
        const double *h = st.hyper; /* [lr, momentum, dampening, wd, nesterov, step, scale] */
        c->decay_on = h[3] != 0;
        c->momentum_on = h[H_B1_MOM] != 0 && has_buf;
        c->nesterov = h[4] != 0;
        c->first = h[H_STEP] == 0;
        c->wd = (float)h[3];
        c->mom = (float)h[H_B1_MOM];
        c->damp = (float)(1.0 - h[H_B2_DAMP]);
        c->neg_lr = (float)-h[H_LR];
        c->grad_scale = (float)h[H_SCALE];
    }
    return clip_scale(&c->grad_scale, st);
}

__device__ static bool adamw_prep(gf_cu_adamw_args *c, const gf_cu_step &st)
{
    if (st.hyper) {
        const double *h = st.hyper; /* [lr, beta1, beta2, eps, wd, step, scale] */
        const double lr = h[H_LR], t = h[H_STEP] + 1;
        c->decay_on = h[4] != 0;
        c->decay = (float)(1.0 - lr * h[4]);
        c->w = (float)(1.0 - h[H_B1_MOM]);
        c->small = fabsf(c->w) < 0.5f;
        c->b2 = (float)h[H_B2_DAMP];
        c->one_b2 = (float)(1.0 - h[H_B2_DAMP]);
        c->step_size = (float)-(lr / (1.0 - pow(h[H_B1_MOM], t)));
        c->bc2_sqrt = (float)pow(1.0 - pow(h[H_B2_DAMP], t), 0.5);
        c->eps = (float)h[3];
        c->grad_scale = (float)h[H_SCALE];
    }
    return clip_scale(&c->grad_scale, st);
}

/* A skipped update: the outputs keep the inputs' values. */
__device__ static void keep(float *y, const float *x, int64_t i)
{
    if (y && y != x)
        y[i] = x[i];
}

__global__ void k_sgd(float *p, float *buf, const float *p0, const float *buf0, const float *g,
                      int64_t n, gf_cu_sgd_args c, gf_cu_step st)
{
    if (!sgd_prep(&c, st, buf != NULL)) {
        GRID_LOOP(i, n)
        {
            keep(p, p0, i);
            keep(buf, buf0, i);
        }
        return;
    }
    GRID_LOOP(i, n)
    {
        const float pi = p0[i];
        float gi = (0.0f + g[i]) * c.grad_scale;
        if (c.decay_on)
            gi = fmaf(c.wd, pi, gi);
        if (c.momentum_on) {
            const float b = c.first ? gi : fmaf(c.damp, gi, buf0[i] * c.mom);
            buf[i] = b;
            gi = c.nesterov ? fmaf(c.mom, b, gi) : b;
        }
        p[i] = fmaf(c.neg_lr, gi, pi);
    }
}

extern "C" cudaError_t gf_cu_sgd(cudaStream_t s, float *p, float *buf, const float *p0,
                                 const float *buf0, const float *g, int64_t n,
                                 const struct gf_cu_sgd_args *c, const struct gf_cu_step *st)
{
    if (n <= 0)
        return cudaSuccess;
    k_sgd<<<grid_for(n), BLOCK, 0, s>>>(p, buf, p0, buf0, g, n, *c, *st);
    return cudaGetLastError();
}

/* One element of the update (p, m, v from p0, m0, v0 and g). */
__device__ __forceinline__ void adamw_elem(const gf_cu_adamw_args &c, float g, float p0,
                                           float m0, float v0, float *p, float *m, float *v)
{
    const float gi = (0.0f + g) * c.grad_scale;
    float pi = p0;
    if (c.decay_on)
        pi = pi * c.decay;
    const float mi = c.small ? fmaf(c.w, gi - m0, m0) : fmaf(c.w - 1.0f, gi - m0, gi);
    const float vi = v0 * c.b2 + c.one_b2 * gi * gi;
    const float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    *m = mi;
    *v = vi;
    *p = pi + c.step_size * (mi / denom);
}

/* The step's scalars once per block (thread 0: the double pows of torch's
 * bias corrections), the elements by float4 when `vec` (every pointer
 * 16-byte aligned; the last n % 4 one by one): the same values as one
 * element a thread. */
__global__ void k_adamw(float *p, float *m, float *v, const float *p0, const float *m0,
                        const float *v0, const float *g, int64_t n, gf_cu_adamw_args c,
                        gf_cu_step st, int vec)
{
    __shared__ gf_cu_adamw_args sc;
    __shared__ int go;
    if (threadIdx.x == 0) {
        go = adamw_prep(&c, st);
        sc = c;
    }
    __syncthreads();
    c = sc;
    if (!go) {
        GRID_LOOP(i, n)
        {
            keep(p, p0, i);
            keep(m, m0, i);
            keep(v, v0, i);
        }
        return;
    }
    int64_t done = 0;
    if (vec) {
        const int64_t n4 = n / 4;
        GRID_LOOP(i, n4)
        {
            const float4 g4 = ((const float4 *)g)[i], p4 = ((const float4 *)p0)[i],
                         m4 = ((const float4 *)m0)[i], v4 = ((const float4 *)v0)[i];
            float4 po, mo, vo;
            adamw_elem(c, g4.x, p4.x, m4.x, v4.x, &po.x, &mo.x, &vo.x);
            adamw_elem(c, g4.y, p4.y, m4.y, v4.y, &po.y, &mo.y, &vo.y);
            adamw_elem(c, g4.z, p4.z, m4.z, v4.z, &po.z, &mo.z, &vo.z);
            adamw_elem(c, g4.w, p4.w, m4.w, v4.w, &po.w, &mo.w, &vo.w);
            ((float4 *)m)[i] = mo;
            ((float4 *)v)[i] = vo;
            ((float4 *)p)[i] = po;
        }
        done = n4 * 4;
    }
    for (int64_t i = done + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        adamw_elem(c, g[i], p0[i], m0[i], v0[i], &p[i], &m[i], &v[i]);
}

extern "C" cudaError_t gf_cu_adamw(cudaStream_t s, float *p, float *m, float *v,
                                   const float *p0, const float *m0, const float *v0,
                                   const float *g, int64_t n, const struct gf_cu_adamw_args *c,
                                   const struct gf_cu_step *st)
{
    if (n <= 0)
        return cudaSuccess;
    const void *ptrs[] = {p, m, v, p0, m0, v0, g};
    int vec = 1;
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
        vec &= ((uintptr_t)ptrs[i] & 15) == 0;
    k_adamw<<<grid_for(vec ? n / 4 : n), BLOCK, 0, s>>>(p, m, v, p0, m0, v0, g, n, *c, *st, vec);
    return cudaGetLastError();
}
