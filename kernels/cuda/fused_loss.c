/* CUDA kernels of the fused loss ops (issue 14; device code: fused_loss.cu).
 * Empty for now: these nodes run on the CPU, node by node. */
#include "cu.h"

const struct gf_kernel_table gf_cuda_fused_loss_table = {NULL, 0};
