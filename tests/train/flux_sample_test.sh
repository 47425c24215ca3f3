#!/usr/bin/env bash
# Flux sample images end to end on the CPU, with nothing downloaded: a tiny random Flux.1-dev whose widths fit
# the committed tiny VAE (tests/data/vae/flux_tiny: 16 latent channels, x2), CLIP-L (tests/data/clip_text/clip_l:
# pooled 16), T5 (tests/data/t5: width 32) and tokenizers (tests/data/clip_tokenizer, tests/data/t5/spiece.model),
# written by tests/train/flux_fixture.cpp (sample-data) with a dataset of that geometry.
#   flux_sample_test.sh WICK FIXTURE DATA_DIR WORK_DIR
# Checks: `wick train` (LoRA, 6 steps, sample.every 3) writes samples/step_3.png and step_6.png of the grid's size
# whose cells are not constant (tests/train/png_cells.py, standard-library python3); `wick sample` on the run
# writes a grid, twice the same bytes for a seed, other bytes for another seed; a run without model.vae_path (or
# with a missing file) and sample.every > 0 is refused before step 1 (exit 2, no metrics, the key named), and
# trains with sample.every 0; `wick sample` on that run names the keys; the VAE, encoders and tokenizers from a
# diffusers pipeline folder given as model.name_or_path.
set -u
wick=$1 fixture=$2 data=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s.%N)
rm -rf "$work" && mkdir -p "$work"
"$fixture" sample-data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model:
  arch: flux
  name_or_path: $work/data/flux_sample_tiny.safetensors
  axes_dim: [4, 6, 6]
  vae_path: $data/vae/flux_tiny/vae
  clip_l_path: $data/clip_text/clip_l/model.safetensors
  t5_path: $data/t5/t5xxl_comfy.safetensors
  clip_tokenizer_path: $data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz
  t5_tokenizer_path: $data/t5/spiece.model
network: {type: lora, linear: 4}
dataset: {path: $work/data/flux_sample.h5}
train: {batch_size: 2, steps: 6, lr: 1.0e-2, log_every: 1, seed: 3}
save: {every: 3, dtype: f32}
sample:
  every: 3
  steps: 4
  prompts: ["wide red stripes", "narrow blue stripes", "a photo of a cat"]
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect STATUS PATTERN LOG ARGS...: wick ARGS exits STATUS and its output (kept in LOG) holds PATTERN.
expect() {
  local want=$1 pattern=$2 log=$3 status
  shift 3
  "$wick" "$@" >"$log" 2>&1
  status=$?
  if [ "$status" -ne "$want" ]; then
    fail "wick $* exited $status, expected $want"; tail -5 "$log"
  elif ! grep -q -- "$pattern" "$log"; then
    fail "wick $*: output lacks '$pattern'"; tail -5 "$log"
  else
    echo "ok: wick ${*:1:2} ... -> $status"
  fi
}

# (a) Training with sample grids at steps 3 and 6: 3 prompts in one row of 16 x 24 images scaled by 2.
expect 0 "samples $work/out/run/samples/step_6.png" "$work/train.log" train "$work/run.yaml" --no-progress
for step in 3 6; do
  png="$work/out/run/samples/step_$step.png"
  [ -s "$png" ] || { fail "no $png"; continue; }
  python3 "$here/png_cells.py" "$png" 48 32 3 0 3 || fail "$png: not a 3-cell grid of 48 x 32 non-constant images"
done
cmp -s "$work/out/run/samples/step_3.png" "$work/out/run/samples/step_6.png" &&
  fail "the grids of steps 3 and 6 are the same (the LoRA did not change the images?)"

# (b) wick sample: the run's LoRA applied, the run's sample settings; deterministic per seed.
expect 0 "wrote $work/a.png: 4 images" "$work/sample_a.log" sample "$work/out/run" --prompt "a photo of a cat" \
  --prompt "red" --n 2 --out "$work/a.png"
grep -q "+ $work/out/run/lora/run.safetensors, 2 prompts x 2, 4 steps, guidance 3.5, seed 42" "$work/sample_a.log" ||
  fail "wick sample did not use the run's LoRA and sample settings (steps 4, Flux's default guidance 3.5, seed 42)"
python3 "$here/png_cells.py" "$work/a.png" 72 48 2 0 2 || fail "a.png: not a grid of 24 x 16 images scaled by 3"
expect 0 "wrote $work/b.png" "$work/sample_b.log" sample "$work/out/run" --prompt "a photo of a cat" \
  --prompt "red" --n 2 --out "$work/b.png"
