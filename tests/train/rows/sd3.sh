# SD3.5's row of the end-to-end tests (tests/train/arch_*_test.sh, sourced by them; docs/testing.md "End-to-end tests
# per architecture"): what differs for SD3, and the checks only SD3 has.

# ---- arch_train_test.sh sd3: arch_fixture sd3 data's SD3.5-Medium-like MMDiT laid out as SAI's single files
# ("model.diffusion_model." names beside a VAE tensor; 16-channel latents, hidden 128 in heads of 64, 2 joint blocks,
# attn2 in block 0, QK norm, context 4096, pooled 2048); timestep_type shift = SD3's shift 3.
train_model=sd3.5_tiny.safetensors
train_model_keys="is_v3: true"
train_network=""
train_keys="noise_scheduler: flowmatch, timestep_type: shift"
train_built="SD3 (MMDiT) (2 joint blocks, hidden 128, 2 heads, QK norm, attn2 in 1 block, f32) with 2067776 parameters \
(43520 trainable, lora)"
train_built_what="the tiny SD3.5 with LoRA on the 'all' preset"
train_built_bf16="hidden 128, 2 heads, QK norm, attn2 in 1 block, bf16)"
# Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps 1.705, last 10 1.426 (ratio 0.837; the same run at lr
# 1e-9, learning nothing: 1.003), about 27 ms per step at batch 2. DoRA 0.838, bf16 0.837, mode 0.839, shifted
# logit-normal 0.836: bound 0.9 for every run.
train_bound=0.9
train_dora=(--set network.type=dora)  # PEFT's orientation (magnitude [out]), sd3's default file format
train_other_format=kohya
train_comfyui_runs="lora kohya kohya_dora"
train_quantize=true
# float8: the 19 Linears of the 2 joint blocks (7 + 5 in block 0 with attn2, 5 + 2 in the pre-only block 1); both
# joint blocks swapped.
train_float8_line="(43520 trainable, lora), 19 frozen Linears in float8 e4m3"
train_float8_what="the 19 joint-block Linears"
train_swap_blocks=2

