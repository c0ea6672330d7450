/* run_pass.c (io): one pass from files to files (run_pass.h): a rank's
 * buffers, the shape, the inputs beside q, k, v, the set-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "agree.h"
#include "call.h"
#include "internal.h"
#include "run_pass.h"

/* The bytes one rank may allocate, and into why what limits them. */
static int64_t mem_share(const h5io_mem *m, char *why, size_t len)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const int on_node = m->ranks_on_node > 0 ? m->ranks_on_node : 1;
    snprintf(why, len, "--mem-limit");
    if (m->limit > 0)
        return m->limit;
    snprintf(why, len, "this node's physical memory shared by its %d ranks",
             on_node);
    return pages > 0 && page > 0
               ? (int64_t)((double)pages * (double)page / on_node)
               : INT64_MAX;
}

ra_status h5io_mem_check(const h5io_mem *m, int64_t need, const char *what)
{
    char why[160];
    const int64_t share = mem_share(m, why, sizeof why);
    if (need >= 0 && need <= share)
        return RA_OK;
    if (need < 0)
        return ra_error_set(RA_ERR_ARG, "shape: %s of rank %d need more "
                            "than 2^63 bytes", what, m->rank);
    return ra_error_set(RA_ERR_ARG, "shape: %s of rank %d need %lld bytes "
                        "(%.3g GB), more than the %lld bytes (%.3g GB) a rank "
                        "may use (%s)", what, m->rank, (long long)need,
                        (double)need * 1e-9, (long long)share,
                        (double)share * 1e-9, why);
}

/* n0 * n1 * n2 * n3 as a size_t count, or -1 on overflow. */
static int count_of(size_t *out, int64_t n0, int64_t n1, int64_t n2,
                    int64_t n3)
{
    const int64_t c = ra_count_checked(4, (const int64_t[]){n0, n1, n2, n3});
    *out = c < 0 ? 0 : (size_t)c;
    return c < 0 ? -1 : 0;
}

/* The slices of rank and the element counts of t (mem NULL) and its bytes
 * in *total; -1 when a count overflows. */
static int tensors_size(h5io_tensors *t, const ra_shape *s,
                        const ra_params *p, int rank, int nranks,
                        size_t *total)
{
    memset(t, 0, sizeof *t);
    t->qs = ra_params_slice(p, p->exec.layout, s->N, rank, nranks);
    t->ks = ra_params_slice(p, p->exec.layout, s->M, rank, nranks);
    const int64_t n = t->qs.count, m = t->ks.count;
    *total = 1; /* one spare element: empty slices still allocate */
    if (count_of(&t->nq, s->B, n, s->H, s->D) ||
        count_of(&t->nk, s->B, m, s->G, ra_shape_dk(s)) ||
        count_of(&t->nv, s->B, m, s->G, s->Dv) ||
        count_of(&t->no, s->B, n, s->H, s->Dv) ||
        count_of(&t->nl, s->B, s->H, n, 1) ||
        __builtin_add_overflow(*total, t->nq + t->nk, total) ||
        __builtin_add_overflow(*total, t->nv + t->no + t->nl, total) ||
        __builtin_mul_overflow(*total, sizeof(float), total) ||
        *total > INT64_MAX)
        return -1;
    return 0;
}

ra_status h5io_tensors_alloc(h5io_tensors *t, const ra_shape *s,
                             const ra_params *p, const h5io_mem *m,
                             int nranks)
{
    size_t total;
    if (tensors_size(t, s, p, m->rank, nranks, &total))
        return ra_error_set(RA_ERR_ARG, "shape: the local tensors of rank %d "
                            "overflow the address space", m->rank);
    ra_status st = h5io_mem_check(m, (int64_t)total, H5IO_TENSORS_WHAT);
    if (st != RA_OK)
        return st;
    if (!(t->mem = malloc(total)))
        return ra_error_set(RA_ERR_NOMEM, "cannot allocate the local tensors "
                            "(%.3g GB on rank %d)", (double)total * 1e-9,
                            m->rank);
    t->q = t->mem;
    t->k = t->q + t->nq;
    t->v = t->k + t->nk;
    t->o = t->v + t->nv;
    t->lse = t->o + t->no;
    return RA_OK;
}

