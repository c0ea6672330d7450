/* verify_grads.c: the reads and fp64 passes of verify --backward's sampled
 * check (verify.h). A gradient entry needs its pair's score and its query
 * row's LSE and Drow = do . o. So one rank's share of the query rows is
 * taken a chunk at a time: (1) the chunk's statistics: from the recorded
 * forward the gradients were computed from (its /lse and /o), or, for the
 * independent check, from the forward's fold over every key block;
 * (2) the chunk against the batch's sampled keys, added to their dk, dv;
 * (3) the share's sampled rows, gathered over its chunks, against every
 * key block: their dq, compared here. The independent pass 1 is then the
 * check's main cost (one fp64 forward of the rank's rows); passes 2 and 3
 * grow with the samples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_grads.h"
#include "verify_work.h"

/* The scratch of one share: a chunk of consecutive rows and, apart, its
 * sampled rows. */
typedef struct {
    vwork all, sel;
    double *dout, *lse, *drow;  /* chunk: (nr, H, Dv), (H, nr), (H, nr) */
    double *sdout, *slse, *sdrow; /* the share's sampled rows pending:
                                     (ns, H, Dv), (H, ns), (H, ns) */
    double *dq, *got;           /* sampled rows: (ns, H, D) ref and file */
    double *dp;                 /* (ROW_CHUNK, KEY_BLOCK) */
    int64_t *rows, *srows;      /* flat rows of the chunk, of its sample */
    double *psum, *pv;          /* pending rows with x->fwd: sum_j P (H, ns),
                                   P V (ns, H, Dv) (ref_grads.h) */
    unsigned char *seen;        /* (ns) the pending row sees a key */
    int64_t ns;                 /* sampled rows pending (srows, sdout...) */
    int keys_held;              /* all's key block holds the sampled keys */
} gwork;

static void gwork_free(gwork *g)
{
    void *p[] = {g->dout, g->lse, g->drow, g->sdout, g->slse, g->sdrow,
                 g->dq, g->got, g->dp, g->rows, g->srows, g->psum, g->pv,
                 g->seen};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
    verify_work_free(&g->all);
    verify_work_free(&g->sel);
}

static ra_status gwork_alloc(const verify_ctx *c, gwork *g)
{
    const ra_shape *s = c->s;
    const size_t n = ROW_CHUNK, d = sizeof(double), H = (size_t)s->H;
    ra_status st = verify_work_alloc(c, ROW_CHUNK, &g->all);
    if (st == RA_OK)
        st = verify_work_alloc(c, ROW_CHUNK, &g->sel);
    g->dout = malloc(d * n * H * (size_t)s->Dv);
    g->sdout = malloc(d * n * H * (size_t)s->Dv);
    g->lse = malloc(d * n * H);
    g->drow = malloc(d * n * H);
    g->slse = malloc(d * n * H);
    g->sdrow = malloc(d * n * H);
    g->dq = malloc(d * n * H * (size_t)s->D);
    g->got = malloc(d * n * H * (size_t)s->D);
    g->dp = malloc(d * n * KEY_BLOCK);
    g->rows = malloc(sizeof(int64_t) * n);
    g->srows = malloc(sizeof(int64_t) * n);
    g->psum = malloc(d * n * H);
    g->pv = malloc(d * n * H * (size_t)s->Dv);
    g->seen = malloc(n);
    if (st == RA_OK && (!g->dout || !g->sdout || !g->lse || !g->drow ||
                        !g->slse || !g->sdrow || !g->dq || !g->got ||
                        !g->dp || !g->rows || !g->srows || !g->psum ||
                        !g->pv || !g->seen))
        st = ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot allocate "
                          "the check's buffers");
    return st;
}

/* One row's lse and Drow = do . o from its fold (sum, mx, acc), with the
 * sink's column when sink is finite (else -inf: none); a row that sees no
 * key has o = 0, lse = sink. */
static void row_stats(double sum, double mx, const double *acc,
                      const double *dout, int64_t Dv, double sink,
                      double *lse, double *drow)
{
    const double own = sum > 0 ? mx + log(sum) : -INFINITY;
    const double top = own > sink ? own : sink;
    *lse = top == -INFINITY ? -INFINITY
                            : top + log(exp(own - top) + exp(sink - top));
    double dr = 0.0;
    for (int64_t d = 0; sum > 0 && d < Dv; d++)
        dr += dout[d] * acc[d] / sum;
    *drow = sum > 0 ? dr * exp(own - *lse) : 0.0;
}

