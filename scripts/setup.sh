#!/usr/bin/env bash
# Idempotent set-up for a fresh machine, sourced by the README's two commands (and safe to
# source from an interactive shell, or to run with bash):
#  1. system packages the engine builds with (apt, only the missing ones), and a headless
#     Chromium for the report's layout test (apt's chromium, when no Chromium is on PATH);
#  2. the Python environment (PyTorch, nvidia-cutlass for the CUTLASS headers, pytest, ...),
#     installed once into a virtualenv cached OUTSIDE the clone and keyed by requirements.txt,
#     so every clone on the machine (and CI) reuses it;
#  3. the C++ engine (CMake + Ninja) into build/, and build/activate, a script that puts the
#     environment, `fact` and the Python package on PATH in any later shell.
# Afterwards (when sourced): FACT_ROOT, FACT_VENV, FACT_BUILD_DIR, FACT_ENGINE and PYTHONPATH are
# exported and the venv and build/ are on PATH. The shell's options (set -e, -u, ...) are left
# as they were: the work runs in a subshell with `set -euo pipefail`.
# Knobs: FACT_ENV_CACHE (venv parent folder), FACT_BUILD_DIR, FACT_JOBS, FACT_NO_BROWSER=1 (no
# Chromium).

FACT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FACT_ENV_CACHE=${FACT_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fact}
FACT_BUILD_DIR=${FACT_BUILD_DIR:-$FACT_ROOT/build}
FACT_JOBS=${FACT_JOBS:-$(nproc)}
export FACT_ROOT FACT_ENV_CACHE FACT_BUILD_DIR FACT_JOBS

_fact_setup() (
  set -euo pipefail
  log() { printf '\033[1m[fact setup]\033[0m %s\n' "$*" >&2; }
  [[ -t 2 ]] && tty=1 || tty=0

  # --- 1. system packages -------------------------------------------------------------------
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
  # A headless browser for the report's layout test (tests/python/report_browser.py): Debian's
  # chromium, once. Not fatal: without one that test skips and says why. FACT_NO_BROWSER=1 skips.
  if [[ ${FACT_NO_BROWSER:-0} != 1 ]] && ! command -v chromium >/dev/null 2>&1 &&
     ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
    log "installing chromium (headless browser for the report layout test; FACT_NO_BROWSER=1 skips)"
    SUDO=""; [[ $(id -u) != 0 ]] && SUDO=sudo
    { $SUDO apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; } ||
      log "could not install chromium: the report layout test will skip"
  fi
  if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  command -v nvcc >/dev/null 2>&1 || log "no nvcc found: kernels will be rendered but not compiled"

  # --- 2. cached Python environment --------------------------------------------------------
  if [[ ! -f $FACT_VENV/.fact-complete ]]; then
    log "creating the Python environment $FACT_VENV (PyTorch is several GB: first time only)"
    log "pip's full log: $FACT_VENV.pip.log"
    mkdir -p "$FACT_ENV_CACHE"
    python3 -m venv --clear "$FACT_VENV"
    "$FACT_VENV/bin/python" -m pip install -q --upgrade pip --log "$FACT_VENV.pip.log"
    # Progress stays visible (download bars on a terminal, one line per package elsewhere).
    "$FACT_VENV/bin/python" -m pip install --progress-bar on --log "$FACT_VENV.pip.log" \
      -r "$FACT_ROOT/requirements.txt"
    touch "$FACT_VENV/.fact-complete"
  fi

  # --- 3. the engine ------------------------------------------------------------------------
  mkdir -p "$FACT_BUILD_DIR"
  if [[ ! -f $FACT_BUILD_DIR/build.ninja ]]; then
    log "configuring the engine in $FACT_BUILD_DIR"
    cmake -S "$FACT_ROOT" -B "$FACT_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DPython3_EXECUTABLE="$FACT_VENV/bin/python" >"$FACT_BUILD_DIR/configure.log" 2>&1 ||
      { tail -n 40 "$FACT_BUILD_DIR/configure.log" >&2; log "configure failed (log: $FACT_BUILD_DIR/configure.log)"; exit 1; }
  fi
  log "building the engine (log: $FACT_BUILD_DIR/build.log)"
  # Ninja's [done/total] counter, updated in place on a terminal.
  if ! cmake --build "$FACT_BUILD_DIR" -j "$FACT_JOBS" 2>&1 | tee "$FACT_BUILD_DIR/build.log" |
       { while IFS= read -r line; do
           if ((tty)) && [[ $line =~ ^\[([0-9]+/[0-9]+)\] ]]; then
             printf '\r\033[1m[fact setup]\033[0m building the engine [%s] ' "${BASH_REMATCH[1]}" >&2
           fi
         done; ((tty)) && printf '\n' >&2; true; }; then
    tail -n 60 "$FACT_BUILD_DIR/build.log" >&2
    log "engine build failed (full log: $FACT_BUILD_DIR/build.log)"
    exit 1
  fi

  # build/activate: one line for any later shell (changes no shell option).
  cat >"$FACT_BUILD_DIR/activate" <<EOF
# Written by scripts/setup.sh. \`source $FACT_BUILD_DIR/activate\` puts FACT's Python environment,
# the \`fact\` command and the \`fact\` Python package of $FACT_ROOT on this shell's paths.
. "$FACT_VENV/bin/activate"
export FACT_ROOT="$FACT_ROOT"
export FACT_VENV="$FACT_VENV"
export FACT_BUILD_DIR="$FACT_BUILD_DIR"
export FACT_ENGINE="$FACT_BUILD_DIR/fact"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:\$PATH"; fi
case ":\$PATH:" in *":$FACT_BUILD_DIR:"*) ;; *) export PATH="$FACT_BUILD_DIR:\$PATH" ;; esac
case ":\${PYTHONPATH:-}:" in *":$FACT_ROOT/python:"*) ;; *) export PYTHONPATH="$FACT_ROOT/python\${PYTHONPATH:+:\$PYTHONPATH}" ;; esac
EOF
  log "ready. In a new shell, put \`fact\` and the Python package on PATH with:"
  printf '\n    source %s\n\n' "$FACT_BUILD_DIR/activate" >&2
)

_fact_env_key=$( (cat "$FACT_ROOT/requirements.txt"; python3 --version) | sha256sum | cut -c1-16)
FACT_VENV=$FACT_ENV_CACHE/venv-$_fact_env_key
export FACT_VENV
unset _fact_env_key
# Not in a condition: there bash would ignore the subshell's own `set -e`.
_fact_setup
_fact_status=$?
unset -f _fact_setup
if ((_fact_status != 0)); then
  unset _fact_status
  return 1 2>/dev/null || exit 1
fi
unset _fact_status
# The same as build/activate, for the shell (or script) that sourced this file.
# shellcheck disable=SC1091
. "$FACT_BUILD_DIR/activate"
