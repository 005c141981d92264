/* Internal helpers of the fused-op OpenCL kernels (kernels/opencl/fused_*.c):
 * knob values, work-group shapes, program options (the storage type of
 * fp32 / fp16 / bf16 tensors, storage.cl), argument macros.  The checks of
 * inputs, outputs and attributes are every backend's (kernels/checks.h),
 * so that all backends reject the same nodes with the same messages.
 *
 * Knobs: value 0 of a knob is "automatic" (a size chosen from the shapes
 * and the device); the others force a value.  Every value is valid for
 * every shape: a work-group size is clamped to what the device and the
 * kernel allow, and rows per work-group to the work-group size.
 *
 * Workspaces are one cl_mem handed in by the executor (perhaps itself a
 * sub-buffer, so never cut into sub-buffers here): kernels get the
 * workspace buffer plus an element offset, each region 64-byte aligned.
 */
#ifndef GF_OCL_FUSED_H
#define GF_OCL_FUSED_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "ocl.h"

#define FCL_MAX_WG 1024u /* local-memory arrays in the .cl files have this size */

/* Argument pairs for gf_cl_args. */
#define ARG(x) sizeof(x), (const void *)&(x)

/* Knob i of the run's config (0: automatic). */
static inline int fcl_knob(const struct gf_kernel_args *a, size_t i)
{
    return a->config ? a->config[i] : 0;
}

static inline cl_mem fcl_mem(const struct gf_tview *t)
{
    return (cl_mem)t->data;
}

static inline size_t fcl_pow2_floor(size_t x)
{
    size_t p = 1;
    while (p * 2 <= x)
        p *= 2;
    return p;
}

static inline size_t fcl_pow2_ceil(size_t x)
{
    size_t p = 1;
    while (p < x)
        p *= 2;
    return p;
}

static inline size_t fcl_align(size_t bytes)
{
    return (bytes + 63) & ~(size_t)63;
}

/* The most work-items a work-group of kernel k may have on this device
 * (fewer than the device's maximum when the kernel needs many registers). */
static inline size_t fcl_wg_limit(const struct gf_kernel_args *a, cl_kernel k)
{
    size_t kmax = 0;
    const struct gf_cl *cl = gf_cl_of(a->backend);
    if (clGetKernelWorkGroupInfo(k, cl->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kmax), &kmax,
                                 NULL) != CL_SUCCESS || kmax == 0)
        kmax = 64;
    return cl->max_wg < kmax ? cl->max_wg : kmax;
}

/* The largest power-of-two work-group size <= want that the device and
 * kernel k allow (and FCL_MAX_WG). */
static inline size_t fcl_wg(const struct gf_kernel_args *a, cl_kernel k, size_t want)
{
    size_t lim = fcl_wg_limit(a, k);
    lim = lim < FCL_MAX_WG ? lim : FCL_MAX_WG;
    return fcl_pow2_floor(want < lim ? want : lim);
}

/* Kernel `name` of `file` for float tensors of dtype dt (storage.cl's
 * store_t), built with -DVEC=vec and the options `extra` (NULL: none). */
static inline cl_kernel fcl_kernel(const struct gf_kernel_args *a, const char *file,
                                   const char *name, enum gf_dtype dt, int vec,
                                   const char *extra)
{
    char opts[128];
    const char *st = gf_cl_storage_opt(dt);
    snprintf(opts, sizeof(opts), "-DVEC=%d%s%s%s%s", vec, st && *st ? " " : "", st ? st : "",
             extra ? " " : "", extra ? extra : "");
    return gf_cl_kernel(a->backend, file, name, opts);
}

/* Rows handled by slots of tpr work-items, spw = wg / tpr slots a group. */
struct fcl_rows {
    size_t wg, tpr, groups;
};

/* Work-group size and threads per row for rows of m vectors: knobs
 * (wg, rows per group) or automatic (a slot about m / 4 work-items wide,
 * 32 to 1024, groups of 256 or the slot). */
