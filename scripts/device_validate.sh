#!/usr/bin/env bash
# One device call that checks a change to the engine on a Hopper GPU: build the engine with its
# test suites (scripts/device_build.sh, tests on), run every C++ and Python test that needs the
# GPU, then the GEMM benchmark suite with what is left of the call. Results and logs under $OUT:
#   tests.log (the tails of ctest.log and pytest_gpu.log), gemm-<device>-<date>-max<N>.json/.png (the suite),
#   bench.log, tune-reports.tgz, device.json (the measured profile).
# Usage (device tool, carry [".deps"]):
#   bash scripts/device_validate.sh [TOTAL_SECONDS [MAX_CANDIDATES]]   (MAX_CANDIDATES 0: tests only)
# Environment: FACT_VALIDATE_PARTS (below), FACT_CTEST_R (ctest -R: only the tests it matches),
# FACT_PYTEST_K (pytest -k), FACT_PREBUILT=1 (scripts/device_parallel.sh built the engine).
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-560}
MAX_CANDIDATES=${2:-8}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[$(elapsed)s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python FACT_BUILD_TESTS=ON

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c \
  'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'; \
  } 2>&1 | tee "$OUT/device.txt"

stamp "configure + build the engine and its tests"
python3 -m fact.native >"$OUT/native.log" 2>&1 &
native_pid=$!
fact_device_build "$OUT" || { stamp "engine build failed"; exit 1; }
wait "$native_pid"
export FACT_ENGINE=$PWD/build-device/fact

stamp "device profile"
./build-device/fact device --json "$OUT/device.json" 2>&1 | tail -3

# FACT_VALIDATE_PARTS: which suites run (default "ctest pytest"; the C++ suite takes about 270 s
# on an H200; pytest -m gpu runs in shards side by side, scripts/pytest_gpu.sh).
PARTS=${FACT_VALIDATE_PARTS:-ctest pytest}
if [[ " $PARTS " == *" ctest "* ]]; then
  stamp "GPU tests: C++ (every test; the GPU ones run here)"
  timeout $(( TOTAL_SECONDS - $(elapsed) - 20 )) ctest --test-dir build-device -j 8 --timeout 300 \
    --output-on-failure ${FACT_CTEST_R:+-R "$FACT_CTEST_R"} >"$OUT/ctest.log" 2>&1
  echo "ctest exit $? ($(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1))" >>"$OUT/ctest.log"
  tail -60 "$OUT/ctest.log" >"$OUT/tests.log"
fi
if [[ " $PARTS " == *" pytest "* ]]; then
  left=$(( TOTAL_SECONDS - $(elapsed) - 40 ))
  stamp "GPU tests: pytest -m gpu in shards (${left}s; scripts/pytest_gpu.sh, logs $OUT/pytest_gpu*.log)"
  bash "$(dirname "${BASH_SOURCE[0]}")/pytest_gpu.sh" "$left"
  tail -45 "$OUT/pytest_gpu.log" >>"$OUT/tests.log"
fi
grep -E "tests passed|tests failed|passed|failed|error|exit" "$OUT/tests.log" | tail -8

left=$(( TOTAL_SECONDS - $(elapsed) - 30 ))
if [ "$MAX_CANDIDATES" -gt 0 ] && [ "$left" -gt 120 ]; then
  stamp "GEMM suite, $MAX_CANDIDATES configurations per case, ${left}s"
  timeout --signal=INT "$left" ./build-device/fact bench gemm -o "$OUT/results" --max-candidates "$MAX_CANDIDATES" \
    --timeout 60 --tuning-cost none 2>&1 | grep -vE "ETA|^\s*$" >"$OUT/bench.log"
  tail -25 "$OUT/bench.log"
  cp "$OUT"/results/*.json "$OUT"/results/*.png "$OUT"/ 2>/dev/null
  tar czf "$OUT/tune-reports.tgz" -C "$OUT/results" . 2>/dev/null
  rm -rf "$OUT/results"
else
  stamp "GEMM suite not run (MAX_CANDIDATES $MAX_CANDIDATES, ${left}s left)"
fi
stamp "done"
ls -la "$OUT"
