/* signals.h: what the command does on SIGINT and SIGTERM. */
#ifndef RA_SIGNALS_H
#define RA_SIGNALS_H

/* Installs the handlers of SIGINT and SIGTERM (after MPI_Init, so that they
 * replace any the MPI library set): remove the temporary output files
 * being written (h5io_tmp_active()), then die of the same signal. */
void cli_signals_install(void);

#endif /* RA_SIGNALS_H */
