"""The NumPy API: forward() and backward() on each rank's slices.

Validate, agree, then call: every check made here (types, dtypes,
contiguity, shapes, options, masks, non-finite values) runs on each rank
first; one Iallgather, waited for at most stall_timeout, then shares
every rank's verdict and local sizes, so that a refusal raises
ringattn.Error on every rank alike (with the message of the lowest
failing rank), no rank is left waiting in a collective, and a rank that
never arrives costs the others an Error, not a hang. The library agrees
its own errors the same way. Shards cut as the call computes them are
not copied: the library reads the caller's float32 arrays and writes
arrays made here. Contiguous shards (layout "auto") under causal, window
or segments are moved into the library's balanced layout and the results
moved back (_shards.Move), at the cost of those copies and one
all-to-all per array."""
from collections import namedtuple

import numpy as np
from mpi4py import MPI

from . import _core, _mpi, _options
from ._errors import error, refusal_of
from ._layout import held_layout
from ._shards import Move

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

Call = namedtuple("Call", "comm shape opts masks extras layout moves")

# The orders of 4-D arrays and tensors, named by the caller (order=):
# never assumed, since (B, n, H, D) and (B, H, n, D) cannot be told apart
# when n == H (and SDPA's users hold the second, flash-attention's the
# first).
ORDERS = ("bnhd", "bhnd")


def check_order(order, what):
    """Refuses an order not given or not one of ORDERS; what: the noun of
    the caller's arrays ("arrays", "tensors")."""
    if order is None:
        raise TypeError(f"order: not given; say which order the {what} "
                        "are in: order='bnhd' for (B, n, H, D) or "
                        "order='bhnd' for (B, H, n, D)")
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {ORDERS}")


def swapped(x):
    """A 4-D array with axes 1 and 2 swapped, C-contiguous (a copy unless
    it is a swapped view of a C-contiguous array)."""
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))


def in_order(arrays, order):
    """The dict of the caller's arrays with the 4-D ones in (B, n, H, D)
    order (order "bhnd": swapped into copies; anything else passes for the
    call's checks to refuse), and a refusal or None, agreed by the call."""
    try:
        check_order(order, "arrays")
    except Exception as exc:  # agreed by prepare
        return arrays, refusal_of(exc)
    if order == "bnhd":
        return arrays, None
    return {k: swapped(x) if isinstance(x, np.ndarray) and x.ndim == 4
            else x for k, x in arrays.items()}, None


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


def local(t, options, grads, scanned=False):
    """This rank's checks: the facts to share, and the call's parts
    (scanned: the inputs' NaN scan was made before)."""
    for name, x in t.items():
        tensor(name, x, 3 if name == "lse" else 4)
    size = shapes(t)
    opts = _options.params(options)
    _core.check_options(opts)
    mk = masks(options, size)
    w, size["A"] = weights(options, size, grads)
    slopes = _options.alibi_slopes(options, size["H"])
    sinks = _options.sinks(options, size["H"])
    dsinks = np.zeros(size["H"], np.float32) \
        if grads and sinks is not None else None
    w = w + (None,) * (6 - len(w))  # the forward has no dw_*
    if not (opts["nonfinite"] or scanned):
        scan(t)
    size["segments"] = int(mk[2] is not None)
    size.update(_options.cut_facts(opts))
    return size, opts, mk, (slopes,) + w + (sinks, dsinks)


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


def lengths(table):
    """The global N and M from every rank's facts, refusing facts that
    differ between ranks; the same verdict on every rank, since every
    rank holds the same table."""
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
    return tuple(int(x) for x in table[:, :2].sum(axis=0))


def verdict(comm, table, opts, N, M):
    """The layout the library computes in and the cut of the caller's
    shards (held_layout), refusing slices whose row counts are not that
    cut's; the same verdict on every rank."""
    layout = _core.layout_resolve(opts, bool(table[0, FACTS.index(
        "segments")]))
    held = held_layout(opts["layout"], layout)
    cut = ("contiguous shards (layout 'auto') give" if opts["layout"] ==
           "auto" else f"layout {held} gives")
    P = comm.Get_size()
    for r in range(P):
        for axis, length, what in ((0, N, "queries"), (1, M, "keys")):
            want = sum(c for _, c, _ in _core.layout_slice(held, length, r,
                                                           P, opts))
            if table[r, axis] != want:
                raise error(f"rank {r} holds {table[r, axis]} {what} where "
                            f"{cut} it {want} of {length} (see "
                            "ringattn.owned_positions)", kind="value")
    return layout, held


