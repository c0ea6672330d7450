/* test_h5api_mpi.c: the file functions of the public API as a user meets
 * them: the MPI-IO tuning travels with each call and nothing of it stays
 * in the process, and one dtype vocabulary (issue 24, item 1).
 *
 * The tuning's alignment is visible in the file: a dataset of 64 KiB or
 * more starts at a multiple of it. ra_h5_gen with a 1 MiB alignment puts
 * /q at a multiple of 1 MiB; the next ra_h5_gen without a tuning must
 * not (before, ra_h5_tuning_set kept it for every later call). A bad
 * tuning is refused with RA_ERR_ARG by the call that receives it, and
 * leaves no file. Types have one vocabulary (ra_dtype_parse: fp32, fp16,
 * bf16, fp64; the earlier f32, f16, f64 still read), and ra_h5_gen takes
 * one of them: fp16 writes 16-bit floats, bf16 is refused.
 * ra_h5_read_inputs reads the rows each rank gives it (a balanced slice
 * here), and refuses on every rank rows that one rank got wrong.
 * Run at P = 1..4; verdicts are reduced over
 * MPI_COMM_WORLD before cmocka asserts; rank 0 prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>

#include "support.h"

static int rank, nranks;

/* /q is 1 * 300 * 4 * 64 floats = 300 KiB, above the 64 KiB threshold of
 * the alignment */
static const ra_shape shape = {.B = 1, .N = 300, .M = 300, .H = 4, .G = 2,
                               .D = 64, .Dv = 64};

enum { ALIGN = 1 << 20 };

/* A file name in the working directory, the same on every rank. */
static void scratch_name(const char *tag, char *name, size_t len)
{
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(name, len, "h5api_%d_%s.h5", pid, tag);
}

/* Where path's dataset name starts in the file (-1: nowhere, not
 * contiguous or unreadable) and the byte size of its floats (-1: not
 * floats), read by rank 0 and broadcast. */
typedef struct {
    long long offset, size;
} dataset_facts;

static dataset_facts dataset_of(const char *path, const char *name)
{
    dataset_facts x = {-1, -1};
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
        hid_t t = d >= 0 ? H5Dget_type(d) : -1;
        const haddr_t a = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
        x.offset = a == HADDR_UNDEF ? -1 : (long long)a;
        if (t >= 0 && H5Tget_class(t) == H5T_FLOAT)
            x.size = (long long)H5Tget_size(t);
        if (t >= 0)
            H5Tclose(t);
        if (d >= 0)
            H5Dclose(d);
        if (f >= 0)
            H5Fclose(f);
    }
    MPI_Bcast(&x, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    return x;
}

