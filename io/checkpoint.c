/* checkpoint.c: the checkpoint file of a run (checkpoint.h): every rank's
 * state parts written collectively into a file committed atomically
 * (h5io_commit), and read back by each rank with its counts and sums
 * checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "h5util.h"
#include "hash.h"
#include "internal.h"

/* Each rank's count and sum of every part: rows of /counts and /sums. */
typedef struct {
    int64_t count[RA_STATE_PARTS_MAX];
    uint64_t sum[RA_STATE_PARTS_MAX];
} part_rows;

typedef struct {
    const char *path;
    const h5io_ckpt_meta *meta;
    const ra_state *state;
    int rank, nranks;
} ckpt_writer;

/* The dataset name of part name: /state_NAME. */
static void part_name(const char *name, char *out, size_t len)
{
    snprintf(out, len, "/state_%s", name);
}

/* Part i of every rank, one after the other in rank order. */
static ra_status part_write(hid_t file, MPI_Comm comm, const ckpt_writer *w,
                            int i)
{
    const ra_state_part *pt = &w->state->part[i];
    int64_t off = 0, total = 0, n = pt->count;
    char name[64];
    if (MPI_Exscan(&n, &off, 1, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS ||
        MPI_Allreduce(&n, &total, 1, MPI_INT64_T, MPI_SUM, comm) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: summing the parts' counts "
                            "failed", w->path);
    if (w->rank == 0)
        off = 0; /* MPI_Exscan leaves rank 0's undefined */
    const hsize_t dims[1] = {(hsize_t)total};
    const ra_slice sl = h5io_slice_range((ra_range){off, n});
    const h5io_region rg = {H5T_NATIVE_FLOAT, 1, dims, 0, &sl};
    part_name(pt->name, name, sizeof name);
    return h5io_dset_write(comm, file, w->path, name, H5T_IEEE_F32LE, &rg,
                           pt->data);
}

/* /counts and /sums: this rank's row of each. */
static ra_status rows_write(hid_t file, MPI_Comm comm, const ckpt_writer *w)
{
    const ra_state *s = w->state;
    part_rows r = {{0}, {0}};
    for (int i = 0; i < s->nparts; i++) {
        r.count[i] = s->part[i].count;
        r.sum[i] = ra_hash64(s->part[i].data,
                             sizeof(float) * (size_t)s->part[i].count, 0);
    }
    const hsize_t dims[2] = {(hsize_t)w->nranks, (hsize_t)s->nparts};
    const ra_slice row = h5io_slice_range((ra_range){w->rank, 1});
    const h5io_region rc = {H5T_NATIVE_INT64, 2, dims, 0, &row};
    const h5io_region rs = {H5T_NATIVE_UINT64, 2, dims, 0, &row};
    ra_status st = h5io_dset_write(comm, file, w->path, "/counts",
                                   H5T_STD_I64LE, &rc, r.count);
    if (st == RA_OK)
        st = h5io_dset_write(comm, file, w->path, "/sums", H5T_STD_U64LE,
                             &rs, r.sum);
    return st;
}

static ra_status ckpt_fill(hid_t file, MPI_Comm comm, void *arg)
{
    const ckpt_writer *w = arg;
    const ra_state *s = w->state;
    ra_status st = rows_write(file, comm, w);
    for (int i = 0; st == RA_OK && i < s->nparts; i++)
        st = part_write(file, comm, w, i);
    const struct {
        const char *name;
        int64_t value;
    } ints[3] = {{"step", s->step}, {"steps", s->steps},
                 {"ranks", w->nranks}};
    for (int i = 0; st == RA_OK && i < 3; i++)
        st = h5io_attr_write_int64(comm, file, w->path, ints[i].name,
                                   ints[i].value);
    const char *texts[4][2] = {{"kind", "checkpoint"},
                               {"pass", s->pass},
                               {"key", w->meta->key},
                               {"fingerprint", w->meta->fingerprint}};
    for (int i = 0; st == RA_OK && i < 4; i++)
        st = h5io_attr_write_string(comm, file, w->path, texts[i][0],
                                    texts[i][1]);
    return st;
}

ra_status h5io_ckpt_write(MPI_Comm comm, const char *path,
                          const h5io_ckpt_meta *meta, const ra_state *state)
{
    ckpt_writer w = {path, meta, state, 0, 1};
    uint64_t bytes = 0;
    for (int i = 0; i < state->nparts; i++)
        bytes += sizeof(float) * (uint64_t)state->part[i].count;
    if (MPI_Comm_rank(comm, &w.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &w.nranks) != MPI_SUCCESS ||
        MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_UINT64_T, MPI_SUM, comm) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed",
                            path);
    const h5io_job job = {path, 1, bytes, ckpt_fill, &w, meta->tuning};
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    const ra_status st = h5io_commit(comm, &job);
    h5io_quiet_end(&quiet);
    return st;
}

