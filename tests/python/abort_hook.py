"""One rank's uncaught exception ends the job (issue 39, class 11): the
abort hook that `import ringattn` installs aborts the communicator after
the traceback, so that the other ranks, waiting in a ringattn call with
no stall timeout, end at once instead of waiting for ever (before: the
raising rank waited in MPI_Finalize and the others in the agreement's
Allgather, for ever).

    abort_hook.py NP MPIEXEC [FLAGS...]   (ctest python_abort_hook_pNP)

runs itself under `MPIEXEC -np NP FLAGS` for each case: rank 1 raises a
RuntimeError, or a KeyboardInterrupt, while the other ranks call
ringattn.forward with stall_timeout=0. The job must end with a non-zero
exit and rank 1's traceback; a job that has not ended by the deadline
(far beyond a healthy end, below ctest's TIMEOUT) fails the test and is
killed."""
import os
import subprocess
import sys

CASES = {"exception": "RuntimeError: rank 1 leaves",
         "interrupt": "KeyboardInterrupt"}
# Seconds a job may take to end: a guard against a hang, not a measure.
DEADLINE = 100


def worker(case):
    """One rank of the job: rank 1 raises, the others call ringattn."""
    import numpy as np
    from mpi4py import MPI
    import ringattn
    comm = MPI.COMM_WORLD
    comm.Barrier()  # every rank has imported ringattn (and its hook)
    if comm.Get_rank() == 1:
        if case == "interrupt":
            raise KeyboardInterrupt
        raise RuntimeError("rank 1 leaves")
    q = np.ones((1, 3, 1, 4), np.float32)
    ringattn.forward(q, q, q, comm, order="bnhd",
                     layout="contiguous", stall_timeout=0)
    print(f"rank {comm.Get_rank()}: returned", flush=True)


def run(np_, mpiexec, flags, case):
    """The job of one case; a message when it misbehaves, else None."""
    cmd = [mpiexec, "-np", str(np_)] + flags + [
        sys.executable, os.path.abspath(__file__), "--worker", case]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as job:
        try:
            _, err = job.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            job.terminate()  # mpirun ends its ranks on SIGTERM
            try:
                job.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
                job.communicate()
            return f"{case}: the job did not end (stopped after {DEADLINE} s)"
    if job.returncode == 0 or CASES[case] not in err:
        return f"{case}: exit {job.returncode}, stderr {err[-2000:]!r}"
    print(f"{case}: the job ended, exit {job.returncode}")
    return None


def main(argv):
    if argv[1] == "--worker":
        worker(argv[2])
        return 0
    np_, mpiexec, flags = int(argv[1]), argv[2], argv[3:]
    failures = [m for m in (run(np_, mpiexec, flags, c) for c in CASES) if m]
    for m in failures:
        print(f"FAIL {m}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
