#!/usr/bin/env bash
# The `wick` program's own command line (launch/main.cpp): `--version`, a word that names no command refused with
# exit 2, the nearest command suggested (CLI11 alone says only "A subcommand is required"), and `wick presets ARCH`.
#   tests/cli/commands_test.sh WICK
set -uo pipefail
wick=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect() {  # expect STATUS PATTERN ARGS...: wick's status and a line of its output
  local want=$1 pattern=$2 out status
  shift 2
  out=$("$wick" "$@" 2>&1)
  status=$?
  if [ $status -ne "$want" ]; then
    fail "wick $* exited $status, expected $want"; echo "$out" | tail -3
  elif ! grep -qF -- "$pattern" <<<"$out"; then
    fail "wick $*: output lacks '$pattern'"; echo "$out" | tail -3
  else
    echo "ok: wick $*: exit $status: $(grep -F -- "$pattern" <<<"$out" | head -1)"
  fi
}
# --version: one line, the version and commit `wick info` starts with.
version=$("$wick" --version) || fail "wick --version exited $?"
info_version=$("$wick" info | head -1 | sed -E 's/^wick ([^ ]+) \(commit ([^,]+),.*/wick \1 (commit \2)/')
[ "$version" = "$info_version" ] || fail "wick --version says '$version', wick info '$info_version'"
[ "$(wc -l <<<"$version")" = 1 ] || fail "wick --version printed more than one line"
expect 2 "'trian' is not a wick command; did you mean 'train'?" trian config.yaml
expect 2 "did you mean 'encode-prompt'?" encode-promt --prompt cat
expect 2 "(commands: info, dataset, checkpoint, example, sample, eval, train, ranks, encode-prompt, presets; wick --help)" \
  xyzzy
expect 2 "A subcommand is required"
expect 0 "wick: training for diffusion models" --help
# wick presets ARCH: the presets, their patterns, the default and LoCon's targets.
expect 0 "flux: LoRA target presets (network.target; default all)" presets flux
expect 0 "  attention        double_blocks.*.img_attn.qkv, double_blocks.*.img_attn.proj," presets flux
expect 0 "LoCon (network.conv > 0): the k x k convolutions of *.in_layers.2" presets sdxl
expect 2 "unknown architecture 'sd4'; registered: dit, flux, sd3, sdxl, zimage, qwenimage" presets sd4
exit $((failures > 0))
