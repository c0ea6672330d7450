/* cmd_run.c: `ringattn run`: HDF5 in, ring attention, HDF5 out.
 * parse -> validate (every check that needs no compute, agreed by all
 * ranks) -> set up (layout, buffers, masks) -> run (read, scan, forward,
 * write) -> report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "cli.h"
#include "driver.h"
#include "h5io.h"
#include "internal.h"
#include "placement.h"
#include "plan.h"
#include "progress.h"
#include "resume.h"

/* --attn-map I0:I1 and --attn-map-heads LIST, checked against the shape. */
enum { MAP_HEADS_MAX = 64 };
typedef struct {
    int64_t i0, i1;
    int64_t heads[MAP_HEADS_MAX];
    int64_t nheads;
} map_request;

typedef struct {
    ra_params p;
    h5io_pass_req rq;           /* the files, datasets and output's form */
    const char *json;
    int out_axes;               /* an index of cli_out_axes */
    const char *map_rows, *map_heads;
    cli_progress prog;
    const char *profile;        /* --strategy auto: the machine profile */
    cli_ckpt_args ck;           /* --checkpoint, --resume */
    map_request mreq;           /* --attn-map's, against the shape */
    int picked;                 /* --strategy auto chose pick.strategy */
    model_result pick;
} run_opts;

static const cli_opt run_own[] = {
    CLI_OPT_REQUIRED(run_opts, "--in", "FILE", rq.in,
                     "input with /q (B,N,H,D) /k (B,M,G,D) /v (B,M,G,Dv)"),
    CLI_OPT_REQUIRED(run_opts, "--out", "FILE", rq.out,
                     "output /o, /lse (renamed into place when complete)"),
    CLI_OPT_FORCE(run_opts, rq.force),
    CLI_OPT_QKV_LAYOUT(run_opts, rq.src.axes),
    CLI_OPT_TEXT(run_opts, "--q", "PATH", rq.src.q, "/q",
                 "dataset of queries"),
    CLI_OPT_TEXT(run_opts, "--k", "PATH", rq.src.k, "/k",
                 "dataset of keys"),
    CLI_OPT_TEXT(run_opts, "--v", "PATH", rq.src.v, "/v",
                 "dataset of values"),
    {.name = "--q-lens", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, rq.src.q_lens,
                                const char *),
     .shown = "/q_lens", .help = "query padding lengths (B,)"},
    {.name = "--kv-lens", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, rq.src.kv_lens,
                                const char *),
     .shown = "/kv_lens", .help = "key padding lengths (B,)"},
    {.name = "--segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, rq.src.segments,
                                const char *),
     .shown = "/segments", .help = "packed ids of both sides (B,N)"},
    {.name = "--q-segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, rq.src.q_segments,
                                const char *),
     .shown = "/q_segments", .help = "packed ids of queries (B,N)"},
    {.name = "--kv-segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, rq.src.kv_segments,
                                const char *),
     .shown = "/kv_segments", .help = "packed ids of keys (B,M)"},
    {.name = "--out-dtype", .kind = CLI_CUSTOM, .meta = "T",
     .offset = CLI_FIELD(run_opts, rq.out_dtype, ra_dtype),
     .noun = "output type", .fn = cli_parse_dtype, .def = "fp32",
     .help = "type of /o: fp32, fp16, bf16 or fp64"},
    CLI_OPT_OUT_AXES(run_opts, out_axes),
    CLI_OPT_INT(run_opts, "--out-chunk", "ROWS", rq.out_chunk, 1,
                (int64_t)1 << 40, NULL, "store /o, /lse in chunks of ROWS"),
    CLI_OPT_INT32(run_opts, "--out-compress", "LEVEL",
                  rq.out_compress, 1, 9,
                  NULL, "gzip the chunks at LEVEL 1..9 (needs --out-chunk)"),
    CLI_OPT_TEXT(run_opts, "--out-group", "GROUP", rq.out_group, NULL,
                 "write /o, /lse, /attn_map under GROUP, e.g. /layer3"),
    CLI_OPT_TEXT(run_opts, "--json", "FILE", json, NULL,
                 "also write a JSON summary (shape, options, timings)"),
    CLI_OPT_TEXT(run_opts, "--attn-map", "I0:I1", map_rows, NULL,
                 "also write /attn_map: weights of query rows [I0, I1)"),
    {.name = "--attn-map-heads", .kind = CLI_TEXT, .meta = "LIST",
     .offset = CLI_FIELD(run_opts, map_heads, const char *), .shown = "0",
     .help = "query heads of the map, e.g. 0,3"},
    CLI_OPT_TEXT(run_opts, "--sinks", "PATH", rq.src.sinks, NULL,
                 "attention sinks: one logit per head (H,), e.g. /sinks"),
    CLI_OPT_FLAG(run_opts, "--allow-nonfinite",
                 rq.allow_nonfinite,
                 "let NaN and inf inputs through (refused otherwise)"),
    CLI_OPT_PROFILE(run_opts, profile),
    {0},
};

