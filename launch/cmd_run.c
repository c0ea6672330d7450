/* cmd_run.c: `ringattn run`: HDF5 in, ring attention, HDF5 out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

static const char run_help[] =
    "usage: mpirun -np P ringattn run --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Computes o = softmax(scale * q k^T) v and lse for /q /k /v of IN.h5 on P\n"
    "ranks (blockwise ring attention) and writes /o and /lse to OUT.h5. The\n"
    "optional datasets /q_lens /kv_lens (B,) (padding) and /q_segments (B,N)\n"
    "/kv_segments (B,M) or /segments (packed sequences) of IN.h5 are applied.\n"
    "\n"
    "  --in FILE        input with /q (B,N,H,D) /k (B,M,G,D) /v (B,M,G,Dv)\n"
    "  --out FILE       output; written to a temporary file, renamed at the end\n"
    "  --force          replace OUT.h5 if it exists (refused otherwise)\n"
    "  --causal         query i sees keys j <= i + (M - N) (bottom-right aligned)\n"
    "  --window L[,R]   sliding window: query i sees keys j with\n"
    "                   i' - L <= j <= i' + R, i' = i + (M - N); R defaults to 0\n"
    "  --scale S        dot score scale (default 1/sqrt(D))\n"
    "  --score NAME     dot (default), gaussian (-||q-k||^2 / (2 sigma^2)) or\n"
    "                   additive (w_v . tanh(W_q q + W_k k), weights from the\n"
    "                   input's /additive/w_q (A,D), /additive/w_k (A,Dk),\n"
    "                   /additive/w_v (A); /k may then have its own dim Dk)\n"
    "  --sigma S        bandwidth of the gaussian score (default 1)\n"
    "  --attn-map I0:I1 also write /attn_map (B, heads, I1-I0, M): the exact\n"
    "                   softmax weights of query rows [I0, I1) over all keys\n"
    "  --attn-map-heads LIST  query heads of the map, e.g. 0,3 (default 0)\n"
    "  --block-q N      query tile rows (default 256; 128 with a window)\n"
    "  --block-kv N     key tile rows (default 256 for D <= 64, else 512;\n"
    "                   with a window of span w <= 1920: w + 127, rounded up)\n"
    "  --layout NAME    how the sequence is cut over ranks: auto (default:\n"
    "                   zigzag when causal without a window, else contiguous),\n"
    "                   contiguous, zigzag or striped; files keep the natural\n"
    "                   token order either way\n"
    "  --threads T      OpenMP threads per rank (default OMP_NUM_THREADS)\n"
    "  --mha            the multi-head attention layer instead (inputs /x or\n"
    "                   /x_q, /x_kv and weights; see run --mha --help)\n"
    "  --allow-nonfinite  let NaN and infinite inputs through (refused by\n"
    "                   default, naming the first one)\n"
    "  --help           this text\n";

/* Checks of the output path that need no collective work (not the input,
 * an existing writable directory, no existing file unless force), made on
 * rank 0 before any reading and shared so that every rank takes the same
 * branch. */
static ra_status check_output_path(const cli_ctx *ctx, const char *in,
                                   const char *out, int force)
{
    int verdict = RA_OK;
    if (ctx->rank == 0)
        verdict = h5io_output_check(out, force, (const char *const[]){in, NULL});
    MPI_Bcast(&verdict, 1, MPI_INT, 0, ctx->comm);
    return (ra_status)verdict;
}

/* --attn-map I0:I1 and --attn-map-heads LIST, checked against the shape. */
typedef struct {
    int64_t i0, i1;
    int64_t heads[64];
    int64_t nheads;
} map_request;

static ra_status map_parse(const char *rows, const char *heads,
                           const ra_shape *s, map_request *m)
{
    char a[32], *end;
    const char *colon = strchr(rows, ':');
    size_t len = colon ? (size_t)(colon - rows) : 0;
    if (!colon || len == 0 || len >= sizeof a)
        return ra_error_set(RA_ERR_ARG, "--attn-map: '%s' is not I0:I1", rows);
    memcpy(a, rows, len);
    a[len] = '\0';
    if (cli_parse_i64("--attn-map", a, 0, s->N - 1, &m->i0) != 0 ||
        cli_parse_i64("--attn-map", colon + 1, 1, s->N, &m->i1) != 0)
        return RA_ERR_ARG;
    if (m->i1 <= m->i0)
        return ra_error_set(RA_ERR_ARG, "--attn-map: %s is empty (need I0 < "
                            "I1 <= N = %lld)", rows, (long long)s->N);
    m->nheads = 0;
    for (const char *p = heads; *p;) {
        if (m->nheads == 64)
            return ra_error_set(RA_ERR_ARG, "--attn-map-heads: at most 64");
        long long h = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || h < 0 || h >= s->H)
            return ra_error_set(RA_ERR_ARG, "--attn-map-heads: '%s' is not a "
                                "list of heads in [0, H=%lld)", heads,
                                (long long)s->H);
        m->heads[m->nheads++] = h;
        p = *end ? end + 1 : end;
    }
    if (m->nheads == 0)
        return ra_error_set(RA_ERR_ARG, "--attn-map-heads: empty list");
    return RA_OK;
}