/* The recorded row's lse and Drow = do . o from its /lse and /o; their
 * non-finite values (a -inf lse is a row that sees nothing) into *bad. */
static void row_recorded(double lse_in, const double *o, const double *dout,
                         int64_t Dv, double *lse, double *drow, double *bad)
{
    double dr = 0.0;
    for (int64_t d = 0; d < Dv; d++) {
        *bad += !isfinite(o[d]);
        dr += dout[d] * o[d];
    }
    *bad += isnan(lse_in) || lse_in == INFINITY;
    *lse = lse_in;
    *drow = dr;
}

/* Pass 1: the chunk's lse and Drow = do . o (H, nr), recorded or from a
 * fold over every key block, and with sinks its rows' d sinks terms. */
static ra_status chunk_stats(const char *in, const verify_ctx *c, int64_t b,
                             const verify_bwd_batch *bx, gwork *g)
{
    const ra_shape *s = c->s;
    vwork *w = &g->all;
    const int64_t H = s->H, Dv = s->Dv, nr = w->nr;
    ra_status st = RA_OK;
    for (int64_t j0 = 0; !bx->fwd && j0 < s->M && st == RA_OK;
         j0 += KEY_BLOCK) {
        const int64_t kb = s->M - j0 < KEY_BLOCK ? s->M - j0 : KEY_BLOCK;
        if ((st = verify_keys_load(in, c, b, j0, NULL, kb, w)) != RA_OK ||
            !verify_block_seen(w, kb))
            continue;
        const ra_ref_block x = verify_block_of(c, kb, w);
        for (int64_t h = 0; h < H; h++)
            ra_ref_block_fold(&x, h);
    }
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < nr; r++) {
            const int64_t i = h * nr + r;
            const double sink = c->p.num.sinks ? c->p.num.sinks[h] : -INFINITY;
            const double *dout = g->dout + (r * H + h) * Dv;
            if (bx->fwd)
                row_recorded(w->lse[i], w->o + (r * H + h) * Dv, dout, Dv,
                             &g->lse[i], &g->drow[i], &bx->t[6]);
            else
                row_stats(w->sum[i], w->mx[i], w->acc + i * Dv, dout, Dv,
                          sink, &g->lse[i], &g->drow[i]);
            if (c->p.num.sinks && bx->dsinks)
                bx->dsinks[h] -= exp(sink - g->lse[i]) * g->drow[i];
        }
    return st;
}

/* Pass 2: the chunk against the sampled keys, added to their dk, dv. */
static ra_status chunk_keys(const char *in, const verify_ctx *c, int64_t b,
                            const verify_bwd_batch *x, gwork *g)
{
    const ra_shape *s = c->s;
    const int64_t G = s->G, Dk = ra_shape_dk(s);
    vwork *w = &g->all;
    ra_status st = RA_OK;
    /* the recorded statistics load no keys: one block of sampled keys
     * stays in w from chunk to chunk */
    const int keep = x->fwd && x->nk <= KEY_BLOCK;
    for (int64_t k0 = 0; k0 < x->nk && st == RA_OK; k0 += KEY_BLOCK) {
        const int64_t kb = x->nk - k0 < KEY_BLOCK ? x->nk - k0 : KEY_BLOCK;
        if (keep && g->keys_held)
            verify_keys_visible(c, b, kb, w);
        else
            st = verify_keys_load(in, c, b, 0, x->keys + k0, kb, w);
        g->keys_held = keep && st == RA_OK;
        if (st != RA_OK || !verify_block_seen(w, kb))
            continue;
        const ra_ref_block blk = verify_block_of(c, kb, w);
        const ra_ref_bgrads gr = {g->lse, g->drow, g->dout, NULL,
                                  x->dk + k0 * G * Dk,
                                  x->dv + k0 * G * s->Dv, g->dp};
        for (int64_t h = 0; h < s->H; h++)
            ra_ref_block_backward(&blk, h, &gr);
    }
    return st;
}

