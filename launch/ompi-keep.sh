# ompi-keep.sh: sourced by launch/test.sh and .ci/run before they run
# tests side by side (ctest -j).
# Open MPI 4.1 keeps its session folders in ${TMPDIR:-/tmp}/ompi.<host>.<uid>;
# a job at its end deletes the files there and removes the folder when it
# is then empty. A job of another test that starts at that moment fails
# with "orte_session_dir failed" (seen once in CI). A folder of ours
# inside (jobs leave folders they did not make) keeps it from being empty
# until the sourcing shell exits; then it goes, and the top folder too
# when nothing else is in it.
ra_ompi_top="${TMPDIR:-/tmp}/ompi.$(hostname -s).$(id -u)"
ra_ompi_keep="$ra_ompi_top/.ringattn-tests-$$"
if mkdir -p -m 700 -- "$ra_ompi_top" 2>/dev/null &&
    mkdir -- "$ra_ompi_keep" 2>/dev/null; then
  trap 'rmdir -- "$ra_ompi_keep" "$ra_ompi_top" 2>/dev/null || true' EXIT
fi
