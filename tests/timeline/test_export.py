"""The exports: PyTorch's snapshot pickle, read by torch.cuda._memory_viz's own `segsum` and `trace` (the independent
check: they must read it without error and agree with our totals), and the CSV (one row per allocation)."""

from __future__ import annotations

import csv
import io
import os
import pickle
import re

import pytest
import torch.cuda._memory_viz as memory_viz

import timeline_model
from gpumem_kernel.timeline.export import csv_text, export, save, snapshot_dict
from gpumem_kernel.timeline.history import Alloc, History, RawFrame
from gpumem_kernel.timeline.predicted import predict

OPTIONS = dict(batch_size=64, input=(256,), loss=timeline_model.loss)


@pytest.fixture(scope="module")
def history() -> History:
    return predict(timeline_model.Net(), **OPTIONS)[1]


def _alive_at_end(history: History):
    return [a for a in history.allocs if a.end is None]


def test_segsum_reads_the_snapshot_and_agrees_with_our_totals(history):
    data = pickle.loads(export(history, "snapshot").data)
    text = memory_viz.segsum(data)  # raises on any inconsistency of blocks and segments
    alive = _alive_at_end(history)
    requested = sum(a.requested for a in alive)
    assert f"total_allocated: {memory_viz.Bytes(requested)}\n" in text
    assert f"total_reserved: {memory_viz.Bytes(history.reserved[-1][1])}\n" in text
    active = [b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert len(active) == len(alive) and sum(b["size"] for b in active) == sum(a.size for a in alive)


def test_trace_reads_the_events_and_agrees_with_our_counts(history):
    data = snapshot_dict(history)
    text = memory_viz.trace(data)
    frees = sum(1 for a in history.allocs if a.end is not None)
    segments = len(data["segments"])
    assert f"{len(history.allocs) + 2 * frees + segments} entries" in text
    lines = text.splitlines()
    assert sum(1 for line in lines if re.match(r"^\w+ = cudaMalloc\(", line)) == segments
    allocs = [line for line in lines if re.match(r"^\w+ = \w+\[\d+:", line)]
    assert len(allocs) == len(history.allocs)
    assert not any(" = MEM[" in line for line in allocs)  # every address lies in a segment of the model
    assert sum(1 for line in lines if line.startswith("del ")) == frees
    # the frames are PyTorch's: {filename, line, name}, innermost first
    first = next(e for e in data["device_traces"][0] if e["action"] == "alloc" and e["frames"])
    assert set(first["frames"][0]) == {"filename", "line", "name"}


def test_the_exported_peak_is_the_history_peak(history):
    data = snapshot_dict(history)
    live = peak = 0
    for entry in data["device_traces"][0]:
        if entry["action"] == "alloc":
            live += entry["size"]
        elif entry["action"] == "free_completed":
            live -= entry["size"]
        peak = max(peak, live)
    from gpumem_kernel.timeline.payload import build_payload

    assert peak == build_payload(history, "tl-00000000").peak.bytes


def test_a_recorded_history_exports_pytorchs_own_snapshot():
    raw = {"segments": [], "device_traces": [[{"action": "oom", "size": 1, "device_free": 0}]], "extra": 1}
    history = History("recorded", "t", "GPU", 0, None, [], 1, raw_snapshot=raw)
    assert pickle.loads(export(history, "snapshot").data) == raw


def test_csv_has_one_row_per_allocation(history):
    rows = list(csv.DictReader(io.StringIO(csv_text(history))))
    assert len(rows) == len(history.allocs)
    assert list(rows[0]) == ["start", "end", "size", "category", "file", "line", "name", "cell"]
    lines = timeline_model.lines()
    helper = os.path.abspath(timeline_model.__file__)
    relu = [r for r in rows if r["file"] == helper and int(r["line"]) == lines["relu1"]]
    assert len(relu) == 2 and all(r["category"] == "activation" and r["end"] and r["cell"] == "" for r in relu)
    assert sum(int(r["size"]) for r in rows) == sum(a.size for a in history.allocs)
    assert sum(1 for r in rows if r["end"] == "") == len(_alive_at_end(history))


def test_save_picks_the_format_from_the_suffix(tmp_path, history):
    assert save(history, str(tmp_path / "step.pickle")) == "snapshot"
    assert save(history, str(tmp_path / "step.csv")) == "csv"
    assert pickle.loads((tmp_path / "step.pickle").read_bytes())["device_traces"]
    with pytest.raises(ValueError, match="--save needs a .pickle or .csv"):
        save(history, str(tmp_path / "step.txt"))


def test_a_baseline_is_one_block_alive_from_the_start():
    frames = (RawFrame("/u/x.py", 3, "f"),)
    history = History("recorded", "t", None, 0, None, [Alloc(4096, "activation", 0, 1, frames)], 2, baseline=1 << 20)
    data = snapshot_dict(history)
    assert f"total_allocated: {memory_viz.Bytes(1 << 20)}" in memory_viz.segsum(data)
    with pytest.raises(ValueError):
        export(history, "json")


def test_a_file_too_large_for_the_browser_is_refused_in_one_line(history, monkeypatch):
    from gpumem_kernel.channel.comm import _timeline_export
    from gpumem_kernel.timeline import export as export_module
    from gpumem_kernel.timeline.store import STORE
    from gpumem_kernel.wire.protocol import ProtocolError, Request

    timeline_id = STORE.add(history)
    monkeypatch.setattr(export_module, "MAX_EXPORT_BYTES", 1000)
    with pytest.raises(ProtocolError) as caught:
        _timeline_export(Request("r-1", "timeline_export", {"id": timeline_id, "format": "snapshot"}))
    assert caught.value.code == "bad-request" and "\n" not in str(caught.value)
    assert f"timeline {timeline_id} makes a " in str(caught.value) and "save it in the kernel" in str(caught.value)
