"""One sample of GPU and host memory, from whoever owns the prober.

When the extension is loaded its sampler thread owns the Kernel's prober (whose caches are single-threaded), so a
sample goes through the sampler's lock; otherwise the prober the calls without the extension share is asked
(gpumem_kernel.current.probe_alone: made on first use, so NVML starts once). The layers that need a
sample (clear, the OOM checklist, `%gpumem status`, the argument checks) find the loaded Kernel through
gpumem_kernel.current, never through the extension, which imports them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from gpumem_kernel import current
from gpumem_kernel.probe.sampler import Sampler

SampleDict = Dict[str, Any]


def running_sampler() -> Optional[Sampler]:
    """The loaded extension's sampler, or None."""
    kernel = current.kernel()
    return kernel.sampler if kernel is not None else None


def sample_now() -> SampleDict:
    """A sample (the wire format's `sample` object) taken now; raises when probing fails."""
    sampler = running_sampler()
    if sampler is not None:
        return sampler.snapshot()
    from gpumem_kernel.probe.prober import Prober

    return current.probe_alone(Prober).to_dict()


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
