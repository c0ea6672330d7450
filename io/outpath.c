/* outpath.c: the one check of an output path, made before any heavy work
 * by every subcommand that writes, and again by h5io_commit(): everything
 * about the path that can fail later is refused here first. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

ra_status h5io_path_split(const char *path, char *dir, size_t dirlen,
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

/* The kernel's views that are not storage (statfs f_type), by name. */
static const struct {
    unsigned long magic;
    const char *name;
} pseudo_fs[] = {
    {0x9fa0, "proc"},           {0x62656572, "sysfs"},
    {0x1cd1, "devpts"},         {0x27e0eb, "cgroup"},
    {0x63677270, "cgroup2"},    {0x64626720, "debugfs"},
    {0x74726163, "tracefs"},    {0x73636673, "securityfs"},
    {0x6165676c, "pstore"},     {0xcafe4a11, "bpf"},
    {0x62656570, "configfs"},   {0xde5e81e4, "efivarfs"},
    {0xf97cff8c, "selinuxfs"},  {0x42494e4d, "binfmt_misc"},
    {0x65735543, "fusectl"},    {0x19800202, "mqueue"},
    {0x6e736673, "nsfs"},
};

/* The name of the pseudo file system holding directory dir, or NULL.
 * devtmpfs shares tmpfs's magic number: it is told by /proc/self/mountinfo
 * (the mount whose device is dir's). */
static const char *pseudo_fs_name(const char *dir, dev_t dev)
{
    static char found[32];
    struct statfs fs;
    char line[4096];
    FILE *f;

    if (statfs(dir, &fs) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof pseudo_fs / sizeof *pseudo_fs; i++)
        if ((unsigned long)fs.f_type == pseudo_fs[i].magic)
            return pseudo_fs[i].name;
    if (!(f = fopen("/proc/self/mountinfo", "r")))
        return NULL;
    found[0] = '\0';
    while (!found[0] && fgets(line, sizeof line, f)) {
        unsigned maj, min;
        const char *sep = strstr(line, " - ");
        char type[32];
        if (sscanf(line, "%*s %*s %u:%u", &maj, &min) == 2 && sep &&
            maj == major(dev) && min == minor(dev) &&
            sscanf(sep + 3, "%31s", type) == 1 && strcmp(type, "devtmpfs") == 0)
            snprintf(found, sizeof found, "%s", type);
    }
    fclose(f);
    return found[0] ? found : NULL;
}

/* The directory: exists, is one, writable, storage; names that fit. */
static ra_status dir_check(const char *path, const char *dir,
                           const char *base)
{
    char tmp[PATH_MAX];
    const char *pseudo, *tbase;
    struct stat sb;
    long name_max;
    ra_status st;

    if (stat(dir, &sb) != 0)
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s: %s", path,
                            dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s: not a "
                            "directory", path, dir);
    if ((pseudo = pseudo_fs_name(dir, sb.st_dev)) != NULL)
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s is on %s, "
                            "a kernel file system that holds no files", path,
                            dir, pseudo);
    if (access(dir, W_OK | X_OK) != 0)
        return ra_error_set(RA_ERR_ARG, "%s: output directory %s is not "
                            "writable: %s", path, dir, strerror(errno));
    /* the name h5io_commit() will write first, then rename */
    if ((st = h5io_tmp_name(dir, base, tmp)) != RA_OK)
        return st;
    tbase = strrchr(tmp, '/') + 1;
    name_max = pathconf(dir, _PC_NAME_MAX);
    if (name_max <= 0)
        name_max = NAME_MAX;
    if ((long)strlen(base) > name_max)
        return ra_error_set(RA_ERR_ARG, "%s: output file name is %zu "
                            "characters, over the %ld of this file system",
                            path, strlen(base), name_max);
    if ((long)strlen(tbase) > name_max)
        return ra_error_set(RA_ERR_ARG, "%s: the temporary file name (the "
                            "output name and %zu characters of owner) would "
                            "be %zu characters, over the %ld of this file "
                            "system; use a shorter output name", path,
                            strlen(tbase) - strlen(base), strlen(tbase),
                            name_max);
    return RA_OK;
}

