/* The OpenCL kernel tables, in lookup order (kernels/registry.c reads them). */
#include "ocl.h"

extern const struct gf_kernel_table gf_opencl_elementwise_table; /* elementwise.c */
extern const struct gf_kernel_table gf_opencl_layout_table;      /* layout.c */

const struct gf_kernel_table *const gf_opencl_tables[] = {
    &gf_opencl_elementwise_table,
    &gf_opencl_layout_table,
};

const size_t gf_opencl_n_tables = sizeof(gf_opencl_tables) / sizeof(gf_opencl_tables[0]);
