"""The keyword options of forward(), backward(), owned_positions() and
plan(), mapped onto the library's ra_numerics and ra_exec (the dict _core
takes, whose keys are their field names and whose defaults come from
ra_numerics_default and ra_exec_default themselves) and onto ra_masks and
the score's weights."""
import zlib

import numpy as np

from . import _core

DEFAULTS = _core.defaults()

# Keywords that are not option fields: masks and weights (arrays).
MASKS = ("q_lens", "kv_lens", "segments", "kv_segments")
ARRAYS = MASKS + ("additive",)
# Flags given as booleans.
FLAGS = ("causal", "nonfinite")
# Fields set through another keyword (window=(left, right)).
DERIVED = ("window_left", "window_right")


def params(options):
    """The _core options dict of the keywords `options` (arrays ignored);
    TypeError or ValueError for an unknown keyword or a bad value."""
    opts = dict(DEFAULTS)
    for key, value in options.items():
        if key in ARRAYS:
            continue
        if key == "window":
            if value is None:
                opts["window"] = 0
            else:
                left, right = value
                opts.update(window=1, window_left=int(left),
                            window_right=int(right))
        elif key == "scale":
            opts["scale"] = float("nan") if value is None else float(value)
        elif key == "rope":
            opts["rope"] = "none" if value in (None, False) else str(value)
        elif key == "alibi":
            opts["alibi"] = int(value is not None and value is not False)
        elif key in FLAGS:
            opts[key] = int(bool(value))
        elif key in DEFAULTS and key not in DERIVED:
            opts[key] = value
        else:
            raise TypeError(f"unknown option {key!r}")
    return opts


def alibi_slopes(options):
    """ALiBi's slopes as a float64 array, or None (the standard slopes or no
    ALiBi)."""
    value = options.get("alibi")
    if value is None or isinstance(value, (bool, int)):
        return None
    return np.ascontiguousarray(value, dtype=np.float64)


def fingerprint(opts, arrays):
    """A checksum of the options and of the arrays every rank must pass
    alike (lens, slopes, weights): ranks compare it before the call."""
    crc = zlib.crc32(repr(sorted(opts.items())).encode())
    for a in arrays:
        if a is not None:
            crc = zlib.crc32(np.ascontiguousarray(a).tobytes(), crc)
    return crc
