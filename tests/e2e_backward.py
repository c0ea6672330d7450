"""End to end: `ringattn gen --backward`, `run` and `run --backward` on
files, the gradients read back with h5py and checked on every row against
an fp64 numpy computation of the same gradients (written here from the
definition, independent of the C reference). Each case prints one line
with its verdict; the exit status is 1 if any fails, never a traceback.

usage: e2e_backward.py RINGATTN NP [checks]
(checks: only the cases of a forward output checked against its input)
"""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

from e2e_util import launch, mpi, rope_half, run, softmax, visible

RINGATTN = os.path.abspath(sys.argv[1])
NP = sys.argv[2]
ONLY_CHECKS = len(sys.argv) > 3 and sys.argv[3] == "checks"
RA = mpi(NP) + [RINGATTN]  # the command line at NP ranks


def head_grads(q, k, v, do, vis, opt):
    """fp64 gradients of one head: dq, dk, dv and for the additive score
    (dw_q, dw_k, dw_v), from the definitions."""
    N, M = q.shape[0], k.shape[0]
    add = opt.get("additive")
    if add:
        wq, wk, wv = add
        T = np.tanh((q @ wq.T)[:, None, :] + (k @ wk.T)[None, :, :])
        sc = T @ wv
    else:
        sc = q @ k.T / np.sqrt(q.shape[1])
    if "slope" in opt:
        i = np.arange(N)[:, None] + (M - N)
        sc = sc - opt["slope"] * np.abs(np.arange(M)[None, :] - i)
    p, _ = softmax(np.where(vis, sc, -np.inf))
    dp = do @ v.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    if not add:
        s = 1 / np.sqrt(q.shape[1])
        return s * ds @ k, s * ds.T @ q, p.T @ do, None
    U = ds[:, :, None] * wv * (1 - T * T)
    dqp, dkp = U.sum(axis=1), U.sum(axis=0)
    dw = (dqp.T @ q, dkp.T @ k, (ds[:, :, None] * T).sum(axis=(0, 1)))
    return dqp @ wq, dkp @ wk, p.T @ do, dw


def reference(path, causal, window, **opt):
    """fp64 dq, dk, dv (and the additive weights' gradients) of
    L = sum(do * o); opt: rope=base (half pairing), alibi=True (standard
    slopes), additive=True (weights from /additive)."""
    with h5py.File(path, "r") as f:
        q, k, v, do = (f[n][...].astype(np.float64) for n in ("q", "k", "v", "do"))
        B, N, H, D = q.shape
        M, G = k.shape[1], k.shape[2]
        hopt = {}
        if opt.get("additive"):
            hopt["additive"] = tuple(f["additive/" + n][...].astype(np.float64)
                                     for n in ("w_q", "w_k", "w_v"))
        base = opt.get("rope")
        qpos, kpos = np.arange(N) + (M - N), np.arange(M)
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        dw = None
        for b in range(B):
            vis = visible(f, b, N, M, causal, window)
            for h in range(H):
                g = h // (H // G)
                if opt.get("alibi"):
                    hopt["slope"] = 2.0 ** (-8.0 * (h + 1) / H)
                qh, kh = q[b, :, h], k[b, :, g]
                if base:
                    qh, kh = rope_half(qh, qpos, base), rope_half(kh, kpos, base)
                gq, gk, gv, gw = head_grads(qh, kh, v[b, :, g], do[b, :, h],
                                            vis, hopt)
                if base:
                    gq, gk = rope_half(gq, -qpos, base), rope_half(gk, -kpos, base)
                dq[b, :, h] = gq
                dk[b, :, g] += gk
                dv[b, :, g] += gv
                if gw:
                    dw = gw if dw is None else tuple(x + y for x, y in zip(dw, gw))
    return (dq, dk, dv) + (dw if dw else ())


