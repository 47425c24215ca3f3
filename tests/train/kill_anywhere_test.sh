#!/usr/bin/env bash
# kill -9 anywhere (label long; outside scripts/test.sh's default run). A 2-rank `wick train` job is
# killed with SIGKILL (mpirun and both ranks at once, as a lost node) KILLS times, each at a random
# moment: odd kills after a random delay into the run, even kills inside a checkpoint save (after a
# staging directory step_<N>.tmp-* appears, plus 0-250 ms; every fsync under checkpoints/ is slowed to
# 40 ms by the write-fault shim, so a save spans its files, manifest, `latest` and pruning). After each
# kill: when checkpoints/latest exists it names a checkpoint that verifies (`wick checkpoint inspect`,
# every byte hashed), never an incomplete one; then --resume auto resumes from that checkpoint or a newer
# complete one (killed between its rename and `latest`), finishes the run, and its losses equal the
# uninterrupted run's bitwise. Prints one line per kill and a summary.
#   kill_anywhere_test.sh MPIEXEC WICK FIXTURE WRITE_FAULT_SHIM WORK_DIR [KILLS (50)]
# WICK_KILL_SEED fixes the random moments (default: the clock; printed).
set -u
mpiexec=$1 wick=$2 fixture=$3 shim=$4 work=$5 kills=${6:-50}
seed=${WICK_KILL_SEED:-$(date +%s)}
RANDOM=$seed
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
steps=30
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 6, steps: $steps, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1}
dataset: {path: $work/data/synthetic.h5}
save: {every: 3, keep_last: 2}
YAML
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
metrics() { echo "$work/out/$1/metrics.jsonl"; }
logged() { python3 "$here/last_step.py" "$(metrics "$1")" 2>/dev/null || echo 0; }
mpi() { timeout 300 "$mpiexec" --oversubscribe -np 2 "$wick" train "$work/run.yaml" --no-progress --set name="$1"; }

echo "seed $seed, $kills kills"
start=$(date +%s.%N)
mpi whole >"$work/whole.log" 2>&1 ||
  { fail "the uninterrupted run failed"; exit 1; }
duration=$(python3 -c "import time; print(max(1.0, time.time() - $start))")
echo "uninterrupted run: $duration s"

in_save=0 finished_first=0 resumed_from_none=0 newer=0
for i in $(seq 1 "$kills"); do
  name=k$i
  LD_PRELOAD="$shim" WICK_FAULT_ON=slow-fsync WICK_FAULT_PATH=/checkpoints/ WICK_FAULT_DELAY_MS=40 \
    mpi "$name" >"$work/$name.log" 2>&1 &
  job=$!
  if ((i % 2)); then
    moment=$(python3 -c "print(round($RANDOM / 32768 * $duration, 3))")
    sleep "$moment"
    how="at $moment s"
  else
    # inside a save: from a random step on, the next staging directory, then 0-250 ms
    from=$((RANDOM % (steps - 3) + 1))
    for _ in $(seq 1 3000); do
      [ "$(logged "$name")" -ge $from ] && break
      kill -0 $job 2>/dev/null || break
      sleep 0.01
    done
    for _ in $(seq 1 20000); do
      ls -d "$work/out/$name/checkpoints/"step_*.tmp-* >/dev/null 2>&1 && break
      kill -0 $job 2>/dev/null || break
      sleep 0.002
    done
    delay=$((RANDOM % 251))
    sleep "$(printf '0.%03d' $delay)"
    how="in a save from step $from + $delay ms"
  fi
  pids=$(pgrep -f "train $work/run.yaml --no-progress --set name=$name\$" | tr '\n' ' ')
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null
  wait $job 2>/dev/null
  status=$?
  staging=$(cd "$work/out/$name/checkpoints" 2>/dev/null && ls -d step_*.tmp-* latest.tmp* 2>/dev/null | tr '\n' ' ')
  [ -n "$staging" ] && in_save=$((in_save + 1))
  at=$(logged "$name")
  latest=$(cat "$work/out/$name/checkpoints/latest" 2>/dev/null | head -1)
  [ "$status" = 0 ] && finished_first=$((finished_first + 1))
  line="kill $i ($how): status $status, $at steps logged, latest ${latest:-none}, left ${staging:-nothing}"
  if [ -n "$latest" ]; then
    "$wick" checkpoint inspect "$work/out/$name/checkpoints/$latest" >"$work/$name.inspect" 2>&1 ||
      fail "$name: latest names $latest, which does not verify: $(tail -1 "$work/$name.inspect")"
  else
    resumed_from_none=$((resumed_from_none + 1))
  fi
  mpi "$name" >"$work/$name.resume.log" 2>&1 ||
    { fail "$name: the resumed run exited $?"; tail -3 "$work/$name.resume.log"; }
  # --resume auto takes the newest checkpoint that verifies: the one `latest` names, or a newer one when
  # the kill came after its directory was renamed into place but before `latest` was replaced.
  resumed_at=$(sed -n 's/^wick train: resuming from .*step_0*\([0-9][0-9]*\) (step .*/\1/p' "$work/$name.resume.log")
  resumed_at=${resumed_at:-0}
  if [ -n "$latest" ] && [ "$status" != 0 ]; then
    [ "$resumed_at" -ge "$((10#${latest#step_}))" ] || fail "$name: resumed from step $resumed_at, before $latest"
    [ "$resumed_at" -gt "$((10#${latest#step_}))" ] && newer=$((newer + 1))
  fi
  compared=$(python3 "$here/compare_losses.py" "$(metrics whole)" "$(metrics "$name")" $steps) ||
    fail "$name: the resumed losses differ from the uninterrupted run's: $compared"
  echo "$line; resumed from step $resumed_at: ${compared##*: }"
  rm -rf "$work/out/$name"  # keep the disk use flat; the logs stay
done
echo "summary: $kills kills, $in_save inside a save (staging left behind), $resumed_from_none before the first" \
     "checkpoint, $newer between a checkpoint's rename and \`latest\` (resumed from the newer one)," \
     "$finished_first after the run had finished; $failures failures (seed $seed)"
[ $failures = 0 ] && echo PASS || echo FAIL
[ $failures = 0 ]
