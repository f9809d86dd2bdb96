#!/usr/bin/env bash
# On the GPU machine, from the repository root: an A/B of kernel variants in one call.
# Unpacks build.sh's bundle (.dev-pack/dev-cuda.txz) and every .dev-pack/NAME.gz or
# NAME.xz (a variant's binary, compressed here: xz -c build-cuda/kernels/bench/qmm-kernel-bench
# > .dev-pack/mine-bench.xz, a tenth smaller than gzip's) into .dev-cuda/bin/NAME;
# optionally runs a test binary; then
# ROUNDS rounds of qmm-kernel-bench over the variants, interleaved, so that each round
# runs every variant once. Logs and JSON (VARIANT-rROUND.json, which
# scripts/bench-compare.py reads) come back as $OUT/ab.tgz.
#   env: VARIANTS="name|binary|extra flags;..." (e.g. "base|qmm-kernel-bench|;
#        mine|mine-bench|--wgmma_tokens=256"), ROUNDS (2), SCHEMES, MS, SHAPES (the
#        bench's lists; defaults below), TEST (a binary in .dev-cuda/bin), FILTER (its
#        gtest filter), TEST_S and BENCH_S (time limits, s)
set -u
shopt -s nullglob
work=$(mktemp -d)
# python3, not tar: the GPU machine's tar may have no xz.
python3 -m tarfile -e .dev-pack/dev-cuda.txz .
for f in .dev-pack/*.gz .dev-pack/*.xz; do  # (the bundle is .txz: not matched)
  b=$(basename "${f%.*}")
  if [[ $f == *.xz ]]; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$f" ".dev-cuda/bin/$b"
  else
    gunzip -c "$f" >".dev-cuda/bin/$b"
  fi
  chmod +x ".dev-cuda/bin/$b"
done
export LD_LIBRARY_PATH=$PWD/.dev-cuda/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv |
  tee "$work/gpu.txt"
if [[ -n ${TEST:-} ]]; then
  start=$SECONDS
  timeout "${TEST_S:-240}" ".dev-cuda/bin/$TEST" --gtest_brief=1 --gtest_filter="${FILTER:-*}" \
    >"$work/test.log" 2>&1
  echo "$TEST: exit $? ($((SECONDS - start)) s)"
  tail -5 "$work/test.log"
fi
IFS=';' read -ra variants <<<"${VARIANTS:?set VARIANTS}"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name bin flags <<<"$v"
    start=$SECONDS
    # shellcheck disable=SC2086  # flags are words
    timeout "${BENCH_S:-120}" ".dev-cuda/bin/$bin" --warmup=5 --iters=30 --graph_replays=10 \
      --schemes="${SCHEMES:-W4A16,W8A16,W2A8}" --m="${MS:-32,64}" \
      --shapes="${SHAPES:-4096x4096,4096x14336,14336x4096,8192x8192,8192x28672}" $flags \
      --json="$work/$name-r$r.json" >"$work/$name-r$r.txt" 2>&1
    echo "$name round $r: exit $? ($((SECONDS - start)) s)"
  done
done
tar czf "$OUT/ab.tgz" -C "$work" .
