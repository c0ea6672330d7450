/* deps.c: the files an HDF5 input reads besides itself: targets of external
 * links, raw-data files of datasets with external storage, source files of
 * virtual datasets. Two uses: the output check refuses an output that is
 * any of them (h5io_input_files), and the readers refuse, before a read
 * would block or return zeros, a dependency that is not a regular file, a
 * missing virtual-dataset source, or external storage shorter than its
 * dataset (h5io_link_check, h5io_dset_deps_check). Metadata only. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "h5util.h"
#include "internal.h"

/* The names under which HDF5 may find the file name that the file parent
 * refers to: with each entry of the colon-separated list of environment
 * variable env as a prefix, in the directory of parent, and as given
 * (relative to the working directory). An absolute name is also tried by
 * its last component under the prefixes, as HDF5 does. A superset of
 * HDF5's search, so that the output check errs on the side of refusing. */
static int name_candidates(const char *parent, const char *name,
                           const char *env, char out[][PATH_MAX], int max)
{
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    const char *rel = name[0] == '/' ? base : name;
    const char *slash = strrchr(parent, '/');
    const char *list = env ? getenv(env) : NULL;
    int n = 0;

    if (n < max)
        snprintf(out[n++], PATH_MAX, "%s", name);
    if (n < max && slash)
        snprintf(out[n++], PATH_MAX, "%.*s/%s", (int)(slash - parent),
                 parent, rel);
    else if (n < max)
        snprintf(out[n++], PATH_MAX, "%s", rel);
    while (list && *list && n < max) {
        size_t len = strcspn(list, ":");
        if (len > 0)
            snprintf(out[n++], PATH_MAX, "%.*s/%s", (int)len, list, rel);
        list += len + (list[len] == ':');
    }
    return n;
}

/* Refuses a dependency that exists but is not a regular file (opening a
 * FIFO blocks; a device never ends). */
static ra_status dep_regular(const char *path, const char *what,
                             const char *dep)
{
    struct stat sb;

    if (stat(dep, &sb) != 0 || S_ISREG(sb.st_mode))
        return RA_OK;
    return ra_error_set(RA_ERR_INPUT, "%s: %s %s is not a regular file", path,
                        what, dep);
}

ra_status h5io_link_check(hid_t file, const char *path, const char *name)
{
    char prefix[512], cand[4][PATH_MAX], what[600];
    const char *target, *obj;
    unsigned flags;
    H5L_info_t info;
    ra_status st = RA_OK;

    /* every component, so that an external link inside the path is found
     * before traversing it */
    for (size_t at = 1; name[at - 1] && st == RA_OK; at++) {
        if (name[at] != '/' && name[at] != '\0')
            continue;
        if (at >= sizeof prefix)
            break;
        memcpy(prefix, name, at);
        prefix[at] = '\0';
        if (H5Lexists(file, prefix, H5P_DEFAULT) <= 0 ||
            H5Lget_info(file, prefix, &info, H5P_DEFAULT) < 0 ||
            info.type != H5L_TYPE_EXTERNAL)
            continue;
        char *val = malloc(info.u.val_size ? info.u.val_size : 1);
        if (!val)
            return ra_error_set(RA_ERR_NOMEM, "%s: %s: out of memory", path,
                                prefix);
        if (H5Lget_val(file, prefix, val, info.u.val_size, H5P_DEFAULT) >= 0 &&
            H5Lunpack_elink_val(val, info.u.val_size, &flags, &target,
                                &obj) >= 0) {
            int n = name_candidates(path, target, "HDF5_EXT_PREFIX", cand, 4);
            snprintf(what, sizeof what, "external link %s: target", prefix);
            for (int i = 0; i < n && st == RA_OK; i++)
                st = dep_regular(path, what, cand[i]);
        }
        free(val);
    }
    return st;
}

/* Checks the external raw-data files of dataset name: each regular, and
 * together holding every byte of the dataset (a short file reads as
 * zeros). */
