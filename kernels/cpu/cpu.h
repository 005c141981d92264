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

#endif
