/* cmd_gen.c: `ringattn gen`: seeded random inputs, written in parallel. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

static const char gen_help[] =
    "usage: [mpirun -np P] ringattn gen --out IN.h5 [options]\n"
    "\n"
    "Writes /q (B,N,H,D), /k (B,M,G,D), /v (B,M,G,Dv) of unit-normal values.\n"
    "Every value depends only on the seed and its index: any P gives the same\n"
    "file contents.\n"
    "\n"
    "  --out FILE        file to write (refused if it exists, unless --force)\n"
    "  --batch B         default 1\n"
    "  --seq N           query length, default 4096\n"
    "  --seq-kv M        key/value length, default N\n"
    "  --heads H         query heads, default 8\n"
    "  --kv-heads G      key/value heads, default H (must divide H)\n"
    "  --dim D           head dim of q and k, default 64\n"
    "  --dim-v Dv        head dim of v, default D\n"
    "  --dtype T         float32 (default) or float64\n"
    "  --seed S          default 1\n"
    "  --mha             write layer inputs instead: /x (B,N,E) or, with\n"
    "                    --seq-kv, /x_q and /x_kv; weights /w_q /w_k /w_v /w_o\n"
    "                    and biases for --heads, --kv-heads, --dim, --dim-v\n"
    "  --embed E         model width of the layer inputs (default 64)\n"
    "  --lens random     also write random padding lengths /q_lens, /kv_lens\n"
    "  --segments AVG    also write random packed-sequence ids of mean length\n"
    "                    AVG: /segments (N == M) or /q_segments, /kv_segments\n"
    "  --force           replace an existing file\n"
    "  --help            this text\n";

int cmd_gen(const cli_ctx *ctx, int argc, char **argv)
{
    cli_shape cs;
    cli_shape_default(&cs);
    const char *out = NULL;
    int force = 0, f64 = 0, lens = 0, mha = 0;
    int64_t embed = 64;
    int64_t seed = 1, segment_avg = 0;
    for (int i = 1; i < argc; i++) {
        int taken = cli_shape_flag(&cs, argc, argv, &i);
        if (taken < 0)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        if (taken)
            continue;
        const char *val;
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(gen_help, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (!(out = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--dtype") == 0) {
            if (!(val = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
            if (strcmp(val, "float32") != 0 && strcmp(val, "float64") != 0) {
                ra_error_set(RA_ERR_ARG, "--dtype: '%s' is not float32 or "
                                         "float64", val);
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
            }
            f64 = strcmp(val, "float64") == 0;
        } else if (strcmp(argv[i], "--mha") == 0) {
            mha = 1;
        } else if (strcmp(argv[i], "--embed") == 0) {
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64("--embed", val, 1, 1 << 20, &embed) != 0)
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--lens") == 0) {
            if (!(val = cli_value(argc, argv, &i)))
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
            if (strcmp(val, "random") != 0) {
                ra_error_set(RA_ERR_ARG, "--lens: '%s' is not 'random'", val);
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
            }
            lens = 1;
        } else if (strcmp(argv[i], "--segments") == 0) {
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64("--segments", val, 1, (int64_t)1 << 40,
                              &segment_avg) != 0)
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64("--seed", val, 0, INT64_MAX, &seed) != 0)
                return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        } else {
            ra_error_set(RA_ERR_ARG, "gen: unknown option '%s' (see ringattn "
                                     "gen --help)", argv[i]);
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        }
    }
    if (!out)
        return cli_fail(ctx, CLI_EXIT_USAGE,
                        "gen: --out is required (see ringattn gen --help)");
    cli_shape_finish(&cs);
    ra_status st = ra_shape_check(&cs.shape);
    if (st == RA_OK)
        st = mha ? h5io_gen_mha(ctx->comm, out, force, &cs.shape, embed,
                                cs.seq_kv_set, (uint64_t)seed)
                 : h5io_gen_masks(ctx->comm, out, force, &cs.shape, f64,
                                  (uint64_t)seed, lens, segment_avg);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    if (ctx->rank == 0 && mha) {
        const ra_shape *s = &cs.shape;
        printf("ringattn gen: wrote %s: layer inputs B=%lld N=%lld%s E=%lld, "
               "weights for H=%lld G=%lld D=%lld Dv=%lld, seed %lld\n", out,
               (long long)s->B, (long long)s->N,
               cs.seq_kv_set ? " (cross, M given)" : "", (long long)embed,
               (long long)s->H, (long long)s->G, (long long)s->D,
               (long long)s->Dv, (long long)seed);
    } else if (ctx->rank == 0) {
        const ra_shape *s = &cs.shape;
        printf("ringattn gen: wrote %s: q (%lld,%lld,%lld,%lld) k (%lld,%lld,"
               "%lld,%lld) v (%lld,%lld,%lld,%lld) %s seed %lld\n",
               out, (long long)s->B, (long long)s->N, (long long)s->H,
               (long long)s->D, (long long)s->B, (long long)s->M,
               (long long)s->G, (long long)s->D, (long long)s->B,
               (long long)s->M, (long long)s->G, (long long)s->Dv,
               f64 ? "float64" : "float32", (long long)seed);
    }
    return CLI_EXIT_OK;
}
