#!/usr/bin/env bash
# Set up .venv (as scripts/setup.sh) and run the whole test suite, the notebook's papermill run included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest -q "$@"
