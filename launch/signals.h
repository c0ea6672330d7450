/* signals.h: what the command does on SIGINT, SIGTERM and SIGPIPE, and
 * with standard streams that are closed or whose reader has gone. */
#ifndef RA_SIGNALS_H
#define RA_SIGNALS_H

/* Installs the handlers of SIGINT and SIGTERM (after MPI_Init, so that they
 * replace any the MPI library set): remove the temporary output files
 * being written (h5io_tmp_active()), then die of the same signal. SIGPIPE
 * is ignored: a line written to a closed pipe is lost, the run goes on. */
void cli_signals_install(void);

/* Reopens each of the standard streams 0, 1, 2 that is closed on
 * /dev/null, so that no file the command opens takes its number (and
 * receives its lines). A rank whose parent is mpirun writing into a pipe
 * (no --tag-output and the like) then writes its lines into that pipe
 * itself, line-buffered, so that a pipe whose reader has gone costs
 * mpirun nothing to deliver (Open MPI 4 ends the job after ten failed
 * writes). Call first thing in main. */
void cli_streams_open(void);

/* Under a launcher (mpirun): when the reader of the launcher's standard
 * output or error (the parent's, where this rank's lines end up) has gone,
 * as in `mpirun ... | head -1`, points this rank's stream of the same
 * number at /dev/null for good: mpirun ends the whole job after about ten writes it
 * cannot deliver (Open MPI 4's SIGPIPE handler, whose abort then crashes
 * in PMIx_Finalize). Cheap (two open()s); the watchdog's thread calls it
 * every tick. Linux /proc; elsewhere it does nothing. */
void cli_streams_watch(void);

#endif /* RA_SIGNALS_H */
