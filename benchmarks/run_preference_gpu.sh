#!/usr/bin/env bash
# Issue 30's GPU rows on the GPU machine, in one call: the preference notebook (DPO) under papermill on the
# TinyLlama-shaped model with random weights and the demo pairs (data/alpaca_pairs), on the transformers backend, on
# Unsloth, and on the T4 stand-in (fp16, CUDA memory capped at 15 GiB), beside the Alpaca notebook (SFT) on the same
# rows' instructions and reference answers (data/alpaca_demo); tokens/s and peak GiB from each run_summary.json.
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_preference_gpu.sh [RUN...]
# RUN: dpo_transformers dpo_unsloth dpo_t4 sft_transformers (default: all); STEPS (default 30) optimizer steps each.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/preference_gpu}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
source benchmarks/gpu_model.sh
common=(-p model_name "$MODEL" -p max_steps "$STEPS" -p report_to none -p eval_steps "$STEPS" -p save_steps "$STEPS"
        -p max_new_tokens 32 -p max_seq_length 1024)
pairs=(-p dataset "$PWD/data/alpaca_pairs/pairs.jsonl")
sft=(-p dataset "$PWD/data/alpaca_demo/alpaca_demo.jsonl")
nb() {  # nb NAME NOTEBOOK papermill-args...
  local name=$1 notebook=$2; shift 2
  local t0=$SECONDS
  timeout "${RUN_TIMEOUT:-150}" python3 -m papermill "notebooks/$notebook.ipynb" "$OUT/$name.out.ipynb" --cwd /tmp --log-output \
    -p output_dir "/tmp/run-$name" "${common[@]}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || grep -E "Error|error:|Exception" "$OUT/$name.log" | tail -5
  python3 - "/tmp/run-$name/run_summary.json" "$name" "$OUT/preference_gpu.json" <<'PY' 2>/dev/null
import json, sys
path, name, out = sys.argv[1:]
s = json.load(open(path, encoding="utf-8"))
keys = ("backend", "dtype", "method", "tokens_per_s", "peak_memory_gib", "peak_reserved_gib", "train_runtime_s",
        "eval_loss_before", "eval_loss_after")
row = {k: s.get(k) for k in keys} | {"preference": {k: s.get("preference", {}).get(k) for k in ("before", "after")}}
print(name, json.dumps(row)[:600])
try:
    rows = json.load(open(out, encoding="utf-8"))
except FileNotFoundError:
    rows = {}
rows[name] = row
json.dump(rows, open(out, "w", encoding="utf-8"), indent=1)
PY
}
for run in ${@:-dpo_transformers dpo_unsloth dpo_t4 sft_transformers}; do
  case $run in
    dpo_transformers) nb "$run" finetune_preference "${pairs[@]}" -p backend transformers ;;
    dpo_unsloth) nb "$run" finetune_preference "${pairs[@]}" -p backend unsloth ;;
    dpo_t4) nb "$run" finetune_preference "${pairs[@]}" -p backend auto -p dtype float16 -p gpu_memory_cap_gib 15 ;;
    sft_transformers) nb "$run" finetune_tinyllama "${sft[@]}" -p backend transformers -p load_in_4bit False ;;
  esac
done
