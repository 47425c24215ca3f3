#!/usr/bin/env bash
# Runs wick_comm_lost_rank_test under mpirun with N ranks (the last one hangs) and checks that the
# job ends with status 4, within the deadline, with a message naming the collective and the lost rank.
#   lost_rank_test.sh MPIEXEC N PROGRAM
set -uo pipefail
mpiexec=$1 n=$2 program=$3
timeout_s=3
lost=$((n - 1))
start=$(date +%s)
output=$(timeout 90 "$mpiexec" --oversubscribe -np "$n" "$program" "$timeout_s" 2>&1)
status=$?
elapsed=$(($(date +%s) - start))
echo "$output" | grep -v '^\s*$' | head -40
echo "lost_rank_test.sh: mpirun -np $n exited with status $status after ${elapsed}s"
fail=0
[ "$status" -eq 4 ] || { echo "FAIL: expected exit status 4, got $status"; fail=1; }
[ "$elapsed" -lt 60 ] || { echo "FAIL: took ${elapsed}s (timeout_s=$timeout_s)"; fail=1; }
echo "$output" | grep -q "wick: error: mpi all_reduce(sum, f32, 1000 elements)" ||
  { echo "FAIL: no error naming the all_reduce"; fail=1; }
echo "$output" | grep -q "ranks that did not arrive: $lost;" || { echo "FAIL: the lost rank $lost is not named"; fail=1; }
exit $fail
