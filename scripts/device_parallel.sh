#!/usr/bin/env bash
# One device call on a machine of several GPUs (kinds nvidia-h100-x2/x4, nvidia-h200-x2/x4, ...)
# that runs several jobs side by side, one GPU each, since device time is counted per machine,
# not per GPU. The engine and its tests are built once (tests on), then each job starts on its
# own GPU(s) with FACT_PREBUILT=1 (no second cmake in the build folder):
#   tests        scripts/device_validate.sh's tests: the C++ suite (ctest; the GPU tests run
#                here), then pytest -m gpu (logs in $OUT/tests-<GPU>/: ctest.log, pytest_gpu.log)
#   ctest        the C++ suite only; FACT_CTEST_R narrows it with -R
#   pytest       pytest -m gpu only; FACT_PYTEST_K narrows it with -k
#   blocks       scripts/device_blocks.sh (its FACT_BLOCKS_* settings from the environment;
#                results at the top of $OUT, its logs in $OUT/blocks-logs.tgz)
#   llama        scripts/device_blocks.sh on the Llama block: bf16, eager, FACT,
#                torch.compile with SDPA, FACT with the RMSNorm fold, kernels profiled; its results
#                file comes back as blocks-<device>-<date>-llama.json (FACT_LLAMA_TUNE=N tunes it)
#   attention    scripts/device_attention.sh (FACT_ATTN_* from the environment; $OUT/attention/)
#   gemm         the GEMM suite, `fact bench gemm` with FACT_GEMM_CANDIDATES configurations per
#                case (default 8; results gemm-<device>-<date>-max<N>.json at the top of $OUT);
#                FACT_GEMM_SUITE=gemm-models: the whole models' GEMM calls instead
#                (gemm-models-<device>-<date>-max<N>.json)
#   example      the README's main command on the GPU: `fact optimize` of the bundled minGPT
#                block in bf16 with FACT_EXAMPLE_ARGS (default: --max-candidates 8); its output
#                folder comes back as example.tgz, its terminal output in example.log
#   dynamic      bench/dynamic/run_sweep.py (FACT_DYNAMIC_ARGS: its arguments): one module per
#                model optimized for a batch x sequence range, timed at every shape of a grid
#                against eager and torch.compile; results dynamic-<device>-<date>.json, log
#                dynamic.log
#   training     bench/training/run_training.py (FACT_TRAINING_ARGS: its arguments): full training
#                steps (forward, backward, AdamW) of modules composed for training against eager
#                and torch.compile, gradients against float64, losses after --steps steps;
#                results training-<device>-<date>.json, log training.log; training=NAME[,NAME]
#                runs those models only (tagged NAME), so that several GPUs take one each:
#                `training=mingpt_bf16 training=llama_bf16`
#   ranges       bench/training/run_training_ranges.py (FACT_RANGES_ARGS: its arguments, e.g.
#                "--model mingpt_f32"): one module composed for training over a declared range,
#                timed at sizes it was not traced at against eager and torch.compile(dynamic=True);
#                results training-ranges-<device>-<date>[-<model>].json, log ranges.log
#   models       bench/whole_models/run_whole_models.py (FACT_MODELS_ARGS: its arguments): whole
#                models (GPT-2 124M, a 4-layer 1B-class Llama, BERT-base, ViT-B/16) in bf16,
#                fact.optimize against eager, torch.compile and max-autotune; results
#                models-<device>-<date>.json (its .md table in details.tgz), log models.log.
#                models=NAME[,NAME] runs those models only (tagged NAME), so several GPUs take
#                one model each: `models=gpt2 models=llama models=bert models=vit`
#   overhead     bench/compose/op_overhead.py: host time per call of fact::launch, F.linear, addmm,
#                the composed graph and module of a tiny MLP (native op, then the ctypes path);
#                results op-overhead-<device>-<date>.json at the top of $OUT, log overhead.log
#   unaligned    bench/gemm_unaligned/run_unaligned.py (FACT_UNALIGNED_ARGS: its arguments):
#                unaligned GEMMs (float32 strict 8205x2949x5921, bf16 K = 770, a bf16 LM head of
#                50257) through fact.optimize against eager, torch.compile and max-autotune;
#                results unaligned-<device>-<date>.json at the top of $OUT, log unaligned.log
#   script=PATH  python3 PATH (a reproduction or a one-off measurement, the engine built) on one
#                GPU; its output in script-<name>.log, what it writes under $SCRIPT_OUT (a folder
#                of $OUT) comes back in details.tgz
#   conformance  scripts/device_conformance.sh with the arguments after `--`, on every GPU left
#                (one lane each; list it last)
# JOB+JOB runs the two one after the other on the same GPU(s) (e.g. ctest+conformance: a few GPU
# tests during the first seconds, before the conformance run times anything).
# A test never runs on a GPU while a timed job times there; they share the host's cores.
# Usage (device tool, carry [".deps", ".fact-git-sha"]):
#   bash scripts/device_parallel.sh TOTAL_SECONDS JOB... [-- fact.conformance arguments...]
# e.g. bash scripts/device_parallel.sh 580 tests blocks
#      FACT_MODELS_ARGS="--models gpt2,vit" bash scripts/device_parallel.sh 540 models
#      bash scripts/device_parallel.sh 580 ctest pytest conformance -- --quick
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-580}
shift || true
jobs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do jobs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[parallel $(elapsed)s] $*"; }
here=$(dirname "${BASH_SOURCE[0]}")
GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
needed=${#jobs[@]}
if [ "$needed" -eq 0 ] || [ "$GPUS" -lt "$needed" ]; then
  echo "device_parallel.sh: ${needed} job(s) (${jobs[*]:-none}) need as many GPUs; this machine has $GPUS" >&2
  exit 2
fi
source "$here/device_build.sh"
export PYTHONPATH=$PWD/python FACT_BUILD_TESTS=ON
stamp "configure + build the engine and its tests (once, for every job)"
python3 -m fact.native >"$OUT/native.log" 2>&1 &
native_pid=$!
fact_device_build "$OUT" || { stamp "engine build failed"; exit 1; }
wait "$native_pid"
export FACT_PREBUILT=1
left() { echo $(( TOTAL_SECONDS - $(elapsed) - 15 )); }

run_tests() {  # $1: GPU, $2: the suites (scripts/device_validate.sh's FACT_VALIDATE_PARTS)
  mkdir -p "$OUT/tests-$1"
  CUDA_VISIBLE_DEVICES=$1 FACT_VALIDATE_PARTS=$2 OUT=$OUT/tests-$1 \
    bash "$here/device_validate.sh" "$(left)" 0 >"$OUT/tests-$1.log" 2>&1
}

# The device name of GPU $1 as results files name it (NVIDIA H200 -> nvidia-h200).
gpu_slug() { nvidia-smi --query-gpu=name --format=csv,noheader -i "$1" | head -1 | tr 'A-Z ' 'a-z-'; }

run_one() {  # $1: job, $2: its first GPU; conformance takes every GPU from there
  local gpu=$2
  case "$1" in
    tests) run_tests "$gpu" "ctest pytest" ;;
    ctest) run_tests "$gpu" ctest ;;
    pytest) run_tests "$gpu" pytest ;;
    blocks)
      mkdir -p "$OUT/blocks"
      CUDA_VISIBLE_DEVICES=$gpu OUT=$OUT/blocks bash "$here/device_blocks.sh" "$(left)" >"$OUT/blocks.log" 2>&1 ;;
    llama)
      mkdir -p "$OUT/llama"
      CUDA_VISIBLE_DEVICES=$gpu OUT=$OUT/llama FACT_BLOCKS_WORK=/tmp/fact-blocks-llama FACT_BLOCKS_TUNE=${FACT_LLAMA_TUNE:-0} \
        FACT_BLOCKS_MODEL=bench/models/llama_block.py:LlamaDecoderBlock FACT_BLOCKS_DTYPES=bfloat16 \
        FACT_BLOCKS_VARIANTS=torch_eager,fact,torch_compile_sdpa,fact_rmsnorm FACT_BLOCKS_PROFILE=1 \
        bash "$here/device_blocks.sh" "$(left)" >"$OUT/llama.log" 2>&1 ;;
    attention)
      mkdir -p "$OUT/attention"
      CUDA_VISIBLE_DEVICES=$gpu OUT=$OUT/attention timeout "$(left)" bash "$here/device_attention.sh" \
        >"$OUT/attention.log" 2>&1 ;;
    gemm)
      mkdir -p "$OUT/gemm"
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" ./build-device/fact bench "${FACT_GEMM_SUITE:-gemm}" \
        -o "$OUT/gemm" --max-candidates "${FACT_GEMM_CANDIDATES:-8}" --timeout 60 --tuning-cost none \
        >"$OUT/gemm.log" 2>&1 ;;
    example)
      CUDA_VISIBLE_DEVICES=$gpu timeout "$(left)" ./build-device/fact optimize \
        bench/models/mingpt_block.py:MinGPTBlock --dtype bfloat16 -o "$OUT/example" \
        ${FACT_EXAMPLE_ARGS:---max-candidates 8} >"$OUT/example.log" 2>&1
      echo "fact optimize exit $?" >>"$OUT/example.log" ;;
    dynamic)
      mkdir -p "$OUT/dynamic"
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/dynamic/run_sweep.py \
        --out-dir "$OUT/dynamic" --work-dir /tmp/fact-dynamic --time-budget $(( $(left) - 60 )) \
        ${FACT_DYNAMIC_ARGS:-} >"$OUT/dynamic.log" 2>&1 ;;
    training|training=*)
      local chosen=${1#training} tdir=training
      if [ -n "$chosen" ]; then chosen=${chosen#=}; tdir=training-${chosen//,/-}; fi
      mkdir -p "$OUT/$tdir"
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/training/run_training.py \
        --out-dir "$OUT/$tdir" --work-dir "/tmp/fact-$tdir" --time-budget $(( $(left) - 60 )) \
        ${chosen:+--models "$chosen" --tag "${chosen//,/-}"} ${FACT_TRAINING_ARGS:-} >"$OUT/$tdir.log" 2>&1 ;;
    ranges)
      mkdir -p "$OUT/ranges"
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/training/run_training_ranges.py \
        --out-dir "$OUT/ranges" --work-dir /tmp/fact-ranges ${FACT_RANGES_ARGS:-} >"$OUT/ranges.log" 2>&1 ;;
    models|models=*)
      local selected=${1#models} dir=models
      if [ -n "$selected" ]; then selected=${selected#=}; dir=models-${selected//,/-}; fi
      mkdir -p "$OUT/$dir"
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/whole_models/run_whole_models.py \
        --out-dir "$OUT/$dir" --work-dir "/tmp/fact-$dir" --time-budget $(( $(left) - 90 )) \
        ${selected:+--models "$selected" --tag "${selected//,/-}"} ${FACT_MODELS_ARGS:-} \
        >"$OUT/$dir.log" 2>&1 ;;
    overhead)
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/compose/op_overhead.py \
        --work-dir /tmp/fact-overhead --out "$OUT/op-overhead-$(gpu_slug "$gpu")-$(date +%F).json" \
        >"$OUT/overhead.log" 2>&1 ;;
    unaligned)
      CUDA_VISIBLE_DEVICES=$gpu timeout --signal=INT "$(left)" python3 bench/gemm_unaligned/run_unaligned.py \
        --work-dir /tmp/fact-unaligned --out "$OUT/unaligned-$(gpu_slug "$gpu")-$(date +%F).json" ${FACT_UNALIGNED_ARGS:-} \
        >"$OUT/unaligned.log" 2>&1
      echo "run_unaligned.py exit $?" >>"$OUT/unaligned.log" ;;
    script=*)
      local path=${1#script=} name
      name=$(basename "$path" .py)
      mkdir -p "$OUT/script-$name"
      CUDA_VISIBLE_DEVICES=$gpu SCRIPT_OUT=$OUT/script-$name timeout --signal=INT "$(left)" \
        python3 "$path" >"$OUT/script-$name.log" 2>&1
      echo "exit $?" >>"$OUT/script-$name.log" ;;
    conformance)
      CUDA_VISIBLE_DEVICES=$(seq -s, "$gpu" $(( GPUS - 1 ))) FACT_GPUS=$(( GPUS - gpu )) \
        bash "$here/device_conformance.sh" "$(left)" "${conformance_args[@]}" >"$OUT/conformance.log" 2>&1 ;;
  esac
}
conformance_args=("$@")

