#!/usr/bin/env bash
# Issue 44 target 2 on the GPU machine: benchmarks/dpo_first_steps.py (each DPO micro-batch timed, its compile
# seconds, the reference's pass, the padded shape) in a fresh process per run, with the preference notebook's values
# as benchmarks/run_preference_gpu.sh passes them (TinyLlama-shaped model with random weights, the 983 demo pairs,
# max_seq_length 1024, 2 x 4 configured, beta 0.1, STEPS optimizer steps):
#   h200: the transformers backend, bf16;  t4: the T4 stand-in (backend auto, fp16, CUDA memory capped at 15 GiB);
#   t4_transformers: the T4 stand-in on the transformers backend (SDPA, no compile).
# Each run starts with empty compile caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, UNSLOTH_COMPILE_LOCATION in
# a new folder, as on a new Colab runtime; WARM=1 keeps the machine's). The adapter is not reloaded merged after
# training (reload_merged false: outside train(), and Unsloth's reload took most of a run's remaining minute).
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_dpo_first_steps_gpu.sh [RUN...]
# More train flags for every run: EXTRA="--flag value ..."; PAD=N sets TRL's pad_to_multiple_of (a trial); TAG names
# the rows apart (h200$TAG). The JSON goes to $OUT/dpo_first_steps.json, logs beside.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/dpo_first_steps}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
source benchmarks/gpu_model.sh
export UNSLOTH_DISABLE_STATISTICS=1
common=(--method dpo --model_name "$MODEL" --dataset "$PWD/data/alpaca_pairs/pairs.jsonl" --template alpaca
        --max_seq_length 1024 --max_steps "$STEPS" --eval_steps "$STEPS" --save_steps "$STEPS" --report_to none
        --max_new_tokens 32 --beta 0.1 --learning_rate 5e-5 --warmup_ratio 0.1 --per_device_train_batch_size 2
        --gradient_accumulation_steps 4 --test_size 0.004 --gradient_checkpointing true --load_in_4bit false
        --overwrite_output_dir true --reload_merged false)
for run in ${@:-h200 t4}; do
  case $run in
    h200) args=(--backend transformers) ;;
    t4) args=(--backend auto --dtype float16 --gpu_memory_cap_gib 15) ;;
    t4_transformers) args=(--backend transformers --dtype float16 --gpu_memory_cap_gib 15) ;;
    *) echo "unknown run: $run (h200, t4, t4_transformers)"; exit 2 ;;
  esac
  if [[ -z ${WARM:-} ]]; then
    cache=$(mktemp -d /tmp/dpo-caches-XXXX)
    export TORCHINDUCTOR_CACHE_DIR=$cache/inductor TRITON_CACHE_DIR=$cache/triton UNSLOTH_COMPILE_LOCATION=$cache/unsloth
  fi
  t0=$SECONDS
  timeout "${RUN_TIMEOUT:-200}" python3 benchmarks/dpo_first_steps.py --name "$run${TAG:-}" ${PAD:+--pad-to-multiple-of "$PAD"} --out "$OUT/dpo_first_steps.json" \
    -- "${common[@]}" "${args[@]}" --output_dir "/tmp/dpo-$run" ${EXTRA:-} 2>&1 | grep -vE "it/s\]|s/it\]" \
    > "$OUT/dpo-$run${TAG:-}.log"
  echo "== $run${TAG:-}: $((SECONDS - t0)) s"
  grep -E "^\[dpo_first_steps\]|^recipe|^plan|Error" "$OUT/dpo-$run${TAG:-}.log" | cut -c1-400 | (head -16; tail -4)
done
