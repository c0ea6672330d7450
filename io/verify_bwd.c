/* verify_bwd.c: verify --backward (verify.h): a gradient file (/dq /dk /dv
 * of run --backward) against fp64 gradients from the definition, on
 * seeded random samples of query rows (dq) and key rows (dk, dv).
 *
 * A gradient entry needs its query row's LSE and Drow = do . o, and a
 * key's dk and dv sum over every query that sees it. By default the
 * statistics are the recorded forward's, the one the gradients were
 * computed from (run --backward --fwd FILE, or with --recompute the /o
 * and /lse it wrote beside them): that forward is checked against fp64 at
 * the sampled query rows, then every row's LSE and Drow come from it, so
 * the check costs the samples' pairs, N K + K M per head, split over the
 * ranks. Independently (--independent, --all) each rank recomputes its
 * share of the rows' statistics with one blocked fp64 forward: the cost of
 * a forward of every batch that holds a sampled row. Either way each rank
 * adds its rows' pairs with the sampled keys to the keys' dk and dv
 * (summed over the ranks) and checks its sampled rows' dq
 * (verify_grads.c). With sinks every row joins the check of /dsinks,
 * whole: d sink_h = -sum_i exp(sink_h - lse_i) (do_i . o_i), so every
 * batch is taken. The additive score works in naive units
 * (verify_units.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "verify.h"

/* The check's samples: query rows (B N) and keys (B M) compared. */
typedef struct {
    unsigned char *q, *k;
    const char *fwd; /* the recorded forward, or NULL: independent */
} picks;

/* The sampled keys of batch b into keys[0..*nk); returns how many query
 * rows of it are sampled. */
static int64_t batch_picks(const verify_job *j, const picks *pk, int64_t b,
                           int64_t *keys, int64_t *nk)
{
    int64_t nq = 0;
    *nk = 0;
    for (int64_t x = 0; x < j->s.M; x++)
        if (pk->k[b * j->s.M + x])
            keys[(*nk)++] = x;
    for (int64_t i = 0; i < j->s.N; i++)
        nq += pk->q[b * j->s.N + i];
    return nq;
}

/* The sampled check's predicted cost on the most loaded rank: the
 * independent fold of every row; the rows against the sampled keys; the
 * sampled rows' dq (and the recorded forward's check at them). */
static void bwd_cost(const verify_job *j, const picks *pk, int64_t *keys)
{
    const ra_shape *s = &j->s;
    const double f = verify_pair_fraction(&j->v.run, s->M);
    const double P = j->nranks, rows = ceil((double)s->N / P);
    const double H = (double)s->H, D = (double)s->D, Dv = (double)s->Dv;
    double madds = 0, exps = 0;
    for (int64_t b = 0, nk; b < s->B; b++) {
        const double nq = (double)batch_picks(j, pk, b, keys, &nk);
        if (nq == 0 && nk == 0 && !j->v.p.num.sinks)
            continue;
        const double q = ceil(nq / P) * s->M * f * H;
        const double k = rows * (double)nk * f * H;
        const double all = pk->fwd ? 0 : rows * s->M * f * H;
        /* the recorded forward's check at the sampled rows: P V */
        const double fw = pk->fwd ? Dv : 0;
        madds += all * (D + Dv) + k * (2 * D + 2 * Dv) +
                 q * (2 * D + Dv + fw);
        exps += all + k + q;
    }
    verify_cost_tell(j, pk->fwd ? "verify --backward (recorded forward)"
                                : "verify --backward (independent)",
                     madds, exps);
}

/* The ranks' sums of d sinks ref (H) against the file's /dsinks: t[9],
 * t[10] get the squared error and norm, t[6] the non-finite entries.
 * Collective. */
