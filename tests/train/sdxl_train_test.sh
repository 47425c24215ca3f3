#!/usr/bin/env bash
# SDXL LoRA training end to end on the CPU, with a config in ai-toolkit's shape (config.process, is_xl, network
# linear/linear_alpha and conv/conv_alpha for LoCon, adamw8bit, gradient checkpointing, min-SNR-γ, noise offset), on
# a tiny random SDXL-like UNet laid out as sd_xl_base_1.0.safetensors (tests/train/sdxl_fixture.cpp: sgm's names under
# "model.diffusion_model." beside a VAE tensor; 4-channel latents in 16x16, 16x24 and 24x16 buckets with
# original_size and crop per sample).
#   sdxl_train_test.sh cli WICK FIXTURE WORK_DIR
#     DDPM (ε-prediction by default) LoRA + LoCon: the loss is finite and falls over 30 steps; --stop-after 10 +
#     --resume auto repeats the straight run's losses and final adapters bitwise; the micro-conditioning is read from
#     the dataset (a file without original_size / crop gives other losses); v-prediction and DoRA runs learn (step
#     by step below the same run at lr 1e-9), DoRA with LoCon is refused, bf16 and fp16 fall; the default LoRA file is
#     kohya's (lora_unet_<sgm path>, alpha, LoCon down [r, in, 3, 3]) and every key loads under ComfyUI's key rule
#     (tests/reference/comfyui_lora_keys.py); a full fine-tune writes the single file back in sgm's names with the
#     VAE tensor beside them, and that file trains again as a base.
#   sdxl_train_test.sh float8 WICK FIXTURE WORK_DIR
#     model.quantize: float8 (the Linears of input_blocks, middle_block and output_blocks as e4m3; the convolutions
#     stay f32) with LoRA + LoCon: the loss falls, --stop-after + resume is bitwise; train.blocks_to_swap: 13 (every
#     block streamed) repeats the unswapped run bitwise; --max-memory 10MB with the memory settings at auto plans float8
#     and 7 swapped blocks and trains with them.
#   sdxl_train_test.sh mpi MPIEXEC WICK FIXTURE WORK_DIR
#     2 ranks with batch 1 each and ZeRO-1 log the losses of 1 rank with batch 2 (1e-5): LoRA + LoCon, 30 steps, and
#     a full fine-tune with 8-bit AdamW, 5 steps.
set -u
part=$1
shift
mpiexec=""
if [ "$part" = mpi ]; then mpiexec=$1; shift; fi
wick=$1 fixture=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
reference=$(cd "$here/../reference" && pwd)
started=$(date +%s.%N)
rm -rf "$work" && mkdir -p "$work"
"$fixture" data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
model=$work/data/sdxl_tiny.safetensors
cat >"$work/run.yaml" <<YAML
job: extension
config:
  name: run
  process:
    - type: sd_trainer
      training_folder: $work/out
      device: cpu
      network: {type: lora, linear: 4, linear_alpha: 4, conv: 2, conv_alpha: 1}
      save: {dtype: f32, save_every: 10, max_step_saves_to_keep: 0}
      datasets:
        - folder_path: $work/data/sdxl.h5
      train:
        batch_size: 2
        steps: 30
        gradient_checkpointing: true
        optimizer: adamw8bit
        lr: 1e-2
        min_snr_gamma: 5
        noise_offset: 0.0357
        log_every: 1
      model: {name_or_path: $model, is_xl: true, head_dim: 32}
      sample: {sample_every: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() {  # train NAME ARGS...
  local name=$1
  shift
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$work/$name.log" 2>&1 ||
    { fail "wick train $name $* exited $?"; tail -5 "$work/$name.log"; }
}
step_dir() { printf "%s/out/%s/checkpoints/step_%08d" "$work" "$1" "$2"; }
same_run() {  # same_run A B: the same 30 losses, final adapters and LoRA file, bitwise
  python3 "$here/compare_losses.py" "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" 30 ||
    fail "$2's losses differ from $1's"
  python3 "$here/same_tensors.py" "$(step_dir "$1" 30)/model.safetensors" "$(step_dir "$2" 30)/model.safetensors" ||
    fail "$2's final adapters differ from $1's"
  python3 "$here/same_tensors.py" "$work/out/$1/lora/$1.safetensors" "$work/out/$2/lora/$2.safetensors" ||
    fail "$2's LoRA file differs from $1's"
}
falls() {  # falls NAME RATIO: finite losses; mean of the last 10 below RATIO x the mean of the first 10
  python3 - "$work/out/$1/metrics.jsonl" "$2" <<'PY'
import json, math, sys
rows = {}
for line in open(sys.argv[1]):
    try: o = json.loads(line)
    except ValueError: continue
    rows[o["step"]] = o
steps = sorted(rows)
loss = [rows[s]["loss"] for s in steps]
finite = all(v is not None and math.isfinite(v) for v in loss)
if not finite or len(loss) < 20:
    print(f"{sys.argv[1]}: {len(loss)} losses, finite: {finite}")
    sys.exit(1)
first, last = sum(loss[:10]) / 10, sum(loss[-10:]) / 10
per_step = (rows[steps[-1]]["elapsed_s"] - rows[steps[0]]["elapsed_s"]) / (len(steps) - 1)
print(f"{sys.argv[1].split('/')[-2]}: loss first 10 steps {first:.4f}, last 10 {last:.4f} (ratio {last / first:.3f}, "
      f"bound {sys.argv[2]}), {per_step * 1000:.0f} ms/step")
sys.exit(0 if last < float(sys.argv[2]) * first else 1)
PY
}
header_keys() {  # header_keys FILE: prints "key shape" per tensor
  python3 - "$1" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    h = json.loads(f.read(n))
for k, v in sorted(h.items()):
    if k != "__metadata__": print(k, v["shape"])
PY
}

if [ "$part" = float8 ]; then
  # (a) The 84 block Linears (12 resnets' emb_layers.1, 6 transformers' proj_in, proj_out and 10 block Linears) in
  # float8 e4m3 with per-row scales: the loss falls; --stop-after 10 + resume repeats the straight run bitwise.
  train f8 --set model.quantize=float8
  grep -m1 "trainable, lora), 84 frozen Linears in float8 e4m3" "$work/f8.log" ||
    fail "the quantize: float8 run did not store the 84 block Linears as float8"
  falls f8 0.9 || fail "the float8 run's loss did not fall (or was not finite)"
  train f8_parts --set model.quantize=float8 --stop-after 10
  train f8_parts --set model.quantize=float8
  grep -m1 "resuming from .*step_00000010" "$work/f8_parts.log" || fail "f8_parts did not resume from step 10"
  same_run f8 f8_parts
  # (b) train.blocks_to_swap: 13 (input_blocks.0-5, middle_block, output_blocks.0-5: every block's frozen weights in
  # host memory, copied in as the block runs; on the CPU build the same code path with host copies): bitwise the
  # unswapped float8 run.
  train f8swap --set model.quantize=float8 --set train.blocks_to_swap=13
  grep -m1 "13 blocks swapped (.* of frozen weights in host memory" "$work/f8swap.log" ||
    fail "the blocks_to_swap run did not report its swapped blocks"
  same_run f8 f8swap
  # (c) The memory plan with checkpointing, quantization and swapping at auto (estimates of this tiny run: plain 26.4
  # MB, checkpointing 12.9 MB, + float8 11.2 MB, + all 13 blocks swapped 8.7 MB): --max-memory 10MB takes float8 and
  # the fewest blocks that fit (7: output_blocks.5 back to middle_block), writes them into the resolved config and
  # streams them.
  train plan10 --set train.steps=2 --set model.quantize=auto --set train.gradient_checkpointing=auto --max-memory 10MB
  grep -m1 "memory plan: gradient checkpointing on, frozen base float8 e4m3, 7 blocks swapped; expected peak 9.7 MB \
of the 10.0 MB train.max_memory budget" "$work/plan10.log" || fail "the 10 MB plan is not float8 with 7 blocks swapped"
  for line in "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 7"; do
    grep -q "^  $line\$" "$work/out/plan10/config.yaml" || fail "plan10: the resolved config lacks '$line'"
  done
  grep -m1 "7 blocks swapped (" "$work/plan10.log" | grep -q "84 frozen Linears in float8" ||
    fail "plan10 did not build the model it planned"
  echo "sdxl_train_test.sh float8: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
    "$started" "$(date +%s.%N)") s, $failures failures"
  exit $((failures > 0))
