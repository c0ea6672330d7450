"""ctest python_install (issue 41, install): the README's two lines work.

In a fresh temporary venv (--system-site-packages: Debian's numpy,
mpi4py and setuptools), `pip install --no-build-isolation <src>/python`
against the build tree's libringattn (RINGATTN_BUILD_DIR) installs the
package; imported from outside the source and build trees it computes
attention right (against a float64 definition) and plan() finds its
command; the source tree gains no file; `pip uninstall` removes it (the
import then fails). Usage: install_check.py PYTHON SRC BUILD; exit 0 when
every check passes, 1 with the failing check's line otherwise."""
import os
import subprocess
import sys
import tempfile

PROBE = """
import math, os, numpy as np, ringattn
from mpi4py import MPI
assert ringattn.__file__.startswith(os.environ["VENV"]), ringattn.__file__
rng = np.random.default_rng()
q, k, v = (rng.standard_normal((1, 7, 2, 4), np.float32) for _ in range(3))
o, _ = ringattn.forward(q, k, v, MPI.COMM_SELF, order="bnhd", causal=True)
s = np.einsum("bihd,bjhd->bhij", q.astype(float), k.astype(float)) / 2
s[..., np.triu_indices(7, 1)[0], np.triu_indices(7, 1)[1]] = -math.inf
p = np.exp(s - s.max(-1, keepdims=True))
want = np.einsum("bhij,bjhd->bihd", p / p.sum(-1, keepdims=True), v)
err = float(np.abs(o - want).max())
assert err < 1e-5, err
assert isinstance(ringattn.plan(64, ranks=2), dict)
print("installed package: error", err)
"""


def run(cmd, env=None, check=True):
    """Runs cmd (in env's VENV_DIR when given), returning its
    completed process; a failure exits 1 with its last line of error."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       check=False, cwd=env.get("VENV_DIR") if env else None)
    if check and r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip()).splitlines()
        sys.exit(f"install_check: {' '.join(cmd[:4])} ...: "
                 f"{last[-1] if last else r.returncode}")
    return r


def main():
    python, src, build = sys.argv[1:4]
    before = set(os.listdir(os.path.join(src, "python")))
    with tempfile.TemporaryDirectory(prefix="ringattn-install-") as tmp:
        venv = os.path.join(tmp, "v")
        run([python, "-m", "venv", "--system-site-packages", venv])
        pip, py = (os.path.join(venv, "bin", x) for x in ("pip", "python"))
        env = dict(os.environ, RINGATTN_BUILD_DIR=build, VENV=venv,
                   VENV_DIR=tmp, PYTHONPATH="")
        run([pip, "install", "-q", "--no-build-isolation",
             os.path.join(src, "python")], env)
        r = run([py, "-c", PROBE], env)
        print(r.stdout.strip())
        after = set(os.listdir(os.path.join(src, "python")))
        if after != before:
            sys.exit(f"install_check: the source tree gained "
                     f"{sorted(after - before)}")
        run([pip, "uninstall", "-y", "-q", "ringattn"], env)
        gone = run([py, "-c", "import ringattn"], env, check=False)
        if gone.returncode == 0:
            sys.exit("install_check: ringattn still imports after "
                     "pip uninstall")
    print("install_check: PASS")


if __name__ == "__main__":
    main()
