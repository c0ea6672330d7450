#!/usr/bin/env bash
# io-scaling.sh [BUILD_DIR] [DIR]: read and write bandwidth of `ringattn run`
# at P = 1..4 on one machine, with HDF5's default layout, with datasets
# aligned to 1 MiB, and with Open MPI's individual (not two-phase)
# collective I/O. The input (B = 8, N = 1024, H = 16, D = 128: 192 MiB of
# q, k, v; 64.5 MiB of o and lse written; little compute) goes to DIR
# (default: a fresh directory under the current one). Output:
# docs/bench/io-scaling.txt.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
dir=${2:-$(mktemp -d ra-io-XXXXXX)}
out=docs/bench/io-scaling.txt
export OMP_NUM_THREADS=1
trap 'rm -rf "$dir"' EXIT
mpirun -np 2 "$R" gen --out "$dir/in.h5" --force --batch 8 --seq 1024 --heads 16 --dim 128 >/dev/null
: >"$out"
for round in 1 2; do
  for np in 1 2 3 4; do
    for v in default align fcoll; do
      flags=()
      mca=()
      [ "$v" = align ] && flags=(--align 1048576)
      [ "$v" = fcoll ] && mca=(--mca fcoll individual)
      line=$(mpirun -np "$np" --oversubscribe "${mca[@]}" "$R" run \
               --in "$dir/in.h5" --out "$dir/out.h5" --force "${flags[@]}" |
             grep '^ringattn run' | sed 's/.*comm wait[^;]*; //')
      echo "round $round P=$np $v: $line" | tee -a "$out"
    done
  done
done
