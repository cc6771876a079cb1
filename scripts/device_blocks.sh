#!/usr/bin/env bash
# One device call (about 10 minutes on an H100) for the blocks end to end: build the
# engine (scripts/device_build.sh), run `fact optimize bench/models/mingpt_block.py:MinGPTBlock
# --dtype bfloat16` end to end (capture, discover, realize and compile every kernel -- the four
# GEMMs and FACT's attention kernel -- verify them on the GPU, package), then
# patterns/attention/bench_blocks.py on the package: FACT against eager, torch.compile and
# torch.compile(mode="max-autotune") in the same process, verified against float64, with the
# ablation of each pattern's share (attention only, GEMMs only, all). When time is left, the
# same for the float32 block in precision strict (3xTF32 GEMMs and FACT's 3xTF32 flash attention;
# bench_blocks.py adds the block planned in tf32 against eager with TF32 allowed). Results come
# back at the top of $OUT:
# blocks-<device>-<date>.json (docs/architecture.md, "Measuring") and blocks.txt (the table, printed
# last); logs, reports and plans in $OUT/logs.tgz.
#
# Usage (device tool, kind nvidia-h100-x1, carry [".deps"]; .fact-git-sha written by the caller):
#   bash scripts/device_blocks.sh [TOTAL_SECONDS]          # default 570
# Environment: FACT_BLOCKS_TUNE=N tunes every kernel over at most N configurations first
# (default 0: stored or default configurations; tuning the five kernels takes minutes),
# FACT_BLOCKS_DTYPES (default "bfloat16 float32": float32 only when 200 s are left; a second
# call with FACT_BLOCKS_DTYPES=float32 measures it alone), FACT_BLOCKS_MODEL (default
# bench/models/mingpt_block.py:MinGPTBlock; bench/models/llama_block.py:LlamaDecoderBlock for
# the Llama block, which adds the torch_compile_sdpa baseline), FACT_BLOCKS_VARIANTS (bench_blocks
# --variants, default all), FACT_BLOCKS_PROFILE=1 (bench_blocks --profile: each variant's kernels),
# FACT_BLOCKS_PATTERNS (fact optimize --patterns: the package's selection, e.g.
# rmsnorm,gemm,attention,swiglu,mlp to package the opt-in RMSNorm fold; default: the default
# patterns). The RMSNorm fold against the package without it, in one run: the fact_rmsnorm
# variant (the model planned again in process with rmsnorm named), e.g.
#   FACT_BLOCKS_MODEL=bench/models/llama_block.py:LlamaDecoderBlock FACT_BLOCKS_DTYPES=bfloat16 \
#   FACT_BLOCKS_VARIANTS=torch_eager,fact,torch_compile_sdpa,fact_rmsnorm FACT_BLOCKS_PROFILE=1 \
#   bash scripts/device_blocks.sh
#
# Expected time on an H100 (16 cores): engine build ~2.5 min, fact optimize ~1.5-2 min (5 kernels
# compiled in parallel, ~1 min of nvcc; the package verified on the GPU), bench_blocks.py ~3-4
# min (max-autotune's compile ~1 min, each FACT variant's Inductor remainder ~15-40 s): about 8
# minutes for the bf16 block; the float32 strict block only when 200 s are left (usually a second
# call with FACT_BLOCKS_DTYPES=float32).
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-570}
PACK_MARGIN=20
LOGS=$OUT/logs
WORK=${FACT_BLOCKS_WORK:-/tmp/fact-blocks-work}  # one per concurrent run (device_parallel.sh)
mkdir -p "$LOGS" "$WORK"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[$(elapsed)s] $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python

