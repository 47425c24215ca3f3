#!/usr/bin/env bash
# `wick train` on several ranks under mpirun (gradient buckets reduce-scattered into ZeRO-1 optimizer
# shards): a 2-rank run stopped after a checkpoint and resumed, and a 2-rank job killed with kill -9
# after a checkpoint and resumed, log the same losses and end with the same parameters as
# uninterrupted 2-rank runs (bitwise); its checkpoints hold one optimizer shard per rank; the 2-rank
# losses match a 1-rank run with the same global batch (12, to rounding); the 2-rank checkpoint
# resumes on 1 rank and on 3 ranks, and a 4-rank checkpoint resumes on 1 rank, each continuing the
# uninterrupted run's losses; a LoRA with network.dropout matches across 1 and 2 ranks and resumes bitwise.
#   train_mpi_test.sh MPIEXEC WICK FIXTURE WORK_DIR
set -u
mpiexec=$1 wick=$2 fixture=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 6, steps: 20, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 5, keep_last: 0}
distributed: {backend: auto}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
runn() {  # runn N LOG ARGS...: wick train on N ranks
  local n=$1 log=$2
  shift 2
  timeout 240 "$mpiexec" --oversubscribe -np "$n" "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 ||
    { fail "mpirun -np $n wick train $* exited $?"; tail -8 "$log"; }
}
run2() { runn 2 "$@"; }
# continues NAME_A NAME_B FIRST LAST: B's losses over FIRST..LAST continue A's within 1e-5 relative
continues() {
  python3 - "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" "$3" "$4" <<'PY'
import json, sys
def rows(p):
    r = {}
    for line in open(p):
        try: o = json.loads(line)
        except ValueError: continue
        r[o["step"]] = o["loss"]
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
first, last = int(sys.argv[3]), int(sys.argv[4])
worst = max(abs(a[s] - b[s]) / max(1.0, abs(a[s])) for s in range(first, last + 1))
print(f"{sys.argv[2]}: largest relative loss difference over steps {first}..{last} {worst:.2e}")
sys.exit(0 if sorted(b) == list(range(first, last + 1)) and worst < 1e-5 else 1)
PY
}
# moved SRC_RUN STEP NAME N BATCH: copy SRC_RUN's checkpoint STEP into run NAME, resume it on N ranks
moved() {
  mkdir -p "$work/out/$3/checkpoints"
  cp -r "$work/out/$1/checkpoints/$(printf "step_%08d" "$2")" "$work/out/$3/checkpoints/"
  if [ "$4" = 1 ]; then
    "$wick" train "$work/run.yaml" --no-progress --set name="$3" --set train.batch_size="$5" >"$work/$3.log" 2>&1 ||
      { fail "resuming $1's step $2 on 1 rank failed"; tail -5 "$work/$3.log"; }
  else
    runn "$4" "$work/$3.log" --set name="$3" --set train.batch_size="$5"
  fi
  grep -m1 "resuming from" "$work/$3.log" || fail "$3 did not resume"
}

run2 "$work/whole.log" --set name=whole
grep -m1 "2 ranks" "$work/whole.log" || fail "the run did not report 2 ranks"
grep -m1 "reduce-scattered in .* bucket(s) overlapped with backward, optimizer state sharded (ZeRO-1)" "$work/whole.log" ||
  fail "the 2-rank run did not reduce-scatter its gradient buckets into ZeRO-1 shards"
ls "$work/out/whole/checkpoints/step_00000020/" | grep -q "optimizer.rank1-of-2.safetensors" ||
  fail "no optimizer shard of rank 1 in the checkpoint"
"$wick" checkpoint inspect "$work/out/whole/checkpoints/latest" | grep -E "world size|optimizer " || fail "inspect"

run2 "$work/part1.log" --set name=parts --stop-after 12
rm -rf "$work/out/parts/checkpoints/step_00000012"   # as if the job died between 10 and 12
run2 "$work/part2.log" --set name=parts
grep -m1 "resuming from .*step_00000010" "$work/part2.log" || fail "the second 2-rank run did not resume from step 10"
python3 "$here/compare_losses.py" "$work/out/whole/metrics.jsonl" "$work/out/parts/metrics.jsonl" 20 ||
  fail "the resumed 2-rank run's losses differ from the uninterrupted one's"
python3 "$here/same_tensors.py" "$work/out/whole/checkpoints/step_00000020/model.safetensors" \
  "$work/out/parts/checkpoints/step_00000020/model.safetensors" ||
  fail "the resumed 2-rank run's final parameters differ from the uninterrupted run's"

