/* profile.c: the built-in profile of this machine, the kernel rate of a
 * head shape and whether a profile holds every rate a prediction divides
 * by (profile.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_env.h"
#include "profile.h"

/* The built-in kernel rates, per core (docs/PERFORMANCE.md, "Probing the
 * tile engines"). Full and masked: "The oneDNN tile engine", `mpirun -np 2
 * --bind-to core ringattn bench --seq 16384 --heads 4 --dim D [--causal]
 * --gemm G` on the quiet machine, GFLOP/s over 2 ranks halved. Band: the
 * full rate times the band / full ratio of one `mpirun -np 2 ringattn
 * probe --gemm openblas,onednn --dim 64,128` (`git show records:bench/
 * records/probe-engines-p2-loaded.json`; the machine was loaded, so its ratios,
 * not its rates, are kept). The other scores from "Scores": gaussian 0.99
 * of dot; additive 29.5 GFLOP/s over 2 ranks at A = 64 (their compute is
 * not the tile products). bf16: the fp32 rate times the bf16 / fp32
 * ratio of one quiet `mpirun -np 2 --bind-to core ringattn probe --gemm
 * openblas,onednn --dim 64,128 --precision fp32,bf16 --seconds 24`
 * (`git show records:bench/records/probe-bf16-p2.json`; "bf16 in the
 * model"). */
static void default_rates(ra_profile *p)
{
    static const double dot[2][2][2][PROFILE_CLASSES] = {
        /* fp32; openblas: D = 64, 128; full, masked, band */
        {{{76.4e9, 70.7e9, 42.3e9}, {75.9e9, 77.0e9, 47.0e9}},
         /* onednn */
         {{138.3e9, 113.7e9, 83.7e9}, {132.2e9, 137.9e9, 61.7e9}}},
        /* bf16; openblas (emulated at fp32 speed, plus the rounding) */
        {{{71.8e9, 63.0e9, 34.6e9}, {71.1e9, 64.7e9, 37.7e9}},
         /* onednn */
         {{197.6e9, 163.5e9, 91.9e9}, {186.9e9, 184.7e9, 66.5e9}}},
    };
    const ra_gemm engines[2] = {RA_GEMM_OPENBLAS, RA_GEMM_ONEDNN};
    const char *const precisions[2] = {"fp32", "bf16"};
    p->nrates = 0;
    for (int pr = 0; pr < 2; pr++)
        for (int e = 0; e < 2; e++)
            for (int d = 0; d < 2; d++)
                for (int c = 0; c < PROFILE_CLASSES; c++) {
                    profile_rate *r = &p->rate[p->nrates++];
                    *r = (profile_rate){64 << d, 64 << d, RA_SCORE_DOT,
                                        engines[e], "", (profile_class)c,
                                        dot[pr][e][d][c]};
                    snprintf(r->precision, sizeof r->precision, "%s",
                             precisions[pr]);
                }
    for (int e = 0; e < 2; e++) {
        const double full64 = dot[0][e][0][PROFILE_FULL];
        p->rate[p->nrates++] = (profile_rate){64, 64, RA_SCORE_GAUSSIAN,
                                              engines[e], "fp32",
                                              PROFILE_FULL, 0.99 * full64};
        p->rate[p->nrates++] = (profile_rate){64, 64, RA_SCORE_ADDITIVE,
                                              engines[e], "fp32",
                                              PROFILE_FULL, 14.7e9};
    }
}

