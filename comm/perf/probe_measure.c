/* probe_measure.c: what `ringattn probe` measures besides I/O: the
 * kernel's rate per core, ring-step links, collectives, the machine. Every
 * timing is a median over repetitions after a warm-up, with the count of
 * repetitions agreed from the slowest rank's warm-up, so that all ranks
 * make the same calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "bench_measure.h"
#include "call.h"
#include "internal.h"
#include "probe.h"

enum {
    PROBE_MIN_REPS = 3,
    PROBE_MAX_REPS = 50,
    KERNEL_N = 2048,         /* queries and keys of the kernel's problem */
    KERNEL_N_ADDITIVE = 512, /* the additive score: about 30x slower */
    KERNEL_N_MASKED = 4096,  /* the masked and band classes: a causal
                                diagonal of 4096 keys, whose masked tiles
                                are nearer a long slice's share of the
                                work than 2048's; the band as many pairs
                                as full */
    KERNEL_WINDOW = PROFILE_BAND_KEYS - 1, /* its window: the key and
                                              511 before it */
    KERNEL_H = 2,
    KERNEL_A = 64,           /* the additive score's hidden size */
    LINK_SMALL = 1,          /* floats of a latency message */
    LINK_LARGE = 1 << 21,    /* floats of a ring-step message (8 MiB) */
    COLL_FLOATS = 1 << 18,   /* floats per peer of a collective (1 MiB) */
};

ra_status probe_comms_make(MPI_Comm comm, const ra_nodes *nodes, double share,
                           probe_comms *c)
{
    *c = (probe_comms){.world = comm, .node = MPI_COMM_NULL,
                       .leaders = MPI_COMM_NULL, .nodes = nodes->nodes,
                       .share = share};
    int rank = 0, local = 0;
    MPI_Comm_rank(comm, &rank);
    int ok = MPI_Comm_split(comm, nodes->node, rank, &c->node) == MPI_SUCCESS;
    ok = ok && MPI_Comm_rank(c->node, &local) == MPI_SUCCESS &&
         MPI_Comm_size(c->node, &c->node_size) == MPI_SUCCESS;
    ok = MPI_Comm_split(comm, ok && local == 0 ? 0 : MPI_UNDEFINED, rank,
                        &c->leaders) == MPI_SUCCESS && ok;
    return ra_agree(comm, ok ? RA_OK : ra_error_set(RA_ERR_MPI,
                    "probe: splitting the ranks by node failed"));
}

void probe_comms_free(probe_comms *c)
{
    if (c->node != MPI_COMM_NULL)
        MPI_Comm_free(&c->node);
    if (c->leaders != MPI_COMM_NULL)
        MPI_Comm_free(&c->leaders);
}

/* One timed operation: 0, or -1 when a call failed. */
typedef int (*probe_op)(void *arg);

/* This rank's median seconds of op over comm: a warm-up, then as many
 * repetitions as fit in c->share by the slowest warm-up (the same on every
 * rank), each between barriers. -1 when op failed on any rank. */
static double probe_time(MPI_Comm comm, double share, probe_op op, void *arg)
{
    double t[PROBE_MAX_REPS], warm, slowest;
    int bad = 0, any_bad;
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    bad |= op(arg);
    warm = MPI_Wtime() - t0;
    MPI_Allreduce(&warm, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    int reps = slowest > 0 ? (int)(share / slowest) : PROBE_MAX_REPS;
    reps = reps < PROBE_MIN_REPS ? PROBE_MIN_REPS
           : reps > PROBE_MAX_REPS ? PROBE_MAX_REPS : reps;
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(comm);
        t0 = MPI_Wtime();
        bad |= op(arg);
        t[i] = MPI_Wtime() - t0;
    }
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    return any_bad ? -1.0 : bench_median(t, reps);
}

/* ---- the kernel ---------------------------------------------------------- */

typedef struct {
    ra_shape s;
    ra_params p;
    float *q, *k, *v, *o, *lse;
} kernel_arg;

static int kernel_op(void *arg)
{
    kernel_arg *a = arg;
    const ra_status st = ra_call_forward(MPI_COMM_SELF, &a->s, &a->p, NULL,
                                         &(ra_qkv){a->q, a->k, a->v},
                                         &(ra_out){a->o, a->lse, NULL}, NULL);
    return st == RA_OK ? 0 : -1;
}

