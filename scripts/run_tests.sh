#!/usr/bin/env bash
# The README's test command: set up (scripts/setup.sh), then run the C++ suites (CTest) and the
# Python suites (pytest), and end with every skipped test and its reason (scripts/test_summary.py
# reading both suites' JUnit files). GPU tests skip with that reason on a machine without a GPU.
# The slow tests run too: the strict-kernel compiles (FACT_SLOW_TESTS, minutes of nvcc) and the
# `pip install ".[all]"` test (a clean venv, dependencies from PyPI); FACT_SLOW_TESTS=0 skips
# both (they are then listed as skipped).
# Arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$FACT_ROOT"
export FACT_SLOW_TESTS=${FACT_SLOW_TESTS:-1}
results=$FACT_BUILD_DIR/test-results
mkdir -p "$results"
rm -f "$results/ctest.xml" "$results/pytest.xml"
status=0
started=$SECONDS
echo "== C++ tests (ctest)"
ctest --test-dir "$FACT_BUILD_DIR" --output-on-failure -j "${FACT_JOBS:-2}" \
      --output-junit "$results/ctest.xml" || status=1
echo "   ($((SECONDS - started)) s)"
started=$SECONDS
echo "== Python tests (pytest)"
python -m pytest --junitxml="$results/pytest.xml" -o junit_family=xunit1 "$@" || status=1
echo "   ($((SECONDS - started)) s)"
echo
python scripts/test_summary.py --ctest "$results/ctest.xml" --pytest "$results/pytest.xml"
exit $status
