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

typedef struct {
    ra_params p;
    ra_h5_source src;
    const char *in, *out, *json, *out_group;
    ra_dtype out_dtype;
    int out_compress, out_axes;
    int64_t out_chunk;
    int force, allow_nonfinite;
    const char *map_rows, *map_heads;
    const char *sinks;          /* --sinks: their dataset, or NULL */
    cli_progress prog;
    const char *profile;        /* --strategy auto: the machine profile */
    cli_ckpt_args ck;           /* --checkpoint, --resume */
} run_opts;

static const cli_opt run_own[] = {
    CLI_OPT_REQUIRED(run_opts, "--in", "FILE", in,
                     "input with /q (B,N,H,D) /k (B,M,G,D) /v (B,M,G,Dv)"),
    CLI_OPT_REQUIRED(run_opts, "--out", "FILE", out,
                     "output /o, /lse (renamed into place when complete)"),
    CLI_OPT_FORCE(run_opts, force),
    CLI_OPT_QKV_LAYOUT(run_opts, src.axes),
    CLI_OPT_TEXT(run_opts, "--q", "PATH", src.q, "/q", "dataset of queries"),
    CLI_OPT_TEXT(run_opts, "--k", "PATH", src.k, "/k", "dataset of keys"),
    CLI_OPT_TEXT(run_opts, "--v", "PATH", src.v, "/v", "dataset of values"),
    {.name = "--q-lens", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, src.q_lens, const char *),
     .shown = "/q_lens", .help = "query padding lengths (B,)"},
    {.name = "--kv-lens", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, src.kv_lens, const char *),
     .shown = "/kv_lens", .help = "key padding lengths (B,)"},
    {.name = "--segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, src.segments, const char *),
     .shown = "/segments", .help = "packed ids of both sides (B,N)"},
    {.name = "--q-segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, src.q_segments, const char *),
     .shown = "/q_segments", .help = "packed ids of queries (B,N)"},
    {.name = "--kv-segments", .kind = CLI_TEXT, .meta = "PATH",
     .offset = CLI_FIELD(run_opts, src.kv_segments, const char *),
     .shown = "/kv_segments", .help = "packed ids of keys (B,M)"},
    {.name = "--out-dtype", .kind = CLI_CUSTOM, .meta = "T",
     .offset = CLI_FIELD(run_opts, out_dtype, ra_dtype),
     .noun = "output type", .fn = cli_parse_dtype, .def = "fp32",
     .help = "type of /o: fp32, fp16, bf16 or fp64"},
    CLI_OPT_OUT_AXES(run_opts, out_axes),
    CLI_OPT_INT(run_opts, "--out-chunk", "ROWS", out_chunk, 1,
                (int64_t)1 << 40, NULL, "store /o, /lse in chunks of ROWS"),
    CLI_OPT_INT32(run_opts, "--out-compress", "LEVEL", out_compress, 1, 9,
                  NULL, "gzip the chunks at LEVEL 1..9 (needs --out-chunk)"),
    CLI_OPT_TEXT(run_opts, "--out-group", "GROUP", out_group, NULL,
                 "write /o, /lse, /attn_map under GROUP, e.g. /layer3"),
    CLI_OPT_TEXT(run_opts, "--json", "FILE", json, NULL,
                 "also write a JSON summary (shape, options, timings)"),
    CLI_OPT_TEXT(run_opts, "--attn-map", "I0:I1", map_rows, NULL,
                 "also write /attn_map: weights of query rows [I0, I1)"),
    {.name = "--attn-map-heads", .kind = CLI_TEXT, .meta = "LIST",
     .offset = CLI_FIELD(run_opts, map_heads, const char *), .shown = "0",
     .help = "query heads of the map, e.g. 0,3"},
    CLI_OPT_TEXT(run_opts, "--sinks", "PATH", sinks, NULL,
                 "attention sinks: one logit per head (H,), e.g. /sinks"),
    CLI_OPT_FLAG(run_opts, "--allow-nonfinite", allow_nonfinite,
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
    .epilog_fn = cli_forward_details,
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* --attn-map I0:I1 and --attn-map-heads LIST, checked against the shape. */
enum { MAP_HEADS_MAX = 64 };
typedef struct {
    int64_t i0, i1;
    int64_t heads[MAP_HEADS_MAX];
    int64_t nheads;
} map_request;

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

/* Everything one run owns between validate and report. */
typedef struct {
    cli_pass_data d;
    map_request mreq;
    ra_attn_map map;
    const char *q_seg, *kv_seg; /* segment datasets, or NULL */
    ra_axes axes[3];            /* the order q, k, v were read in */
    ra_h5_source recorded;      /* the datasets used, for the output */
    char mask_names[64];        /* the "masks" attribute of the output */
    char fingerprint[H5IO_FP_LEN]; /* what was read, for the output */
    ra_timing tm;
    h5io_staged staged;         /* the output, complete, not yet renamed */
    cli_ckpt ckpt;              /* --checkpoint, --resume */
    double t_read, t_write, t_total;
    int picked;                 /* --strategy auto chose pick.strategy */
    model_result pick;
} run_state;

/* What run owns beyond the shared data. */
static void run_release(run_state *r)
{
    free(r->map.out);
    r->map.out = NULL;
}

/* The output options that need no file: the same verdict on every rank. */
static ra_status out_opts_check(const run_opts *o)
{
    if (o->out_compress && !o->out_chunk)
        return ra_error_set(RA_ERR_ARG, "--out-compress: needs --out-chunk "
                            "(gzip works on chunks)");
    const char *bad_group = o->out_group
                                ? h5io_out_group_problem(o->out_group)
                                : NULL;
    if (bad_group)
        return ra_error_set(RA_ERR_ARG, "--out-group: '%s': %s",
                            o->out_group, bad_group);
    if (o->map_heads && !o->map_rows)
        return ra_error_set(RA_ERR_ARG, "--attn-map-heads: applies to the "
                            "map of --attn-map, which is not given");
    return RA_OK;
}

/* Every check that needs no compute, before the first collective of the
 * work; the ranks agree on the verdict. */
static ra_status run_validate(const cli_ctx *ctx, run_opts *o, run_state *r)
{
    r->d.in = o->in;
    o->src.tuning = &ctx->tuning; /* every read of --in */
    r->d.out = o->out;
    r->d.profile = o->profile;
    r->d.sinks_path = o->sinks;
    ra_status st = out_opts_check(o);
    if (st == RA_OK)
        st = progress_check(&o->prog);
    if (st == RA_OK)
        st = cli_paths_agree(ctx, (const h5io_named_path[]){
            {"--in", o->in, 0}, {"--profile", o->profile, 0},
            {"--out", o->out, 1}, {"--json", o->json, 1}, {NULL, NULL, 0}});
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->out, o->force,
                              (const char *const[]){o->in, NULL});
    if (st == RA_OK && o->json)
        st = cli_output_agree(ctx, o->json, o->force,
                              (const char *const[]){o->in, NULL});
    if (st == RA_OK)
        st = ra_h5_read_shape(ctx->comm, o->in, &o->src, &r->d.s, r->axes);
    if (st == RA_OK && (int)o->p.exec.strategy == CLI_STRATEGY_AUTO &&
        (st = plan_pick(ctx, &r->d.s, &o->p, NULL, o->profile, &r->pick)) ==
            RA_OK)
        r->picked = r->pick.applies; /* 0: the ring, after a warning */
    if (st != RA_OK)
        return st;
    o->p.num.nonfinite = o->allow_nonfinite;
    st = cli_pass_params(o->in, &r->d, &o->p);
    if (st == RA_OK && o->map_rows)
        st = map_parse(o->map_rows, o->map_heads ? o->map_heads : "0",
                       &r->d.s, &r->mreq);
    if (st == RA_OK)
        st = h5io_segment_names_from(o->in, &o->src, &r->q_seg, &r->kv_seg);
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK)
        st = cli_ckpt_begin(ctx, &o->ck, "forward", &r->ckpt, &o->p);
    if (st == RA_OK) /* collective */
        st = ra_call_strategy_check(ctx->comm, &r->d.s, &o->p,
                                    r->q_seg != NULL);
    return st;
}

