#!/usr/bin/env bash
# The GPU suite's two commands on a lent GPU machine, each within one 10-minute call, its files packed for a tool
# that returns at most eight (the suite writes twelve):
#
#   bash benchmarks/gpu/device_run.sh suite [BUDGET]   # the sections into /tmp/gpumem-suite, then suite.tgz
#   bash benchmarks/gpu/device_run.sh pytest           # pytest -m gpu against that folder, then pytest.tgz
#
# Run from the repository root with .whl/ (scripts/prepare_gpu_wheels.sh) and gpumem_kernel/watchwidget/static
# (scripts/setup.sh) carried along. OUT: where the packed files go (the device tool's $OUT; default /tmp/gpumem-out).
# `pytest` reads the suite's folder when the machine is still the one that ran it; else the committed run
# (benchmarks/results/, GPUMEM_RESULTS to name another), as `python3 -m benchmarks.gpu --pytest` does.
set -uo pipefail
what=${1:-suite}
OUT=${OUT:-/tmp/gpumem-out}
SUITE=/tmp/gpumem-suite
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
case "$what" in
  suite)
    budget=${2:-480}
    # the suite stops its sections at the budget; this timeout only guards a hang of the runner itself
    timeout $((budget + 90)) python3 -m benchmarks.gpu --out "$SUITE" --budget "$budget" >/tmp/gpumem-suite.out 2>&1
    code=$?
    cp "$SUITE"/gpu_suite.json "$SUITE"/gpu_suite.log "$OUT"/ 2>/dev/null
    tar czf "$OUT/suite.tgz" -C /tmp gpumem-suite
    grep -E "^installed|^missing here|^== " /tmp/gpumem-suite.out
    tail -c 6000 /tmp/gpumem-suite.out
    echo "suite exit $code"
    ;;
  pytest)
    results=${GPUMEM_RESULTS:-}
    if [ -z "$results" ] && [ -f "$SUITE/gpu_suite.json" ]; then results=$SUITE; fi
    timeout 540 python3 -m benchmarks.gpu --pytest ${results:+--results "$results"} --out /tmp/gpumem-pytest \
      >/tmp/gpumem-pytest.out 2>&1
    code=$?
    cp /tmp/gpumem-pytest/gpu_pytest.log "$OUT"/ 2>/dev/null
    tar czf "$OUT/pytest.tgz" -C /tmp gpumem-pytest
    grep -E "PASSED|FAILED|ERROR|passed|failed" /tmp/gpumem-pytest.out | tail -60
    echo "pytest exit $code"
    ;;
  *)
    echo "usage: bash benchmarks/gpu/device_run.sh suite [BUDGET] | pytest"
    exit 2
    ;;
esac
