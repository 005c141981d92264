/* What the CPU kernels include: the helpers and checks every backend
 * shares (kernels/checks.h) and the half-precision conversions.  The
 * fused-op kernels add cpu/fused.h. */
#ifndef GF_CPU_H
#define GF_CPU_H

#include <math.h>
#include <string.h>

#include "checks.h"
#include "gf_half.h"

/* Rows (m) up to which gf_cpu_sgemm takes any product.  Above, OpenBLAS is
 * as fast or faster on a weight's product (1.27x at 512 rows, 2 threads),
 * so more rows are taken only for attention's per-head products: k or n
 * at most GF_CPU_SGEMM_HEAD (the head size), and A's part of a block of k,
 * m x min(k, KC) floats, within GF_CPU_SGEMM_A_BYTES (half a 1 MiB L2). */
#define GF_CPU_SGEMM_MAX_M 256
#define GF_CPU_SGEMM_HEAD 128
#define GF_CPU_SGEMM_A_BYTES (512 << 10)
/* Rows (m) up to which gf_cpu_sgemm_packed takes a product (B packed once a
 * plan: as fast as OpenBLAS or faster at 2048 rows, kernels/cpu/sgemm.c). */
#define GF_CPU_SGEMM_PACKED_MAX_M 8192
/* gf_cpu_sgemm sums each block of this many values of k (from k = 0) as one
 * FMA chain from zero, then adds it to C (the first block of a product that
 * does not accumulate: stored as it is). */
#define GF_CPU_SGEMM_KC 256

/* gf_cpu_sgemm's row limit (above): whether it takes m x k times k x n. */
static inline bool gf_cpu_sgemm_takes(int64_t m, int64_t n, int64_t k)
{
    int64_t kc = k < GF_CPU_SGEMM_KC ? k : GF_CPU_SGEMM_KC;
    return m <= GF_CPU_SGEMM_MAX_M ||
           ((k <= GF_CPU_SGEMM_HEAD || n <= GF_CPU_SGEMM_HEAD) &&
            m <= GF_CPU_SGEMM_A_BYTES / 4 && m * kc <= GF_CPU_SGEMM_A_BYTES / 4);
}

/* C (+)= A B, fp32, row-major with leading dimensions lda, ldb, ldc (with
 * trans_b, b holds B^T [n, k]), on up to n_threads (kernels/cpu/sgemm.c).
 * False, doing nothing, where it does not apply: no AVX-512F, more rows
 * than gf_cpu_sgemm_takes, GF_CPU_SGEMM=0, an empty product.  The result
 * does not depend on n_threads. */
bool gf_cpu_sgemm(int n_threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, bool trans_b, float *c, int64_t ldc,
                  bool accumulate);

/* Columns of a packed B (gf_cpu_sgemm_pack): panels of this many. */
#define GF_CPU_SGEMM_NR 32
/* B [k, n] (or, with trans_b, B^T [n, k]) packed ahead of time, as the
 * product reads it: ceil(n / NR) panels of k rows x NR columns, panel p
 * (columns [NR p, NR p + NR), zeros past n) at packed + p k NR.  Bytes of
 * it, 0 where gf_cpu_sgemm would not run or GF_CPU_SGEMM_PACK=0 (then pack
 * nothing). */
size_t gf_cpu_sgemm_pack_size(int64_t k, int64_t n);
/* Fills packed (64-byte aligned, gf_cpu_sgemm_pack_size bytes) on up to
 * n_threads. */
void gf_cpu_sgemm_pack(int n_threads, int64_t k, int64_t n, const float *b, int64_t ldb,
                       bool trans_b, float *packed);
/* gf_cpu_sgemm with B's columns [j0, j0 + n) read from packed (B of k rows
 * packed by gf_cpu_sgemm_pack; j0 a multiple of GF_CPU_SGEMM_NR): the same
 * result, bit for bit.  False, doing nothing, where gf_cpu_sgemm would
 * refuse the product or j0 is not a panel's first column. */
bool gf_cpu_sgemm_packed(int n_threads, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *packed, int64_t j0, float *c, int64_t ldc,
                         bool accumulate);

#endif
