#!/usr/bin/env bash
# ThreadSanitizer still catches faults in wick-linked code under the options and suppressions every test labelled
# tsan runs with (cmake/sanitizers.cmake, tests/sanitizers/tsan.supp), and tsan_run.sh turns a report into a failure
# even when the process exits 0: race_check's race and lock_order modes must fail with the report naming the fault
# and the function; its clean mode must pass.
#   tsan_check_test.sh RACE_CHECK REPORT_DIR
set -u
program=$1 reports=$2
run=$(dirname "$0")/tsan_run.sh
failures=0
expect_fail() {  # expect_fail MODE PATTERN...
  local mode=$1 output status
  shift
  output=$("$run" "$reports/$mode" "$program" "$mode" 2>&1)
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "FAIL: race_check $mode passed tsan_run.sh: ThreadSanitizer did not report it"
    echo "$output" | tail -20
    failures=$((failures + 1))
    return
  fi
  for pattern in "$@"; do
    if ! grep -q -- "$pattern" <<<"$output"; then
      echo "FAIL: race_check $mode (exit $status): no '$pattern' in the report:"
      echo "$output" | tail -30
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok: race_check $mode fails tsan_run.sh (exit $status) with '$1'"
}
expect_fail race "WARNING: ThreadSanitizer: data race" "add_from_two_threads" "race_check.cpp"
expect_fail lock_order "WARNING: ThreadSanitizer: lock-order-inversion" "race_check.cpp"
if output=$("$run" "$reports/clean" "$program" clean 2>&1); then
  echo "ok: race_check clean passes tsan_run.sh"
else
  echo "FAIL: race_check clean failed tsan_run.sh:"
  echo "$output" | tail -30
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] || exit 1
echo "tsan_check_test.sh: ThreadSanitizer reports a data race and a lock-order inversion in wick-linked code"