def prepare(comm, t, options, grads=False, refusal=None, fix=None,
            scanned=False):
    """Validate, agree, then everything the call takes. refusal: a local
    refusal (message, status, kind) found before (the torch layer's),
    agreed like the others; fix(N, M, opts): a rule of the caller's on
    the global lengths (it may complete opts from them), returning a
    refusal's message or None, the same on every rank."""
    facts, parts = [0] * len(FACTS), None
    if refusal is None:
        try:
            size, opts, mk, extras = local(t, options, grads, scanned)
            facts, parts = [size[f] for f in FACTS], (opts, mk, extras)
        except Exception as exc:  # any local refusal is agreed, never alone
            refusal = refusal_of(exc)
    table = agree(comm, refusal, facts, _options.stall_timeout(options))
    opts, mk, extras = parts
    N, M = lengths(table)
    text = fix(N, M, opts) if fix is not None else None
    if text:
        raise error(text, kind="value")
    layout, held = verdict(comm, table, opts, N, M)
    opts["layout"] = layout
    moves = None
    if held != layout and comm.Get_size() > 1:
        moves = (Move(comm, N, held, layout, opts),
                 Move(comm, M, held, layout, opts))
    s = dict(zip(FACTS, table[0]))
    shape = (s["B"], N, M, s["H"], s["G"], s["D"], s["Dv"],
             0 if s["Dk"] == s["D"] else s["Dk"], s["A"])
    return Call(comm, tuple(int(x) for x in shape), opts, mk, extras, layout,
                moves)


# Which Move (0: the queries', 1: the keys') and which axis each array's
# rows take.
ROWS = {"q": (0, 1), "o": (0, 1), "dout": (0, 1), "lse": (0, 2),
        "dq": (0, 1), "k": (1, 1), "v": (1, 1), "dk": (1, 1), "dv": (1, 1)}


def moved(c, arrays, timeout, back=False):
    """The dict of arrays in the library's layout (back: in the caller's
    cut), moved when the two differ."""
    if c.moves is None:
        return arrays
    out = {}
    for name, x in arrays.items():
        which, axis = ROWS[name]
        move = c.moves[which]
        out[name] = (move.back if back else move.forward)(x, axis, timeout)
    return out


def moved_masks(c, timeout):
    """ra_masks' arrays in the library's layout (the segment ids move with
    their rows; lens are global)."""
    q_lens, kv_lens, seg, kv_seg = c.masks
    if c.moves is None or seg is None:
        return c.masks
    return (q_lens, kv_lens, c.moves[0].forward(seg, 1, timeout),
            c.moves[1].forward(kv_seg, 1, timeout))


def run_forward(comm, t, options, refusal=None, fix=None, keep=None):
    """forward() on the dict t of q, k, v: (o, lse, timings). keep: a
    dict that, when the call moved rows, receives what a backward on the
    moved rows needs (Kept), for run_backward_kept."""
    comm = MPI.COMM_WORLD if comm is None else comm
    c = prepare(comm, t, options, refusal=refusal, fix=fix)
    wait = _options.stall_timeout(options)
    t = moved(c, t, wait)
    B, _, _, H, _, _, Dv, _, _ = c.shape
    n = t["q"].shape[1]
    o = np.empty((B, n, H, Dv), dtype=np.float32)
    lse = np.empty((B, H, n), dtype=np.float32)
    mk = moved_masks(c, wait)
    tm = _core.forward(c.comm, c.shape, c.opts, (t["q"], t["k"], t["v"], o,
                                                 lse), mk, c.extras)
    if keep is not None and c.moves is not None:
        keep["kept"] = Kept(c, dict(t, o=o, lse=lse), mk)
    r = moved(c, {"o": o, "lse": lse}, wait, back=True)
    return r["o"], r["lse"], tm


# A forward's moved rows (q, k, v, o, lse in the library's layout), its
# Call (the moves, the resolved layout) and its moved masks.
Kept = namedtuple("Kept", "call arrays masks")


