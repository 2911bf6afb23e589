#!/usr/bin/env bash
# Sets everything up, then runs every test: the lint, format, generated-code and import-circle checks, jest, pytest
# (kernel tests on ipykernel 7 and 6; on transformers 5.24, the tests its version decides also on 4.57.6), the packaging
# check of a built wheel, the Galata browser tests on Debian's Chromium (JupyterLab 4.4.10, the minimum we support), and
# the same wheel in the newest JupyterLab 4 (4.6.6) and in Jupyter Notebook 7 (7.4.7 and 7.6.5), and `%gpumem watch`
# in a JupyterLab and a Notebook 7 without our labextension (widgets only).
set -euo pipefail
cd "$(dirname "$0")/.."
# The venvs are this checkout's own: let Python keep the bytecode of what it imports there. With
# PYTHONDONTWRITEBYTECODE set (as in many containers) every process the tests start (each kernel, each pytest
# worker, each rank) compiles torch's and transformers' modules from source again: seconds per process.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh --test
# shellcheck disable=SC1091
source .venv/bin/activate
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

# The front ends the built wheel is tried in at the end (each its own venv: the newest JupyterLab 4 with the newest
# Notebook 7; Notebook 7.4.7; a JupyterLab and Notebook without our labextension for the watch's widgets) are
# installed in the background from here on, while the checks and tests below run; the wheel goes into them once built
# and tested. Their pip output: /tmp/gpumem-front-ends.log.
front_ends() {
  # Notebook 7.6.5 (the newest Notebook 7, which needs JupyterLab 4.6.6) shares this environment
  [ -x .venv-lab-latest/bin/python ] || python3 -m venv .venv-lab-latest
  .venv-lab-latest/bin/pip install -q "jupyterlab==4.6.6" "notebook==7.6.5" comm nvidia-ml-py psutil PyYAML
  [ -x .venv-notebook7/bin/python ] || python3 -m venv .venv-notebook7
  .venv-notebook7/bin/pip install -q "jupyterlab==4.4.10" "notebook==7.4.7" comm nvidia-ml-py psutil PyYAML
  # ipywidgets and anywidget at the kernel's versions, as a widget's two sides need
  [ -x .venv-widget/bin/python ] || python3 -m venv .venv-widget
  .venv-widget/bin/pip install -q "jupyterlab==4.4.10" "notebook==7.4.7" \
    "ipywidgets==$(python -c 'import ipywidgets; print(ipywidgets.__version__)')" \
    "anywidget==$(python -c 'import anywidget; print(anywidget.__version__)')"
}
front_ends >/tmp/gpumem-front-ends.log 2>&1 &
front_ends_pid=$!
# wait_front_ends: returns once they are installed; if that failed, prints why and stops here
wait_front_ends() {
  [ -z "$front_ends_pid" ] && return 0
  local status=0
  wait "$front_ends_pid" || status=$?
  front_ends_pid="" # reaped: its PID is no longer ours to signal
  [ "$status" = 0 ] && return 0
  echo "installing the front ends failed (the last 40 lines of /tmp/gpumem-front-ends.log follow)" >&2
  tail -n 40 /tmp/gpumem-front-ends.log >&2
  exit 1
}

# each step says when it began (seconds since this script started): where the test command's time goes
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# serve VENV APP CONFIG PORT: that environment's Jupyter server (APP: jupyter-lab or jupyter-notebook) started from
# ui-tests/ with CONFIG, logging to /tmp/gpumem-PORT.log, stopped when this script exits; returns once PORT answers.
servers=()
kernel_pids=() # the kernel passes running in the background (below); emptied once they are reaped
trap 'kill "${servers[@]}" ${front_ends_pid:+"$front_ends_pid"} "${kernel_pids[@]}" 2>/dev/null || true' EXIT
serve() {
  (cd ui-tests && exec "../$1/bin/$2" --config "$3") >"/tmp/gpumem-$4.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 60); do
    .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$4/api/status', timeout=2)" 2>/dev/null && return 0
    sleep 1
  done
}

step "the installed versions lie in the supported ranges (gpumem_kernel/supported.py, README's Supported versions)"
# setup.sh's venvs; each venv this script makes further down is checked where it is made
python scripts/check_versions.py .venv .venv-transformers4 .venv-ipykernel6

