/* score_inputs.c: the additive score's weights from an input file, shared
 * by run and verify so that both accept and refuse the same files. */
#include <math.h>
#include <stdlib.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

#define NEEDS "--score additive needs /additive/w_q (A, D), /additive/w_k " \
              "(A, Dk) and /additive/w_v (A,)"

void cli_score_free(cli_score_inputs *si)
{
    free(si->mem);
    si->mem = NULL;
}

/* Reads the three weights (A known) into si->mem. */
static ra_status weights_read(const char *in, const ra_shape *s, int64_t A,
                              cli_score_inputs *si)
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

ra_status cli_score_dims(const char *in, const ra_shape *s, const ra_params *p)
{
    if (ra_shape_dk_allowed(s, p->num.score))
        return RA_OK;
    return ra_error_set(RA_ERR_INPUT, "%s: dataset /k: head dim Dk = %lld "
                        "differs from /q (D = %lld); only --score additive "
                        "takes keys of another dim", in,
                        (long long)ra_shape_dk(s), (long long)s->D);
}

ra_status cli_score_setup(const char *in, const ra_shape *s, ra_params *p,
                          cli_score_inputs *si)
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
    if ((st = weights_read(in, s, A, si)) !=
        RA_OK)
        return st;
    p->num.additive = &si->additive;
    return RA_OK;
}
