# Qwen-Image's row of the end-to-end tests (tests/train/arch_*_test.sh, sourced by them; docs/testing.md "End-to-end
# tests per architecture"): what differs for Qwen-Image, and the checks only Qwen-Image has.

# ---- arch_train_test.sh qwenimage: arch_fixture qwenimage data's Qwen-Image in ComfyUI's single-file layout
# (diffusers' names under "model.diffusion_model.", no config: model.axes_dims gives the RoPE axes; 16-channel latents
# in 2x2 patches, dim 128 in one head of 128, MLP 512, 2 dual-stream blocks, text 3584), trained on captions of 3 to 5
# rows out of 16 (the mask) and latents stored with the real VAE's per-channel latents_mean / latents_std (the model
# sees them normalized); timestep_type shift with musubi-tuner's recommended discrete_flow_shift 2.2.
train_model=qwenimage_tiny.safetensors
train_model_keys="is_qwen_image: true, axes_dims: [32, 48, 48]"
train_network=""
train_keys="noise_scheduler: flowmatch, timestep_type: shift, timestep_shift: 2.2"
train_built="Qwen-Image (2 blocks, dim 128, f32) with 1801024 parameters (51200 trainable, lora)"
train_built_what="the tiny Qwen-Image with LoRA on the 'all' preset (every Linear of the blocks, img_mod / txt_mod too)"
train_built_bf16="dim 128, bf16)"
# Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps 1.705, last 10 1.416 (ratio 0.830), about 50 ms per step
# at batch 2; DoRA 0.828, bf16 0.831, caption dropout 0.5 0.830, float8 0.830.
train_bound=0.9
train_dora=(--set network.type=dora)  # PEFT's orientation (magnitude [out]), qwenimage's default file format
train_other_format=kohya
train_comfyui_runs="lora kohya kohya_dora"  # ComfyUI's module names are diffusers', so PEFT's and musubi's kohya names
                                            # load as they are; it does not read PEFT's lora_magnitude_vector (no dora)
train_quantize=true
train_float8_line="(51200 trainable, lora), 28 frozen Linears in float8 e4m3"
train_float8_what="the 28 block Linears"
train_swap_blocks=1

