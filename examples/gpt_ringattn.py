#!/usr/bin/env python3
"""gpt_ringattn.py: a small GPT-style causal language model trained on a
text Debian ships, its sequences split over MPI ranks (issue 41's worked
example).

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 \\
        examples/gpt_ringattn.py --steps 300 --out gpt-p2.json
    PYTHONPATH=build/python /usr/bin/python3 examples/gpt_ringattn.py \\
        --steps 300 --out gpt-p1.json --same-as gpt-p2.json --plot gpt.png
    PYTHONPATH=build/python /usr/bin/python3 examples/gpt_ringattn.py \\
        --steps 300 --attention torch --out gpt-torch.json

A character-level model (token and position embeddings, --layers
pre-LayerNorm blocks of causal multi-head attention and a 4E MLP, a
linear readout) on --text (default the GPL's text,
/usr/share/common-licenses/GPL-3). Each step takes --batch windows of
--seq characters at offsets every rank draws alike from --seed; each
rank holds its contiguous shard of every window (the cut a data loader
makes: ringattn moves it to the balanced layout and back itself) and
computes its positions' share of the mean cross-entropy; the attention
is ringattn.torch.MultiheadAttention, the drop-in for
torch.nn.MultiheadAttention, whose cross-rank terms travel the ring; the
parameter gradients are summed over the ranks (allreduce_grads) before
Adam steps, so every rank steps alike. --attention torch runs the same
model with torch.nn.MultiheadAttention instead (one process: the
reference wall time); both start from the same parameters (the drop-in
is a subclass, initialised alike).

Rank 0 prints a '#' echo of the parameters, the loss every
--print-every steps and the wall time, and writes --out (JSON: the
parameters, the losses, the seconds). --same-as FILE compares the losses
with another run's (a run on other rank counts): PASS when every step's
loss is within --loss-tol (relative) of it, exit 1 otherwise. --plot
draws the loss curves of --out and the --same-as run (matplotlib);
--plot-runs FILE... --plot PNG draws saved runs' curves without training.
Exit 2 with one `ringattn:` line for a bad option, before training.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI

import ringattn
import ringattn.torch as rt

COMM = MPI.COMM_WORLD


class Parser(argparse.ArgumentParser):
    """A bad option is one `ringattn:` line and exit 2."""

    def error(self, message):
        fail(message)


def options(argv=None):
    """The options, every one checked before any work (exit 2)."""
    p = Parser(prog="gpt_ringattn.py", description=__doc__.split("\n")[0])
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    for name, default in (("seq", 256), ("batch", 4), ("embed", 64),
                          ("heads", 4), ("layers", 2), ("steps", 300),
                          ("seed", 1), ("print-every", 25)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--attention", choices=("ringattn", "torch"),
                   default="ringattn")
    p.add_argument("--out")
    p.add_argument("--same-as")
    p.add_argument("--loss-tol", type=float, default=1e-4)
    p.add_argument("--plot")
    p.add_argument("--plot-runs", nargs="+")
    a = p.parse_args(argv)
    bad = [f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()
           if isinstance(v, int) and not isinstance(v, bool) and v < 1]
    if bad:
        fail(f"{bad[0]}: expected at least 1")
    if not os.path.isfile(a.text):
        fail(f"--text {a.text}: no such file")
    if a.embed % a.heads:
        fail(f"--embed {a.embed} is not a multiple of --heads {a.heads}")
    if a.attention == "torch" and COMM.Get_size() > 1:
        fail("--attention torch runs on one process")
    return a


def fail(text):
    if COMM.Get_rank() == 0:
        sys.stderr.write(f"ringattn: gpt_ringattn: {text}\n")
    sys.exit(2)


class Block(torch.nn.Module):
    """x + attn(ln(x)), then x + mlp(ln(x)): x (B, n, E)."""

    def __init__(self, E, heads, attention):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(E), torch.nn.LayerNorm(E)
        cls = rt.MultiheadAttention if attention == "ringattn" else \
            torch.nn.MultiheadAttention
        self.attn = cls(E, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(E, 4 * E),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(4 * E, E))
        self.ring = attention == "ringattn"

    def forward(self, x):
        h = self.ln1(x)
        if self.ring:
            y, _ = self.attn(h, h, h, need_weights=False, is_causal=True)
        else:
            n = h.shape[1]
            mask = torch.ones(n, n, dtype=torch.bool).triu(1)
            y, _ = self.attn(h, h, h, need_weights=False, attn_mask=mask)
        x = x + y
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    """logits (B, n, V) of tokens (B, n) at global positions pos (n,)."""

    def __init__(self, a, vocab):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, a.embed)
        self.pos = torch.nn.Embedding(a.seq, a.embed)
        self.blocks = torch.nn.ModuleList(
            Block(a.embed, a.heads, a.attention) for _ in range(a.layers))
        self.ln = torch.nn.LayerNorm(a.embed)
        self.head = torch.nn.Linear(a.embed, vocab)

    def forward(self, tokens, pos):
        x = self.tok(tokens) + self.pos(pos)[None]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train(a, data, vocab):
    """The losses of every step and the seconds the steps took."""
    torch.manual_seed(a.seed)
    model = GPT(a, vocab)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    pos = ringattn.owned_positions("auto", a.seq, COMM)
    pos_t = torch.from_numpy(pos)
    gen = np.random.default_rng(a.seed)
    losses = []
    COMM.Barrier()
    start = time.perf_counter()
    for step in range(a.steps):
        offs = gen.integers(0, len(data) - a.seq - 1, a.batch)
        x = np.stack([data[o:o + a.seq] for o in offs])[:, pos]
        y = np.stack([data[o + 1:o + a.seq + 1] for o in offs])[:, pos]
        logits = model(torch.from_numpy(x), pos_t)
        loss = F.cross_entropy(logits.reshape(-1, vocab),
                               torch.from_numpy(y).reshape(-1),
                               reduction="sum") / (a.batch * a.seq)
        opt.zero_grad()
        loss.backward()
        if COMM.Get_size() > 1:
            rt.allreduce_grads(model, COMM)
        opt.step()
        losses.append(COMM.allreduce(float(loss), op=MPI.SUM))
        if COMM.Get_rank() == 0 and step % a.print_every == 0:
            print(f"step {step:5d}  loss {losses[-1]:.4f}", flush=True)
    return losses, time.perf_counter() - start


def compare(a, losses):
    """PASS / FAIL of the losses against the --same-as run's."""
    with open(a.same_as, encoding="utf-8") as f:
        other = json.load(f)
    theirs = np.array(other["losses"][:len(losses)])
    err = float(np.max(np.abs(np.array(losses[:len(theirs)]) - theirs) /
                       np.abs(theirs)))
    ok = len(theirs) == len(losses) and err <= a.loss_tol
    print(f"# losses against {a.same_as} ({other['ranks']} ranks, "
          f"{other['attention']}): max relative difference {err:.2e} "
          f"({'PASS' if ok else 'FAIL'} at {a.loss_tol:g})")
    return ok, other


