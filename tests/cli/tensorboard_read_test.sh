#!/usr/bin/env bash
# The TensorBoard event files wick writes, loaded with TensorBoard's own EventAccumulator
# (tests/reference/read_tensorboard_events.py): the scalars, the image and the framing of the file
# TensorBoard.EventFileParsesBackWithFramingCrcsAndFields writes, and the resumed run of
# TensorBoard.ResumeWritesASessionStartAtTheFirstNewStep with the interrupted steps dropped.
# TensorBoard is not a Debian package (pip, about 40 MB with its dependencies), so it is not
# installed for the tests: this skips (77) unless WICK_PYTHON (default python3) imports tensorboard,
# e.g. python3 -m venv /tmp/tb && /tmp/tb/bin/pip install tensorboard && WICK_PYTHON=/tmp/tb/bin/python ctest -L interop
# Usage: tensorboard_read_test.sh WICK_ENGINE_TESTS WORK_DIR
set -u
engine_tests=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
python=${WICK_PYTHON:-python3}
if ! command -v "$python" >/dev/null || ! "$python" -c "import tensorboard" 2>/dev/null; then
  echo "skipped: $python cannot import tensorboard (set WICK_PYTHON to a python that has it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
WICK_LOGGING_EXPORT="$work" "$engine_tests" --gtest_brief=1 \
  --gtest_filter='TensorBoard.EventFileParsesBackWithFramingCrcsAndFields:TensorBoard.ResumeWritesASessionStartAtTheFirstNewStep' ||
  { echo "FAIL: the TensorBoard tests of wick_engine_tests failed"; exit 1; }
events=$(ls "$work"/events.out.tfevents.* 2>/dev/null | head -1)
[ -n "$events" ] || { echo "FAIL: no event file exported into $work"; exit 1; }
failures=0
"$python" "$here/../reference/read_tensorboard_events.py" --expect-wick-test "$events" ||
  { echo "FAIL: TensorBoard reads other values from $events"; failures=1; }
"$python" "$here/../reference/read_tensorboard_events.py" --expect-resumed "$work/resumed_run" ||
  { echo "FAIL: TensorBoard did not drop the interrupted steps of the resumed run"; failures=1; }
exit $failures