static ra_status efl_check(hid_t dcpl, hid_t dset, const char *path,
                           const char *name, int count)
{
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    hssize_t npoints = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    size_t tsize = type >= 0 ? H5Tget_size(type) : 0;
    const int64_t need = ra_mul_checked(npoints, (int64_t)tsize);
    int64_t covered = 0;
    ra_status st = RA_OK;

    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (need < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot tell the "
                            "size of its external storage", path, name);
    for (int i = 0; i < count && covered < need && st == RA_OK; i++) {
        char file[PATH_MAX], full[2 * PATH_MAX + 2];
        const char *prefix = getenv("HDF5_EXTFILE_PREFIX");
        off_t offset;
        hsize_t size;
        struct stat sb;

        if (H5Pget_external(dcpl, (unsigned)i, sizeof file, file, &offset,
                            &size) < 0)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read "
                                "its external storage list", path, name);
        snprintf(full, sizeof full, "%s%s%s", prefix && file[0] != '/' ?
                 prefix : "", prefix && file[0] != '/' ? "/" : "", file);
        if (stat(full, &sb) != 0)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: external "
                                "raw-data file %s: %s", path, name, full,
                                strerror(errno));
        if ((st = dep_regular(path, "external raw-data file", full)) != RA_OK)
            return st;
        const int64_t want = (int64_t)size < need - covered ? (int64_t)size
                                                             : need - covered;
        const int64_t have = sb.st_size > offset ? sb.st_size - offset : 0;
        if (have < want)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: external "
                                "raw-data file %s holds %lld bytes from offset "
                                "%lld, the dataset needs %lld there "
                                "(truncated?)", path, name, full,
                                (long long)have, (long long)offset,
                                (long long)want);
        covered += want;
    }
    if (covered < need)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: its external "
                            "storage holds %lld of its %lld bytes", path,
                            name, (long long)covered, (long long)need);
    return RA_OK;
}

/* Checks the source files of virtual dataset name: each present and
 * regular (a missing source reads as fill values). */
static ra_status vds_check(hid_t dcpl, const char *path, const char *name)
{
    char cand[4][PATH_MAX], src[PATH_MAX];
    size_t count;

    if (H5Pget_virtual_count(dcpl, &count) < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                            "virtual mappings", path, name);
    for (size_t i = 0; i < count; i++) {
        ssize_t len = H5Pget_virtual_filename(dcpl, i, src, sizeof src);
        int n, found = 0;
        if (len < 0 || (size_t)len >= sizeof src)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read "
                                "the source file name of mapping %zu", path,
                                name, i);
        if (strcmp(src, ".") == 0)
            continue; /* the file itself */
        n = name_candidates(path, src, "HDF5_VDS_PREFIX", cand, 4);
        for (int c = 0; c < n; c++) {
            struct stat sb;
            if (stat(cand[c], &sb) != 0)
                continue;
            if (!S_ISREG(sb.st_mode))
                return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: virtual "
                                    "source file %s is not a regular file",
                                    path, name, cand[c]);
            found = 1;
        }
        if (!found)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: virtual "
                                "source file %s not found", path, name, src);
    }
    return RA_OK;
}

ra_status h5io_dset_deps_check(hid_t dset, const char *path, const char *name)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    ra_status st = RA_OK;
    int nefl;

    if (dcpl < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                            "creation properties", path, name);
    if ((nefl = H5Pget_external_count(dcpl)) > 0)
        st = efl_check(dcpl, dset, path, name, nefl);
    else if (H5Pget_layout(dcpl) == H5D_VIRTUAL)
        st = vds_check(dcpl, path, name);
    H5Pclose(dcpl);
    return st;
}

/* ---- every file an input reads, for the output check ---- */

typedef struct {
    h5io_files *list;
    const char *path; /* the file being walked */
    int depth;
    ra_status st;
} walk_ctx;

static ra_status files_walk(h5io_files *list, const char *path, int depth);

/* Adds the existing file path to the list unless it is there (by device
 * and inode); 1 when added. */
static int list_add(h5io_files *list, const char *path, struct stat *sb)
{
    if (strlen(path) >= PATH_MAX || stat(path, sb) != 0 ||
        list->count == H5IO_FILES_MAX)
        return 0;
    for (int j = 0; j < list->count; j++)
        if (list->dev[j] == (uint64_t)sb->st_dev &&
            list->ino[j] == (uint64_t)sb->st_ino)
            return 0;
    memcpy(list->name[list->count], path, strlen(path) + 1);
    list->dev[list->count] = (uint64_t)sb->st_dev;
    list->ino[list->count++] = (uint64_t)sb->st_ino;
    return 1;
}

