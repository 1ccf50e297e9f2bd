#!/usr/bin/env bash
# Set up .venv (as scripts/setup.sh), lint (ruff), and run the whole test suite in two tiers: the quick one
# (pytest -m "not slow"), then the slow one (the notebook's papermill run, the command line's run, resume, the
# README's main job). Extra arguments go to both pytest calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
# Two pytest workers (pytest-xdist), one torch thread each: on 2 cores that beats one worker with two threads, whose
# waits spin while the tests' own processes (papermill kernels, the command line) want the cores too. A test file
# stays on one worker (--dist loadfile), so its fixtures run once; the notebook's papermill run, which several files
# read, runs once for all of them (tests/conftest.py). TEST_WORKERS=0: no workers.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
workers=(-n "${TEST_WORKERS:-2}" --dist loadfile)
[ "${TEST_WORKERS:-2}" != 0 ] || workers=()
echo "== lint: ruff check, ruff format --check (pyproject.toml's [tool.ruff]) =="
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== quick tier: pytest -m 'not slow' =="
.venv/bin/python -m pytest -q -m "not slow" --durations=10 "${workers[@]}" "$@"
echo "== slow tier: pytest -m slow =="
.venv/bin/python -m pytest -q -m slow --durations=20 "${workers[@]}" "$@"
