#!/usr/bin/env bash
# A Flux LoRA and a Flux DoRA trained by `wick train` and saved with save.format peft load in diffusers
# and give the output wick gives. Base: the fixture-sized Flux.1-dev of tests/data/flux (the diffusers
# folder dev_diffusers, RoPE axes from its config.json); data: tests/train/flux_fixture.cpp's
# flux_dev_sized.h5 (4 latent channels, 7 tokens of 32, pooled 24). Rank 4, alpha 8 (diffusers reads
# the scale wick bakes into lora_B), 5 steps, guidance 3.5. For each run `flux_fixture lora-case`
# rebuilds the model from the file's wick_config, loads the file, merges it and writes its output on
# tests/data/flux/dev_case.safetensors' inputs; tests/reference/check_flux_lora.py then loads the file
# through diffusers' Flux LoRA path (FluxLoraLoaderMixin.lora_state_dict + load_lora_into_transformer,
# what FluxPipeline.load_lora_weights does) and must find zero missing and zero unexpected keys and
# the same output within 1e-5. diffusers loads PEFT's DoRA (lora_magnitude_vector) for Flux; the DoRA
# run trains the output-axis magnitude, the orientation save.format peft selects.
# Skips (77) unless WICK_PYTHON (default python3) imports torch, diffusers, peft and safetensors, e.g.
#   WICK_PYTHON=/tmp/venv/bin/python ctest --test-dir build -R interop.flux_lora_diffusers
#   flux_lora_diffusers_test.sh WICK FIXTURE WORK_DIR
set -u
wick=$1 fixture=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
python=${WICK_PYTHON:-python3}
if ! command -v "$python" >/dev/null || ! "$python" -c "import torch, diffusers, peft, safetensors" 2>/dev/null; then
  echo "skipped: $python cannot import torch, diffusers, peft and safetensors" \
    "(set WICK_PYTHON to a python that has them)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$fixture" data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
weights=$source_dir/tests/data/flux/dev_diffusers
cases=$source_dir/tests/data/flux/dev_case.safetensors
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {arch: flux, name_or_path: $weights, guidance: 3.5}
network: {type: lora, linear: 4, linear_alpha: 8}
train: {batch_size: 2, steps: 5, lr: 1e-2, optimizer: adamw, log_every: 1}
dataset: {path: $work/data/flux_dev_sized.h5}
save: {every: 0, format: peft}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for type in lora dora; do
  "$wick" train "$work/run.yaml" --no-progress --set name=$type --set network.type=$type >"$work/$type.log" 2>&1 ||
    { fail "wick train ($type) exited $?"; tail -5 "$work/$type.log"; continue; }
  lora=$work/out/$type/lora/$type.safetensors
  "$fixture" lora-case "$lora" "$cases" "$work/${type}_case.safetensors" ||
    { fail "flux_fixture lora-case ($type) failed"; continue; }
  # The adapters must move the output well beyond the tolerance, or the comparison proves nothing.
  "$python" - "$work/${type}_case.safetensors" "$cases" <<'PY' || fail "the $type run barely changed the output"
import sys
from safetensors.torch import load_file
adapted, base = load_file(sys.argv[1])["expected_output"], load_file(sys.argv[2])["output"]
change = float((adapted - base).abs().max() / base.abs().max())
print(f"the adapters change the output by {change:.3f} of its largest value")
sys.exit(0 if change > 0.05 else 1)
PY
  "$python" "$source_dir/tests/reference/check_flux_lora.py" --weights "$weights" \
    --case "$work/${type}_case.safetensors" --lora "$lora" 2>&1 | grep -v "Loading checkpoint shards"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "diffusers does not load wick's $type file or gives another output"
done
exit $((failures > 0))