/* Adds the existing candidates of name (referred to by c->path) to the
 * list; with follow, walks each as an HDF5 file too. */
static void files_add(walk_ctx *c, const char *name, const char *env,
                      int follow)
{
    char cand[4][PATH_MAX];
    const int n = name_candidates(c->path, name, env, cand, 4);

    for (int i = 0; i < n && c->st == RA_OK; i++) {
        struct stat sb;
        if (list_add(c->list, cand[i], &sb) && follow &&
            S_ISREG(sb.st_mode) && c->depth < 8)
            c->st = files_walk(c->list, cand[i], c->depth + 1);
    }
}

/* The external raw-data files and virtual sources of one dataset. */
static void files_of_dataset(walk_ctx *c, hid_t dset)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    char name[PATH_MAX];
    size_t nvds = 0;
    int nefl;

    if (dcpl < 0)
        return;
    nefl = H5Pget_external_count(dcpl);
    for (int i = 0; i < nefl; i++) {
        off_t offset;
        hsize_t size;
        if (H5Pget_external(dcpl, (unsigned)i, sizeof name, name, &offset,
                            &size) >= 0)
            files_add(c, name, "HDF5_EXTFILE_PREFIX", 0);
    }
    if (H5Pget_layout(dcpl) == H5D_VIRTUAL &&
        H5Pget_virtual_count(dcpl, &nvds) >= 0)
        for (size_t i = 0; i < nvds; i++)
            if (H5Pget_virtual_filename(dcpl, i, name, sizeof name) > 0 &&
                strcmp(name, ".") != 0)
                files_add(c, name, "HDF5_VDS_PREFIX", 1);
    H5Pclose(dcpl);
}

/* H5Lvisit callback: external links and datasets. */
static herr_t files_visit(hid_t group, const char *name,
                          const H5L_info_t *info, void *arg)
{
    walk_ctx *c = arg;
    const char *target, *obj;
    unsigned flags;

    if (info->type == H5L_TYPE_EXTERNAL) {
        char *val = malloc(info->u.val_size ? info->u.val_size : 1);
        if (val && H5Lget_val(group, name, val, info->u.val_size,
                              H5P_DEFAULT) >= 0 &&
            H5Lunpack_elink_val(val, info->u.val_size, &flags, &target,
                                &obj) >= 0)
            files_add(c, target, "HDF5_EXT_PREFIX", 1);
        free(val);
    } else if (info->type == H5L_TYPE_HARD) {
        hid_t o = H5Oopen(group, name, H5P_DEFAULT);
        if (o >= 0 && H5Iget_type(o) == H5I_DATASET)
            files_of_dataset(c, o);
        if (o >= 0)
            H5Oclose(o);
    }
    return c->st == RA_OK ? 0 : -1;
}

/* Walks the HDF5 file path (already in the list); files that are not HDF5
 * or cannot be opened have no dependencies to add. */
static ra_status files_walk(h5io_files *list, const char *path, int depth)
{
    walk_ctx c = {list, path, depth, RA_OK};
    hid_t file;

    if (H5Fis_hdf5(path) <= 0 ||
        (file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        return RA_OK;
    H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, files_visit, &c);
    H5Fclose(file);
    return c.st;
}

ra_status h5io_input_files(const char *const *inputs, h5io_files *list)
{
    h5io_quiet quiet;
    ra_status st = RA_OK;

    list->count = 0;
    h5io_quiet_begin(&quiet);
    for (int i = 0; inputs && inputs[i] && st == RA_OK; i++) {
        struct stat sb;
        /* the input itself, then what it reads; only regular files are
         * walked (a FIFO would block the open) */
        if (list_add(list, inputs[i], &sb) && S_ISREG(sb.st_mode))
            st = files_walk(list, inputs[i], 0);
    }
    h5io_quiet_end(&quiet);
    return st;
}
