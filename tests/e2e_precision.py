#!/usr/bin/env python3
"""e2e_precision.py RINGATTN NP: inputs of every floating type HDF5 converts
and outputs of every --out-dtype, through the command line at NP ranks,
against numpy's fp64 attention of the values the file holds:

1. /q /k /v stored as float16, bfloat16 (a 16-bit HDF5 float with 8
   exponent bits), float32, float64, little and big endian: read through
   HDF5's conversion into fp32; the error of /o against the fp64 reference
   is printed as a table (the one in docs/PERFORMANCE.md) and bounded.
2. --out-dtype fp16|bf16|fp32|fp64: /o's stored type, holding the float32
   result rounded to nearest even (numpy's rounding, bit for bit), its
   error within that rounding; /lse stays float32; `ringattn verify`
   passes.
3. --out-chunk with --out-compress: chunked, gzip-compressed /o and /lse,
   the same values as a contiguous run; --out-compress alone is refused.
4. --json: the summary parses and records the options.
"""
import json
import os
import sys
import tempfile

import h5py
import numpy as np

from e2e_util import attention, bf16_round, bf16_type, mpi, refused, run

RINGATTN, NP = sys.argv[1], int(sys.argv[2])
MPI = mpi(NP)
B, N, M, H, G, D = 2, 75, 83, 4, 2, 16


def write_inputs(path, kind, t):
    """Writes t = {name: float64 array} in the type kind; returns the
    float64 values the file holds."""
    held = {}
    with h5py.File(path, "w") as f:
        for name, x in t.items():
            if kind == "bfloat16":
                bits, held[name] = bf16_round(x)
                space = h5py.h5s.create_simple(x.shape)
                d = h5py.h5d.create(f.id, name.encode(), bf16_type(), space)
                d.write(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=bf16_type())
            else:
                dt = {"float16": "<f2", "float32": "<f4", "float64": "<f8",
                      "float32 big-endian": ">f4", "float64 big-endian": ">f8"}[kind]
                f[name] = x.astype(dt)
                held[name] = f[name][()].astype(np.float64)
            f[name].attrs["axes"] = "B,N,H,D"  # a 4-D shape cannot say
    return held


def outputs(path):
    with h5py.File(path, "r") as f:
        return f["o"][()].astype(np.float64), f["lse"][()].astype(np.float64), f["o"].dtype, f["lse"].dtype