step "the labextension is installed and enabled"
jupyter labextension list 2>&1 | tee /tmp/gpumem-labext.txt
grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" /tmp/gpumem-labext.txt >/dev/null

step "a wheel, as pip would install it for a user"
# No build isolation: setup.sh installed the build backend and its hooks into .venv (saves fetching them again).
rm -rf dist && pip wheel -q --no-deps --no-build-isolation -w dist .

step "ruff: lint and format of the Python code (pyproject.toml [tool.ruff])"
ruff check .
ruff format --check .

step "the wire types and validators are generated from the JSON Schemas, and up to date (jlpm gen:wire)"
node scripts/gen_wire.mjs --check

step "ESLint and Prettier (eslint.config.js, .prettierrc)"
jlpm lint:check

step "no import circle: src/ (madge, type-only imports included) and gpumem_kernel/ (layers, bottom first)"
jlpm lint:cycles
python scripts/check_imports.py

step "jest"
jlpm test

# The tests that start no kernel run on two processes (pytest-xdist, each test file in one process: its module
# fixtures and its order stay as written); the kernel tests after them, one at a time, since several count what a
# kernel sends during a busy cell. Two processes at most: each holds torch, and this is the machine's core count
# here (fewer where the machine has fewer).
workers=$(python -c "import os; print(max(1, min(2, len(os.sched_getaffinity(0)))))")
step "pytest (ipykernel $(python -c 'import ipykernel; print(ipykernel.__version__)')): tests without a kernel on $workers processes"
GPUMEM_REQUIRE_WHEEL=1 python -m pytest tests -q -rs -m "not kernel" -n "$workers" --dist loadfile

# .venv has the newest transformers (5.x, what users install); the tests whose path transformers' code decides
# (models by name, public architectures, the attention path, the logits and the loss's upcast, KV caches through
# replicated layers and generation, LoRA, QLoRA and peft's methods, the zoo's Llama entry: its others are timm's,
# torchvision's and diffusers') run again on the oldest 4.x we support: .venv-transformers4 (setup.sh) is .venv with
# transformers 4.57.6 first on its path. 3.5 CPU minutes (6 minutes on 2 processes with a load of 5 beside it).
TRANSFORMERS4_TESTS=(
  tests/analysis/test_public_models.py
  tests/analysis/test_model_source.py
  tests/analysis/test_model_source_code_files.py
  tests/analysis/test_attention_path.py
  tests/analysis/test_llm_report.py
  tests/analysis/test_replicate.py
  tests/analysis/test_generation_plan.py
  tests/analysis/test_lora.py
  tests/analysis/test_peft_methods.py
  tests/analysis/test_quantize.py
  "tests/analysis/test_zoo_subset.py::test_zoo_entry_analyses_training_and_evaluation[Llama +mask]"
)
# The kernel tests run one at a time within a pass (several count what a kernel sends during a busy cell), but the
# passes on ipykernel 7 and 6 run in the background, beside each other and the 4.x lane: a kernel test mostly waits on
# its kernel (a pass keeps about 0.6 of a core busy), so the three take about as long as the longest of them, not
# the sum (6 minutes one after another, 3.5 side by side). Only the files that mark kernel tests are collected
# (collecting all of tests/ imports every test module again, ~8 s a pass); `-m kernel` still picks the tests. A
# pass's output is printed when it has ended.
mapfile -t kernel_files < <(grep -rl "mark.kernel" tests --include="test_*.py" | sort)
kernel7="ipykernel $(python -c 'import ipykernel; print(ipykernel.__version__)')"
kernel6="ipykernel $(.venv-ipykernel6/bin/python -c 'import ipykernel; print(ipykernel.__version__)')"
step "pytest kernel tests with $kernel7 and with $kernel6: started in the background"
# no cache provider: three pytest runs at once would write .pytest_cache together
GPUMEM_REQUIRE_WHEEL=1 python -m pytest "${kernel_files[@]}" -q -rs -m kernel -p no:cacheprovider \
  >/tmp/gpumem-kernel7.log 2>&1 &
kernel_pids+=($!)
GPUMEM_TEST_KERNEL_PYTHON="$(pwd)/.venv-ipykernel6/bin/python" python -m pytest "${kernel_files[@]}" -q -m kernel \
  -p no:cacheprovider >/tmp/gpumem-kernel6.log 2>&1 &
