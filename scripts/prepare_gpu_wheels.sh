#!/usr/bin/env bash
# Prepares .whl/ (git-ignored) for the GPU suite (python3 -m benchmarks.gpu) on a machine that reaches no
# package registry: this project's wheel, and the kernel-side packages the GPU image lacks (ipykernel,
# jupyter_client, comm, pyzmq, tornado, traitlets, IPython and their needs) for CPython 3.12, manylinux x86-64,
# and what `pytest -m gpu` collects beside them (jsonschema, jupyter_server, nbformat, nbclient), and anywidget
# (with ipywidgets) for `%gpumem watch`.
# Packages the image already has are left out, so the suite never shadows them (see IMAGE_HAS).
# The suite installs them itself, offline:  pip install --no-index --no-deps --target /tmp/gpumem-site .whl/*.whl
#
#   bash scripts/prepare_gpu_wheels.sh        # after scripts/setup.sh (the labextension must be built)
#
# Then carry .whl with the working tree (the whole tree must stay under 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=.whl
LIMIT_MIB=${LIMIT_MIB:-48}
# What the GPU image already has (benchmarks/gpu/image-packages.txt): a second copy could shadow its own versions.
IMAGE_HAS=$(sed -e 's/#.*//' -e 's/[=<>].*//' benchmarks/gpu/image-packages.txt | tr 'A-Z-' 'a-z_' | xargs)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux1_x86_64)

rm -rf "$OUT" && mkdir -p "$OUT"

echo "== this project's wheel (labextension prebuilt by scripts/setup.sh)"
if [ ! -f gpumem_kernel/labextension/static/style.js ]; then
  echo "build the labextension first: bash scripts/setup.sh"; exit 1
fi
"$PY" -m pip wheel -q --no-deps -w "$OUT" .

echo "== kernel packages for cp312 manylinux x86_64, with their needs"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
  --abi none "${platform_args[@]}" -d "$OUT" \
  "ipykernel>=6.22" "jupyter_client>=8" "comm>=0.1.3" pyzmq tornado traitlets "prometheus-client>=0.14" \
  "jsonschema>=4" "jupyter_server>=2" "nbformat>=5" "nbclient>=0.7" \
  "anywidget>=0.9"

echo "== leaving out what the image has: $IMAGE_HAS"
for name in $IMAGE_HAS; do
  find "$OUT" -maxdepth 1 -iname "${name}-*.whl" -print -delete
done

# One version of each distribution: two would stop the offline install.
dupes=$(ls "$OUT" | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dupes" ] || { echo "two versions of: $dupes"; exit 1; }

echo "== every need (Python 3.12, Linux) is a wheel here or on the image"
IMAGE_HAS="$IMAGE_HAS" "$PY" - "$OUT" <<'PY'
import os, re, sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement

env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "platform_machine": "x86_64", "os_name": "posix", "extra": ""}
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
wheels = list(Path(sys.argv[1]).glob("*.whl"))
have = {norm(w.name.split("-")[0]) for w in wheels} | {norm(n) for n in os.environ["IMAGE_HAS"].split()}
missing = set()
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:"):
                req = Requirement(line.split(":", 1)[1].strip())
                if (req.marker is None or req.marker.evaluate(env)) and norm(req.name) not in have:
                    missing.add(f"{req} (for {wheel.name.split('-')[0]})")
print("\n".join(sorted(missing)) or "all present")
sys.exit(1 if missing else 0)
PY

size=$(du -sm "$OUT" | cut -f1)
ls -1 "$OUT"
echo "== $(ls "$OUT" | wc -l) wheels, ${size} MiB in $OUT"
[ "$size" -le "$LIMIT_MIB" ] || { echo "over ${LIMIT_MIB} MiB: the working tree travels in 64 MiB"; exit 1; }
