#!/usr/bin/env bash
# Sets everything up, then runs every test: the lint, format, type, generated-code and import-circle checks, jest, pytest
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

# each step says when it began (seconds since this script started): where the test command's time goes
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "a wheel, as pip would install it for a user"
# No build isolation: setup.sh installed the build backend and its hooks into .venv (saves fetching them again).
rm -rf dist && pip wheel -q --no-deps --no-build-isolation -w dist .

# The front ends the wheel is tried in at the end (each its own venv: the newest JupyterLab 4 with the newest
# Notebook 7; Notebook 7.4.7; a JupyterLab and Notebook without our labextension for the watch's widgets) are
# installed in the background from here on, the wheel into them, their versions and kernelspecs checked and made,
# while the checks and tests below run. Their output: /tmp/gpumem-front-ends.log.
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
  # The newest JupyterLab with the newest Notebook 7
  .venv-lab-latest/bin/pip install -q --force-reinstall --no-deps dist/jupyterlab_gpumem-*.whl
  python scripts/check_versions.py .venv-lab-latest
  .venv-lab-latest/bin/jupyter labextension list 2>&1 | grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" >/dev/null
  # Notebook 7.4.7, the release on JupyterLab 4.4.10. Its kernel `python3` is this test environment's Python
  # (CPU-only torch for the OOM and `%gpumem analyze`).
  .venv-notebook7/bin/pip install -q --force-reinstall --no-deps dist/jupyterlab_gpumem-*.whl
  python scripts/check_versions.py .venv-notebook7
  python -m ipykernel install --prefix .venv-notebook7 --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
  .venv-notebook7/bin/jupyter labextension list 2>&1 | grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" >/dev/null
  # Notebook 7.6.5: the newest JupyterLab's environment served as Notebook 7. Its kernel is this test environment's
  # Python (CPU-only torch), as above, through a kernelspec of its own: the JupyterLab check keeps that
  # environment's own kernel.
  rm -rf /tmp/gpumem-nb76-kernel
  python -m ipykernel install --prefix /tmp/gpumem-nb76-kernel --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
  # The output-area watch (%gpumem watch) in the front end of a JupyterHub image or a cluster node (and,
  # widget-wise, of VS Code and Colab): JupyterLab 4.4.10 and Notebook 7.4.7 with ipywidgets and anywidget, no
  # jupyterlab-gpumem. Their versions are the kernel's, as a widget's two sides need.
  python scripts/check_versions.py .venv-widget
  if .venv-widget/bin/jupyter labextension list 2>&1 | grep jupyterlab-gpumem; then
    echo "the watch check's front end must not have jupyterlab-gpumem" >&2
    exit 1
  fi
  python -m ipykernel install --prefix .venv-widget --name python3 --display-name "Python 3 (ipykernel)" >/dev/null 2>&1
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
  echo "preparing the front ends failed (the last 40 lines of /tmp/gpumem-front-ends.log follow)" >&2
  tail -n 40 /tmp/gpumem-front-ends.log >&2
  exit 1
}

# serve VENV APP CONFIG PORT: starts that environment's Jupyter server (APP: jupyter-lab or jupyter-notebook) from
# ui-tests/ with CONFIG, logging to /tmp/gpumem-PORT.log, stopped when this script exits; answers PORT returns once
# that port answers, or after a minute (a server that has not started by then fails its check).
servers=()
running=() # the tests running in the background (below); emptied once they are reaped
trap 'kill "${servers[@]}" ${front_ends_pid:+"$front_ends_pid"} "${running[@]}" 2>/dev/null || true' EXIT
serve() {
  (cd ui-tests && exec "../$1/bin/$2" --config "$3") >"/tmp/gpumem-$4.log" 2>&1 &
  servers+=($!)
}
answers() {
  for _ in $(seq 1 60); do
    .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/api/status', timeout=2)" 2>/dev/null && return 0
    sleep 1
  done
}

# jest runs in the background beside the checks below up to the import-circle check (each of them, as jest, keeps
# about one core busy); its output is printed after them. /tmp/gpumem-jest.log
step "jest: started in the background, beside the checks up to the import-circle check"
(exec jlpm test) >/tmp/gpumem-jest.log 2>&1 &
jest_pid=$!
running+=("$jest_pid")

step "the installed versions lie in the supported ranges (gpumem_kernel/supported.py, README's Supported versions)"
# setup.sh's venvs; each venv this script makes further down is checked where it is made
python scripts/check_versions.py .venv .venv-transformers4 .venv-ipykernel6

step "the labextension is installed and enabled"
jupyter labextension list 2>&1 | tee /tmp/gpumem-labext.txt
grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" /tmp/gpumem-labext.txt >/dev/null

step "ruff: lint and format of the Python code (pyproject.toml [tool.ruff])"
ruff check .
ruff format --check .

step "the wire types and validators are generated from the JSON Schemas, and up to date (jlpm gen:wire)"
node scripts/gen_wire.mjs --check

step "ESLint and Prettier (eslint.config.js, .prettierrc)"
jlpm lint:check

step "TypeScript's types of src/ and of its jest specs, which jest only transpiles (tsconfig.test.json)"
jlpm lint:types

step "no import circle: src/ (madge, type-only imports included) and gpumem_kernel/ (layers, bottom first)"
jlpm lint:cycles
python scripts/check_imports.py

step "jest (ran in the background): its output"
jest_status=0
wait "$jest_pid" || jest_status=$?
running=() # reaped: its PID is no longer ours to signal
cat /tmp/gpumem-jest.log
[ "$jest_status" = 0 ] || exit 1

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
# transformers 4.57.6 first on its path. About 2 CPU minutes: a minute on 2 processes, alone.
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
step "pytest on transformers $(.venv-transformers4/bin/python -c 'import transformers; print(transformers.__version__)'): the tests that depend on its version"
.venv-transformers4/bin/python -m pytest "${TRANSFORMERS4_TESTS[@]}" -q -rs -m "not kernel" -n "$workers" --dist loadfile

