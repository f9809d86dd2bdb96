#!/usr/bin/env bash
# Builds the GPU binaries on this (GPU-less) machine and bundles them, with the Debian
# shared libraries they need, into .dev-cuda/ at the repository root, for run.sh on the
# GPU machine, and packs that into .dev-pack/dev-cuda.txz. The device tool carries at most
# 64 MiB, the working tree included: the folder is 133 MB, and gzip made 71 MB of it,
# xz -6 63 (session 70), xz -9 on one thread 16 (session 74: its 64 MiB window spans the
# binaries, which each hold the same kernels). The GPU machine's python3 unpacks xz (its
# tar may not). The CUDA libraries (cudart, cuBLAS) are left out: the GPU machine has the
# same CUDA 13.0 under /usr/local/cuda.
#   usage: scripts/device/build.sh        (env: BUILD_DIR, DEST, BUNDLE_LIBS, JOBS)
#   then:  run tool, carry [".dev-pack"], command
#          "python3 -m tarfile -e .dev-pack/dev-cuda.txz . && .dev-cuda/run.sh [steps]"
#   or, for an A/B of variant binaries beside the bundle, scripts/device/ab.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-cuda}
dest=${DEST:-$root/.dev-cuda}
bundle=${BUNDLE_LIBS:-$root/../shared/device/bundle-libs}
targets=(kernels_gpu_test layers_gpu_test chain_gpu_test cuda_backend_gpu_test
  batching_server_gpu_test qmm-kernel-bench qmm-forward-bench qmm-server qmmctl qmm-echo-server)

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
  "$root/scripts/device/batching-bench.sh" "$root/scripts/device/server-ab.sh" \
  "$root/scripts/device/forward-e2e.sh" "$dest/"
git -C "$root" rev-parse --short HEAD >"$dest/commit"
git -C "$root" status --porcelain | grep -q . && echo "plus uncommitted work" >>"$dest/commit"
du -sh "$dest"
mkdir -p "$root/.dev-pack"
rm -f "$root/.dev-pack/dev-cuda.tgz"  # an older bundle's format: carried, it would not fit
tar cf - -C "$(dirname "$dest")" "$(basename "$dest")" |
  xz -T1 -9 >"$root/.dev-pack/dev-cuda.txz"
du -sh "$root/.dev-pack/dev-cuda.txz"
