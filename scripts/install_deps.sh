#!/usr/bin/env bash
# Installs what wick builds against: Debian packages (quietly, only those missing) and the
# header-only cudnn-frontend from pip's nvidia-cudnn-frontend wheel (unpacked into .deps/, no pip
# install). Safe to run again: it does nothing when everything is present.
#   scripts/install_deps.sh            # build dependencies
#   scripts/install_deps.sh --tests    # also what only tests use: python3-h5py (reads packed datasets),
#                                      # real photographs (python-matplotlib-data's grace_hopper.jpg,
#                                      # xplanet-images' earth.jpg, night.jpg, sun.jpg)
#   scripts/install_deps.sh --fuzz     # also clang (libFuzzer) for scripts/fuzz.sh; the build itself is gcc's
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config patchelf git python3
  libopenblas-openmp-dev libyaml-cpp-dev libhdf5-dev libopenmpi-dev openmpi-bin
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libpng-dev zlib1g-dev libssl-dev libsentencepiece-dev
  libicu-dev libjpeg62-turbo-dev libwebp-dev libexif-dev libstb-dev
  libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist unzip
)
for option in "$@"; do
  case $option in
    --tests) packages+=(python3-h5py python-matplotlib-data xplanet-images) ;;
    --fuzz) packages+=(clang) ;;
    *) echo "install_deps: unknown option $option (valid: --tests, --fuzz)" >&2; exit 2 ;;
  esac
done
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# cudnn-frontend headers, only where a CUDA toolkit is present.
frontend_version=1.32.0
frontend_dir=.deps/cudnn_frontend
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } && [ ! -f "$frontend_dir/include/cudnn_frontend.h" ]; then
  echo "install_deps: fetching cudnn-frontend $frontend_version headers"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$frontend_version" 2>/dev/null ||
     python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" nvidia-cudnn-frontend 2>/dev/null; then
    mkdir -p "$frontend_dir"
    unzip -q -o "$tmp"/nvidia_cudnn_frontend-*.whl 'include/*' -d "$frontend_dir"
  else
    echo "install_deps: could not download nvidia-cudnn-frontend; CUDA attention will use wick's own kernel"
  fi
  rm -rf "$tmp"
fi
