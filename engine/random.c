/* random.c: counter-based unit-normal numbers, independent of slicing.
 *
 * Each value is a pure function of (seed, stream, index): a splitmix64 hash
 * gives two uniforms and Box-Muller turns them into one normal. Ranks can
 * therefore generate their own hyperslabs and agree with any other P. */
#include <math.h>

#include "internal.h"

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform in (0, 1], never 0, so that log() is finite. */
static double unit_open(uint64_t bits)
{
    return ((double)(bits >> 11) + 1.0) * 0x1.0p-53;
}

uint64_t ra_random_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
    return mix64(mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ull)) ^
                 mix64(index));
}

void ra_random_normal(uint64_t seed, uint64_t stream, uint64_t first,
                      int64_t count, float *out)
{
    const uint64_t key = mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ull));
    for (int64_t i = 0; i < count; i++) {
        uint64_t ctr = key ^ mix64(first + (uint64_t)i);
        double u1 = unit_open(mix64(ctr));
        double u2 = unit_open(mix64(ctr + 1));
        out[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

void ra_random_slab(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                    int64_t row, ra_range rows, float *out)
{
    const int64_t slab = rows.count * row;
    for (int64_t b = 0; b < B; b++)
        ra_random_normal(seed, stream, (uint64_t)((b * len + rows.start) * row),
                         slab, out + b * slab);
}
