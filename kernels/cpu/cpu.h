/* Internal helpers shared by the CPU kernels: element conversions,
 * broadcasting strides, error messages, and the per-family kernel tables
 * that kernels/registry.c lists. */
#ifndef GF_CPU_H
#define GF_CPU_H

#include <math.h>
#include <string.h>

#include "gf_half.h"
#include "backend.h"

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
