#!/usr/bin/env bash
# Files wick writes read back with h5py (tests/reference/read_latents_h5py.py): the schema of docs/dataset.md.
#  1. `wick dataset pack fashion-mnist`: sample i equal to Fashion-MNIST's image i, label and class name (this part
#     is skipped, with a message, without Debian's dataset-fashion-mnist).
#  2. `wick dataset encode` on committed test images (tests/data/images) through the tiny Flux-shaped VAE and text
#     encoders, with flipped copies and a config's sample prompts: latents_logvar, original_size, crop, flipped,
#     source and /sample_prompts as h5py sees them.
# Skips (77) without h5py (Debian: python3-h5py; scripts/test.sh installs it).
# Usage: h5py_read_test.sh WICK_BINARY DATA_DIR WORK_DIR
set -u
wick=$1 data=$2 work=$3
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
rm -rf "$work" && mkdir -p "$work" || exit 1
echo "reading with $python ($("$python" -c "import h5py; print('h5py', h5py.__version__)"))"
failures=0
if [ -f "$dir/train-images-idx3-ubyte.gz" ]; then
  "$wick" dataset pack fashion-mnist --out "$work/fashion.h5" --limit 200 >"$work/pack.log" 2>&1 ||
    { echo "FAIL: wick dataset pack"; cat "$work/pack.log"; exit 1; }
  "$python" "$here/../reference/read_latents_h5py.py" "$work/fashion.h5" --fashion-mnist "$dir" ||
    { echo "FAIL: h5py disagrees with docs/dataset.md or with the IDX files"; failures=$((failures + 1)); }
else
  echo "skipped the fashion-mnist part: it is not installed in $dir (apt-get install dataset-fashion-mnist)"
fi

mkdir -p "$work/images"
for f in orientation_6.jpg rgb.jpg rgba.png lossy.webp truncated.jpg; do cp "$data/images/$f" "$work/images/"; done
echo "a test card" >"$work/images/rgb.txt"
printf 'name: t\ntrigger_word: ohwx\nmodel: {arch: flux, name_or_path: none.safetensors}\ndataset: {path: x.h5}\nsample: {prompts: ["[trigger] on the moon", "a cat"]}\n' \
  >"$work/train.yaml"
"$wick" dataset encode "$work/images" --model flux --vae "$data/vae/flux_tiny" \
  --clip-l "$data/clip_text/clip_l/model.safetensors" --clip-vocab "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" \
  --t5 "$data/t5/t5xxl_comfy.safetensors" --t5-tokenizer "$data/t5/spiece.model" --t5-length 16 --resolution 64 \
  --bucket-step 16 --flip --config "$work/train.yaml" --no-progress --out "$work/encoded.h5" >"$work/encode.log" 2>&1 ||
  { echo "FAIL: wick dataset encode"; cat "$work/encode.log"; exit 1; }
"$python" "$here/../reference/read_latents_h5py.py" "$work/encoded.h5" --encoded ||
  { echo "FAIL: h5py disagrees with docs/dataset.md on an encoded file"; failures=$((failures + 1)); }
exit $((failures > 0))
