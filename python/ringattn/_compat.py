"""The signatures PyTorch users already call, on ringattn.torch.attend:
flash-attention's flash_attn_func and flash_attn_varlen_func and
PyTorch's scaled_dot_product_attention. Each argument is mapped exactly
onto ringattn's options or refused by name (a ringattn.Error on every
rank alike, through the call's agreement); the shard semantics are
attention()'s: each rank passes its contiguous shard of the sequence
(layout="auto"), or its tokens of the layout it names.

Mapping (queries aligned bottom-right, as flash-attention >= 2.1 and
ringattn both align them): window_size (left, right) with -1 for "no
bound on that side" is ringattn's window with that side as long as the
sequences; alibi_slopes (H,) are ringattn's slopes (bias -slope *
|j - i'|); the varlen functions' packed sequences are segment ids with
align="sequence" (each sequence bottom-right on its own lengths)."""
import numpy as np
import torch

from . import torch as _rt
from ._errors import refusal_of
from ._layout import owned_positions

# What no entry point can express yet, and why.
NO_DROPOUT = ("dropout_p={}: ringattn has no attention dropout; pass 0.0 "
              "(dropout elsewhere in the model is unaffected)")


def _check(cond, kind, text):
    if not cond:
        raise (TypeError if kind == "type" else ValueError)(text)


def _window(window_size):
    """flash-attention's (left, right), -1 meaning unbounded: (left,
    right) with -1 kept for the fill, or None for no window."""
    ok = isinstance(window_size, (tuple, list)) and len(window_size) == 2 \
        and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                for x in window_size)
    _check(ok, "type", f"window_size={window_size!r}: expected (left, "
           "right), two integers (-1: no bound on that side)")
    left, right = (int(x) for x in window_size)
    _check(left >= -1 and right >= -1, "value", f"window_size={window_size}"
           ": each side is -1 (no bound) or a number of tokens >= 0")
    return None if (left, right) == (-1, -1) else (left, right)


def _window_options(window, length):
    """ringattn's window keyword for a flash window, an unbounded side
    as long as `length` (no key lies further), or {}."""
    if window is None:
        return {}
    return {"window": tuple(length if x < 0 else x for x in window)}


def _flash_common(dropout_p, softcap, alibi_slopes, deterministic, H):
    """The options every flash entry point maps alike."""
    _check(dropout_p == 0, "value", NO_DROPOUT.format(dropout_p))
    _check(isinstance(deterministic, bool), "type",
           f"deterministic={deterministic!r}: expected True or False "
           "(ringattn is deterministic for a given rank count either way)")
    capped = {"softcap": softcap}  # 0: off, as flash-attention's
    if alibi_slopes is None:
        return capped
    a = alibi_slopes.detach().cpu().numpy() if \
        isinstance(alibi_slopes, torch.Tensor) else np.asarray(alibi_slopes)
    _check(a.ndim == 1, "value", f"alibi_slopes of shape {a.shape}: ringattn"
           f" takes one slope per head for every batch, ({H},)")
    return dict(capped, alibi=a)


def _guarded(build, comm, order, layout):
    """The Spec of build()'s (options, fix), or of a refusal to agree: a
    bad argument on one rank must not leave the others in the
    agreement."""
    try:
        options, fix = build()
        return _rt.Spec(comm, order, dict(options, layout=layout), fix, None)
    except Exception as exc:  # agreed by the call
        return _rt.Spec(comm, order, {"layout": layout}, None,
                        refusal_of(exc))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None,
                    causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, comm=None, layout="auto"):
    """flash_attn_func of flash-attention 2 on this rank's shards: q
    (B, n, H, D), k and v (B, m, G, D); returns out (B, n, H, D), and with
    return_attn_probs (out, softmax_lse (B, H, n), None): ringattn forms
    no probabilities. dropout_p other than 0 is refused; softcap > 0 caps
    the scaled scores, CAP tanh(s / CAP), as flash-attention does."""
    def build():
        opts = _flash_common(dropout_p, softcap, alibi_slopes,
                             deterministic, q.shape[2] if q.dim() == 4 else 0)
        win = _window(window_size)
        opts.update(scale=softmax_scale, causal=causal,
                    **_window_options(win, 0))

        def fix(N, M, o):
            if win is not None:
                o["window_left"], o["window_right"] = (
                    N + M if x < 0 else x for x in win)
        return opts, fix

    spec = _guarded(build, comm, "bnhd", layout)
    out, lse = _rt.attend(q, k, v, spec, return_lse=True)
    return (out, lse, None) if return_attn_probs else out


def _cu_seqlens(name, cu):
    """cu_seqlens as an int64 array: 1-D, from 0, non-decreasing."""
    a = cu.detach().cpu().numpy() if isinstance(cu, torch.Tensor) \
        else np.asarray(cu)
    _check(a.dtype.kind in "iu", "type", f"{name} has dtype {a.dtype}; "
           "expected integers")
    _check(a.ndim == 1 and a.size >= 2 and a[0] == 0 and
           (np.diff(a) >= 0).all(), "value", f"{name}: expected a 1-D "
           "array of offsets from 0, non-decreasing (batch + 1 entries)")
    return a.astype(np.int64)


def _segments(name, cu, held, layout, comm, opts):
    """(1, n) segment ids of this rank's tokens of the packed sequences
    cu cuts (token t is in sequence s when cu[s] <= t < cu[s + 1]);
    ValueError unless the rank holds as many tokens (held) as the
    layout gives it of cu's."""
    pos = owned_positions(layout, int(cu[-1]), comm, segments=True,
                          **{k: opts[k] for k in ("causal", "window")
                             if k in opts})
    _check(len(pos) == held, "value", f"this rank holds {held} tokens "
           f"where the layout ({layout}) gives it {len(pos)} of the "
           f"{cu[-1]} that {name} packs")
    return (np.searchsorted(cu, pos, side="right") - 1)[None, :]


