/* readback.c: what an HDF5 file written through MPI-IO really holds,
 * compared with what its writer made, before commit.c publishes it. The
 * writer's view is listed from the open file just before it is closed; the
 * file system's from the closed file, opened again through the default
 * driver: a group, dataset or attribute whose bytes never reached the
 * file system is missing there, or the file does not open at all. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5util.h"
#include "internal.h"

enum { SUMMARY_MAX = 256, SUMMARY_NAME = 320 };

/* One group or dataset: its path, its attribute count and, for a dataset,
 * the bytes its storage takes. */
typedef struct {
    char name[SUMMARY_NAME];
    H5O_type_t type;
    hsize_t nattrs, storage;
} summary_obj;

struct h5io_summary {
    int count, overflow;   /* overflow: more objects than SUMMARY_MAX */
    uint64_t data_bytes;   /* the storage of every dataset */
    uint64_t data_end;     /* the end of the furthest contiguous one */
    summary_obj obj[SUMMARY_MAX];
};

/* H5Ovisit3 and its info type since 1.12; H5Ovisit2 before. */
#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t summary_info;
#define SUMMARY_VISIT H5Ovisit3
#else
typedef H5O_info_t summary_info;
#define SUMMARY_VISIT H5Ovisit2
#endif

static herr_t summary_add(hid_t root, const char *name,
                          const summary_info *info, void *arg)
{
    h5io_summary *s = arg;
    summary_obj *o;

    if (s->count == SUMMARY_MAX) {
        s->overflow = 1;
        return 0;
    }
    o = &s->obj[s->count++];
    snprintf(o->name, sizeof o->name, "%s", strcmp(name, ".") ? name : "/");
    o->type = info->type;
    o->nattrs = info->num_attrs;
    o->storage = 0;
    if (info->type == H5O_TYPE_DATASET) {
        hid_t d = H5Dopen2(root, name, H5P_DEFAULT);
        if (d < 0)
            return -1;
        const haddr_t at = H5Dget_offset(d);
        o->storage = H5Dget_storage_size(d);
        s->data_bytes += o->storage;
        if (at != HADDR_UNDEF && at + o->storage > s->data_end)
            s->data_end = at + o->storage;
        H5Dclose(d);
    }
    return 0;
}

h5io_summary *h5io_summary_take(hid_t file, const char *path)
{
    h5io_summary *s = calloc(1, sizeof *s);
    char why[H5IO_DETAIL_LEN];

    if (!s) {
        ra_error_set(RA_ERR_NOMEM, "%s: out of memory listing the file",
                     path);
        return NULL;
    }
    if (SUMMARY_VISIT(file, H5_INDEX_NAME, H5_ITER_INC, summary_add, s,
                      H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0) {
        h5io_error_detail(why);
        ra_error_set(RA_ERR_IO, "%s: listing the objects of the file "
                     "failed: %s", path, why);
        free(s);
        return NULL;
    }
    return s;
}

void h5io_summary_free(h5io_summary *s)
{
    free(s);
}

uint64_t h5io_summary_end(const h5io_summary *s)
{
    return s->data_end;
}

/* The first difference between what was written (want) and what was read
 * back (got), as an error naming path; RA_OK when there is none. Both
 * lists are in name order. */
static ra_status summary_compare(const char *path, const h5io_summary *want,
                                 const h5io_summary *got)
{
    for (int i = 0; i < want->count; i++) {
        const summary_obj *w = &want->obj[i];
        const summary_obj *g = i < got->count ? &got->obj[i] : NULL;
        if (!g || strcmp(g->name, w->name) != 0 || g->type != w->type)
            return ra_error_set(RA_ERR_IO, "%s: read back, the file lacks "
                                "%s, which was written (lost on the way to "
                                "the file system)", path, w->name);
        if (g->nattrs != w->nattrs)
            return ra_error_set(RA_ERR_IO, "%s: read back, %s has %llu "
                                "attributes where %llu were written", path,
                                w->name, (unsigned long long)g->nattrs,
                                (unsigned long long)w->nattrs);
        if (g->storage != w->storage)
            return ra_error_set(RA_ERR_IO, "%s: read back, dataset %s takes "
                                "%llu bytes where %llu were written", path,
                                w->name, (unsigned long long)g->storage,
                                (unsigned long long)w->storage);
    }
    if (got->count != want->count || got->overflow != want->overflow)
        return ra_error_set(RA_ERR_IO, "%s: read back, the file holds %d "
                            "objects where %d were written", path, got->count,
                            want->count);
    return RA_OK;
}

/* The file's length and room on disk: cut to its end of allocation eoa
 * (a reservation may have made it longer), a file system that counts
 * blocks must hold at least the datasets' bytes: writes lost on the way
 * leave holes (reserved room counts as held, and cannot lose writes). */
static ra_status room_check(const char *path, const char *tmp, haddr_t eoa,
                            uint64_t data_bytes)
{
    struct stat sb;

    if (stat(tmp, &sb) != 0)
        return ra_error_set(RA_ERR_IO, "%s: cannot stat temporary file %s: "
                            "%s", path, tmp, strerror(errno));
    if ((uint64_t)sb.st_size > (uint64_t)eoa &&
        (truncate(tmp, (off_t)eoa) != 0 || stat(tmp, &sb) != 0))
        return ra_error_set(RA_ERR_IO, "%s: cannot cut temporary file %s to "
                            "its %llu bytes: %s", path, tmp,
                            (unsigned long long)eoa, strerror(errno));
    if (sb.st_blocks > 0 &&
        (uint64_t)sb.st_blocks * 512 < data_bytes)
        return ra_error_set(RA_ERR_IO, "%s: read back, the file takes %llu "
                            "bytes on disk, under the %llu bytes of its "
                            "datasets (writes lost on the way to the file "
                            "system)", path,
                            (unsigned long long)sb.st_blocks * 512,
                            (unsigned long long)data_bytes);
    return RA_OK;
}

ra_status h5io_readback(const char *path, const char *tmp,
                        const h5io_summary *want)
{
    char why[H5IO_DETAIL_LEN];
    h5io_summary *got = NULL;
    haddr_t eoa = 0;
    ra_status st = RA_OK;
    hid_t file = H5Fopen(tmp, H5F_ACC_RDONLY, H5P_DEFAULT);

    if (file < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: read back, the file written does "
                          "not open: %s (lost on the way to the file "
                          "system)", path, why);
    } else if (!(got = h5io_summary_take(file, path))) {
        st = RA_ERR_IO;
    } else if ((st = summary_compare(path, want, got)) == RA_OK &&
               H5Fget_eoa(file, &eoa) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: read back, the end of the file "
                          "is unknown", path);
    }
    if (file >= 0 && H5Fclose(file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: read back, closing failed", path);
    if (st == RA_OK)
        st = room_check(path, tmp, eoa, want->data_bytes);
    h5io_summary_free(got);
    return st;
}
