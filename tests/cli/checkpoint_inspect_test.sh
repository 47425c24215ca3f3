#!/usr/bin/env bash
# `wick checkpoint inspect` on a good, a corrupted and a sharded checkpoint: exit 0, 3, 0.
# Usage: checkpoint_inspect_test.sh WICK_BINARY FIXTURE_BINARY WORK_DIR
set -u
wick=$1 fixture=$2 work=$3
run="$work/run"
"$fixture" "$run" || { echo "FAIL: the fixture program failed"; exit 1; }
failures=0
expect() {  # expect STATUS PATTERN DIR
  local want=$1 pattern=$2 dir=$3 out status
  out=$("$wick" checkpoint inspect "$dir" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ]; then
    echo "FAIL: wick checkpoint inspect $dir exited $status, expected $want"; echo "$out"; failures=$((failures + 1))
  elif ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: wick checkpoint inspect $dir: output lacks '$pattern'"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: inspect $(basename "$dir") -> $status"
  fi
}
expect 0 "verification   valid" "$run/checkpoints/step_00000001"
expect 0 "6100 parameters" "$run/checkpoints/step_00000001"
expect 0 "adamw8bit, 1 steps taken" "$run/checkpoints/step_00000001"
expect 3 "model.safetensors: SHA-256" "$run/checkpoints/step_00000002"
expect 0 "2 files (sharded)" "$run/checkpoints/step_00000003"
expect 0 "world size     2" "$run/checkpoints/latest"
expect 3 "not a directory" "$run/checkpoints/step_00000099"
# A model file whose header holds bytes that are not UTF-8: the messages quoting them (the JSON parser quotes what it
# read up to the first bad byte) stay UTF-8 text, the byte written \xff.
cp -r "$run/checkpoints/step_00000003" "$run/checkpoints/step_00000004"
python3 - "$run/checkpoints/step_00000004/model.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[9:13] = b"\xff\xfe\x01\x80"  # inside the JSON header, right after its opening brace
open(path, "wb").write(data)
PY
out=$("$wick" checkpoint inspect "$run/checkpoints/step_00000004" 2>&1)
status=$?
[ "$status" = 3 ] || { echo "FAIL: the damaged header gave exit $status, not 3"; failures=$((failures + 1)); }
python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' <<<"$out" ||
  { echo "FAIL: inspect's output on a damaged header is not UTF-8"; failures=$((failures + 1)); }
grep -qF "last read: '{\\xff'" <<<"$out" ||
  { echo "FAIL: the damaged bytes are not shown escaped"; echo "$out"; failures=$((failures + 1)); }
rm -f "$run/checkpoints/step_00000001/manifest.json"
expect 3 "incomplete" "$run/checkpoints/step_00000001"
exit $((failures > 0))
