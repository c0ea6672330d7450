/* call.h: the calls behind ra_forward, ra_backward, ra_strategy_check and
 * ra_mha_forward, on the joined options of internal.h (ra_params), for
 * those that hold one struct (the command line, the tests, the layer) and
 * for the knobs no public struct carries (no_poll). Contracts as in
 * ringattn.h; the public functions join the caller's ra_numerics and
 * ra_exec and come through here. */
#ifndef RA_CALL_H
#define RA_CALL_H

#include <mpi.h>

#include "agree.h"
#include "internal.h"
#include "strategy.h"

ra_status ra_call_forward(MPI_Comm comm, const ra_shape *shape,
                          const ra_params *params, const ra_masks *masks,
                          const ra_qkv *in, const ra_out *out,
                          ra_timing *timing);

ra_status ra_call_backward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const ra_qkv *in, const ra_grads *grads,
                           ra_timing *timing);

ra_status ra_call_strategy_check(MPI_Comm comm, const ra_shape *shape,
                                 const ra_params *params, int segments);

/* What ra_call_strategy_check refuses before agreeing, on this rank
 * alone and without MPI (additive weights not yet read are not looked
 * at): the command line's check before it reads anything. */
ra_status ra_call_check_local(const ra_shape *shape, const ra_params *params);

/* What ra_call_strategy_check refuses of P ranks alone, without MPI: the
 * group of hybrid's ulysses_size (hybrid_group_check), for a caller that
 * checks before any collective. */
ra_status ra_call_check_ranks(const ra_shape *shape, const ra_params *params,
                              int P);

/* The strategy a choice among several (bench's `--strategy all`, the
 * plan's auto) is checked as before each is tried: hybrid when
 * ulysses_size is given (the size is hybrid's), else the ring. */
ra_strategy ra_call_choice_strategy(const ra_params *params);

/* The steps a pass of params' strategy reports on P ranks (its row's
 * stepped: one per block, P; else 1). */
int ra_call_steps(const ra_params *params, int P);

ra_status ra_call_mha(MPI_Comm comm, const ra_shape *shape,
                      const ra_params *params, const ra_masks *masks,
                      const ra_mha *layer, const ra_mha_io *io,
                      ra_timing *timing);

/* The shared checks of a call's shape and options (call.c), local: RA_OK
 * or the first problem, named. ra_call_check_enums: every enum field of
 * ra_numerics and ra_exec within its enum; ra_call_check_exec: the bounds
 * of ra_exec's other fields and the engine this build has. */
ra_status ra_call_check_params(const ra_shape *shape, const ra_params *params,
                               const ra_masks *masks);
ra_status ra_call_check_enums(const ra_params *params);
ra_status ra_call_check_exec(const ra_params *params);

/* The functions whose calls agree their options (ra_call_fingerprint). */
enum { RA_CALL_FORWARD, RA_CALL_BACKWARD, RA_CALL_STRATEGY_CHECK,
       RA_CALL_MHA };

/* What a call's options fingerprint holds (agree.h): every field of
 * shape, params and masks that all ranks must pass alike (threads,
 * mem_limit and the progress callbacks are each rank's own), the lens'
 * values, whether segments are given, the attention map's rows and heads
 * and whether the additive weights' gradients are wanted. shape, masks
 * and map may be NULL. */
typedef struct {
    int call;                 /* RA_CALL_... */
    const ra_shape *shape;
    const ra_params *params;  /* window bounds saturated (ra_params_join) */
    const ra_masks *masks;
    const ra_attn_map *map;
    int dw;                   /* ra_backward: dw given, additive score */
    int weights;              /* hash the additive weights' values */
    int segments;             /* segments given (ra_strategy_check) */
} ra_call_options;

void ra_call_fingerprint(const ra_call_options *options,
                         ra_fingerprint *fp);

/* Once the call knows this rank's query and key counts: the operands it
 * must pass for the rows it holds (a rank holding none may pass NULL,
 * which then becomes an address no row is read from or written to), and
 * the backward's lse (finite or -inf, unless num.nonfinite). Local. */
ra_status ra_call_check_operands(strat_call *c);

#endif /* RA_CALL_H */
