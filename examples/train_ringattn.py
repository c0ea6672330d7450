#!/usr/bin/env python3
"""Trains a small transformer whose attention is ringattn over MPI ranks.

The task, needle retrieval over a long sequence: each sequence of N tokens
(N = 8192 by default) holds random filler symbols and, at a random place
among its first 64 tokens, one needle symbol from a separate range; from
the needle on, every position must name the needle. Position N - 1 must
therefore find one token more than N - 65 places back among N - 1 fillers:
what long-context attention is for.

The model: token embedding, one causal ringattn.torch.RingSelfAttention
layer with a residual connection, LayerNorm, and a linear readout, in
float64 (--dtype) around the attention, which ringattn computes in float32
(the layer rounds q, k, v to float32 at its boundary and widens o back).
Every rank holds the same parameters and its contiguous slice of each
sequence (which ringattn moves into the layout it picks for causal
attention, and back); the loss is the mean over all
positions of all ranks, and each parameter's gradient is summed over the
ranks (allreduce_grads) before Adam steps, so every rank steps alike.

At step 0 the gradients are checked against a single-process float64
PyTorch run of the same model on the whole sequence (attention written out
from its definition, in query blocks under torch.utils.checkpoint so its
N x N scores never exist at once). The check's metric is the relative
Frobenius error of the whole gradient, |g - g64|_F / |g64|_F over every
parameter's entries as one vector, at most --grad-tol (1e-5). A row per
parameter shows |g64|_F, |g - g64|_F, its own relative Frobenius error and
its max-entry error max|g - g64| / max|g64|. At step 0 of this task the
query and key projections' gradients are about 1e-4 of the others (every
filler key is alike, so they come from one needle key per row); the
attention's float32 backward leaves them about 1e-2 off relative to
themselves, a few 1e-7 of the whole; the key bias's gradient is 0 by
definition. With --dtype float32 the LayerNorm's float32 sums over the
sequence add about 3e-6 to the whole.

    mpirun -np 2 /usr/bin/python3 examples/train_ringattn.py \\
        [--seq 8192] [--steps 300] [--batch 1] [--lr 3e-3] [--seed 0]
        [--dtype float64|float32] [--grad-tol 1e-5]

with PYTHONPATH=build/python (or the package installed). Rank 0 prints a
'#' table of the parameters, the gradient check, the loss every
--print-every steps and a final verdict: exit 0 when the loss fell (the
last tenth of the steps below half the first step's loss) and the gradient
check passed (--grad-tol), 1 otherwise (and one `ringattn:` line on
stderr when the work failed); a bad option is exit 2 and one such line,
before any work.
"""
import argparse
import math
import sys
import time

import numpy as np
import torch
from mpi4py import MPI
from torch.utils.checkpoint import checkpoint

import ringattn
import ringattn.torch as rt

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
# The needle lies among the first tokens: nearly every position has a
# target, and the farthest must look back N - 1 - NEEDLE_WITHIN places.
NEEDLE_WITHIN = 64
# A reference gradient this much smaller than the whole gradient's norm is
# float64's rounding of an exact 0 (the key bias's): no relative error.
ZERO_GRADIENT = 1e-12
# Keeps a division by a reference of exactly 0 finite.
TINY = 1e-300


def say(*args):
    if RANK == 0:
        print(*args, flush=True)


def complain(text):
    """One `ringattn:` line on stderr, from rank 0 (every rank has the same
    to say)."""
    if RANK == 0:
        print(f"ringattn: train_ringattn: {text}", file=sys.stderr,
              flush=True)


class Parser(argparse.ArgumentParser):
    """A bad option is one `ringattn:` line and exit 2, on every rank."""

    def error(self, message):
        complain(message)
        sys.exit(2)


# The options that must be at least 1 (or above 0, the real ones).
AT_LEAST_ONE = ("steps", "batch", "embed", "heads", "symbols", "fillers",
                "print_every", "threads")
POSITIVE = ("lr", "grad_tol")


