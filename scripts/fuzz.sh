#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (docs/testing.md "Fuzzing") and merges what they find into the
# committed corpus tests/fuzz/corpus/<target>/ (minimized with -merge=1: only inputs that add coverage).
#   scripts/fuzz.sh                      # every target, 10 minutes each, two at a time, at nice 19
#   scripts/fuzz.sh -t 1 safetensors idx # one minute each, these targets
# Needs clang (Debian's clang package: scripts/install_deps.sh --fuzz). libwick comes from the gcc build in
# $WICK_BUILD_DIR (default build; built first when missing); the targets, with the parser sources they
# exercise, go to $WICK_FUZZ_BUILD_DIR (default build-fuzz). Logs and crash inputs (crash-*, leak-*,
# oom-*, timeout-*) go to $WICK_FUZZ_OUT (default build-fuzz/runs/<date>); the script exits 1 when any
# target left one, and prints a line per target: runs, coverage, corpus size, findings.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10 parallel=2
while getopts "t:j:" option; do
  case $option in
    t) minutes=$OPTARG ;;
    j) parallel=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $minutes =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: -t takes whole minutes, at least 1" >&2; exit 2; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors config latent_dataset manifest lora idx)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install_deps.sh --fuzz)" >&2; exit 2; }

lib_build=${WICK_BUILD_DIR:-build} fuzz_build=${WICK_FUZZ_BUILD_DIR:-build-fuzz}
if [ -z "${WICK_FUZZ_NO_BUILD:-}" ]; then  # set: use the targets already built (e.g. while others build)
  [ -e "$lib_build/libwick.so" ] || scripts/build.sh -DWICK_CUDA=OFF
  cmake --build "$lib_build" --target wick >/dev/null
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  mkdir -p "$fuzz_build"
  CC=clang CXX=clang++ cmake -S . -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1" \
    -DWICK_CUDA=OFF -DWICK_BUILD_TESTS=OFF -DWICK_BUILD_BENCH=OFF -DWICK_FUZZ=ON \
    -DWICK_FUZZ_LIBWICK="$PWD/$lib_build/libwick.so" >"$fuzz_build/configure.log" 2>&1 ||
    { cat "$fuzz_build/configure.log"; exit 1; }
  cmake --build "$fuzz_build" -j "$parallel" --target "${targets[@]/#/fuzz_}"
fi

out=${WICK_FUZZ_OUT:-$fuzz_build/runs/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
tests/fuzz/make_seeds.py "$seeds"

run_one() {  # target: fuzz a copy of the corpus, then merge it back into the committed one
  local target=$1 program=$PWD/$fuzz_build/tests/fuzz/fuzz_$1 committed=$PWD/tests/fuzz/corpus/$1
  local work=$out/$target.work merged=$out/$target.merged
  mkdir -p "$work" "$merged" "$committed"
  cp "$seeds/$target"/* "$work"/
  cp "$committed"/* "$work"/ 2>/dev/null || true
  # -malloc_limit_mb: no input is over ~20 KB, so an allocation of 64 MiB is one the file cannot justify.
  # WICK_FUZZ_FLAGS: more libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" to go on past a crash
  # shellcheck disable=SC2086
  (cd "$out" && nice -n 19 "$program" -max_total_time=$((minutes * 60)) -timeout=30 -rss_limit_mb=2048 \
    -malloc_limit_mb=64 -print_final_stats=1 ${WICK_FUZZ_FLAGS:-} -artifact_prefix="$out/$target-" "$work") \
    >"$out/$target.log" 2>&1 || true
  merge_into_corpus "$target"
}
# target: minimize committed + work into the committed corpus (-use_counters=0: one input per new
# coverage edge, not per new hit count, which keeps the corpus about a third of the size)
merge_into_corpus() {
  local target=$1 program=$PWD/$fuzz_build/tests/fuzz/fuzz_$1 committed=$PWD/tests/fuzz/corpus/$1
  local merged=$out/$1.merged
  rm -rf "$merged" && mkdir -p "$merged" "$committed"
  (cd "$out" && nice -n 19 "$program" -merge=1 -use_counters=0 -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=64 \
    "$merged" "$committed" "$out/$target.work") >"$out/$target.merge.log" 2>&1 &&
    [ -n "$(ls "$merged")" ] || { echo "fuzz.sh: merging $target failed: $out/$target.merge.log" >&2; return 1; }
  # crash-<what>: inputs that once crashed a parser stay whatever the merge keeps (regression tests)
  find "$committed" -maxdepth 1 -type f ! -name 'crash-*' -delete
  cp "$merged"/* "$committed"/
}
export -f run_one merge_into_corpus
export out fuzz_build seeds minutes
printf '%s\n' "${targets[@]}" | xargs -P "$parallel" -I{} bash -c 'run_one {}' || true  # findings: below

status=0
for target in "${targets[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$target.log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$out/$target.log" | tail -1 || true)
  findings=$(cd "$out" && { ls "$target"-crash-* "$target"-leak-* "$target"-oom-* "$target"-timeout-* 2>/dev/null || true; } |
    wc -l)
  files=$(ls "tests/fuzz/corpus/$target" | wc -l) bytes=$(du -sb "tests/fuzz/corpus/$target" | cut -f1)
  echo "$target: $runs runs in $minutes min, $cov, corpus $files files / $bytes bytes, $findings findings"
  [ "$findings" -eq 0 ] || status=1
done
echo "logs and findings: $out"
exit $status
