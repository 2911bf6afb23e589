"""Where the predicted timeline says an allocation came from: the innermost frame it shows is the code that asked
for the memory (the user's line, torch's operator, the analysis's input maker), never the analysis's own storage
tracker or trace dispatch, wherever those modules sit in gpumem_kernel/analysis/."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

import timeline_model  # noqa: E402
from gpumem_kernel.timeline.payload import source_text  # noqa: E402
from gpumem_kernel.timeline.predicted import predict_timeline  # noqa: E402

ANALYSIS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "gpumem_kernel")
TRACKER = ("storage.py", "tracker.py", "trace_tracker.py", "cuda_kernels.py")


@pytest.fixture(scope="module")
def payload():
    timeline = predict_timeline(timeline_model.Net(), batch_size=16, input=(256,), loss=timeline_model.loss)
    return timeline.payload.to_dict()


def test_no_stack_begins_in_the_tracker(payload):
    inner = [stack["frames"][0] for stack in payload["stacks"] if stack["frames"]]
    assert inner
    mine = [f for f in inner if f["file"].startswith(ANALYSIS) and os.path.basename(f["file"]) in TRACKER]
    assert mine == []


def test_no_row_alive_at_the_peak_names_the_tracker(payload):
    rows = [source_text(payload, holder.get("stack")) for holder in payload["alive_at_peak"] if not holder.get("rest")]
    assert rows and not any(name in row for row in rows for name in TRACKER), rows
    assert any(row.startswith("timeline_model.py:") or "timeline_model.py:" in row for row in rows), rows
