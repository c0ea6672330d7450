/* atomic.c: the one way a file is written, whatever it holds: under a
 * temporary name in its destination directory (io/tmpfile.c), made durable
 * (fsync), and only then renamed onto its name, the directory fsynced
 * after. The name holds its earlier file or the complete new one, never a
 * part. Text files (JSON, CSV) are written here whole; HDF5 files by
 * io/commit.c, which stages them through the same functions. Everything
 * here runs on rank 0 alone unless it says otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

/* Empties s for path: no temporary file yet. */
static void staged_init(h5io_staged *s, const char *path, int force)
{
    snprintf(s->path, sizeof s->path, "%s", path);
    s->tmp[0] = '\0';
    s->force = force;
    s->f = NULL;
}

ra_status h5io_stage_create(h5io_staged *s, const char *path, int force,
                            int *fd)
{
    char dir[PATH_MAX];
    const char *base;
    ra_status st;

    staged_init(s, path, force);
    *fd = -1;
    if ((st = h5io_output_check(path, force, NULL)) != RA_OK ||
        (st = h5io_path_split(path, dir, sizeof dir, &base)) != RA_OK)
        return st;
    /* stale files of writers killed here before (see tmpfile.c) */
    h5io_tmp_sweep(dir);
    for (int attempt = 0; *fd < 0 && attempt < 16; attempt++) {
        if ((st = h5io_tmp_name(dir, base, s->tmp)) != RA_OK)
            return st;
        /* published before it exists: a signal between the creation and
         * the publishing would leave it behind. The name holds this
         * process's host, namespace and pid, so what a signal unlinks in
         * the window before a refused open is this process's own name. */
        h5io_tmp_publish(s->tmp);
        *fd = open(s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                               O_CLOEXEC, 0666);
        if (*fd < 0)
            h5io_tmp_unpublish(s->tmp);
        if (*fd < 0 && errno != EEXIST)
            break;
    }
    if (*fd < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot create temporary file %s: "
                          "%s", path, s->tmp, strerror(errno));
        s->tmp[0] = '\0';
        return st;
    }
    return RA_OK;
}

/* Opens name read-only and fsyncs it. ok_einval: the file system may not
 * support syncing it (directories on some file systems). */
static int fsync_path(const char *name, int flags, int ok_einval)
{
    int fd = open(name, O_RDONLY | O_CLOEXEC | flags);
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

void h5io_staged_discard(h5io_staged *s)
{
    if (s->f)
        fclose(s->f);
    s->f = NULL;
    if (s->tmp[0]) {
        unlink(s->tmp);
        h5io_tmp_unpublish(s->tmp);
    }
    s->tmp[0] = '\0';
}

ra_status h5io_text_begin(h5io_staged *s, const char *path, int force)
{
    int fd;
    ra_status st = h5io_stage_create(s, path, force, &fd);

    if (st != RA_OK)
        return st;
    if (!(s->f = fdopen(fd, "w"))) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot open temporary file %s: %s",
                          path, s->tmp, strerror(errno));
        close(fd);
        h5io_staged_discard(s);
    }
    return st;
}

ra_status h5io_text_end(h5io_staged *s)
{
    int bad = fflush(s->f) != 0 || ferror(s->f) || fsync(fileno(s->f)) != 0;
    int err = errno;

    if (fclose(s->f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    s->f = NULL;
    if (!bad)
        return RA_OK;
    h5io_staged_discard(s);
    return ra_error_set(RA_ERR_IO, "%s: writing failed: %s", s->path,
                        strerror(err ? err : EIO));
}

/* The check of h5io_stage_create() again, in case path appeared since. */
static ra_status publish_check(const h5io_staged *s)
{
    struct stat sb;

    if (!s->force && lstat(s->path, &sb) == 0)
        return ra_error_set(RA_ERR_EXISTS, "%s: output exists", s->path);
    if (fsync_path(s->tmp, 0, 0) != 0)
        return ra_error_set(RA_ERR_IO, "%s: fsync of temporary file %s "
                            "failed: %s", s->path, s->tmp, strerror(errno));
    return RA_OK;
}

/* Renames one checked, durable temporary file onto its path. */
static ra_status publish_one(h5io_staged *s)
{
    char dir[PATH_MAX];
    const char *base;
    ra_status st = h5io_path_split(s->path, dir, sizeof dir, &base);

    if (st == RA_OK && rename(s->tmp, s->path) != 0)
        st = ra_error_set(RA_ERR_IO, "%s: rename of temporary file %s "
                          "failed: %s", s->path, s->tmp, strerror(errno));
    if (st != RA_OK)
        return st;
    h5io_tmp_unpublish(s->tmp);
    s->tmp[0] = '\0';
    if (fsync_path(dir, O_DIRECTORY, 1) != 0)
        return ra_error_set(RA_ERR_IO, "%s: written, but fsync of directory "
                            "%s failed: %s", s->path, dir, strerror(errno));
    return RA_OK;
}

ra_status h5io_staged_publish(h5io_staged *const *files, int n)
{
    ra_status st = RA_OK;

    /* every file checked and durable before the first rename */
    for (int i = 0; i < n && st == RA_OK; i++)
        if (files[i]->tmp[0])
            st = publish_check(files[i]);
    for (int i = 0; i < n && st == RA_OK; i++)
        if (files[i]->tmp[0])
            st = publish_one(files[i]);
    for (int i = 0; i < n; i++)
        h5io_staged_discard(files[i]);
    return st;
}

ra_status h5io_publish(MPI_Comm comm, h5io_staged *const *files, int n)
{
    int rank;
    ra_status st = RA_OK;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "MPI_Comm_rank failed");
    else if (rank == 0)
        st = h5io_staged_publish(files, n);
    for (int i = 0; i < n; i++) {
        if (files[i]->tmp[0])
            h5io_tmp_unpublish(files[i]->tmp);
        files[i]->tmp[0] = '\0';
    }
    return ra_agree(comm, st);
}

void h5io_discard(MPI_Comm comm, h5io_staged *s)
{
    int rank = 0;

    MPI_Comm_rank(comm, &rank);
    if (rank == 0)
        h5io_staged_discard(s);
    else if (s->tmp[0])
        h5io_tmp_unpublish(s->tmp);
    s->tmp[0] = '\0';
}

ra_status h5io_text_write(const char *path, int force,
                          int (*fill)(FILE *, const void *), const void *arg)
{
    h5io_staged s, *one = &s;
    ra_status st = h5io_text_begin(&s, path, force);

    if (st != RA_OK)
        return st;
    if (fill(s.f, arg) != 0) {
        h5io_staged_discard(&s);
        return ra_error_set(RA_ERR_IO, "%s: writing failed: %s", path,
                            strerror(errno ? errno : EIO));
    }
    if ((st = h5io_text_end(&s)) != RA_OK)
        return st;
    return h5io_staged_publish(&one, 1);
}