def input_types(tmp, t):
    out = os.path.join(tmp, "o.h5")
    print(f"\n| input type | max abs err of o | max rel err of o | max abs err of lse |  (P = {NP}, "
          f"B={B} N={N} M={M} H={H} G={G} D={D}, unit normal)")
    print("|---|---|---|---|")
    for kind in ("float16", "bfloat16", "float32", "float32 big-endian", "float64",
                 "float64 big-endian"):
        inp = os.path.join(tmp, "in.h5")
        held = write_inputs(inp, kind, t)
        run(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--force"])
        o, lse, _, _ = outputs(out)
        o_ref, lse_ref = attention(held["q"], held["k"], held["v"])
        abs_o = np.max(np.abs(o - o_ref))
        rel_o = abs_o / np.max(np.abs(o_ref))
        abs_l = np.max(np.abs(lse - lse_ref))
        print(f"| {kind} | {abs_o:.2e} | {rel_o:.2e} | {abs_l:.2e} |")
        # fp32 compute of exactly held values; a float64 file also loses
        # its values' bits beyond float32's 24-bit significand
        assert rel_o < 2e-6 and abs_l < 2e-6, (kind, rel_o, abs_l)


def out_dtypes(tmp, t):
    inp = os.path.join(tmp, "in.h5")
    held = write_inputs(inp, "float32", t)
    o_ref, lse_ref = attention(held["q"], held["k"], held["v"])
    want = {"fp32": ("float32", 2e-6), "fp16": ("float16", 2.0 ** -11),
            "bf16": (None, 2.0 ** -8), "fp64": ("float64", 2e-6)}
    o32 = None
    for dt, (np_name, rel) in want.items():
        out = os.path.join(tmp, f"o_{dt}.h5")
        run(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--out-dtype", dt])
        o, lse, otype, ltype = outputs(out)
        with h5py.File(out, "r") as f:
            tid = f["o"].id.get_type()
            assert f.attrs["out_dtype"] == dt, dict(f.attrs)
        if np_name:
            assert otype == np.dtype(np_name), (dt, otype)
        else:  # bf16: a 2-byte float with an 8-bit exponent
            assert tid.get_size() == 2 and tid.get_fields()[2] == 8, tid.get_fields()
        assert ltype == np.dtype("float32"), ltype
        # the same float32 result, rounded to nearest even once
        if dt == "fp32":
            o32 = o.astype(np.float32)
        rounded = {"fp16": lambda: o32.astype(np.float16).astype(np.float64),
                   "bf16": lambda: bf16_round(o32)[1],
                   "fp64": lambda: o32.astype(np.float64)}.get(dt, lambda: o)()
        assert np.array_equal(o, rounded), (dt, np.max(np.abs(o - rounded)))
        # rounding to the type (half an ulp, relative) on top of the fp32
        # compute's absolute error
        excess = np.max(np.abs(o - o_ref) - rel * np.abs(o_ref))
        print(f"--out-dtype {dt}: max |o - ref| - {rel:.1e} |ref| = {excess:.2e} (bound 1e-6)")
        assert excess < 1e-6, (dt, excess)
        assert np.max(np.abs(lse - lse_ref)) < 2e-6
        verdict = run(MPI + [RINGATTN, "verify", "--in", inp, "--out", out])
        assert "PASS" in verdict, verdict


def storage(tmp, t):
    inp = os.path.join(tmp, "in.h5")
    write_inputs(inp, "float32", t)
    plain, packed = os.path.join(tmp, "plain.h5"), os.path.join(tmp, "packed.h5")
    js = os.path.join(tmp, "run.json")
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", plain, "--causal"])
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", packed, "--causal", "--out-chunk", "16",
               "--out-compress", "6", "--json", js])
    with h5py.File(plain, "r") as a, h5py.File(packed, "r") as b:
        assert b["o"].chunks == (1, 16, H, D) and b["o"].compression == "gzip", b["o"].chunks
        assert b["lse"].chunks == (1, 1, 16) and b["lse"].compression_opts == 6
        assert np.array_equal(a["o"][()], b["o"][()]) and np.array_equal(a["lse"][()], b["lse"][()])
        assert b.attrs["out_chunk"] == 16 and b.attrs["out_compress"] == 6
    print("--out-chunk 16 --out-compress 6: chunked gzip /o and /lse equal the contiguous run")
    with open(js) as f:
        summary = json.load(f)
    assert summary["causal"] is True and summary["ranks"] == NP, summary
    assert summary["shape"] == {"B": B, "N": N, "M": M, "H": H, "G": G, "D": D, "Dv": D}
    assert abs(summary["scale"] - 1 / np.sqrt(D)) < 1e-12 and summary["out_dtype"] == "fp32"
    print(f"--json: {sorted(summary)}")
    refused(MPI + [RINGATTN, "run", "--in", inp, "--out", os.path.join(tmp, "x.h5"),
                   "--out-compress", "3"], "needs a chunk size")
    assert not os.path.exists(os.path.join(tmp, "x.h5"))


def main():
    rng = np.random.default_rng(40 + NP)
    t = {"q": rng.standard_normal((B, N, H, D)), "k": rng.standard_normal((B, M, G, D)),
         "v": rng.standard_normal((B, M, G, D))}
    with tempfile.TemporaryDirectory() as tmp:
        input_types(tmp, t)
        out_dtypes(tmp, t)
        storage(tmp, t)
    print("e2e_precision: PASS")


if __name__ == "__main__":
    main()
