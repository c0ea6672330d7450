/* hash.h: a fast 64-bit hash of raw bytes, for the fingerprints that tie a
 * forward output to the data it was computed from (internal, pure). It
 * finds accidental differences (another input, other masks); it is not a
 * cryptographic hash and does not resist a forger. */
#ifndef RA_HASH_H
#define RA_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The hash of data[0..n) under seed: words of 8 bytes (read little-endian
 * on every machine) folded with a multiply and a shift, then a final
 * avalanche, so that a change of any bit or of the seed changes about half
 * the bits of the result. */
uint64_t ra_hash64(const void *data, size_t n, uint64_t seed);

#endif /* RA_HASH_H */
