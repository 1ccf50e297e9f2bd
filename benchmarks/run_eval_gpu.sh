#!/usr/bin/env bash
# Issue 43's GPU row: `tinyllama-ft eval` on the TinyLlama-shaped model (random weights: the scores are chance, the
# figures are the wall time and the peak CUDA memory) with an adapter trained for STEPS steps on the demo rows, on the
# shipped offline tasks (tinyllama_ft_mmlu: 497 questions; tinyllama_ft_arithmetic: 100 problems, 64 new tokens),
# base and tuned. lm-eval and its dependencies come as wheels: build them here with
#   bash ../shared/tools/device-wheels.sh lm-eval==0.4.13   (slimmed to fit the 64 MiB carry).
# Usage (repo root): WHL_DIR=.whl DATA_DIR=.device-data OUT=/tmp/out bash benchmarks/run_eval_gpu.sh [EVAL FLAGS...]
# e.g. --batch_size 16 (default: auto) or --limit 100; the log and benchmarks.json go to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/eval_gpu}; mkdir -p "$OUT"
STEPS=${STEPS:-20}; RUN=/tmp/eval-gpu-run
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
source benchmarks/gpu_model.sh
export HF_DATASETS_OFFLINE=1
[[ -f $RUN/lora_model/adapter_config.json ]] || python3 -m tinyllama_ft.cli train --config offline_cpu \
  --model_name "$MODEL" --backend transformers --max_seq_length 512 --max_steps "$STEPS" --eval_steps "$STEPS" \
  --save_steps "$STEPS" --report_to none --output_dir "$RUN" --overwrite_output_dir true > "$OUT/train.log" 2>&1 \
  || { tail -5 "$OUT/train.log"; exit 1; }
python3 - "$RUN/lora_model" "$OUT" "$@" <<'PY' 2>&1 | grep -vE "it/s\]|s/it\]" | tee "$OUT/eval.log"
import json, shutil, sys, time

import torch

from tinyllama_ft.cli import run

adapter, out, *flags = sys.argv[1:]
flags = flags if any(f.startswith("--batch_size") for f in flags) else [*flags, "--batch_size", "auto"]
start = time.perf_counter()
result = run(["eval", "--adapter", adapter, "--tasks", "tinyllama_ft_mmlu,tinyllama_ft_arithmetic", *flags])
wall = time.perf_counter() - start
peak = torch.cuda.max_memory_allocated() / 2**30
print(f"eval on {torch.cuda.get_device_name()}: {wall:.0f} s wall (load included), peak {peak:.2f} GiB allocated, "
      f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved; lm-eval {result.settings['seconds']:.0f} s")
shutil.copy(f"{adapter}/../benchmarks.json", f"{out}/benchmarks.json")
json.dump({"wall_s": wall, "peak_gib": peak, "flags": flags}, open(f"{out}/eval_gpu.json", "w"), indent=1)
PY
