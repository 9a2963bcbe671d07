#!/usr/bin/env bash
# One GPU call (nvidia-h200-x2) for what the issues still need measured:
# the one-process-per-GPU tests, the largest potrs N on two GPUs (donated),
# and float32 rows of every routine beside JAX and JAXMg 0.0.8. Each step
# has its own time limit so the call stays under the device tool's 10 min.
#   run(command="tools/gpu_bench_session.sh", carry=[".device", ".whl"], kind="nvidia-h200-x2")
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/jaxmg-gpu}
mkdir -p "$out/processes"
export JAXMG_LIBRARY=$PWD/.device/libjaxmg_ffi.so PYTHONPATH=$PWD PYTHONUNBUFFERED=1
peer=()
if ls .whl/jaxmg-0.0.8-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --target /tmp/jaxmg-peer .whl/jaxmg-0.0.8-*.whl \
    && peer=(--peer-path /tmp/jaxmg-peer)
fi
echo "== one process per GPU"
JAXMG_TIMEOUT_S=60 JAXMG_TEST_LOGS="$out/processes" timeout 260 python3 -m pytest tests/gpu_processes \
  -q -p no:cacheprovider -rs -s --junitxml="$out/gpu_processes.xml" > "$out/gpu_processes.log" 2>&1
echo "status $?"; pkill -f job.py 2>/dev/null  # ranks of a cut run hold GPU memory
grep -h "per-call\|ALL OK\|FAILURES\|passed\|failed" "$out/gpu_processes.log" | tail -12
echo "== largest potrs N on two GPUs (float64, donated)"
timeout 170 python3 tools/benchmark.py --routines potrs --dtypes float64 --devices 2 --sizes 65536 \
  --repeats 1 --donate --mem-fraction 0.95 --largest --largest-budget 130 --out "$out/largest" \
  2>&1 | tee "$out/largest.log" | grep -i "largest\|N=" | tail -12
echo "== float32: potrs and LU to N=32768"
timeout 110 python3 tools/benchmark.py --routines potrs lu --dtypes float32 --devices 2 \
  --sizes 1024 4096 16384 32768 --repeats 3 "${peer[@]}" --out "$out/f32_potrs_lu" 2>&1 \
  | tee "$out/f32_potrs_lu.log" | tail -12
echo "== float32: potri and syevd to N=16384"
timeout 90 python3 tools/benchmark.py --routines potri syevd --dtypes float32 --devices 2 \
  --sizes 1024 4096 16384 --repeats 2 "${peer[@]}" --out "$out/f32_potri_syevd" 2>&1 \
  | tee "$out/f32_potri_syevd.log" | tail -12
