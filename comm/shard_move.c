/* shard_move.c: ra_shard_move, a sequence's rows moved between two cuts
 * over the ranks (a data loader's contiguous shards into the layout a
 * call computes in, and its outputs back). Which rank holds which token
 * is ra_layout_slice's rule; this file only routes rows by it. */
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"

/* Where a move's rows go: for each of this rank's rows under one cut,
 * the rank that holds it under the other (rank[i]) and its place among
 * the rows this rank exchanges with that rank (slot[i]); count[r] rows
 * in all with rank r, at displ[r] rows (times outer) in the buffer. */
typedef struct {
    int *rank, *count, *displ;
    int64_t *slot;
} move_route;

/* The rank whose slice holds position p (-1: none). */
static int slice_owner(const ra_slice *sl, int P, int64_t p)
{
    for (int r = 0; r < P; r++)
        for (int i = 0; i < sl[r].nruns; i++) {
            const ra_run *u = &sl[r].run[i];
            const int64_t d = p - u->start;
            if (d >= 0 && d % u->stride == 0 && d / u->stride < u->count)
                return r;
        }
    return -1;
}

/* Routes the rows of mine (this rank's slice under one cut) to their
 * ranks under the other cut (other[0 .. P)). */
static void route_make(move_route *rt, const ra_slice *mine,
                       const ra_slice *other, int P, int64_t outer)
{
    memset(rt->count, 0, (size_t)P * sizeof *rt->count);
    for (int64_t i = 0; i < mine->count; i++) {
        const int r = slice_owner(other, P, ra_slice_pos(mine, i));
        rt->rank[i] = r;
        rt->slot[i] = rt->count[r]++;
    }
    for (int r = 0, at = 0; r < P; r++) {
        rt->displ[r] = at;
        at += rt->count[r] * (int)outer;
    }
    for (int r = 0; r < P; r++)
        rt->count[r] *= (int)outer;
}

/* Buffer row of (o, i): rank-major, then outer, then slot. */
static int64_t route_row(const move_route *rt, int64_t outer, int64_t o,
                         int64_t i)
{
    const int r = rt->rank[i];
    return rt->displ[r] + o * (rt->count[r] / outer) + rt->slot[i];
}

/* A watched wait's limit and whether it gave up (a transfer is then
 * still in flight). */
typedef struct {
    double timeout;
    int stalled;
} move_watch;

/* Waits for req, giving up after timeout seconds without completion
 * (0: MPI_Wait). ctx is a move_watch. */
static ra_status move_wait(void *ctx, MPI_Request *req, const char *phase)
{
    move_watch *w = ctx;
    const double timeout = w->timeout;
    if (!(timeout > 0))
        return MPI_Wait(req, MPI_STATUS_IGNORE) == MPI_SUCCESS
                   ? RA_OK
                   : ra_error_set(RA_ERR_MPI, "ra_shard_move: %s failed",
                                  phase);
    const double since = MPI_Wtime();
    for (int done = 0;;) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "ra_shard_move: %s failed",
                                phase);
        if (done)
            return RA_OK;
        if (MPI_Wtime() - since > timeout && (w->stalled = 1))
            return ra_error_set(RA_ERR_MPI, "ra_shard_move: stalled for "
                                "%g s at %s (stall_timeout)", timeout,
                                phase);
        sched_yield();
    }
}

/* Whether layout is one ra_layout_slice cuts by. */
static int layout_resolved(ra_layout layout)
{
    return layout == RA_LAYOUT_CONTIGUOUS || layout == RA_LAYOUT_ZIGZAG ||
           layout == RA_LAYOUT_STRIPED || layout == RA_LAYOUT_BALANCED;
}

/* The local checks of spec on this rank; the cuts' slices of every rank
 * in from[0 .. P) and to[0 .. P). */
