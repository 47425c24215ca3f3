# Flux.1-dev's row of the end-to-end tests (tests/train/arch_*_test.sh, sourced by them; docs/testing.md "End-to-end
# tests per architecture"): what differs for Flux, and the checks only Flux has.

# ---- arch_train_test.sh flux: arch_fixture flux data's Flux.1-dev at real widths (16-channel latents, hidden 128
# with one head of 128, T5 4096, CLIP 768) with 2 double + 2 single blocks; flux.h5 stores a VAE distribution
# (latents_logvar), so every run draws its training latents (Philox (seed, id, epoch)).
train_model=flux_tiny.safetensors
train_model_keys="is_flux: true"
train_network=""
train_keys="noise_scheduler: flowmatch, timestep_type: flux_shift"
train_built="Flux.1-dev (2 double + 2 single blocks, hidden 128, f32) with 2536512 parameters (65536 trainable, lora)"
train_built_what="the tiny Flux with LoRA on the 'all' preset"
train_built_bf16="hidden 128, bf16)"
# Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps 1.664, last 10 1.251 (ratio 0.75; with the latents drawn
# from their distribution), about 50 ms per step at batch 2; DoRA 0.741, bf16 0.752, float8 0.751.
train_bound=0.85
train_dora=(--set network.type=dora)  # kohya's orientation (dora_scale [1, in]), flux's default file format
train_other_format=peft
train_comfyui_runs="lora dora peft"   # ComfyUI maps PEFT LoRA keys onto the fused weights too (scale 1, right for the
                                      # baked scale); it does not read PEFT's lora_magnitude_vector (no peft_dora)
train_quantize=true
train_float8_line="(65536 trainable, lora), 26 frozen Linears in float8 e4m3"
train_float8_what="the 26 block Linears"
train_swap_blocks=3
train_shard_weights=1     # the mpi part's distributed.shard: weights runs
train_gathers_per_step=8  # 4 blocks, each gathered in forward and again for its recomputation in backward

