#!/usr/bin/env bash
# An SD3.5 LoRA and DoRA trained by `wick train` load in diffusers and give the output wick gives. Base: the
# fixture-sized SD3.5 Medium of tests/data/sd3 (the diffusers folder medium_diffusers: 3 blocks, attn2 in two, QK
# norm); data: tests/train/sd3_fixture.cpp's sd3_medium_sized.h5 (16 latent channels in 8x8 and 6x10 buckets, 7
# tokens of 32, pooled 64). Rank 4, alpha 8 (diffusers reads the scale wick bakes into lora_B), 5 steps, saved in
# sd3's default format, PEFT. For each run `sd3_fixture lora-case` rebuilds the model from the file's wick_config,
# loads the file, merges it and writes its output on tests/data/sd3/medium_case.safetensors' square latents;
# tests/reference/check_sd3_lora.py then loads the file through diffusers' SD3 LoRA path
# (SD3LoraLoaderMixin.lora_state_dict + load_lora_into_transformer, what StableDiffusion3Pipeline.load_lora_weights
# does) and must find zero missing and zero unexpected keys and the same output within 1e-5. The DoRA run trains
# the output-axis magnitude (PEFT's lora_magnitude_vector), the orientation save.format peft selects.
# Skips (77) unless WICK_PYTHON (default python3) imports torch, diffusers, peft and safetensors, e.g.
#   WICK_PYTHON=/tmp/venv/bin/python ctest --test-dir build -R interop.sd3_lora_diffusers
#   sd3_lora_diffusers_test.sh WICK FIXTURE WORK_DIR
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
weights=$source_dir/tests/data/sd3/medium_diffusers
cases=$source_dir/tests/data/sd3/medium_case.safetensors
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {arch: sd3, name_or_path: $weights}
network: {type: lora, linear: 4, linear_alpha: 8}
train: {batch_size: 2, steps: 5, lr: 1e-2, optimizer: adamw, log_every: 1, timestep_sampling: shift}
dataset: {path: $work/data/sd3_medium_sized.h5}
save: {every: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for type in lora dora; do
  "$wick" train "$work/run.yaml" --no-progress --set name=$type --set network.type=$type >"$work/$type.log" 2>&1 ||
    { fail "wick train ($type) exited $?"; tail -5 "$work/$type.log"; continue; }
  lora=$work/out/$type/lora/$type.safetensors
  "$fixture" lora-case "$lora" "$cases" "$work/${type}_case.safetensors" ||
    { fail "sd3_fixture lora-case ($type) failed"; continue; }
  # The adapters must move the output well beyond the tolerance, or the comparison proves nothing.
  "$python" - "$work/${type}_case.safetensors" "$cases" <<'PY' || fail "the $type run barely changed the output"
import sys
from safetensors.torch import load_file
adapted, base = load_file(sys.argv[1])["expected_output"], load_file(sys.argv[2])["output_square"]
change = float((adapted - base).abs().max() / base.abs().max())
print(f"the adapters change the output by {change:.3f} of its largest value")
sys.exit(0 if change > 0.05 else 1)
PY
  "$python" "$source_dir/tests/reference/check_sd3_lora.py" --weights "$weights" \
    --case "$work/${type}_case.safetensors" --lora "$lora" 2>&1 | grep -v "Loading checkpoint shards"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "diffusers does not load wick's $type file or gives another output"
done
exit $((failures > 0))