fi

if [ "$part" = mpi ]; then
  train one
  timeout 240 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=two \
    --set train.batch_size=1 --set distributed.shard_optimizer=true >"$work/two.log" 2>&1 ||
    { fail "mpirun -np 2 wick train exited $?"; tail -8 "$work/two.log"; }
  grep -m1 "2 ranks (mpi on cpu): gradients reduce-scattered .* optimizer state sharded (ZeRO-1)" "$work/two.log" ||
    fail "the 2-rank run did not shard its optimizer state (ZeRO-1)"
  python3 "$here/compare_losses.py" "$work/out/one/metrics.jsonl" "$work/out/two/metrics.jsonl" 30 --tolerance 1e-5 ||
    fail "1-rank and 2-rank losses differ beyond 1e-5"
  # A full fine-tune with 8-bit AdamW, 5 steps: 2 ranks with ZeRO-1 against 1.
  full=(--set network.type=full --set network.conv=0 --set train.steps=5)
  train full_one "${full[@]}"
  timeout 240 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name=full_two \
    "${full[@]}" --set train.batch_size=1 --set distributed.shard_optimizer=true >"$work/full_two.log" 2>&1 ||
    { fail "mpirun -np 2 wick train (full) exited $?"; tail -8 "$work/full_two.log"; }
  python3 "$here/compare_losses.py" "$work/out/full_one/metrics.jsonl" "$work/out/full_two/metrics.jsonl" 5 \
    --tolerance 1e-5 || fail "1-rank and 2-rank full fine-tune losses differ beyond 1e-5"
  echo "sdxl_train_test.sh mpi: $failures failures"
  exit $((failures > 0))
