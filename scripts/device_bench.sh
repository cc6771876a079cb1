#!/usr/bin/env bash
# One device call: build the engine on the GPU host (against the CUTLASS headers carried in
# .deps/cutlass, since that host has no nvidia-cutlass package), measure the device, run the
# GEMM suite, and leave results + logs under $OUT. Usage (device tool, carry [".deps"]):
#   bash scripts/device_bench.sh [max-candidates per case]
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
MAX_CANDIDATES=${1:-8}
BENCH_SECONDS=${2:-480}  # the suite is stopped after this; results are written per case
export FACT_CUTLASS_DIR=$PWD/.deps/cutlass
export FACT_CACHE_DIR=${FACT_CACHE_DIR:-/tmp/fact-cache}
export FACT_GIT_SHA=$(cat .fact-git-sha 2>/dev/null || echo unknown)
export PYTHONUNBUFFERED=1
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }

stamp "configure + build the engine"
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DFACT_BUILD_TESTS=OFF \
      >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build build-device -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | head -60; exit 1; }

stamp "device profile"
./build-device/fact device --json "$OUT/device.json" 2>&1 | tail -12

stamp "GEMM suite (max $MAX_CANDIDATES candidates per case)"
timeout --signal=INT "$BENCH_SECONDS" ./build-device/fact bench gemm -o "$OUT/results" --max-candidates "$MAX_CANDIDATES" --timeout 60 2>&1 \
  | grep -vE "ETA|^\s*$" | tee "$OUT/bench.log" | tail -80
stamp "done"
# Results: the JSON and PNG at the top; tuning reports packed into one archive.
cp "$OUT"/results/*.json "$OUT"/results/*.png "$OUT"/ 2>/dev/null
tar czf "$OUT/tune-reports.tgz" -C "$OUT/results" . 2>/dev/null
rm -rf "$OUT/results"
ls -la "$OUT"
