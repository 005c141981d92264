/* The CUDA kernel tables, in lookup order, NULL last (backend.c's
 * descriptor): one line a family.  Every family takes fp32, fp16 and bf16
 * storage (fp32 compute, outputs rounded once; GEMMs on the tensor cores;
 * docs/precision.md) but for the losses, which are fp32 but for
 * fp16 / bf16 SoftmaxCrossEntropy and LinearCrossEntropy of bf16 H and W.
 *
 * Not yet on CUDA (these nodes run on the CPU, node by node):
 *   - GatherND / GatherGrad whose indices have no host copy
 *   - Attention with a head dim over 128
 *   - the fp16 / bf16 losses but SoftmaxCrossEntropy and bf16
 *     LinearCrossEntropy
 *   - the ops the OpenCL tables lack too (the CPU's contrib ops, ...)
 */
#include "cu.h"

extern const struct gf_kernel_table gf_cuda_elementwise_table; /* elementwise.c */
extern const struct gf_kernel_table gf_cuda_layout_table;      /* layout.c */
extern const struct gf_kernel_table gf_cuda_fused_norm_table;  /* fused_norm.c */
extern const struct gf_kernel_table gf_cuda_fused_act_table;   /* fused_act.c */
extern const struct gf_kernel_table gf_cuda_fused_loss_table;  /* fused_loss.c */
extern const struct gf_kernel_table gf_cuda_fused_attn_table;  /* fused_attn.c */
extern const struct gf_kernel_table gf_cuda_optim_table;       /* optim.c */
extern const struct gf_kernel_table gf_cuda_matmul_table;      /* matmul.c: cuBLASLt */
extern const struct gf_kernel_table gf_cuda_reduce_table;      /* reduce.c */

const struct gf_kernel_table *const gf_cuda_tables[] = {
    &gf_cuda_elementwise_table,
    &gf_cuda_layout_table,
    &gf_cuda_fused_norm_table,
    &gf_cuda_fused_act_table,
    &gf_cuda_fused_loss_table,
    &gf_cuda_fused_attn_table,
    &gf_cuda_matmul_table,
    &gf_cuda_reduce_table,
    &gf_cuda_optim_table,
    NULL,
};
