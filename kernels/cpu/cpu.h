/* What the CPU kernels include: the helpers and checks every backend
 * shares (kernels/checks.h) and the half-precision conversions.  The
 * fused-op kernels add cpu/fused.h. */
#ifndef GF_CPU_H
#define GF_CPU_H

#include <math.h>
#include <string.h>

#include "checks.h"
#include "gf_half.h"

/* Rows (m) up to which gf_cpu_sgemm takes a product (above, OpenBLAS is faster). */
#define GF_CPU_SGEMM_MAX_M 256
/* Rows (m) up to which gf_cpu_sgemm_packed takes a product (B packed once a
 * plan: as fast as OpenBLAS or faster at 2048 rows, kernels/cpu/sgemm.c). */
#define GF_CPU_SGEMM_PACKED_MAX_M 8192
/* gf_cpu_sgemm sums each block of this many values of k (from k = 0) as one
 * FMA chain from zero, then adds it to C (the first block of a product that
 * does not accumulate: stored as it is). */
#define GF_CPU_SGEMM_KC 256

/* C (+)= A B, fp32, row-major with leading dimensions lda, ldb, ldc (with
 * trans_b, b holds B^T [n, k]), on up to n_threads (kernels/cpu/sgemm.c).
 * False, doing nothing, where it does not apply: no AVX-512F, m over
 * GF_CPU_SGEMM_MAX_M, GF_CPU_SGEMM=0, an empty product.  The result does
 * not depend on n_threads. */
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
