#!/usr/bin/env bash
# Sample images of one architecture end to end on the CPU, with nothing downloaded: the checks every architecture must
# pass, and its row (tests/train/rows/ARCH.sh; docs/testing.md "End-to-end tests per architecture"). The run: a LoRA,
# 6 steps, a checkpoint and sample grids every 3 steps, the row's model with the committed tiny VAE, text encoders and
# tokenizers of tests/data (sample_model), its sample prompts, steps and negative prompt; the row's sample_prepare
# writes its dataset: `arch_fixture ARCH sample-data`'s model and cached latents, or `wick dataset encode --model ARCH
# --config` of committed test images (tests/data/images) with captions and the run's sample prompts stored, for the
# tiny model of the architecture's parity fixture.
#   arch_sample_test.sh ARCH WICK FIXTURE DATA_DIR WORK_DIR
# Checks: `wick train` writes samples/step_3.png and step_6.png, grids of the row's size whose cells are not constant
# (tests/train/png_cells.py, standard-library python3) and that differ, and its log describes the sampler's parts;
# `wick sample` on the run uses its LoRA and sample settings (the row's steps and default guidance, seed 42), writes the
# same PNG bytes twice for a seed and others for another seed, makes an image of a chosen size and refuses a size that
# is not a multiple of the row's pixels (exit 2); a run without model.vae_path and sample.every > 0 is refused before
# step 1 naming the key and saying why; sample.every 0 trains without the VAE and the text encoders; a diffusers
# pipeline folder as model.name_or_path (the row's sample_pipeline) gives every part; then sample_row, which may call
# the stored-prompt and negative-prompt checks below.
set -u
arch=$1 wick=$2 fixture=$3 data=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/arch_common.sh"
load_row "$arch"
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
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
# cells PNG WIDTH HEIGHT SCALE N_COLUMNS N_CELLS: PNG is a grid of N_COLUMNS images of WIDTH x HEIGHT pixels scaled by
# SCALE, its first N_CELLS not constant.
cells() { python3 "$here/png_cells.py" "$1" $(($2 * $4)) $(($3 * $4)) "$5" 0 "$6"; }

# encode_sample_images EMBEDS ENCODE_OPTIONS...: the 4 committed test images with captions (3 with the trigger word)
# -> `wick dataset encode --model ARCH --config run.yaml` into $work/ARCH.h5: 4 samples in one 32 x 32 bucket, the
# run's 2 sample prompts and its negative prompt stored (3 rows of embeddings EMBEDS), the trigger word put in.
encode_sample_images() {
  local embeds=$1
  shift
  mkdir -p "$work/images"
  for f in orientation_6.jpg rgb.jpg rgba.png lossy.webp; do cp "$data/images/$f" "$work/images/"; done
  echo "a photo of [trigger], turned on its side" >"$work/images/orientation_6.txt"
  echo "a test card" >"$work/images/rgb.txt"
  echo "a photo of [trigger] on a clear background" >"$work/images/rgba.txt"
  echo "a photo of [trigger], lossy" >"$work/images/lossy.txt"
  expect 0 "wrote $work/$arch.h5: 4 samples" "$work/encode.log" dataset encode "$work/images" --model "$arch" "$@" \
    --resolution 32 --bucket-step 16 --config "$work/run.yaml" --no-progress --out "$work/$arch.h5"
  "$wick" dataset inspect "$work/$arch.h5" >"$work/inspect.log" 2>&1 || fail "wick dataset inspect refused $arch.h5"
  for line in "model_family      $arch" "sample prompts    3, embeds $embeds" '"a photo of sks"' '"blurry"' \
    "trigger_word      $sample_trigger"; do
    grep -qF -- "$line" "$work/inspect.log" || fail "inspect lacks '$line'"
  done
}
# For the rows whose dataset stores the sample prompts (`wick dataset encode --config`): the same run without any text
# encoder path trains from the stored prompts alone and writes the same grids bitwise; without the encoders, `wick
# sample` makes a stored prompt ($sample_one) and refuses another (the second of $sample_ab), naming it and KEY.
stored_prompts_checks() {  # stored_prompts_checks KEY
  local key=$1
  expect 0 "samples $work/out/stored/samples/step_6.png" "$work/stored.log" train "$work/run.yaml" --no-progress \
    --set name=stored "${sample_no_encoders[@]}"
  grep -qF "no text encoders" "$work/stored.log" || fail "the stored-prompts run does not say it has no text encoders"
  for step in 3 6; do
    cmp -s "$work/out/run/samples/step_$step.png" "$work/out/stored/samples/step_$step.png" ||
      fail "step $step: the grid from stored prompts differs from the run with encoders"
  done
  expect 0 "wrote $work/h.png" "$work/sample_h.log" sample "$work/out/stored" --prompt "$sample_one" --n 1 \
    --out "$work/h.png"
  expect 2 "the prompt \"${sample_ab[1]}\" is not among the sample prompts stored" "$work/sample_i.log" sample \
    "$work/out/stored" --prompt "${sample_ab[1]}" --out "$work/i.png"
  grep -qF "$key" "$work/sample_i.log" || fail "the refusal does not name $key"
}
# For the rows that sample with a negative prompt: sample.negative_prompt reaches `wick sample` and changes the images.
negative_prompt_checks() {
  expect 0 "wrote $work/d.png" "$work/sample_d.log" sample "$work/out/run" --prompt "${sample_ab[0]}" \
    --prompt "${sample_ab[1]}" --n 2 --set 'sample.negative_prompt="grainy"' --out "$work/d.png"
  grep -qF 'negative prompt "grainy"' "$work/sample_d.log" || fail "wick sample did not take sample.negative_prompt"
  cmp -s "$work/a.png" "$work/d.png" && fail "another negative prompt wrote the same PNG"
}

cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
${sample_trigger:+trigger_word: $sample_trigger}
model:
  arch: $arch
$(sample_model | sed 's/^/  /')
network: {type: lora, linear: 4}
dataset: {path: $sample_dataset}
train: {batch_size: 2, steps: 6, lr: 1.0e-2, log_every: 1, seed: 3}
save: {every: 3, dtype: f32}
sample:
  every: 3
  steps: $sample_steps
  prompts: [$sample_prompts]
${sample_negative:+  negative_prompt: \"$sample_negative\"}
YAML
sample_prepare

# (a) Training with sample grids at steps 3 and 6: the row's prompts in one row of its images, scaled by 2.
expect 0 "samples $work/out/run/samples/step_6.png" "$work/train.log" train "$work/run.yaml" --no-progress
# The dataset records the trigger word its captions were encoded with: the run's trigger_word is then a note, not
# the warning that training cannot put it into the captions.
if grep -qF "trigger_word      $sample_trigger" "$work/inspect.log" 2>/dev/null && [ -n "$sample_trigger" ]; then
  grep -qF "note: trigger_word '$sample_trigger': the captions of $sample_dataset were encoded with it" \
    "$work/train.log" || fail "the run does not note that the dataset's captions hold the trigger word"
  grep -q "warning: .*trigger_word" "$work/train.log" && fail "the run warns about the trigger word the captions hold"
  expect 0 "differs from 'sks'" "$work/other_trigger.log" train "$work/run.yaml" --no-progress --dry-run \
    --set name=other_trigger --set trigger_word=ohwx
fi
grep -qF "$sample_title: VAE $sample_vae, ${sample_text_label:-CLIP-L}" "$work/train.log" ||
  fail "the log does not describe the $sample_title sampler"
read -r width height <<<"$sample_size"
for step in 3 6; do
  png="$work/out/run/samples/step_$step.png"
  [ -s "$png" ] || { fail "no $png"; continue; }
  cells "$png" "$width" "$height" 2 "$sample_cells" "$sample_cells" ||
    fail "$png: not a $sample_cells-cell grid of $((width * 2)) x $((height * 2)) non-constant images"
done
cmp -s "$work/out/run/samples/step_3.png" "$work/out/run/samples/step_6.png" &&
  fail "the grids of steps 3 and 6 are the same (the LoRA did not change the images?)"

# (b) wick sample: the run's LoRA and sample settings; deterministic per seed; another seed, another size.
prompts=(--prompt "${sample_ab[0]}" --prompt "${sample_ab[1]}")
expect 0 "wrote $work/a.png: 4 images" "$work/sample_a.log" sample "$work/out/run" "${prompts[@]}" --n 2 \
  --out "$work/a.png"
settings="2 prompts x 2, $sample_steps steps, guidance $sample_guidance, seed 42"
grep -qF "+ $work/out/run/lora/run.safetensors, $settings" "$work/sample_a.log" || fail "wick sample did not use the \
run's LoRA and sample settings ($sample_steps steps, $sample_title's default guidance $sample_guidance, seed 42)"
cells "$work/a.png" "$width" "$height" 3 2 2 || fail "a.png: not a grid of $width x $height images scaled by 3"
expect 0 "wrote $work/b.png" "$work/sample_b.log" sample "$work/out/run" "${prompts[@]}" --n 2 --out "$work/b.png"
cmp -s "$work/a.png" "$work/b.png" || fail "two wick sample runs with the same seed wrote different PNGs"
expect 0 "wrote $work/c.png" "$work/sample_c.log" sample "$work/out/run" "${prompts[@]}" --n 2 --seed 7 \
  --out "$work/c.png"
cmp -s "$work/a.png" "$work/c.png" && fail "another seed wrote the same PNG"
read -r width height <<<"$sample_other_size"
expect 0 "wrote $work/e.png: 1 images" "$work/sample_e.log" sample "$work/out/run" --prompt "$sample_one" \
  --n 1 --width "$width" --height "$height" --out "$work/e.png"
cells "$work/e.png" "$width" "$height" 3 1 1 || fail "e.png: not one $width x $height image scaled by 3"
expect 2 "multiples of $sample_multiple pixels" "$work/sample_f.log" sample "$work/out/run" --prompt x \
  --width "$sample_bad_width" --out "$work/f.png"

# (c) No VAE: refused before step 1, naming the key and why; sample.every 0 trains without the VAE and the encoders.
expect 2 "model.vae_path" "$work/novae.log" train "$work/run.yaml" --no-progress --set name=novae \
  --set 'model.vae_path=""'
grep -qF "sample.every is 3, and sample images cannot be made: $sample_title sample images need the VAE" \
  "$work/novae.log" || fail "the refusal does not say that sample images need the VAE"
[ -e "$work/out/novae/metrics.jsonl" ] && fail "the run without a VAE trained a step before being refused"
expect 0 "outputs in $work/out/plain" "$work/plain.log" train "$work/run.yaml" --no-progress --set name=plain \
  --set 'model.vae_path=""' "${sample_no_encoders[@]}" --set sample.every=0
[ -e "$work/out/plain/samples" ] && fail "sample.every 0 wrote samples"

# (d) A diffusers pipeline folder as model.name_or_path gives every part (the row assembles it from the parts above).
pipeline=$work/$sample_pipeline_name
mkdir -p "$pipeline"
sample_pipeline
read -r width height <<<"$sample_pipeline_size"
cat >"$work/pipeline.yaml" <<YAML
name: pipeline
output_dir: $work/out
device: cpu
model: {arch: $arch, name_or_path: $pipeline}
network: {type: lora, linear: 4}
dataset: {path: $sample_dataset}
train: {batch_size: 2, steps: 2, log_every: 1${sample_pipeline_train:+, $sample_pipeline_train}}
save: {every: 0, dtype: f32}
sample: {every: 2, steps: 2, prompts: ["$sample_pipeline_prompt"], width: $width, height: $height}
YAML
expect 0 "samples $work/out/pipeline/samples/step_2.png" "$work/pipeline.log" train "$work/pipeline.yaml" --no-progress
grep -qF "$sample_title: VAE $pipeline/vae, ${sample_text_label:-CLIP-L} $pipeline/text_encoder" "$work/pipeline.log" ||
  fail "the pipeline run did not take its parts"
cells "$work/out/pipeline/samples/step_2.png" "$width" "$height" 2 1 1 ||
  fail "the pipeline run's grid is not one $width x $height image scaled by 2"

sample_row

finish "arch_sample_test.sh $arch"