static ra_status dsinks_check(const verify_job *j, double *ref, double *t)
{
    const int64_t H = j->s.H;
    float *got = malloc(sizeof(float) * (size_t)H);
    int present = 0;
    ra_status st = got ? h5io_read_weights(j->rq.out, "/dsinks", 1, &H, got,
                                           &present)
                       : ra_error_set(RA_ERR_NOMEM, "verify --backward: out "
                                      "of memory");
    if (st == RA_OK && !present)
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset /dsinks: not found (the "
                          "run recorded sinks_dataset %s)", j->rq.out,
                          j->v.run.sinks_dataset);
    if ((st = ra_agree(j->rq.comm, st)) == RA_OK)
        st = verify_sum(j->rq.comm, ref, H);
    for (int64_t h = 0; st == RA_OK && j->rank == 0 && h < H; h++) {
        t[6] += !isfinite(got[h]);
        t[9] += (got[h] - ref[h]) * (got[h] - ref[h]);
        t[10] += ref[h] * ref[h];
    }
    free(got);
    return st;
}

/* The sampled check: every batch holding a sampled row (with sinks every
 * batch), each rank taking its share of the query rows. Collective. */
static ra_status sampled(const verify_job *j, const picks *pk, double *t,
                         verify_fwd_result *fwd)
{
    const ra_shape *s = &j->s;
    const int64_t G = s->G, Dk = ra_shape_dk(s), Dv = s->Dv;
    int64_t *keys = malloc(sizeof(int64_t) * (size_t)(s->M + 1));
    const int64_t nkv = s->M * G * (Dk + Dv);
    double *dkv = calloc((size_t)(nkv + s->H + 1), sizeof(double));
    ra_status st = ra_agree(j->rq.comm, keys && dkv ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "verify --backward: "
                                           "cannot allocate the keys' "
                                           "gradients"));
    ra_tally ft = {0};
    if (st == RA_OK)
        bwd_cost(j, pk, keys);
    const ra_range mine = ra_shard_range(s->N, j->rank, j->nranks);
    const int blas = ra_blas_enter(1); /* one rank per core */
    for (int64_t b = 0, nk = 0; b < s->B && st == RA_OK; b++) {
        if (batch_picks(j, pk, b, keys, &nk) == 0 && nk == 0 &&
            !j->v.p.num.sinks)
            continue;
        memset(dkv, 0, sizeof(double) * (size_t)(nk * G * (Dk + Dv)));
        const verify_bwd_batch x = {j->rq.out, pk->q + b * s->N, keys, nk,
                                    dkv, dkv + nk * G * Dk, t, dkv + nkv,
                                    pk->fwd, &ft};
        st = ra_agree(j->rq.comm,
                      verify_grads_share(j->rq.in, &j->v, b, mine, &x));
        if (st == RA_OK)
            st = verify_sum(j->rq.comm, dkv, nk * G * (Dk + Dv));
        if (st == RA_OK && j->rank == 0)
            st = verify_grads_keys(&j->v, b, &x);
        st = ra_agree(j->rq.comm, st);
    }
    ra_blas_leave(blas);
    if (st == RA_OK && j->v.p.num.sinks)
        st = dsinks_check(j, dkv + nkv, t);
    if (st == RA_OK && pk->fwd &&
        (st = verify_fwd_verdict(j, &ft, "fp32", fwd)) == RA_OK)
        fwd->rows = fwd->err.rows / s->H;
    free(keys);
    free(dkv);
    return st;
}

/* The forward the gradients were computed from, as the gradient file
 * records it: the file itself when the run recomputed it (its /o and
 * /lse), else the --fwd file, which must still describe this problem and
 * input. Not collective. */
