#!/usr/bin/env bash
# The decode round on the GPU machine, in one call: wheels, the TinyLlama-shaped model and adapter, the
# GPU tests of the just-trained model and of the decoders, the decoder probe, the generation benchmark.
# Usage (repo root on the GPU machine): bash benchmarks/run_decode_gpu.sh PARTS
# PARTS: any of tests probe bench (default: all). Logs and JSON go to $OUT (or /tmp/out).
# WHL_DIR (default .whl) holds the wheels of ../shared/tools/device-wheels.sh plus liger-kernel;
# DATA_DIR (default .device-data) a copy of ../shared/data. A warm machine keeps /tmp: steps already done
# there (wheels installed, model built) are skipped.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${1:-"tests probe bench"}
WHL_DIR=${WHL_DIR:-.whl}; DATA_DIR=$(cd "${DATA_DIR:-.device-data}" && pwd)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TINYLLAMA_FT_SHARED_DATA=$DATA_DIR TINYLLAMA_SHAPED=/tmp/tinyllama-shaped
t0=$SECONDS
source scripts/gpu_site.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader
python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__)"
python3 benchmarks/build_tinyllama_shaped.py --src "$DATA_DIR/tinyllama" --out /tmp/tinyllama-shaped
[[ -f /tmp/gen-adapter/adapter_config.json ]] || python3 benchmarks/build_adapter.py --model /tmp/tinyllama-shaped --out /tmp/gen-adapter
echo "setup: $((SECONDS - t0)) s"
if [[ $parts == *tests* ]]; then
  TRAINED_MODEL_REPRO=${TRAINED_MODEL_REPRO:-0} timeout ${TESTS_TIMEOUT:-330} python3 -m pytest -q -s -p no:cacheprovider \
    tests/gpu/test_gpu_trained_model.py -k "${TESTS_K:-}" 2>&1 | tee "$OUT/tests_trained.log" | grep -vE "it/s\]|s/it\]" | tail -40
  echo "trained-model tests: $((SECONDS - t0)) s"
  timeout ${DECODE_TESTS_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_decoding.py \
    tests/test_triton_gemv.py -k "${DECODE_TESTS_K:-graph or gemv}" 2>&1 | tee "$OUT/tests_decoding.log" | tail -6
  echo "tests: $((SECONDS - t0)) s"
fi
if [[ $parts == *probe* ]]; then
  timeout ${PROBE_TIMEOUT:-200} python3 benchmarks/decode_probe.py --adapter /tmp/gen-adapter --stories "$DATA_DIR/stories260k/hf" \
    --out "$OUT" ${PROBE_PARTS:+--parts $PROBE_PARTS} 2>&1 | tee "$OUT/probe.log" | grep -vE "it/s\]|s/it\]" | cut -c1-1500 | tail -30
  echo "probe: $((SECONDS - t0)) s"
fi
if [[ $parts == *bench* ]]; then
  (cd benchmarks && timeout ${BENCH_TIMEOUT:-400} python3 generate_throughput.py --adapter /tmp/gen-adapter \
    --repeats ${BENCH_REPEATS:-2} --only ${BENCH_ONLY:-package,plain,hf_static,unsloth}) > "$OUT/bench.log" 2>&1
  grep -A14 "^batch 1, greedy" "$OUT/bench.log"; grep -E "failed|Error" "$OUT/bench.log" | tail -5
  cp "benchmarks/results/$(date +%F)-generate.json" "$OUT/" 2>/dev/null
  echo "bench: $((SECONDS - t0)) s"
fi