/* The problem of rate r's class on this rank: shape and params. */
static void kernel_problem(const profile_rate *r, kernel_arg *a)
{
    const int64_t n = r->score == RA_SCORE_ADDITIVE ? KERNEL_N_ADDITIVE
                      : r->cls != PROFILE_FULL      ? KERNEL_N_MASKED
                                                    : KERNEL_N;
    a->s = (ra_shape){.B = 1, .N = n, .M = n, .H = KERNEL_H, .G = KERNEL_H,
                      .D = r->D, .Dv = r->Dv};
    ra_params_default(&a->p);
    a->p.num.score = r->score;
    if (r->score == RA_SCORE_GAUSSIAN) /* the gaussian's alone */
        a->p.num.sigma = 4.0;
    a->p.exec.gemm = r->gemm;
    a->p.num.precision = strcmp(r->precision, "bf16") == 0 ? RA_PRECISION_BF16
                                                           : RA_PRECISION_FP32;
    a->p.num.causal = r->cls != PROFILE_FULL;
    a->p.num.window = r->cls == PROFILE_BAND;
    a->p.num.window_left = a->p.num.window ? KERNEL_WINDOW : 0;
}

double probe_kernel(const probe_comms *c, const profile_rate *r)
{
    int rank, P;
    MPI_Comm_rank(c->world, &rank);
    MPI_Comm_size(c->world, &P);
    kernel_arg a;
    kernel_problem(r, &a);
    const int64_t n = a.s.N, D = r->D;
    const size_t nx = (size_t)(n * KERNEL_H * D);
    const size_t nw = (size_t)(KERNEL_A * (2 * D + 1));
    float *mem = malloc(sizeof(float) * (4 * nx + (size_t)n * KERNEL_H + nw));
    int bad = mem == NULL, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, c->world);
    if (any_bad) {
        free(mem);
        return 0.0;
    }
    a.q = mem, a.k = a.q + nx, a.v = a.k + nx, a.o = a.v + nx;
    a.lse = a.o + nx;
    float *w = a.lse + n * KERNEL_H;
    ra_random_normal((uint64_t)rank, RA_STREAM_PROBE, 0, (int64_t)(3 * nx),
                     a.q);
    ra_random_normal((uint64_t)rank, RA_STREAM_ADDITIVE, 0, (int64_t)nw, w);
    for (size_t i = 0; i < nw; i++)
        w[i] *= 0.125f; /* keeps tanh away from saturation */
    const ra_additive add = {KERNEL_A, w, w + KERNEL_A * D, w + 2 * KERNEL_A * D};
    a.p.num.additive = &add;
    const double secs = probe_time(c->world, c->share, kernel_op, &a);
    double rate = secs > 0
                      ? ra_params_forward_flops(&a.s, &a.p, NULL) / secs
                      : 0.0,
           sum = 0.0;
    /* Per core: where a node holds more ranks than cores, each rank ran on
     * a share of one. Ranks that share cores unseen by MPI (fake nodes on
     * one machine) keep their rate per rank, which is what a plan of the
     * same allocation needs. */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && c->node_size > cpus)
        rate *= (double)c->node_size / (double)cpus;
    free(mem);
    MPI_Allreduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, c->world);
    return secs < 0 ? 0.0 : sum / P;
}

/* A one-token-per-rank forward on the communicator kernel_arg names. */
typedef struct {
    MPI_Comm comm;
    kernel_arg k;
} fixed_arg;

static int fixed_op(void *arg)
{
    fixed_arg *a = arg;
    kernel_arg *k = &a->k;
    return ra_call_forward(a->comm, &k->s, &k->p, NULL,
                           &(ra_qkv){k->q, k->k, k->v},
                           &(ra_out){k->o, k->lse, NULL}, NULL) == RA_OK
               ? 0 : -1;
}

/* The slowest rank's median seconds of the tiny call over comm (P ranks,
 * one token each); -1 when it failed. */
static double fixed_time(const probe_comms *c, MPI_Comm comm, int P)
{
    float mem[5 * KERNEL_H * 64] = {0};
    fixed_arg a = {comm, {.s = {.B = 1, .N = P, .M = P, .H = KERNEL_H,
                                .G = KERNEL_H, .D = 64, .Dv = 64}}};
    ra_params_default(&a.k.p);
    a.k.q = mem, a.k.k = mem + KERNEL_H * 64, a.k.v = mem + 2 * KERNEL_H * 64;
    a.k.o = mem + 3 * KERNEL_H * 64, a.k.lse = mem + 4 * KERNEL_H * 64;
    double t = probe_time(c->world, c->share, fixed_op, &a), worst = 0;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, c->world);
    return t < 0 ? -1.0 : worst;
}

