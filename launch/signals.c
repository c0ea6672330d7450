/* signals.c: Ctrl-C, a batch system's time limit, or mpirun passing either
 * on to the ranks must not leave a temporary output file behind. The
 * handler does only async-signal-safe work: it unlinks the names that io/
 * published (static buffers, each set before its file is created and
 * cleared after it is renamed or removed), then restores the default action
 * and raises the signal again, so that the process dies of it and the exit
 * status says so. SIGKILL cannot be caught: io/tmpfile.c removes what it
 * leaves. */
#include <signal.h>
#include <string.h>
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
}