static const cli_spec run_spec = {
    .name = "run",
    .usage =
    "usage: mpirun -np P ringattn run --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Attention of IN.h5's /q /k /v (and its masks) on P ranks into OUT.h5.\n",
    .groups = {{run_own, 0}, {cli_forward_opts, offsetof(run_opts, p)},
               {cli_pass_opts, offsetof(run_opts, p)},
               {cli_progress_opts, offsetof(run_opts, prog)},
               {cli_ckpt_opts, offsetof(run_opts, ck)}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

static ra_status map_parse(const char *rows, const char *heads,
                           const ra_shape *s, map_request *m)
{
    char a[32];
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
    const int n = cli_parse_i64_list("--attn-map-heads", heads, 0, s->H - 1,
                                     m->heads, MAP_HEADS_MAX, "query heads");
    m->nheads = n;
    return n < 0 ? RA_ERR_ARG : RA_OK;
}

/* The output options that need no file: the same verdict on every rank. */
static ra_status out_opts_check(const run_opts *o)
{
    const char *bad_storage =
        h5io_storage_problem(o->rq.out_chunk, o->rq.out_compress);
    if (bad_storage)
        return ra_error_set(RA_ERR_ARG, "--out-compress: %s (--out-chunk "
                            "ROWS)", bad_storage);
    const char *bad_group = o->rq.out_group
                                ? h5io_out_group_problem(o->rq.out_group)
                                : NULL;
    if (bad_group)
        return ra_error_set(RA_ERR_ARG, "--out-group: '%s': %s",
                            o->rq.out_group, bad_group);
    if (o->map_heads && !o->map_rows)
        return ra_error_set(RA_ERR_ARG, "--attn-map-heads: applies to the "
                            "map of --attn-map, which is not given");
    return RA_OK;
}

/* Every check that needs no compute, before the first collective of the
 * work; the ranks agree on the verdict. */
static ra_status run_validate(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    run_opts *o = opts;
    r->d.profile = o->profile;
    ra_status st = out_opts_check(o);
    if (st == RA_OK)
        st = progress_check(&o->prog);
    if (st == RA_OK)
        st = cli_paths_agree(ctx, (const h5io_named_path[]){
            {"--in", o->rq.in, 0}, {"--profile", o->profile, 0},
            {"--out", o->rq.out, 1}, {"--json", o->json, 1},
            {NULL, NULL, 0}});
    const char *const inputs[] = {o->rq.in, NULL};
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->rq.out, o->rq.force, inputs);
    if (st == RA_OK && o->json)
        st = cli_output_agree(ctx, o->json, o->rq.force, inputs);
    cli_pass_ctx(ctx, &o->rq, H5IO_PASS_FORWARD, &o->p);
    o->rq.out_axes = (ra_axes)(RA_AXES_BNHD + o->out_axes);
    if (st == RA_OK)
        st = h5io_pass_open(&o->rq, &r->j);
    if (st == RA_OK && (int)o->p.exec.strategy == CLI_STRATEGY_AUTO &&
        (st = plan_pick(ctx, &r->j.s, &o->p, NULL, o->profile, &o->pick)) ==
            RA_OK)
        o->picked = o->pick.applies; /* 0: the ring, after a warning */
    if (st != RA_OK)
        return st;
    o->p.num.nonfinite = o->rq.allow_nonfinite;
    const ra_status map = !o->map_rows ? RA_OK
        : map_parse(o->map_rows, o->map_heads ? o->map_heads : "0", &r->j.s,
                    &o->mreq);
    r->j.rq.map = (ra_attn_map){o->mreq.i0, o->mreq.i1, o->mreq.heads,
                                o->mreq.nheads, NULL};
    st = cli_pass_inputs(ctx, &r->d, &r->j, &o->p, map);
    return st == RA_OK ? cli_ckpt_begin(ctx, &o->ck, "forward", &r->ckpt,
                                        &o->p)
                       : st;
}

/* Reals at 17 digits: the scale and sigma read back exactly. */
enum { RUN_JSON_DIGITS = 17 };

/* The options that changed the result; a window not set is null, and a
 * parameter the score does not take is left out. */
static json_t *json_rules(const run_opts *o, const cli_pass *r)
{
    const ra_params *p = &o->p;
    const ra_h5_source *src = &o->rq.src;
    return json_pack(
        "{s:b, s:o, s:s, s:o*, s:o*, s:s, s:s, s:o, s:o, s:o, s:o, s:s}",
        "causal", p->num.causal, "window",
        p->num.window ? json_pack("[I, I]", (json_int_t)p->num.window_left,
                                  (json_int_t)p->num.window_right)
                      : json_null(),
        "score", ra_score_name(p->num.score), "scale",
        p->num.score == RA_SCORE_DOT ? json_real(ra_params_scale(p, &r->d.s))
                                     : NULL,
        "sigma",
        p->num.score == RA_SCORE_GAUSSIAN ? json_real(p->num.sigma) : NULL,
        "layout", ra_layout_name(p->exec.layout), "qkv_layout",
        h5io_qkv_layout_name(src->axes), "q_dataset",
        perf_json_text(src->q ? src->q : "/q"), "k_dataset",
        perf_json_text(src->k ? src->k : "/k"), "v_dataset",
        perf_json_text(src->v ? src->v : "/v"), "masks",
        perf_json_text(r->j.mask_names),
        "out_dtype", ra_dtype_name(o->rq.out_dtype));
}

/* `run --json`'s summary of one run (the shape, every option that changed
 * the result, the timings; attention the slowest rank's), keys in the
 * order they are written, staged by rank 0 under a temporary name into
 * *staged for h5io_publish with the output; RA_ERR_IO on failure, nothing
 * left. */
static ra_status run_json(const cli_ctx *ctx, const run_opts *o,
                          const cli_pass *r, double attention, double flops,
                          h5io_staged *staged)
{
    const ra_shape *s = &r->d.s;
    int64_t bq, bkv;
    ra_params_tiles(&o->p, s, &bq, &bkv);
    ra_status st = h5io_text_begin(staged, o->json, o->rq.force);
    if (st != RA_OK)
        return st;
    json_t *v = json_pack(
        "{s:s, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
        "version", RA_VERSION_STRING, "input", perf_json_text(o->rq.in),
        "output", perf_json_text(o->rq.out), "shape", "B", (json_int_t)s->B,
        "N", (json_int_t)s->N, "M", (json_int_t)s->M, "H", (json_int_t)s->H,
        "G", (json_int_t)s->G, "D", (json_int_t)s->D, "Dv",
        (json_int_t)s->Dv);
    json_t *tail = json_pack(
        "{s:[I, I], s:i, s:i, s:{s:o, s:o, s:o}, s:o}", "tiles",
        (json_int_t)bq, (json_int_t)bkv, "ranks", ctx->nranks, "threads",
        ra_params_threads(&o->p), "seconds",
        "attention", perf_json_fixed(attention, "%.6f"),
        "read", perf_json_fixed(r->t_read, "%.6f"),
        "write", perf_json_fixed(r->j.t_write, "%.6f"),
        "gflops", perf_json_fixed(flops / attention * 1e-9, "%.3f"));
    json_t *all = perf_json_merge(perf_json_merge(v, json_rules(o, r)), tail);
    if (perf_json_dump(staged->f, all, RUN_JSON_DIGITS) == 0)
        return h5io_text_end(staged);
    h5io_staged_discard(staged);
    return ra_error_set(RA_ERR_IO, "%s: writing the JSON summary failed",
                        o->json);
}

/* The result line, from rank 0, over the slowest rank's times worst. */
static void run_result_print(const cli_ctx *ctx, const run_opts *o,
                             const cli_pass *r, const double worst[4],
                             double flops)
{
    char rates[128];
    if (ctx->rank != 0)
        return;
    const char *note = "";
    if (strstr(r->j.mask_names, "segments"))
        note = " (useful: visible pairs, segments not discounted)";
    else if (o->p.num.causal || o->p.num.window || r->j.mask_names[0])
        note = " (useful: visible pairs only)";
    printf("ringattn run: attention %.3f s, %.1f GFLOP/s%s on %d ranks x "
           "%d threads (comm wait max %.3f s); %s; wrote %s\n", worst[0],
           flops / worst[0] * 1e-9, note, ctx->nranks,
           ra_params_threads(&o->p), worst[1],
           cli_io_rates(&r->d.s, worst[2], worst[3], rates), o->rq.out);
    if (o->picked)
        printf("ringattn run: strategy %s by the plan: attention predicted "
               "%.3f s, measured %.3f s (measured/predicted %.2f)\n",
               ra_strategy_name(o->pick.strategy), o->pick.t_total, worst[0],
               worst[0] / o->pick.t_total);
}

/* Stages --json (rank 0), then renames the output and the summary onto
 * their names together: a summary that cannot be written leaves neither,
 * the earlier files kept. Prints the result line from rank 0; every rank
 * returns the same status. */
static ra_status run_report(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    const run_opts *o = opts;
    const double flops = ra_params_forward_flops(&r->d.s, &o->p,
                                                 &r->j.masks.view);
    double mine[4] = {r->j.tm.total, r->j.tm.comm_wait, r->t_read,
                      r->j.t_write};
    double worst[4];
    h5io_staged json = {.f = NULL}, *files[2] = {&r->j.staged, &json};
    MPI_Reduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    ra_status st = RA_OK;
    if (ctx->rank == 0 && o->json)
        st = run_json(ctx, o, r, worst[0], flops, &json);
    if ((st = ra_agree(ctx->comm, st)) == RA_OK)
        st = h5io_publish(ctx->comm, files, 2);
    else
        h5io_discard(ctx->comm, &r->j.staged);
    if (st == RA_OK)
        run_result_print(ctx, o, r, worst, flops);
    return st;
}

/* Continues the parameter table: the datasets q, k, v were read from, the
 * axis order each was read in (used), and the order of datasets without
 * an axes attribute (src->axes). */
static void print_source(const cli_ctx *ctx, const ra_h5_source *src,
                         const ra_axes used[3])
{
    if (ctx->rank != 0)
        return;
    const char *names[3] = {src->q ? src->q : "/q", src->k ? src->k : "/k",
                            src->v ? src->v : "/v"};
    printf("# %-10s %s (%s), %s (%s), %s (%s)\n", "inputs", names[0],
           ra_axes_name(used[0]), names[1], ra_axes_name(used[1]), names[2],
           ra_axes_name(used[2]));
    printf("# %-10s %s (datasets without an axes attribute)\n",
           "qkv-layout", h5io_qkv_layout_name(src->axes));
    fflush(stdout);
}

/* What run prints after the parameter table. */
static ra_status run_print(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    run_opts *o = opts;
    print_source(ctx, &o->rq.src, r->j.axes);
    if (o->picked)
        plan_pick_print(ctx, &o->pick, o->profile);
    progress_setup(ctx, &o->prog, &r->d.s, &o->p, o->profile);
    progress_print_param(ctx, &o->prog);
    return RA_OK;
}

int cmd_run(const cli_ctx *ctx, int argc, char **argv)
{
    static const cli_pass_driver drv = {&run_spec, run_validate, run_print,
                                        run_report};
    run_opts o = {0};
    cli_pass r = {0};
    return cli_pass_main(ctx, &drv, &o, &o.p, &r, argc, argv);
}
