/* signals.c: signals and the standard streams. Ctrl-C, a batch system's
 * time limit, or mpirun passing either on to the ranks must not leave a
 * temporary output file behind: the handler does only async-signal-safe
 * work: it unlinks the names that io/ published (static buffers, each set
 * before its file is created and cleared after it is renamed or removed),
 * then restores the default action and raises the signal again, so that
 * the process dies of it and the exit status says so. SIGKILL cannot be
 * caught: io/tmpfile.c removes what it leaves.
 *
 * A closed or broken output stream must never cost a run or its files
 * (issue 39, class 13): SIGPIPE is ignored (a failed write of a line is
 * dropped, never fatal), a closed standard stream is reopened on /dev/null
 * before anything else can take its number, and a rank under a launcher
 * stops writing once the reader of the launcher's own output has gone
 * (Open MPI's mpirun ends the whole job after ten SIGPIPEs on it). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5io.h"
#include "signals.h"

static void on_signal(int sig)
{
    sigset_t mask;

    for (int i = 0; i < H5IO_TMP_SLOTS; i++) {
        const char *tmp = h5io_tmp_active(i);
        if (tmp)
            unlink(tmp);
    }
    signal(sig, SIG_DFL);
    sigemptyset(&mask);
    sigaddset(&mask, sig);
    sigprocmask(SIG_UNBLOCK, &mask, NULL);
    raise(sig);
}

void cli_signals_install(void)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaction(sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a write to a closed pipe fails, no more */
}

/* Whether the parent is mpirun itself (the ranks of its own node), with
 * none of its options that rewrite the ranks' lines (tags, timestamps,
 * files, xterms), which a rank writing straight to its streams would
 * lose. */
static int parent_is_plain_mpirun(void)
{
    static const char *const rewrites[] = {
        "OMPI_MCA_orte_tag_output", "OMPI_MCA_orte_timestamp_output",
        "OMPI_MCA_orte_output_filename", "OMPI_MCA_orte_xterm"};
    char path[64], comm[32] = "";
    if (!getenv("OMPI_COMM_WORLD_RANK"))
        return 0;
    for (size_t i = 0; i < sizeof rewrites / sizeof *rewrites; i++)
        if (getenv(rewrites[i]))
            return 0;
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)getppid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const int got = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    return got && (!strcmp(comm, "mpirun") || !strcmp(comm, "mpiexec") ||
                   !strcmp(comm, "orterun"));
}

/* A rank of mpirun's own node whose launcher writes into a pipe (`mpirun
 * ... | head -1`) writes its lines into that pipe itself instead of
 * handing them to mpirun: once the reader has gone, its writes fail
 * (SIGPIPE is ignored) and mpirun has nothing to deliver, whereas Open
 * MPI 4's mpirun ends the whole job after ten lines it could not write.
 * Files and terminals keep mpirun's forwarding. */
static void streams_direct(void)
{
    if (!parent_is_plain_mpirun())
        return;
    for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof path, "/proc/%ld/fd/%d", (long)getppid(), fd);
        if (stat(path, &st) != 0 || !S_ISFIFO(st.st_mode))
            continue;
        const int w = open(path, O_WRONLY | O_CLOEXEC);
        if (w < 0)
            continue;
        dup2(w, fd);
        close(w);
        if (fd == STDOUT_FILENO) /* each line leaves at once: mpirun may
                                    end a rank before its exit flushes */
            setvbuf(stdout, NULL, _IOLBF, 0);
    }
}

void cli_streams_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        const int nul = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (nul >= 0 && nul != fd) { /* a lower number was closed too */
            dup2(nul, fd);
            close(nul);
        }
    }
    streams_direct();
}

/* Whether fd of process pid is a pipe whose reader has gone: its write
 * end, opened anew, polls POLLERR when nothing reads. */
static int pipe_reader_gone(long pid, int fd)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%ld/fd/%d", pid, fd);
    if (stat(path, &st) != 0 || !S_ISFIFO(st.st_mode))
        return 0;
    struct pollfd w = {open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC), 0, 0};
    if (w.fd < 0)
        return 0;
    const int gone = poll(&w, 1, 0) == 1 && (w.revents & POLLERR);
    close(w.fd);
    return gone;
}

/* Points the streams whose launcher's reader has gone at /dev/null; the
 * caller holds streams_lock. */
static void streams_check(void)
{
    static int quiet[3]; /* per stream: pointed at /dev/null */
    const long parent = (long)getppid();
    for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
        if (quiet[fd] || !pipe_reader_gone(parent, fd))
            continue;
        const int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (nul < 0)
            return;
        dup2(nul, fd); /* this rank's lines have no reader left */
        close(nul);
        quiet[fd] = 1;
    }
}

void cli_streams_watch(void)
{
    static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
    if (!(getenv("OMPI_COMM_WORLD_RANK") || getenv("PMIX_RANK")))
        return;
    if (pthread_mutex_trylock(&streams_lock) != 0)
        return; /* the other thread is looking */
    streams_check();
    pthread_mutex_unlock(&streams_lock);
}
