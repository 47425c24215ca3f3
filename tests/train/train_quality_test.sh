#!/usr/bin/env bash
# Quality smoke check: a small DiT trained for STEPS steps on 3,000 packed Fashion-MNIST images of three
# classes (trouser, sneaker, bag) must (1) bring the loss of its last 50 steps below LOSS_BOUND, which
# a trainer that does not learn cannot reach (an untrained model's loss is above 1.3), and (2) draw
# images that `wick eval` classifies as the class asked for at least MIN_ACCURACY of the time over those
# classes (chance: 1 in 10). The bounds sit well inside what was measured (docs/training.md
# "Quality smoke check"). Skips (77) without Debian's dataset-fashion-mnist. The classifier is
# trained by the first run into CLASSIFIER (outside WORK_DIR) and reused after.
# Usage: train_quality_test.sh WICK_BINARY WORK_DIR CLASSIFIER
set -u
wick=$1 work=$2 classifier=$3
dir=${WICK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
steps=300 loss_bound=0.42 min_accuracy=0.6
if [ ! -f "$dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST is not installed in $dir (apt-get install dataset-fashion-mnist)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
"$wick" dataset pack fashion-mnist --out data/fashion.h5 --limit 3000 >pack.log 2>&1 || { echo "FAIL: pack"; cat pack.log; exit 1; }
cat >quality.yaml <<YAML
name: quality
output_dir: output
device: cpu
model: {arch: dit, hidden_size: 64, depth: 2, num_heads: 4, mlp_ratio: 2.0}
network: {type: full}
train: {batch_size: 32, steps: $steps, lr: 2.0e-3, optimizer: adamw, weight_decay: 0.0, lr_scheduler: cosine,
        warmup: 20, caption_dropout: 0.1, seed: 5, log_every: 1}
dataset: {path: data/fashion.h5, include_labels: [1, 7, 8]}
save: {every: 0}
YAML
start=$(date +%s)
"$wick" train quality.yaml --no-progress >train.log 2>&1 || { echo "FAIL: wick train"; tail -20 train.log; exit 1; }
trained=$(date +%s)
"$wick" eval output/quality --n-per-class 20 --steps 10 --guidance 3 --classifier "$classifier" --classifier-arch mlp >eval.log 2>&1 ||
  { echo "FAIL: wick eval"; tail -20 eval.log; exit 1; }
echo "train $((trained - start)) s, eval $(($(date +%s) - trained)) s"
python3 - output/quality/metrics.jsonl output/quality/eval.json "$loss_bound" "$min_accuracy" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    try:
        row = json.loads(line)
    except ValueError:
        continue
    if isinstance(row, dict) and isinstance(row.get("step"), int):
        rows[row["step"]] = row["loss"]
losses = [rows[s] for s in sorted(rows)]
first, last = sum(losses[:10]) / 10, sum(losses[-50:]) / 50
model = json.load(open(sys.argv[2]))["models"][0]
accuracy = model["seen_accuracy"]
per_class = {c["name"]: c["accuracy"] for c in model["classes"] if c["label"] in (1, 7, 8)}
bound, minimum = float(sys.argv[3]), float(sys.argv[4])
print(f"loss: first 10 steps {first:.4f}, last 50 steps {last:.4f} (bound {bound}); "
      f"accuracy over the trained classes {accuracy:.3f} (minimum {minimum}), per class {per_class}")
ok = True
if not last < bound:
    print(f"FAIL: the loss of the last 50 steps, {last:.4f}, is not below {bound}")
    ok = False
if not accuracy >= minimum:
    print(f"FAIL: {accuracy:.3f} of the generated images are of the class asked for, below {minimum}")
    ok = False
sys.exit(0 if ok else 1)
PY