void probe_fixed(const probe_comms *c, double *call, double *step)
{
    int P;
    MPI_Comm_size(c->world, &P);
    const double one = fixed_time(c, MPI_COMM_SELF, 1);
    const double all = P > 1 ? fixed_time(c, c->world, P) : one;
    *call = one > 0 ? one : 0.0;
    *step = P > 1 && one > 0 && all > one ? (all - one) / (P - 1) : 0.0;
}

/* ---- links and collectives ------------------------------------------------ */

typedef struct {
    MPI_Comm comm;
    int count;        /* floats per message or per peer */
    float *out, *in;
    int *counts;      /* count for each peer (reduce-scatter) */
    MPI_Op merge;     /* reduce-scatter's operation */
} comm_arg;

/* The floats of every rank's ring-step message. */
static int64_t step_count(void *ctx, int rank, int t)
{
    (void)rank, (void)t;
    return ((const comm_arg *)ctx)->count;
}

/* One ring step on the strategies' ring loop (bench_ring_run): send to
 * the right, receive from the left, both at once. */
static int step_op(void *arg)
{
    comm_arg *a = arg;
    const bench_ring ring = {1, step_count, a, a->out, a->in - a->out};
    int64_t sent = 0;
    return bench_ring_run(a->comm, "probe's ring step", &ring, &sent) == RA_OK
               ? 0 : -1;
}

static int alltoall_op(void *arg)
{
    comm_arg *a = arg;
    return MPI_Alltoall(a->out, a->count, MPI_FLOAT, a->in, a->count,
                        MPI_FLOAT, a->comm) == MPI_SUCCESS ? 0 : -1;
}

static int allgather_op(void *arg)
{
    comm_arg *a = arg;
    return MPI_Allgather(a->out, a->count, MPI_FLOAT, a->in, a->count,
                         MPI_FLOAT, a->comm) == MPI_SUCCESS ? 0 : -1;
}

/* A stand-in for the tree strategy's LSE merge (a sum): MPI chooses its
 * algorithm by the operation's commutativity and the sizes, not by what
 * it computes, and the merge is declared non-commutative. */
static void merge_stand_in(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    const float *a = in;
    float *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] += a[i];
}

static int reduce_scatter_op(void *arg)
{
    comm_arg *a = arg;
    MPI_Request req;
    return MPI_Ireduce_scatter(a->out, a->in, a->counts, MPI_FLOAT, a->merge,
                               a->comm, &req) == MPI_SUCCESS &&
                   MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS
               ? 0 : -1;
}

/* Sets up a on comm with buffers for count floats per peer; 0, or -1 when
 * comm has one rank (nothing to measure) or memory is short. */
static int comm_arg_make(comm_arg *a, MPI_Comm comm, int count)
{
    int k;
    MPI_Comm_size(comm, &k);
    *a = (comm_arg){comm, count, NULL, NULL, NULL, MPI_OP_NULL};
    if (k < 2)
        return -1;
    a->out = calloc((size_t)count * (size_t)k * 2, sizeof(float));
    a->in = a->out ? a->out + (size_t)count * (size_t)k : NULL;
    a->counts = malloc(sizeof(int) * (size_t)k);
    for (int i = 0; a->counts && i < k; i++)
        a->counts[i] = count;
    int bad = a->out == NULL || a->counts == NULL ||
              MPI_Op_create(merge_stand_in, 0, &a->merge) != MPI_SUCCESS,
        any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    return any_bad ? -1 : 0;
}

/* Frees what comm_arg_make made. */
static void comm_arg_free(comm_arg *a)
{
    if (a->merge != MPI_OP_NULL)
        MPI_Op_free(&a->merge);
    free(a->out);
    free(a->counts);
}

/* The link of comm's ring steps (this rank's view; zeros when not
 * measured): latency from the small message, bandwidth from the fit of the
 * small and the large one. */
