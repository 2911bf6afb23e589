#!/usr/bin/env bash
# Sets everything up, then starts JupyterLab on the first tour notebook (examples/01-monitor.ipynb).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
[ "$(id -u)" = 0 ] && args+=(--allow-root)  # containers and CI machines run as root
exec .venv/bin/jupyter lab examples/01-monitor.ipynb "${args[@]}" "$@"
