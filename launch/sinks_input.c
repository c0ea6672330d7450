/* sinks_input.c: the attention sinks a run takes from its input file
 * (run --sinks PATH): one logit per query head, dataset shape (H,). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "h5io.h"
#include "logits.h"

ra_status cli_sinks_setup(const char *in, const char *path,
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