int cmd_run(const cli_ctx *ctx, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) /* the layer has its own inputs */
        if (strcmp(argv[i], "--mha") == 0)
            return cmd_run_mha(ctx, argc, argv);
    ra_params p;
    ra_params_default(&p);
    const char *in = NULL, *out = NULL;
    int force = 0, allow_nonfinite = 0;
    const char *map_rows_opt = NULL, *map_heads_opt = "0";
    for (int i = 1; i < argc; i++) {
        int taken = cli_params_flag(&p, argc, argv, &i);
        if (taken < 0)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        if (taken)
            continue;
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(run_help, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--in") == 0) {
            if (!(in = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--out") == 0) {
            if (!(out = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--allow-nonfinite") == 0) {
            allow_nonfinite = 1;
            p.nonfinite = 1;
        } else if (strcmp(argv[i], "--attn-map") == 0) {
            if (!(map_rows_opt = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--attn-map-heads") == 0) {
            if (!(map_heads_opt = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else {
            ra_error_set(RA_ERR_ARG, "run: unknown option '%s' (see ringattn "
                                     "run --help)", argv[i]);
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        }
    }
    if (!in || !out)
        return cli_fail(ctx, CLI_EXIT_USAGE,
                        "run: --in and --out are required (see ringattn run "
                        "--help)");

    ra_status st = check_output_path(ctx, in, out, force);
    ra_shape s;
    if (st == RA_OK)
        st = ra_h5_read_shape(ctx->comm, in, &s);
    /* keys of another head dim than the queries: the additive score only */
    if (st == RA_OK && s.Dk != 0 && s.Dk != s.D &&
        p.score != RA_SCORE_ADDITIVE)
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset /k: head dim Dk = %lld "
                          "differs from /q (D = %lld), which only the "
                          "additive score allows", in, (long long)s.Dk,
                          (long long)s.D);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());

    /* The score's own inputs, and the map's rows and heads. */
    cli_score_inputs score_in = {0};
    map_request mreq = {0};
    st = cli_score_setup(in, &s, &p, &score_in);
    if (st == RA_OK && map_rows_opt)
        st = map_parse(map_rows_opt, map_heads_opt, &s, &mreq);
    if (st != RA_OK) {
        cli_score_free(&score_in);
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    }

    /* Resolve the layout once; everything below sees a concrete one. */
    const char *q_seg_name, *kv_seg_name;
    st = h5io_segment_names(in, &q_seg_name, &kv_seg_name);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    const int layout_auto = p.layout == RA_LAYOUT_AUTO;
    p.layout = ra_params_layout(&p, q_seg_name != NULL);
    const ra_layout lay = p.layout;
    const ra_slice qs = ra_layout_slice(lay, s.N, ctx->rank, ctx->nranks);
    const ra_slice ks = ra_layout_slice(lay, s.M, ctx->rank, ctx->nranks);
    const size_t nq = (size_t)(s.B * qs.count * s.H * s.D);
    const size_t nk = (size_t)(s.B * ks.count * s.G * ra_shape_dk(&s));
    const size_t nv = (size_t)(s.B * ks.count * s.G * s.Dv);
    const size_t no = (size_t)(s.B * qs.count * s.H * s.Dv);
    const size_t nl = (size_t)(s.B * s.H * qs.count);
    /* One allocation for every local tensor: q | k | v | o | lse. */
    const size_t counts[5] = {nq, nk, nv, no, nl};
    const size_t bytes = cli_alloc_bytes(counts, 5, sizeof(float));
    float *mem = bytes ? malloc(bytes) : NULL;
    int fail = mem == NULL, any_fail;
    MPI_Allreduce(&fail, &any_fail, 1, MPI_INT, MPI_MAX, ctx->comm);
    ra_attn_map map = {mreq.i0, mreq.i1, mreq.heads, mreq.nheads, NULL};
    if (map_rows_opt) {
        const ra_range rows = ra_attn_map_rows(lay, s.N, ctx->rank,
                                               ctx->nranks, &map);
        map.out = malloc(sizeof(float) * (size_t)(s.B * map.nheads *
                                                  rows.count * s.M + 1));
        fail |= map.out == NULL;
        MPI_Allreduce(&fail, &any_fail, 1, MPI_INT, MPI_MAX, ctx->comm);
    }
    if (any_fail) {
        free(mem);
        free(map.out);
        cli_score_free(&score_in);
        return cli_fail(ctx, CLI_EXIT_RUNTIME,
                        "run: cannot allocate the local slices");
    }
    float *q = mem, *k = q + nq, *v = k + nk, *o = v + nv, *lse = o + no;
    ra_h5_masks masks = {0};
    st = ra_h5_read_masks(ctx->comm, in, &s, lay, &masks);
    if (st != RA_OK) {
        free(mem);
        free(map.out);
        cli_score_free(&score_in);
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    }
    /* the mask datasets in use, for the output's "masks" attribute */
    char mask_names[64] = "";
    const char *names[3] = {masks.q_lens ? "q_lens" : NULL,
                            masks.kv_lens ? "kv_lens" : NULL,
                            masks.q_segments ? "segments" : NULL};
    for (int i = 0; i < 3; i++)
        if (names[i])
            snprintf(mask_names + strlen(mask_names),
                     sizeof mask_names - strlen(mask_names), "%s%s",
                     mask_names[0] ? "," : "", names[i]);

    cli_print_params(ctx, &s, &p, layout_auto, in, out);
    double t0 = MPI_Wtime();
    ra_timing tm = {0};
    st = ra_h5_read_inputs(ctx->comm, in, &s, lay, q, k, v);
    h5io_nonfinite bad;
    if (st == RA_OK && !allow_nonfinite &&
        h5io_scan_nonfinite(ctx->comm, in, &s, lay, q, k, v, &bad) != RA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(bad.dataset ? RA_ERR_INPUT : RA_ERR_MPI,
                          "%s%s", why, bad.dataset ? "; pass "
                          "--allow-nonfinite to let it through" : "");
    }
    double t1 = MPI_Wtime();
    if (st == RA_OK && map_rows_opt) {
        st = ra_forward_map(ctx->comm, &s, &p, &masks.view, q, k, v, o, lse,
                            &map);
        tm.total = MPI_Wtime() - t1; /* forward and map passes together */
    } else if (st == RA_OK) {
        st = ra_forward_ex(ctx->comm, &s, &p, &masks.view, q, k, v, o, lse, &tm);
    }
    double t2 = MPI_Wtime();
    if (st == RA_OK) {
        int64_t bq, bkv;
        ra_params_tiles(&p, &s, &bq, &bkv);
        ra_run_meta meta = {.params = &p, .scale = ra_params_scale(&p, &s),
                            .block_q = bq, .block_kv = bkv,
                            .command_line = ctx->command_line,
                            .masks = mask_names,
                            .map = map_rows_opt ? &map : NULL};
        st = ra_h5_write_outputs(ctx->comm, out, force, &s, &meta, o, lse);
    }
    double t3 = MPI_Wtime();
    const double flops = ra_forward_flops(&s, &p, &masks.view);
    ra_h5_masks_free(&masks);
    free(mem);
    free(map.out);
    cli_score_free(&score_in);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());

    double mine[5] = {tm.total, tm.comm_wait, t3 - t0, t1 - t0, t3 - t2};
    double worst[5];
    MPI_Reduce(mine, worst, 5, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    if (ctx->rank == 0) {
        const double gflops = flops / worst[0] * 1e-9;
        char rates[128];
        const char *note = "";
        if (strstr(mask_names, "segments"))
            note = " (useful: visible pairs, segments not discounted)";
        else if (p.causal || p.window || mask_names[0])
            note = " (useful: visible pairs only)";
        printf("ringattn run: attention %.3f s, %.1f GFLOP/s%s on %d ranks x "
               "%d threads (comm wait max %.3f s); %s; wrote %s\n",
               worst[0], gflops, note, ctx->nranks, ra_params_threads(&p),
               worst[1], cli_io_rates(&s, worst[3], worst[4], rates), out);
    }
    return CLI_EXIT_OK;
}
