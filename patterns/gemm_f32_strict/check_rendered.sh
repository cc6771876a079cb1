#!/usr/bin/env bash
# Builds the committed strict kernels (rendered/*.cu, each with its standalone checker:
# standalone_check.cuh) for sm_90a in parallel and runs each over the checker's cases (check,
# square 4096³, batched, large-K): relative error against a float64 reference and time against
# cuBLAS SGEMM and TF32 in the same process. On the GPU host, from the repository root, CUTLASS
# headers under .deps/cutlass, the headers CMake generates (fact/gemm_epilogue_steps.def) in
# $FACT_GENERATED_INCLUDE (default: the first of build-device/generated, build/generated):
#   bash patterns/gemm_f32_strict/check_rendered.sh [GLOB] [checker arguments...]
# GLOB picks variants by file name (default: all); e.g. '*_nt_*' the weight-gradient layouts.
# Logs and binaries go to $OUT/strict-check (OUT defaults to .), the results file (device,
# driver, CUDA, CUTLASS; per variant and case FACT's time against cuBLAS SGEMM's in the same
# process: check_results.py) to $OUT/strict-check-<device>-<date>.json.
# Exit status: the number of variants that failed to build or to pass.
set -uo pipefail
glob=${1:-*}
shift || true
out=${OUT:-.}/strict-check
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin
cutlass=$PWD/.deps/cutlass
generated=${FACT_GENERATED_INCLUDE:-}
for g in build-device/generated build/generated; do
  [ -z "$generated" ] && [ -f "$g/fact/gemm_epilogue_steps.def" ] && generated=$PWD/$g
done
if [ -z "$generated" ]; then
  echo "check_rendered.sh: no generated headers (configure the engine first, or set FACT_GENERATED_INCLUDE)" >&2
  exit 1
fi
pids=()
for f in patterns/gemm_f32_strict/rendered/$glob.cu; do
  [ -f "$f" ] || continue
  n=$out/$(basename "$f" .cu)
  nvcc -std=c++17 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -Xptxas -v -I. -Iinclude -I"$generated" -I"$cutlass/include" -I"$cutlass/tools/util/include" \
    -DFACT_STANDALONE_MAIN "$f" -lcublas -o "$n" >"$n.build.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
failed=0
for f in patterns/gemm_f32_strict/rendered/$glob.cu; do
  [ -f "$f" ] || continue
  n=$out/$(basename "$f" .cu)
  echo "== $(basename "$f" .cu)"
  if [ ! -x "$n" ]; then
    echo "build failed: $n.build.log"; tail -20 "$n.build.log"; failed=$((failed + 1)); continue
  fi
  "$n" "$@" 2>&1 | tee "$n.run.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=$((failed + 1))
done
slug=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
python3 patterns/gemm_f32_strict/check_results.py "$out" --driver "$driver" \
  --cutlass-include "$cutlass/include" \
  -o "${OUT:-.}/strict-check-${slug:-gpu}-$(date +%F).json" || failed=$((failed + 1))
exit "$failed"
