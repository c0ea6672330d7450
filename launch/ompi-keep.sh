# ompi-keep.sh: sourced by launch/test.sh and .ci/run before they run
# tests side by side (ctest -j).
# Open MPI 4.1 keeps its session folders in ${TMPDIR:-/tmp}/ompi.<host>.<uid>;
# a job at its end deletes the files there and removes the folder when it
# is then empty. A job of another test that starts at that moment fails
# with "orte_session_dir failed" (seen once in CI). A folder of ours
# inside (jobs leave folders they did not make) keeps it from being empty
# until the sourcing shell exits; then it goes, and the top folder too
# when nothing else is in it. The sourcing shell's own EXIT trap, set
# before, still runs after that (with the shell's exit status); a shell
# that sets its EXIT trap later calls ra_ompi_keep_release in it.
# shellcheck shell=bash
ra_ompi_top="${TMPDIR:-/tmp}/ompi.$(hostname -s).$(id -u)"
ra_ompi_keep="$ra_ompi_top/.ringattn-tests-$$"

# Removes our folder, and the top one when it is then empty; keeps $?.
ra_ompi_keep_release() {
  local status=$?
  rmdir -- "$ra_ompi_keep" "$ra_ompi_top" 2>/dev/null || true
  return "$status"
}

if mkdir -p -m 700 -- "$ra_ompi_top" 2>/dev/null &&
    mkdir -- "$ra_ompi_keep" 2>/dev/null; then
  # `trap -p EXIT` prints "trap -- 'COMMAND' EXIT", quoted for eval
  eval "ra_ompi_trap=($(trap -p EXIT))"
  # shellcheck disable=SC2064 # the caller's command, as it is now
  trap "ra_ompi_keep_release; ${ra_ompi_trap[2]:-}" EXIT
fi
