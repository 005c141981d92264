/*
 * launch.h — the launchers the .cu files export to the backend's host code
 * (internal to kernels/cuda/; plain C, included by both sides).  Each
 * enqueues its kernels on `s` and returns the launch's cudaError_t; none
 * waits.  Pointers are device memory; counts are elements.
 */
#ifndef GF_CU_LAUNCH_H
#define GF_CU_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GF_CU_MAX_RANK 8

/* An N-d walk over an output shape for up to 4 operands: merged axes in
 * dims[0..rank) (outermost first), operand k's element strides in st[k]
 * (0 where it is broadcast). */
struct gf_cu_nd {
    int rank;
    int64_t dims[GF_CU_MAX_RANK];
    int64_t st[4][GF_CU_MAX_RANK];
};

#ifdef __cplusplus
}
#endif
#endif /* GF_CU_LAUNCH_H */
