"""The Python API behind `%gpumem status`: one snapshot of GPU and host memory, as data or as text."""

from __future__ import annotations

from typing import Any, Dict

from gpumem_kernel import extension
from gpumem_kernel.probe.prober import default_prober
from gpumem_kernel.render.status import render_text


def get_status() -> Dict[str, Any]:
    """A sample (the wire format's `sample` object) taken now."""
    loaded = extension.current()
    if loaded is not None:
        return loaded.sampler.snapshot()  # shares the sampler's probe lock and caches
    return default_prober()().to_dict()


def print_status() -> None:
    """Print the snapshot in the console layout (what `%gpumem status` shows as text/plain)."""
    print(render_text(get_status()))
