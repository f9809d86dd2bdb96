#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite, then the
# fuzz build's smoke run (scripts/fuzz.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${QMM_BUILD_DIR:-$root/build}"

bash "$root/scripts/install-deps.sh"
QMM_BUILD_DIR="$build_dir" bash "$root/scripts/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
bash "$root/scripts/fuzz.sh" smoke
