#!/usr/bin/env bash
# The engine build shared by the one-call device scripts (device_bench.sh, device_compose.sh).
# Source it, then call `fact_device_build LOG_DIR` from the repository root:
#   - exports FACT_CUTLASS_DIR ($PWD/.deps/cutlass: the device host has no nvidia-cutlass
#     package, so the headers are carried), FACT_CACHE_DIR (default /tmp/fact-cache),
#     FACT_GIT_SHA (from .fact-git-sha, written by whoever starts the call), PYTHONUNBUFFERED;
#   - configures and builds build-device (Release, no tests) with all cores, logs in
#     LOG_DIR/configure.log and LOG_DIR/build.log; FACT_BUILD_TARGETS (space-separated target
#     names, e.g. "fact fact_library fact_runtime_tests") builds only those;
#   - on success exports FACT_ENGINE=$PWD/build-device/fact and returns 0; on failure prints
#     the error's context and returns 1;
#   - FACT_PREBUILT=1: build-device was built by the caller (scripts/device_parallel.sh builds
#     once, then runs several scripts side by side): only the exports, no cmake (two cmake runs
#     in one build folder at once would clash).
fact_device_build() {
  local log_dir=$1
  mkdir -p "$log_dir"
  export FACT_CUTLASS_DIR=$PWD/.deps/cutlass
  export FACT_CACHE_DIR=${FACT_CACHE_DIR:-/tmp/fact-cache}
  export FACT_GIT_SHA=$(cat .fact-git-sha 2>/dev/null || echo unknown)
  export PYTHONUNBUFFERED=1
  if [ "${FACT_PREBUILT:-0}" = 1 ] && [ -x build-device/fact ]; then
    export FACT_ENGINE=$PWD/build-device/fact
    return 0
  fi
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DFACT_BUILD_TESTS=${FACT_BUILD_TESTS:-OFF} \
        >"$log_dir/configure.log" 2>&1 || { tail -40 "$log_dir/configure.log"; return 1; }
  # shellcheck disable=SC2086  # FACT_BUILD_TARGETS is a word list
  cmake --build build-device -j "$(nproc)" ${FACT_BUILD_TARGETS:+--target $FACT_BUILD_TARGETS} \
        >"$log_dir/build.log" 2>&1 \
    || { grep -B2 -A8 "error" "$log_dir/build.log" | head -60; return 1; }
  export FACT_ENGINE=$PWD/build-device/fact
}
