#!/usr/bin/env bash
# Two nodes on one machine: Open MPI's mpirun starts 2 x 2 ranks on the made-up hosts nodeA and
# nodeB of a hostfile through fake_node_ssh.sh (a stand-in for ssh: each "node" is a daemon of its
# own, in a UTS namespace named after the host where one can be made), so that node-local ranks, the
# GPU choice and the TCP transport between nodes run as on a cluster (docs/distributed.md "Several
# nodes"). Checks:
#  - `wick ranks`: alone, one rank of the single group; under mpirun, rank r is on node r / 2 with
#    local rank r % 2, on the host named nodeA / nodeB (where the namespaces work), and on nodes with
#    2 GPUs would take cuda:(r % 2); placed round-robin (--map-by node) ranks 0 2 share node 0, and
#    with 1 GPU per node the sharing is reported;
#  - the transport: Open MPI's own record (btl_base_verbose) says every pair of ranks on different
#    nodes talks over TCP and every pair on one node over shared memory (vader): the two daemons are
#    two nodes to Open MPI, not one;
#  - training (the tiny DiT of the other mpi tests, global batch 10, 32-bit AdamW: adamw8bit turns the
#    1e-8 differences of another rank count into a flipped 8-bit code now and then, which over 20
#    steps reached 1.1e-5 here): 2 x 2 ranks give the losses of
#    4 ranks on one node bitwise; a 2 x 2 run killed with kill -9 of rank 3 (on nodeB) after its first
#    checkpoint continues on 1 node x 3 ranks with --resume auto, and its losses stay within 1e-5
#    (relative) of the uninterrupted 2 x 2 run;
#  - a run directory that nodeB's ranks do not see (a relative output_dir, another working
#    directory there) is refused before step 1 with exit status 2, naming rank 2 on node 1;
#  - SIGUSR1 to mpirun reaches the ranks of both nodes: all 4 stop after the same step with a
#    checkpoint that verifies, and the job exits 75 (docs/distributed.md "Preemption");
#  - with ARCH_FIXTURE, the tiny Flux LoRA on 2 x 2 ranks with distributed.shard: weights, the blocks sharded over
#    the 2 ranks of each node (shard_group: node) and over all 4 (world): both repeat the ZeRO-1 run's losses bitwise.
#   two_nodes_test.sh MPIEXEC WICK FIXTURE WORK_DIR [ARCH_FIXTURE]
set -u
mpiexec=$1 wick=$2 fixture=$3 work=$4 arch_fixture=${5:-}
case $wick in */*) wick=$(cd "$(dirname "$wick")" && pwd)/$(basename "$wick") ;; esac  # ranks start elsewhere (-wdir)
here=$(cd "$(dirname "$0")" && pwd)
# The launch options are Open MPI 4's (an ssh agent for its daemons, the vader and tcp transports;
# Open MPI 5's prte names them otherwise).
version=$("$mpiexec" --version 2>&1 | head -1)
if ! grep -Eq "\((Open MPI|OpenRTE)\) 4\." <<<"$version"; then
  echo "two_nodes_test.sh: needs Open MPI 4.x's mpirun, $mpiexec is '$version': skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/data" >/dev/null || { echo "FAIL: the fixture program failed"; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive WICK_FAKE_NODES_DIR=$work/nodes
printf 'nodeA slots=2\nnodeB slots=2\n' >"$work/hosts"
# Two nodes: the hostfile's hosts reached through the fake ssh; the point-to-point layer of Open MPI
# (ob1, not UCX) with its TCP transport on the loopback interface between nodes.
# Waiting ranks yield the CPU (mpirun cannot know that the two nodes share this machine's cores).
# shellcheck disable=SC2054  # self,vader,tcp is one value
two_nodes=(--hostfile "$work/hosts" --mca plm_rsh_agent "$here/fake_node_ssh.sh" --mca pml ob1
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$(date +%s)

# ---- where the ranks run ----
# Without a launcher: one rank, the single group.
"$wick" ranks >"$work/alone.log" 2>&1 || fail "wick ranks without a launcher failed"
# shellcheck disable=SC2015  # fail when either grep fails
grep -q "^wick ranks: 1 rank on 1 node, started by none, backend single$" "$work/alone.log" &&
  grep -q "^  rank 0: node 0 ([^)]*), local rank 0 of 1, cpu$" "$work/alone.log" ||
  { fail "wick ranks without a launcher does not describe one rank"; cat "$work/alone.log"; }
timeout 120 "$mpiexec" "${two_nodes[@]}" --tag-output --mca btl_base_verbose 100 -np 4 \
  "$wick" ranks --gpus-per-node 2 >"$work/ranks.log" 2>&1 || { fail "wick ranks on 2 x 2 ranks failed"; tail -20 "$work/ranks.log"; }
mode=$(cat "$work/nodes/nodeB/mode" 2>/dev/null)
echo "fake nodes: host names from namespaces: ${mode:-unknown}"
for r in 0 1 2 3; do
  node=$((r / 2)) host=nodeA
  [ $node = 1 ] && host=nodeB
  [ "$mode" = none ] && host="[^)]*"
  grep -q "^\[1,0\]<stdout>:  rank $r: node $node ($host), local rank $((r % 2)) of 2, cuda:$((r % 2))$" "$work/ranks.log" ||
    fail "rank $r is not reported on node $node ($host) with local rank $((r % 2)) of 2 and cuda:$((r % 2))"
done
grep "<stdout>" "$work/ranks.log"
grep -q "sums correct on every rank" "$work/ranks.log" || fail "the all-reduce over 2 nodes was not correct"
# Every "Using BTL for send to [[job,1],PEER] on node N" line of rank SENDER: another node -> tcp.
python3 - "$work/ranks.log" <<'PY' || fail "the ranks did not talk over TCP between nodes and shared memory within one"
import re, sys
pairs = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[1,(\d+)\]<stderr>:.*bml: Using (\w+) btl for send to \[\[\d+,1\],(\d+)\] on node (\S+)", line)
    if m:
        sender, btl, peer = int(m[1]), m[2], int(m[3])
        pairs[(sender, peer)] = btl
bad = []
for (sender, peer), btl in sorted(pairs.items()):
    want = "self" if sender == peer else "vader" if sender // 2 == peer // 2 else "tcp"
    if btl != want:
        bad.append(f"rank {sender} -> rank {peer}: {btl}, not {want}")
cross = sum(1 for (s, p) in pairs if s // 2 != p // 2)
print(f"transport: {len(pairs)} sender/peer pairs recorded, {cross} between nodes, all over tcp" if not bad else "")
for b in bad:
    print("  " + b)
sys.exit(1 if bad or cross == 0 else 0)
PY

# Round-robin placement: ranks 0 2 on node 0, 1 3 on node 1; one GPU per node is shared.
timeout 120 "$mpiexec" "${two_nodes[@]}" --map-by node -np 4 "$wick" ranks --gpus-per-node 1 >"$work/by_node.log" 2>&1 ||
  { fail "wick ranks --map-by node failed"; tail -20 "$work/by_node.log"; }
# shellcheck disable=SC2015  # fail when either grep fails
grep -q "^node 0 ([^)]*): ranks 0 2, local ranks 0-1, cuda:0 cuda:0$" "$work/by_node.log" &&
  grep -q "^node 1 ([^)]*): ranks 1 3, local ranks 0-1, cuda:0 cuda:0$" "$work/by_node.log" ||
  { fail "--map-by node: the ranks are not reported round-robin"; cat "$work/by_node.log"; }
grep -q "^warning: ranks 0 and 2 share cuda:0 on node 0: NCCL needs one GPU per rank" "$work/by_node.log" ||
  fail "--map-by node with 1 GPU per node: the shared GPU is not reported"

# ---- training: 2 x 2 against 1 x 4, then killed and resumed on 1 x 3 ----
cat >"$work/run.yaml" <<YAML
name: run
output_dir: $work/out
device: cpu
model: {hidden_size: 32, depth: 2, num_heads: 2}
train: {global_batch_size: 10, steps: 30, lr: 3.0e-3, optimizer: adamw, log_every: 1, caption_dropout: 0.2}
dataset: {path: $work/data/synthetic.h5}
save: {every: 10, keep_last: 0}
distributed: {backend: auto}
YAML
metrics() { echo "$work/out/$1/metrics.jsonl"; }
timeout 240 "$mpiexec" "${two_nodes[@]}" -np 4 "$wick" train "$work/run.yaml" --no-progress --set name=nodes2x2 \
  >"$work/nodes2x2.log" 2>&1 || { fail "the 2 x 2 run failed"; tail -20 "$work/nodes2x2.log"; }
# shellcheck disable=SC2015  # fail when either grep fails
grep -q "^wick train: 4 ranks on 2 nodes (mpi):$" "$work/nodes2x2.log" &&
  grep -q "^wick train:   node 1 ([^)]*): ranks 2-3, local ranks 0-1, cpu cpu$" "$work/nodes2x2.log" ||
  { fail "the 2 x 2 run does not report 4 ranks on 2 nodes"; grep "wick train" "$work/nodes2x2.log"; }
timeout 240 "$mpiexec" --oversubscribe -np 4 "$wick" train "$work/run.yaml" --no-progress --set name=node1x4 \
  >"$work/node1x4.log" 2>&1 || { fail "the 1 x 4 run failed"; tail -20 "$work/node1x4.log"; }
grep -q "^wick train: 4 ranks on 1 node (mpi):$" "$work/node1x4.log" || fail "the 1 x 4 run does not report 1 node"
python3 "$here/compare_losses.py" "$(metrics nodes2x2)" "$(metrics node1x4)" 30 ||
  fail "2 nodes x 2 ranks differ from 1 node x 4 ranks"

# kill -9 of rank 3 (on nodeB) once the checkpoint of step 10 is there and step 11 is logged. Where
# the machine is too busy to catch the run before its last checkpoint (step 30), once more, at most
# three times.
# killed_run NAME: 0 when the job was killed mid-run with a checkpoint before step 30 as `latest`.
killed_run() {
  local name=$1 job victim pid environment status latest
  timeout 240 "$mpiexec" "${two_nodes[@]}" -np 4 "$wick" train "$work/run.yaml" --no-progress --set name="$name" \
    >"$work/$name.log" 2>&1 &
  job=$!
  for _ in $(seq 1 6000); do
    [ -f "$work/out/$name/checkpoints/latest" ] && grep -q '^{"step":11,' "$(metrics "$name")" 2>/dev/null && break
    kill -0 $job 2>/dev/null || break
    sleep 0.02
  done
  # The wick process whose environment says rank 3 on nodeB, among this run's processes.
  victim=
  for pid in $(pgrep -f "train $work/run.yaml --no-progress --set name=$name\$"); do
    environment=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
    grep -qx "WICK_FAKE_NODE=nodeB" <<<"$environment" && grep -qx "OMPI_COMM_WORLD_RANK=3" <<<"$environment" &&
      victim=$pid
  done
  [ -n "$victim" ] && kill -9 "$victim"
  wait $job
  status=$?
  latest=$(cat "$work/out/$name/checkpoints/latest" 2>/dev/null)
  local what="rank 3 was not found"
  [ -n "$victim" ] && what="killed rank 3 (pid $victim, on nodeB)"
  echo "$name: $what after step $(python3 "$here/last_step.py" "$(metrics "$name")") was logged; the job" \
    "exited $status; latest names ${latest:-nothing}"
  [ -n "$victim" ] && [ $status != 0 ] && [ -n "$latest" ] && [ "$latest" != step_00000030 ]
}
killed=
for attempt in 1 2 3; do
  killed_run "killed$attempt" && { killed=killed$attempt; break; }
done
if [ -z "$killed" ]; then
  fail "three 2 x 2 runs could not be killed mid-run"
else
  timeout 240 "$mpiexec" --oversubscribe -np 3 "$wick" train "$work/run.yaml" --no-progress --set name="$killed" \
    --resume auto >"$work/resumed.log" 2>&1 || { fail "the resume on 1 x 3 ranks failed"; tail -20 "$work/resumed.log"; }
  grep -m1 "resuming from" "$work/resumed.log" || fail "the 1 x 3 run did not resume"
  grep -q "^wick train: 3 ranks on 1 node (mpi):$" "$work/resumed.log" || fail "the resumed run does not report 3 ranks on 1 node"
  python3 "$here/compare_losses.py" "$(metrics nodes2x2)" "$(metrics "$killed")" 30 --relative 1e-5 ||
    fail "the run killed on 2 x 2 and resumed on 1 x 3 left the uninterrupted 2 x 2 losses by more than 1e-5"
fi

# Sharded weights inside each node (distributed.shard_group: node: every node holds the whole model, its ranks a
# half each, and the gathers stay inside the node) and over both nodes (world), against ZeRO-1: bitwise.
if [ -n "$arch_fixture" ]; then
  "$arch_fixture" flux data "$work/flux" >/dev/null || fail "the arch fixture program failed"
  cat >"$work/flux.yaml" <<YAML
name: flux
output_dir: $work/out
device: cpu
model: {arch: flux, name_or_path: $work/flux/flux_tiny.safetensors}
network: {type: lora, linear: 4, linear_alpha: 4}
train: {global_batch_size: 4, steps: 8, lr: 1.0e-2, optimizer: adamw, log_every: 1, gradient_checkpointing: true,
        noise_scheduler: flowmatch, timestep_sampling: flux_shift}
dataset: {path: $work/flux/flux.h5}
save: {every: 0, keep_last: 0}
YAML
  for level in zero1:optimizer:world node:weights:node world:weights:world; do
    IFS=: read -r name shard group <<<"$level"
    timeout 240 "$mpiexec" "${two_nodes[@]}" -np 4 "$wick" train "$work/flux.yaml" --no-progress \
      --set name="flux_$name" --set distributed.shard="$shard" --set distributed.shard_group="$group" \
      >"$work/flux_$name.log" 2>&1 || { fail "the 2 x 2 flux run with shard $shard over $group failed"; tail -20 "$work/flux_$name.log"; }
  done
  grep -m1 "blocks sharded over 2 ranks of each node" "$work/flux_node.log" ||
    fail "shard_group node: the weights were not sharded over each node's 2 ranks"
  grep -m1 "blocks sharded over 4 ranks (" "$work/flux_world.log" || fail "shard_group world: not sharded over 4 ranks"
  python3 "$here/compare_losses.py" "$(metrics flux_zero1)" "$(metrics flux_node)" 8 ||
    fail "weights sharded within each node differ from ZeRO-1"
  python3 "$here/compare_losses.py" "$(metrics flux_zero1)" "$(metrics flux_world)" 8 ||
    fail "weights sharded over both nodes differ from ZeRO-1"
fi

# A run directory the nodes do not share: a relative output_dir, and nodeB's ranks started in another
# working directory (mpirun's MPMD form, one -wdir per node). Refused before step 1 (exit 2) naming
# rank 2 on node 1, instead of failing at the first checkpoint, where ranks 2-3 write their shards.
sed 's|^output_dir: .*|output_dir: out|' "$work/run.yaml" >"$work/relative.yaml"
mkdir -p "$work/wdir_a" "$work/wdir_b"
timeout 120 "$mpiexec" "${two_nodes[@]}" -np 2 --host nodeA:2 -wdir "$work/wdir_a" "$wick" train "$work/relative.yaml" \
  --no-progress : -np 2 --host nodeB:2 -wdir "$work/wdir_b" "$wick" train "$work/relative.yaml" --no-progress \
  >"$work/unshared.log" 2>&1
status=$?
grep -m1 "wick: error: output directory out/run: rank 2 (node 1) and 1 other rank(s) cannot see the run directory" \
  "$work/unshared.log" || fail "a run directory nodeB does not see was not refused naming rank 2 on node 1"
[ $status = 2 ] || fail "a run directory nodeB does not see: exit status $status, not 2"
[ ! -e "$work/wdir_a/out/run/metrics.jsonl" ] || fail "a run directory nodeB does not see: steps were trained"
[ -z "$(find "$work/wdir_a" "$work/wdir_b" -type f)" ] || fail "the shared-directory check left files behind"

# Preemption across nodes: SIGUSR1 to mpirun reaches the ranks of both nodes (through each node's
# daemon); every rank stops after the same step with a checkpoint and the job exits 75.
"$mpiexec" "${two_nodes[@]}" -np 4 "$wick" train "$work/run.yaml" --no-progress --set name=preempted \
  >"$work/preempted.log" 2>&1 &
job=$!
for _ in $(seq 1 6000); do
  [ -f "$work/out/preempted/checkpoints/latest" ] && grep -q '^{"step":11,' "$(metrics preempted)" 2>/dev/null && break
  kill -0 $job 2>/dev/null || break
  sleep 0.02
done
kill -USR1 $job
for _ in $(seq 1 1200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { fail "the job did not end within 120 s of SIGUSR1"; kill -9 $job; }
wait $job
status=$?
latest=$(cat "$work/out/preempted/checkpoints/latest" 2>/dev/null)
echo "preempted: SIGUSR1 to mpirun; exit status $status; latest names ${latest:-nothing}"
grep -E "stopped after step" "$work/preempted.log" | cut -c1-200
[ $status = 75 ] || fail "SIGUSR1 to mpirun on 2 nodes: exit status $status, not 75"
grep -q "stopped after step $((10#${latest#step_})) of 30 on request (a stop signal on 4 of 4 ranks)" "$work/preempted.log" ||
  fail "SIGUSR1 to mpirun on 2 nodes: not every rank got it, or the checkpoint is not at the stop"
"$wick" checkpoint inspect "$work/out/preempted/checkpoints/latest" >/dev/null ||
  fail "SIGUSR1 to mpirun on 2 nodes: the checkpoint does not verify"

echo "two_nodes_test.sh: $failures failure(s) in $(($(date +%s) - start)) s"
exit $((failures > 0))
