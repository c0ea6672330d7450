/* test_driver_mpi.c: the phases of the pass drivers (launch/driver.h) at
 * P = 1..4. A driver written as the commands' are, whose steps record the
 * order they ran in: every step once and in order on success; a step that
 * fails on the last rank only stops every rank after that step, with the
 * input error's exit code 2 or the runtime error's 1 on every rank; --help
 * and a bad option run no step; the release runs exactly once whenever
 * validate was reached. And
 * cli_grads_alloc: five disjoint parts of the sizes of the shape, the
 * additive weights' gradients laid out w_q | w_k | w_v. Verdicts are
 * reduced over the ranks; rank 0 prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agree.h"
#include "driver.h"
#include "support.h"

static int rank, nranks;

typedef struct {
    ra_params p;
    const char *fail; /* the step that fails on the last rank, or NULL */
} t_opts;

typedef struct {
    cli_pass_data d;
    char trace[16]; /* a letter per step run */
} t_state;

/* What the release hook saw: the trace, and how often it ran. */
static char seen[16];
static int releases;

static const cli_opt t_own[] = {
    CLI_OPT_TEXT(t_opts, "--fail", "STEP", fail, NULL,
                 "the step (validate, setup, compute) that fails"),
    {0},
};

static const cli_spec t_spec = {
    .name = "test",
    .usage = "usage: test [--fail STEP]\n",
    .groups = {{t_own, 0}, {cli_forward_opts, offsetof(t_opts, p)}},
};

/* Appends the step's letter; the step named by --fail fails on the last
 * rank (validate with an input error, the others with a runtime one), and
 * the ranks agree. */
static ra_status step(t_opts *o, t_state *r, const char *name, char letter)
{
    const size_t n = strlen(r->trace);
    r->trace[n] = letter;
    r->trace[n + 1] = '\0';
    ra_status st = RA_OK;
    if (o->fail && strcmp(o->fail, name) == 0 && rank == nranks - 1)
        st = ra_error_set(strcmp(name, "validate") == 0 ? RA_ERR_INPUT
                                                         : RA_ERR_IO,
                          "%s failed", name);
    return ra_agree(MPI_COMM_WORLD, st);
}

static ra_status t_validate(const cli_ctx *ctx, t_opts *o, t_state *r)
{
    r->d.s = (ra_shape){.B = 1, .N = 8, .M = 8, .H = 1, .G = 1, .D = 4,
                        .Dv = 4};
    r->d.in = "(test)";
    return step(o, r, "validate", 'v');
}

/* Allocates what cli_pass_data_free releases, and a gradient buffer. */
static ra_status t_setup(const cli_ctx *ctx, t_opts *o, t_state *r)
{
    r->d.score_in.mem = malloc(sizeof(float));
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
    ra_status st = cli_tensors_alloc(&r->d.t, &r->d.s, &prm, ctx);
    if (st == RA_OK)
        st = cli_grads_alloc(&r->d, 0, "test", ctx, 0);
    if (st != RA_OK)
        return ra_agree(ctx->comm, st);
    return step(o, r, "setup", 's');
}

static ra_status t_print(const cli_ctx *ctx, t_opts *o, t_state *r)
{
    return step(o, r, "print", 'p');
}

static ra_status t_compute(const cli_ctx *ctx, t_opts *o, t_state *r)
{
    return step(o, r, "compute", 'c');
}

static ra_status t_report(const cli_ctx *ctx, t_opts *o, t_state *r)
{
    return step(o, r, "report", 'r');
}

static void t_release(t_state *r)
{
    memcpy(seen, r->trace, sizeof seen);
    releases++;
}

/* A pass driver written as cli_pass_main is (driver.c): plain steps
 * between the shared phases of driver.h, one cleanup path. */
static int t_driver(const cli_ctx *ctx, int argc, char **argv)
{
    t_opts o = {0};
    t_state r = {0};
    const int code = cli_parse_pass(ctx, &t_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &r.d, &o.p);
    ra_status st = t_validate(ctx, &o, &r);
    if (st == RA_OK)
        st = t_setup(ctx, &o, &r);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &r.d, &o.p);
        st = t_print(ctx, &o, &r);
    }
    if (st == RA_OK)
        st = t_compute(ctx, &o, &r);
    cli_pass_writing(ctx, &r.d, &o.p);
    if (st == RA_OK)
        st = t_report(ctx, &o, &r);
    t_release(&r);
    return cli_pass_end(ctx, &r.d, st);
}

