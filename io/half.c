/* half.c: float32 values encoded as IEEE binary16 or bfloat16, rounded to
 * nearest with ties to even. HDF5 1.10's own conversion to a custom 16-bit
 * float loses the carry when the significand rounds up into the exponent
 * (0.12498 becomes 0.0625), so the writer encodes here and HDF5 stores the
 * bits unchanged. */
#include <string.h>

#include "h5util.h"

/* bits >> shift rounded to nearest, ties to even (shift in 1..31). */
static uint32_t round_shift(uint32_t bits, unsigned shift)
{
    const uint32_t half = (uint32_t)1 << (shift - 1);
    const uint32_t rest = bits & ((half << 1) - 1);
    uint32_t q = bits >> shift;
    if (rest > half || (rest == half && (q & 1)))
        q++;
    return q;
}

static uint16_t binary16_of(uint32_t x)
{
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t a = x & 0x7fffffff;
    const uint32_t e = a >> 23;
    if (a > 0x7f800000) /* NaN: stays a quiet NaN */
        return sign | 0x7e00;
    if (a >= 0x477ff000) /* rounds to 65520 or beyond: infinity */
        return sign | 0x7c00;
    if (e >= 113) /* normal: the carry of the rounding may raise the
                     exponent, which is right */
        return sign | (uint16_t)round_shift(((e - 112) << 23) |
                                            (a & 0x7fffff), 13);
    if (a < 0x33000000) /* below half the smallest subnormal: zero */
        return sign;
    /* subnormal: a multiple of 2^-24 */
    return sign | (uint16_t)round_shift((a & 0x7fffff) | 0x800000, 126 - e);
}

static uint16_t bfloat16_of(uint32_t x)
{
    if ((x & 0x7fffffff) > 0x7f800000) /* NaN: stays a quiet NaN */
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)round_shift(x, 16); /* overflows to inf correctly */
}

void h5io_half_encode(const float *x, uint16_t *out, size_t n, int brain)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        out[i] = brain ? bfloat16_of(bits) : binary16_of(bits);
    }
}
