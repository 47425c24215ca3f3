#!/usr/bin/env bash
# The newcomer's path end to end on the CPU, the commands of README "From your images to a LoRA" in their shape: a
# folder of Debian's real photographs (python-matplotlib-data's grace_hopper.jpg, xplanet-images' earth, night and
# sun) and committed test images (tests/data/images) with .txt captions -> `wick dataset encode --model flux` with
# the committed tiny Flux-shaped VAE and text encoders (tests/data/vae/flux_tiny, clip_text/clip_l, t5, the
# tokenizers), given as files and as a diffusers pipeline folder assembled from them, `--config
# configs/flux_lora.yaml` (its trigger word and sample prompts) -> `wick train configs/flux_lora.yaml` of a tiny
# random Flux.1-dev (tests/train/arch_fixture.cpp flux sample-data: widths that fit those parts) as a LoRA with sample
# grids -> `wick sample`. Only the sizes differ from a real run (resolution 64, T5 length 16, 4 steps, CPU, f32 in
# the mpi part), given with --set and extra options.
#   images_to_samples_test.sh cli WICK FIXTURE CHECK REPO_DIR WORK_DIR
#     the dataset validates, holds the captions with the trigger word and the config's sample prompts; the
#     pipeline folder makes the same file as the files; a run with the dataset's stored prompts and only the VAE
#     (no text encoder paths) trains with finite losses and writes samples/step_N.png grids of the right size with
#     non-constant cells, its LoRA file passes ComfyUI's key rule; a run on the same images without stored prompts,
#     encoding them on the fly with the same encoders, trains the same LoRA bitwise and writes grids within 1 8-bit
#     level (the f16 the file keeps the embeddings in); grids whose prompts are not stored need the encoders (the
#     refusal names the prompt and the keys); `wick sample RUN --prompt "... [trigger] ..."` writes a PNG: from the
#     stored prompts, with the encoders given by --set, and from a run on the pipeline folder.
#   images_to_samples_test.sh mpi MPIEXEC WICK FIXTURE CHECK REPO_DIR WORK_DIR
#     training from the buckets of the encoded file: every global batch holds one bucket and 2 ranks take the
#     1-rank run's global batches (CHECK batches); 2 ranks (ZeRO-1) repeat 1 rank's losses (1e-5); a 2-rank run
#     stopped and resumed on 2 ranks repeats itself bitwise; its checkpoint continues on 1 rank (1e-5); with the
#     weights sharded both ranks make the sample grids, equal to the ZeRO-1 run's bit for bit.
# Skips (77) when the Debian photographs are missing (scripts/install_deps.sh --tests installs them).
set -u
part=$1
shift
mpiexec=""
if [ "$part" = mpi ]; then mpiexec=$1; shift; fi
wick=$1 fixture=$2 check=$3 repo=$4 work=$5
data=$repo/tests/data trainers=$repo/tests/train config=$repo/configs/flux_lora.yaml
started=$(date +%s.%N)
photos=(/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg /usr/share/xplanet/images/earth.jpg
        /usr/share/xplanet/images/night.jpg /usr/share/xplanet/images/sun.jpg)
for photo in "${photos[@]}"; do
  if [ ! -f "$photo" ]; then
    echo "skipped: $photo is missing (scripts/install_deps.sh --tests installs python-matplotlib-data and xplanet-images)"
    exit 77
  fi
done
rm -rf "$work" && mkdir -p "$work/photos/more" "$work/data"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# run LOG ARGS...: wick ARGS exits 0 (else the failure and the log's end).
run() {
  local log=$1
  shift
  "$wick" "$@" >"$log" 2>&1 || { fail "wick $* exited $?"; tail -5 "$log"; return 1; }
}
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
    echo "ok: wick ${*:1:2} ... -> $status: $(grep -F -- "$pattern" "$log" | head -1 | cut -c1-160)"
  fi
}

