/* resume.c: checkpoints of run and run --backward (resume.h): the
 * options, the signals that ask for a stop, the key of the options that
 * change the numbers, and the library's hooks, which write and read
 * DIR/checkpoint.h5 (io/checkpoint.c). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "call.h"
#include "resume.h"
#include "signals.h"
#include "watchdog.h"

/* The checkpoint file of a directory. */
static const char ckpt_file[] = "checkpoint.h5";

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

/* --resume's file: a checkpoint of this pass on this many ranks. */
static ra_status resume_check(cli_ckpt *k, const char *dir)
{
    if (access(k->from, F_OK) != 0)
        return ra_error_set(RA_ERR_ARG, "--resume %s: no checkpoint there "
                            "(%s)", dir, ckpt_file);
    ra_status st = h5io_ckpt_head_read(k->from, &k->head);
    if (st == RA_OK && strcmp(k->head.pass, k->pass) != 0)
        st = ra_error_set(RA_ERR_ARG, "--resume %s: the checkpoint is of a "
                          "%s pass, this run is a %s pass", dir,
                          k->head.pass, k->pass);
    if (st == RA_OK && k->head.ranks != k->ctx->nranks)
        st = ra_error_set(RA_ERR_ARG, "--resume %s: the checkpoint was made "
                          "on %lld ranks, this run has %d (resume on the "
                          "same P)", dir, (long long)k->head.ranks,
                          k->ctx->nranks);
    return st;
}

