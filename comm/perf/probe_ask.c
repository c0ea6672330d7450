/* probe_ask.c: the kernel rates `ringattn probe` is asked for (probe.h):
 * its lists of scores, engines and precisions by the library's names,
 * and the rates they make. */
#include <string.h>

#include "gemm_env.h"
#include "probe.h"

/* What probe is asked to measure the kernel at: scores (ra_score),
 * engines (ra_gemm, none auto) and precisions (ra_precision), each once. */
typedef struct {
    int score[8], engine[8], precision[8];
    int nscores, nengines, nprec;
} probe_kinds;

/* The kernel rates of head dim D (= Dv) asked for, appended to p: every
 * score, engine, precision and tile class of k (the additive score in
 * fp32 only: its scores are not tile products, and bf16 does not change
 * them). 0, or -1 when they pass PROFILE_MAX_RATES. */
static int rates_ask(ra_profile *p, int64_t D, const probe_kinds *k)
{
    const int per = k->nengines * k->nprec * PROFILE_CLASSES;
    for (int i = 0; i < k->nscores * per; i++) {
        const ra_score sc = (ra_score)k->score[i / per];
        const ra_precision pr =
            (ra_precision)k->precision[i / PROFILE_CLASSES % k->nprec];
        const int e = i / (k->nprec * PROFILE_CLASSES) % k->nengines;
        if (sc == RA_SCORE_ADDITIVE && pr != RA_PRECISION_FP32)
            continue;
        if (p->nrates == PROFILE_MAX_RATES)
            return -1;
        profile_rate *r = &p->rate[p->nrates++];
        *r = (profile_rate){D, D, sc, (ra_gemm)k->engine[e], "",
                            (profile_class)(i % PROFILE_CLASSES), 0.0};
        snprintf(r->precision, sizeof r->precision, "%s",
                 ra_precision_name(pr));
    }
    return 0;
}

/* One item of a list as the library names it: its value, or -1 with the
 * library's message (-2: a message that stands alone). */
static int score_of(const char *t)
{
    ra_score v;
    return ra_score_parse(t, &v) == RA_OK ? (int)v : -1;
}

static int precision_of(const char *t)
{
    ra_precision v;
    return ra_precision_parse(t, &v) == RA_OK ? (int)v : -1;
}

/* An engine of this build; auto: RINGATTN_GEMM's, else this build's. */
static int engine_of(const char *t)
{
    ra_gemm v;
    if (ra_gemm_parse(t, &v) != RA_OK)
        return -1;
    if (!ra_gemm_available(v)) {
        ra_error_set(RA_ERR_ARG, "%s: this build has no oneDNN (rebuild "
                     "with libdnnl-dev installed)", t);
        return -1;
    }
    return v != RA_GEMM_AUTO || ra_gemm_env(&v) == RA_OK ? (int)v : -2;
}

/* The values of option opt's comma list text (each by item_of), each
 * once, into out (room for 8); how many, or -1 with a message. */
static int parse_list(const char *opt, const char *text,
                      int (*item_of)(const char *), int out[8],
                      const char *noun)
{
    char buf[256], why[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", text);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        const int v = item_of(t);
        if (v == -1) {
            snprintf(why, sizeof why, "%s", ra_error_message());
            ra_error_set(RA_ERR_ARG, "%s: %s", opt, why);
        }
        if (v < 0)
            return -1;
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= out[i] == v;
        if (!seen && n < 8)
            out[n++] = v;
    }
    if (n == 0)
        ra_error_set(RA_ERR_ARG, "%s: '%s' names no %s", opt, text, noun);
    return n > 0 ? n : -1;
}

ra_status probe_rates_parse(ra_profile *p, const int64_t *dims, int ndims,
                            const char *scores, const char *gemms,
                            const char *precisions)
{
    probe_kinds k;
    if ((k.nscores = parse_list("--score", scores, score_of, k.score,
                                "score")) < 0 ||
        (k.nengines = parse_list("--gemm", gemms, engine_of, k.engine,
                                 "engine")) < 0 ||
        (k.nprec = parse_list("--precision", precisions, precision_of,
                              k.precision, "precision")) < 0)
        return RA_ERR_ARG;
    p->nrates = 0;
    for (int i = 0; i < ndims; i++)
        if (rates_ask(p, dims[i], &k) != 0)
            return ra_error_set(RA_ERR_ARG, "--dim, --score, --gemm, "
                                "--precision: at most %d kernel rates "
                                "(%d tile classes each)",
                                PROFILE_MAX_RATES, PROFILE_CLASSES);
    if (p->nrates > 0)
        return RA_OK;
    return ra_error_set(RA_ERR_ARG, "--precision: %s alone measures nothing "
                        "for --score %s: the additive score is measured in "
                        "fp32 only (its scores are not tile products); add "
                        "fp32", precisions, scores);
}

