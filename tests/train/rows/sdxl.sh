# SDXL's row of the end-to-end tests (tests/train/arch_*_test.sh, sourced by them; docs/testing.md "End-to-end tests
# per architecture"): what differs for SDXL, and the checks only SDXL has.

# ---- arch_train_test.sh sdxl: arch_fixture sdxl data's SDXL-like UNet laid out as sd_xl_base_1.0.safetensors (sgm's
# names under "model.diffusion_model." beside a VAE tensor; 4-channel latents, 2 levels 32/64, heads of 32 via
# model.head_dim) and cached latents with original_size and crop per sample. DDPM (ε-prediction by default) with
# min-SNR-γ 5 and a noise offset; LoRA on the transformers' Linears and the resnets' 1x1 / Linear layers, LoCon
# (rank 2, alpha 1, kohya's conv_dim / conv_alpha) on the 3x3 convolutions.
train_model=sdxl_tiny.safetensors
train_model_keys="is_xl: true, head_dim: 32"
train_network="conv: 2, conv_alpha: 1"
train_keys="min_snr_gamma: 5, noise_offset: 0.0357"
train_built="SDXL-like UNet (2 levels 32/64, transformer depth 0/1, middle 1, f32) with .* trainable, lora)"
train_built_what="the tiny SDXL UNet with adapters"
train_built_bf16="transformer depth 0/1, middle 1, bf16)"
train_bound=0.9  # measured: 0.559 (bf16 0.558, fp16 0.558)
train_resume_variants=0  # the kill -9 and the DoRA / bf16 resumes run in the flux and sd3 rows (shared checkpoint code)
# DoRA on the transformers' Linears alone (kohya's dora_scale [1, in], sdxl's default format; LoCon needs lora): this
# UNet's loss falls mostly through its convolutions, so train_cli_row compares DoRA with the same run at lr 1e-9.
train_dora=(--set network.type=dora --set network.conv=0)
train_other_format=""
train_comfyui_runs="lora dora"
# float8: the Linears of input_blocks, middle_block and output_blocks (12 resnets' emb_layers.1, 6 transformers'
# proj_in, proj_out and 10 block Linears; the convolutions stay f32); every block swapped: input_blocks.0-5,
# middle_block, output_blocks.0-5.
train_quantize=float8
train_float8_line="trainable, lora), 84 frozen Linears in float8 e4m3"
train_float8_what="the 84 block Linears"
train_swap_blocks=13
train_shard_weights=1      # the mpi part's distributed.shard: weights runs
train_gathers_per_step=25  # 13 blocks in forward, 12 in backward: input_blocks.0 (conv_in: no adapter, no input
                           # gradient) is not recomputed; backward's prefetch of it serves the next step's forward

