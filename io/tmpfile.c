/* tmpfile.c: the temporary files of atomic writes, and who owns them.
 *
 * A temporary file is DIR/.NAME.tmp.HOST.NS.PID.START.NONCE: the short host
 * name, the inode of the PID namespace (/proc/self/ns/pid), the PID and the
 * start time of the process (field 22 of /proc/self/stat, clock ticks since
 * boot) that created it, and a random 32-bit nonce. A process on this host
 * and in this PID namespace owns such a file when /proc/PID/stat exists
 * with that start time; a PID reused by another process has another start
 * time, so it is not mistaken for the owner. A file whose owner is gone is
 * stale (its writer was killed by SIGKILL) and the next writer into the
 * directory removes it; files of other hosts or namespaces are never
 * judged. The names of the temporary files being written are also
 * published here for the signal handler of the command line
 * (launch/signals.c). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

/* A process as the temporary names record it. */
typedef struct {
    char host[65];
    unsigned long long ns, start;
    long pid;
} tmp_owner;

/* Field 22 (starttime) of /proc/PID/stat; 0 when the process is gone or a
 * zombie (dead, not yet reaped). */
static unsigned long long proc_start(long pid)
{
    char path[64], buf[1024];
    unsigned long long start = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (!(f = fopen(path, "r")))
        return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name (field 2) may hold spaces: count after its ')' */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0;
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p)
        start = strtoull(p + 1, NULL, 10);
    return start;
}

/* The PID namespace inode of process pid ("self" when pid is 0). */
static unsigned long long proc_pidns(long pid)
{
    char path[64], link[64];
    ssize_t n;

    if (pid)
        snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
    else
        snprintf(path, sizeof path, "/proc/self/ns/pid");
    n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return 0;
    link[n] = '\0';
    return strtoull(link + strcspn(link, "0123456789"), NULL, 10);
}

/* This process, computed once. */
static const tmp_owner *owner_self(void)
{
    static tmp_owner me;

    if (me.pid)
        return &me;
    if (gethostname(me.host, sizeof me.host - 1) != 0 || !me.host[0])
        snprintf(me.host, sizeof me.host, "localhost");
    me.host[strcspn(me.host, ".")] = '\0'; /* short name: no dots */
    for (char *c = me.host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '-'))
            *c = '-';
    me.ns = proc_pidns(0);
    me.pid = (long)getpid();
    me.start = proc_start(me.pid);
    return &me;
}

ra_status h5io_tmp_name(const char *dir, const char *base, char *out)
{
    const tmp_owner *me = owner_self();
    struct timespec ts;
    uint64_t z;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    z = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^
        (uint64_t)ts.tv_sec * 0xbf58476d1ce4e5b9ull ^ (uint64_t)rand();
    z ^= z >> 31;
    n = snprintf(out, PATH_MAX, "%s/.%s.tmp.%s.%llu.%ld.%llu.%08x", dir, base,
                 me->host, me->ns, me->pid, me->start,
                 (unsigned)(z ^ (z >> 32)));
    if (n < 0 || n >= PATH_MAX)
        return ra_error_set(RA_ERR_ARG, "%s/%s: output path is too long", dir,
                            base);
    return RA_OK;
}

