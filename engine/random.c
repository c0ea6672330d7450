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
    const ra_slice one = {1, {{rows.start, rows.count, 1}}, rows.count};
    ra_random_slice(seed, stream, B, len, row, &one, out);
}

void ra_random_slice(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                     int64_t row, const ra_slice *slice, float *out)
{
    for (int64_t b = 0; b < B; b++) {
        float *dst = out + b * slice->count * row;
        for (int i = 0; i < slice->nruns; i++) {
            const ra_run *run = &slice->run[i];
            if (run->stride == 1) { /* one call for the whole run */
                ra_random_normal(seed, stream,
                                 (uint64_t)((b * len + run->start) * row),
                                 run->count * row, dst);
            } else {
                for (int64_t t = 0; t < run->count; t++)
                    ra_random_normal(seed, stream,
                                     (uint64_t)((b * len + run->start +
                                                 t * run->stride) * row),
                                     row, dst + t * row);
            }
            dst += run->count * row;
        }
    }
}

void ra_random_lens(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                    int64_t *out)
{
    for (int64_t b = 0; b < B; b++)
        out[b] = (int64_t)(ra_random_u64(seed, stream, (uint64_t)b) %
                           (uint64_t)(len + 1));
}

/* Position i > 0 starts a new segment with probability 1/avg. */
static int segment_starts(uint64_t seed, uint64_t stream, int64_t b,
                          int64_t len, int64_t i, int64_t avg)
{
    return i > 0 && ra_random_u64(seed, stream, (uint64_t)(b * len + i)) %
                            (uint64_t)avg == 0;
}

void ra_random_segments(uint64_t seed, uint64_t stream, int64_t B,
                        int64_t len, int64_t avg, const ra_slice *slice,
                        int64_t *out)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t id = 0, pos = 0;
        for (int64_t idx = 0; idx < slice->count; idx++) {
            int64_t want = ra_slice_pos(slice, idx);
            for (; pos < want; pos++) /* count the starts in (pos, want] */
                id += segment_starts(seed, stream, b, len, pos + 1, avg);
            out[b * slice->count + idx] = id;
        }
    }
}
