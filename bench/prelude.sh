# prelude.sh: sourced first by every bench/ script (after `set -euo
# pipefail`). Contract: the working folder becomes the repository root,
# $build is the script's first argument (default build), $R the absolute
# path of its ringattn binary, and mpirun may run as root.
cd "$(dirname "$0")/.."
build=${1:-build}
R=$(realpath -m "$build")/ringattn
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