def _varlen_options(args, comm, layout):
    """The options of flash_attn_varlen_func's arguments (a dict args)."""
    cq = _cu_seqlens("cu_seqlens_q", args["cu_seqlens_q"])
    ck = _cu_seqlens("cu_seqlens_k", args["cu_seqlens_k"])
    _check(cq.size == ck.size, "value", f"cu_seqlens_q has {cq.size} "
           f"entries and cu_seqlens_k {ck.size}: one per sequence + 1 both")
    for side, cu in (("q", cq), ("k", ck)):
        longest, given = int(np.diff(cu).max()), args["max_seqlen_" + side]
        _check(isinstance(given, (int, np.integer)) and given >= longest,
               "value", f"max_seqlen_{side}={given!r} is not an integer "
               f">= the longest sequence, {longest}")
    _check(args["block_table"] is None, "value", "block_table: ringattn "
           "has no paged KV cache; pass None")
    opts = _flash_common(args["dropout_p"], args["softcap"],
                         args["alibi_slopes"], args["deterministic"],
                         args["H"])
    opts.update(scale=args["softmax_scale"], causal=args["causal"],
                **_window_options(_window(args["window_size"]),
                                  int(cq[-1] + ck[-1])))
    if opts["causal"] or opts.get("window") or "alibi" in opts:
        opts["align"] = "sequence"  # only a rule has something to align
    opts["segments"] = _segments("cu_seqlens_q", cq, args["n"], layout,
                                 comm, opts)
    opts["kv_segments"] = _segments("cu_seqlens_k", ck, args["m"], layout,
                                    comm, opts)
    return opts, None


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
                           max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *,
                           comm=None, layout="auto"):
    """flash_attn_varlen_func of flash-attention 2: packed sequences, q
    (total_q, H, D) and k, v (total_k, G, D) this rank's shards of the
    packed tokens; cu_seqlens_q and cu_seqlens_k (batch + 1,) the whole
    offsets, the same on every rank; each sequence aligned bottom-right
    on its own lengths. Returns out (total_q, H, D), and with
    return_attn_probs (out, softmax_lse (H, total_q), None)."""
    args = dict(locals(), H=q.shape[1] if q.dim() == 3 else 0,
                n=q.shape[0], m=k.shape[0])

    def build():
        return _varlen_options(args, comm, layout)

    spec = _guarded(build, comm, "bnhd", layout)
    out, lse = _rt.attend(*(x.unsqueeze(0) if x.dim() == 3 else x
                            for x in (q, k, v)), spec, return_lse=True)
    out, lse = out[0], lse[0]
    return (out, lse, None) if return_attn_probs else out


def _causal_size(attn_mask):
    """The size L of attn_mask when it is the whole (L, L) causal mask
    (leading axes of 1 allowed: (1, 1, L, L)), else None."""
    from ._mha import is_causal_mask
    while attn_mask.dim() > 2 and attn_mask.shape[0] == 1:
        attn_mask = attn_mask[0]
    return attn_mask.shape[0] if is_causal_mask(attn_mask) else None


def _sdpa_options(query, key, attn_mask, dropout_p, is_causal, scale,
                  enable_gqa):
    """The options of scaled_dot_product_attention's arguments."""
    size = None if attn_mask is None else _causal_size(attn_mask)
    _check(attn_mask is None or size is not None, "value", "attn_mask: "
           "ringattn takes the whole (L, L) causal mask alone (True, or "
           "-inf, exactly above the diagonal); pass is_causal=True, or call "
           "ringattn.torch.attention with window=, q_lens=/kv_lens= or "
           "segments=")
    _check(dropout_p == 0, "value", NO_DROPOUT.format(dropout_p))
    _check(isinstance(is_causal, bool), "type", f"is_causal={is_causal!r}: "
           "expected True or False")
    _check(isinstance(enable_gqa, bool), "type", f"enable_gqa="
           f"{enable_gqa!r}: expected True or False")
    H, G = query.shape[1], key.shape[1]
    _check(enable_gqa or H == G, "value", f"query has {H} heads and key "
           f"{G}: pass enable_gqa=True for grouped-query attention")

    def fix(N, M, _):
        if (is_causal or size) and N != M:
            return (f"a causal mask with L = {N} queries and S = {M} keys: "
                    "scaled_dot_product_attention aligns it top-left, "
                    "ringattn bottom-right; call "
                    "ringattn.torch.attention(causal=True) for the latter")
        if size is not None and size != N:
            return f"attn_mask is ({size}, {size}) for L = {N} queries"
        return None
    return {"scale": scale, "causal": is_causal or size is not None}, fix


def scaled_dot_product_attention(query, key, value, attn_mask=None,
                                 dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, comm=None,
                                 layout="auto"):
    """torch.nn.functional.scaled_dot_product_attention on this rank's
    shards of L and S: query (B, H, L, E), key (B, G, S, E), value
    (B, G, S, Ev) (heads first; (B, L, E) for one head); returns
    (B, H, L, Ev). attn_mask: None or the whole (L, L) causal mask (as
    is_causal); dropout_p other than 0 is refused; a causal mask needs
    L == S (torch aligns it top-left)."""
    one_head = query.dim() == 3
    if one_head:
        query, key, value = (x.unsqueeze(1) for x in (query, key, value))

    def build():
        return _sdpa_options(query, key, attn_mask, dropout_p, is_causal,
                             scale, enable_gqa)

    spec = _guarded(build, comm, "bhnd", layout)
    out = _rt.attend(query, key, value, spec)
    return out[:, 0] if one_head else out
