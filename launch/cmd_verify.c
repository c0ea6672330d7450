/* cmd_verify.c: `ringattn verify`: an output file against the fp64
 * reference, on every query row or on a seeded random sample of rows. The
 * checked rows are split over the ranks; each rank reads the whole K and V of
 * the batches its rows belong to (a checking tool: O(M) memory per rank). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compare.h"
#include "h5io.h"
#include "internal.h"
#include "kernel.h"
#include "tally.h"

static const char verify_help[] =
    "usage: [mpirun -np P] ringattn verify --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Recomputes attention in fp64 for the query rows of OUT.h5 (all of them\n"
    "when that costs under 2^32 multiply-adds, else a random sample) with the\n"
    "causal flag, window and scale recorded in OUT.h5 and the mask datasets\n"
    "of IN.h5 (lens, segments), and compares /o and /lse.\n"
    "Exit 0 when the relative error ||o - ref|| / ||ref|| and the LSE error\n"
    "max |lse - ref| / max(1, |ref|) are both below the tolerance, 1 if not.\n"
    "\n"
    "  --in FILE     the input of the run\n"
    "  --out FILE    the output to check\n"
    "  --sample K    check K random query rows (all heads, all keys)\n"
    "  --all         check every row, however long it takes\n"
    "  --seed S      seed of the sample (default 1)\n"
    "  --tol X       tolerance (default 1e-5)\n"
    "  --help        this text\n";

/* What one check needs besides the tensors: the run's rules and masks. */
typedef struct {
    const ra_shape *s;
    h5io_run_attrs run;
    ra_ref_score score;
    cli_score_inputs weights;
    int64_t *q_lens, *kv_lens;         /* (B) or NULL */
    const char *q_seg_name, *kv_seg_name; /* datasets, or NULL */
} check_ctx;

/* Query rows to check, as flat indices b * N + i, ascending. */
static int64_t *pick_rows(const ra_shape *s, int64_t want, uint64_t seed,
                          int64_t *count)
{
    const int64_t total = s->B * s->N;
    if (want <= 0 || want >= total) {
        int64_t *all = malloc(sizeof(int64_t) * (size_t)total);
        for (int64_t r = 0; all && r < total; r++)
            all[r] = r;
        *count = total;
        return all;
    }
    /* Selection sampling (Knuth's algorithm S): sorted, distinct, seeded. */
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)want);
    int64_t taken = 0;
    for (int64_t r = 0; rows && r < total && taken < want; r++) {
        double u = (double)(ra_random_u64(seed, RA_STREAM_SAMPLE, (uint64_t)r) >> 11) *
                   0x1.0p-53;
        if ((double)(total - r) * u < (double)(want - taken))
            rows[taken++] = r;
    }
    *count = taken;
    return rows;
}

/* Compares one query row (all heads) of batch b: q (H, D), o (H, Dv),
 * lse (H) against the reference with k (M, G, D), v (M, G, Dv) and the
 * segment ids of the row (q_seg, one) and of every key (k_seg, M). */
static void check_row(const check_ctx *c, int64_t b, int64_t i,
                      const double *q, const double *k, const double *v,
                      const double *o, const double *lse,
                      const int64_t *q_seg, const int64_t *k_seg, double *ref,
                      double *scores, ra_tally *t)
{
    const ra_shape *s = c->s;
    const int64_t Dk = ra_shape_dk(s);
    const ra_mask mk = {.causal = c->run.causal, .diag = s->M - s->N,
                        .window = c->run.window, .left = c->run.window_left,
                        .right = c->run.window_right, .qpos = &i,
                        .q_lens = c->q_lens ? c->q_lens + b : NULL,
                        .kv_lens = c->kv_lens ? c->kv_lens + b : NULL,
                        .q_seg = q_seg, .k_seg = k_seg};
    for (int64_t h = 0; h < s->H; h++) {
        const int64_t g = h / (s->H / s->G);
        double lref;
        ra_reference_scored(&c->score, 1, s->M, s->D, s->Dv, &mk, q + h * s->D,
                          s->D, k + g * Dk, s->G * Dk, v + g * s->Dv,
                          s->G * s->Dv, ref, s->Dv, &lref, scores);
        for (int64_t d = 0; d < s->Dv; d++)
            ra_tally_o(t, o[h * s->Dv + d], ref[d]);
        ra_tally_lse(t, lse[h], lref);
    }
}

