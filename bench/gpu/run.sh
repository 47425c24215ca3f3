#!/usr/bin/env bash
# Runs wick's CUDA tests and GPU benchmarks on a GPU machine from the device bundle made by
# scripts/make_device_bundle.sh, and writes a report (GPU, driver, library versions, commit, every
# test result, every benchmark number).
#
#   tar -xJf .device/wick-device.tar.xz -C /tmp && /tmp/wick-device/bench/gpu/run.sh "$OUT"
#   WICK_GPU_SANITIZE=1 ...   # also run compute-sanitizer memcheck and racecheck on the CUDA tests
#   WICK_GPU_SECTIONS=flux ... # only some sections (default "tests bench flux"): the CUDA tests, the
#                             # GPU benchmarks, the full-size Flux LoRA step vs diffusers + PEFT
#                             # (at most 9 minutes alone: in a device call of at most 10 minutes, run
#                             # "tests bench" and "flux" as two calls); "shard" (not in the default):
#                             # flux_step_bench with --shard-weights (NCCL group of one rank) against
#                             # the same step unsharded, at WICK_GPU_SHARD_ARGS (default 4 + 8 blocks)
#
# The CUDA libraries come from the machine: the toolkit's lib64 and the nvidia-* Python packages
# next to PyTorch (cuDNN, NCCL).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/report}
mkdir -p "$out"
report=$out/gpu_report.md

cuda_dirs=/usr/local/cuda/lib64
if command -v python3 >/dev/null; then
  extra=$(python3 -c 'import glob, os, site
dirs = []
for sp in site.getsitepackages():
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "cu13", "lib")))
print(":".join(dirs))' 2>/dev/null)
  [ -n "$extra" ] && cuda_dirs=$cuda_dirs:$extra
fi
export LD_LIBRARY_PATH=$cuda_dirs:${LD_LIBRARY_PATH:-}
export WICK_TEST_DATA_DIR=$root/tests/data
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

section() { printf '\n## %s\n\n' "$1" >>"$report"; }
sections=" ${WICK_GPU_SECTIONS:-tests bench flux} "
[ "${WICK_GPU_BENCH:-1}" = 1 ] || sections=${sections/ bench / }
[ "${WICK_GPU_BENCH:-1}" = 1 ] || sections=${sections/ flux / }
want() { [[ "$sections" == *" $1 "* ]]; }
{
  echo "# wick GPU run"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: $(cat "$root/COMMIT")"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
  echo "- CUDA toolkit on the machine: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none)"
  echo "- PyTorch peer: $(python3 -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version(), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null || echo none)"
} >"$report"
section "wick info"
{ echo '```'; "$root/bin/wick" info 2>&1; echo '```'; } >>"$report"

status=0
if want tests; then
section "tests"
echo '| program | result |' >>"$report"
echo '|---|---|' >>"$report"
# The test programs run side by side (each on a few CPU threads): they share the GPU, and every CUDA
# test synchronizes its own stream, so they do not disturb each other's results.
pids=()
for program in "$root"/bin/wick_*_tests; do
  name=$(basename "$program")
  OMP_NUM_THREADS=4 timeout "${WICK_GPU_TEST_TIMEOUT:-480}" "$program" --gtest_brief=1 \
    --gtest_output="xml:$out/$name.xml" >"$out/$name.log" 2>&1 &
  pids+=("$!:$name")