/* Rank 0's head of the checkpoint to every rank. */
static ra_status head_share(cli_ckpt *k, ra_status st)
{
    if ((st = ra_agree(k->ctx->comm, st)) != RA_OK)
        return st;
    if (MPI_Bcast(&k->head, (int)sizeof k->head, MPI_BYTE, 0,
                  k->ctx->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "--resume: sharing the checkpoint's "
                            "attributes failed");
    return RA_OK;
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
    return MPI_Wtime() - k->last >= k->every ? RA_CKPT_SAVE : RA_CKPT_GO_ON;
}

static ra_status hook_save(void *arg, const ra_state *state)
{
    cli_ckpt *k = arg;
    const h5io_ckpt_meta meta = {k->key, k->fingerprint, &k->ctx->tuning};
    cli_watchdog_beat(); /* the write is progress of its own */
    const double t0 = MPI_Wtime();
    const ra_status st = h5io_ckpt_write(k->ctx->comm, k->path, &meta,
                                         state);
    cli_watchdog_beat();
    k->last = MPI_Wtime();
    if (st != RA_OK)
        return st;
    k->saved++;
    k->step = state->step;
    double bytes = 0;
    for (int i = 0; i < state->nparts; i++)
        bytes += 4.0 * (double)state->part[i].count;
    if (k->ctx->rank == 0) /* rank 0's part stands for the ranks' */
        printf("# checkpoint at step %d of %d: %.1f MB per rank in %.3f s "
               "(%.2f GB/s over %d ranks), %s\n", state->step, state->steps,
               bytes * 1e-6, k->last - t0,
               bytes * k->ctx->nranks / (k->last - t0) * 1e-9,
               k->ctx->nranks, k->path);
    return st;
}

static ra_status hook_load(void *arg, ra_state *state)
{
    cli_ckpt *k = arg;
    return h5io_ckpt_read(k->ctx->comm, k->from, &k->ctx->tuning, state);
}

ra_status cli_ckpt_begin(const cli_ctx *ctx, const cli_ckpt_args *a,
                         const char *pass, cli_ckpt *k, ra_params *p)
{
    *k = (cli_ckpt){.ctx = ctx, .pass = pass};
    k->dir = a->dir ? a->dir : a->resume;
    k->every = a->dir ? a->every : CLI_CKPT_EVERY_DEFAULT;
    if (!k->dir)
        return RA_OK;
    snprintf(k->path, sizeof k->path, "%s/%s", k->dir, ckpt_file);
    if (a->resume)
        snprintf(k->from, sizeof k->from, "%s/%s", a->resume, ckpt_file);
    ra_status st = RA_OK;
    if (ctx->rank == 0)
        st = h5io_output_check(k->path, 1, NULL);
    if (st == RA_OK && ctx->rank == 0 && a->resume)
        st = resume_check(k, a->resume);
    st = a->resume ? head_share(k, st) : ra_agree(ctx->comm, st);
    if (st == RA_OK) {
        ckpt_signal = 0;
        signals_catch();
        k->last = MPI_Wtime();
        k->hooks = (ra_checkpoint){hook_ask, hook_save, NULL, k};
        p->exec.checkpoint = &k->hooks;
    }
    return st;
}

/* Whether a field of the call's fingerprint leaves the numbers alone. */
static int key_skips(const char *name)
{
    return strcmp(name, "exec.stall_timeout") == 0 ||
           strcmp(name, "exec.checkpoint") == 0;
}

/* The key text: "ranks=P", then "name=value" for every field of the
 * call's options fingerprint that changes the numbers. */
static void key_make(cli_ckpt *k, const ra_call_options *o)
{
    ra_fingerprint fp = {0};
    ra_call_fingerprint(o, &fp);
    size_t used = (size_t)snprintf(k->key, sizeof k->key, "ranks=%d\n",
                                   k->ctx->nranks);
    for (int i = 0; i < fp.n && used < sizeof k->key; i++)
        if (!key_skips(fp.f[i].name))
            used += (size_t)snprintf(k->key + used, sizeof k->key - used,
                                     "%s=%s\n", fp.f[i].name, fp.f[i].text);
}

/* The first line of want and have that differ: RA_ERR_ARG naming it. */
static ra_status key_compare(const char *dir, const char *want,
                             const char *have)
{
    while (*want || *have) {
        const size_t lw = strcspn(want, "\n"), lh = strcspn(have, "\n");
        if (lw != lh || memcmp(want, have, lw) != 0) {
            const char *eh = memchr(have, '=', lh);
            const int vl = eh ? (int)(lh - (size_t)(eh - have) - 1) : (int)lh;
            return ra_error_set(RA_ERR_ARG, "--resume %s: the checkpoint was "
                                "made with %.*s, this run has %.*s", dir,
                                (int)lw, want, vl, eh ? eh + 1 : have);
        }
        want += lw + (want[lw] == '\n');
        have += lh + (have[lh] == '\n');
    }
    return RA_OK;
}

ra_status cli_ckpt_key(cli_ckpt *k, const ra_shape *s, const ra_params *p,
                       const ra_masks *masks, int dw)
{
    if (!k->dir)
        return RA_OK;
    const int bwd = strcmp(k->pass, "backward") == 0;
    const ra_call_options o = {
        .call = bwd ? RA_CALL_BACKWARD : RA_CALL_FORWARD, .shape = s,
        .params = p, .masks = masks, .dw = dw, .weights = 1};
    key_make(k, &o);
    ra_status st = RA_OK;
    if (k->from[0] || k->head.key[0])
        st = key_compare(k->dir, k->head.key, k->key);
    return ra_agree(k->ctx->comm, st);
}

ra_status cli_ckpt_arm(cli_ckpt *k, const char *fp)
{
    if (!k->dir)
        return RA_OK;
    k->fingerprint = fp;
    ra_status st = RA_OK;
    if (k->head.fingerprint[0] &&
        h5io_fingerprint_compare(k->dir, k->head.fingerprint, fp) != RA_OK) {
        char why[512];
        const char *at = strstr(ra_error_message(), "fingerprint: ");
        snprintf(why, sizeof why, "%s", at ? at + 13 : ra_error_message());
        st = ra_error_set(RA_ERR_INPUT, "--resume %s: the checkpoint is of "
                          "other input data: %s", k->dir, why);
    }
    if (k->head.key[0])
        k->hooks.load = hook_load;
    return ra_agree(k->ctx->comm, st);
}

ra_status cli_ckpt_end(cli_ckpt *k, ra_status st)
{
    if (!k->dir)
        return st;
    signals_release();
    if (st == RA_STOPPED)
        return ra_error_set(RA_STOPPED, "run: stopped as a signal asked, "
                            "checkpoint of the %s pass at step %d in %s; "
                            "continue with --resume %s", k->pass, k->step,
                            k->path, k->dir);
    if (st == RA_OK && k->ctx->rank == 0)
        unlink(k->path); /* the outputs are whole: nothing to resume */
    return st;
}