/* 1 on every rank when ok holds on every rank. */
static int all_ranks(int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static void test_tuning_per_call(void **state)
{
    (void)state;
    char tuned[64], plain[64];
    scratch_name("tuned", tuned, sizeof tuned);
    scratch_name("plain", plain, sizeof plain);
    const ra_h5_tuning t = {ALIGN, 0, NULL};
    const ra_status st1 = ra_h5_gen(MPI_COMM_WORLD, tuned, 1, &shape, RA_DTYPE_F32, 7,
                                    &t);
    const ra_status st2 = ra_h5_gen(MPI_COMM_WORLD, plain, 1, &shape, RA_DTYPE_F32, 7,
                                    NULL);
    const long long a = dataset_of(tuned, "/q").offset;
    const long long b = dataset_of(plain, "/q").offset;
    /* the tuned read sees the same shape as an untuned one */
    ra_shape s = {0};
    const ra_h5_source src = {.axes = RA_AXES_BNHD, .tuning = &t};
    const ra_status st3 = ra_h5_read_shape(MPI_COMM_WORLD, tuned, &src, &s,
                                           NULL);
    const int ok = all_ranks(st1 == RA_OK && st2 == RA_OK && st3 == RA_OK &&
                             s.N == shape.N && a > 0 && a % ALIGN == 0 &&
                             b > 0 && b % ALIGN != 0);
    if (rank == 0) {
        printf("# P=%d /q at %lld with align %d, at %lld without  %s\n",
               nranks, a, ALIGN, b, ok ? "PASS" : "FAIL");
        unlink(tuned);
        unlink(plain);
    }
    assert_true(ok);
}

/* ra_h5_read_inputs reads the rows it is given: this rank's balanced
 * slice (causal window) holds the same values as the same positions of a
 * whole read; rows that are not increasing runs inside the axis are
 * refused with RA_ERR_ARG, naming the file, on every rank. */
static void test_read_rows(void **state)
{
    (void)state;
    char path[64];
    scratch_name("rows", path, sizeof path);
    const ra_status gen = ra_h5_gen(MPI_COMM_WORLD, path, 1, &shape,
                                    RA_DTYPE_F32, 11, NULL);
    ra_numerics num;
    ra_numerics_default(&num);
    num.causal = num.window = 1;
    num.window_left = 90;
    const ra_slice mine[2] = {
        ra_layout_slice(RA_LAYOUT_BALANCED, &num, shape.N, rank, nranks),
        ra_layout_slice(RA_LAYOUT_BALANCED, &num, shape.M, rank, nranks)};
    const ra_slice all[2] = {{1, {{0, shape.N, 1}}, shape.N},
                             {1, {{0, shape.M, 1}}, shape.M}};
    const int64_t qrow = shape.H * shape.D, krow = shape.G * shape.D;
    float *whole = malloc(sizeof(float) *
                          (size_t)(shape.N * qrow + 2 * shape.M * krow));
    float *part = malloc(sizeof(float) *
                         (size_t)(mine[0].count * qrow +
                                  2 * mine[1].count * krow + 1));
    const ra_h5_source src = {.axes = RA_AXES_BNHD};
    ra_status st = gen;
    if (st == RA_OK)
        st = ra_h5_read_inputs(MPI_COMM_WORLD, path, &src, &shape, all, whole,
                               whole + shape.N * qrow,
                               whole + shape.N * qrow + shape.M * krow);
    if (st == RA_OK)
        st = ra_h5_read_inputs(MPI_COMM_WORLD, path, &src, &shape, mine, part,
                               part + mine[0].count * qrow,
                               part + mine[0].count * qrow +
                                   mine[1].count * krow);
    int same = st == RA_OK;
    for (int64_t t = 0; same && t < mine[0].count; t++)
        same = memcmp(part + t * qrow,
                      whole + ra_slice_pos(&mine[0], t) * qrow,
                      sizeof(float) * (size_t)qrow) == 0;
    ra_slice bad[2] = {mine[0], mine[1]};
    if (rank == nranks - 1) { /* one rank's query rows past the end */
        bad[0] = (ra_slice){1, {{shape.N, 1, 1}}, 1};
    }
    const ra_status refused = ra_h5_read_inputs(MPI_COMM_WORLD, path, &src,
                                                &shape, bad, part, part,
                                                part);
    /* every rank refuses; the one with the bad rows names them */
    const int named = refused == RA_ERR_ARG &&
                      (rank != nranks - 1 ||
                       strstr(ra_error_message(), path) != NULL);
    const int ok = all_ranks(same && named);
    if (rank == 0) {
        printf("# P=%d balanced rows read as in the whole file: %s; one "
               "rank's rows past the end refused on all: %s  %s\n", nranks,
               same ? "yes" : "no", ok ? "yes" : "no", ok ? "PASS" : "FAIL");
        unlink(path);
    }
    free(whole);
    free(part);
    assert_true(ok);
}

static void test_tuning_refused(void **state)
{
    (void)state;
    char path[64], bad[64];
    scratch_name("in", path, sizeof path);
    scratch_name("bad", bad, sizeof bad);
    const ra_status made = ra_h5_gen(MPI_COMM_WORLD, path, 1, &shape, RA_DTYPE_F32, 7,
                                     NULL);
    const char *hints[] = {"cb_nodes"};
    const ra_h5_tuning no_value = {0, 1, hints};
    const ra_h5_source src = {.axes = RA_AXES_BNHD, .tuning = &no_value};
    ra_shape s;
    const ra_status read = ra_h5_read_shape(MPI_COMM_WORLD, path, &src, &s,
                                            NULL);
    const int read_named = strstr(ra_error_message(), "'cb_nodes' is not "
                                  "key=value") != NULL;
    const ra_h5_tuning negative = {-4096, 0, NULL};
    const ra_status gen = ra_h5_gen(MPI_COMM_WORLD, bad, 1, &shape, RA_DTYPE_F32, 7,
                                    &negative);
    const int gen_named = strstr(ra_error_message(), "alignment -4096 is "
                                 "negative") != NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    const int left = access(bad, F_OK) == 0;
    const int ok = all_ranks(made == RA_OK && read == RA_ERR_ARG &&
                             read_named && gen == RA_ERR_ARG && gen_named &&
                             !left);
    if (rank == 0) {
        printf("# P=%d a bad tuning refused by the read (%s) and the write "
               "(%s), nothing left  %s\n", nranks, ra_status_str(read),
               ra_status_str(gen), ok ? "PASS" : "FAIL");
        unlink(path);
    }
    assert_true(ok);
}

static void test_dtype_vocabulary(void **state)
{
    (void)state;
    int names = 1;
    for (int d = RA_DTYPE_F32; d <= RA_DTYPE_F64; d++) {
        ra_dtype back = (ra_dtype)-1;
        names &= ra_dtype_parse(ra_dtype_name((ra_dtype)d), &back) ==
                     RA_OK && back == (ra_dtype)d;
    }
    /* the names before the one vocabulary, which older outputs record */
    const char *old[] = {"f32", "f16", "bf16", "f64"};
    for (int d = RA_DTYPE_F32; d <= RA_DTYPE_F64; d++) {
        ra_dtype back = (ra_dtype)-1;
        names &= ra_dtype_parse(old[d], &back) == RA_OK &&
                 back == (ra_dtype)d;
    }
    ra_dtype kept = RA_DTYPE_F64;
    names &= ra_dtype_parse("float32", &kept) == RA_ERR_ARG &&
             kept == RA_DTYPE_F64 &&
             strstr(ra_error_message(), "expected fp32, fp16, bf16 or fp64");
    char half[64], bf[64];
    scratch_name("f16", half, sizeof half);
    scratch_name("bf16", bf, sizeof bf);
    const ra_status st16 = ra_h5_gen(MPI_COMM_WORLD, half, 1, &shape,
                                     RA_DTYPE_F16, 7, NULL);
    const long long bytes = dataset_of(half, "/q").size;
    const ra_status stbf = ra_h5_gen(MPI_COMM_WORLD, bf, 1, &shape,
                                     RA_DTYPE_BF16, 7, NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    const int ok = all_ranks(names && st16 == RA_OK && bytes == 2 &&
                             stbf == RA_ERR_ARG && access(bf, F_OK) != 0);
    if (rank == 0) {
        printf("# P=%d dtype names round trip, f16 file of %lld-byte floats, "
               "bf16 %s  %s\n", nranks, bytes, ra_status_str(stbf),
               ok ? "PASS" : "FAIL");
        unlink(half);
    }
    assert_true(ok);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tuning_per_call),
        cmocka_unit_test(test_tuning_refused),
        cmocka_unit_test(test_dtype_vocabulary),
        cmocka_unit_test(test_read_rows),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