void profile_default(ra_profile *p)
{
    memset(p, 0, sizeof *p);
    p->measured = 0;
    snprintf(p->version, sizeof p->version, "ringattn %s", RA_VERSION_STRING);
    snprintf(p->hosts, sizeof p->hosts, "this machine (not probed)");
    snprintf(p->io_dir, sizeof p->io_dir, ".");
    /* docs/PERFORMANCE.md: the machine the figures come from, 2 cores */
    p->nodes = 1;
    p->ranks = 2;
    p->ranks_per_node = 2;
    p->threads = 1;
    default_rates(p);
    /* the same probe's fixed costs: a call, a further ring step */
    p->call_seconds = 2.3e-5;
    p->step_seconds = 9.3e-5;
    /* "Overlap": the comm-only ring of the ring's messages, 7.7 GB/s per
     * rank over shared memory and 3.2 GB/s over TCP. Latencies are not in
     * the document: typical Open MPI figures (vader about 1 us, TCP on one
     * host about 30 us), small against any ring step's transfer. */
    p->intra = (profile_link){1e-6, 7.7e9};
    p->inter = (profile_link){30e-6, 3.2e9};
    /* No collective rates are in the document: taken as the ring's
     * point-to-point rates of the same path. */
    p->alltoall_intra = p->allgather_intra = 7.7e9;
    p->alltoall_inter = p->allgather_inter = 3.2e9;
    /* Open MPI reduces to one rank and scatters from there: about a third
     * of the point-to-point rate at two ranks ("Machine profile") */
    p->reduce_scatter_intra = 7.7e9 / 3;
    p->reduce_scatter_inter = 3.2e9 / 3;
    /* "I/O": reads 0.3-1.6 GB/s, writes 0.1-1.4 GB/s at P = 1..4; the
     * lower middles */
    p->io_read = 0.9e9;
    p->io_write = 0.4e9;
    /* the 24 GiB of the machine */
    p->mem_per_node = (int64_t)24 << 30;
}

static const char *const class_names[PROFILE_CLASSES] = {"full", "masked",
                                                         "band"};

profile_class profile_class_of(const ra_params *p)
{
    return p->num.window   ? PROFILE_BAND
           : p->num.causal ? PROFILE_MASKED
                           : PROFILE_FULL;
}

const char *profile_class_name(profile_class c)
{
    return (unsigned)c < PROFILE_CLASSES ? class_names[c] : "unknown";
}

int profile_class_parse(const char *name, profile_class *c)
{
    for (int i = 0; i < PROFILE_CLASSES; i++)
        if (strcmp(name, class_names[i]) == 0) {
            *c = (profile_class)i;
            return 0;
        }
    return -1;
}

profile_kernel_key profile_key_of(const ra_params *p, int64_t D, int64_t Dv)
{
    profile_kernel_key k = {D,
                            Dv,
                            p->num.score,
                            ra_gemm_pick(p->exec.gemm),
                            p->num.precision == RA_PRECISION_BF16 &&
                                    p->num.score != RA_SCORE_ADDITIVE
                                ? "bf16"
                                : "fp32",
                            profile_class_of(p),
                            0,
                            0,
                            0,
                            0};
    if (p->num.window) {
        const ra_shape s = {.B = 1, .N = 1, .M = 1, .H = 1, .G = 1, .D = D,
                            .Dv = Dv};
        ra_params_tiles(p, &s, &k.bq, &k.bkv);
        k.keys =
            p->num.window_left + (p->num.causal ? 0 : p->num.window_right) + 1;
        k.follow =
            p->exec.block_kv <= 0 &&
            p->num.window_left + p->num.window_right + 1 <= RA_WINDOW_TILE_SPAN;
    }
    return k;
}

/* Whether rate r was measured for k's engine, precision and class (a
 * schema-2 rate: for any engine and class, in fp32). */
static int rate_matches(const profile_rate *r, const profile_kernel_key *k)
{
    const char *prec = r->precision[0] ? r->precision : "fp32";
    if (!(r->flops_per_core > 0) || strcmp(prec, k->precision) != 0)
        return 0;
    return r->gemm == RA_GEMM_AUTO || (r->gemm == k->gemm && r->cls == k->cls);
}

static double rate_of(const ra_profile *p, const profile_kernel_key *k)
{
    const profile_rate *best = NULL, *dot = NULL;
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        if (!rate_matches(r, k))
            continue;
        if (r->score == k->score && r->D == k->D && r->Dv == k->Dv)
            return r->flops_per_core;
        if (r->score == k->score &&
            (!best || llabs(r->D - k->D) < llabs(best->D - k->D)))
            best = r;
        if (r->score == RA_SCORE_DOT &&
            (!dot || llabs(r->D - k->D) < llabs(dot->D - k->D)))
            dot = r;
    }
    return best ? best->flops_per_core : dot ? dot->flops_per_core : 0.0;
}

