/* cli.h: what the subcommands of `ringattn` share. launch/ is the only part
 * of the project that exits; everything below it returns a status. */
#ifndef RA_CLI_H
#define RA_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "ringattn.h"

/* Exit codes: usage and input errors, runtime failures. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_RUNTIME = 1, CLI_EXIT_USAGE = 2 };

/* The process as the subcommands see it. */
typedef struct {
    MPI_Comm comm;
    int rank, nranks;
    const char *command_line; /* argv joined, for output attributes */
    int node_aware;           /* comm is ordered node by node */
    ra_nodes nodes;           /* where the ranks of comm run */
    const char *ring_order;   /* rank 0: mpirun's ranks in ring order */
} cli_ctx;

/* Takes the global options out of argv: --ring-order node|mpirun (default
 * node) points ctx->comm at a communicator in that order, which every
 * subcommand then uses for reading, computing and writing; --align BYTES
 * and --mpiio-hint KEY=VALUE (repeatable, after the hints of the
 * environment variable RINGATTN_MPIIO_HINTS, "k=v;k=v") set how files are
 * opened. Returns an exit code (CLI_EXIT_OK to go on). cli_global_free
 * releases the communicator. */
int cli_global_setup(cli_ctx *ctx, int *argc, char **argv);
void cli_global_free(cli_ctx *ctx);
/* The nodes, ranks per node, ring order and MPI-IO lines of a parameter
 * table (rank 0; the caller prints the rest). */
void cli_print_job(const cli_ctx *ctx, int width);
/* "read T s (R GB/s), write T s (W GB/s)" for a run of shape s: the
 * float32 bytes of q, k, v read and of o, lse written, over the slowest
 * rank's time of each; into buf (128 bytes), which it returns. */
const char *cli_io_rates(const ra_shape *s, double read_s, double write_s,
                         char *buf);
/* Sets the MPI library's parameters the command line relies on; call
 * before MPI_Init. */
void cli_mpi_env(void);
void cli_ring_free(cli_ctx *ctx);

/* Shape flags common to gen and bench, with their defaults filled. */
typedef struct {
    ra_shape shape;
    int seq_kv_set, kv_heads_set, dim_v_set;
} cli_shape;

void cli_shape_default(cli_shape *cs);
/* Resolves unset flags: M = N, G = H, Dv = D. */
void cli_shape_finish(cli_shape *cs);

/* Tries to consume argv[*i] (and its value) as a shape flag. Returns 1 when
 * taken, 0 when not a shape flag, -1 on a bad value (message set). */
int cli_shape_flag(cli_shape *cs, int argc, char **argv, int *i);

/* Tries to consume argv[*i] as a forward-pass option (--causal, --scale,
 * --block-q, --block-kv, --layout, --threads). Same returns. */
int cli_params_flag(ra_params *p, int argc, char **argv, int *i);

/* Strict number parsing: the whole string, within [lo, hi]. Return 0 on
 * success, -1 with a message naming the option otherwise. */
int cli_parse_i64(const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out);
int cli_parse_f64(const char *opt, const char *text, double *out);

/* The value of an option that takes one: argv[*i + 1], advancing *i; NULL
 * with a message when it is missing. */
const char *cli_value(int argc, char **argv, int *i);

/* The bytes of n arrays of counts[i] elements of elem bytes each, plus one
 * element (so that empty slices still allocate); 0 when the total does not
 * fit in size_t. For the single allocation of a rank's slices. */
size_t cli_alloc_bytes(const size_t *counts, int n, size_t elem);

/* The additive score's weights, read from an input file. */
typedef struct {
    float *mem; /* w_q (A, D) | w_k (A, Dk) | w_v (A) */
    ra_additive additive;
} cli_score_inputs;

/* Checks the score against the input (keys of another dim need the
 * additive score) and reads /additive/w_q, w_k, w_v into p->additive. */
ra_status cli_score_setup(const char *in, const ra_shape *s, ra_params *p,
                          cli_score_inputs *si);
void cli_score_free(cli_score_inputs *si);

/* Prints "ringattn: <message>" once, from rank 0, and returns code. */
int cli_fail(const cli_ctx *ctx, int code, const char *what);

/* Maps a library status to an exit code (input and argument errors: 2). */
int cli_exit_code(ra_status st);

/* Prints the parameter table of a forward pass from rank 0, '#'-commented;
 * p->layout is the resolved one, layout_auto says it was chosen. */
void cli_print_params(const cli_ctx *ctx, const ra_shape *s,
                      const ra_params *p, int layout_auto, const char *in,
                      const char *out);

int cmd_gen(const cli_ctx *ctx, int argc, char **argv);
int cmd_run(const cli_ctx *ctx, int argc, char **argv);
int cmd_verify(const cli_ctx *ctx, int argc, char **argv);
int cmd_info(const cli_ctx *ctx, int argc, char **argv);
int cmd_bench(const cli_ctx *ctx, int argc, char **argv);
int cmd_plot(const cli_ctx *ctx, int argc, char **argv);
int cmd_run_mha(const cli_ctx *ctx, int argc, char **argv);

#endif /* RA_CLI_H */
