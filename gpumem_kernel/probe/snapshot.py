"""One sample of GPU and host memory, from whoever owns the shared prober.

When the extension is loaded its sampler thread owns the shared prober (whose caches are single-threaded), so
a sample goes through the sampler's lock; otherwise the prober is asked directly. The extension registers its
sampler here (`attach`/`detach`), so the layers that need a sample (clear, the OOM checklist, `%gpumem status`,
the argument checks) never import the extension, which imports them.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from gpumem_kernel.probe.sampler import Sampler

SampleDict = Dict[str, Any]

_lock = threading.Lock()
_running: Optional[Sampler] = None


def attach(sampler: Sampler) -> None:
    """The loaded extension's sampler: samples go through it from now on."""
    global _running
    with _lock:
        _running = sampler


def detach(sampler: Sampler) -> None:
    """The extension unloads: back to the prober itself (a sampler that was replaced is left alone)."""
    global _running
    with _lock:
        if _running is sampler:
            _running = None


def running_sampler() -> Optional[Sampler]:
    """The loaded extension's sampler, or None."""
    with _lock:
        return _running


def sample_now() -> SampleDict:
    """A sample (the wire format's `sample` object) taken now; raises when probing fails."""
    sampler = running_sampler()
    if sampler is not None:
        return sampler.snapshot()
    from gpumem_kernel.probe.prober import default_prober

    return default_prober()().to_dict()


def latest_sample() -> SampleDict:
    """The sampler's newest sample when the extension is loaded (no probe at all), else one taken now."""
    sampler = running_sampler()
    return sampler.latest() if sampler is not None else sample_now()


def take_sample() -> Optional[SampleDict]:
    """A sample taken now, or None when probing fails (for reports that go on without one)."""
    try:
        return sample_now()
    except Exception:
        return None
