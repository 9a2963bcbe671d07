#!/usr/bin/env bash
# GPU calls (nvidia-h200-x2) for what the issues still need run on GPUs. Each
# step has its own time limit so one call stays under the device tool's 10 min;
# name the steps to run (default: processes overhead):
#   processes  one-process-per-GPU tests (tests/gpu_processes)
#   overhead   small-N cost breakdown on one GPU (tools/small_n_overhead.py)
#   largest    largest potrs N on two GPUs (float64, donated)
#   table      float64 potrs, LU, potri, N 1024..32768, beside JAX and JAXMg 0.0.8
#   syevd      float64 syevd, N 1024..16384, likewise
#   lu         C++ engine test on distinct GPUs and the GPU suite's LU cases
#   mp         cuSOLVERMp engine: its GPU tests in one process and one process per GPU
#              (needs the nvidia-cusolvermp-cu13 0.8.0 wheel in .whl/)
#   mpprocesses  only the mp engine's one-process-per-GPU test
#   svd        jaxmg.svd and jaxmg.polar on the mp engine (tests/gpu/test_polar_svd_gpu.py)
#   mpbench    float64 potrs, LU, syevd on two GPUs: cuSOLVERMp (mp) beside cuSOLVERMg and JAX
#   raw        issue 3: cuSOLVERMg called directly (.device/raw_mg_bench) beside jaxmg's
#              forced cuSOLVERMg potrs (tools/mg_overhead.py), N=1024 float64, one GPU
#   grid       issue 3's whole benchmark grid on two GPUs (4 routines x N 1024..32768 x float32,
#              float64, beside JAX and JAXMg 0.0.8): one --resume run over several calls
#   onegpu     issue 3's one-GPU comparison: jaxmg (auto) and JAX timed in alternation, same grid
#   smallgpu   the same at N 1024..8192 only (after a change to the eager calls), as its own run
#   suite      the cuSOLVERMg GPU suite's potri, syevd, LU, failure, derivative and vmap cases
# grid and onegpu are one sitting each of a run longer than a call: the next call picks it up from
# $STATE/<step>/benchmark.json (default results/2026-11-30-h200x2-s7), where the last call's
# benchmark.json must be copied first. WALL (default 540) bounds a sitting in seconds.
#   run(command="tools/gpu_bench_session.sh processes overhead", carry=[".device", ".whl"], kind="nvidia-h200-x2")
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/jaxmg-gpu}
mkdir -p "$out"
export JAXMG_LIBRARY=$PWD/.device/libjaxmg_ffi.so PYTHONPATH=$PWD PYTHONUNBUFFERED=1
git log -1 --format='commit %h %s' > "$out/commit.txt" 2>/dev/null
nvidia-smi -L > "$out/gpus.txt" 2>&1
peer=()
if ls .whl/jaxmg-0.0.8-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --target /tmp/jaxmg-peer .whl/jaxmg-0.0.8-*.whl \
    && peer=(--peer-path /tmp/jaxmg-peer)
fi
mp_wheel=(.whl/nvidia_cusolvermp_cu13-*.whl)
if [ -f "${mp_wheel[0]}" ]; then
  python3 -m pip install -q --no-deps --target /tmp/cusolvermp "${mp_wheel[0]}" \
    && export JAXMG_CUDA_LIBRARY_PATH=/tmp/cusolvermp/nvidia/cu13/lib
fi

