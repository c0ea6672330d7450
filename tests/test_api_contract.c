/* test_api_contract.c: the library's own contract for the functions of
 * ringattn.h that need no communicator (issue 39). Every one of them,
 * given NULLs, out-of-range enums, impossible ranks or sizes that
 * overflow, returns an error status or an empty / zero result and
 * touches nothing, as the header says; a window of INT64_MAX keys on
 * either side is the same as no window. Run under ASan and UBSan in CI,
 * which turn any crash or overflow into a failure.
 *   class 15: NULL arguments (test_class15_*)
 *   class 17: nranks 0, a rank beyond nranks (test_class17_*)
 *   class 19: window bounds of INT64_MAX (test_class19_*) */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ringattn.h"

static const ra_layout layouts[] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                    RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
enum { NLAYOUTS = sizeof layouts / sizeof *layouts };

static int slice_empty(ra_slice s)
{
    return s.nruns == 0 && s.count == 0;
}

/* issue 39, class 15: NULL shapes, outputs and structs. */
static void test_class15_shape_and_options(void **state)
{
    (void)state;
    assert_int_equal(ra_shape_check(NULL), RA_ERR_ARG);
    assert_non_null(strstr(ra_error_message(), "shape"));
    const ra_shape bad_dk = {1, 4, 4, 2, 2, 8, 8, -1};
    assert_int_equal(ra_shape_check(&bad_dk), RA_ERR_ARG);
    const ra_shape huge_dk = {1, 4, 4, 2, 2, 8, 8, INT64_MAX / 2};
    assert_int_equal(ra_shape_check(&huge_dk), RA_ERR_ARG);

    assert_true(ra_forward_flops(NULL, NULL, NULL) == 0.0);
    assert_true(ra_backward_flops(NULL, NULL, NULL) == 0.0);
    const ra_shape zero_b = {0, 4, 4, 2, 2, 8, 8, 0};
    assert_true(ra_forward_flops(&zero_b, NULL, NULL) == 0.0);
    const ra_shape s = {2, 5, 7, 2, 1, 4, 3, 0};
    assert_true(ra_forward_flops(&s, NULL, NULL) ==
                2.0 * (4 + 3) * 2 * 2 * 5 * 7);

    assert_true(isnan(ra_numerics_scale(NULL, NULL)));
    assert_true(ra_numerics_scale(NULL, &s) == 0.5);
    int64_t bq = -1, bkv = -1;
    ra_exec_tiles(NULL, NULL, &s, NULL, NULL);
    ra_exec_tiles(NULL, NULL, NULL, &bq, &bkv);
    assert_true(bq == 0 && bkv == 0);
    ra_exec_tiles(NULL, NULL, &s, &bq, NULL);
    assert_true(bq > 0);
    ra_numerics_default(NULL);
    ra_exec_default(NULL);
    ra_h5_masks_free(NULL);
}

/* issue 39, class 15: the parsers with NULL names or outputs, and the
 * names of values outside the enums. */
static void test_class15_parse(void **state)
{
    (void)state;
    ra_layout lay = RA_LAYOUT_ZIGZAG;
    assert_int_equal(ra_layout_parse(NULL, &lay), RA_ERR_ARG);
    assert_int_equal(lay, RA_LAYOUT_ZIGZAG);
    assert_non_null(strstr(ra_error_message(), "layout"));
    assert_int_equal(ra_layout_parse("zigzag", NULL), RA_ERR_ARG);
    ra_strategy st;
    ra_score sc;
    ra_rope ro;
    ra_gemm ge;
    ra_precision pr;
    ra_wire wi;
    ra_dtype dt;
    assert_int_equal(ra_strategy_parse(NULL, &st), RA_ERR_ARG);
    assert_int_equal(ra_score_parse(NULL, &sc), RA_ERR_ARG);
    assert_int_equal(ra_rope_parse(NULL, &ro), RA_ERR_ARG);
    assert_int_equal(ra_gemm_parse(NULL, &ge), RA_ERR_ARG);
    assert_int_equal(ra_precision_parse(NULL, &pr), RA_ERR_ARG);
    assert_int_equal(ra_wire_parse(NULL, &wi), RA_ERR_ARG);
    assert_int_equal(ra_dtype_parse(NULL, &dt), RA_ERR_ARG);
    assert_int_equal(ra_strategy_parse("ring", NULL), RA_ERR_ARG);
    assert_int_equal(ra_dtype_parse("f32", NULL), RA_ERR_ARG);
    assert_string_equal(ra_layout_name((ra_layout)17), "unknown");
    assert_string_equal(ra_score_name((ra_score)99), "unknown");
    assert_string_equal(ra_strategy_name((ra_strategy)-1), "unknown");
    assert_string_equal(ra_axes_name((ra_axes)9), "none");
    assert_string_equal(ra_status_str((ra_status)99), "unknown status");
    assert_int_equal(ra_gemm_available((ra_gemm)99), 0);
    assert_int_equal(ra_gemm_available((ra_gemm)-1), 0);
}