done
for entry in "${pids[@]}"; do
  pid=${entry%%:*}; name=${entry#*:}
  wait "$pid"; rc=$?
  [ $rc -eq 0 ] || status=1
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|tests? from .* ran' "$out/$name.log" | tr '\n' ' ')
  echo "| $name | rc=$rc $summary |" >>"$report"
  grep -E '^\[  FAILED  \]' "$out/$name.log" | head -80 | sed 's/^/    /' >>"$report"
done

# NCCL with one rank (docs/distributed.md): what one GPU can check of the NCCL path. The NcclOneRank
# tests ran above inside wick_comm_tests (listed here one by one: skipped means no GPU was seen);
# then `wick train` with distributed.backend nccl against the single group.
section "NCCL group of one rank"
python3 - "$out/wick_comm_tests.xml" >>"$report" 2>&1 <<'PY' || echo "- no wick_comm_tests.xml" >>"$report"
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.get("classname") != "NcclOneRank":
        continue
    state = "FAILED" if case.find("failure") is not None else \
        "skipped" if case.get("result") == "skipped" or case.find("skipped") is not None else "passed"
    print(f"- NcclOneRank.{case.get('name')}: {state} ({case.get('time')} s)")
PY
if [ -x "$root/bin/wick_train_fixture" ]; then
  timeout "${WICK_GPU_TEST_TIMEOUT:-480}" "$root/tests/train/train_nccl_test.sh" "$root/bin/wick" \
    "$root/bin/wick_train_fixture" "$out/train_nccl" >"$out/train_nccl.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || status=1   # 77: no GPU visible, skipped
  { echo; echo "train_nccl_test.sh (wick train --set distributed.backend=nccl vs the single group): rc=$rc"
    echo '```'; tail -30 "$out/train_nccl.log"; echo '```'; } >>"$report"
fi

if [ "${WICK_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  # The CUDA tests of the runtime (ops, random, copies) and the engine (gradients, optimizers), each
  # tool and program in parallel, with a time limit (the tools slow kernels down many times).
  section "compute-sanitizer"
  declare -A filters=([wick_runtime_tests]='OpsCuda.*:Cuda*:RandomCuda*'
                      [wick_engine_tests]='GradCuda*:FlatOptimizersCuda*:OptimizerFront.Cuda*')
  jobs_=()
  for tool in memcheck racecheck; do
    for name in wick_runtime_tests wick_engine_tests; do
      log=$out/sanitize_${tool}_$name.log
      # racecheck runs wick's own attention kernels in place of cuDNN's: its reports inside cuDNN's
      # wgmma/TMA flash-attention kernels (closed source, synchronized through mbarriers, which the tool
      # does not follow) are not wick's to fix; memcheck runs the cuDNN path.
      cudnn_attention=1; [ "$tool" = racecheck ] && cudnn_attention=0
      WICK_CUDNN_ATTENTION=$cudnn_attention timeout "${WICK_GPU_SANITIZE_TIMEOUT:-400}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$root/bin/$name" --gtest_filter="${filters[$name]}" --gtest_brief=1 >"$log" 2>&1 &
      jobs_+=("$!:$tool:$name")
    done
  done
  for entry in "${jobs_[@]}"; do
    IFS=: read -r pid tool name <<<"$entry"
    wait "$pid"; rc=$?
    [ $rc -eq 0 ] || status=1
    log=$out/sanitize_${tool}_$name.log
    echo "- $tool on $name: rc=$rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1);" \
      "$(grep -E '^\[  PASSED|^\[  FAILED|tests? from .* ran' "$log" | tr '\n' ' ')" >>"$report"
  done
fi

fi  # tests

if want bench; then
section "benchmarks"
# cuda_matmul_bench alone; the PyTorch comparisons below run cuda_ops_bench and cuda_block_bench
# themselves (bench/gpu/ops_vs_torch.py, block_vs_torch.py) next to PyTorch on the same shapes.
for program in "$root"/bin/cuda_matmul_bench; do
  [ -x "$program" ] || continue
  name=$(basename "$program")
  "$program" --benchmark_min_time=0.5 >"$out/$name.log" 2>&1
  { echo "### $name"; echo '```'; sed -n '/^ratio/,$p' "$out/$name.log"; grep -E 'GB/s|TFLOP/s' "$out/$name.log" | sed 's/\x1b\[[0-9;]*m//g'; echo '```'; } >>"$report"
done
# The gradient buckets on CUDA streams with an NCCL group of one rank (all-reduce, and reduce-scatter
# into a ZeRO-1 shard), and NCCL's one-rank collectives from 1 KiB to 256 MiB.
for zero in 0 1; do
  [ -x "$root/bin/overlap_bench" ] || break
  log=$out/overlap_bench_cuda_zero$zero.log
  "$root/bin/overlap_bench" --device cuda --zero $zero --steps 20 >"$log" 2>&1 || status=1
  { echo "### overlap_bench --device cuda --zero $zero"; echo; cat "$log"; echo; } >>"$report"
done
if [ -x "$root/bin/comm_bench" ]; then
  "$root/bin/comm_bench" --device cuda --backend nccl --max-mib 256 >"$out/comm_bench_nccl.log" 2>&1 || status=1
  { echo "### comm_bench --device cuda --backend nccl (one rank: bus bandwidth is 0 by its formula)"; echo
    cat "$out/comm_bench_nccl.log"; echo; } >>"$report"
fi
for script in "$root"/bench/gpu/*.py; do
  [ -f "$script" ] || continue
  name=$(basename "$script" .py)
  [ "$name" = flux_vs_diffusers ] && continue   # its own section below
  python3 "$script" --markdown "$out/$name.md" >"$out/$name.log" 2>&1 || status=1
  { echo "### $name"; echo; cat "$out/$name.md" 2>/dev/null || { echo '```'; tail -40 "$out/$name.log"; echo '```'; }; } >>"$report"
done
# The quickstart DiT's training step on the GPU in bf16, wick vs PyTorch (bench/dit_vs_torch.py): the
# quickstart batch (32) and a batch that fills the GPU better (256).
if [ -x "$root/bin/cpu_dit_step_bench" ] && [ -f "$root/bench/dit_vs_torch.py" ]; then
  for batch in 32 256; do
    log="$out/dit_vs_torch_b$batch.log"
    python3 "$root/bench/dit_vs_torch.py" --binary "$root/bin/cpu_dit_step_bench" --device cuda --dtype bf16 \
      --batch "$batch" --threads 1 --repetitions 5 >"$log" 2>&1 || status=1
    { echo "### dit_vs_torch: cuda bf16, batch $batch"; echo '```';
      if grep -q '^quickstart DiT' "$log"; then sed -n '/^quickstart DiT/,$p' "$log"; else tail -30 "$log"; fi
      echo '```'; } >>"$report"
  done
fi
fi  # bench

# The full-size Flux.1-dev LoRA train step (11.9B parameters, bf16, LoRA r16, checkpointing, 8-bit
# AdamW, 1024²: 4096 + 512 tokens), wick vs diffusers + PEFT eager and with regional torch.compile,
# each side in its own process (bench/gpu/flux_vs_diffusers.py). diffusers, importlib_metadata and
# bitsandbytes are not in the GPU machine's image: the bundle carries them in python/. A side that
# runs out of memory or time is reported in the table; only wick's own failure fails the run. The
# sides share a budget of WICK_GPU_FLUX_BUDGET seconds (the compile side gets what is left);
# WICK_GPU_FLUX_ARGS adds options (e.g. "--depth 4 --depth-single 8" for a shallower model).
if want flux && [ -x "$root/bin/flux_step_bench" ]; then
  section "Flux.1-dev LoRA train step, wick vs diffusers + PEFT"
  log=$out/flux_vs_diffusers.log
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout "${WICK_GPU_FLUX_TIMEOUT:-540}" \
    python3 "$root/bench/gpu/flux_vs_diffusers.py" --wick "$root/bin/flux_step_bench" --compile \
      --budget "${WICK_GPU_FLUX_BUDGET:-500}" --markdown "$out/flux_vs_diffusers.md" ${WICK_GPU_FLUX_ARGS:-} \
      >"$log" 2>&1 || status=1
  { echo "\`python3 bench/gpu/flux_vs_diffusers.py --wick bin/flux_step_bench --compile --budget ${WICK_GPU_FLUX_BUDGET:-500} ${WICK_GPU_FLUX_ARGS:-}\`"
    echo; cat "$out/flux_vs_diffusers.md" 2>/dev/null || echo "(no table: see the log below)"
    echo; echo '```'; grep -E '^(Flux step|flux_step_bench|diffusers (eager|compile)|guard|\[|warning)' "$log" | tail -40
    echo '```'; } >>"$report"
fi
# distributed.shard: weights on one GPU: the blocks' weights gathered through an NCCL group of one rank (the
# gathers' stream, events and buffers of a multi-GPU run) against the unsharded step: the same losses, the step
# time ratio, the gathers' report.
if want shard && [ -x "$root/bin/flux_step_bench" ]; then
  section "Flux LoRA step with the weights sharded (NCCL, one rank) vs unsharded"
  args=${WICK_GPU_SHARD_ARGS:---depth 4 --depth-single 8}
  # shellcheck disable=SC2086  # the arguments are words
  timeout 240 "$root/bin/flux_step_bench" $args >"$out/shard_off.log" 2>&1 || status=1
  # shellcheck disable=SC2086
  timeout 240 "$root/bin/flux_step_bench" $args --shard-weights >"$out/shard_on.log" 2>&1 || status=1
  same=no
  [ "$(grep '^flux_step_bench: losses' "$out/shard_off.log")" = "$(grep '^flux_step_bench: losses' "$out/shard_on.log")" ] &&
    [ -n "$(grep '^flux_step_bench: losses' "$out/shard_on.log")" ] && same=yes
  [ $same = yes ] || status=1
  { echo "\`bin/flux_step_bench $args [--shard-weights]\`: losses equal: $same"; echo; echo '```'
    grep -E '^flux_step_bench: (median|memory|gathers|rank|losses|guard)|error' "$out/shard_off.log" | sed 's/^/unsharded: /'
    grep -E '^flux_step_bench: (median|memory|gathers|rank|losses|guard)|error' "$out/shard_on.log" | sed 's/^/sharded:   /'
    echo '```'; } >>"$report"
fi
echo "report: $report"
exit $status
