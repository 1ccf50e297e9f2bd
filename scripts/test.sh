#!/usr/bin/env bash
# Set up .venv (as scripts/setup.sh), lint (ruff), and run the whole test suite in two tiers: the quick one
# (pytest -m "not slow"), then the slow one (the notebook's papermill run, the command line's run, resume, the
# README's main job). Extra arguments go to both pytest calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
echo "== lint: ruff check, ruff format --check (pyproject.toml's [tool.ruff]) =="
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== quick tier: pytest -m 'not slow' =="
.venv/bin/python -m pytest -q -m "not slow" --durations=10 "$@"
echo "== slow tier: pytest -m slow =="
.venv/bin/python -m pytest -q -m slow --durations=10 "$@"
