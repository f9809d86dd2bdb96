#!/usr/bin/env bash
# Issue 7 (Forward) on a GPU machine: the model GPU tests and qmm-forward-bench, the
# Llama-3-8B MLP block target (W4A16 block vs the sum of its kernels and vs cuBLAS fp16).
#
# Two halves, like build.sh and run.sh:
#   scripts/device/forward-check.sh build   # here: build, bundle into .dev-forward/
#   .dev-forward/forward-check.sh           # there, from the repository root
#     (run tool: carry [".dev-forward"], command ".dev-forward/forward-check.sh")
# On the GPU machine, logs and bench-forward-h200.json go to $OUT; a summary comes last.
# Env: BUILD_DIR, DEST, BUNDLE_LIBS, JOBS (build); DEV, OUT (run).
set -uo pipefail
targets=(layers_gpu_test chain_gpu_test cuda_backend_gpu_test qmm-forward-bench)

if [[ ${1:-} == build ]]; then
  set -e
  root=$(cd "$(dirname "$0")/../.." && pwd)
  build=${BUILD_DIR:-$root/build-forward-gpu}
  dest=${DEST:-$root/.dev-forward}
  bundle=${BUNDLE_LIBS:-$root/../shared/device/bundle-libs}
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQMM_CUDA=ON \
    -DQMM_CUDA_ARCHS=90a >/dev/null
  cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"
  rm -rf "$dest"
  mkdir -p "$dest/bin"
  for t in "${targets[@]}"; do
    cp "$(find "$build" -type f -name "$t" -perm -u+x | head -1)" "$dest/bin/"
  done
  "$bundle" "$dest/lib" "$dest"/bin/*
  # The GPU machine has CUDA 13.0 under /usr/local/cuda; cuBLAS alone would not fit.
  rm -f "$dest"/lib/libcublas* "$dest"/lib/libcudart*
  cp "$root/scripts/device/forward-check.sh" "$dest/"
  git -C "$root" rev-parse --short HEAD >"$dest/commit"
  git -C "$root" status --porcelain | grep -q . && echo "plus uncommitted work" >>"$dest/commit"
  du -sh "$dest"
  exit 0
fi

dev=${DEV:-$PWD/.dev-forward}
out=${OUT:-/tmp/qmm-forward-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=("commit: $(cat "$dev/commit" 2>/dev/null | tr '\n' ' ')")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
if ldd "$dev"/bin/* | grep "not found"; then echo "missing libraries"; fi

for t in layers_gpu_test chain_gpu_test cuda_backend_gpu_test; do
  start=$SECONDS
  timeout 300 "$dev/bin/$t" --gtest_brief=1 >"$out/$t.log" 2>&1
  rc=$?
  tail -25 "$out/$t.log"
  summary+=("$t: exit $rc ($((SECONDS - start)) s)")
done

start=$SECONDS
timeout 300 "$dev/bin/qmm-forward-bench" --m=1,4,16 --json="$out/bench-forward-h200.json" 2>&1 |
  tee "$out/bench-forward.txt"
summary+=("qmm-forward-bench: exit ${PIPESTATUS[0]} ($((SECONDS - start)) s)")
printf '%s\n' "${summary[@]}"
