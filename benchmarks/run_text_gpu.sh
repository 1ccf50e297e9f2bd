#!/usr/bin/env bash
# Issue 42 item 7 on the GPU machine: continued pretraining (dataset_format text, the Python Language Reference
# topics in data/python_reference) on the TinyLlama-shaped model with random weights, the fast plan against the
# `-p recipe article` baseline (the same run with only recipe=article: the configured 2 x 4 split, checkpointing,
# backend as configured), each in a fresh process with empty compile caches:
#   h200, h200_article: bf16 (the GPU plan);  t4, t4_article: the T4 stand-in (fp16, CUDA memory capped at 15 GiB).
# Every other value is the package's default (max_seq_length 4096, 4-bit, LoRA r 32 on the seven projections).
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_text_gpu.sh [RUN...]
# STEPS optimizer steps (default 12); EXTRA more train flags. After each run $OUT/text_runs.json gets its row:
# run_summary.json's whole-train() tokens/s and peak GiB, and the steady tokens/s (median of the progress lines'
# tokens/s from step 4 on); the log goes to $OUT/text-RUN.log.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/text_gpu}; mkdir -p "$OUT"
STEPS=${STEPS:-12}
source benchmarks/gpu_model.sh
export UNSLOTH_DISABLE_STATISTICS=1
common=(--model_name "$MODEL" --dataset "$PWD/data/python_reference/topics" --dataset_format text
        --max_steps "$STEPS" --eval_steps 1000 --save_steps 1000 --report_to none --reload_merged false
        --overwrite_output_dir true --max_new_tokens 32)
for run in ${@:-h200 h200_article t4 t4_article}; do
  case $run in
    h200) args=() ;;
    h200_article) args=(--recipe article) ;;
    t4) args=(--dtype float16 --gpu_memory_cap_gib 15) ;;
    t4_article) args=(--dtype float16 --gpu_memory_cap_gib 15 --recipe article) ;;
    *) echo "unknown run: $run (h200, h200_article, t4, t4_article)"; exit 2 ;;
  esac
  cache=$(mktemp -d /tmp/text-caches-XXXX)
  t0=$SECONDS
  TORCHINDUCTOR_CACHE_DIR=$cache/inductor TRITON_CACHE_DIR=$cache/triton UNSLOTH_COMPILE_LOCATION=$cache/unsloth \
    timeout "${RUN_TIMEOUT:-150}" python3 -m tinyllama_ft.cli train "${common[@]}" "${args[@]}" \
    --output_dir "/tmp/text-$run" ${EXTRA:-} 2>&1 | grep -vE "it/s\]|s/it\]" > "$OUT/text-$run.log"
  wall=$((SECONDS - t0)); echo "== text $run: $wall s"
  grep -E "^recipe|^  (batch|float16|bf16)|^step ($STEPS)/|perplexity|Error" "$OUT/text-$run.log" | cut -c1-300 | head -12
  python3 - "$run" "$OUT" "$wall" <<'PY'
import json, re, statistics, sys
run, out, wall = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = open(f"{out}/text-{run}.log", encoding="utf-8", errors="replace").read()
rates = [(int(s), float(r.replace(",", ""))) for s, r in re.findall(r"^step (\d+)/\d+ .*?tokens/s ([\d,.]+)", log, re.M)]
try:
    summary = json.load(open(f"/tmp/text-{run}/run_summary.json", encoding="utf-8"))
except (OSError, ValueError):
    summary = {}
row = {k: summary.get(k) for k in ("backend", "dtype", "tokens_per_s", "train_runtime_s", "peak_memory_gib",
                                   "peak_reserved_gib", "plan", "execution") if k in summary}
steady = [r for s, r in rates if s >= 4]  # none with STEPS < 4
row.update(wall_s=wall, steady_tokens_per_s=statistics.median(steady) if steady else None,
           step_tokens_per_s=rates, ok=bool(summary))
try:
    rows = json.load(open(f"{out}/text_runs.json", encoding="utf-8"))
except (OSError, ValueError):
    rows = {}
rows[run] = row
json.dump(rows, open(f"{out}/text_runs.json", "w", encoding="utf-8"), indent=1)
print(f"[text] {run}: whole train() {row.get('tokens_per_s')} tokens/s ({row.get('train_runtime_s')} s), "
      f"steady {row['steady_tokens_per_s']}, peak {row.get('peak_memory_gib')} GiB")
PY
done
