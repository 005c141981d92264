/* The CUDA kernel tables, in lookup order, NULL last (backend.c's
 * descriptor): one line a family. */
#include "cu.h"

const struct gf_kernel_table *const gf_cuda_tables[] = {
    NULL,
};