static ra_status recorded_forward(verify_job *j, verify_bwd_result *r)
{
    const char *f = j->v.run.forward, *out = j->rq.out;
    if (!f[0] || (strcmp(f, "recomputed") == 0 &&
                  h5io_read_out_shape(out, (int64_t[4]){0},
                                      (int64_t[3]){0}) != RA_OK))
        return ra_error_set(RA_ERR_INPUT, "%s: records no forward output "
                            "(attribute forward '%s', no /o and /lse): pass "
                            "--independent", out, f);
    snprintf(r->forward, sizeof r->forward, "%s",
             strcmp(f, "recomputed") == 0 ? out : f);
    if (strcmp(f, "recomputed") == 0)
        return verify_out_dims(out, &j->s, j->rq.in);
    char *mine = malloc(H5IO_FP_LEN), *theirs = malloc(H5IO_FP_LEN);
    ra_status st = mine && theirs ? RA_OK
                   : ra_error_set(RA_ERR_NOMEM, "verify: out of memory");
    if (st == RA_OK && (st = verify_out_dims(f, &j->s, j->rq.in)) == RA_OK)
        st = h5io_fwd_check(f, &j->s, &j->v.p);
    if (st == RA_OK &&
        (st = h5io_fingerprint_read(out, mine, H5IO_FP_LEN)) == RA_OK &&
        (st = h5io_fingerprint_read(f, theirs, H5IO_FP_LEN)) == RA_OK)
        st = h5io_fingerprint_compare(f, theirs, mine);
    free(mine);
    free(theirs);
    if (st != RA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(st, "%s (the forward %s records; or pass "
                          "--independent)", why, out);
    }
    return st;
}

/* The ranks' sums of t and the verdict. */
static ra_status bwd_verdict(const verify_job *j, const double *t,
                             verify_bwd_result *r)
{
    static const int at[VERIFY_GRADS][2] = {{0, 3}, {1, 4}, {2, 5}, {7, 8},
                                            {9, 10}};
    double g[11];
    if (MPI_Allreduce(t, g, 11, MPI_DOUBLE, MPI_SUM, j->rq.comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "verify --backward: summing the "
                                        "errors failed");
    r->nonfinite = g[6];
    r->pass = g[6] == 0 && (!r->forward[0] || r->fwd.pass);
    for (int i = 0; i < VERIFY_GRADS; i++) {
        const double err = g[at[i][0]], ref = g[at[i][1]];
        r->err[i] = ref > 0 ? sqrt(err / ref) : sqrt(err);
        r->pass &= !r->has[i] || r->err[i] < j->rq.tol;
    }
    return RA_OK;
}

/* The problem's parts the check refuses, and its samples. */
static ra_status bwd_setup(verify_job *j, picks *pk, verify_bwd_result *r)
{
    const ra_shape *s = &j->s;
    const ra_params *p = &j->v.p;
    ra_status st = RA_OK;
    if (p->num.sinks && p->num.additive)
        st = ra_error_set(RA_ERR_INPUT, "verify --backward: %s: the additive "
                          "score with sinks (attribute sinks_dataset) is not "
                          "checked: its naive reference gives no /dsinks",
                          j->rq.out);
    const int recorded = !j->rq.all && !j->rq.independent && !p->num.additive;
    if (st == RA_OK && recorded && (st = recorded_forward(j, r)) == RA_OK)
        pk->fwd = r->forward;
    if ((st = ra_agree(j->rq.comm, st)) != RA_OK)
        return st;
    const int64_t k = j->rq.all      ? 0
                      : j->rq.sample ? j->rq.sample
                                     : VERIFY_SAMPLE;
    pk->q = verify_pick(s->B * s->N, k, j->rq.seed, RA_STREAM_SAMPLE);
    pk->k = verify_pick(s->B * s->M, k, j->rq.seed, RA_STREAM_SAMPLE + 1);
    r->has[VERIFY_DQ] = r->has[VERIFY_DK] = r->has[VERIFY_DV] = 1;
    r->has[VERIFY_DW] = p->num.additive != NULL;
    r->has[VERIFY_DSINKS] = p->num.sinks != NULL;
    return ra_agree(j->rq.comm, pk->q && pk->k ? RA_OK
                    : ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot "
                                   "allocate the row samples"));
}

ra_status verify_backward(verify_job *j, verify_bwd_result *r)
{
    *r = (verify_bwd_result){0};
    picks pk = {0};
    double t[11] = {0};
    ra_status st = verify_job_masks(j);
    if (st == RA_OK)
        st = bwd_setup(j, &pk, r);
    if (st == RA_OK)
        st = j->v.p.num.additive ? verify_units(j, pk.q, pk.k, t)
                                 : sampled(j, &pk, t, &r->fwd);
    if (st == RA_OK)
        st = bwd_verdict(j, t, r);
    free(pk.q);
    free(pk.k);
    return st;
}
