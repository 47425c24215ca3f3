#!/usr/bin/env bash
# `wick train` from the command line: bad input gives its message and exit status before the first
# step; non-finite losses end the run with status 4 and the last checkpoint intact; a run killed with
# SIGKILL after a checkpoint and resumed with --resume auto logs the same losses and ends with the same
# parameters as an uninterrupted run, whose exported model (model/<name>.safetensors) is in save.dtype; a second job
# on a live run is refused, or with --resume auto waits for it and continues it.
#   train_cli_test.sh WICK FIXTURE WORK_DIR
set -u
wick=$1 fixture=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 8, steps: 20, lr: 3.0e-3, optimizer: adamw, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 10, keep_last: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect() {  # expect STATUS PATTERN ARGS...: wick train run.yaml ARGS exits STATUS saying PATTERN
  local want=$1 pattern=$2 out status
  shift 2
  out=$("$wick" train "$work/run.yaml" --no-progress "$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ]; then
    fail "wick train $* exited $status, expected $want"; echo "$out" | tail -5
  elif ! grep -q -- "$pattern" <<<"$out"; then
    fail "wick train $*: output lacks '$pattern'"; echo "$out" | tail -5
  else
    echo "ok: $* -> $status: $(grep -m1 -- "$pattern" <<<"$out" | cut -c1-150)"
  fi
}

# Bad input: nothing is trained, nothing is written into the run directory.
expect 3 "absent.h5" --set name=missing --set dataset.path="$work/data/absent.h5"
expect 3 "non-finite" --set name=nan --set dataset.path="$work/data/nan.h5"
expect 2 "did you mean 'lr'" --set name=key --set train.lrr=1
expect 2 "valid values: adamw8bit, adamw, sgd" --set name=opt --set train.optimizer=adam
expect 2 "model.in_channels is 16 but the latents have 4 channels" --set name=shape --set model.in_channels=16
# A batch larger than a bucket repeats samples: said once, before the first step; a batch that fits says nothing.
expect 0 "note: 1 of 1 buckets hold fewer samples than a global batch of 128: 8x8 (96); their batches repeat" \
  --set name=big_batch --set train.batch_size=128 --set train.steps=1
out=$("$wick" train "$work/run.yaml" --no-progress --set name=fits --set train.steps=1 2>&1)
grep -q "fewer samples than a global batch" <<<"$out" && fail "a batch of 8 in a bucket of 96 was said to repeat samples"
expect 2 "registered: dit, flux" --set name=arch --set model.arch=unet
expect 3 "synthetic.h5" --set name=arch --set model.arch=flux --set model.name_or_path="$work/data/synthetic.h5"
expect 2 "dataset.weight is 2, but the run has one dataset" --set name=weight --set dataset.weight=2
# An ai-toolkit option that would change training is warned about before anything else happens.
expect 2 "wick: warning: --set train.loss_type=l1: 'train.loss_type' (l1) is ignored by wick" --set name=warn \
  --set train.loss_type=l1 --set model.in_channels=16
touch "$work/not_a_dir"
expect 2 "cannot be created" --set output_dir="$work/not_a_dir"
out=$("$wick" train "$work/absent.yaml" 2>&1)
status=$?
if [ "$status" -eq 2 ] && grep -q "absent.yaml" <<<"$out"; then echo "ok: missing config -> 2"; else
  fail "a missing config file exited $status: $out"; fi
for name in missing nan key opt shape arch weight warn; do
  [ ! -e "$work/out/$name/config.yaml" ] || fail "$name: config.yaml was written by a run that never started"
done

# --dry-run: the checks and the memory plan, the resolved config on stdout, nothing trained or written; a bad dataset
# is refused the same way as without it.
out=$("$wick" train "$work/run.yaml" --no-progress --dry-run --set name=dry 2>"$work/dry.err")
status=$?
[ "$status" = 0 ] && grep -q "wick train: dry: dry run: the config, the dataset, the weights and the memory plan are checked" \
  "$work/dry.err" && grep -q "wick train: memory estimate per rank:" "$work/dry.err" && grep -q '^name: "dry"' <<<"$out" &&
  grep -q "^  steps: 20$" <<<"$out" || { fail "--dry-run ($status)"; cat "$work/dry.err"; }
[ ! -e "$work/out/dry" ] || fail "--dry-run wrote $work/out/dry"
expect 3 "absent.h5" --dry-run --set name=dry --set dataset.path="$work/data/absent.h5"

# wick presets CONFIG: for the model the config describes, the layers each preset wraps.
out=$("$wick" presets "$work/run.yaml" 2>&1)
grep -q "^  attention        blocks.0.attn.q, blocks.0.attn.kv, blocks.0.attn.proj, blocks.1.attn.q, blocks.1.attn.kv, blocks.1.attn.proj$" \
  <<<"$out" && grep -q "^  all              blocks.0.attn.q, .* (12 layers)$" <<<"$out" ||
  { fail "wick presets run.yaml did not list the layers of each preset"; echo "$out"; }

# Non-finite losses: steps skipped, then status 4; the checkpoint of step 1 stays the latest.
expect 4 "3 non-finite losses in a row" --set name=nonfinite --set train.lr=1e30 --set train.max_grad_norm=0 \
  --set train.max_nonfinite_steps=3 --set save.every=1
[ "$(cat "$work/out/nonfinite/checkpoints/latest")" = step_00000001 ] || fail "latest does not name step_00000001"
"$wick" checkpoint inspect "$work/out/nonfinite/checkpoints/latest" >/dev/null || fail "step_00000001 does not verify"

# kill -9 after a checkpoint, resume, compare with an uninterrupted run.
steps=300
"$wick" train "$work/run.yaml" --no-progress --set name=whole --set train.steps=$steps >"$work/whole.log" 2>&1 ||
  { fail "the uninterrupted run failed"; tail -5 "$work/whole.log"; }
"$wick" train "$work/run.yaml" --no-progress --set name=killed --set train.steps=$steps >"$work/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  # A checkpoint at 30 and a few steps past it: the resume must replay those.
  [ -e "$work/out/killed/checkpoints/step_00000030" ] &&
    [ "$(wc -l <"$work/out/killed/metrics.jsonl")" -ge 35 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
killed_at=$(python3 "$here/last_step.py" "$work/out/killed/metrics.jsonl")
[ "$killed_at" -gt 30 ] || fail "killed at step $killed_at, not past the checkpoint at 30"
echo "killed after step $killed_at of $steps (checkpoints: $(ls "$work/out/killed/checkpoints" | tr '\n' ' '))"
[ "$killed_at" -lt "$steps" ] || fail "the run finished before it was killed; the test proves nothing"
"$wick" train "$work/run.yaml" --no-progress --set name=killed --set train.steps=$steps >"$work/resumed.log" 2>&1 ||
  { fail "the resumed run failed"; tail -5 "$work/resumed.log"; }
grep -m1 "resuming from" "$work/resumed.log" || fail "the second run did not resume"
python3 "$here/compare_losses.py" "$work/out/whole/metrics.jsonl" "$work/out/killed/metrics.jsonl" $steps ||
  fail "the resumed run's losses differ from the uninterrupted run's"
python3 "$here/same_tensors.py" "$work/out/whole/checkpoints/$(printf step_%08d $steps)/model.safetensors" \
  "$work/out/killed/checkpoints/$(printf step_%08d $steps)/model.safetensors" ||
  fail "the resumed run's final parameters differ from the uninterrupted run's"
# One job per run directory (engine/train/run_lock.h): while a run trains, a second job on it is refused at once
# (exit 2, naming the first's pid) when it resumes from a given checkpoint; with --resume auto it waits for the first
# to end (here the first stops on SIGTERM, exit 75) and then continues it.
"$wick" train "$work/run.yaml" --no-progress --set name=locked --set train.steps=100000 >"$work/locked.log" 2>&1 &
first=$!
for _ in $(seq 1 3000); do
  [ -e "$work/out/locked/checkpoints/step_00000010" ] && break
  kill -0 $first 2>/dev/null || break
  sleep 0.01
done
out=$("$wick" train "$work/run.yaml" --no-progress --set name=locked --set train.steps=100000 \
  --resume "$work/out/locked/checkpoints/step_00000010" 2>&1)
status=$?
[ "$status" = 2 ] && grep -q "another job is training in $work/out/locked (host .*, pid $first, since " <<<"$out" ||
  { fail "a second job on a live run was not refused with exit 2 naming the first ($status)"; echo "$out" | tail -3; }
"$wick" train "$work/run.yaml" --no-progress --set name=locked --set train.steps=100000 >"$work/waiter.log" 2>&1 &
waiter=$!
for _ in $(seq 1 3000); do grep -q "is locked by another job" "$work/waiter.log" && break; sleep 0.01; done
grep -q "is locked by another job (host .*, pid $first, since .*); waiting up to 30 s" "$work/waiter.log" ||
  fail "the --resume auto job did not say it waits for the first"
kill -TERM $first
wait $first
status=$?
[ "$status" = 75 ] || fail "the first job ended with $status after SIGTERM, not 75"
for _ in $(seq 1 3000); do grep -q "resuming from" "$work/waiter.log" && break; sleep 0.01; done
stopped_at=$(python3 - "$work/locked.log" <<'PY'
import re, sys
m = re.search(r"stopped after step (\d+)", open(sys.argv[1]).read())
print(m.group(1) if m else "none")
PY
)
grep -q "resuming from .*$(printf step_%08d "$stopped_at")" "$work/waiter.log" ||
  fail "the waiting job did not continue from the first's checkpoint at step $stopped_at"
kill -TERM $waiter
wait $waiter
status=$?
[ "$status" = 75 ] || { fail "the waiting job ended with $status, not 75"; tail -3 "$work/waiter.log"; }
echo "one job per run directory: the second refused, the waiter resumed from step $stopped_at"

# A stop signal during a sample grid does not wait for it: a grid of 100000 denoising steps at step 5, SIGTERM once it
# has started; the run ends with its checkpoint and status 75 within seconds, the grid left unwritten.
"$wick" train "$work/run.yaml" --no-progress --set name=grid --set sample.every=5 --set sample.steps=100000 \
  --set 'sample.prompts=["a cat"]' >"$work/grid.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do grep -q "sampling the grid of step 5" "$work/grid.log" && break; sleep 0.01; done
sleep 0.5
kill -TERM $pid
signalled=$(date +%s)
wait $pid
status=$?
took=$(($(date +%s) - signalled))
[ "$status" = 75 ] && [ "$took" -le 60 ] && grep -q "the grid of step 5 was left unfinished for the stop request" "$work/grid.log" ||
  { fail "a stop during a sample grid: status $status after $took s"; tail -3 "$work/grid.log"; }
[ ! -e "$work/out/grid/samples/step_5.png" ] || fail "the unfinished grid was written"
echo "a stop during a sample grid: exit $status $took s after the signal"

# network.type full also exports the model in save.dtype (f16 by default): the final weights, rounded.
python3 - "$work/out/whole/model/whole.safetensors" "$work/out/whole/checkpoints/$(printf step_%08d $steps)/model.safetensors" <<'PY' ||
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    values = {}
    for name, e in header.items():
        raw = body[e["data_offsets"][0]:e["data_offsets"][1]]
        code = {"F16": "e", "F32": "f"}[e["dtype"]]
        values[name] = (e["dtype"], e["shape"], struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))
    return meta, values
meta, exported = read(sys.argv[1])
_, exact = read(sys.argv[2])
bad = [k for k in exact if k not in exported or exported[k][0] != "F16" or exported[k][1] != exact[k][1] or
       any(abs(a - b) > abs(b) * 2.0**-11 + 2.0**-24 for a, b in zip(exported[k][2], exact[k][2]))]
print(f"model/whole.safetensors: {len(exported)} tensors in f16 (metadata wick_step {meta.get('wick_step')}), "
      f"{len(bad)} differ from the checkpoint's f32 weights beyond f16 rounding")
sys.exit(0 if not bad and exported.keys() == exact.keys() and meta.get("wick_network_type") == "full" else 1)
PY
  fail "model/whole.safetensors is not the final model rounded to f16"
exit $((failures > 0))
