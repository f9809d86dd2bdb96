#!/usr/bin/env bash
# On the GPU machine: issue 7's block through the real server. Uploads a Llama-3-8B MLP
# block (W4A16, packed here) and BitNet b1.58 2B4T's (W2A8, relu2 and its sub-norm),
# creates the models, and runs Forward at M = 1 and 4 with qmmctl, each result checked
# against the float64 reference of the whole block; qmmctl prints the server-side compute
# time.
#   usage: forward-e2e.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1
work=$2
mkdir -p "$work"
log=$work/forward-server.log
"$bin/qmm-server" --listen=127.0.0.1:0 --metrics_listen= --backend=cuda >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "listening on" "$log" && break
  sleep 0.1
done
addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$log")
ctl() { "$bin/qmmctl" --server="$addr" "$@"; }
ctl upload --name=w1 --scheme=w4a16 --random --n=14336 --k=4096 --seed=1 --pack_locally
ctl upload --name=w3 --scheme=w4a16 --random --n=14336 --k=4096 --seed=3 --pack_locally
ctl upload --name=w2 --scheme=w4a16 --random --n=4096 --k=14336 --seed=2 --pack_locally
cat >"$work/llama-mlp.json" <<'JSON'
{"name": "llama-mlp", "layers": [
  {"rms_norm": {"weight": 1.5, "features": 4096, "epsilon": 1e-5}},
  {"gated_mlp": {"gate": "w1", "up": "w3", "down": "w2"}},
  {"residual": 0}]}
JSON
ctl create-model "$work/llama-mlp.json"
ctl upload --name=b1 --scheme=w2a8 --random --n=6912 --k=2560 --seed=11 --pack_locally
ctl upload --name=b3 --scheme=w2a8 --random --n=6912 --k=2560 --seed=13 --pack_locally
ctl upload --name=b2 --scheme=w2a8 --random --n=2560 --k=6912 --seed=12 --pack_locally
cat >"$work/bitnet-mlp.json" <<'JSON'
{"name": "bitnet-mlp", "layers": [
  {"rms_norm": {"weight": 1.5, "features": 2560, "epsilon": 1e-5}},
  {"gated_mlp": {"gate": "b1", "up": "b3", "down": "b2", "activation": "relu2",
                 "sub_norm": {"weight": 0.75, "features": 6912, "epsilon": 1e-5}}},
  {"residual": 0}]}
JSON
ctl create-model "$work/bitnet-mlp.json"
for m in 1 4; do
  ctl forward --model=llama-mlp --random --m=$m --dtype=fp16 --repeat=200 \
    --verify_seeds=w1=1,w3=3,w2=2
  ctl forward --model=bitnet-mlp --random --m=$m --dtype=bf16 --repeat=200 \
    --verify_seeds=b1=11,b3=13,b2=12
done
kill -TERM "$pid"
wait "$pid"