/* Checks this rank's share rows[0..n) (sorted flat indices). */
static ra_status check_share(const char *in, const char *out,
                             const check_ctx *c, const int64_t *rows,
                             int64_t n, ra_tally *t)
{
    const ra_shape *s = c->s;
    enum { RUN_MAX = 256 }; /* rows read per request */
    ra_status st = RA_OK;
    const int64_t HD = s->H * s->D, HDv = s->H * s->Dv;
    double *k = malloc(sizeof(double) * (size_t)(s->M * s->G * ra_shape_dk(s)));
    double *v = malloc(sizeof(double) * (size_t)(s->M * s->G * s->Dv));
    double *q = malloc(sizeof(double) * (size_t)(RUN_MAX * HD));
    double *o = malloc(sizeof(double) * (size_t)(RUN_MAX * HDv));
    double *lse = malloc(sizeof(double) * (size_t)(RUN_MAX * s->H));
    double *lrow = malloc(sizeof(double) * (size_t)RUN_MAX);
    double *ref = malloc(sizeof(double) * (size_t)s->Dv);
    double *scores = malloc(sizeof(double) * (size_t)s->M);
    int64_t *k_seg = c->kv_seg_name ? malloc(sizeof(int64_t) * (size_t)s->M)
                                    : NULL;
    int64_t *q_seg = c->q_seg_name ? malloc(sizeof(int64_t) * RUN_MAX) : NULL;
    if (!k || !v || !q || !o || !lse || !lrow || !ref || !scores ||
        (c->kv_seg_name && (!k_seg || !q_seg))) {
        st = ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate K and V of "
                                        "one batch");
        goto cleanup;
    }
    int64_t loaded_b = -1;
    for (int64_t a = 0; a < n && st == RA_OK;) {
        /* a run of consecutive rows within one batch */
        const int64_t b = rows[a] / s->N, i0 = rows[a] % s->N;
        int64_t len = 1;
        while (a + len < n && len < RUN_MAX && rows[a + len] == rows[a] + len &&
               (rows[a] + len) / s->N == b)
            len++;
        int present;
        if (b != loaded_b) {
            if ((st = h5io_read_rows(in, "/k", b, 0, s->M, k)) != RA_OK ||
                (st = h5io_read_rows(in, "/v", b, 0, s->M, v)) != RA_OK ||
                (k_seg && (st = h5io_read_segments(in, c->kv_seg_name, b, 0,
                                                   s->M, k_seg, &present)) !=
                              RA_OK))
                break;
            loaded_b = b;
        }
        if ((st = h5io_read_rows(in, "/q", b, i0, len, q)) != RA_OK ||
            (st = h5io_read_rows(out, "/o", b, i0, len, o)) != RA_OK ||
            (q_seg && (st = h5io_read_segments(in, c->q_seg_name, b, i0, len,
                                               q_seg, &present)) != RA_OK))
            break;
        for (int64_t h = 0; h < s->H && st == RA_OK; h++) {
            st = h5io_read_lse(out, b, h, i0, len, lrow);
            for (int64_t r = 0; r < len; r++)
                lse[r * s->H + h] = lrow[r];
        }
        for (int64_t r = 0; r < len && st == RA_OK; r++)
            check_row(c, b, i0 + r, q + r * HD, k, v, o + r * HDv,
                      lse + r * s->H, q_seg ? q_seg + r : NULL, k_seg, ref,
                      scores, t);
        a += len;
    }
cleanup:
    free(k);
    free(v);
    free(q);
    free(o);
    free(lse);
    free(lrow);
    free(ref);
    free(scores);
    free(k_seg);
    free(q_seg);
    return st;
}

/* The mask datasets of the input file, as the run applied them. */
static ra_status read_masks(const char *in, const ra_shape *s, check_ctx *c)
{
    int present;
    ra_status st;
    c->q_lens = malloc(sizeof(int64_t) * (size_t)s->B);
    c->kv_lens = malloc(sizeof(int64_t) * (size_t)s->B);
    if (!c->q_lens || !c->kv_lens)
        return ra_error_set(RA_ERR_NOMEM, "verify: out of memory");
    if ((st = h5io_read_lens(in, "/q_lens", s->B, c->q_lens, &present)) != RA_OK)
        return st;
    if (!present) {
        free(c->q_lens);
        c->q_lens = NULL;
    }
    if ((st = h5io_read_lens(in, "/kv_lens", s->B, c->kv_lens, &present)) !=
        RA_OK)
        return st;
    if (!present) {
        free(c->kv_lens);
        c->kv_lens = NULL;
    }
    return h5io_segment_names(in, &c->q_seg_name, &c->kv_seg_name);
}

