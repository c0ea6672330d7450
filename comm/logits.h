/* logits.h: the score features' and the sinks' checks, and the sinks' one
 * place in the call path (logits.c), internal to comm/. */
#ifndef RA_LOGITS_H
#define RA_LOGITS_H

#include "internal.h"
#include "strategy.h"

/* every score feature in its range and rule (ra_features_check); every
 * sink finite
 * (ra_call_check_params); sinks without an attention map (map may be
 * NULL). RA_OK or the first problem, named. */
ra_status ra_logits_check(const ra_shape *shape, const ra_params *params);
ra_status ra_logits_check_map(const ra_params *params,
                              const ra_attn_map *map);

/* The sinks folded into the call's final (o, lse) of its n local rows;
 * nothing without sinks. Local, no communication. */
void ra_logits_sinks_forward(const strat_call *c);

/* grads->dsinks (H, when not NULL) from the call's o', lse' and dout,
 * summed over the ranks (collective on c->comm with sinks, whether or not
 * this rank wants dsinks; watched by strat_wait); nothing without sinks. */
ra_status ra_logits_sinks_backward(strat_call *c);

#endif /* RA_LOGITS_H */
