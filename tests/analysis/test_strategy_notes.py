"""A sharding strategy at world size 1 shards nothing, and the report says so among its notes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.model.model_states import Sharding  # noqa: E402

NOTE = "ZeRO-3 at world size 1 shards nothing"


def test_zero3_at_world_size_1_is_noted_in_the_report():
    report = analyze(torch.nn.Linear(8, 8), batch_size=2, input=(8,), memory="16GiB", strategy="zero3")
    assert sum(NOTE in note for note in report.notes) == 1
    assert "give the number of ranks (--world-size N)" in str(report)


@pytest.mark.parametrize(
    "world_size, strategy, noted",
    [
        (1, "zero3", True),
        (1, "fsdp", True),
        (1, "zero1", True),
        (2, "zero3", False),
        (1, "ddp", False),
        (1, None, False),
    ],
)
def test_only_a_sharding_strategy_on_one_rank_gets_the_note(world_size, strategy, noted):
    notes = Sharding(world_size, strategy, largest_layer=0, gradients_total=0).notes()
    assert bool(notes) is noted
    assert all("at world size 1 shards nothing" in note for note in notes)
