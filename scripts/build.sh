#!/usr/bin/env bash
# Configures and builds wick into build/ (or $WICK_BUILD_DIR). Extra arguments go to cmake.
#   scripts/build.sh                       # Release, CUDA when nvcc is found (archs 80;90)
#   scripts/build.sh -DWICK_CUDA=OFF
#   WICK_BUILD_TARGETS=wick_cli scripts/build.sh   # only these targets (wick_cli is the `wick` binary)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WICK_BUILD_DIR:-build}
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1   # cache hits across clones in other folders
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$build_dir"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWICK_WERROR=ON "$@" >"$build_dir/configure.log" 2>&1 ||
  { cat "$build_dir/configure.log"; exit 1; }
targets=()
for target in ${WICK_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