static profile_link link_measure(MPI_Comm comm, double share)
{
    comm_arg a;
    profile_link l = {0, 0};
    if (comm == MPI_COMM_NULL || comm_arg_make(&a, comm, LINK_LARGE) != 0) {
        if (comm != MPI_COMM_NULL)
            comm_arg_free(&a);
        return l;
    }
    a.count = LINK_SMALL;
    const double t_small = probe_time(comm, share / 4, step_op, &a);
    a.count = LINK_LARGE;
    const double t_large = probe_time(comm, share, step_op, &a);
    comm_arg_free(&a);
    if (t_small < 0 || t_large <= t_small)
        return l;
    l.bandwidth = 4.0 * (LINK_LARGE - LINK_SMALL) / (t_large - t_small);
    l.latency = t_small - 4.0 * LINK_SMALL / l.bandwidth;
    if (l.latency < 0)
        l.latency = 0;
    return l;
}

/* The slowest measured link over the ranks of world (0: none measured). */
static profile_link link_worst(MPI_Comm world, profile_link mine)
{
    const int have = mine.bandwidth > 0;
    double in[2] = {have ? mine.latency : 0, have ? -mine.bandwidth : -1e300};
    double out[2];
    MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_MAX, world);
    return out[1] < -1e299 ? (profile_link){0, 0}
                           : (profile_link){out[0], -out[1]};
}

void probe_links(const probe_comms *c, profile_link *intra,
                 profile_link *inter)
{
    *intra = link_worst(c->world, link_measure(c->node, c->share));
    *inter = link_worst(c->world, link_measure(c->leaders, c->share));
}

/* Bytes per second per rank of op over comm (sent for all-to-all and
 * reduce-scatter, received for all-gather: count floats to or from each of
 * the k - 1 peers); the slowest over world, 0 when not measured anywhere. */
static double coll_measure(MPI_Comm world, MPI_Comm comm, double share,
                           probe_op op)
{
    comm_arg a;
    double rate = 0, worst;
    int k = 1;
    if (comm != MPI_COMM_NULL && comm_arg_make(&a, comm, COLL_FLOATS) == 0) {
        MPI_Comm_size(comm, &k);
        const double secs = probe_time(comm, share, op, &a);
        rate = secs > 0 ? 4.0 * COLL_FLOATS * (k - 1) / secs : 0;
    }
    if (comm != MPI_COMM_NULL)
        comm_arg_free(&a);
    double in = rate > 0 ? -rate : -1e300;
    MPI_Allreduce(&in, &worst, 1, MPI_DOUBLE, MPI_MAX, world);
    return worst < -1e299 ? 0.0 : -worst;
}

void probe_collectives(const probe_comms *c, ra_profile *p)
{
    p->alltoall_intra = coll_measure(c->world, c->node, c->share, alltoall_op);
    p->allgather_intra = coll_measure(c->world, c->node, c->share,
                                      allgather_op);
    p->alltoall_inter = coll_measure(c->world, c->leaders, c->share,
                                     alltoall_op);
    p->allgather_inter = coll_measure(c->world, c->leaders, c->share,
                                      allgather_op);
    p->reduce_scatter_intra = coll_measure(c->world, c->node, c->share,
                                           reduce_scatter_op);
    p->reduce_scatter_inter = coll_measure(c->world, c->leaders, c->share,
                                           reduce_scatter_op);
}

/* ---- the machine ------------------------------------------------------------ */

/* Rank 0: the processor names of the node leaders, comma-separated. */
static void probe_hosts(const probe_comms *c, char *hosts, size_t cap)
{
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0, k = 0, r = 0;
    hosts[0] = '\0';
    if (c->leaders == MPI_COMM_NULL)
        return;
    MPI_Get_processor_name(name, &len);
    MPI_Comm_size(c->leaders, &k);
    MPI_Comm_rank(c->leaders, &r);
    char *all = r == 0 ? malloc((size_t)k * MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all,
               MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, c->leaders);
    for (int i = 0; all && i < k; i++) {
        const size_t used = strlen(hosts);
        snprintf(hosts + used, cap - used, "%s%s", i ? "," : "",
                 all + (size_t)i * MPI_MAX_PROCESSOR_NAME);
    }
    free(all);
}

void probe_machine(const probe_comms *c, ra_profile *p)
{
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    const double mine = pages > 0 && size > 0 ? (double)pages * size : 0;
    double least;
    int most_per_node;
    MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE, MPI_MIN, c->world);
    MPI_Allreduce(&c->node_size, &most_per_node, 1, MPI_INT, MPI_MAX,
                  c->world);
    p->mem_per_node = (int64_t)least;
    p->nodes = c->nodes;
    MPI_Comm_size(c->world, &p->ranks);
    p->ranks_per_node = most_per_node;
    p->threads = 1;
    probe_hosts(c, p->hosts, sizeof p->hosts);
}
