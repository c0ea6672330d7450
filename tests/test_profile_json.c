/* test_profile_json.c: machine profiles as JSON (comm/perf/profile_json.c
 * reads, comm/perf/profile_write.c writes, through jansson): what is written
 * reads back equal, field by field, for random profiles; the kernel rate
 * falls back as documented; every
 * malformed file is refused with one line naming the file and the key or
 * the problem (jansson's words for text that is not JSON). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "profile_json.h"

static char dir[] = "/tmp/ra_profile_XXXXXX";

static void path_of(char *out, const char *name)
{
    snprintf(out, 256, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *text)
{
    char path[256];
    path_of(path, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* A profile of random values over the ranges the reader accepts. */
static void random_profile(ra_profile *p, unsigned seed)
{
    srand(seed);
    memset(p, 0, sizeof *p);
    p->measured = rand() % 2;
    p->oversubscribed = rand() % 2;
    snprintf(p->date, sizeof p->date, "2026-%02d-%02dT01:02:03Z",
             1 + rand() % 12, 1 + rand() % 28);
    snprintf(p->version, sizeof p->version, "ringattn \"q\" \\ \t%d\x01",
             rand());
    snprintf(p->hosts, sizeof p->hosts, "n%d,n%d,h\xc3\xa9", rand() % 99,
             rand() % 99);
    snprintf(p->io_dir, sizeof p->io_dir, "/scratch/%d", rand());
    p->nodes = 1 + rand() % 64;
    p->ranks_per_node = 1 + rand() % 8;
    p->ranks = p->nodes * p->ranks_per_node;
    p->threads = 1 + rand() % 4;
    p->nrates = rand() % (PROFILE_MAX_RATES + 1);
    for (int i = 0; i < p->nrates; i++)
        p->rate[i] = (profile_rate){1 + rand() % 512, 1 + rand() % 512,
                                    (ra_score)(rand() % 3),
                                    (ra_gemm)(1 + rand() % 2),
                                    "fp32", (profile_class)(rand() % 3),
                                    ldexp((double)rand(), rand() % 16)};
    for (int i = 0; i < p->nrates; i++)
        if (rand() % 2)
            snprintf(p->rate[i].precision, PROFILE_PRECISION, "bf16");
    p->call_seconds = rand() / (double)RAND_MAX * 1e-3;
    p->step_seconds = rand() % 3 == 0 ? 0.0 : rand() / (double)RAND_MAX;
    double *rates[] = {&p->intra.latency, &p->intra.bandwidth,
                       &p->inter.latency, &p->inter.bandwidth,
                       &p->alltoall_intra, &p->alltoall_inter,
                       &p->allgather_intra, &p->allgather_inter,
                       &p->reduce_scatter_intra, &p->reduce_scatter_inter,
                       &p->io_read, &p->io_write};
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++)
        *rates[i] = rand() % 5 == 0 ? 0.0 : rand() / (double)RAND_MAX *
                                                 pow(10, rand() % 12 - 6);
    p->mem_per_node = ((int64_t)rand() << 20) + rand();
}