# The image folder: 4 photographs, 4 test images (an EXIF-rotated JPEG, a JPEG, an RGBA PNG, a lossy WebP), each
# with its caption file; "[trigger]" where the caption names the subject, else the trigger word is put in front.
cp "${photos[@]}" "$work/photos/"
for f in orientation_6.jpg rgb.jpg rgba.png lossy.webp; do cp "$data/images/$f" "$work/photos/more/"; done
echo "grace hopper at her desk" >"$work/photos/grace_hopper.txt"
echo "[trigger] seen from space" >"$work/photos/earth.txt"
echo "[trigger] at night, city lights" >"$work/photos/night.txt"
echo "the sun in x-rays" >"$work/photos/sun.txt"
echo "a photo of [trigger], turned on its side" >"$work/photos/more/orientation_6.txt"
echo "a test card" >"$work/photos/more/rgb.txt"
echo "a photo of [trigger] on a clear background" >"$work/photos/more/rgba.txt"
echo "a photo of [trigger], lossy" >"$work/photos/more/lossy.txt"

"$fixture" flux sample-data "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
tiny_flux=$work/data/flux_sample_tiny.safetensors   # stands for BFL's flux1-dev.safetensors
vae=$data/vae/flux_tiny/vae                          # for ae.safetensors
clip_l=$data/clip_text/clip_l/model.safetensors      # for clip_l.safetensors
t5=$data/t5/t5xxl_comfy.safetensors                  # for t5xxl_fp16.safetensors
vocab=$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz spiece=$data/t5/spiece.model
pipeline=$work/FLUX.1-tiny                           # for FLUX.1-dev/
files=(--vae "$vae" --clip-l "$clip_l" --clip-vocab "$pipeline/tokenizer" --t5 "$t5"
       --t5-tokenizer "$pipeline/tokenizer_2")
tiny=(--resolution 64 --bucket-step 16 --t5-length 16 --no-progress)
# The training command's test-only keys: the tiny model's rope axes, the CPU, one process, small sizes, every step
# logged; and the latents' mean rather than draws from the VAE's distribution, because the tiny test VAE has a
# channel pushed to logvar 20 (tests/data/vae/README.md), whose draws (std e^10) make losses of about 4e6.
train_tiny=(--set model.name_or_path="$tiny_flux" --set 'model.axes_dim=[4, 6, 6]' --set device=cpu
            --set distributed.backend=auto --set output_dir="$work/out" --set sample.width=80 --set sample.height=48
            --set sample.steps=4 --set train.log_every=1 --set dataset.latent_sampling=mean --no-progress)
encoders=(--set model.clip_l_path="$clip_l" --set model.t5_path="$t5"
          --set model.clip_tokenizer_path="$pipeline/tokenizer" --set model.t5_tokenizer_path="$pipeline/tokenizer_2")
prompt1="p3r5on holding a sign that says 'I LOVE PROMPTS!'" prompt2="a photo of p3r5on at the beach"

