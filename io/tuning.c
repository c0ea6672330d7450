/* tuning.c: how the file functions use MPI-IO on a parallel file system:
 * collective metadata, dataset alignment, MPI-IO hints. The one place that
 * shapes the file-access property list every collective open uses, from
 * the tuning each call brings (ra_h5_tuning; the library keeps none). */
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "internal.h"

enum {
    TUNING_MAX_HINTS = 32,
    TUNING_KEY_LEN = 256,
    /* objects at least this large start at a multiple of the alignment;
     * attributes and small datasets stay packed */
    TUNING_ALIGN_THRESHOLD = 64 * 1024,
};

ra_status h5io_tuning_check(const ra_h5_tuning *t, const char *path)
{
    if (!t)
        return RA_OK;
    if (t->align < 0)
        return ra_error_set(RA_ERR_ARG, "%s: MPI-IO tuning: alignment %lld "
                            "is negative", path, (long long)t->align);
    if (t->nhints < 0 || t->nhints > TUNING_MAX_HINTS ||
        (t->nhints > 0 && !t->hints))
        return ra_error_set(RA_ERR_ARG, "%s: MPI-IO tuning: %d hints: from "
                            "0 to %d, given", path, t->nhints,
                            TUNING_MAX_HINTS);
    for (int i = 0; i < t->nhints; i++) {
        const char *h = t->hints[i], *eq = h ? strchr(h, '=') : NULL;
        if (!eq || eq == h || !eq[1] || eq - h >= TUNING_KEY_LEN)
            return ra_error_set(RA_ERR_ARG, "%s: MPI-IO hint '%s' is not "
                                "key=value (a key under %d characters)",
                                path, h ? h : "(null)", TUNING_KEY_LEN);
    }
    return RA_OK;
}

/* The hints of t as an MPI_Info (MPI_INFO_NULL when there are none). */
static int tuning_info(const ra_h5_tuning *t, MPI_Info *info)
{
    *info = MPI_INFO_NULL;
    if (!t || t->nhints == 0)
        return MPI_SUCCESS;
    int rc = MPI_Info_create(info);
    for (int i = 0; i < t->nhints && rc == MPI_SUCCESS; i++) {
        char key[TUNING_KEY_LEN];
        const char *eq = strchr(t->hints[i], '=');
        memcpy(key, t->hints[i], (size_t)(eq - t->hints[i]));
        key[eq - t->hints[i]] = '\0';
        rc = MPI_Info_set(*info, key, eq + 1);
    }
    return rc;
}

herr_t h5io_fapl_tune(hid_t fapl, MPI_Comm comm, const ra_h5_tuning *t)
{
    MPI_Info info = MPI_INFO_NULL;
    int ok = tuning_info(t, &info) == MPI_SUCCESS &&
             H5Pset_fapl_mpio(fapl, comm, info) >= 0 &&
             /* every rank reads and writes metadata together: one rank
              * touches the file system, the others receive it */
             H5Pset_all_coll_metadata_ops(fapl, 1) >= 0 &&
             H5Pset_coll_metadata_write(fapl, 1) >= 0 &&
             (!t || t->align == 0 ||
              H5Pset_alignment(fapl, TUNING_ALIGN_THRESHOLD,
                               (hsize_t)t->align) >= 0);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info); /* H5Pset_fapl_mpio keeps its own copy */
    return ok ? 0 : -1;
}
