#!/usr/bin/env bash
# sim-cost.sh ARGS...: what one simulation costs this machine. Runs
# launch/ringattn-sim.sh ARGS under /usr/bin/time -v and samples the
# simulator's /proc status every second; after its output prints
#   # cost: wall W s, peak RSS R MiB (VmHWM), peak anonymous A MiB (RssAnon)
# Folded blocks (SMPI shared allocations) map one small file many times:
# RSS counts every mapping, RssAnon only the memory of the process's own.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
/usr/bin/time -v -o "$log" "$here/ringattn-sim.sh" "$@" &
runner=$!
anon=0
descendants() { local c; for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done; }
while kill -0 "$runner" 2>/dev/null; do
  for p in $(descendants "$runner"); do
    a="$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)"
    [ -n "$a" ] && [ "$a" -gt "$anon" ] && anon=$a
  done
  sleep 1
done
rc=0
wait "$runner" || rc=$?
wall="$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log")"
rss="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")"
echo "# cost: wall $wall (h:mm:ss), peak RSS $((rss / 1024)) MiB (VmHWM)," \
     "peak anonymous $((anon / 1024)) MiB (RssAnon)"
exit "$rc"
