#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs the packages wick and its tests
# need (python3-h5py for interop.h5py_dataset), configures and builds two trees (warnings are errors) and
# runs every ctest label but `long` (ctest -L long: the 50-kill test, ~13 minutes):
#   build/       the plain Release build users install (CUDA where nvcc is found): the install, interop and
#                e2e labels (the end-to-end rows of the architectures other than Flux), and every label where
#                a GPU is visible (the CUDA tests live in runtime, engine, models and cli);
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer (-DWICK_CUDA=OFF, Debug at -Og): every other
#                CPU test, once; a memory error, a leak or undefined behaviour fails the run (docs/testing.md).
# CUDA tests skip with a visible message where no GPU is present.
#   scripts/test.sh                           # CI (.ci/run): both builds, as above
#   WICK_TEST_SANITIZED=0 scripts/test.sh     # the plain build only, every label in it
#   scripts/test.sh [cmake options]           # one build ($WICK_BUILD_DIR, default build/) with these options,
#                                             # every label in it
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# Tests run two at a time on few cores: idle OpenMP threads sleep instead of spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
run_ctest() {  # run_ctest BUILD_DIR EXCLUDED_LABELS [ctest options]
  local dir=$1 excluded=$2
  shift 2
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$(nproc)" -LE "$excluded" "$@"
}
build_dir=${WICK_BUILD_DIR:-build}
if [ $# -gt 0 ] || [ "${WICK_TEST_SANITIZED:-1}" = 0 ]; then
  WICK_BUILD_TARGETS= scripts/build.sh "$@"   # every target: tests, benchmarks, fixtures
  run_ctest "$build_dir" '^long$'
  exit
fi

# Both builds. Every CPU label runs once, in the sanitized build: a memory error, a leak or undefined behaviour
# fails the run, and no test runs twice on two cores. The plain build (the one users install) runs the labels
# about that build itself: install (find_package and the relocatable bundle of the real library) and interop
# (its files read by h5py, TensorBoard, diffusers); where a GPU is visible it runs everything, since the CUDA
# tests live in runtime, engine, models and cli and the sanitized build has no CUDA.
sanitized_dir=${WICK_SANITIZE_BUILD_DIR:-build-asan}
sanitized_labels='^(runtime|engine|models|mpi|cli|example|bench|build|install|sanitizers|fuzz)$'
# The end-to-end rows of the architectures other than Flux (label e2e, tests/CMakeLists.txt) run in the plain build:
# under the sanitizers they took 44% of the tests' time; Flux's rows keep the whole pipeline sanitized.
plain_labels='^(install|interop|e2e)$'
WICK_BUILD_TARGETS= scripts/build.sh
WICK_BUILD_TARGETS= WICK_BUILD_DIR=$sanitized_dir scripts/build.sh -DWICK_CUDA=OFF -DWICK_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug
status=0
if nvidia-smi -L >/dev/null 2>&1; then
  run_ctest "$build_dir" '^long$' || status=1
else
  run_ctest "$build_dir" '^long$' -L "$plain_labels" || status=1
fi
echo "test.sh: the sanitized build $sanitized_dir, labels $sanitized_labels"
# A failed test runs once more, a safety net against crashes of the sanitizers themselves (LeakSanitizer's
# stop-the-world tracer, google/sanitizers#1353; the one seen, on dynamic TLS, is avoided in cmake/sanitizers.cmake).
# A test that fails twice fails the run; the first attempt's output stays in the log.
run_ctest "$sanitized_dir" '^(long|e2e)$' -L "$sanitized_labels" --repeat until-pass:2 || status=1
exit $status
