#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs the packages wick and its tests
# need (python3-h5py for interop.h5py_dataset), configures and builds (warnings are errors), then
# runs every ctest label. CUDA tests skip with a visible message where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
WICK_BUILD_TARGETS= scripts/build.sh "$@"   # every target: tests, benchmarks, fixtures
build_dir=${WICK_BUILD_DIR:-build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# Tests run two at a time on few cores: idle OpenMP threads sleep instead of spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$build_dir" --output-on-failure --timeout 600 -j "$(nproc)"
