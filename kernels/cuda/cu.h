/*
 * cu.h — what the CUDA backend's host code shares (internal to
 * kernels/cuda/).
 *
 *     // elementwise.c: checks on the host, then one launcher of a .cu file
 *     cudaError_t e = gf_cu_unary(gf_cu_stream(a), op, x->data, y->data, n);
 *     return gf_cu_check(a, e, "Relu");
 *
 * Memory: a tensor's `data` is a device pointer (the executor's block from
 * cudaMalloc plus the view's offset), so kernels index from 0.  Empty
 * tensors have data NULL: kernels return early when nelem is 0.  Shape-like
 * int inputs (Reshape's shape, Slice's starts) are read on the host through
 * `host`; `supports` declines the node when it is NULL.  Everything runs on
 * the backend's one stream, in order; copy_out and sync wait for it.
 *
 * The device code lives in the .cu files (compiled by nvcc, sm_90 + PTX);
 * they export plain C launchers (launch.h) and include no graphfuse
 * header but that one, so the .c files keep the shared checks (checks.h)
 * and the .cu files only the math.
 */
#ifndef GF_CU_H
#define GF_CU_H

#include <cuda_runtime_api.h>

#include "checks.h"
#include "launch.h"

/* be->priv of an open CUDA backend. */
struct gf_cu {
    int device;               /* cudaSetDevice ordinal */
    char device_name[256];
    char driver[64];          /* "CUDA driver 13.0, runtime 13.0" */
    cudaStream_t stream;      /* the one stream every kernel and copy goes to */
    int sm_count;
    size_t max_threads;       /* per block */
    void *blas;               /* cublasLtHandle_t, made on first use (matmul.c) */
    /* graph capture (backend.c): the stream is being captured; the first
     * call refused meanwhile (alloc, sync, a host copy), "" if none */
    bool capturing;
    char refused[160];
    /* device memory (backend.c): every live cudaMalloc of the backend and
     * its size (release needs it), the bytes held now and the most held at
     * once since the device was opened */
    struct gf_cu_block { void *p; size_t n; } *blocks;
    size_t n_blocks, cap_blocks;
    uint64_t bytes_now, bytes_peak;
    /* deferred checks (backend.c): GF_CU_CHECKS slots of device memory, the
     * host copy of the last run's (pinned), the registrations, and the
     * owner (session) of the run between checks_begin and checks_end */
    int *check_dev, *check_host;
    struct gf_cu_check *checks;
    size_t n_checks;
    const void *check_owner;
    bool deferring;
};

/* ---- deferred checks (backend.c; gf_backend_ops.checks_*) ---------------------- */

#define GF_CU_CHECKS 4096        /* slots of the backend (a full table: checked on the spot) */
#define GF_CU_CHECK_OK 0x7f7f7f7f /* a slot's reset value (cudaMemsetAsync of 0x7f bytes):
                                  * no bad position found (kernels store smaller ones) */
#define GF_CU_CHECK_CTX 320       /* bytes of a check's context */

struct gf_cu_check;
/* A deferred check's message for the first bad position `pos` (called once
 * the stream has finished: it may read the bad value from the device);
 * `a` holds the node only. */
typedef enum gf_status (*gf_cu_report_fn)(const struct gf_kernel_args *a,
                                          const struct gf_cu_check *c, int pos);
struct gf_cu_check {
    const void *owner;
    const struct gf_node *node;
    int key;               /* which of the node's checks */
    gf_cu_report_fn report;
    _Alignas(16) unsigned char ctx[GF_CU_CHECK_CTX]; /* the kernel's, copied */
};

/* While the executor defers checks (a session's run): the slot of check
 * `key` of a->node (a device int, GF_CU_CHECK_OK before the run, that the
 * kernel atomicMin's with each bad position), registered with report and
 * a copy of ctx (len <= GF_CU_CHECK_CTX bytes); NULL when checks are not
 * deferred now (or no slot is left): the kernel then checks on the spot.
 * Host bookkeeping only: allowed while a graph is captured. */
int *gf_cu_defer_check(const struct gf_kernel_args *a, int key, gf_cu_report_fn report,
                       const void *ctx, size_t len);

static inline struct gf_cu *gf_cu_of(const struct gf_backend *be)
{
    return (struct gf_cu *)be->priv;
}

/* Device memory bookkeeping (backend.c) for allocations made outside
 * cu_alloc (the cuBLASLt workspace): entered after a successful cudaMalloc,
 * removed before its cudaFree. */
void gf_cu_mem_add(struct gf_cu *cu, void *p, size_t n);
void gf_cu_mem_remove(struct gf_cu *cu, void *p);

/* The backend's stream, its device made current for this thread first. */
cudaStream_t gf_cu_stream(const struct gf_kernel_args *a);

/* GF_OK for cudaSuccess, else GF_ERR_INTERNAL (GF_ERR_NOMEM when out of
 * memory) with a message naming the node, `what` and the CUDA error. */
enum gf_status gf_cu_check(const struct gf_kernel_args *a, cudaError_t e, const char *what);

/* Makes the backend's device current for this thread (a process may have
 * several open); false with gf_error set when the driver refuses. */
bool gf_cu_use(struct gf_backend *be);

/* nd for n operands (strides st[k][0..rank)) over dims[rank]: size-1 axes
 * dropped, an axis joined to the one inside it when every operand is
 * contiguous across the pair (same-shape operands give one axis). */
void gf_cu_nd_init(struct gf_cu_nd *nd, int rank, const int64_t *dims, int n,
                   const int64_t st[][GF_MAX_RANK]);

/* The backend's cuBLASLt handle (a cublasLtHandle_t), made on first use;
 * NULL with gf_error set.  gf_cu_blas_free: at close (matmul.c). */
void *gf_cu_blas(struct gf_backend *be);
void gf_cu_blas_free(struct gf_cu *cu);

#endif /* GF_CU_H */
