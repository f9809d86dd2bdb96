#!/usr/bin/env bash
# Issue 6 (dynamic batching) on a GPU machine: qmm-server with the CUDA backend on
# loopback and qmmctl bench against an 8192 x 8192 W4A16 weight at M = 1 per request:
# one unary client (latency), 256 streams (throughput, then verified), streams with
# several requests in flight each, the first two again through the Open Inference
# Protocol, the first two over a Unix domain socket, and 256 streams with
# --max_batch_rows=1 (the no-batching baseline); then the same latency and throughput
# with the host-path helpers off (--completion_threads=0 --worker_spin_us=0), for
# comparison, and the transfer and compute histograms of the first server (metrics.txt);
# then the transport by itself: the same runs against qmm-echo-server (server/echo), which
# answers each request with its input.
# Each run also records the CPU time (user + system) of the server over the run and of the
# whole qmmctl command (its set-up included: with --verify, the float64 references):
# client and server share the machine, so either can be what limits the rate; and, from
# the server's histograms (with curl), its mean time a request from arrival to answer, in
# the queue, and a launch's compute: what the client saw beyond those is the transport.
# JSON goes to OUT_DIR. With BENCH_SET=quick, only one unary client, 256 streams and 256
# streams without batching: an A/B of two builds' servers, round after round. With
# BENCH_SET=connections, 256, 64 and 16 streams over 1 to 64 connections (qmmctl bench
# --channels) to qmm-server, 256 over 16 and 64 to the echo, in ROUNDS rounds. With
# BENCH_SET=local, the local transport (qmm-server --local_listen, qmmctl bench --local)
# against gRPC on the same server, in ROUNDS rounds: one caller (polling for its answer or
# not); 256 callers, and 256 requests in flight from 32 callers of 8 slots each (qmmctl
# bench --inflight), each verified too and each with and without batching; and the 32 x 8
# again with 1 and 2 pollers (--local_threads) against the default.
#   usage: [BENCH_SET=quick|connections|local] [ROUNDS=2] batching-bench.sh BIN_DIR OUT_DIR
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
pid=""
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null || true' EXIT

servers=0
launch() {  # binary flags...: starts it and waits for its "listening on" line
  local binary=$1
  shift
  servers=$((servers + 1))
  local log="$out/server-$servers.log"
  "$bin/$binary" "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    grep -q "listening on" "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "FAIL: server exited"; exit 1; }
    sleep 0.1
  done
  addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$log")
  metrics=$(sed -n 's/.*metrics on \(http[^ ]*\).*/\1/p' "$log")  # none from the echo
}
start_server() {  # extra server flags...
  launch qmm-server --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda --workers=2 \
    "$@"
  "$bin/qmmctl" --server="$addr" upload --name=w --scheme=w4a16 --random --n=8192 --k=8192 \
    --seed=1
}
stop_server() {
  kill -TERM "$pid"
  wait "$pid"
  pid=""
}
cpu_seconds() {  # pid: its user + system CPU time so far
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$1/stat"
}
histograms() {  # the request, queue, compute, transfer and launch-host histograms' sums, counts
  if command -v curl >/dev/null && [[ -n $metrics ]]; then
    curl -s "$metrics" |
      grep -E '^qmm_(request|queue|compute|transfer|launch_host)_duration_seconds_(count|sum)'
  fi
  return 0
}
bench() {  # json-name flags...
  local name=$1
  shift
  local server_before client
  histograms >"$out/$name.metrics-before"
  server_before=$(cpu_seconds "$pid")
  client=$( { TIMEFORMAT='%U %S'; time "$bin/qmmctl" --server="$addr" bench --weight=w --rows=1 \
    --dtype=fp16 --json="$out/$name.json" "$@" >"$out/$name.txt" 2>"$out/$name.err"; } 2>&1)
  awk -v s0="$server_before" -v s1="$(cpu_seconds "$pid")" -v c="$client" 'BEGIN {
    split(c, t, " ")
    printf "  cpu: server %.2f s, qmmctl %.2f s in all (user + system)\n", s1 - s0, t[1] + t[2]
  }' >>"$out/$name.txt"
  histograms >"$out/$name.metrics-after"
  # Means over the run: each family's sum and count, all label sets together.
  awk '{ split($1, f, "{"); sub(/_(sum|count)$/, "", f[1]); k = ($1 ~ /_sum/) ? "s" : "c"
         v[FILENAME == ARGV[1] ? "b" : "a", f[1], k] += $2; fam[f[1]] = 1 }
       END { for (x in fam) {
               n = v["a", x, "c"] - v["b", x, "c"]
               if (n > 0) m[x] = sprintf("%.0f", 1e6 * (v["a", x, "s"] - v["b", x, "s"]) / n)
             }
             if ("qmm_request_duration_seconds" in m)
               printf "  server means: request %s us, queue %s us, compute %s us a launch, " \
                 "host %s us a launch\n", m["qmm_request_duration_seconds"],
                 m["qmm_queue_duration_seconds"], m["qmm_compute_duration_seconds"],
                 m["qmm_launch_host_duration_seconds"] }' \
    "$out/$name.metrics-before" "$out/$name.metrics-after" >>"$out/$name.txt"
  cat "$out/$name.txt"
}

