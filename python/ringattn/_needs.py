"""What `import ringattn` needs of the interpreter that imports it, said
in one ImportError before anything else fails less clearly: numpy and
mpi4py importable, and the C extension ringattn._core built for this
Python (an interpreter other than the one the package was built for,
such as a pyenv Python beside Debian's, finds another file name or
none)."""
import glob
import importlib.util
import os
import sys
import sysconfig


def check_interpreter():
    """Raises ImportError naming what this interpreter lacks and how to
    give it; returns when the package can be imported."""
    exe = sys.executable or "python3"
    missing = [m for m in ("numpy", "mpi4py")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"ringattn needs {' and '.join(missing)}, which "
                          f"this Python ({exe}, {sys.version.split()[0]}) "
                          f"cannot import: {exe} -m pip install "
                          f"{' '.join(missing)} (Debian's python3: apt-get "
                          "install python3-numpy python3-mpi4py)")
    here = os.path.dirname(os.path.abspath(__file__))
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if os.path.exists(os.path.join(here, "_core" + suffix)):
        return
    built = [os.path.basename(f)[len("_core"):]
             for f in glob.glob(os.path.join(here, "_core*.so"))]
    raise ImportError(f"ringattn's C extension was built for "
                      f"{', '.join(built) or 'no Python'} and this Python "
                      f"({exe}) loads {suffix}: build the package for it: "
                      f"{exe} -m pip install --no-build-isolation "
                      "<ringattn>/python, or cmake -DRA_PYTHON_INTERPRETER="
                      f"{exe}")
