#!/usr/bin/env bash
# Installs the Debian bookworm packages qmm builds with, only those missing. Idempotent:
# a second run installs nothing and does not touch apt at all. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential
  cmake
  ninja-build
  pkg-config
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  libabsl-dev
  libgtest-dev
  libgmock-dev
  nlohmann-json3-dev
  libssl-dev
  libbenchmark-dev
  prometheus-cpp-dev
  libcivetweb-dev
  prometheus
  python3
  python3-yaml
  python3-grpcio
  python3-protobuf
  python3-numpy
  clang
  libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: missing ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
