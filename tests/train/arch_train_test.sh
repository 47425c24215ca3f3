#!/usr/bin/env bash
# LoRA/DoRA training of one architecture end to end on the CPU: the checks every architecture must pass, and its row
# (tests/train/rows/ARCH.sh: its model, config keys, expected lines and bounds, and the checks only it has; docs/
# testing.md "End-to-end tests per architecture"). The config is in ai-toolkit's shape (config.process, the row's
# is_* flag, network linear 4 / linear_alpha 4, adamw8bit, lr 1e-2, batch 2, 30 steps, gradient checkpointing, a
# checkpoint every 10 steps), the model and cached latents are `arch_fixture ARCH data`'s (tests/train/arch_fixture.cpp:
# a tiny random model at the architecture's real widths, 18 samples in three buckets).
#   arch_train_test.sh ARCH cli WICK FIXTURE WORK_DIR
#     the model is built as the row says and the memory estimate printed before step 1; the loss is finite and falls
#     over 30 steps (mean of the last 10 below the row's bound x the first 10's); a run far beyond the machine is
#     refused before step 1 (status 2) with what lowers it; --stop-after 10 + --resume auto and a kill -9 after a
#     checkpoint + resume repeat the straight run's losses, final adapters and LoRA file bitwise; DoRA and bf16 (the
#     row's bf16 line) also resume bitwise after --stop-after (the kill and these two unless the row sets
#     train_resume_variants=0), bf16 falls; 2-step LoRA and DoRA runs in the row's
#     other save.format; the row's LoRA files load completely by ComfyUI's key rule (tests/reference/
#     comfyui_lora_keys.py, standard-library python3); then train_cli_row.
#   arch_train_test.sh ARCH float8 WICK FIXTURE WORK_DIR
#     model.quantize (ai-toolkit's quantize: a float8 e4m3 frozen base): the row's Linears are float8, the resolved
#     config says quantize: float8, the loss falls, --stop-after + resume is bitwise; train.blocks_to_swap (the row's
#     count; on the CPU build the same code path with host copies) repeats the unswapped run bitwise, and with
#     gradient_checkpointing auto turns checkpointing on; then train_float8_row (the memory plans).
#   arch_train_test.sh ARCH mpi MPIEXEC WICK FIXTURE WORK_DIR
#     2 ranks with ZeRO-1 (batch 1 each, each drawing its samples' latents) log the losses of 1 rank with batch 2
#     (1e-5, as tests/train/train_mpi_test.sh for 8-bit AdamW) and fall; a 2-rank run stopped and resumed repeats
#     itself bitwise; where the row sets train_shard_weights=1, distributed.shard: weights repeats the ZeRO-1 run
#     (with the row's blocks_to_swap shards in host memory) for 10 steps, gathering each block twice per step, then
#     resumed with shard: optimizer repeats the ZeRO-1 run bitwise;
#     the 2-rank checkpoint at step 10 continues on 1 rank (1e-5); then train_mpi_row.
set -u
arch=$1 part=$2
shift 2
mpiexec=""
if [ "$part" = mpi ]; then mpiexec=$1; shift; fi
wick=$1 fixture=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
reference=$(cd "$here/../reference" && pwd)
source "$here/arch_common.sh"
load_row "$arch"
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$arch" data "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
model=$work/data/$train_model
# lr 1e-2: chosen so that the loss falls clearly in 30 steps on the synthetic data (the rows' measurements).
cat >"$work/run.yaml" <<YAML
job: extension
config:
  name: run
  process:
    - type: sd_trainer
      training_folder: $work/out
      device: cpu
      network: {type: lora, linear: 4, linear_alpha: 4${train_network:+, $train_network}}
      save: {dtype: f32, save_every: 10, max_step_saves_to_keep: 0}
      datasets:
        - folder_path: $work/data/$arch.h5
      train: {batch_size: 2, steps: 30, gradient_checkpointing: true, optimizer: adamw8bit, lr: 1e-2, log_every: 1
              ${train_keys:+, $train_keys}}
      model: {name_or_path: $model${train_model_keys:+, $train_model_keys}}
      sample: {sample_every: 0}
