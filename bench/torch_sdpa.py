"""torch_sdpa.py: PyTorch 2.x's CPU scaled_dot_product_attention (its flash
attention kernel on the CPU) on the shapes of bench/ggml-compare.sh, for
the side-by-side table: batch 1, self-attention, q, k, v (1, H, N, D)
contiguous, fp32 or bf16 throughout, causal or not, T threads in one
process. Needs torch >= 2 (a venv: tests/python/torch2_venv.sh makes one).

  torch_sdpa.py check [--threads T]
      N = 257, H = 2, D = 64 and 128, causal and not, fp32 and bf16,
      against an fp64 softmax(q k^T / sqrt(D)) v; exit 1 past 1e-4 (fp32)
      or 3e-2 (bf16) relative error.
  torch_sdpa.py bench --seq N --heads H --dim D [--causal] [--dtype
      fp32|bf16] [--threads T] [--reps R] [--json FILE]
      one warm-up, then R timed calls; prints and writes (JSON) the median
      seconds and GFLOP/s of the useful FLOPs (2 (D + Dv) per visible pair,
      as ringattn bench counts them).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def inputs(n, h, d, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, n, d, generator=g).to(dtype) for _ in range(3)]


def reference(q, k, v, causal):
    q, k, v = (x.double() for x in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1),
                          float("-inf"))
    return torch.softmax(s, -1) @ v


def check(threads):
    torch.set_num_threads(threads)
    ok = True
    for d in (64, 128):
        for causal in (False, True):
            for name, dtype in DTYPES.items():
                q, k, v = inputs(257, 2, d, dtype)
                got = F.scaled_dot_product_attention(q, k, v,
                                                     is_causal=causal)
                ref = reference(q, k, v, causal)
                err = float((got.double() - ref).norm() / ref.norm())
                tol = 1e-4 if name == "fp32" else 3e-2
                ok &= err < tol
                print(f"{'PASS' if err < tol else 'FAIL'} torch sdpa {name} "
                      f"D={d} causal={int(causal)}: rel err {err:.2e} "
                      f"(tolerance {tol:.0e})")
    return ok


def bench(a):
    torch.set_num_threads(a.threads)
    q, k, v = inputs(a.seq, a.heads, a.dim, DTYPES[a.dtype])
    times = []
    with torch.inference_mode():
        for rep in range(a.reps + 1):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
            if rep:
                times.append(time.perf_counter() - t0)
    n = a.seq
    pairs = n * (n + 1) / 2 if a.causal else n * n
    flops = 2.0 * (a.dim + a.dim) * pairs * a.heads
    med = statistics.median(times)
    out = {"torch_version": torch.__version__, "threads": a.threads,
           "dtype": a.dtype, "seq": n, "heads": a.heads, "dim": a.dim,
           "causal": a.causal, "reps": a.reps, "seconds": times,
           "seconds_median": med, "gflops": flops / med * 1e-9}
    print(f"torch {torch.__version__} sdpa {a.dtype} N={n} H={a.heads} "
          f"D={a.dim} causal={int(a.causal)} threads={a.threads}: "
          f"{med:.4f} s, {out['gflops']:.1f} GFLOP/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("check", "bench"))
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"torch_sdpa: torch {torch.__version__} is not 2.x",
              file=sys.stderr)
        return 2
    return 0 if (check(a.threads) if a.mode == "check" else bench(a)) else 1


if __name__ == "__main__":
    sys.exit(main())
