#!/usr/bin/env bash
# e2e.sh RINGATTN NP [PYTHON]: the user's path end to end on files, at NP ranks:
# gen -> mpirun run -> verify, then independent readers of the output:
# h5dump for the shapes and attributes, and numpy (python3-h5py) recomputing
# attention in fp64 from the input file. Also the refusals a user meets
# first: an existing output without --force, a missing input, a bad option.
set -euo pipefail
ringattn=$1
np=$2
python=${3:-python3} # with h5py and numpy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np "$np" --oversubscribe)
fail() { echo "e2e FAIL (P=$np): $*" >&2; exit 1; }

# A cross-attention, GQA, float64-input problem with odd sizes.
"${mpi[@]}" "$ringattn" gen --out in.h5 --batch 2 --seq 301 --seq-kv 257 \
    --heads 4 --kv-heads 2 --dim 24 --dim-v 16 --dtype float64 --seed 7
"${mpi[@]}" "$ringattn" run --in in.h5 --out out.h5 --causal --block-q 37 --block-kv 50
"${mpi[@]}" "$ringattn" verify --in in.h5 --out out.h5 --all

h5dump -H out.h5 > header.txt
grep -q 'DATASET "o"' header.txt || fail "h5dump finds no /o"
grep -q '( 2, 301, 4, 16 )' header.txt || fail "/o has the wrong shape"
grep -q '( 2, 4, 301 )' header.txt || fail "/lse has the wrong shape"
grep -q 'ATTRIBUTE "command_line"' header.txt || fail "no command_line attribute"
h5dump -a ranks out.h5 | grep -q "(0): $np" || fail "ranks attribute is not $np"

"$python" - <<'PY' || fail "numpy reference disagrees"
import h5py, numpy as np
with h5py.File("in.h5", "r") as f:
    q, k, v = (f[n][...].astype(np.float64) for n in ("q", "k", "v"))
with h5py.File("out.h5", "r") as f:
    o, lse = f["o"][...], f["lse"][...]
    assert f.attrs["causal"] == 1
    scale = float(f.attrs["scale"])
B, N, H, D = q.shape
M, G = k.shape[1], k.shape[2]
rep = H // G
k = np.repeat(k, rep, axis=2)
v = np.repeat(v, rep, axis=2)
s = np.einsum("bnhd,bmhd->bhnm", q, k) * scale
i = np.arange(N)[:, None]
j = np.arange(M)[None, :]
s = np.where(j <= i + (M - N), s, -np.inf)
mx = s.max(axis=-1, keepdims=True)
seen = np.isfinite(mx)
p = np.where(seen, np.exp(s - np.where(seen, mx, 0)), 0.0)
l = p.sum(axis=-1, keepdims=True)
ref_lse = np.where(seen[..., 0], (mx + np.log(np.where(l > 0, l, 1)))[..., 0], -np.inf)
ref_o = np.einsum("bhnm,bmhd->bnhd", p / np.where(l > 0, l, 1), v)
rel = np.linalg.norm(o - ref_o) / np.linalg.norm(ref_o)
fin = np.isfinite(ref_lse)
assert np.array_equal(np.isfinite(lse), fin), "-inf rows differ"
lerr = np.max(np.abs(lse[fin] - ref_lse[fin]) / np.maximum(1, np.abs(ref_lse[fin])))
print(f"numpy check: rel err {rel:.3e}, lse err {lerr:.3e}")
assert rel < 1e-5 and lerr < 1e-5
PY

# Refusals: nothing written, input untouched, exit status 2.
sum_before=$(md5sum in.h5 out.h5)
set +e
"${mpi[@]}" "$ringattn" run --in in.h5 --out out.h5 2> err.txt; rc=$?
set -e
[ "$rc" = 2 ] || fail "existing output: exit $rc, expected 2"
grep -q "output exists" err.txt || fail "existing output: message: $(cat err.txt)"
[ "$(md5sum in.h5 out.h5)" = "$sum_before" ] || fail "a refused run changed a file"

set +e
"${mpi[@]}" "$ringattn" run --in missing.h5 --out new.h5 2> err.txt; rc=$?
set -e
[ "$rc" = 2 ] || fail "missing input: exit $rc, expected 2"
grep -q "missing.h5" err.txt || fail "missing input: message: $(cat err.txt)"
[ ! -e new.h5 ] || fail "missing input left new.h5"

set +e
"${mpi[@]}" "$ringattn" run --in in.h5 --out new.h5 --block-q -3 2> err.txt; rc=$?
set -e
[ "$rc" = 2 ] || fail "bad option: exit $rc, expected 2"
# mpirun adds its own banner about the exit status; ours is one line.
[ "$(grep -c '^ringattn:' err.txt)" = 1 ] || fail "bad option: expected one line, got: $(cat err.txt)"
grep -q -- '--block-q' err.txt || fail "bad option: message does not name it"
leftovers=$(ls -A | grep -v -E '^(in|out)\.h5$|\.txt$' || true)
[ -z "$leftovers" ] || fail "files left behind: $leftovers"
echo "e2e PASS (P=$np)"
