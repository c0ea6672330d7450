/* bench_ring.c: the comm-only rings that bench and probe time
 * (bench_measure.h), run by the one ring loop of the strategies
 * (ring_loop.c): the same posting of a step's receive and send and the
 * same wait, with nothing to compute between them. */
#include "bench_measure.h"
#include "internal.h"
#include "strategy.h"

/* A message goes as whole parts of RING_PART floats (a datatype of its
 * own: MPI counts are int) in pair slot 0 and the rest in slot 1, so that
 * no count overflows whatever the block. */
enum { RING_PART = 1 << 30, RING_TAG = 11 };

typedef struct {
    MPI_Comm comm;
    const bench_ring *ring;
    const char *name;
    int r, left, right;
    int64_t sent; /* floats this rank sent */
} ring_ctx;

/* Posts n floats at x to or from peer (send: 1) as whole parts and the
 * rest, into the step's requests of that direction. */
static ra_status post_floats(const ring_ctx *x, int t, float *at, int64_t n,
                             int send, ring_reqs *rq)
{
    const int base = send ? RING_PAIRS : 0, peer = send ? x->right : x->left;
    const int64_t whole = n / RING_PART;
    const int rest = (int)(n % RING_PART);
    int ok = 1;
    if (whole > 0) {
        MPI_Datatype *type = &rq->types[base];
        ok = MPI_Type_contiguous(RING_PART, MPI_FLOAT, type) == MPI_SUCCESS &&
             MPI_Type_commit(type) == MPI_SUCCESS &&
             (send ? MPI_Isend(at, (int)whole, *type, peer, RING_TAG, x->comm,
                               &rq->req[base])
                   : MPI_Irecv(at, (int)whole, *type, peer, RING_TAG, x->comm,
                               &rq->req[base])) == MPI_SUCCESS;
    }
    float *tail = at + whole * RING_PART;
    if (ok && rest > 0)
        ok = (send ? MPI_Isend(tail, rest, MPI_FLOAT, peer, RING_TAG + 1,
                               x->comm, &rq->req[base + 1])
                   : MPI_Irecv(tail, rest, MPI_FLOAT, peer, RING_TAG + 1,
                               x->comm, &rq->req[base + 1])) == MPI_SUCCESS;
    return ok ? RA_OK
              : ra_error_set(RA_ERR_MPI, "%s: step %d: posting a transfer "
                             "failed", x->name, t);
}

/* Step t: the left neighbour's block into one half of the buffer, this
 * rank's from the other half to the right. */
static ra_status ring_post(void *ctx, int t, ring_reqs *rq)
{
    ring_ctx *x = ctx;
    const bench_ring *g = x->ring;
    float *out = g->buf + (t & 1) * g->cap;
    float *in = g->buf + ((t + 1) & 1) * g->cap;
    const int64_t sc = g->count(g->ctx, x->r, t);
    ra_status st = post_floats(x, t, in, g->count(g->ctx, x->left, t), 0, rq);
    if (st == RA_OK)
        st = post_floats(x, t, out, sc, 1, rq);
    x->sent += sc;
    return st;
}

/* Nothing is computed: the ring measures its transfers alone. */
static void ring_visit(void *ctx, int t, ring_reqs *rq)
{
    (void)ctx, (void)t, (void)rq;
}

ra_status bench_ring_run(MPI_Comm comm, const char *name,
                         const bench_ring *ring, int64_t *sent)
{
    int P = 1, r = 0;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    ra_params p; /* no callbacks, no checkpoints */
    ra_params_default(&p);
    p.exec.stall_timeout = 0; /* plain waits: a measurement of the link
                                 alone (the command line's phase
                                 watchdog ends a stalled job) */
    ra_timing tm = {0};
    strat_call c = {.comm = comm, .P = P, .r = r, .name = name,
                    .params = &p, .tm = &tm};
    ring_ctx x = {comm, ring, name, r, (r - 1 + P) % P, (r + 1) % P, 0};
    ring_loop lp = {.steps = ring->steps, .left = x.left, .right = x.right,
                    .post = ring_post, .visit = ring_visit, .ctx = &x,
                    .total = ring->steps};
    const ra_status st = ring_loop_run(&c, &lp);
    *sent = x.sent;
    return st;
}
