#!/usr/bin/env bash
# Builds the GPU binaries on this (GPU-less) machine and bundles them, with the Debian
# shared libraries they need, into .dev-cuda/ at the repository root, for run.sh on the
# GPU machine. The CUDA libraries (cudart, cuBLAS) are left out: the GPU machine has the
# same CUDA 13.0 under /usr/local/cuda, and cuBLAS alone would exceed the carry limit.
#   usage: scripts/device/build.sh        (env: BUILD_DIR, DEST, BUNDLE_LIBS, JOBS)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-cuda}
dest=${DEST:-$root/.dev-cuda}
bundle=${BUNDLE_LIBS:-$root/../shared/device/bundle-libs}
targets=(kernels_gpu_test cuda_backend_gpu_test batching_server_gpu_test qmm-kernel-bench qmm-server
  qmmctl)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQMM_CUDA=ON \
  -DQMM_CUDA_ARCHS=90a >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"

rm -rf "$dest"
mkdir -p "$dest/bin"
for t in "${targets[@]}"; do
  cp "$(find "$build" -type f -name "$t" -perm -u+x | head -1)" "$dest/bin/"
done
"$bundle" "$dest/lib" "$dest"/bin/*
rm -f "$dest"/lib/libcublas* "$dest"/lib/libcudart*
cp "$root/scripts/device/run.sh" "$root/scripts/device/e2e-cuda.sh" \
  "$root/scripts/device/batching-bench.sh" "$dest/"
git -C "$root" rev-parse --short HEAD >"$dest/commit"
git -C "$root" status --porcelain | grep -q . && echo "plus uncommitted work" >>"$dest/commit"
du -sh "$dest"
