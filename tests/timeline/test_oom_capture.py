"""The OOM capture without a GPU: the checklist's `alive` field from an allocator snapshot taken at the error,
the step "Re-run this cell with the timeline on" when nothing was captured, and the setting travelling
through the comm's `configure` into a real kernel.

The snapshot is fixtures/training_step.snapshot.json, a stand-in for a GPU in PyTorch's exact format (checked
by torch's own _memory_viz in test_recorded.load). The real capture of a provoked OOM is
tests/timeline/test_recorded_gpu.py.
"""

from __future__ import annotations

import json
from typing import Any, Dict

import jsonschema
import pytest

from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.rerun import RERUN_AFTER, RERUN_STEP_ID, timeline_rerun_code
from gpumem_kernel.timeline import capture
from gpumem_kernel.timeline.store import STORE
from gpumem_kernel.wire.protocol import load_payload_schema
from kernel_harness import KernelHarness

MiB = 1 << 20
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which "
    "300.00 MiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 120.00 MiB is "
    "reserved by PyTorch but unallocated."
)
CELL = "for batch in loader:\n    loss = model(batch.to('cuda')).sum()\n    loss.backward()"


def _validate(payload: Dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(payload)


@pytest.fixture
def cap() -> capture.Capture:
    """A kernel's capture, as the loaded extension owns one."""
    return capture.Capture()


@pytest.fixture
def captured(cap: capture.Capture, monkeypatch: pytest.MonkeyPatch):
    """The capture on, recording, with the observer's snapshot of the fixture pending."""
    from test_recorded import load

    monkeypatch.setattr(cap, "enabled", True)
    monkeypatch.setattr(cap, "recording", True)
    pending = capture.Pending(load(), 0, 8 << 30, 300 * MiB, __import__("time").time(), "observer")
    monkeypatch.setattr(cap, "pending", pending)
    return pending


def test_alive_at_oom_lists_the_top_holders_with_their_lines(cap: capture.Capture, captured) -> None:
    alive = cap.alive_at_oom(8 << 30, 0, "In [12], out of memory")
    assert alive is not None
    assert alive["allocated"] == 18 * MiB + 1024 and alive["blocks"] == 5 and alive["device"] == 0
    sizes = [h["size"] for h in alive["holders"]]
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) == alive["allocated"] and alive["rest"] is None
    by_category = {h["category"]: h for h in alive["holders"]}
    assert by_category["activation"]["source"] == {
        "file": "/tmp/ipykernel_4242/2871635221.py",
        "line": 7,
        "name": "train_step",
        "cell": None,
        "user": True,
    }
    assert by_category["parameter"]["size"] == 4 * MiB
    assert alive["failed"]["size"] == 8 << 30 and alive["failed"]["device_free"] == 300 * MiB
    assert alive["failed"]["source"]["line"] == 7
    history = STORE.get(alive["timeline_id"])
    assert history is not None and history.failed is not None and history.title == "In [12], out of memory"
    assert cap.pending is None  # one error, one snapshot


def test_the_checklist_carries_alive_and_no_rerun_step(cap: capture.Capture, captured) -> None:
    bundle = checklist_bundle(f"torch.OutOfMemoryError: {OOM_MESSAGE}", sample={}, capture=cap.alive_at_oom, cell=CELL)
    payload = bundle[OOM_MIME]
    _validate(payload)
    assert payload["alive"]["allocated"] == 18 * MiB + 1024
    assert RERUN_STEP_ID not in [s["id"] for s in payload["steps"]]
    assert "What was alive at the error: 18.00 MiB in 5 blocks:" in bundle["text/plain"]
    assert "What was alive at the error" in bundle["text/html"]


def test_without_a_capture_the_rerun_step_copies_the_cell(
    cap: capture.Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cap, "enabled", False)
    bundle = checklist_bundle(f"torch.OutOfMemoryError: {OOM_MESSAGE}", sample={}, capture=cap.alive_at_oom, cell=CELL)
    payload = bundle[OOM_MIME]
    _validate(payload)
    assert "alive" not in payload
    ids = [s["id"] for s in payload["steps"]]
    step = payload["steps"][ids.index(RERUN_STEP_ID)]
    assert step["action"] == "insert-cell" and step["code"] == "%%gpumem --timeline\n" + CELL
    assert step["title"] == "Re-run this cell with the timeline on" and step["not_applicable"] is None
    # After the first fixes (the panel's brief stays fixes), and after "Clear GPU memory": free memory first.
    assert ids.index(RERUN_STEP_ID) == RERUN_AFTER
    assert ids.index("clear") < ids.index(RERUN_STEP_ID)


def test_the_rerun_code() -> None:
    assert timeline_rerun_code("x = 1") == "%%gpumem --timeline\nx = 1"
    assert timeline_rerun_code("%%gpumem --device 1\nx = 1") == "%%gpumem --device 1 --timeline\nx = 1"
    assert timeline_rerun_code("%%gpumem --timeline\nx = 1") is None  # it already records
    assert timeline_rerun_code("%%time\nx = 1") == "%%gpumem --timeline\n%%time\nx = 1"
    assert timeline_rerun_code("") is None and timeline_rerun_code(None) is None
    assert timeline_rerun_code("x\n" * 20_000) is None


