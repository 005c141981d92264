/* fp16 and bfloat16 <-> float conversions (IEEE round to nearest even),
 * shared by graph/ (tensor element access) and the kernels. */
#ifndef GF_HALF_H
#define GF_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float gf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, with overflow to infinity and NaN kept NaN. */
static inline uint16_t gf_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
    if (absx >= 0x477ff000) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000) { /* subnormal half (or zero) */
        float a;
        memcpy(&a, &absx, 4);
        /* scale so the half subnormal unit is 1, round to nearest even */
        float r = a * 16777216.0f; /* 2^24 */
        uint32_t m = (uint32_t)nearbyintf(r);
        return (uint16_t)(sign | m);
    }
    uint32_t mant = absx & 0x7fffff, exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static inline float gf_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gf_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