pids=()
names=()
gpu=0
for job in "${jobs[@]}"; do
  for part in ${job//+/ }; do
    case "$part" in
      tests|ctest|pytest|blocks|llama|attention|gemm|example|dynamic|training|training=*|ranges|models|models=*|overhead|unaligned|script=*|conformance) ;;
      *) echo "device_parallel.sh: unknown job '$part'" >&2; exit 2 ;;
    esac
  done
  (for part in ${job//+/ }; do run_one "$part" "$gpu"; done) &
  [[ "$job" == *conformance* ]] && gpu_last=$(( GPUS - 1 )) || gpu_last=$gpu
  pids+=($!)
  names+=("$job on GPU $gpu")
  stamp "started $job on GPU $gpu"
  gpu=$(( gpu_last + 1 ))
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  stamp "${names[$i]}: exit $?"
done
for log in "$OUT"/tests-*/ctest.log; do [ -f "$log" ] && tail -6 "$log"; done
for log in "$OUT"/tests-*/pytest_gpu.log; do
  [ -f "$log" ] && { grep -E " FAILED| ERROR" "$log" | head -20; tail -3 "$log"; }
done
[ -f "$OUT/blocks/blocks.txt" ] && cat "$OUT/blocks/blocks.txt"
[ -f "$OUT/llama/blocks.txt" ] && cat "$OUT/llama/blocks.txt"
[ -f "$OUT/attention.log" ] && tail -25 "$OUT/attention.log"
[ -f "$OUT/example.log" ] && grep -vE "ETA|^\s*$" "$OUT/example.log" | tail -40
[ -f "$OUT/gemm.log" ] && grep -vE "ETA|^\s*$" "$OUT/gemm.log" | tail -25
[ -f "$OUT/conformance.log" ] && tail -25 "$OUT/conformance.log"
[ -f "$OUT/dynamic.log" ] && grep -vE "^\s*$" "$OUT/dynamic.log" | tail -40
for log in "$OUT"/training*.log; do [ -f "$log" ] && grep -vE "^\s*$" "$log" | tail -40; done
[ -f "$OUT/ranges.log" ] && grep "^\[ranges" "$OUT/ranges.log" | tail -20
for log in "$OUT"/script-*.log; do [ -f "$log" ] && tail -40 "$log"; done
for log in "$OUT"/models*.log; do [ -f "$log" ] && grep -E "^\[ *[0-9.]+s\]" "$log" | tail -30; done
[ -f "$OUT/unaligned.log" ] && grep -E "^\[unaligned|exit [0-9]+$" "$OUT/unaligned.log" | tail -20

# The device tool brings back at most 8 files from $OUT: the results files (attention, blocks,
# conformance JSON and their .md/.png) stay at the top, everything else goes into details.tgz.
shopt -s nullglob
for f in "$OUT"/attention/*.json "$OUT"/blocks/blocks-*.json "$OUT"/gemm/gemm*.json "$OUT"/dynamic/*.json "$OUT"/training*/*.json "$OUT"/ranges/*.json "$OUT"/models*/models-*.json; do mv "$f" "$OUT/"; done
for f in "$OUT"/llama/blocks-*.json; do mv "$f" "$OUT/$(basename "$f" .json)-llama.json"; done
[ -f "$OUT/attention.json" ] && mv "$OUT/attention.json" "$OUT/attention-results.json"
keep=("$OUT"/*.json "$OUT"/conformance-*.md "$OUT"/conformance-*.png)
rest=()
for f in "$OUT"/*; do
  [[ " ${keep[*]} " == *" $f "* ]] || rest+=("$(basename "$f")")
done
if [ ${#rest[@]} -gt 0 ]; then
  tar -czf "$OUT/details.tgz" -C "$OUT" "${rest[@]}" && (cd "$OUT" && rm -rf "${rest[@]}")
fi
ls "$OUT"
exit 0
