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
import sys
l0, l1, l2 = map(float, sys.argv[1:])
print(f"step-1 loss with prior_loss_weight 0, 1, 2: {l0} {l1} {l2}")
sys.exit(0 if l1 - l0 > 1e-3 and abs((l2 - l1) - (l1 - l0)) < 1e-5 * l2 else 1)
PY
  fail "the step-1 loss is not linear in the weight"
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

# With train.global_batch_size: the same global batches on any number of ranks, its training ids then its
# regularization ids spread over the ranks as one strided batch (docs/training.md "Regularization data").
run3() {  # run3 LOG ARGS...: wick train on 3 ranks
  local log=$1
  shift
  timeout 240 "$mpiexec" --oversubscribe -np 3 "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 ||
    { fail "mpirun -np 3 wick train $* exited $?"; tail -8 "$log"; }
}
# 2 ranks, global batch 12 (6 + 6): bitwise the batch_size 6 run.
run2 "$work/g2.log" --set name=g2 --set train.global_batch_size=12
grep -m1 "6 of every 12 over all ranks" "$work/g2.log" || fail "the start-up line does not give the global mix"
python3 "$here/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/g2/metrics.jsonl" 20 ||
  fail "global_batch_size 12 on 2 ranks differs from batch_size 6 on 2 ranks"
# 3 ranks, global batch 12: 4 each (2 + 2), the 1-rank losses within 1e-5 (relative).
run3 "$work/g3.log" --set name=g3 --set train.global_batch_size=12
python3 "$here/compare_losses.py" "$work/out/one/metrics.jsonl" "$work/out/g3/metrics.jsonl" 20 --relative 1e-5 ||
  fail "global_batch_size 12 on 3 ranks differs from 1 rank beyond 1e-5"
# Uneven: global batch 10, reg_ratio 0.3 (7 + 3), weight 2: shares 4, 3, 3 with 1 or 2 regularization
# samples each, against 1 rank.
uneven=(--set train.global_batch_size=10 --set train.reg_ratio=0.3 --set train.prior_loss_weight=2)
run1 "$work/u1.log" --set name=u1 "${uneven[@]}"
run3 "$work/u3.log" --set name=u3 "${uneven[@]}"
grep -m1 "3 of every 10 over all ranks" "$work/u3.log" || fail "the uneven run's start-up line"
python3 "$here/compare_losses.py" "$work/out/u1/metrics.jsonl" "$work/out/u3/metrics.jsonl" 20 --relative 1e-5 ||
  fail "the uneven global batch on 3 ranks differs from 1 rank beyond 1e-5"
# The batch_size 6 run's 2-rank checkpoint at step 10 continues on 3 ranks with global_batch_size 12.
mkdir -p "$work/out/moved/checkpoints"
cp -r "$work/out/two/checkpoints/step_00000010" "$work/out/moved/checkpoints/"
run3 "$work/moved.log" --set name=moved --set train.global_batch_size=12
grep -m1 "resuming from .*step_00000010" "$work/moved.log" || fail "the 3-rank run did not resume from step 10"
python3 - "$work/out/two/metrics.jsonl" "$work/out/moved/metrics.jsonl" <<'PY' ||
import json, sys
def rows(p):
    r = {}
    for line in open(p):
        try: o = json.loads(line)
        except ValueError: continue
        if isinstance(o, dict) and "loss" in o: r[o["step"]] = o["loss"]
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(11, 21))
print(f"moved: largest relative loss difference over steps 11..20: {worst:.2e}")
sys.exit(0 if sorted(b) == list(range(11, 21)) and worst < 1e-5 else 1)
PY
  fail "the 2-rank checkpoint did not continue on 3 ranks within 1e-5"
# A regularization count that changes on resume is refused, naming it (global batch 12, ratio 0.4: 5, not 6).
mkdir -p "$work/out/recount/checkpoints"
cp -r "$work/out/two/checkpoints/step_00000010" "$work/out/recount/checkpoints/"
"$wick" train "$work/run.yaml" --no-progress --set name=recount --set train.global_batch_size=12 \
  --set train.reg_ratio=0.4 >"$work/recount.log" 2>&1 && fail "a changed regularization count was accepted"
grep -m1 "trained with 6 regularization samples per micro-step over all ranks, this run has 5" "$work/recount.log" ||
  { fail "no message naming the regularization count"; tail -3 "$work/recount.log"; }
# A memory cap below a whole share of 20 (global batch 40, 12 regularization samples, 2 ranks): each share in
# pieces, regularization samples weighted in whichever piece they fall, the same losses within 1e-5.
big=(--set train.global_batch_size=40 --set train.reg_ratio=0.3 --set train.prior_loss_weight=2
     --set train.gradient_checkpointing=false)
run2 "$work/b40.log" --set name=b40 "${big[@]}"
whole=$(grep -m1 -o "memory estimate per rank: .* = [0-9.]* [kMG]B" "$work/b40.log" | grep -o "[0-9.]* [kMG]B$")
limit=$(python3 -c "import sys; v, u = sys.argv[1].split()
print(int(float(v) * {'kB': 1e3, 'MB': 1e6, 'GB': 1e9}[u] * 0.9))" "$whole")
WICK_MEMORY_LIMIT=$limit run2 "$work/b40capped.log" --set name=b40capped "${big[@]}"
grep -m1 "each share trained in" "$work/b40capped.log" || fail "under WICK_MEMORY_LIMIT=$limit the shares were not split"
python3 "$here/compare_losses.py" "$work/out/b40/metrics.jsonl" "$work/out/b40capped/metrics.jsonl" 20 --relative 1e-5 ||
  fail "split shares with regularization samples differ from whole shares beyond 1e-5"

exit $((failures > 0))
