#!/usr/bin/env bash
# Runs the estimator's tests (tests/analysis, tests/timeline, tests/holders; no kernel) on the newest torch on
# PyPI, so that a torch release that changes what autograd, autocast or the allocator keep shows here before a
# user's run does. PyPI's Linux build is the CUDA one; it runs on a CPU (no CUDA context is made), as the GPU
# image's rehearsal (scripts/rehearse_gpu_image.sh) runs it. Not part of the test command: the first run downloads
# about 4 GB (torch and its nvidia-* libraries); the tests then take about 6 minutes on two cores (torch 2.15.0).
#
#   bash scripts/test_newest_torch.sh            # the newest torch `pip index versions torch` names
#   TORCH_VERSION=2.14.1 bash scripts/test_newest_torch.sh
#   bash scripts/test_newest_torch.sh -x -k rules   # extra arguments go to pytest
#
# The venv (.venv-torch-newest, or NEWEST_TORCH_VENV) holds torch, the package's dependencies and its test extras
# from pyproject.toml; the checkout's gpumem_kernel is imported from the working tree (PYTHONPATH), not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${NEWEST_TORCH_VENV:-.venv-torch-newest}
PY=${PYTHON:-python3}

# A machine-wide pip constraint may cap torch at what a local mirror holds: the newest comes from PyPI itself.
export PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
version=${TORCH_VERSION:-$("$PY" -m pip index versions torch 2>/dev/null | sed -n 's/^torch (\([^)]*\)).*/\1/p')}
[ -n "$version" ] || { echo "could not read the newest torch from 'pip index versions torch' (set TORCH_VERSION)"; exit 2; }

echo "== torch $version in $VENV ($("$PY" -V))"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "torch==$version" 2>&1 | grep -v "is ignored" || true
# the dependencies and test extras, with torch held at that version (nothing in them may replace it)
mapfile -t requirements < <("$VENV/bin/python" scripts/project_requirements.py)
echo "torch==$version" >"$VENV/torch-pin.txt"
"$VENV/bin/python" -m pip install -q -c "$VENV/torch-pin.txt" "${requirements[@]}" 2>&1 | grep -v "is ignored" || true
installed=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
[ "${installed%%+*}" = "$version" ] || { echo "the venv has torch $installed, not $version"; exit 1; }

python3 scripts/check_versions.py "$VENV"  # inside the supported ranges (README's Supported versions)

echo "== pytest on torch $installed (CUDA build: $("$VENV/bin/python" -c "import torch; print(torch.version.cuda)"))"
folders=(tests/analysis tests/timeline tests/holders)
PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m pytest "${folders[@]}" \
  -q -rs -m "not kernel" -p no:cacheprovider "$@"
