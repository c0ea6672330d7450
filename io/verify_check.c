/* verify_check.c: opening a check (verify.h) and the forward check: the
 * output's kind and shape against the input, the run's arithmetic, the
 * masks; the sampled rows split over the ranks and recomputed in fp64
 * (verify_fp64.c), every row scanned for NaN, the sums over the ranks and
 * the verdict. Also what both checks share: samples, sums, the cost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "ref_block.h"
#include "tally.h"
#include "verify.h"

unsigned char *verify_pick(int64_t total, int64_t want, uint64_t seed,
                           uint64_t stream)
{
    unsigned char *m = calloc((size_t)total + 1, 1);
    const int all = want <= 0 || want >= total;
    /* selection sampling (Knuth's algorithm S): distinct, seeded */
    for (int64_t r = 0, taken = 0; m && r < total; r++) {
        const double u = (double)(ra_random_u64(seed, stream, (uint64_t)r) >>
                                  11) * 0x1.0p-53;
        if (all || (double)(total - r) * u < (double)(want - taken)) {
            m[r] = 1;
            taken++;
        }
    }
    return m;
}

ra_status verify_sum(MPI_Comm comm, double *x, int64_t n)
{
    for (int64_t a = 0; a < n; a += 1 << 26) {
        const int len = (int)(n - a < (1 << 26) ? n - a : (1 << 26));
        if (MPI_Allreduce(MPI_IN_PLACE, x + a, len, MPI_DOUBLE, MPI_SUM,
                          comm) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "verify: summing over the ranks "
                                            "failed");
    }
    return RA_OK;
}

double verify_pair_fraction(const h5io_run_attrs *run, int64_t M)
{
    double f = 1.0;
    const double m = (double)(M > 0 ? M : 1);
    if (run->window && run->window_left >= 0 && run->window_right >= 0)
        f = (double)(run->window_left + run->window_right + 1) / m;
    if (run->causal)
        f = f < 0.5 ? f : 0.5 + 2048.0 / m;
    return f < 1.0 ? f : 1.0;
}

/* What the passes around the products (masks, softmax, reads, products
 * of other shapes than the measured one) add to the products' time: 60%
 * on issue 44's case (docs/PERFORMANCE.md, "What verification costs"). */
#define VERIFY_AROUND 1.6

void verify_cost_tell(const verify_job *j, const char *what, double madds,
                      double exps)
{
    double most[2] = {madds, exps}, rate[2];
    ra_ref_rates(&rate[0], &rate[1]);
    MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_DOUBLE, MPI_MAX, j->rq.comm);
    const verify_cost c = {
        what, most[0], most[1],
        (rate[0] > 0 ? VERIFY_AROUND * most[0] / rate[0] : 0) +
            (rate[1] > 0 ? most[1] / rate[1] : 0),
        rate[0], rate[1]};
    if (j->rq.cost)
        j->rq.cost(&j->rq, &c);
}

/* ---- opening ---------------------------------------------------------- */

/* The output must be run's: /o and /lse. Others are refused by name. */
static ra_status output_kind(const char *out)
{
    static const char *const known[][2] = {
        {"/y", "an output of run --mha (/y); verify checks the attention "
               "outputs /o and /lse of run, not the layer"},
        {"/dq", "a backward output (/dq); verify checks forward outputs "
                "(/o, /lse): check gradients with verify --backward"},
    };
    int rank, present;
    int64_t dims[4], ldims[3];
    ra_status st = h5io_dataset_dims(out, "/o", &rank, dims, &present);
    if (st != RA_OK || present ||
        h5io_read_out_shape(out, dims, ldims) == RA_OK) /* under a group */
        return st;
    ra_error_clear();
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        if ((st = h5io_dataset_dims(out, known[i][0], &rank, dims,
                                    &present)) != RA_OK)
            return st;
        if (present)
            return ra_error_set(RA_ERR_INPUT, "%s: %s", out, known[i][1]);
    }
    return ra_error_set(RA_ERR_INPUT, "%s: no dataset /o: not an output of "
                        "ringattn run, which verify checks", out);
}

