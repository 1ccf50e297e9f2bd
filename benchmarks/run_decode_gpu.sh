#!/usr/bin/env bash
# The decode round on the GPU machine, in one call: wheels, the TinyLlama-shaped model and adapter, the
# GPU tests of the just-trained model and of the decoders, the decoder probe, the generation benchmark.
# Usage (repo root on the GPU machine, .whl and .device-data carried): bash benchmarks/run_decode_gpu.sh PARTS
# PARTS: any of tests probe bench (default: all). Logs and JSON go to $OUT (or /tmp/out).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${1:-"tests probe bench"}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TINYLLAMA_FT_SHARED_DATA=$PWD/.device-data TINYLLAMA_SHAPED=/tmp/tinyllama-shaped
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
python3 benchmarks/build_tinyllama_shaped.py --src .device-data/tinyllama --out /tmp/tinyllama-shaped
python3 benchmarks/build_adapter.py --model /tmp/tinyllama-shaped --out /tmp/gen-adapter
t0=$SECONDS
if [[ $parts == *tests* ]]; then
  timeout ${TESTS_TIMEOUT:-330} python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_trained_model.py -k "${TESTS_K:-}" 2>&1 | tee "$OUT/tests_trained.log" | grep -vE "it/s\]|s/it\]" | tail -60
  [[ $parts == *decodetest* ]] && timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_decoding.py -k graph 2>&1 | tee "$OUT/tests_decoding.log" | tail -8
  echo "tests: $((SECONDS - t0)) s"
fi
if [[ $parts == *probe* ]]; then
  timeout ${PROBE_TIMEOUT:-150} python3 benchmarks/decode_probe.py --adapter /tmp/gen-adapter --stories .device-data/stories260k/hf --out "$OUT" 2>&1 | tee "$OUT/probe.log" | grep -vE "it/s\]|s/it\]" | tail -30
  echo "probe: $((SECONDS - t0)) s"
fi
if [[ $parts == *bench* ]]; then
  (cd benchmarks && timeout ${BENCH_TIMEOUT:-300} python3 generate_throughput.py --adapter /tmp/gen-adapter --repeats ${BENCH_REPEATS:-2} --only ${BENCH_ONLY:-package,hf_static,plain}) > "$OUT/bench.log" 2>&1
  grep -A12 "^batch 1, greedy" "$OUT/bench.log"; grep -E "failed|Error" "$OUT/bench.log" | tail -5
  cp benchmarks/results/*-generate.json "$OUT/" 2>/dev/null
  echo "bench: $((SECONDS - t0)) s"
fi