static inline void fcl_rows_shape(const struct gf_kernel_args *a, cl_kernel k, size_t rows,
                                  size_t m, int knob_wg, int knob_rpw, struct fcl_rows *r)
{
    size_t want = knob_wg > 0 ? (size_t)knob_wg : 0, tpr;
    if (knob_rpw > 0) {
        r->wg = fcl_wg(a, k, want ? want : 256);
        tpr = r->wg / (size_t)knob_rpw;
    } else {
        tpr = fcl_pow2_ceil((m + 3) / 4);
        tpr = tpr < 32 ? 32 : tpr;
        r->wg = fcl_wg(a, k, want ? want : tpr > 256 ? tpr : 256);
    }
    r->tpr = tpr < 1 ? 1 : tpr > r->wg ? r->wg : tpr;
    size_t spw = r->wg / r->tpr;
    r->groups = (rows + spw - 1) / spw;
}

/* Enqueues k on groups x wg work-items. */
static inline enum gf_status fcl_launch(const struct gf_kernel_args *a, cl_kernel k,
                                        size_t groups, size_t wg)
{
    size_t global = groups * wg;
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* A 1-D launch over n items in groups of wg; grid-stride kernels capped
 * at `cap` groups (0: no cap). */
static inline enum gf_status fcl_launch_n(const struct gf_kernel_args *a, cl_kernel k, size_t n,
                                          size_t wg, size_t cap)
{
    size_t groups = (n + wg - 1) / wg;
    if (cap && groups > cap)
        groups = cap;
    return fcl_launch(a, k, groups ? groups : 1, wg);
}

/* out[j] = scale * (the sum of `count` partial rows of n floats at byte
 * offset off of part, in row order), j < n, stored in out's dtype: the
 * colsum kernel of fused_norm.cl. */
static inline enum gf_status fcl_colsum(const struct gf_kernel_args *a, cl_mem part, size_t off,
                                        size_t count, size_t n, const struct gf_tview *out,
                                        float scale)
{
    cl_kernel k = fcl_kernel(a, "fused_norm.cl", "colsum", out->dtype, 1, "-DONLY=7");
    if (!k)
        return gf_cl_fail(a, "building colsum");
    size_t lim = fcl_wg(a, k, 1024), lx = lim < 32 ? lim : 32, ly = lim / lx;
    cl_mem o = fcl_mem(out);
    cl_uint po = (cl_uint)(off / sizeof(float)), pc = (cl_uint)count, nn = (cl_uint)n;
    if (!gf_cl_args(k, 6, ARG(part), ARG(o), ARG(po), ARG(pc), ARG(nn), ARG(scale)))
        return gf_cl_fail(a, "colsum arguments");
    cl_int err = clSetKernelArg(k, 6, lx * ly * sizeof(float), NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "colsum local memory: %s",
                               gf_cl_strerror(err));
    size_t global[2] = {(n + lx - 1) / lx * lx, ly}, local[2] = {lx, ly};
    return gf_cl_run(a, k, 2, global, local);
}

/* Fills n bytes of buffer m at offset off with a 4-byte pattern. */
static inline enum gf_status fcl_fill(const struct gf_kernel_args *a, cl_mem m, size_t off,
                                      size_t n, uint32_t pattern)
{
    cl_int err = clEnqueueFillBuffer(gf_cl_of(a->backend)->queue, m, &pattern, sizeof(pattern),
                                     off, n, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "OpenCL fill failed: %s",
                               gf_cl_strerror(err));
    return GF_OK;
}

/* A float type the kernels store (storage.cl): fp32, fp16, bf16. */
static inline bool fcl_storable(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* Every view of the node but the labels (and absent ones) has the dtype of
 * view `first`, a storable float type; with !half only fp32. */
static inline bool fcl_all_same(const struct gf_tview *in, size_t n_in, size_t first,
                                uint32_t label_mask, bool half)
{
    if (first >= n_in || !fcl_storable(in[first].dtype) || (!half && in[first].dtype != GF_FLOAT))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (!((label_mask >> i) & 1) && in[i].dtype != GF_UNDEFINED &&
            in[i].dtype != in[first].dtype)
            return false;
    return true;
}

/* Sizes the kernels index with 32-bit integers. */
static inline bool fcl_fits_u32(size_t n)
{
    return n <= UINT32_MAX;
}

#endif /* GF_OCL_FUSED_H */
