#!/usr/bin/env bash
# Packs everything a GPU machine without package access needs to run wick's CUDA tests and GPU
# benchmarks: the test and benchmark programs, bin/wick, libwick and every non-system library they
# load (RUNPATH $ORIGIN/../lib), the reference scripts, the training test scripts with their fixture
# program (tests/train), and bench/gpu/run.sh. The CUDA libraries
# themselves (cuBLAS, cuDNN, NCCL, NVRTC) are left out: bench/gpu/run.sh finds the GPU machine's own.
# The Python packages bench/gpu/flux_vs_diffusers.py needs and the GPU machine's image lacks
# (diffusers, importlib_metadata, bitsandbytes; torch and peft are there) are downloaded from PyPI
# for its Python 3.12 and unpacked into python/ (bitsandbytes with its CUDA 13 libraries only);
# without network access the bundle is made without them and that script reports the missing import.
#
#   scripts/make_device_bundle.sh            # builds into build/, writes .device/wick-device.tar.xz
#   WICK_BUNDLE_PYTHON=0 scripts/make_device_bundle.sh   # without python/
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
if [ "${WICK_BUNDLE_PYTHON:-1}" = 1 ]; then
  wheels=$stage/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
       --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
       --platform manylinux2014_x86_64 -d "$wheels" \
       diffusers==0.42.1 importlib_metadata==10.2.0 bitsandbytes==0.50.2 >"$stage/pip.log" 2>&1; then
    for wheel in "$wheels"/*.whl; do python3 -m zipfile -e "$wheel" "$root/python"; done
    find "$root/python/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*_cpu.so' ! -name '*_cuda13*.so' -delete
  else
    echo "warning: pip download failed (no network?): the bundle has no python/ (diffusers, bitsandbytes)" >&2
    tail -3 "$stage/pip.log" >&2
  fi
  rm -rf "$wheels"
fi
git rev-parse HEAD > "$root/COMMIT" 2>/dev/null || echo unknown > "$root/COMMIT"
mkdir -p .device
tar -C "$stage" -cJf .device/wick-device.tar.xz wick-device
ls -la .device/wick-device.tar.xz
