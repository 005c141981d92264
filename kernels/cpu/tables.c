/* The CPU kernel tables, in lookup order, NULL last (cpu/backend.c's
 * descriptor): one line a family. */
#include "cpu.h"

extern const struct gf_kernel_table gf_cpu_elementwise_table; /* elementwise.c */
extern const struct gf_kernel_table gf_cpu_reduce_table;      /* reduce.c */
extern const struct gf_kernel_table gf_cpu_layout_table;      /* layout.c */
extern const struct gf_kernel_table gf_cpu_matmul_table;      /* matmul.c */
extern const struct gf_kernel_table gf_cpu_grad_table;        /* grad.c (backward ops) */
/* The fused ops of domain graphfuse (fused_*.c). */
extern const struct gf_kernel_table gf_cpu_fused_norm_table;
extern const struct gf_kernel_table gf_cpu_fused_act_table;
extern const struct gf_kernel_table gf_cpu_fused_matmul_table;
extern const struct gf_kernel_table gf_cpu_fused_loss_table;
extern const struct gf_kernel_table gf_cpu_fused_attn_table;
extern const struct gf_kernel_table gf_cpu_fused_grad_table;
/* ONNX Runtime contrib ops and opset-23 ops (contrib.c): adapters over the
 * fused kernels, for models written by optimize --target ort / onnx. */
extern const struct gf_kernel_table gf_cpu_contrib_table;
extern const struct gf_kernel_table gf_cpu_optim_table; /* optim.c: optimizer ops */
/* half.c: fp16 / bf16 nodes no kernel above takes, run by the fp32 kernels on
 * widened copies; last, so that native 16-bit kernels win */
extern const struct gf_kernel_table gf_cpu_half_table;

const struct gf_kernel_table *const gf_cpu_tables[] = {
    &gf_cpu_elementwise_table,
    &gf_cpu_reduce_table,
    &gf_cpu_layout_table,
    &gf_cpu_matmul_table,
    &gf_cpu_grad_table,
    &gf_cpu_fused_norm_table,
    &gf_cpu_fused_act_table,
    &gf_cpu_fused_matmul_table,
    &gf_cpu_fused_loss_table,
    &gf_cpu_fused_attn_table,
    &gf_cpu_fused_grad_table,
    &gf_cpu_contrib_table,
    &gf_cpu_optim_table,
    &gf_cpu_half_table,
    NULL,
};
