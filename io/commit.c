/* commit.c: an HDF5 file written by every rank through MPI-IO, published
 * only when it is complete and read back: rank 0 stages it (atomic.c) and
 * reserves room for its data; every rank writes, flushes and closes it,
 * each step's status agreed; rank 0 reads it back (readback.c), then
 * renames it. MPI-IO has been seen to report success for writes that
 * failed (Open MPI's collective writer on 3 or more ranks, on a full file
 * system), so a status is not taken as proof that the bytes are there. */
#define _GNU_SOURCE /* fallocate */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

/* Rank 0, after a failed write: for an I/O error, adds to the message how
 * much room the file system has left (HDF5 reports a full disk only as
 * "file write failed"). */
static void note_room(const char *path, ra_status st)
{
    char dir[PATH_MAX], why[512];
    const char *base;
    struct statvfs fs;

    if (st == RA_ERR_IO &&
        h5io_path_split(path, dir, sizeof dir, &base) == RA_OK &&
        statvfs(dir, &fs) == 0) {
        snprintf(why, sizeof why, "%s", ra_error_message());
        ra_error_set(st, "%s (%llu KiB free in %s)", why,
                     (unsigned long long)fs.f_bavail * fs.f_frsize / 1024,
                     dir);
    }
}

/* Rank 0: reserves [0, bytes) of the open file fd (of the output path)
 * so that a full file system refuses a write before it goes out, rather
 * than losing part of it. fallocate(2), not posix_fallocate(3): where the
 * file system cannot reserve, the C library would write zeros over the
 * whole size instead, and the room the file takes is checked by
 * h5io_readback() alone. */
static ra_status reserve_fd(const char *path, int fd, uint64_t bytes)
{
    if (bytes == 0 || fallocate(fd, 0, 0, (off_t)bytes) == 0 ||
        errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
        return RA_OK;
    return ra_error_set(RA_ERR_IO, "%s: cannot reserve the %.1f MB the "
                        "output needs: %s", path, (double)bytes / 1e6,
                        strerror(errno));
}

/* The same on the file named tmp. */
static ra_status reserve_room(const char *path, const char *tmp,
                              uint64_t bytes)
{
    ra_status st;
    int fd;

    if (bytes == 0)
        return RA_OK;
    if ((fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return ra_error_set(RA_ERR_IO, "%s: cannot open temporary file %s: "
                            "%s", path, tmp, strerror(errno));
    st = reserve_fd(path, fd, bytes);
    close(fd);
    return st;
}

ra_status h5io_reserve_allocated(MPI_Comm comm, hid_t file, const char *path,
                                 uint64_t end)
{
    char tmp[PATH_MAX];
    ra_status st = RA_OK;
    int rank = 0;

    MPI_Comm_rank(comm, &rank);
    if (rank == 0 && H5Fget_name(file, tmp, sizeof tmp) <= 0)
        st = ra_error_set(RA_ERR_IO, "%s: the temporary file's name is "
                          "unknown", path);
    else if (rank == 0)
        st = reserve_room(path, tmp, end);
    return ra_agree(comm, st);
}

/* Room for the metadata that the close writes (object headers, the
 * attributes' heap; a long command line takes its length): set aside
 * before the file is created, and reserved past the end of the last
 * dataset before the close; what is not used is cut off by the read-back. */
#define COMMIT_METADATA_ROOM ((uint64_t)256 << 10)

/* Rank 0: frees the room room_take() set aside (a no-op when none). */
static void room_release(int *room)
{
    if (*room >= 0)
        close(*room);
    *room = -1;
}

/* A file of the output's directory with no name, open for writing
 * (O_TMPFILE; where the file system has none, a name of this process's,
 * published for the signal handler and unlinked as soon as it exists);
 * -1 with errno set. */
static int room_open(const char *dir)
{
    char name[PATH_MAX];
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600), err;

    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR &&
                    errno != EINVAL && errno != ENOENT))
        return fd;
    if (h5io_tmp_name(dir, "room", name) != RA_OK) {
        errno = ENAMETOOLONG;
        return -1;
    }
    h5io_tmp_publish(name);
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
    err = errno;
    if (fd >= 0)
        unlink(name);
    h5io_tmp_unpublish(name);
    errno = err;
    return fd;
}