/* The datasets the output records: q, k, v as read, and the masks
 * actually applied (NULL for those absent), so that verify reads the
 * same. */
static void mask_record(const run_opts *o, run_state *r)
{
    const ra_h5_source *src = &o->src;
    r->recorded = (ra_h5_source){.q = src->q, .k = src->k, .v = src->v,
                                 .axes = src->axes, .sinks = o->sinks};
    if (r->d.masks.q_lens)
        r->recorded.q_lens = src->q_lens ? src->q_lens : "/q_lens";
    if (r->d.masks.kv_lens)
        r->recorded.kv_lens = src->kv_lens ? src->kv_lens : "/kv_lens";
    if (r->q_seg && r->q_seg == r->kv_seg)
        r->recorded.segments = r->q_seg;
    else if (r->q_seg) {
        r->recorded.q_segments = r->q_seg;
        r->recorded.kv_segments = r->kv_seg;
    }
}

/* The layout, this rank's buffers (agreed) and the masks. */
static ra_status run_setup(const cli_ctx *ctx, run_opts *o, run_state *r)
{
    const ra_shape *s = &r->d.s;
    cli_pass_layout(&r->d, &o->p, r->q_seg != NULL);
    ra_status st = cli_tensors_alloc(&r->d.t, s, &o->p, ctx);
    r->map = (ra_attn_map){r->mreq.i0, r->mreq.i1, r->mreq.heads,
                           r->mreq.nheads, NULL};
    if (st == RA_OK && o->map_rows) {
        const ra_numerics num = cli_numerics(&o->p);
        const ra_range rows = ra_attn_map_rows(o->p.exec.layout, &num, s->N,
                                               ctx->rank, ctx->nranks, &r->map);
        const int64_t n = ra_mul_checked(ra_mul_checked(s->B, r->map.nheads),
                                         ra_mul_checked(rows.count, s->M));
        r->map.out = n >= 0 && (uint64_t)n < SIZE_MAX / sizeof(float)
                         ? malloc(sizeof(float) * (size_t)(n + 1)) : NULL;
        if (!r->map.out)
            st = ra_error_set(RA_ERR_NOMEM, "run: cannot allocate the "
                              "attention map rows of rank %d", ctx->rank);
    }
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    const ra_numerics num = cli_numerics(&o->p);
    if ((st = ra_h5_read_masks(ctx->comm, o->in, &o->src, s, o->p.exec.layout,
                               &num, &r->d.masks)) != RA_OK)
        return st;
    cli_mask_names(&r->d.masks, r->mask_names);
    mask_record(o, r);
    return h5io_resume_key(&r->ckpt.r, s, &o->p, &r->d.masks.view, 0);
}

