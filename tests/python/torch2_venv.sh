#!/bin/sh
# torch2_venv.sh: the Python package's tests with a current PyTorch 2.x from
# PyPI (issue 41, part 7), whose own scaled_dot_product_attention is then
# the reference of ringattn.torch.scaled_dot_product_attention. Not run by
# ctest: PyPI's Linux torch wheel is the CUDA build, 0.5 GB, and its CUDA
# dependencies make the venv 5.3 GB (measured with torch 2.15.0), more than
# CI's budget should download.
#
#   tests/python/torch2_venv.sh BUILD VENV [RANKS...]
#
# BUILD: a CMake build tree with the package (BUILD/python); VENV: where the
# venv is made (kept, so that a second run reuses it); RANKS: the rank
# counts to test (default 1 2). Exit 0 when every run passes.
set -eu
build=$(cd "$1" && pwd); venv=$2; shift 2
ranks=${*:-1 2}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -c 'import torch, sys; sys.exit(torch.__version__ < "2")' \
    2>/dev/null || "$venv/bin/pip" install -q 'torch==2.*'
"$venv/bin/python" -c 'import torch; print("# torch", torch.__version__)'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$build/python"
cd "$here"
for p in $ranks; do
    mpirun --oversubscribe -np "$p" "$venv/bin/python" -m pytest -q -x \
        -p no:cacheprovider
done
