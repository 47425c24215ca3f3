# Z-Image's row of the end-to-end tests (tests/train/arch_*_test.sh, sourced by them; docs/testing.md "End-to-end
# tests per architecture"): what differs for Z-Image, and the checks only Z-Image has.

# ---- arch_train_test.sh zimage: arch_fixture zimage data's Z-Image in ComfyUI's single-file layout (the fused
# attention.qkv under "model.diffusion_model."; 16-channel latents in 2x2 patches, dim 128 in one head of 128, 2 layers
# + 1 noise and 1 context refiner, caption features 2560), trained on captions of 3 to 5 rows out of 16 (the mask);
# timestep_type shift = the shift-3 sigmas of diffusers' Z-Image example.
train_model=zimage_tiny.safetensors
train_model_keys="is_zimage: true"
train_network=""
train_keys="noise_scheduler: flowmatch, timestep_type: shift"
train_built="Z-Image (2 layers + 1 + 1 refiners, dim 128, f32) with 1769784 parameters (24568 trainable, lora)"
train_built_what="the tiny Z-Image with LoRA on the 'all' preset (every Linear of the main layers)"
train_built_bf16="dim 128, bf16)"
# Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps 1.694, last 10 1.355 (ratio 0.800), about 50 ms per step
# at batch 2; DoRA 0.800, bf16 0.801, caption dropout 0.5 0.801, float8 0.803.
train_bound=0.9
train_dora=(--set network.type=dora)  # PEFT's orientation (magnitude [out]), zimage's default file format
train_other_format=kohya
train_comfyui_runs="lora"  # ComfyUI maps PEFT's to_q / to_k / to_v onto slices of its fused qkv; it does not read
                           # PEFT's lora_magnitude_vector (no dora) nor musubi's kohya to_q names (no kohya)
train_quantize=true
train_float8_line="(24568 trainable, lora), 31 frozen Linears in float8 e4m3"
train_float8_what="the 31 block Linears"
train_swap_blocks=3

