#!/usr/bin/env bash
# Idempotent set-up for a fresh machine, sourced by the README's two commands.
#  1. system packages the engine builds with (apt, only the missing ones);
#  2. the Python environment (PyTorch, nvidia-cutlass for the CUTLASS headers, pytest, ...),
#     installed once into a virtualenv cached OUTSIDE the clone and keyed by requirements.txt,
#     so every clone on the machine (and CI) reuses it;
#  3. the C++ engine (CMake + Ninja) into build/.
# Afterwards: FACT_VENV, FACT_ENGINE and PYTHONPATH are exported and the venv is on PATH.
# Knobs: FACT_ENV_CACHE (venv parent folder), FACT_BUILD_DIR, FACT_JOBS.
set -euo pipefail

FACT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export FACT_ROOT
log() { printf '\033[1m[fact setup]\033[0m %s\n' "$*" >&2; }

# --- 1. system packages ---------------------------------------------------------------------
missing=()
for pkg in cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libgtest-dev libssl-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
if ((${#missing[@]})); then
  log "installing system packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) != 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || log "no nvcc found: kernels will be rendered but not compiled"

# --- 2. cached Python environment ----------------------------------------------------------
FACT_ENV_CACHE=${FACT_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fact}
env_key=$( (cat "$FACT_ROOT/requirements.txt"; python3 --version) | sha256sum | cut -c1-16)
FACT_VENV=$FACT_ENV_CACHE/venv-$env_key
if [[ ! -f $FACT_VENV/.fact-complete ]]; then
  log "creating the Python environment $FACT_VENV (PyTorch is several GB: first time only)"
  mkdir -p "$FACT_ENV_CACHE"
  python3 -m venv --clear "$FACT_VENV"
  "$FACT_VENV/bin/python" -m pip install -q --upgrade pip
  "$FACT_VENV/bin/python" -m pip install -q --progress-bar off -r "$FACT_ROOT/requirements.txt"
  touch "$FACT_VENV/.fact-complete"
fi
export FACT_VENV
export PATH=$FACT_VENV/bin:$PATH
export PYTHONPATH=$FACT_ROOT/python${PYTHONPATH:+:$PYTHONPATH}

# --- 3. the engine --------------------------------------------------------------------------
FACT_BUILD_DIR=${FACT_BUILD_DIR:-$FACT_ROOT/build}
FACT_JOBS=${FACT_JOBS:-$(nproc)}
if [[ ! -f $FACT_BUILD_DIR/build.ninja ]]; then
  log "configuring the engine in $FACT_BUILD_DIR"
  cmake -S "$FACT_ROOT" -B "$FACT_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DPython3_EXECUTABLE="$FACT_VENV/bin/python" >/dev/null
fi
log "building the engine"
if ! cmake --build "$FACT_BUILD_DIR" -j "$FACT_JOBS" >"$FACT_BUILD_DIR/build.log" 2>&1; then
  tail -n 60 "$FACT_BUILD_DIR/build.log" >&2
  log "engine build failed (full log: $FACT_BUILD_DIR/build.log)"
  return 1 2>/dev/null || exit 1
fi
export FACT_ENGINE=$FACT_BUILD_DIR/fact
export PATH=$FACT_BUILD_DIR:$PATH
