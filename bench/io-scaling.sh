#!/usr/bin/env bash
# io-scaling.sh [BUILD_DIR] [DIR]: read and write bandwidth of `ringattn run`
# at P = 1..4 on one machine, with HDF5's default layout, with datasets
# aligned to 1 MiB, and with Open MPI's individual (not two-phase)
# collective I/O. The input (B = 8, N = 1024, H = 16, D = 128: 192 MiB of
# q, k, v; 64.5 MiB of o and lse written; little compute) goes to DIR
# (default: a fresh directory under the current one). Output:
# bench/records/io-scaling.json, one entry per run (seconds of the read and
# the write, from `run --json`).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
dir=${2:-$(mktemp -d ra-io-XXXXXX)}
out=bench/records/io-scaling.json
export OMP_NUM_THREADS=1
trap 'rm -rf "$dir"' EXIT
mpirun -np 2 "$R" gen --out "$dir/in.h5" --force --batch 8 --seq 1024 --heads 16 --dim 128 >/dev/null
for round in 1 2; do
  for np in 1 2 3 4; do
    for v in default align fcoll; do
      flags=()
      mca=()
      [ "$v" = align ] && flags=(--align 1048576)
      [ "$v" = fcoll ] && mca=(--mca fcoll individual)
      mpirun -np "$np" --oversubscribe "${mca[@]}" "$R" run \
        --in "$dir/in.h5" --out "$dir/out.h5" --json "$dir/run.json" \
        --force "${flags[@]}" | grep '^ringattn run'
      /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["seconds"]
print(json.dumps({"round": int(sys.argv[2]), "ranks": int(sys.argv[3]),
                  "variant": sys.argv[4], "read_s": r["read"],
                  "write_s": r["write"]}))' \
        "$dir/run.json" "$round" "$np" "$v" >>"$dir/points"
    done
  done
done
/usr/bin/python3 -c 'import json, sys
json.dump([json.loads(l) for l in open(sys.argv[1])], open(sys.argv[2], "w"),
          indent=1)' "$dir/points" "$out"
