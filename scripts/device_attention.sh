#!/usr/bin/env bash
# One device call for the attention kernels: build every instantiation under
# patterns/attention/instances with nvcc (all cores), reject any whose ptxas report serializes
# wgmma (C7510) or warns of a performance loss, run the checker/benchmark
# (patterns/attention/bench_attention.py), and leave the results JSON and logs under $OUT.
#
# Run from a tree that has patterns/attention (or .attn/attention, the copy the device tool
# carries) and CUTLASS headers in .deps/cutlass:
#   bash scripts/device_attention.sh            # or: bash .attn/device_attention.sh
# Environment: FACT_ATTN_CASES (comma list, default all), FACT_ATTN_ITERS (default 30),
#   FACT_ATTN_ONLY (glob of instance names to build), FACT_ATTN_NCU=1 (profile the goal cases),
#   FACT_ATTN_ALLOW_SPILLS=1 (an experiment: keep instances that spill registers).
set -uo pipefail
OUT=${OUT:-$PWD/out/attention}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }

ROOT=$PWD
if [ -d "$ROOT/.attn/attention" ]; then
  SRC="$ROOT/.attn/attention"; INC="$ROOT/.attn/include"      # the device tool's carried copy
  mkdir -p "$ROOT/.attn/include/patterns"; ln -sfn "$SRC" "$ROOT/.attn/include/patterns/attention"
else
  SRC="$ROOT/patterns/attention"; INC="$ROOT/include"
fi
CUTLASS=${CUTLASS_DIR:-$ROOT/.deps/cutlass}
BUILD=${BUILD_DIR:-/tmp/fact-attn-build}
mkdir -p "$BUILD/libs" "$BUILD/logs"
export FACT_CUTLASS_VERSION=$(awk '/define CUTLASS_(MAJOR|MINOR|PATCH)/{v=v (v?".":"") $3} END{print v}' "$CUTLASS/include/cutlass/version.h")
export FACT_GIT_SHA=$(cat "$ROOT/.fact-git-sha" 2>/dev/null || cat "$SRC/../FACT_SHA" 2>/dev/null || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)

stamp "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
nvcc --version | tail -2 | tee -a "$OUT/device.txt"
echo "cutlass $FACT_CUTLASS_VERSION  fact $FACT_GIT_SHA" | tee -a "$OUT/device.txt"

NVCC_FLAGS=(-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr
            -Xptxas -v -Xcompiler -fPIC -shared -I"$INC" -I"$ROOT/.attn/include" -I"$ROOT"
            -I"$CUTLASS/include" -I"$CUTLASS/tools/util/include")
build_one() {  # $1: instance .cu -> $BUILD/libs/<name>.so, log in $BUILD/logs/<name>.log
  local cu=$1 name; name=$(basename "$cu" .cu)
  local log="$BUILD/logs/$name.log"
  if ! nvcc "${NVCC_FLAGS[@]}" -o "$BUILD/libs/$name.so.tmp" "$cu" -lcuda >"$log" 2>&1; then
    echo "FAIL build $name"; return 0
  fi
  if grep -qE "C75[0-9][0-9]|Potential Performance Loss|wgmma.mma_async instructions are serialized" "$log"; then
    echo "REJECT $name: ptxas serialized wgmma"; rm -f "$BUILD/libs/$name.so.tmp"; return 0
  fi
  if [ -z "${FACT_ATTN_ALLOW_SPILLS:-}" ] && grep -qE "[1-9][0-9]* bytes spill stores" "$log"; then
    echo "REJECT $name: register spills"; rm -f "$BUILD/libs/$name.so.tmp"; return 0
  fi
  mv "$BUILD/libs/$name.so.tmp" "$BUILD/libs/$name.so"
  echo "ok $name: $(grep -oE 'Used [0-9]+ registers|[0-9]+ bytes stack frame|[0-9]+ bytes spill stores' "$log" | tr '\n' ' ')"
}
export -f build_one; export BUILD
stamp "build $(ls "$SRC"/instances/${FACT_ATTN_ONLY:-*}.cu | wc -l) instances on $(nproc) cores"
# bash arrays do not cross xargs: pass the flags through a file.
printf '%s\n' "${NVCC_FLAGS[@]}" > "$BUILD/nvcc_flags"
ls "$SRC"/instances/${FACT_ATTN_ONLY:-*}.cu | xargs -P "$(nproc)" -I{} bash -c '
  mapfile -t NVCC_FLAGS < "$BUILD/nvcc_flags"; build_one "$1"' _ {} | tee "$OUT/build.txt"
tar czf "$OUT/build-logs.tgz" -C "$BUILD" logs
stamp "built $(ls "$BUILD"/libs/*.so 2>/dev/null | wc -l) libraries"

stamp "check + benchmark"
PYTHONUNBUFFERED=1 python3 "$SRC/bench_attention.py" --libs "$BUILD/libs" --json "$OUT/attention.json" \
  --iters "${FACT_ATTN_ITERS:-30}" ${FACT_ATTN_CASES:+--cases "$FACT_ATTN_CASES"} 2>&1 | tee "$OUT/bench.log" | grep -v '^{' 
