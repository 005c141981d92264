/* What the CPU kernels include: the helpers and checks every backend
 * shares (kernels/checks.h) and the half-precision conversions.  The
 * fused-op kernels add cpu/fused.h. */
#ifndef GF_CPU_H
#define GF_CPU_H

#include <math.h>
#include <string.h>

#include "checks.h"
#include "gf_half.h"

#endif
