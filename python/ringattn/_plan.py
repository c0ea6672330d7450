"""plan(): the performance model's prediction as a dict. The library has no
public plan call (the model lives beside the command line), so this runs
the `ringattn` command the package was built with, `ringattn plan --json`,
as a process of its own and reads its JSON. Local: call it on one rank or
on all; it starts no MPI communication of the caller's."""
import json
import os
import subprocess
import tempfile

from mpi4py import MPI

from . import _paths
from ._errors import error

# The environment of an MPI launch, which the command must not inherit:
# it would try to join the caller's job instead of starting alone.
LAUNCH_PREFIXES = ("OMPI_", "PMIX_", "PRTE_", "PMI_", "HYDRA_", "SLURM_")


def _flags(options):
    """Command-line flags from keywords: causal=True -> --causal,
    window=(64, 0) -> --window 64,0, block_q=64 -> --block-q 64."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (tuple, list)):
            args += [flag, ",".join(str(x) for x in value)]
        else:
            args += [flag, str(value)]
    return args


def plan(N, M=None, *, B=1, H=8, G=None, D=64, Dv=None, ranks=None,
         nodes=None, profile=None, **options):
    """What a forward pass of this shape would cost, per strategy, as
    `ringattn plan --json` reports it (a dict). ranks defaults to the size
    of MPI.COMM_WORLD; options as forward's that the command takes
    (causal, window, strategy, layout, score, rope, alibi, threads, ...)."""
    shape = {"seq": N, "seq_kv": M, "batch": B, "heads": H, "kv_heads": G,
             "dim": D, "dim_v": Dv, "nodes": nodes, "profile": profile,
             "ranks": MPI.COMM_WORLD.Get_size() if ranks is None else ranks}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(LAUNCH_PREFIXES)}
    with tempfile.TemporaryDirectory(prefix="ringattn-plan-") as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = [_paths.CLI, "plan"] + _flags(shape) + _flags(options) + [
            "--json", out]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True,
                             check=False)
        if run.returncode != 0:
            lines = run.stderr.strip().splitlines() or ["no message"]
            raise error(f"plan: {' '.join(cmd[1:])}: {lines[-1]}")
        with open(out, encoding="utf-8") as f:
            return json.load(f)
