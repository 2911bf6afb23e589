"""An analysis leaves the process's garbage collector as it was. A trace freezes what exists before it (so that the
collection at its end walks the trace's own objects only) and thaws it after; where the process had frozen objects of
its own (gc.freeze() in a user's or a server's start-up) they stay frozen, and where it had none, none are left
frozen. Both for a training step's trace and for a generation plan's."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpumem_kernel.analysis import analyze, plan_generation  # noqa: E402

GPT2 = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "gpt2" / "config.json"


def _training_step() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    report = analyze(model, batch_size=4, input=(16,), target="A100-40GB")
    assert report.peak_bytes > 0


def _generation() -> None:
    config = transformers.AutoConfig.from_pretrained(str(GPT2))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    plan = plan_generation(model, prompt=16, new=4)
    assert plan.decode_peak_bytes > 0


ANALYSES = {"training step": _training_step, "generation": _generation}


@pytest.fixture(autouse=True)
def nothing_frozen_after() -> Iterator[None]:
    """Nothing frozen after the test, as the other tests of this process expect: with objects frozen, the collector
    runs its full collections at other moments."""
    yield
    gc.unfreeze()


@pytest.mark.parametrize("name", list(ANALYSES))
def test_objects_the_process_froze_stay_frozen(name: str) -> None:
    held = [object()]
    held.append(held)  # a cycle: tracked by the collector
    gc.freeze()
    assert not any(o is held for o in gc.get_objects())  # the collector's generations leave the frozen out
    ANALYSES[name]()
    # still frozen (the count itself may fall: a frozen object that dies leaves the permanent generation)
    assert gc.get_freeze_count() > 0
    assert not any(o is held for o in gc.get_objects())


@pytest.mark.parametrize("name", list(ANALYSES))
def test_with_nothing_frozen_nothing_is_left_frozen(name: str) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    ANALYSES[name]()
    assert gc.get_freeze_count() == 0