def plot(path, runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run, style in zip(runs, ("-", "--", ":", "-.")):
        ax.plot(run["losses"], style, label=f"{run['attention']}, "
                f"{run['ranks']} rank(s)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / char)")
    ax.set_title(f"character GPT on {os.path.basename(runs[0]['text'])}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    a = options()
    if a.plot_runs:
        runs = []
        for path in a.plot_runs:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        plot(a.plot or "gpt-ringattn-loss.png", runs)
        return 0
    text = open(a.text, encoding="utf-8", errors="replace").read()
    chars = sorted(set(text))
    data = np.array([chars.index(c) for c in text], dtype=np.int64)
    if COMM.Get_rank() == 0:
        print(f"# gpt_ringattn: text {a.text} ({len(data)} chars, vocab "
              f"{len(chars)}), ranks {COMM.Get_size()}, attention "
              f"{a.attention}, seq {a.seq}, batch {a.batch}, embed "
              f"{a.embed}, heads {a.heads}, layers {a.layers}, steps "
              f"{a.steps}, lr {a.lr}, seed {a.seed}")
    losses, seconds = train(a, data, len(chars))
    if COMM.Get_rank():
        return 0
    run = dict(vars(a), ranks=COMM.Get_size(), losses=losses,
               seconds=seconds)
    print(f"# {a.steps} steps in {seconds:.1f} s; final loss "
          f"{np.mean(losses[-10:]):.4f} (mean of the last 10)")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(run, f)
    ok, runs = True, [run]
    if a.same_as:
        ok, other = compare(a, losses)
        runs.append(other)
    if a.plot:
        plot(a.plot, runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
