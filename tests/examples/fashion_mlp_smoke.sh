#!/bin/sh
# Smoke test of `wick example fashion-mlp` on 2,000 images for one epoch: exits 0 and prints the
# test accuracy. Skips (77) when Debian's dataset-fashion-mnist package is not installed.
# usage: fashion_mlp_smoke.sh <path to the wick program>
set -u
wick="$1"
dir="${WICK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ ! -f "$dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: no Fashion-MNIST in $dir (apt-get install dataset-fashion-mnist)"
  exit 77
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
log="$out/log.txt"
"$wick" example fashion-mlp --epochs 1 --limit 2000 --out "$out/model" >"$log" 2>&1
status=$?
cat "$log"
if [ "$status" -ne 0 ]; then
  echo "FAIL: wick exited with status $status"
  exit 1
fi
grep -Eq '^test accuracy: [0-9]+\.[0-9]+' "$log" || { echo "FAIL: no 'test accuracy:' line"; exit 1; }
[ -s "$out/model/model.safetensors" ] || { echo "FAIL: no saved model"; exit 1; }
exit 0