kernel_pids+=($!)

step "pytest on transformers $(.venv-transformers4/bin/python -c 'import transformers; print(transformers.__version__)'): the tests that depend on its version"
.venv-transformers4/bin/python -m pytest "${TRANSFORMERS4_TESTS[@]}" -q -rs -m "not kernel" -n "$workers" --dist loadfile

# kernel_pass_result INDEX LOG NAME: waits for the pass kernel_pids[INDEX], prints its output, and stops here if it
# failed; once reaped its PID is no longer ours to signal
kernel_pass_result() {
  local status=0
  wait "${kernel_pids[$1]}" || status=$?
  unset "kernel_pids[$1]"
  step "pytest kernel tests with $3 (ran in the background): its output"
  cat "$2"
  [ "$status" = 0 ] || exit "$status"
}
kernel_pass_result 0 /tmp/gpumem-kernel7.log "$kernel7"
kernel_pass_result 1 /tmp/gpumem-kernel6.log "$kernel6"

step "Galata on Debian's Chromium"
cd ui-tests
jlpm playwright test
cd ..

step "the same wheel in the newest JupyterLab 4 (4.6.6): plain Playwright"
wait_front_ends
.venv-lab-latest/bin/pip install -q --force-reinstall --no-deps dist/jupyterlab_gpumem-*.whl
python scripts/check_versions.py .venv-lab-latest
.venv-lab-latest/bin/jupyter labextension list 2>&1 | grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" >/dev/null
mkdir -p /tmp/gpumem-compat
serve .venv-lab-latest jupyter-lab jupyter_server_compat_config.py 8890
(cd ui-tests && jlpm playwright test -c playwright.compat.config.js)

step "the same wheel in Jupyter Notebook 7 (7.4.7, the release on JupyterLab 4.4.10): plain Playwright"
.venv-notebook7/bin/pip install -q --force-reinstall --no-deps dist/jupyterlab_gpumem-*.whl
python scripts/check_versions.py .venv-notebook7
# Its kernel `python3` is this test environment's Python (CPU-only torch for the OOM and `%gpumem analyze`).
python -m ipykernel install --prefix .venv-notebook7 --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
.venv-notebook7/bin/jupyter labextension list 2>&1 | grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" >/dev/null
mkdir -p /tmp/gpumem-nb7
serve .venv-notebook7 jupyter-notebook jupyter_server_notebook7_config.py 8891
(cd ui-tests && jlpm playwright test -c playwright.notebook7.config.js)

step "the same wheel in the newest Notebook 7 (7.6.5, on JupyterLab 4.6.6): the Notebook 7 spec again"
# The newest JupyterLab's environment, served as Notebook 7. Its kernel is this test environment's Python (CPU-only
# torch), as above, through a kernelspec of its own: the JupyterLab check keeps that environment's own kernel.
rm -rf /tmp/gpumem-nb76 /tmp/gpumem-nb76-kernel && mkdir -p /tmp/gpumem-nb76
python -m ipykernel install --prefix /tmp/gpumem-nb76-kernel --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
JUPYTER_PATH=/tmp/gpumem-nb76-kernel/share/jupyter serve .venv-lab-latest jupyter-notebook jupyter_server_notebook76_config.py 8893
(cd ui-tests && GPUMEM_NB7_URL=http://localhost:8893 jlpm playwright test -c playwright.notebook7.config.js)

step "the output-area watch (%gpumem watch) in JupyterLab 4.4.10 and Notebook 7.4.7 without our labextension: plain Playwright"
# The front end of a JupyterHub image or a cluster node (and, widget-wise, of VS Code and Colab): ipywidgets and
# anywidget, no jupyterlab-gpumem. Their versions are the kernel's, as a widget's two sides need.
python scripts/check_versions.py .venv-widget
if .venv-widget/bin/jupyter labextension list 2>&1 | grep jupyterlab-gpumem; then
  echo "the watch check's front end must not have jupyterlab-gpumem" >&2
  exit 1
fi
python -m ipykernel install --prefix .venv-widget --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
rm -rf /tmp/gpumem-widget && mkdir -p /tmp/gpumem-widget
serve .venv-widget jupyter-notebook jupyter_server_widget_config.py 8892
(cd ui-tests && jlpm playwright test -c playwright.widget.config.js)