/* Parses a directory entry as a temporary name; 1 and *o on success. */
static int tmp_parse(const char *entry, tmp_owner *o)
{
    const char *f[5], *end = entry + strlen(entry);
    char host[65];

    if (entry[0] != '.')
        return 0;
    for (int i = 4; i >= 0; i--) { /* NONCE, START, PID, NS, HOST */
        while (end > entry && end[-1] != '.')
            end--;
        if (end <= entry + 1)
            return 0;
        f[i] = end;
        end--; /* the dot */
    }
    /* what precedes HOST must be ".NAME.tmp" with NAME non-empty */
    if (end - entry < 6 || strncmp(end - 4, ".tmp", 4) != 0)
        return 0;
    size_t hl = (size_t)(f[1] - f[0] - 1);
    if (hl == 0 || hl >= sizeof host)
        return 0;
    memcpy(host, f[0], hl);
    host[hl] = '\0';
    char *e1, *e2, *e3, *e4;
    o->ns = strtoull(f[1], &e1, 10);
    o->pid = strtol(f[2], &e2, 10);
    o->start = strtoull(f[3], &e3, 10);
    (void)strtoul(f[4], &e4, 16);
    if (*e1 != '.' || *e2 != '.' || *e3 != '.' || *e4 != '\0' ||
        e4 - f[4] != 8 || o->pid <= 0)
        return 0;
    snprintf(o->host, sizeof o->host, "%s", host);
    return 1;
}

/* 1: the owner runs; 0: it is gone; -1: it cannot be told from here. */
static int tmp_owner_alive(const tmp_owner *o)
{
    const tmp_owner *me = owner_self();

    if (strcmp(o->host, me->host) != 0 || o->ns != me->ns || !me->ns)
        return -1;
    return proc_start(o->pid) == o->start && o->start != 0;
}

/* Calls visit(dir, entry, alive) for every temporary file of dir. */
static int tmp_scan(const char *dir,
                    void (*visit)(const char *, const char *, int, void *),
                    void *arg)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int count = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        tmp_owner o;
        if (!tmp_parse(e->d_name, &o))
            continue;
        visit(dir, e->d_name, tmp_owner_alive(&o), arg);
        count++;
    }
    closedir(d);
    return count;
}

static void sweep_one(const char *dir, const char *entry, int alive,
                      void *arg)
{
    char path[PATH_MAX];
    struct stat sb;

    (void)arg;
    if (alive != 0 || snprintf(path, sizeof path, "%s/%s", dir, entry) >=
                          (int)sizeof path)
        return;
    if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        unlink(path);
}

void h5io_tmp_sweep(const char *dir)
{
    tmp_scan(dir, sweep_one, NULL);
}

typedef struct {
    FILE *out;
    int stale;
} list_ctx;

static void list_one(const char *dir, const char *entry, int alive,
                     void *arg)
{
    list_ctx *c = arg;
    if (alive != 0)
        return;
    if (c->stale++ == 0)
        fprintf(c->out, "stale temporary files (their writer is gone; the "
                "next write into %s removes them):\n", dir);
    fprintf(c->out, "  %s/%s\n", dir, entry);
}

void h5io_tmp_list(const char *path, FILE *out)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    list_ctx c = {out, 0};

    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s",
                 slash == path ? 1 : (int)(slash - path), path);
    tmp_scan(dir, list_one, &c);
}

/* ---- the temporary files being written, for the signal handler ---- */

/* A command writes at most H5IO_TMP_SLOTS files at once (run: the HDF5
 * output and its --json summary); each slot is valid while its flag is
 * set, so that the handler never reads a name being copied. */
static char tmp_active[H5IO_TMP_SLOTS][PATH_MAX];
static volatile sig_atomic_t tmp_active_set[H5IO_TMP_SLOTS];

void h5io_tmp_publish(const char *tmp)
{
    for (int i = 0; i < H5IO_TMP_SLOTS; i++) {
        if (tmp_active_set[i])
            continue;
        snprintf(tmp_active[i], sizeof tmp_active[i], "%s", tmp);
        tmp_active_set[i] = 1;
        return;
    }
}

void h5io_tmp_unpublish(const char *tmp)
{
    for (int i = 0; i < H5IO_TMP_SLOTS; i++)
        if (tmp_active_set[i] && strcmp(tmp_active[i], tmp) == 0)
            tmp_active_set[i] = 0;
}

const char *h5io_tmp_active(int slot)
{
    return slot >= 0 && slot < H5IO_TMP_SLOTS && tmp_active_set[slot]
               ? tmp_active[slot] : NULL;
}
