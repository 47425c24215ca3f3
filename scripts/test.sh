#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs the packages wick and its tests
# need (python3-h5py for interop.h5py_dataset), configures and builds (warnings are errors), then
# runs the ctest labels. CUDA tests skip with a visible message where no GPU is present.
#   scripts/test.sh                   # CI (.ci/run): the plain build (build/) and the ASan+UBSan build
#                                     # (build-asan/, docs/testing.md "Sanitizers") over every CPU label
#   scripts/test.sh [cmake options]   # one build ($WICK_BUILD_DIR, default build/) with these options, every label
# WICK_TEST_SANITIZED=0 leaves the sanitized build out of the first form.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# Tests run two at a time on few cores: idle OpenMP threads sleep instead of spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
run_ctest() {  # run_ctest BUILD_DIR [ctest options]
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$(nproc)" "$@"
}
build_dir=${WICK_BUILD_DIR:-build}
if [ $# -gt 0 ] || [ "${WICK_TEST_SANITIZED:-1}" = 0 ]; then
  scripts/build.sh "$@"
  run_ctest "$build_dir"
  exit
fi

# Both builds. Every CPU label runs once, in the sanitized build: a memory error, a leak or undefined behaviour
# fails CI, and no test runs twice on CI's two cores. The plain build (the one users install) runs the labels
# about that build itself: install (find_package and the relocatable bundle of the real library) and interop
# (its files read by h5py, TensorBoard, diffusers); where a GPU is visible it runs everything, since the CUDA
# tests live in runtime, engine, models and cli and the sanitized build has no CUDA.
sanitized_dir=${WICK_SANITIZE_BUILD_DIR:-build-asan}
sanitized_labels='^(runtime|engine|models|mpi|cli|example|bench|build|install|sanitizers)$'
plain_labels='^(install|interop)$'
scripts/build.sh
WICK_BUILD_DIR=$sanitized_dir scripts/build.sh -DWICK_CUDA=OFF -DWICK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
status=0
if nvidia-smi -L >/dev/null 2>&1; then
  run_ctest "$build_dir" || status=1
else
  run_ctest "$build_dir" -L "$plain_labels" || status=1
fi
echo "test.sh: the sanitized build $sanitized_dir, labels $sanitized_labels"
run_ctest "$sanitized_dir" -L "$sanitized_labels" || status=1
exit $status
