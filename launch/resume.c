/* resume.c: checkpoints of run and run --backward (resume.h): the
 * options, the signals that ask for a stop, and the library's hooks on
 * io/ckpt_pass.c. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resume.h"
#include "signals.h"
#include "watchdog.h"

/* --checkpoint DIR[,S]: S (seconds, >= 0) after the last comma when it
 * reads as a number, else all of it is DIR. */
static int parse_checkpoint(const cli_opt *o, const char *val, void *base)
{
    cli_ckpt_args *a = base;
    const char *comma = strrchr(val, ',');
    char *end = NULL;
    const double s = comma ? strtod(comma + 1, &end) : 0.0;
    const int timed = comma && end != comma + 1 && !*end;
    const size_t len = timed ? (size_t)(comma - val) : strlen(val);
    if (timed && !(s >= 0 && s < 1e9))
        return ra_error_set(RA_ERR_ARG, "%s: '%s': seconds must lie in "
                            "[0, 1e9)", o->name, val), -1;
    if (len == 0 || len >= sizeof a->dir_buf)
        return ra_error_set(RA_ERR_ARG, "%s: '%s' names no directory",
                            o->name, val), -1;
    memcpy(a->dir_buf, val, len);
    a->dir_buf[len] = '\0';
    a->dir = a->dir_buf;
    a->every = timed ? s : CLI_CKPT_EVERY_DEFAULT;
    return 0;
}

const cli_opt cli_ckpt_opts[] = {
    {.name = "--checkpoint", .kind = CLI_CUSTOM, .meta = "DIR[,S]",
     .fn = parse_checkpoint,
     .help = "state to DIR each S s (600) and on USR1/TERM (exit 3)"},
    CLI_OPT_TEXT(cli_ckpt_args, "--resume", "DIR", resume, NULL,
                 "go on from DIR's checkpoint (same input, options, P)"),
    {0},
};

/* The signal a handler caught: a stop at the next step boundary. */
static volatile sig_atomic_t ckpt_signal;

static void on_stop_signal(int sig)
{
    ckpt_signal = sig;
}

static void stop_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGTERM);
}

/* SIGUSR1 and SIGTERM set the flag, and the calling thread (which
 * computes, and the OpenMP threads it starts later) blocks them: a
 * handler run on a thread inside a JIT-compiled oneDNN kernel corrupted
 * its heap (seen on this machine). Another thread of the process (MPI's,
 * the watchdog's) runs the handler; with none, the signal stays pending
 * for stop_asked. */
static void signals_catch(void)
{
    struct sigaction sa;
    sigset_t set;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Whether a stop signal came: caught, or pending on the blocked thread. */
static int stop_asked(void)
{
    sigset_t pending;
    if (ckpt_signal)
        return 1;
    if (sigpending(&pending) == 0 &&
        (sigismember(&pending, SIGUSR1) || sigismember(&pending, SIGTERM)))
        ckpt_signal = 1;
    return ckpt_signal != 0;
}

/* The usual handlers back (signals.h), a pending stop signal taken first
 * so that it does not end the process once unblocked. */
static void signals_release(void)
{
    sigset_t set;
    const struct timespec now = {0, 0};
    stop_set(&set);
    while (sigtimedwait(&set, NULL, &now) > 0)
        ;
    cli_signals_install();
    signal(SIGUSR1, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* ra_checkpoint.ask: a stop once a signal came, a save once the period
 * has passed. */
static int hook_ask(void *arg, int done, int total)
{
    const cli_ckpt *k = arg;
    (void)done;
    (void)total;
    if (stop_asked())
        return RA_CKPT_STOP;
    return h5io_resume_due(&k->r) ? RA_CKPT_SAVE : RA_CKPT_GO_ON;
}

static ra_status hook_save(void *arg, const ra_state *state)
{
    cli_ckpt *k = arg;
    const double t0 = MPI_Wtime();
    double bytes;
    cli_watchdog_beat(); /* the write is progress of its own */
    const ra_status st = h5io_resume_save(&k->r, state, &bytes);
    cli_watchdog_beat();
    const double sec = k->r.last - t0;
    if (st == RA_OK && k->r.rank == 0) /* rank 0's part stands for all */
        printf("# checkpoint at step %d of %d: %.1f MB per rank in %.3f s "
               "(%.2f GB/s over %d ranks), %s\n", state->step, state->steps,
               bytes * 1e-6, sec, bytes * k->r.nranks / sec * 1e-9,
               k->r.nranks, k->r.path);
    return st;
}

static ra_status hook_load(void *arg, ra_state *state)
{
    cli_ckpt *k = arg;
    return h5io_resume_load(&k->r, state);
}

ra_status cli_ckpt_begin(const cli_ctx *ctx, const cli_ckpt_args *a,
                         const char *pass, cli_ckpt *k, ra_params *p)
{
    *k = (cli_ckpt){.r = {.comm = ctx->comm, .rank = ctx->rank,
                          .nranks = ctx->nranks, .tuning = &ctx->tuning,
                          .pass = pass}};
    const ra_status st = h5io_resume_begin(
        &k->r, a->dir, a->dir ? a->every : CLI_CKPT_EVERY_DEFAULT, a->resume);
    if (st == RA_OK && k->r.dir) {
        ckpt_signal = 0;
        signals_catch();
        k->hooks = (ra_checkpoint){hook_ask, hook_save, NULL, k};
        p->exec.checkpoint = &k->hooks;
    }
    return st;
}

ra_status cli_ckpt_arm(cli_ckpt *k, const char *fp)
{
    int load;
    const ra_status st = h5io_resume_arm(&k->r, fp, &load);
    if (load)
        k->hooks.load = hook_load;
    return st;
}

ra_status cli_ckpt_end(cli_ckpt *k, ra_status st)
{
    if (!k->r.dir)
        return st;
    if (st == RA_OK) {
        /* the outputs are whole and the checkpoint goes: a stop asked from
         * now until the process exits has nothing left to stop, and stays
         * caught (it killed a finished run, whose --resume then found no
         * checkpoint) */
        h5io_resume_end(&k->r, st);
        return st;
    }
    signals_release();
    if (st == RA_STOPPED)
        return ra_error_set(RA_STOPPED, "run: stopped as a signal asked, "
                            "checkpoint of the %s pass at step %d in %s; "
                            "continue with --resume %s", k->r.pass, k->r.step,
                            k->r.path, k->r.dir);
    return st;
}
