/* profile_json.h: machine profiles (comm/profile.h) as JSON files. `ringattn
 * probe` writes them; `ringattn plan` and `--strategy auto` read them. */
#ifndef RA_PROFILE_JSON_H
#define RA_PROFILE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "internal.h"
#include "profile.h"

/* This machine, not probed: measured = 0 and rates from the figures in
 * docs/PERFORMANCE.md. */
void profile_default(ra_profile *p);

/* Reads a profile written by profile_write_json (any key order and white
 * space); 0, or -1 with a one-line reason naming the file and the key. */
int profile_read_json(const char *path, ra_profile *p, char *err, size_t n);

/* 0, or -1 when a write failed (errno set). */
int profile_write_json(FILE *f, const ra_profile *p);

/* The class of tiles a run's params give: band with a window, masked when
 * causal, else full. */
profile_class profile_class_of(const ra_params *p);
/* "full", "masked", "band"; profile_class_parse: 0, or -1 when unknown. */
const char *profile_class_name(profile_class c);
int profile_class_parse(const char *name, profile_class *c);

/* Which kernel rate a run needs: its head shape and score, its tile engine
 * (resolved: openblas or onednn), precision ("fp32", "bf16") and tile
 * class; with a window, the keys a row sees (keys) and the tiles the run
 * uses (bq x bkv; follow: the key tiles follow the band, ra_params_tiles'
 * window tiles). */
typedef struct {
    int64_t D, Dv;
    ra_score score;
    ra_gemm gemm;
    const char *precision;
    profile_class cls;
    int64_t keys, bq, bkv;
    int follow;
} profile_kernel_key;

/* The kernel key of a run's params and head shape (the additive score's
 * in fp32: its scores are not tile products). */
profile_kernel_key profile_key_of(const ra_params *p, int64_t D, int64_t Dv);

/* The kernel's FLOP/s per core for key k: among the rates of k's engine,
 * precision and class (a schema-2 rate, which recorded none of them,
 * stands in for any engine and class in fp32), the probed entry of that
 * shape, else the nearest D of the same score, else the dot's; 0 when
 * there is none, which profile_usable refuses by name. A window of another
 * width than the probe's scales it by the tiles' useful share: on window
 * tiles (follow), the band rate times keys / bkv against the probe's; on
 * the default tiles, the full tiles' rate times keys / (keys + bq + bkv),
 * a query tile meeting about (keys + bq) / bkv + 1 key tiles. */
double profile_kernel_rate(const ra_profile *p, const profile_kernel_key *k);

/* What one prediction needs of a profile: its allocation, the kernel key
 * and the kernel rate in use (the profile's profile_kernel_rate, or a rate
 * given in its place) and whether I/O is timed. */
typedef struct {
    int P, nodes;
    profile_kernel_key key;
    double core_rate;
    int with_io;
} profile_need;

/* 0 when every rate the model divides by for need is positive, normal and
 * finite (a zero counts where the model has a fall-back for it); else -1
 * and one line, "key 'FIELD': problem", naming the first missing rate. */
int profile_usable(const ra_profile *p, const profile_need *need, char *why,
                   size_t n);

#endif /* RA_PROFILE_JSON_H */
