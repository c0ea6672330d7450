/* tuning.c: how the file functions use MPI-IO on a parallel file system:
 * collective metadata, dataset alignment, MPI-IO hints. The one place that
 * shapes the file-access property list every collective open uses. */
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "internal.h"

enum {
    TUNING_MAX_HINTS = 32,
    TUNING_HINT_LEN = 256,
    /* objects at least this large start at a multiple of the alignment;
     * attributes and small datasets stay packed */
    TUNING_ALIGN_THRESHOLD = 64 * 1024,
};

/* Process-wide, like HDF5's own state: the settings of ra_h5_tuning_set. */
static struct {
    int64_t align;
    int nhints;
    char hints[TUNING_MAX_HINTS][TUNING_HINT_LEN];
} tuning;

ra_status ra_h5_tuning_set(const ra_h5_tuning *t)
{
    if (t->align < 0)
        return ra_error_set(RA_ERR_ARG, "alignment %lld is negative",
                            (long long)t->align);
    if (t->nhints < 0 || t->nhints > TUNING_MAX_HINTS)
        return ra_error_set(RA_ERR_ARG, "%d MPI-IO hints: at most %d",
                            t->nhints, TUNING_MAX_HINTS);
    for (int i = 0; i < t->nhints; i++) {
        const char *eq = strchr(t->hints[i], '=');
        if (!eq || eq == t->hints[i] || !eq[1] ||
            strlen(t->hints[i]) >= TUNING_HINT_LEN)
            return ra_error_set(RA_ERR_ARG, "MPI-IO hint '%s' is not "
                                "key=value (under %d characters)",
                                t->hints[i], TUNING_HINT_LEN);
    }
    tuning.align = t->align;
    tuning.nhints = t->nhints;
    for (int i = 0; i < t->nhints; i++)
        strcpy(tuning.hints[i], t->hints[i]);
    return RA_OK;
}

/* The hints as an MPI_Info (MPI_INFO_NULL when there are none). */
static int tuning_info(MPI_Info *info)
{
    *info = MPI_INFO_NULL;
    if (tuning.nhints == 0)
        return MPI_SUCCESS;
    int rc = MPI_Info_create(info);
    for (int i = 0; i < tuning.nhints && rc == MPI_SUCCESS; i++) {
        char key[TUNING_HINT_LEN];
        const char *eq = strchr(tuning.hints[i], '=');
        memcpy(key, tuning.hints[i], (size_t)(eq - tuning.hints[i]));
        key[eq - tuning.hints[i]] = '\0';
        rc = MPI_Info_set(*info, key, eq + 1);
    }
    return rc;
}

herr_t h5io_fapl_tune(hid_t fapl, MPI_Comm comm)
{
    MPI_Info info = MPI_INFO_NULL;
    int ok = tuning_info(&info) == MPI_SUCCESS &&
             H5Pset_fapl_mpio(fapl, comm, info) >= 0 &&
             /* every rank reads and writes metadata together: one rank
              * touches the file system, the others receive it */
             H5Pset_all_coll_metadata_ops(fapl, 1) >= 0 &&
             H5Pset_coll_metadata_write(fapl, 1) >= 0 &&
             (tuning.align == 0 ||
              H5Pset_alignment(fapl, TUNING_ALIGN_THRESHOLD,
                               (hsize_t)tuning.align) >= 0);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info); /* H5Pset_fapl_mpio keeps its own copy */
    return ok ? 0 : -1;
}
