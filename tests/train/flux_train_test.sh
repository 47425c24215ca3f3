#!/usr/bin/env bash
# Flux LoRA/DoRA training end to end on the CPU, with a config in ai-toolkit's shape (config.process,
# is_flux, network linear/linear_alpha, adamw8bit, gradient checkpointing, timestep_type flux_shift) on
# a tiny random Flux.1-dev at real widths (tests/train/flux_fixture.cpp: 16-channel latents in 16x24,
# 24x16 and 16x16 buckets, T5 4096, CLIP 768, head 128).
#   flux_train_test.sh cli WICK FIXTURE WORK_DIR
#     the loss is finite and falls over 30 steps; --stop-after 10 + --resume auto and a kill -9 after a
#     checkpoint + resume repeat the straight run's losses and final adapters bitwise (the training latents
#     drawn from the cached VAE distribution, Philox (seed, id, epoch)); latent_sampling mean differs; DoRA, bf16,
#     timestep_sampling shift with model.guidance 3.5 run, stay finite and fall (DoRA and bf16 also
#     resume bitwise after --stop-after); the kohya LoRA and DoRA files and the PEFT LoRA file pass
#     ComfyUI's key rule (tests/reference/comfyui_lora_keys.py, standard-library python3); the kohya
#     files have kohya's names and metadata, save.format peft writes diffusers' names.
#   flux_train_test.sh float8 WICK FIXTURE WORK_DIR
#     ai-toolkit's quantize: true (a float8 e4m3 frozen base): the loss falls, --stop-after + resume is bitwise;
#     train.blocks_to_swap: 3 repeats the unswapped run bitwise; --max-memory with the memory settings at auto
#     plans checkpointing, float8 and swapping in turn and refuses a budget nothing fits (exit status 2).
#   flux_train_test.sh mpi MPIEXEC WICK FIXTURE WORK_DIR
#     2 ranks with ZeRO-1 (each drawing its samples' latents) match 1 rank with the same global batch (1e-5, as tests/train/train_mpi_test.sh
#     for 8-bit AdamW); a 2-rank run stopped and resumed repeats itself bitwise; a 2-rank checkpoint
#     continues on 1 rank.
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
        - folder_path: $work/data/flux.h5
      train:
        batch_size: 2
        steps: 30
        gradient_checkpointing: true
        noise_scheduler: flowmatch
        timestep_type: flux_shift
        optimizer: adamw8bit
        lr: 1e-2
        log_every: 1
      model: {name_or_path: $work/data/flux_tiny.safetensors, is_flux: true}
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
# falls NAME RATIO: every loss of run NAME is finite, and the mean of its last 10 losses is below
# RATIO x the mean of its first 10; prints the numbers and the time per step.
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
  # (a) The straight run: finite, falling. Measured (2 shared cores, OMP_NUM_THREADS=1): first 10 steps
  # 1.664, last 10 1.251 (ratio 0.75; with the latents drawn from their distribution), about 50 ms per step at batch 2.
  train lora
  grep -m1 "Flux.1-dev (2 double + 2 single blocks, hidden 128, f32) with 2536512 parameters (65536 trainable, lora)" \
    "$work/lora.log" || fail "the run did not build the tiny Flux with LoRA on the 'all' preset"
  falls lora 0.85 || fail "the LoRA run's loss did not fall (or was not finite)"

  # (b) --stop-after 10, then --resume auto: the same losses and final adapters, bitwise.
  train parts --stop-after 10
  [ "$(python3 "$here/last_step.py" "$work/out/parts/metrics.jsonl")" = 10 ] ||
    fail "--stop-after 10 did not stop at 10"
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

  # The latents are drawn from the stored distribution (flux.h5 has latents_logvar): the same config with
  # dataset.latent_sampling mean trains on other latents, so its first loss differs; everything above (bitwise
  # resume after --stop-after and kill -9) held with the draws.
  train mean --set dataset.latent_sampling=mean --set train.steps=1
  grep -q "latent_sampling: mean" "$work/out/mean/config.yaml" || fail "the resolved config lacks latent_sampling: mean"
  python3 - "$work/out/lora/metrics.jsonl" "$work/out/mean/metrics.jsonl" <<'PY' || fail "latent_sampling made no difference"
import json, sys
def first(path):
    for line in open(path):
        try: o = json.loads(line)
        except ValueError: continue
        if o.get("step") == 1: return o["loss"]
