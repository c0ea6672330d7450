"""The keyword options of forward(), backward(), owned_positions() and
plan(), mapped onto the library's ra_numerics and ra_exec (the dict _core
takes, whose keys are their field names and whose defaults come from
ra_numerics_default and ra_exec_default themselves) and onto ra_masks and
the score's weights.

Python's part is the syntax: every keyword is a field (or a mask), and
each value has its field's type: a flag is a bool (Python's or numpy's),
an integer field an integer (not a float, not a bool), a real field a
real number, an enum a name. Which names and values are valid is the
library's to say (its parsers, then its checks at the call)."""
import difflib
import zlib

import numpy as np

from . import _core

DEFAULTS = _core.defaults()
# The option fields and their kinds, from the header's RA_OPTION_FIELDS
# (the one table of the keywords that are fields): FLAG, INT, I64, REAL
# or an enum's name.
FIELDS = dict(_core.fields())

# Keywords that are not option fields: masks and weights (arrays).
MASKS = ("q_lens", "kv_lens", "segments", "kv_segments")
ARRAYS = MASKS + ("additive", "sinks")
# Fields set through another keyword (window=(left, right)).
DERIVED = ("window_left", "window_right")
# The fields that decide the layout and its cut (ra_exec_layout,
# ra_layout_slice), which every rank must pass alike for this layer's
# verdict on the slices.
CUT = ("causal", "window", "window_left", "window_right", "layout")
# ra_exec's progress callbacks: Python callables (or None) of this rank,
# which may differ between ranks.
CALLBACKS = ("on_step", "on_tick")
# Every keyword the calls take.
KEYWORDS = tuple(sorted((set(FIELDS) - set(DERIVED)) | set(ARRAYS) |
                        set(CALLBACKS)))

BOOLS = (bool, np.bool_)
INTEGERS = (int, np.integer)
REALS = (int, float, np.integer, np.floating)


def shown(value):
    """value on one short line, for a message."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value).replace("\n", " ")
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def refuse(key, value, want):
    """The TypeError of a keyword whose value is not of its type."""
    return TypeError(f"{key}={shown(value)}: expected {want}")


def unknown(key):
    """The TypeError of an unknown keyword, with the nearest known one."""
    near = difflib.get_close_matches(str(key), KEYWORDS, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else \
        f" (the keywords: {', '.join(KEYWORDS)})"
    return TypeError(f"unknown option {key!r}{hint}")


def flag(key, value):
    if not isinstance(value, BOOLS):
        raise refuse(key, value, "True or False")
    return {key: int(value)}


def integer(key, value):
    if isinstance(value, BOOLS) or not isinstance(value, INTEGERS):
        raise refuse(key, value, "an integer")
    return {key: int(value)}


def real(key, value):
    if isinstance(value, BOOLS) or not isinstance(value, REALS):
        raise refuse(key, value, "a real number")
    return {key: float(value)}


def name(key, value):
    if not isinstance(value, str):
        raise refuse(key, value, f"a name (a str, such as "
                     f"{DEFAULTS[key]!r})")
    return {key: value}


def window(key, value):
    """window=None (no window) or (left, right), two integers."""
    if value is None:
        return {"window": 0}
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and
            all(isinstance(x, INTEGERS) and not isinstance(x, BOOLS)
                for x in value)):
        raise refuse(key, value, "None or (left, right), two integers")
    return {"window": 1, "window_left": int(value[0]),
            "window_right": int(value[1])}


def scale(key, value):
    """scale=None (1/sqrt(D)) or a real number."""
    return {key: float("nan")} if value is None else real(key, value)


def rope(key, value):
    """rope=None (none) or a pairing's name."""
    return {key: "none"} if value is None else name(key, value)


