#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer, UBSan,
# coverage; CPU backend only) in build-fuzz/ and runs each for SECONDS (default 60):
# server_fuzz (an in-process server taking every kind of request) and client_files_fuzz
# (the .npy, .safetensors and model description readers). Each target's corpus grows in
# build-fuzz/corpus/TARGET across runs; a finding is written to build-fuzz/artifacts/ and
# fails the script. Replay one with
#   build-fuzz/tests/fuzz/TARGET -detect_leaks=0 build-fuzz/artifacts/crash-...
# `smoke` instead of SECONDS runs the fuzz build's tests (label fuzz: a fixed number of
# inputs from a fixed seed per target), as scripts/test.sh does. With QMM_FUZZ_STATS=1,
# server_fuzz prints at exit the status codes its calls got (how far inputs get).
#   usage: scripts/fuzz.sh [SECONDS | smoke] [TARGET...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(server_fuzz client_files_fuzz)

CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQMM_CUDA=OFF -DQMM_FUZZ=ON >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}"
if [[ $seconds == smoke ]]; then
  exec ctest --test-dir "$build_dir" -L fuzz --output-on-failure
fi
mkdir -p "$build_dir/artifacts"
for target in "${targets[@]}"; do
  dict=()
  dict_file="$root/tests/fuzz/${target%_fuzz}.dict"
  [[ -f $dict_file ]] && dict=(-dict="$dict_file")
  seeds=()  # read, never written: new inputs go to the first directory
  [[ -d $root/tests/fuzz/seeds/$target ]] && seeds=("$root/tests/fuzz/seeds/$target")
  mkdir -p "$build_dir/corpus/$target"
  # Leak checking is off: gRPC and protobuf keep process-lifetime allocations by design.
  "$build_dir/tests/fuzz/$target" -max_total_time="$seconds" -detect_leaks=0 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/" \
    "${dict[@]}" "$build_dir/corpus/$target" "${seeds[@]}"
done