/* Adds the squared error of got against ref (n values), the squared ref
 * and got's non-finite entries to t[which], t[3 + which], t[6]. */
static void tally_grad(const double *got, const double *ref, int64_t n,
                       int which, double *t)
{
    for (int64_t x = 0; x < n; x++) {
        t[6] += !isfinite(got[x]);
        t[which] += (got[x] - ref[x]) * (got[x] - ref[x]);
        t[3 + which] += ref[x] * ref[x];
    }
}

/* Appends the chunk's sampled rows and their statistics to the pending
 * ones (g->ns; lse and drow at stride ROW_CHUNK per head until
 * pending_dq), which must have room for them. */
static void chunk_sample(const verify_ctx *c, const verify_bwd_batch *x,
                         gwork *g)
{
    const int64_t H = c->s->H, Dv = c->s->Dv, nr = g->all.nr;
    for (int64_t r = 0; r < nr; r++) {
        if (!x->pick_q[g->all.pos[r]])
            continue;
        memcpy(g->sdout + g->ns * H * Dv, g->dout + r * H * Dv,
               sizeof(double) * (size_t)(H * Dv));
        for (int64_t h = 0; h < H; h++) {
            g->slse[h * ROW_CHUNK + g->ns] = g->lse[h * nr + r];
            g->sdrow[h * ROW_CHUNK + g->ns] = g->drow[h * nr + r];
        }
        g->srows[g->ns++] = g->rows[r];
    }
}

/* The recorded forward at the pending rows w (their /o and /lse in w)
 * against its exact o and LSE from g->psum, g->pv (ref_grads.h) into t;
 * a row recorded as seeing nothing (-inf) that sees a key (or a sink) is
 * a bad row. */
static void pending_forward(const verify_ctx *c, const vwork *w,
                            const gwork *g, ra_tally *t)
{
    const int64_t H = c->s->H, Dv = c->s->Dv, ns = w->nr;
    for (int64_t r = 0; r < ns; r++)
        for (int64_t h = 0; h < H; h++) {
            const double lse = w->lse[h * ns + r];
            const double *pv = g->pv + (r * H + h) * Dv;
            double sum = g->psum[h * ns + r];
            if (c->p.num.sinks && lse > -INFINITY)
                sum += exp(c->p.num.sinks[h] - lse);
            for (int64_t d = 0; d < Dv; d++)
                ra_tally_o(t, w->o[(r * H + h) * Dv + d],
                           sum > 0 ? pv[d] / sum : 0.0);
            const int empty = !g->seen[r] && !c->p.num.sinks;
            ra_tally_lse(t, lse, lse > -INFINITY ? lse + log(sum)
                                 : empty ? -INFINITY : 0.0);
        }
}

/* Pass 3: the pending sampled rows against every key block (one pass for
 * all the share's chunks): their dq, rotated back, against the file's;
 * with the recorded forward also its check at those rows. */
static ra_status pending_dq(const char *in, const verify_ctx *c, int64_t b,
                            const verify_bwd_batch *x, gwork *g)
{
    const ra_shape *s = c->s;
    const int64_t H = s->H, D = s->D, ns = g->ns;
    vwork *w = &g->sel;
    g->ns = 0;
    for (int64_t h = 1; h < H; h++) { /* to (H, ns) */
        memmove(g->slse + h * ns, g->slse + h * ROW_CHUNK,
                sizeof(double) * (size_t)ns);
        memmove(g->sdrow + h * ns, g->sdrow + h * ROW_CHUNK,
                sizeof(double) * (size_t)ns);
    }
    w->nr = ns;
    ra_status st = ns ? verify_rows_load(in, x->fwd, c, b, g->srows, w)
                      : RA_OK;
    if (st != RA_OK || ns == 0)
        return st;
    memset(g->dq, 0, sizeof(double) * (size_t)(ns * H * D));
    memset(g->psum, 0, sizeof(double) * (size_t)(ns * H));
    memset(g->pv, 0, sizeof(double) * (size_t)(ns * H * s->Dv));
    memset(g->seen, 0, (size_t)ns);
    const ra_ref_bgrads gr = {g->slse, g->sdrow, g->sdout, g->dq, NULL, NULL,
                              g->dp, x->fwd ? g->psum : NULL,
                              x->fwd ? g->pv : NULL};
    for (int64_t j0 = 0; j0 < s->M && st == RA_OK; j0 += KEY_BLOCK) {
        const int64_t kb = s->M - j0 < KEY_BLOCK ? s->M - j0 : KEY_BLOCK;
        if ((st = verify_keys_load(in, c, b, j0, NULL, kb, w)) != RA_OK ||
            !verify_block_seen(w, kb))
            continue;
        for (int64_t r = 0; r < ns * kb; r++)
            g->seen[r / kb] |= w->vis[r];
        const ra_ref_block blk = verify_block_of(c, kb, w);
        for (int64_t h = 0; h < H; h++)
            ra_ref_block_backward(&blk, h, &gr);
    }
    for (int64_t r = 0; r < ns * H; r++)
        ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base, g->dq + r * D, D,
                        -w->qat[r / H]);
    if (st == RA_OK)
        st = verify_read_runs(x->grads, "/dq", VERIFY_GRAD, c,
                              (verify_tokens){b, w->pos, ns}, H * D, g->got);
    if (st == RA_OK)
        tally_grad(g->got, g->dq, ns * H * D, 0, x->t);
    if (st == RA_OK && x->fwd)
        pending_forward(c, w, g, x->fwd_t);
    return st;
}