def alibi(key, value):
    """alibi=True, False, None, or an (H,) array of slopes (checked by
    alibi_slopes)."""
    if value is None:
        return {key: 0}
    if isinstance(value, BOOLS):
        return {key: int(value)}
    if np.isscalar(value):
        raise refuse(key, value, "True, False, None or an (H,) array of "
                     "slopes")
    return {key: 1}


def callback(key, value):
    """on_step=f(done, total), on_tick=f(share) or None."""
    if value is not None and not callable(value):
        raise refuse(key, value, "a callable or None")
    return {key: value}


SPECIAL = {"window": window, "scale": scale, "rope": rope, "alibi": alibi,
           "on_step": callback, "on_tick": callback}


def setter(key):
    """How keyword key is read, from its field's kind."""
    if key in SPECIAL:
        return SPECIAL[key]
    if key not in FIELDS or key in DERIVED:
        return None
    return {"FLAG": flag, "INT": integer, "I64": integer,
            "REAL": real}.get(FIELDS[key], name)


def params(options):
    """The _core options dict of the keywords `options` (arrays ignored);
    TypeError for an unknown keyword or a value of the wrong type."""
    opts = dict(DEFAULTS)
    for key, value in options.items():
        if key in ARRAYS:
            continue
        read = setter(key)
        if read is None:
            raise unknown(key)
        opts.update(read(key, value))
    return opts


def frozen(options):
    """options with private copies of their arrays (masks, ALiBi slopes,
    additive weights), for a backward that reads them later: the caller
    may change its own in place meanwhile."""
    out = dict(options)
    for key in ARRAYS + ("alibi",):
        value = out.get(key)
        if value is None or isinstance(value, BOOLS):
            continue
        out[key] = (tuple(np.array(w, copy=True) for w in value)
                    if key == "additive" else np.array(value, copy=True))
    return out


def stall_timeout(options):
    """The stall timeout a call's own agreement waits for: the keyword's
    when it is a real number >= 0, else the library's default."""
    value = options.get("stall_timeout")
    ok = isinstance(value, REALS) and not isinstance(value, BOOLS) and \
        value >= 0
    return float(value) if ok else DEFAULTS["stall_timeout"]


def alibi_slopes(options, H):
    """ALiBi's slopes as a float64 (H,) array, or None (the standard slopes
    or no ALiBi). TypeError or ValueError for an array of another dtype
    kind than real or integer, another rank than 1 or another length than
    H; the library checks that they are finite."""
    value = options.get("alibi")
    if value is None or isinstance(value, BOOLS):
        return None
    try:
        a = np.asarray(value)
    except ValueError as exc:  # a ragged sequence
        raise ValueError(f"alibi: {shown(value)} is not an array of slopes "
                         f"({exc})") from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"alibi: slopes of dtype {a.dtype}; expected real "
                        "numbers (float or integer)")
    if a.shape != (H,):
        raise ValueError(f"alibi: slopes of shape {a.shape}; expected one "
                         f"per query head, ({H},)")
    return np.ascontiguousarray(a, dtype=np.float64)


def cut_facts(opts):
    """The fields of CUT as integers (the layout's name as a checksum)."""
    facts = {k: opts[k] for k in CUT if k != "layout"}
    facts["layout"] = zlib.crc32(opts["layout"].encode())
    return facts


def sinks(options, H):
    """The attention sinks as a float32 (H,) array (a copy), or None.
    TypeError or ValueError for an array of another dtype kind than real
    or integer, another rank than 1 or another length than H; the library
    checks that they are finite."""
    value = options.get("sinks")
    if value is None:
        return None
    try:
        a = np.asarray(value)
    except ValueError as exc:  # a ragged sequence
        raise ValueError(f"sinks: {shown(value)} is not an array of logits "
                         f"({exc})") from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"sinks: logits of dtype {a.dtype}; expected real "
                        "numbers")
    if a.shape != (H,):
        raise ValueError(f"sinks of shape {a.shape}: one logit per query "
                         f"head, ({H},)")
    return np.array(a, dtype=np.float32)
