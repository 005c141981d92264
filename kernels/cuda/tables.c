/* The CUDA kernel tables, in lookup order, NULL last (backend.c's
 * descriptor): one line a family.
 *
 * Not yet on CUDA (these nodes run on the CPU, node by node; issue 14):
 *   - every fused op, forward and backward: RMSNorm AddRMSNorm LayerNorm
 *     AddLayerNorm and their Grads, SwiGLU GeGLU (and Grads), RoPE (and
 *     Grad), SoftmaxCrossEntropy CrossEntropyGrad LinearCrossEntropy, JSD
 *     (and Grad), Attention (and Grad), MatMulEpilogue (and Grad)
 *   - fp16 / bf16 storage (the OpenCL kernels have it for float ops)
 *   - the ops the OpenCL tables lack too (the CPU's contrib ops, ...)
 */
#include "cu.h"

extern const struct gf_kernel_table gf_cuda_elementwise_table; /* elementwise.c */
extern const struct gf_kernel_table gf_cuda_layout_table;      /* layout.c */
extern const struct gf_kernel_table gf_cuda_optim_table;       /* optim.c */

const struct gf_kernel_table *const gf_cuda_tables[] = {
    &gf_cuda_elementwise_table,
    &gf_cuda_layout_table,
    &gf_cuda_optim_table,
    NULL,
};
