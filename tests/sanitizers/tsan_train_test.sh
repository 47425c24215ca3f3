#!/usr/bin/env bash
# `wick train` in the ThreadSanitizer build (ctest label tsan, run through tsan_run.sh, which fails on any report of
# any process started here): every thread a training run starts, with the values checked as well.
#  1. One rank on a pseudo-terminal (script(1)), so the progress display redraws its line in place while the loader
#     thread fills the prefetch queue; a checkpoint every 4 steps (the byte observer hashes each file while it is
#     written); SIGUSR1 after the first checkpoint stops it at a step with a checkpoint (exit 75, the preemption
#     watch); --resume auto verifies that checkpoint on parallel_for's threads and trains to the end (exit 0).
#  2. Two ranks under mpirun (each rank's loader, MPI's collective polling, ZeRO-1 optimizer shards): an
#     uninterrupted run, and one stopped by SIGUSR1 to mpirun (both ranks stop at the same step, exit 75) and resumed;
#     the resumed run's final parameters equal the uninterrupted one's bitwise, and `wick checkpoint inspect`
#     verifies the last checkpoint.
#   tsan_train_test.sh WICK FIXTURE WORK_DIR [MPIEXEC]     (no MPIEXEC: part 1 only)
set -u
wick=$1 fixture=$2 work=$3 mpiexec=${4:-}
here=$(cd "$(dirname "$0")/../train" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
steps=12
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 6, steps: $steps, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1}
dataset: {path: $work/data/synthetic.h5}
save: {every: 4, keep_last: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
logged() { grep -c '"step"' "$work/out/$1/metrics.jsonl" 2>/dev/null; }
latest_step() { sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' "$work/out/$1/checkpoints/latest" 2>/dev/null; }
final_model() { echo "$work/out/$1/checkpoints/$(printf step_%08d $steps)/model.safetensors"; }
# wait_checkpoint NAME PID: until NAME has a checkpoint and logged a step after it (at most 10 minutes)
wait_checkpoint() {
  for _ in $(seq 1 6000); do
    local at
    at=$(latest_step "$1")
    [ -n "$at" ] && [ "$(logged "$1")" -gt "$at" ] && return 0
    kill -0 "$2" 2>/dev/null || { fail "$1 ended before its first checkpoint"; return 1; }
    sleep 0.1
  done
  fail "$1 wrote no checkpoint within 10 minutes"
  return 1
}
# stopped_and_resumed NAME STATUS [MPIEXEC ARGS...]: NAME exited 75 at its latest checkpoint; resume it to the end
stopped_and_resumed() {
  local name=$1 status=$2 at
  shift 2
  at=$(latest_step "$name")
  echo "--- $name: exit status $status, checkpoint at step ${at:-none}"
  [ "$status" = 75 ] || { fail "$name: exit status $status, not 75"; tail -5 "$work/$name.log"; }
  grep -q "stopped after step $at of $steps on request" "$work/$name.log" || fail "$name: no stop message at step $at"
  "$@" "$wick" train "$work/run.yaml" --no-progress --set name="$name" >"$work/$name.resumed.log" 2>&1 ||
    { fail "resuming $name exited $?"; tail -5 "$work/$name.resumed.log"; return; }
  grep -q "resuming from .*$(printf step_%08d "$at")" "$work/$name.resumed.log" || fail "$name: did not resume from step $at"
  [ "$(latest_step "$name")" = "$steps" ] || fail "$name: the resumed run did not reach step $steps"
}

# 1. One rank, progress display on a terminal, stopped by SIGUSR1, resumed.
script -qfec "$wick train $work/run.yaml --set name=one" /dev/null >"$work/one.log" 2>&1 &
job=$!
if wait_checkpoint one "$job"; then
  pkill -USR1 -f "^$wick train $work/run.yaml --set name=one\$" || fail "no wick process to signal"
  wait "$job"
  status=$?
  grep -q $'\r' "$work/one.log" || fail "one: the progress display did not redraw its line on the terminal"
  stopped_and_resumed one "$status"
else
  kill "$job" 2>/dev/null
  wait "$job"
fi

# 2. Two ranks under mpirun: uninterrupted, and stopped by SIGUSR1 to mpirun then resumed.
if [ -n "$mpiexec" ]; then
  timeout 600 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=whole \
    >"$work/whole.log" 2>&1 || { fail "the uninterrupted 2-rank run exited $?"; tail -8 "$work/whole.log"; }
  "$wick" checkpoint inspect "$work/out/whole/checkpoints/latest" >"$work/inspect.log" 2>&1 ||
    { fail "wick checkpoint inspect: the 2-rank run's last checkpoint does not verify"; cat "$work/inspect.log"; }
  "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=two >"$work/two.log" 2>&1 &
  job=$!
  if wait_checkpoint two "$job"; then
    kill -USR1 "$job"
    wait "$job"
    stopped_and_resumed two $? timeout 600 "$mpiexec" --oversubscribe -np 2
    python3 "$here/same_tensors.py" "$(final_model whole)" "$(final_model two)" ||
      fail "two: the resumed run's final parameters differ from the uninterrupted run's"
  else
    kill "$job" 2>/dev/null
    wait "$job"
  fi
else
  echo "tsan_train_test.sh: no mpiexec, the 2-rank part is skipped"
fi

[ "$failures" -eq 0 ] || { echo "tsan_train_test.sh: $failures failure(s)"; exit 1; }
echo "tsan_train_test.sh: passed"
