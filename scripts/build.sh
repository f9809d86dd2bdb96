#!/usr/bin/env bash
# Configures and builds qmm in build/ (Release, Ninja, all cores). The CUDA backend is
# built when a CUDA toolkit is found (QMM_CUDA=AUTO; set QMM_CUDA=OFF in the environment
# for a CPU-only build). QMM_BUILD_DIR picks another build directory, QMM_BUILD_TARGETS
# (space-separated) builds only those targets and what they need (the container image
# builds "qmm-server qmmctl"); extra arguments go to cmake's configure step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_BUILD_DIR:-$root/build}"

cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQMM_CUDA="${QMM_CUDA:-AUTO}" "$@"
targets=()
for t in ${QMM_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
