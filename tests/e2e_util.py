"""e2e_util.py: what the end-to-end scripts share: the environment of a
run, running the command line (and its refusals), the keys each query
sees, and the fp64 attention reference they judge the outputs by.
Imported by tests/e2e_*.py (from the folder of the script, which Python
puts on the path)."""
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


class Failed(RuntimeError):
    """A command that exited with another status than the one wanted."""


def launch(args, env=ENV, **kw):
    """Runs args; the CompletedProcess (text stdout, stderr), unchecked."""
    return subprocess.run(args, env=env, capture_output=True, text=True, **kw)


def run(args, code=0, **kw):
    """Runs args (printed first); their stdout; Failed, naming the command,
    its status and the end of its stderr, unless they exit code."""
    print("+", " ".join(args), flush=True)
    r = launch(args, **kw)
    if r.returncode != code:
        raise Failed(f"{' '.join(args)}: exit {r.returncode} (want {code}): "
                     f"{r.stderr.strip()[-400:]}")
    return r.stdout


def ours(stderr):
    """The lines of stderr that ringattn wrote (mpirun adds its own)."""
    return [l for l in stderr.splitlines() if l.startswith("ringattn:")]


def refused(args, pattern):
    """args exit 2 with exactly one stderr line of ours (mpirun adds its
    own notice), matching pattern, and no traceback."""
    print("+", " ".join(args), "(must be refused)", flush=True)
    r = launch(args)
    lines = ours(r.stderr)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.search(pattern, lines[0]), (pattern, lines[0])


def visible(f, b, N, M, causal=False, window=None, at=None):
    """(N, M) booleans: which keys each query of batch b sees. f: the input
    file (or a dict) whose q_lens, kv_lens, segments or q_segments and
    kv_segments apply; at: each query's aligned position (default the
    ends aligned, i + M - N); window (left, right) around it."""
    at = (np.arange(N) + (M - N) if at is None else at)[:, None]
    j = np.arange(M)[None, :]
    vis = np.ones((N, M), bool)
    if causal:
        vis &= j <= at
    if window:
        vis &= (j >= at - window[0]) & (j <= at + window[1])
    if "q_lens" in f:
        vis &= (np.arange(N) < f["q_lens"][b])[:, None]
    if "kv_lens" in f:
        vis &= j < f["kv_lens"][b]
    if "segments" in f:
        vis &= f["segments"][b][:, None] == f["segments"][b][None, :]
    if "q_segments" in f:
        vis &= f["q_segments"][b][:, None] == f["kv_segments"][b][None, :]
    return vis


def softmax(s):
    """Softmax over the last axis of scores s (-inf: not seen) and the
    log-sum-exp: a row that sees nothing has probabilities 0, lse -inf."""
    mx = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - safe)
    tot = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, tot, out=np.zeros_like(p), where=tot > 0)
    lse = np.where(tot > 0, safe + np.log(np.where(tot > 0, tot, 1.0)),
                   -np.inf)
    return p, lse[..., 0]


def rope_half(x, pos, base):
    """RoPE with the half pairing of rows x (len, D) at positions pos."""
    half = x.shape[1] // 2
    ang = pos[:, None] * base ** (-np.arange(half) / half)
    c, s = np.cos(ang), np.sin(ang)
    return np.concatenate([x[:, :half] * c - x[:, half:] * s,
                           x[:, half:] * c + x[:, :half] * s], axis=1)


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
    p, lse = softmax(s)
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
