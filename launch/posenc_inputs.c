/* posenc_inputs.c: the ALiBi slopes a run takes from its input file,
 * shared by run, run --mha and verify so that all three read the same
 * slopes and refuse the same files. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"
#include "range.h"

ra_status cli_alibi_setup(const char *in, const ra_shape *s, ra_params *p,
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
