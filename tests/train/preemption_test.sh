#!/usr/bin/env bash
# Preemption (docs/distributed.md "Preemption"): a stop signal makes every rank finish the current
# step, write a checkpoint there and exit with status 75, and the run continues bitwise.
#  1. SIGUSR1 to rank 1 of a 2-rank job alone: rank 0 learns it through the step's loss all-reduce;
#     both stop after the same step, the one in progress when the signal came (checked against the
#     steps logged just before and just after the kill), mpirun exits 75, `latest` names that step,
#     and --resume auto continues with the uninterrupted run's losses and final weights (bitwise).
#  2. SIGUSR1 to mpirun, which forwards it to both ranks (what Slurm's --signal=B:USR1 is forwarded to).
#  3. SIGTERM to rank 0 alone (what srun and Slurm's preemption send every task).
#  4. A second SIGUSR1 to mpirun while the stop's checkpoint is being written (its manifest's fsync
#     made slow by the write-fault shim): the job ends at once (not 0, not 75), the previous
#     checkpoint still verifies and `latest` still names it, its staging directory is left behind;
#     --resume auto continues from the previous checkpoint bitwise and removes the leftover.
#  5. One rank without a launcher: SIGTERM, exit 75, resume bitwise; and Ctrl-C (SIGINT) the same way.
#     And a signal while a 2-rank run starts (its dataset's open made slow by the shim): step 1, its
#     checkpoint, exit 75, resume bitwise.
#  6. scripts/slurm_train.sbatch run without Slurm (scontrol stubbed): SIGUSR1 to the batch script,
#     exit 75 and `scontrol requeue $SLURM_JOB_ID`; the requeued script finishes the run bitwise.
#   preemption_test.sh MPIEXEC WICK FIXTURE WRITE_FAULT_SHIM WORK_DIR
set -u
mpiexec=$1 wick=$2 fixture=$3 shim=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
steps=60
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 6, steps: $steps, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1}
dataset: {path: $work/data/synthetic.h5}
save: {every: 10, keep_last: 0}
YAML
failures=0
# In a sanitized build (docs/testing.md "Sanitizers") the preloaded shim comes before ASan's runtime in the library
# list, which ASan refuses unless told; the shim's calls still reach ASan's interceptors.
asan_with_shim="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$(date +%s)
metrics() { echo "$work/out/$1/metrics.jsonl"; }
logged() { cat "$(metrics "$1")" 2>/dev/null | grep -c '"step"'; }
latest_step() { sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' "$work/out/$1/checkpoints/latest" 2>/dev/null; }
# run NAME N: an uninterrupted run (N ranks; 1 without a launcher), or a resumed one
run() {
  local name=$1 n=$2 log=$work/$1.$(date +%s%N).log
  if [ "$n" = 1 ]; then
    timeout 240 "$wick" train "$work/run.yaml" --no-progress --set name="$name" >"$log" 2>&1
  else
    timeout 240 "$mpiexec" --oversubscribe -np "$n" "$wick" train "$work/run.yaml" --no-progress --set name="$name" \
      >"$log" 2>&1
  fi || { fail "$name on $n rank(s) exited $?"; tail -5 "$log"; }
  last_log=$log
}
# start_job NAME [ENV=VALUE...]: a 2-rank job in the background; $job is mpirun's process id
start_job() {
  local name=$1
  shift
  log=$work/$name.log
  env "$@" "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name="$name" \
    >"$log" 2>&1 &
  job=$!
}
# wait_for NAME STEP: until NAME has logged STEP steps and written its checkpoint of step 10
wait_for() {
  for _ in $(seq 1 6000); do
    [ "$(logged "$1")" -ge "$2" ] && [ "$(latest_step "$1")" = 10 ] && return 0
    kill -0 "$job" 2>/dev/null || { fail "$1 ended before step $2"; return 1; }
    sleep 0.01
  done
  fail "$1 did not reach step $2"
}
# rank_pid NAME RANK: the process id of RANK's wick
rank_pid() {
  local pid
  for pid in $(pgrep -f "^$wick train $work/run.yaml --no-progress --set name=$1\$"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$pid"
  done
}
# finish: waits for the job (at most 120 s), sets $status
finish() {
  for _ in $(seq 1 1200); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && { fail "the job did not end within 120 s of the signal"; kill -9 "$job"; }
  wait "$job"
  status=$?
}
# send NAME SIGNAL PID: sends SIGNAL to PID, noting the steps NAME had logged just before ($before)
# and just after ($after)
send() {
  before=$(logged "$1")
  kill -"$2" "$3"
  after=$(logged "$1")
}
# stopped NAME WHO REFERENCE N_RANKS: exit 75; the checkpoint at the step after the signal (the rank
# that got it contributes its flag to the next all-reduce: step before + 1, or after + 2 when that
# rank was already past its all-reduce of step after + 1 while rank 0 had not logged it yet);
# nothing logged after it; rank 0's message naming WHO; then --resume auto (on N_RANKS) continues
# bitwise like the uninterrupted run REFERENCE.
stopped() {
  local name=$1 who=$2 reference=$3 ranks=$4 at
  at=$(latest_step "$name")
  echo "--- $name: signal sent with steps $before..$after logged; exit status $status; checkpoint at step ${at:-none}"
  grep -E "^wick: rank .* got SIG|stopped after step" "$work/$name.log" | cut -c1-200
  [ "$status" = 75 ] || fail "$name: exit status $status, not 75"
  [ -n "$at" ] && [ "$at" -gt "$before" ] && [ "$at" -le $((after + 2)) ] ||
    fail "$name: the checkpoint is at step ${at:-none}, not the step after the signal ($before..$after logged)"
  [ "$(python3 "$here/last_step.py" "$(metrics "$name")")" = "$at" ] || fail "$name: steps were logged after $at"
  grep -q "stopped after step $at of $steps on request ($who)" "$work/$name.log" || fail "$name: no stop message ($who)"
  "$wick" checkpoint inspect "$work/out/$name/checkpoints/latest" >/dev/null ||
    fail "$name: the checkpoint does not verify"
  run "$name" "$ranks"
  grep -q "resuming from .*$(printf step_%08d "$at")" "$last_log" || fail "$name: did not resume from step $at"
  python3 "$here/compare_losses.py" "$(metrics "$reference")" "$(metrics "$name")" $steps ||
    fail "$name: the resumed losses differ from the uninterrupted run's"
  python3 "$here/same_tensors.py" "$work/out/$reference/checkpoints/$(printf step_%08d $steps)/model.safetensors" \
    "$work/out/$name/checkpoints/$(printf step_%08d $steps)/model.safetensors" ||
    fail "$name: the final parameters differ from the uninterrupted run's"
}

run whole 2

# 1. SIGUSR1 to rank 1 only.
start_job rank1
wait_for rank1 12
send rank1 USR1 "$(rank_pid rank1 1)"
finish
grep -q "wick: rank 1 of 2 (pid [0-9]*) got SIGUSR1: finishing the current step" "$work/rank1.log" ||
  fail "rank1: rank 1 did not report the signal"
stopped rank1 "a stop signal on 1 of 2 ranks" whole 2

# 2. SIGUSR1 to mpirun, forwarded to both ranks.
start_job forwarded
wait_for forwarded 12
send forwarded USR1 "$job"
finish
stopped forwarded "a stop signal on 2 of 2 ranks" whole 2

# 3. SIGTERM to rank 0 only.
start_job term0
wait_for term0 12
send term0 TERM "$(rank_pid term0 0)"
finish
grep -q "wick: rank 0 of 2 (pid [0-9]*) got SIGTERM" "$work/term0.log" || fail "term0: rank 0 did not report SIGTERM"
stopped term0 "a stop signal on 1 of 2 ranks" whole 2

# 4. A second signal while the stop's checkpoint is written (every manifest's fsync takes 4 s).
start_job twice LD_PRELOAD="$shim" ASAN_OPTIONS="$asan_with_shim" WICK_FAULT_ON=slow-fsync WICK_FAULT_PATH=manifest.json WICK_FAULT_DELAY_MS=4000
wait_for twice 12
kill -USR1 "$job"
staging=
for _ in $(seq 1 6000); do
  staging=$(ls -d "$work/out/twice/checkpoints/"step_*.tmp-* 2>/dev/null | head -1)
  [ -n "$staging" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.005
done
[ -n "$staging" ] && kill -USR1 "$job"
finish
echo "--- twice: second signal inside the save of $(basename "${staging:-none}"); exit status $status"
grep -E "^wick: rank .* got|stopped after step" "$work/twice.log" | cut -c1-200
[ -n "$staging" ] || fail "twice: no checkpoint save started after the first signal"
[ "$status" != 0 ] && [ "$status" != 75 ] || fail "twice: exit status $status after the second signal"
grep -q "got a second stop signal (SIGUSR1): stopping at once" "$work/twice.log" ||
  fail "twice: no second-signal message"
[ "$(latest_step twice)" = 10 ] || fail "twice: \`latest\` names step $(latest_step twice), not 10"
"$wick" checkpoint inspect "$work/out/twice/checkpoints/step_00000010" >/dev/null ||
  fail "twice: the previous checkpoint does not verify"
ls "$work/out/twice/checkpoints/"
run twice 2
grep -q "resuming from .*step_00000010" "$last_log" || fail "twice: did not resume from step 10"
python3 "$here/compare_losses.py" "$(metrics whole)" "$(metrics twice)" $steps ||
  fail "twice: the resumed losses differ from the uninterrupted run's"
if left=$(ls -d "$work/out/twice/checkpoints/"*.tmp-* 2>/dev/null); then
  writer=${left##*.tmp-}  # what holds the writer's pid, if anything: a zombie counts as dead
  echo "the writer $writer now: $(cat "/proc/$writer/stat" 2>/dev/null || echo 'no such process')"
  fail "twice: the staging directory was not removed"
fi

# 5. One rank, no launcher: SIGTERM.
run one 1
timeout 240 "$wick" train "$work/run.yaml" --no-progress --set name=one_term >"$work/one_term.log" 2>&1 &
job=$!
for _ in $(seq 1 6000); do
  [ "$(logged one_term)" -ge 12 ] && [ "$(latest_step one_term)" = 10 ] && break
  sleep 0.01
done
send one_term TERM "$(pgrep -f "^$wick train $work/run.yaml --no-progress --set name=one_term\$")"
finish
stopped one_term "SIGTERM" one 1
# 5b. One rank, Ctrl-C: SIGINT stops like SIGTERM (exit 75, resume bitwise). The shell starts background jobs with
# SIGINT ignored (no job control here), which wick keeps; the job is started with SIGINT's default restored, as a
# foreground process in a terminal has it.
timeout 240 python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  "$wick" train "$work/run.yaml" --no-progress --set name=one_int >"$work/one_int.log" 2>&1 &
job=$!
for _ in $(seq 1 6000); do
  [ "$(logged one_int)" -ge 12 ] && [ "$(latest_step one_int)" = 10 ] && break
  sleep 0.01
done
send one_int INT "$(pgrep -f "^$wick train $work/run.yaml --no-progress --set name=one_int\$")"
finish
grep -q "wick: rank 0 of 1 (pid [0-9]*) got SIGINT (Ctrl-C): finishing the current step" "$work/one_int.log" ||
  fail "one_int: no Ctrl-C message"
stopped one_int "SIGINT" one 1
# A stop signal while the run starts, before step 1: the ranks keep it through loading the data and the
# model, train step 1, write its checkpoint and exit 75.
start_job startup LD_PRELOAD="$shim" ASAN_OPTIONS="$asan_with_shim" WICK_FAULT_ON=slow-open WICK_FAULT_PATH=synthetic.h5 WICK_FAULT_DELAY_MS=2000 \
  WICK_FAULT_MARK="$work/startup.mark"
for _ in $(seq 1 3000); do
  [ -e "$work/startup.mark" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.01
done
[ -e "$work/startup.mark" ] || fail "startup: the ranks never reached the dataset's open"
send startup USR1 "$job"
finish
[ "$before" = 0 ] || fail "startup: $before steps were logged before the signal"
stopped startup "a stop signal on 2 of 2 ranks" whole 2

# 6. scripts/slurm_train.sbatch without Slurm (scontrol is a stub that records its arguments): SIGUSR1
#    to the batch script reaches the ranks through mpirun, the job is requeued after exit 75, and the
#    requeued script continues the run to its end (bitwise) without requeueing again.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$@" >>"%s"\n' "$work/scontrol.calls" >"$work/bin/scontrol"
chmod +x "$work/bin/scontrol"
sbatch_script=$here/../../scripts/slurm_train.sbatch
batch() {  # batch LOG: the batch script in the background; $job is its process id
  PATH="$work/bin:$PATH" SLURM_JOB_ID=4242 MPIRUN="$mpiexec --oversubscribe -np 2" WICK="$wick" \
    bash "$sbatch_script" "$work/run.yaml" --no-progress --set name=batch >"$1" 2>&1 &
  job=$!
}
batch "$work/batch.log"
wait_for batch 12
send batch USR1 "$job"
finish
cp "$work/batch.log" "$work/batch.1.log"
grep -q "got SIGUSR1" "$work/batch.log" || fail "batch: the ranks did not get SIGUSR1 from the batch script"
calls=$(cat "$work/scontrol.calls" 2>/dev/null)
[ "$calls" = "requeue 4242" ] || fail "batch: scontrol was called with '$calls', not 'requeue 4242'"
at=$(latest_step batch)
echo "--- batch: signal sent with steps $before..$after logged; script exit status $status;" \
  "checkpoint at step ${at:-none}"
[ "$status" = 75 ] || fail "batch: the batch script exited $status, not 75"
[ -n "$at" ] && [ "$at" -gt "$before" ] && [ "$at" -le $((after + 2)) ] || fail "batch: checkpoint at step ${at:-none}"
batch "$work/batch.2.log"
finish
[ "$status" = 0 ] || fail "batch: the requeued script exited $status"
grep -q "resuming from .*$(printf step_%08d "${at:-0}")" "$work/batch.2.log" ||
  fail "batch: the requeued job did not resume"
[ "$(wc -l <"$work/scontrol.calls")" = 1 ] || fail "batch: the finished job was requeued again"
python3 "$here/compare_losses.py" "$(metrics whole)" "$(metrics batch)" $steps ||
  fail "batch: losses differ from the uninterrupted run's"

echo "preemption_test.sh: $failures failure(s) in $(($(date +%s) - start)) s"
exit $((failures > 0))