int cmd_verify(const cli_ctx *ctx, int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *val;
    int64_t sample = 0, seed = 1;
    int all = 0;
    double tol = RA_TOLERANCE;
    for (int i = 1; i < argc; i++) {
        int ok = 1;
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(verify_help, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--in") == 0) {
            ok = (in = cli_value(argc, argv, &i)) != NULL;
        } else if (strcmp(argv[i], "--out") == 0) {
            ok = (out = cli_value(argc, argv, &i)) != NULL;
        } else if (strcmp(argv[i], "--all") == 0) {
            all = 1;
        } else if (strcmp(argv[i], "--sample") == 0) {
            ok = (val = cli_value(argc, argv, &i)) != NULL &&
                 cli_parse_i64("--sample", val, 1, INT64_MAX, &sample) == 0;
        } else if (strcmp(argv[i], "--seed") == 0) {
            ok = (val = cli_value(argc, argv, &i)) != NULL &&
                 cli_parse_i64("--seed", val, 0, INT64_MAX, &seed) == 0;
        } else if (strcmp(argv[i], "--tol") == 0) {
            ok = (val = cli_value(argc, argv, &i)) != NULL &&
                 cli_parse_f64("--tol", val, &tol) == 0;
            if (ok && !(tol > 0)) {
                ra_error_set(RA_ERR_ARG, "--tol: must be > 0");
                ok = 0;
            }
        } else {
            ra_error_set(RA_ERR_ARG, "verify: unknown option '%s' (see "
                                     "ringattn verify --help)", argv[i]);
            ok = 0;
        }
        if (!ok)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    }
    if (!in || !out)
        return cli_fail(ctx, CLI_EXIT_USAGE, "verify: --in and --out are "
                                             "required");
    if (all && sample)
        return cli_fail(ctx, CLI_EXIT_USAGE, "verify: --all and --sample "
                                             "exclude each other");

    ra_shape s;
    check_ctx c = {.s = &s};
    int64_t dims_o[4], dims_l[3];
    ra_status st = ra_h5_read_shape(ctx->comm, in, &s);
    if (st == RA_OK)
        st = h5io_read_run_attrs(out, &c.run);
    if (st == RA_OK)
        st = h5io_read_out_shape(out, dims_o, dims_l);
    if (st == RA_OK)
        st = read_masks(in, &s, &c);
    if (st == RA_OK) { /* the score the run recorded, from its definition */
        ra_params p;
        ra_params_default(&p);
        if ((st = ra_score_parse(c.run.score, &p.score)) == RA_OK)
            st = cli_score_setup(in, &s, &p, &c.weights);
        c.score = (ra_ref_score){p.score, c.run.scale, c.run.sigma,
                                 p.score == RA_SCORE_ADDITIVE
                                     ? &c.weights.additive : NULL,
                                 ra_shape_dk(&s)};
    }
    if (st == RA_OK &&
        (dims_o[0] != s.B || dims_o[1] != s.N || dims_o[2] != s.H ||
         dims_o[3] != s.Dv || dims_l[0] != s.B || dims_l[1] != s.H ||
         dims_l[2] != s.N))
        st = ra_error_set(RA_ERR_INPUT, "%s: /o and /lse do not match the "
                                        "shape of %s", out, in);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());

    const double cost = (double)s.B * s.N * s.H * s.M * (s.D + s.Dv);
    const int64_t want = all ? 0 : sample ? sample
                                 : cost <= 4294967296.0 ? 0 : 1024;
    int64_t nrows = 0;
    int64_t *rows = pick_rows(&s, want, (uint64_t)seed, &nrows);
    ra_tally t = {0};
    if (!rows) {
        st = ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate the row list");
    } else {
        ra_range mine = ra_shard_range(nrows, ctx->rank, ctx->nranks);
        st = check_share(in, out, &c, rows + mine.start, mine.count, &t);
    }
    free(rows);
    free(c.q_lens);
    free(c.kv_lens);
    cli_score_free(&c.weights);
    int failed = st != RA_OK, any_failed;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, ctx->comm);
    if (any_failed)
        return cli_fail(ctx, failed ? cli_exit_code(st) : CLI_EXIT_RUNTIME,
                        failed ? ra_error_message()
                               : "verify: another rank failed");

    ra_tally g;
    if ((st = ra_tally_allreduce(ctx->comm, &t, &g)) != RA_OK)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, ra_error_message());
    const int pass = ra_tally_ok(&g, tol);
    if (ctx->rank == 0)
        printf("ringattn verify: %s: %lld rows x %lld heads (%s), causal %s, "
               "window %s, masks %s, score %s, scale %.6g: max abs err %.3e, rel err "
               "%.3e, lse err %.3e, bad rows %.0f, tolerance %.1e: %s\n",
               out, (long long)nrows, (long long)s.H,
               nrows == s.B * s.N ? "all" : "sampled",
               c.run.causal ? "yes" : "no", c.run.window ? "yes" : "no",
               c.run.masks[0] ? c.run.masks : "none", c.run.score, c.run.scale,
               g.max_abs_o, g.rel_o, g.max_lse, (double)g.bad_inf, tol,
               pass ? "PASS" : "FAIL");
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}