ra_status verify_out_dims(const char *out, const ra_shape *s, const char *in)
{
    int64_t o[4], l[3];
    ra_status st = h5io_read_out_shape(out, o, l);
    if (st == RA_OK && (o[0] != s->B || o[1] != s->N || o[2] != s->H ||
                        o[3] != s->Dv || l[0] != s->B || l[1] != s->H ||
                        l[2] != s->N))
        st = ra_error_set(RA_ERR_INPUT, "%s: /o and /lse do not match the "
                          "shape of %s", out, in);
    return st;
}

/* One gradient dataset of out has the dims the input's shape gives. */
static ra_status grad_dims(const char *out, const char *name,
                           const int64_t want[4], const char *in)
{
    int rank = 0, present = 0;
    int64_t dims[4];
    ra_status st = h5io_dataset_dims(out, name, &rank, dims, &present);
    if (st == RA_OK && !present)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found (not a "
                            "gradient file?)", out, name);
    for (int i = 0; st == RA_OK && i < 4; i++)
        if (rank != 4 || dims[i] != want[i])
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s does not match "
                                "the shape of %s", out, name, in);
    return st;
}

/* A gradient file: fp32 gradients (no bf16 rounding to judge), /dq, /dk,
 * /dv of the input's shape. */
static ra_status grads_kind(const verify_job *j)
{
    const h5io_run_attrs *r = &j->v.run;
    const ra_shape *s = &j->s;
    const char *out = j->rq.out, *in = j->rq.in;
    if (j->rq.precision_set || strcmp(r->precision, "fp32") ||
        strcmp(r->wire, "fp32"))
        return ra_error_set(RA_ERR_ARG, "verify --backward: %s: judges fp32 "
                            "gradients only (--precision, or attributes "
                            "precision %s, wire %s)", out, r->precision,
                            r->wire);
    const int64_t qd[4] = {s->B, s->N, s->H, s->D};
    const int64_t kd[4] = {s->B, s->M, s->G, ra_shape_dk(s)};
    const int64_t vd[4] = {s->B, s->M, s->G, s->Dv};
    ra_status st = grad_dims(out, "/dq", qd, in);
    if (st == RA_OK)
        st = grad_dims(out, "/dk", kd, in);
    return st == RA_OK ? grad_dims(out, "/dv", vd, in) : st;
}

/* The datasets the run read, as its output records them (names point
 * into run), read under tuning. */
static ra_h5_source recorded_source(const h5io_run_attrs *run,
                                    const ra_h5_tuning *tuning)
{
    const char (*m)[256] = run->mask_sets;
    return (ra_h5_source){
        .q = run->names[0], .k = run->names[1], .v = run->names[2],
        .axes = h5io_qkv_layout_parse(run->qkv_layout),
        .q_lens = m[0][0] ? m[0] : NULL, .kv_lens = m[1][0] ? m[1] : NULL,
        .segments = m[2][0] ? m[2] : NULL,
        .q_segments = m[3][0] ? m[3] : NULL,
        .kv_segments = m[4][0] ? m[4] : NULL, .tuning = tuning};
}

ra_status verify_open(const verify_req *rq, int backward, verify_job *j)
{
    *j = (verify_job){.rq = *rq, .backward = backward};
    j->v.s = &j->s;
    MPI_Comm comm = rq->comm;
    MPI_Comm_rank(comm, &j->rank);
    MPI_Comm_size(comm, &j->nranks);
    ra_status st = ra_agree(comm, backward ? RA_OK : output_kind(rq->out));
    if (st == RA_OK)
        st = ra_agree(comm, h5io_read_run_attrs(rq->out, &j->v.run));
    if (st != RA_OK)
        return st;
    j->src = recorded_source(&j->v.run, rq->tuning);
    if ((st = ra_h5_read_shape(comm, rq->in, &j->src, &j->s, NULL)) != RA_OK)
        return st;
    /* a forward output's shape is checked after the parameters (whose
     * dims, e.g. the keys', are named first) */
    return ra_agree(comm, backward ? grads_kind(j) : RA_OK);
}

