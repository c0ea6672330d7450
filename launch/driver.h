/* driver.h: the runner of a pass driver (run, run --mha, run --backward,
 * bench --backward). Each driver is its step functions and a cli_pass
 * table; cli_pass_run takes the steps in one order, prints the parameter
 * table between set-up and compute, and frees through one path. */
#ifndef RA_DRIVER_H
#define RA_DRIVER_H

#include "cli.h"
#include "h5io.h"

/* A rank's gradient buffers, one allocation:
 * dout (B, n, H, Dv)  dq (B, n, H, D)  dk (B, m, G, Dk)  dv (B, m, G, Dv)
 * dw: w_q (A, D) | w_k (A, Dk) | w_v (A), A = 0 without the additive
 * score; n, m the counts of the tensors' slices. */
typedef struct {
    float *mem, *dout, *dq, *dk, *dv, *dw;
    ra_additive_grads dw_grads; /* the three parts of dw */
} cli_grads;

/* What every pass driver owns between validate and report, freed by
 * cli_pass_run through cli_pass_data_free. */
typedef struct {
    ra_shape s;
    int layout_auto;            /* p.layout was chosen by the library */
    const char *in, *out;       /* the files named in the parameter table */
    cli_tensors t;
    cli_grads g;
    cli_score_inputs score_in;  /* the additive score's weights */
    double *slopes;             /* /alibi_slopes, or NULL */
    ra_h5_masks masks;
} cli_pass_data;

void cli_pass_data_free(cli_pass_data *d);

/* Resolves p->layout (RA_LAYOUT_AUTO: by the segments) and records in d
 * whether it was chosen. */
void cli_pass_layout(cli_pass_data *d, ra_params *p, int segmented);

/* p checked against the shape d->s (cli_params_check), then the additive
 * score's weights and the ALiBi slopes read from the input file in into
 * d (cli_score_setup, cli_alibi_setup). Not collective. */
ra_status cli_pass_params(const char *in, cli_pass_data *d, ra_params *p);

/* The fingerprint (h5io_fingerprint_make) of what d holds after the read:
 * d->in, q, k, v, the masks, p's weights and slopes; dataset names from
 * src (NULL: the defaults) and the segment datasets q_seg, kv_seg.
 * text has H5IO_FP_LEN characters. Collective. */
ra_status cli_fingerprint(const cli_ctx *ctx, const cli_pass_data *d,
                          const ra_params *p, const ra_h5_source *src,
                          const char *q_seg, const char *kv_seg, char *text);

/* Allocates d->g for d->t's slices with A additive hidden units (0: none),
 * after cli_mem_check() of the tensors and gradients together against
 * limit (--mem-limit, or 0); RA_ERR_ARG (they cannot fit) or RA_ERR_NOMEM
 * naming the command otherwise. Not collective. */
ra_status cli_grads_alloc(cli_pass_data *d, int64_t A, const char *command,
                          const cli_ctx *ctx, int64_t limit);

/* One step of a driver on its options and state (see CLI_PASS_STEP). */
typedef ra_status (*cli_pass_step)(const cli_ctx *ctx, void *opts,
                                   void *state);
typedef void (*cli_pass_release)(void *state);

/* A pass driver: its options table, the sizes of its options and state
 * (allocated zeroed by cli_pass_run), where its ra_params lie in the
 * options and its cli_pass_data in the state, and its steps in the order
 * they run. init (before parsing), print (after the parameter table) and
 * release (before the shared data is freed) may be NULL. */
typedef struct {
    const cli_spec *spec;
    size_t opts_size, state_size, params, data;
    cli_pass_step init, validate, setup, print, compute, report;
    cli_pass_release release;
} cli_pass;

/* parse -> validate -> set up -> parameter table (and print) -> compute ->
 * report -> free: the exit code. */
int cli_pass_run(const cli_ctx *ctx, const cli_pass *d, int argc,
                 char **argv);

/* Wraps a step ra_status fn(const cli_ctx *, OPTS *, STATE *) as the
 * cli_pass_step fn_step, so that the step itself is typed. */
#define CLI_PASS_STEP(fn, OPTS, STATE)                                        \
    static ra_status fn##_step(const cli_ctx *ctx, void *opts, void *state)   \
    {                                                                         \
        return fn(ctx, (OPTS *)opts, (STATE *)state);                         \
    }

/* Wraps void fn(STATE *) as the cli_pass_release fn_step. */
#define CLI_PASS_RELEASE(fn, STATE)                                           \
    static void fn##_step(void *state) { fn((STATE *)state); }

/* The wrappers of a driver's four steps NAME_validate, NAME_setup,
 * NAME_compute and NAME_report. */
#define CLI_PASS_STEPS(NAME, OPTS, STATE)                                     \
    CLI_PASS_STEP(NAME##_validate, OPTS, STATE)                               \
    CLI_PASS_STEP(NAME##_setup, OPTS, STATE)                                  \
    CLI_PASS_STEP(NAME##_compute, OPTS, STATE)                                \
    CLI_PASS_STEP(NAME##_report, OPTS, STATE)

/* The cli_pass fields of a driver whose options table is NAME_spec, whose
 * OPTS holds its ra_params as p and whose STATE holds its cli_pass_data as
 * d, with the steps of CLI_PASS_STEPS(NAME, ...). */
#define CLI_PASS_FIELDS(NAME, OPTS, STATE)                                    \
    .spec = &NAME##_spec, .opts_size = sizeof(OPTS),                          \
    .state_size = sizeof(STATE), .params = offsetof(OPTS, p),                 \
    .data = offsetof(STATE, d), .validate = NAME##_validate_step,             \
    .setup = NAME##_setup_step, .compute = NAME##_compute_step,               \
    .report = NAME##_report_step

#endif /* RA_DRIVER_H */
