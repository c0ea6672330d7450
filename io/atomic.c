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

/* Splits path into its directory ("." when none) and its last component. */
static ra_status path_split(const char *path, char *dir, size_t dirlen,
                            const char **base)
{
    const char *slash = strrchr(path, '/');
    size_t n;

    *base = slash ? slash + 1 : path;
    if (**base == '\0' || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0)
        return ra_error_set(RA_ERR_ARG, "%s: output path must name a file",
                            path);
    n = slash ? (size_t)(slash - path) : 0;
    if (slash && n == 0)
        n = 1; /* the root directory */
    if (n >= dirlen)
        return ra_error_set(RA_ERR_ARG, "%s: output path is too long", path);
    if (slash)
        memcpy(dir, path, n);
    else
        dir[n++] = '.';
    dir[n] = '\0';
    return RA_OK;
}

/* A different value on every call of every process. */
static uint64_t tmp_nonce(void)
{
    static uint64_t calls;
    struct timespec ts;
    uint64_t z;

    clock_gettime(CLOCK_REALTIME, &ts);
    z = (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
    z ^= ((uint64_t)getpid() << 32) ^ ++calls * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    return z ^ (z >> 29);
}

/* Whether a and b name the same existing file (after symlinks). */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

ra_status h5io_output_check(const char *path, int force,
                            const char *const *inputs)
{
    char dir[PATH_MAX];
    const char *base;
    struct stat sb;
    ra_status st;

    if ((st = path_split(path, dir, sizeof dir, &base)) != RA_OK)
        return st;
    if (stat(dir, &sb) != 0)
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s: %s", path,
                            dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s: not a "
                            "directory", path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s is not "
                            "writable: %s", path, dir, strerror(errno));
    for (int i = 0; inputs && inputs[i]; i++)
        if (same_file(inputs[i], path))
            return ra_error_set(RA_ERR_ARG, "%s: the output is the input "
                                "file %s", path, inputs[i]);
    if (lstat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return ra_error_set(RA_ERR_ARG, "%s: output is a directory", path);
        if (!force)
            return ra_error_set(RA_ERR_EXISTS, "%s: output exists; pass "
                                "--force to replace it", path);
    }
    return RA_OK;
}

/* Rank 0: checks the destination and creates an empty, unique temporary
 * file tmp (PATH_MAX bytes) in its directory, never following a symlink. */
static ra_status commit_prepare(const char *path, int force, char *tmp)
{
    char dir[PATH_MAX];
    const char *base;
    ra_status st;
    int fd = -1;

    if ((st = h5io_output_check(path, force, NULL)) != RA_OK ||
        (st = path_split(path, dir, sizeof dir, &base)) != RA_OK)
        return st;

    for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
        int n = snprintf(tmp, PATH_MAX, "%s/.%s.tmp.%ld.%016llx", dir, base,
                         (long)getpid(), (unsigned long long)tmp_nonce());
        if (n < 0 || n >= PATH_MAX)
            return ra_error_set(RA_ERR_ARG, "%s: output path is too long",
                                path);
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

    if ((st = path_split(path, dir, sizeof dir, &base)) != RA_OK)
        goto cleanup;
    if (fsync_path(tmp, 0, 0) != 0) {
        st = ra_error_set(RA_ERR_IO, "%s: fsync of temporary file %s failed: "
                          "%s", path, tmp, strerror(errno));
        goto cleanup;
    }
    /* The check of commit_prepare() again, in case path appeared since. */
    if (!force && lstat(path, &sb) == 0) {
        st = ra_error_set(RA_ERR_EXISTS, "%s: output exists; pass --force to "
                          "replace it", path);
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

/* Rank 0, after a failed write: removes tmp; for an I/O error, first adds
 * to the message how much room the file system has left (HDF5 reports a
 * full disk only as "file write failed"). */
static void commit_abandon(const char *path, ra_status st, const char *tmp)
{
    char dir[PATH_MAX], why[512];
    const char *base;
    struct statvfs fs;

    if (st == RA_ERR_IO && tmp[0] &&
        path_split(path, dir, sizeof dir, &base) == RA_OK &&
        statvfs(dir, &fs) == 0) {
        snprintf(why, sizeof why, "%s", ra_error_message());
        ra_error_set(st, "%s (%llu KiB free in %s)", why,
                     (unsigned long long)fs.f_bavail * fs.f_frsize / 1024,
                     dir);
    }
    if (tmp[0])
        unlink(tmp);
}

ra_status h5io_commit(MPI_Comm comm, const char *path, int force,
                      h5io_writer writer, void *ctx)
{
    char tmp[PATH_MAX] = "";
    hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
    ra_status st = RA_OK;
    int rank;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank failed", path);

    /* step 1: rank 0 checks the destination and reserves a temporary name */
    if (rank == 0)
        st = commit_prepare(path, force, tmp);
    if ((st = ra_agree(comm, st)) != RA_OK)
        return st;
    if (MPI_Bcast(tmp, PATH_MAX, MPI_CHAR, 0, comm) != MPI_SUCCESS) {
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Bcast of the temporary name "
                          "failed", path);
        goto cleanup;
    }

    /* step 2: every rank creates the file and writes its part */
    if ((fapl = h5io_fapl_mpio(comm)) < 0)
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file access",
                          path);
    else if ((file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0)
        st = ra_error_set(RA_ERR_IO, "%s: cannot create temporary HDF5 file "
                          "%s", path, tmp);
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = writer(file, comm, ctx);
    if (file >= 0 && H5Fclose(file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing temporary file %s failed",
                          path, tmp);
    st = ra_agree(comm, st);

    /* step 3: rank 0 publishes the file, or removes it */
cleanup:
    if (fapl >= 0)
        H5Pclose(fapl);
    if (rank == 0) {
        if (st == RA_OK)
            st = commit_publish(path, force, tmp);
        else
            commit_abandon(path, st, tmp);
    }
    return ra_agree(comm, st);
}
