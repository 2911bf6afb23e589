"""The OOM capture (JupyterLab setting "oomTimeline", off by default; sent with the comm's `configure`).

When on, and once the user's code has initialised CUDA, every cell runs with PyTorch's allocator history
recording (Python stacks, a ring buffer of MAX_ENTRIES entries, cleared at each cell's start), started in
IPython's pre_run_cell and stopped in post_run_cell. At an out-of-memory error the snapshot is taken:
from the allocator's OOM observer (`torch._C._cuda_attach_out_of_memory_observer`, called before the
exception unwinds, so the failing operation's temporaries are still there) where this torch has it, else when
the OOM handler sees the exception. `alive_at_oom()` turns it into the checklist's `alive` field (the top
holders with their source lines, the failed allocation) and keeps the full History for the timeline.

Cost, per PyTorch's docs: about 2 µs per allocation event for the Python stack, plus the ring buffer's memory
("several KB" per entry at most). Nothing here initialises CUDA; the private APIs are guarded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.probe.torchstats import cuda_initialised, loaded_torch
from gpumem_kernel.timeline import recorded
from gpumem_kernel.timeline.history import Failed, RawFrame

MAX_ENTRIES = 20_000  # the bounded history kept while a cell runs
TOP_HOLDERS = 10
PENDING_SECONDS = 120.0  # an observer's snapshot older than this belongs to another error


@dataclass
class Pending:
    snapshot: Dict[str, Any]
    device: Optional[int]
    size: Optional[int]
    device_free: Optional[int]
    time: float
    where: str  # "observer" | "exception"


class Capture:
    """One kernel's capture (owned by the loaded extension): the setting, the recording, the pending snapshot.
    Its cell hooks run on the main thread; the comm sets `enabled` from its own thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enabled = False
        self.recording = False
        self.observer = False  # attached (PyTorch has no detach: the callback checks `enabled`)
        self.pending: Optional[Pending] = None
        self.problem: Optional[str] = None  # why nothing is recorded although enabled (one line)
        self.depth = 0  # cells running: a magic's nested run_cell (%%gpumem) must not stop the outer recording

    def set_enabled(self, on: bool) -> None:
        """The setting: a flag only (the comm may call this on its own thread while a cell runs); the recording
        starts at the next cell's start and a running one stops at its cell's end, both on the main thread."""
        self.enabled = bool(on)
        if not on:
            self.pending = None

    def pre_run_cell(self, *_: Any) -> None:
        """IPython hook: start the bounded history for this cell (only when on and CUDA is already in use). A
        cell run inside a cell (a cell magic's run_cell) changes nothing."""
        self.depth += 1
        if self.depth > 1 or not self.enabled or self.recording:
            return
        torch = _torch()
        if torch is None:
            self.problem = "CUDA was not in use when the cell started"
            return
        self.problem = recorded.history_api(torch)
        if self.problem is not None:
            return
        if recorded.history_enabled(torch):  # the user records the allocator history: not ours to restart or stop
            self.problem = "PyTorch's allocator history is already recording (yours)"
            return
        try:
            recorded.start_history(torch, MAX_ENTRIES, clear=True)
            self.recording = True
        except Exception as exc:
            self.problem = f"could not start the allocator history: {type(exc).__name__}: {exc}".splitlines()[0]
            return
        self._attach_observer(torch)

    def post_run_cell(self, *_: Any) -> None:
        """IPython hook: stop the history at the outermost cell's end (no cost between cells)."""
        self.depth = max(0, self.depth - 1)
        if self.depth > 0:
            return
        self.pending = None  # an OOM the cell caught itself: its snapshot is no later error's
        if not self.recording:
            return
        self.recording = False
        torch = loaded_torch()
        if torch is not None:
            try:
                recorded.stop_history(torch)
            except Exception:
                pass

    def close(self) -> None:
        """The extension unloads: a recording the capture started ends with it, even inside a running cell."""
        self.depth = 1
        self.post_run_cell()

    def pause(self) -> Optional[Callable[[], None]]:
        """A recorder takes the history over for its block (recorded.PAUSERS): returns what resumes the
        capture's own recording afterwards (None when the capture is not recording)."""
        if not self.recording:
            return None
        torch = loaded_torch()

        def resume() -> None:
            if self.recording and torch is not None:
                try:
                    recorded.start_history(torch, MAX_ENTRIES, clear=False)
                except Exception:
                    self.recording = False

        return resume

    def _attach_observer(self, torch: Any) -> None:
        if self.observer:
            return
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        try:
            attach(self._on_oom)
            self.observer = True
        except Exception:
            pass

    def _on_oom(self, device: Any, alloc: Any, device_allocated: Any = None, device_free: Any = None) -> None:
        """PyTorch's OOM observer: called by the allocator when it gives up, before the exception unwinds (the
        allocator's lock is released first, so taking a snapshot here is allowed, as PyTorch's docs show)."""
        if not (self.enabled and self.recording):
            return
        torch = loaded_torch()
        if torch is None:
            return
        try:
            snapshot = torch.cuda.memory._snapshot()
        except Exception:
            return
        self.pending = Pending(snapshot, _int(device), _int(alloc), _int(device_free), time.time(), "observer")

    def _take(self, tried: Optional[int], device: Optional[int]) -> Optional[Pending]:
        """The snapshot of this error: the observer's, else one taken now (the handler runs while the traceback
        still holds the failed call's tensors)."""
        pending, self.pending = self.pending, None
        if pending is not None and time.time() - pending.time <= PENDING_SECONDS:
            return pending
        torch = _torch()
        if torch is None or not self.recording:
            return None
        try:
            snapshot = torch.cuda.memory._snapshot()
        except Exception:
            return None
        return Pending(snapshot, device, tried, None, time.time(), "exception")

    def alive_at_oom(
        self, tried: Optional[int] = None, device: Optional[int] = None, title: str = ""
    ) -> Optional[Dict[str, Any]]:
        """The OOM checklist's `alive` field (oom.schema.json), or None when the capture is off or recorded
        nothing for this error. Keeps the full History in the timeline store under the returned `timeline_id`."""
        if not self.enabled:
            return None
        pending = self._take(tried, device)
        return None if pending is None else _alive(pending, title)