train_cli_row() {
  falls dora "$train_bound" || fail "the DoRA run's loss did not fall (or was not finite)"
  # Caption dropout: a dropped caption is one zero feature row (its mask all zeros), and the loss still falls.
  train dropout --set train.caption_dropout=0.5
  falls dropout 0.95 || fail "the caption-dropout run's loss did not fall (or was not finite)"
  first_losses_differ lora dropout || fail "caption dropout made no difference"
  # A full fine-tune (2 steps) writes the whole model back in its base's layout, ComfyUI's single file (the fused qkv
  # under "model.diffusion_model."), which loads as a base again.
  train full --set network.type=full --set train.steps=2 --set train.optimizer=adamw
  python3 - "$work/out/full/model/full.safetensors" "$model" <<'PY' || fail "the full run's model file is not its base's layout"
import json, struct, sys
def keys(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return set(json.loads(f.read(n))) - {"__metadata__"}
written, base = keys(sys.argv[1]), keys(sys.argv[2])
ok = written == base and "model.diffusion_model.layers.0.attention.qkv.weight" in written
print(f"full run: {len(written)} tensors, the base's names: {written == base}")
sys.exit(0 if ok else 1)
PY
  "$wick" train "$work/run.yaml" --no-progress --set name=again --set train.steps=1 \
    --set model.name_or_path="$work/out/full/model/full.safetensors" >"$work/again.log" 2>&1 ||
    fail "the full run's model file does not load as a base"
  # The default file: PEFT with diffusers' names (what ZImagePipeline.load_lora_weights and ComfyUI read), the scale
  # baked in; save.format kohya: musubi-tuner's lora_unet_layers_0_attention_to_q for LoRA and DoRA.
  lora_file_checks <<'PY' || fail "the LoRA files' keys or metadata are not what diffusers, ComfyUI and musubi read"
import json
from safetensors_keys import expect, lora_header, report
meta, keys = lora_header("lora")
expect("peft (the default): 16 modules x (A, B)", len(keys) == 32)
for k, shape in {"transformer.layers.0.attention.to_q.lora_A.weight": [4, 128],
                 "transformer.layers.0.attention.to_q.lora_B.weight": [128, 4],
                 "transformer.layers.1.attention.to_out.0.lora_B.weight": [128, 4],
                 "transformer.layers.1.feed_forward.w1.lora_B.weight": [341, 4],
                 "transformer.layers.0.feed_forward.w2.lora_A.weight": [4, 341],
                 "transformer.layers.0.adaLN_modulation.0.lora_B.weight": [512, 4]}.items():
    expect(f"peft: {k} {shape} (got {keys.get(k)})", keys.get(k) == shape)
expect("peft: no refiner keys (the 'all' preset is the main layers)", not any("refiner" in k for k in keys))
expect("peft: no kohya or alpha keys", not any("lora_unet" in k or k.endswith(".alpha") for k in keys))
adapter = json.loads(meta.get("lora_adapter_metadata", "{}"))
expect("peft: lora_adapter_metadata r 4, lora_alpha 4",
       adapter.get("transformer.r") == 4 and adapter.get("transformer.lora_alpha") == 4)
for k, v in {"ss_base_model_version": "zimage", "modelspec.architecture": "z-image/lora",
             "wick_lora_format": "peft", "ss_network_dim": "4"}.items():
    expect(f"peft metadata {k} = {v!r} (got {meta.get(k)!r})", meta.get(k) == v)
meta, keys = lora_header("dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.layers.1.attention.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
meta, keys = lora_header("kohya")
expect("kohya: 16 modules x (down, up, alpha)", len(keys) == 48)
expect("kohya: musubi's to_q down/up", keys.get("lora_unet_layers_0_attention_to_q.lora_down.weight") == [4, 128]
       and keys.get("lora_unet_layers_0_attention_to_q.lora_up.weight") == [128, 4])
expect("kohya: alpha 0-d", keys.get("lora_unet_layers_1_feed_forward_w3.alpha") == [])
expect("kohya: only lora_unet_ keys", all(k.startswith("lora_unet_") for k in keys))
expect("kohya metadata", meta.get("wick_lora_format") == "kohya" and meta.get("ss_network_alpha") == "4")
meta, keys = lora_header("kohya_dora")
expect("kohya DoRA: dora_scale [1, in]", keys.get("lora_unet_layers_0_feed_forward_w2.dora_scale") == [1, 341])
report("PEFT, PEFT DoRA, kohya, kohya DoRA")
PY
}

train_float8_row() {
  # The memory plan (estimates of this tiny run: plain 17.0 MB, checkpointing 14.0 MB, + float8 11.4 MB, + 4 blocks
  # swapped 10.9 MB).
  planned plan15 15.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan12 12.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  planned plan11 11.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 4"
  grep -m1 "4 blocks swapped (" "$work/plan11.log" || fail "plan11 did not swap the 4 blocks it planned"
  refused_plan plan8 8MB "no memory plan fits the 8.0 MB train.max_memory budget: the smallest estimate, with gradient \
checkpointing on, the base float8 and 4 blocks swapped, is 10.9 MB"
}

train_mpi_row() { :; }

# ---- arch_sample_test.sh zimage: committed test images with captions -> `wick dataset encode --model zimage --config`
# with the committed tiny 16-channel VAE (tests/data/vae/flux_tiny) and the tiny Qwen3 of the sampler fixture
# (arch_fixture zimage sample-data writes it in full; hidden 16) with the Qwen3 tokenizer of tests/data/bpe -> a LoRA on
# the tiny Z-Image of the sampler fixture (tests/data/zimage_sample/transformer: cap_feat_dim 16). Sample grids with
# the default guidance 1 (Turbo: no CFG); the negative prompt with guidance 4 (Base).
sample_title=Z-Image
sample_text_label=Qwen3
sample_vae=$data/vae/flux_tiny/vae
sample_dataset=$work/zimage.h5
sample_cells=2                                # the run's 2 sample prompts, 32 x 32 images
sample_size="32 32"
sample_ab=("a photo of [trigger]" "a red cube")
sample_steps=3 sample_guidance=1
sample_one="a test card" sample_other_size="40 24"
sample_multiple=4 sample_bad_width=42
sample_no_encoders=(--set 'model.text_encoder_path=""' --set 'model.tokenizer_path=""')
sample_trigger=sks
sample_prompts='"a photo of [trigger]", "a test card"'
sample_negative=blurry
sample_pipeline_name=Z-Image-tiny
sample_pipeline_prompt="a red cube" sample_pipeline_size="40 24" sample_pipeline_train=""

sample_model() {  # the run's model: keys beside arch
  cat <<YAML
name_or_path: $data/zimage_sample/transformer
vae_path: $data/vae/flux_tiny/vae
text_encoder_path: $work/data/qwen3
tokenizer_path: $data/bpe/qwen3
max_length: 64
YAML
}

sample_prepare() {
  "$fixture" zimage sample-data "$work/data" "$data" || { echo "FAIL: the fixture program failed"; exit 1; }
  # 64 Qwen3 tokens: the stored prompts' embeddings [3, 64, 16], no pooled vector.
  encode_sample_images "[3, 64, 16]" --vae "$data/vae/flux_tiny/vae" --text-encoder "$work/data/qwen3" \
    --tokenizer "$data/bpe/qwen3" --max-length 64
}

sample_pipeline() {  # with its scheduler's shift
  mkdir -p "$pipeline/scheduler"
  ln -s "$data/zimage_sample/transformer" "$pipeline/transformer"
  ln -s "$data/vae/flux_tiny/vae" "$pipeline/vae"
  ln -s "$work/data/qwen3" "$pipeline/text_encoder"
  ln -s "$data/bpe/qwen3" "$pipeline/tokenizer"
  printf '{"_class_name": "ZImagePipeline"}\n' >"$pipeline/model_index.json"
  printf '{"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 2.0, '\
'"use_dynamic_shifting": false}\n' >"$pipeline/scheduler/scheduler_config.json"
}

sample_row() {
  grep -qF "shift 2," "$work/pipeline.log" || fail "the pipeline run did not take its scheduler's shift"
  # Base's classifier-free guidance: guidance 4 changes the images, and so does the negative prompt with it.
  expect 0 "guidance 4," "$work/sample_g4.log" sample "$work/out/run" --prompt "${sample_ab[0]}" \
    --prompt "${sample_ab[1]}" --n 2 --set sample.guidance=4 --out "$work/g4.png"
  cmp -s "$work/a.png" "$work/g4.png" && fail "guidance 4 wrote the same PNG as guidance 1"
  expect 0 'negative prompt "grainy"' "$work/sample_g4n.log" sample "$work/out/run" --prompt "${sample_ab[0]}" \
    --prompt "${sample_ab[1]}" --n 2 --set sample.guidance=4 --set 'sample.negative_prompt="grainy"' \
    --out "$work/g4n.png"
  cmp -s "$work/g4.png" "$work/g4n.png" && fail "another negative prompt wrote the same PNG"
  # Without the encoder, only the stored prompts (and the stored negative prompt "blurry" for guidance 4).
  stored_prompts_checks model.text_encoder_path
  expect 0 "wrote $work/j.png" "$work/sample_j.log" sample "$work/out/stored" --prompt "a test card" \
    --set sample.guidance=4 --out "$work/j.png"
  expect 2 "do not hold \"grainy\"" "$work/sample_k.log" sample "$work/out/stored" --prompt "a test card" \
    --set sample.guidance=4 --set 'sample.negative_prompt="grainy"' --out "$work/k.png"
  # The schedule's shift: model.sample_shift changes the images.
  expect 0 "shift 3," "$work/shift3.log" sample "$work/out/run" --prompt "a test card" --n 1 --out "$work/s3.png"
  expect 0 "shift 1.5," "$work/shift15.log" sample "$work/out/run" --prompt "a test card" --n 1 \
    --set model.sample_shift=1.5 --out "$work/s15.png"
  cmp -s "$work/s3.png" "$work/s15.png" && fail "another shift wrote the same PNG"
}

# ---- arch_lora_diffusers_test.sh zimage: the fixture-sized Z-Image of tests/data/zimage (the diffusers folder:
# cap_feat_dim 32, 2 layers, 1 + 1 refiners) on zimage_sized.h5 (16 latent channels in 6x10 and 8x4 buckets, 7
# caption rows of 32), saved in zimage's default format, PEFT; the case's first sample (latents_0, caption_0,
# timestep); check_zimage_lora.py loads it through ZImagePipeline's lora_state_dict + load_lora_into_transformer.
interop_weights=diffusers/transformer interop_check_weights=diffusers/transformer
interop_model_keys=""
interop_network=""
interop_train_keys="timestep_sampling: shift"
interop_save=""
interop_dataset=zimage_sized.h5
interop_case=case.safetensors interop_case_output=output_0
interop_types="lora"
interop_row() { :; }
