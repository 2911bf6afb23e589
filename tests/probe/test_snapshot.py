"""A sample goes through the loaded extension's sampler (its lock owns the Kernel's prober), else a prober."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict

import pytest

from gpumem_kernel import current
from gpumem_kernel.probe import snapshot


class FakeSampler:
    def __init__(self) -> None:
        self.calls = []

    def snapshot(self) -> Dict[str, Any]:
        self.calls.append("snapshot")
        return {"seq": 0, "from": "sampler"}

    def latest(self) -> Dict[str, Any]:
        self.calls.append("latest")
        return {"seq": 7, "from": "sampler"}


@pytest.fixture
def attached():
    """A loaded Kernel (extension.Kernel) whose sampler is the fake."""
    sampler = FakeSampler()
    current.set_kernel(
        SimpleNamespace(ip=None, prober=None, sampler=sampler, watches=None, analyzed=None, oom_handler=None)
    )
    yield sampler
    current.set_kernel(None)


def test_samples_go_through_the_attached_sampler(attached):
    assert snapshot.sample_now() == {"seq": 0, "from": "sampler"}
    assert snapshot.latest_sample() == {"seq": 7, "from": "sampler"}
    assert snapshot.take_sample() == {"seq": 0, "from": "sampler"}
    assert attached.calls == ["snapshot", "latest", "snapshot"]


def test_the_loaded_kernels_sampler_is_the_running_one(attached):
    assert snapshot.running_sampler() is attached


def test_without_a_sampler_the_prober_answers_and_a_failure_is_none(monkeypatch):
    assert snapshot.running_sampler() is None
    sample = snapshot.sample_now()
    assert {"gpu", "host", "kernel"} <= set(sample)

    def failing() -> Any:
        raise OSError("no /proc")

    monkeypatch.setattr(snapshot, "sample_now", failing)
    assert snapshot.take_sample() is None


def test_without_the_extension_the_public_helpers_share_one_prober(monkeypatch):
    """get_status() in a script's loop starts NVML once: the prober is made on the first call and kept."""
    import gpumem_kernel
    from gpumem_kernel.probe import prober

    made = []

    class Counted(prober.Prober):
        def __init__(self) -> None:
            made.append(self)
            super().__init__()

    monkeypatch.setattr(current, "_alone_prober", None)
    monkeypatch.setattr(prober, "Prober", Counted)
    first, second = gpumem_kernel.get_status(), gpumem_kernel.get_status()
    prober.probe()
    assert len(made) == 1 and first["type"] == second["type"] == "sample"
