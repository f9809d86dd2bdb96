#!/usr/bin/env bash
# Issue 7 (Forward) on a GPU machine: the model GPU tests, qmm-forward-bench (the
# Llama-3-8B MLP block target: W4A16 block vs the sum of its kernels and vs cuBLAS fp16),
# and the same block through the real qmm-server --backend=cuda and qmmctl forward
# (server-side compute time as Forward reports it, checked against float64).
#
# Two halves, like build.sh and run.sh:
#   scripts/device/forward-check.sh build   # here: build, bundle into .dev-forward/
#   .dev-forward/forward-check.sh           # there, from the repository root
#     (run tool: carry [".dev-forward"], command ".dev-forward/forward-check.sh")
# On the GPU machine, logs and bench-forward-h200.json go to $OUT; a summary comes last.
# Env: BUILD_DIR, DEST, BUNDLE_LIBS, JOBS (build); DEV, OUT (run).
set -uo pipefail
targets=(layers_gpu_test chain_gpu_test cuda_backend_gpu_test kernels_gpu_test
  batching_server_gpu_test qmm-forward-bench qmm-server qmmctl)

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
  cp "$root/scripts/device/forward-check.sh" "$root/scripts/device/e2e-cuda.sh" "$dest/"
  git -C "$root" rev-parse --short HEAD >"$dest/commit"
  git -C "$root" status --porcelain | grep -q . && echo "plus uncommitted work" >>"$dest/commit"
  du -sh "$dest"
  exit 0
fi

dev=${DEV:-$PWD/.dev-forward}
# Logs go to a work folder, packed into $OUT/forward-out.tgz at the end (the device tool
# brings back only a few files).
out=$(mktemp -d)
export LD_LIBRARY_PATH=$dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=("commit: $(cat "$dev/commit" 2>/dev/null | tr '\n' ' ')")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
if ldd "$dev"/bin/* | grep "not found"; then echo "missing libraries"; fi

# The model tests, the backend and batching tests, and the W2A8 kernel (its fp32 input).
for t in layers_gpu_test chain_gpu_test cuda_backend_gpu_test batching_server_gpu_test \
  "kernels_gpu_test --gtest_filter=*W2A8*"; do
  start=$SECONDS
  name=${t%% *}
  # shellcheck disable=SC2086
  timeout 300 "$dev/bin/"$t --gtest_brief=1 >"$out/$name.log" 2>&1
  rc=$?
  tail -25 "$out/$name.log"
  summary+=("$t: exit $rc ($((SECONDS - start)) s)")
done
timeout 180 "$dev/e2e-cuda.sh" "$dev/bin" >"$out/e2e-cuda.log" 2>&1
rc=$?
tail -8 "$out/e2e-cuda.log"
summary+=("e2e-cuda: exit $rc")
# Whether the metrics endpoint binds next to a live CUDA context (port 0, three starts).
for i in 1 2 3; do
  timeout 20 "$dev/bin/qmm-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    --backend=cuda >"$out/metrics-$i.log" 2>&1 &
  pid=$!
  sleep 3
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  summary+=("metrics start $i: $(grep -c 'metrics on' "$out/metrics-$i.log") ok line(s)")
done

start=$SECONDS
timeout 300 "$dev/bin/qmm-forward-bench" --m=1,4,16 --json="$out/bench-forward-h200.json" 2>&1 |
  tee "$out/bench-forward.txt"
summary+=("qmm-forward-bench: exit ${PIPESTATUS[0]} ($((SECONDS - start)) s)")

# The block through the server: upload (packed here), create the model, Forward at M = 1
# and 4, each checked against the float64 reference of the whole block.
start=$SECONDS
(
  set -e
  log=$out/forward-server.log
  "$dev/bin/qmm-server" --listen=127.0.0.1:0 --metrics_listen= --backend=cuda >"$log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  for _ in $(seq 300); do
    grep -q "listening on" "$log" && break
    sleep 0.1
  done
  addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$log")
  ctl() { "$dev/bin/qmmctl" --server="$addr" "$@"; }
  ctl upload --name=w1 --scheme=w4a16 --random --n=14336 --k=4096 --seed=1 --pack_locally
  ctl upload --name=w3 --scheme=w4a16 --random --n=14336 --k=4096 --seed=3 --pack_locally
  ctl upload --name=w2 --scheme=w4a16 --random --n=4096 --k=14336 --seed=2 --pack_locally
  cat >"$out/llama-mlp.json" <<'JSON'
{"name": "llama-mlp", "layers": [
  {"dyt": {"alpha": 1.0, "gamma": 4.0, "beta": 0.0, "features": 4096}},
  {"gated_mlp": {"gate": "w1", "up": "w3", "down": "w2"}},
  {"residual": 0}]}
JSON
  ctl create-model "$out/llama-mlp.json"
  for m in 1 4; do
    ctl forward --model=llama-mlp --random --m=$m --dtype=fp16 --repeat=200 \
      --verify_seeds=w1=1,w3=3,w2=2
  done
  kill -TERM "$pid"
  wait "$pid"
) 2>&1 | tee "$out/forward-e2e.txt"
summary+=("forward e2e (qmm-server + qmmctl): exit ${PIPESTATUS[0]} ($((SECONDS - start)) s)")
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
[[ -n ${OUT:-} ]] && tar czf "$OUT/forward-out.tgz" -C "$out" .
