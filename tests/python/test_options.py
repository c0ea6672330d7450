"""The keyword options (issue 39, classes 5, 16 and 22): every field of
ra_numerics and ra_exec is a keyword, each value has its field's type
(a bool is a bool, an integer an integer, a name a str), an unknown
keyword is refused with the nearest known one; precision="bf16" computes
in bfloat16 (against float64); ALiBi slopes are refused unless one real
number per query head; threads beyond the library's bound are refused.
Every refusal is a ringattn.Error raised on every rank alike, also a
TypeError or a ValueError, with one line naming the keyword."""
import math
import os
import re

import numpy as np
import pytest
import torch

import ringattn
from ringattn import _options

from conftest import (COMM, P, agreed, close, normal, reference_grads,
                      visible)

RANK = COMM.Get_rank()
LAST = P - 1
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

# A valid value of every keyword other than its default (numpy scalars
# where a Python one would do too); the arrays are tested elsewhere.
VALID = {
    "causal": np.bool_(True), "nonfinite": True, "window": (3, np.int64(2)),
    "scale": np.float32(0.3), "score": "gaussian", "sigma": 2,
    "rope": "half", "rope_base": 500.0, "alibi": True, "align": "sequence",
    "precision": "bf16", "layout": "zigzag", "strategy": "ring-q",
    "block_q": 16, "block_kv": np.int32(32), "gemm": "openblas",
    "threads": 2, "stall_timeout": 30, "mem_limit": 1 << 30,
    "ulysses_size": 1, "wire": "fp32", "softcap": np.float64(2.5),
    "on_step": lambda done, total: None, "on_tick": lambda share: None,
}
# What a keyword applies to (without it the keyword is refused:
# test_unused_refused).
NEEDS = {"align": {"causal": True}, "sigma": {"score": "gaussian"},
         "rope_base": {"rope": "half"}, "ulysses_size": {"strategy": "hybrid"}}
# ra_exec's fields that change how a call runs, not its numbers: the
# output is the default's within float32 rounding.
EXEC_ONLY = ("block_q", "block_kv", "gemm", "threads", "stall_timeout",
             "mem_limit", "ulysses_size", "wire", "strategy", "on_step",
             "on_tick")
# Pointer fields, taken through other keywords (alibi=, additive=) or
# implied (on_step_ctx: the callables carry their own context), or the
# command line's alone (checkpoint: run --checkpoint, issue 43).
NOT_KEYWORDS = ("alibi_slopes", "on_step_ctx", "checkpoint")
# Wrong types of each kind of keyword.
WRONG = {
    "flag": [1, "no", None, 1.0],
    "integer": [2.0, True, "4", None],
    "real": [True, "1.0", None, 1j],
    "name": [3, None, True],
    "window": [(2.7, 0.5), (1,), 3, (True, 0), "3,2"],
    "alibi": [1, 0.5, "yes"],
    "callback": [1, "print", True],
}


def slices(rng, N=4 * P + 3, H=2, D=8):
    """This rank's contiguous slices of random q, k, v (B = 1)."""
    return [ringattn.shard(normal(rng, (1, N, H, D)), "contiguous", COMM)
            for _ in range(3)]


def raised(fn, cls, *contains):
    """fn raises cls (and ringattn.Error) on every rank, with the same
    one-line message holding each of `contains`."""
    try:
        fn()
        got = None
    except ringattn.Error as exc:
        got = (type(exc).__name__, isinstance(exc, cls), str(exc))
    every = COMM.allgather(got)
    ok = (got is not None and got[1] and len(set(every)) == 1
          and "\n" not in got[2] and all(c in got[2] for c in contains))
    agreed(ok, f"expected {cls.__name__} with {contains}; got {every}")


def header_fields(struct, pointers=False):
    """The names of a struct's fields in include/ringattn.h: its value
    fields, or its pointer fields (function pointers included)."""
    with open(os.path.join(ROOT, "include", "ringattn.h"),
              encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"typedef struct \{([^{}]*)\} " + struct + ";",
                     text).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for decl in body.split(";"):
        if ("*" in decl) != pointers:
            continue
        decl = re.sub(r"\(\*(\w+)\)\(.*", r"\1", decl.strip(), flags=re.S)
        names += [re.sub(r"[^\w]", "", part.split()[-1])
                  for part in decl.split(",") if part.strip()]
    return [n for n in names if n]


