# What the end-to-end scripts of the architecture table share (tests/train/arch_train_test.sh, arch_sample_test.sh,
# arch_lora_diffusers_test.sh; docs/testing.md "End-to-end tests per architecture"). Sourced after `here` (this
# folder) is set; it starts the clock and the failure count, and sets `data` to tests/data unless the script has.
#   load_row ARCH    sources tests/train/rows/ARCH.sh, the architecture's row; exits 2 naming the rows for another ARCH
#   fail MESSAGE     prints "FAIL: MESSAGE" and counts a failure
#   finish NAME      prints "NAME: <seconds> s, <failures> failures"; exits 1 when a check failed, else 0
failures=0
started=$(date +%s.%N)
data=${data:-$(cd "$here/../data" && pwd)}
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
load_row() {
  if [ ! -f "$here/rows/$1.sh" ]; then
    echo "FAIL: no row for the architecture '$1' in $here/rows" \
      "(rows: $(cd "$here/rows" && ls | sed 's/\.sh$//' | xargs))"
    exit 2
  fi
  # shellcheck source=/dev/null
  source "$here/rows/$1.sh"
}
finish() {
  echo "$1: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$started" \
    "$(date +%s.%N)") s, $failures failures"
  exit $((failures > 0))
}