cmp -s "$work/a.png" "$work/b.png" || fail "two wick sample runs with the same seed wrote different PNGs"
expect 0 "wrote $work/c.png" "$work/sample_c.log" sample "$work/out/run" --prompt "a photo of a cat" \
  --prompt "red" --n 2 --seed 7 --out "$work/c.png"
cmp -s "$work/a.png" "$work/c.png" && fail "another seed wrote the same PNG"
expect 0 "wrote $work/d.png: 1 images" "$work/sample_d.log" sample "$work/out/run" --prompt "a photo of a cat" \
  --n 1 --width 40 --height 32 --out "$work/d.png"
python3 "$here/png_cells.py" "$work/d.png" 120 96 1 0 1 || fail "d.png: not one 40 x 32 image scaled by 3"
expect 2 "multiples of 4 pixels" "$work/sample_e.log" sample "$work/out/run" --prompt x --width 42 \
  --out "$work/e.png"

# (c) No VAE: refused before step 1, naming the key; sample.every 0 trains without any of the parts.
expect 2 "model.vae_path" "$work/novae.log" train "$work/run.yaml" --no-progress --set name=novae \
  --set 'model.vae_path=""'
grep -q "sample.every is 3, and sample images cannot be made: Flux sample images need the VAE" "$work/novae.log" ||
  fail "the refusal does not say that sample images need the VAE"
[ -e "$work/out/novae/metrics.jsonl" ] && fail "the run without a VAE trained a step before being refused"
expect 2 "model.t5_path: /nonexistent/t5.safetensors: no such file" "$work/not5.log" train "$work/run.yaml" \
  --no-progress --set name=not5 --set model.t5_path=/nonexistent/t5.safetensors
[ -e "$work/out/not5/metrics.jsonl" ] && fail "the run with a missing T5 file trained a step before being refused"
expect 0 "outputs in $work/out/plain" "$work/plain.log" train "$work/run.yaml" --no-progress --set name=plain \
  --set 'model.vae_path=""' --set 'model.clip_l_path=""' --set 'model.t5_path=""' \
  --set 'model.clip_tokenizer_path=""' --set 'model.t5_tokenizer_path=""' --set sample.every=0
[ -e "$work/out/plain/samples" ] && fail "sample.every 0 wrote samples"
expect 2 "model.clip_l_path" "$work/plain_sample.log" sample "$work/out/plain" --prompt x --out "$work/f.png"

# (d) A diffusers pipeline folder as model.name_or_path gives every part (tokenizer: open_clip's vocabulary file).
pipeline="$work/FLUX.1-tiny"
mkdir -p "$pipeline/transformer" "$pipeline/tokenizer_2"
cp "$work/data/flux_sample_tiny.safetensors" "$pipeline/transformer/diffusion_pytorch_model.safetensors"
printf '{"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [4, 6, 6]}\n' >"$pipeline/transformer/config.json"
printf '{"_class_name": "FluxPipeline"}\n' >"$pipeline/model_index.json"
ln -s "$data/vae/flux_tiny/vae" "$pipeline/vae"
ln -s "$data/clip_text/clip_l" "$pipeline/text_encoder"
ln -s "$data/t5/pipeline/text_encoder_3" "$pipeline/text_encoder_2"
ln -s "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$pipeline/tokenizer"
cp "$data/t5/spiece.model" "$pipeline/tokenizer_2/"
cat >"$work/pipeline.yaml" <<YAML
name: pipeline
output_dir: $work/out
device: cpu
model: {arch: flux, name_or_path: $pipeline}
network: {type: lora, linear: 4}
dataset: {path: $work/data/flux_sample.h5}
train: {batch_size: 2, steps: 2, log_every: 1}
save: {every: 0, dtype: f32}
sample: {every: 2, steps: 2, prompts: ["a photo of a cat"], width: 32, height: 24}
YAML
expect 0 "samples $work/out/pipeline/samples/step_2.png" "$work/pipeline.log" train "$work/pipeline.yaml" --no-progress
python3 "$here/png_cells.py" "$work/out/pipeline/samples/step_2.png" 64 48 1 0 1 ||
  fail "the pipeline run's grid is not one 32 x 24 image scaled by 2"

echo "flux_sample_test.sh: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
