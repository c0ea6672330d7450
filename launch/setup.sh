#!/usr/bin/env bash
# setup.sh [BUILD_DIR] [CMAKE_ARGS...]: installs the Debian packages ringattn
# needs (when missing) and builds it (with ringattn-sim in BUILD_DIR/sim,
# docs/SIMULATION.md). setup.sh --sim DIR builds ringattn-sim alone in DIR.
# Idempotent; safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
sim=()
if [ "${1:-}" = --sim ]; then
  sim=(-DRA_SIMGRID=ON)
  shift
fi
build=${1:-build}
shift || true

packages=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin
          libopenblas-dev libhdf5-openmpi-dev hdf5-tools libjansson-dev libcmocka-dev
          libdnnl-dev libsimgrid-dev
          python3-h5py python3-numpy python3-matplotlib python3-torch
          python3-dev python3-mpi4py python3-pytest python3-setuptools python3-venv
          valgrind iproute2 util-linux slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${sim[@]+"${sim[@]}"} "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
