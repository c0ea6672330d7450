/* fuzz_h5.c: libFuzzer harness for the validation of input and output
 * files. The input bytes are written to a temporary file, which then goes
 * through every reader of io/ on MPI_COMM_SELF: the shape, the masks, the
 * tensors with the non-finite scan (when small), the run attributes, the
 * output shape and the listing of `ringattn info`. A reader may refuse the
 * file (any status); it must not crash, leak handles or read out of
 * bounds (AddressSanitizer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "h5io.h"
#include "ringattn.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static FILE *devnull;

static void finish(void)
{
    unlink(path);
    MPI_Finalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    snprintf(path, sizeof path, "/tmp/ra_fuzz_h5.%ld.h5", (long)getpid());
    devnull = fopen("/dev/null", "w");
    atexit(finish);
    return 0;
}

/* The corpora's files (most without an axes attribute) read as tokens
 * first, so that the readers past the order check stay fuzzed. */
static const ra_h5_source source = {.axes = RA_AXES_BNHD};

/* The tensors of a small valid shape: read them and scan them. */
static void read_tensors(const ra_shape *s)
{
    const int64_t nq = s->B * s->N * s->H * s->D;
    const int64_t nk = s->B * s->M * s->G * s->D;
    const int64_t nv = s->B * s->M * s->G * s->Dv;
    if (nq + nk + nv > (1 << 20))
        return;
    float *mem = malloc(sizeof(float) * (size_t)(nq + nk + nv));
    if (!mem)
        return;
    const ra_slice rows[2] = {
        ra_layout_slice(RA_LAYOUT_CONTIGUOUS, NULL, s->N, 0, 1),
        ra_layout_slice(RA_LAYOUT_CONTIGUOUS, NULL, s->M, 0, 1)};
    if (ra_h5_read_inputs(MPI_COMM_SELF, path, &source, s, rows, mem,
                          mem + nq, mem + nq + nk) == RA_OK) {
        const h5io_inputs in = {NULL, s, RA_LAYOUT_CONTIGUOUS,
                                ra_cut_band(NULL), mem, mem + nq,
                                mem + nq + nk};
        h5io_nonfinite bad;
        h5io_scan_nonfinite(MPI_COMM_SELF, path, &in, &bad);
    }
    free(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);

    ra_shape s;
    if (ra_h5_read_shape(MPI_COMM_SELF, path, &source, &s, NULL) == RA_OK) {
        ra_numerics num; /* the balanced cut weighs a causal window */
        ra_numerics_default(&num);
        num.causal = num.window = 1;
        num.window_left = 3;
        for (int lay = 0; lay <= RA_LAYOUT_BALANCED; lay++) {
            ra_h5_masks masks;
            if (lay != RA_LAYOUT_AUTO &&
                ra_h5_read_masks(MPI_COMM_SELF, path, NULL, &s,
                                 (ra_layout)lay, &num, &masks) == RA_OK)
                ra_h5_masks_free(&masks);
        }
        read_tensors(&s);
        const char *qn, *kvn;
        h5io_segment_names(path, &qn, &kvn);
    }
    h5io_run_attrs attrs;
    int64_t dims_o[4], dims_l[3];
    h5io_read_run_attrs(path, &attrs);
    h5io_read_out_shape(path, dims_o, dims_l);
    h5io_info(path, devnull);
    return 0;
}
