/* run_inputs.c (io): the additive score's weights, the sinks and the
 * ALiBi slopes a run reads from its input file (run_inputs.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "logits.h"
#include "range.h"
#include "run_inputs.h"

#define NEEDS "--score additive needs /additive/w_q (A, D), /additive/w_k " \
              "(A, Dk) and /additive/w_v (A,)"

void h5io_additive_free(h5io_additive *si)
{
    free(si->mem);
    si->mem = NULL;
}

/* Reads the three weights (A known) into si->mem. */
static ra_status weights_read(const char *in, const ra_shape *s, int64_t A,
                              h5io_additive *si)
{
    const int64_t Dk = ra_shape_dk(s);
    const int64_t dq[2] = {A, s->D}, dk[2] = {A, Dk}, dv[1] = {A};
    float *wq = si->mem, *wk = wq + A * s->D, *wv = wk + A * Dk;
    const struct {
        const char *name;
        int rank;
        const int64_t *dims;
        float *out;
        int64_t n;
    } w[3] = {{"/additive/w_q", 2, dq, wq, A * s->D},
              {"/additive/w_k", 2, dk, wk, A * Dk},
              {"/additive/w_v", 1, dv, wv, A}};
    for (int i = 0; i < 3; i++) {
        int present;
        ra_status st = h5io_read_weights(in, w[i].name, w[i].rank, w[i].dims,
                                         w[i].out, &present);
        if (st != RA_OK)
            return st;
        if (!present)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: missing; "
                                NEEDS, in, w[i].name);
    }
    si->additive = (ra_additive){A, wq, wk, wv};
    return RA_OK;
}

ra_status h5io_score_dims(const char *in, const ra_shape *s,
                          const ra_params *p)
{
    if (ra_shape_dk_allowed(s, p->num.score))
        return RA_OK;
    return ra_error_set(RA_ERR_INPUT, "%s: dataset /k: head dim Dk = %lld "
                        "differs from /q (D = %lld); only --score additive "
                        "takes keys of another dim", in,
                        (long long)ra_shape_dk(s), (long long)s->D);
}

ra_status h5io_additive_read(const char *in, const ra_shape *s, ra_params *p,
                          h5io_additive *si)
{
    const int64_t Dk = ra_shape_dk(s);
    if (p->num.score != RA_SCORE_ADDITIVE)
        return RA_OK;
    int rank, present;
    int64_t dims[4];
    ra_status st = h5io_dataset_dims(in, "/additive/w_v", &rank, dims, &present);
    if (st != RA_OK)
        return st;
    if (!present || rank != 1)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /additive/w_v: " NEEDS,
                            in);
    const int64_t A = dims[0];
    const int64_t f[3] = {A, s->D + Dk + 1, (int64_t)sizeof(float)};
    const int64_t bytes = ra_count_checked(3, f);
    if (bytes < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /additive/w_v: size "
                            "A = %lld makes the weights' byte count overflow "
                            "64 bits", in, (long long)A);
    if (!(si->mem = malloc((size_t)bytes + sizeof(float))))
        return ra_error_set(RA_ERR_NOMEM, "%s: out of memory for the additive "
                            "weights (A = %lld)", in, (long long)A);
    if ((st = weights_read(in, s, A, si)) != RA_OK)
        return st;
    p->num.additive = &si->additive;
    return RA_OK;
}

ra_status h5io_sinks_read(const char *in, const char *path,
                          const ra_shape *s, ra_params *p, float **sinks)
{
    const int64_t dims[1] = {s->H};
    int rank, present;
    int64_t have[4];
    *sinks = NULL;
    p->num.sinks = NULL;
    if (!path)
        return RA_OK;
    ra_status st = h5io_dataset_dims(in, path, &rank, have, &present);
    if (st == RA_OK && !present)
        st = ra_error_set(RA_ERR_INPUT, "%s: --sinks %s: no such dataset",
                          in, path);
    if (st == RA_OK && (rank != 1 || have[0] != s->H))
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: the sinks must be "
                          "one logit per query head, shape (H,) = (%lld,)",
                          in, path, (long long)s->H);
    if (st != RA_OK)
        return st;
    *sinks = malloc(sizeof(float) * (size_t)s->H);
    if (!*sinks)
        return ra_error_set(RA_ERR_NOMEM, "%s: out of memory for the sinks",
                            in);
    st = h5io_read_weights(in, path, 1, dims, *sinks, &present);
    p->num.sinks = *sinks;
    if (st == RA_OK && ra_logits_check(s, p) != RA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: %s", in, path, why);
    }
    if (st != RA_OK) {
        free(*sinks);
        *sinks = NULL;
        p->num.sinks = NULL;
    }
    return st;
}

ra_status h5io_alibi_read(const char *in, const ra_shape *s, ra_params *p,
                          double **slopes)
{
    const int64_t dims[1] = {s->H};
    int rank, present;
    int64_t have[4];
    float *f = NULL;
    *slopes = NULL;
    p->num.alibi_slopes = NULL;
    if (!p->num.alibi)
        return RA_OK;
    ra_status st = h5io_dataset_dims(in, "/alibi_slopes", &rank, have,
                                     &present);
    if (st != RA_OK || !present)
        return st;
    if (rank != 1 || have[0] != s->H)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /alibi_slopes: must "
                            "hold one slope per query head, shape (H,) = "
                            "(%lld,)", in, (long long)s->H);
    f = malloc(sizeof(float) * (size_t)s->H);
    *slopes = malloc(sizeof(double) * (size_t)s->H);
    if (!f || !*slopes) {
        st = ra_error_set(RA_ERR_NOMEM, "%s: out of memory for the ALiBi "
                          "slopes", in);
        goto cleanup;
    }
    if ((st = h5io_read_weights(in, "/alibi_slopes", 1, dims, f,
                                &present)) != RA_OK)
        goto cleanup;
    for (int64_t h = 0; h < s->H; h++)
        (*slopes)[h] = f[h];
    p->num.alibi_slopes = *slopes;
    if (ra_alibi_check(s, p) != RA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset /alibi_slopes: %s", in,
                          why);
    }
cleanup:
    free(f);
    if (st != RA_OK) {
        free(*slopes);
        *slopes = NULL;
    }
    return st;
}