static ra_status spec_check(const ra_shard_move_spec *s, int rank, int P,
                            ra_slice *from, ra_slice *to)
{
    if (!s)
        return ra_error_set(RA_ERR_ARG, "ra_shard_move: spec is NULL");
    if (!layout_resolved(s->from) || !layout_resolved(s->to))
        return ra_error_set(RA_ERR_ARG, "ra_shard_move: layout %s: "
                            "expected contiguous, zigzag, striped or "
                            "balanced (ra_exec_layout resolves auto)",
                            ra_layout_name(layout_resolved(s->from)
                                               ? s->to : s->from));
    if (s->len < 0 || s->outer < 0 || s->row_bytes < 0 ||
        s->row_bytes > INT_MAX || !(s->stall_timeout >= 0))
        return ra_error_set(RA_ERR_ARG, "ra_shard_move: len %lld, outer "
                            "%lld, row_bytes %lld, stall_timeout %g: "
                            "expected len, outer >= 0, 0 <= row_bytes <= "
                            "INT_MAX, stall_timeout >= 0",
                            (long long)s->len, (long long)s->outer,
                            (long long)s->row_bytes, s->stall_timeout);
    for (int r = 0; r < P; r++) {
        from[r] = ra_layout_slice(s->from, s->num, s->len, r, P);
        to[r] = ra_layout_slice(s->to, s->num, s->len, r, P);
    }
    const int64_t have[2] = {s->src_rows, s->dst_rows},
                  want[2] = {from[rank].count, to[rank].count};
    for (int i = 0; i < 2; i++)
        if (have[i] != want[i])
            return ra_error_set(RA_ERR_ARG, "ra_shard_move: rank %d holds "
                                "%lld rows where layout %s gives it %lld "
                                "of %lld", rank, (long long)have[i],
                                ra_layout_name(i ? s->to : s->from),
                                (long long)want[i], (long long)s->len);
    const int64_t rows = ra_mul_checked(s->len, s->outer);
    if (rows < 0 || rows > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "ra_shard_move: len %lld times "
                            "outer %lld rows exceed an MPI count",
                            (long long)s->len, (long long)s->outer);
    return RA_OK;
}

/* What every rank must pass alike (the same fields whatever spec is). */
static void spec_fingerprint(ra_fingerprint *fp, const ra_shard_move_spec *s)
{
    const ra_shard_move_spec none = {0};
    const ra_numerics *num = s ? s->num : NULL;
    s = s ? s : &none;
    ra_fp_int(fp, "from", s->from);
    ra_fp_int(fp, "to", s->to);
    ra_fp_int(fp, "len", s->len);
    ra_fp_int(fp, "outer", s->outer);
    ra_fp_int(fp, "row_bytes", s->row_bytes);
    ra_fp_int(fp, "num.causal", num ? num->causal : 0);
    ra_fp_int(fp, "num.window", num ? num->window : 0);
    ra_fp_int(fp, "num.window_left", num && num->window ? num->window_left
                                                         : 0);
    ra_fp_int(fp, "num.window_right", num && num->window
                                          ? num->window_right : 0);
}

/* Copies rows between an (outer, rows, row_bytes) array and the send or
 * receive buffer (to_buffer: array into buffer). */
static void rows_copy(const move_route *rt, const ra_shard_move_spec *s,
                      int64_t rows, char *array, char *buf, int to_buffer)
{
    const size_t w = (size_t)s->row_bytes;
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t i = 0; i < rows; i++) {
            char *a = array + (size_t)(o * rows + i) * w;
            char *b = buf + (size_t)route_row(rt, s->outer, o, i) * w;
            memcpy(to_buffer ? b : a, to_buffer ? a : b, w);
        }
}

