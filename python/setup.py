"""Builds the package for pip (pyproject.toml): the C extension
ringattn._core against libringattn and ringattn.h, found in this order:
RINGATTN_PREFIX (an install prefix: include/, lib/ or lib64/ or
lib/<multiarch>/, bin/), RINGATTN_BUILD_DIR (a CMake build tree), the
source tree's ../build, /usr/local, /usr. MPI's flags come from mpicc
(MPICC to name another wrapper), mpi4py's header from mpi4py itself. The
module finds the library through its run path; ringattn.plan() runs the
`ringattn` command of the same place (_paths.py, written here)."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIBDIRS = ("lib", "lib64", os.path.join("lib", sysconfig.get_config_var(
    "MULTIARCH") or "x86_64-linux-gnu"))


def found(prefix, build_tree):
    """(include dir, library dir, command) of a prefix or a build tree,
    or None when its header or library is missing."""
    inc = os.path.join(prefix, "include")
    libs = [prefix] if build_tree else [os.path.join(prefix, d)
                                        for d in LIBDIRS]
    lib = next((d for d in libs if os.path.exists(
        os.path.join(d, "libringattn.so"))), None)
    if lib is None or not os.path.exists(os.path.join(inc, "ringattn.h")):
        return None
    cli = os.path.join(prefix, "ringattn" if build_tree else "bin/ringattn")
    return inc, lib, cli


def library():
    """Where libringattn is (the first of the places the docstring
    names); exits with what is missing and how to give it."""
    places = []
    for var, tree in (("RINGATTN_PREFIX", False), ("RINGATTN_BUILD_DIR",
                                                   True)):
        if os.environ.get(var):
            places.append((os.environ[var], tree, var))
    places += [(os.path.join(HERE, "..", "build"), True, "../build"),
               ("/usr/local", False, "/usr/local"), ("/usr", False, "/usr")]
    for prefix, tree, name in places:
        hit = found(os.path.abspath(prefix), tree)
        if hit:
            return hit
        if name.startswith("RINGATTN_"):
            sys.exit(f"ringattn: {name}={prefix} has no include/ringattn.h "
                     "and libringattn.so")
    sys.exit("ringattn: no libringattn found (in ../build, /usr/local, "
             "/usr); build it (cmake -S . -B build && cmake --build build) "
             "or install it, or set RINGATTN_PREFIX or RINGATTN_BUILD_DIR")


def mpi_flags():
    """(compile flags, link flags) of the MPI C wrapper."""
    cc = os.environ.get("MPICC", "mpicc")
    out = []
    for opts in (("--showme:compile", "--showme:link"),
                 ("-compile-info", "-link-info")):
        try:
            out = [shlex.split(subprocess.run(
                [cc, o], capture_output=True, text=True,
                check=True).stdout)[(0 if o.startswith("--") else 1):]
                for o in opts]
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    if not out:
        sys.exit(f"ringattn: no MPI C wrapper {cc!r} (Debian: apt-get "
                 "install libopenmpi-dev; or set MPICC)")
    return out


def version():
    """The project's version, from the top level's CMakeLists.txt."""
    try:
        with open(os.path.join(HERE, "..", "CMakeLists.txt"),
                  encoding="utf-8") as f:
            return re.search(r"project\(ringattn VERSION ([\d.]+)",
                             f.read()).group(1)
    except (OSError, AttributeError):
        return "0"


INC, LIB, CLI = library()
try:
    import mpi4py
except ImportError:
    sys.exit("ringattn: building needs mpi4py (Debian: apt-get install "
             "python3-mpi4py; or pip install mpi4py)")
COMPILE, LINK = mpi_flags()


class BuildPy(build_py):
    """build_py that also writes _paths.py: the command plan() runs."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "ringattn", "_paths.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py: the ringattn command plan() '
                    f'runs."""\nCLI = {CLI!r}\n')


# Build files outside the source tree (pip builds in place), removed
# once this run of setup() has made what pip asked for.
SCRATCH = tempfile.mkdtemp(prefix="ringattn-pip-")

try:
    setup(
        version=version(),
        options={"build": {"build_base": os.path.join(SCRATCH, "build")},
                 "egg_info": {"egg_base": SCRATCH}},
        packages=["ringattn"],
        ext_modules=[Extension(
            "ringattn._core", ["ringattn/_core.c"],
            include_dirs=[INC, mpi4py.get_include()], library_dirs=[LIB],
            runtime_library_dirs=[LIB], libraries=["ringattn"],
            extra_compile_args=COMPILE, extra_link_args=LINK)],
        cmdclass={"build_py": BuildPy},
    )
finally:
    shutil.rmtree(SCRATCH, ignore_errors=True)
