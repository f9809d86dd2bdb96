#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer, UBSan, coverage; CPU backend
# only) in build-fuzz/ and fuzzes the server for SECONDS (default 60): tests/fuzz says
# what it drives. The corpus grows in build-fuzz/corpus across runs; a finding is written
# to build-fuzz/artifacts/ and fails the script. Replay one with
#   build-fuzz/tests/fuzz/server_fuzz -detect_leaks=0 build-fuzz/artifacts/crash-...
# `smoke` instead of SECONDS runs the fuzz build's tests (label fuzz: a fixed number of
# inputs from a fixed seed), as scripts/test.sh does.
#   usage: scripts/fuzz.sh [SECONDS | smoke]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQMM_CUDA=OFF -DQMM_FUZZ=ON >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target server_fuzz
if [[ $seconds == smoke ]]; then
  exec ctest --test-dir "$build_dir" -L fuzz --output-on-failure
fi
mkdir -p "$build_dir/corpus" "$build_dir/artifacts"
# Leak checking is off: gRPC and protobuf keep process-lifetime allocations by design.
"$build_dir/tests/fuzz/server_fuzz" -max_total_time="$seconds" -detect_leaks=0 -timeout=60 \
  -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/" \
  "$build_dir/corpus"
