/*
 * ocl.h — what OpenCL kernels share (internal to kernels/opencl/).
 *
 *     cl_kernel k = gf_cl_kernel(a->backend, "elementwise.cl", "add_f32", "-DVEC=4");
 *     if (!k) return gf_cl_fail(a, "building add_f32");
 *     cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &a->in[0].data);
 *     ...
 *     return gf_cl_run(a, k, 1, global, local);
 *
 * Memory: a tensor's `data` is a cl_mem holding exactly that tensor (the
 * executor cuts sub-buffers out of its activation block), so kernels index
 * from 0.  Empty tensors have data NULL: kernels return early when nelem is
 * 0.  Shape-like int inputs (Reshape's shape, Slice's starts) are read on
 * the host through `host`; `supports` declines the node when it is NULL.
 *
 * Programs: each .cl file under kernels/opencl/ is embedded into the library
 * at build time (build/gen/cl_sources.c) and compiled at run time on first
 * use, once per (file, options) per device; the device binary is cached on
 * disk under ~/.cache/graphfuse/cl/ (GRAPHFUSE_CACHE_DIR overrides).
 */
#ifndef GF_OCL_H
#define GF_OCL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "gf_kernels.h"
#include "checks.h"

/* be->priv of an open OpenCL backend. */
struct gf_cl {
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    char platform_name[128], device_name[256], driver[64];
    bool is_gpu;
    bool fp16;            /* cl_khr_fp16 */
    size_t max_wg;        /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    cl_ulong local_mem;   /* CL_DEVICE_LOCAL_MEM_SIZE */
    cl_uint compute_units;
    struct gf_cl_prog *progs; /* built programs (backend.c) */
    unsigned n_built;     /* programs compiled from source (tests) */
    unsigned n_loaded;    /* programs loaded from the disk cache (tests) */
};

static inline struct gf_cl *gf_cl_of(const struct gf_backend *be)
{
    return (struct gf_cl *)be->priv;
}

/* Kernel `name` of program `file` built with `opts` (NULL: none); the
 * program is built once and cached.  NULL with gf_error set (the build log
 * in the message) on failure.  Kernel objects are cached too: one per
 * (file, opts, name), not thread safe (one session per backend at a time). */
cl_kernel gf_cl_kernel(struct gf_backend *be, const char *file, const char *name,
                       const char *opts);

/* Enqueues k over `global` (rounded up to a multiple of `local` when local
 * is given; NULL lets the driver choose) and returns GF_OK, or a message
 * naming the node and the OpenCL error. */
enum gf_status gf_cl_run(const struct gf_kernel_args *a, cl_kernel k, cl_uint dims,
                         const size_t *global, const size_t *local);

/* Sets kernel arguments in order: gf_cl_args(k, n, sizeof(x), &x, ...) —
 * n pairs of (size, pointer).  false when one fails (gf_error set). */
bool gf_cl_args(cl_kernel k, int n, ...);

/* The error of the last failing OpenCL call, as a status naming the node. */
enum gf_status gf_cl_fail(const struct gf_kernel_args *a, const char *what);
/* "CL_OUT_OF_RESOURCES" for an error code. */
const char *gf_cl_strerror(cl_int err);

/* The build option selecting the storage type of float tensors of dtype dt
 * in a program (storage.cl: store_t, LD/ST/LD4/ST4): "" for float,
 * "-DGF_STORE_F16", "-DGF_STORE_BF16"; NULL for any other dtype. */
const char *gf_cl_storage_opt(enum gf_dtype dt);

/* The embedded source of a .cl file (build/gen/cl_sources.c), or NULL. */
const char *gf_cl_source(const char *file);

/* Global size for a grid-stride loop over `items` work-items in groups of
 * `wg`: a multiple of wg, at most `items` rounded up, at most 8 groups per
 * compute unit (the kernel loops over the rest). */
size_t gf_cl_grid(const struct gf_kernel_args *a, size_t items, size_t wg);

/* An N-d walk over an output shape for up to 4 operands, in the form the
 * .cl kernels take (int8 vectors): merged axes right-aligned in dims (the
 * unused outer ones 1), operand k's element strides in st[k] (0 where it
 * is broadcast).  Size-1 axes are dropped and an axis joins the one inside
 * it when every operand is contiguous across the pair, so same-shape
 * operands give one axis. */
struct gf_cl_nd {
    cl_int rank; /* merged axes, 1..8 */
    cl_int8 dims;
    cl_int8 st[4];
};
/* From `rank` axes of `dims` and n operands' strides st[k][0..rank); false
 * when an extent, a stride or the element count does not fit in an int. */
bool gf_cl_nd_init(struct gf_cl_nd *nd, int rank, const int64_t *dims, int n,
                   const int64_t st[][GF_MAX_RANK]);

#endif /* GF_OCL_H */
