/* Internal helpers shared by the CPU kernels: element conversions,
 * broadcasting strides, error messages, and the per-family kernel tables
 * that kernels/registry.c lists. */
#ifndef GF_CPU_H
#define GF_CPU_H

#include <math.h>
#include <string.h>

#include "gf_half.h"
#include "gf_kernels.h"

/* ---- broadcasting ------------------------------------------------------ */

/* Element strides of `in` aligned to `out`'s rank per ONNX (numpy)
 * broadcasting: 0 where `in` has size 1 (or lacks the axis). */
static inline void gf_bcast_strides(const struct gf_tview *in, const struct gf_tview *out,
                                    int64_t *strides)
{
    int64_t s = 1;
    for (int i = out->rank - 1, j = in->rank - 1; i >= 0; i--, j--) {
        if (j >= 0 && in->dims[j] != 1) {
            strides[i] = s;
            s *= in->dims[j];
        } else {
            strides[i] = 0;
            if (j >= 0)
                s *= in->dims[j];
        }
    }
}

/* Error naming the node: "node 'x' (Op): message". */
enum gf_status gf_kernel_error(const struct gf_kernel_args *a, enum gf_status st,
                               const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the tables registry.c lists (one per family file) ------------------- */

struct gf_kernel_table {
    const struct gf_kernel *kernels;
    size_t count;
};

extern const struct gf_kernel_table gf_cpu_elementwise_table; /* cpu/elementwise.c */
extern const struct gf_kernel_table gf_cpu_reduce_table;      /* cpu/reduce.c */
extern const struct gf_kernel_table gf_cpu_layout_table;      /* cpu/layout.c */
extern const struct gf_kernel_table gf_cpu_matmul_table;      /* cpu/matmul.c */
extern const struct gf_kernel_table gf_cpu_grad_table;        /* cpu/grad.c (backward ops) */
extern const struct gf_kernel_table gf_cpu_fused_grad_table;  /* cpu/fused_grad.c */

/* Shape logic of the layout ops, shared with other backends (cpu/layout.c). */
/* axis in [-rank, rank) made non-negative; an error naming `what` otherwise. */
enum gf_status gf_norm_axis(const struct gf_kernel_args *a, const char *what, int64_t axis,
                            int rank, int *out);
/* Reshape's target dims from `shape` (0 copies, one -1 inferred). */
enum gf_status gf_reshape_dims(const struct gf_kernel_args *a, const int64_t *shape, size_t n,
                               int64_t *dims);
/* Pad from its pads list (np entries) and axes (na, when has_axes): the
 * mode (0 constant, 1 reflect, 2 edge, 3 wrap), pads per axis (begin pb,
 * end pe; negative crops) and the output dims, checked. */
enum gf_status gf_pad_plan(const struct gf_kernel_args *a, const int64_t *pads, size_t np,
                           const int64_t *axes, size_t na, bool has_axes, int *mode,
                           int64_t *pb, int64_t *pe, int64_t *dims);
/* Squeeze / Unsqueeze axes normalized against rank, no repeats, marked in hit. */
enum gf_status gf_axes_mask(const struct gf_kernel_args *a, const int64_t *axes, size_t n,
                            int rank, bool hit[GF_MAX_RANK]);

#endif