/* The all-to-all of the packed rows, watched. */
static ra_status rows_exchange(MPI_Comm comm, const ra_shard_move_spec *s,
                               const move_route *out, const move_route *in,
                               const char *send, char *recv, move_watch *w)
{
    MPI_Datatype row;
    MPI_Request req;
    if (MPI_Type_contiguous((int)s->row_bytes, MPI_BYTE, &row) !=
            MPI_SUCCESS ||
        MPI_Type_commit(&row) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ra_shard_move: a row's datatype");
    int rc = MPI_Ialltoallv(send, out->count, out->displ, row, recv,
                            in->count, in->displ, row, comm, &req);
    ra_status st = rc == MPI_SUCCESS
                       ? move_wait(w, &req, "the rows' all-to-all")
                       : ra_error_set(RA_ERR_MPI, "ra_shard_move: the "
                                      "rows' all-to-all failed to start");
    MPI_Type_free(&row);
    return st;
}

/* Routes, packs, exchanges and unpacks; the cuts' slices given. */
static ra_status move_rows(MPI_Comm comm, const ra_shard_move_spec *s,
                           const ra_slice *from, const ra_slice *to,
                           const void *src, void *dst, move_watch *w)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    const int64_t n_out = s->src_rows, n_in = s->dst_rows;
    const size_t row = (size_t)s->row_bytes, o = (size_t)s->outer;
    move_route out, in;
    int *ints = malloc((size_t)(4 * P + n_out + n_in + 1) * sizeof *ints);
    int64_t *slots = malloc((size_t)(n_out + n_in + 1) * sizeof *slots);
    char *send = malloc(o * (size_t)n_out * row + 1);
    char *recv = malloc(o * (size_t)n_in * row + 1);
    ra_status st = ints && slots && send && recv
                       ? RA_OK
                       : ra_error_set(RA_ERR_NOMEM, "ra_shard_move: "
                                      "buffers of %lld and %lld rows",
                                      (long long)n_out, (long long)n_in);
    if (st == RA_OK) {
        out = (move_route){ints, ints + n_out, ints + n_out + P, slots};
        in = (move_route){ints + n_out + 2 * P, ints + n_out + n_in + 2 * P,
                          ints + n_out + n_in + 3 * P, slots + n_out};
        route_make(&out, &from[rank], to, P, s->outer);
        route_make(&in, &to[rank], from, P, s->outer);
        rows_copy(&out, s, n_out, (char *)src, send, 1);
        st = rows_exchange(comm, s, &out, &in, send, recv, w);
    }
    if (st == RA_OK)
        rows_copy(&in, s, n_in, (char *)dst, recv, 0);
    free(ints);
    free(slots);
    if (!w->stalled) { /* else the all-to-all still owns them */
        free(send);
        free(recv);
    }
    return st;
}

ra_status ra_shard_move(MPI_Comm comm, const ra_shard_move_spec *spec,
                        const void *src, void *dst)
{
    ra_status st = ra_comm_usable(comm, "ra_shard_move");
    if (st != RA_OK)
        return st;
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    ra_slice *cuts = malloc(2 * (size_t)P * sizeof *cuts);
    st = cuts ? spec_check(spec, rank, P, cuts, cuts + P)
              : ra_error_set(RA_ERR_NOMEM, "ra_shard_move: %d slices", P);
    if (st == RA_OK && ((spec->src_rows && spec->outer && !src) ||
                        (spec->dst_rows && spec->outer && !dst)))
        st = ra_error_set(RA_ERR_ARG, "ra_shard_move: src or dst is NULL "
                          "with rows to move");
    ra_fingerprint fp = {0};
    spec_fingerprint(&fp, spec);
    move_watch watch = {spec && spec->stall_timeout > 0
                            ? spec->stall_timeout : 0, 0};
    const ra_agree_waiter waiter = {move_wait, &watch};
    st = ra_agree_options(comm, st, &fp, &waiter);
    if (st == RA_OK && spec->row_bytes > 0 && spec->outer > 0)
        st = move_rows(comm, spec, cuts, cuts + P, src, dst, &watch);
    free(cuts);
    return st;
}
