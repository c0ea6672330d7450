/* half.c: float32 values encoded as IEEE binary16 or bfloat16, rounded to
 * nearest with ties to even, and the check that none overflows. HDF5 1.10's own conversion to a custom 16-bit
 * float loses the carry when the significand rounds up into the exponent
 * (0.12498 becomes 0.0625), so the writer encodes here and HDF5 stores the
 * bits unchanged. */
#include <math.h>
#include <string.h>

#include "h5util.h"
#include "internal.h"

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

ra_status h5io_half_range_check(MPI_Comm comm, const char *path,
                                const char *name, ra_dtype dtype,
                                const float *x, size_t n)
{
    const int brain = dtype == RA_DTYPE_BF16;
    float mine = 0.0f, top = 0.0f;
    uint16_t bits;
    if (dtype != RA_DTYPE_F16 && !brain)
        return RA_OK;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > mine)
            mine = fabsf(x[i]);
    if (MPI_Allreduce(&mine, &top, 1, MPI_FLOAT, MPI_MAX, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: dataset %s: MPI_Allreduce of "
                            "the largest value failed", path, name);
    h5io_half_encode(&top, &bits, 1, brain);
    if ((bits & 0x7fff) != (brain ? 0x7f80 : 0x7c00))
        return RA_OK;
    return ra_error_set(RA_ERR_IO, "%s: dataset %s: the largest |value| "
                        "%.9g overflows %s (largest finite %s); nothing "
                        "written: use --out-dtype fp32 or scale v down",
                        path, name, (double)top, ra_dtype_name(dtype),
                        brain ? "3.39e38" : "65504");
}
