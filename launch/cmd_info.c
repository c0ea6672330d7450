/* cmd_info.c: `ringattn info FILE`: shapes, dtypes and attributes. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

static const char info_help[] =
    "usage: ringattn info FILE.h5\n"
    "\n"
    "Lists every dataset (shape, dtype) and root attribute of an input or\n"
    "output file.\n";

int cmd_info(const cli_ctx *ctx, int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(info_help, stdout);
            return CLI_EXIT_OK;
        }
        if (argv[i][0] == '-' || path) {
            ra_error_set(RA_ERR_ARG, "info: unexpected argument '%s' (see "
                                     "ringattn info --help)", argv[i]);
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        }
        path = argv[i];
    }
    if (!path)
        return cli_fail(ctx, CLI_EXIT_USAGE, "info: a file is required");
    int code = CLI_EXIT_OK;
    if (ctx->rank == 0) {
        ra_status st = h5io_info(path, stdout);
        if (st != RA_OK)
            code = cli_fail(ctx, cli_exit_code(st), ra_error_message());
    }
    MPI_Bcast(&code, 1, MPI_INT, 0, ctx->comm);
    return code;
}
