#!/usr/bin/env bash
# LoRA files trained by `wick train` on one architecture load in diffusers and give the output wick gives: the checks
# every architecture must pass, and its row (tests/train/rows/ARCH.sh; docs/testing.md "End-to-end tests per
# architecture"). Base: the row's fixture-sized model of the architecture's parity fixtures (tests/data/ARCH, written
# by tests/reference/make_ARCH_fixtures.py); data: `arch_fixture ARCH data`'s cached latents of that size
# (tests/train/arch_fixture.cpp). Rank 4, alpha 8 (diffusers reads the scale wick bakes into a PEFT lora_B, or kohya's
# alpha), 5 steps with AdamW, in the row's file format. For each of the row's network types `arch_fixture ARCH
# lora-case` rebuilds the model from the file's wick_config, loads the file, merges it and writes its output on the
# row's case (tests/data/ARCH); the adapters must move the output by more than 0.05 of its largest value, and
# tests/reference/check_ARCH_lora.py then loads the file through diffusers' LoRA path for the architecture (what its
# pipeline's load_lora_weights does) and must find zero missing and zero unexpected keys and the same output within
# 1e-5. Then interop_row.
# Skips (77) unless WICK_PYTHON (default python3) imports torch, diffusers, peft and safetensors, e.g.
#   WICK_PYTHON=/tmp/venv/bin/python ctest --test-dir build -R interop.flux_lora_diffusers
#   arch_lora_diffusers_test.sh ARCH WICK FIXTURE WORK_DIR
set -u
arch=$1 wick=$2 fixture=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
data=$source_dir/tests/data
source "$here/arch_common.sh"
load_row "$arch"
python=${WICK_PYTHON:-python3}
if ! command -v "$python" >/dev/null || ! "$python" -c "import torch, diffusers, peft, safetensors" 2>/dev/null; then
  echo "skipped: $python cannot import torch, diffusers, peft and safetensors" \
    "(set WICK_PYTHON to a python that has them)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$arch" data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fixtures=$data/$arch
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {arch: $arch, name_or_path: $fixtures/$interop_weights${interop_model_keys:+, $interop_model_keys}}
network: {type: lora, linear: 4, linear_alpha: 8${interop_network:+, $interop_network}}
train: {batch_size: 2, steps: 5, lr: 1e-2, optimizer: adamw, log_every: 1${interop_train_keys:+, $interop_train_keys}}
dataset: {path: $work/data/$interop_dataset}
save: {every: 0${interop_save:+, $interop_save}}
YAML
# changes CASE BASE KEY WHAT BOUND: CASE's expected_output differs from BASE's KEY by more than BOUND of its largest
# value, or the comparison with diffusers proves nothing.
changes() {
  "$python" - "$@" <<'PY'
import sys
from safetensors.torch import load_file
changed, base = load_file(sys.argv[1])["expected_output"], load_file(sys.argv[2])[sys.argv[3]]
change = float((changed - base).abs().max() / base.abs().max())
print(f"{sys.argv[4]}: the output changes by {change:.3f} of its largest value")
sys.exit(0 if change > float(sys.argv[5]) else 1)
PY
}
# diffusers_gives WEIGHTS CASE [--lora FILE]: check_ARCH_lora.py finds CASE's expected_output with diffusers.
diffusers_gives() {
  local weights=$1 case=$2
  shift 2
  "$python" "$source_dir/tests/reference/check_${arch}_lora.py" --weights "$weights" --case "$case" "$@" 2>&1 |
    grep -v "Loading checkpoint shards"
  return "${PIPESTATUS[0]}"
}

for type in $interop_types; do
  "$wick" train "$work/run.yaml" --no-progress --set name="$type" --set network.type="$type" >"$work/$type.log" 2>&1 ||
    { fail "wick train ($type) exited $?"; tail -5 "$work/$type.log"; continue; }
  lora=$work/out/$type/lora/$type.safetensors
  "$fixture" "$arch" lora-case "$lora" "$fixtures/$interop_case" "$work/${type}_case.safetensors" ||
    { fail "arch_fixture $arch lora-case ($type) failed"; continue; }
  changes "$work/${type}_case.safetensors" "$fixtures/$interop_case" "$interop_case_output" "the adapters" 0.05 ||
    fail "the $type run barely changed the output"
  diffusers_gives "$fixtures/$interop_check_weights" "$work/${type}_case.safetensors" --lora "$lora" ||
    fail "diffusers does not load wick's $type file or gives another output"
done

interop_row

finish "arch_lora_diffusers_test.sh $arch"