a, b = first(sys.argv[1]), first(sys.argv[2])
print(f"step 1 loss: latents sampled {a:.6f}, the mean {b:.6f}")
sys.exit(0 if a != b else 1)
PY

  # (c) DoRA (kohya orientation: dora_scale [1, in]), bf16 compute, fixed shift with guidance 3.5; the
  # DoRA and bf16 runs also resume bitwise. Measured ratios: DoRA 0.741, bf16 0.752, shift 0.809.
  train dora --set network.type=dora
  falls dora 0.85 || fail "the DoRA run's loss did not fall (or was not finite)"
  stopped_and_resumed dora --set network.type=dora
  train bf16 --set train.mixed_precision=bf16
  grep -m1 "hidden 128, bf16)" "$work/bf16.log" || fail "the bf16 run did not compute in bf16"
  falls bf16 0.85 || fail "the bf16 run's loss did not fall (or was not finite)"
  stopped_and_resumed bf16 --set train.mixed_precision=bf16
  train shift --set train.timestep_sampling=shift --set model.guidance=3.5
  grep -q "timestep_sampling: shift" "$work/out/shift/config.yaml" &&
    grep -q "guidance: 3.5" "$work/out/shift/config.yaml" ||
    fail "the shift run's resolved config lacks timestep_sampling shift / guidance 3.5"
  falls shift 0.9 || fail "the shift + guidance 3.5 run's loss did not fall (or was not finite)"

  # (d) The kohya file: every key loads by ComfyUI's rule, kohya's names, shapes and metadata.
  # (e) save.format peft: diffusers' names, the scale baked in, the PEFT DoRA magnitude. ComfyUI maps
  # PEFT LoRA keys onto the fused weights too (scale 1, right for the baked scale); it does not read
  # PEFT's lora_magnitude_vector, so the PEFT DoRA file is for diffusers only (not checked here).
  train peft --set save.format=peft --set train.steps=2
  train peft_dora --set save.format=peft --set network.type=dora --set train.steps=2
  for run in lora dora peft; do
    python3 "$reference/comfyui_lora_keys.py" --model-keys "$work/data/flux_tiny.safetensors" \
      --lora "$work/out/$run/lora/$run.safetensors" || fail "ComfyUI's key rule does not load all of $run's LoRA"
  done
  python3 - "$work/out" <<'PY' || fail "the LoRA files' keys or metadata are not what kohya/ComfyUI and diffusers read"
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
meta, keys = header("dora")
expect("DoRA: dora_scale [1, in]", keys.get("lora_unet_double_blocks_1_txt_mlp_2.dora_scale") == [1, 512])
expect("DoRA metadata", meta.get("wick_network_type") == "dora" and meta.get("ss_network_module") == "lycoris.kohya")
meta, keys = header("peft")
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
meta, keys = header("peft_dora")
expect("peft DoRA: lora_magnitude_vector [out]",
       keys.get("transformer.single_transformer_blocks.0.attn.to_k.lora_magnitude_vector") == [128])
expect("peft DoRA: use_dora", json.loads(meta["lora_adapter_metadata"]).get("transformer.use_dora") is True)
for b in bad:
    print(f"  not as expected: {b}")
print(f"LoRA files: {len(bad)} problems (kohya, kohya DoRA, PEFT, PEFT DoRA)")
sys.exit(1 if bad else 0)
PY
fi

if [ "$part" = float8 ]; then
  # (f) ai-toolkit's `quantize: true` (model.quantize: float8): the 26 block Linears are e4m3 codes with
  # per-row scales; the loss falls and --stop-after + resume repeats the straight run bitwise.
  train f8 --set model.quantize=true
  grep -m1 "(65536 trainable, lora), 26 frozen Linears in float8 e4m3" "$work/f8.log" ||
    fail "the quantize: true run did not store the 26 block Linears as float8"
  grep -q "quantize: float8" "$work/out/f8/config.yaml" || fail "the resolved config lacks quantize: float8"
  falls f8 0.85 || fail "the float8 run's loss did not fall (or was not finite)"
  stopped_and_resumed f8 --set model.quantize=true
  # (g) train.blocks_to_swap: 3 (the last 3 blocks' frozen weights in host memory, copied in as each block
  # runs; on the CPU build the same code path with host copies): bitwise the unswapped float8 run.
  train f8swap --set model.quantize=true --set train.blocks_to_swap=3
  grep -m1 "3 blocks swapped (.* of frozen weights in host memory" "$work/f8swap.log" ||
    fail "the blocks_to_swap run did not report its swapped blocks"
  same_run f8 f8swap
  train f8swap_auto --set model.quantize=true --set train.blocks_to_swap=3 --set train.gradient_checkpointing=auto \
    --set train.steps=2
  grep -q "^  gradient_checkpointing: true$" "$work/out/f8swap_auto/config.yaml" ||
    fail "blocks_to_swap with gradient_checkpointing auto did not turn checkpointing on"
  # (h) The memory plan: with checkpointing, quantization and swapping at auto, --max-memory picks the
  # cheapest that fits (estimates of this tiny run: plain 24.7 MB, checkpointing 17.9 MB, + float8 13.3 MB,
  # + 4 blocks swapped 12.8 MB), writes its choices into the resolved config, and refuses a budget nothing fits.
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
  planned plan20 20.0MB "gradient_checkpointing: true" "quantize: none" "blocks_to_swap: 0"
  planned plan15 15.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 0"
  planned plan13 13.0MB "gradient_checkpointing: true" "quantize: float8" "blocks_to_swap: 4"
  grep -m1 "4 blocks swapped (" "$work/plan13.log" || fail "plan13 did not swap the 4 blocks it planned"
  "$wick" train "$work/run.yaml" --no-progress --set name=plan6 --set model.quantize=auto \
    --set train.gradient_checkpointing=auto --max-memory 6MB >"$work/plan6.log" 2>&1
  status=$?
  [ $status = 2 ] || fail "a budget nothing fits exited $status, not 2"
  grep -m1 "no memory plan fits the 6.0 MB train.max_memory budget: the smallest estimate, with gradient \
checkpointing on, the base float8 and 4 blocks swapped, is 12.8 MB" "$work/plan6.log" ||
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
  falls two 0.85 || fail "the 2-rank run's loss did not fall"
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

echo "flux_train_test.sh $part: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
