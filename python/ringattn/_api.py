"""The NumPy API: forward() and backward() on each rank's slices.

Validate, agree, then call: every check made here (types, dtypes,
contiguity, shapes, options, masks, non-finite values) runs on each rank
first; one Iallgather, waited for at most stall_timeout, then shares
every rank's verdict and local sizes, so that a refusal raises
ringattn.Error on every rank alike (with the message of the lowest
failing rank), no rank is left waiting in a collective, and a rank that
never arrives costs the others an Error, not a hang. The library agrees
its own errors the same way. Nothing is copied: the library reads the
caller's float32 arrays and writes arrays made here."""
from collections import namedtuple

import numpy as np
from mpi4py import MPI

from . import _core, _mpi, _options
from ._errors import error, refusal_of

# The facts each rank shares before a call, in this order: what this
# layer needs alike on every rank, the sizes of the arrays it hands the
# library (the global shape is built from them) and what decides the
# layout and its cut (its verdict on the slices). The library agrees every
# other option, the masks and the weights itself (ra_forward).
FACTS = ("n", "m", "B", "H", "G", "D", "Dv", "Dk", "A", "segments") + \
    _options.CUT
# How a fact that differs between ranks is named in the message.
FACT_NAMES = {"B": "batch B", "H": "query heads H", "G": "kv heads G",
              "D": "head dim D", "Dv": "value dim Dv", "Dk": "key dim Dk",
              "A": "additive hidden size A",
              "segments": "segment masks (given or not)"}

Call = namedtuple("Call", "comm shape opts masks extras layout")


def tensor(name, x, ndim):
    """Refuses what the library cannot read in place: not a float32,
    C-contiguous numpy array of ndim axes."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} is a {type(x).__name__}, not a numpy array")
    if x.dtype != np.float32:
        raise TypeError(f"{name} has dtype {x.dtype}; ringattn reads "
                        "float32 (convert with .astype(np.float32))")
    if x.ndim != ndim:
        raise ValueError(f"{name} has {x.ndim} axes {x.shape}; expected "
                         f"{ndim}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (strides {x.strides});"
                         f" pass np.ascontiguousarray({name})")


def int_array(name, x, shape):
    """A mask as a contiguous int64 array of the given shape."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} has dtype {a.dtype}; expected integers")
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}; expected {shape}")
    return np.ascontiguousarray(a, dtype=np.int64)


def shapes(t):
    """The local sizes of q (B, n, H, D), k (B, m, G, Dk), v (B, m, G, Dv),
    checked against each other."""
    (B, n, H, D), (Bk, m, G, Dk), Dv = t["q"].shape, t["k"].shape, \
        t["v"].shape[3]
    if Bk != B or t["v"].shape[:3] != t["k"].shape[:3]:
        raise ValueError(f"q {t['q'].shape}, k {t['k'].shape} and v "
                         f"{t['v'].shape} must be (B, n, H, D), (B, m, G, D) "
                         "and (B, m, G, Dv)")
    expect = {"o": (B, n, H, Dv), "dout": (B, n, H, Dv), "lse": (B, H, n)}
    for name, shape in expect.items():
        if name in t and t[name].shape != shape:
            raise ValueError(f"{name} has shape {t[name].shape}; expected "
                             f"{shape}")
    return dict(n=n, m=m, B=B, H=H, G=G, D=D, Dv=Dv, Dk=Dk)


def masks(options, size):
    """ra_masks' arrays (q_lens, kv_lens, q_segments, kv_segments)."""
    B, n, m = size["B"], size["n"], size["m"]
    q_lens, kv_lens, seg, kv_seg = (options.get(k) for k in _options.MASKS)
    if kv_seg is not None and seg is None:
        raise ValueError("kv_segments needs segments (the queries' ids)")
    if seg is not None and kv_seg is None:
        if n != m:
            raise ValueError(f"segments alone serve queries and keys alike, "
                             f"but this rank holds {n} queries and {m} keys;"
                             " pass kv_segments too")
        kv_seg = seg
    return (None if q_lens is None else int_array("q_lens", q_lens, (B,)),
            None if kv_lens is None else int_array("kv_lens", kv_lens, (B,)),
            None if seg is None else int_array("segments", seg, (B, n)),
            None if kv_seg is None else int_array("kv_segments", kv_seg,
                                                  (B, m)))


