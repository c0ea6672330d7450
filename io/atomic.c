/* atomic.c: create an HDF5 file so that path holds either nothing new or
 * the complete file: write a temporary file in the same directory, fsync,
 * rename, fsync the directory. Rank 0 alone touches names and directories;
 * every rank writes through MPI-IO. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

/* Rank 0: checks the destination and creates an empty, unique temporary
 * file tmp (PATH_MAX bytes) in its directory, never following a symlink. */
static ra_status commit_prepare(const char *path, int force, char *tmp)
{
    char dir[PATH_MAX];
    const char *base;
    ra_status st;
    int fd = -1;

    if ((st = h5io_output_check(path, force, NULL)) != RA_OK ||
        (st = h5io_path_split(path, dir, sizeof dir, &base)) != RA_OK)
        return st;

    /* stale files of writers killed here before (see tmpfile.c) */
    h5io_tmp_sweep(dir);
    for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
        if ((st = h5io_tmp_name(dir, base, tmp)) != RA_OK)
            return st;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return ra_error_set(RA_ERR_IO, "%s: cannot create temporary file "
                            "%s: %s", path, tmp, strerror(errno));
    if (close(fd) != 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot close temporary file %s: "
                          "%s", path, tmp, strerror(errno));
        unlink(tmp);
        return st;
    }
    return RA_OK;
}

/* Opens name read-only and fsyncs it. ok_einval: the file system may not
 * support syncing it (directories on some file systems). */
static int fsync_path(const char *name, int flags, int ok_einval)
{
    int fd = open(name, O_RDONLY | flags);
    int rc, saved;

    if (fd < 0)
        return -1;
    rc = fsync(fd);
    if (rc != 0 && ok_einval && (errno == EINVAL || errno == ENOTSUP))
        rc = 0;
    saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Rank 0: makes the complete temporary file tmp durable at path. On a
 * failure before the rename, tmp is removed. */
static ra_status commit_publish(const char *path, int force, const char *tmp)
{
    char dir[PATH_MAX];
    const char *base;
    struct stat sb;
    ra_status st;

    if ((st = h5io_path_split(path, dir, sizeof dir, &base)) != RA_OK)
        goto cleanup;
    if (fsync_path(tmp, 0, 0) != 0) {
        st = ra_error_set(RA_ERR_IO, "%s: fsync of temporary file %s failed: "
                          "%s", path, tmp, strerror(errno));
        goto cleanup;
    }
    /* The check of commit_prepare() again, in case path appeared since. */
    if (!force && lstat(path, &sb) == 0) {
        st = ra_error_set(RA_ERR_EXISTS, "%s: output exists", path);
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        st = ra_error_set(RA_ERR_IO, "%s: rename of temporary file %s "
                          "failed: %s", path, tmp, strerror(errno));
        goto cleanup;
    }
    if (fsync_path(dir, O_DIRECTORY, 1) != 0)
        return ra_error_set(RA_ERR_IO, "%s: written, but fsync of directory "
                            "%s failed: %s", path, dir, strerror(errno));
    return RA_OK;

cleanup:
    unlink(tmp);
    return st;
}

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

/* Every rank: creates the temporary file tmp as HDF5 over comm. The root
 * group keeps its attributes in dense storage (file format 1.8), where an
 * attribute of any size fits; the default compact storage refuses one over
 * 64 KiB (a long command line) only when it is written. */
static ra_status commit_create(MPI_Comm comm, const char *path,
                               const char *tmp, hid_t *file)
{
    hid_t fapl = h5io_fapl_mpio(comm), fcpl = H5Pcreate(H5P_FILE_CREATE);
    char why[H5IO_DETAIL_LEN];
    ra_status st = RA_OK;

    *file = H5I_INVALID_HID;
    if (fapl < 0 || fcpl < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
        H5Pset_attr_phase_change(fcpl, 0, 0) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file "
                          "creation", path);
    } else if ((*file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: cannot create temporary HDF5 file "
                          "%s: %s", path, tmp, why);
    }
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    return st;
}

/* Every rank, after the writer (st agreed): closes the file, leaving no
 * HDF5 object of it open. A close that fails leaves libhdf5 in a state
 * that crashes at MPI_Finalize, and after a failed write on a full disk
 * the close fails when the metadata it flushes does not fit: so rank 0
 * first empties the temporary file (it is removed anyway), and every rank
 * waits for that before the collective close. */
static ra_status commit_close(MPI_Comm comm, hid_t file, const char *path,
                              const char *tmp, int rank, ra_status st)
{
    const unsigned kinds = H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE |
                           H5F_OBJ_ATTR;
    ssize_t left = H5Fget_obj_count(file, kinds);
    char why[H5IO_DETAIL_LEN];

    if (left > 0) {
        hid_t ids[64];
        ssize_t n = H5Fget_obj_ids(file, kinds, 64, ids);
        for (ssize_t i = 0; i < n; i++) {
            if (H5Iget_type(ids[i]) == H5I_ATTR)
                H5Aclose(ids[i]);
            else
                H5Oclose(ids[i]);
        }
        if (st == RA_OK)
            st = ra_error_set(RA_ERR_IO, "%s: %zd HDF5 objects of the "
                              "temporary file were left open", path, left);
    }
    if (st != RA_OK && rank == 0) {
        note_room(path, st);
        int emptied = truncate(tmp, 0) == 0;
        (void)emptied; /* the close may fit without it */
    }
    st = ra_agree(comm, st);
    if (H5Fclose(file) < 0 && st == RA_OK) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: closing temporary file %s failed: "
                          "%s", path, tmp, why);
    }
    return st;
}

ra_status h5io_commit(MPI_Comm comm, const char *path, int force,
                      h5io_writer writer, void *ctx)
{
    char tmp[PATH_MAX] = "";
    hid_t file = H5I_INVALID_HID;
    ra_status st = RA_OK;
    int rank;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank failed", path);

    /* step 1: rank 0 checks the destination and reserves a temporary name,
     * which every rank publishes for its signal handler */
    if (rank == 0)
        st = commit_prepare(path, force, tmp);
    if ((st = ra_agree(comm, st)) != RA_OK)
        return st;
    if (MPI_Bcast(tmp, PATH_MAX, MPI_CHAR, 0, comm) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Bcast of the temporary name "
                          "failed", path);
    if ((st = ra_agree(comm, st)) != RA_OK)
        goto cleanup;
    h5io_tmp_publish(tmp);

    /* step 2: every rank creates the file, writes its part, closes it */
    st = ra_agree(comm, commit_create(comm, path, tmp, &file));
    if (st == RA_OK)
        st = ra_agree(comm, writer(file, comm, ctx));
    if (file >= 0)
        st = commit_close(comm, file, path, tmp, rank, st);
    st = ra_agree(comm, st);

    /* step 3: rank 0 publishes the file, or removes it */
cleanup:
    if (rank == 0) {
        if (st == RA_OK)
            st = commit_publish(path, force, tmp);
        else if (tmp[0])
            unlink(tmp);
    }
    st = ra_agree(comm, st);
    h5io_tmp_unpublish();
    return st;
}
