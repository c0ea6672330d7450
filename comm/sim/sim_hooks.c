/* sim_hooks.c: what runs where comm/ calls the kernels and the block
 * allocator in ringattn-sim. The linker sends those calls here (--wrap,
 * launch/sim/sim.cmake; docs/DESIGN.md, "The simulated build"):
 *   exact mode: straight on to the real functions;
 *   at scale:   a kernel call becomes the time this machine's measured
 *               rate gives for its visible pairs (smpi_execute), and the
 *               float arrays of 1 MiB or more in a carved block are folded
 *               (mapped onto one file that all ranks share, touched pages
 *               only; their contents are meaningless), so that 1024 ranks
 *               fit in one machine's memory. Positions, ids and plans stay
 *               private: the ring's control flow is the real one. */
#define _GNU_SOURCE /* memfd_create */
#include <mpi.h>
#include <smpi/smpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backward.h"
#include "band.h"
#include "kernel.h"
#include "sim_hooks.h"

void __real_ra_kernel_forward_block(const ra_block *blk, const ra_fwd_ops *ops,
                                    ra_workspace *ws);
void __real_ra_kernel_backward_block(const ra_block *blk,
                                     const ra_bwd_operands *x,
                                     ra_bwd_workspace *ws,
                                     ra_progress_fn progress,
                                     void *progress_ctx);
void *__real_ra_carve(ra_carver *c, int64_t count, size_t elem);
void *__real_ra_carve_alloc(void (*fill)(void *ctx, ra_carver *c), void *ctx);
void __real_ra_carve_free(void *block);

/* Set by every rank before its first call, the same on all. */
static sim_cost cost;
/* Per rank, by rank of MPI_COMM_WORLD: at scale SMPI runs every rank on
 * one thread (contexts/factory:raw), so thread-local would be shared. */
typedef struct {
    int calls_in_call;
    double injected;
} rank_state;
static rank_state *ranks;

static rank_state *mine(void)
{
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return &ranks[r];
}

ra_status sim_hooks_set(const sim_cost *c)
{
    int P = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    cost = *c;
    if (!ranks && !(ranks = calloc((size_t)P, sizeof *ranks)))
        return ra_error_set(RA_ERR_NOMEM, "the hooks' state of %d ranks", P);
    return RA_OK;
}

void sim_hooks_call_begin(void) { mine()->calls_in_call = 0; }
int sim_hooks_at_scale(void) { return cost.at_scale; }
double sim_hooks_injected(void) { return mine()->injected; }

/* ---- visible pairs of one kernel call ------------------------------------ */

/* Positions (of keys, or queries) first + stride * t, t in [0, len): the
 * layouts give each rank at most two such runs (ra_layout_slice); a
 * gathered set may hold more. */
typedef struct {
    int64_t first, stride, len;
} key_run;
enum { SIM_RUNS = 16 };

/* kpos[0..m) as strided runs into r; their count, or -1 past SIM_RUNS. */
static int key_runs(const int64_t *kpos, int64_t m, key_run *r)
{
    int count = 0;
    for (int64_t j = 0; j < m;) {
        if (count == SIM_RUNS)
            return -1;
        const int64_t stride = j + 1 < m ? kpos[j + 1] - kpos[j] : 1;
        int64_t end = j + 1;
        while (end < m && kpos[end] - kpos[end - 1] == stride)
            end++;
        r[count++] = (key_run){kpos[j], stride, end - j};
        j = end;
    }
    return count;
}

