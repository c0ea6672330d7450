/* profile.h: a machine profile, the measured rates the performance model
 * predicts from. `ringattn probe` measures one on the allocation a user will
 * run on and writes it as JSON; `ringattn plan` and `--strategy auto` read
 * it back, or fall back to profile_default() (this machine, not probed).
 *
 * Rates are per rank unless said otherwise; a rate of 0 means "not
 * measured" (for example the links between nodes on a single node). This
 * header holds the data and what a prediction looks up in it (profile.c);
 * reading and writing JSON live in profile_json.h. */
#ifndef RA_PROFILE_H
#define RA_PROFILE_H

#include <stdint.h>

#include "internal.h"

enum { PROFILE_MAX_RATES = 48, PROFILE_TEXT = 256, PROFILE_HOSTS = 2048,
       PROFILE_PRECISION = 8,
       /* the band class's problem: a causal window of this many visible
        * keys per row, on the window's own tiles (ra_params_tiles) */
       PROFILE_BAND_KEYS = 512 };

/* The tile shape class a kernel rate is measured on, as a run meets it:
 * full tiles (no mask), the causal diagonal's masked edge tiles among full
 * ones, or the narrow tiles of a sliding-window band. */
typedef enum {
    PROFILE_FULL = 0,
    PROFILE_MASKED = 1,
    PROFILE_BAND = 2,
    PROFILE_CLASSES = 3
} profile_class;

/* The tiled forward kernel's rate for one head shape and score on one tile
 * engine, precision and tile class, per core (one thread of one rank), in
 * useful FLOP/s as ra_forward_flops counts. gemm RA_GEMM_AUTO: a profile of
 * schema 2, which did not record the engine nor the class; such a rate
 * stands in for every engine and class. precision: "fp32" or "bf16". */
typedef struct {
    int64_t D, Dv;
    ra_score score;
    ra_gemm gemm;
    char precision[PROFILE_PRECISION];
    profile_class cls;
    double flops_per_core;
} profile_rate;

/* Point-to-point messages of ring-step sizes between two ranks. */
typedef struct {
    double latency;   /* seconds per message, from a small-message fit */
    double bandwidth; /* bytes/s one rank sends while its neighbour sends
                         too (both directions busy, as in a ring step) */
} profile_link;

typedef struct {
    int measured;                  /* 0: the built-in default */
    char date[PROFILE_TEXT];       /* ISO 8601, UTC */
    char version[PROFILE_TEXT];    /* ringattn, MPI, HDF5 and BLAS */
    char hosts[PROFILE_HOSTS];     /* host names, comma-separated */
    char io_dir[PROFILE_TEXT];     /* the directory the I/O rates are of */
    int nodes, ranks, ranks_per_node, threads; /* the probed allocation */
    int oversubscribed;            /* 1: some machine ran more ranks x
                                      threads than it has cores while
                                      probed: rates are shares of a core */
    int nrates;
    profile_rate rate[PROFILE_MAX_RATES];
    double call_seconds;           /* fixed cost of one forward call beyond
                                      its tiles (one rank, one step); 0:
                                      not measured */
    double step_seconds;           /* fixed cost of each further ring step
                                      (a step's hand-over, tiny blocks);
                                      0: not measured (one rank) */
    profile_link intra, inter;     /* same node; across nodes */
    double backbone;               /* bytes/s that every flow between
                                      nodes shares (a flat cluster's
                                      backbone: plan --platform); 0: no
                                      such bound */
    double alltoall_intra, alltoall_inter;   /* bytes/s per rank sent */
    double allgather_intra, allgather_inter; /* bytes/s per rank received */
    /* MPI_Ireduce_scatter with a non-commutative operation (as the tree
     * strategy merges partial results): bytes/s per rank of the payload
     * addressed to the other ranks (their parts of its vector); 0: not
     * measured, the all-to-all rate stands in */
    double reduce_scatter_intra, reduce_scatter_inter;
    double io_read, io_write;      /* parallel HDF5, bytes/s over all ranks */
    int64_t mem_per_node;          /* physical memory of one node, bytes */
} ra_profile;

/* This machine, not probed: measured = 0 and rates from the figures in
 * docs/PERFORMANCE.md. */
void profile_default(ra_profile *p);

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

#endif /* RA_PROFILE_H */