def options(argv):
    """The options, every one checked before any work (exit 2)."""
    ap = Parser(prog="train_ringattn.py",
                description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192, help="tokens N")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--embed", type=int, default=32, help="model width E")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--symbols", type=int, default=8,
                    help="needle symbols (the classes)")
    ap.add_argument("--fillers", type=int, default=1,
                    help="filler symbols (1: a blank haystack)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--print-every", type=int, default=25)
    ap.add_argument("--grad-tol", type=float, default=1e-5,
                    help="largest relative Frobenius error of the step-0 "
                    "gradient allowed")
    ap.add_argument("--dtype", choices=("float64", "float32"),
                    default="float64", help="the model's precision around "
                    "the attention (which computes in float32)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per rank of the library")
    a = ap.parse_args(argv)
    for name in AT_LEAST_ONE + POSITIVE:
        value = getattr(a, name)
        if not (value >= 1 if name in AT_LEAST_ONE else value > 0):
            ap.error(f"--{name.replace('_', '-')} {value}: must be "
                     f"{'at least 1' if name in AT_LEAST_ONE else 'above 0'}")
    if a.seq < 2:
        ap.error(f"--seq {a.seq}: must be at least 2")
    if a.embed % a.heads:
        ap.error(f"--embed {a.embed} is not a multiple of --heads {a.heads}")
    return a


class Model(torch.nn.Module):
    """Embedding, causal ring self-attention with a residual, LayerNorm,
    readout; attention_layer may be replaced (the reference run)."""

    def __init__(self, a):
        super().__init__()
        vocab = a.fillers + a.symbols  # filler symbols, then needles
        self.embed = torch.nn.Embedding(vocab, a.embed)
        self.attn = rt.RingSelfAttention(a.embed, a.heads, comm=COMM,
                                         causal=True, threads=a.threads)
        self.norm = torch.nn.LayerNorm(a.embed)
        self.readout = torch.nn.Linear(a.embed, a.symbols)

    def forward(self, tokens, attention=None):
        x = self.embed(tokens)
        h = x + (attention or self.attn)(x)
        return self.readout(self.norm(h))


