#!/usr/bin/env bash
# One device call on a machine of three or more GPUs (kinds nvidia-h100-x4, nvidia-h200-x4, ...)
# that does a validation and a conformance measurement side by side, since device time is
# counted per machine, not per GPU: the engine and its tests are built once (tests on), then
#   - the last GPU runs pytest -m gpu  (log: $OUT/pytest_gpu.log),
#   - the GPU before it runs the C++ suite  (log: $OUT/ctest.log),
#   - the other GPUs run scripts/device_conformance.sh with the arguments given, one lane each
#     (its results and logs at the top of $OUT, as that script leaves them).
# Test processes never share a GPU with a timed lane, so the timings are not disturbed by the
# tests (they share the host's cores: the prepare phase gets half of them, as alone).
# Usage (device tool, a kind with >= 3 GPUs, carry [".deps", ".fact-git-sha"]):
#   bash scripts/device_parallel.sh TOTAL_SECONDS [fact.conformance arguments...]
set -uo pipefail
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
TOTAL_SECONDS=${1:-580}
shift || true
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stamp() { echo "[parallel $(elapsed)s] $*"; }
GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
if [ "$GPUS" -lt 3 ]; then
  echo "device_parallel.sh needs three GPUs or more (this machine has $GPUS): use device_validate.sh" \
       "and device_conformance.sh in separate calls" >&2
  exit 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
export PYTHONPATH=$PWD/python FACT_BUILD_TESTS=ON
stamp "configure + build the engine and its tests (once, for every part)"
python3 -m fact.native >"$OUT/native.log" 2>&1 &
native_pid=$!
fact_device_build "$OUT" || { stamp "engine build failed"; exit 1; }
wait "$native_pid"
export FACT_PREBUILT=1
pytest_gpu=$(( GPUS - 1 ))
ctest_gpu=$(( GPUS - 2 ))
lanes=$(( GPUS - 2 ))
conformance_gpus=$(seq -s, 0 $(( lanes - 1 )))

stamp "GPU $ctest_gpu: ctest; GPU $pytest_gpu: pytest -m gpu; GPUs $conformance_gpus: conformance"
CUDA_VISIBLE_DEVICES=$ctest_gpu timeout $(( TOTAL_SECONDS - $(elapsed) - 20 )) \
  ctest --test-dir build-device -j 8 --timeout 300 --output-on-failure >"$OUT/ctest.log" 2>&1 &
ctest_pid=$!
CUDA_VISIBLE_DEVICES=$pytest_gpu timeout $(( TOTAL_SECONDS - $(elapsed) - 20 )) \
  python3 -m pytest -m gpu -v -ra --durations=20 -p no:cacheprovider tests/python patterns \
  >"$OUT/pytest_gpu.log" 2>&1 &
pytest_pid=$!
CUDA_VISIBLE_DEVICES=$conformance_gpus FACT_GPUS=$lanes \
  bash "$(dirname "${BASH_SOURCE[0]}")/device_conformance.sh" $(( TOTAL_SECONDS - $(elapsed) - 10 )) "$@"
conformance_status=$?
wait "$ctest_pid"; ctest_status=$?
wait "$pytest_pid"; pytest_status=$?
echo "pytest -m gpu exit $pytest_status ($(grep -cE " PASSED| FAILED| ERROR" "$OUT/pytest_gpu.log") tests reported)" \
  >>"$OUT/pytest_gpu.log"
stamp "conformance exit $conformance_status, ctest exit $ctest_status (124: time cap), pytest exit $pytest_status"
tail -4 "$OUT/ctest.log"
grep -E "FAILED|ERROR" "$OUT/pytest_gpu.log" | head -20
tail -3 "$OUT/pytest_gpu.log"
