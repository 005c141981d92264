/* CUDA kernels of the fused act ops (issue 14; device code: fused_act.cu).
 * Empty for now: these nodes run on the CPU, node by node. */
#include "cu.h"

const struct gf_kernel_table gf_cuda_fused_act_table = {NULL, 0};
