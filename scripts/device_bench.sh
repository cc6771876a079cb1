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
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"

stamp "configure + build the engine"
fact_device_build "$OUT" || exit 1

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
