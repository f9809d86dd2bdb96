#!/usr/bin/env bash
# Configures and builds qmm in build/ (Release, Ninja, all cores). The CUDA backend is
# built when a CUDA toolkit is found (QMM_CUDA=AUTO; set QMM_CUDA=OFF in the environment
# for a CPU-only build). QMM_BUILD_DIR picks another build directory; extra arguments go
# to cmake's configure step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_BUILD_DIR:-$root/build}"

cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQMM_CUDA="${QMM_CUDA:-AUTO}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