/* Runs the driver on args (NULL-terminated after the name): the exit code,
 * the trace and the releases it left in seen and releases. */
static int run_pass(const char *const *args)
{
    char *argv[8];
    int argc = 0;
    for (; args[argc]; argc++)
        argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    const cli_ctx ctx = {.comm = MPI_COMM_WORLD, .rank = rank,
                         .nranks = nranks, .command_line = ""};
    seen[0] = '\0';
    releases = 0;
    return t_driver(&ctx, argc, argv);
}

/* 1 on every rank when ok holds on every rank. */
static int all(int ok)
{
    int every = 0;
    MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return every;
}

static void test_order(void **unused)
{
    int code = run_pass((const char *[]){"test", NULL});
    assert_true(all(code == CLI_EXIT_OK && strcmp(seen, "vspcr") == 0 &&
                    releases == 1));
    code = run_pass((const char *[]){"test", "--fail", "validate", NULL});
    assert_true(all(code == CLI_EXIT_USAGE && strcmp(seen, "v") == 0 &&
                    releases == 1));
    code = run_pass((const char *[]){"test", "--fail", "setup", NULL});
    assert_true(all(code == CLI_EXIT_RUNTIME && strcmp(seen, "vs") == 0 &&
                    releases == 1));
    code = run_pass((const char *[]){"test", "--fail", "compute", NULL});
    assert_true(all(code == CLI_EXIT_RUNTIME && strcmp(seen, "vspc") == 0 &&
                    releases == 1));
}

static void test_no_steps(void **unused)
{
    int code = run_pass((const char *[]){"test", "--help", NULL});
    assert_true(all(code == CLI_EXIT_OK && releases == 0));
    code = run_pass((const char *[]){"test", "--no-such-option", NULL});
    assert_true(all(code == CLI_EXIT_USAGE && releases == 0));
    code = run_pass((const char *[]){"test", "--sigma", "0", NULL});
    assert_true(all(code == CLI_EXIT_USAGE && releases == 0));
}

static void test_grads_layout(void **unused)
{
    cli_pass_data d = {.s = {.B = 2, .N = 20 + rank, .M = 13, .H = 3,
                             .G = 1, .D = 8, .Dk = 5, .Dv = 6}};
    const int64_t A = 7, Dk = ra_shape_dk(&d.s);
    const cli_ctx ctx = {.comm = MPI_COMM_WORLD, .rank = rank,
                         .nranks = nranks};
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
    ra_status st = cli_tensors_alloc(&d.t, &d.s, &prm, &ctx);
    if (st == RA_OK)
        st = cli_grads_alloc(&d, A, "test", &ctx, 0);
    int ok = st == RA_OK;
    if (ok) {
        const int64_t n = d.t.qs.count, m = d.t.ks.count;
        const cli_grads *g = &d.g;
        const float *part[6] = {g->dout, g->dq, g->dk, g->dv, g->dw, NULL};
        const int64_t len[5] = {2 * n * 3 * 6, 2 * n * 3 * 8, 2 * m * Dk,
                                2 * m * 6, A * (8 + Dk + 1)};
        for (int i = 0; i < 5; i++) {
            ok &= i ? part[i] >= part[i - 1] + len[i - 1] : part[i] == g->mem;
            for (int64_t j = 0; j < len[i]; j++) /* every element writable */
                ((float *)part[i])[j] = (float)i;
        }
        ok &= g->dw_grads.dw_q == g->dw && g->dw_grads.dw_k == g->dw + A * 8 &&
              g->dw_grads.dw_v == g->dw + A * (8 + Dk);
        for (int i = 0; i < 5; i++)
            ok &= len[i] == 0 || part[i][len[i] - 1] == (float)i;
    }
    cli_pass_data_free(&d);
    ok &= d.g.mem == NULL && d.t.mem == NULL;
    assert_true(all(ok));
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_no_steps),
        cmocka_unit_test(test_grads_layout),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
