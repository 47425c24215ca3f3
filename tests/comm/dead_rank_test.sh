#!/usr/bin/env bash
# A rank of a 2-rank `wick train` killed with kill -9 mid-run (docs/distributed.md, "A rank that dies").
#  1. Launched as docs/distributed.md recommends (mpirun --mca orte_abort_on_non_zero_status 0):
#     mpirun keeps the survivor alive; within distributed.timeout_s (3 s) plus the 3 s it waits for
#     answers, rank 0 prints an error naming the collective and rank 1 as the rank that did not
#     arrive, and exits with status 4 (seen by a wrapper script around each rank).
#  2. Launched plainly: Open MPI's mpirun ends the job at once (SIGTERM, then SIGKILL); rank 0, in
#     training, prints that it got SIGTERM (the stop request of docs/distributed.md "Preemption",
#     naming the launcher's reasons too), and mpirun's own message names rank 1.
#  3. With ARCH_FIXTURE: the tiny Flux with distributed.shard: weights (each step's forward and backward gather every
#     block from both ranks), launched as recommended: rank 0 names the collective that did not complete (mostly a
#     block's all_gather) and exits with status 4, no hang.
#   dead_rank_test.sh MPIEXEC WICK FIXTURE WORK_DIR [ARCH_FIXTURE]
set -u
mpiexec=$1 wick=$2 fixture=$3 work=$4 arch_fixture=${5:-}
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {batch_size: 6, steps: 100000, lr: 3.0e-3, optimizer: adamw8bit, log_every: 1}
dataset: {path: $work/data/synthetic.h5}
save: {every: 0, keep_last: 0}
distributed: {timeout_s: 3}
YAML
# Each rank runs under this wrapper, which reports the rank's exit status (ignoring the SIGTERM
# mpirun sends the job's processes once a rank calls MPI_Abort, so that it gets to say it).
cat >"$work/report_status.sh" <<'SH'
#!/usr/bin/env bash
trap '' TERM
"$@"
status=$?
echo "report_status: rank $OMPI_COMM_WORLD_RANK exited with status $status" >&2
exit $status
SH
chmod +x "$work/report_status.sh"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run_and_kill NAME MPIRUN_ARGS...: starts the job, kills rank 1's wick with SIGKILL once rank 0 has
# logged 3 steps, waits for the job; sets $output, $status and $after (seconds from the kill to the end).
run_and_kill() {
  local name=$1 log=$work/$1.log job pid killed=
  shift
  rm -rf "$work/out/run"
  timeout 40 "$mpiexec" --oversubscribe -np 2 "$@" train "$config" --no-progress >"$log" 2>&1 &
  job=$!
  for _ in $(seq 1 600); do
    [ "$(grep -c '"step"' "$work/out/run/metrics.jsonl" 2>/dev/null)" -ge 3 ] 2>/dev/null && break
    kill -0 $job 2>/dev/null || break
    sleep 0.05
  done
  for pid in $(pgrep -f "^$wick train $config"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      kill -9 "$pid" && killed=$pid
    fi
  done
  local start=$(date +%s.%N)
  wait $job
  status=$?
  after=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
  output=$(grep -v '^\s*$' "$log" | grep -v '^-*$')
  echo "--- $name: rank 1 (pid ${killed:-none}) killed after step $(grep -c '"step"' "$work/out/run/metrics.jsonl" 2>/dev/null);" \
    "mpirun exited with status $status ${after}s later"
  echo "$output" | grep -E "wick: |report_status|mpirun noticed|MPI_ABORT" | cut -c1-400
  [ -n "$killed" ] || fail "$name: no process of rank 1 to kill"
}

config=$work/run.yaml
run_and_kill recommended --mca orte_abort_on_non_zero_status 0 "$work/report_status.sh" "$wick"
grep -q "ranks that did not arrive: 1;" <<<"$output" || fail "recommended launch: rank 0 did not name rank 1 as lost"
grep -q "wick: error: gradient buckets: .* did not complete on rank 0 of 2 within" <<<"$output" ||
  grep -q "wick: error: .* did not complete on rank 0 of 2 within" <<<"$output" ||
  fail "recommended launch: no error naming the collective that timed out on rank 0"
grep -q "report_status: rank 0 exited with status 4" <<<"$output" || fail "recommended launch: rank 0 did not exit with status 4"
[ "$status" -ne 0 ] || fail "recommended launch: mpirun exited 0"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 20 else 1)" "$after" ||
  fail "recommended launch: the job took ${after}s after the kill (timeout_s 3 + 3 s for answers expected)"

run_and_kill plain "$wick"
grep -q "wick: rank 0 of 2 (pid [0-9]*) got SIGTERM: .*mpirun and srun also send SIGTERM to every rank when a rank died" \
  <<<"$output" || fail "plain launch: rank 0 did not say that the launcher's SIGTERM reached it"
grep -q "process rank 1 .* exited on signal 9" <<<"$output" || fail "plain launch: mpirun did not name rank 1"
[ "$status" -ne 0 ] || fail "plain launch: mpirun exited 0"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 15 else 1)" "$after" ||
  fail "plain launch: the job took ${after}s after the kill"

if [ -n "$arch_fixture" ]; then
  "$arch_fixture" flux data "$work/flux" >/dev/null || fail "the arch fixture program failed"
  config=$work/sharded.yaml
  cat >"$config" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {arch: flux, name_or_path: $work/flux/flux_tiny.safetensors}
network: {type: lora, linear: 4, linear_alpha: 4}
train: {batch_size: 1, steps: 100000, lr: 1.0e-3, optimizer: adamw8bit, log_every: 1, gradient_checkpointing: true,
        noise_scheduler: flowmatch, timestep_sampling: flux_shift}
dataset: {path: $work/flux/flux.h5}
save: {every: 0, keep_last: 0}
distributed: {timeout_s: 3, shard: weights}
YAML
  run_and_kill sharded --mca orte_abort_on_non_zero_status 0 "$work/report_status.sh" "$wick"
  grep -q "ranks that did not arrive: 1;" <<<"$output" || fail "sharded: rank 0 did not name rank 1 as lost"
  grep -q "wick: error: .* did not complete on rank 0 of 2 within" <<<"$output" ||
    fail "sharded: no error naming the collective that timed out on rank 0"
  grep -q "report_status: rank 0 exited with status 4" <<<"$output" || fail "sharded: rank 0 did not exit with status 4"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 20 else 1)" "$after" ||
    fail "sharded: the job took ${after}s after the kill (timeout_s 3 + 3 s for answers expected)"
fi

echo "dead_rank_test.sh: $failures failure(s)"
exit $((failures > 0))
