/* test_h5api_mpi.c: the file functions of the public API as a user meets
 * them: the MPI-IO tuning travels with each call and nothing of it stays
 * in the process, and one dtype vocabulary (issue 24, item 1).
 *
 * The tuning's alignment is visible in the file: a dataset of 64 KiB or
 * more starts at a multiple of it. ra_h5_gen with a 1 MiB alignment puts
 * /q at a multiple of 1 MiB; the next ra_h5_gen without a tuning must
 * not (before, ra_h5_tuning_set kept it for every later call). A bad
 * tuning is refused with RA_ERR_ARG by the call that receives it, and
 * leaves no file. Types have one vocabulary (ra_dtype_parse), and
 * ra_h5_gen takes one of them: f16 writes 16-bit floats, bf16 is refused.
 * Run at P = 1..4; verdicts are reduced over
 * MPI_COMM_WORLD before cmocka asserts; rank 0 prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
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
    ra_dtype kept = RA_DTYPE_F64;
    names &= ra_dtype_parse("float32", &kept) == RA_ERR_ARG &&
             kept == RA_DTYPE_F64 &&
             strstr(ra_error_message(), "expected f32, f16, bf16 or f64");
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
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
