/* run_pass_call.c (io): one pass from files to files (run_pass.h): the
 * read, the library's call and the write. */
#include <stdio.h>
#include <stdlib.h>

#include "agree.h"
#include "call.h"
#include "internal.h"
#include "run_pass.h"

/* The fingerprint of what j holds after the read. Collective. */
static ra_status pass_fingerprint(h5io_pass *j, const ra_params *p)
{
    const ra_h5_source *src = &j->rq.src;
    const h5io_fp_source fp = {
        .in = j->rq.in, .shape = &j->s, .params = p, .q = j->t.q,
        .k = j->t.k, .v = j->t.v, .masks = &j->masks, .qs = j->t.qs,
        .ks = j->t.ks,
        .names = {src->q ? src->q : "/q", src->k ? src->k : "/k",
                  src->v ? src->v : "/v", j->q_seg ? j->q_seg : "",
                  j->kv_seg ? j->kv_seg : "",
                  src->q_lens ? src->q_lens : "/q_lens",
                  src->kv_lens ? src->kv_lens : "/kv_lens"}};
    return h5io_fingerprint_make(j->rq.comm, &fp, j->fingerprint,
                                 sizeof j->fingerprint);
}

/* The layer's tokens; the reader refuses non-finite ones. */
static ra_status layer_read(h5io_pass *j)
{
    const ra_shape *s = &j->s;
    const ra_mha *L = &j->lw.layer;
    const int64_t dq[3] = {s->B, s->N, L->Eq}, dk[3] = {s->B, s->M, L->Ekv};
    ra_status st = h5io_read_tokens(j->rq.comm, j->rq.in,
                                    j->self ? "/x" : "/x_q", dq, &j->xqs,
                                    j->rq.tuning, j->xq);
    if (st == RA_OK && !j->self)
        st = h5io_read_tokens(j->rq.comm, j->rq.in, "/x_kv", dk, &j->xks,
                              j->rq.tuning, j->xkv);
    return ra_agree(j->rq.comm, st);
}

/* The backward's: /do, and o and lse from --fwd, whose input must be this
 * one (fingerprint) and whose lse must fit the masks. */
static ra_status backward_read(h5io_pass *j, const ra_params *p)
{
    const h5io_pass_req *rq = &j->rq;
    const h5io_bwd_files files = {rq->in, rq->fwd, rq->src.axes, rq->tuning};
    ra_status st = h5io_read_backward(rq->comm, &files, &j->s, p, j->g.dout,
                                      j->t.o, j->t.lse);
    if (st == RA_OK)
        st = pass_fingerprint(j, p);
    if (st == RA_OK && rq->fwd)
        st = ra_agree(rq->comm, h5io_fingerprint_compare(rq->fwd, j->fp_fwd,
                                                         j->fingerprint));
    if (st == RA_OK && rq->fwd)
        st = h5io_lse_check(rq->comm, rq->fwd, &j->s, p, &j->masks.view,
                            j->t.lse);
    return st;
}

ra_status h5io_pass_read(h5io_pass *j, const ra_params *p)
{
    const h5io_pass_req *rq = &j->rq;
    if (rq->kind == H5IO_PASS_MHA)
        return layer_read(j);
    h5io_tensors *t = &j->t;
    const ra_slice rows[2] = {t->qs, t->ks};
    ra_status st = ra_h5_read_inputs(rq->comm, rq->in, &rq->src, &j->s, rows,
                                     t->q, t->k, t->v);
    const h5io_inputs in = {&rq->src, &j->s, p->exec.layout,
                            ra_cut_band(p), t->q, t->k, t->v};
    const int scan = rq->kind == H5IO_PASS_BACKWARD || !rq->allow_nonfinite;
    if (st == RA_OK && scan)
        st = h5io_scan_nonfinite(rq->comm, rq->in, &in, &j->bad);
    if (st == RA_OK && rq->kind == H5IO_PASS_BACKWARD)
        return backward_read(j, p);
    return st == RA_OK ? pass_fingerprint(j, p) : st;
}