train_cli_row() {
  falls dora "$train_bound" || fail "the DoRA run's loss did not fall (or was not finite)"
  # The mode density and the plain logit-normal.
  train mode --set train.timestep_sampling=mode --set train.timestep_shift=1
  grep -q "timestep_sampling: mode" "$work/out/mode/config.yaml" && grep -q "mode_scale: 1.29" "$work/out/mode/config.yaml" ||
    fail "the mode run's resolved config lacks timestep_sampling mode / mode_scale 1.29"
  falls mode 0.9 || fail "the mode run's loss did not fall (or was not finite)"
  train logit --set train.timestep_sampling=logit_normal --set train.timestep_shift=3
  falls logit 0.9 || fail "the shifted logit-normal run's loss did not fall (or was not finite)"

  # A full fine-tune (2 steps) writes the whole model in SAI's names, which loads as a base again.
  train full --set network.type=full --set train.steps=2 --set train.optimizer=adamw
  python3 - "$work/out/full/model/full.safetensors" <<'PY' || fail "the full run's model file is not the MMDiT in SAI's names"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    keys = set(json.loads(f.read(n))) - {"__metadata__"}
ok = "joint_blocks.0.x_block.attn2.qkv.weight" in keys and "pos_embed" in keys and len(keys) == 65
print(f"full run: {len(keys)} tensors in SAI names")
sys.exit(0 if ok else 1)
PY

  # ComfyUI's older SD3 map (no attn2 entries) loads the kohya file and drops exactly the attn2 keys of the PEFT file.
  comfyui_loads kohya --comfyui-map old || fail "ComfyUI's older map does not load the kohya file"
  old=$(comfyui_loads lora --comfyui-map old)
  not_loaded=$(grep -c "lora key not loaded" <<<"$old")
  attn2_not_loaded=$(grep "lora key not loaded" <<<"$old" | grep -c "\.attn2\.")
  echo "ComfyUI's older SD3 map on the PEFT file: $not_loaded keys not loaded, $attn2_not_loaded of them attn2"
  [ "$not_loaded" -eq 8 ] && [ "$attn2_not_loaded" -eq 8 ] || fail "the older map should drop exactly the 8 attn2 keys"
  # The default file: PEFT with diffusers' names, the scale baked in; save.format kohya: lora_unet_joint_blocks_...
  # for LoRA and DoRA (dora_scale [1, in]).
  lora_file_checks <<'PY' || fail "the LoRA files' keys or metadata are not what diffusers and kohya/ComfyUI read"
import json
from safetensors_keys import expect, lora_header, report
meta, keys = lora_header("lora")
expect("peft (the default): 29 diffusers modules x (A, B)", len(keys) == 58)
for k, shape in {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": [4, 128],
                 "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.0.attn2.to_v.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.0.attn.to_add_out.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.1.attn.add_k_proj.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.1.norm1_context.linear.lora_B.weight": [256, 4],
                 "transformer.transformer_blocks.0.norm1.linear.lora_B.weight": [1152, 4],
                 "transformer.transformer_blocks.1.ff.net.0.proj.lora_A.weight": [4, 128]}.items():
    expect(f"peft: {k} {shape} (got {keys.get(k)})", keys.get(k) == shape)
expect("peft: no kohya or alpha keys", not any("lora_unet" in k or k.endswith(".alpha") for k in keys))
expect("peft: no to_add_out / ff_context in the pre-only block",
       not any("transformer_blocks.1.attn.to_add_out" in k or "transformer_blocks.1.ff_context" in k for k in keys))
adapter = json.loads(meta.get("lora_adapter_metadata", "{}"))
expect("peft: lora_adapter_metadata r 4, lora_alpha 4",
       adapter.get("transformer.r") == 4 and adapter.get("transformer.lora_alpha") == 4)
for k, v in {"ss_base_model_version": "sd3", "modelspec.architecture": "stable-diffusion-3-5-medium/lora",
             "wick_lora_format": "peft", "ss_network_dim": "4"}.items():
    expect(f"peft metadata {k} = {v!r} (got {meta.get(k)!r})", meta.get(k) == v)
meta, keys = lora_header("dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.transformer_blocks.0.attn2.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
meta, keys = lora_header("kohya")
expect("kohya: 19 modules x (down, up, alpha)", len(keys) == 57)
expect("kohya: x_block.attn2.qkv down/up", keys.get("lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_down.weight") == [4, 128]
       and keys.get("lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_up.weight") == [384, 4])
expect("kohya: pre-only adaLN up", keys.get("lora_unet_joint_blocks_1_context_block_adaLN_modulation_1.lora_up.weight") == [256, 4])
expect("kohya: alpha 0-d", keys.get("lora_unet_joint_blocks_1_x_block_mlp_fc2.alpha") == [])
expect("kohya: only lora_unet_ keys", all(k.startswith("lora_unet_") for k in keys))
expect("kohya metadata", meta.get("wick_lora_format") == "kohya" and meta.get("ss_network_alpha") == "4")
meta, keys = lora_header("kohya_dora")
expect("kohya DoRA: dora_scale [1, in]", keys.get("lora_unet_joint_blocks_0_x_block_mlp_fc2.dora_scale") == [1, 512])
expect("kohya DoRA metadata", meta.get("wick_network_type") == "dora" and meta.get("ss_network_module") == "lycoris.kohya")
report("PEFT, PEFT DoRA, kohya, kohya DoRA")
PY
}

train_float8_row() {
  # The memory plan (estimates of this tiny run: plain 18.1 MB, checkpointing 15.9 MB, + float8 13.3 MB, + 1 or 2
  # blocks swapped 13.7 / 13.6 MB: with two blocks, the two blocks' device buffers outweigh what swapping frees, so
  # the plan does not swap).
  planned plan17 17.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan14 14.5MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  refused_plan plan10 10MB "no memory plan fits the 10.0 MB train.max_memory budget: the smallest estimate, with \
gradient checkpointing on, the base float8 and 0 blocks swapped, is 13.3 MB"
}

train_mpi_row() { :; }

# ---- arch_sample_test.sh sd3: committed test images with captions -> `wick dataset encode --model sd3 --config` with
# the committed tiny 16-channel VAE (tests/data/vae/flux_tiny), CLIP-L (pooled unprojected, as SAI and ComfyUI), bigG
# and T5 (tests/data/clip_text, tests/data/prompts/sd3_t5) -> a LoRA on the tiny SD3.5-Medium-like transformer of the
# parity fixture (tests/data/sd3_sample/transformer: context 48, pooled 16 + 32).
sample_title=SD3
sample_vae=$data/vae/flux_tiny/vae
sample_dataset=$work/sd3.h5
sample_cells=2                                # the run's 2 sample prompts, 32 x 32 images
sample_size="32 32"
sample_ab=("a photo of [trigger]" "a red cube")
sample_steps=3 sample_guidance=4.5
sample_one="a test card" sample_other_size="40 24"
sample_multiple=4 sample_bad_width=42
sample_no_encoders=(--set 'model.clip_l_path=""' --set 'model.clip_g_path=""' --set 'model.t5_path=""'
                    --set 'model.clip_tokenizer_path=""' --set 'model.t5_tokenizer_path=""')
sample_trigger=sks
sample_prompts='"a photo of [trigger]", "a test card"'
sample_negative=blurry
sample_pipeline_name=stable-diffusion-3.5-tiny
sample_pipeline_prompt="a red cube" sample_pipeline_size="40 24" sample_pipeline_train=""

sample_model() {  # the run's model: keys beside arch
  cat <<YAML
name_or_path: $data/sd3_sample/transformer
vae_path: $data/vae/flux_tiny/vae
clip_l_path: $data/clip_text/clip_l/model.safetensors
clip_g_path: $data/clip_text/clip_g/model.safetensors
t5_path: $data/prompts/sd3_t5
clip_tokenizer_path: $data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz
t5_tokenizer_path: $data/t5/spiece.model
YAML
}

sample_prepare() {
  # T5 length 8: the stored prompts' embeddings [3, 77 + 8, 48].
  encode_sample_images "[3, 85, 48]" --vae "$data/vae/flux_tiny/vae" \
    --clip-l "$data/clip_text/clip_l/model.safetensors" --clip-g "$data/clip_text/clip_g/model.safetensors" \
    --t5 "$data/prompts/sd3_t5" --clip-vocab "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" \
    --t5-tokenizer "$data/t5/spiece.model" --clip-l-pooled unprojected --t5-length 8
}

sample_pipeline() {  # with its scheduler's shift
  mkdir -p "$pipeline/tokenizer_3" "$pipeline/scheduler"
  ln -s "$data/sd3_sample/transformer" "$pipeline/transformer"
  ln -s "$data/vae/flux_tiny/vae" "$pipeline/vae"
  ln -s "$data/clip_text/clip_l" "$pipeline/text_encoder"
  ln -s "$data/clip_text/clip_g" "$pipeline/text_encoder_2"
  ln -s "$data/prompts/sd3_t5" "$pipeline/text_encoder_3"
  ln -s "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$pipeline/tokenizer"
  cp "$data/t5/spiece.model" "$pipeline/tokenizer_3/"
  printf '{"_class_name": "StableDiffusion3Pipeline"}\n' >"$pipeline/model_index.json"
  printf '{"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 2.0}\n' \
    >"$pipeline/scheduler/scheduler_config.json"
}

sample_row() {
  grep -qF "shift 2," "$work/pipeline.log" || fail "the pipeline run did not take its scheduler's shift"
  negative_prompt_checks
  expect 2 "position table of 10x10 patches" "$work/sample_g.log" sample "$work/out/run" --prompt x --width 48 \
    --height 48 --out "$work/g.png"
  # Without the encoders, only the stored prompts and negative prompt: others are refused naming them and the keys
  # (a --prompt when the images are made; a negative prompt, in every image, before).
  stored_prompts_checks model.clip_g_path
  expect 2 "the sample prompts stored in $work/sd3.h5 do not hold \"grainy\"" "$work/sample_j.log" sample \
    "$work/out/stored" --prompt "a test card" --set 'sample.negative_prompt="grainy"' --out "$work/j.png"
  expect 0 "wrote $work/j1.png" "$work/sample_j1.log" sample "$work/out/stored" --prompt "a test card" \
    --set 'sample.negative_prompt="grainy"' --set sample.guidance=1 --out "$work/j1.png"   # no guidance: not needed
  # The schedule's shift: model.sample_shift changes the images.
  expect 0 "shift 3," "$work/shift3.log" sample "$work/out/run" --prompt "a test card" --n 1 --out "$work/k3.png"
  expect 0 "shift 1.5," "$work/shift15.log" sample "$work/out/run" --prompt "a test card" --n 1 \
    --set model.sample_shift=1.5 --out "$work/k15.png"
  cmp -s "$work/k3.png" "$work/k15.png" && fail "another shift wrote the same PNG"
}

# ---- arch_lora_diffusers_test.sh sd3: the fixture-sized SD3.5 Medium of tests/data/sd3 (the diffusers folder
# medium_diffusers: 3 blocks, attn2 in two, QK norm) on sd3_medium_sized.h5 (16 latent channels in 8x8 and 6x10
# buckets, 7 tokens of 32, pooled 64), saved in sd3's default format, PEFT; the case's square latents;
# check_sd3_lora.py loads it through SD3LoraLoaderMixin.lora_state_dict + load_lora_into_transformer. The DoRA run
# trains the output-axis magnitude (PEFT's lora_magnitude_vector), the orientation save.format peft selects.
interop_weights=medium_diffusers interop_check_weights=medium_diffusers
interop_model_keys=""
interop_network=""
interop_train_keys="timestep_sampling: shift"
interop_save=""
interop_dataset=sd3_medium_sized.h5
interop_case=medium_case.safetensors interop_case_output=output_square
interop_types="lora dora"
interop_row() { :; }