void h5io_tensors_free(h5io_tensors *t)
{
    free(t->mem);
    memset(t, 0, sizeof *t);
}

/* Floats after each part of the gradients: every part, even an empty one,
 * has an address of its own. */
enum { GRADS_SPARE = 16 };

ra_status h5io_grads_alloc(h5io_grads *g, const ra_shape *s,
                           const h5io_tensors *t, int64_t A,
                           const h5io_mem *m, const char *command)
{
    const int64_t n = t->qs.count, k = t->ks.count, Dk = ra_shape_dk(s);
    const int64_t f[5][4] = {{s->B, n, s->H, s->Dv}, {s->B, n, s->H, s->D},
                             {s->B, k, s->G, Dk}, {s->B, k, s->G, s->Dv},
                             {A, s->D + Dk + 1, 1, 1}};
    int64_t cnt[5], total = 0;
    for (int i = 0; i < 5; i++) {
        cnt[i] = ra_count_checked(4, f[i]);
        total = ra_add_checked(total, ra_add_checked(cnt[i], GRADS_SPARE));
    }
    const int64_t held = (int64_t)(t->nq + t->nk + t->nv + t->no + t->nl + 1);
    const int64_t need = ra_mul_checked(ra_add_checked(total, held),
                                        (int64_t)sizeof(float));
    ra_status st = h5io_mem_check(m, need, "the tensors and their gradients");
    if (st != RA_OK)
        return st;
    g->mem = total > 0 && (uint64_t)total < SIZE_MAX / sizeof(float)
                 ? malloc(sizeof(float) * (size_t)total) : NULL;
    if (!g->mem)
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate the "
                            "gradients of rank %d", command, m->rank);
    g->dout = g->mem;
    g->dq = g->dout + cnt[0] + GRADS_SPARE;
    g->dk = g->dq + cnt[1] + GRADS_SPARE;
    g->dv = g->dk + cnt[2] + GRADS_SPARE;
    g->dw = g->dv + cnt[3] + GRADS_SPARE;
    g->dw_grads = (ra_additive_grads){g->dw, g->dw + A * s->D,
                                      g->dw + A * (s->D + Dk)};
    return RA_OK;
}

/* The backward's sinks dataset: rq.src.sinks, else the one the --fwd run
 * recorded (the forward's sinks); another than that run's is refused. */
static ra_status fwd_sinks(h5io_pass *j)
{
    h5io_run_attrs a;
    const char *fwd = j->rq.fwd, *given = j->rq.src.sinks;
    ra_status st = fwd ? h5io_read_run_attrs(fwd, &a) : RA_OK;
    if (!fwd || st != RA_OK)
        return st;
    snprintf(j->fwd_sinks, sizeof j->fwd_sinks, "%s", a.sinks_dataset);
    if (given && strcmp(given, j->fwd_sinks) != 0)
        return ra_error_set(RA_ERR_INPUT, "--sinks %s: the forward %s was run "
                            "with %s (attribute sinks_dataset)", given, fwd,
                            j->fwd_sinks[0] ? j->fwd_sinks : "no sinks");
    if (!given && j->fwd_sinks[0])
        j->rq.src.sinks = j->fwd_sinks;
    return RA_OK;
}

ra_status h5io_pass_open(const h5io_pass_req *rq, h5io_pass *j)
{
    memset(j, 0, sizeof *j);
    j->rq = *rq;
    j->rq.src.tuning = rq->tuning;
    if (rq->kind == H5IO_PASS_MHA)
        return ra_agree(rq->comm, h5io_mha_shape(rq->in, rq->heads,
                                                 rq->kv_heads, &j->self,
                                                 &j->s, &j->lw.layer));
    ra_status st = ra_h5_read_shape(rq->comm, rq->in, &j->rq.src, &j->s,
                                    j->axes);
    if (st == RA_OK && rq->kind == H5IO_PASS_BACKWARD)
        st = ra_agree(rq->comm, fwd_sinks(j));
    return st;
}

