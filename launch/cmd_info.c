/* cmd_info.c: `ringattn info FILE`: shapes, dtypes and attributes. */
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"

typedef struct {
    const char *path[1];
} info_opts;

static const cli_opt info_own[] = {{0}};

static const cli_spec info_spec = {
    .name = "info",
    .usage = "usage: ringattn info FILE.h5\n"
             "\n"
             "Lists every dataset (shape, dtype) and root attribute of an input or\n"
             "output file.\n",
    .groups = {{info_own, 0}},
    CLI_POSITIONAL(info_opts, path),
    .globals = CLI_GLOBAL_FILES,
};

int cmd_info(const cli_ctx *ctx, int argc, char **argv)
{
    info_opts o = {{NULL}};
    int code = cli_parse_or_exit(ctx, &info_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    if (!o.path[0])
        return cli_fail(ctx, CLI_EXIT_USAGE, "info: a file is required");
    ra_status st = RA_OK;
    if (ctx->rank == 0) {
        st = h5io_info(o.path[0], stdout);
        fflush(stdout);
    }
    st = ra_agree(ctx->comm, st);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}
