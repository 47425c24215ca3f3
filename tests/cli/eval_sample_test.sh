#!/usr/bin/env bash
# `wick sample` and `wick eval` on a tiny run: help, bad arguments (exit 2 with the message), then a
# 4-step training of a tiny DiT on 300 packed Fashion-MNIST images, a sample grid, and an evaluation
# whose eval.json must hold the documented fields. Skips (77) without Debian's dataset-fashion-mnist.
# The classifier is trained by the first run into CLASSIFIER (outside WORK_DIR) and reused after.
# Usage: eval_sample_test.sh WICK_BINARY WORK_DIR CLASSIFIER
set -u
wick=$1 work=$2 classifier=$3
dir=${WICK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect() {  # expect STATUS PATTERN ARGS...
  local want=$1 pattern=$2 out status
  shift 2
  out=$("$wick" "$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ]; then
    fail "wick $* exited $status, expected $want"; echo "$out"
  elif ! grep -q -- "$pattern" <<<"$out"; then
    fail "wick $*: output lacks '$pattern'"; echo "$out"
  else
    echo "ok: wick $* -> $status"
  fi
}

rm -rf "$work" && mkdir -p "$work" || exit 1
expect 0 "--n-per-class" eval --help
expect 0 "--prompt" sample --help
expect 2 "no such run directory" eval "$work/missing_run"
expect 2 "not in range 1 to 100000" eval "$work/missing_run" --n-per-class 0
expect 2 "not a run directory" eval "$work"
expect 2 "no such run directory" sample "$work/missing_run" --prompt Bag --out "$work/x.png"
expect 2 "prompt" sample "$work/missing_run" --out "$work/x.png"

if [ ! -f "$dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST is not installed in $dir (apt-get install dataset-fashion-mnist)"
  [ "$failures" -eq 0 ] && exit 77
  exit 1
fi
cd "$work" || exit 1
"$wick" dataset pack fashion-mnist --out data/tiny.h5 --limit 300 >/dev/null 2>&1 || { echo "FAIL: pack"; exit 1; }
cat >tiny.yaml <<'EOF'
name: tiny
output_dir: output
device: cpu
model: {arch: dit, hidden_size: 32, depth: 1, num_heads: 2, mlp_ratio: 2.0}
network: {type: full}
train: {batch_size: 8, steps: 4, lr: 1.0e-3, optimizer: adamw, caption_dropout: 0.1, seed: 1}
dataset: {path: data/tiny.h5, exclude_labels: [9]}
save: {every: 0}
EOF
"$wick" train tiny.yaml --no-progress >train.log 2>&1 || { echo "FAIL: wick train"; cat train.log; exit 1; }
expect 0 "wrote grid.png" sample output/tiny --prompt Bag --prompt "Ankle boot" --n 3 --steps 2 \
  --out grid.png
[ -s grid.png ] || fail "sample wrote no grid.png"
expect 0 "target base_seen_accuracy" eval tiny.yaml --n-per-class 2 --steps 2 --classifier "$classifier" --classifier-arch mlp
# What each class is mistaken for, on the real test images and on the base's images.
expect 0 "^9 Ankle boot: .*% | " eval tiny.yaml --n-per-class 1 --steps 1 --classifier "$classifier" --classifier-arch mlp --out cm/eval.json
[ -s "$classifier" ] || fail "eval saved no classifier"
[ -s output/tiny/eval_base.png ] || fail "eval wrote no eval_base.png"
json=output/tiny/eval.json
for field in '"format": "wick.eval"' '"n_per_class": 2' '"test_accuracy"' '"name": "Ankle boot"' '"seen_labels"' \
  '"base_seen_accuracy"' '"met"' '"data_pixels"' '"test_confusion"' '"predicted"'; do
  grep -q -- "$field" "$json" || fail "eval.json lacks $field"
done
# A second evaluation reuses the saved classifier.
expect 0 "$(basename "$classifier") loaded" eval output/tiny --n-per-class 1 --steps 1 --classifier "$classifier" --classifier-arch mlp \
  --out other/eval.json
[ -s other/eval.json ] || fail "--out other/eval.json was not written"
# A LoRA on the tiny base, trained on class 9 only: eval runs base and base + LoRA and checks the LoRA targets.
cat >tiny_lora.yaml <<'EOF'
name: tiny_lora
output_dir: output
device: cpu
model: {arch: dit, name_or_path: output/tiny/checkpoints/latest, hidden_size: 32, depth: 1, num_heads: 2, mlp_ratio: 2.0}
network: {type: lora, linear: 4, linear_alpha: 4, target: ["*attn*"]}
train: {batch_size: 8, steps: 2, lr: 1.0e-3, optimizer: adamw, seed: 2}
dataset: {path: data/tiny.h5, include_labels: [9]}
save: {every: 0}
EOF
"$wick" train tiny_lora.yaml --no-progress >train_lora.log 2>&1 || { echo "FAIL: wick train (LoRA)"; cat train_lora.log; exit 1; }
expect 0 "target lora_other_classes_drop" eval output/tiny_lora --n-per-class 1 --steps 1 \
  --classifier "$classifier" --classifier-arch mlp
json=output/tiny_lora/eval.json
for field in '"new_labels": \[' '"name": "lora"' '"lora_new_class_accuracy"' '"new_accuracy"' 'tiny_lora.safetensors'; do
  grep -q -- "$field" "$json" || fail "LoRA eval.json lacks $field"
done
[ -s output/tiny_lora/eval_lora.png ] || fail "eval wrote no eval_lora.png"
# The LoRA applied to the base run with --lora: network settings from the file's metadata.
expect 0 "wrote lora_grid.png" sample output/tiny --lora output/tiny_lora/lora/tiny_lora.safetensors \
  --prompt "Ankle boot" --n 2 --steps 1 --out lora_grid.png
exit $((failures > 0))
