#!/usr/bin/env bash
# install_test.sh SOURCE_DIR BUILD_DIR KIND: the library as a user meets it.
# BUILD_DIR is a configured and built tree whose library is KIND (SHARED or
# STATIC); a second tree of the other kind is built here. For each kind:
# install into a fresh prefix under /tmp, move the prefix elsewhere (the
# install must not depend on where it was put), then build the README's API
# example (docs/examples/api_forward.c, checked identical to the README) once
# through find_package(ringattn) and through pkg-config by the README's own
# lines (PKG_CONFIG_PATH, mpicc; also plain cc), run it under mpirun at P = 2
# with no LD_LIBRARY_PATH, and run PREFIX/bin/ringattn --version from another
# directory. Last, a project that embeds the source tree with
# add_subdirectory, shared and static, builds and runs the example.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
kind=$3
work=$(mktemp -d /tmp/ringattn-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset LD_LIBRARY_PATH
example=$src/docs/examples/api_forward.c
fail() { echo "install test FAIL: $*" >&2; exit 1; }
quiet() { "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; fail "$*"; }; }

# The README's block under "## Library API" is the example file, verbatim.
readme_example() {
    awk '/^## Library API/ { in_section = 1 }
         in_section && /^```c$/ { in_code = 1; next }
         in_code && /^```$/ { exit }
         in_code' "$src/README.md"
}
cmp -s <(readme_example) "$example" ||
    fail "README's API example and docs/examples/api_forward.c differ"
for line in 'export PKG_CONFIG_PATH=PREFIX/lib/pkgconfig' \
    'mpicc api_forward.c $(pkg-config --cflags --libs ringattn) -lm' \
    'mpirun -np 2 ./a.out'; do
    grep -qxF "  $line" "$src/README.md" ||
        fail "README's pkg-config lines: no '$line'"
done

run_example() { # BINARY LABEL
    local out
    out=$(mpirun -np 2 --oversubscribe "$1" 2>&1) || { echo "$out" >&2; fail "$2"; }
    grep -q "equals its only key's value" <<<"$out" || fail "$2: $out"
    echo "ok: $2"
}

# check_prefix KIND PREFIX: everything a user of an installed tree does.
check_prefix() {
    local k=$1 prefix=$2 static=
    quiet cmake -S "$src/tests/install" -B "$work/find-$k" \
        -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLE="$example"
    quiet cmake --build "$work/find-$k"
    run_example "$work/find-$k/api_forward" "$k, find_package(ringattn)"

    # The README's lines, verbatim but for PREFIX (and --static), in a
    # folder of their own with no LD_LIBRARY_PATH: then plain cc.
    [ "$k" = STATIC ] && static=--static
    local pc="$work/pc-$k"
    mkdir "$pc" && cp "$example" "$pc/api_forward.c"
    (cd "$pc" && export PKG_CONFIG_PATH=$prefix/lib/pkgconfig &&
        quiet mpicc api_forward.c $(pkg-config $static --cflags --libs ringattn) -lm &&
        quiet cc api_forward.c $(pkg-config $static --cflags --libs ringattn) -lm -o cc.out)
    run_example "$pc/a.out" "$k, README's pkg-config lines${static:+ with $static}"
    run_example "$pc/cc.out" "$k, pkg-config with plain cc${static:+ $static}"

    # --version names the build's BLAS, MPI and HDF5: it loads them all.
    (cd "$work" && env -u LD_LIBRARY_PATH "$prefix/bin/ringattn" --version |
        grep -q "^  HDF5") ||
        fail "$k: $prefix/bin/ringattn --version does not run from $work"
    echo "ok: $k, $prefix/bin/ringattn runs from another directory"
}

# install_moved BUILD_TREE KIND: installs, then moves the prefix.
install_moved() {
    quiet cmake --install "$1" --prefix "$work/installed-$2"
    mv "$work/installed-$2" "$work/moved-$2"
}

if [ "$kind" = SHARED ]; then other=STATIC; shared_flag=OFF
else other=SHARED; shared_flag=ON; fi

install_moved "$build" "$kind"
check_prefix "$kind" "$work/moved-$kind"

quiet cmake -S "$src" -B "$work/build-$other" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=$shared_flag -DRA_BUILD_TESTS=OFF
quiet cmake --build "$work/build-$other" -j 2
install_moved "$work/build-$other" "$other"
check_prefix "$other" "$work/moved-$other"

# Embedded: shared by default, static when the parent sets BUILD_SHARED_LIBS.
for embed in SHARED STATIC; do
    flags=()
    [ "$embed" = STATIC ] && flags=(-DBUILD_SHARED_LIBS=OFF)
    quiet cmake -S "$src/tests/install" -B "$work/embedded-$embed" \
        -DRINGATTN_SOURCE_DIR="$src" -DEXAMPLE="$example" "${flags[@]}"
    quiet cmake --build "$work/embedded-$embed" -j 2 --target api_forward
    run_example "$work/embedded-$embed/api_forward" "$embed, add_subdirectory"
done