/* Reads this rank's slices and refuses non-finite values (collective). */
static ra_status run_read(const cli_ctx *ctx, const run_opts *o, run_state *r)
{
    cli_tensors *t = &r->d.t;
    const ra_slice rows[2] = {t->qs, t->ks};
    ra_status st = ra_h5_read_inputs(ctx->comm, o->in, &o->src, &r->d.s,
                                     rows, t->q, t->k, t->v);
    const h5io_inputs in =
        {&o->src, &r->d.s, o->p.exec.layout, ra_cut_band(&o->p), t->q,
         t->k,    t->v};
    h5io_nonfinite bad;
    if (st != RA_OK || o->allow_nonfinite ||
        h5io_scan_nonfinite(ctx->comm, o->in, &in, &bad) == RA_OK)
        return st;
    char why[512];
    snprintf(why, sizeof why, "%s", ra_error_message());
    return ra_error_set(bad.dataset ? RA_ERR_INPUT : RA_ERR_MPI, "%s%s", why,
                        bad.dataset ? "; pass --allow-nonfinite to let it "
                                      "through" : "");
}

static ra_status run_compute(const cli_ctx *ctx, const run_opts *o,
                             run_state *r)
{
    cli_tensors *t = &r->d.t;
    const double t0 = MPI_Wtime();
    ra_status st = run_read(ctx, o, r);
    if (st == RA_OK)
        st = cli_fingerprint(ctx, &r->d, &o->p, &r->recorded, r->q_seg,
                             r->kv_seg, r->fingerprint);
    if (st == RA_OK)
        st = cli_ckpt_arm(&r->ckpt, r->fingerprint);
    const double t1 = MPI_Wtime();
    const int ran = st == RA_OK;
    progress_start(&o->p);
    const ra_qkv in = {t->q, t->k, t->v};
    if (st == RA_OK && o->map_rows) {
        st = ra_call_forward(ctx->comm, &r->d.s, &o->p, &r->d.masks.view, &in,
                             &(ra_out){t->o, t->lse, &r->map}, NULL);
        r->tm.total = MPI_Wtime() - t1; /* forward and map passes together */
    } else if (st == RA_OK) {
        st = ra_call_forward(ctx->comm, &r->d.s, &o->p, &r->d.masks.view, &in,
                             &(ra_out){t->o, t->lse, NULL}, &r->tm);
    }
    if (ran && st == RA_ERR_MPI) /* a stalled ring: the others wait for a
                                    stopped rank */
        cli_pass_stalled(ctx, &r->d);
    const double t2 = MPI_Wtime();
    if (st == RA_OK) {
        int64_t bq, bkv;
        ra_numerics num;
        ra_exec exec;
        ra_params_tiles(&o->p, &r->d.s, &bq, &bkv);
        ra_params_split(&o->p, &num, &exec);
        const ra_run_meta meta = {
            .num = &num, .exec = &exec,
            .scale = ra_params_scale(&o->p, &r->d.s),
            .block_q = bq, .block_kv = bkv,
            .command_line = ctx->command_line, .masks = r->mask_names,
            .map = o->map_rows ? &r->map : NULL, .source = &r->recorded,
            .out_dtype = o->out_dtype, .out_chunk = o->out_chunk,
            .out_axes = (ra_axes)(RA_AXES_BNHD + o->out_axes),
            .out_compress = o->out_compress, .out_group = o->out_group,
            .fingerprint = r->fingerprint, .tuning = &ctx->tuning};
        st = h5io_write_outputs_staged(ctx->comm, o->out, o->force, &r->d.s,
                                       &meta, t->o, t->lse, &r->staged);
    }
    r->t_read = t1 - t0;
    r->t_write = MPI_Wtime() - t2;
    r->t_total = MPI_Wtime() - t0;
    return st;
}

