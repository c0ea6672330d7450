/* logits.c: what sits outside the tiles, for every strategy: the checks
 * of the score features (score_features.h) and of sinks, and the sinks
 * themselves.
 *
 * A sink is one more column of every row's softmax, of logit sinks[h] and
 * value 0. It changes no strategy: each one's final (o, lse) over the keys
 * becomes, per row of head h,
 *   lse' = logaddexp(lse, sink_h),  o' = o exp(lse - lse')
 * (a row that sees no key, lse = -inf: o' = 0, lse' = sink_h). The backward
 * of dq, dk, dv is the usual one given o' and lse' (P = exp(S - lse') over
 * the keys, and the sink's value 0 leaves Drow = dO . O' as it is); the
 * sink's own gradient is
 *   d sink_h = -sum over rows i of exp(sink_h - lse'_i) (dO_i . O'_i)
 * summed over the ranks by one reduction (the maths: engine/sinks.c).
 * The score features live in the kernels (ra_block.features); only
 * their check is called here. */
#include <math.h>
#include <stdlib.h>

#include "agree.h"
#include "call.h"
#include "kernel.h"
#include "logits.h"

ra_status ra_logits_check(const ra_shape *s, const ra_params *p)
{
    ra_status st = ra_features_check(&p->num);
    if (st != RA_OK)
        return st;
    for (int64_t h = 0; p->num.sinks && h < s->H; h++)
        if (!isfinite(p->num.sinks[h]))
            return ra_error_set(RA_ERR_ARG, "sinks: sink %lld is not a "
                                "finite number", (long long)h);
    return RA_OK;
}

ra_status ra_logits_check_map(const ra_params *p, const ra_attn_map *map)
{
    if (p->num.sinks && map)
        return ra_error_set(RA_ERR_ARG, "sinks: the attention map is not "
                            "available with sinks");
    return RA_OK;
}

void ra_logits_sinks_forward(const strat_call *c)
{
    const ra_shape *s = c->shape;
    if (c->params->num.sinks && c->n > 0)
        ra_sinks_fold(s, c->n, c->params->num.sinks, c->o, c->lse, c->threads);
}

ra_status ra_logits_sinks_backward(strat_call *c)
{
    const int64_t H = c->shape->H;
    if (!c->params->num.sinks)
        return RA_OK; /* the reduction runs with or without dsinks: ranks
                         may differ in wanting it */
    double *part = calloc(2 * (size_t)H, sizeof *part);
    ra_status st = ra_agree(c->comm, part ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "sinks: no memory "
                                           "for the gradient's %lld sums",
                                           (long long)H));
    if (st != RA_OK) {
        free(part);
        return st;
    }
    if (c->n > 0)
        ra_sinks_grad(c->shape, c->n, c->params->num.sinks, c->grads->o,
                      c->grads->lse, c->grads->dout, part);
    MPI_Request req;
    if (MPI_Iallreduce(part, part + H, (int)H, MPI_DOUBLE, MPI_SUM, c->comm,
                       &req) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "%s: the sinks' gradient reduction "
                          "failed", c->name);
    if (st == RA_OK) {
        const strat_watch w = {"the sinks' gradient", NULL, 0, NULL, NULL};
        st = strat_wait(c, 1, &req, &w);
    }
    for (int64_t h = 0; st == RA_OK && c->grads->dsinks && h < H; h++)
        c->grads->dsinks[h] = (float)part[H + h];
    if (!c->stalled)
        free(part);
    return st;
}
