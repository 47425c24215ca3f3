#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the packages wick needs, builds, packs the
# Fashion-MNIST latents, trains the quickstart DiT from scratch (without "Ankle boot"), trains a LoRA
# that teaches it "Ankle boot", evaluates both with `wick eval`, and prints where the outputs are.
# It builds only the `wick` binary (and the library it links); scripts/test.sh builds the tests and
# benchmarks. Extra arguments go to cmake (scripts/build.sh). Running it again continues or skips finished steps
# (`wick train` resumes from the newest checkpoint; a finished run has nothing left to do).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
WICK_BUILD_TARGETS=wick_cli scripts/build.sh "$@"   # only the `wick` binary; scripts/test.sh builds the rest
build_dir=${WICK_BUILD_DIR:-build}
wick="$build_dir/wick"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

step() { printf '\n== %s\n' "$*"; }
step "dataset: data/fashion.h5"
[ -f data/fashion.h5 ] || "$wick" dataset pack fashion-mnist --out data/fashion.h5
step "training the base DiT (configs/quickstart.yaml)"
time "$wick" train configs/quickstart.yaml
step "training the LoRA for 'Ankle boot' (configs/quickstart_lora.yaml)"
time "$wick" train configs/quickstart_lora.yaml
step "evaluating the base and the base + LoRA (wick eval)"
"$wick" eval output/quickstart_lora

cat <<TEXT

Done. Outputs:
  output/quickstart/                 the base: checkpoints/, samples/step_<N>.png, metrics.jsonl, loss.png
  output/quickstart_lora/            the LoRA: lora/quickstart_lora.safetensors, samples/, metrics.jsonl
  output/quickstart_lora/eval.json   per-class accuracy of generated images (printed above)
  tensorboard --logdir output        the loss curves and sample grids
TEXT
