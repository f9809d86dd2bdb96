#!/usr/bin/env bash
# README command 1: install what is missing, build, start qmm-server on a free loopback
# port, upload one random weight in every scheme with qmmctl, run MatMul against each
# (latency over repeated calls, result summary, check against a float64 reference
# computed here) and the Open Inference Protocol's ModelInfer against one, then stop the
# server. Exits non-zero if any check fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_BUILD_DIR:-$root/build}"
# Weight shape and activation rows: a 4096 x 4096 layer, decode-sized batches.
n="${QMM_N:-4096}"
k="${QMM_K:-4096}"
m="${QMM_M:-8}"
repeat="${QMM_REPEAT:-20}"

bash "$root/scripts/install-deps.sh"
QMM_BUILD_DIR="$build_dir" bash "$root/scripts/build.sh"

server_bin="$build_dir/server/qmm-server"
qmmctl_bin="$build_dir/client/qmmctl"
work_dir="$(mktemp -d)"
server_pid=""

cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work_dir"
}
trap cleanup EXIT

echo
echo "== starting qmm-server on a free loopback port"
"$server_bin" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 >"$work_dir/server.out" 2>"$work_dir/server.err" &
server_pid=$!
address=""
for _ in $(seq 600); do
  address="$(sed -n 's/^qmm-server listening on \([^ ]*\) .*/\1/p' "$work_dir/server.out")"
  [[ -n "$address" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "qmm-server exited before listening:" >&2
    cat "$work_dir/server.err" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$address" ]]; then
  echo "qmm-server printed no listening line within 60 s" >&2
  exit 1
fi
head -n 1 "$work_dir/server.out"

qmmctl() { "$qmmctl_bin" --server="$address" "$@"; }

echo
qmmctl info

# name | upload flags | matmul flags
weights=(
  "fp16|--scheme=fp16|"
  "bf16|--scheme=bf16|--dtype=bf16"
  "w8a16|--scheme=w8a16|"
  "w4a16-g128|--scheme=w4a16 --group_size=128|"
  "w4a16-row|--scheme=w4a16 --group_size=0|--dtype=fp16"
  "w2a8|--scheme=w2a8|--stream"
)

echo
echo "== uploading one random ${n} x ${k} weight per scheme (fp32 values, quantized by the server)"
seed=1
for entry in "${weights[@]}"; do
  IFS='|' read -r name upload_flags _ <<<"$entry"
  # shellcheck disable=SC2086  # the flag lists are meant to split
  qmmctl upload --name="$name" $upload_flags --random --n="$n" --k="$k" --seed="$seed"
  seed=$((seed + 1))
done

echo
qmmctl ls

echo
echo "== MatMul: ${m} x ${k} random activations, ${repeat} calls each, checked against a float64 reference"
failed=()
seed=1
for entry in "${weights[@]}"; do
  IFS='|' read -r name _ matmul_flags <<<"$entry"
  echo
  # shellcheck disable=SC2086
  if ! qmmctl matmul --weight="$name" --random --m="$m" --repeat="$repeat" \
      --verify_seed="$seed" $matmul_flags; then
    failed+=("$name")
  fi
  seed=$((seed + 1))
done

echo
echo "== the Open Inference Protocol (KServe v2): ModelInfer on w4a16-g128, 4 callers, 40 requests, each checked"
# w4a16-g128 is the fourth weight uploaded above: seed 4.
if ! qmmctl bench --weight=w4a16-g128 --protocol=oip --concurrency=4 --requests=40 --rows="$m" \
    --dtype=fp16 --verify --verify_seed=4; then
  failed+=("ModelInfer")
fi

echo
echo "== stopping qmm-server"
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
cat "$work_dir/server.err"
if [[ $server_status -ne 0 ]]; then
  echo "qmm-server exited with status $server_status" >&2
  exit 1
fi

echo
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "quickstart: FAILED for ${failed[*]}" >&2
  exit 1
fi
echo "quickstart: all ${#weights[@]} schemes and ModelInfer matched the reference"
