#!/usr/bin/env python3
"""e2e_bf16.py RINGATTN NP: bf16 precision and the bf16 wire through the
command line at NP ranks (NP >= 2):

1. run --precision bf16, then verify: it passes (verify reads the
   precision and wire attributes, rounds the reference's q, k, v and
   allows for P's rounding); judged as fp32 (verify --precision fp32) the
   same output fails, so the rounding really happened.
2. Inputs stored as bfloat16 are used as they are: a bf16 run of a file
   holding the same values as float32 writes the same /o, bit for bit.
3. bench --wire bf16 sends exactly half the bytes of --wire fp32 (the K/V
   blocks), and both pass bench's check.
4. run --backward --precision bf16 writes gradients that verify --backward,
   which judges fp32 gradients only, refuses by name (exit 2).
5. The Gaussian score on q and k far from 0 (issue 39, class 1): the run
   rounds them to bf16 after moving them by the keys' centre, and verify's
   reference does the same: a right run passes (it failed, the reference
   rounding the raw inputs), and judged as fp32 it still fails.
"""
import json
import os
import sys
import tempfile

import h5py
import numpy as np

from e2e_util import bf16_round, bf16_type, mpi, run

RINGATTN, NP = sys.argv[1], int(sys.argv[2])
MPI = mpi(NP) + [RINGATTN]


def write_file(path, tensors, bf16):
    """q, k, v (B, len, heads, dim) with an axes attribute, as bfloat16
    (a 16-bit HDF5 float with 8 exponent bits) or as float32."""
    t = bf16_type()
    with h5py.File(path, "w") as f:
        for name, x in tensors.items():
            bits, _ = bf16_round(x)
            if bf16:
                space = h5py.h5s.create_simple(x.shape)
                d = h5py.h5d.create(f.id, name.encode(), t, space)
                d.write(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=t)
            else:
                f[name] = (bits.astype(np.uint32) << 16).view(np.float32)
            f[name].attrs["axes"] = "B,N,H,D"


def main():
    rng = np.random.default_rng(7)
    shape = {"q": (2, 300, 4, 32), "k": (2, 300, 2, 32), "v": (2, 300, 2, 24),
             "do": (2, 300, 4, 24)}
    tensors = {n: rng.standard_normal(s).astype(np.float32) for n, s in shape.items()}
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda name: os.path.join(tmp, name)
        write_file(p("in16.h5"), tensors, True)
        write_file(p("in32.h5"), tensors, False)
        # 1: run, verify; the fp32 judgement of the same output fails
        run(MPI + ["run", "--in", p("in16.h5"), "--out", p("o16.h5"),
                   "--precision", "bf16", "--causal"])
        out = run(MPI + ["verify", "--in", p("in16.h5"), "--out", p("o16.h5")])
        assert "precision bf16" in out and "PASS" in out
        run(MPI + ["verify", "--in", p("in16.h5"), "--out", p("o16.h5"),
                   "--precision", "fp32"], code=1)
        # 2: the bf16 file and the float32 file of its values agree
        run(MPI + ["run", "--in", p("in32.h5"), "--out", p("o32.h5"),
                   "--precision", "bf16", "--causal"])
        with h5py.File(p("o16.h5")) as a, h5py.File(p("o32.h5")) as b:
            assert a.attrs["precision"] == "bf16" and a.attrs["wire"] == "bf16"
            assert np.array_equal(a["o"][...], b["o"][...])
            assert np.array_equal(a["lse"][...], b["lse"][...])
        # 3: the wire's bytes
        sent = {}
        for wire in ("fp32", "bf16"):
            js = p(f"b_{wire}.json")
            run(MPI + ["bench", "--seq", "1024", "--heads", "2", "--dim", "32",
                       "--reps", "1", "--warmup", "0", "--wire", wire,
                       "--no-yardsticks",
                       "--json", js])
            row = json.load(open(js))[0]
            sent[wire] = row["bytes_sent"]
        print(f"# bytes_sent: fp32 wire {sent['fp32']}, bf16 wire {sent['bf16']}")
        assert sent["bf16"] > 0 and 2 * sent["bf16"] == sent["fp32"]
        # 4: bf16 gradients, which verify --backward does not judge
        run(MPI + ["run", "--backward", "--recompute", "--in", p("in32.h5"),
                   "--out", p("g16.h5"), "--precision", "bf16"])
        run(MPI + ["verify", "--backward", "--in", p("in32.h5"), "--out",
                   p("g16.h5")], code=2)
        # 5: the Gaussian score at an offset of 100 and of -1e4
        for offset in (100.0, -1e4):
            far = dict(tensors, q=tensors["q"] + offset, k=tensors["k"] + offset)
            with h5py.File(p("far.h5"), "w") as f:
                for name, x in far.items():
                    f[name] = x
                    f[name].attrs["axes"] = "B,N,H,D"
            gauss = ["--score", "gaussian", "--sigma", "4", "--causal"]
            run(MPI + ["run", "--in", p("far.h5"), "--out", p("ofar.h5"),
                       "--precision", "bf16", "--force"] + gauss)
            out = run(MPI + ["verify", "--in", p("far.h5"), "--out",
                             p("ofar.h5")])
            assert "precision bf16" in out and "PASS" in out
            run(MPI + ["verify", "--in", p("far.h5"), "--out", p("ofar.h5"),
                       "--precision", "fp32"], code=1)
    print("e2e_bf16: PASS")


if __name__ == "__main__":
    main()
