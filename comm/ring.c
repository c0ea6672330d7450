/* ring.c: the ring of ranks around ra_forward.
 *
 * Rank r holds its query slice for the whole call and the K/V block that
 * originated at rank (r - t) mod P during step t. Before computing on that
 * block it posts the receive of the next block from r - 1 and the send of
 * the current one to r + 1 (K and V packed in one message, two buffers
 * alternating), and polls both requests between tiles so that the transfer
 * moves while the kernel runs: Open MPI has no progress thread. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernel.h"

/* OpenBLAS's thread control; single-threaded BLAS inside our own threads. */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

enum { RING_TAG = 7301 };

/* Requests of one ring step, polled between tiles. */
typedef struct {
    MPI_Request req[2];
    int pending;
} ring_step;

static void ring_poll(void *ctx)
{
    ring_step *st = ctx;
    if (st->pending) {
        int done = 0;
        MPI_Testall(2, st->req, &done, MPI_STATUSES_IGNORE);
        st->pending = !done;
    }
}

/* Floats of the packed K/V block that originated at rank src. */
static int64_t block_floats(const ra_shape *s, int src, int P)
{
    return s->B * ra_shard_range(s->M, src, P).count * s->G * (s->D + s->Dv);
}

/* Packs this rank's k (B, m, G, D) and v (B, m, G, Dv) into buf. */
static void pack_kv(const ra_shape *s, int64_t m, const float *k,
                    const float *v, float *buf)
{
    size_t nk = (size_t)(s->B * m * s->G * s->D);
    memcpy(buf, k, nk * sizeof *buf);
    memcpy(buf + nk, v, (size_t)(s->B * m * s->G * s->Dv) * sizeof *buf);
}

/* Makes every rank agree on st: the worst (largest) status wins, so that a
 * failure on one rank never leaves the others waiting in the ring. */
static ra_status agree(MPI_Comm comm, ra_status st)
{
    int mine = (int)st, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return RA_ERR_MPI;
    if (all != RA_OK && st == RA_OK)
        ra_error_set((ra_status)all, "another rank failed: %s",
                     ra_status_str((ra_status)all));
    return (ra_status)all;
}

ra_status ra_forward_timed(MPI_Comm user_comm, const ra_shape *shape,
                           const ra_params *params, const float *q,
                           const float *k, const float *v, float *o,
                           float *lse, ra_timing *timing)
{
    double t_start = MPI_Wtime();
    ra_timing tm = {0};
    ra_status st = ra_shape_check(shape);
    if (st != RA_OK)
        return st;

    MPI_Comm comm;
    if (MPI_Comm_dup(user_comm, &comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: MPI_Comm_dup failed");
    int P, r;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    const int left = (r - 1 + P) % P, right = (r + 1) % P;

    int64_t bq, bkv;
    ra_params_tiles(params, shape, &bq, &bkv);
    const int threads = ra_params_threads(params);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    /* Only the thread that called MPI may poll, and only if MPI allows it
     * while other threads run. */
    const int may_poll = !params->no_poll &&
                         (threads == 1 || level >= MPI_THREAD_FUNNELED);

    const ra_range qr = ra_shard_range(shape->N, r, P);
    const ra_range kr = ra_shard_range(shape->M, r, P);
    const int64_t n = qr.count;
    const int64_t mmax = ra_shard_range(shape->M, 0, P).count;
    const int64_t buf_floats = block_floats(shape, 0, P);

    float *buf[2] = {NULL, NULL};
    int64_t *qpos = NULL, *kpos = NULL;
    ra_workspace *ws = NULL;
    if (buf_floats > INT_MAX) {
        st = ra_error_set(RA_ERR_ARG,
                          "ring: a K/V block of %lld floats exceeds one MPI "
                          "message (INT_MAX elements); use more ranks",
                          (long long)buf_floats);
    } else {
        buf[0] = malloc((size_t)buf_floats * sizeof(float) + 64);
        buf[1] = malloc((size_t)buf_floats * sizeof(float) + 64);
        qpos = malloc((size_t)(n + 1) * sizeof *qpos);
        kpos = malloc((size_t)(mmax + 1) * sizeof *kpos);
        ws = ra_workspace_create(threads, bq, bkv, shape->Dv);
        if (!buf[0] || !buf[1] || !qpos || !kpos || !ws)
            st = ra_error_set(RA_ERR_NOMEM,
                              "ring: cannot allocate the ring buffers");
    }
    st = agree(comm, st);
    if (st != RA_OK)
        goto cleanup;

    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);

    for (int64_t i = 0; i < n; i++)
        qpos[i] = qr.start + i;
    pack_kv(shape, kr.count, k, v, buf[0]);
    ra_state_reset(shape->B, n, shape->H, shape->Dv, o, lse);

    ra_block blk = {
        .B = shape->B, .n = n, .H = shape->H, .G = shape->G,
        .D = shape->D, .Dv = shape->Dv,
        .alpha = (float)(ra_params_scale(params, shape) * M_LOG2E),
        .block_q = bq, .block_kv = bkv,
        .mask = {.causal = params->causal, .diag = shape->M - shape->N,
                 .qpos = qpos, .kpos = kpos},
    };
    for (int t = 0; t < P && st == RA_OK; t++) {
        const int src = (r - t + P) % P, next = (r - t - 1 + P) % P;
        const float *cur = buf[t & 1];
        const ra_range blk_range = ra_shard_range(shape->M, src, P);
        ring_step step = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL}, 0};
        if (t + 1 < P) {
            int rc = MPI_Irecv(buf[(t + 1) & 1], (int)block_floats(shape, next, P),
                               MPI_FLOAT, left, RING_TAG, comm, &step.req[0]);
            if (rc == MPI_SUCCESS)
                rc = MPI_Isend(cur, (int)block_floats(shape, src, P), MPI_FLOAT,
                               right, RING_TAG, comm, &step.req[1]);
            if (rc != MPI_SUCCESS) {
                st = ra_error_set(RA_ERR_MPI, "ring: posting step %d failed", t);
                break;
            }
            step.pending = 1;
        }
        blk.m = blk_range.count;
        for (int64_t j = 0; j < blk.m; j++)
            kpos[j] = blk_range.start + j;
        const float *kb = cur;
        const float *vb = cur + shape->B * blk.m * shape->G * shape->D;

        double t0 = MPI_Wtime();
        ra_kernel_forward_block(&blk, q, kb, vb, o, lse, ws,
                                may_poll ? ring_poll : NULL, &step);
        double t1 = MPI_Wtime();
        if (step.pending &&
            MPI_Waitall(2, step.req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            st = ra_error_set(RA_ERR_MPI, "ring: step %d transfer failed", t);
        double t2 = MPI_Wtime();
        tm.compute += t1 - t0;
        tm.comm_wait += t2 - t1;
        if (t + 1 < P)
            tm.bytes_sent += block_floats(shape, src, P) * (int64_t)sizeof(float);
    }
    openblas_set_num_threads(blas_threads);

cleanup:
    free(buf[0]);
    free(buf[1]);
    free(qpos);
    free(kpos);
    ra_workspace_free(ws);
    MPI_Comm_free(&comm);
    tm.total = MPI_Wtime() - t_start;
    if (timing)
        *timing = tm;
    return st;
}

ra_status ra_forward(MPI_Comm comm, const ra_shape *shape,
                     const ra_params *params, const float *q, const float *k,
                     const float *v, float *o, float *lse)
{
    return ra_forward_timed(comm, shape, params, q, k, v, o, lse, NULL);
}
