"""The recorded timeline without a GPU: PyTorch's snapshot dict → History, and the recorder's control flow.

The snapshot in fixtures/training_step.snapshot.json stands in for a GPU: it is written in the exact format of
`torch.cuda.memory._snapshot()` (torch 2.13: segments with their blocks, `device_traces` with `alloc`,
`free_requested`, `free_completed`, `segment_alloc`, `oom` entries, frames innermost first, `time_us`), and
each test that reads it first feeds it through torch's own readers of that format
(`torch.cuda._memory_viz.segsum` and `trace`), so a fixture that drifted from PyTorch's format fails there.
The real path (a recorded training step on a GPU) is tests/timeline/test_recorded_gpu.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from gpumem_kernel.timeline import recorded
from gpumem_kernel.timeline.history import History

FIXTURES = Path(__file__).parent / "fixtures"
MiB = 1 << 20


def load(name: str = "training_step.snapshot.json") -> Dict[str, Any]:
    snapshot = json.loads((FIXTURES / name).read_text())
    memory_viz = pytest.importorskip("torch.cuda._memory_viz")
    assert "total_reserved: 30.0MiB" in memory_viz.segsum(snapshot)  # torch's own reader accepts it
    assert "raise OutOfMemoryError" in memory_viz.trace(snapshot)
    return snapshot


def allocated_at(history: History, index: int) -> int:
    """Bytes alive just after event `index` (an allocation counts from its start, a free from its end)."""
    alive = sum(a.size for a in history.allocs if a.start <= index and (a.end is None or a.end > index))
    return history.baseline + alive


def test_events_are_trace_positions_and_frees_end_at_the_request() -> None:
    history = recorded.history_from_snapshot(load(), title="In [12]")
    assert history.source == "recorded" and history.title == "In [12]" and history.device_index == 0
    assert history.end == 21  # every trace entry is one index
    by_start = {a.start: a for a in history.allocs if a.start > 0}
    assert by_start[2].end == 10 and by_start[3].end == 8  # free_requested, not free_completed
    assert by_start[19].end is None and by_start[15].end is None


def test_sizes_are_the_allocators_blocks() -> None:
    history = recorded.history_from_snapshot(load())
    by_start = {a.start: a for a in history.allocs if a.start > 0}
    assert (by_start[1].size, by_start[1].requested) == (1024, 1000)  # alive: the snapshot's block
    assert (by_start[4].size, by_start[4].requested) == (512, 4)  # freed: rounded up to 512 bytes


def test_baseline_is_what_was_alive_before_and_never_freed() -> None:
    history = recorded.history_from_snapshot(load())
    assert history.baseline == 4 * MiB  # the parameter block at the segment's start: no alloc in the trace
    # A block allocated before the recording and freed in it: alive from index 0 to its free, no frames.
    orphan = [a for a in history.allocs if a.start == 0]
    assert len(orphan) == 1 and orphan[0].end == 12 and orphan[0].size == 2 * MiB and orphan[0].frames == ()
    assert any("allocated before the history began" in note for note in history.notes)


def test_peak_and_end_agree_with_the_snapshots_segments() -> None:
    snapshot = load()
    history = recorded.history_from_snapshot(snapshot)
    series = [allocated_at(history, i) for i in range(history.end)]
    live = sum(b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert series[-1] == live == 18 * MiB + 1024
    assert max(series) == live and series.index(max(series)) == 19
    assert series[0] == 6 * MiB  # baseline + the block freed at 12


def test_reserved_steps_from_segment_events() -> None:
    history = recorded.history_from_snapshot(load())
    assert history.reserved == [(0, 20 * MiB), (0, 22 * MiB), (14, 30 * MiB)]


def test_the_oom_entry_is_the_failed_allocation() -> None:
    history = recorded.history_from_snapshot(load())
    assert history.failed is not None
    assert history.failed.size == 8 << 30 and history.failed.device_free == 300 * MiB
    assert history.failed.frames[0].name == "forward"


def test_categories_from_frames_and_lifetime() -> None:
    history = recorded.history_from_snapshot(load())
    by_start = {a.start: a.category for a in history.allocs if a.start > 0}
    assert by_start == {
        1: "other",  # its line (x.to("cuda")) is in a cell file this machine lacks: see the next test
        2: "activation",
        3: "activation",
        4: "other",  # backward's temporary
        5: "gradient",  # no Python frames (autograd's thread) and alive after
        15: "optimizer_state",
        16: "other",  # the optimizer's temporary
        19: "activation",
    }
    assert any("heuristic" in note for note in history.notes)


def test_the_input_line_is_read_from_the_cell(tmp_path: Path) -> None:
    source = tmp_path / "cell.py"
    source.write_text("import torch\nx = batch\nx = x.to('cuda', non_blocking=True)\n")
    frames = (recorded.RawFrame(str(source), 3, "<module>"),)
    assert recorded.categorize(frames, True) == "input"
    assert recorded.categorize((recorded.RawFrame(str(source), 2, "<module>"),), True) == "other"


def test_a_full_ring_buffer_says_what_it_lost() -> None:
    snapshot = load()
    kept = copy.deepcopy(snapshot)
    kept["device_traces"][0] = kept["device_traces"][0][6:]  # the first 6 entries were overwritten
    history = recorded.history_from_snapshot(kept, events_dropped=4)
    assert history.events_dropped == 4 and any("dropped 4 events" in n for n in history.notes)
    # The activations' allocations were lost: their frees count them from index 0, without frames.
    from_start = sorted(a.size for a in history.allocs if a.start == 0)
    assert from_start == [512, 2 * MiB, 3 * MiB, 3 * MiB]
    unknown = recorded.history_from_snapshot(kept, max_entries=len(kept["device_traces"][0]))
    assert unknown.events_dropped == 0 and any("earlier events may be lost" in n for n in unknown.notes)


def test_dropped_counts_from_the_allocator_counters() -> None:
    trace = [{"action": "alloc"}, {"action": "free_requested"}, {"action": "free_completed"}]
    assert recorded.dropped((10, 5), (14, 8), trace) == 5
    assert recorded.dropped(None, (14, 8), trace) is None


def test_another_device_is_named_in_the_notes() -> None:
    snapshot = load()
    snapshot["device_traces"].append(copy.deepcopy(snapshot["device_traces"][0][:2]))
    history = recorded.history_from_snapshot(snapshot, 0)
    assert any("devices 1 also have history" in n for n in history.notes)
    other = recorded.history_from_snapshot(snapshot, 1)
    assert other.end == 2 and other.device_index == 1


def test_alive_groups_are_the_snapshots_blocks_by_source_line() -> None:
    groups = recorded.alive_groups(load())
    assert [g.size for g in groups] == sorted((g.size for g in groups), reverse=True)
    assert sum(g.size for g in groups) == 18 * MiB + 1024
    categories = {g.category for g in groups}
    assert {"parameter", "optimizer_state", "activation"} <= categories


# --- the recorder's control flow, with a stand-in for torch -------------------------------------------------


class FakeMemory:
    def __init__(self, snapshot: Dict[str, Any], fail_snapshot: bool = False) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.snapshot = snapshot
        self.fail_snapshot = fail_snapshot

    def _record_memory_history(self, enabled: Any = "all", **kwargs: Any) -> None:
        self.calls.append({"enabled": enabled, **kwargs})

    def _snapshot(self) -> Dict[str, Any]:
        if self.fail_snapshot:
            raise RuntimeError("snapshot failed")
        return copy.deepcopy(self.snapshot)


def fake_torch(memory: FakeMemory) -> Any:
    props = SimpleNamespace(name="Stand-in GPU", total_memory=16 << 30)
    cuda = SimpleNamespace(
        memory=memory,
        current_device=lambda: 0,
        memory_stats=lambda device: {"allocation.all.allocated": 0, "allocation.all.freed": 0},
        get_device_properties=lambda device: props,
    )
    return SimpleNamespace(cuda=cuda, __version__="2.13.0+stand-in", _C=SimpleNamespace())


@pytest.fixture
def with_cuda(monkeypatch: pytest.MonkeyPatch):
    def install(memory: FakeMemory) -> Any:
        torch = fake_torch(memory)
        monkeypatch.setattr(recorded, "cuda_initialised", lambda: True)
        monkeypatch.setattr(recorded, "loaded_torch", lambda: torch)
        return torch

    return install


def test_the_recorder_starts_bounded_and_stops_even_when_the_block_raises(with_cuda) -> None:
    memory = FakeMemory(load())
    with_cuda(memory)
    rec = recorded.TimelineRecorder(max_entries=500, quiet=True)
    with pytest.raises(ValueError, match="the user's own error"):
        with rec:
            raise ValueError("the user's own error")
    assert memory.calls[0] == {
        "enabled": "all",
        "context": "all",
        "stacks": "python",
        "max_entries": 500,
        "clear_history": True,
    }
    assert memory.calls[-1] == {"enabled": None}
    assert rec.history is not None and rec.history.device_name == "Stand-in GPU"
    assert rec.timeline_id is not None and rec.timeline_id.startswith("tl-")
    from gpumem_kernel.timeline.store import STORE

    assert STORE.get(rec.timeline_id) is rec.history


def test_a_failed_snapshot_still_stops_the_recording(with_cuda) -> None:
    memory = FakeMemory(load(), fail_snapshot=True)
    with_cuda(memory)
    lines: List[str] = []
    with recorded.TimelineRecorder(printer=lines.append) as rec:
        pass
    assert memory.calls[-1] == {"enabled": None}
    assert rec.history is None
    assert lines == ["gpumem: could not take the allocator snapshot: RuntimeError: snapshot failed"]


def test_without_cuda_one_line_and_the_block_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: False)
    lines: List[str] = []
    ran = []
    with recorded.TimelineRecorder(printer=lines.append) as rec:
        ran.append(1)
    assert ran == [1] and lines == [recorded.NOT_IN_USE] and rec.payload() is None
    with pytest.raises(RuntimeError, match="CUDA is not in use"):
        rec.save("x.pickle")


def test_a_torch_without_the_private_api_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = SimpleNamespace(cuda=SimpleNamespace(memory=SimpleNamespace()), __version__="1.13.1")
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: True)
    monkeypatch.setattr(recorded, "loaded_torch", lambda: torch)
    lines: List[str] = []
    with recorded.TimelineRecorder(printer=lines.append):
        pass
    assert lines == [recorded.NO_API.format(version="1.13.1")]


def test_record_timeline_is_in_the_package_api() -> None:
    import gpumem_kernel

    assert gpumem_kernel.record_timeline is recorded.record_timeline
    with pytest.raises(ValueError):
        recorded.record_timeline(max_entries=0)


def test_torch_on_this_machine_never_gets_cuda_initialised() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU tests cover the real path")
    with recorded.record_timeline() as rec:
        torch.ones(3)
    assert rec.history is None and not torch.cuda.is_initialized()


def test_the_recorded_payload_fits_the_timeline_schema() -> None:
    payloads = pytest.importorskip("gpumem_kernel.timeline.payload")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(recorded.__file__).parents[1] / "wire/schemas/timeline.schema.json").read_text())
    history = recorded.history_from_snapshot(load(), title="In [12]")
    payload = recorded.timeline_payload(history, "tl-0123456789abcdef")
    jsonschema.validate(payload, schema)
    assert payload["peak"]["bytes"] == 18 * MiB + 1024 and payload["baseline"] == 4 * MiB
    assert payload["failed"]["size"] == 8 << 30
    assert payloads.TIMELINE_MIME in recorded.timeline_bundle(payload)


def test_an_allocation_without_frames_at_the_first_entry_is_still_categorised() -> None:
    trace = [{"action": "alloc", "addr": 4096, "size": 1 << 20, "stream": 0, "frames": []}]
    history = recorded.history_from_snapshot({"segments": [], "device_traces": [trace]})
    assert [(a.start, a.end, a.category) for a in history.allocs] == [(0, None, "gradient")]