double profile_kernel_rate(const ra_profile *p, const profile_kernel_key *k)
{
    const double band = rate_of(p, k);
    if (k->cls != PROFILE_BAND || k->keys <= 0 || !(band > 0))
        return band;
    if (k->follow) { /* the probe's window: PROFILE_BAND_KEYS on its tiles */
        ra_params probe;
        int64_t bq, bkv;
        ra_params_default(&probe);
        probe.num.causal = probe.num.window = 1;
        probe.num.window_left = PROFILE_BAND_KEYS - 1;
        const ra_shape s = {.B = 1, .N = 1, .M = 1, .H = 1, .G = 1,
                            .D = k->D, .Dv = k->Dv};
        ra_params_tiles(&probe, &s, &bq, &bkv);
        return band * ((double)k->keys / (double)k->bkv) /
               ((double)PROFILE_BAND_KEYS / (double)bkv);
    }
    profile_kernel_key full = *k;
    full.cls = PROFILE_FULL;
    const double r = rate_of(p, &full);
    return r > 0 ? r * (double)k->keys / (double)(k->keys + k->bq + k->bkv)
                 : band;
}

/* ---- what a prediction divides by ----------------------------------------- */

/* A rate the model may divide by: positive, normal and finite. */
static int rate_ok(double x)
{
    return isfinite(x) && x >= DBL_MIN;
}

/* The links and collectives the model times for need: the rate it divides
 * by and the key that is missing when that rate is not usable (the model's
 * fall-backs for 0 included, as in comm/perf/model.c). */
static const char *profile_link_gap(const ra_profile *p,
                                    const profile_need *need)
{
    const int shared = need->P > need->nodes, cross = need->nodes > 1;
    const double per = (double)((need->P + need->nodes - 1) / need->nodes);
    const double link = p->inter.bandwidth > 0 ? p->inter.bandwidth
                                               : p->intra.bandwidth;
    const struct {
        const char *key;
        int used;
        double rate;
    } uses[] = {
        {"intra.bandwidth", shared, p->intra.bandwidth},
        {"alltoall_intra", shared, p->alltoall_intra},
        {"allgather_intra", shared, p->allgather_intra},
        {"inter.bandwidth", cross, link},
        {"alltoall_inter", cross, p->alltoall_inter > 0 ? p->alltoall_inter
            : (p->inter.bandwidth > 0 ? link : p->alltoall_intra * per) / per},
        {"allgather_inter", cross, p->allgather_inter > 0
            ? p->allgather_inter
            : (p->inter.bandwidth > 0 ? link : p->allgather_intra * per) / per},
        {"io_read", need->with_io, p->io_read},
        {"io_write", need->with_io, p->io_write},
    };
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        if (uses[i].used && !rate_ok(uses[i].rate))
            return uses[i].key;
    return NULL;
}

int profile_usable(const ra_profile *p, const profile_need *need, char *why,
                   size_t n)
{
    const profile_kernel_key *k = &need->key;
    if (!rate_ok(need->core_rate)) {
        snprintf(why, n, "key 'kernel': no measured rate for the %s score "
                 "(D = %lld, Dv = %lld) and no dot rate to stand in, on the "
                 "%s engine in %s on %s tiles", ra_score_name(k->score),
                 (long long)k->D, (long long)k->Dv, ra_gemm_name(k->gemm),
                 k->precision, profile_class_name(k->cls));
        return -1;
    }
    const char *gap = profile_link_gap(p, need);
    if (!gap)
        return 0;
    snprintf(why, n, "key '%s': not measured (probed at %d rank(s) on %d "
             "node(s)), and %d rank(s) on %d node(s) need it", gap, p->ranks,
             p->nodes, need->P, need->nodes);
    return -1;
}