ra_status h5io_pass_inputs(h5io_pass *j, ra_params *p)
{
    const char *in = j->rq.in;
    const int layer = j->rq.kind == H5IO_PASS_MHA;
    /* the keys' dim first: its refusal names the file */
    ra_status st = layer ? RA_OK : h5io_score_dims(in, &j->s, p);
    if (st == RA_OK)
        st = ra_call_check_local(&j->s, p);
    if (st == RA_OK && !layer)
        st = h5io_additive_read(in, &j->s, p, &j->score_in);
    if (st == RA_OK && layer)
        st = h5io_mha_weights_read(in, &j->s, &j->lw);
    if (st == RA_OK)
        st = h5io_alibi_read(in, &j->s, p, &j->slopes);
    if (st == RA_OK && !layer)
        st = h5io_sinks_read(in, j->rq.src.sinks, &j->s, p, &j->sinks);
    if (st == RA_OK && j->rq.fwd)
        st = h5io_fwd_check(j->rq.fwd, &j->s, p);
    if (st == RA_OK && j->rq.fwd)
        st = h5io_fingerprint_read(j->rq.fwd, j->fp_fwd, sizeof j->fp_fwd);
    if (st == RA_OK)
        st = h5io_segment_names_from(in, &j->rq.src, &j->q_seg, &j->kv_seg);
    j->lw.layer.pos_encoding = j->rq.pos;
    return ra_agree(j->rq.comm, st);
}

/* The output's "masks" attribute (the mask datasets in use among q_lens,
 * kv_lens, segments, joined by ',') and the datasets it records: q, k, v
 * as read, and the masks actually applied, so that verify reads the
 * same. */
static void masks_record(h5io_pass *j)
{
    const ra_h5_source *src = &j->rq.src;
    const ra_h5_masks *m = &j->masks;
    snprintf(j->mask_names, sizeof j->mask_names, "%s%s%s",
             m->q_lens ? "q_lens," : "", m->kv_lens ? "kv_lens," : "",
             m->q_segments ? "segments," : "");
    if (j->mask_names[0])
        j->mask_names[strlen(j->mask_names) - 1] = '\0'; /* the last comma */
    j->recorded = (ra_h5_source){.q = src->q, .k = src->k, .v = src->v,
                                 .axes = src->axes, .sinks = src->sinks};
    if (m->q_lens)
        j->recorded.q_lens = src->q_lens ? src->q_lens : "/q_lens";
    if (m->kv_lens)
        j->recorded.kv_lens = src->kv_lens ? src->kv_lens : "/kv_lens";
    if (j->q_seg && j->q_seg == j->kv_seg)
        j->recorded.segments = j->q_seg;
    else if (j->q_seg) {
        j->recorded.q_segments = j->q_seg;
        j->recorded.kv_segments = j->kv_seg;
    }
}

/* The rows of the attention map this rank computes. */
static ra_status map_alloc(h5io_pass *j, const ra_params *p)
{
    ra_numerics num;
    ra_exec exec;
    ra_params_split(p, &num, &exec);
    ra_attn_map *map = &j->rq.map;
    const ra_range rows = ra_attn_map_rows(p->exec.layout, &num, j->s.N,
                                           j->rq.rank, j->rq.nranks, map);
    const int64_t n = ra_mul_checked(ra_mul_checked(j->s.B, map->nheads),
                                     ra_mul_checked(rows.count, j->s.M));
    map->out = n >= 0 && (uint64_t)n < SIZE_MAX / sizeof(float)
                   ? malloc(sizeof(float) * (size_t)(n + 1)) : NULL;
    return map->out ? RA_OK
                    : ra_error_set(RA_ERR_NOMEM, "run: cannot allocate the "
                                   "attention map rows of rank %d",
                                   j->rq.rank);
}

/* The layer's token slices and y beside the library's projected heads:
 * q, o (B, n, H, D + Dv), lse (B, H, n), k, v (B, m, G, D + Dv). */
