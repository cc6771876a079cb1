#!/usr/bin/env bash
# One device call for the GPU conformance benchmark (`fact bench conformance`, issue 9): build
# the engine (scripts/device_build.sh) and the native fact::launch extension beside it, then run
# the corpus models at their full sizes (bf16 native, plus float32 strict for the gemm /
# epilogue / mlp files): FACT (tuned over --tune configurations, tuning database shared across
# models) against eager and torch.compile, verified against float64 on the GPU. Cases run in
# the order of fact.conformance.QUICK, then the rest of the corpus (without --quick), until the
# time budget is spent (cases that would start later are recorded as skipped). Results come back at the top of
# $OUT: conformance-<device>-<date>.json (DESIGN.md "Measuring"), .md (the readable table) and
# .png (speedup vs coverage); logs, plans and reports in $OUT/logs.tgz. A short table is
# printed last.
#
# Usage (device tool, kind nvidia-h100-x1, carry [".deps"]; write .fact-git-sha first):
#   bash scripts/device_conformance.sh [TOTAL_SECONDS [fact.conformance arguments...]]
# TOTAL_SECONDS (default 560) bounds the whole call; the benchmark gets what is left after the
# build minus FACT_STAGE_MARGIN (default 110 s: a case in progress when the budget runs out,
# e.g. a transformers block, takes about that long) and is stopped with SIGTERM (it keeps what
# it measured) shortly before TOTAL_SECONDS. Without arguments it runs --quick (the QUICK
# subset: 8 cases, of which an H100 call is expected to hold 4-6 with cold kernel and Inductor
# caches); other examples: --models hf_llama_decoder,mlp_swiglu_llama:bfloat16 (just these),
# --dtypes float32 (the strict cases), --tune 4, --variant part2 (a second call: another
# results file name; the rest of the corpus goes in further calls that name their cases with
# --models). The kernel cache and tuning database live in FACT_CACHE_DIR (default
# /tmp/fact-cache), so a second call on the same warm machine reuses them.
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-560}
shift || true
[ $# -eq 0 ] && set -- --quick   # default: the QUICK subset (what one call holds)
STAGE_MARGIN=${FACT_STAGE_MARGIN:-110}
PACK_MARGIN=20
LOGS=$OUT/logs
RESULTS=$OUT/results
WORK=/tmp/fact-conformance-work
mkdir -p "$LOGS" "$RESULTS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[device $(elapsed)s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python
export FACT_PYTHON=${FACT_PYTHON:-python3}

pack() {
  cp "$RESULTS"/*.json "$RESULTS"/*.md "$RESULTS"/*.png "$OUT"/ 2>/dev/null
  if [ -d "$WORK" ]; then  # case records, worker logs, plans and reports (no kernel binaries)
    (cd "$WORK" && find . \( -name "*.json" -o -name "*.log" \) -size -4M -print0 \
      | tar czf "$LOGS/conformance-work.tgz" --null -T -) 2>/dev/null
  fi
  tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null
  rm -rf "$LOGS" "$RESULTS"
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

left=$(( TOTAL_SECONDS - $(elapsed) - PACK_MARGIN ))
budget=$(( left - STAGE_MARGIN ))
if [ "$budget" -lt 60 ]; then
  stamp "only ${left}s left: the benchmark is not started"
  pack
  exit 1
fi
stamp "fact bench conformance (budget ${budget}s for starting cases, stopped at ${left}s)"
rm -rf "$WORK"
timeout --signal=TERM --kill-after=20 "$left" \
  "$FACT_ENGINE" bench conformance -o "$RESULTS" --work-dir "$WORK" --time-budget "$budget" "$@" \
  >"$LOGS/conformance.log" 2>&1 &
bench_pid=$!
tail -n +1 -f "$LOGS/conformance.log" --pid="$bench_pid" | grep --line-buffered -E '^\[ *[0-9.]+s\]'
wait "$bench_pid"
status=$?
stamp "fact bench conformance: exit $status (124 = stopped at the time cap)"
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then tail -30 "$LOGS/conformance.log"; fi
results=$(ls "$RESULTS"/conformance-*.json 2>/dev/null | head -1)
pack
if [ -n "$results" ]; then
  echo
  python3 -m fact.conformance --summarize "$OUT/$(basename "$results")"
fi
exit "$status"