fi

# (a) The straight run: DDPM ε by default, LoRA on the transformers' Linears and the resnets' 1x1 / Linear layers,
# LoCon (rank 2) on the 3x3 convolutions; the model read from the single file, its sizes from the shapes.
train lora
grep -m1 "SDXL-like UNet (2 levels 32/64, transformer depth 0/1, middle 1, f32) with .* trainable, lora)" \
  "$work/lora.log" || fail "the run did not build the tiny SDXL UNet with adapters"
grep -q "noise_scheduler: ddpm" "$work/out/lora/config.yaml" && grep -q "prediction_type: epsilon" \
  "$work/out/lora/config.yaml" || fail "the resolved config is not DDPM ε-prediction"
falls lora 0.9 || fail "the LoRA run's loss did not fall (or was not finite)"

# (b) --stop-after 10, then --resume auto: the same losses and final adapters, bitwise.
train parts --stop-after 10
[ "$(python3 "$here/last_step.py" "$work/out/parts/metrics.jsonl")" = 10 ] || fail "--stop-after 10 did not stop at 10"
train parts --resume auto
grep -m1 "resuming from .*step_00000010" "$work/parts.log" || fail "the second run did not resume from step 10"
same_run lora parts

# (c) The micro-conditioning comes from the file: the same samples without original_size / crop train differently.
train no_sizes --set train.steps=2 --set "datasets.0.path=$work/data/sdxl_no_sizes.h5"
python3 - "$work/out/lora/metrics.jsonl" "$work/out/no_sizes/metrics.jsonl" <<'PY' ||
import json, sys
first = [json.loads(open(p).readline())["loss"] for p in sys.argv[1:]]
print(f"step-1 loss with the file's original_size / crop {first[0]:.6f}, without {first[1]:.6f}")
sys.exit(0 if first[0] != first[1] else 1)
PY
  fail "the dataset's original_size / crop did not reach the model"