static ra_status layer_alloc(h5io_pass *j, const ra_params *p)
{
    const ra_shape *s = &j->s;
    const ra_mha *L = &j->lw.layer;
    j->xqs = ra_params_slice(p, p->exec.layout, s->N, j->rq.rank,
                             j->rq.nranks);
    j->xks = ra_params_slice(p, p->exec.layout, s->M, j->rq.rank,
                             j->rq.nranks);
    const int64_t nxq = ra_count_checked(3, (const int64_t[]){
                            s->B, j->xqs.count, L->Eq});
    const int64_t nxk = j->self ? 0 : ra_count_checked(3, (const int64_t[]){
                                          s->B, j->xks.count, L->Ekv});
    const int64_t ny = ra_count_checked(3, (const int64_t[]){
                           s->B, j->xqs.count, L->Eout});
    const int64_t fq[4] = {s->B, j->xqs.count, s->H, s->D + s->Dv + 1};
    const int64_t fk[4] = {s->B, j->xks.count, s->G, s->D + s->Dv};
    const int64_t heads = ra_add_checked(ra_count_checked(4, fq),
                                         ra_count_checked(4, fk));
    const int64_t all = ra_add_checked(ra_add_checked(nxq, nxk),
                                       ra_add_checked(ny, heads));
    ra_status st = h5io_mem_check(&j->rq.mem,
                                  ra_mul_checked(all, (int64_t)sizeof(float)),
                                  "the layer's slices and heads");
    if (st == RA_OK && (nxq < 0 || nxk < 0 || ny < 0 ||
        !(j->xmem = malloc(sizeof(float) * (size_t)(nxq + nxk + ny + 1)))))
        st = ra_error_set(RA_ERR_NOMEM, "run --mha: cannot allocate the local "
                          "slices of rank %d", j->rq.rank);
    j->xq = j->xmem;
    j->xkv = j->self || !j->xmem ? j->xq : j->xq + nxq;
    j->y = j->xmem ? j->xq + nxq + nxk : NULL;
    return st;
}

/* This rank's buffers of the pass. Not collective. */
static ra_status pass_alloc(h5io_pass *j, const ra_params *p)
{
    if (j->rq.kind == H5IO_PASS_MHA)
        return layer_alloc(j, p);
    ra_status st = h5io_tensors_alloc(&j->t, &j->s, p, &j->rq.mem,
                                      j->rq.nranks);
    if (st == RA_OK && j->rq.map.nheads)
        st = map_alloc(j, p);
    if (j->rq.kind != H5IO_PASS_BACKWARD || st != RA_OK)
        return st;
    const int64_t A =
        p->num.score == RA_SCORE_ADDITIVE ? p->num.additive->A : 0;
    st = h5io_grads_alloc(&j->g, &j->s, &j->t, A, &j->rq.mem,
                          "run --backward");
    if (st == RA_OK && p->num.sinks &&
        !(j->dsinks = malloc(sizeof(float) * (size_t)j->s.H)))
        st = ra_error_set(RA_ERR_NOMEM, "run --backward: out of memory for "
                          "the sinks' gradient");
    return st;
}

ra_status h5io_pass_setup(h5io_pass *j, ra_params *p)
{
    const int segmented = j->q_seg != NULL;
    ra_status st = ra_call_strategy_check(j->rq.comm, &j->s, p, segmented);
    if (st != RA_OK)
        return st;
    j->layout_auto = p->exec.layout == RA_LAYOUT_AUTO;
    p->exec.layout = ra_params_layout(p, segmented);
    if ((st = ra_agree(j->rq.comm, pass_alloc(j, p))) != RA_OK)
        return st;
    ra_numerics num;
    ra_exec exec;
    ra_params_split(p, &num, &exec);
    st = ra_h5_read_masks(j->rq.comm, j->rq.in, &j->rq.src, &j->s,
                          p->exec.layout, &num, &j->masks);
    masks_record(j);
    return st;
}

void h5io_pass_free(h5io_pass *j)
{
    h5io_tensors_free(&j->t);
    free(j->g.mem);
    free(j->dsinks);
    h5io_additive_free(&j->score_in);
    free(j->slopes);
    free(j->sinks);
    ra_h5_masks_free(&j->masks);
    free(j->rq.map.out);
    free(j->lw.mem);
    free(j->xmem);
    memset(j, 0, sizeof *j);
}
