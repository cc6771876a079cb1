#!/usr/bin/env bash
# One device call for SwiGLU as one GEMM, about 4 minutes on an H100 with 16
# cores:
#   1. build the engine and libfact only (scripts/device_build.sh with FACT_BUILD_TARGETS), the
#      native fact::launch extension alongside;
#   2. start patterns/swiglu/bench_swiglu_mlp.py: the SwiGLU MLP (8192 tokens x 4096 -> 14336 ->
#      4096, bf16) as FACT (one glu GEMM + the down GEMM, default configurations, or
#      FACT_SWIGLU_TUNE=N candidates each) against torch.compile and eager, verified against
#      float64; it waits for step 3 to end before timing, so the GPU is its own;
#   3. beside it, build the runtime tests and run the GPU gtests of the glu kernel
#      (GpuEpilogueKernels.SwiGluLlamaMlpBf16: the Llama-3-8B MLP's gate/up GEMM at full size,
#      and BiasGeGluRaggedBf16), each compiling its kernel and verifying it against the float64
#      reference with D poisoned, two processes at once.
# Results at the top of $OUT: swiglu-<device>-<date>.json, gtest-*.log, bench.log, build logs;
# the last line printed is the summary.
#
# Usage (device tool, kind nvidia-h100-x1, carry [".deps"]; .fact-git-sha written by the caller):
#   bash scripts/device_swiglu.sh [TOTAL_SECONDS]          # default 235
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-235}
WORK=/tmp/fact-swiglu-work
rm -rf "$WORK" && mkdir -p "$WORK"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( TOTAL_SECONDS - $(elapsed) )); }
cap() { local s=$(( $(left) - $1 )); echo $(( s > 20 ? s : 20 )); }  # seconds a stage may take
stamp() { echo "[$(elapsed)s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
stamp "native fact::launch extension: building in the background"
python3 -m fact.native >"$OUT/native.log" 2>&1 &
native_pid=$!

stamp "engine build (fact, libfact)"
export FACT_BUILD_TESTS=ON FACT_BUILD_TARGETS="fact fact_library"
fact_device_build "$OUT" || { stamp "build failed"; echo "swiglu: build failed (see $OUT/build.log)"; exit 1; }
wait "$native_pid" || stamp "native extension build failed (fact.optimize falls back; see native.log)"

# The benchmark starts now (fact.optimize compiles its two kernels); the runtime tests build
# beside it, then the glu gtests run; the benchmark times only after they end.
stamp "MLP benchmark started; building fact_runtime_tests"
( timeout "$(cap 5)" python3 patterns/swiglu/bench_swiglu_mlp.py --out-dir "$OUT" \
    --tune "${FACT_SWIGLU_TUNE:-0}" --work-dir "$WORK/optimize" --wait-for "$WORK/gtests.done" \
    >"$OUT/bench.log" 2>&1; echo "bench exit $?" >>"$OUT/bench.log" ) &
bench_pid=$!
cmake --build build-device -j "$(nproc)" --target fact_runtime_tests >"$OUT/build-tests.log" 2>&1 \
  || { grep -B2 -A8 "error" "$OUT/build-tests.log" | head -40; stamp "runtime tests did not build"; }
stamp "glu gtests (two processes)"
tests=build-device/tests/cpp/fact_runtime_tests
gtest_pids=()
for filter in GpuEpilogueKernels.SwiGluLlamaMlpBf16 GpuEpilogueKernels.BiasGeGluRaggedBf16; do
  ( timeout "$(cap 10)" "$tests" --gtest_filter="$filter" >"$OUT/gtest-${filter#*.}.log" 2>&1
    echo "exit $?" >>"$OUT/gtest-${filter#*.}.log" ) &
  gtest_pids+=($!)
done
for pid in "${gtest_pids[@]}"; do wait "$pid"; done
touch "$WORK/gtests.done"
stamp "gtests done"
wait "$bench_pid"
stamp "done"

(cd "$WORK" && find . -name "*.json" -size -4M -print0 | tar czf "$OUT/optimize-work.tgz" --null -T -) 2>/dev/null
# The results file also inside a tarball: on 2026-11-25 the device tool returned the logs but
# left the bare JSON out.
(cd "$OUT" && ls swiglu-*.json >/dev/null 2>&1 && tar czf "$OUT/results.tgz" swiglu-*.json) 2>/dev/null
gtest_summary=""
for log in "$OUT"/gtest-*.log; do
  name=$(basename "$log" .log); name=${name#gtest-}
  if grep -q "\[  PASSED  \] 1 test" "$log"; then result=passed
  elif grep -q "\[  SKIPPED \]" "$log"; then result=skipped
  else result=FAILED; fi
  gtest_summary+="$name $result; "
  grep -E "FAILED|Failure|error|rel_err" "$log" | head -8
done
tail -5 "$OUT/bench.log"
echo "swiglu [$(elapsed)s]: gtests: ${gtest_summary}bench: $(grep -E '^swiglu mlp' "$OUT/bench.log" | tail -1 || echo 'no result (see bench.log)')"
