/* run_json.c: `run --json FILE`: a machine-readable summary of one run (the
 * shape, every option that changed the result, the timings), staged by
 * rank 0 once the output file is complete, and published with it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

void cli_json_string(FILE *f, const char *text)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

static void json_field(FILE *f, const char *key, const char *text)
{
    fprintf(f, "  ");
    cli_json_string(f, key);
    fprintf(f, ": ");
    cli_json_string(f, text);
    fprintf(f, ",\n");
}

/* The options that changed the result; JSON has no NaN, so a parameter the
 * score does not take is null. */
static void json_rules(FILE *f, const cli_run_summary *r)
{
    const ra_params *p = r->params;
    fprintf(f, "  \"causal\": %s,\n", p->causal ? "true" : "false");
    if (p->window)
        fprintf(f, "  \"window\": [%lld, %lld],\n", (long long)p->window_left,
                (long long)p->window_right);
    else
        fprintf(f, "  \"window\": null,\n");
    json_field(f, "score", ra_score_name(p->score));
    if (p->score == RA_SCORE_DOT)
        fprintf(f, "  \"scale\": %.17g,\n", r->scale);
    if (p->score == RA_SCORE_GAUSSIAN)
        fprintf(f, "  \"sigma\": %.17g,\n", p->sigma);
    json_field(f, "layout", ra_layout_name(p->layout));
    json_field(f, "qkv_layout", h5io_qkv_layout_name(r->source->axes));
    json_field(f, "q_dataset", r->source->q ? r->source->q : "/q");
    json_field(f, "k_dataset", r->source->k ? r->source->k : "/k");
    json_field(f, "v_dataset", r->source->v ? r->source->v : "/v");
    json_field(f, "masks", r->masks);
    json_field(f, "out_dtype", ra_dtype_name(r->out_dtype));
}

/* The summary as JSON to f; non-zero when a write failed. */
static int json_fill(FILE *f, const cli_run_summary *r)
{
    const ra_shape *s = r->shape;
    fprintf(f, "{\n");
    json_field(f, "version", RA_VERSION_STRING);
    json_field(f, "input", r->in);
    json_field(f, "output", r->out);
    fprintf(f, "  \"shape\": {\"B\": %lld, \"N\": %lld, \"M\": %lld, "
            "\"H\": %lld, \"G\": %lld, \"D\": %lld, \"Dv\": %lld},\n",
            (long long)s->B, (long long)s->N, (long long)s->M,
            (long long)s->H, (long long)s->G, (long long)s->D,
            (long long)s->Dv);
    json_rules(f, r);
    fprintf(f, "  \"tiles\": [%lld, %lld],\n  \"ranks\": %d,\n"
            "  \"threads\": %d,\n", (long long)r->block_q,
            (long long)r->block_kv, r->nranks, r->threads);
    fprintf(f, "  \"seconds\": {\"attention\": %.6f, \"read\": %.6f, "
            "\"write\": %.6f},\n  \"gflops\": %.3f\n}\n", r->t_attention,
            r->t_read, r->t_write, isfinite(r->gflops) ? r->gflops : 0.0);
    return ferror(f);
}

ra_status cli_json_write(const char *path, int force,
                         const cli_run_summary *r, h5io_staged *staged)
{
    ra_status st = h5io_text_begin(staged, path, force);
    if (st != RA_OK)
        return st;
    if (json_fill(staged->f, r) != 0) {
        h5io_staged_discard(staged);
        return ra_error_set(RA_ERR_IO, "%s: writing the JSON summary failed",
                            path);
    }
    return h5io_text_end(staged);
}