train_cli_row() {
  falls dora "$train_bound" || fail "the DoRA run's loss did not fall (or was not finite)"
  # Caption dropout: a dropped caption is one zero feature row (its mask all zeros), and the loss still falls.
  train dropout --set train.caption_dropout=0.5
  falls dropout 0.95 || fail "the caption-dropout run's loss did not fall (or was not finite)"
  first_losses_differ lora dropout || fail "caption dropout made no difference"
  # A full fine-tune (2 steps) writes the whole model back in its base's layout, ComfyUI's single file (diffusers'
  # names under "model.diffusion_model."), which loads as a base again.
  train full --set network.type=full --set train.steps=2 --set train.optimizer=adamw
  python3 - "$work/out/full/model/full.safetensors" "$model" <<'PY' || fail "the full run's model file is not its base's layout"
import json, struct, sys
def keys(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return set(json.loads(f.read(n))) - {"__metadata__"}
written, base = keys(sys.argv[1]), keys(sys.argv[2])
ok = written == base and "model.diffusion_model.transformer_blocks.0.img_mod.1.weight" in written
print(f"full run: {len(written)} tensors, the base's names: {written == base}")
sys.exit(0 if ok else 1)
PY
  "$wick" train "$work/run.yaml" --no-progress --set name=again --set train.steps=1 \
    --set model.name_or_path="$work/out/full/model/full.safetensors" >"$work/again.log" 2>&1 ||
    fail "the full run's model file does not load as a base"
  # The default file: PEFT with diffusers' names (what QwenImagePipeline.load_lora_weights and ComfyUI read), the scale
  # baked in, img_mod.1 / txt_mod.1 included; save.format kohya: musubi-tuner's lora_unet_transformer_blocks_0_attn_to_q
  # for LoRA and DoRA.
  lora_file_checks <<'PY' || fail "the LoRA files' keys or metadata are not what diffusers, ComfyUI and musubi read"
import json
from safetensors_keys import expect, lora_header, report
meta, keys = lora_header("lora")
expect("peft (the default): 28 modules x (A, B)", len(keys) == 56)
for k, shape in {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": [4, 128],
                 "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.1.attn.add_k_proj.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.1.attn.to_add_out.lora_A.weight": [4, 128],
                 "transformer.transformer_blocks.0.img_mod.1.lora_B.weight": [768, 4],
                 "transformer.transformer_blocks.1.txt_mod.1.lora_A.weight": [4, 128],
                 "transformer.transformer_blocks.0.img_mlp.net.0.proj.lora_B.weight": [512, 4],
                 "transformer.transformer_blocks.1.txt_mlp.net.2.lora_A.weight": [4, 512]}.items():
    expect(f"peft: {k} {shape} (got {keys.get(k)})", keys.get(k) == shape)
expect("peft: only the blocks' Linears (the 'all' preset)",
       all(k.startswith("transformer.transformer_blocks.") for k in keys))
expect("peft: no kohya or alpha keys", not any("lora_unet" in k or k.endswith(".alpha") for k in keys))
adapter = json.loads(meta.get("lora_adapter_metadata", "{}"))
expect("peft: lora_adapter_metadata r 4, lora_alpha 4",
       adapter.get("transformer.r") == 4 and adapter.get("transformer.lora_alpha") == 4)
for k, v in {"ss_base_model_version": "qwen_image", "modelspec.architecture": "qwen-image/lora",
             "wick_lora_format": "peft", "ss_network_dim": "4"}.items():
    expect(f"peft metadata {k} = {v!r} (got {meta.get(k)!r})", meta.get(k) == v)
meta, keys = lora_header("dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.transformer_blocks.1.attn.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
meta, keys = lora_header("kohya")
expect("kohya: 28 modules x (down, up, alpha)", len(keys) == 84)
expect("kohya: musubi's to_q down/up",
       keys.get("lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight") == [4, 128]
       and keys.get("lora_unet_transformer_blocks_0_attn_to_q.lora_up.weight") == [128, 4])
expect("kohya: img_mod.1 as musubi names it", keys.get("lora_unet_transformer_blocks_1_img_mod_1.lora_up.weight")
       == [768, 4])
expect("kohya: alpha 0-d", keys.get("lora_unet_transformer_blocks_1_txt_mlp_net_2.alpha") == [])
expect("kohya: only lora_unet_ keys", all(k.startswith("lora_unet_") for k in keys))
expect("kohya metadata", meta.get("wick_lora_format") == "kohya" and meta.get("ss_network_alpha") == "4")
meta, keys = lora_header("kohya_dora")
expect("kohya DoRA: dora_scale [1, in]",
       keys.get("lora_unet_transformer_blocks_0_img_mlp_net_2.dora_scale") == [1, 512])
report("PEFT, PEFT DoRA, kohya, kohya DoRA")
PY
}

train_float8_row() {
  # The memory plan (estimates of this tiny run: plain 15.7 MB, checkpointing 13.8 MB, + float8 10.7 MB; with 2
  # blocks, swapping one costs more in its buffers than it saves, so no plan swaps).
  planned plan14 14.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan12 12.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  refused_plan plan10 10MB "no memory plan fits the 10.0 MB train.max_memory budget: the smallest estimate, with \
gradient checkpointing on, the base float8 and 0 blocks swapped, is 10.7 MB"
}

train_mpi_row() { :; }

# ---- arch_sample_test.sh qwenimage: committed test images with captions -> `wick dataset encode --model qwenimage
# --config` with the committed tiny Qwen-Image VAE (tests/data/qwenimage_vae/vae: the Wan VAE, x8, its per-channel
# latents_mean / latents_std recorded in the dataset) and the tiny Qwen2.5-VL of the sampler fixture (arch_fixture
# qwenimage sample-data writes it in full; hidden 32) with the Qwen tokenizer of tests/data/bpe -> a LoRA on the tiny
# Qwen-Image of tests/data/qwenimage (text 32). Sample grids with the default guidance 4 (true CFG with the stored
# negative prompt); guidance 1 is one forward per step.
sample_title=Qwen-Image
sample_text_label=Qwen2.5-VL
sample_vae=$data/qwenimage_vae/vae
sample_dataset=$work/qwenimage.h5
sample_cells=2                                # the run's 2 sample prompts, 32 x 32 images
sample_size="32 32"
sample_ab=("a photo of [trigger]" "a red cube")
sample_steps=3 sample_guidance=4
sample_one="a test card" sample_other_size="48 32"
sample_multiple=16 sample_bad_width=40
sample_no_encoders=(--set 'model.text_encoder_path=""' --set 'model.tokenizer_path=""')
sample_trigger=sks
sample_prompts='"a photo of [trigger]", "a test card"'
sample_negative=blurry
sample_pipeline_name=Qwen-Image-tiny
sample_pipeline_prompt="a red cube" sample_pipeline_size="48 32" sample_pipeline_train=""

sample_model() {  # the run's model: keys beside arch
  cat <<YAML
name_or_path: $data/qwenimage/transformer
vae_path: $data/qwenimage_vae/vae
text_encoder_path: $work/data/qwen25vl
tokenizer_path: $data/bpe/qwen3
max_length: 64
YAML
}

sample_prepare() {
  "$fixture" qwenimage sample-data "$work/data" "$data" || { echo "FAIL: the fixture program failed"; exit 1; }
  # 64 caption rows: the stored prompts' embeddings [3, 64, 32], no pooled vector; the VAE's per-channel lists.
  encode_sample_images "[3, 64, 32]" --vae "$data/qwenimage_vae/vae" --text-encoder "$work/data/qwen25vl" \
    --tokenizer "$data/bpe/qwen3" --max-length 64
  grep -qF "vae latents_mean" "$work/inspect.log" || fail "the dataset does not record the VAE's latents_mean"
}

sample_pipeline() {  # with a scheduler config of another base_shift
  mkdir -p "$pipeline/scheduler"
  ln -s "$data/qwenimage/transformer" "$pipeline/transformer"
  ln -s "$data/qwenimage_vae/vae" "$pipeline/vae"
  ln -s "$work/data/qwen25vl" "$pipeline/text_encoder"
  ln -s "$data/bpe/qwen3" "$pipeline/tokenizer"
  printf '{"_class_name": "QwenImagePipeline"}\n' >"$pipeline/model_index.json"
  printf '{"_class_name": "FlowMatchEulerDiscreteScheduler", "base_image_seq_len": 256, "base_shift": 0.6, '\
'"max_image_seq_len": 8192, "max_shift": 0.9, "shift_terminal": 0.02, "use_dynamic_shifting": true}\n' \
    >"$pipeline/scheduler/scheduler_config.json"
}

sample_row() {
  grep -qF "shift mu 0.6..0.9" "$work/pipeline.log" || fail "the pipeline run did not take its scheduler's base_shift"
  # True CFG: guidance 1 (one forward per step, no negative prompt) changes the images, and so does the negative prompt.
  expect 0 "guidance 1," "$work/sample_g1.log" sample "$work/out/run" --prompt "${sample_ab[0]}" \
    --prompt "${sample_ab[1]}" --n 2 --set sample.guidance=1 --out "$work/g1.png"
  cmp -s "$work/a.png" "$work/g1.png" && fail "guidance 1 wrote the same PNG as guidance 4"
  negative_prompt_checks
  # Without the encoder, only the stored prompts (and the stored negative prompt "blurry").
  stored_prompts_checks model.text_encoder_path
  expect 2 "do not hold \"grainy\"" "$work/sample_k.log" sample "$work/out/stored" --prompt "a test card" \
    --set 'sample.negative_prompt="grainy"' --out "$work/k.png"
}

# ---- arch_lora_diffusers_test.sh qwenimage: the fixture-sized Qwen-Image of tests/data/qwenimage (the diffusers
# folder: dim 64, 2 heads of 32, 2 blocks, text 32, axes [8, 12, 12] from its config.json) on qwenimage_sized.h5 (16
# latent channels in 6x10 and 8x4 buckets, 7 caption rows of 32), saved in qwenimage's default format, PEFT, LoRA and
# DoRA; the case's padded batch (latents [2, 16, 6, 10]: a 3x5 token grid, context [2, 9, 32] with its mask, sigma);
# check_qwenimage_lora.py loads it through QwenImagePipeline's lora_state_dict + load_lora_into_transformer. Then
# interop_row: the same LoRA in musubi-tuner's kohya names, which lora_state_dict converts.
interop_weights=transformer interop_check_weights=transformer
interop_model_keys=""
interop_network=""
interop_train_keys="timestep_sampling: shift, timestep_shift: 2.2"
interop_save=""
interop_dataset=qwenimage_sized.h5
interop_case=case.safetensors interop_case_output=output
interop_types="lora dora"

interop_row() {
  "$wick" train "$work/run.yaml" --no-progress --set name=kohya --set save.format=kohya >"$work/kohya.log" 2>&1 ||
    { tail -5 "$work/kohya.log"; fail "wick train (kohya) exited"; return; }
  local lora=$work/out/kohya/lora/kohya.safetensors
  "$fixture" qwenimage lora-case "$lora" "$fixtures/$interop_case" "$work/kohya_case.safetensors" ||
    { fail "arch_fixture qwenimage lora-case (kohya) failed"; return; }
  changes "$work/kohya_case.safetensors" "$fixtures/$interop_case" "$interop_case_output" "the kohya adapters" 0.05 ||
    fail "the kohya run barely changed the output"
  diffusers_gives "$fixtures/$interop_check_weights" "$work/kohya_case.safetensors" --lora "$lora" ||
    fail "diffusers does not load wick's kohya file (lora_unet_ names) or gives another output"
}
