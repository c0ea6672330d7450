/* fingerprint.c (launch): the fingerprint text of what a pass driver read,
 * for run (recorded in the output) and run --backward (compared with the
 * forward output's). */
#include "driver.h"
#include "h5io.h"

ra_status cli_fingerprint(const cli_ctx *ctx, const cli_pass_data *d,
                          const ra_params *p, const ra_h5_source *src,
                          const char *q_seg, const char *kv_seg, char *text)
{
    const h5io_fp_source fp = {
        .in = d->in, .shape = &d->s, .params = p, .q = d->t.q, .k = d->t.k,
        .v = d->t.v, .masks = &d->masks, .qs = d->t.qs, .ks = d->t.ks,
        .names = {src && src->q ? src->q : "/q", src && src->k ? src->k : "/k",
                  src && src->v ? src->v : "/v", q_seg ? q_seg : "",
                  kv_seg ? kv_seg : "",
                  src && src->q_lens ? src->q_lens : "/q_lens",
                  src && src->kv_lens ? src->kv_lens : "/kv_lens"}};
    return h5io_fingerprint_make(ctx->comm, &fp, text, H5IO_FP_LEN);
}
