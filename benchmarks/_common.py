"""Shared helpers for the benchmark scripts: where results go and what each result records."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # a benchmark must still record what it measured
        return None
    return str(getattr(mod, "__version__", None))


def _gpu_name() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except Exception:
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def machine() -> dict[str, Any]:
    """What ran the benchmark: enough to tell two results apart."""
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "ipykernel": _version("ipykernel"),
        "gpu": _gpu_name(),
    }


def write_result(name: str, data: dict[str, Any], folder: Path | None = None) -> Path:
    """Write benchmarks/results/<name>.json (or <folder>/<name>.json) with machine, versions and date."""
    folder = folder or RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "name": name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        **data,
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path
