"""e2e_util.py: what the end-to-end scripts share: the environment of a
run, running the command line (and its refusals), and the fp64 attention
reference they judge the outputs by. Imported by tests/e2e_*.py (from the
folder of the script, which Python puts on the path)."""
import os
import re
import subprocess

import h5py
import numpy as np

# Open MPI as root, one thread per rank (the tests choose their threads)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


def mpi(np_):
    """The mpirun prefix of np_ ranks (--oversubscribe: more than cores)."""
    return ["mpirun", "-np", str(np_), "--oversubscribe"]


def run(args):
    """Runs args (printed first); their stdout; an exception on failure."""
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, check=True, env=ENV, capture_output=True,
                          text=True).stdout


def refused(args, pattern):
    """args exit 2 with exactly one stderr line of ours (mpirun adds its
    own notice), matching pattern, and no traceback."""
    print("+", " ".join(args), "(must be refused)", flush=True)
    r = subprocess.run(args, env=ENV, capture_output=True, text=True)
    lines = [l for l in r.stderr.splitlines() if l.startswith("ringattn:")]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.search(pattern, lines[0]), (pattern, lines[0])


def attention(q, k, v, causal=False, order="bnhd"):
    """fp64 attention by its definition, GQA by repeating the key/value
    heads, causal aligned to the ends (query i sees keys up to i + M - N);
    q, k, v in order "bnhd" (B, N, H, D) or "bhnd". Returns o (B, N, H, Dv),
    the command line's order, and lse (B, H, N)."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    if order == "bnhd":
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    H, G = q.shape[1], k.shape[1]
    k = np.repeat(k, H // G, axis=1)
    v = np.repeat(v, H // G, axis=1)
    s = np.einsum("bhnd,bhmd->bhnm", q, k) / np.sqrt(q.shape[-1])
    if causal:
        N, M = q.shape[2], k.shape[2]
        s = np.where(np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N,
                     s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    p = np.exp(s - mx)
    lse = (mx + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhnm,bhmd->bnhd", p, v), lse


def bf16_type():
    """HDF5's 16-bit float with 8 exponent bits: bfloat16."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def bf16_round(x):
    """float32 values rounded to the nearest bfloat16 (ties to even), as
    their 16-bit patterns and as the float64 values they hold."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
