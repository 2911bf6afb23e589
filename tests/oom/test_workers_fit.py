"""The host family's workers step: how many DataLoader workers fit, from their measured unique memory (USS) and
the container's limit (else the machine's RAM), with a margin; halving when nothing was measured."""

from __future__ import annotations

from gpumem_kernel.oom.diagnose import _host
from gpumem_kernel.oom.steps_host import _host_workers_step, workers_that_fit

GiB = 1024**3


def sample_host(**children):
    return {
        "host": {
            "rss": 4 * GiB,
            "total": 64 * GiB,
            "available": 20 * GiB,
            "children": {"count": 8, "rss": 40 * GiB, **children},
            "container_limit": 32 * GiB,
            "container_usage": 30 * GiB,
        }
    }


def test_the_fit_comes_from_the_unique_memory_and_the_container_limit():
    h = _host(sample_host(uss=16 * GiB, pss=None, uss_growth_per_min=None))
    assert h is not None and h.workers_uss == 16 * GiB
    # 2 GiB per worker; without the workers 14 GiB used; 90% of 32 GiB = 28.8 GiB leaves 14.8 GiB: 7 workers
    assert workers_that_fit(h) == (7, 2 * GiB)
    step = _host_workers_step(8, h)
    assert step.title == "Use at most 7 DataLoader workers"
    assert "2.00 GiB of its own" in step.detail and "container's limit" in step.detail


def test_never_more_than_it_ran_out_with():
    h = _host(sample_host(uss=2 * GiB))  # 0.25 GiB each: 59 would fit by the numbers
    assert _host_workers_step(4, h).title == "Use at most 3 DataLoader workers"


def test_without_a_measurement_it_halves():
    for h in (_host(sample_host(uss=None)), _host(sample_host()), None):
        assert workers_that_fit(h) is None
        assert _host_workers_step(8, h).title == "Use fewer DataLoader workers (8 → 4 → 2)"
