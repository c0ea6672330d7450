#!/usr/bin/env bash
# e2e_logits.sh RINGATTN NP PYTHON: softcap and sinks (issue 42) from the
# command line at NP ranks: gen (GQA, padding lengths), /sinks written
# beside the inputs -> run --softcap CAP --sinks /sinks on several
# strategies and masks -> verify (fp64, reading the run's record), info
# showing the record; run --backward --softcap (and gen --sinks: /dsinks) ->
# verify --backward, its refusal of a forward with another softcap or
# sinks; a changed /dsinks fails verify --backward; verify of a record
# changed after the run fails; bench --softcap --sinks checks and compares;
# the refusals exit 2 with one line naming the option or the dataset.
set -euo pipefail
ringattn=$1
np=$2
python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np "$np" --oversubscribe)
fail() { echo "e2e_logits FAIL (P=$np): $*" >&2; exit 1; }

"${mpi[@]}" "$ringattn" gen --out in.h5 --batch 2 --seq 157 --heads 4 \
    --kv-heads 2 --dim 16 --lens random --seed 42 > /dev/null
"$python" - <<'PY'
import h5py, numpy as np
with h5py.File("in.h5", "a") as f:
    f["/sinks"] = np.array([0.5, 2.0, 3.5, 5.0], dtype=np.float32)
    f["/sinks_nan"] = np.array([0.0, np.nan, 1.0, 2.0], dtype=np.float32)
    f["/sinks_short"] = np.zeros(3, dtype=np.float32)
PY
run_verify() { # run_verify NAME ARGS...: run, then verify --all passes
    local name=$1; shift
    "${mpi[@]}" "$ringattn" run --in in.h5 --out "out-$name.h5" --quiet \
        "$@" > /dev/null || fail "run $name"
    "$ringattn" verify --in in.h5 --out "out-$name.h5" --all \
        > "verify-$name.txt" || fail "verify $name: $(cat "verify-$name.txt")"
}
run_verify ring --causal --softcap 2.5 --sinks /sinks
run_verify ulysses --strategy ulysses --window 9,2 --softcap 1.5 \
    --sinks /sinks
run_verify tree --strategy tree --alibi --softcap 3 --sinks /sinks
run_verify allgather --strategy allgather --causal --softcap 2
"$ringattn" info out-ring.h5 > info.txt
grep -q 'softcap *= 2.5' info.txt || fail "info: no softcap: $(cat info.txt)"
grep -q 'sinks_dataset *= "/sinks"' info.txt || fail "info: no sinks"

# the backward of a softcapped forward, from its file and recomputed
"${mpi[@]}" "$ringattn" gen --out bin.h5 --batch 2 --seq 61 --heads 4 \
    --kv-heads 2 --dim 8 --backward --sinks --seed 7 > /dev/null
"${mpi[@]}" "$ringattn" run --in bin.h5 --out bf.h5 --causal --softcap 2 \
    --quiet > /dev/null || fail "run for the backward"
for how in "--fwd bf.h5" "--recompute"; do
    # shellcheck disable=SC2086
    "${mpi[@]}" "$ringattn" run --backward --in bin.h5 $how --out bg.h5 \
        --force --causal --softcap 2 > /dev/null || fail "backward $how"
    "$ringattn" verify --backward --in bin.h5 --out bg.h5 --all > vb.txt ||
        fail "verify --backward ($how): $(cat vb.txt)"
done
set +e
"$ringattn" run --backward --in bin.h5 --fwd bf.h5 --out bg2.h5 --causal \
    2> err.txt > /dev/null
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "its softcap (attribute softcap" err.txt ||
    fail "backward without the forward's softcap: exit $rc: $(cat err.txt)"

# the backward with sinks (gen --sinks): from the forward's record and
# recomputed with --sinks, verify --backward checks /dsinks; a changed
# /dsinks fails it
"${mpi[@]}" "$ringattn" run --in bin.h5 --out bfs.h5 --causal --softcap 2 \
    --sinks /sinks --quiet > /dev/null || fail "run with sinks for backward"
for how in "--fwd bfs.h5" "--recompute --sinks /sinks"; do
    # shellcheck disable=SC2086
    "${mpi[@]}" "$ringattn" run --backward --in bin.h5 $how --out bgs.h5 \
        --force --causal --softcap 2 > /dev/null || fail "backward $how"
    "$ringattn" verify --backward --in bin.h5 --out bgs.h5 --sample 40 \
        > vbs.txt || fail "verify --backward sinks ($how): $(cat vbs.txt)"
    grep -q "dsinks [0-9.e-]*," vbs.txt || fail "no dsinks: $(cat vbs.txt)"
done
"$python" -c "
import h5py
with h5py.File('bgs.h5', 'a') as f:
    f['/dsinks'][1] = f['/dsinks'][1] * 1.05 + 1e-3"
if "$ringattn" verify --backward --in bin.h5 --out bgs.h5 > vbs.txt; then
    fail "verify --backward passed a changed /dsinks: $(cat vbs.txt)"
fi
set +e
"${mpi[@]}" "$ringattn" run --backward --in bin.h5 --fwd bf.h5 --out bg3.h5 \
    --causal --softcap 2 --sinks /sinks 2> err.txt > /dev/null
rc=$?
set -e
[ "$rc" = 2 ] && [ "$(grep -c '^ringattn:' err.txt)" = 1 ] &&
    grep -q -- "--sinks /sinks: the forward bf.h5 was run with no sinks" \
        err.txt || fail "backward --sinks on a forward without: $(cat err.txt)"

# a record that no longer says what the run did: verify must fail
"$python" -c "
import h5py
with h5py.File('out-ring.h5', 'a') as f: f.attrs['softcap'] = 2.0"
if "$ringattn" verify --in in.h5 --out out-ring.h5 --all > bad.txt; then
    fail "verify passed a changed softcap: $(cat bad.txt)"
fi

refuse() { # refuse NAME GREP ARGS...: exit 2, one ringattn: line, no file
    local name=$1 want=$2; shift 2
    set +e
    "${mpi[@]}" "$ringattn" run --in in.h5 --out refused.h5 --quiet "$@" \
        2> err.txt > /dev/null
    local rc=$?
    set -e
    [ "$rc" = 2 ] || fail "$name: exit $rc, expected 2"
    [ "$(grep -c '^ringattn:' err.txt)" = 1 ] || fail "$name: $(cat err.txt)"
    grep -q -- "$want" err.txt || fail "$name: message: $(cat err.txt)"
    [ ! -e refused.h5 ] || fail "$name left refused.h5"
}
refuse nan "dataset /sinks_nan" --sinks /sinks_nan
refuse short "dataset /sinks_short: the sinks must be one logit per query" \
    --sinks /sinks_short
refuse missing "--sinks /nope: no such dataset" --sinks /nope
refuse negative "softcap: -1 is not a finite number >= 0" --softcap -1
refuse gaussian "softcap: the gaussian score" --softcap 2 --score gaussian
refuse map "sinks: the attention map" --sinks /sinks --attn-map 0:4
# bench with both features: its fp64 check passes, a plain pass beside
"${mpi[@]}" "$ringattn" bench --seq 96 --heads 4 --kv-heads 2 --dim 16 \
    --causal --softcap 2 --sinks --reps 1 --warmup 0 --no-yardsticks \
    > bench.txt || fail "bench --softcap --sinks: $(cat bench.txt)"
grep -q "^# plain: ring N=96 .* with softcap sinks .* of plain)$" bench.txt &&
    grep -q " PASS " bench.txt || fail "bench: $(cat bench.txt)"
echo "e2e_logits PASS (P=$np)"
