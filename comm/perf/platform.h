/* platform.h: the cluster a SimGrid platform file describes, as `ringattn
 * plan --platform` reads it, so that a prediction and a simulation
 * (ringattn-sim, docs/SIMULATION.md) describe the same machine. */
#ifndef RA_PERF_PLATFORM_H
#define RA_PERF_PLATFORM_H

#include <stddef.h>

#include "profile.h"

enum { PLATFORM_TEXT = 64 };

/* One <cluster> of SimGrid: nodes of `cores` cores joined by links of
 * `bandwidth` bytes/s each way and `latency` seconds per link; a backbone
 * (flat clusters only): 0 when absent. */
typedef struct {
    char id[PLATFORM_TEXT];
    char topology[PLATFORM_TEXT]; /* "FLAT", "FAT_TREE", "TORUS", ... */
    int nodes, cores;
    int shared; /* sharing_policy SHARED: both ways share bw */
    double bandwidth, latency;
    double backbone_bandwidth, backbone_latency;
} ra_platform;

/* Reads the one <cluster> of a SimGrid platform file (the subset of the
 * files in launch/sim/platforms/: <platform>, <zone>, <cluster>, comments);
 * 0, or -1 with a one-line reason naming the file and the problem. */
int platform_read(const char *path, ra_platform *pl, char *err, size_t n);

/* The platform's links as the model sees them: pf->inter, the route
 * between neighbouring nodes (its links' latencies, the node's link; a
 * SHARED link halved, as a ring step sends both ways), and pf->backbone,
 * the flat cluster's backbone that every flow between nodes crosses
 * (0: none). */
void platform_link(const ra_platform *pl, ra_profile *pf);

#endif /* RA_PERF_PLATFORM_H */
