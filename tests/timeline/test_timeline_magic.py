"""`%%gpumem --timeline` without a GPU: one clear line and the cell runs as it would; the user's error is
shown once, with its own traceback, and still fails the cell. With a stand-in torch (its snapshot is
fixtures/training_step.snapshot.json, PyTorch's format): the timeline is displayed after the cell, also after
a failing one. The real recording is tests/timeline/test_recorded_gpu.py."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.timeline import recorded
from kernel_harness import KernelHarness, plain_lines

TIMELINE_MIME = "application/vnd.gpumem.timeline.v1+json"


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("gpumem_kernel")
    yield shell
    shell.extension_manager.unload_extension("gpumem_kernel")


def run(ip, code: str):
    with capture_output() as captured:
        result = ip.run_cell(code)
    return result, captured


def test_without_cuda_one_line_and_the_cell_runs(ip, monkeypatch) -> None:
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: False)
    result, captured = run(ip, "%%gpumem --timeline\nvalue = 6 * 7\nprint('ran', value)")
    assert result.success
    assert captured.stdout.splitlines() == [recorded.NOT_IN_USE, "ran 42"]
    assert not [o for o in captured.outputs if TIMELINE_MIME in o.data]
    assert ip.user_ns["value"] == 42


def test_without_cuda_the_users_error_still_fails_the_cell(ip, monkeypatch) -> None:
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: False)
    result, captured = run(ip, "%%gpumem --timeline\nraise KeyError('mine')")
    assert not result.success and isinstance(result.error_in_exec, KeyError)
    assert recorded.NOT_IN_USE in captured.stdout


def test_bad_options_are_one_usage_line(ip) -> None:
    result, captured = run(ip, "%%gpumem --timeline --max-entries 0\npass")
    assert not result.success
    assert "max-entries" in captured.stderr + captured.stdout + str(result.error_in_exec)


def _stand_in(monkeypatch):
    from test_recorded import FakeMemory, fake_torch, load

    memory = FakeMemory(load())
    torch = fake_torch(memory)
    monkeypatch.setattr(recorded, "cuda_initialised", lambda: True)
    monkeypatch.setattr(recorded, "loaded_torch", lambda: torch)
    return memory


def test_with_a_recording_the_timeline_follows_the_cell(ip, monkeypatch) -> None:
    pytest.importorskip("gpumem_kernel.timeline.payload")
    memory = _stand_in(monkeypatch)
    result, captured = run(ip, "%%gpumem --timeline --max-entries 5000\nprint('step')")
    assert result.success and captured.stdout.strip() == "step"
    assert memory.calls[0]["max_entries"] == 5000 and memory.calls[-1] == {"enabled": None}
    shown = [o.data for o in captured.outputs if TIMELINE_MIME in o.data]
    assert len(shown) == 1
    payload = shown[0][TIMELINE_MIME]
    assert payload["source"] == "recorded" and payload["title"].startswith("In [")
    assert payload["peak"]["bytes"] == 18 * (1 << 20) + 1024


def test_with_a_recording_a_failing_cell_shows_its_error_then_the_timeline(ip, monkeypatch) -> None:
    pytest.importorskip("gpumem_kernel.timeline.payload")
    memory = _stand_in(monkeypatch)
    result, captured = run(ip, "%%gpumem --timeline\nx = 1\nraise ValueError('the user error')")
    assert not result.success and isinstance(result.error_in_exec, ValueError)
    assert memory.calls[-1] == {"enabled": None}  # stopped although the cell raised
    assert len([o for o in captured.outputs if TIMELINE_MIME in o.data]) == 1


@pytest.mark.kernel
def test_in_a_real_kernel_without_cuda() -> None:
    with KernelHarness() as kernel:
        kernel.bootstrap()
        reply = kernel.execute("%%gpumem --timeline\nprint('ran')")
        assert reply["status"] == "ok"
        text = "".join(
            r.content.get("text", "")
            for r in kernel.messages()
            if r.parent_id == reply["msg_id"] and r.msg_type == "stream"
        )
        assert text.splitlines() == [recorded.NOT_IN_USE, "ran"]
        failing = kernel.execute("%%gpumem --timeline\ndef inner():\n    raise ValueError('boom')\ninner()")
        assert (failing["status"], failing["ename"], failing["evalue"]) == ("error", "ValueError", "boom")
        assert any("inner()" in line for line in plain_lines(failing["traceback"]))
        assert not any("gpumem_kernel" in line for line in failing["traceback"])


def test_with_the_oom_capture_on_the_cell_records_its_own_and_the_capture_resumes(ip, monkeypatch) -> None:
    pytest.importorskip("gpumem_kernel.timeline.payload")
    from gpumem_kernel.timeline import capture

    memory = _stand_in(monkeypatch)
    torch = recorded.loaded_torch()
    monkeypatch.setattr(capture, "cuda_initialised", lambda: True)
    monkeypatch.setattr(capture, "loaded_torch", lambda: torch)
    from gpumem_kernel import extension

    cap = extension.current().capture
    monkeypatch.setattr(cap, "observer", True)
    monkeypatch.setattr(cap, "depth", 0)
    cap.set_enabled(True)
    try:
        result, captured = run(ip, "%%gpumem --timeline\nprint('step')")
    finally:
        cap.set_enabled(False)
    assert result.success and len([o for o in captured.outputs if TIMELINE_MIME in o.data]) == 1
    calls = [(c["enabled"], c.get("max_entries"), c.get("clear_history")) for c in memory.calls]
    assert calls == [
        ("all", capture.MAX_ENTRIES, True),  # the capture, at the cell's start
        ("all", recorded.DEFAULT_MAX_ENTRIES, True),  # %%gpumem --timeline takes over
        (None, None, None),  # and stops at its end (the nested run_cell's hooks changed nothing)
        ("all", capture.MAX_ENTRIES, False),  # the capture resumes
        (None, None, None),  # and stops at the cell's end
    ]
    assert not cap.recording and cap.depth == 0
