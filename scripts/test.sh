#!/usr/bin/env bash
# Set up .venv (as scripts/setup.sh), lint (ruff), and run the whole test suite in two tiers: the quick one
# (pytest -m "not slow"), then the slow one (the notebook's papermill run, the command line's run, resume, the
# README's main job). Extra arguments go to both pytest calls. Every step runs even when one before it failed, so one
# run tells how broken an install is; the last lines give each step's result, and the exit status is 1 if any failed.
# TEST_SETUP=0: reuse .venv as it is (no scripts/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${TEST_SETUP:-1}" != 0 ]; then
  bash scripts/setup.sh || { echo "test.sh: scripts/setup.sh failed: nothing was tested" >&2; exit 1; }
fi
export TOKENIZERS_PARALLELISM=false
# Two pytest workers (pytest-xdist), one torch thread each: on 2 cores that beats one worker with two threads, whose
# waits spin while the tests' own processes (papermill kernels, the command line) want the cores too. A test file
# stays on one worker (--dist loadfile), so its fixtures run once; the notebook's papermill run, which several files
# read, runs once for all of them (tests/conftest.py). TEST_WORKERS=0: no workers.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
workers=(-n "${TEST_WORKERS:-2}" --dist loadfile)
[ "${TEST_WORKERS:-2}" != 0 ] || workers=()

results=()
failed=0
step() {  # step NAME COMMAND...: run the command, record "NAME: passed|FAILED ..." with its time
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  local took="$((SECONDS - start)) s"
  if [ "$rc" = 0 ]; then
    results+=("$name: passed ($took)")
  elif [ "$rc" = 5 ] && [ "$extra_args" != 0 ]; then  # pytest's "no tests collected": the arguments chose none here
    results+=("$name: no tests selected by the arguments ($took)")
  else
    results+=("$name: FAILED (exit $rc, $took)")
    failed=1
  fi
}
lint() {
  local rc=0
  .venv/bin/ruff check . || rc=1
  .venv/bin/ruff format --check . || rc=1
  return "$rc"
}
extra_args=$#

echo "== lint: ruff check, ruff format --check (pyproject.toml's [tool.ruff]) =="
step "lint" lint
echo "== quick tier: pytest -m 'not slow' =="
step "quick tier" .venv/bin/python -m pytest -q -m "not slow" --durations=10 "${workers[@]}" "$@"
echo "== slow tier: pytest -m slow =="
step "slow tier" .venv/bin/python -m pytest -q -m slow --durations=20 "${workers[@]}" "$@"

echo "== test.sh summary =="
printf '%s\n' "${results[@]}"
exit "$failed"