@pytest.mark.at_p(1)
def test_every_field_is_a_keyword_class22():
    """Each value field of ra_numerics and ra_exec is a row of the
    header's RA_OPTION_FIELDS, the one table _core.c and _options.py
    read, and a keyword (before: the package refused precision, wire,
    gemm and align; a field added to the header without its row fails
    here, issue 41 part 3)."""
    fields = header_fields("ra_numerics") + header_fields("ra_exec")
    rows = _options.FIELDS
    agreed(sorted(fields) == sorted(rows) and len(fields) > 20,
           f"header fields {sorted(fields)} against RA_OPTION_FIELDS "
           f"{sorted(rows)}")
    pointers = header_fields("ra_numerics", True) + \
        header_fields("ra_exec", True)
    missing = [f for f in fields + pointers if f not in NOT_KEYWORDS and
               f not in _options.KEYWORDS and f not in _options.DERIVED]
    agreed(not missing, f"fields {fields} {pointers}; not keywords: {missing}")
    covered = set(VALID) | set(_options.ARRAYS)
    agreed(covered == set(_options.KEYWORDS),
           f"keywords {_options.KEYWORDS} against tested {sorted(covered)}")


@pytest.mark.at_p(1)
def test_kinds_from_the_table_issue41_part3():
    """Every row's kind is one _options reads, and its default has the
    kind's Python type (a flag 0 or 1)."""
    types = {"FLAG": int, "INT": int, "I64": int, "REAL": float}
    bad = [(k, kind, _options.DEFAULTS[k])
           for k, kind in _options.FIELDS.items()
           if not isinstance(_options.DEFAULTS[k], types.get(kind, str)) or
           (kind == "FLAG" and _options.DEFAULTS[k] not in (0, 1))]
    agreed(not bad, f"rows whose defaults are not of their kind: {bad}")


@pytest.mark.parametrize("key", sorted(VALID))
def test_keyword_accepted_class22(rng, key):
    """A valid value of each keyword runs; a keyword of ra_exec alone
    leaves the output as it was (beyond float32 rounding)."""
    q, k, v = slices(rng, D=8)
    options = {"layout": "contiguous", key: VALID[key]}
    options.update(NEEDS.get(key, {}))
    if key == "mem_limit":
        options["strategy"] = "allgather"
    if key == "layout":
        q, k, v = (ringattn.shard(ringattn.unshard(x, "contiguous", COMM),
                                  VALID[key], COMM) for x in (q, k, v))
    o, _ = ringattn.forward(q, k, v, COMM, order="bnhd", **options)
    agreed(np.isfinite(o).all(), f"{key}: o not finite")
    if key in EXEC_ONLY:
        want, _ = ringattn.forward(q, k, v, COMM, order="bnhd",
                                   layout="contiguous")
        close(key, o, want, 2e-5)


@pytest.mark.at_p(2)
@pytest.mark.parametrize("options,message", [
    ({"score": "gaussian", "scale": 0.5},
     "scale: the gaussian score takes no scale"),
    ({"sigma": 2.0}, "sigma: the dot score takes no bandwidth"),
    ({"causal": True, "alibi": True, "rope_base": 20.0},
     "rope_base: no rotary embedding"),
    ({"rope_base": 500.0}, "rope_base: no rotary embedding"),
    ({"align": "sequence"}, "align per sequence: no rule to align"),
    ({"ulysses_size": 1}, "ulysses_size: the ring strategy has no"),
    ({"ulysses_size": 2, "strategy": "ulysses"},
     "ulysses_size: the ulysses strategy has no")])
def test_unused_refused(rng, options, message):
    """A keyword the call would not apply is refused on every rank by the
    library (an ArgumentError naming it), never accepted and ignored."""
    q, k, v = slices(rng)
    raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    layout="contiguous", **options),
           ringattn.ArgumentError, message)
    o, lse = ringattn.forward(q, k, v, COMM, order="bnhd",
                              layout="contiguous")
    raised(lambda: ringattn.backward(q, k, v, o, lse, o, COMM, order="bnhd",
                                     layout="contiguous", **options),
           ringattn.ArgumentError, message)


