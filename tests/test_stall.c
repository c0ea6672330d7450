/* test_stall.c: the stall timeout of a pass (issue 39, class 9;
 * launch/watchdog.c cli_stall_timeout, launch/driver.c cli_pass_basis).
 * A timeout given is used as it is, whatever its value (600, the library's
 * default, and 0 included); a derived one rests on the pass that runs:
 * the backward's is longer than the forward's of the same problem and
 * prediction, it grows with the predicted step, leaves a margin of several
 * times the step (a loaded machine), stays within the library's default,
 * and says what it came from. Random shapes, odd sizes, 1..4 ranks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver.h"
#include "watchdog.h"

/* A machine loaded this many times over must not end a healthy run. */
#define LOAD_SURVIVED 8.0

enum { TRIALS = 200 };

static uint64_t seed = 0x39c1a55;

static double uniform(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(seed >> 11) / 9007199254740992.0;
}

static int64_t between(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(uniform() * (double)(hi - lo + 1));
}

/* A random problem and options of the ring (or a strategy without steps
 * when stepless). */
static void random_problem(ra_shape *s, ra_params *p, int stepless)
{
    ra_params_default(p);
    const int64_t G = between(1, 3);
    *s = (ra_shape){.B = between(1, 3), .N = between(1, 5000) | 1,
                    .M = between(1, 5000) | 1, .H = G * between(1, 3),
                    .G = G, .D = between(1, 130), .Dv = between(1, 130)};
    p->num.causal = uniform() < 0.5;
    p->exec.strategy = stepless ? RA_STRATEGY_TREE : RA_STRATEGY_RING;
}

static void test_given_honoured(void **state)
{
    (void)state;
    const double given[] = {0.0, 1e-3, 1.0, 42.5, 600.0,
                            RA_STALL_TIMEOUT_DEFAULT, 1e9};
    const cli_stall_basis b = {"backward", 1e4, 2, NULL};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++) {
        char how[400];
        assert_true(cli_stall_timeout(given[i], &b, how, sizeof how) ==
                    given[i]);
        assert_non_null(strstr(how, "given"));
    }
}

static void test_backward_longer(void **state)
{
    (void)state;
    for (int t = 0; t < TRIALS; t++) {
        ra_shape s;
        ra_params p;
        random_problem(&s, &p, t % 5 == 4);
        const int P = (int)between(1, 4);
        const double fwd_s = 0.1 + 10.0 * uniform();
        const cli_stall_basis f = cli_pass_basis(&s, &p, P, fwd_s, 0, NULL);
        const cli_stall_basis b = cli_pass_basis(&s, &p, P, fwd_s, 1,
                                                 "slow.json");
        assert_true(b.seconds > f.seconds);
        assert_int_equal(f.beats, t % 5 == 4 ? 1 : P);
        assert_int_equal(b.beats, f.beats);
        char hf[400], hb[400];
        const double tf = cli_stall_timeout(NAN, &f, hf, sizeof hf);
        const double tb = cli_stall_timeout(NAN, &b, hb, sizeof hb);
        assert_true(tb >= tf);
        assert_non_null(strstr(hf, "forward"));
        assert_non_null(strstr(hb, "backward"));
        assert_non_null(strstr(hb, "slow.json"));
        assert_non_null(strstr(hf, "built-in profile"));
    }
}

/* Derived timeouts grow with the step, never below the step times
 * LOAD_SURVIVED below the cap, and never above the library's default. */
static void test_margin(void **state)
{
    (void)state;
    double last = 0.0;
    char how[400];
    for (double step = 1e-6; step < 1e4; step *= 1.37) {
        const cli_stall_basis b = {"forward", 3.0 * step, 3, NULL};
        const double t = cli_stall_timeout(NAN, &b, how, sizeof how);
        assert_true(t >= last);
        assert_true(t > 0.0 && t <= RA_STALL_TIMEOUT_DEFAULT);
        assert_true(t >= LOAD_SURVIVED * step ||
                    t == RA_STALL_TIMEOUT_DEFAULT);
        assert_non_null(strstr(how, "derived"));
        last = t;
    }
    assert_true(last == RA_STALL_TIMEOUT_DEFAULT);
    /* a pass without steps: one beat, its whole time the gap */
    const cli_stall_basis one = {"forward", 20.0, 0, NULL};
    const cli_stall_basis four = {"forward", 20.0, 4, NULL};
    assert_true(cli_stall_timeout(NAN, &one, how, sizeof how) >=
                cli_stall_timeout(NAN, &four, how, sizeof how));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_given_honoured),
        cmocka_unit_test(test_backward_longer),
        cmocka_unit_test(test_margin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
