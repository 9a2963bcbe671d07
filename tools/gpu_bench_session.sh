#!/usr/bin/env bash
# One GPU call for the issue-3 benchmark rows: potrs at large N on 2 GPUs
# (donated, beside JAXMg 0.0.8), the LU solve, and the small-N auto overhead.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/jaxmg-gpu}
export JAXMG_LIBRARY=$PWD/.device/libjaxmg_ffi.so PYTHONPATH=$PWD PYTHONUNBUFFERED=1
peer=()
if ls .whl/jaxmg-0.0.8-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --target /tmp/jaxmg-peer .whl/jaxmg-0.0.8-*.whl \
    && peer=(--peer-path /tmp/jaxmg-peer)
fi
timeout 210 python3 tools/benchmark.py --routines potrs --dtypes float64 --devices 2 \
  --sizes 32768 65536 131072 --donate --repeats 2 --mem-fraction 0.95 "${peer[@]}" \
  --out "$out/potrs_large" 2>&1 | tail -12
timeout 90 python3 tools/benchmark.py --routines lu --dtypes float32 float64 --devices 2 \
  --sizes 4096 16384 --repeats 3 --out "$out/lu" 2>&1 | tail -10
timeout 60 python3 tools/benchmark.py --routines potrs --dtypes float64 --devices 1 \
  --sizes 1024 4096 --repeats 20 --out "$out/small" 2>&1 | tail -8
