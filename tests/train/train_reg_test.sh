#!/usr/bin/env bash
# Regularization data (a dataset marked is_reg: true, mixed in at train.reg_ratio, its loss weighted by
# train.prior_loss_weight) in `wick train`: a 2-rank run (3 training + 3 regularization samples per
# rank) logs the losses of a 1-rank run with the same global batch (6 + 6), to rounding, so every rank
# draws its share; a 2-rank run stopped and resumed repeats the uninterrupted one bitwise (losses and
# parameters); the weight acts: at step 1 the loss is linear in it (w 0, 1, 2), and with weight 0 the
# regularization samples change nothing (two runs with different regularization classes train the
# same parameters bitwise) while with weight 1 they do.
#   train_reg_test.sh MPIEXEC WICK FIXTURE WORK_DIR
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
train: {batch_size: 6, steps: 20, lr: 3.0e-3, optimizer: adamw, log_every: 1, reg_ratio: 0.5, prior_loss_weight: 1.0}
datasets:
  - {path: $work/data/synthetic.h5, include_labels: [0]}
  - {path: $work/data/synthetic.h5, include_labels: [1], is_reg: true}
save: {every: 5, keep_last: 0}
distributed: {backend: auto}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run1() {  # run1 LOG ARGS...: wick train on 1 rank
  local log=$1
  shift
  "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 || { fail "wick train $* exited $?"; tail -8 "$log"; }
}
run2() {  # run2 LOG ARGS...: wick train on 2 ranks
  local log=$1
  shift
  timeout 240 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 ||
    { fail "mpirun -np 2 wick train $* exited $?"; tail -8 "$log"; }
}
loss_at() {  # loss_at RUN STEP
  python3 -c "import json,sys
rows={}
for line in open(sys.argv[1]):
    try: o=json.loads(line)
    except ValueError: continue
    if isinstance(o, dict) and 'loss' in o: rows[o['step']]=o['loss']
print(repr(rows[int(sys.argv[2])]))" "$work/out/$1/metrics.jsonl" "$2"
}

# Across ranks: 2 ranks x (3 + 3) against 1 rank x (6 + 6).
run2 "$work/two.log" --set name=two
grep -m1 "2 ranks" "$work/two.log" || fail "the run did not report 2 ranks"
run1 "$work/one.log" --set name=one --set train.batch_size=12
python3 "$here/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/one/metrics.jsonl" 20 --tolerance 1e-6 ||
  fail "1-rank and 2-rank losses with regularization data differ beyond 1e-6"

# Across resume: stopped after 12, the checkpoint at 12 removed, resumed from 10.
run2 "$work/part1.log" --set name=parts --stop-after 12
rm -rf "$work/out/parts/checkpoints/step_00000012"
run2 "$work/part2.log" --set name=parts
grep -m1 "resuming from .*step_00000010" "$work/part2.log" || fail "the second 2-rank run did not resume from step 10"
python3 "$here/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/parts/metrics.jsonl" 20 ||
  fail "the resumed run's losses differ from the uninterrupted one's"
python3 "$here/same_tensors.py" "$work/out/two/checkpoints/step_00000020/model.safetensors" \
  "$work/out/parts/checkpoints/step_00000020/model.safetensors" ||
  fail "the resumed run's final parameters differ from the uninterrupted run's"

# The weight: the step-1 loss is (sum of training losses + w x sum of regularization losses) / 12.
for w in 0 1 2; do run1 "$work/w$w.log" --set name=w$w --set train.batch_size=12 --set train.steps=1 \
  --set train.prior_loss_weight=$w; done
python3 - "$(loss_at w0 1)" "$(loss_at w1 1)" "$(loss_at w2 1)" <<'PY' ||
  fail "the step-1 loss is not linear in the weight"
import sys
l0, l1, l2 = map(float, sys.argv[1:])
print(f"step-1 loss with prior_loss_weight 0, 1, 2: {l0} {l1} {l2}")
sys.exit(0 if l1 - l0 > 1e-3 and abs((l2 - l1) - (l1 - l0)) < 1e-5 * l2 else 1)
PY
# Weight 0: regularization classes 1 and 2 train the same parameters; weight 1: they differ.
for w in 0 1; do
  for k in 1 2; do run1 "$work/c$k-w$w.log" --set name=c$k-w$w --set train.steps=5 --set train.prior_loss_weight=$w \
    --set "datasets.1.include_labels=[$k]"; done
done
python3 "$here/same_tensors.py" "$work/out/c1-w0/checkpoints/step_00000005/model.safetensors" \
  "$work/out/c2-w0/checkpoints/step_00000005/model.safetensors" ||
  fail "with prior_loss_weight 0 the regularization samples changed the training"
python3 "$here/same_tensors.py" "$work/out/c1-w1/checkpoints/step_00000005/model.safetensors" \
  "$work/out/c2-w1/checkpoints/step_00000005/model.safetensors" >/dev/null &&
  fail "with prior_loss_weight 1 two regularization sets trained the same parameters"

exit $((failures > 0))