YAML

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
# same_run A B [N]: runs A and B logged the same N (30) losses and ended with the same adapters and LoRA file, bitwise.
same_run() {
  local steps=${3:-30}
  python3 "$here/compare_losses.py" "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" "$steps" ||
    fail "$2's losses differ from $1's"
  python3 "$here/same_tensors.py" "$(step_dir "$1" "$steps")/model.safetensors" \
    "$(step_dir "$2" "$steps")/model.safetensors" || fail "$2's final adapters differ from $1's"
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
# learns NAME UNTRAINED RATIO: run NAME's losses are finite, its last 10 each lower than run UNTRAINED's (the same run
# at lr 1e-9: a sample draws the same noise and timestep in every run) and their mean below RATIO x UNTRAINED's.
learns() {
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
# first_losses_differ A B: the step-1 losses of runs A and B differ (prints both).
first_losses_differ() {
  python3 - "$work/out/$1/metrics.jsonl" "$work/out/$2/metrics.jsonl" <<'PY'
import json, sys
def first(path):
    for line in open(path):
        try: o = json.loads(line)
        except ValueError: continue
        if o.get("step") == 1: return o["loss"]
a, b = first(sys.argv[1]), first(sys.argv[2])
print(f"step 1 loss: {sys.argv[1].split('/')[-2]} {a:.6f}, {sys.argv[2].split('/')[-2]} {b:.6f}")
sys.exit(0 if a != b else 1)
PY
}
# lora_file_checks: the row's checks of its LoRA files' names, shapes and metadata, a python body on stdin that
# imports expect, lora_header and report from tests/train/safetensors_keys.py.
lora_file_checks() { PYTHONPATH=$here python3 - "$work/out"; }
# comfyui_loads RUN [OPTIONS...]: ComfyUI's key rule loads every key of run RUN's LoRA file onto the base.
comfyui_loads() {
  local run=$1
  shift
  python3 "$reference/comfyui_lora_keys.py" --model-keys "$model" --lora "$work/out/$run/lora/$run.safetensors" "$@"
}
# planned NAME BUDGET EXPECTED_CONFIG_LINES...: a 2-step run with checkpointing and quantization at auto and
# --max-memory BUDGET prints its memory plan and writes the expected choices into its resolved config.
planned() {
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
# refused_plan NAME BUDGET MESSAGE: with the memory settings at auto, --max-memory BUDGET is refused (status 2) with
# MESSAGE (the budget and the smallest plan).
refused_plan() {
  local name=$1 budget=$2 message=$3 status
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" --set model.quantize=auto \
    --set train.gradient_checkpointing=auto --max-memory "$budget" >"$work/$name.log" 2>&1
  status=$?
  [ $status = 2 ] || fail "a budget nothing fits exited $status, not 2"
  grep -m1 "$message" "$work/$name.log" || fail "the refusal does not name the budget and the best plan"
}

if [ "$part" = cli ]; then
  # (a) The straight run: the model read from the row's file, its sizes from the shapes; finite, falling.
  train lora
  grep -m1 "$train_built" "$work/lora.log" || fail "the run did not build $train_built_what"
  grep -m1 "wick train: memory estimate per rank: weights .* (frozen f32) + adapters" "$work/lora.log" ||
    fail "the run printed no memory estimate before step 1"
  falls lora "$train_bound" || fail "the LoRA run's loss did not fall (or was not finite)"

  # A run that cannot fit (a million latents per step) is refused before step 1 with the numbers and what lowers them.
  "$wick" train "$work/run.yaml" --no-progress --set name=huge --set train.batch_size=1000000 >"$work/huge.log" 2>&1
  status=$?
  [ "$status" -eq 2 ] && grep -q "the run needs an estimated .* per rank but cpu has" "$work/huge.log" &&
    grep -q "train.batch_size: .* with train.gradient_accumulation" "$work/huge.log" &&
    [ ! -e "$work/out/huge/checkpoints" ] || fail "a run far beyond the machine was not refused before step 1 ($status)"

  # (b) --stop-after 10, then --resume auto: the same losses and final adapters, bitwise.
  train parts --stop-after 10
  [ "$(python3 "$here/last_step.py" "$work/out/parts/metrics.jsonl")" = 10 ] ||
    fail "--stop-after 10 did not stop at 10"
  train parts --resume auto
  grep -m1 "resuming from .*step_00000010" "$work/parts.log" || fail "the second run did not resume from step 10"
  same_run lora parts

  # kill -9 after the checkpoint at 10 and a few steps past it; the resume replays those. (A row may set
  # train_resume_variants=0: the kill and the DoRA / bf16 resumes below test the checkpoint code every architecture
  # shares, and the slowest row, sdxl, leaves them to the others to keep CI's time.)
  if [ "${train_resume_variants:-1}" = 1 ]; then
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
  fi

  # (c) DoRA (the row's orientation and targets) and bf16 compute also resume bitwise; bf16 falls (the row checks
  # how DoRA learns).
  train dora "${train_dora[@]}"
  if [ "${train_resume_variants:-1}" = 1 ]; then stopped_and_resumed dora "${train_dora[@]}"; fi
  train bf16 --set train.mixed_precision=bf16
  grep -m1 "$train_built_bf16" "$work/bf16.log" || fail "the bf16 run did not compute in bf16"
  falls bf16 "$train_bound" || fail "the bf16 run's loss did not fall (or was not finite)"
  if [ "${train_resume_variants:-1}" = 1 ]; then stopped_and_resumed bf16 --set train.mixed_precision=bf16; fi

  # (d) The row's other file format (2 steps, LoRA and DoRA), and the files ComfyUI's key rule loads completely.
  if [ -n "$train_other_format" ]; then
    train "$train_other_format" --set save.format="$train_other_format" --set train.steps=2
    train "${train_other_format}_dora" --set save.format="$train_other_format" --set network.type=dora \
      --set train.steps=2
  fi
  for run in $train_comfyui_runs; do
    comfyui_loads "$run" || fail "ComfyUI's key rule does not load all of $run's LoRA"
  done

  train_cli_row
fi

if [ "$part" = float8 ]; then
  # (a) The frozen base in float8 e4m3 with per-row scales: the row's Linears; the loss falls, and --stop-after +
  # resume repeats the straight run bitwise.
  train f8 --set model.quantize="$train_quantize"
  grep -m1 "$train_float8_line" "$work/f8.log" ||
    fail "the quantize: $train_quantize run did not store $train_float8_what as float8"
  grep -q "quantize: float8" "$work/out/f8/config.yaml" || fail "the resolved config lacks quantize: float8"
  falls f8 "$train_bound" || fail "the float8 run's loss did not fall (or was not finite)"
  stopped_and_resumed f8 --set model.quantize="$train_quantize"
  # (b) train.blocks_to_swap: the last blocks' frozen weights in host memory, copied in as each block runs: bitwise
  # the unswapped float8 run; with gradient_checkpointing auto, swapping turns checkpointing on.
  train f8swap --set model.quantize="$train_quantize" --set train.blocks_to_swap="$train_swap_blocks"
  grep -m1 "$train_swap_blocks blocks swapped (.* of frozen weights in host memory" "$work/f8swap.log" ||
    fail "the blocks_to_swap run did not report its swapped blocks"
  same_run f8 f8swap
  train f8swap_auto --set model.quantize="$train_quantize" --set train.blocks_to_swap="$train_swap_blocks" \
    --set train.gradient_checkpointing=auto --set train.steps=2
  grep -q "^  gradient_checkpointing: true$" "$work/out/f8swap_auto/config.yaml" ||
    fail "blocks_to_swap with gradient_checkpointing auto did not turn checkpointing on"

  train_float8_row
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
  falls two "$train_bound" || fail "the 2-rank run's loss did not fall"
  # 2 ranks stopped after 10 and resumed on 2 ranks: bitwise the straight 2-rank run.
  train_ranks 2 "$work/parts1.log" --set name=parts --set train.batch_size=1 --stop-after 10
  train_ranks 2 "$work/parts2.log" --set name=parts --set train.batch_size=1
  grep -m1 "resuming from .*step_00000010" "$work/parts2.log" || fail "the 2-rank run did not resume from step 10"
  same_run two parts
  if [ "${train_shard_weights:-0}" = 1 ]; then
    # distributed.shard: weights (each rank keeps half of every block's frozen weights and all-gathers a block as it
    # runs), with the row's blocks_to_swap shards in host memory, stopped after 10 steps, gathering every block once in
    # forward and each recomputed one once in backward (the row's train_gathers_per_step); resumed with only the
    # optimizer sharded (the checkpoint does not depend on the shard level): the 30 steps, the adapters and the LoRA
    # file are bitwise the ZeRO-1 run's.
    train_ranks 2 "$work/levels1.log" --set name=levels --set train.batch_size=1 --set distributed.shard=weights \
      --set train.blocks_to_swap="$train_swap_blocks" --stop-after 10
    grep -m1 "blocks sharded over 2 ranks (.* on this rank, .* of it in host memory" "$work/levels1.log" ||
      fail "the weights-sharded run with blocks_to_swap did not report its shards in host memory"
    grep -m1 "the blocks' frozen weights sharded (ZeRO-3)" "$work/levels1.log" || fail "no ZeRO-3 on the data-parallel line"
    grep -q "shard: weights" "$work/out/levels/config.yaml" || fail "the resolved config lacks shard: weights"
    # (25.1 for SDXL over 10 steps: the prefetch of input_blocks.0 the last backward leaves counts too.)
    grep -m1 "weight gathers on rank 0: ${train_gathers_per_step:-}\.[01] blocks and .* received per step" "$work/levels1.log" ||
      fail "the sharded run did not gather ${train_gathers_per_step:-} blocks per step"
    train_ranks 2 "$work/levels2.log" --set name=levels --set train.batch_size=1 --set distributed.shard=optimizer
    grep -m1 "resuming from .*step_00000010" "$work/levels2.log" || fail "the optimizer-sharded run did not resume"
    same_run two levels
  fi
  # The 2-rank checkpoint at 10 continues on 1 rank (batch 2: the same global batch).
  mkdir -p "$work/out/to1/checkpoints" && cp -r "$(step_dir two 10)" "$work/out/to1/checkpoints/"
  train to1
  grep -m1 "resuming from .*step_00000010" "$work/to1.log" || fail "the 2-rank checkpoint did not resume on 1 rank"
  python3 "$here/compare_losses.py" "$work/out/two/metrics.jsonl" "$work/out/to1/metrics.jsonl" 11..30 \
    --tolerance 1e-5 || fail "2 ranks -> 1 rank diverged"

  train_mpi_row
fi

finish "arch_train_test.sh $arch $part"