train_cli_row() {
  falls dora "$train_bound" || fail "the DoRA run's loss did not fall (or was not finite)"
  # The latents are drawn from the stored distribution: the same config with dataset.latent_sampling mean trains on
  # other latents, so its first loss differs; everything above (bitwise resume after --stop-after and kill -9) held
  # with the draws.
  train mean --set dataset.latent_sampling=mean --set train.steps=1
  grep -q "latent_sampling: mean" "$work/out/mean/config.yaml" || fail "the resolved config lacks latent_sampling: mean"
  first_losses_differ lora mean || fail "latent_sampling made no difference"
  # A fixed shift with guidance 3.5 (measured ratio 0.809).
  train shift --set train.timestep_sampling=shift --set model.guidance=3.5
  grep -q "timestep_sampling: shift" "$work/out/shift/config.yaml" &&
    grep -q "guidance: 3.5" "$work/out/shift/config.yaml" ||
    fail "the shift run's resolved config lacks timestep_sampling shift / guidance 3.5"
  falls shift 0.9 || fail "the shift + guidance 3.5 run's loss did not fall (or was not finite)"
  # The kohya files: kohya's names, shapes and metadata; save.format peft: diffusers' names, the scale baked in, the
  # PEFT DoRA magnitude.
  lora_file_checks <<'PY' || fail "the LoRA files' keys or metadata are not what kohya/ComfyUI and diffusers read"
import json
from safetensors_keys import expect, lora_header, report
meta, keys = lora_header("lora")
expect("kohya: 26 modules x (down, up, alpha)", len(keys) == 78)
expect("kohya: img_attn.qkv down/up", keys.get("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight") == [4, 128]
       and keys.get("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight") == [384, 4])
expect("kohya: linear1 up", keys.get("lora_unet_single_blocks_1_linear1.lora_up.weight") == [896, 4])
expect("kohya: alpha 0-d", keys.get("lora_unet_single_blocks_0_modulation_lin.alpha") == [])
expect("kohya: only lora_unet_ keys", all(k.startswith("lora_unet_") for k in keys))
for k, v in {"ss_network_dim": "4", "ss_network_alpha": "4", "ss_network_module": "networks.lora",
             "ss_base_model_version": "flux1", "modelspec.architecture": "flux-1-dev/lora",
             "modelspec.implementation": "https://github.com/black-forest-labs/flux"}.items():
    expect(f"kohya metadata {k} = {v!r} (got {meta.get(k)!r})", meta.get(k) == v)
meta, keys = lora_header("dora")
expect("DoRA: dora_scale [1, in]", keys.get("lora_unet_double_blocks_1_txt_mlp_2.dora_scale") == [1, 512])
expect("DoRA metadata", meta.get("wick_network_type") == "dora" and meta.get("ss_network_module") == "lycoris.kohya")
meta, keys = lora_header("peft")
expect("peft: 40 diffusers modules x (A, B)", len(keys) == 80)
for k, shape in {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": [4, 128],
                 "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.1.attn.add_v_proj.lora_B.weight": [128, 4],
                 "transformer.transformer_blocks.0.ff_context.net.0.proj.lora_A.weight": [4, 128],
                 "transformer.single_transformer_blocks.1.proj_mlp.lora_B.weight": [512, 4],
                 "transformer.single_transformer_blocks.0.norm.linear.lora_A.weight": [4, 128]}.items():
    expect(f"peft: {k} {shape} (got {keys.get(k)})", keys.get(k) == shape)
expect("peft: no kohya or alpha keys", not any("lora_unet" in k or k.endswith(".alpha") for k in keys))
adapter = json.loads(meta.get("lora_adapter_metadata", "{}"))
expect("peft: lora_adapter_metadata r 4, lora_alpha 4",
       adapter.get("transformer.r") == 4 and adapter.get("transformer.lora_alpha") == 4)
meta, keys = lora_header("peft_dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.single_transformer_blocks.0.attn.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
report("kohya, kohya DoRA, PEFT, PEFT DoRA")
PY
}

train_float8_row() {
  # The memory plan: with checkpointing, quantization and swapping at auto, --max-memory picks the cheapest that fits
  # (estimates of this tiny run: plain 24.7 MB, checkpointing 17.9 MB, + float8 13.3 MB, + 4 blocks swapped 12.8 MB).
  planned plan20 20.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan15 15.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  planned plan13 13.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 4"
  grep -m1 "4 blocks swapped (" "$work/plan13.log" || fail "plan13 did not swap the 4 blocks it planned"
  refused_plan plan6 6MB "no memory plan fits the 6.0 MB train.max_memory budget: the smallest estimate, with gradient \
checkpointing on, the base float8 and 4 blocks swapped, is 12.8 MB"
}

train_mpi_row() {
  # distributed.shard: weights on another rank count: a 2-rank run of global batch 3 (shares of 2 and 1) with the
  # weights sharded in two, 14 steps, its checkpoint at 10 resumed on 3 ranks with them sharded in three: the losses
  # continue within 1e-5 (the ranks' gradients are summed in another order).
  local g3=(--set train.global_batch_size=3 --set distributed.shard=weights --set train.steps=14)
  train_ranks 2 "$work/g3_two.log" --set name=g3_two "${g3[@]}"
  mkdir -p "$work/out/g3_three/checkpoints" && cp -r "$(step_dir g3_two 10)" "$work/out/g3_three/checkpoints/"
  train_ranks 3 "$work/g3_three.log" --set name=g3_three "${g3[@]}"
  grep -m1 "resuming from .*step_00000010" "$work/g3_three.log" || fail "the 3-rank run did not resume"
  grep -m1 "sharded over 3 ranks" "$work/g3_three.log" || fail "the 3-rank run did not shard its weights in three"
  python3 "$here/compare_losses.py" "$work/out/g3_two/metrics.jsonl" "$work/out/g3_three/metrics.jsonl" 11..14 \
    --tolerance 1e-5 || fail "the weights-sharded checkpoint moved from 2 to 3 ranks diverged"
  # distributed.shard: auto on 4 ranks (dry runs): a budget 0.1 MB under the checkpointed ZeRO-1 estimate makes the
  # memory plan shard the blocks' weights (exact) rather than quantize them.
  local g4=(--set train.global_batch_size=4 --set train.gradient_checkpointing=true --dry-run)
  train_ranks 4 "$work/g4_zero1.log" --set name=g4_zero1 "${g4[@]}"
  local zero1
  zero1=$(sed -n 's/^wick train: memory estimate per rank: .* = \([0-9.]*\) MB.*/\1/p' "$work/g4_zero1.log" | head -1)
  train_ranks 4 "$work/g4_auto.log" --set name=g4_auto "${g4[@]}" --set distributed.shard=auto \
    --set model.quantize=auto --max-memory "$(python3 -c "print(f'{float(\"$zero1\") - 0.1:.1f}MB')")"
  grep -m1 "memory plan: gradient checkpointing on, frozen base unquantized, 0 blocks swapped, the blocks' weights sharded over 4 ranks" \
    "$work/g4_auto.log" || fail "shard: auto under a budget below ZeRO-1's estimate did not shard the weights (ZeRO-1: ${zero1:-?} MB)"
}

# ---- arch_sample_test.sh flux: arch_fixture flux sample-data's Flux.1-dev whose widths fit the committed tiny VAE
# (tests/data/vae/flux_tiny: 16 latent channels, x2), CLIP-L (tests/data/clip_text/clip_l: pooled 16), T5
# (tests/data/t5: width 32) and tokenizers (tests/data/clip_tokenizer, tests/data/t5/spiece.model), with its dataset
# (8 samples in 8x12 and 12x8 latents, T5 length 8; no stored prompts).
sample_title=Flux
sample_vae=$data/vae/flux_tiny/vae
sample_dataset=$work/data/flux_sample.h5
sample_cells=3                               # the run's 3 sample prompts, 16 x 24 images
sample_size="24 16"
sample_ab=("a photo of a cat" "red")         # wick sample's two prompts
sample_steps=4 sample_guidance=3.5
sample_one="a photo of a cat" sample_other_size="40 32"
sample_multiple=4 sample_bad_width=42
sample_no_encoders=(--set 'model.clip_l_path=""' --set 'model.t5_path=""' --set 'model.clip_tokenizer_path=""'
                    --set 'model.t5_tokenizer_path=""')
sample_trigger=""
sample_prompts='"wide red stripes", "narrow blue stripes", "a photo of a cat"'
sample_negative=""
sample_pipeline_name=FLUX.1-tiny
sample_pipeline_prompt="a photo of a cat" sample_pipeline_size="32 24" sample_pipeline_train=""

sample_model() {  # the run's model: keys beside arch
  cat <<YAML
name_or_path: $work/data/flux_sample_tiny.safetensors
axes_dim: [4, 6, 6]
vae_path: $data/vae/flux_tiny/vae
clip_l_path: $data/clip_text/clip_l/model.safetensors
t5_path: $data/t5/t5xxl_comfy.safetensors
clip_tokenizer_path: $data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz
t5_tokenizer_path: $data/t5/spiece.model
YAML
}

sample_prepare() {
  "$fixture" flux sample-data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
}

sample_pipeline() {  # the tokenizer: open_clip's vocabulary file; the transformer's RoPE axes in its config.json
  mkdir -p "$pipeline/transformer" "$pipeline/tokenizer_2"
  cp "$work/data/flux_sample_tiny.safetensors" "$pipeline/transformer/diffusion_pytorch_model.safetensors"
  printf '{"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [4, 6, 6]}\n' >"$pipeline/transformer/config.json"
  printf '{"_class_name": "FluxPipeline"}\n' >"$pipeline/model_index.json"
  ln -s "$data/vae/flux_tiny/vae" "$pipeline/vae"
  ln -s "$data/clip_text/clip_l" "$pipeline/text_encoder"
  ln -s "$data/t5/pipeline/text_encoder_3" "$pipeline/text_encoder_2"
  ln -s "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$pipeline/tokenizer"
  cp "$data/t5/spiece.model" "$pipeline/tokenizer_2/"
}

sample_row() {
  # A missing T5 file is refused before step 1, naming the key; `wick sample` on the run without the parts names them.
  expect 2 "model.t5_path: /nonexistent/t5.safetensors: no such file" "$work/not5.log" train "$work/run.yaml" \
    --no-progress --set name=not5 --set model.t5_path=/nonexistent/t5.safetensors
  [ -e "$work/out/not5/metrics.jsonl" ] && fail "the run with a missing T5 file trained a step before being refused"
  expect 2 "model.clip_l_path" "$work/plain_sample.log" sample "$work/out/plain" --prompt x --out "$work/plain.png"
}

# ---- arch_lora_diffusers_test.sh flux: the fixture-sized Flux.1-dev of tests/data/flux (the diffusers folder
# dev_diffusers, RoPE axes from its config.json) on flux_dev_sized.h5 (4 latent channels, 7 tokens of 32, pooled 24),
# guidance 3.5, saved with save.format peft; check_flux_lora.py loads it through FluxLoraLoaderMixin.lora_state_dict +
# load_lora_into_transformer. diffusers loads PEFT's DoRA (lora_magnitude_vector) for Flux: the DoRA run trains the
# output-axis magnitude, the orientation save.format peft selects.
interop_weights=dev_diffusers interop_check_weights=dev_diffusers
interop_model_keys="guidance: 3.5"
interop_network=""
interop_train_keys=""
interop_save="format: peft"
interop_dataset=flux_dev_sized.h5
interop_case=dev_case.safetensors interop_case_output=output
interop_types="lora dora"
interop_row() { :; }