def weights(options, size, grads):
    """The additive score's (w_q, w_k, w_v) and, for the backward, arrays
    for their gradients; Nones for the other scores."""
    w = options.get("additive")
    if w is None:
        return (None,) * (6 if grads else 3), 0
    w_q, w_k, w_v = w
    for name, x, nd in (("w_q", w_q, 2), ("w_k", w_k, 2), ("w_v", w_v, 1)):
        tensor(name, x, nd)
    A = w_v.shape[0]
    if w_q.shape != (A, size["D"]) or w_k.shape != (A, size["Dk"]):
        raise ValueError(f"additive weights w_q {w_q.shape}, w_k {w_k.shape}"
                         f", w_v {w_v.shape}: expected (A, D), (A, Dk), (A,)")
    dw = tuple(np.empty_like(x) for x in (w_q, w_k, w_v)) if grads else ()
    return (w_q, w_k, w_v) + dw, A


def scan(t):
    """Refuses a NaN or infinity in the inputs (as the command line does
    unless --allow-nonfinite)."""
    for name in ("q", "k", "v", "dout"):
        at = _core.first_nonfinite(t[name]) if name in t else -1
        if at >= 0:
            where = np.unravel_index(at, t[name].shape)
            raise error(f"{name}[{', '.join(map(str, where))}] (local index) "
                        f"= {t[name].flat[at]} is not finite; pass "
                        "nonfinite=True to let it through", "invalid input",
                        "value")


def local(t, options, grads):
    """This rank's checks: the facts to share, and the call's parts."""
    for name, x in t.items():
        tensor(name, x, 3 if name == "lse" else 4)
    size = shapes(t)
    opts = _options.params(options)
    _core.check_options(opts)
    mk = masks(options, size)
    w, size["A"] = weights(options, size, grads)
    slopes = _options.alibi_slopes(options, size["H"])
    if not opts["nonfinite"]:
        scan(t)
    size["segments"] = int(mk[2] is not None)
    size.update(_options.cut_facts(opts))
    return size, opts, mk, (slopes,) + w


def agree(comm, refusal, facts, timeout):
    """Every rank's facts (a P x len(facts) array), waited for at most
    timeout seconds (0: for ever); raises on every rank when any rank has
    a refusal (message, status, kind), with the lowest such rank's."""
    mine = np.array([refusal is not None] + list(facts), dtype=np.int64)
    table = np.empty((comm.Get_size(), mine.size), dtype=np.int64)
    _mpi.wait(comm.Iallgather(mine, table), timeout,
              "the agreement before the call", (mine, table))
    bad = np.flatnonzero(table[:, 0])
    if bad.size:
        root = int(bad[0])  # every rank has arrived: the bcast is safe
        text, status, kind = comm.bcast(refusal, root=root)
        raise error(f"rank {root}: {text}", status, kind)
    return table[:, 1:]


def verdict(comm, table, opts):
    """The global shape from every rank's facts, refusing facts that differ
    between ranks and slices that are not the layout's; the same verdict
    on every rank, since every rank holds the same table."""
    for j, name in enumerate(FACTS[2:], start=2):
        col = table[:, j]
        if (col != col[0]).any():
            r = int(np.flatnonzero(col != col[0])[0])
            values = ("" if name == "layout"  # a checksum of the name
                      else f" ({col[r]} against {col[0]})")
            raise error(f"rank {r} passes other "
                        f"{FACT_NAMES.get(name, name)} than rank"
                        f" 0{values}; every rank must pass the same",
                        kind="value")
    N, M = (int(x) for x in table[:, :2].sum(axis=0))
    layout = _core.layout_resolve(opts, bool(table[0, FACTS.index(
        "segments")]))
    P = comm.Get_size()
    for r in range(P):
        for axis, length, what in ((0, N, "queries"), (1, M, "keys")):
            want = sum(c for _, c, _ in _core.layout_slice(layout, length, r,
                                                           P, opts))
            if table[r, axis] != want:
                raise error(f"rank {r} holds {table[r, axis]} {what} where "
                            f"layout {layout} gives it {want} of "
                            f"{length} (see ringattn.owned_positions)",
                            kind="value")
    return N, M, layout


