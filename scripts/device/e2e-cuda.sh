#!/usr/bin/env bash
# End-to-end on a GPU machine: the real qmm-server with --backend=cuda on a loopback port
# and the real qmmctl uploading random weights and checking MatMul results against the
# float64 reference (--verify_seed), for every scheme with every wire dtype (W4A16 also with
# zero points), then a clean shutdown (exit 0 on SIGTERM).
#   usage: e2e-cuda.sh BIN_DIR   (holding qmm-server and qmmctl)
set -euo pipefail
bin=$1
log=$(mktemp)
"$bin/qmm-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "listening on" "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "FAIL: server exited"; exit 1; }
  sleep 0.1
done
cat "$log"
grep -q "backend=cuda" "$log" || { echo "FAIL: not the CUDA backend"; exit 1; }
addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$log")
ctl() { "$bin/qmmctl" --server="$addr" "$@"; }

ctl info
check() {  # name scheme n k seed group [upload flags]
  local name=$1 scheme=$2 n=$3 k=$4 seed=$5 group=$6
  ctl upload --name="$name" --scheme="$scheme" --group_size="$group" --random --n="$n" \
    --k="$k" --seed="$seed" ${7:-}
  for dtype in fp32 fp16 bf16; do
    for m in 1 7 65; do
      ctl matmul --weight="$name" --random --m="$m" --dtype="$dtype" --seed=$((seed + m)) \
        --verify_seed="$seed" --scheme="$scheme" --n="$n" --k="$k" --group_size="$group"
    done
  done
}
check w8 w8a16 1000 4096 5 0
check h16 fp16 384 1024 6 0
check b16 bf16 384 1024 7 0
check w4g w4a16 1000 4096 8 128
check w4r w4a16 512 2048 9 0
check w4z w4a16 1000 4096 11 128 --zero_points
check w2 w2a8 1000 4096 10 0
ctl matmul --weight=w8 --random --m=16 --repeat=200 --out_dtype=fp16
ctl ls
ctl rm w8
ctl info
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
trap - EXIT
echo "server exit status $rc"
[[ $rc -eq 0 ]] && echo "e2e-cuda: PASS" || { echo "e2e-cuda: FAIL"; exit 1; }
