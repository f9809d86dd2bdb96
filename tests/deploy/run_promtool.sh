#!/bin/sh
# Runs promtool with the given arguments; exits 77 (ctest's skip code here) when the
# Debian `prometheus` package, which ships promtool, is not installed.
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found: install the prometheus package to run this test"
  exit 77
fi
exec promtool "$@"