def prepare(comm, t, options, grads=False, refusal=None):
    """Validate, agree, then everything the call takes. refusal: a local
    refusal (message, status, kind) found before (the torch layer's),
    agreed like the others."""
    facts, parts = [0] * len(FACTS), None
    if refusal is None:
        try:
            size, opts, mk, extras = local(t, options, grads)
            facts, parts = [size[f] for f in FACTS], (opts, mk, extras)
        except Exception as exc:  # any local refusal is agreed, never alone
            refusal = refusal_of(exc)
    table = agree(comm, refusal, facts, _options.stall_timeout(options))
    opts, mk, extras = parts
    N, M, layout = verdict(comm, table, opts)
    s = dict(zip(FACTS, table[0]))
    shape = (s["B"], N, M, s["H"], s["G"], s["D"], s["Dv"],
             0 if s["Dk"] == s["D"] else s["Dk"], s["A"])
    return Call(comm, tuple(int(x) for x in shape), opts, mk, extras, layout)


def run_forward(comm, t, options, refusal=None):
    """forward() on the dict t of q, k, v: (o, lse, timings)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    c = prepare(comm, t, options, refusal=refusal)
    B, _, _, H, _, _, Dv, _, _ = c.shape
    n = t["q"].shape[1]
    o = np.empty((B, n, H, Dv), dtype=np.float32)
    lse = np.empty((B, H, n), dtype=np.float32)
    tm = _core.forward(c.comm, c.shape, c.opts, (t["q"], t["k"], t["v"], o,
                                                 lse), c.masks, c.extras)
    return o, lse, tm


def run_backward(comm, t, options, refusal=None):
    """backward() on the dict t of q, k, v, o, lse, dout: (dq, dk, dv),
    the additive weights' gradients or None, the timings."""
    comm = MPI.COMM_WORLD if comm is None else comm
    c = prepare(comm, t, options, grads=True, refusal=refusal)
    q, k, v = t["q"], t["k"], t["v"]
    dq, dk, dv = (np.empty_like(x) for x in (q, k, v))
    tm = _core.backward(c.comm, c.shape, c.opts,
                        (q, k, v, t["o"], t["lse"], t["dout"], dq, dk, dv),
                        c.masks, c.extras)
    return (dq, dk, dv), (c.extras[4:] if c.shape[8] else None), tm


def forward(q, k, v, comm=None, *, timing=False, **options):
    """Exact attention on this rank's slices; collective over comm (default
    MPI.COMM_WORLD). q (B, n, H, D), k (B, m, G, D), v (B, m, G, Dv):
    float32, C-contiguous, this rank's tokens of the layout
    (owned_positions), read in place. Returns o (B, n, H, Dv) and
    lse (B, H, n), and the library's timings (a dict) with timing=True.
    Options as ra_numerics and ra_exec (causal, window=(left, right),
    scale, score, sigma, layout, strategy, threads, rope, rope_base, alibi
    (True or
    slopes), nonfinite, stall_timeout, block_q, block_kv, mem_limit,
    ulysses_size); masks q_lens, kv_lens (B,), segments (B, n) (and
    kv_segments (B, m)); the additive score's weights
    additive=(w_q, w_k, w_v). Raises ringattn.Error on every rank alike."""
    o, lse, tm = run_forward(comm, {"q": q, "k": k, "v": v}, options)
    return (o, lse, tm) if timing else (o, lse)


def backward(q, k, v, o, lse, dout, comm=None, *, timing=False, **options):
    """Gradients of forward() through the ring (the ring strategy whatever
    `strategy` says): the same slices, options and masks as the forward,
    its o and lse, and dout (B, n, H, Dv). Returns dq, dk, dv (and, for
    the additive score, a tuple dw_q, dw_k, dw_v summed over all ranks;
    and the timings with timing=True). Collective; raises ringattn.Error on
    every rank alike."""
    t = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "dout": dout}
    grads, dw, tm = run_backward(comm, t, options)
    out = grads + ((dw,) if dw is not None else ())
    return out + (tm,) if timing else out
