#!/usr/bin/env bash
# Set up .venv (as scripts/setup.sh) and run the whole test suite in two tiers: the quick one
# (pytest -m "not slow"), then the slow one (the notebook's papermill run, the command line's run, resume, the
# README's main job). Extra arguments go to both pytest calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
echo "== quick tier: pytest -m 'not slow' =="
.venv/bin/python -m pytest -q -m "not slow" --durations=10 "$@"
echo "== slow tier: pytest -m slow =="
.venv/bin/python -m pytest -q -m slow --durations=10 "$@"
