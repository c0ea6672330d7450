/* global_options.c: the options every subcommand takes, taken out of argv
 * before the subcommand parses the rest: --ring-order (which communicator
 * the subcommands run on), --align and --mpiio-hint (how files are opened),
 * and the lines of the parameter table that show them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gemm_env.h"
#include "internal.h"

enum {
    RING_ORDER_SHOWN = 32, /* ranks listed in the table at most */
    MAX_HINTS = 32,
};

/* --ring-order without the option */
static const char ring_order_default[] = "node";

/* The global options as --help lists them. */
static const struct {
    int kind; /* CLI_GLOBAL_* */
    const char *left, *help, *def;
} global_rows[] = {
    {CLI_GLOBAL_RING, "--ring-order ORDER",
     "node by node, or mpirun (as launched)", ring_order_default},
    {CLI_GLOBAL_FILES, "--align BYTES",
     "datasets of 64 KiB or more at multiples of BYTES", NULL},
    {CLI_GLOBAL_FILES, "--mpiio-hint K=V",
     "an MPI-IO hint, repeatable (and RINGATTN_MPIIO_HINTS)", NULL},
};

void cli_global_help(int which, FILE *out)
{
    if (which)
        fputs("\nglobal options (anywhere on the command line):\n", out);
    for (size_t i = 0; i < sizeof global_rows / sizeof *global_rows; i++)
        if (which & global_rows[i].kind)
            cli_help_row(out, 2, global_rows[i].left, global_rows[i].help,
                         global_rows[i].def);
}

/* at most 13 characters per rank (" | " and 10 digits) and the prefix */
static char ring_order_text[RING_ORDER_SHOWN * 16 + 64];

/* The MPI-IO settings of the command line: --align, RINGATTN_MPIIO_HINTS
 * and --mpiio-hint (in that order, so a flag overrides the environment),
 * which every file call of the subcommand receives as ctx->tuning. */
static struct {
    int64_t align;
    int nhints;
    const char *hints[MAX_HINTS];
    char *env_copy; /* RINGATTN_MPIIO_HINTS, cut into the hints */
} io;

/* Removes argv[i] and argv[i + 1 .. i + n - 1] (n arguments). */
static void args_remove(int *argc, char **argv, int i, int n)
{
    memmove(argv + i, argv + i + n, sizeof *argv * (size_t)(*argc - i - n + 1));
    *argc -= n;
}

/* The value of --ring-order in argv into *val, removed from it; "node"
 * when absent. RA_ERR_ARG when it has no value or is given twice. */
static ra_status ring_order_take(int *argc, char **argv, const char **val)
{
    int given = 0;
    *val = ring_order_default;
    for (int i = 1; i < *argc; i++) {
        const int joined = strncmp(argv[i], "--ring-order=", 13) == 0;
        if (!joined && strcmp(argv[i], "--ring-order") != 0)
            continue;
        if (given++)
            return ra_error_set(RA_ERR_ARG, "--ring-order: given twice; give "
                                "it once (it takes a single value)");
        if (!joined && i + 1 >= *argc)
            return ra_error_set(RA_ERR_ARG, "--ring-order needs a value");
        *val = joined ? argv[i] + 13 : argv[i + 1];
        args_remove(argc, argv, i--, joined ? 1 : 2);
    }
    if (strcmp(*val, "node") != 0 && strcmp(*val, "mpirun") != 0)
        return ra_error_set(RA_ERR_ARG, "--ring-order: '%s' is not node or "
                            "mpirun", *val);
    return RA_OK;
}

/* Rank 0: mpirun's ranks in ring order, nodes separated by '|'. */
static void ring_order_describe(cli_ctx *ctx, int world_rank)
{
    int pair[2] = {world_rank, ctx->nodes.node};
    int *all = ctx->rank == 0 ? malloc(sizeof(int) * 2 * (size_t)ctx->nranks)
                              : NULL;
    int described = ctx->rank != 0 || all != NULL; /* rank 0 decides */
    MPI_Bcast(&described, 1, MPI_INT, 0, ctx->comm);
    if (!described)
        return; /* the table then shows no order */
    MPI_Gather(pair, 2, MPI_INT, all, 2, MPI_INT, 0, ctx->comm);
    if (ctx->rank != 0)
        return;
    char *p = ring_order_text, *end = p + sizeof ring_order_text;
    p += snprintf(p, (size_t)(end - p), "%s:", ctx->node_aware
                                                   ? "node by node"
                                                   : "mpirun's");
    for (int i = 0; i < ctx->nranks && i < RING_ORDER_SHOWN; i++)
        p += snprintf(p, (size_t)(end - p), "%s %d",
                      i > 0 && all[2 * i + 1] != all[2 * i - 1] ? " |" : "",
                      all[2 * i]);
    if (ctx->nranks > RING_ORDER_SHOWN)
        snprintf(p, (size_t)(end - p), " ...");
    free(all);
    ctx->ring_order = ring_order_text;
}

/* Takes --align and every --mpiio-hint out of argv, with the hints of
 * RINGATTN_MPIIO_HINTS first, into the tuning the file functions take. */
