"""Check that each venv's installed versions lie in the supported ranges (gpumem_kernel/supported.py).

    python scripts/check_versions.py .venv .venv-ipykernel6    # venv folders; none: the running Python's own

Each venv's own python reports its versions (importlib.metadata): the packages of the table that it has, and its
interpreter. A package a venv lacks is not checked there (the JupyterLab venvs have no torch). Prints one line per
venv, and one line per package outside its range; exit status 1 if there is any. A venv folder that does not
exist yet (the test command makes some later) is said and skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent

# run by the venv's python: prints {"distribution": "version"} for those of the table it has
REPORT = """
import json, sys
from importlib import metadata
names = json.loads(sys.argv[1])
found = {"python": ".".join(str(part) for part in sys.version_info[:3])}
for name in names:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


def load_supported() -> ModuleType:
    """gpumem_kernel/supported.py by its path: the package's __init__ needs what a JupyterLab-only venv lacks."""
    spec = importlib.util.spec_from_file_location("gpumem_supported", ROOT / "gpumem_kernel" / "supported.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolves the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def installed(python: str, names: Sequence[str]) -> Dict[str, str]:
    out = subprocess.run([python, "-c", REPORT, json.dumps(list(names))], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def problems(found: Dict[str, str], supported: ModuleType) -> List[str]:
    lines = []
    for row in supported.SUPPORTED:
        if row.distribution in found:
            verdict = row.verdict(found[row.distribution])
            if verdict is not None:
                lines.append(verdict)
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venvs", nargs="*", help="venv folders (default: the running Python)")
    args = parser.parse_args(argv)
    supported = load_supported()
    names = [row.distribution for row in supported.SUPPORTED if row.distribution != "python"]
    failed = False
    for venv in args.venvs or [None]:
        python = sys.executable if venv is None else str(Path(venv) / "bin" / "python")
        label = venv or sys.prefix
        if not Path(python).exists():
            print(f"{label}: no venv yet, not checked")
            continue
        found = installed(python, names)
        lines = problems(found, supported)
        print(f"{label}: " + ", ".join(f"{name} {version}" for name, version in found.items()))
        for line in lines:
            print(f"  {label}: {line}")
        failed = failed or bool(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
