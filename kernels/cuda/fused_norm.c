/* CUDA kernels of the fused norm ops (issue 14; device code: fused_norm.cu).
 * Empty for now: these nodes run on the CPU, node by node. */
#include "cu.h"

const struct gf_kernel_table gf_cuda_fused_norm_table = {NULL, 0};
