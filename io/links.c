/* links.c: the soft and external links of a file as `info` shows them:
 * which it follows to a dataset, and which it cannot (dangling, or an
 * external target that is not a regular file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

int h5io_link_followable(hid_t file, const char *path, const char *name)
{
    char full[1024];
    snprintf(full, sizeof full, "/%s", name);
    if (h5io_link_check(file, path, full) != RA_OK)
        return 0;
    return H5Oexists_by_name(file, full, H5P_DEFAULT) > 0;
}

/* "-> /a/b (soft)" or "-> other.h5:/a (external)" into buf. */
static void link_target(hid_t file, const char *name, const H5L_info_t *link,
                        char *buf, size_t len)
{
    const char *target = "?", *obj = "?";
    unsigned flags;
    char *val = malloc(link->u.val_size ? link->u.val_size : 1);
    snprintf(buf, len, "-> (unreadable)");
    if (val && H5Lget_val(file, name, val, link->u.val_size, H5P_DEFAULT) >= 0) {
        if (link->type == H5L_TYPE_SOFT)
            snprintf(buf, len, "-> %s (soft)", val);
        else if (link->type == H5L_TYPE_EXTERNAL &&
                 H5Lunpack_elink_val(val, link->u.val_size, &flags, &target,
                                     &obj) >= 0)
            snprintf(buf, len, "-> %s:%s (external)", target, obj);
    }
    free(val);
}

typedef struct {
    FILE *out;
    const char *path;
    int count;
} links_ctx;

static herr_t link_print(hid_t file, const char *name, const H5L_info_t *link,
                         void *arg)
{
    links_ctx *c = arg;
    char target[1200];
    if (link->type == H5L_TYPE_HARD)
        return 0;
    link_target(file, name, link, target, sizeof target);
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    const int ok = h5io_link_followable(file, c->path, name);
    h5io_quiet_end(&quiet);
    if (!ok)
        ra_error_clear();
    fprintf(c->out, "  /%s %s%s\n", name, target,
            ok ? ", followed" : ", not followed (dangling, or not a regular "
                                "file)");
    c->count++;
    return 0;
}

void h5io_links_list(hid_t file, const char *path, FILE *out)
{
    links_ctx c = {out, path, 0};
    fprintf(out, "links:\n");
    H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, link_print, &c);
    if (c.count == 0)
        fprintf(out, "  (none)\n");
}