static ra_status io_take(int *argc, char **argv, ra_h5_tuning *t)
{
    const char *env = getenv("RINGATTN_MPIIO_HINTS");
    if (env && env[0] && !(io.env_copy = strdup(env)))
        return ra_error_set(RA_ERR_NOMEM, "out of memory");
    static const char sep[] = "; \t\n";
    char *save = NULL;
    for (char *tok = io.env_copy ? strtok_r(io.env_copy, sep, &save) : NULL;
         tok; tok = strtok_r(NULL, sep, &save)) {
        if (io.nhints == MAX_HINTS)
            return ra_error_set(RA_ERR_ARG, "RINGATTN_MPIIO_HINTS: more than "
                                "%d hints", MAX_HINTS);
        io.hints[io.nhints++] = tok;
    }
    for (int i = 1, aligned = 0; i < *argc; i++) {
        const int align = strcmp(argv[i], "--align") == 0;
        if (!align && strcmp(argv[i], "--mpiio-hint") != 0)
            continue;
        if (i + 1 >= *argc)
            return ra_error_set(RA_ERR_ARG, "%s needs a value", argv[i]);
        if (align && aligned++) /* --mpiio-hint is repeatable, --align not */
            return ra_error_set(RA_ERR_ARG, "--align: given twice; give it "
                                "once (it takes a single value)");
        if (align && cli_parse_i64("--align", argv[i + 1], 0,
                                   (int64_t)1 << 40, &io.align) != 0)
            return RA_ERR_ARG;
        if (!align && io.nhints == MAX_HINTS)
            return ra_error_set(RA_ERR_ARG, "--mpiio-hint: more than %d "
                                "hints", MAX_HINTS);
        if (!align)
            io.hints[io.nhints++] = argv[i + 1];
        args_remove(argc, argv, i--, 2);
    }
    *t = (ra_h5_tuning){io.align, io.nhints, io.hints};
    return h5io_tuning_check(t, "--mpiio-hint or RINGATTN_MPIIO_HINTS");
}

int cli_global_setup(cli_ctx *ctx, int *argc, char **argv)
{
    int world_rank;
    MPI_Comm_rank(ctx->comm, &world_rank);
    if (io_take(argc, argv, &ctx->tuning) != RA_OK) {
        if (world_rank == 0)
            fprintf(stderr, "ringattn: %s\n", ra_error_message());
        return CLI_EXIT_USAGE;
    }
    const char *val;
    if (ring_order_take(argc, argv, &val) != RA_OK) {
        if (world_rank == 0)
            fprintf(stderr, "ringattn: %s\n", ra_error_message());
        return CLI_EXIT_USAGE;
    }
    ctx->node_aware = strcmp(val, "node") == 0;
    /* RINGATTN_GEMM is the job's: alike on every rank, before any work */
    MPI_Comm ring = MPI_COMM_NULL;
    ra_status st = ra_gemm_agree(ctx->comm, RA_GEMM_AUTO);
    if (st == RA_OK)
        st = ra_comm_ring_order(ctx->comm, ctx->node_aware, &ring);
    if (st == RA_OK)
        st = ra_comm_nodes(ring, &ctx->nodes);
    if (st != RA_OK) {
        if (world_rank == 0)
            fprintf(stderr, "ringattn: %s\n", ra_error_message());
        if (ring != MPI_COMM_NULL)
            MPI_Comm_free(&ring);
        return cli_exit_code(st);
    }
    ctx->comm = ring;
    MPI_Comm_rank(ring, &ctx->rank);
    ring_order_describe(ctx, world_rank);
    return CLI_EXIT_OK;
}

void cli_global_free(cli_ctx *ctx)
{
    if (ctx->comm != MPI_COMM_WORLD && ctx->comm != MPI_COMM_NULL)
        MPI_Comm_free(&ctx->comm);
    free(io.env_copy);
    io.env_copy = NULL;
}

void cli_print_job(const cli_ctx *ctx, int width)
{
    if (ctx->rank != 0)
        return;
    const ra_nodes *n = &ctx->nodes;
    printf("# %-*s %d\n", width, "nodes", n->nodes);
    if (n->ranks_per_node_min == n->ranks_per_node_max)
        printf("# %-*s %d\n", width, "ranks/node", n->ranks_per_node_min);
    else
        printf("# %-*s %d to %d\n", width, "ranks/node",
               n->ranks_per_node_min, n->ranks_per_node_max);
    printf("# %-*s %s\n", width, "ring order",
           ctx->ring_order ? ctx->ring_order : "");
    printf("# %-*s collective metadata", width, "mpi-io");
    if (io.align)
        printf(", align %lld bytes", (long long)io.align);
    for (int i = 0; i < io.nhints; i++)
        printf("%s%s", i ? " " : ", hints ", io.hints[i]);
    printf("\n");
}

const char *cli_io_rates(const ra_shape *s, double read_s, double write_s,
                         char *buf)
{
    const double in = 4.0 * (double)s->B *
                      ((double)s->N * (double)(s->H * s->D) +
                       (double)s->M * (double)(s->G * (ra_shape_dk(s) + s->Dv)));
    const double out = 4.0 * (double)s->B * (double)s->N *
                       (double)(s->H * s->Dv + s->H);
    snprintf(buf, 128, "read %.3f s (%.3f GB/s), write %.3f s (%.3f GB/s)",
             read_s, read_s > 0 ? in / read_s * 1e-9 : 0.0, write_s,
             write_s > 0 ? out / write_s * 1e-9 : 0.0);
    return buf;
}
