#!/usr/bin/env bash
# Write failures during `wick train`: a full disk (write(2) fails with ENOSPC), an I/O error (fsync
# fails with EIO) and the file size limit (ulimit -f: EFBIG) while a checkpoint is saved at a later
# step, while `latest` is replaced, while the LoRA file, a sample grid or metrics.jsonl is written.
# Each run exits 3 with the reason and the file named; the previous checkpoint and `latest` are
# intact (and resume to the uninterrupted run's losses bitwise); no temporary file is left behind.
# The faults come from an LD_PRELOAD library (tests/fault/write_fault_shim.c) failing the writes to
# files whose path holds WICK_FAULT_PATH.
#   write_failure_test.sh WICK FIXTURE SHIM WORK_DIR
set -u
wick=$1 fixture=$2 shim=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 8, steps: 30, lr: 3.0e-3, optimizer: adamw, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 10, keep_last: 0}
YAML
out=$work/out
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() {  # train NAME ARGS...: output in $work/NAME.log
  local name=$1
  shift
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$work/$name.log" 2>&1
}
faulty() {  # faulty NAME PATTERN [VAR=VALUE ...] -- ARGS...: train NAME with writes to PATTERN failing
  local name=$1 pattern=$2
  shift 2
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  # In a sanitized build (docs/testing.md "Sanitizers") the preloaded shim comes before ASan's runtime in the
  # library list, which ASan refuses unless told; the shim's write/fsync still reach ASan's interceptors.
  env WICK_FAULT_PATH="$pattern" "${vars[@]}" LD_PRELOAD="$shim" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$work/$name.log" 2>&1
}
expect_failure() {  # expect_failure NAME STATUS PATTERN...: the log of NAME says every PATTERN
  local name=$1 status=$2 pattern before=$failures
  shift 2
  [ "$status" -eq 3 ] || { fail "$name: exited $status, expected 3"; tail -5 "$work/$name.log"; return; }
  for pattern in "$@"; do
    grep -q -F -- "$pattern" "$work/$name.log" || { fail "$name: the output lacks '$pattern'"; tail -3 "$work/$name.log"; }
  done
  local left
  left=$(find "$out/$name" -name '*.tmp*')
  [ -z "$left" ] || fail "$name: temporaries left behind: $left"
  [ "$failures" -eq "$before" ] && echo "ok: $name -> 3: $(grep -m1 'wick: error' "$work/$name.log" | cut -c1-220)"
}
expect_checkpoints() {  # expect_checkpoints NAME LATEST DIRS...: checkpoints/ holds `latest` naming LATEST and DIRS
  local name=$1 latest=$2
  shift 2
  local want got
  want=$(printf '%s\n' latest "$@" | sort | tr '\n' ' ')
  got=$(ls "$out/$name/checkpoints" | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "$name: checkpoints/ holds '$got', expected '$want'"
  [ "$(cat "$out/$name/checkpoints/latest" 2>/dev/null)" = "$latest" ] || fail "$name: latest does not name $latest"
  "$wick" checkpoint inspect "$out/$name/checkpoints/latest" >/dev/null 2>&1 || fail "$name: latest does not verify"
}
expect_resumes() {  # expect_resumes NAME FROM_STEP: --resume auto continues from FROM_STEP to the straight run's losses
  local name=$1 from=$2
  train "$name" || { fail "$name: the resume failed"; tail -3 "$work/$name.log"; return; }
  grep -q "resuming from $out/$name/checkpoints/$(printf step_%08d "$from")" "$work/$name.log" ||
    fail "$name: did not resume from step $from"
  python3 "$here/compare_losses.py" "$out/whole/metrics.jsonl" "$out/$name/metrics.jsonl" 30 >"$work/$name.compare" ||
    { fail "$name: the resumed losses differ from the uninterrupted run's"; head -3 "$work/$name.compare"; return; }
  echo "ok: $name resumed from step $from: $(tail -1 "$work/$name.compare")"
}

train whole || { fail "the uninterrupted run failed"; tail -5 "$work/whole.log"; }

# A full disk at the save of step 20: the write of its first file fails.
faulty full checkpoints/step_00000020 -- ; status=$?
expect_failure full $status "No space left on device" "step 20: saving the checkpoint failed, its partial files are removed" \
  "$out/full/checkpoints/step_00000020.tmp-" "\`latest\` names $out/full/checkpoints/step_00000010, which is intact"
expect_checkpoints full step_00000010 step_00000010
expect_resumes full 10

# Room for 100 kB of that checkpoint: the failure comes in the middle of a file.
faulty partial checkpoints/step_00000020 WICK_FAULT_AFTER=100000 -- ; status=$?
expect_failure partial $status "No space left on device" "step 20: saving the checkpoint failed, its partial files are removed"
expect_checkpoints partial step_00000010 step_00000010

# An I/O error: fsync of the checkpoint's files fails.
faulty io checkpoints/step_00000020 WICK_FAULT_ON=fsync WICK_FAULT_ERRNO=EIO -- ; status=$?
expect_failure io $status "Input/output error" "step 20: saving the checkpoint failed, its partial files are removed"
expect_checkpoints io step_00000010 step_00000010
expect_resumes io 10

# `latest` cannot be replaced after step 20's checkpoint is complete: it still names step 10, and
# --resume auto takes the newest valid checkpoint, step 20.
faulty latest checkpoints/latest.tmp WICK_FAULT_AFTER=14 -- ; status=$?
expect_failure latest $status "No space left on device" "$out/latest/checkpoints/latest was not replaced" \
  "$out/latest/checkpoints/step_00000020 is complete, but \`latest\` was not updated"
expect_checkpoints latest step_00000010 step_00000010 step_00000020
expect_resumes latest 20

# The file size limit (RLIMIT_FSIZE, SIGXFSZ ignored): writes past 100 kB fail with EFBIG, so the
# first checkpoint (model 215 kB) cannot be written; nothing earlier exists.
(trap '' XFSZ; ulimit -f 100; exec "$wick" train "$work/run.yaml" --no-progress --set name=fsize >"$work/fsize.log" 2>&1)
status=$?
expect_failure fsize $status "File too large" "step 10: saving the checkpoint failed" "no earlier checkpoint exists"
[ -z "$(ls "$out/fsize/checkpoints")" ] || fail "fsize: checkpoints/ is not empty: $(ls "$out/fsize/checkpoints")"

# The LoRA file (written after the checkpoint of step 10).
faulty lora lora/lora.safetensors -- --set model.name_or_path="$out/whole/checkpoints/latest" \
  --set network.type=lora --set network.linear=4 --set train.steps=10; status=$?
expect_failure lora $status "No space left on device" "$out/lora/lora/lora.safetensors was not replaced"
[ ! -e "$out/lora/lora/lora.safetensors" ] || fail "lora: a LoRA file was written"

# A sample grid.
faulty samples samples/step_5.png -- --set sample.every=5 --set sample.n_per_class=1 --set sample.steps=2; status=$?
expect_failure samples $status "No space left on device" "$out/samples/samples/step_5.png was not replaced"

# metrics.jsonl: appends fail once 2 kB are written (about 8 lines).
faulty metrics metrics.jsonl WICK_FAULT_AFTER=2000 -- ; status=$?
expect_failure metrics $status "metrics: cannot append to $out/metrics/metrics.jsonl: No space left on device"
exit $((failures > 0))