def test_an_old_observer_snapshot_is_not_this_errors(
    cap: capture.Capture, captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured.time -= capture.PENDING_SECONDS + 1
    monkeypatch.setattr(capture, "_torch", lambda: None)  # and none can be taken now (no CUDA here)
    assert cap.alive_at_oom(1, 0) is None


def test_off_or_without_cuda_the_hooks_record_nothing(cap: capture.Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cap, "enabled", True)
    monkeypatch.setattr(cap, "depth", 0)
    monkeypatch.setattr(capture, "cuda_initialised", lambda: False)
    cap.pre_run_cell()
    assert not cap.recording and cap.problem == "CUDA was not in use when the cell started"
    cap.post_run_cell()
    cap.set_enabled(False)
    cap.pre_run_cell()
    assert not cap.recording and cap.alive_at_oom(1, 0) is None
    cap.post_run_cell()
    assert cap.depth == 0


def _fake_cuda(cap: capture.Capture, monkeypatch: pytest.MonkeyPatch, history_on: bool = False):
    from test_recorded import FakeMemory, fake_torch, load

    memory = FakeMemory(load())
    torch = fake_torch(memory)
    torch._C._cuda_isHistoryEnabled = lambda: history_on
    monkeypatch.setattr(capture, "cuda_initialised", lambda: True)
    monkeypatch.setattr(capture, "loaded_torch", lambda: torch)
    monkeypatch.setattr(cap, "observer", True)
    monkeypatch.setattr(cap, "enabled", True)
    monkeypatch.setattr(cap, "depth", 0)
    return memory, torch


def test_a_cell_run_inside_a_cell_does_not_stop_the_recording(
    cap: capture.Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory, _ = _fake_cuda(cap, monkeypatch)
    cap.pre_run_cell()  # the cell
    cap.pre_run_cell()  # %%gpumem's nested run_cell
    cap.post_run_cell()
    assert cap.recording and [c["enabled"] for c in memory.calls] == ["all"]
    cap.post_run_cell()
    assert not cap.recording and memory.calls[-1] == {"enabled": None}
    cap.set_enabled(False)


def test_the_users_own_recording_is_left_alone(cap: capture.Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumem_kernel.timeline import recorded

    memory, torch = _fake_cuda(cap, monkeypatch, history_on=True)
    cap.pre_run_cell()
    assert not cap.recording and "already recording" in (cap.problem or "")
    cap.post_run_cell()
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: True)
    monkeypatch.setattr(recorded, "loaded_torch", lambda: torch)
    lines = []
    with recorded.TimelineRecorder(printer=lines.append) as rec:
        pass
    assert lines == [recorded.ALREADY] and rec.history is None and memory.calls == []
    cap.set_enabled(False)


def test_the_hooks_start_and_stop_a_bounded_history(cap: capture.Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_recorded import FakeMemory, fake_torch, load

    memory = FakeMemory(load())
    torch = fake_torch(memory)
    attached = []
    torch._C._cuda_attach_out_of_memory_observer = attached.append
    monkeypatch.setattr(capture, "cuda_initialised", lambda: True)
    monkeypatch.setattr(capture, "loaded_torch", lambda: torch)
    monkeypatch.setattr(cap, "observer", False)
    monkeypatch.setattr(cap, "enabled", True)
    monkeypatch.setattr(cap, "depth", 0)
    cap.pre_run_cell()
    assert cap.recording and memory.calls[-1]["max_entries"] == capture.MAX_ENTRIES
    assert memory.calls[-1]["clear_history"] is True and attached == [cap._on_oom]
    cap._on_oom(0, 8 << 30, 0, 300 * MiB)  # what the allocator calls before raising
    assert cap.pending is not None and cap.pending.size == 8 << 30
    cap.post_run_cell()  # the cell caught that OOM itself: its snapshot ends with the cell
    assert not cap.recording and memory.calls[-1] == {"enabled": None}
    assert cap.pending is None
    cap.set_enabled(False)


@pytest.mark.kernel
def test_the_setting_travels_through_configure_into_a_real_kernel() -> None:
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm_id = kernel.open_comm({"type": "open", "protocol": 1, "client": "pytest"})
        hello = kernel.wait_comm(comm_id, "hello")
        assert "oom_timeline" in hello["capabilities"]
        state = "__import__('gpumem_kernel.extension').extension.current().capture.enabled"
        assert kernel.evaluate(state) is False  # off by default

        def configure(args: Dict[str, Any], request_id: str) -> Dict[str, Any]:
            start = len(kernel.messages())
            kernel.send_comm(comm_id, {"type": "request", "id": request_id, "action": "configure", "args": args})
            found = kernel.wait_for(lambda r: (r.comm_data(comm_id) or {}).get("id") == request_id, 15, start)
            return found.comm_data(comm_id)

        assert configure({"oom_timeline": True}, "r-1")["type"] == "reply"
        assert kernel.evaluate(state) is True
        bad = configure({"oom_timeline": "yes"}, "r-2")
        assert bad["type"] == "error" and bad["code"] == "bad-request" and "oom_timeline" in bad["message"]

        # On, but CUDA is not in use here: the error's checklist offers the re-run step instead.
        cell = f"raise RuntimeError({OOM_MESSAGE!r})"
        start = len(kernel.messages())
        reply = kernel.execute(cell)
        assert reply["status"] == "error"
        shown = [
            r.content["data"]
            for r in kernel.messages()[start:]
            if r.parent_id == reply["msg_id"] and r.msg_type == "display_data"
        ]
        payload = shown[0][OOM_MIME]
        _validate(payload)
        assert "alive" not in payload
        step = next(s for s in payload["steps"] if s["id"] == RERUN_STEP_ID)
        assert step["code"] == "%%gpumem --timeline\n" + cell

        assert configure({"oom_timeline": False}, "r-3")["type"] == "reply"
        assert kernel.evaluate(state) is False
        json.dumps(payload)
