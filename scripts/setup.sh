#!/usr/bin/env bash
# Sets up everything in ./.venv from the registries alone: the Python package (editable), the built
# labextension, and with --test the test tools (torch CPU build, Debian's Chromium, Galata, an
# ipykernel 6 environment). Idempotent: a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WITH_TESTS=0
[ "${1:-}" = "--test" ] && WITH_TESTS=1

PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 YARN_ENABLE_IMMUTABLE_INSTALLS=false

# each step says when it began (seconds since this script started): where the test command's time goes
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

if [ "$WITH_TESTS" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  step "Debian's Chromium for the browser tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  step "Python environment .venv"
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
# shellcheck disable=SC1091
source .venv/bin/activate

# torch is never a dependency of the package (users bring their CUDA build); the example and the tests
# need one, so install the pinned CPU build only where none is importable.
if ! python -c "import torch" 2>/dev/null; then
  step "torch==2.13.0 (example and tests only)"
  pip install -q "torch==2.13.0"
fi

step "Python packages (JupyterLab pinned to the minimum we support, 4.4.10)"
# numpy too: a user's torch environment has it, and without it every `import torch` warns in red.
pip install -q "jupyterlab==4.4.10" numpy hatchling editables hatch-nodejs-version "hatch-jupyter-builder>=0.9" build

step "JavaScript dependencies (jlpm) and the labextension build"
jlpm install
jlpm build:prod

step "jupyterlab-gpumem (editable) and its labextension link"
# The labextension was just built (production); the editable hook would rebuild it in development mode.
# A link left by an earlier `develop` would make pip write the shared install.json through it into
# gpumem_kernel/labextension/, and the next wheel would hold that file twice.
link=".venv/share/jupyter/labextensions/jupyterlab-gpumem"
if [ -L "$link" ]; then rm "$link"; fi
rm -f gpumem_kernel/labextension/install.json
SKIP_JUPYTER_BUILDER=1 pip install -q --no-build-isolation -e ".[test]"
jupyter labextension develop --overwrite . >/dev/null

if [ "$WITH_TESTS" = 1 ]; then
  step "Galata (ui-tests) dependencies"
  (cd ui-tests && jlpm install)

  step "the model zoo's packages (timm, torchvision, Ultralytics, diffusers), apart from .venv: tests/analysis/test_zoo_subset.py"
  # --no-deps and a folder of their own: torch is never replaced, and this CPU-torch torchvision stays out of .venv
  # (see benchmarks/zoo/requirements.txt)
  if [ ! -d benchmarks/zoo/.packages/timm ]; then
    pip install -q --no-deps --target benchmarks/zoo/.packages -r benchmarks/zoo/requirements.txt
  fi

  if [ ! -x .venv-ipykernel6/bin/python ]; then
    step "a second kernel environment with ipykernel 6 (the kernel tests run on 6 and 7)"
    "$PY" -m venv .venv-ipykernel6
    .venv-ipykernel6/bin/pip install -q --upgrade pip
  fi
  .venv-ipykernel6/bin/pip install -q "ipykernel>=6.22,<7" comm nvidia-ml-py psutil PyYAML "anywidget>=0.9" "torch==2.13.0" numpy
fi
echo
echo "setup done in $ROOT"
