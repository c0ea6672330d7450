/* verify_cost.h: what an fp64 check (verify, verify --backward) will cost,
 * printed by rank 0 before it starts. */
#ifndef RA_VERIFY_COST_H
#define RA_VERIFY_COST_H

#include <stdint.h>

#include "cli.h"

/* The fraction of (query, key) pairs a check computes under the recorded
 * mask: half plus a key block's share under causal, the window's width,
 * else all (masks of lens and segments aside: an upper bound). */
double verify_pair_fraction(int causal, int window, int64_t left,
                            int64_t right, int64_t M);

/* Prints, on rank 0, the largest per-rank count of fp64 multiply-adds and
 * exp of the check `what` and the seconds they take at the rates this
 * rank measures now (a short dgemm and exp loop). Collective. */
void verify_cost_print(const cli_ctx *ctx, const char *what, double madds,
                       double exps);

#endif /* RA_VERIFY_COST_H */