def kind_of(key):
    """The kind of keyword key, for WRONG."""
    if key in ("window", "alibi"):
        return key
    if key in _options.CALLBACKS:
        return "callback"
    return {"FLAG": "flag", "INT": "integer", "I64": "integer",
            "REAL": "real"}.get(_options.FIELDS[key], "name")


@pytest.mark.at_p(2)
@pytest.mark.parametrize("key", sorted(VALID))
def test_keyword_typed_class22(rng, key):
    """Each keyword refuses values of another type on every rank, as a
    TypeError naming it (before: causal="no" meant causal, window=(2.7,
    0.5) became (2, 0), threads=2.5 became 2)."""
    q, k, v = slices(rng)
    for bad in WRONG[kind_of(key)]:
        if key in ("scale", "rope") and bad is None:
            continue  # None means the default scale, no rotation
        options = {"layout": "contiguous", key: bad}
        raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                        **options),
               TypeError, f"rank 0: {key}=")


def test_typed_on_one_rank_class22(rng):
    """A wrong type on one rank alone is refused on every rank."""
    q, k, v = slices(rng)
    causal = "yes" if RANK == LAST else True
    raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    causal=causal),
           TypeError, f"rank {LAST}: causal='yes'")


@pytest.mark.at_p(2)
@pytest.mark.parametrize("typo,near", [("windw", "window"),
                                       ("presicion", "precision"),
                                       ("cuasal", "causal"),
                                       ("blockq", "block_q")])
def test_unknown_keyword_did_you_mean_class22(rng, typo, near):
    q, k, v = slices(rng)
    raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    layout="contiguous",
                                    **{typo: 1}),
           TypeError, f"unknown option {typo!r}; did you mean {near!r}?")


@pytest.mark.at_p(2)
@pytest.mark.parametrize("key,value", [("precision", "bf8"),
                                       ("wire", "fp16"),
                                       ("gemm", "mkl"),
                                       ("align", "left"),
                                       ("strategy", "rings")])
def test_unknown_name_class22(rng, key, value):
    """An enum's unknown name: a ValueError naming the field."""
    q, k, v = slices(rng)
    raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    **{key: value}),
           ValueError, value)


def test_progress_callbacks_class22(rng):
    """on_step(done, total) after each ring step, 1 .. total, and
    on_tick(share) with shares in [0, 1], on every rank (each its own
    callables); an exception a callable raises reaches its own rank once
    the call has completed on every rank."""
    q, k, v = slices(rng, N=40 * P + 7, D=16)
    steps, ticks = [], []
    o, _ = ringattn.forward(q, k, v, COMM, order="bnhd",
                            layout="contiguous", block_q=16,
                            block_kv=16, on_step=lambda d, t:
                            steps.append((d, t)), on_tick=ticks.append)
    total = steps[-1][1] if steps else 0
    agreed(steps == [(d, total) for d in range(1, total + 1)] and total >= 1
           and ticks and all(0 <= t <= 1 for t in ticks),
           f"steps {steps}, ticks {ticks[:5]}...")

    def fail(done, total):
        raise KeyError("from on_step")

    try:
        again, _ = ringattn.forward(q, k, v, COMM, order="bnhd",
                                    layout="contiguous",
                                    block_q=16, block_kv=16,
                                    on_step=fail if RANK == LAST else None)
        got = np.array_equal(again, o)
    except KeyError as exc:
        got = str(exc)
    want = "'from on_step'" if RANK == LAST else True
    agreed(got == want, f"got {got!r}")


def test_precision_bf16_class22(rng):
    """precision="bf16" computes the tile products in bfloat16: o and the
    gradients within bfloat16's tolerance of float64, and further from it
    than the float32 call (which is within float32's)."""
    B, N, H, D = 2, 4 * P + 5, 2, 16
    q, k, v, dout = (normal(rng, (B, N, H, D)) for _ in range(4))
    o_ref, _, g_ref = reference_grads(q, k, v, dout, causal=True)

    def mine(x):
        return ringattn.shard(x, "contiguous", COMM)

    ql, kl, vl, dl = mine(q), mine(k), mine(v), mine(dout)
    opts = {"causal": True, "layout": "contiguous"}
    o32, lse32 = ringattn.forward(ql, kl, vl, COMM, order="bnhd", **opts)
    o16, lse16 = ringattn.forward(ql, kl, vl, COMM, order="bnhd",
                                  precision="bf16", **opts)
    g16 = ringattn.backward(ql, kl, vl, o16, lse16, dl, COMM, order="bnhd",
                            precision="bf16", **opts)
    close("o fp32", o32, mine(o_ref), 2e-5)
    close("o bf16", o16, mine(o_ref), 2e-2)
    for name, got, want in zip(("dq", "dk", "dv"), g16, g_ref):
        close(name + " bf16", got, mine(want), 4e-2)
    gap = COMM.allreduce(float(np.abs(o16 - o32).max()), op=max) / \
        COMM.allreduce(float(np.abs(o_ref).max()), op=max)
    agreed(gap > 1e-4, f"bf16 and fp32 outputs differ by {gap:.3g} only")


