#!/usr/bin/env bash
# The GPU-only tests, each file in its own process (Unsloth patches transformers for the whole process it is
# imported in, so the export and decoding files must not share one with the Unsloth ones), on a CUDA machine.
# Usage (repo root): bash scripts/gpu_tests.sh [FILE ...]   (default: every tests/gpu/*.py, export first)
# WHL_DIR (optional): wheels to install into /tmp/site first; `bash ../shared/tools/device-wheels.sh
# liger-kernel==0.8.5` builds them for the GPU machine, which lacks unsloth, trl, datasets, bitsandbytes and
# liger-kernel (without it the fast plan runs without Liger, and test_gpu_trained_model.py says so).
# The inputs are the repository's test fixtures (the TinyLlama-shaped model is built from tests/fixtures/tinyllama).
# Logs go to $OUT (default /tmp/gpu-tests). PYTEST_ADDOPTS
# (pytest's own) selects tests, e.g. "-k out_of_memory". Exit status: the number of files that failed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-tests}; mkdir -p "$OUT"
source scripts/gpu_site.sh
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TINYLLAMA_SHAPED=${TINYLLAMA_SHAPED:-/tmp/tinyllama-shaped}
[[ -f $TINYLLAMA_SHAPED/config.json ]] || python3 benchmarks/build_tinyllama_shaped.py --src tests/fixtures/tinyllama --out "$TINYLLAMA_SHAPED"
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(tests/gpu/test_gpu_export.py tests/gpu/test_gpu_decoding.py tests/gpu/test_gpu_trained_model.py tests/gpu/test_gpu_faults.py)
failed=0
for f in "${files[@]}"; do
  t0=$SECONDS
  python3 -m pytest -q -s -p no:cacheprovider "$f" > "$OUT/$(basename "$f" .py).log" 2>&1 || failed=$((failed + 1))
  echo "$f: $(grep -aE '[0-9]+ (passed|failed|error|skipped)' "$OUT/$(basename "$f" .py).log" | tail -1) [$((SECONDS - t0)) s]"
done
exit $failed
