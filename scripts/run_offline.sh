#!/usr/bin/env bash
# The main job, offline: set up .venv, then run the notebook headlessly with papermill on a local model
# and local data. Defaults: the real pretrained stories260K Llama and 5,000 real Alpaca-cleaned rows in
# ../shared/data (override the folder with TINYLLAMA_FT_SHARED_DATA, or MODEL / DATASET directly).
# Extra arguments go to papermill, e.g.  bash scripts/run_offline.sh -p max_steps 100
# The run's values are those of tinyllama_ft/recipes/offline_cpu.yaml (tinyllama-ft train --config offline_cpu
# runs the same). Each run starts over in $OUT (overwrite_output_dir True) unless the arguments set resume
# or overwrite_output_dir:  bash scripts/run_offline.sh -p resume True -p max_steps 120
# --log-output: what the notebook prints (one line per training step) reaches this terminal as it happens.
# The output notebook is finetune_tinyllama.out.ipynb only once the run succeeds (beside its
# outputs/run_summary.json); a failed run's is finetune_tinyllama.failed.ipynb.
# SETUP=0 (or SKIP_SETUP=1) skips the install and VENV=dir uses another environment (tests/test_readme.py runs it that way).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
{ [ "${SETUP:-1}" = 0 ] || [ "${SKIP_SETUP:-0}" = 1 ]; } || VENV=$VENV bash scripts/setup.sh
DATA=${TINYLLAMA_FT_SHARED_DATA:-../shared/data}
MODEL=${MODEL:-$DATA/stories260k/hf}
DATASET=${DATASET:-$DATA/alpaca/alpaca_cleaned_5k.jsonl}
OUT=${OUT:-runs/offline}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
FRESH=(-p overwrite_output_dir True)  # a run starts over, unless the user resumes or decides
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  case "${args[i]} ${args[i+1]}" in -p\ resume|-p\ overwrite_output_dir|--parameters\ resume|--parameters\ overwrite_output_dir) FRESH=() ;; esac
done
NB="$OUT/finetune_tinyllama.out.ipynb"
rm -f "$OUT/finetune_tinyllama.failed.ipynb"
if ! "$VENV/bin/papermill" notebooks/finetune_tinyllama.ipynb "$OUT/finetune_tinyllama.running.ipynb" --cwd "$OUT" \
  --log-output --no-progress-bar \
  -p model_name "$(realpath "$MODEL")" -p dataset "$(realpath "$DATASET")" \
  -p max_seq_length 512 -p learning_rate 2e-4 -p max_steps 60 -p gradient_checkpointing False \
  -p test_size 0.01 "${FRESH[@]}" "$@"; then
  mv -f "$OUT/finetune_tinyllama.running.ipynb" "$OUT/finetune_tinyllama.failed.ipynb" 2>/dev/null || true
  # the earlier run's notebook stays only beside its own, older summary (this run may have deleted it)
  S="$OUT/outputs/run_summary.json"; { [ -f "$S" ] && [ "$S" -ot "$NB" ]; } || rm -f "$NB"
  echo "run failed: see $OUT/finetune_tinyllama.failed.ipynb" >&2
  exit 1
fi
mv -f "$OUT/finetune_tinyllama.running.ipynb" "$NB"
echo "run summary: $OUT/outputs/run_summary.json"
"$VENV/bin/python" -c "import json,sys; s=json.load(open(sys.argv[1], encoding='utf-8')); print({k: s[k] for k in ('eval_loss_before','eval_loss_after','train_tokens','tokens_per_s','adapter_dir')}); print('sample:', s['samples'][0])" "$OUT/outputs/run_summary.json"
