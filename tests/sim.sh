#!/usr/bin/env bash
# tests/sim.sh PROGRAM: ringattn-sim (issue 40, parts 1, 2 and 6) under
# SimGrid SMPI, small enough for CI (under a minute): exact mode at P = 16
# matches the fp64 reference (ring with GQA and an odd length; hybrid with
# a window; the backward, N != M), the node-aware ring sees 4 simulated nodes of 4 ranks, the
# at-scale mode runs and injects time (the built-in profile's rate or a
# probe's), and bad input (a missing or malformed platform, an unknown
# host, more ranks than cores without --oversubscribe, an unknown option,
# a missing profile) exits 2 with one line naming it.
set -uo pipefail
program="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"
sim="$here/launch/ringattn-sim.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# exact: every row PASS, the echo names the mode and 4 nodes
exact() {
  local name="$1"; shift
  if ! "$sim" --program "$program" "$@" > "$tmp/out" 2>&1; then
    fail "$name: exit $? ($(tail -3 "$tmp/out"))"; return; fi
  grep -q '^# mode *exact' "$tmp/out" || fail "$name: no exact mode echoed"
  grep -q '^# ranks *16 on 4 nodes (4-4 per node)' "$tmp/out" ||
    fail "$name: the simulated nodes are not seen as nodes"
  grep -Eq '^ +16 +4 exact .* PASS$' "$tmp/out" || fail "$name: no PASS row: $(tail -1 "$tmp/out")"
}
exact "ring gqa causal" -n 16 --ranks-per-node 4 --platform ethernet-1024 \
  --seq 1000 --heads 4 --kv-heads 2 --dim 32 --causal
exact "hybrid window" -n 16 --ranks-per-node 4 --seq 777 --heads 8 --kv-heads 4 \
  --dim 16 --window 50,20 --strategy hybrid
exact "backward causal cross" -n 16 --ranks-per-node 4 --seq 333 --kv-seq 401 \
  --heads 4 --kv-heads 2 --dim 16 --causal --backward

# at scale: runs, says so, injects the kernels' time
if "$sim" --program "$program" -n 16 --mode scale --seq 65536 --heads 8 \
    --dim 64 --causal > "$tmp/out" 2>&1; then
  grep -q '^# mode *scale' "$tmp/out" || fail "scale: no scale mode echoed"
  awk '/^ +16 +16 scale/ {ok = $8 > 0} END {exit !ok}' "$tmp/out" ||
    fail "scale: no time injected: $(tail -1 "$tmp/out")"
else
  fail "scale: exit $? ($(tail -3 "$tmp/out"))"
fi

# at scale with a probe's profile: its rate is the one injected
if "$sim" --program "$program" -n 4 --mode scale --seq 4096 --heads 8 --dim 64 \
    --profile "$here/bench/records/probe-p2.json" > "$tmp/out" 2>&1; then
  grep -q '^# kernel rate .*(.*probe-p2.json)' "$tmp/out" ||
    fail "--profile: the echo does not name the profile"
else
  fail "--profile: exit $? ($(tail -3 "$tmp/out"))"
fi

# bad input: exit 2, one line naming the problem
refused() {
  local name="$1" pattern="$2"; shift 2
  "$sim" --program "$program" "$@" > "$tmp/out" 2>&1
  local rc=$?
  [ "$rc" = 2 ] || fail "$name: exit $rc, expected 2"
  [ "$(wc -l < "$tmp/out")" = 1 ] || fail "$name: not one line: $(head -3 "$tmp/out")"
  grep -q -- "$pattern" "$tmp/out" || fail "$name: '$(cat "$tmp/out")' does not name $pattern"
}
printf '<platform version="4.1">\n  <zone id="z"\n</platform>\n' > "$tmp/bad.xml"
printf 'node-0\nnode-x\n' > "$tmp/hosts"
refused "missing platform" "--platform $tmp/none.xml: no such file" \
  -n 2 --platform "$tmp/none.xml"
refused "malformed platform" "malformed platform" -n 2 --platform "$tmp/bad.xml"
refused "unknown host" "line 2: unknown host 'node-x'" -n 2 --hostfile "$tmp/hosts"
refused "more ranks than cores" "9 ranks on host node-0 of 8 cores" \
  -n 9 --ranks-per-node 9
refused "unknown option" "unknown option '--sequence'" -n 2 --sequence 5
refused "missing profile" "--profile: $tmp/none.json: cannot open" -n 2 \
  --mode scale --profile "$tmp/none.json"
"$sim" --program "$program" -n 9 --ranks-per-node 9 --oversubscribe --mode scale \
  --seq 900 --heads 2 --dim 16 > "$tmp/out" 2>&1 ||
  fail "--oversubscribe: exit $? ($(tail -2 "$tmp/out"))"

[ "$failures" = 0 ] && echo "sim: all passed"
exit $((failures > 0))