/* An integer root attribute that a checkpoint must have. */
static ra_status head_int(hid_t file, const char *path, const char *name,
                          int64_t *out)
{
    const hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    const herr_t err = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_INT64, out);
    if (a >= 0)
        H5Aclose(a);
    return err < 0 ? ra_error_set(RA_ERR_INPUT, "%s: attribute %s: missing "
                                  "or unreadable: not a complete checkpoint",
                                  path, name)
                   : RA_OK;
}

/* A string root attribute that a checkpoint must have. */
static ra_status head_text(hid_t file, const char *path, const char *name,
                           char *out, size_t len)
{
    out[0] = '\0';
    const ra_status st = h5io_attr_read_string(file, path, name, out, len);
    if (st == RA_OK && !out[0])
        return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: missing: not a "
                            "complete checkpoint", path, name);
    return st;
}

ra_status h5io_ckpt_head_read(const char *path, h5io_ckpt_head *head)
{
    hid_t file = H5I_INVALID_HID;
    char kind[32] = "";
    h5io_quiet quiet;
    memset(head, 0, sizeof *head);
    h5io_quiet_begin(&quiet);
    ra_status st = h5io_file_open(path, H5P_DEFAULT, &file);
    if (st == RA_OK)
        st = h5io_attr_read_string(file, path, "kind", kind, sizeof kind);
    if (st == RA_OK && strcmp(kind, "checkpoint") != 0)
        st = ra_error_set(RA_ERR_INPUT, "%s: not a checkpoint (its kind is "
                          "'%s')", path, kind);
    if (st == RA_OK)
        st = head_text(file, path, "pass", head->pass, sizeof head->pass);
    if (st == RA_OK)
        st = head_text(file, path, "key", head->key, sizeof head->key);
    if (st == RA_OK)
        st = head_text(file, path, "fingerprint", head->fingerprint,
                       sizeof head->fingerprint);
    if (st == RA_OK)
        st = head_int(file, path, "step", &head->step);
    if (st == RA_OK)
        st = head_int(file, path, "steps", &head->steps);
    if (st == RA_OK)
        st = head_int(file, path, "ranks", &head->ranks);
    if (file >= 0)
        H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

/* A checkpoint open for reading on every rank: the file, the state to
 * fill, every rank's counts and sums (P, parts). */
typedef struct {
    MPI_Comm comm;
    const char *path;
    h5io_reader r;
    ra_state *state;
    int64_t *counts;
    uint64_t *sums;
    int rank, P;
} ckpt_reader;

/* Reads an integer dataset (P, parts) whole into out (P * parts values of
 * mtype). */
static ra_status rows_read(const ckpt_reader *k, const char *name,
                           hid_t mtype, void *out)
{
    const int P = k->P, parts = k->state->nparts;
    hsize_t dims[2];
    hid_t dset = H5I_INVALID_HID;
    ra_status st = h5io_dset_open(k->r.file, k->path, name, H5T_INTEGER, 2,
                                  dims, &dset);
    if (st == RA_OK && (dims[0] != (hsize_t)P || dims[1] != (hsize_t)parts))
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: (%llu, %llu), want "
                          "(%d ranks, %d parts)", k->path, name,
                          (unsigned long long)dims[0],
                          (unsigned long long)dims[1], P, parts);
    if (st == RA_OK &&
        H5Dread(dset, mtype, H5S_ALL, H5S_ALL, k->r.dxpl, out) < 0)
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: reading failed",
                          k->path, name);
    if (dset >= 0)
        H5Dclose(dset);
    return ra_agree(k->comm, st);
}