train_cli_row() {
  grep -q "noise_scheduler: ddpm" "$work/out/lora/config.yaml" && grep -q "prediction_type: epsilon" \
    "$work/out/lora/config.yaml" || fail "the resolved config is not DDPM ε-prediction"
  # The micro-conditioning comes from the file: the same samples without original_size / crop train differently.
  train no_sizes --set train.steps=2 --set "datasets.0.path=$work/data/sdxl_no_sizes.h5"
  first_losses_differ lora no_sizes || fail "the dataset's original_size / crop did not reach the model"
  # v-prediction and DoRA learn: step by step below the same run at lr 1e-9 (measured: v-prediction's last 10 losses
  # 0.71 of the untrained run's; DoRA 0.990, each of the 10 lower).
  train vpred --set train.prediction_type=v_prediction
  train vpred_still --set train.prediction_type=v_prediction --set train.lr=1e-9
  grep -q "prediction_type: v_prediction" "$work/out/vpred/config.yaml" || fail "the v run's config lacks v_prediction"
  learns vpred vpred_still 0.85 || fail "the v-prediction run did not learn (or was not finite)"
  train dora_still "${train_dora[@]}" --set train.lr=1e-9
  learns dora dora_still 0.995 || fail "the DoRA run did not learn (or was not finite)"
  "$wick" train "$work/run.yaml" --no-progress --set name=dora_conv --set network.type=dora >"$work/dora_conv.log" 2>&1
  status=$?
  [ "$status" -eq 2 ] && grep -q "network.conv .* LoCon needs network.type lora" "$work/dora_conv.log" ||
    fail "DoRA with network.conv was not refused with the reason ($status)"
  train fp16 --set train.mixed_precision=fp16
  grep -m1 "transformer depth 0/1, middle 1, f16)" "$work/fp16.log" || fail "the fp16 run did not compute in f16"
  falls fp16 0.9 || fail "the fp16 run (dynamic loss scaling) did not fall (or was not finite)"

  # The kohya files (the default): lora_unet_<sgm path>, alpha, LoCon down [r, in, 3, 3]; DoRA's dora_scale [1, in].
  python3 "$here/safetensors_keys.py" "$work/out/lora/lora/lora.safetensors" >"$work/lora_keys.txt"
  python3 "$here/safetensors_keys.py" "$work/out/dora/lora/dora.safetensors" >"$work/dora_keys.txt"
  for expected in "lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q.lora_down.weight [4, 64]" \
                  "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_down.weight [4, 64]" \
                  "lora_unet_input_blocks_1_0_in_layers_2.lora_down.weight [2, 32, 3, 3]" \
                  "lora_unet_input_blocks_1_0_in_layers_2.lora_up.weight [32, 2, 1, 1]" \
                  "lora_unet_output_blocks_2_2_conv.lora_down.weight [2, 64, 3, 3]" \
                  "lora_unet_input_blocks_4_0_skip_connection.lora_down.weight [4, 32, 1, 1]" \
                  "lora_unet_input_blocks_1_0_emb_layers_1.lora_up.weight [32, 4]" \
                  "lora_unet_middle_block_1_proj_out.alpha []"; do
    grep -qxF "$expected" "$work/lora_keys.txt" || fail "the LoRA file lacks $expected"
  done
  grep -qxF "lora_unet_output_blocks_0_1_transformer_blocks_0_ff_net_2.dora_scale [1, 256]" "$work/dora_keys.txt" ||
    fail "the DoRA file lacks dora_scale [1, in]"
  ! grep -q "in_layers_2" "$work/dora_keys.txt" || fail "the DoRA run (network.conv 0) adapted a 3x3 convolution"
  echo "kohya files: lora $(wc -l <"$work/lora_keys.txt") tensors, dora $(wc -l <"$work/dora_keys.txt")"

  # A full fine-tune (2 steps, 8-bit AdamW) writes the single file back: sgm's names under model.diffusion_model., the
  # VAE tensor beside them; it trains again as a base.
  train full --set network.type=full --set network.conv=0 --set train.steps=2
  full=$work/out/full/model/full.safetensors
  python3 "$here/safetensors_keys.py" "$full" >"$work/full_keys.txt"
  python3 "$here/safetensors_keys.py" "$model" >"$work/base_keys.txt"
  cmp -s "$work/full_keys.txt" "$work/base_keys.txt" || fail "the full run's file does not have the base file's names"
  python3 "$here/same_tensors.py" "$full" "$model" >/dev/null 2>&1 && fail "the full run's weights did not change"
  train from_full --set "model.name_or_path=$full" --set train.steps=2
  grep -m1 "SDXL-like UNet (2 levels 32/64" "$work/from_full.log" || fail "the full run's file did not load as a base"
}

train_float8_row() {
  # The memory plan (estimates of this tiny run: plain 26.4 MB, checkpointing 12.9 MB, + float8 11.2 MB, + all 13
  # blocks swapped 8.7 MB): --max-memory 10MB takes float8 and the fewest blocks that fit (7: output_blocks.5 back to
  # middle_block), writes them into the resolved config and streams them; 6 MB is refused.
  planned plan10 10MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 7"
  grep -m1 "memory plan: gradient checkpointing on, frozen base float8 e4m3, 7 blocks swapped; expected peak 9.7 MB \
of the 10.0 MB train.max_memory budget" "$work/plan10.log" || fail "the 10 MB plan is not float8 with 7 blocks swapped"
  grep -m1 "7 blocks swapped (" "$work/plan10.log" | grep -q "84 frozen Linears in float8" ||
    fail "plan10 did not build the model it planned"
  refused_plan plan6 6MB "no memory plan fits the 6.0 MB train.max_memory budget: the smallest estimate, with gradient \
checkpointing on, the base float8 and 13 blocks swapped, is 8.7 MB"
}

train_mpi_row() {
  # A full fine-tune with 8-bit AdamW, 5 steps: 2 ranks with ZeRO-1 against 1.
  local full=(--set network.type=full --set network.conv=0 --set train.steps=5)
  train full_one "${full[@]}"
  train_ranks 2 "$work/full_two.log" --set name=full_two "${full[@]}" --set train.batch_size=1 \
    --set distributed.shard_optimizer=true
  python3 "$here/compare_losses.py" "$work/out/full_one/metrics.jsonl" "$work/out/full_two/metrics.jsonl" 5 \
    --tolerance 1e-5 || fail "1-rank and 2-rank full fine-tune losses differ beyond 1e-5"
  # Sharded weights are frozen weights: a full fine-tune with distributed.shard: weights is refused (status 2).
  timeout 120 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=full_sharded \
    "${full[@]}" --set train.batch_size=1 --set distributed.shard=weights >"$work/full_sharded.log" 2>&1
  [ $? = 2 ] && grep -q "network.type full trains them all" "$work/full_sharded.log" ||
    fail "a full fine-tune with distributed.shard: weights was not refused with status 2"
}

