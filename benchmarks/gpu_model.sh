# Sourced by benchmarks/run_*_gpu.sh (repo root) after they set OUT: DATA_DIR as an absolute path (default
# .device-data), the wheels on PYTHONPATH (scripts/gpu_site.sh), the Hub offline, and the TinyLlama-shaped model with
# random weights built from $DATA_DIR/tinyllama into $MODEL (default /tmp/tinyllama-shaped) unless it is there.
DATA_DIR=$(cd "${DATA_DIR:-.device-data}" && pwd); MODEL=${MODEL:-/tmp/tinyllama-shaped}
source scripts/gpu_site.sh
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
[[ -f $MODEL/config.json ]] || python3 benchmarks/build_tinyllama_shaped.py --src "$DATA_DIR/tinyllama" --out "$MODEL"