def alibi_reference(q, k, v, slopes, causal):
    """o (B, N, H, Dv) float64 with ALiBi's bias -slope_h |j - i|
    (N == M), from the definition."""
    q, k, v = (torch.from_numpy(x.astype(np.float64)) for x in (q, k, v))
    B, N, H, D = q.shape
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
    dist = (torch.arange(N)[None, :] - torch.arange(N)[:, None]).abs()
    s = s - torch.tensor(slopes, dtype=torch.float64)[None, :, None, None] \
        * dist
    s = s.masked_fill(~visible(B, N, N, causal=causal), -math.inf)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v).numpy()


def test_alibi_slopes_right_class5(rng):
    """Slopes given as a list of integers or an array of floats: one per
    query head, the output ALiBi's by definition."""
    B, N, H, D = 1, 4 * P + 3, 3, 8
    q, k, v = (normal(rng, (B, N, H, D)) for _ in range(3))
    want = alibi_reference(q, k, v, [1, 2, 0.5], causal=True)
    ql, kl, vl = (ringattn.shard(x, "contiguous", COMM) for x in (q, k, v))
    for slopes in ([1, 2, 0.5], np.array([1, 2, 0.5], np.float32)):
        o, _ = ringattn.forward(ql, kl, vl, COMM, order="bnhd",
                                layout="contiguous",
                                causal=True, alibi=slopes)
        close("alibi", o, ringattn.shard(want, "contiguous", COMM), 2e-5)


ALIBI_BAD = [
    ("short", np.ones(1), ValueError, "alibi: slopes of shape (1,); "
     "expected one per query head, (2,)"),
    ("long", np.ones(3), ValueError, "alibi: slopes of shape (3,)"),
    ("2-D", np.ones((2, 1)), ValueError, "alibi: slopes of shape (2, 1)"),
    ("empty", [], ValueError, "alibi: slopes of shape (0,)"),
    ("nan", [0.5, np.nan], ValueError, "alibi: slope 1 is not a finite"),
    ("inf", np.array([np.inf, 0.5]), ValueError, "alibi: slope 0 is not"),
    ("complex", np.ones(2, complex), TypeError, "alibi: slopes of dtype "
     "complex128"),
    ("bool", np.ones(2, bool), TypeError, "alibi: slopes of dtype bool"),
    ("object", [0.5, None], TypeError, "alibi: slopes of dtype object"),
    ("ragged", [[1.0], [1.0, 2.0]], ValueError, "alibi: "),
    ("int", 1, TypeError, "alibi=1 (int)"),
]


@pytest.mark.parametrize("case", ALIBI_BAD, ids=[c[0] for c in ALIBI_BAD])
def test_alibi_slopes_refused_class5(rng, case):
    """Slopes of another length, rank or dtype, or not finite, are
    refused on every rank, whether every rank or the last alone passes
    them (before: a short array was read past its end, a longer one cut,
    a 2-D one taken)."""
    _, bad, cls, text = case
    q, k, v = slices(rng, H=2)
    raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    layout="contiguous",
                                    alibi=bad), cls, text)
    if P > 1 and case[0] not in ("nan", "inf"):  # the library agrees those
        mixed = bad if RANK == LAST else [0.5, 0.25]
        raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                        layout="contiguous",
                                        alibi=mixed), cls, f"rank {LAST}: ")


def test_threads_beyond_bound_class16(rng):
    """threads=100000 is refused on every rank, naming threads (before:
    a segmentation fault of the interpreter)."""
    q, k, v = slices(rng)
    for threads in (100000, 1 << 40):
        raised(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                        layout="contiguous",
                                        threads=threads),
               ValueError, "threads")
