#!/usr/bin/env bash
# e2e_strategies.sh RINGATTN NP: every strategy end to end on files at NP
# ranks: gen (GQA, padding lengths, lengths NP does not divide) -> run
# --strategy S --causal -> verify (fp64), the strategy attribute in the
# output, and the refusals: ulysses with more ranks than heads, allgather
# over its memory limit, `run --strategy all`: exit 2, one line, no file.
set -euo pipefail
ringattn=$1
np=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np "$np" --oversubscribe)
fail() { echo "e2e_strategies FAIL (P=$np): $*" >&2; exit 1; }

"${mpi[@]}" "$ringattn" gen --out in.h5 --batch 2 --seq 203 --seq-kv 301 \
    --heads 4 --kv-heads 2 --dim 16 --lens random --seed 13 > /dev/null
for s in ring allgather tree ring-q ulysses hybrid; do
    "${mpi[@]}" "$ringattn" run --in in.h5 --out "out-$s.h5" --causal \
        --strategy "$s" > "log-$s.txt" || fail "run --strategy $s"
    grep -q "# strategy   $s" "log-$s.txt" || fail "$s: no strategy row"
    "${mpi[@]}" "$ringattn" verify --in in.h5 --out "out-$s.h5" --all \
        > "verify-$s.txt" || fail "verify of $s: $(cat "verify-$s.txt")"
    h5dump -a strategy "out-$s.h5" | grep -q "\"$s\"" ||
        fail "$s: strategy attribute missing"
done

refuse() { # refuse NAME GREP ARGS...: exit 2, one ringattn: line, no out.h5
    local name=$1 want=$2; shift 2
    set +e
    "${mpi[@]}" "$ringattn" run --in in.h5 --out refused.h5 "$@" 2> err.txt
    local rc=$?
    set -e
    [ "$rc" = 2 ] || fail "$name: exit $rc, expected 2"
    [ "$(grep -c '^ringattn:' err.txt)" = 1 ] || fail "$name: $(cat err.txt)"
    grep -q "$want" err.txt || fail "$name: message: $(cat err.txt)"
    [ ! -e refused.h5 ] || fail "$name left refused.h5"
    ls | grep -qv '^\(in\|out-.*\|log-.*\|verify-.*\|err\)\.\(h5\|txt\)$' &&
        fail "$name left a file: $(ls)"
    return 0
}
refuse "allgather over its limit" "above the memory limit of 1000 bytes" \
    --strategy allgather --mem-limit 1000
refuse "strategy all" "only bench runs every strategy" --strategy all
refuse "unknown strategy" "unknown strategy 'spiral'" --strategy spiral
if [ "$np" -gt 2 ]; then
    "${mpi[@]}" "$ringattn" gen --out in1.h5 --seq 64 --heads 2 --kv-heads 1 \
        --dim 8 --seed 3 > /dev/null
    set +e
    "${mpi[@]}" "$ringattn" run --in in1.h5 --out u.h5 --strategy ulysses \
        2> err.txt
    rc=$?
    set -e
    [ "$rc" = 2 ] || fail "ulysses P > H: exit $rc, expected 2"
    grep -q "runs on 1 to 2 ranks" err.txt || fail "ulysses: $(cat err.txt)"
    [ ! -e u.h5 ] || fail "ulysses refusal left u.h5"
fi
echo "e2e_strategies PASS (P=$np)"