def check(name, grads, ref):
    worst, bad = 0.0, False
    with h5py.File(grads, "r") as f:
        for n, r in zip(("dq", "dk", "dv", "dw_q", "dw_k", "dw_v"), ref):
            got = f[n][...].astype(np.float64)
            bad |= not np.all(np.isfinite(got))
            den = np.linalg.norm(r)
            e = np.linalg.norm(got - r) / den if den > 0 else np.linalg.norm(got)
            worst = max(worst, e)
    ok = worst < 1e-5 and not bad
    print(f"{'PASS' if ok else 'FAIL'} {name}: worst relative error {worst:.2e}"
          f"{' (non-finite entries)' if bad else ''}")
    return ok


def verify(grads, extra, want, inp="in.h5"):
    r = launch(RA + ["verify", "--backward", "--in", inp, "--out",
               grads] + extra)
    ok = r.returncode == want
    print(f"{'PASS' if ok else 'FAIL'} verify --backward {' '.join(extra)} "
          f"exits {r.returncode} (want {want}): {r.stdout.strip()[-120:]}")
    return ok


def corrupted_cases(grads, fwd):
    """verify --backward finds a wrong gradient: one entry of /dq, /dk or
    /dv with every row checked, and one coordinate of every row with a
    sample of 5 (a sampled row or key always holds a wrong entry; one wrong
    entry alone is found with the chance its row is sampled). verify and
    verify --backward print their predicted cost before the verdict."""
    ok = True
    cmd = RA + ["verify"]
    for name in ("dq", "dk", "dv"):
        for extra, every in ((["--all"], False), (["--sample", "5"], True)):
            shutil.copy(grads, "bad.h5")
            with h5py.File("bad.h5", "r+") as f:
                x = f[name][...]
                rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
                if every:
                    x[..., 0] += 1e-2 * rms
                else:
                    x[np.unravel_index(np.argmax(np.abs(x)), x.shape)] *= 1.01
                f[name][...] = x
            r = launch(cmd + ["--backward", "--in", "in.h5", "--out",
                              "bad.h5"] + extra)
            lines = r.stdout.strip().splitlines()
            good = (r.returncode == 1 and len(lines) == 2 and
                    "predicted cost per rank" in lines[0] and
                    lines[1].endswith("FAIL"))
            print(f"{'PASS' if good else 'FAIL'} verify --backward "
                  f"{' '.join(extra)} of a wrong /{name} "
                  f"({'every row' if every else 'one entry'}): exit "
                  f"{r.returncode}, cost printed first")
            ok &= good
    r = launch(cmd + ["--in", "in.h5", "--out", fwd])
    lines = r.stdout.strip().splitlines()
    good = (r.returncode == 0 and len(lines) == 2 and
            lines[0].startswith("# verify: predicted cost per rank"))
    print(f"{'PASS' if good else 'FAIL'} verify prints its predicted cost "
          "before the verdict")
    return ok and good


