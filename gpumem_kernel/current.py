"""The one process-wide handle on the loaded extension's Kernel (extension.Kernel): set by extension.load, cleared
by extension.unload.

IPython's load_ipython_extension / unload_ipython_extension receive only the shell, and the functions scripts call
(get_status, clear_gpu_memory, watch, log_gpu_memory, probe) receive nothing: they find the loaded Kernel here, or
work without one. Everything the Kernel runs is handed its parts instead. This module imports nothing of the
package, so the layers below extension.py may read it without an import circle.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol


class Loaded(Protocol):
    """What the layers below extension.py read of the loaded Kernel."""

    prober: Any  # probe.prober.Prober: its caches belong to the sampler's thread
    sampler: Any  # probe.sampler.Sampler: a sample goes through its lock
    watches: Any  # watch.registry.Registry, or None before it is made
    analyzed: Any  # oom.analyzed.AnalyzedModel or None: the last %gpumem analyze/recommend, for the OOM checklist


_kernel: Optional[Loaded] = None


def kernel() -> Optional[Loaded]:
    """The loaded extension's Kernel, or None."""
    return _kernel


def set_kernel(loaded: Optional[Loaded]) -> None:
    """extension.load (the Kernel it made) and extension.unload (None) only."""
    global _kernel
    _kernel = loaded
