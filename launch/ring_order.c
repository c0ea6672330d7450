/* ring_order.c: the global --ring-order option: which communicator the
 * subcommands run on, and the lines of the parameter table that show it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { RING_ORDER_SHOWN = 32 }; /* ranks listed in the table at most */

static char ring_order_text[RING_ORDER_SHOWN * 8 + 64];

/* Removes argv[i] and argv[i + 1 .. i + n - 1] (n arguments). */
static void args_remove(int *argc, char **argv, int i, int n)
{
    memmove(argv + i, argv + i + n, sizeof *argv * (size_t)(*argc - i - n + 1));
    *argc -= n;
}

/* The value of --ring-order in argv, removed from it; "node" when absent,
 * NULL when the option has no value. */
static const char *ring_order_take(int *argc, char **argv)
{
    const char *val = "node";
    for (int i = 1; i < *argc; i++) {
        if (strncmp(argv[i], "--ring-order=", 13) == 0) {
            val = argv[i] + 13;
            args_remove(argc, argv, i--, 1);
        } else if (strcmp(argv[i], "--ring-order") == 0) {
            if (i + 1 >= *argc)
                return NULL;
            val = argv[i + 1];
            args_remove(argc, argv, i--, 2);
        }
    }
    return val;
}

/* Rank 0: mpirun's ranks in ring order, nodes separated by '|'. */
static void ring_order_describe(cli_ctx *ctx, int world_rank)
{
    int pair[2] = {world_rank, ctx->nodes.node};
    int *all = ctx->rank == 0 ? malloc(sizeof(int) * 2 * (size_t)ctx->nranks)
                              : NULL;
    MPI_Gather(pair, 2, MPI_INT, all, 2, MPI_INT, 0, ctx->comm);
    if (ctx->rank != 0)
        return;
    char *p = ring_order_text, *end = p + sizeof ring_order_text;
    p += snprintf(p, (size_t)(end - p), "%s:", ctx->node_aware
                                                   ? "node by node"
                                                   : "mpirun's");
    for (int i = 0; all && i < ctx->nranks && i < RING_ORDER_SHOWN; i++)
        p += snprintf(p, (size_t)(end - p), "%s %d",
                      i > 0 && all[2 * i + 1] != all[2 * i - 1] ? " |" : "",
                      all[2 * i]);
    if (all && ctx->nranks > RING_ORDER_SHOWN)
        snprintf(p, (size_t)(end - p), " ...");
    free(all);
    ctx->ring_order = ring_order_text;
}

int cli_ring_setup(cli_ctx *ctx, int *argc, char **argv)
{
    int world_rank;
    MPI_Comm_rank(ctx->comm, &world_rank);
    const char *val = ring_order_take(argc, argv);
    if (!val || (strcmp(val, "node") != 0 && strcmp(val, "mpirun") != 0)) {
        if (world_rank == 0)
            fprintf(stderr, "ringattn: --ring-order: '%s' is not node or "
                            "mpirun\n", val ? val : "");
        return CLI_EXIT_USAGE;
    }
    ctx->node_aware = strcmp(val, "node") == 0;
    MPI_Comm ring;
    ra_status st = ra_comm_ring_order(ctx->comm, ctx->node_aware, &ring);
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

void cli_ring_free(cli_ctx *ctx)
{
    if (ctx->comm != MPI_COMM_WORLD && ctx->comm != MPI_COMM_NULL)
        MPI_Comm_free(&ctx->comm);
}

void cli_print_ring(const cli_ctx *ctx, int width)
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
}
