/* sim_report.c: ringattn-sim's --json: bench's row (comm/perf/bench_rows.c,
 * the schema scaling-study.py reads) with what says it was simulated:
 * "simulated": true, "sim_mode", "platform", "injected_s", and the sim's
 * own verdict (at scale nothing is checked: "unchecked"). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "perf_json.h"
#include "sim.h"

int sim_json_check(const char *path, char *why, size_t n)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    if (access(dir, W_OK | X_OK) == 0)
        return 0;
    snprintf(why, n, "--json %s: the folder %s is not writable (%s)", path, dir,
             strerror(errno));
    return -1;
}

int sim_json_write(const char *path, const bench_result *r, const sim_row *sim)
{
    json_t *row = bench_json_row(r), *all = json_array();
    int rc = -1;
    if (row && all && json_object_set_new(row, "simulated", json_true()) == 0 &&
        json_object_set_new(row, "sim_mode", json_string(sim->mode)) == 0 &&
        json_object_set_new(row, "platform", perf_json_text(sim->platform)) ==
            0 &&
        json_object_set_new(row, "injected_s",
                            perf_json_fixed(sim->injected, "%.6e")) == 0 &&
        json_object_set_new(row, "verdict", json_string(sim->verdict)) == 0 &&
        json_array_append(all, row) == 0) {
        FILE *f = fopen(path, "w");
        rc = f ? perf_json_dump(f, json_incref(all), 15) : -1;
        if (f && fclose(f) != 0)
            rc = -1;
    }
    json_decref(row);
    json_decref(all);
    if (rc != 0 && errno == 0)
        errno = ENOMEM;
    return rc;
}
