#!/usr/bin/env bash
# A run directory copied by tools that do not keep symbolic links resumes and saves again: a run
# stopped after step 20 (checkpoints at 10 and 20) is copied with `cp -rL` and with Python's
# shutil.copytree (symlinks followed, its default), in today's layout (`latest` a one-line file) and
# in the layout of older wick (`latest` a symlink, which those tools turn into a directory). Each copy
# resumes with --resume auto (one more with --resume .../checkpoints/latest), trains to step 30 and
# saves there: the losses equal an uninterrupted
# run's bitwise, `latest` ends a file naming step_00000030, and nothing that was a valid checkpoint
# is lost. model.name_or_path, --resume and `wick checkpoint inspect` given .../checkpoints/latest
# read the file, the old symlink and the copied directory alike.
#   copied_run_test.sh WICK FIXTURE WORK_DIR
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
train: {batch_size: 8, steps: 30, lr: 3.0e-3, optimizer: adamw, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 10, keep_last: 0}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() {  # train NAME LOG ARGS...
  local name=$1 log=$2
  shift 2
  "$wick" train "$work/run.yaml" --no-progress --set name="$name" "$@" >"$log" 2>&1
}
out=$work/out

train whole "$work/whole.log" || { fail "the uninterrupted run failed"; tail -5 "$work/whole.log"; }
train new "$work/new.log" --stop-after 20 || { fail "the run stopped at 20 failed"; tail -5 "$work/new.log"; }
[ -f "$out/new/checkpoints/latest" ] && [ ! -L "$out/new/checkpoints/latest" ] || fail "latest is not a plain file"
[ "$(cat "$out/new/checkpoints/latest")" = step_00000020 ] || fail "latest does not say step_00000020"
# Older wick: the same run with `latest` a relative symlink.
cp -a "$out/new" "$out/old"
rm "$out/old/checkpoints/latest" && ln -s step_00000020 "$out/old/checkpoints/latest"

copy() {  # copy TOOL SOURCE DEST
  case $1 in
    cp) cp -rL "$2" "$3" ;;
    copytree) python3 -c 'import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])' "$2" "$3" ;;
    keep) cp -a "$2" "$3" ;;
  esac
}

# CASE = LAYOUT-TOOL-RESUME: resume with --resume auto, or with --resume <copy>/checkpoints/latest.
for case in new-cp-auto new-copytree-auto old-cp-auto old-copytree-auto old-keep-auto old-copytree-path; do
  IFS=- read -r layout tool how <<<"$case"
  dest=$out/$case
  failures_before=$failures
  copy "$tool" "$out/$layout" "$dest" || { fail "$case: the copy failed"; continue; }
  latest=$dest/checkpoints/latest
  if [ "$layout" = old ] && [ "$tool" != keep ]; then
    [ -d "$latest" ] && [ ! -L "$latest" ] || fail "$case: the copy tool kept the symlink; the test proves nothing"
  fi
  # Readers of `latest` before the resume: inspect, and a LoRA on it as model.name_or_path.
  "$wick" checkpoint inspect "$latest" >"$work/$case.inspect" 2>&1 || fail "$case: inspect of latest failed"
  grep -q "step_00000020" "$work/$case.inspect" || fail "$case: inspect of latest did not read step_00000020"
  if [ "$case" = old-cp-auto ]; then
    train "$case-lora" "$work/$case-lora.log" --set model.name_or_path="$latest" --set network.type=lora \
      --set network.linear=4 --set train.steps=2 ||
      { fail "$case: a LoRA on .../checkpoints/latest (a copied directory) failed"; tail -3 "$work/$case-lora.log"; }
  fi
  resume=auto
  [ "$how" = path ] && resume=$latest
  train "$case" "$work/$case.log" --resume "$resume" ||
    { fail "$case: the resumed copy failed (exit $?)"; tail -5 "$work/$case.log"; continue; }
  grep -q "resuming from $dest/checkpoints/step_00000020" "$work/$case.log" || fail "$case: did not resume from step 20"
  python3 "$here/compare_losses.py" "$out/whole/metrics.jsonl" "$dest/metrics.jsonl" 30 >"$work/$case.compare" ||
    { fail "$case: the losses differ from the uninterrupted run's"; head -5 "$work/$case.compare"; }
  [ -f "$latest" ] && [ ! -L "$latest" ] && [ "$(cat "$latest")" = step_00000030 ] ||
    fail "$case: after the save, latest is not a file naming step_00000030"
  for step in 10 20 30; do
    "$wick" checkpoint inspect "$dest/checkpoints/$(printf step_%08d $step)" >/dev/null 2>&1 ||
      fail "$case: step $step does not verify"
  done
  leftovers=$(cd "$dest/checkpoints" && ls | grep -v -x -e latest -e step_00000010 -e step_00000020 -e step_00000030)
  [ -z "$leftovers" ] || fail "$case: unexpected entries in checkpoints/: $leftovers"
  if [ "$layout" = old ] && [ "$tool" != keep ]; then
    grep -q "was a directory, a copy of $dest/checkpoints/step_00000020 (which verifies)" "$work/$case.log" ||
      fail "$case: no note about the copied latest directory"
  fi
  [ "$failures" -eq "$failures_before" ] && echo "ok: $case: $(tail -1 "$work/$case.compare"), latest -> $(cat "$latest")"
done
exit $((failures > 0))
