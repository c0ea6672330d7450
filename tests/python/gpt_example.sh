#!/bin/sh
# gpt_example.sh: ctest python_gpt_example (issue 41, the worked example):
# examples/gpt_ringattn.py trains 20 steps on 2 ranks, then on 1 rank, whose
# losses must match the 2-rank run's within 1e-4 (relative) at every step
# (the example exits 1 otherwise).
#   gpt_example.sh SRC PYTHON MPIEXEC [MPIEXEC_FLAGS...]
set -eu
src=$1; py=$2; mpi=$3; shift 3
tmp=$(mktemp -d)  # under $TMPDIR or /tmp
trap 'rm -rf "$tmp"' EXIT
"$mpi" -np 2 "$@" "$py" "$src/examples/gpt_ringattn.py" --steps 20 \
    --print-every 10 --out "$tmp/p2.json"
"$py" "$src/examples/gpt_ringattn.py" --steps 20 --print-every 10 \
    --out "$tmp/p1.json" --same-as "$tmp/p2.json"