/* Members of run r in [x, y]. */
static int64_t run_count(const key_run *r, int64_t x, int64_t y)
{
    const int64_t last = r->first + r->stride * (r->len - 1);
    if (y < r->first || x > last || x > y)
        return 0;
    const int64_t lo =
        x <= r->first ? 0 : (x - r->first + r->stride - 1) / r->stride;
    const int64_t hi = y >= last ? r->len - 1 : (y - r->first) / r->stride;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* Sum of floor((a i + b) / m) over i in [0, n), for a, b >= 0, m > 0:
 * the whole parts of a / m and b / m summed directly, then the same sum
 * with the axes swapped, until the line stays below m. */
static double floor_sum(int64_t n, int64_t m, int64_t a, int64_t b)
{
    double sum = 0;
    while (n > 0) {
        if (a >= m) {
            sum += (double)(a / m) * (double)n * (double)(n - 1) / 2;
            a %= m;
        }
        if (b >= m) {
            sum += (double)(b / m) * (double)n;
            b %= m;
        }
        const int64_t top = a * n + b;
        if (top < m)
            break;
        n = top / m;
        b = top % m;
        const int64_t swap = m;
        m = a;
        a = swap;
    }
    return sum;
}

/* The first t in [0, n) with x0 + t s >= v, or n. */
static int64_t first_at_least(int64_t x0, int64_t s, int64_t v, int64_t n)
{
    if (x0 >= v)
        return 0;
    const int64_t t = (v - x0 + s - 1) / s;
    return t < n ? t : n;
}

/* Keys of run r at or below p + c, summed over the positions p of query
 * run q: none below r's first key, all from its last, and between them
 * floor((p + c - first) / stride) + 1, a floor_sum. */
static double run_sum(const key_run *q, int64_t c, const key_run *r)
{
    const int64_t x0 = q->first + c, s = q->stride;
    const int64_t last = r->first + r->stride * (r->len - 1);
    const int64_t t0 = first_at_least(x0, s, r->first, q->len);
    const int64_t t1 = first_at_least(x0, s, last, q->len);
    double sum = (double)r->len * (double)(q->len - t1);
    if (t1 > t0)
        sum += (double)(t1 - t0) +
               floor_sum(t1 - t0, r->stride, s, x0 + t0 * s - r->first);
    return sum;
}

/* positions (NULL: 0 .. n - 1) as increasing runs into r; their count, or
 * -1 when they are not (more than SIM_RUNS, or not increasing). */
static int pos_runs(const int64_t *pos, int64_t n, key_run *r)
{
    if (!pos) {
        r[0] = (key_run){0, 1, n};
        return n > 0;
    }
    const int count = key_runs(pos, n, r);
    for (int k = 0; k < count; k++)
        if (r[k].stride < 1)
            return -1;
    return count;
}

/* Visible (query, key) pairs of one batch and head of blk under its causal
 * and window rules (the sim's inputs have no lengths nor segments): keys
 * in [p + lo, p + hi] for each query p, counted run by run in closed form
 * when positions run (the layouts'), else query by query. */
static double block_pairs(const ra_block *blk)
{
    const ra_mask *mk = &blk->mask;
    const ra_band band =
        ra_band_make(mk->causal, mk->window, mk->left, mk->right, mk->diag);
    key_run qr[SIM_RUNS], kr[SIM_RUNS];
    const int nq = pos_runs(mk->qpos, blk->n, qr);
    const int nk = pos_runs(mk->kpos, blk->m, kr);
    double pairs = 0;
    if (band.lo > band.hi)
        return 0;
    for (int i = 0; i < nq && nk >= 0; i++)
        for (int k = 0; k < nk; k++)
            pairs += run_sum(&qr[i], band.hi, &kr[k]) -
                     run_sum(&qr[i], band.lo - 1, &kr[k]);
    for (int64_t i = 0; (nq < 0 || nk < 0) && i < blk->n; i++) {
        const int64_t p = mk->qpos ? mk->qpos[i] : i;
        const int64_t x = p + band.lo, y = p + band.hi;
        for (int k = 0; k < nk; k++)
            pairs += (double)run_count(&kr[k], x, y);
        if (nk < 0)
            pairs += (double)(ra_lower_bound(mk->kpos, blk->m, y + 1) -
                              ra_lower_bound(mk->kpos, blk->m, x));
    }
    return pairs;
}

/* The injected time of one kernel call on blk (factor: 1 forward,
 * SIM_BWD_FACTOR backward), plus the step cost after a call's first,
 * then the caller's progress hook once, which the real kernel runs
 * between its tiles: the all-gather posts its chained sends there
 * (comm/allgather.c), and once per call keeps them ahead of the ranks
 * that need them while a block's transfer is shorter than a call. More
 * calls of the hook cost the simulation (each tests all of a rank's
 * transfers) and change no simulated time (docs/SIMULATION.md). */
static void inject(const ra_block *blk, double factor, ra_progress_fn progress,
                   void *progress_ctx)
{
    double t = block_pairs(blk) * (double)(blk->B * blk->H) *
               cost.pair_head_seconds * factor;
    rank_state *me = mine();
    if (me->calls_in_call++ > 0)
        t += cost.step_seconds;
    me->injected += t;
    if (t > 0)
        smpi_execute(t);
    if (progress)
        progress(progress_ctx);
}

void __wrap_ra_kernel_forward_block(const ra_block *blk, const ra_fwd_ops *ops,
                                    ra_workspace *ws)
{
    if (cost.at_scale)
        inject(blk, 1.0, ops->progress, ops->progress_ctx);
    else
        __real_ra_kernel_forward_block(blk, ops, ws);
}

void __wrap_ra_kernel_backward_block(const ra_block *blk,
                                     const ra_bwd_operands *x,
                                     ra_bwd_workspace *ws,
                                     ra_progress_fn progress,
                                     void *progress_ctx)
{
    if (cost.at_scale)
        inject(blk, SIM_BWD_FACTOR, progress, progress_ctx);
    else
        __real_ra_kernel_backward_block(blk, x, ws, progress, progress_ctx);
}

/* ---- folded blocks --------------------------------------------------------- */

/* The float arrays of a block being sized, as [start, stop) byte offsets:
 * those SMPI folds. Arrays below SIM_FOLD_MIN stay private. */
enum { SIM_FOLDS = 16, SIM_FOLD_MIN = 1 << 20 };
static struct { /* no MPI call (no switch of rank) while recording */
    int recording, count;
    size_t off[2 * SIM_FOLDS];
} fold;

void *__wrap_ra_carve(ra_carver *c, int64_t count, size_t elem)
{
    const int64_t at = c->used;
    void *out = __real_ra_carve(c, count, elem);
    const int64_t bytes = c->used < 0 ? 0 : count * (int64_t)elem;
    if (!fold.recording || c->base || elem > sizeof(float) ||
        bytes < SIM_FOLD_MIN)
        return out;
    /* SMPI takes disjoint ranges apart: one that starts where the last
     * ended extends it */
    if (fold.count > 0 && fold.off[2 * fold.count - 1] == (size_t)at) {
        fold.off[2 * fold.count - 1] = (size_t)(at + bytes);
    } else if (fold.count < SIM_FOLDS) {
        fold.off[2 * fold.count] = (size_t)at;
        fold.off[2 * fold.count + 1] = (size_t)(at + bytes);
        fold.count++;
    }
    return out;
}

/* The file folded arrays are mapped onto, window after window: SMPI's own
 * folding (SMPI_PARTIAL_SHARED_MALLOC) maps with MAP_POPULATE, a page-table
 * entry for every page of every rank's block when it is allocated (the
 * all-gather's whole K/V on each rank: most of its simulation's time, and
 * terabytes of mappings at 1024 ranks); here a page is mapped when touched.
 * Touched pages of the file are all the memory folded arrays take. */
enum { SIM_FOLD_FILE = 256 << 20 };
static int fold_fd = -1;

static int fold_file(void)
{
    if (fold_fd < 0) {
        fold_fd = memfd_create("ringattn-sim-fold", MFD_CLOEXEC);
        if (fold_fd >= 0 && ftruncate(fold_fd, SIM_FOLD_FILE) != 0) {
            close(fold_fd);
            fold_fd = -1;
        }
    }
    return fold_fd;
}

/* Maps [at, stop) of block (page-aligned) onto the fold file; 0 or -1. */
static int fold_map(char *block, size_t at, size_t stop)
{
    for (; at < stop; at += SIM_FOLD_FILE) {
        const size_t len = stop - at < SIM_FOLD_FILE ? stop - at
                                                     : SIM_FOLD_FILE;
        if (fold_file() < 0 ||
            mmap(block + at, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, fold_fd, 0) == MAP_FAILED)
            return -1;
    }
    return 0;
}

/* A block of bytes, reserved but backed only where touched, its recorded
 * arrays (their whole pages) folded; its mapping's length is kept in the
 * page before it. NULL when mapping failed. */
static void *lazy_block(size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t total = page + bytes;
    char *map = mmap(NULL, total, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    *(size_t *)map = total;
    for (int i = 0; i < fold.count; i++)
        if (fold_map(map + page, (fold.off[2 * i] + page - 1) / page * page,
                     fold.off[2 * i + 1] / page * page) != 0) {
            munmap(map, total);
            return NULL;
        }
    return map + page;
}

void *__wrap_ra_carve_alloc(void (*fill)(void *ctx, ra_carver *c), void *ctx)
{
    if (!cost.at_scale)
        return __real_ra_carve_alloc(fill, ctx);
    ra_carver c = {NULL, 0};
    fold.recording = 1;
    fold.count = 0;
    fill(ctx, &c);
    fold.recording = 0;
    if (c.used < 0)
        return NULL;
    void *block = lazy_block((size_t)(c.used ? c.used : RA_CARVE_ALIGN));
    if (!block)
        return NULL;
    c = (ra_carver){block, 0};
    fill(ctx, &c);
    return block;
}

void __wrap_ra_carve_free(void *block)
{
    if (!cost.at_scale) {
        __real_ra_carve_free(block);
    } else if (block) {
        char *map = (char *)block - sysconf(_SC_PAGESIZE);
        munmap(map, *(size_t *)map);
    }
}

/* ---- folded transfers ------------------------------------------------------ */

/* At scale a transfer of SIM_WIRE_MIN bytes or more, of floats or of a
 * derived type (the ring's K/V rows), moves as plain bytes between folded
 * scratch blocks: SMPI times it by its size and copies nothing (it skips
 * the copy between shared blocks, and a derived type's packing, a memmove
 * of the whole block per message, would dominate the run). Its contents
 * are meaningless at scale anyway; ids and positions (MPI_INT64_T) and
 * small messages move as they are. */
enum { SIM_WIRE_MIN = 64 << 10, SIM_SCRATCH = 8 };
/* Folded blocks shared by every rank: pool 0 the transfers', pool 1 + i
 * the driver's tensor i (sim_buffer_alloc). */
static struct {
    void *block[SIM_SCRATCH];
    size_t bytes[SIM_SCRATCH];
} scratch[1 + SIM_SLOTS];

int __real_MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest,
                     int tag, MPI_Comm comm, MPI_Request *req);
int __real_MPI_Irecv(void *buf, int count, MPI_Datatype type, int src, int tag,
                     MPI_Comm comm, MPI_Request *req);

/* A folded block of pool at least bytes long (a pool's blocks are only
 * added: a transfer still in flight keeps reading an old one), or NULL. */
static void *scratch_of(int pool, size_t bytes)
{
    int i = 0;
    while (i < SIM_SCRATCH && scratch[pool].block[i] &&
           scratch[pool].bytes[i] < bytes)
        i++;
    if (i == SIM_SCRATCH)
        return NULL;
    if (!scratch[pool].block[i]) {
        scratch[pool].block[i] = SMPI_SHARED_MALLOC(bytes);
        scratch[pool].bytes[i] = bytes;
    }
    return scratch[pool].block[i];
}

/* The bytes a transfer of count x type folds into, or 0: it moves as is. */
static size_t folded_bytes(int count, MPI_Datatype type)
{
    int size = 0;
    if (!cost.at_scale || type == MPI_INT64_T ||
        MPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0)
        return 0;
    const size_t bytes = (size_t)count * (size_t)size;
    return bytes >= SIM_WIRE_MIN && bytes <= INT32_MAX ? bytes : 0;
}

/* Where a transfer of *count x *type at buf moves: buf as it is, or a
 * folded scratch block, *count bytes. */
static void *fold_transfer(void *buf, int *count, MPI_Datatype *type)
{
    const size_t bytes = folded_bytes(*count, *type);
    void *at = bytes ? scratch_of(0, bytes) : NULL;
    if (!at)
        return buf;
    *count = (int)bytes;
    *type = MPI_BYTE;
    return at;
}

int __wrap_MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest,
                     int tag, MPI_Comm comm, MPI_Request *req)
{
    const void *at = fold_transfer((void *)buf, &count, &type);
    return __real_MPI_Isend(at, count, type, dest, tag, comm, req);
}

int __wrap_MPI_Irecv(void *buf, int count, MPI_Datatype type, int src, int tag,
                     MPI_Comm comm, MPI_Request *req)
{
    void *at = fold_transfer(buf, &count, &type);
    return __real_MPI_Irecv(at, count, type, src, tag, comm, req);
}

void sim_hooks_release(void)
{
    for (int p = 0; p <= SIM_SLOTS; p++)
        for (int i = 0; i < SIM_SCRATCH; i++)
            if (scratch[p].block[i])
                SMPI_SHARED_FREE(scratch[p].block[i]);
    memset(scratch, 0, sizeof scratch);
    if (fold_fd >= 0)
        close(fold_fd);
    fold_fd = -1;
    free(ranks);
    ranks = NULL;
    sim_waits_release();
}

void *sim_buffer_alloc(size_t bytes, int slot, int folded)
{
    if (folded)
        return scratch_of(1 + slot, bytes ? bytes : 1);
    return calloc(bytes ? bytes : 1, 1);
}

void sim_buffer_free(void *p, int folded)
{
    if (!folded)
        free(p);
}
