/* The OpenCL kernel tables, in lookup order, NULL last (backend.c's
 * descriptor): one line a family. */
#include "ocl.h"

extern const struct gf_kernel_table gf_opencl_elementwise_table; /* elementwise.c */
extern const struct gf_kernel_table gf_opencl_layout_table;      /* layout.c */
extern const struct gf_kernel_table gf_opencl_fused_norm_table;  /* fused_norm.c */
extern const struct gf_kernel_table gf_opencl_fused_act_table;   /* fused_act.c */
extern const struct gf_kernel_table gf_opencl_fused_loss_table;  /* fused_loss.c */
extern const struct gf_kernel_table gf_opencl_fused_attn_table;  /* fused_attn.c */
extern const struct gf_kernel_table gf_opencl_matmul_table;      /* matmul.c */
extern const struct gf_kernel_table gf_opencl_reduce_table;      /* reduce.c */
extern const struct gf_kernel_table gf_opencl_optim_table;       /* optim.c */

const struct gf_kernel_table *const gf_opencl_tables[] = {
    &gf_opencl_elementwise_table,
    &gf_opencl_layout_table,
    &gf_opencl_fused_norm_table,
    &gf_opencl_fused_act_table,
    &gf_opencl_fused_loss_table,
    &gf_opencl_fused_attn_table,
    &gf_opencl_matmul_table,
    &gf_opencl_reduce_table,
    &gf_opencl_optim_table,
    NULL,
};
