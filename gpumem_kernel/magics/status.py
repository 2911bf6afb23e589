"""The Python API behind `%gpumem status`: one snapshot of GPU and host memory, as data or as text."""

from __future__ import annotations

from typing import Any, Dict

from gpumem_kernel.probe.snapshot import sample_now
from gpumem_kernel.render.status import render_text


def get_status() -> Dict[str, Any]:
    """A sample (the wire format's `sample` object) taken now (through the sampler when it runs)."""
    return sample_now()


def print_status() -> None:
    """Print the snapshot in the console layout (what `%gpumem status` shows as text/plain)."""
    print(render_text(get_status()))
