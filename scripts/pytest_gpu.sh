#!/usr/bin/env bash
# `pytest -m gpu` in one device call: the GPU tests that compile kernels take 30-70 s each, most
# of it nvcc on the host, so one process runs past a call's limit. This runs them as SHARDS
# pytest processes side by side (conftest.py's --shard I/N), shard I on GPU I mod GPUS, then the
# tests marked `timed` (they compare GPU timings) alone, after the others. Logs:
# $OUT/pytest_gpu-<I>.log per shard, $OUT/pytest_gpu-timed.log, and $OUT/pytest_gpu.log (every
# test's line and each run's summary). Exit status: non-zero when any run failed.
# Usage: bash scripts/pytest_gpu.sh [SECONDS [SHARDS]]   (FACT_PYTEST_K narrows with -k)
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
SECONDS_LEFT=${1:-540}
SHARDS=${2:-${FACT_PYTEST_SHARDS:-6}}  # beside three jobs on an H200 x4: 6 shards took 350 s, 4 took 386
GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
[ "$GPUS" -ge 1 ] || GPUS=1
visible=${CUDA_VISIBLE_DEVICES:-}
if [ -n "$visible" ]; then IFS=, read -r -a gpu_ids <<<"$visible"; else
  gpu_ids=(); for ((g = 0; g < GPUS; g++)); do gpu_ids+=("$g"); done; fi
start=$(date +%s)
pytest_args=(-v -ra --durations=10 -p no:cacheprovider ${FACT_PYTEST_K:+-k "$FACT_PYTEST_K"})
status=0
stopped=0  # runs that ran out of time (timeout's 124): their unfinished tests are not counted
crashed=()  # runs killed by a signal (a segfault in a kernel or the native op): the test they were in
pids=()
for ((i = 0; i < SHARDS; i++)); do
  gpu=${gpu_ids[$((i % ${#gpu_ids[@]}))]}
  CUDA_VISIBLE_DEVICES=$gpu timeout "$SECONDS_LEFT" python3 -m pytest -m "gpu and not timed" \
    --shard "$i/$SHARDS" "${pytest_args[@]}" tests/python patterns >"$OUT/pytest_gpu-$i.log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; code=$?
  # pytest's 5: this shard selected no test (fewer tests than shards, or -k chose none here)
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || status=1
  [ "$code" -eq 124 ] && stopped=$((stopped + 1))
  if [ "$code" -gt 128 ] && [ "$code" -ne 137 ]; then
    # pytest -v prints a test's name before running it: the crash is in the last one named
    # without a verdict.
    test_name=$(grep -oE "^[^ ]+::[^ ]+" "$OUT/pytest_gpu-$i.log" | tail -1)
    crashed+=("shard $i: ${test_name:-unknown test} (signal $((code - 128)))")
  fi
  echo "shard $i/$SHARDS exit $code" >>"$OUT/pytest_gpu-$i.log"
done
left=$(( SECONDS_LEFT - ($(date +%s) - start) ))
CUDA_VISIBLE_DEVICES=${gpu_ids[0]} timeout "$left" python3 -m pytest -m "gpu and timed" \
  "${pytest_args[@]}" tests/python patterns >"$OUT/pytest_gpu-timed.log" 2>&1
code=$?
[ "$code" -eq 0 ] || [ "$code" -eq 5 ] || status=1
[ "$code" -eq 124 ] && stopped=$((stopped + 1))
echo "timed exit $code" >>"$OUT/pytest_gpu-timed.log"
grep -hE " PASSED| FAILED| ERROR| SKIPPED|^(FAILED|ERROR) |=====.*(passed|failed|error|selected)|exit [0-9]+$" \
  "$OUT"/pytest_gpu-*.log >"$OUT/pytest_gpu.log"
passed=$(grep -cE " PASSED" "$OUT/pytest_gpu.log"); failed=$(grep -cE " FAILED| ERROR" "$OUT/pytest_gpu.log")
verdict=""
[ "$stopped" -gt 0 ] && verdict=", $stopped run(s) STOPPED at the time limit (tests not run: see the logs)"
if [ ${#crashed[@]} -gt 0 ]; then
  failed=$((failed + ${#crashed[@]}))
  verdict="$verdict, ${#crashed[@]} run(s) CRASHED (their later tests not run): $(IFS=';'; echo "${crashed[*]}")"
fi
echo "pytest -m gpu: $passed passed, $failed failed$verdict in $(( $(date +%s) - start )) s ($SHARDS shards on ${#gpu_ids[@]} GPU(s), then the timed tests)" | tee -a "$OUT/pytest_gpu.log"
exit $status
