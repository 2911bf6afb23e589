#!/usr/bin/env bash
# Rehearses a GPU run of the suite (python3 -m benchmarks.gpu) on this CPU machine, so that the scarce GPU
# half hour is not spent on an install or an import that fails on the GPU image. It builds what the device tool
# would hand the suite there:
#   - a Python 3.12 venv with the GPU image's packages (benchmarks/gpu/image-packages.txt: the newest torch
#     (2.15) and torchvision, Lightning, accelerate, transformers, timm, ...) and none of the kernel packages;
#     REHEARSAL_TORCH / REHEARSAL_TORCHVISION pin others (the image itself read torch 2.11.0, torchvision 0.26.0);
#   - a copy of the working tree as the device tool sends it (tracked and untracked-not-ignored files) plus what
#     the run carries (.whl and the watch's built front end);
# and in that copy runs, with the venv's python3:
#   1. the suite's dry run in the GPU run's process layout (GPUMEM_SUITE_PROCESSES=1), which installs .whl
#      offline into /tmp/gpumem-site as the GPU run does;
#   2. the copy's gpumem_kernel builds the live watch's widget (its git-ignored front end must be carried);
#   3. python3 -m benchmarks.gpu --pytest --dry-run: `pytest -m gpu` must collect every test folder (each gpu
#      test then skips: no GPU here).
# Not part of the test command: the venv downloads about 4 GB (PyPI's CUDA build of torch) the first time.
#
#   bash scripts/rehearse_gpu_image.sh      # after scripts/setup.sh; prints each step's end, exits non-zero on a failure
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${REHEARSAL_VENV:-$HOME/.cache/gpumem-gpu-image-venv}
PY312=${PYTHON312:-}
if [ -z "$PY312" ]; then
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$candidate" -V >/dev/null 2>&1; then PY312=$candidate; break; fi
  done
fi
[ -n "$PY312" ] || { echo "no Python 3.12 here (set PYTHON312)"; exit 2; }

echo "== the GPU image's packages in $VENV ($("$PY312" -V))"
[ -x "$VENV/bin/python3" ] || "$PY312" -m venv "$VENV"
packages=$(mktemp /tmp/gpumem-image-packages-XXXX.txt)
sed -e "${REHEARSAL_TORCH:+s/^torch==.*/torch==$REHEARSAL_TORCH/}" \
  -e "${REHEARSAL_TORCHVISION:+s/^torchvision==.*/torchvision==$REHEARSAL_TORCHVISION/}" \
  benchmarks/gpu/image-packages.txt >"$packages"
# A machine-wide pip constraint may cap torch below the newest (what a local mirror holds): PyPI's own here.
PIP_CONSTRAINT=/dev/null "$VENV/bin/python3" -m pip install -q -r "$packages" 2>&1 | grep -v "is ignored" || true
"$VENV/bin/python3" -c "import torch, torchvision, lightning, accelerate, transformers, timm; print('torch', torch.__version__)"
if "$VENV/bin/python3" -c "import ipykernel" 2>/dev/null; then
  echo "the venv has ipykernel: it would not rehearse the offline install"; exit 2
fi

[ -d .whl ] || bash scripts/prepare_gpu_wheels.sh

work=$(mktemp -d /tmp/gpumem-rehearsal-XXXX)
echo "== the device tool's copy of the tree in $work/tree"
mkdir "$work/tree"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  xargs -0 cp --parents -t "$work/tree"
cp -r .whl "$work/tree/"
# what the GPU run carries beside .whl (benchmarks/gpu/README.md): built here, git-ignored
cp -r --parents gpumem_kernel/watchwidget/static "$work/tree/"
echo "$(du -sm "$work/tree" | cut -f1) MiB travel (the device tool takes 64 MiB)"
rm -rf /tmp/gpumem-site  # as on a fresh GPU machine

status=0
cd "$work/tree"
echo "== 1. the suite's dry run, GPU process layout, offline install"
GPUMEM_SUITE_PROCESSES=1 PATH="$VENV/bin:$PATH" python3 -m benchmarks.gpu --dry-run --out "$work/suite" \
  >"$work/suite.log" 2>&1 || status=1
grep -E "^installed|^== |results in" "$work/suite.log" || true
echo "== 2. the copy's own gpumem_kernel can make the live watch (its built front end travelled)"
PATH="$VENV/bin:$PATH" PYTHONPATH=".:/tmp/gpumem-site" python3 -c \
  "from gpumem_kernel.watchwidget.widget import widget_class; widget_class(); print('watch widget: ok')" || status=1
echo "== 3. pytest -m gpu collects every folder"
PATH="$VENV/bin:$PATH" python3 -m benchmarks.gpu --pytest --dry-run --out "$work/pytest" \
  >"$work/pytest.log" 2>&1 || status=1
tail -3 "$work/pytest.log"
echo "== logs in $work (suite.log, pytest.log); exit $status"
exit $status
