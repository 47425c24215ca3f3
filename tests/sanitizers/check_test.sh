#!/usr/bin/env bash
# The sanitizers of a WICK_SANITIZE build still catch wick's own faults under the options and suppressions that
# every test runs with (cmake/sanitizers.cmake, tests/sanitizers/lsan.supp): tests/sanitizers/leak_check.cpp leaks
# tensors (from the main thread and an OpenMP region), reads past a tensor's storage, and overflows a signed int;
# each run must fail with the sanitizer's report naming the fault.
#   check_test.sh LEAK_CHECK
set -u
program=$1
failures=0
expect() {  # expect MODE PATTERN...: the program fails and its output holds every pattern
  local mode=$1 output status
  shift
  output=$("$program" "$mode" 2>&1)
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "FAIL: leak_check $mode exited 0: the sanitizer did not stop it"
    echo "$output" | tail -20
    failures=$((failures + 1))
    return
  fi
  for pattern in "$@"; do
    if ! grep -q -- "$pattern" <<<"$output"; then
      echo "FAIL: leak_check $mode (exit $status): no '$pattern' in its output:"
      echo "$output" | tail -30
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok: leak_check $mode fails (exit $status) with '$1'"
}
expect leak "ERROR: LeakSanitizer: detected memory leaks" "Direct leak of" "in main " "in main._omp_fn" "in wick::Tensor::empty"
expect overflow "ERROR: AddressSanitizer: heap-buffer-overflow" "in main "
expect ub "runtime error: signed integer overflow" "in main "
[ "$failures" -eq 0 ] || exit 1
echo "check_test.sh: the sanitizers catch a leak, an overflow and undefined behaviour in wick's code"
