#!/usr/bin/env bash
# SDXL sample images end to end on the CPU, with nothing downloaded: committed test images (tests/data/images) with
# captions -> `wick dataset encode --model sdxl --config` with the committed tiny 4-channel VAE (tests/data/vae/
# sdxl_tiny, x4), CLIP-L and bigG (tests/data/clip_text) -> `wick train` of a LoRA on the tiny SDXL-like UNet of the
# parity fixture (tests/data/sdxl_sample/unet: context 32, pooled 32) with sample grids -> `wick sample`.
#   sdxl_sample_test.sh WICK DATA_DIR WORK_DIR
# Checks: the dataset stores the config's 2 sample prompts and its negative prompt (3 rows); training writes
# samples/step_3.png and step_6.png (2 cells of 32 x 32 images scaled by 2, not constant); the same run without any
# text encoder path trains from the stored prompts alone and writes the same grids bitwise; `wick sample` uses the run's
# LoRA and sample settings (SDXL's default guidance 5), is deterministic per seed, differs for another seed and another
# negative prompt, makes a non-square image; the empty negative prompt is zeroed (needs no encoder, says so) and
# differs from "blurry"; a prompt the dataset does not hold needs the encoders (exit 2 naming it and the keys); a size
# that is not a multiple of 8 pixels is refused; no VAE is refused before step 1 naming model.vae_path; a diffusers
# pipeline folder gives every part; v-prediction samples.
set -u
wick=$1 data=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s.%N)
rm -rf "$work" && mkdir -p "$work/images"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
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
  elif ! grep -qF -- "$pattern" "$log"; then
    fail "wick $*: output lacks '$pattern'"; tail -5 "$log"
  else
    echo "ok: wick ${*:1:2} ... -> $status: $(grep -F -- "$pattern" "$log" | head -1 | cut -c1-150)"
  fi
}

for f in orientation_6.jpg rgb.jpg rgba.png lossy.webp; do cp "$data/images/$f" "$work/images/"; done
echo "a photo of [trigger], turned on its side" >"$work/images/orientation_6.txt"
echo "a test card" >"$work/images/rgb.txt"
echo "a photo of [trigger] on a clear background" >"$work/images/rgba.txt"
echo "a photo of [trigger], lossy" >"$work/images/lossy.txt"
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
trigger_word: sks
model:
  arch: sdxl
  name_or_path: $data/sdxl_sample/unet
  vae_path: $data/vae/sdxl_tiny/vae
  clip_l_path: $data/clip_text/clip_l/model.safetensors
  clip_g_path: $data/clip_text/clip_g/model.safetensors
  clip_tokenizer_path: $data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz
network: {type: lora, linear: 4}
dataset: {path: $work/sdxl.h5}
train: {batch_size: 2, steps: 6, lr: 1.0e-2, log_every: 1, seed: 3}
save: {every: 3, dtype: f32}
sample:
  every: 3
  steps: 3
  prompts: ["a photo of [trigger]", "a test card"]
  negative_prompt: "blurry"
YAML

# (a) The dataset: 4 images in one 32 x 32 bucket, the 2 sample prompts and the negative prompt stored.
expect 0 "wrote $work/sdxl.h5: 4 samples" "$work/encode.log" dataset encode "$work/images" --model sdxl \
  --vae "$data/vae/sdxl_tiny/vae" --clip-l "$data/clip_text/clip_l/model.safetensors" \
  --clip-g "$data/clip_text/clip_g/model.safetensors" \
  --clip-vocab "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" --resolution 32 --bucket-step 16 \
  --config "$work/run.yaml" --no-progress --out "$work/sdxl.h5"
"$wick" dataset inspect "$work/sdxl.h5" >"$work/inspect.log" 2>&1 || fail "wick dataset inspect refused sdxl.h5"
for line in "model_family      sdxl" "sample prompts    3, embeds [3, 77, 32]" '"a photo of sks"' '"blurry"'; do
  grep -qF -- "$line" "$work/inspect.log" || fail "inspect lacks '$line'"
done

# (b) Training with sample grids at steps 3 and 6: 2 prompts in one row of 32 x 32 images scaled by 2.
expect 0 "samples $work/out/run/samples/step_6.png" "$work/train.log" train "$work/run.yaml" --no-progress
grep -qF "SDXL: VAE $data/vae/sdxl_tiny/vae, CLIP-L" "$work/train.log" ||
  fail "the log does not describe the SDXL sampler"
for step in 3 6; do
  png="$work/out/run/samples/step_$step.png"
  [ -s "$png" ] || { fail "no $png"; continue; }
  python3 "$here/png_cells.py" "$png" 64 64 2 0 2 || fail "$png: not a 2-cell grid of 64 x 64 non-constant images"
done
cmp -s "$work/out/run/samples/step_3.png" "$work/out/run/samples/step_6.png" &&
  fail "the grids of steps 3 and 6 are the same (the LoRA did not change the images?)"

# (c) The same run with no text encoder path: the stored prompts alone, the same grids bitwise.
expect 0 "samples $work/out/stored/samples/step_6.png" "$work/stored.log" train "$work/run.yaml" --no-progress \
  --set name=stored --set 'model.clip_l_path=""' --set 'model.clip_g_path=""' --set 'model.clip_tokenizer_path=""'
grep -qF "no text encoders" "$work/stored.log" || fail "the stored-prompts run does not say it has no text encoders"
for step in 3 6; do
  cmp -s "$work/out/run/samples/step_$step.png" "$work/out/stored/samples/step_$step.png" ||
    fail "step $step: the grid from stored prompts differs from the run with encoders"
done

