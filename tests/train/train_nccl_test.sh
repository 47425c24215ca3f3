#!/usr/bin/env bash
# `wick train --set distributed.backend=nccl` on one GPU without a launcher: an NCCL group of one rank,
# the gradient buckets reduce-scattered on its stream into a ZeRO-1 shard of one range (and, with
# shard_optimizer false, all-reduced). One rank reduces nothing, so its losses and final parameters
# must equal those of the same run with the single group (backend auto) — bitwise when two
# single-group runs on this GPU are bitwise equal, else within 1e-4 relative (the script says which).
# A stop at step 10 + resume continues the NCCL run the same way, its checkpoints hold the optimizer
# shard of rank 0 of 1, and that checkpoint resumes under the single group. Exit 77 (skipped) where
# no CUDA device is visible.
#   train_nccl_test.sh WICK FIXTURE WORK_DIR
set -u
wick=$1 fixture=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
if "$wick" info 2>/dev/null | grep -q "cuda .*\(none visible\|built without CUDA\)"; then
  echo "train_nccl_test.sh: no CUDA device visible (or wick built without CUDA): skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cuda
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 8, steps: 20, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 5, keep_last: 0}
distributed: {backend: auto, bucket_mb: 1}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() {  # train NAME ARGS...: wick train on this GPU, log in $work/NAME.log
  local name=$1
  shift
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$work/$name.log" 2>&1 ||
    { fail "wick train $name ($*) exited $?"; tail -8 "$work/$name.log"; return 1; }
}
metrics() { echo "$work/out/$1/metrics.jsonl"; }
model() { echo "$work/out/$1/checkpoints/$(printf step_%08d "$2")/model.safetensors"; }

# The control: the single group on this GPU, twice. If the two differ, the GPU run is not
# deterministic and the NCCL runs are compared within a tolerance instead of bitwise.
train single || { echo "wick train on CUDA fails with the single group too: not an NCCL problem"; exit 1; }
train single_again
tolerance=()
if python3 "$here/compare_losses.py" "$(metrics single)" "$(metrics single_again)" 20 >/dev/null &&
   python3 "$here/same_tensors.py" "$(model single 20)" "$(model single_again 20)" >/dev/null; then
  echo "two single-group runs on this GPU are bitwise equal: the NCCL runs must be too"
else
  tolerance=(--tolerance 1e-4)
  echo "two single-group runs on this GPU differ (non-deterministic kernels): comparing within 1e-4"
fi
grep -q "data parallel over" "$work/single.log" && fail "the single-group run reported data parallelism"

same_as_single() {  # same_as_single NAME: NAME's losses (and, when bitwise, parameters) equal single's
  python3 "$here/compare_losses.py" "$(metrics single)" "$(metrics "$1")" 20 "${tolerance[@]}" ||
    fail "$1's losses differ from the single-group run's"
  if [ ${#tolerance[@]} -eq 0 ]; then
    python3 "$here/same_tensors.py" "$(model single 20)" "$(model "$1" 20)" ||
      fail "$1's final parameters differ from the single-group run's"
  fi
}

train nccl --set distributed.backend=nccl
grep -m1 "data parallel over 1 rank (nccl on cuda:.*gradients reduce-scattered in .* bucket(s) overlapped with backward, optimizer state sharded (ZeRO-1)" \
  "$work/nccl.log" || fail "the nccl run did not reduce-scatter its buckets into a ZeRO-1 shard on an NCCL group of one rank"
ls "$work/out/nccl/checkpoints/step_00000020/" | grep -q "optimizer.rank0-of-1.safetensors" ||
  fail "the nccl run's checkpoint holds no optimizer shard of rank 0 of 1"
same_as_single nccl

train nccl_allreduce --set distributed.backend=nccl --set distributed.shard_optimizer=false
grep -m1 "gradients all-reduced in .* optimizer state replicated" "$work/nccl_allreduce.log" ||
  fail "with shard_optimizer false the nccl run did not all-reduce its buckets"
same_as_single nccl_allreduce

# Stop after step 12, drop step 12's checkpoint (as if the job died after step 10), resume.
train parts --set distributed.backend=nccl --stop-after 12
rm -rf "$work/out/parts/checkpoints/step_00000012"
train parts --set distributed.backend=nccl
grep -m1 "resuming from .*step_00000010" "$work/parts.log" || fail "the nccl run did not resume from step 10"
same_as_single parts

# The NCCL run's checkpoint (a shard of one rank) resumes under the single group.
mkdir -p "$work/out/to_single/checkpoints"
cp -r "$work/out/nccl/checkpoints/step_00000010" "$work/out/to_single/checkpoints/"
python3 - "$(metrics nccl)" "$(metrics to_single)" <<'PY'  # steps 1..10 as the nccl run logged them
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        try: row = json.loads(line)
        except ValueError: continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= 10: out.write(line)
PY
train to_single
grep -m1 "resuming from" "$work/to_single.log" || fail "the single group did not resume the nccl checkpoint"
same_as_single to_single

echo "train_nccl_test.sh: $failures failure(s)"
exit $((failures > 0))
