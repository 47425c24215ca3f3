#!/usr/bin/env bash
# Runs one test of the ThreadSanitizer build (label tsan) and fails when any process it started reported a data race,
# a lock-order inversion or another ThreadSanitizer error, whatever that process's exit status: TSAN_OPTIONS'
# log_path sends every report into REPORT_DIR (one file per process: mpirun's ranks, the wick commands a script
# starts, also those whose failure the script expects). The command's own exit status must be 0 (or 77, skipped).
#   tsan_run.sh REPORT_DIR COMMAND [ARGS...]
# TSAN_OPTIONS comes from cmake/sanitizers.cmake (suppressions=tests/sanitizers/tsan.supp); this adds log_path.
set -u
report_dir=$1
shift
rm -rf "$report_dir" && mkdir -p "$report_dir"
export TSAN_OPTIONS="${TSAN_OPTIONS:-}:log_path=$report_dir/tsan"
"$@"
status=$?
reports=$(find "$report_dir" -type f -name 'tsan*' | sort)
if [ -n "$reports" ]; then
  for report in $reports; do
    echo "==== ThreadSanitizer report $report"
    head -c 20000 "$report"
  done
  echo "FAIL: $(echo "$reports" | wc -l) process(es) reported ThreadSanitizer errors (above; command exit $status)"
  exit 1
fi
[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || { echo "FAIL: the command exited $status"; exit "$status"; }
echo "tsan_run.sh: no ThreadSanitizer report (command exit $status)"
exit "$status"