/* issue 39, class 15: RoPE and ALiBi on NULL or impossible arguments do
 * nothing; on valid ones they still work. */
static void test_class15_posenc(void **state)
{
    (void)state;
    float x[16], y[16];
    for (int i = 0; i < 16; i++)
        x[i] = y[i] = (float)i - 7.5f;
    const int64_t pos[2] = {3, 9};
    ra_rope_rows r = {RA_ROPE_HALF, RA_ROPE_BASE_DEFAULT, 1, 2, 2, 4, NULL,
                      0};
    ra_rope_apply(NULL, x);
    ra_rope_apply(&r, x); /* pos NULL */
    r.pos = pos;
    ra_rope_apply(&r, NULL);
    const ra_rope_rows bad[] = {
        {(ra_rope)7, 10000.0, 1, 2, 2, 4, pos, 0},
        {RA_ROPE_HALF, -1.0, 1, 2, 2, 4, pos, 0},
        {RA_ROPE_HALF, NAN, 1, 2, 2, 4, pos, 0},
        {RA_ROPE_HALF, 10000.0, 1, 2, 2, 3, pos, 0},
        {RA_ROPE_HALF, 10000.0, -1, 2, 2, 4, pos, 0},
        {RA_ROPE_HALF, 10000.0, INT64_MAX, INT64_MAX, 2, 4, pos, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ra_rope_apply(&bad[i], x);
    assert_memory_equal(x, y, sizeof x);
    ra_rope_apply(&r, x); /* a valid call still rotates */
    assert_true(memcmp(x, y, sizeof x) != 0);

    double slopes[4] = {-1, -1, -1, -1};
    ra_alibi_slopes(0, slopes);
    ra_alibi_slopes(-5, slopes);
    ra_alibi_slopes(4, NULL);
    assert_true(slopes[0] == -1 && slopes[3] == -1);
    ra_alibi_slopes(4, slopes);
    assert_true(slopes[0] == 0.25 && slopes[3] == pow(2.0, -8.0));
}

/* issue 39, class 17: no rank of nranks <= 0, a rank outside [0, nranks)
 * or a negative length holds nothing, under every layout; a resolved
 * layout is required. */
static void test_class17_ranks(void **state)
{
    (void)state;
    const ra_range none = ra_shard_range(10, 0, 0);
    assert_true(none.start == 0 && none.count == 0);
    const ra_range beyond = ra_shard_range(10, 3, 2);
    assert_true(beyond.count == 0);
    assert_true(ra_shard_range(10, -1, 2).count == 0);
    assert_true(ra_shard_range(-10, 0, 2).count == 0);
    assert_true(ra_shard_range(10, 1, 2).count == 5);
    const int64_t heads[1] = {0};
    ra_attn_map map = {0, 10, heads, 1, NULL};
    for (int l = 0; l < NLAYOUTS; l++) {
        const ra_layout lay = layouts[l];
        assert_true(slice_empty(ra_layout_slice(lay, NULL, 10, 0, 0)));
        assert_true(slice_empty(ra_layout_slice(lay, NULL, 10, 0, -3)));
        assert_true(slice_empty(ra_layout_slice(lay, NULL, 10, 2, 2)));
        assert_true(slice_empty(ra_layout_slice(lay, NULL, 10, -1, 2)));
        assert_true(slice_empty(ra_layout_slice(lay, NULL, -1, 0, 2)));
        assert_true(ra_layout_slice(lay, NULL, 10, 1, 2).count == 5);
        assert_true(ra_attn_map_rows(lay, NULL, 10, 0, 0, &map).count == 0);
        assert_true(ra_attn_map_rows(lay, NULL, 10, 5, 2, &map).count == 0);
        assert_true(ra_attn_map_rows(lay, NULL, 10, 0, 2, NULL).count == 0);
        assert_true(ra_attn_map_rows(lay, NULL, 10, 0, 2, &map).count == 5);
    }
    /* zigzag cuts 2P chunks: no overflow at the largest P */
    const ra_slice z = ra_layout_slice(RA_LAYOUT_ZIGZAG, NULL, 10,
                                       INT_MAX - 1, INT_MAX);
    assert_true(z.count <= 1);
    assert_true(slice_empty(ra_layout_slice(RA_LAYOUT_AUTO, NULL, 10, 0, 2)));
    assert_true(slice_empty(ra_layout_slice((ra_layout)17, NULL, 10, 0, 2)));
}

/* issue 39, class 15 and 17: ra_slice_clip on NULL, on slices that no
 * layout makes (strides < 1, more than two runs, positions beyond
 * int64) and on empty ranges. */
static void test_class17_clip(void **state)
{
    (void)state;
    assert_true(slice_empty(ra_slice_clip(NULL, 0, 10)));
    ra_slice bad = {1, {{0, 5, 0}, {0, 0, 0}}, 5};
    assert_true(slice_empty(ra_slice_clip(&bad, 0, 10)));
    bad = (ra_slice){3, {{0, 5, 1}, {5, 5, 1}}, 10};
    assert_true(slice_empty(ra_slice_clip(&bad, 0, 10)));
    bad = (ra_slice){1, {{INT64_MAX - 2, 5, INT64_MAX / 2}, {0, 0, 0}}, 5};
    assert_true(slice_empty(ra_slice_clip(&bad, 0, INT64_MAX)));
    const ra_slice ok = ra_layout_slice(RA_LAYOUT_STRIPED, NULL, 10, 1, 3);
    assert_true(slice_empty(ra_slice_clip(&ok, 5, 5)));
    assert_true(slice_empty(ra_slice_clip(&ok, 6, 2)));
    assert_true(slice_empty(ra_slice_clip(&ok, -4, 0)));
    const ra_slice c = ra_slice_clip(&ok, 2, INT64_MAX);
    assert_true(c.count == 2 && c.run[0].start == 2); /* 4 and 7, from 2 */
}

/* issue 39, class 19: window bounds of INT64_MAX (or anything beyond
 * every key) give the tiles, cuts and counts of no window at all, with
 * no overflow on the way. */
static void test_class19_window_max(void **state)
{
    (void)state;
    const ra_shape s = {2, 37, 53, 2, 2, 8, 8, 0};
    ra_numerics none, wide, half;
    ra_numerics_default(&none);
    none.causal = 1;
    wide = half = none;
    wide.window = half.window = 1;
    wide.window_left = wide.window_right = INT64_MAX;
    half.window_left = INT64_MAX;
    half.window_right = 0;
    assert_true(ra_forward_flops(&s, &wide, NULL) ==
                ra_forward_flops(&s, &none, NULL));
    assert_true(ra_forward_flops(&s, &half, NULL) ==
                ra_forward_flops(&s, &none, NULL));
    none.causal = wide.causal = 0;
    assert_true(ra_forward_flops(&s, &wide, NULL) ==
                ra_forward_flops(&s, &none, NULL));
    int64_t bq, bkv, bq0, bkv0;
    ra_exec_tiles(&wide, NULL, &s, &bq, &bkv);
    ra_exec_tiles(&none, NULL, &s, &bq0, &bkv0);
    assert_true(bq == bq0 && bkv == bkv0);
    for (int P = 1; P <= 5; P++)
        for (int r = 0; r < P; r++) {
            const ra_slice a = ra_layout_slice(RA_LAYOUT_BALANCED, &wide,
                                               s.N, r, P);
            const ra_slice b = ra_layout_slice(RA_LAYOUT_BALANCED, &none,
                                               s.N, r, P);
            assert_memory_equal(&a, &b, sizeof a);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class15_shape_and_options),
        cmocka_unit_test(test_class15_parse),
        cmocka_unit_test(test_class15_posenc),
        cmocka_unit_test(test_class17_ranks),
        cmocka_unit_test(test_class17_clip),
        cmocka_unit_test(test_class19_window_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