rc=${PIPESTATUS[0]}

# Nsight Compute on chosen kernels: FACT_ATTN_NCU_LIBS="libA libB" (names without .so), one
# launch per case in FACT_ATTN_NCU_CASES (default: the two goal shapes and non-causal d128).
if [ -n "${FACT_ATTN_NCU_LIBS:-}" ] && command -v ncu >/dev/null; then
  rm -rf "$BUILD/ncu"; mkdir -p "$BUILD/ncu"
  for g in $FACT_ATTN_NCU_LIBS; do cp "$BUILD/libs/$g.so" "$BUILD/ncu/" 2>/dev/null; done
  cases=${FACT_ATTN_NCU_CASES:-b4_t2048_h32_d128_noncausal,mingpt_b128_t512_h8_d96_causal,llama_b4_t2048_h32_kv8_d128_causal}
  stamp "ncu: $(ls "$BUILD/ncu") on $cases"
  timeout 300 ncu --clock-control none -k regex:fmha_sm90 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section InstructionStats \
    python3 "$SRC/bench_attention.py" --libs "$BUILD/ncu" --profile --cases "$cases" > "$OUT/ncu.txt" 2>&1
  # Stall reasons and tensor-pipe activity of the first kernel on the first case.
  timeout 150 ncu --clock-control none -k regex:fmha_sm90 -c 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,lts__t_sector_hit_rate.pct,l1tex__m_xbar2l1tex_read_bytes.sum.per_second" \
    python3 "$SRC/bench_attention.py" --libs "$BUILD/ncu" --profile --cases "${cases%%,*}" > "$OUT/ncu-stalls.txt" 2>&1
  grep -E "stalled|gmma|hit_rate|per_second" "$OUT/ncu-stalls.txt" | awk '$NF+0 > 0.05 || /gmma|hit|second/' | cut -c1-130 | head -40
  grep -E "fmha_sm90_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|One or More Eligible" "$OUT/ncu.txt" | cut -c1-150 | head -80
fi
# Where the time goes, instruction by instruction: FACT_ATTN_NCU_SOURCE=1 samples the warps of the
# first FACT_ATTN_NCU_LIBS kernel on the first FACT_ATTN_NCU_CASES case (SourceCounters), writes
# ncu-sass.txt (patterns/attention/ncu_sass_summary.py: the instructions sampled most), and
# profiles cuDNN's kernel on the same case beside it (ncu-cudnn.txt: launch, occupancy, speed of
# light, warp states).
if [ "${FACT_ATTN_NCU_SOURCE:-0}" = 1 ] && [ -n "${FACT_ATTN_NCU_LIBS:-}" ] && command -v ncu >/dev/null; then
  rm -rf "$BUILD/ncu-src"; mkdir -p "$BUILD/ncu-src"
  lib=${FACT_ATTN_NCU_LIBS%% *}
  cp "$BUILD/libs/$lib.so" "$BUILD/ncu-src/"
  case1=${FACT_ATTN_NCU_CASES:-mingpt_b128_t512_h8_d96_causal}; case1=${case1%%,*}
  stamp "ncu source counters: $lib on $case1"
  timeout 240 ncu --clock-control none -k regex:fmha_sm90 -c 1 --import-source no \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SpeedOfLight -o "$BUILD/ncu-src/report" \
    python3 "$SRC/bench_attention.py" --libs "$BUILD/ncu-src" --profile --cases "$case1" > "$OUT/ncu-source.log" 2>&1
  ncu -i "$BUILD/ncu-src/report.ncu-rep" --page source --csv --print-source sass > "$BUILD/ncu-src/sass.csv" 2>>"$OUT/ncu-source.log"
  ncu -i "$BUILD/ncu-src/report.ncu-rep" --page details >> "$OUT/ncu-source.log" 2>&1
  python3 "$SRC/ncu_sass_summary.py" "$BUILD/ncu-src/sass.csv" 45 > "$OUT/ncu-sass.txt" 2>&1
  gzip -c "$BUILD/ncu-src/sass.csv" > "$OUT/ncu-sass.csv.gz"
  head -75 "$OUT/ncu-sass.txt"
  stamp "ncu: cuDNN's kernel on $case1"
  rm -f "$BUILD/ncu-src"/*.so
  timeout 150 ncu --clock-control none -k regex:"cudnn|sm90|fmha|flash" -c 3 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    python3 "$SRC/bench_attention.py" --libs "$BUILD/ncu-src" --profile --profile-sdpa cudnn --cases "$case1" \
    > "$OUT/ncu-cudnn.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Shared Memory Config|Dynamic Shared|Block Size|Grid Size|Waves Per SM|Achieved Occupancy|Theoretical Occupancy|No Eligible|Warp Cycles Per Issued" \
    "$OUT/ncu-cudnn.txt" | cut -c1-140 | head -40
fi
stamp "done (checker exit $rc)"
exit 0
