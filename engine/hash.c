/* hash.c: see hash.h. */
#include "hash.h"

/* 2^64 / golden ratio (odd): spreads consecutive words and seeds apart. */
#define HASH_STEP 0x9e3779b97f4a7c15ULL
/* An odd multiplier with good avalanche in the final mix. */
#define HASH_AVALANCHE 0xd6e8feb86659fd93ULL

/* Every bit of x moves every bit of the result. */
static uint64_t avalanche(uint64_t x)
{
    x ^= x >> 32;
    x *= HASH_AVALANCHE;
    x ^= x >> 29;
    x *= HASH_AVALANCHE;
    return x ^ (x >> 32);
}

/* The 8 bytes at p as a little-endian word, on any machine. */
static uint64_t word_le(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = n; i-- > 0;)
        w = (w << 8) | p[i];
    return w;
}

uint64_t ra_hash64(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = avalanche(seed ^ ((uint64_t)n * HASH_STEP));
    for (; n >= 8; n -= 8, p += 8) {
        h = (h ^ word_le(p, 8)) * HASH_STEP;
        h ^= h >> 29;
    }
    h = (h ^ word_le(p, n)) * HASH_STEP;
    return avalanche(h);
}