if [[ ${BENCH_SET:-full} == local ]]; then
  sock="$out/local.sock"
  for r in $(seq "${ROUNDS:-2}"); do
    start_server --local_listen="$sock"
    bench "r$r-one_unary" --concurrency=1 --requests=2000 --warmup=50
    bench "r$r-local_one" --local="$sock" --concurrency=1 --requests=2000 --warmup=50
    bench "r$r-local_one_spin" --local="$sock" --local_spin_us=1000 --concurrency=1 \
      --requests=2000 --warmup=50
    bench "r$r-streams256" --concurrency=256 --stream --duration=5s --warmup=1
    bench "r$r-local256" --local="$sock" --concurrency=256 --duration=5s --warmup=1
    bench "r$r-local256_verify" --local="$sock" --concurrency=256 --requests=20000 --verify \
      --verify_seed=1
    bench "r$r-local32x8" --local="$sock" --concurrency=32 --inflight=8 --duration=5s --warmup=1
    bench "r$r-local32x8_verify" --local="$sock" --concurrency=32 --inflight=8 --requests=20000 \
      --verify --verify_seed=1
    stop_server
    start_server --local_listen="$sock" --max_batch_rows=1
    bench "r$r-streams256_nobatch" --concurrency=256 --stream --duration=5s --warmup=1
    bench "r$r-local256_nobatch" --local="$sock" --concurrency=256 --duration=5s --warmup=1
    bench "r$r-local32x8_nobatch" --local="$sock" --concurrency=32 --inflight=8 --duration=5s \
      --warmup=1
    stop_server
    for pollers in 1 2; do
      start_server --local_listen="$sock" --local_threads=$pollers
      bench "r$r-local32x8_pollers$pollers" --local="$sock" --concurrency=32 --inflight=8 \
        --duration=5s --warmup=1
      stop_server
    done
  done
  echo "batching-bench: done"
  exit 0
fi

start_server
bench one_unary --concurrency=1 --requests=2000 --warmup=50
bench streams256 --concurrency=256 --stream --duration=5s --warmup=1
if [[ ${BENCH_SET:-full} == quick ]]; then
  stop_server
  start_server --max_batch_rows=1
  bench streams256_nobatch --concurrency=256 --stream --duration=5s --warmup=1
  stop_server
  echo "batching-bench: done"
  exit 0
fi
if [[ ${BENCH_SET:-full} == connections ]]; then
  # How many TCP connections carry the streams: HTTP/2 sends the frames of every stream of
  # a connection in one write, so fewer connections cost fewer system calls and wake-ups
  # a message, while each connection's frames are handled one thread at a time. Runs are
  # CALLERS:CONNECTIONS[:IN_FLIGHT].
  stop_server
  sweep() {  # prefix runs...
    local prefix=$1 run c n f
    shift
    for run in "$@"; do
      IFS=: read -r c n f <<<"$run"
      bench "$prefix${c}_channels$n${f:+_inflight$f}" --concurrency="$c" --stream \
        --duration=3s --warmup=1 --channels="$n" --inflight="${f:-1}"
    done
  }
  for r in $(seq "${ROUNDS:-2}"); do
    start_server
    sweep "r$r-streams" 256:4 256:8 256:16 256:32 256:64 64:4 64:16 16:1 16:4 16:16 \
      256:16:4 256:64:4
    stop_server
    launch qmm-echo-server --listen=127.0.0.1:0 --features=8192
    sweep "r$r-echo_streams" 256:16 256:64
    stop_server
  done
  echo "batching-bench: done"
  exit 0
fi
bench streams256_verify --concurrency=256 --stream --requests=10000 --verify --verify_seed=1
# Streams that send ahead: 4 requests in flight on each of 256, 16 on each of 64.
bench streams256_inflight4 --concurrency=256 --stream --inflight=4 --duration=5s --warmup=1
bench streams64_inflight16 --concurrency=64 --stream --inflight=16 --duration=5s --warmup=1
# The same load through the Open Inference Protocol (ModelInfer, ModelStreamInfer).
bench oip_one_unary --protocol=oip --concurrency=1 --requests=2000 --warmup=50
bench oip_streams256 --protocol=oip --concurrency=256 --stream --duration=5s --warmup=1
histograms | grep -E '^qmm_(transfer|compute)' | tee "$out/metrics.txt"
stop_server

start_server --completion_threads=0 --worker_spin_us=0
bench one_unary_nohelpers --concurrency=1 --requests=2000 --warmup=50
bench streams256_nohelpers --concurrency=256 --stream --duration=5s --warmup=1
stop_server

# Over a Unix domain socket instead of TCP on loopback.
start_server --listen="unix:$out/qmm.sock"
bench uds_one_unary --concurrency=1 --requests=2000 --warmup=50
bench uds_streams256 --concurrency=256 --stream --duration=5s --warmup=1
stop_server

start_server --max_batch_rows=1
bench streams256_nobatch --concurrency=256 --stream --duration=5s --warmup=1
stop_server

# The transport by itself: the same runs against qmm-echo-server, whose identity weight "w"
# (8192 x 8192) answers each request with its own input: gRPC and qmmctl alone, no queue,
# no batch, no GPU.
launch qmm-echo-server --listen=127.0.0.1:0 --features=8192
bench echo_one_unary --concurrency=1 --requests=2000 --warmup=50
bench echo_streams256 --concurrency=256 --stream --duration=5s --warmup=1
bench echo_streams256_inflight4 --concurrency=256 --stream --inflight=4 --duration=5s --warmup=1
bench echo_streams64_inflight16 --concurrency=64 --stream --inflight=16 --duration=5s --warmup=1
stop_server
launch qmm-echo-server --listen="unix:$out/echo.sock" --features=8192
bench echo_uds_one_unary --concurrency=1 --requests=2000 --warmup=50
bench echo_uds_streams256 --concurrency=256 --stream --duration=5s --warmup=1
stop_server
echo "batching-bench: done"
