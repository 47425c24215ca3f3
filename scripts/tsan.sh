#!/usr/bin/env bash
# ThreadSanitizer run of wick's threads (docs/testing.md "ThreadSanitizer"; not part of CI's scripts/test.sh):
# configures $WICK_TSAN_BUILD_DIR (default build-tsan/: -DWICK_TSAN=ON, CPU only, Debug at -Og, no benchmarks),
# builds only what the tests labelled tsan run (libwick, the wick command, wick_tsan_tests, the comm test programs,
# the training fixture, the write-fault shim, race_check), then runs `ctest -L tsan`: any data race or lock-order inversion that ThreadSanitizer
# reports in any process a test started fails that test (tests/sanitizers/tsan_run.sh).
#   scripts/tsan.sh                  # everything labelled tsan
#   scripts/tsan.sh -R tsan.threads  # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
build_dir=${WICK_TSAN_BUILD_DIR:-build-tsan}
WICK_BUILD_DIR=$build_dir \
  WICK_BUILD_TARGETS="wick wick_cli wick_tsan_tests wick_comm_tests wick_comm_lost_rank_test wick_train_fixture \
  wick_write_fault wick_race_check" \
  scripts/build.sh -DWICK_CUDA=OFF -DWICK_TSAN=ON -DWICK_SANITIZE=OFF -DWICK_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug
# The tests take both cores each (PROCESSORS 2): one at a time.
ctest --test-dir "$build_dir" --output-on-failure -L '^tsan$' "$@"
