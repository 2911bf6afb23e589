#!/usr/bin/env bash
# Sets everything up, then starts JupyterLab on the quickstart notebook.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/jupyter lab examples/quickstart.ipynb "$@"
