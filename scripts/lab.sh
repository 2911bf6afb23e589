#!/usr/bin/env bash
# Sets everything up (quickly when nothing changed: see setup.sh), then starts JupyterLab on the first tour
# notebook: the URL it prints opens examples/01-monitor.ipynb. Extra arguments go to `jupyter lab`
# (e.g. `bash scripts/lab.sh --port 8899 --no-browser`).
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv is this checkout's own: let Python keep the bytecode of what it imports there, or every kernel compiles
# torch's modules from source again when PYTHONDONTWRITEBYTECODE is set (as in many containers)
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh
args=(--ServerApp.root_dir=. --LabApp.default_url=/lab/tree/examples/01-monitor.ipynb)
[ "$(id -u)" = 0 ] && args+=(--allow-root) # containers and CI machines run as root
echo
echo "== starting JupyterLab on examples/01-monitor.ipynb (open the URL below that ends in ?token=...; Ctrl+C stops it)"
exec .venv/bin/jupyter lab "${args[@]}" "$@"
