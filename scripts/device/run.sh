#!/usr/bin/env bash
# On the GPU machine, from the repository root, after build.sh's bundle was unpacked
# there: the GPU tests, the CUDA end-to-end check, qmm-kernel-bench, qmm-forward-bench
# (the Llama block with W4A16 and W8A16 weights, BitNet's) with the blocks through the
# server, and the batching benchmark. Logs and JSON come back as $OUT/device-out.tgz; a
# summary is printed last.
#   usage: .dev-cuda/run.sh [tests] [e2e] [bench] [forward] [batching] [tune]
#          (default: tests e2e bench forward batching)
set -uo pipefail
dev=${DEV:-$PWD/.dev-cuda}
# Everything is written under a work folder and packed into one archive in $OUT at the
# end (the device tool brings back only a few files).
out=${WORK:-$(mktemp -d)}
mkdir -p "$out"
export LD_LIBRARY_PATH=$dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests e2e bench forward batching)
summary=()

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
if ldd "$dev"/bin/* | grep "not found"; then echo "missing libraries"; fi

for step in "${steps[@]}"; do
  case $step in
    tests)
      for t in kernels_gpu_test layers_gpu_test chain_gpu_test cuda_backend_gpu_test \
        batching_server_gpu_test; do
        start=$SECONDS
        timeout 300 "$dev/bin/$t" --gtest_brief=1 >"$out/$t.log" 2>&1
        rc=$?
        tail -25 "$out/$t.log"
        summary+=("$t: exit $rc ($((SECONDS - start)) s)")
      done
      ;;
    e2e)
      timeout 180 "$dev/e2e-cuda.sh" "$dev/bin" >"$out/e2e.log" 2>&1
      rc=$?
      tail -30 "$out/e2e.log"
      summary+=("e2e-cuda: exit $rc")
      ;;
    bench)
      timeout 300 "$dev/bin/qmm-kernel-bench" --warmup=5 --iters=30 --graph_replays=10 \
        --json="$out/bench-h200.json" 2>&1 | tee "$out/bench.txt"
      summary+=("qmm-kernel-bench: exit ${PIPESTATUS[0]}")
      ;;
    forward)
      timeout 300 "$dev/bin/qmm-forward-bench" --m=1,4,16 --json="$out/bench-forward-h200.json" \
        2>&1 | tee "$out/bench-forward.txt"
      summary+=("qmm-forward-bench: exit ${PIPESTATUS[0]}")
      timeout 300 "$dev/bin/qmm-forward-bench" --block=bitnet --m=1,4,16 \
        --json="$out/bench-forward-bitnet.json" 2>&1 | tee "$out/bench-forward-bitnet.txt"
      summary+=("qmm-forward-bench --block=bitnet: exit ${PIPESTATUS[0]}")
      timeout 300 "$dev/bin/qmm-forward-bench" --scheme=W8A16 --m=1,4,16 \
        --json="$out/bench-forward-w8a16.json" 2>&1 | tee "$out/bench-forward-w8a16.txt"
      summary+=("qmm-forward-bench --scheme=W8A16: exit ${PIPESTATUS[0]}")
      timeout 240 "$dev/forward-e2e.sh" "$dev/bin" "$out/forward-e2e" >"$out/forward-e2e.log" 2>&1
      rc=$?
      grep -E "compute|PASS|FAIL|rror" "$out/forward-e2e.log" | tail -20
      summary+=("forward-e2e: exit $rc")
      ;;
    batching)
      timeout 330 "$dev/batching-bench.sh" "$dev/bin" "$out/batching" >"$out/batching.log" 2>&1
      rc=$?
      grep -E "requests/s|rows/s|p50|p99|cpu:|server means|mismatch|error|done|FAIL" "$out/batching.log" | tail -40
      summary+=("batching-bench: exit $rc")
      ;;
    tune)
      # W8A16 split-K counts (0 = the launcher's choice) on the shapes that carry the targets.
      for splits in 0 1 2 4 8; do
        timeout 120 "$dev/bin/qmm-kernel-bench" --schemes=W8A16 \
          --shapes=8192x8192,8192x28672,4096x14336,14336x4096 --m=1,16,64,256 --iters=50 \
          --w8a16_splits=$splits 2>&1 | grep -E "^W8A16" | sed "s/^/splits=$splits /" |
          tee -a "$out/tune.txt"
      done
      ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
if [[ -n ${OUT:-} ]]; then
  tar czf "$OUT/device-out.tgz" -C "$out" .
fi