pack() {
  cp "$WORK"/results/*.json "$OUT"/ 2>/dev/null
  # the results also inside a tarball: the device tool has left bare JSON files out before
  (cd "$WORK/results" && tar czf "$OUT/results.tgz" *.json) 2>/dev/null
  for run in "$WORK"/*_bf16 "$WORK"/*_fp32; do  # reports and plans of every fact optimize (no kernel binaries)
    [ -d "$run" ] && (cd "$run" && find . -name "*.json" -size -4M -o -name "*.md" -size -1M | \
      tar czf "$LOGS/$(basename "$run")-work.tgz" -T -) 2>/dev/null
  done
  tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null
  rm -rf "$LOGS"
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
[ -n "$native_pid" ] && { wait "$native_pid"; stamp "native extension: exit $? ($(tail -1 "$LOGS/native.log"))"; }

tune_args=(--no-tune)
if [ "${FACT_BLOCKS_TUNE:-0}" -gt 0 ]; then tune_args=(--max-candidates "$FACT_BLOCKS_TUNE"); fi

MODEL=${FACT_BLOCKS_MODEL:-bench/models/mingpt_block.py:MinGPTBlock}
MODEL_SLUG=$(basename "${MODEL%%:*}" .py | sed 's/_block$//')   # mingpt, llama
optimize_args=()
[ -n "${FACT_BLOCKS_PATTERNS:-}" ] && optimize_args+=(--patterns "$FACT_BLOCKS_PATTERNS")
bench_args=()
[ -n "${FACT_BLOCKS_VARIANTS:-}" ] && bench_args+=(--variants "$FACT_BLOCKS_VARIANTS")
[ "${FACT_BLOCKS_PROFILE:-0}" = 1 ] && bench_args+=(--profile)

optimize() {  # $1: dtype, $2: folder name; the package lands in $WORK/$2/fact_<class name>
  stamp "fact optimize $MODEL --dtype $1"
  "$FACT_ENGINE" optimize "$MODEL" --dtype "$1" -o "$WORK/$2" \
    --no-measure "${tune_args[@]}" "${optimize_args[@]}" >"$LOGS/optimize-$2.log" 2>&1
  local status=$?
  stamp "fact optimize ($1): exit $status"
  grep -E "^(#|[0-9]+[ab]? )|verif|declined|failed|error" "$LOGS/optimize-$2.log" | head -30
  return $status
}

bench() {  # $1: package folder; appends its case to the results file
  local left=$(( TOTAL_SECONDS - $(elapsed) - PACK_MARGIN ))
  if [ "$left" -lt 60 ]; then stamp "no time left to measure $1 (${left}s)"; return 1; fi
  stamp "patterns/attention/bench_blocks.py --package $1 (budget $(( left - 15 ))s)"
  timeout --signal=TERM --kill-after=10 "$left" \
    python3 patterns/attention/bench_blocks.py --package "$1" --out-dir "$WORK/results" \
    --time-budget "$(( left - 15 ))" "${bench_args[@]}" >>"$LOGS/bench_blocks.log" 2>&1
  local status=$?
  stamp "bench_blocks.py: exit $status"
  return $status
}

# bfloat16 first (the main goals); float32 in precision strict when room is left (its kernels
# take ~1.5 min of nvcc, its measurements ~1.5 min with max-autotune skipped by the budget).
status=1
for dtype in ${FACT_BLOCKS_DTYPES:-bfloat16 float32}; do
  name=${MODEL_SLUG}_$( [ "$dtype" = bfloat16 ] && echo bf16 || echo fp32 )
  left=$(( TOTAL_SECONDS - $(elapsed) - PACK_MARGIN ))
  if [ "$dtype" != bfloat16 ] && [ "$left" -lt 200 ]; then
    stamp "$dtype block skipped: ${left}s left (run again with FACT_BLOCKS_DTYPES=$dtype)"
    continue
  fi
  if optimize "$dtype" "$name"; then
    package=$(ls -d "$WORK/$name"/fact_* 2>/dev/null | head -1)
    [ -n "$package" ] && bench "$package" && status=0
  fi
done
grep -E "^\[ *[0-9.]+s\]" "$LOGS/bench_blocks.log" 2>/dev/null | tail -30
# The table of the last run holds every case so far (bench_blocks.py appends to the file).
awk '/^blocks on /{block=""} /^blocks on /,/^wrote /{block=block $0 "\n"} END{printf "%s", block}' \
  "$LOGS/bench_blocks.log" 2>/dev/null | tee "$OUT/blocks.txt"
pack
exit "$status"
