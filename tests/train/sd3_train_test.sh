#!/usr/bin/env bash
# SD3.5 LoRA/DoRA training end to end on the CPU, with a config in ai-toolkit's shape (config.process, is_v3,
# network linear/linear_alpha, adamw8bit, gradient checkpointing, timestep_type shift = SD3's shift 3) on a tiny
# random SD3.5-Medium-like MMDiT laid out as SAI's single files (tests/train/sd3_fixture.cpp: "model.diffusion_model."
# names beside a VAE tensor; 16-channel latents in 16x24, 24x16 and 16x16 buckets, hidden 128 in heads of 64, attn2 in
# block 0, QK norm, context 4096, pooled 2048).
#   sd3_train_test.sh cli WICK FIXTURE WORK_DIR
#     the memory estimate is printed before step 1 and a run that cannot fit is refused (status 2); the loss is finite
#     and falls over 30 steps; --stop-after 10 + --resume auto and a kill -9 after a checkpoint +
#     resume repeat the straight run's losses and final adapters bitwise; DoRA (PEFT's orientation, sd3's default
#     file format), bf16, timestep_sampling mode and logit_normal run, stay finite and fall (DoRA and bf16 also resume
#     bitwise after --stop-after); the default LoRA file is PEFT (diffusers' names, the scale baked in, no kohya keys)
#     and passes ComfyUI's key rule (tests/reference/comfyui_lora_keys.py, standard-library python3; attn2 needs
#     ComfyUI's newer map, and the older one is shown to drop exactly the attn2 keys); save.format kohya writes
#     lora_unet_joint_blocks_... names that pass the rule under both maps, the kohya DoRA dora_scale [1, in].
#   sd3_train_test.sh float8 WICK FIXTURE WORK_DIR
#     ai-toolkit's quantize: true (a float8 e4m3 frozen base: the joint blocks' Linears): the loss falls, --stop-after +
#     resume is bitwise; train.blocks_to_swap: 2 (both joint blocks streamed) repeats the unswapped run bitwise;
#     --max-memory with the memory settings at auto plans checkpointing, then float8 (swapping does not pay with this
#     model's two blocks), writes the choice into the resolved config and refuses a budget nothing fits (exit status 2).
#   sd3_train_test.sh mpi MPIEXEC WICK FIXTURE WORK_DIR
#     2 ranks with ZeRO-1 match 1 rank with the same global batch (1e-5); a 2-rank run stopped and resumed repeats
#     itself bitwise; a 2-rank checkpoint continues on 1 rank.
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
model=$work/data/sd3.5_tiny.safetensors
# lr 1e-2: chosen so that the loss falls clearly in 30 steps on the synthetic data (measured below).
cat >"$work/run.yaml" <<YAML
job: extension
config:
  name: run
  process:
    - type: sd_trainer
      training_folder: $work/out
      device: cpu
      network: {type: lora, linear: 4, linear_alpha: 4}
      save: {dtype: f32, save_every: 10, max_step_saves_to_keep: 0}
      datasets:
        - folder_path: $work/data/sd3.h5
      train:
        batch_size: 2
        steps: 30
        gradient_checkpointing: true
        noise_scheduler: flowmatch
        timestep_type: shift
        optimizer: adamw8bit
        lr: 1e-2
        log_every: 1
      model: {name_or_path: $model, is_v3: true}
      sample: {sample_every: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() {  # train NAME ARGS...: one rank
  local name=$1
  shift
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$work/$name.log" 2>&1 ||
    { fail "wick train $name $* exited $?"; tail -5 "$work/$name.log"; }
}
train_ranks() {  # train_ranks N LOG ARGS...
  local n=$1 log=$2
  shift 2
  timeout 240 "$mpiexec" --oversubscribe -np "$n" "$wick" train "$work/run.yaml" --no-progress "$@" >"$log" 2>&1 ||
    { fail "mpirun -np $n wick train $* exited $?"; tail -8 "$log"; }
}
step_dir() { printf "%s/out/%s/checkpoints/step_%08d" "$work" "$1" "$2"; }
# same_run A B: runs A and B logged the same 30 losses and ended with the same adapters and LoRA file, bitwise.
same_run() {
  python3 "$here/compare_losses.py" "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" 30 ||
    fail "$2's losses differ from $1's"
  python3 "$here/same_tensors.py" "$(step_dir "$1" 30)/model.safetensors" "$(step_dir "$2" 30)/model.safetensors" ||
    fail "$2's final adapters differ from $1's"
  python3 "$here/same_tensors.py" "$work/out/$1/lora/$1.safetensors" "$work/out/$2/lora/$2.safetensors" ||
    fail "$2's LoRA file differs from $1's"
}
# stopped_and_resumed NAME ARGS...: run NAME_parts with ARGS stopped after step 10, resumed, equals run NAME.
stopped_and_resumed() {
  local name=$1
  shift
  train "${name}_parts" "$@" --stop-after 10
  train "${name}_parts" "$@"
  grep -m1 "resuming from .*step_00000010" "$work/${name}_parts.log" || fail "${name}_parts did not resume from step 10"
  same_run "$name" "${name}_parts"
}
# falls NAME RATIO: every loss of run NAME is finite, and the mean of its last 10 losses is below RATIO x the mean of
# its first 10; prints the numbers and the time per step.
falls() {
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

if [ "$part" = cli ]; then
  # (a) The straight run: finite, falling; the model is read from the single file, its sizes from the shapes.
  # Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps 1.705, last 10 1.426 (ratio 0.837; the same run at
  # lr 1e-9, learning nothing: 1.003), about 27 ms per step at batch 2. DoRA 0.838, bf16 0.837, mode 0.839, shifted
  # logit-normal 0.836: bound 0.9 for every run.
  train lora
  grep -m1 "SD3 (MMDiT) (2 joint blocks, hidden 128, 2 heads, QK norm, attn2 in 1 block, f32) with 2067776 parameters (43520 trainable, lora)" \
    "$work/lora.log" || fail "the run did not build the tiny SD3.5 with LoRA on the 'all' preset"
  grep -m1 "wick train: memory estimate per rank: weights .* (frozen f32) + adapters" "$work/lora.log" ||
    fail "the run printed no memory estimate before step 1"
  falls lora 0.9 || fail "the LoRA run's loss did not fall (or was not finite)"

  # A run that cannot fit (a million latents per step) is refused before step 1 with the numbers and what lowers them.
  "$wick" train "$work/run.yaml" --no-progress --set name=huge --set train.batch_size=1000000 >"$work/huge.log" 2>&1
  status=$?
  [ "$status" -eq 2 ] && grep -q "the run needs an estimated .* per rank but cpu has" "$work/huge.log" &&
    grep -q "train.batch_size: .* with train.gradient_accumulation" "$work/huge.log" &&
    [ ! -e "$work/out/huge/checkpoints" ] || fail "a run far beyond the machine was not refused before step 1 ($status)"

  # (b) --stop-after 10, then --resume auto: the same losses and final adapters, bitwise.
  train parts --stop-after 10
  [ "$(python3 "$here/last_step.py" "$work/out/parts/metrics.jsonl")" = 10 ] || fail "--stop-after 10 did not stop at 10"
  train parts --resume auto
  grep -m1 "resuming from .*step_00000010" "$work/parts.log" || fail "the second run did not resume from step 10"
  same_run lora parts

  # kill -9 after the checkpoint at 10 and a few steps past it; the resume replays those.
  "$wick" train "$work/run.yaml" --no-progress --set name=killed >"$work/killed.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    [ -e "$(step_dir killed 10)" ] && [ "$(wc -l <"$work/out/killed/metrics.jsonl")" -ge 12 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  killed_at=$(python3 "$here/last_step.py" "$work/out/killed/metrics.jsonl")
  echo "killed after step $killed_at of 30 (checkpoints: $(ls "$work/out/killed/checkpoints" | tr '\n' ' '))"
  [ "$killed_at" -ge 10 ] && [ "$killed_at" -lt 30 ] || fail "killed at step $killed_at: not between 10 and 30"
  train killed_resumed --set name=killed
  grep -m1 "resuming from" "$work/killed_resumed.log" || fail "the killed run did not resume"
  same_run lora killed

  # (c) DoRA (PEFT orientation: magnitude [out], sd3's default file format), bf16 compute, the mode density and plain
  # logit-normal; the DoRA and bf16 runs also resume bitwise.
  train dora --set network.type=dora
  falls dora 0.9 || fail "the DoRA run's loss did not fall (or was not finite)"
  stopped_and_resumed dora --set network.type=dora
  train bf16 --set train.mixed_precision=bf16
  grep -m1 "hidden 128, 2 heads, QK norm, attn2 in 1 block, bf16)" "$work/bf16.log" || fail "the bf16 run did not compute in bf16"
  falls bf16 0.9 || fail "the bf16 run's loss did not fall (or was not finite)"
  stopped_and_resumed bf16 --set train.mixed_precision=bf16
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

  # (d) The default file: PEFT with diffusers' names, the scale baked in; ComfyUI's key rule loads every key with its
  # newer SD3 map, and its older map (no attn2 entries) drops exactly the attn2 keys.
  # (e) save.format kohya: lora_unet_joint_blocks_... for LoRA and DoRA (dora_scale [1, in]); loads under both maps.
  train kohya --set save.format=kohya --set train.steps=2
  train kohya_dora --set save.format=kohya --set network.type=dora --set train.steps=2
  for run in lora kohya kohya_dora; do
    python3 "$reference/comfyui_lora_keys.py" --model-keys "$model" --lora "$work/out/$run/lora/$run.safetensors" ||
      fail "ComfyUI's key rule does not load all of $run's LoRA"
  done
  python3 "$reference/comfyui_lora_keys.py" --model-keys "$model" --lora "$work/out/kohya/lora/kohya.safetensors" \
    --comfyui-map old || fail "ComfyUI's older map does not load the kohya file"
  old=$(python3 "$reference/comfyui_lora_keys.py" --model-keys "$model" --lora "$work/out/lora/lora/lora.safetensors" \
    --comfyui-map old)
  not_loaded=$(grep -c "lora key not loaded" <<<"$old")
  attn2_not_loaded=$(grep "lora key not loaded" <<<"$old" | grep -c "\.attn2\.")
  echo "ComfyUI's older SD3 map on the PEFT file: $not_loaded keys not loaded, $attn2_not_loaded of them attn2"
  [ "$not_loaded" -eq 8 ] && [ "$attn2_not_loaded" -eq 8 ] || fail "the older map should drop exactly the 8 attn2 keys"
  python3 - "$work/out" <<'PY' || fail "the LoRA files' keys or metadata are not what diffusers and kohya/ComfyUI read"
import json, struct, sys
out = sys.argv[1]
def header(run):
    with open(f"{out}/{run}/lora/{run}.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    return h.pop("__metadata__", {}), {k: v["shape"] for k, v in h.items()}
bad = []
def expect(what, ok):
    if not ok: bad.append(what)
meta, keys = header("lora")
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
meta, keys = header("dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.transformer_blocks.0.attn2.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
meta, keys = header("kohya")
expect("kohya: 19 modules x (down, up, alpha)", len(keys) == 57)
expect("kohya: x_block.attn2.qkv down/up", keys.get("lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_down.weight") == [4, 128]
       and keys.get("lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_up.weight") == [384, 4])
expect("kohya: pre-only adaLN up", keys.get("lora_unet_joint_blocks_1_context_block_adaLN_modulation_1.lora_up.weight") == [256, 4])
expect("kohya: alpha 0-d", keys.get("lora_unet_joint_blocks_1_x_block_mlp_fc2.alpha") == [])
expect("kohya: only lora_unet_ keys", all(k.startswith("lora_unet_") for k in keys))
expect("kohya metadata", meta.get("wick_lora_format") == "kohya" and meta.get("ss_network_alpha") == "4")
meta, keys = header("kohya_dora")
expect("kohya DoRA: dora_scale [1, in]", keys.get("lora_unet_joint_blocks_0_x_block_mlp_fc2.dora_scale") == [1, 512])
expect("kohya DoRA metadata", meta.get("wick_network_type") == "dora" and meta.get("ss_network_module") == "lycoris.kohya")
for b in bad:
    print(f"  not as expected: {b}")
print(f"LoRA files: {len(bad)} problems (PEFT, PEFT DoRA, kohya, kohya DoRA)")
sys.exit(1 if bad else 0)
PY
fi

if [ "$part" = float8 ]; then
  # (a) model.quantize: float8 (ai-toolkit's quantize: true): the 19 Linears of the 2 joint blocks (7 + 5 in block 0
  # with attn2, 5 + 2 in the pre-only block 1) are e4m3 codes with per-row scales; the loss falls, and --stop-after +
  # resume repeats the straight run bitwise.
  train f8 --set model.quantize=true
  grep -m1 "(43520 trainable, lora), 19 frozen Linears in float8 e4m3" "$work/f8.log" ||
    fail "the quantize: true run did not store the 19 joint-block Linears as float8"
  grep -q "quantize: float8" "$work/out/f8/config.yaml" || fail "the resolved config lacks quantize: float8"
  falls f8 0.9 || fail "the float8 run's loss did not fall (or was not finite)"
  stopped_and_resumed f8 --set model.quantize=true
  # (b) train.blocks_to_swap: 2 (both joint blocks' frozen weights in host memory, copied in as each block runs; on
  # the CPU build the same code path with host copies): bitwise the unswapped float8 run.
  train f8swap --set model.quantize=true --set train.blocks_to_swap=2
  grep -m1 "2 blocks swapped (.* of frozen weights in host memory" "$work/f8swap.log" ||
    fail "the blocks_to_swap run did not report its swapped blocks"
  same_run f8 f8swap
  # (c) The memory plan with checkpointing, quantization and swapping at auto: --max-memory picks the cheapest that
  # fits and writes it into the resolved config, and refuses a budget nothing fits (exit status 2). Estimates of this
  # tiny run: plain 18.1 MB, checkpointing 15.9 MB, + float8 13.3 MB, + 1 or 2 blocks swapped 13.7 / 13.6 MB (with
  # two blocks, the two blocks' device buffers outweigh what swapping frees: the plan does not swap).
  planned() {  # planned NAME BUDGET EXPECTED_CONFIG_LINES...
    local name=$1 budget=$2
    shift 2
    train "$name" --set train.steps=2 --set model.quantize=auto --set train.gradient_checkpointing=auto \
      --max-memory "$budget"
    grep -m1 "memory plan: .*expected peak .* train.max_memory budget" "$work/$name.log" ||
      fail "$name: no memory plan line for $budget"
    for line in "$@"; do
      grep -q "^  $line\$" "$work/out/$name/config.yaml" || fail "$name ($budget): the resolved config lacks '$line'"
    done
  }
  planned plan17 17.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan14 14.5MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  "$wick" train "$work/run.yaml" --no-progress --set name=plan10 --set model.quantize=auto \
    --set train.gradient_checkpointing=auto --max-memory 10MB >"$work/plan10.log" 2>&1
  status=$?
  [ $status = 2 ] || fail "a budget nothing fits exited $status, not 2"
  grep -m1 "no memory plan fits the 10.0 MB train.max_memory budget: the smallest estimate, with gradient \
checkpointing on, the base float8 and 0 blocks swapped, is 13.3 MB" "$work/plan10.log" ||
    fail "the refusal does not name the budget and the best plan"
fi

if [ "$part" = mpi ]; then
  # One rank, batch 2 (the reference), and 2 ranks with batch 1 each and ZeRO-1.
  train one
  train_ranks 2 "$work/two.log" --set name=two --set train.batch_size=1 --set distributed.shard_optimizer=true
  grep -m1 "2 ranks (mpi on cpu): gradients reduce-scattered .* optimizer state sharded (ZeRO-1)" "$work/two.log" ||
    fail "the 2-rank run did not shard its optimizer state (ZeRO-1)"
  ls "$(step_dir two 30)" | grep -q "optimizer.rank1-of-2.safetensors" || fail "no optimizer shard of rank 1"
  python3 "$here/compare_losses.py" "$work/out/one/metrics.jsonl" "$work/out/two/metrics.jsonl" 30 --tolerance 1e-5 ||
    fail "1-rank and 2-rank losses differ beyond 1e-5"
  falls two 0.9 || fail "the 2-rank run's loss did not fall"
  # 2 ranks stopped after 10 and resumed on 2 ranks: bitwise the straight 2-rank run.
  train_ranks 2 "$work/parts1.log" --set name=parts --set train.batch_size=1 --stop-after 10
  train_ranks 2 "$work/parts2.log" --set name=parts --set train.batch_size=1
  grep -m1 "resuming from .*step_00000010" "$work/parts2.log" || fail "the 2-rank run did not resume from step 10"
  same_run two parts
  # The 2-rank checkpoint at 10 continues on 1 rank (batch 2: the same global batch).
  mkdir -p "$work/out/to1/checkpoints" && cp -r "$(step_dir two 10)" "$work/out/to1/checkpoints/"
  train to1
  grep -m1 "resuming from .*step_00000010" "$work/to1.log" || fail "the 2-rank checkpoint did not resume on 1 rank"
  python3 - "$work/out/two/metrics.jsonl" "$work/out/to1/metrics.jsonl" <<'PY' || fail "2 ranks -> 1 rank diverged"
import json, sys
def rows(p):
    r = {}
    for line in open(p):
        try: o = json.loads(line)
        except ValueError: continue
        r[o["step"]] = o["loss"]
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(a[s] - b[s]) / max(1.0, abs(a[s])) for s in range(11, 31))
print(f"2-rank checkpoint at 10 on 1 rank: steps 11..30, largest relative loss difference {worst:.2e}")
sys.exit(0 if sorted(b) == list(range(11, 31)) and worst < 1e-5 else 1)
PY
fi

echo "sd3_train_test.sh $part: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