# A diffusers pipeline folder assembled from the same parts (tokenizer/ as vocab.json + merges.txt written from
# open_clip's vocabulary file, as transformers' folders hold it), for the pipeline-folder commands; its tokenizer/
# and tokenizer_2/ also stand for the tokenizer folders the single-file commands are given.
mkdir -p "$pipeline/transformer" "$pipeline/tokenizer" "$pipeline/tokenizer_2"
cp "$tiny_flux" "$pipeline/transformer/diffusion_pytorch_model.safetensors"
printf '{"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [4, 6, 6]}\n' >"$pipeline/transformer/config.json"
printf '{"_class_name": "FluxPipeline"}\n' >"$pipeline/model_index.json"
ln -s "$vae" "$pipeline/vae"
ln -s "$(dirname "$clip_l")" "$pipeline/text_encoder"
ln -s "$data/t5/pipeline/text_encoder_3" "$pipeline/text_encoder_2"
cp "$spiece" "$pipeline/tokenizer_2/"
python3 - "$vocab" "$pipeline/tokenizer" <<'PY'
import gzip, json, sys
# CLIP's byte alphabet (openai/CLIP simple_tokenizer.bytes_to_unicode): printable bytes stand for themselves, the
# others for code points from 256 on, in byte order; then the alphabet with </w>, the merges, the two specials.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
alphabet = [chr(c) for c in cs]
merges = gzip.open(sys.argv[1]).read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
vocab = alphabet + [a + "</w>" for a in alphabet] + ["".join(m.split()) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
json.dump({token: i for i, token in enumerate(vocab)}, open(sys.argv[2] + "/vocab.json", "w"))
open(sys.argv[2] + "/merges.txt", "w").write("#version: 0.2\n" + "\n".join(merges) + "\n")
PY

# (a) The folder encoded with the files one by one and the training config's trigger word and sample prompts.
run "$work/encode.log" dataset encode "$work/photos" --model flux "${files[@]}" --config "$config" "${tiny[@]}" \
  --out "$work/data/flux_person.h5"
grep -F "wrote $work/data/flux_person.h5: 8 samples from 8 images (0 skipped) in 2 buckets (latent height x width): 24x40 (3) 32x32 (5)" \
  "$work/encode.log" || fail "the summary line is not as expected"
"$wick" dataset inspect "$work/data/flux_person.h5" >"$work/inspect.log" 2>&1 || fail "the dataset does not validate"
for line in "model_family      flux" "text              L=16 D=32 pooled P=16" "sample prompts    2, embeds [2, 16, 32]" \
            "\"$prompt1\"" "\"$prompt2\"" "validation        OK (8 samples, all finite)"; do
  grep -qF -- "$line" "$work/inspect.log" || fail "inspect lacks '$line'"
done
if [ "$part" = cli ]; then
  "$check" list "$work/data/flux_person.h5" | cut -d'|' -f2 >"$work/captions.txt"
  cat >"$work/captions.expected" <<'LIST'
 p3r5on seen from space
 p3r5on grace hopper at her desk
 a photo of p3r5on, lossy
 a photo of p3r5on, turned on its side
 p3r5on a test card
 a photo of p3r5on on a clear background
 p3r5on at night, city lights
 p3r5on the sun in x-rays
LIST
  diff "$work/captions.expected" "$work/captions.txt" || fail "the captions are not the expected ones"

  # (b) The pipeline folder makes the same file.
  run "$work/encode_pipeline.log" dataset encode "$work/photos" --model flux --path "$pipeline" --config "$config" \
    "${tiny[@]}" --out "$work/data/pipeline.h5"
  "$check" same "$work/data/flux_person.h5" "$work/data/pipeline.h5" ||
    fail "the pipeline folder made another file than the files one by one"
  # (c) The same images without --config: no stored sample prompts (and open_clip's vocabulary file and spiece.model
  # as the tokenizers: the LoRA trained on it below is the same).
  run "$work/encode_plain.log" dataset encode "$work/photos" --model flux --vae "$vae" --clip-l "$clip_l" \
    --clip-vocab "$vocab" --t5 "$t5" --t5-tokenizer "$spiece" --trigger-word p3r5on \
    "${tiny[@]}" --out "$work/data/plain.h5"
  "$wick" dataset inspect "$work/data/plain.h5" | grep -q "sample prompts" && fail "plain.h5 has sample prompts"

  train_tiny+=(--set save.every=2 --set train.steps=4)
  # (d) wick train with the stored prompts and only the VAE: grids at steps 2 and 4, finite losses, the LoRA file.
  expect 0 "samples $work/out/flux_lora_v1/samples/step_4.png" "$work/train.log" train "$config" "${train_tiny[@]}" \
    --set model.vae_path="$vae" --set datasets.0.path="$work/data/flux_person.h5" --set sample.every=2
  grep -qF "the embeddings of the 2 sample prompts stored in the dataset, no text encoders" "$work/train.log" ||
    fail "the run does not say that its grids take the stored prompts without text encoders"
  run_dir=$work/out/flux_lora_v1
  for step in 2 4; do
    # 2 prompts in one row of 80 x 48 images scaled by 2.
    python3 "$trainers/png_cells.py" "$run_dir/samples/step_$step.png" 160 96 2 0 2 ||
      fail "step_$step.png: not a grid of 2 non-constant 80 x 48 images"
  done
  python3 - "$run_dir/metrics.jsonl" <<'PY' || fail "the losses are not 4 finite numbers"
import json, math, sys
rows = {}
for line in open(sys.argv[1]):
    try: o = json.loads(line)
    except ValueError: continue
    rows[o["step"]] = o["loss"]
print(f"losses: {[round(rows[s], 4) for s in sorted(rows)]}")
sys.exit(0 if sorted(rows) == [1, 2, 3, 4] and all(v is not None and math.isfinite(v) for v in rows.values()) else 1)
PY
  lora=$run_dir/lora/flux_lora_v1.safetensors
  python3 "$repo/tests/reference/comfyui_lora_keys.py" --model-keys "$tiny_flux" --lora "$lora" ||
    fail "ComfyUI would not load every key of $lora"
  grep -qa "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight" "$lora" || fail "the LoRA file lacks kohya's names"

  # (e) The same training on the file without stored prompts, the encoders given: encoded on the fly.
  expect 0 "samples $work/out/on_the_fly/samples/step_4.png" "$work/on_the_fly.log" train "$config" "${train_tiny[@]}" \
    --set name=on_the_fly --set model.vae_path="$vae" "${encoders[@]}" --set datasets.0.path="$work/data/plain.h5" \
    --set sample.every=2
  grep -q "stored in the dataset" "$work/on_the_fly.log" && fail "the run without stored prompts claims to use them"
  python3 "$trainers/same_tensors.py" "$work/out/on_the_fly/lora/on_the_fly.safetensors" "$lora" ||
    fail "the two runs trained different LoRAs"
  for step in 2 4; do
    # Measured: at most 1 level apart in about 6% of the values (configs/flux_lora.yaml samples in bf16).
    python3 "$trainers/png_difference.py" "$work/out/on_the_fly/samples/step_$step.png" \
      "$run_dir/samples/step_$step.png" 1 || fail "the stored prompts' grid at step $step is not the on-the-fly one"
  done
  # Prompts the file does not hold need the encoders; refused before step 1, naming the prompt and the keys.
  expect 2 "do not hold \"a photo of p3r5on in a forest\"" "$work/not_stored.log" train "$config" "${train_tiny[@]}" \
    --set name=not_stored --set model.vae_path="$vae" --set datasets.0.path="$work/data/flux_person.h5" \
    --set sample.every=2 --set 'sample.prompts=["a photo of [trigger] in a forest"]'
  grep -qF "model.t5_path" "$work/not_stored.log" || fail "the refusal does not name model.t5_path"
  expect 2 "Flux sample images need CLIP-L (model.clip_l_path" "$work/plain_no_encoders.log" train "$config" \
    "${train_tiny[@]}" --set name=plain_no_encoders --set model.vae_path="$vae" \
    --set datasets.0.path="$work/data/plain.h5" --set sample.every=2
  [ -e "$work/out/not_stored/metrics.jsonl" ] || [ -e "$work/out/plain_no_encoders/metrics.jsonl" ] &&
    fail "a refused run trained a step"

  # (f) A pipeline folder as model.name_or_path gives the VAE and the encoders; the stored prompts are still used.
  expect 0 "samples $work/out/pipeline/samples/step_2.png" "$work/pipeline.log" train "$config" "${train_tiny[@]}" \
    --set name=pipeline --set model.name_or_path="$pipeline" --set datasets.0.path="$work/data/pipeline.h5" \
    --set sample.every=2 --set train.steps=2
  grep -qF "CLIP-L $pipeline/text_encoder" "$work/pipeline.log" && grep -qF "stored in the dataset" "$work/pipeline.log" ||
    fail "the pipeline run does not take its encoders from the folder and its grid prompts from the file"

  # (g) wick sample: a stored prompt with only the VAE; another prompt needs the encoders (--set gives them); the
  # pipeline run has them.
  expect 0 "wrote $work/beach.png: 2 images" "$work/sample_beach.log" sample "$run_dir" \
    --prompt "a photo of [trigger] at the beach" --n 2 --out "$work/beach.png"
  python3 "$trainers/png_cells.py" "$work/beach.png" 80 48 2 0 2 || fail "beach.png: not 2 non-constant 80 x 48 images"
  expect 2 "the prompt \"a photo of p3r5on in a forest\" is not among the sample prompts stored in the dataset" \
    "$work/sample_forest_refused.log" sample "$run_dir" --prompt "a photo of [trigger] in a forest" --out "$work/x.png"
  expect 0 "wrote $work/forest.png: 2 images" "$work/sample_forest.log" sample "$run_dir" \
    --prompt "a photo of [trigger] in a forest" --n 2 "${encoders[@]}" --out "$work/forest.png"
  python3 "$trainers/png_cells.py" "$work/forest.png" 80 48 2 0 2 || fail "forest.png: not 2 non-constant 80 x 48 images"
  expect 0 "wrote $work/paris.png: 2 images" "$work/sample_paris.log" sample "$work/out/pipeline" \
    --prompt "[trigger] in Paris" --n 2 --out "$work/paris.png"
  python3 "$trainers/png_cells.py" "$work/paris.png" 80 48 2 0 2 || fail "paris.png: not 2 non-constant 80 x 48 images"
fi

if [ "$part" = mpi ]; then
  # (h) The training order over the encoded file's buckets (3 and 5 samples: 2 + 3 global batches of 2 an epoch).
  "$check" batches "$work/data/flux_person.h5" 2 42 || fail "the sampler's batches over the encoded buckets"
  # One rank with batch 2 (the reference) and 2 ranks with batch 1 each (ZeRO-1, as configs/flux_lora.yaml), in f32
  # so that the ranks' reduction order stays within 1e-5; 12 steps: more than 2 epochs.
  mpi_tiny=("${train_tiny[@]}" --set model.dtype=f32 --set train.mixed_precision=no --set sample.every=0
            --set datasets.0.path="$work/data/flux_person.h5" --set save.every=4 --set train.steps=12)
  train_ranks() {  # train_ranks N NAME ARGS...
    local n=$1 name=$2
    shift 2
    timeout 240 "$mpiexec" --oversubscribe -np "$n" "$wick" train "$config" "${mpi_tiny[@]}" --set name="$name" \
      --set distributed.backend=mpi "$@" >"$work/$name.$n.log" 2>&1 ||
      { fail "mpirun -np $n wick train $name $* exited $?"; tail -8 "$work/$name.$n.log"; }
  }
  run "$work/one.log" train "$config" "${mpi_tiny[@]}" --set name=one --set train.batch_size=2
  train_ranks 2 two --set train.batch_size=1
  grep -q "optimizer state sharded (ZeRO-1)" "$work/two.2.log" || fail "the 2-rank run did not shard its optimizer"
  python3 "$trainers/compare_losses.py" "$work/out/one/metrics.jsonl" "$work/out/two/metrics.jsonl" 12 \
    --tolerance 1e-5 || fail "1-rank and 2-rank losses differ beyond 1e-5"
  # Stopped after step 4 and resumed, on 2 ranks: bitwise the straight 2-rank run.
  train_ranks 2 parts --set train.batch_size=1 --stop-after 4
  train_ranks 2 parts --set train.batch_size=1
  grep -q "resuming from .*step_00000004" "$work/parts.2.log" || fail "the 2-rank run did not resume from step 4"
  python3 "$trainers/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/parts/metrics.jsonl" 12 ||
    fail "stopped + resumed on 2 ranks differs from the straight run"
  python3 "$trainers/same_tensors.py" "$work/out/two/lora/two.safetensors" "$work/out/parts/lora/parts.safetensors" ||
    fail "stopped + resumed on 2 ranks trained another LoRA"
  # The 2-rank checkpoint at step 4 continues on 1 rank with batch 2: the same global batches.
  mkdir -p "$work/out/to1/checkpoints" && cp -r "$work/out/two/checkpoints/step_00000004" "$work/out/to1/checkpoints/"
  run "$work/to1.log" train "$config" "${mpi_tiny[@]}" --set name=to1 --set train.batch_size=2
  grep -q "resuming from .*step_00000004" "$work/to1.log" || fail "the 2-rank checkpoint did not resume on 1 rank"
  python3 "$trainers/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/to1/metrics.jsonl" 5..12 \
    --tolerance 1e-5 || fail "2 ranks -> 1 rank diverged"
  # With the weights sharded (distributed.shard: weights) both ranks take part in the sample grids (each block is
  # gathered from both): the grids of steps 6 and 12 and the losses equal the ZeRO-1 run's, bit for bit.
  train_ranks 2 grids --set train.batch_size=1 --set sample.every=6 --set model.vae_path="$vae"
  train_ranks 2 grids_sharded --set train.batch_size=1 --set sample.every=6 --set model.vae_path="$vae" \
    --set distributed.shard=weights
  grep -q "blocks sharded over 2 ranks" "$work/grids_sharded.2.log" || fail "the grids run did not shard its weights"
  for s in 6 12; do
    cmp "$work/out/grids/samples/step_$s.png" "$work/out/grids_sharded/samples/step_$s.png" ||
      fail "the step-$s grid of the weights-sharded run differs from the ZeRO-1 run's"
  done
  python3 "$trainers/compare_losses.py" "$work/out/grids/metrics.jsonl" "$work/out/grids_sharded/metrics.jsonl" 12 ||
    fail "the weights-sharded run's losses differ from the ZeRO-1 run's"
fi

echo "images_to_samples_test.sh $part: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
