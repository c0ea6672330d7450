/* outgroup.c: the one rule for the group an output's tensors live in
 * (--out-group, the out_group attribute), shared by the writer, which
 * refuses a name before any work, and the readers (verify, info, plot-map),
 * which refuse a recorded name they could not follow. */
#include <string.h>

#include "h5io.h"

/* Names a reader looks for at the root of an output: a group of that name
 * would hide them. */
static const char *const root_names[] = {"o", "lse", "attn_map", NULL};

_Static_assert(H5IO_OUT_GROUP_MAX == 255, "the message names the limit");

const char *h5io_out_group_problem(const char *group)
{
    if (group[0] != '/' || group[1] == '\0')
        return "it must be absolute and below the root, like /layer3";
    if (strlen(group) > H5IO_OUT_GROUP_MAX)
        return "it is longer than 255 characters";
    for (const char *p = group + 1; *p;) {
        const size_t len = strcspn(p, "/");
        if (len == 0)
            return "it has an empty component (//)";
        if ((len == 1 && p[0] == '.') ||
            (len == 2 && p[0] == '.' && p[1] == '.'))
            return "it has a component . or .., which HDF5 does not create";
        for (int i = 0; p == group + 1 && root_names[i]; i++)
            if (len == strlen(root_names[i]) &&
                strncmp(p, root_names[i], len) == 0)
                return "its first component would hide the dataset of that "
                       "name that readers look for at the root (o, lse, "
                       "attn_map)";
        p += len;
        p += *p == '/'; /* a trailing / is the group itself */
    }
    return NULL;
}
