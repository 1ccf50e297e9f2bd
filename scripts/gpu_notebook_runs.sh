#!/usr/bin/env bash
# On the GPU machine: install the Unsloth stack through the package's own install helper from local
# wheels (.whl/, built by shared/tools/device-wheels.sh), build a TinyLlama-shaped model, and run the
# notebook with papermill on it and the real Alpaca rows. Usage: bash scripts/gpu_notebook_runs.sh RUN...
# RUN is one of: unsloth, transformers, t4, cross. Summaries and output notebooks go to $OUT (or runs/gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}; mkdir -p "$OUT"
DATA=${DATA:-.device-data}
MODEL=${MODEL:-/tmp/tinyllama-shaped}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1 PYTHONUNBUFFERED=1
if ! python3 -c "import unsloth" 2>/dev/null; then
  python3 -c "from tinyllama_ft.machine.install import install; install(run=True, with_wandb=False, find_links='.whl')" || exit 1
  # the notebook runner and its kernel (not part of the Unsloth stack)
  python3 -m pip install -q --no-index --no-deps --find-links .whl papermill nbclient nbformat jupyter_client \
    jupyter_core ipykernel ipython comm debugpy matplotlib_inline traitlets pyzmq tornado jedi parso prompt_toolkit \
    wcwidth stack_data executing asttokens pure_eval decorator pexpect ptyprocess ipython_pygments_lexers \
    fastjsonschema jsonschema jsonschema_specifications referencing rpds_py tenacity ansicolors entrypoints \
    platformdirs || exit 1
fi
python3 benchmarks/build_tinyllama_shaped.py --src "$DATA/tinyllama" --out "$MODEL" || exit 1
common=(-p model_name "$MODEL" -p dataset "$PWD/$DATA/alpaca/alpaca_cleaned_5k.jsonl" -p max_steps 30
        -p report_to none -p eval_steps 15 -p save_steps 15 -p max_new_tokens 64)
nb() {  # nb NAME papermill-args...
  local name=$1; shift
  local t0=$(date +%s)
  papermill notebooks/finetune_tinyllama.ipynb "$OUT/$name.out.ipynb" --cwd /tmp --log-output \
    -p output_dir "/tmp/run-$name" "${common[@]}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s"
  cp "/tmp/run-$name/run_summary.json" "$OUT/$name.run_summary.json" 2>/dev/null
  [ $rc -eq 0 ] || tail -40 "$OUT/$name.log"
  python3 - "$OUT/$name.run_summary.json" <<'PY' 2>/dev/null
import json, sys
s = json.load(open(sys.argv[1], encoding="utf-8"))
keys = ("backend", "dtype", "trainable_parameters", "eval_loss_before", "eval_loss_after", "train_tokens", "tokens_per_s",
        "peak_memory_gib", "peak_reserved_gib", "peak_host_rss_gib", "train_runtime_s")
print({k: s.get(k) for k in keys}); print("eos first batch:", s["plan"]["eos_first_batch"]); print("sample:", s["samples"][0])
PY
}
for run in "$@"; do
  case $run in
    unsloth) nb unsloth -p backend unsloth ;;
    transformers) nb transformers -p backend transformers ;;
    t4) nb t4 -p backend unsloth -p dtype float16 -p gpu_memory_cap_gib 15 ;;
    cross)  # the Unsloth-trained adapter, loaded and generating on the transformers backend, fresh process
      python3 - <<'PY'
from tinyllama_ft.models.adapters import load_adapter
from tinyllama_ft.infer.generation import generate
model, tok = load_adapter("/tmp/run-unsloth/lora_model", max_seq_length=4096, dtype=None, load_in_4bit=True, backend="transformers")
print("cross-backend:", type(model).__name__, repr(generate(model, tok, "What is the capital of France?", max_new_tokens=32)[0]))
PY
      ;;
  esac
done
