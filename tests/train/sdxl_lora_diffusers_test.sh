#!/usr/bin/env bash
# An SDXL LoRA with LoCon trained by `wick train` loads in diffusers and gives the output wick gives. Base: the tiny
# UNet of tests/data/sdxl as the LDM single file (tiny_ldm.safetensors: 3 levels 8/16/16, heads of 8, 4 GroupNorm
# groups, 8-wide size sinusoids); data: tests/train/sdxl_fixture.cpp's sdxl_tiny_sized.h5 (4 latent channels in 16x16
# and 8x12 buckets, 7 tokens of 32, pooled 16, original_size and crop). LoRA rank 4 alpha 8 on the default preset,
# LoCon rank 2 alpha 1 (network.conv), 5 steps, saved in sdxl's default format, kohya. `sdxl_fixture lora-case`
# rebuilds the model from the file's wick_config, loads the file, merges it and writes its output on
# tests/data/sdxl/case.safetensors' square latents; tests/reference/check_sdxl_lora.py loads the file through
# diffusers' SDXL LoRA path (lora_state_dict + load_lora_into_unet on the tiny_diffusers folder) and must find zero
# missing and zero unexpected keys and the same output within 1e-5. (diffusers drops kohya's dora_scale for SDXL,
# docs/training.md "SDXL LoRA": no DoRA case.) Then a 2-step full fine-tune of the tiny_diffusers folder, written back
# as a diffusers folder, loads with UNet2DConditionModel.from_pretrained and gives wick's output on the same case.
# Skips (77) unless WICK_PYTHON (default python3) imports torch, diffusers, peft and safetensors, e.g.
#   WICK_PYTHON=/tmp/venv/bin/python ctest --test-dir build -R interop.sdxl_lora_diffusers
#   sdxl_lora_diffusers_test.sh WICK FIXTURE WORK_DIR
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
data=$source_dir/tests/data/sdxl
cat >"$work/run.yaml" <<YAML
name: lora
output_dir: $work/out
device: cpu
model: {arch: sdxl, name_or_path: $data/tiny_ldm.safetensors, head_dim: 8, norm_groups: 4,
        addition_time_embed_dim: 8}
network: {type: lora, linear: 4, linear_alpha: 8, conv: 2, conv_alpha: 1}
train: {batch_size: 2, steps: 5, lr: 1e-2, optimizer: adamw, log_every: 1}
dataset: {path: $work/data/sdxl_tiny_sized.h5}
save: {every: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
"$wick" train "$work/run.yaml" --no-progress >"$work/lora.log" 2>&1 || { tail -5 "$work/lora.log"; fail "wick train exited"; }
lora=$work/out/lora/lora/lora.safetensors
"$fixture" lora-case "$lora" "$data/case.safetensors" "$work/case.safetensors" || fail "sdxl_fixture lora-case failed"
# The adapters must move the output well beyond the tolerance, or the comparison proves nothing.
"$python" - "$work/case.safetensors" "$data/case.safetensors" <<'PY' || fail "the run barely changed the output"
import sys
from safetensors.torch import load_file
adapted, base = load_file(sys.argv[1])["expected_output"], load_file(sys.argv[2])["output_square"]
change = float((adapted - base).abs().max() / base.abs().max())
print(f"the adapters change the output by {change:.3f} of its largest value")
sys.exit(0 if change > 0.05 else 1)
PY
"$python" "$source_dir/tests/reference/check_sdxl_lora.py" --weights "$data/tiny_diffusers" \
  --case "$work/case.safetensors" --lora "$lora" || fail "diffusers does not load wick's kohya file or gives another output"
# A full fine-tune (2 steps) of the diffusers folder is written back as a diffusers folder, which diffusers'
# UNet2DConditionModel.from_pretrained loads and runs to wick's output.
"$wick" train "$work/run.yaml" --no-progress --set name=full --set network.type=full --set network.conv=0 \
  --set "model.name_or_path=$data/tiny_diffusers" --set train.steps=2 >"$work/full.log" 2>&1 ||
  { tail -5 "$work/full.log"; fail "wick train (full) exited"; }
folder=$work/out/full/model/full
"$fixture" model-case "$folder" "$data/case.safetensors" "$work/full_case.safetensors" ||
  fail "sdxl_fixture model-case failed"
"$python" - "$work/full_case.safetensors" "$data/case.safetensors" <<'PY' || fail "the full run did not change the output"
import sys
from safetensors.torch import load_file
trained, base = load_file(sys.argv[1])["expected_output"], load_file(sys.argv[2])["output_square"]
change = float((trained - base).abs().max() / base.abs().max())
print(f"the full fine-tune changes the output by {change:.3f} of its largest value")
sys.exit(0 if change > 1e-3 else 1)
PY
"$python" "$source_dir/tests/reference/check_sdxl_lora.py" --weights "$folder" --case "$work/full_case.safetensors" ||
  fail "diffusers does not load wick's full fine-tune folder or gives another output"
exit $((failures > 0))
