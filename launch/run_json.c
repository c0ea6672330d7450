/* run_json.c: `run --json FILE`: a machine-readable summary of one run (the
 * shape, every option that changed the result, the timings), staged by
 * rank 0 once the output file is complete, and published with it. */
#include <stdio.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

/* Reals at 17 digits: the scale and sigma read back exactly. */
enum { RUN_JSON_DIGITS = 17 };

/* The options that changed the result; a window not set is null, and a
 * parameter the score does not take is left out. */
static json_t *run_rules(const cli_run_summary *r)
{
    const ra_params *p = r->params;
    const ra_h5_source *src = r->source;
    return json_pack(
        "{s:b, s:o, s:s, s:o*, s:o*, s:s, s:s, s:o, s:o, s:o, s:o, s:s}",
        "causal", p->num.causal, "window",
        p->num.window ? json_pack("[I, I]", (json_int_t)p->num.window_left,
                                  (json_int_t)p->num.window_right)
                      : json_null(),
        "score", ra_score_name(p->num.score), "scale",
        p->num.score == RA_SCORE_DOT ? json_real(r->scale) : NULL, "sigma",
        p->num.score == RA_SCORE_GAUSSIAN ? json_real(p->num.sigma) : NULL,
        "layout", ra_layout_name(p->exec.layout), "qkv_layout",
        h5io_qkv_layout_name(src->axes), "q_dataset",
        perf_json_text(src->q ? src->q : "/q"), "k_dataset",
        perf_json_text(src->k ? src->k : "/k"), "v_dataset",
        perf_json_text(src->v ? src->v : "/v"), "masks",
        perf_json_text(r->masks),
        "out_dtype", ra_dtype_name(r->out_dtype));
}

/* The summary, keys in the order they are written. */
static json_t *run_summary(const cli_run_summary *r)
{
    const ra_shape *s = r->shape;
    json_t *v = json_pack(
        "{s:s, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
        "version", RA_VERSION_STRING, "input", perf_json_text(r->in),
        "output", perf_json_text(r->out), "shape", "B", (json_int_t)s->B,
        "N", (json_int_t)s->N, "M", (json_int_t)s->M, "H", (json_int_t)s->H,
        "G", (json_int_t)s->G, "D", (json_int_t)s->D, "Dv",
        (json_int_t)s->Dv);
    json_t *tail = json_pack(
        "{s:[I, I], s:i, s:i, s:{s:o, s:o, s:o}, s:o}", "tiles",
        (json_int_t)r->block_q, (json_int_t)r->block_kv, "ranks", r->nranks,
        "threads", r->threads, "seconds",
        "attention", perf_json_fixed(r->t_attention, "%.6f"),
        "read", perf_json_fixed(r->t_read, "%.6f"),
        "write", perf_json_fixed(r->t_write, "%.6f"),
        "gflops", perf_json_fixed(r->gflops, "%.3f"));
    return perf_json_merge(perf_json_merge(v, run_rules(r)), tail);
}

static int run_fill(FILE *f, const cli_run_summary *r)
{
    return perf_json_dump(f, run_summary(r), RUN_JSON_DIGITS);
}

ra_status cli_json_write(const char *path, int force,
                         const cli_run_summary *r, h5io_staged *staged)
{
    ra_status st = h5io_text_begin(staged, path, force);
    if (st != RA_OK)
        return st;
    if (run_fill(staged->f, r) != 0) {
        h5io_staged_discard(staged);
        return ra_error_set(RA_ERR_IO, "%s: writing the JSON summary failed",
                            path);
    }
    return h5io_text_end(staged);
}