def run_backward_kept(kept, dout, options, fix=None):
    """The backward of a forward that moved rows, on its Kept: dout moved
    in, (dq, dk, dv) moved back to the caller's cut; 4 moves where
    run_backward on the caller's arrays makes 9. A NaN in dout is
    refused with its index in the caller's slice, agreed as any other."""
    c, wait = kept.call, _options.stall_timeout(options)
    refusal = None
    if not c.opts["nonfinite"]:
        try:
            scan({"dout": dout})
        except Exception as exc:  # agreed by run_backward
            refusal = refusal_of(exc)
    t = dict(kept.arrays, dout=c.moves[0].forward(dout, 1, wait))
    opts = dict(options, layout=c.layout)
    if kept.masks[2] is not None:
        opts.update(segments=kept.masks[2], kv_segments=kept.masks[3])
    # Scanned already: dout here, q, k and v by the forward.
    grads, _, _, dsinks = run_backward(c.comm, t, opts, refusal, fix,
                                       scanned=True)
    r = moved(c, dict(zip(("dq", "dk", "dv"), grads)), wait, back=True)
    return (r["dq"], r["dk"], r["dv"]), dsinks


def run_backward(comm, t, options, refusal=None, fix=None, scanned=False):
    """backward() on the dict t of q, k, v, o, lse, dout: (dq, dk, dv),
    the additive weights' gradients or None, the timings, the sinks'
    gradient (H,) or None. scanned: the inputs were scanned for NaN
    before (run_backward_kept)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    c = prepare(comm, t, options, grads=True, refusal=refusal, fix=fix,
                scanned=scanned)
    wait = _options.stall_timeout(options)
    t = moved(c, t, wait)
    q, k, v = t["q"], t["k"], t["v"]
    dq, dk, dv = (np.empty_like(x) for x in (q, k, v))
    tm = _core.backward(c.comm, c.shape, c.opts,
                        (q, k, v, t["o"], t["lse"], t["dout"], dq, dk, dv),
                        moved_masks(c, wait), c.extras)
    r = moved(c, {"dq": dq, "dk": dk, "dv": dv}, wait, back=True)
    return (r["dq"], r["dk"], r["dv"]), \
        (c.extras[4:7] if c.shape[8] else None), tm, c.extras[8]


def forward(q, k, v, comm=None, *, order=None, timing=False, **options):
    """Exact attention on this rank's slices; collective over comm (default
    MPI.COMM_WORLD). q (B, n, H, D), k (B, m, G, D), v (B, m, G, Dv) with
    order="bnhd" (read in place), or (B, H, n, D), (B, G, m, D),
    (B, G, m, Dv) with order="bhnd" (swapped into copies); no default:
    an order not given is refused. float32, this rank's tokens: its
    contiguous shard by default (layout "auto", moved into the library's
    balanced layout and back when causal, window or segments make that
    pay), or its tokens of the layout named by layout= (owned_positions
    gives either). Returns o in q's order ((B, n, H, Dv) or (B, H, n, Dv))
    and lse (B, H, n), and the library's timings (a dict) with
    timing=True. Options as ra_numerics and ra_exec (every value field,
    docs/PYTHON.md); masks q_lens, kv_lens (B,), segments (B, n) (and
    kv_segments (B, m)); the additive score's weights
    additive=(w_q, w_k, w_v); attention sinks sinks= (H,), one logit per
    query head (ringattn.h, ra_numerics.sinks). Raises ringattn.Error on
    every rank alike."""
    t, refusal = in_order({"q": q, "k": k, "v": v}, order)
    o, lse, tm = run_forward(comm, t, options, refusal)
    o = swapped(o) if order == "bhnd" else o
    return (o, lse, tm) if timing else (o, lse)


def backward(q, k, v, o, lse, dout, comm=None, *, order=None, timing=False,
             **options):
    """Gradients of forward() through the ring (the ring strategy whatever
    `strategy` says): the same slices, order, options and masks as the
    forward, its o and lse, and dout (o's shape). Returns dq, dk, dv in
    the caller's order (and, for the additive score, a tuple dw_q, dw_k,
    dw_v summed over all ranks; with sinks=, their gradient (H,) summed
    over all ranks; and the timings with timing=True).
    Collective; raises ringattn.Error on every rank alike."""
    t, refusal = in_order({"q": q, "k": k, "v": v, "o": o, "lse": lse,
                           "dout": dout}, order)
    grads, dw, tm, dsinks = run_backward(comm, t, options, refusal)
    if order == "bhnd":
        grads = tuple(swapped(g) for g in grads)
    out = grads + ((dw,) if dw is not None else ()) + \
        ((dsinks,) if dsinks is not None else ())
    return out + (tm,) if timing else out
