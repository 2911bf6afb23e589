"""Where the zoo's extra packages come from: benchmarks/zoo/.packages (requirements.txt), else the environment."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from benchmarks.zoo.torchvision_ops import ensure_importable

PACKAGES = Path(__file__).resolve().parent / ".packages"
INSTALL = ".venv/bin/pip install --no-deps --target benchmarks/zoo/.packages -r benchmarks/zoo/requirements.txt"


def prepare() -> None:
    """Put .packages on sys.path (after the environment: its torch stays the one used) and make torchvision
    importable. Idempotent."""
    if PACKAGES.is_dir() and str(PACKAGES) not in sys.path:
        sys.path.append(str(PACKAGES))
        importlib.invalidate_caches()
    ensure_importable()


def missing(package: str) -> str | None:
    """None when `package` imports, else a one-line reason naming how to install it."""
    prepare()
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed ({INSTALL})"
    return None
