#!/usr/bin/env bash
# The CPU-sensitive suites (the traced step against a real CPU step, the timelines) on this machine's own CPU and
# with oneDNN told to act as lesser CPUs: a test that holds only where oneDNN has bf16 or AVX-512 kernels fails
# here before it fails on a contributor's machine. Caps higher than this CPU are no-ops (oneDNN takes the lower).
#
#     bash scripts/test_cpu_isas.sh                  # the machine's own, AVX512_CORE, AVX2
#     bash scripts/test_cpu_isas.sh AVX2             # one cap
#
# Needs the test environment (bash scripts/setup.sh --test). Prints one line per cap with pytest's counts.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
source .venv/bin/activate

caps=("$@")
[ ${#caps[@]} -gt 0 ] || caps=(native AVX512_CORE AVX2)
suites=(tests/analysis tests/timeline)
status=0
summary=()
for cap in "${caps[@]}"; do
  printf '\n== %s: %s\n' "$cap" "${suites[*]}"
  log=$(mktemp)
  if [ "$cap" = native ]; then
    env -u ONEDNN_MAX_CPU_ISA python -m pytest "${suites[@]}" -q -p no:cacheprovider -rs 2>&1 | tee "$log" || status=1
  else
    ONEDNN_MAX_CPU_ISA="$cap" python -m pytest "${suites[@]}" -q -p no:cacheprovider -rs 2>&1 | tee "$log" || status=1
  fi
  summary+=("$cap: $(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -1 | tr -d '=')")
  rm -f "$log"
done
printf '\n== oneDNN caps (CPU: %s)\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%s\n' "${summary[@]}"
exit $status
