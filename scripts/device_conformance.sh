#!/usr/bin/env bash
# One device call for the GPU conformance benchmark (`fact bench conformance`): build
# the engine (scripts/device_build.sh) and the native fact::launch extension beside it, then run
# the corpus models at their full sizes (bf16 native, plus float32 strict for the gemm /
# epilogue / mlp files): FACT (tuned over --tune configurations, tuning database shared across
# models) against eager and torch.compile, verified against float64 on the GPU. Cases run in
# the order of fact.conformance.QUICK, then the rest of the corpus (without --quick), until the
# time budget is spent (cases that would start later are recorded as skipped). Results come back at the top of
# $OUT: conformance-<device>-<date>.json (docs/architecture.md), .md (the readable table) and
# .png (speedup vs coverage); logs, plans, reports and the prepare records in $OUT/logs.tgz. A
# short table is printed last.
#
# The benchmark runs in two phases (python -m fact.conformance --help, "The prepare phase" in
# python/fact/conformance/prepare.py). First the prepare phase: FACT_PREPARE_JOBS (default 8 per GPU) worker
# processes of 2 cores each run the cases' compile work in queue order, timing nothing (nvcc
# builds of the same tuning candidates the measurement tunes, torch.export, Inductor
# compiles), for FACT_PREPARE_SHARE percent (default 45) of the case budget. Then the serial
# measurements, with the GPU to themselves, find the kernels and Inductor's FX graphs of the
# original modules (the guard and the torch.compile baseline) in the caches; the composed
# modules' Inductor remainders reuse their Triton kernels only; torch.export, dynamo tracing,
# the tuning runs, verification and timing stay in the measurement. Expected, not yet measured
# on an H100: the prepare phase gets through about 8 cases per 150-200 s and a prepared case
# is measured in well under its cold 60-170 s, so a call should hold the whole QUICK subset and
# roughly twice the cases of a serial call over the rest of the corpus (serially, i.e. with
# FACT_PREPARE_JOBS=0: 4-6 cases with cold kernel and Inductor caches).
#
# On a machine with several GPUs (kinds nvidia-h100-x2/x4/x8, nvidia-h200-x2/x4/x8) the
# measurements run in one lane per GPU (--gpus, FACT_GPUS: default every GPU nvidia-smi lists;
# python/fact/conformance/lanes.py), each lane on its own GPU and its own slice of the cores,
# and the prepare phase gets 8 workers per GPU (at most half the cores): a 4-GPU machine of
# 64 cores takes the whole corpus in about the time one GPU takes a quarter of it. A run that
# does not fit one call goes on in the next with --resume RESULTS_JSON (the cases measured
# there are kept, the rest are measured): write the first call's results file into the
# checkout (e.g. bench/results/) so it travels with the next call, and name it in FACT_RESUME
# (the script passes --resume only when that file was measured on the same kind of GPU).
#
# Usage (device tool, kind nvidia-h100-x1 or a multi-GPU kind, carry [".deps"]; write
# .fact-git-sha first):
#   bash scripts/device_conformance.sh [TOTAL_SECONDS [fact.conformance arguments...]]
# TOTAL_SECONDS (default 560) bounds the whole call; the benchmark gets what is left after the
# build minus FACT_STAGE_MARGIN (default 110 s: a case in progress when the budget runs out,
# e.g. a transformers block, takes about that long) as its budget for starting cases, of which
# the prepare phase takes its share first, and is stopped with SIGTERM (it keeps what it
# measured) shortly before TOTAL_SECONDS. Without arguments it runs --quick (the QUICK subset:
# 8 cases); other examples: --models hf_llama_decoder,mlp_swiglu_llama:bfloat16 (just these),
# --dtypes float32 (the strict cases), --tune 4, --variant part2 (a second call: another
# results file name; the rest of the corpus goes in further calls that name their cases with
# --models); arguments given here override the prepare settings (e.g. --prepare-jobs 0). The
# kernel cache, the tuning database and Inductor's caches live in FACT_CACHE_DIR (default
# /tmp/fact-cache; Inductor's in its inductor/ folder), so a second call on the same warm
# machine reuses them.
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-560}
shift || true
[ $# -eq 0 ] && set -- --quick   # default: the QUICK subset (what one call holds)
STAGE_MARGIN=${FACT_STAGE_MARGIN:-110}
GPUS=${FACT_GPUS:-$(nvidia-smi --list-gpus 2>/dev/null | wc -l)}
[ "$GPUS" -ge 1 ] 2>/dev/null || GPUS=1
CORES=$(nproc)
DEFAULT_PREPARE_JOBS=$(( 8 * GPUS < CORES / 2 ? 8 * GPUS : CORES / 2 ))
PREPARE_JOBS=${FACT_PREPARE_JOBS:-$(( DEFAULT_PREPARE_JOBS > 0 ? DEFAULT_PREPARE_JOBS : 1 ))}
PREPARE_SHARE=${FACT_PREPARE_SHARE:-45}   # percent of the case budget for the prepare phase
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
prepare_budget=$(( budget * PREPARE_SHARE / 100 ))
if [ -n "${FACT_RESUME:-}" ]; then  # --resume FILE, when FILE was measured on this kind of GPU
  here=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  there=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("device", ""))' "$FACT_RESUME")
  if [ "$here" = "$there" ]; then
    set -- --resume "$FACT_RESUME" "$@"
  else
    stamp "FACT_RESUME=$FACT_RESUME was measured on '$there', this is '$here': measuring every case"
  fi
fi
stamp "fact bench conformance (budget ${budget}s for starting cases, the first ${prepare_budget}s" \
      "preparing with ${PREPARE_JOBS} workers; ${GPUS} GPU lane(s); stopped at ${left}s)"
rm -rf "$WORK"
timeout --signal=TERM --kill-after=20 "$left" \
  "$FACT_ENGINE" bench conformance -o "$RESULTS" --work-dir "$WORK" --time-budget "$budget" \
  --prepare-jobs "$PREPARE_JOBS" --prepare-budget "$prepare_budget" --gpus "$GPUS" "$@" \
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
