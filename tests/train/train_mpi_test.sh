#!/usr/bin/env bash
# `wick train` on 2 ranks under mpirun: a run stopped after a checkpoint and resumed logs the same
# losses as an uninterrupted 2-rank run (bitwise); its checkpoints hold one optimizer shard per rank;
# the 2-rank losses match a 1-rank run with the same global batch (to rounding), and the 2-rank
# checkpoint resumes on 1 rank.
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
train: {batch_size: 4, steps: 20, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 5, keep_last: 0}
distributed: {backend: auto}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run2() {  # run2 LOG ARGS...: wick train on 2 ranks
  local log=$1
  shift
  timeout 240 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 ||
    { fail "mpirun -np 2 wick train $* exited $?"; tail -8 "$log"; }
}

run2 "$work/whole.log" --set name=whole
grep -m1 "2 ranks" "$work/whole.log" || fail "the run did not report 2 ranks"
ls "$work/out/whole/checkpoints/step_00000020/" | grep -q "optimizer.rank1-of-2.safetensors" ||
  fail "no optimizer shard of rank 1 in the checkpoint"
"$wick" checkpoint inspect "$work/out/whole/checkpoints/latest" | grep -E "world size|optimizer " || fail "inspect"

run2 "$work/part1.log" --set name=parts --stop-after 12
rm -rf "$work/out/parts/checkpoints/step_00000012"   # as if the job died between 10 and 12
run2 "$work/part2.log" --set name=parts
grep -m1 "resuming from .*step_00000010" "$work/part2.log" || fail "the second 2-rank run did not resume from step 10"
python3 "$here/compare_losses.py" "$work/out/whole/metrics.jsonl" "$work/out/parts/metrics.jsonl" 20 ||
  fail "the resumed 2-rank run's losses differ from the uninterrupted one's"

# One rank with the same global batch (8): the same samples, noise and updates, summed in another order.
"$wick" train "$work/run.yaml" --no-progress --set name=one --set train.batch_size=8 >"$work/one.log" 2>&1 ||
  { fail "the 1-rank run failed"; tail -5 "$work/one.log"; }
python3 "$here/compare_losses.py" "$work/out/whole/metrics.jsonl" "$work/out/one/metrics.jsonl" 20 --tolerance 1e-3 ||
  fail "1-rank and 2-rank losses differ beyond rounding"

# The 2-rank checkpoint at step 10 continues on 1 rank (optimizer shards merged).
mkdir -p "$work/out/moved/checkpoints"
cp -r "$work/out/whole/checkpoints/step_00000010" "$work/out/moved/checkpoints/"
"$wick" train "$work/run.yaml" --no-progress --set name=moved --set train.batch_size=8 >"$work/moved.log" 2>&1 ||
  { fail "resuming the 2-rank checkpoint on 1 rank failed"; tail -5 "$work/moved.log"; }
grep -m1 "resuming from" "$work/moved.log" || fail "the 1-rank run did not resume"
python3 - "$work/out/whole/metrics.jsonl" "$work/out/moved/metrics.jsonl" <<'PY' || fail "1-rank continuation diverged"
import json, sys
def rows(p):
    r = {}
    for line in open(p):
        try: o = json.loads(line)
        except ValueError: continue
        r[o["step"]] = o["loss"]
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(a[s] - b[s]) / max(1.0, abs(a[s])) for s in range(11, 21))
print(f"2 ranks -> 1 rank from step 10: largest relative loss difference over steps 11..20 {worst:.2e}")
sys.exit(0 if sorted(b) == list(range(11, 21)) and worst < 1e-2 else 1)
PY
exit $((failures > 0))
