#!/usr/bin/env bash
# The README's test command: set up (scripts/setup.sh), then run the C++ suites (CTest) and the
# Python suites (pytest). GPU tests skip with a visible reason on a machine without a GPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$FACT_ROOT"
status=0
echo "== C++ tests (ctest) =="
ctest --test-dir "$FACT_BUILD_DIR" --output-on-failure -j "${FACT_JOBS:-2}" || status=1
echo "== Python tests (pytest) =="
python -m pytest -ra "$@" || status=1
exit $status
