/* run_inputs.h: what a run reads from its input file beside q, k, v and
 * the masks (the additive score's weights, the ALiBi slopes, the sinks),
 * shared by run, run --mha, run --backward and verify so that all accept
 * and refuse the same files. Each reader is rank-local (not collective)
 * and names the file and the dataset in its refusals (not installed). */
#ifndef RA_IO_RUN_INPUTS_H
#define RA_IO_RUN_INPUTS_H

#include "h5io.h"

/* Keys of another dim than the queries need the additive score
 * (ra_shape_dk_allowed), refused naming the input file. */
ra_status h5io_score_dims(const char *in, const ra_shape *s,
                          const ra_params *p);

/* The additive score's weights, read from an input file. */
typedef struct {
    float *mem; /* w_q (A, D) | w_k (A, Dk) | w_v (A) */
    ra_additive additive;
} h5io_additive;

/* After h5io_score_dims, with p's score additive: /additive/w_q, w_k, w_v
 * into p->additive (non-finite weights refused, whatever p->nonfinite
 * says); nothing for another score. */
ra_status h5io_additive_read(const char *in, const ra_shape *s, ra_params *p,
                             h5io_additive *si);
void h5io_additive_free(h5io_additive *si);

/* The attention sinks: dataset path (H,) of in read into *sinks (the
 * caller's to free) and p->sinks pointed at it, refused (RA_ERR_INPUT)
 * when absent, of another shape or not finite; nothing when path is
 * NULL. */
ra_status h5io_sinks_read(const char *in, const char *path,
                          const ra_shape *s, ra_params *p, float **sinks);

/* With p->alibi: /alibi_slopes (H,) of in when present (finite, any float
 * type, read as float32) into *slopes and p->alibi_slopes, else none (the
 * library's standard slopes). */
ra_status h5io_alibi_read(const char *in, const ra_shape *s, ra_params *p,
                          double **slopes);

#endif /* RA_IO_RUN_INPUTS_H */
