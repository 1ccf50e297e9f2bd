#!/usr/bin/env bash
# The notebook benchmark on the GPU machine in one call: the wheels (scripts/gpu_site.sh), the TinyLlama-shaped
# model with random weights, then benchmarks/notebook_runs.py with the arguments given (e.g. --only chat_default).
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_notebook_gpu.sh [ARGS...]
# A warm machine keeps /tmp: the installed wheels, the model and --work's run folders (for a "_warm" row).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/notebook_runs}; WHL_DIR=${WHL_DIR:-.whl}
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
source benchmarks/gpu_model.sh
echo "setup: $((SECONDS - t0)) s"
python3 benchmarks/notebook_runs.py --model "$MODEL" --dataset "$DATA_DIR/alpaca/alpaca_cleaned_5k.jsonl" \
  --out-dir "$OUT" "$@"
# CHECKS=1: also the held-out checks' two decoders side by side (benchmarks/check_decoders.py) on a random adapter
if [[ ${CHECKS:-0} == 1 ]]; then
  [[ -f /tmp/gen-adapter/adapter_config.json ]] || python3 benchmarks/build_adapter.py --model "$MODEL" --out /tmp/gen-adapter
  timeout ${CHECKS_TIMEOUT:-240} python3 benchmarks/check_decoders.py --adapter /tmp/gen-adapter \
    --dataset "$DATA_DIR/alpaca/alpaca_cleaned_5k.jsonl" --out "$OUT/check_decoders.json" 2>&1 | grep -v "it/s\]" | tail -12
fi