/* How many of the chunk's rows are sampled. */
static int64_t chunk_picks(const verify_bwd_batch *x, const gwork *g)
{
    int64_t n = 0;
    for (int64_t r = 0; r < g->all.nr; r++)
        n += x->pick_q[g->all.pos[r]];
    return n;
}

ra_status verify_grads_share(const char *in, const verify_ctx *c, int64_t b,
                             ra_range mine, const verify_bwd_batch *x)
{
    const ra_shape *s = c->s;
    gwork g = {0};
    const int64_t end = mine.start + mine.count;
    ra_status st = mine.count > 0 ? gwork_alloc(c, &g) : RA_OK;
    for (int64_t i0 = mine.start; i0 < end && st == RA_OK; i0 += ROW_CHUNK) {
        g.all.nr = end - i0 < ROW_CHUNK ? end - i0 : ROW_CHUNK;
        for (int64_t r = 0; r < g.all.nr; r++)
            g.rows[r] = b * s->N + i0 + r;
        if ((st = verify_rows_load(in, x->fwd, c, b, g.rows, &g.all)) ==
                RA_OK &&
            (st = h5io_read_rows_as(in, "/do", verify_qkv_axes(c), b, i0,
                                    g.all.nr, g.dout)) == RA_OK &&
            (st = chunk_stats(in, c, b, x, &g)) == RA_OK &&
            (st = chunk_keys(in, c, b, x, &g)) == RA_OK &&
            g.ns + chunk_picks(x, &g) > ROW_CHUNK)
            st = pending_dq(in, c, b, x, &g);
        if (st == RA_OK)
            chunk_sample(c, x, &g);
    }
    if (st == RA_OK && g.ns)
        st = pending_dq(in, c, b, x, &g);
    gwork_free(&g);
    return st;
}

ra_status verify_grads_keys(const verify_ctx *c, int64_t b,
                            const verify_bwd_batch *x)
{
    const ra_shape *s = c->s;
    const int64_t G = s->G, Dk = ra_shape_dk(s), Dv = s->Dv, n = x->nk;
    for (int64_t r = 0; r < n * G; r++)
        ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base, x->dk + r * Dk, Dk,
                        -x->keys[r / G]);
    const verify_tokens keys = {b, x->keys, n};
    double *got = malloc(sizeof(double) * (size_t)(n * G * (Dk + Dv) + 1));
    ra_status st = got ? RA_OK : ra_error_set(RA_ERR_NOMEM, "verify "
                                              "--backward: out of memory");
    if (st == RA_OK && (st = verify_read_runs(x->grads, "/dk", VERIFY_GRAD,
                                              c, keys, G * Dk, got)) == RA_OK)
        tally_grad(got, x->dk, n * G * Dk, 1, x->t);
    if (st == RA_OK && (st = verify_read_runs(x->grads, "/dv", VERIFY_GRAD,
                                              c, keys, G * Dv, got)) == RA_OK)
        tally_grad(got, x->dv, n * G * Dv, 2, x->t);
    free(got);
    return st;
}
