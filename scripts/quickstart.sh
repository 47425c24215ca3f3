#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the packages wick needs, builds, and runs
# `wick info`. (The training quickstart on Fashion-MNIST takes this script's place once the
# trainer lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh "$@"
build_dir=${WICK_BUILD_DIR:-build}
"$build_dir/wick" info
echo
echo "wick is built: $build_dir/wick (try '$build_dir/wick --help')"
