/*
 * CUDA MatMul and Gemm through cuBLASLt, and the backend's cuBLASLt handle.
 */
#include <cublasLt.h>

#include "cu.h"

void *gf_cu_blas(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    if (cu->blas)
        return (cublasLtHandle_t)cu->blas;
    cublasLtHandle_t h = NULL;
    cublasStatus_t s = cublasLtCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        gf_error(GF_ERR_INTERNAL, "cuBLASLt: cannot start on '%s': %s", cu->device_name,
                 cublasLtGetStatusString(s));
        return NULL;
    }
    cu->blas = h;
    return h;
}

void gf_cu_blas_free(struct gf_cu *cu)
{
    if (cu->blas)
        cublasLtDestroy((cublasLtHandle_t)cu->blas);
    cu->blas = NULL;
}

