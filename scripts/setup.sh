#!/usr/bin/env bash
# Sets up everything in ./.venv from the registries alone: the Python package (editable), the built
# labextension, Jupyter Notebook 7, and with --test the test tools (torch CPU build, Debian's Chromium, Galata,
# an ipykernel 6 environment). Idempotent and quick the second time: each step runs only when what it makes is
# missing or out of date (pins not installed, sources changed since the last build), so a second run only re-checks.
# The package managers' output goes to build/setup/*.log; a failing step prints its log's tail.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WITH_TESTS=0
[ "${1:-}" = "--test" ] && WITH_TESTS=1

PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 YARN_ENABLE_IMMUTABLE_INSTALLS=false
LOGS="$ROOT/build/setup"  # build/ is ignored by git
mkdir -p "$LOGS"

# each step says when it began (seconds since this script started): where the test command's time goes
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
skip() { printf '   up to date: %s\n' "$*"; }

# quiet NAME CMD...: runs CMD with its output in build/setup/NAME.log; on failure prints the log's last lines
quiet() {
  local name=$1 log="$LOGS/$1.log"
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $* (the last 40 lines of $log follow)" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}

# pinned PYTHON REQUIREMENT...: true when every requirement is installed in that Python at a matching version
# (pip itself takes ~10 s to say that every pin is already satisfied)
pinned() {
  local python=$1
  shift
  "$python" - "$@" <<'EOF' 2>/dev/null
import importlib.metadata as metadata
import sys

try:
    from packaging.requirements import Requirement
except ImportError:  # an environment without packaging: pip's own copy
    from pip._vendor.packaging.requirements import Requirement

for text in sys.argv[1:]:
    requirement = Requirement(text)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not requirement.specifier.contains(version, prereleases=True):
        sys.exit(1)
EOF
}

# digest FILE-OR-FOLDER...: one hash of the contents (names and bytes) of these files and folders
digest() {
  { find "$@" -type f -print0 2>/dev/null || true; } | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -d' ' -f1
}

# stamp_ok NAME VALUE: true when build/setup/NAME.stamp holds VALUE (the step that wrote it is up to date)
stamp_ok() { [ -f "$LOGS/$1.stamp" ] && [ "$(cat "$LOGS/$1.stamp")" = "$2" ]; }
stamp_write() { printf '%s' "$2" >"$LOGS/$1.stamp"; }

if [ "$WITH_TESTS" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  step "Debian's Chromium for the browser tests"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  quiet apt-update $SUDO apt-get update -qq
  quiet apt-chromium $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

if [ ! -x .venv/bin/python ]; then
  step "Python environment .venv"
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate

# --no-compile: Python compiles a module when it is first imported (lab.sh and test.sh let it keep the bytecode
# where PYTHONDONTWRITEBYTECODE is set); compiling all of torch's files up front is a large part of the install's
# time, and most are never imported.
PIP_INSTALL=(pip install --no-compile)

# torch is never a dependency of the package (users bring their CUDA build); the example and the tests
# need one, so install the pinned CPU build only where none is installed (found, not imported: importing
# torch takes seconds).
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  step "torch==2.13.0 (example and tests only)"
  quiet pip-torch "${PIP_INSTALL[@]}" "torch==2.13.0"
fi

step "Python packages (JupyterLab pinned to the minimum we support, 4.4.10, and its Notebook 7, 7.4.7)"
# numpy too: a user's torch environment has it, and without it every `import torch` warns in red.
PINS=("jupyterlab==4.4.10" "notebook==7.4.7" numpy hatchling editables hatch-nodejs-version "hatch-jupyter-builder>=0.9" build)
if pinned python "${PINS[@]}"; then
  skip "${PINS[*]}"
else
  quiet pip-packages "${PIP_INSTALL[@]}" "${PINS[@]}"
fi

# The test environments beside .venv need only .venv's Python packages: made in the background while jlpm installs
# and builds the labextension (mostly one core), and waited for at the end (their steps' lines are printed then).
test_envs() {
  step "the model zoo's packages (timm, torchvision, Ultralytics, diffusers), apart from .venv: tests/analysis/test_zoo_subset.py"
  # --no-deps and a folder of their own: torch is never replaced, and this CPU-torch torchvision stays out of .venv
  # (see benchmarks/zoo/requirements.txt)
  if [ ! -d benchmarks/zoo/.packages/timm ]; then
    quiet pip-zoo pip install --no-deps --target benchmarks/zoo/.packages -r benchmarks/zoo/requirements.txt
  else
    skip "benchmarks/zoo/.packages"
  fi

  step "transformers 4.57.6, the oldest 4.x we support, over .venv's packages: .venv-transformers4 (the 4.x lane)"
  # .venv has the newest transformers (pyproject's test extra), which most users install. This venv holds only
  # transformers 4.57.6 and the huggingface_hub and tokenizers releases it needs; a .pth line then adds .venv's
  # site-packages after its own (site.addsitedir, so that .venv's own .pth files, the editable install's among them,
  # still run): torch, peft and the rest are .venv's, nothing installed twice. requests, which this hub needs and
  # hub 1.x dropped, is .venv's too (jupyterlab_server's). Made without a pip of its own (ensurepip takes seconds):
  # .venv's pip installs into its site-packages (--target).
  TF4=("transformers==4.57.6" "huggingface_hub==0.36.2" "tokenizers==0.22.2")
  [ -x .venv-transformers4/bin/python ] || "$PY" -m venv --without-pip .venv-transformers4
  own=$(.venv-transformers4/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")
  printf 'import site; site.addsitedir(%s)\n' "'$(python -c "import sysconfig; print(sysconfig.get_path('purelib'))")'" \
    >"$own/venv-packages.pth"
  if pinned .venv-transformers4/bin/python "${TF4[@]}" && [ -d "$own/transformers" ]; then
    skip "${TF4[*]}"
  else
    quiet pip-transformers4 "${PIP_INSTALL[@]}" --no-deps --upgrade --target "$own" "${TF4[@]}"
  fi

  step "a second kernel environment with ipykernel 6 (the kernel tests run on 6 and 7)"
  if [ ! -x .venv-ipykernel6/bin/python ]; then
    "$PY" -m venv .venv-ipykernel6
    quiet pip-upgrade-ipykernel6 .venv-ipykernel6/bin/pip install --upgrade pip
  fi
  KERNEL6=("ipykernel>=6.22,<7" comm nvidia-ml-py psutil PyYAML "anywidget>=0.9" "torch==2.13.0" numpy)
  if pinned .venv-ipykernel6/bin/python "${KERNEL6[@]}"; then
    skip "${KERNEL6[*]}"
  else
    quiet pip-ipykernel6 .venv-ipykernel6/bin/pip install "${KERNEL6[@]}"
  fi
}
# The packages the editable install below brings (pyproject.toml's dependencies and its `test` extra) need nothing
# built: pip installs them while jlpm installs and builds the labextension, and so does jlpm the Galata packages. The
# editable install itself waits for the build: its wheel carries the built labextension.
early_packages() {
  local requirements
  mapfile -t requirements < <(python scripts/project_requirements.py)
  if pinned python "${requirements[@]}"; then
    skip "the project's requirements"
  else
    quiet pip-requirements "${PIP_INSTALL[@]}" "${requirements[@]}"
  fi
  if [ "$WITH_TESTS" = 1 ]; then
    local galata
    galata="$(digest ui-tests/package.json ui-tests/yarn.lock)"
    if [ -f ui-tests/node_modules/.yarn-state.yml ] && stamp_ok galata-install "$galata"; then
      skip "ui-tests/node_modules (ui-tests/yarn.lock unchanged)"
    else
      (cd ui-tests && quiet galata-install jlpm install)
      stamp_write galata-install "$galata"
    fi
  fi
}

test_envs_pid=""
early_pid=""
trap 'kill ${test_envs_pid:+"$test_envs_pid"} ${early_pid:+"$early_pid"} 2>/dev/null || true' EXIT
if [ "$WITH_TESTS" = 1 ]; then
  test_envs >"$LOGS/test-envs.out" 2>&1 &
  test_envs_pid=$!
fi
early_packages >"$LOGS/early-packages.out" 2>&1 &
early_pid=$!

step "JavaScript dependencies (jlpm) and the labextension build"
# yarn writes node_modules/.yarn-state.yml after an install: with it, the same yarn.lock and package.json are
# installed already.
installed="$(digest package.json yarn.lock .yarnrc.yml)"
if [ -f node_modules/.yarn-state.yml ] && stamp_ok jlpm-install "$installed"; then
  skip "node_modules (yarn.lock unchanged)"
else
  quiet jlpm-install jlpm install
  stamp_write jlpm-install "$installed"
fi

# built: the digest of the built files the package ships. The labextension's package.json names its remoteEntry
# by content hash, so a build made since (e.g. a development `jlpm build`) or a missing file changes it.
built() {
  local entry
  entry=$(python -c "import json; print(json.load(open('gpumem_kernel/labextension/package.json'))['jupyterlab']['_build']['load'])" 2>/dev/null) || {
    echo missing
    return
  }
  for f in "gpumem_kernel/labextension/$entry" gpumem_kernel/watchwidget/static/watch.js \
    gpumem_kernel/watchwidget/static/watch.css lib/index.js; do
    [ -f "$f" ] || {
      echo missing
      return
    }
  done
  # not install.json: pip and `jupyter labextension develop` write it there after the build
  digest gpumem_kernel/labextension/package.json gpumem_kernel/labextension/static gpumem_kernel/labextension/schemas \
    gpumem_kernel/watchwidget/static
}
sources="$(digest src style schema package.json yarn.lock tsconfig.json webpack.config.js)"
if stamp_ok labextension "$sources $(built)"; then
  skip "the labextension (src/, style/, schema/ and the build config unchanged since the last build)"
else
  quiet jlpm-build jlpm build:prod
  stamp_write labextension "$sources $(built)"
fi

editable_step="jupyterlab-gpumem (editable) and its labextension link; its requirements"
[ "$WITH_TESTS" = 1 ] && editable_step+=" and the Galata (ui-tests) packages"
step "$editable_step"
status=0
wait "$early_pid" || status=$?
early_pid="" # reaped: its PID is no longer ours to signal
cat "$LOGS/early-packages.out" # what was up to date, or the failing step's log tail
[ "$status" = 0 ] || exit "$status"
link=".venv/share/jupyter/labextensions/jupyterlab-gpumem"
editable="$(digest pyproject.toml package.json) $ROOT"
if [ "$(readlink "$link" 2>/dev/null)" = "$ROOT/gpumem_kernel/labextension" ] && [ -f gpumem_kernel/_version.py ] &&
  pinned python jupyterlab-gpumem && stamp_ok editable "$editable"; then
  skip "the editable install (pyproject.toml and package.json unchanged)"
else
  # The labextension was just built (production); the editable hook would rebuild it in development mode.
  # A link left by an earlier `develop` would make pip write the shared install.json through it into
  # gpumem_kernel/labextension/, and the next wheel would hold that file twice.
  if [ -L "$link" ]; then rm "$link"; fi
  rm -f gpumem_kernel/labextension/install.json
  quiet pip-editable env SKIP_JUPYTER_BUILDER=1 "${PIP_INSTALL[@]}" --no-build-isolation -e ".[test]"
  quiet labextension-develop jupyter labextension develop --overwrite .
  stamp_write editable "$editable"
fi

if [ -n "$test_envs_pid" ]; then
  status=0
  wait "$test_envs_pid" || status=$?
  test_envs_pid="" # reaped: its PID is no longer ours to signal
  cat "$LOGS/test-envs.out" # their steps, or the failing one's log tail
  [ "$status" = 0 ] || exit "$status"
fi
echo
echo "setup done in $ROOT  [${SECONDS}s; logs in build/setup/]"