# (d) wick sample: the run's LoRA and sample settings; deterministic per seed; other seeds, negative prompts, sizes.
expect 0 "wrote $work/a.png: 4 images" "$work/sample_a.log" sample "$work/out/run" --prompt "a photo of [trigger]" \
  --prompt "a red cube" --n 2 --out "$work/a.png"
grep -qF "+ $work/out/run/lora/run.safetensors, 2 prompts x 2, 3 steps, guidance 5, seed 42" "$work/sample_a.log" ||
  fail "wick sample did not use the run's LoRA and sample settings (3 steps, SDXL's default guidance 5, seed 42)"
python3 "$here/png_cells.py" "$work/a.png" 96 96 2 0 2 || fail "a.png: not a grid of 32 x 32 images scaled by 3"
expect 0 "wrote $work/b.png" "$work/sample_b.log" sample "$work/out/run" --prompt "a photo of [trigger]" \
  --prompt "a red cube" --n 2 --out "$work/b.png"
cmp -s "$work/a.png" "$work/b.png" || fail "two wick sample runs with the same seed wrote different PNGs"
expect 0 "wrote $work/c.png" "$work/sample_c.log" sample "$work/out/run" --prompt "a photo of [trigger]" \
  --prompt "a red cube" --n 2 --seed 7 --out "$work/c.png"
cmp -s "$work/a.png" "$work/c.png" && fail "another seed wrote the same PNG"
expect 0 "wrote $work/d.png" "$work/sample_d.log" sample "$work/out/run" --prompt "a photo of [trigger]" \
  --prompt "a red cube" --n 2 --set 'sample.negative_prompt="grainy"' --out "$work/d.png"
grep -qF 'negative prompt "grainy"' "$work/sample_d.log" || fail "wick sample did not take sample.negative_prompt"
cmp -s "$work/a.png" "$work/d.png" && fail "another negative prompt wrote the same PNG"
expect 0 "wrote $work/e.png: 1 images" "$work/sample_e.log" sample "$work/out/run" --prompt "a test card" --n 1 \
  --width 40 --height 24 --out "$work/e.png"
python3 "$here/png_cells.py" "$work/e.png" 120 72 1 0 1 || fail "e.png: not one 40 x 24 image scaled by 3"
expect 2 "multiples of 8 pixels" "$work/sample_f.log" sample "$work/out/run" --prompt x --width 36 --out "$work/f.png"

# (e) The empty negative prompt is zeroed (SDXL base's force_zeros_for_empty_prompt): no encoder needed for it, and
# other images than "blurry"'s. Without the encoders, a prompt the dataset does not hold is refused naming it.
expect 0 "zero embeddings" "$work/sample_g.log" sample "$work/out/stored" --prompt "a test card" --n 1 \
  --set 'sample.negative_prompt=""' --out "$work/g.png"
expect 0 "wrote $work/h.png" "$work/sample_h.log" sample "$work/out/stored" --prompt "a test card" --n 1 \
  --out "$work/h.png"
cmp -s "$work/g.png" "$work/h.png" && fail "the zeroed empty negative prompt wrote the PNG of \"blurry\""
expect 2 "the prompt \"a red cube\" is not among the sample prompts stored" "$work/sample_i.log" sample \
  "$work/out/stored" --prompt "a red cube" --out "$work/i.png"
grep -qF "model.clip_g_path" "$work/sample_i.log" || fail "the refusal does not name model.clip_g_path"

# (f) No VAE: refused before step 1, naming the key.
expect 2 "model.vae_path" "$work/novae.log" train "$work/run.yaml" --no-progress --set name=novae \
  --set 'model.vae_path=""'
grep -qF "SDXL sample images need the VAE" "$work/novae.log" ||
  fail "the refusal does not say that sample images need the VAE"
[ -e "$work/out/novae/metrics.jsonl" ] && fail "the run without a VAE trained a step before being refused"

# (g) A diffusers pipeline folder as model.name_or_path gives every part; v-prediction trains and samples.
pipeline="$work/stable-diffusion-xl-tiny"
mkdir -p "$pipeline"
ln -s "$data/sdxl_sample/unet" "$pipeline/unet"
ln -s "$data/vae/sdxl_tiny/vae" "$pipeline/vae"
ln -s "$data/clip_text/clip_l" "$pipeline/text_encoder"
ln -s "$data/clip_text/clip_g" "$pipeline/text_encoder_2"
ln -s "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$pipeline/tokenizer"
printf '{"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": true}\n' \
  >"$pipeline/model_index.json"
cat >"$work/pipeline.yaml" <<YAML
name: pipeline
output_dir: $work/out
device: cpu
model: {arch: sdxl, name_or_path: $pipeline}
network: {type: lora, linear: 4}
dataset: {path: $work/sdxl.h5}
train: {batch_size: 2, steps: 2, log_every: 1, prediction_type: v_prediction}
save: {every: 0, dtype: f32}
sample: {every: 2, steps: 2, prompts: ["a red cube"], width: 40, height: 24}
YAML
expect 0 "samples $work/out/pipeline/samples/step_2.png" "$work/pipeline.log" train "$work/pipeline.yaml" --no-progress
grep -qF "SDXL: VAE $pipeline/vae, CLIP-L $pipeline/text_encoder" "$work/pipeline.log" &&
  grep -qF "v-prediction" "$work/pipeline.log" || fail "the pipeline run did not take its parts and v-prediction"
python3 "$here/png_cells.py" "$work/out/pipeline/samples/step_2.png" 80 48 1 0 1 ||
  fail "the pipeline run's grid is not one 40 x 24 image scaled by 2"

echo "sdxl_sample_test.sh: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