# (d) v-prediction, DoRA (kohya's dora_scale [1, in], sdxl's default format), bf16. A sample draws the same noise and
# timestep in every run (Philox keyed by seed, id, epoch), so a run is compared step by step with the same run at
# lr 1e-9 (learning nothing). Measured: v-prediction's last 10 losses 0.71 of the untrained run's; DoRA on the
# transformers' Linears alone (this UNet's loss falls mostly through its convolutions: LoRA without LoCon does not
# fall in 30 steps either) 0.990, each of the 10 lower.
learns() {  # learns NAME UNTRAINED RATIO: finite; the last 10 losses each lower, their mean below RATIO x untrained's
  python3 - "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" "$3" <<'PY'
import json, math, sys
def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if line.startswith("{")]
run, still = losses(sys.argv[1]), losses(sys.argv[2])
ok = len(run) == len(still) == 30 and all(v is not None and math.isfinite(v) for v in run)
ratio = sum(run[-10:]) / sum(still[-10:]) if ok else float("nan")
lower = ok and all(a < b for a, b in zip(run[-10:], still[-10:]))
print(f"{sys.argv[1].split('/')[-2]}: last 10 losses {ratio:.3f} of the untrained run's (bound {sys.argv[3]}), "
      f"each lower: {lower}")
sys.exit(0 if ok and lower and ratio < float(sys.argv[3]) else 1)
PY
}
train vpred --set train.prediction_type=v_prediction
train vpred_still --set train.prediction_type=v_prediction --set train.lr=1e-9
grep -q "prediction_type: v_prediction" "$work/out/vpred/config.yaml" || fail "the v run's config lacks v_prediction"
learns vpred vpred_still 0.85 || fail "the v-prediction run did not learn (or was not finite)"
train dora --set network.type=dora --set network.conv=0
train dora_still --set network.type=dora --set network.conv=0 --set train.lr=1e-9
learns dora dora_still 0.995 || fail "the DoRA run did not learn (or was not finite)"
"$wick" train "$work/run.yaml" --no-progress --set name=dora_conv --set network.type=dora >"$work/dora_conv.log" 2>&1
status=$?
[ "$status" -eq 2 ] && grep -q "network.conv .* LoCon needs network.type lora" "$work/dora_conv.log" ||
  fail "DoRA with network.conv was not refused with the reason ($status)"
train bf16 --set train.mixed_precision=bf16
grep -m1 "transformer depth 0/1, middle 1, bf16)" "$work/bf16.log" || fail "the bf16 run did not compute in bf16"
falls bf16 0.9 || fail "the bf16 run's loss did not fall (or was not finite)"
train fp16 --set train.mixed_precision=fp16
grep -m1 "transformer depth 0/1, middle 1, f16)" "$work/fp16.log" || fail "the fp16 run did not compute in f16"
falls fp16 0.9 || fail "the fp16 run (dynamic loss scaling) did not fall (or was not finite)"

# (e) The kohya files: every key loads under ComfyUI's key rule with fitting shapes; the LoCon and DoRA keys.
for run in lora dora; do
  python3 "$reference/comfyui_lora_keys.py" --model-keys "$model" --lora "$work/out/$run/lora/$run.safetensors" ||
    fail "ComfyUI's key rule does not load all of $run's LoRA"
done
header_keys "$work/out/lora/lora/lora.safetensors" >"$work/lora_keys.txt"
header_keys "$work/out/dora/lora/dora.safetensors" >"$work/dora_keys.txt"
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

# (f) A full fine-tune (2 steps, 8-bit AdamW) writes the single file back: sgm's names under model.diffusion_model., the VAE
# tensor beside them; it trains again as a base.
train full --set network.type=full --set network.conv=0 --set train.steps=2
full=$work/out/full/model/full.safetensors
header_keys "$full" >"$work/full_keys.txt"
header_keys "$model" >"$work/base_keys.txt"
cmp -s "$work/full_keys.txt" "$work/base_keys.txt" || fail "the full run's file does not have the base file's names"
python3 "$here/same_tensors.py" "$full" "$model" >/dev/null 2>&1 && fail "the full run's weights did not change"
train from_full --set "model.name_or_path=$full" --set train.steps=2
grep -m1 "SDXL-like UNet (2 levels 32/64" "$work/from_full.log" || fail "the full run's file did not load as a base"

echo "sdxl_train_test.sh cli: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
