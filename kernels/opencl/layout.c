/* OpenCL layout kernels (in progress). */
#include "ocl.h"

const struct gf_kernel_table gf_opencl_layout_table = {NULL, 0};