# The kernel tests run one at a time within a pass (several count what a kernel sends during a busy cell), and the
# pass on ipykernel 7, then the one on ipykernel 6, run in the background beside Galata: a kernel test mostly waits
# on its kernel (a pass keeps about 0.6 of a core busy for about 2 minutes), and Galata leaves a quarter to a half
# of the two cores idle for 7 minutes. Only the files that mark kernel tests are collected (collecting all of tests/
# imports every test module again, ~8 s a pass); `-m kernel` still picks the tests. Each pass's output is printed
# once Galata has ended.
mapfile -t kernel_files < <(grep -rl "mark.kernel" tests --include="test_*.py" | sort)
kernel7="ipykernel $(python -c 'import ipykernel; print(ipykernel.__version__)')"
kernel6="ipykernel $(.venv-ipykernel6/bin/python -c 'import ipykernel; print(ipykernel.__version__)')"
rm -f /tmp/gpumem-kernel7.status /tmp/gpumem-kernel6.status
# kernel_pass LOG [VAR=VALUE...]: one pass with those variables set, its output in LOG, its exit status in
# LOG's .status file; a TERM (this script exiting) ends the pass under way. No cache provider: a pass needs no
# .pytest_cache of its own.
kernel_pass() {
  local log=$1 pass status=0
  shift
  env "$@" GPUMEM_REQUIRE_WHEEL=1 python -m pytest "${kernel_files[@]}" -q -rs -m kernel -p no:cacheprovider \
    >"/tmp/$log.log" 2>&1 &
  pass=$!
  trap 'kill "$pass" 2>/dev/null; exit 143' TERM
  wait "$pass" || status=$?
  echo "$status" >"/tmp/$log.status"
}
step "pytest kernel tests with $kernel7, then with $kernel6: started in the background, beside Galata"
(
  kernel_pass gpumem-kernel7
  kernel_pass gpumem-kernel6 GPUMEM_TEST_KERNEL_PYTHON="$(pwd)/.venv-ipykernel6/bin/python"
) &
kernel_passes=$!
running+=("$kernel_passes")

# The four plain Playwright checks of the same wheel (the newest JupyterLab 4 with the newest Notebook 7; Notebook
# 7.4.7; Notebook 7.6.5; the watch without our labextension) run side by side, each against its own server and with
# its own output folder, also beside Galata's first minute: they mostly wait on page loads and kernel starts (after
# Galata they took a minute of their own with half the CPU idle). Their output is printed once Galata has ended.
step "the same wheel in the newest JupyterLab 4 (4.6.6) and Notebook 7 (7.6.5), in Notebook 7.4.7, and a front end without it: started in the background, beside Galata"
wait_front_ends
rm -rf /tmp/gpumem-compat /tmp/gpumem-nb7 /tmp/gpumem-nb76 /tmp/gpumem-widget /tmp/gpumem-check-results
mkdir -p /tmp/gpumem-compat /tmp/gpumem-nb7 /tmp/gpumem-nb76 /tmp/gpumem-widget
serve .venv-lab-latest jupyter-lab jupyter_server_compat_config.py 8890
serve .venv-notebook7 jupyter-notebook jupyter_server_notebook7_config.py 8891
JUPYTER_PATH=/tmp/gpumem-nb76-kernel/share/jupyter serve .venv-lab-latest jupyter-notebook jupyter_server_notebook76_config.py 8893
serve .venv-widget jupyter-notebook jupyter_server_widget_config.py 8892
for port in 8890 8891 8893 8892; do answers "$port"; done
# check NAME CONFIG [VAR=VALUE...]: starts one in the background, its output in /tmp/gpumem-check-NAME.log, its
# files in /tmp/gpumem-check-results/NAME (not under ui-tests/test-results/, which Galata empties when it starts)
checks=()
check() {
  (cd ui-tests && exec env "${@:3}" jlpm playwright test -c "$2" --output "/tmp/gpumem-check-results/$1") \
    >"/tmp/gpumem-check-$1.log" 2>&1 &
  running+=($!)
  checks+=("$1:$!")
}
check jupyterlab-4.6 playwright.compat.config.js
check notebook-7.4 playwright.notebook7.config.js
check notebook-7.6 playwright.notebook7.config.js GPUMEM_NB7_URL=http://localhost:8893
check watch playwright.widget.config.js

step "Galata on Debian's Chromium"
cd ui-tests
jlpm playwright test
cd ..

# kernel_pass_result LOG NAME: prints the pass's output, and stops here if it failed
kernel_pass_result() {
  step "pytest kernel tests with $2 (ran in the background): its output"
  cat "/tmp/$1.log"
  [ "$(cat "/tmp/$1.status" 2>/dev/null)" = 0 ] || exit 1
}
wait "$kernel_passes" || true
running=("${checks[@]#*:}") # the passes are reaped: their PID is no longer ours to signal
kernel_pass_result gpumem-kernel7 "$kernel7"
kernel_pass_result gpumem-kernel6 "$kernel6"

failed=0
for entry in "${checks[@]}"; do
  status=0
  wait "${entry#*:}" || status=$?
  step "plain Playwright: ${entry%%:*} (ran in the background; exit status $status)"
  cat "/tmp/gpumem-check-${entry%%:*}.log"
  [ "$status" = 0 ] || failed=1
done
running=() # reaped: their PIDs are no longer ours to signal
exit "$failed"