void verify_close(verify_job *j)
{
    ra_h5_masks_free(&j->masks);
}

/* The run's arithmetic as the output records it (precision, wire) or as
 * the request says: bf16 precision rounds q, k, v and P; a bf16 wire
 * rounds k and v. */
static ra_status run_numerics(verify_job *j)
{
    const h5io_run_attrs *r = &j->v.run;
    ra_precision prec;
    if (ra_precision_parse(r->precision, &prec) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute precision: unknown "
                            "precision '%s' (expected fp32 or bf16)",
                            j->rq.out, r->precision);
    if (strcmp(r->wire, "fp32") != 0 && strcmp(r->wire, "bf16") != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute wire: unknown wire "
                            "type '%s' (expected fp32 or bf16)", j->rq.out,
                            r->wire);
    if (j->rq.precision_set)
        prec = j->rq.precision;
    j->v.p.num.precision = prec;
    j->v.round_q = j->v.round_p = prec == RA_PRECISION_BF16;
    j->v.round_kv = j->v.round_q || strcmp(r->wire, "bf16") == 0;
    return RA_OK;
}

ra_status verify_job_masks(verify_job *j)
{
    const ra_params *p = &j->v.p;
    j->v.score = (ra_ref_score){.score = p->num.score, .scale = p->num.scale,
                                .sigma = p->num.sigma,
                                .additive = p->num.additive,
                                .Dk = ra_shape_dk(&j->s),
                                .alibi = p->num.alibi,
                                .features = ra_features_of(&p->num)};
    ra_status st = h5io_segment_names_from(j->rq.in, &j->src,
                                           &j->v.q_seg_name,
                                           &j->v.kv_seg_name);
    if ((st = ra_agree(j->rq.comm, st)) != RA_OK)
        return st;
    st = ra_h5_read_masks(j->rq.comm, j->rq.in, &j->src, &j->s,
                          RA_LAYOUT_CONTIGUOUS, NULL, &j->masks);
    j->v.q_lens = j->masks.q_lens;
    j->v.kv_lens = j->masks.kv_lens;
    return st;
}

/* ---- the forward check ------------------------------------------------ */

/* Query rows per read of the NaN scan, and the most values of o read at
 * once. */
enum { SCAN_ROWS = 4096, SCAN_VALUES = 1 << 22 };

/* The NaN values of /o and /lse in the query rows mine (flat indices
 * b * N + i), checked or not: a NaN fails the output even where the
 * sample does not look. */
static ra_status nan_scan(const char *out, const ra_shape *s, ra_range mine,
                          double *nans)
{
    const int64_t width = s->H * s->Dv;
    const int64_t rows = width * SCAN_ROWS > SCAN_VALUES
                             ? (SCAN_VALUES / width > 0 ? SCAN_VALUES / width
                                                        : 1)
                             : SCAN_ROWS;
    double *o = malloc(sizeof(double) * (size_t)(rows * width));
    double *l = malloc(sizeof(double) * (size_t)rows);
    ra_status st = o && l ? RA_OK : ra_error_set(RA_ERR_NOMEM, "verify: out "
                                                               "of memory");
    const int64_t end = mine.start + mine.count;
    for (int64_t a = mine.start, len; a < end && st == RA_OK; a += len) {
        const int64_t b = a / s->N, i0 = a % s->N;
        len = s->N - i0 < rows ? s->N - i0 : rows;
        len = end - a < len ? end - a : len;
        st = h5io_read_o_rows(out, b, i0, len, o);
        for (int64_t x = 0; st == RA_OK && x < len * width; x++)
            *nans += isnan(o[x]);
        for (int64_t h = 0; st == RA_OK && h < s->H; h++) {
            st = h5io_read_lse(out, b, h, i0, len, l);
            for (int64_t x = 0; st == RA_OK && x < len; x++)
                *nans += isnan(l[x]);
        }
    }
    free(o);
    free(l);
    return st;
}