/* Rank 0: sets COMMIT_METADATA_ROOM aside in a file of the output's
 * directory before the HDF5 file exists (*room its descriptor, -1 when
 * none): a file system already full is refused here, and the room is
 * freed for the close whatever fails later. The file has no name: its
 * blocks stay reserved while *room is open and are freed when it is
 * closed, by room_release or, whatever ends the process (SIGKILL
 * included), by the kernel, so that it can never be left behind. */
static ra_status room_take(const h5io_staged *s, int *room)
{
    char dir[PATH_MAX];
    const char *base;
    ra_status st = h5io_path_split(s->path, dir, sizeof dir, &base);
    int fd;

    *room = -1;
    if (st != RA_OK)
        return st;
    if ((fd = room_open(dir)) < 0)
        return ra_error_set(RA_ERR_IO, "%s: cannot create a temporary file "
                            "in %s: %s", s->path, dir, strerror(errno));
    if ((st = reserve_fd(s->path, fd, COMMIT_METADATA_ROOM)) != RA_OK) {
        close(fd);
        return st;
    }
    *room = fd;
    return RA_OK;
}

/* Every rank: creates the temporary file as HDF5 over comm. The root
 * group keeps its attributes in dense storage (file format 1.8), where an
 * attribute of any size fits; the default compact storage refuses one over
 * 64 KiB (a long command line) only when it is written. */
static ra_status commit_create(MPI_Comm comm, const h5io_staged *s,
                               const ra_h5_tuning *t, hid_t *file)
{
    hid_t fapl = h5io_fapl_mpio(comm, t), fcpl = H5Pcreate(H5P_FILE_CREATE);
    char why[H5IO_DETAIL_LEN];
    ra_status st = RA_OK;

    *file = H5I_INVALID_HID;
    if (fapl < 0 || fcpl < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
        H5Pset_attr_phase_change(fcpl, 0, 0) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file "
                          "creation", s->path);
    } else if ((*file = H5Fcreate(s->tmp, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: cannot create temporary HDF5 file "
                          "%s: %s", s->path, s->tmp, why);
    }
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    return st;
}

/* Every rank: closes the HDF5 objects of file the writer left open; an
 * error when there were any. */
static ra_status close_left(hid_t file, const char *path, ra_status st)
{
    const unsigned kinds = H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE |
                           H5F_OBJ_ATTR;
    ssize_t left = H5Fget_obj_count(file, kinds);
    hid_t ids[64];

    if (left <= 0)
        return st;
    ssize_t n = H5Fget_obj_ids(file, kinds, 64, ids);
    for (ssize_t i = 0; i < n; i++) {
        if (H5Iget_type(ids[i]) == H5I_ATTR)
            H5Aclose(ids[i]);
        else
            H5Oclose(ids[i]);
    }
    if (st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: %zd HDF5 objects of the temporary "
                          "file were left open", path, left);
    return st;
}

/* Every rank, after the writer (st agreed): lists what the file holds
 * into *sum (for the read-back), reserves room up to the end of the data
 * and the metadata after it, and closes the file, each step agreed. No
 * H5Fflush: when the metadata write fails on one rank only (seen at 3
 * ranks on a full disk), that rank returns before the collective sync the
 * others wait in, and the job hangs; H5Fclose goes on to the collective
 * close whatever fails, and its status is agreed. A close that fails
 * leaves libhdf5 in a state that crashes at MPI_Finalize, and after a
 * failed write on a full disk the close fails (or hangs: rank 0 skips a
 * sync point the others wait in) when the metadata it flushes does not
 * fit: so rank 0 first frees the room it set aside (room_take) and empties
 * the temporary file (it is removed anyway), and every rank waits for that
 * before the collective close. */