static void assert_profiles_equal(const ra_profile *a, const ra_profile *b)
{
    assert_int_equal(a->measured, b->measured);
    assert_int_equal(a->oversubscribed, b->oversubscribed);
    assert_string_equal(a->date, b->date);
    assert_string_equal(a->version, b->version);
    assert_string_equal(a->hosts, b->hosts);
    assert_string_equal(a->io_dir, b->io_dir);
    assert_int_equal(a->nodes, b->nodes);
    assert_int_equal(a->ranks, b->ranks);
    assert_int_equal(a->ranks_per_node, b->ranks_per_node);
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->nrates, b->nrates);
    for (int i = 0; i < a->nrates; i++) {
        assert_int_equal(a->rate[i].D, b->rate[i].D);
        assert_int_equal(a->rate[i].Dv, b->rate[i].Dv);
        assert_int_equal(a->rate[i].score, b->rate[i].score);
        assert_int_equal(a->rate[i].gemm, b->rate[i].gemm);
        assert_string_equal(a->rate[i].precision, b->rate[i].precision);
        assert_int_equal(a->rate[i].cls, b->rate[i].cls);
        assert_true(a->rate[i].flops_per_core == b->rate[i].flops_per_core);
    }
    assert_true(a->call_seconds == b->call_seconds);
    assert_true(a->step_seconds == b->step_seconds);
    assert_true(a->intra.latency == b->intra.latency);
    assert_true(a->intra.bandwidth == b->intra.bandwidth);
    assert_true(a->inter.latency == b->inter.latency);
    assert_true(a->inter.bandwidth == b->inter.bandwidth);
    assert_true(a->alltoall_intra == b->alltoall_intra);
    assert_true(a->alltoall_inter == b->alltoall_inter);
    assert_true(a->allgather_intra == b->allgather_intra);
    assert_true(a->allgather_inter == b->allgather_inter);
    assert_true(a->reduce_scatter_intra == b->reduce_scatter_intra);
    assert_true(a->reduce_scatter_inter == b->reduce_scatter_inter);
    assert_true(a->io_read == b->io_read);
    assert_true(a->io_write == b->io_write);
    assert_int_equal(a->mem_per_node, b->mem_per_node);
}

