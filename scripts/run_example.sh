#!/usr/bin/env bash
# The README's main command: set up, then optimize the bundled minGPT-style block.
# With a Hopper GPU: the full pipeline (discover, build, verify, tune, compose, report).
# Without one: discovery, code generation and compilation; it says what it skipped and why.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$FACT_ROOT"
exec fact optimize bench/models/mingpt_block.py:MinGPTBlock --dtype bfloat16 -o out/mingpt_block --max-candidates 8 "$@"
