#!/usr/bin/env bash
# Sets everything up, then runs every test: jest, pytest (kernel tests on ipykernel 7 and 6),
# the packaging check of a built wheel, and the Galata browser tests on Debian's Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
# shellcheck disable=SC1091
source .venv/bin/activate
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

step() { printf '\n== %s\n' "$*"; }

step "the labextension is installed and enabled"
jupyter labextension list 2>&1 | tee /tmp/gpumem-labext.txt
grep -E "jupyterlab-gpumem v[0-9.]+ .*enabled.*OK" /tmp/gpumem-labext.txt >/dev/null

step "a wheel, as pip would install it for a user"
rm -rf dist && pip wheel -q --no-deps -w dist .

step "jest"
jlpm test

step "pytest (ipykernel $(python -c 'import ipykernel; print(ipykernel.__version__)'))"
GPUMEM_REQUIRE_WHEEL=1 python -m pytest tests -q -rs

step "pytest kernel tests with ipykernel $(.venv-ipykernel6/bin/python -c 'import ipykernel; print(ipykernel.__version__)')"
GPUMEM_TEST_KERNEL_PYTHON="$(pwd)/.venv-ipykernel6/bin/python" python -m pytest tests -q -m kernel

step "Galata on Debian's Chromium"
cd ui-tests
jlpm playwright test
