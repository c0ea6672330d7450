/* matrix_gen.c: see matrix_gen.h. */
#include <string.h>

#include "matrix_gen.h"

#define SLOTS (MGEN_MAX_FACTORS * MGEN_MAX_LEVELS)

/* The generator's state: which pairs of (factor, level) slots some case
 * already holds, and how often each level was used (ties go to the least
 * used, which spreads the levels evenly). */
typedef struct {
    const mgen_spec *sp;
    unsigned char covered[SLOTS][SLOTS];
    int used[MGEN_MAX_FACTORS][MGEN_MAX_LEVELS];
} gen_state;

static int slot(int f, int l) { return f * MGEN_MAX_LEVELS + l; }

static int pair_ok(const gen_state *g, const int *lev, unsigned set)
{
    return !g->sp->allowed || g->sp->allowed(lev, set);
}

/* Uncovered pairs that level l of factor f would cover with the factors
 * already set. */
static int gain(const gen_state *g, const int *lev, unsigned set, int f, int l)
{
    int n = 0;
    for (int e = 0; e < g->sp->nf; e++) {
        if (e == f || !(set >> e & 1))
            continue;
        const int a = e < f ? slot(e, lev[e]) : slot(f, l);
        const int b = e < f ? slot(f, l) : slot(e, lev[e]);
        n += !g->covered[a][b];
    }
    return n;
}

/* Completes a case: every factor not in set gets, in factor order, the
 * allowed level of most gain, then least use, then lowest index; -1 when
 * a factor has no allowed level left. */
static int fill(gen_state *g, int *lev, unsigned set)
{
    for (int f = 0; f < g->sp->nf; f++) {
        if (set >> f & 1)
            continue;
        int best = -1, best_gain = -1;
        for (int l = 0; l < g->sp->nlev[f]; l++) {
            lev[f] = l;
            if (!pair_ok(g, lev, set | 1u << f))
                continue;
            const int gn = gain(g, lev, set, f, l);
            if (gn > best_gain ||
                (gn == best_gain && g->used[f][l] < g->used[f][best])) {
                best = l;
                best_gain = gn;
            }
        }
        if (best < 0)
            return -1;
        lev[f] = best;
        set |= 1u << f;
    }
    return 0;
}

/* Pairs that no allowed case can hold count as covered from the start:
 * those the constraints reject, and those they reject only once the case
 * is completed (say, a level that needs one strategy beside one that
 * needs another). */
static void mark_impossible(gen_state *g)
{
    const mgen_spec *sp = g->sp;
    int lev[MGEN_MAX_FACTORS] = {0};
    for (int f = 0; f < sp->nf; f++)
        for (int e = f + 1; e < sp->nf; e++)
            for (int a = 0; a < sp->nlev[f]; a++)
                for (int b = 0; b < sp->nlev[e]; b++) {
                    lev[f] = a;
                    lev[e] = b;
                    const unsigned set = 1u << f | 1u << e;
                    if (!pair_ok(g, lev, set) || fill(g, lev, set) != 0)
                        g->covered[slot(f, a)][slot(e, b)] = 1;
                }
}

static void mark(gen_state *g, const int *lev)
{
    for (int f = 0; f < g->sp->nf; f++) {
        g->used[f][lev[f]]++;
        for (int e = f + 1; e < g->sp->nf; e++)
            g->covered[slot(f, lev[f])][slot(e, lev[e])] = 1;
    }
}

/* The first uncovered pair, as a partial case; 0 when none is left. */
static int first_uncovered(const gen_state *g, int *lev, unsigned *set)
{
    const mgen_spec *sp = g->sp;
    for (int f = 0; f < sp->nf; f++)
        for (int e = f + 1; e < sp->nf; e++)
            for (int a = 0; a < sp->nlev[f]; a++)
                for (int b = 0; b < sp->nlev[e]; b++)
                    if (!g->covered[slot(f, a)][slot(e, b)]) {
                        lev[f] = a;
                        lev[e] = b;
                        *set = 1u << f | 1u << e;
                        return 1;
                    }
    return 0;
}

/* Steps the core factors' odometer (last core factor fastest); 0 after
 * the last combination. */
static int core_next(const mgen_spec *sp, int *lev)
{
    for (int f = sp->nf - 1; f >= 0; f--) {
        if (!(sp->core >> f & 1))
            continue;
        if (++lev[f] < sp->nlev[f])
            return 1;
        lev[f] = 0;
    }
    return 0;
}

int mgen_cases(const mgen_spec *sp, int *cases, int max)
{
    gen_state gen;
    memset(&gen, 0, sizeof gen);
    gen.sp = sp;
    mark_impossible(&gen);
    int n = 0, core[MGEN_MAX_FACTORS] = {0}, lev[MGEN_MAX_FACTORS];
    unsigned set = 0;
    do {
        memcpy(lev, core, sizeof lev);
        if (!pair_ok(&gen, lev, sp->core))
            continue;
        if (n == max || fill(&gen, lev, sp->core) != 0)
            return -1;
        mark(&gen, lev);
        memcpy(cases + n++ * sp->nf, lev, sizeof(int) * (size_t)sp->nf);
    } while (sp->core && core_next(sp, core));
    while (first_uncovered(&gen, lev, &set)) {
        if (n == max || fill(&gen, lev, set) != 0)
            return -1;
        mark(&gen, lev);
        memcpy(cases + n++ * sp->nf, lev, sizeof(int) * (size_t)sp->nf);
    }
    return n;
}