/* Refuses an output that is, under any name, a file the inputs read. */
static ra_status inputs_check(const char *path, const char *const *inputs)
{
    struct stat out;
    h5io_files *list;
    ra_status st = RA_OK;

    if (!inputs || stat(path, &out) != 0)
        return RA_OK; /* a new file is no input */
    if (!(list = malloc(sizeof *list)))
        return ra_error_set(RA_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; inputs[i] && st == RA_OK; i++) {
        const char *one[2] = {inputs[i], NULL};
        if ((st = h5io_input_files(one, list)) != RA_OK)
            break;
        for (int j = 0; j < list->count && st == RA_OK; j++) {
            if (list->dev[j] != (uint64_t)out.st_dev ||
                list->ino[j] != (uint64_t)out.st_ino)
                continue;
            if (j == 0)
                st = ra_error_set(RA_ERR_ARG, "%s: the output is the input "
                                  "file %s", path, inputs[i]);
            else
                st = ra_error_set(RA_ERR_ARG, "%s: the output is %s, a file "
                                  "that the input %s reads (external link, "
                                  "external storage or virtual dataset)",
                                  path, list->name[j], inputs[i]);
        }
    }
    free(list);
    return st;
}

ra_status h5io_output_check(const char *path, int force,
                            const char *const *inputs)
{
    char dir[PATH_MAX];
    const char *base;
    struct stat sb;
    ra_status st;

    if ((st = h5io_path_split(path, dir, sizeof dir, &base)) != RA_OK ||
        (st = dir_check(path, dir, base)) != RA_OK ||
        (st = inputs_check(path, inputs)) != RA_OK)
        return st;
    if (lstat(path, &sb) != 0)
        return RA_OK;
    if (S_ISDIR(sb.st_mode))
        return ra_error_set(RA_ERR_ARG, "%s: output is a directory", path);
    /* a device or FIFO (also behind a symlink) would be replaced by the
     * rename, or never hold the file */
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return ra_error_set(RA_ERR_ARG, "%s: output is not a regular file "
                            "(%s)", path, S_ISCHR(sb.st_mode) ?
                            "a character device" : S_ISBLK(sb.st_mode) ?
                            "a block device" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                            : S_ISSOCK(sb.st_mode) ? "a socket" :
                            S_ISDIR(sb.st_mode) ? "a directory" : "special");
    if (!force)
        return ra_error_set(RA_ERR_EXISTS, "%s: output exists",
                            path);
    return RA_OK;
}

/* path made absolute with "." and ".." folded and repeated slashes
 * dropped, by its text alone, into out[PATH_MAX]. */
static void path_fold(const char *path, char *out)
{
    char text[2 * PATH_MAX], cwd[PATH_MAX] = "";
    size_t n = 0;

    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    snprintf(text, sizeof text, "%s/%s", cwd, path);
    for (char *part = strtok(text, "/"); part; part = strtok(NULL, "/")) {
        if (strcmp(part, ".") == 0)
            continue;
        if (strcmp(part, "..") == 0) {
            while (n > 0 && out[--n] != '/')
                ;
            continue;
        }
        n += (size_t)snprintf(out + n, PATH_MAX - n, "/%s", part);
        if (n >= PATH_MAX)
            n = PATH_MAX - 1;
    }
    out[n] = '\0';
    if (n == 0)
        snprintf(out, PATH_MAX, "/");
}

/* The normalised absolute form of path: its directory resolved through
 * its links when it exists (realpath), then its last component. */
static void path_normal(const char *path, char *out)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *base;

    int n = -1;

    if (h5io_path_split(path, dir, sizeof dir, &base) == RA_OK &&
        realpath(dir, real))
        n = snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "",
                     base);
    if (n < 0 || n >= PATH_MAX)
        path_fold(path, out);
}

/* Whether a and b name one file: by device and inode when both exist,
 * else by their normalised absolute paths. */
static int same_file(const char *a, const char *b)
{
    char na[PATH_MAX], nb[PATH_MAX];
    struct stat sa, sb;

    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    path_normal(a, na);
    path_normal(b, nb);
    return strcmp(na, nb) == 0;
}

ra_status h5io_paths_check(const h5io_named_path *list)
{
    for (int i = 0; list[i].option; i++) {
        for (int j = 0; j < i; j++) {
            const h5io_named_path *a = &list[j], *b = &list[i];
            if (!a->path || !b->path || (!a->output && !b->output) ||
                !same_file(a->path, b->path))
                continue;
            if (a->output && b->output)
                return ra_error_set(RA_ERR_ARG, "%s: %s is also the output "
                                    "file of %s (%s)", b->option, b->path,
                                    a->option, a->path);
            const h5io_named_path *out = a->output ? a : b;
            const h5io_named_path *in = a->output ? b : a;
            return ra_error_set(RA_ERR_ARG, "%s: the output is the input "
                                "file %s (%s and %s name the same file)",
                                out->path, in->path, out->option, in->option);
        }
    }
    return RA_OK;
}