def recorded_cases():
    """verify --backward's default path takes every row's LSE and Drow from
    the forward the gradients were computed from (here the /o and /lse that
    --recompute wrote), checked in fp64 at the sampled rows: one wrong /lse
    or /o entry fails when its row is sampled (every row: --sample B N), a
    wrong value in every row fails a sample of 5, and --independent, which
    does not read that forward, passes the same gradients. A gradient file
    without a forward is refused by name."""
    ok = True
    with h5py.File("in.h5", "r") as f:
        rows = str(f["q"].shape[0] * f["q"].shape[1])
    for name in ("lse", "o"):
        for extra, every in ((["--sample", rows], False),
                             (["--sample", "40"], True)):
            shutil.copy("g_win.h5", "bad.h5")
            with h5py.File("bad.h5", "r+") as f:
                x = f[name][...]
                live = np.isfinite(x) & (x != 0)
                if every:
                    x[live] += 1e-2 * np.abs(x[live]) + 1e-3
                else:
                    i = np.flatnonzero(live)[live.sum() // 2]
                    x.flat[i] += 1e-2 * abs(x.flat[i]) + 1e-3
                f[name][...] = x
            ok &= verify("bad.h5", extra, 1)
    ok &= verify("bad.h5", ["--independent", "--sample", "5"], 0)
    shutil.copy("g_win.h5", "bad.h5")
    with h5py.File("bad.h5", "r+") as f:
        del f["o"]
    ok &= verify("bad.h5", [], 2)
    ok &= verify("bad.h5", ["--independent"], 0)
    return ok


def main():
    work = tempfile.mkdtemp(prefix="ra_e2e_bwd_")
    try:
        os.chdir(work)
        if ONLY_CHECKS:
            return 0 if check_cases() else 1
        return cases()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cases():
    shape = ["--batch", "2", "--seq", "203", "--seq-kv", "171", "--heads",
             "4", "--kv-heads", "2", "--dim", "16", "--dim-v", "12"]
    run([RINGATTN, "gen", "--out", "in.h5", "--backward", "--lens",
        "random"] + shape)
    run(RA + ["gen", "--out", "seg.h5", "--backward", "--segments", "20",
        "--seq", "150", "--dim", "8"])
    ok = True
    run(RA + ["run", "--in", "in.h5", "--out", "fwd.h5", "--causal"])
    run(RA + ["run", "--backward", "--in", "in.h5", "--fwd", "fwd.h5", "--out",
        "g_fwd.h5", "--causal"])
    ok &= check("causal lens, --fwd", "g_fwd.h5", reference("in.h5", 1, None))
    # a forward output written heads-first is read through its axes
    run(RA + ["run", "--in", "in.h5", "--out", "fwd_h.h5", "--causal",
        "--out-axes", "B,H,N,D"])
    run(RA + ["run", "--backward", "--in", "in.h5", "--fwd", "fwd_h.h5",
        "--out", "g_fwd_h.h5", "--causal"])
    with h5py.File("g_fwd.h5", "r") as a, h5py.File("g_fwd_h.h5", "r") as b:
        same = all(np.array_equal(a[n][...], b[n][...])
                   for n in ("dq", "dk", "dv"))
    print(f"{'PASS' if same else 'FAIL'} --fwd of a heads-first /o: the same "
          "gradients as of a tokens-first one")
    ok &= same
    # gradients written heads-first: the same values, their order said
    run(RA + ["run", "--backward", "--in", "in.h5", "--fwd", "fwd.h5", "--out",
        "g_heads.h5", "--causal", "--out-axes", "B,H,N,D"])
    with h5py.File("g_fwd.h5", "r") as a, h5py.File("g_heads.h5", "r") as b:
        same = all(b[n].attrs["axes"] == "B,H,N,D" and a[n].attrs["axes"] ==
                   "B,N,H,D" and np.array_equal(
                       a[n][...], b[n][...].transpose(0, 2, 1, 3))
                   for n in ("dq", "dk", "dv"))
    print(f"{'PASS' if same else 'FAIL'} --out-axes B,H,N,D: /dq /dk /dv "
          "heads-first, the same values, axes recorded")
    ok &= same
    ok &= verify("g_heads.h5", ["--all"], 0)
    ok &= verify("g_fwd.h5", ["--all"], 0)
    ok &= verify("g_fwd.h5", ["--sample", "17"], 0)
    ok &= corrupted_cases("g_fwd.h5", "fwd.h5")
    # the same gradients checked as a non-causal run's must fail
    with h5py.File("g_fwd.h5", "r+") as f:
        f.attrs["causal"] = 0
    ok &= verify("g_fwd.h5", ["--all"], 1)
    run(RA + ["run", "--backward", "--in", "in.h5", "--recompute", "--out",
        "g_win.h5", "--window", "30,7", "--layout", "contiguous"])
    ok &= check("window 30,7, --recompute", "g_win.h5",
                reference("in.h5", 0, (30, 7)))
    ok &= verify("g_win.h5", ["--sample", "23"], 0)
    ok &= recorded_cases()
    for lay in ("zigzag", "striped"):
        run(RA + ["run", "--backward", "--in", "seg.h5", "--recompute",
            "--out", f"g_{lay}.h5", "--causal", "--layout", lay])
        ok &= check(f"causal segments, {lay}", f"g_{lay}.h5",
                    reference("seg.h5", 1, None))
        ok &= verify(f"g_{lay}.h5", ["--sample", "31"], 0, inp="seg.h5")
    return 0 if (ok and encoded_cases() and check_cases()) else 1


def to_heads_first(src, dst):
    """dst: src with q, k, v and do stored (B, H, N, D), axes="B,H,N,D"."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for n in ("q", "k", "v", "do"):
            g[n] = np.ascontiguousarray(f[n][...].transpose(0, 2, 1, 3))
            g[n].attrs["axes"] = "B,H,N,D"


def unseen_segments(path):
    """An input whose /q_segments hold ids that no key has (those rows see
    nothing: lse -inf) beside shared ones, N = 37, M = 29."""
    r = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        for n, shape in (("q", (2, 37, 4, 8)), ("k", (2, 29, 2, 8)),
                         ("v", (2, 29, 2, 8)), ("do", (2, 37, 4, 8))):
            f[n] = r.standard_normal(shape).astype("f4")
            f[n].attrs["axes"] = "B,N,H,D"
        f["q_segments"] = r.integers(0, 5, (2, 37))
        f["kv_segments"] = r.integers(0, 3, (2, 29))


def check_cases():
    """/do read through its axes attribute; a forward of P = 1 taken by a
    backward at NP (the fingerprint does not depend on P or layout); rows
    that see no key (-inf lse) accepted by the lse check."""
    ok = True
    run([RINGATTN, "gen", "--out", "hd.h5", "--backward", "--seq", "4",
        "--heads", "4", "--kv-heads", "2", "--dim", "8"])
    to_heads_first("hd.h5", "hd_bhnd.h5")
    run(RA + ["run", "--backward", "--in", "hd_bhnd.h5", "--recompute",
        "--out", "g_bhnd.h5"])
    ok &= check("/do (B,H,N,D) with axes, N = H = 4", "g_bhnd.h5",
                reference("hd.h5", 0, None))
    unseen_segments("us.h5")
    run([RINGATTN, "run", "--in", "us.h5", "--out", "fwd_us.h5", "--causal",
        "--layout", "striped"])
    run(RA + ["run", "--backward", "--in", "us.h5", "--fwd", "fwd_us.h5",
        "--out", "g_us.h5", "--causal", "--layout", "zigzag"])
    ok &= check("segments with unseen ids, --fwd of P = 1", "g_us.h5",
                reference("us.h5", 1, None))
    ok &= verify("g_us.h5", ["--sample", "30"], 0, inp="us.h5")
    ok &= verify("g_bhnd.h5", [], 0, inp="hd_bhnd.h5")
    return ok


def encoded_cases():
    """RoPE with ALiBi, and the additive score with its weights."""
    ok = True
    run(RA + ["run", "--backward", "--in", "in.h5", "--recompute", "--out",
        "g_pos.h5", "--causal", "--rope", "half", "--rope-base", "500",
        "--alibi", "--layout", "zigzag"])
    ok &= check("causal rope half + alibi", "g_pos.h5",
                reference("in.h5", 1, None, rope=500.0, alibi=True))
    ok &= verify("g_pos.h5", ["--sample", "40"], 0)
    shutil.copy("in.h5", "add.h5")
    rng = np.random.default_rng(11)
    with h5py.File("add.h5", "r+") as f:
        D = f["q"].shape[3]
        for n, shape in (("w_q", (8, D)), ("w_k", (8, D)), ("w_v", (8,))):
            f["additive/" + n] = (0.3 * rng.standard_normal(shape)).astype("f4")
    run(RA + ["run", "--in", "add.h5", "--out", "fwd_add.h5", "--score",
        "additive", "--window", "40,3"])
    run(RA + ["run", "--backward", "--in", "add.h5", "--fwd", "fwd_add.h5",
        "--out", "g_add.h5", "--score", "additive", "--window", "40,3"])
    ok &= check("additive window, --fwd", "g_add.h5",
                reference("add.h5", 0, (40, 3), additive=True))
    ok &= verify("g_add.h5", ["--sample", "25"], 0, inp="add.h5")
    return ok


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError, KeyError) as e:
        print(f"FAIL e2e_backward: {e}")
        sys.exit(1)