processes() {
  mkdir -p "$out/processes"
  JAXMG_TIMEOUT_S=60 JAXMG_TEST_LOGS="$out/processes" timeout 420 python3 -m pytest tests/gpu_processes \
    -q -p no:cacheprovider -rs -s --junitxml="$out/gpu_processes.xml" > "$out/gpu_processes.log" 2>&1
  echo "status $?"; pkill -f job.py 2>/dev/null  # ranks of a cut run hold GPU memory
  grep -h "per-call\|ALL OK\|FAILURES\|passed\|failed" "$out/gpu_processes.log" | tail -12
  # Only 8 files come back: one file of every case's output and first errors.
  for f in "$out"/processes/*.out; do
    echo "=== ${f##*/}"; cat "$f"; echo "=== ${f##*/} stderr (first 120 lines, XLA's event noise dropped)"
    grep -v "Error destroying CUDA event" "${f%.out}.err" | head -120
  done > "$out/processes.txt"
  rm -r "$out/processes"
}
overhead() {
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 tools/small_n_overhead.py --out "$out/overhead" 2>&1 \
    | tee "$out/overhead.log" | tail -22
}
largest() {
  timeout 170 python3 tools/benchmark.py --routines potrs --dtypes float64 --devices 2 --sizes 65536 \
    --repeats 1 --donate --mem-fraction 0.95 --largest --largest-budget 130 --out "$out/largest" \
    2>&1 | tee "$out/largest.log" | grep -i "largest\|N=" | tail -12
}
table() {  # float64 potrs, LU, potri to N=32768 beside JAX and JAXMg 0.0.8
  timeout 260 python3 tools/benchmark.py --routines potrs lu potri --dtypes float64 --devices 2 \
    --sizes 1024 4096 16384 32768 --repeats 3 --budget 4 --wall-budget 240 "${peer[@]}" \
    --out "$out/table" 2>&1 | tee "$out/table.log" | tail -30
}
syevd() {  # float64 syevd to N=16384 beside JAX and JAXMg 0.0.8
  timeout 260 python3 tools/benchmark.py --routines syevd --dtypes float64 --devices 2 \
    --sizes 1024 4096 16384 --repeats 2 --budget 4 --wall-budget 240 "${peer[@]}" \
    --out "$out/syevd" 2>&1 | tee "$out/syevd.log" | tail -20
}
lu() {  # the LU paths after an engine change: C++ engine test, then the suite's LU cases
  local dirs; dirs=$(python3 -c 'from jaxmg._src import library; print(":".join(library.cuda_search_path()))')
  for list in 0,1 1,0,1,0; do
    echo "-- devices $list"; .device/mg_engine_test "$dirs" "$list" 2>&1 | tail -3
  done
  timeout 170 python3 -m pytest tests/gpu -q -p no:cacheprovider -k "lu_solve or factor_reuse" \
    --junitxml="$out/gpu_lu_tests.xml" 2>&1 | tee "$out/gpu_lu_tests.log" | tail -5
}
mp() {  # -x: a rank whose call fails leaves its peers waiting in NCCL, so stop at once
  timeout "${MP_TIMEOUT:-300}" python3 -m pytest tests/gpu/test_mp_gpu.py -q -p no:cacheprovider -rs -x \
    --tb=short ${MP_K:+-k "$MP_K"} --junitxml="$out/gpu_mp.xml" 2>&1 | tee "$out/gpu_mp.log" | tail -40
  [ -n "${MP_K:-}" ] && return
  mpprocesses
}
mpprocesses() {
  mkdir -p "$out/mp_logs"
  JAXMG_TIMEOUT_S=60 JAXMG_TEST_LOGS="$out/mp_logs" timeout 240 python3 -m pytest \
    tests/gpu_processes/test_mp_processes_gpu.py -q -p no:cacheprovider -rs -s \
    > "$out/gpu_mp_processes.log" 2>&1
  echo "status $?"; tail -30 "$out/gpu_mp_processes.log"
  cat "$out"/mp_logs/* >> "$out/gpu_mp_processes.log" 2>/dev/null; rm -rf "$out/mp_logs"
}
svd() {
  timeout 240 python3 -m pytest tests/gpu/test_polar_svd_gpu.py -q -p no:cacheprovider -rs -x \
    --tb=short --junitxml="$out/gpu_svd.xml" 2>&1 | tee "$out/gpu_svd.log" | tail -25
}
mpbench() {
  timeout 200 python3 tools/benchmark.py --routines potrs lu --dtypes float64 --devices 2 \
    --sizes 8192 16384 32768 --repeats 3 --budget 4 --wall-budget 180 --mp \
    --out "$out/mpbench" 2>&1 | tee "$out/mpbench.log" | tail -24
  timeout 110 python3 tools/benchmark.py --routines syevd --dtypes float64 --devices 2 \
    --sizes 4096 8192 --repeats 2 --budget 4 --wall-budget 95 --mp \
    --out "$out/mpbench_syevd" 2>&1 | tee "$out/mpbench_syevd.log" | tail -14
}
raw() {  # issue 3: jaxmg's per-call overhead over cuSOLVERMg itself
  local dirs; dirs=$(python3 -c 'from jaxmg._src import library; print(":".join(library.cuda_search_path()))')
  CUDA_VISIBLE_DEVICES=0 timeout 150 .device/raw_mg_bench "$dirs" 1024 0 1024 50 > "$out/raw.log" 2>&1
  echo "raw_mg_bench status $?" >> "$out/raw.log"
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 tools/mg_overhead.py --n 1024 --dtype float64 --calls 50 \
    --raw-log "$out/raw.log" >> "$out/raw.log" 2>&1
  echo "mg_overhead status $?" >> "$out/raw.log"
  tail -12 "$out/raw.log"
}
resumable() {  # NAME BENCHMARK-ARGS...: one sitting of the --resume run NAME
  local name=$1 wall=${WALL:-540} state=${STATE:-results/2026-11-30-h200x2-s7}
  shift
  mkdir -p "$out/$name"
  [ -f "$state/$name/benchmark.json" ] && cp "$state/$name/benchmark.json" "$out/$name/"
  timeout "$wall" python3 tools/benchmark.py --resume --out "$out/$name" --wall-budget $((wall - 40)) "$@" \
    2>&1 | tee "$out/$name.log" | grep -v "^\[" | tail -45
  tar czf "$out/$name-logs.tgz" -C "$out/$name" logs && rm -r "$out/$name/logs"  # 8 files come back
}
grid() {
  resumable grid --devices 2 --repeats 3 --budget 4 --single-call-over 20 "${peer[@]}"
}
onegpu() {
  CUDA_VISIBLE_DEVICES=0 resumable onegpu --devices 1 --impls auto native --paired --repeats 40 \
    --budget 3 --single-call-over 20
}
smallgpu() {
  CUDA_VISIBLE_DEVICES=0 resumable smallgpu --devices 1 --impls auto native --paired --repeats 40 \
    --budget 2 --sizes 1024 4096 8192
}
suite() {
  timeout "${SUITE_TIMEOUT:-170}" python3 -m pytest tests/gpu/test_gpu.py -q -p no:cacheprovider -rs \
    -k "potri or syevd or lu_solve or factor_reuse or not_positive or gradients or vmap or repeated" \
    > "$out/gpu_suite.log" 2>&1
  echo "status $?"; tail -8 "$out/gpu_suite.log"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(processes overhead)
for step in "${steps[@]}"; do
  echo "== $step"
  "$step"
done
