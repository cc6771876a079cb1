#!/usr/bin/env bash
# One device call (kind nvidia-h100-x1, carry [".deps"]): why hf_phi3_decoder's first run of the
# Inductor-compiled composed graph ended its process with SIGSEGV on the H200s on 2026-11-26
# (bench/results/conformance-nvidia-h200-2026-11-26.json). Builds the engine, then runs
# probe.py at full size (tune 0) in three processes, each printing every op the first compiled
# run dispatches (shapes, strides, storage sizes, pointers; for fact::launch the registered
# layouts and slots) before calling it: without the 2026-11-26 layout pin ("old", native op),
# with it (native), and without it on the Python ctypes path (FACT_NATIVE=0). The last OP line
# before a crash names the op; Inductor's code goes to $OUT/phi3_output_code.log.
set -u
OUT=${OUT:-/tmp}
source scripts/device_build.sh
python3 -m fact.native > "$OUT/native.log" 2>&1 &
fact_device_build "$OUT" > "$OUT/build.out" 2>&1 || { tail -20 "$OUT/build.out"; exit 1; }
wait
export FACT_ENGINE=$PWD/build-device/fact PYTHONPATH=$PWD/python PYTHONFAULTHANDLER=1 CUDA_LAUNCH_BLOCKING=1
export TORCH_LOGS=output_code TORCH_LOGS_OUT=$OUT/phi3_output_code.log
probe=bench/probe/phi3/probe.py
for variant in "0 old" "0"; do
  echo "=== variant: tune $variant (native) ==="
  timeout 280 python3 $probe $variant > "$OUT/probe.out" 2> "$OUT/probe.err"; echo "exit $?"
  cat "$OUT/probe.out"; grep -v "^V1\|__output_code" "$OUT/probe.err" | grep -A3 "^OP\|Fatal\|File \|Error" | tail -40
done
echo "=== variant: tune 0 old, FACT_NATIVE=0 (Python ctypes path) ==="
FACT_NATIVE=0 timeout 200 python3 $probe 0 old 2>&1 | grep -v "^V1" | grep -A3 "^OP\|Fatal\|File \|remainder\|Error" | tail -25
