"""The workbench autobatch and the benchmark run real steps on: the user's RNG states come back as they were."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("torch")

from gpumem_kernel.analysis.measure.workbench import RngSnapshot  # noqa: E402


def test_numpy_rng_is_restored_when_numpy_is_loaded(monkeypatch):
    """numpy is not a dependency: a stand-in proves its generator is saved and put back when it is imported."""
    state = {"value": ("MT19937", 1)}
    fake_random = types.SimpleNamespace(
        get_state=lambda: state["value"], set_state=lambda value: state.update(value=value)
    )
    monkeypatch.setitem(sys.modules, "numpy", types.SimpleNamespace(random=fake_random))
    snapshot = RngSnapshot.take(cuda=False)
    state["value"] = ("MT19937", 2)  # a run drew numbers
    snapshot.restore()
    assert state["value"] == ("MT19937", 1)