/* The flat rows marked in pick (total), ascending, into rows. */
static int64_t rows_of(const unsigned char *pick, int64_t total,
                       int64_t *rows)
{
    int64_t n = 0;
    for (int64_t r = 0; r < total; r++)
        if (pick[r])
            rows[n++] = r;
    return n;
}

/* This rank's share of the rows[0..n) of out (the file checked) into t,
 * its predicted cost told first when what is not NULL. Collective. */
static ra_status rows_share(const verify_job *j, const char *out,
                            const int64_t *rows, int64_t n, const char *what,
                            ra_tally *t)
{
    const ra_shape *s = &j->s;
    const ra_range mine = ra_shard_range(n, j->rank, j->nranks);
    /* consecutive rows skip the key blocks none of them sees; a sample's
     * rows are spread over them */
    const double f = n < s->B * s->N ? 1.0
                     : verify_pair_fraction(&j->v.run, s->M);
    const double pairs = (double)mine.count * s->M * s->H * f;
    if (what)
        verify_cost_tell(j, what, pairs * (double)(s->D + s->Dv), pairs);
    const int blas = ra_blas_enter(1); /* one rank per core */
    t->p_unit = j->v.round_p ? RA_BF16_UNIT : 0.0;
    ra_status st = verify_rows(j->rq.in, out, &j->v, rows + mine.start,
                               mine.count, t);
    ra_blas_leave(blas);
    return ra_agree(j->rq.comm, st);
}

ra_status verify_fwd_verdict(const verify_job *j, const ra_tally *t,
                             const char *stored, verify_fwd_result *r)
{
    ra_dtype dt = RA_DTYPE_F32;
    (void)ra_dtype_parse(stored, &dt); /* unknown: no rounding */
    const double ulp = dt == RA_DTYPE_F16 ? 0x1p-11
                       : dt == RA_DTYPE_BF16 ? 0x1p-8 : 0;
    if (ra_tally_allreduce(j->rq.comm, t, &r->err) != RA_OK ||
        MPI_Allreduce(MPI_IN_PLACE, &r->nans, 1, MPI_DOUBLE, MPI_SUM,
                      j->rq.comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "verify: summing the errors over "
                                        "the ranks failed");
    r->rounding = ulp > j->rq.tol;
    r->tol = r->rounding ? ulp : j->rq.tol;
    r->tol_o = ra_tally_tol_o(&r->err, r->tol);
    r->pass = ra_tally_ok(&r->err, r->tol) && r->nans == 0;
    return RA_OK;
}

ra_status verify_forward(verify_job *j, verify_fwd_result *r)
{
    const ra_shape *s = &j->s;
    *r = (verify_fwd_result){0};
    ra_status st = run_numerics(j);
    if (st == RA_OK)
        st = verify_out_dims(j->rq.out, s, j->rq.in);
    if ((st = ra_agree(j->rq.comm, st)) == RA_OK)
        st = verify_job_masks(j);
    if (st != RA_OK)
        return st;
    const double cost = (double)s->B * s->N * s->H * s->M * (s->D + s->Dv);
    const int64_t want = j->rq.all ? 0 : j->rq.sample ? j->rq.sample
                         : cost <= 4294967296.0 ? 0 : VERIFY_SAMPLE;
    unsigned char *pick = verify_pick(s->B * s->N, want, j->rq.seed,
                                      RA_STREAM_SAMPLE);
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)(s->B * s->N + 1));
    st = ra_agree(j->rq.comm, pick && rows ? RA_OK
                  : ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate the "
                                               "row list"));
    ra_tally t = {0};
    if (st == RA_OK) {
        r->rows = rows_of(pick, s->B * s->N, rows);
        st = rows_share(j, j->rq.out, rows, r->rows, "verify", &t);
    }
    if (st == RA_OK)
        st = ra_agree(j->rq.comm,
                      nan_scan(j->rq.out, s, ra_shard_range(s->B * s->N,
                               j->rank, j->nranks), &r->nans));
    if (st == RA_OK)
        st = verify_fwd_verdict(j, &t, j->v.run.out_dtype, r);
    free(pick);
    free(rows);
    return st;
}
