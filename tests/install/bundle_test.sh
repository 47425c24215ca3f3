#!/usr/bin/env bash
# Builds the relocatable bundle, copies it to a fresh folder and runs `wick info` from there with
# no build tree on the library path.
set -euo pipefail
build_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --build "$build_dir" --target bundle >/dev/null
cp -r "$build_dir/bundle" "$work/wick"
readelf -d "$work/wick/bin/wick" | grep -q 'RUNPATH.*\$ORIGIN/../lib' || { echo "bin/wick lacks RUNPATH \$ORIGIN/../lib"; exit 1; }
ls "$work/wick/lib" | grep -q '^libwick\.so' || { echo "libwick.so missing from the bundle"; exit 1; }
cuda_lib=""
[ -d /usr/local/cuda/lib64 ] && cuda_lib=/usr/local/cuda/lib64
output=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$cuda_lib" "$work/wick/bin/wick" info)
echo "$output"
echo "$output" | grep -q '^wick ' || { echo "wick info printed no version line"; exit 1; }
# Every library the binary loads comes from the bundle, the system, or the CUDA installation.
env -i LD_LIBRARY_PATH="$cuda_lib" ldd "$work/wick/bin/wick" | awk '/=>/ {print $3}' | while read -r lib; do
  case "$lib" in
    "$work"/*|/lib/*|/usr/lib/x86_64-linux-gnu/lib[cmdr]*.so*|/usr/lib/x86_64-linux-gnu/libstdc++*|/usr/lib/x86_64-linux-gnu/libgcc_s*|/usr/local/cuda*) ;;
    /usr/lib/x86_64-linux-gnu/libpthread*|/usr/lib/x86_64-linux-gnu/libdl*) ;;
    *) echo "loaded from outside the bundle: $lib"; exit 1 ;;
  esac
done