static void round_trip(const ra_profile *p)
{
    char path[256], err[512];
    ra_profile back;
    path_of(path, "rt.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(profile_write_json(f, p), 0);
    assert_int_equal(fclose(f), 0);
    memset(&back, 0x5a, sizeof back);
    if (profile_read_json(path, &back, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_profiles_equal(p, &back);
}

static void test_round_trip(void **state)
{
    ra_profile p;
    profile_default(&p);
    round_trip(&p);
    const unsigned seed = (unsigned)time(NULL);
    print_message("seed %u\n", seed);
    for (unsigned i = 0; i < 50; i++) {
        random_profile(&p, seed + i);
        round_trip(&p);
    }
}

/* The default: not measured, every rate it names positive. */
static void test_default(void **state)
{
    ra_profile p;
    profile_default(&p);
    assert_int_equal(p.measured, 0);
    assert_true(p.nrates > 0);
    for (int i = 0; i < p.nrates; i++)
        assert_true(p.rate[i].flops_per_core > 0);
    assert_true(p.intra.bandwidth > 0 && p.inter.bandwidth > 0);
    assert_true(p.io_read > 0 && p.io_write > 0 && p.mem_per_node > 0);
}

/* The rate of head dim D and score under the key of engine onednn, fp32,
 * full tiles. */
static double rate_of(const ra_profile *p, int64_t D, ra_score score)
{
    const profile_kernel_key k = {D, D, score, RA_GEMM_ONEDNN, "fp32",
                                  PROFILE_FULL};
    return profile_kernel_rate(p, &k);
}

static void test_kernel_rate(void **state)
{
    ra_profile p;
    memset(&p, 0, sizeof p);
    p.rate[0] = (profile_rate){64, 64, RA_SCORE_DOT, RA_GEMM_ONEDNN, "fp32",
                               PROFILE_FULL, 100};
    p.rate[1] = (profile_rate){128, 128, RA_SCORE_DOT, RA_GEMM_ONEDNN, "fp32",
                               PROFILE_FULL, 200};
    p.rate[2] = (profile_rate){32, 32, RA_SCORE_GAUSSIAN, RA_GEMM_ONEDNN,
                               "fp32", PROFILE_FULL, 300};
    p.rate[3] = (profile_rate){256, 256, RA_SCORE_GAUSSIAN, RA_GEMM_ONEDNN,
                               "fp32", PROFILE_FULL, 0}; /* unmeasured */
    p.nrates = 4;
    /* the entry of that shape */
    assert_true(rate_of(&p, 128, RA_SCORE_DOT) == 200);
    /* else the nearest D of the same score */
    assert_true(rate_of(&p, 80, RA_SCORE_DOT) == 100);
    assert_true(rate_of(&p, 100, RA_SCORE_DOT) == 200);
    assert_true(rate_of(&p, 256, RA_SCORE_GAUSSIAN) == 300);
    /* else the dot's nearest */
    assert_true(rate_of(&p, 120, RA_SCORE_ADDITIVE) == 200);
    p.nrates = 0;
    assert_true(rate_of(&p, 64, RA_SCORE_DOT) == 0);
}

/* Whether profile p can predict key k on 2 ranks of one node; the reason
 * into why. */
static int usable(const ra_profile *p, const profile_kernel_key *k,
                  char *why, size_t n)
{
    const profile_need need = {2, 1, *k, profile_kernel_rate(p, k), 0};
    return profile_usable(p, &need, why, n);
}

/* Rates are kept apart by engine, precision and tile class: a run reads
 * the rate of its own, and a profile without it is refused by name (never
 * a stand-in from another engine, precision or class, never NaN). A
 * schema-2 rate, which recorded none of them, stands in for every engine
 * and class in fp32. */
static void test_kernel_classes(void **state)
{
    ra_profile p;
    char why[512];
    profile_default(&p);
    p.nrates = 0;
    for (int c = 0; c < PROFILE_CLASSES; c++)
        p.rate[p.nrates++] = (profile_rate){64, 64, RA_SCORE_DOT,
                                            RA_GEMM_ONEDNN, "fp32",
                                            (profile_class)c, 100.0 + c};
    profile_kernel_key k = {64, 64, RA_SCORE_DOT, RA_GEMM_ONEDNN, "fp32",
                            PROFILE_BAND};
    assert_true(profile_kernel_rate(&p, &k) == 102);
    k.cls = PROFILE_MASKED;
    assert_true(profile_kernel_rate(&p, &k) == 101);
    assert_int_equal(usable(&p, &k, why, sizeof why), 0);
    k.precision = "bf16";
    assert_true(profile_kernel_rate(&p, &k) == 0);
    assert_int_equal(usable(&p, &k, why, sizeof why), -1);
    assert_non_null(strstr(why, "on the onednn engine in bf16 on masked "
                                "tiles"));
    k.precision = "fp32";
    k.gemm = RA_GEMM_OPENBLAS;
    assert_int_equal(usable(&p, &k, why, sizeof why), -1);
    assert_non_null(strstr(why, "on the openblas engine in fp32"));
    p.nrates = 1; /* full tiles only: a windowed run has no rate */
    k = (profile_kernel_key){64, 64, RA_SCORE_DOT, RA_GEMM_ONEDNN, "fp32",
                             PROFILE_BAND};
    assert_int_equal(usable(&p, &k, why, sizeof why), -1);
    assert_non_null(strstr(why, "on band tiles"));
    p.rate[0].gemm = RA_GEMM_AUTO; /* a schema-2 rate */
    p.rate[0].precision[0] = '\0';
    assert_true(profile_kernel_rate(&p, &k) == 100);
    k.gemm = RA_GEMM_OPENBLAS;
    assert_true(profile_kernel_rate(&p, &k) == 100);
    k.precision = "bf16";
    assert_true(profile_kernel_rate(&p, &k) == 0);
    /* a run's key: bf16 precision reads bf16 rates, but the additive
     * score's (its scores are not tile products) */
    ra_params rp;
    ra_params_default(&rp);
    rp.num.precision = RA_PRECISION_BF16;
    rp.num.causal = 1;
    k = profile_key_of(&rp, 64, 32);
    assert_string_equal(k.precision, "bf16");
    assert_int_equal(k.cls, PROFILE_MASKED);
    assert_true(k.D == 64 && k.Dv == 32);
    rp.num.score = RA_SCORE_ADDITIVE;
    assert_string_equal(profile_key_of(&rp, 64, 32).precision, "fp32");
    rp.num.precision = RA_PRECISION_FP32;
    rp.num.score = RA_SCORE_DOT;
    assert_string_equal(profile_key_of(&rp, 64, 32).precision, "fp32");
    /* the built-in profile predicts bf16 runs on each engine and class */
    profile_default(&p);
    for (int e = 0; e < 2; e++)
        for (int c = 0; c < PROFILE_CLASSES; c++) {
            const profile_kernel_key b = {
                128, 128, RA_SCORE_DOT,
                e ? RA_GEMM_ONEDNN : RA_GEMM_OPENBLAS, "bf16",
                (profile_class)c};
            assert_true(profile_kernel_rate(&p, &b) > 0);
        }
}

/* The default profile as text, with one key's value replaced (or, with
 * value NULL, the key removed). */
static void edited(char *out, size_t n, const char *key, const char *value)
{
    char path[256];
    ra_profile p;
    profile_default(&p);
    path_of(path, "base.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(profile_write_json(f, &p), 0);
    fclose(f);
    f = fopen(path, "r");
    size_t len = fread(out, 1, n - 1, f);
    fclose(f);
    out[len] = '\0';
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    char *at = strstr(out, pattern);
    assert_non_null(at);
    char *v = at + strlen(pattern), *end = v;
    int depth = 0;
    while (*end && (depth > 0 || (*end != ',' && *end != '\n'))) {
        depth += (*end == '{' || *end == '[') - (*end == '}' || *end == ']');
        end++;
    }
    char rest[8192];
    snprintf(rest, sizeof rest, "%s", end + (value ? 0 : 1));
    if (value)
        snprintf(v, n - (size_t)(v - out), "%s%s", value, rest);
    else
        snprintf(at, n - (size_t)(at - out), "%s", rest);
}

/* The text is refused with a message that holds every word of want. */
static void refused(const char *name, const char *text, const char *want)
{
    char path[256], err[512];
    ra_profile p;
    write_file(name, text);
    path_of(path, name);
    assert_int_equal(profile_read_json(path, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_null(strchr(err, '\n'));
    if (!strstr(err, want))
        fail_msg("%s: '%s' does not say '%s'", name, err, want);
}

/* "oversubscribed" is read when given and may be absent (a profile
 * written before the key existed): then 0. */
static void test_oversubscribed(void **state)
{
    char text[8192], path[256], err[512];
    ra_profile p;
    const char *const values[] = {"true", NULL};
    for (int i = 0; i < 2; i++) {
        edited(text, sizeof text, "oversubscribed", values[i]);
        write_file("over.json", text);
        path_of(path, "over.json");
        memset(&p, 0x5a, sizeof p);
        if (profile_read_json(path, &p, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(p.oversubscribed, i == 0);
    }
    edited(text, sizeof text, "oversubscribed", "1");
    refused("over_int.json", text, "key 'oversubscribed': expected true or "
            "false");
}

static void test_refusals(void **state)
{
    char text[8192];
    edited(text, sizeof text, "io_read", "-1");
    refused("negative.json", text, "key 'io_read': -1 is not a rate");
    edited(text, sizeof text, "io_write", "1e999");
    refused("huge.json", text, "real number overflow near '1e999'");
    edited(text, sizeof text, "nodes", "99999999999999999999");
    refused("huge_int.json", text, "key 'nodes': 1e+20 is outside");
    edited(text, sizeof text, "nodes", "\"two\"");
    refused("type.json", text, "key 'nodes': expected a number, found a "
            "string");
    edited(text, sizeof text, "measured", "1");
    refused("bool.json", text, "key 'measured': expected true or false");
    edited(text, sizeof text, "threads", "1.5");
    refused("frac.json", text, "key 'threads': 1.5 is not an integer");
    edited(text, sizeof text, "threads", NULL);
    refused("missing.json", text, "key 'threads': missing");
    edited(text, sizeof text, "kernel", "[{\"D\": 64, \"Dv\": 64, \"score\": "
           "\"cosine\", \"flops_per_core\": 1}]");
    refused("score.json", text, "key 'kernel[0].score': unknown score "
            "'cosine'");
    edited(text, sizeof text, "intra", "{\"latency\": 1, \"speed\": 2}");
    refused("unknown.json", text, "key 'intra.speed': unknown key");
    edited(text, sizeof text, "inter", "{\"latency\": 1, \"latency\": 2}");
    refused("twice.json", text, "duplicate object key near '\"latency\"'");
    edited(text, sizeof text, "schema", "1");
    refused("schema.json", text, "key 'schema': 1 is outside [2, 3]");
    edited(text, sizeof text, "kernel", "[{\"D\": 64, \"Dv\": 64, \"score\": "
           "\"dot\", \"class\": \"diagonal\", \"flops_per_core\": 1}]");
    refused("class.json", text, "key 'kernel[0].class': unknown class "
            "'diagonal' (full, masked or band)");
    edited(text, sizeof text, "kernel", "[{\"D\": 64, \"Dv\": 64, \"score\": "
           "\"dot\", \"gemm\": \"auto\", \"flops_per_core\": 1}]");
    refused("gemm.json", text, "key 'kernel[0].gemm': unknown gemm 'auto'");
    edited(text, sizeof text, "kernel", "[{\"D\": 64, \"Dv\": 64, \"score\": "
           "\"dot\", \"precision\": \"fp16\", \"flops_per_core\": 1}]");
    refused("precision.json", text, "key 'kernel[0].precision': unknown "
            "precision 'fp16' (fp32 or bf16)");
    edited(text, sizeof text, "io_read", "01");
    refused("zero.json", text, "invalid token near '0'");
    edited(text, sizeof text, "hosts", "\"a\\qb\"");
    refused("escape.json", text, "invalid escape near");
    edited(text, sizeof text, "ranks_per_node", "8");
    refused("per_node.json", text, "ranks_per_node 8 is above ranks 2");
    edited(text, sizeof text, "io_read", "1");
    text[strlen(text) / 2] = '\0';
    refused("truncated.json", text, "truncated");
    refused("empty.json", "", "expected near end of file (truncated?)");
    refused("array.json", "[1, 2]", "expected an object, found an array");
    refused("trailing.json", "{} {}", "end of file expected");
    edited(text, sizeof text, "io_read", "1");
    strcat(text, "x");
    refused("after.json", text, "end of file expected near 'x'");
    char path[256], err[512];
    ra_profile p;
    refused("deep.json", "{\"intra\": {\"latency\": {\"a\": 1}}}",
            "key 'intra.latency': expected a number, found an object");
    path_of(path, "");
    assert_int_equal(profile_read_json(dir, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a directory)"));
    path_of(path, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(profile_read_json(path, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    path_of(path, "absent.json");
    assert_int_equal(profile_read_json(path, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "No such file or directory"));
}

/* Any byte cut or flipped: refused or read, never a crash (ASan and
 * valgrind builds check the memory side). */
static void test_damage(void **state)
{
    char text[8192], path[256], err[512];
    ra_profile p;
    edited(text, sizeof text, "io_read", "1");
    const size_t len = strlen(text);
    path_of(path, "damaged.json");
    srand((unsigned)time(NULL));
    for (int trial = 0; trial < 300; trial++) {
        char copy[8192];
        memcpy(copy, text, len + 1);
        copy[rand() % len] = (char)(rand() % 256);
        FILE *f = fopen(path, "w");
        fwrite(copy, 1, trial % 3 ? len : (size_t)(rand() % len), f);
        fclose(f);
        err[0] = 'x';
        const int rc = profile_read_json(path, &p, err, sizeof err);
        assert_true(rc == 0 || (rc == -1 && strstr(err, path)));
    }
}

static int setup(void **state)
{
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_kernel_rate),
        cmocka_unit_test(test_kernel_classes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_oversubscribed),
        cmocka_unit_test(test_damage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
