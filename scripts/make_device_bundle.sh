#!/usr/bin/env bash
# Packs everything a GPU machine without package access needs to run wick's CUDA tests and GPU
# benchmarks: the test and benchmark programs, bin/wick, libwick and every non-system library they
# load (RUNPATH $ORIGIN/../lib), the reference scripts, the training test scripts with their fixture
# program (tests/train), and bench/gpu/run.sh. The CUDA libraries
# themselves (cuBLAS, cuDNN, NCCL, NVRTC) are left out: bench/gpu/run.sh finds the GPU machine's own.
#
#   scripts/make_device_bundle.sh            # builds into build/, writes .device/wick-device.tar.xz
#
# The archive is what the device tool carries (.device/ is ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WICK_BUILD_DIR:-build}
scripts/build.sh "$@"
cmake --build "$build_dir" --target bundle >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/wick-device
mkdir -p "$root/bin" "$root/lib" "$root/tests/data"
cp -r "$build_dir/bundle/bin/." "$root/bin/"
cp -r "$build_dir/bundle/lib/." "$root/lib/"
for program in "$build_dir"/tests/wick_*_tests "$build_dir"/tests/wick_train_fixture "$build_dir"/bench/*_bench; do
  [ -x "$program" ] || continue
  cp "$program" "$root/bin/"
  patchelf --set-rpath '$ORIGIN/../lib' "$root/bin/$(basename "$program")"
done
# Libraries the test and benchmark programs add (GoogleTest, Google Benchmark, zlib, ...).
for program in "$root"/bin/*; do
  ldd "$program" 2>/dev/null | awk '/=> \// {print $3}' | while read -r library; do
    name=$(basename "$library")
    case "$name" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) continue ;;
      libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*|libwick*) continue ;;
    esac
    [ -e "$root/lib/$name" ] || cp -L "$library" "$root/lib/$name"
  done
done
cp -r tests/data/. "$root/tests/data/"
mkdir -p "$root/tests/train"
cp tests/train/*.sh tests/train/*.py "$root/tests/train/"   # train_nccl_test.sh and its helpers
mkdir -p "$root/bench" "$root/tests/reference"
cp -r bench/gpu "$root/bench/"
cp bench/*.py "$root/bench/" 2>/dev/null || true
git rev-parse HEAD > "$root/COMMIT" 2>/dev/null || echo unknown > "$root/COMMIT"
mkdir -p .device
tar -C "$stage" -cJf .device/wick-device.tar.xz wick-device
ls -la .device/wick-device.tar.xz
