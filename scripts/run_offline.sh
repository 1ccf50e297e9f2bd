#!/usr/bin/env bash
# The main job, offline: set up .venv, then run the notebook headlessly with papermill on a local model
# and local data. Defaults: the real pretrained stories260K Llama and 5,000 real Alpaca-cleaned rows in
# ../shared/data (override the folder with TINYLLAMA_FT_SHARED_DATA, or MODEL / DATASET directly).
# Extra arguments go to papermill, e.g.  bash scripts/run_offline.sh -p max_steps 100
# The run's values are those of tinyllama_ft/recipes/offline_cpu.yaml (tinyllama-ft train --config offline_cpu
# runs the same). It starts over in $OUT (overwrite_output_dir True) unless resume is passed: -p resume True.
# --log-output: what the notebook prints (one line per training step) reaches this terminal as it happens.
# SETUP=0 skips the install and VENV=dir uses another environment (tests/test_readme.py runs it that way).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
[ "${SETUP:-1}" = 0 ] || VENV=$VENV bash scripts/setup.sh
DATA=${TINYLLAMA_FT_SHARED_DATA:-../shared/data}
MODEL=${MODEL:-$DATA/stories260k/hf}
DATASET=${DATASET:-$DATA/alpaca/alpaca_cleaned_5k.jsonl}
OUT=${OUT:-runs/offline}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
START_OVER=(-p overwrite_output_dir True)
case " $* " in *" resume "*) START_OVER=() ;; esac
"$VENV/bin/papermill" notebooks/finetune_tinyllama.ipynb "$OUT/finetune_tinyllama.out.ipynb" --cwd "$OUT" \
  --log-output --no-progress-bar \
  -p model_name "$(realpath "$MODEL")" -p dataset "$(realpath "$DATASET")" \
  -p max_seq_length 512 -p learning_rate 2e-4 -p max_steps 60 -p gradient_checkpointing False \
  -p test_size 0.01 "${START_OVER[@]}" "$@"
echo "run summary: $OUT/outputs/run_summary.json"
"$VENV/bin/python" -c "import json,sys; s=json.load(open(sys.argv[1], encoding='utf-8')); print({k: s[k] for k in ('eval_loss_before','eval_loss_after','train_tokens','tokens_per_s','adapter_dir')}); print('sample:', s['samples'][0])" "$OUT/outputs/run_summary.json"