def _torch() -> Any:
    return loaded_torch() if cuda_initialised() else None


def _int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _frame_json(frame: Optional[RawFrame]) -> Optional[Dict[str, Any]]:
    if frame is None:
        return None
    from gpumem_kernel.probe.cells import cell_of

    return {"file": frame.file, "line": int(frame.line), "name": frame.name, "cell": cell_of(frame.file)}


def _source(frames: Any) -> Optional[Dict[str, Any]]:
    from gpumem_kernel.timeline.frames import source_index

    if not frames:
        return None
    index = source_index(frames)
    source = _frame_json(frames[index] if index is not None else frames[0]) or {}
    source["user"] = index is not None
    return source


def _alive(pending: Pending, title: str) -> Dict[str, Any]:
    """The `alive` field of one error's snapshot; its full History goes to the timeline store."""
    from gpumem_kernel.timeline.store import STORE

    index = recorded.pick_device(pending.snapshot, pending.device)
    failed = Failed(pending.size, pending.device_free) if pending.size is not None else None
    history = recorded.history_from_snapshot(
        pending.snapshot, index, title=title or "out of memory", failed=failed, max_entries=MAX_ENTRIES
    )
    timeline_id = STORE.add(history)
    groups = recorded.alive_groups(pending.snapshot, index)
    top = groups[:TOP_HOLDERS]
    rest = groups[TOP_HOLDERS:]
    notes: List[str] = []
    if pending.where == "exception":
        notes.append(
            "taken when the error reached the handler (this torch has no OOM observer): the failing operation's "
            "own temporaries were already freed"
        )
    if any(not g.frames for g in groups):
        notes.append(
            "blocks without a source line were allocated while no history was recorded (before the capture was "
            "on, or in the cell that first used CUDA)"
        )
    notes.append(recorded.CATEGORY_NOTE)
    fail = history.failed
    return {
        "timeline_id": timeline_id,
        "device": index,
        "allocated": sum(g.size for g in groups),
        "blocks": sum(g.count for g in groups),
        "holders": [
            {"size": g.size, "count": g.count, "category": g.category, "source": _source(g.frames)} for g in top
        ],
        "rest": {"size": sum(g.size for g in rest), "count": sum(g.count for g in rest)} if rest else None,
        "failed": None
        if fail is None
        else {"size": fail.size, "device_free": fail.device_free, "source": _source(fail.frames)},
        "notes": notes,
    }
