"""Refusals and failures are ringattn.Error exceptions raised on every rank
alike, with one message, never an abort or a hang: a wrong dtype, a
non-contiguous array, shapes or options that differ between ranks, slices
that are not the layout's, bad option values, a NaN (nonfinite off and
on), and the library's own refusals."""
import numpy as np
import pytest

import ringattn

from conftest import COMM, P, agreed, close, normal

RANK = COMM.Get_rank()
LAST = P - 1


def slices(rng, N=4 * P + 3, H=2, D=8):
    """This rank's contiguous slices of random q, k, v (B = 1)."""
    return [ringattn.shard(normal(rng, (1, N, H, D)), "contiguous", COMM)
            for _ in range(3)]


def refused(fn, *contains, status="invalid argument"):
    """fn raises ringattn.Error on every rank, the same message on all,
    holding each of `contains`, with the given status."""
    try:
        fn()
        got = None
    except ringattn.Error as exc:
        got = (str(exc), getattr(exc, "status", None))
    every = COMM.allgather(got)
    ok = (got is not None and len(set(every)) == 1 and got[1] == status
          and all(c in got[0] for c in contains))
    agreed(ok, f"expected Error with {contains} ({status}); got {every}")


def fwd(q, k, v, **options):
    return lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                    layout="contiguous",
                                    **options)


def test_wrong_dtype_on_one_rank(rng):
    q, k, v = slices(rng)
    if RANK == LAST:
        q = q.astype(np.float64)
    refused(fwd(q, k, v), f"rank {LAST}: ", "dtype float64")


def test_non_contiguous_on_one_rank(rng):
    q, k, v = slices(rng)
    if RANK == 0:
        wide = np.zeros(k.shape[:3] + (2 * k.shape[3],), np.float32)
        wide[..., ::2] = k
        k = wide[..., ::2]
    refused(fwd(q, k, v), "rank 0: ", "k is not C-contiguous")


def test_shapes_inconsistent_locally(rng):
    q, k, v = slices(rng)
    refused(fwd(q, np.ascontiguousarray(k[:, :, :1]), v),
            "must be (B, n, H, D)")


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_shapes_differ_between_ranks(rng):
    q, k, v = slices(rng, D=8 if RANK < LAST else 4)
    refused(fwd(q, k, v), f"rank {LAST} passes other head dim D")


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_slices_not_the_layout(rng):
    """Rank 0 hands its last query to rank 1: N is right, slices not."""
    q, k, v = slices(rng)
    if RANK == 0:
        q = np.ascontiguousarray(q[:, :-1])
    if RANK == 1:
        q = np.concatenate([q[:, :1], q], axis=1)
    refused(fwd(q, k, v), "rank 0 holds", "layout contiguous gives it")


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_options_differ_between_ranks(rng):
    q, k, v = slices(rng)
    refused(fwd(q, k, v, causal=RANK == 0), "rank 1 passes other causal "
            "than rank 0 (0 against 1)")


@pytest.mark.skipif(P < 2, reason="needs two ranks")
@pytest.mark.parametrize("key,mine,others,name", [
    ("scale", 0.5, 0.25, "scale"),
    ("alibi", [0.5, 0.1], [0.5, 0.2], "alibi_slopes"),
    ("q_lens", [3], [4], "q_lens"),
    ("precision", "bf16", "fp32", "precision"),
])
def test_other_options_refused_by_the_library(rng, key, mine, others, name):
    """Options, slopes and lens that differ between ranks are the
    library's to agree (issue 39, class 7): refused on every rank, by
    name; this layer agrees only what decides the layout (class 11's
    report: no rule twice)."""
    q, k, v = slices(rng)
    value = mine if RANK == LAST else others
    refused(fwd(q, k, v, **{key: value}), name)


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_threads_are_each_ranks_own(rng):
    """threads may differ between ranks (a rank's own cores), as the
    library allows (before: refused by this layer's checksum)."""
    q, k, v = slices(rng)
    want, _ = ringattn.forward(q, k, v, COMM, order="bnhd",
                               layout="contiguous")
    o, _ = ringattn.forward(q, k, v, COMM, order="bnhd", layout="contiguous",
                            threads=1 + (RANK == LAST))
    close("o", o, want, 2e-5)


@pytest.mark.at_p(2)
def test_bad_options(rng):
    q, k, v = slices(rng)
    refused(lambda: ringattn.forward(q, k, v, COMM, order="bnhd",
                                     layout="diagonal"),
            "diagonal")
    refused(fwd(q, k, v, window=(-1, 0)), "window")
    refused(fwd(q, k, v, windw=(1, 0)), "unknown option 'windw'")
    refused(fwd(q, k, v, q_lens=[1, 2]), "q_lens has shape (2,)")


def test_library_refusal(rng):
    """ulysses needs P <= H: the library refuses, agreed, by name."""
    q, k, v = slices(rng, H=1)
    if P > 1:
        refused(fwd(q, k, v, strategy="ulysses"), "ulysses")
    refused(fwd(q, k, v, scale=float("inf")), "scale")


def test_nan_refused_unless_nonfinite(rng):
    q, k, v = slices(rng)
    if RANK == LAST:
        k[0, -1, 0, 1] = np.nan
    refused(fwd(q, k, v), f"rank {LAST}: k[0, ", "not finite",
            status="invalid input")


def test_nan_with_nonfinite(rng):
    """With nonfinite=True a NaN in query t makes o's row t NaN and leaves
    every other row as it was."""
    q, k, v = slices(rng)
    pos = ringattn.owned_positions("contiguous", 4 * P + 3, COMM)
    clean, _ = ringattn.forward(q, k, v, COMM, order="bnhd",
                                layout="contiguous")
    rows = np.flatnonzero(pos == 3)
    q[0, rows, 1, 0] = np.nan
    o, _ = ringattn.forward(q, k, v, COMM, order="bnhd", layout="contiguous",
                            nonfinite=True)
    nan_rows = np.flatnonzero(np.isnan(o).any(axis=(0, 2, 3)))
    agreed(np.array_equal(nan_rows, rows), f"NaN rows {nan_rows} != {rows}")
    keep = np.setdiff1d(np.arange(len(pos)), rows)
    close("rows without NaN", o[:, keep], clean[:, keep], 1e-6)


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_unshard_shapes_differ_class11(rng):
    """unshard agrees the slices' shapes and dtypes before it gathers
    them (before: a pickled allgather, then a broadcast error on some
    ranks alone): a ValueError on every rank alike."""
    x = normal(rng, (1, 3, 2 if RANK < LAST else 4))
    try:
        ringattn.unshard(x, "contiguous", COMM)
        got = None
    except ValueError as exc:
        got = str(exc)
    every = COMM.allgather(got)
    agreed(got is not None and f"rank {LAST} passes a slice of other" in got
           and len(set(every)) == 1, f"{every}")