/* The forward and its output, staged. */
static ra_status forward_call(h5io_pass *j, const ra_params *p)
{
    const h5io_pass_req *rq = &j->rq;
    const int map = rq->map.nheads > 0;
    const double t0 = MPI_Wtime();
    ra_status st = ra_call_forward(rq->comm, &j->s, p, &j->masks.view,
                                   &(ra_qkv){j->t.q, j->t.k, j->t.v},
                                   &(ra_out){j->t.o, j->t.lse,
                                             map ? &j->rq.map : NULL},
                                   map ? NULL : &j->tm);
    if (map) /* forward and map passes together */
        j->tm.total = MPI_Wtime() - t0;
    j->stalled = st == RA_ERR_MPI;
    j->t_call = MPI_Wtime() - t0;
    if (st != RA_OK)
        return st;
    int64_t bq, bkv;
    ra_numerics num;
    ra_exec exec;
    ra_params_tiles(p, &j->s, &bq, &bkv);
    ra_params_split(p, &num, &exec);
    const ra_run_meta meta = {
        .num = &num, .exec = &exec, .scale = ra_params_scale(p, &j->s),
        .block_q = bq, .block_kv = bkv, .command_line = rq->command_line,
        .masks = j->mask_names, .map = map ? &j->rq.map : NULL,
        .source = &j->recorded, .out_dtype = rq->out_dtype,
        .out_chunk = rq->out_chunk, .out_axes = rq->out_axes,
        .out_compress = rq->out_compress, .out_group = rq->out_group,
        .fingerprint = j->fingerprint, .tuning = rq->tuning};
    return h5io_write_outputs_staged(rq->comm, rq->out, rq->force, &j->s,
                                     &meta, j->t.o, j->t.lse, &j->staged);
}

/* The backward (the forward recomputed first when asked) and the
 * gradients' file. */
static ra_status backward_call(h5io_pass *j, const ra_params *p)
{
    const h5io_pass_req *rq = &j->rq;
    const h5io_tensors *t = &j->t;
    const h5io_grads *g = &j->g;
    const ra_additive_grads *dw =
        p->num.score == RA_SCORE_ADDITIVE ? &g->dw_grads : NULL;
    const ra_qkv in = {t->q, t->k, t->v};
    ra_params fwd = *p; /* checkpoints are the backward's */
    fwd.exec.checkpoint = NULL;
    ra_status st = RA_OK;
    if (rq->recompute)
        st = ra_call_forward(rq->comm, &j->s, &fwd, &j->masks.view, &in,
                             &(ra_out){t->o, t->lse, NULL}, &j->tm_fwd);
    if (st == RA_OK)
        st = ra_call_backward(rq->comm, &j->s, p, &j->masks.view, &in,
                              &(ra_grads){t->o, t->lse, g->dout, g->dq, g->dk,
                                          g->dv, dw, j->dsinks},
                              &j->tm);
    j->stalled = st == RA_ERR_MPI;
    j->t_call = j->tm.total + j->tm_fwd.total;
    if (st != RA_OK)
        return st;
    const h5io_grads_meta meta = {
        p, rq->fwd ? rq->fwd : "recomputed", j->mask_names,
        rq->command_line, dw, j->fingerprint, &rq->src, rq->out_axes,
        rq->tuning, j->dsinks, rq->recompute ? t->o : NULL,
        rq->recompute ? t->lse : NULL};
    return h5io_write_grads(rq->comm, rq->out, rq->force, &j->s, &meta, g->dq,
                            g->dk, g->dv);
}

/* The layer and its /y. */
static ra_status layer_call(h5io_pass *j, const ra_params *p)
{
    const h5io_pass_req *rq = &j->rq;
    const double t0 = MPI_Wtime();
    ra_status st = ra_call_mha(rq->comm, &j->s, p, &j->masks.view,
                               &j->lw.layer,
                               &(ra_mha_io){j->xq, j->xkv, j->y}, NULL);
    j->stalled = st == RA_ERR_MPI;
    j->t_call = MPI_Wtime() - t0;
    const int64_t dy[3] = {j->s.B, j->s.N, j->lw.layer.Eout};
    const h5io_layer_output out = {&j->s, p, rq->pos, dy, &j->xqs, j->y,
                                   rq->command_line, rq->tuning};
    return st == RA_OK ? h5io_write_layer_output(rq->comm, rq->out,
                                                 rq->force, &out)
                       : st;
}

ra_status h5io_pass_call(h5io_pass *j, const ra_params *p)
{
    const double t0 = MPI_Wtime();
    ra_status st;
    if (j->rq.kind == H5IO_PASS_FORWARD)
        st = forward_call(j, p);
    else if (j->rq.kind == H5IO_PASS_BACKWARD)
        st = backward_call(j, p);
    else
        st = layer_call(j, p);
    j->t_write = MPI_Wtime() - t0 - j->t_call;
    return st;
}
