#!/usr/bin/env bash
# A file written by `wick dataset pack fashion-mnist` read back with h5py
# (tests/reference/read_latents_h5py.py): the schema of docs/dataset.md, and sample i equal to
# Fashion-MNIST's image i, label and class name. Skips (77) without h5py (Debian: python3-h5py;
# scripts/test.sh installs it) or without Debian's dataset-fashion-mnist.
# Usage: h5py_read_test.sh WICK_BINARY WORK_DIR
set -u
wick=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=${WICK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
python=""
for candidate in "${WICK_PYTHON:-python3}" /usr/bin/python3; do  # Debian's python3-h5py is for /usr/bin/python3
  if command -v "$candidate" >/dev/null && "$candidate" -c "import h5py, numpy" 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "skipped: no python3 with h5py (apt-get install python3-h5py)"
  exit 77
fi
if [ ! -f "$dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST is not installed in $dir (apt-get install dataset-fashion-mnist)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
"$wick" dataset pack fashion-mnist --out "$work/fashion.h5" --limit 200 >"$work/pack.log" 2>&1 ||
  { echo "FAIL: wick dataset pack"; cat "$work/pack.log"; exit 1; }
echo "reading with $python ($("$python" -c "import h5py; print('h5py', h5py.__version__)"))"
"$python" "$here/../reference/read_latents_h5py.py" "$work/fashion.h5" --fashion-mnist "$dir" ||
  { echo "FAIL: h5py disagrees with docs/dataset.md or with the IDX files"; exit 1; }
