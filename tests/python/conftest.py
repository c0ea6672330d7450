"""Shared helpers of the Python package's tests, run by pytest on every rank
of `mpirun -np P python3 -m pytest` (ctest python_p1..p4).

Every assertion is agreed first (agreed()): all ranks fail or pass each
test together, so `pytest -x` stops every rank at the same test. Inputs are
fresh random tensors each run, drawn on every rank from a seed rank 0
chooses (printed on failure); the reference is PyTorch float64 autograd on
the full tensors, computed from the definitions on rank 0 and broadcast."""
import math
import os
import sys

import numpy as np
import pytest
import torch
from mpi4py import MPI

import ringattn

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Rank 0 alone prints: the other ranks' reports go nowhere (their
    verdicts reach rank 0's report through agreed())."""
    config.addinivalue_line("markers", "at_p(n): runs at P = n alone "
                            "(what it checks is the same at every P)")
    if COMM.Get_rank() > 0:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")


def pytest_collection_modifyitems(items):
    """A test marked at_p(n) runs at P = n alone (python_pN): its verdict
    does not depend on the rank count (a pure-Python table, a script's
    options, a refusal each rank finds in its own arguments before any
    transfer), so python_p1 .. p4 need not each run it. n = 2 where the
    test checks that every rank raises alike or that rank 0 alone
    prints; n = 1 where one process does all. Every test whose verdict
    may change with P (the agreement, the ring, a refusal on one rank)
    runs at every P."""
    for item in items:
        mark = item.get_closest_marker("at_p")
        if mark is not None and mark.args[0] != P:
            item.add_marker(pytest.mark.skip(
                reason=f"the same at every P: runs at P = {mark.args[0]}"))


def agreed(ok, what):
    """Asserts ok on every rank alike: each rank's verdict is gathered
    first, so a failure on one rank fails the test on all of them."""
    bad = COMM.allgather(None if ok else what)
    failing = [f"rank {r}: {m}" for r, m in enumerate(bad) if m]
    assert not failing, "; ".join(failing)


def close(name, got, want, tol):
    """Agreed check that this rank's slice matches the reference's: the
    largest error over the largest |reference| of all ranks' slices (a
    rank's own slice may be all but zero, as dq of a query that sees a
    single key)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    top = np.abs(want).max() if want.size else 0.0
    scale = max(COMM.allreduce(top, op=MPI.MAX), 1e-30)
    err = float(np.abs(got - want).max()) / scale if want.size else 0.0
    agreed(err <= tol, f"{name}: relative error {err:.3g} > {tol:.0e}")


def lse_close(name, got, want, tol=1e-4):
    """lse rows: -inf exactly where the reference's are, else within tol."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    same_inf = np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    err = float(np.abs(got[fin] - want[fin]).max()) if fin.any() else 0.0
    agreed(same_inf and err <= tol,
           f"{name}: -inf rows differ ({same_inf}) or error {err:.3g}")


@pytest.fixture
def rng():
    """A generator from a fresh seed, the same on every rank."""
    seed = COMM.bcast(int(np.random.SeedSequence().entropy % 2**32)
                      if COMM.Get_rank() == 0 else None)
    if COMM.Get_rank() == 0:
        print(f"seed {seed}")
    return np.random.default_rng(seed)


def normal(rng, shape):
    return rng.standard_normal(shape, dtype=np.float32)


def visible(B, N, M, causal=False, window=None, q_lens=None, kv_lens=None,
            segments=None, kv_segments=None):
    """(B, 1, N, M) booleans: which key each query sees, from the
    definitions of ringattn.h (causal and window aligned bottom-right)."""
    i = torch.arange(N)[:, None] + (M - N)
    j = torch.arange(M)[None, :]
    vis = torch.ones(B, 1, N, M, dtype=torch.bool)
    if causal:
        vis &= j <= i
    if window is not None:
        vis &= (j >= i - window[0]) & (j <= i + window[1])
    if kv_lens is not None:
        vis &= j < torch.as_tensor(kv_lens)[:, None, None, None]
    if q_lens is not None:
        rows = torch.arange(N)[None, None, :, None]
        vis &= rows < torch.as_tensor(q_lens)[:, None, None, None]
    if segments is not None:
        kvs = segments if kv_segments is None else kv_segments
        qs, kvs = torch.as_tensor(segments), torch.as_tensor(kvs)
        vis &= qs[:, None, :, None] == kvs[:, None, None, :]
    return vis


def reference(q, k, v, scale=None, **masks):
    """o (B, N, H, Dv) and lse (B, H, N) of float64 tensors by definition,
    differentiable; rows that see no key give o = 0 and lse = -inf."""
    B, N, H, D = q.shape
    M, G = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // G, dim=2)
    v = v.repeat_interleave(H // G, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k)
    s = s * (1.0 / math.sqrt(D) if scale is None else scale)
    s = s.masked_fill(~visible(B, N, M, **masks), -math.inf)
    mx = s.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s - mx)
    z = e.sum(-1, keepdim=True)
    o = torch.einsum("bhij,bjhd->bihd", e / torch.where(z > 0, z, 1.0), v)
    lse = torch.where(z > 0, torch.log(z) + mx, -math.inf).squeeze(-1)
    return o, lse


def reference_grads(q, k, v, dout, **opts):
    """o, lse and the gradients (dq, dk, dv) of sum(o * dout), float64,
    from the full tensors every rank holds: computed once, on rank 0, and
    broadcast (the same numbers on every rank, at 1/P of the cost)."""
    result = None
    if COMM.Get_rank() == 0:
        t = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_()
             for x in (q, k, v)]
        o, lse = reference(*t, **opts)
        (o * torch.from_numpy(np.asarray(dout, np.float64))).sum().backward()
        result = (o.detach().numpy(), lse.detach().numpy(),
                  [x.grad.numpy() for x in t])
    return COMM.bcast(result)


def ring_run(q, k, v, dout, **options):
    """forward and backward of the full tensors' slices on COMM: o, lse,
    dq, dk, dv of this rank. Segment ids are full (B, N) arrays here."""
    seg = options.pop("segments", None)
    kv_seg = options.pop("kv_segments", None)
    cut = {k: x for k, x in options.items() if k != "layout"}
    cut["segments"] = seg

    def mine(x, axis=1):
        return ringattn.shard(x, options.get("layout", "auto"), COMM, axis,
                              **cut)

    if seg is not None:
        options["segments"] = mine(seg)
        options["kv_segments"] = mine(seg if kv_seg is None else kv_seg)
    ql, kl, vl, dl = mine(q), mine(k), mine(v), mine(dout)
    o, lse = ringattn.forward(ql, kl, vl, COMM, order="bnhd", **options)
    dq, dk, dv = ringattn.backward(ql, kl, vl, o, lse, dl, COMM, order="bnhd",
                                   **options)
    return o, lse, dq, dk, dv, mine