static ra_status commit_close(MPI_Comm comm, hid_t file, const h5io_staged *s,
                              ra_status st, h5io_summary **sum, int *room)
{
    char why[H5IO_DETAIL_LEN];
    int rank = 0;

    MPI_Comm_rank(comm, &rank);
    if ((st = ra_agree(comm, close_left(file, s->path, st))) == RA_OK &&
        !(*sum = h5io_summary_take(file, s->path)))
        st = RA_ERR_IO;
    if ((st = ra_agree(comm, st)) != RA_OK && rank == 0)
        note_room(s->path, st);
    if (rank == 0) /* for the reservation below, or the close */
        room_release(room);
    if (st == RA_OK)
        st = h5io_reserve_allocated(comm, file, s->path,
                                    h5io_summary_end(*sum) +
                                    COMMIT_METADATA_ROOM);
    if ((st = ra_agree(comm, st)) != RA_OK && rank == 0) {
        int emptied = truncate(s->tmp, 0) == 0;
        (void)emptied; /* the close may fit without it */
    }
    st = ra_agree(comm, st);
    if (H5Fclose(file) < 0 && st == RA_OK) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: closing temporary file %s failed: "
                          "%s", s->path, s->tmp, why);
    }
    return ra_agree(comm, st);
}

/* Step 1: rank 0 checks the destination and makes the temporary file;
 * every rank receives its name and publishes it for its signal handler. */
static ra_status commit_stage(MPI_Comm comm, int rank, const h5io_job *job,
                              h5io_staged *s)
{
    ra_status st = RA_OK;
    int fd = -1;

    s->tmp[0] = '\0';
    if (rank == 0 && (st = h5io_stage_create(s, job->path, job->force,
                                             &fd)) == RA_OK &&
        close(fd) != 0)
        st = ra_error_set(RA_ERR_IO, "%s: cannot close temporary file %s: "
                          "%s", job->path, s->tmp, strerror(errno));
    if ((st = ra_agree(comm, st)) != RA_OK)
        return st;
    if (MPI_Bcast(s, (int)sizeof *s, MPI_BYTE, 0, comm) != MPI_SUCCESS) {
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Bcast of the temporary name "
                          "failed", job->path);
        if (rank != 0)
            s->tmp[0] = '\0';
    }
    s->f = NULL;
    if (rank != 0 && s->tmp[0])
        h5io_tmp_publish(s->tmp);
    return ra_agree(comm, st);
}

ra_status h5io_commit_stage(MPI_Comm comm, const h5io_job *job,
                            h5io_staged *s)
{
    hid_t file = H5I_INVALID_HID;
    h5io_summary *sum = NULL;
    int room = -1, rank;
    ra_status st;

    s->tmp[0] = '\0';
    s->f = NULL;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank failed",
                            job->path);
    if ((st = h5io_tuning_check(job->tuning, job->path)) != RA_OK)
        return st; /* the same tuning, the same verdict on every rank */
    if ((st = commit_stage(comm, rank, job, s)) != RA_OK)
        goto cleanup;
    /* step 2: rank 0 sets the metadata's room aside; every rank creates
     * the file; rank 0 reserves its data's room (after the create, which
     * truncates) */
    if (rank == 0)
        st = room_take(s, &room);
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = ra_agree(comm, commit_create(comm, s, job->tuning, &file));
    if (st == RA_OK && rank == 0)
        st = reserve_room(s->path, s->tmp, job->reserve);
    /* step 3: every rank writes its part and closes the file */
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = ra_agree(comm, job->writer(file, comm, job->ctx));
    if (file >= 0)
        st = commit_close(comm, file, s, st, &sum, &room);
    /* step 4: rank 0 reads back what the file system holds */
    if (st == RA_OK && rank == 0 &&
        (st = h5io_readback(s->path, s->tmp, sum)) != RA_OK)
        note_room(s->path, st);
    st = ra_agree(comm, st);

cleanup:
    room_release(&room);
    h5io_summary_free(sum);
    if (st != RA_OK)
        h5io_discard(comm, s);
    return st;
}

ra_status h5io_commit(MPI_Comm comm, const h5io_job *job)
{
    h5io_staged s, *one = &s;
    ra_status st = h5io_commit_stage(comm, job, &s);

    return st == RA_OK ? h5io_publish(comm, &one, 1) : st;
}
