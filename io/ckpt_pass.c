/* ckpt_pass.c (io): one pass's checkpoints (ckpt_pass.h): the directory, the
 * resumed checkpoint checked against the pass, P, the key of the options
 * that change the numbers and the input's fingerprint, and the save and
 * load of DIR/checkpoint.h5 (checkpoint.c). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "call.h"
#include "ckpt_pass.h"

/* The checkpoint file of a directory. */
static const char ckpt_file[] = "checkpoint.h5";

/* The resumed file: a checkpoint of this pass on this many ranks. */
static ra_status resume_check(h5io_resume *k, const char *dir)
{
    if (access(k->from, F_OK) != 0)
        return ra_error_set(RA_ERR_ARG, "--resume %s: no checkpoint there "
                            "(%s)", dir, ckpt_file);
    ra_status st = h5io_ckpt_head_read(k->from, &k->head);
    if (st == RA_OK && strcmp(k->head.pass, k->pass) != 0)
        st = ra_error_set(RA_ERR_ARG, "--resume %s: the checkpoint is of a "
                          "%s pass, this run is a %s pass", dir,
                          k->head.pass, k->pass);
    if (st == RA_OK && k->head.ranks != k->nranks)
        st = ra_error_set(RA_ERR_ARG, "--resume %s: the checkpoint was made "
                          "on %lld ranks, this run has %d (resume on the "
                          "same P)", dir, (long long)k->head.ranks,
                          k->nranks);
    return st;
}

/* Rank 0's head of the checkpoint to every rank. */
static ra_status head_share(h5io_resume *k, ra_status st)
{
    if ((st = ra_agree(k->comm, st)) != RA_OK)
        return st;
    if (MPI_Bcast(&k->head, (int)sizeof k->head, MPI_BYTE, 0, k->comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "--resume: sharing the checkpoint's "
                            "attributes failed");
    return RA_OK;
}

/* ra_checkpoint.ask: a stop once the caller says one was asked, a save
 * once the period has passed. */
static int resume_ask(void *arg, int done, int total)
{
    const h5io_resume *k = arg;
    (void)done;
    (void)total;
    if (k->stop && k->stop())
        return RA_CKPT_STOP;
    return MPI_Wtime() - k->last >= k->every ? RA_CKPT_SAVE : RA_CKPT_GO_ON;
}

/* ra_checkpoint.save: state to DIR/checkpoint.h5, the caller told before
 * and after. */
static ra_status resume_save(void *arg, const ra_state *state)
{
    h5io_resume *k = arg;
    const h5io_ckpt_meta meta = {k->key, k->fingerprint, k->tuning};
    const double t0 = MPI_Wtime();
    if (k->saving)
        k->saving(k, NULL, 0.0, 0.0);
    const ra_status st = h5io_ckpt_write(k->comm, k->path, &meta, state);
    k->last = MPI_Wtime();
    double bytes = 0;
    for (int i = 0; i < state->nparts; i++)
        bytes += 4.0 * (double)state->part[i].count;
    if (st == RA_OK) {
        k->saved++;
        k->step = state->step;
    }
    if (k->saving)
        k->saving(k, st == RA_OK ? state : NULL, bytes, k->last - t0);
    return st;
}

/* ra_checkpoint.load: state from the resumed checkpoint. */
static ra_status resume_load(void *arg, ra_state *state)
{
    h5io_resume *k = arg;
    return h5io_ckpt_read(k->comm, k->from, k->tuning, state);
}

ra_status h5io_resume_begin(h5io_resume *k, const char *dir, double every,
                            const char *resume)
{
    k->dir = dir ? dir : resume;
    k->every = every;
    if (!k->dir)
        return RA_OK;
    snprintf(k->path, sizeof k->path, "%s/%s", k->dir, ckpt_file);
    if (resume)
        snprintf(k->from, sizeof k->from, "%s/%s", resume, ckpt_file);
    ra_status st = RA_OK;
    if (k->rank == 0)
        st = h5io_output_check(k->path, 1, NULL);
    if (st == RA_OK && k->rank == 0 && resume)
        st = resume_check(k, resume);
    st = resume ? head_share(k, st) : ra_agree(k->comm, st);
    k->last = MPI_Wtime();
    k->hooks = (ra_checkpoint){resume_ask, resume_save, NULL, k};
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
static void key_make(h5io_resume *k, const ra_call_options *o)
{
    ra_fingerprint fp = {0};
    ra_call_fingerprint(o, &fp);
    size_t used = (size_t)snprintf(k->key, sizeof k->key, "ranks=%d\n",
                                   k->nranks);
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

ra_status h5io_resume_key(h5io_resume *k, const ra_shape *s,
                          const ra_params *p, const ra_masks *masks, int dw)
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
    return ra_agree(k->comm, st);
}

ra_status h5io_resume_arm(h5io_resume *k, const char *fp)
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
        k->hooks.load = resume_load;
    return ra_agree(k->comm, st);
}

void h5io_resume_end(const h5io_resume *k, ra_status st)
{
    if (k->dir && st == RA_OK && k->rank == 0)
        unlink(k->path); /* the outputs are whole: nothing to resume */
}