# ---- arch_sample_test.sh sdxl: committed test images with captions -> `wick dataset encode --model sdxl --config`
# with the committed tiny 4-channel VAE (tests/data/vae/sdxl_tiny, x4), CLIP-L and bigG (tests/data/clip_text) -> a
# LoRA on the tiny SDXL-like UNet of the parity fixture (tests/data/sdxl_sample/unet: context 32, pooled 32).
sample_title=SDXL
sample_vae=$data/vae/sdxl_tiny/vae
sample_dataset=$work/sdxl.h5
sample_cells=2                                # the run's 2 sample prompts, 32 x 32 images
sample_size="32 32"
sample_ab=("a photo of [trigger]" "a red cube")
sample_steps=3 sample_guidance=5
sample_one="a test card" sample_other_size="40 24"
sample_multiple=8 sample_bad_width=36
sample_no_encoders=(--set 'model.clip_l_path=""' --set 'model.clip_g_path=""' --set 'model.clip_tokenizer_path=""')
sample_trigger=sks
sample_prompts='"a photo of [trigger]", "a test card"'
sample_negative=blurry
sample_pipeline_name=stable-diffusion-xl-tiny
sample_pipeline_prompt="a red cube" sample_pipeline_size="40 24" sample_pipeline_train="prediction_type: v_prediction"

sample_model() {  # the run's model: keys beside arch
  cat <<YAML
name_or_path: $data/sdxl_sample/unet
vae_path: $data/vae/sdxl_tiny/vae
clip_l_path: $data/clip_text/clip_l/model.safetensors
clip_g_path: $data/clip_text/clip_g/model.safetensors
clip_tokenizer_path: $data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz
YAML
}

sample_prepare() {
  encode_sample_images "[3, 77, 32]" --vae "$data/vae/sdxl_tiny/vae" \
    --clip-l "$data/clip_text/clip_l/model.safetensors" --clip-g "$data/clip_text/clip_g/model.safetensors" \
    --clip-vocab "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"
}

sample_pipeline() {  # trained with v-prediction
  ln -s "$data/sdxl_sample/unet" "$pipeline/unet"
  ln -s "$data/vae/sdxl_tiny/vae" "$pipeline/vae"
  ln -s "$data/clip_text/clip_l" "$pipeline/text_encoder"
  ln -s "$data/clip_text/clip_g" "$pipeline/text_encoder_2"
  ln -s "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$pipeline/tokenizer"
  printf '{"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": true}\n' \
    >"$pipeline/model_index.json"
}

sample_row() {
  grep -qF "v-prediction" "$work/pipeline.log" || fail "the pipeline run did not take v-prediction"
  negative_prompt_checks
  stored_prompts_checks model.clip_g_path
  # The empty negative prompt is zeroed (SDXL base's force_zeros_for_empty_prompt): no encoder needed for it, and other
  # images than "blurry"'s (h.png: the stored run's).
  expect 0 "zero embeddings" "$work/sample_g.log" sample "$work/out/stored" --prompt "a test card" --n 1 \
    --set 'sample.negative_prompt=""' --out "$work/g.png"
  cmp -s "$work/g.png" "$work/h.png" && fail "the zeroed empty negative prompt wrote the PNG of \"blurry\""
}

# ---- arch_lora_diffusers_test.sh sdxl: the tiny UNet of tests/data/sdxl as the LDM single file (tiny_ldm.safetensors:
# 3 levels 8/16/16, heads of 8, 4 GroupNorm groups, 8-wide size sinusoids) on sdxl_tiny_sized.h5 (4 latent channels in
# 16x16 and 8x12 buckets, 7 tokens of 32, pooled 16, original_size and crop); LoRA on the default preset with LoCon rank
# 2 alpha 1, saved in sdxl's default format, kohya; check_sdxl_lora.py loads it through diffusers' SDXL LoRA path
# (lora_state_dict + load_lora_into_unet on the tiny_diffusers folder). diffusers drops kohya's dora_scale for SDXL
# (docs/training.md "SDXL LoRA"): no DoRA case.
interop_weights=tiny_ldm.safetensors interop_check_weights=tiny_diffusers
interop_model_keys="head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8"
interop_network="conv: 2, conv_alpha: 1"
interop_train_keys=""
interop_save=""
interop_dataset=sdxl_tiny_sized.h5
interop_case=case.safetensors interop_case_output=output_square
interop_types="lora"

interop_row() {
  # A full fine-tune (2 steps) of the diffusers folder is written back as a diffusers folder, which diffusers'
  # UNet2DConditionModel.from_pretrained loads and runs to wick's output.
  "$wick" train "$work/run.yaml" --no-progress --set name=full --set network.type=full --set network.conv=0 \
    --set "model.name_or_path=$fixtures/tiny_diffusers" --set train.steps=2 >"$work/full.log" 2>&1 ||
    { tail -5 "$work/full.log"; fail "wick train (full) exited"; }
  local folder=$work/out/full/model/full
  "$fixture" sdxl model-case "$folder" "$fixtures/case.safetensors" "$work/full_case.safetensors" ||
    fail "arch_fixture sdxl model-case failed"
  changes "$work/full_case.safetensors" "$fixtures/case.safetensors" output_square "the full fine-tune" 1e-3 ||
    fail "the full run did not change the output"
  diffusers_gives "$folder" "$work/full_case.safetensors" ||
    fail "diffusers does not load wick's full fine-tune folder or gives another output"
}