/* The pass of the file has as many steps as this run's (a hybrid's
 * groups, the ring plan's skipped steps), else RA_ERR_ARG naming both. */
static ra_status steps_check(const ckpt_reader *k)
{
    int64_t steps = 0;
    ra_status st = head_int(k->r.file, k->path, "steps", &steps);
    if (st == RA_OK && steps != k->state->steps)
        st = ra_error_set(RA_ERR_ARG, "%s: the checkpoint's pass has %lld "
                          "steps, this run's %d: made with other options",
                          k->path, (long long)steps, k->state->steps);
    return st;
}

/* Part i of this rank into its buffer: its count checked against
 * /counts, its values against /sums; agreed before and after the
 * collective read. */
static ra_status part_read(const ckpt_reader *k, int i)
{
    const ra_state_part *pt = &k->state->part[i];
    const int n = k->state->nparts;
    int64_t off = 0, total = 0;
    for (int p = 0; p < k->P; p++) {
        off += p < k->rank ? k->counts[p * n + i] : 0;
        total += k->counts[p * n + i];
    }
    char name[64];
    hsize_t dims[1];
    hid_t dset = H5I_INVALID_HID;
    part_name(pt->name, name, sizeof name);
    ra_status st = h5io_dset_open(k->r.file, k->path, name, H5T_FLOAT, 1,
                                  dims, &dset);
    if (st == RA_OK && (dims[0] != (hsize_t)total ||
                        k->counts[k->rank * n + i] != pt->count))
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: rank %d holds %lld "
                          "values, this run %lld", k->path, name, k->rank,
                          (long long)k->counts[k->rank * n + i],
                          (long long)pt->count);
    const ra_slice sl = h5io_slice_range((ra_range){off, pt->count});
    const h5io_region rg = {H5T_NATIVE_FLOAT, 1, dims, 0, &sl};
    if ((st = ra_agree(k->comm, st)) == RA_OK)
        st = h5io_dset_read(dset, k->r.dxpl, k->path, name, &rg, pt->data);
    if (st == RA_OK &&
        ra_hash64(pt->data, sizeof(float) * (size_t)pt->count, 0) !=
            k->sums[k->rank * n + i])
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: rank %d's values do "
                          "not match their recorded sum: the checkpoint is "
                          "corrupt", k->path, name, k->rank);
    if (dset >= 0)
        H5Dclose(dset);
    return ra_agree(k->comm, st);
}

ra_status h5io_ckpt_read(MPI_Comm comm, const char *path,
                         const ra_h5_tuning *tuning, ra_state *state)
{
    ckpt_reader k = {.comm = comm, .path = path, .state = state,
                     .r = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID}};
    h5io_quiet quiet;
    int64_t step = 0;
    if (MPI_Comm_rank(comm, &k.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &k.P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed",
                            path);
    const size_t cells = (size_t)(k.P * state->nparts + 1);
    k.counts = malloc(sizeof(int64_t) * cells);
    k.sums = malloc(sizeof(uint64_t) * cells);
    h5io_quiet_begin(&quiet);
    ra_status st = k.counts && k.sums ? RA_OK
                                      : ra_error_set(RA_ERR_NOMEM, "%s: out "
                                                     "of memory", path);
    st = ra_agree(comm, st);
    if (st == RA_OK) {
        st = ra_agree(comm, h5io_reader_open(comm, path, tuning, &k.r));
        if (st == RA_OK)
            st = ra_agree(comm, steps_check(&k));
        if (st == RA_OK)
            st = rows_read(&k, "/counts", H5T_NATIVE_INT64, k.counts);
        if (st == RA_OK)
            st = rows_read(&k, "/sums", H5T_NATIVE_UINT64, k.sums);
        for (int i = 0; st == RA_OK && i < state->nparts; i++)
            st = part_read(&k, i);
        if (st == RA_OK)
            st = ra_agree(comm, head_int(k.r.file, path, "step", &step));
        st = h5io_reader_close(&k.r, path, st);
    }
    h5io_quiet_end(&quiet);
    state->step = (int)step;
    free(k.counts);
    free(k.sums);
    return st;
}