/* The --json summary, staged by rank 0. */
static ra_status run_json(const cli_ctx *ctx, const run_opts *o,
                          const run_state *r, double attention, double flops,
                          h5io_staged *json)
{
    int64_t bq, bkv;
    ra_params_tiles(&o->p, &r->d.s, &bq, &bkv);
    const cli_run_summary sum = {
        .in = o->in, .out = o->out, .shape = &r->d.s, .params = &o->p,
        .scale = ra_params_scale(&o->p, &r->d.s), .source = &o->src,
        .masks = r->mask_names, .out_dtype = o->out_dtype,
        .block_q = bq, .block_kv = bkv, .nranks = ctx->nranks,
        .threads = ra_params_threads(&o->p), .t_attention = attention,
        .t_read = r->t_read, .t_write = r->t_write,
        .gflops = flops / attention * 1e-9};
    return cli_json_write(o->json, o->force, &sum, json);
}

/* The result line, from rank 0, over the slowest rank's times worst. */
static void run_result_print(const cli_ctx *ctx, const run_opts *o,
                             const run_state *r, const double worst[4],
                             double flops)
{
    char rates[128];
    if (ctx->rank != 0)
        return;
    const char *note = "";
    if (strstr(r->mask_names, "segments"))
        note = " (useful: visible pairs, segments not discounted)";
    else if (o->p.num.causal || o->p.num.window || r->mask_names[0])
        note = " (useful: visible pairs only)";
    printf("ringattn run: attention %.3f s, %.1f GFLOP/s%s on %d ranks x "
           "%d threads (comm wait max %.3f s); %s; wrote %s\n", worst[0],
           flops / worst[0] * 1e-9, note, ctx->nranks,
           ra_params_threads(&o->p), worst[1],
           cli_io_rates(&r->d.s, worst[2], worst[3], rates), o->out);
    if (r->picked)
        printf("ringattn run: strategy %s by the plan: attention predicted "
               "%.3f s, measured %.3f s (measured/predicted %.2f)\n",
               ra_strategy_name(r->pick.strategy), r->pick.t_total, worst[0],
               worst[0] / r->pick.t_total);
}


/* Stages --json (rank 0), then renames the output and the summary onto
 * their names together: a summary that cannot be written leaves neither,
 * the earlier files kept. Prints the result line from rank 0; every rank
 * returns the same status. */
static ra_status run_report(const cli_ctx *ctx, const run_opts *o,
                            run_state *r)
{
    const double flops = ra_params_forward_flops(&r->d.s, &o->p,
                                                 &r->d.masks.view);
    double mine[4] = {r->tm.total, r->tm.comm_wait, r->t_read, r->t_write};
    double worst[4];
    h5io_staged json = {.f = NULL}, *files[2] = {&r->staged, &json};
    MPI_Reduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    ra_status st = RA_OK;
    if (ctx->rank == 0 && o->json)
        st = run_json(ctx, o, r, worst[0], flops, &json);
    if ((st = ra_agree(ctx->comm, st)) == RA_OK)
        st = h5io_publish(ctx->comm, files, 2);
    else
        h5io_discard(ctx->comm, &r->staged);
    if (st == RA_OK)
        run_result_print(ctx, o, r, worst, flops);
    return st;
}

/* What run prints after the parameter table. */
static ra_status run_print(const cli_ctx *ctx, run_opts *o, run_state *r)
{
    cli_print_source(ctx, &o->src, r->axes);
    if (r->picked)
        plan_pick_print(ctx, &r->pick, o->profile);
    progress_setup(ctx, &o->prog, &r->d.s, &o->p, o->profile);
    progress_print_param(ctx, &o->prog);
    return RA_OK;
}

int cmd_run(const cli_ctx *ctx, int argc, char **argv)
{
    run_opts o = {0};
    run_state r = {0};
    const int code = cli_parse_pass(ctx, &run_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &r.d, &o.p);
    ra_status st = run_validate(ctx, &o, &r);
    if (st == RA_OK)
        st = run_setup(ctx, &o, &r);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &r.d, &o.p);
        st = run_print(ctx, &o, &r);
    }
    if (st == RA_OK)
        st = run_compute(ctx, &o, &r);
    cli_pass_writing(ctx, &r.d, &o.p);
    if (st == RA_OK)
        st = run_report(ctx, &o, &r);
    st = cli_ckpt_end(&r.ckpt, st);
    run_release(&r);
    return cli_pass_end(ctx, &r.d, st);
}
