/* cmd_gen.c: `ringattn gen`: seeded random inputs, written in parallel. */
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"

typedef struct {
    cli_shape cs;
    const char *out;
    int force, mha, backward, sinks;
    ra_dtype dtype;
    int64_t embed, seed;
    cli_random_masks rm;
} gen_opts;

/* A type gen writes: fp32, fp64 or fp16 (cli_parse_dtype's names and
 * aliases; bfloat16 inputs are not generated). */
static int parse_gen_dtype(const cli_opt *o, const char *val, void *base)
{
    if (cli_parse_dtype(o, val, base) == 0 &&
        *(ra_dtype *)((char *)base + o->offset) != RA_DTYPE_BF16)
        return 0;
    ra_error_set(RA_ERR_ARG, "%s: '%s' is not fp32, fp64 or fp16 (float32, "
                 "float64, float16 also work)", o->name, val);
    return -1;
}

static const cli_opt gen_own[] = {
    CLI_OPT_REQUIRED(gen_opts, "--out", "FILE", out,
                     "file to write (refused if it exists, unless --force)"),
    CLI_OPT_FORCE(gen_opts, force),
    {.name = "--dtype", .kind = CLI_CUSTOM, .meta = "T",
     .offset = CLI_FIELD(gen_opts, dtype, ra_dtype), .fn = parse_gen_dtype,
     .def = "fp32", .help = "fp32, fp64 or fp16 for /q, /k, /v and /do"},
    CLI_OPT_INT(gen_opts, "--seed", "S", seed, 0, INT64_MAX, "1",
                "seed of every value"),
    CLI_OPT_FLAG(gen_opts, "--mha", mha,
                 "write run --mha's inputs instead (/x or /x_q, /x_kv)"),
    CLI_OPT_INT(gen_opts, "--embed", "E", embed, 1, 1 << 20, "64",
                "model width of the layer inputs"),
    CLI_OPT_FLAG(gen_opts, "--backward", backward,
                 "also write an output gradient /do for run --backward"),
    CLI_OPT_FLAG(gen_opts, "--sinks", sinks,
                 "also write /sinks (H,), unit-normal, for run --sinks"),
    {0},
};

static const cli_spec gen_spec = {
    .name = "gen",
    .usage = "usage: [mpirun -np P] ringattn gen --out IN.h5 [options]\n"
             "\n"
             "Writes /q (B,N,H,D), /k (B,M,G,D), /v (B,M,G,Dv) of unit-normal\n"
             "values. Every value depends only on the seed and its index: any P\n"
             "gives the same file contents. --lens adds /q_lens and /kv_lens\n"
             "(B,) int64; --segments adds the ids /segments (B,N), or\n"
             "/q_segments (B,N) and /kv_segments (B,M) when M differs.\n"
             "--sinks adds /sinks (H,) float32, unit-normal attention-sink\n"
             "logits (the spread of the scaled scores of q and k).\n",
    .groups = {{cli_seq_opts, offsetof(gen_opts, cs)},
               {cli_shape_opts, offsetof(gen_opts, cs)},
               {gen_own, 0}, {cli_random_mask_opts, offsetof(gen_opts, rm)}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

static void gen_report(const gen_opts *o)
{
    const ra_shape *s = &o->cs.shape;
    if (o->mha) {
        printf("ringattn gen: wrote %s: layer inputs B=%lld N=%lld%s E=%lld, "
               "weights for H=%lld G=%lld D=%lld Dv=%lld, seed %lld\n", o->out,
               (long long)s->B, (long long)s->N,
               o->cs.seq_kv_set ? " (cross, M given)" : "",
               (long long)o->embed, (long long)s->H, (long long)s->G,
               (long long)s->D, (long long)s->Dv, (long long)o->seed);
        return;
    }
    printf("ringattn gen: wrote %s: q (%lld,%lld,%lld,%lld) k (%lld,%lld,"
           "%lld,%lld) v (%lld,%lld,%lld,%lld) %s seed %lld\n",
           o->out, (long long)s->B, (long long)s->N, (long long)s->H,
           (long long)s->D, (long long)s->B, (long long)s->M,
           (long long)s->G, (long long)s->D, (long long)s->B,
           (long long)s->M, (long long)s->G, (long long)s->Dv,
           ra_dtype_name(o->dtype), (long long)o->seed);
}

/* The shape and the output path, checked before anything is written. */
static ra_status gen_validate(const cli_ctx *ctx, gen_opts *o)
{
    cli_shape_finish(&o->cs);
    ra_status st = ra_shape_check(&o->cs.shape);
    if (st == RA_OK && o->mha && o->sinks)
        st = ra_error_set(RA_ERR_ARG, "gen --sinks: not with --mha (the "
                          "layer takes no sinks)");
    if (st == RA_OK && !o->mha)
        st = cli_mem_check(ctx, h5io_gen_bytes(&o->cs.shape, ctx->rank,
                                               ctx->nranks, o->backward,
                                               o->dtype),
                           0, "the generated slices");
    st = ra_agree(ctx->comm, st);
    return st == RA_OK ? cli_output_agree(ctx, o->out, o->force, NULL) : st;
}

static ra_status gen_write(const cli_ctx *ctx, const gen_opts *o)
{
    const ra_shape *s = &o->cs.shape;
    if (o->mha)
        return h5io_gen_mha(ctx->comm, o->out, o->force, s, o->embed,
                            o->cs.seq_kv_set, (uint64_t)o->seed,
                            &ctx->tuning);
    const h5io_gen_spec g = {o->dtype, (uint64_t)o->seed,
                             o->rm.lens, o->rm.segment_avg, o->backward,
                             &ctx->tuning, o->sinks};
    return h5io_gen_backward(ctx->comm, o->out, o->force, s, &g);
}

int cmd_gen(const cli_ctx *ctx, int argc, char **argv)
{
    gen_opts o = {0};
    cli_shape_default(&o.cs);
    int code = cli_parse_or_exit(ctx, &gen_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    ra_status st = gen_validate(ctx, &o);
    if (st == RA_OK)
        st = gen_write(ctx, &o);
    if (st != RA_OK)
        return cli_fail_status(ctx, st);
    if (ctx->rank == 0)
        gen_report(&o);
    return CLI_EXIT_OK;
}
