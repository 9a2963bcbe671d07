#!/usr/bin/env bash
# list_handlers (linked against @jaxmg_repo//xla_ext:handlers) lists the CPU and
# CUDA handlers of every routine, each reporting one FFI API version.
set -euo pipefail
out=$("$1")
printf '%s\n' "$out"
for target in jaxmg_dpotrs_cpu jaxmg_zsyevd_cpu jaxmg_dpotrs_cuda jaxmg_sgetrf_cuda; do
  grep -q "^$target " <<<"$out" || { echo "missing: $target"; exit 1; }
done
versions=$(sed -n 's/.* api=//p' <<<"$out" | sort -u)
[ "$(wc -l <<<"$versions")" -eq 1 ] || { echo "handlers disagree on the API version: $versions"; exit 1; }