# kill -9 of every process of a 2-rank job after a checkpoint, resume: losses and final parameters
# bitwise equal to an uninterrupted 2-rank run of the same length.
long=200
run2 "$work/long.log" --set name=long --set train.steps=$long
# The job runs in a session of its own (setsid), so that kill -9 reaches mpirun and both ranks and
# nothing else on the machine: pkill -s matches that session only.
setsid timeout 240 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=killed \
  --set train.steps=$long >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 6000); do
  [ -e "$work/out/killed/checkpoints/step_00000010" ] && [ "$(wc -l <"$work/out/killed/metrics.jsonl" 2>/dev/null || echo 0)" -ge 13 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.01
done
pkill -9 -s "$job" 2>/dev/null
wait $job 2>/dev/null
killed_at=$(python3 "$here/last_step.py" "$work/out/killed/metrics.jsonl")
echo "2-rank job killed after step $killed_at of $long"
[ "$killed_at" -gt 10 ] && [ "$killed_at" -lt "$long" ] || fail "killed at step $killed_at: not between the checkpoint at 10 and the end"
run2 "$work/killed_resumed.log" --set name=killed --set train.steps=$long
grep -m1 "resuming from" "$work/killed_resumed.log" || fail "the killed 2-rank job did not resume"
python3 "$here/compare_losses.py" "$work/out/long/metrics.jsonl" "$work/out/killed/metrics.jsonl" $long ||
  fail "the killed and resumed 2-rank job's losses differ from the uninterrupted one's"
python3 "$here/same_tensors.py" "$work/out/long/checkpoints/$(printf step_%08d $long)/model.safetensors" \
  "$work/out/killed/checkpoints/$(printf step_%08d $long)/model.safetensors" ||
  fail "the killed and resumed 2-rank job's final parameters differ from the uninterrupted one's"

# One rank with the same global batch (12): the same samples, noise and updates, summed in another order.
"$wick" train "$work/run.yaml" --no-progress --set name=one --set train.batch_size=12 >"$work/one.log" 2>&1 ||
  { fail "the 1-rank run failed"; tail -5 "$work/one.log"; }
python3 "$here/compare_losses.py" "$work/out/whole/metrics.jsonl" "$work/out/one/metrics.jsonl" 20 --tolerance 1e-5 ||
  fail "1-rank and 2-rank losses (8-bit AdamW) differ beyond 1e-5"
# With 32-bit AdamW (no 8-bit codes to flip on a last-bit difference) within 1e-6.
run2 "$work/whole32.log" --set name=whole32 --set train.optimizer=adamw
"$wick" train "$work/run.yaml" --no-progress --set name=one32 --set train.batch_size=12 --set train.optimizer=adamw \
  >"$work/one32.log" 2>&1 || { fail "the 1-rank adamw run failed"; tail -5 "$work/one32.log"; }
python3 "$here/compare_losses.py" "$work/out/whole32/metrics.jsonl" "$work/out/one32/metrics.jsonl" 20 --tolerance 1e-6 ||
  fail "1-rank and 2-rank losses (AdamW) differ beyond 1e-6"

# The 2-rank checkpoint at step 10 continues on 1 rank and on 3 ranks (optimizer shards re-cut).
moved whole 10 to1 1 12
continues whole to1 11 20 || fail "2 ranks -> 1 rank diverged"
moved whole 10 to3 3 4
ls "$work/out/to3/checkpoints/step_00000020/" | grep -q "optimizer.rank2-of-3.safetensors" ||
  fail "the 3-rank continuation wrote no shard of rank 2"
continues whole to3 11 20 || fail "2 ranks -> 3 ranks diverged"

# A 4-rank run's checkpoint at step 10 continues on 1 rank like the straight 4-rank run.
runn 4 "$work/four.log" --set name=four --set train.batch_size=3 --set trigger_word=ohwx
# The config's notes and warnings print once per job, not once per rank.
[ "$(grep -c "wick: warning: --set trigger_word=ohwx: trigger_word 'ohwx' replaces \[trigger\]" "$work/four.log")" = 1 ] ||
  fail "the config's warning was not printed exactly once by the 4 ranks"
python3 - "$work/four.log" "$work/one.log" <<'PY' || fail "rank 0 of 4 ranks holds more than a third of the optimizer state"
import re, sys
per = [float(re.search(r"([0-9.]+) bytes per trainable parameter", open(p).read()).group(1)) for p in sys.argv[1:]]
print(f"optimizer state bytes per parameter on rank 0: 4 ranks {per[0]}, 1 rank {per[1]}")
sys.exit(0 if per[0] < per[1] / 3 else 1)
PY
moved four 10 four_to1 1 12
continues four four_to1 11 20 || fail "4 ranks -> 1 rank diverged from the straight 4-rank run"

# A LoRA with adapter dropout (network.dropout): the masks are drawn per sample, keyed by (seed,
# sample id, epoch), so 2 ranks with batch 6 match 1 rank with batch 12 (32-bit AdamW, within 1e-6),
# and a 2-rank run stopped and resumed repeats the uninterrupted one bitwise.
lora=(--set model.name_or_path="$work/out/whole32/checkpoints/step_00000020" --set network.type=lora
  --set network.linear=4 --set network.dropout=0.3 --set train.optimizer=adamw)
run2 "$work/lora2.log" --set name=lora2 "${lora[@]}"
"$wick" train "$work/run.yaml" --no-progress --set name=lora1 --set train.batch_size=12 "${lora[@]}" \
  >"$work/lora1.log" 2>&1 || { fail "the 1-rank LoRA run failed"; tail -5 "$work/lora1.log"; }
python3 "$here/compare_losses.py" "$work/out/lora2/metrics.jsonl" "$work/out/lora1/metrics.jsonl" 20 --tolerance 1e-6 ||
  fail "1-rank and 2-rank LoRA losses with network.dropout differ beyond 1e-6"
run2 "$work/lora_part1.log" --set name=lora_parts --stop-after 12 "${lora[@]}"
rm -rf "$work/out/lora_parts/checkpoints/step_00000012"
run2 "$work/lora_part2.log" --set name=lora_parts "${lora[@]}"
grep -m1 "resuming from .*step_00000010" "$work/lora_part2.log" || fail "the LoRA run did not resume from step 10"
python3 "$here/compare_losses.py" "$work/out/lora2/metrics.jsonl" "$work/out/lora_parts/metrics.jsonl" 20 ||
  fail "the resumed 2-rank LoRA run's losses (network.dropout) differ from the uninterrupted one's"
python3 "$here/same_tensors.py" "$work/out/lora2/checkpoints/step_00000020/model.safetensors" \
  "$work/out/lora_parts/checkpoints/step_00000020/model.safetensors" ||
  fail "the resumed 2-rank LoRA run's adapters differ from the uninterrupted run's"

exit $((failures > 0))
