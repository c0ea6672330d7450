#!/usr/bin/env bash
# ggml-build.sh DIR: builds ggml's shared libraries from source into DIR
# (libggml-base.so and the CPU variant of this core, libggml-cpu-NAME.so),
# for bench/ggml-compare.sh where npm's prebuilt package cannot be had.
# The source is the copy of ggml that PyPI's llama-cpp-python sdist
# vendors (LCP_VERSION, default 0.3.36: ggml 0.25.3), fetched with pip.
# Only the variant ggml's loader would pick here is compiled (about 1 CPU
# minute): sapphirerapids with AMX, zen4 with AVX512_BF16, skylakex with
# AVX-512, haswell with AVX2, else x64.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bench/ggml-build.sh DIR" >&2
  exit 2
fi
out=$1
ver=${LCP_VERSION:-0.3.36}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
if has amx_tile && has avx512_bf16; then variant=sapphirerapids
elif has avx512_bf16 && has avx512vbmi; then variant=zen4
elif has avx512f; then variant=skylakex
elif has avx2 && has fma; then variant=haswell
else variant=x64; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "+ pip download llama-cpp-python==$ver (sdist) for its ggml"
pip download --quiet --no-deps --no-binary :all: \
  "llama-cpp-python==$ver" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$ver".tar.gz -C "$work"
src=$work/llama_cpp_python-$ver/vendor/llama.cpp/ggml
[ -f "$src/ggml.pc.in" ] || : >"$src/ggml.pc.in" # the sdist leaves it out
echo "+ cmake ggml-base and ggml-cpu-$variant"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF \
  -DBUILD_SHARED_LIBS=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
  >"$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" -j2 --target ggml-base "ggml-cpu-$variant" \
  >"$work/make.log" 2>&1 || { tail -20 "$work/make.log" >&2; exit 1; }
mkdir -p "$out"
cp -P "$work"/build/src/libggml-base.so* "$out/"
cp "$work/build/bin/libggml-cpu-$variant.so" "$out/"
echo "+ the ggml of llama-cpp-python $ver in $out (variant $variant)"
