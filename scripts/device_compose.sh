#!/usr/bin/env bash
# One device call for the end-to-end composition benchmark: build the engine
# (scripts/device_build.sh), build the native fact::launch extension alongside (when the checkout
# has python/fact/native.py), run the GPU-marked pytest tests under a time cap, then
# bench/compose/run_block.py within what is left of the total. Results come back at the top of
# $OUT (compose-<device>-<date>.json, .md, -speedup.png, -ablation.png); every log, the
# fact.optimize reports and plans go into $OUT/logs.tgz.
#
# Usage (device tool, kind nvidia-h200, carry [".deps"]):
#   bash scripts/device_compose.sh [TOTAL_SECONDS [run_block.py arguments...]]
# TOTAL_SECONDS (default 530) bounds the whole call; FACT_TEST_SECONDS (default 90) caps pytest
# (0 skips it). A split run, e.g. a second call for the later stages, passes --variant NAME so
# its results file does not take the first one's name.
# run_block.py gets --time-budget = what is left minus a margin for its last stage, and is
# stopped with SIGTERM (it writes what it has; SIGINT would be ignored by a background job)
# shortly before TOTAL_SECONDS.
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-530}
shift || true
TEST_SECONDS=${FACT_TEST_SECONDS:-90}
STAGE_MARGIN=${FACT_STAGE_MARGIN:-75}   # seconds kept for the stage running when the budget ends
PACK_MARGIN=25                          # seconds kept for copying and packing
LOGS=$OUT/logs
RESULTS=$OUT/results
WORK=/tmp/fact-compose-work
mkdir -p "$LOGS" "$RESULTS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[$(elapsed)s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python

pack() {
  cp "$RESULTS"/*.json "$RESULTS"/*.md "$RESULTS"/*.png "$OUT"/ 2>/dev/null
  if [ -d "$WORK" ]; then  # plans and reports of every fact.optimize call (no kernel binaries)
    (cd "$WORK" && find . -name "*.json" -size -4M -print0 | tar czf "$LOGS/optimize-work.tgz" --null -T -) 2>/dev/null
  fi
  tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null
  rm -rf "$LOGS" "$RESULTS"
  ls -la "$OUT"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c \
  'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'; \
  } 2>&1 | tee "$LOGS/device.txt"

native_pid=""
if [ -f python/fact/native.py ]; then
  stamp "native fact::launch extension: building in the background"
  python3 -m fact.native >"$LOGS/native.log" 2>&1 &
  native_pid=$!
fi

stamp "configure + build the engine"
if ! fact_device_build "$LOGS"; then
  stamp "engine build failed"
  [ -n "$native_pid" ] && wait "$native_pid"
  pack
  exit 1
fi
"$FACT_ENGINE" --version
if [ -n "$native_pid" ]; then
  wait "$native_pid"; stamp "native extension: exit $? ($(tail -1 "$LOGS/native.log"))"
fi

if [ "$TEST_SECONDS" -gt 0 ]; then
  stamp "GPU tests (pytest -m gpu, at most ${TEST_SECONDS}s)"
  timeout --signal=INT --kill-after=15 "$TEST_SECONDS" \
    python3 -m pytest -m gpu tests/python patterns -q -p no:cacheprovider -ra >"$LOGS/pytest-gpu.log" 2>&1
  stamp "GPU tests: exit $? (124 = time cap)"
  tail -15 "$LOGS/pytest-gpu.log"
else
  stamp "GPU tests: skipped (FACT_TEST_SECONDS=0)"
fi

left=$(( TOTAL_SECONDS - $(elapsed) - PACK_MARGIN ))
budget=$(( left - STAGE_MARGIN ))
if [ "$budget" -lt 30 ]; then
  stamp "only ${left}s left: the benchmark is not started"
  pack
  exit 1
fi
stamp "bench/compose/run_block.py (budget ${budget}s, stopped at ${left}s)"
timeout --signal=TERM --kill-after=20 "$left" \
  python3 bench/compose/run_block.py --time-budget "$budget" --out-dir "$RESULTS" --work-dir "$WORK" "$@" \
  >"$LOGS/run_block.log" 2>&1 &
bench_pid=$!
tail -n +1 -f "$LOGS/run_block.log" --pid="$bench_pid" | grep --line-buffered -E '^\[ *[0-9.]+s\]'
wait "$bench_pid"
status=$?
stamp "run_block.py: exit $status"
if [ "$status" -ne 0 ]; then tail -40 "$LOGS/run_block.log"; fi
report=$(ls "$RESULTS"/*.md 2>/dev/null | head -1)
if [ -n "$report" ]; then sed -n '/^## Summary/,/^## Verification/p' "$report" | head -60; fi
pack
exit "$status"
