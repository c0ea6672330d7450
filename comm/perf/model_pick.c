/* model_pick.c: the model over every strategy and every layout tried, the
 * fastest applicable one (`ringattn plan`, `--strategy auto`), and whether
 * a profile holds what a prediction needs (model.h). */
#include "model.h"

ra_status model_profile_check(const char *path, const ra_profile *pf,
                              const model_alloc *al,
                              const profile_kernel_key *key, int with_io)
{
    const profile_need need = {al->P, al->nodes > 0 ? al->nodes : 1, *key,
                               al->core_rate, with_io};
    char why[400];
    if (profile_usable(pf, &need, why, sizeof why) == 0)
        return RA_OK;
    return ra_error_set(RA_ERR_INPUT, "%s: %s; the plan cannot predict "
                        "with this profile",
                        path ? path : "built-in profile", why);
}

/* Whether row a beats row b (applicable first, then faster). */
static int model_better(const model_result *a, const model_result *b)
{
    if (a->applies != b->applies)
        return a->applies;
    return a->t_total < b->t_total;
}

ra_status model_evaluate(const ra_shape *s, const ra_params *p,
                         int layout_auto, const model_masks *mk,
                         const model_alloc *al, const ra_profile *pf,
                         int with_io, model_table *t)
{
    const int segs = mk && mk->q_seg;
    const ra_layout first = ra_params_layout(p, segs);
    static const ra_layout every[MODEL_LAYOUTS] = {
        RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG, RA_LAYOUT_STRIPED,
        RA_LAYOUT_BALANCED};
    ra_layout lays[MODEL_LAYOUTS] = {first};
    int nl = 1;
    for (int l = 0; layout_auto && l < MODEL_LAYOUTS; l++) /* the rest */
        if (every[l] != first && /* balanced: where auto would pick it */
            (every[l] != RA_LAYOUT_BALANCED || p->num.window))
            lays[nl++] = every[l];
    t->nrows = 0;
    t->best = -1;
    for (int l = 0; l < nl; l++) {
        model_result *rows = &t->row[t->nrows];
        if (model_predict_all(s, p, lays[l], mk, al, pf, with_io, rows) != 0)
            return ra_error_set(RA_ERR_NOMEM, "plan: out of memory");
        for (int k = 0; k < RA_STRATEGY_COUNT; k++, t->nrows++)
            if (t->best < 0 || model_better(&t->row[t->nrows],
                                            &t->row[t->best]))
                t->best = t->nrows;
    }
    if (t->best >= 0 && !t->row[t->best].applies)
        t->best = -1;
    return RA_OK;
}

const model_result *model_best_of(const model_table *t, ra_strategy k)
{
    const model_result *best = NULL;
    for (int i = 0; i < t->nrows; i++) {
        const model_result *r = &t->row[i];
        if (r->strategy != k)
            continue;
        if (!best || (r->applies && (!best->applies ||
                                     r->t_total < best->t_total)))
            best = r;
    }
    return best;
}

int model_ties(const model_table *t, ra_strategy tie[RA_STRATEGY_COUNT])
{
    if (t->best < 0)
        return 0;
    const model_result *b = &t->row[t->best];
    int n = 0;
    tie[n++] = b->strategy;
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        const model_result *r = model_best_of(t, (ra_strategy)k);
        if (k != (int)b->strategy && r && r->applies &&
            r->t_total <= b->t_total * (1.0 + MODEL_ERROR))
            tie[n++] = r->strategy;
    }
    return n;
}
