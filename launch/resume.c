/* resume.c: checkpoints of run and run --backward (resume.h): the
 * options, the signals that ask for a stop, and what is printed of each
 * save (the hooks are io/ckpt_pass.c's). */
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

/* Told of a save by the hooks: the write is progress of its own; rank 0
 * prints each one that worked (its part stands for all). */
static void ckpt_saving(const h5io_resume *k, const ra_state *state,
                        double bytes, double sec)
{
    cli_watchdog_beat();
    if (state && k->rank == 0)
        printf("# checkpoint at step %d of %d: %.1f MB per rank in %.3f s "
               "(%.2f GB/s over %d ranks), %s\n", state->step, state->steps,
               bytes * 1e-6, sec, bytes * k->nranks / sec * 1e-9, k->nranks,
               k->path);
}

ra_status cli_ckpt_begin(const cli_ctx *ctx, const cli_ckpt_args *a,
                         const char *pass, h5io_resume *k, ra_params *p)
{
    *k = (h5io_resume){.comm = ctx->comm, .rank = ctx->rank,
                       .nranks = ctx->nranks, .tuning = &ctx->tuning,
                       .pass = pass, .stop = stop_asked,
                       .saving = ckpt_saving};
    const ra_status st = h5io_resume_begin(
        k, a->dir, a->dir ? a->every : CLI_CKPT_EVERY_DEFAULT, a->resume);
    if (st == RA_OK && k->dir) {
        ckpt_signal = 0;
        signals_catch();
        p->exec.checkpoint = &k->hooks;
    }
    return st;
}

ra_status cli_ckpt_end(h5io_resume *k, ra_status st)
{
    if (!k->dir)
        return st;
    if (st == RA_OK) {
        /* the outputs are whole and the checkpoint goes: a stop asked from
         * now until the process exits has nothing left to stop, and stays
         * caught (it killed a finished run, whose --resume then found no
         * checkpoint) */
        h5io_resume_end(k, st);
        return st;
    }
    signals_release();
    if (st == RA_STOPPED)
        return ra_error_set(RA_STOPPED, "run: stopped as a signal asked, "
                            "checkpoint of the %s pass at step %d in %s; "
                            "continue with --resume %s", k->pass, k->step,
                            k->path, k->dir);
    return st;
}
