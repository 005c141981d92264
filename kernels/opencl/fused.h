/* Internal helpers of the fused-op OpenCL kernels (kernels/opencl/fused_*.c):
 * knob values, work-group shapes, program options, argument macros.  The
 * checks of inputs, outputs and attributes come from the CPU side
 * (kernels/cpu/fused.h) so that both backends reject the same nodes with
 * the same messages.
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

#include <stdint.h>
#include <stdio.h>

#include "../cpu/fused.h"
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

/* The largest power-of-two work-group size <= want that the device and
 * kernel k allow (and FCL_MAX_WG). */
static inline size_t fcl_wg(const struct gf_kernel_args *a, cl_kernel k, size_t want)
{
    size_t kmax = 0;
    const struct gf_cl *cl = gf_cl_of(a->backend);
    if (clGetKernelWorkGroupInfo(k, cl->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kmax), &kmax,
                                 NULL) != CL_SUCCESS || kmax == 0)
        kmax = 64;
    size_t lim = cl->max_wg < kmax ? cl->max_wg : kmax;
    lim = lim < FCL_MAX_WG ? lim : FCL_MAX_WG;
    return fcl_pow2_floor(want < lim ? want : lim);
}

/* Kernel `name` of `file` built for vector width vec and maxc register
 * vectors per work-item. */
static inline cl_kernel fcl_kernel(const struct gf_kernel_args *a, const char *file,
                                   const char *name, int vec, int maxc)
{
    char opts[64];
    snprintf(opts, sizeof(opts), "-DVEC=%d -DMAXC=%d", vec, maxc);
    return gf_cl_kernel(a->backend, file, name, opts);
}

/* Rows handled by slots of tpr work-items, spw = wg / tpr slots a group. */
struct fcl_rows {
    size_t wg, tpr, groups;
    int maxc; /* register vectors per work-item (0: re-read the row) */
};

/* Work-group size and threads per row for rows of m vectors: knobs
 * (wg, rows per group) or automatic (a slot about m / 4 work-items wide,
 * 32 to 1024, groups of 256 or the slot); maxc 4 or 8 vectors a work-item
 * when that holds its share of the row, else 0 (two sizes only: each is a
 * program variant to build). */
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
    size_t nv = (m + r->tpr - 1) / r->tpr;
    r->maxc = nv <= 4 ? 4 : nv <= 8 ? 8 : 0;
}

/* Kernels for a row shape need the program variant of its maxc: the
 * shape is chosen with a kernel of the default variant (for the limits),
 * then the right variant is fetched. */
static inline cl_kernel fcl_rows_kernel(const struct gf_kernel_args *a, const char *file,
                                        const char *name, int vec, size_t rows, size_t m,
                                        int knob_wg, int knob_rpw, struct fcl_rows *r)
{
    cl_kernel k = fcl_kernel(a, file, name, vec, 0);
    if (!k)
        return NULL;
    fcl_rows_shape(a, k, rows, m, knob_wg, knob_rpw, r);
    return r->maxc ? fcl_kernel(a, file, name, vec, r->maxc) : k;
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

/* Every view of the node but the labels is fp32 (the dtype the fused
 * OpenCL kernels handle). */
static inline bool fcl_all_f32(const struct gf_tview *in, size_t n_in, uint32_t label_mask)
{
    for (size_t i = 0; i < n_in; i++)
        if (!((label_mask >> i) & 1) && in[i].dtype != GF_UNDEFINED && in[i].dtype != GF_FLOAT)
            return false;
    return n_in > 0 && in[0].dtype == GF_FLOAT;
}

/* Sizes the kernels index with 32-bit integers. */
static inline bool fcl_fits_u32(size_t n)
{
    return n <= UINT32_MAX;
}

#endif /* GF_OCL_FUSED_H */
