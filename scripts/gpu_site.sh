# Sourced by the GPU machine's scripts (repo root): installs the wheels in $WHL_DIR (built here by
# `bash ../shared/tools/device-wheels.sh liger-kernel==0.8.5`) into /tmp/site once per machine, then puts
# /tmp/site (when there) and the repository on PYTHONPATH. No WHL_DIR: nothing is installed. pip compiles the
# bytecode at install, as on Colab (with --no-compile the first import compiled it inside the timed runs).
if [[ -n ${WHL_DIR:-} && ! -f /tmp/site/.done ]]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site \
    "$WHL_DIR"/*.whl 2>&1 | tail -2
  [[ ${PIPESTATUS[0]} -eq 0 ]] && touch /tmp/site/.done
fi
if [[ -d /tmp/site ]]; then export PYTHONPATH=/tmp/site:$PWD; else export PYTHONPATH=$PWD; fi
