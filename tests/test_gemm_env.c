/* test_gemm_env.c: RINGATTN_GEMM, the engine a call's RA_GEMM_AUTO stands
 * for (comm/gemm_env.h). Unset, empty or auto: the build's engine (oneDNN
 * when built with it); openblas always and onednn when built: that
 * engine; an explicit engine wins over the variable; any other value, and
 * onednn in a build without it, refused with RA_ERR_ARG naming the
 * variable and the value. The process reads the variable once: a later
 * setenv changes nothing (ringattn.h, ra_gemm). Runs in both CI builds
 * (with and without oneDNN); restores the variable it found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm.h"
#include "gemm_env.h"
#include "ringattn.h"

/* The engine under RINGATTN_GEMM=value (NULL: unset). */
static ra_status env_pick(const char *value, ra_gemm *out)
{
    return ra_gemm_env_parse(value, out);
}

/* The first look reads the variable; setenv and unsetenv after it change
 * nothing, for ra_gemm_env and for the calls (ra_gemm_pick). First of the
 * tests: nothing before it has looked. */
static void test_env_read_once(void **state)
{
    (void)state;
    ra_gemm g;
    assert_int_equal(setenv(RA_GEMM_ENV, "openblas", 1), 0);
    assert_int_equal(ra_gemm_env(&g), RA_OK);
    assert_int_equal(g, RA_GEMM_OPENBLAS);
    const char *later[] = {"bogus", "auto", NULL};
    for (size_t i = 0; i < sizeof later / sizeof *later; i++) {
        if (later[i])
            assert_int_equal(setenv(RA_GEMM_ENV, later[i], 1), 0);
        else
            assert_int_equal(unsetenv(RA_GEMM_ENV), 0);
        assert_int_equal(ra_gemm_env(&g), RA_OK);
        assert_int_equal(g, RA_GEMM_OPENBLAS);
        assert_int_equal(ra_gemm_pick(RA_GEMM_AUTO), RA_GEMM_OPENBLAS);
    }
}

static void test_env_engines(void **state)
{
    (void)state;
    const int onednn = ra_gemm_available(RA_GEMM_ONEDNN);
    const ra_gemm built = onednn ? RA_GEMM_ONEDNN : RA_GEMM_OPENBLAS;
    const char *unset_auto[] = {NULL, "", "auto"};
    ra_gemm g;
    for (size_t i = 0; i < sizeof unset_auto / sizeof *unset_auto; i++) {
        assert_int_equal(env_pick(unset_auto[i], &g), RA_OK);
        assert_int_equal(g, built);
    }
    assert_int_equal(env_pick("openblas", &g), RA_OK);
    assert_int_equal(g, RA_GEMM_OPENBLAS);
    /* the caller's engine wins over the variable */
    assert_int_equal(ra_gemm_pick(RA_GEMM_ONEDNN), RA_GEMM_ONEDNN);
    assert_int_equal(env_pick("onednn", &g), onednn ? RA_OK : RA_ERR_ARG);
    assert_int_equal(g, built);
    assert_int_equal(ra_gemm_pick(RA_GEMM_OPENBLAS), RA_GEMM_OPENBLAS);
    if (!onednn)
        assert_non_null(strstr(ra_error_message(), "RINGATTN_GEMM=onednn"));
}

static void test_env_refused(void **state)
{
    (void)state;
    const char *bad[] = {"blas", "OpenBLAS ", "mkl", "1", " auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ra_gemm g;
        char want[64];
        assert_int_equal(env_pick(bad[i], &g), RA_ERR_ARG);
        assert_int_equal(g, ra_gemm_resolve(RA_GEMM_AUTO));
        snprintf(want, sizeof want, "RINGATTN_GEMM=%s: ", bad[i]);
        assert_non_null(strstr(ra_error_message(), want));
    }
}

int main(void)
{
    const char *found = getenv(RA_GEMM_ENV);
    char *saved = found ? strdup(found) : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_read_once),
        cmocka_unit_test(test_env_engines),
        cmocka_unit_test(test_env_refused),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (saved)
        setenv(RA_GEMM_ENV, saved, 1);
    free(saved);
    return failed ? 1 : 0;
}
