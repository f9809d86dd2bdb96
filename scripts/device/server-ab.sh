#!/usr/bin/env bash
# On the GPU machine: an A/B of two builds' qmm-server and qmmctl through
# batching-bench.sh's quick set (one unary client, 256 streams, and 256 streams without
# batching), in ROUNDS rounds that each run both builds once, so that the machine's drift
# falls on both alike. Each build's JSON goes to OUT_DIR/{base,mine}-rROUND/.
#   usage: server-ab.sh BASE_BIN_DIR MINE_BIN_DIR OUT_DIR [ROUNDS (2)]
#   e.g.:  unpack the base build's bundle into .dev-base and the new one's into .dev-cuda,
#          then .dev-cuda/server-ab.sh .dev-base/bin .dev-cuda/bin "$OUT/ab"
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$3"
for r in $(seq "${4:-2}"); do
  for v in base mine; do
    bin=$1
    [[ $v == mine ]] && bin=$2
    BENCH_SET=quick timeout 150 "$here/batching-bench.sh" "$bin" "$3/$v-r$r" >"$3/$v-r$r.log" 2>&1
    echo "== $v, round $r: exit $?"
    grep -E "throughput|p50|per request of w" "$3/$v-r$r.log" | sed 's/^/  /'
  done
done