def batch(a, rng):
    """tokens (B, N) and targets (B, N) (-1: no needle yet, ignored)."""
    tokens = rng.integers(0, a.fillers, size=(a.batch, a.seq))
    where = rng.integers(0, min(a.seq // 2, NEEDLE_WITHIN), size=a.batch)
    needle = rng.integers(0, a.symbols, size=a.batch)
    tokens[np.arange(a.batch), where] = a.fillers + needle
    after = np.arange(a.seq)[None, :] >= where[:, None]
    targets = np.where(after, needle[:, None], -1)
    return tokens, targets


def loss_of(model, tokens, targets, count, attention=None):
    """The summed loss of these positions over `count`: on a rank's slice,
    its share of the mean over all ranks' positions."""
    logits = model(torch.from_numpy(tokens), attention)
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        torch.from_numpy(targets).reshape(-1), ignore_index=-1,
        reduction="sum") / count


def reference_attention(layer, block=512):
    """The layer's function in float64 on the whole sequence, from the
    definition of causal attention, one query block at a time."""
    H, D = layer.H, layer.D

    def rows(q, k, v, i0):
        s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
        i = torch.arange(i0, i0 + q.shape[1])[:, None]
        s = s.masked_fill(torch.arange(k.shape[1])[None, :] > i, -math.inf)
        return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v)

    def attend(x):
        B, N, _ = x.shape
        q = layer.q_proj(x).view(B, N, H, D)
        k = layer.k_proj(x).view(B, N, layer.G, D)
        v = layer.v_proj(x).view(B, N, layer.G, D)
        k = k.repeat_interleave(H // layer.G, 2)
        v = v.repeat_interleave(H // layer.G, 2)
        o = torch.cat([checkpoint(rows, q[:, i:i + block], k, v, i)
                       for i in range(0, N, block)], dim=1)
        return layer.out_proj(o.reshape(B, N, H * D))

    return attend


def gradient_errors(model, ref):
    """Per parameter: (name, |ref|_F, |diff|_F, |diff|_F / |ref|_F,
    max|diff| / max|ref|) of model's gradients against ref's; and the
    whole gradient's relative Frobenius and max-entry errors (every
    parameter's entries as one vector): the check's figures."""
    rows, sq, top = [], [0.0, 0.0], [0.0, 0.0]
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        d = p.grad.double() - r.grad
        norm, err = float(r.grad.norm()), float(d.norm())
        big, off = float(r.grad.abs().max()), float(d.abs().max())
        rows.append((name, norm, err, err / max(norm, TINY),
                     off / max(big, TINY)))
        sq = [sq[0] + err * err, sq[1] + norm * norm]
        top = [max(top[0], off), max(top[1], big)]
    return rows, math.sqrt(sq[0] / sq[1]), top[0] / top[1]


def gradient_check(a, model, tokens, targets):
    """The relative Frobenius and max-entry errors of the ring's step-0
    gradient (already summed over ranks; every parameter's entries as one
    vector) against a float64 single-process run of a copy of the model
    on the whole sequence; rank 0 computes them and prints a row per
    parameter (a gradient that is 0 by definition has no relative
    error: the key bias's, as softmax ignores a shift shared by all
    keys)."""
    worst = None
    if RANK == 0:
        ref = Model(a).double()
        ref.load_state_dict(model.state_dict())
        count = int((targets >= 0).sum())
        loss_of(ref, tokens, targets, count,
                attention=reference_attention(ref.attn)).backward()
        rows, fro, top = gradient_errors(model, ref)
        whole = math.sqrt(sum(r[1] ** 2 for r in rows))
        print(f"# {'parameter':<20} {'|ref|_F':>10} {'|diff|_F':>10} "
              f"{'rel_frobenius':>13} {'rel_max_entry':>13}")
        for name, norm, err, rel, rel_top in rows:
            zero = norm < ZERO_GRADIENT * whole
            print(f"# {name:<20} {norm:10.3e} {err:10.3e} " +
                  (f"{'0 by definition':>27}" if zero else
                   f"{rel:13.2e} {rel_top:13.2e}"))
        worst = (fro, top)
    return COMM.bcast(worst)


def train(a):
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    model = Model(a).to(getattr(torch, a.dtype))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    losses, worst, t0 = [], None, time.time()
    for step in range(a.steps):
        tokens, targets = batch(a, rng)
        count = int((targets >= 0).sum())
        mine = [ringattn.shard(x, "auto", COMM, 1, causal=True)
                for x in (tokens, targets)]
        opt.zero_grad()
        loss = loss_of(model, mine[0], mine[1], count)
        loss.backward()
        rt.allreduce_grads(model, COMM)
        if step == 0:
            worst = gradient_check(a, model, tokens, targets)
            say(f"# step 0 gradients vs float64 single process: relative "
                f"Frobenius error {worst[0]:.2e} "
                f"({'PASS' if worst[0] <= a.grad_tol else 'FAIL'} at "
                f"{a.grad_tol:.0e}); max-entry error {worst[1]:.2e}")
        opt.step()
        losses.append(COMM.allreduce(float(loss)))
        if step % a.print_every == 0 or step == a.steps - 1:
            say(f"step {step:5d}  loss {losses[-1]:.4f}  "
                f"{time.time() - t0:7.1f} s")
    return losses, worst


def main(argv):
    a = options(argv)
    say(f"# train_ringattn: ranks {COMM.Get_size()}, seq {a.seq}, batch "
        f"{a.batch}, steps {a.steps}, lr {a.lr}, embed {a.embed}, heads "
        f"{a.heads}, symbols {a.symbols}, fillers {a.fillers}, seed "
        f"{a.seed}, threads {a.threads}, dtype {a.dtype}, layout "
        f"{ringattn.resolve_layout(causal=True)}")
    losses, worst = train(a)
    tail = np.mean(losses[-max(len(losses) // 10, 1):])
    fell = tail < 0.5 * losses[0]
    say(f"# loss {losses[0]:.4f} -> {tail:.4f} (mean of the last tenth): "
        f"{'fell' if fell else 'did NOT fall by half'}; gradient check "
        f"{worst[0]:.2e} relative Frobenius")
    return 0 if fell and worst[0] <= a.grad_tol else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ringattn.Error as exc:  # raised on every rank alike
        complain(str(exc))
        sys.exit(1)
    except Exception as exc:  # one rank alone: end the whole job
        print(f"ringattn: train_ringattn: rank {RANK}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        COMM.Abort(1)
