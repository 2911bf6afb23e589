"""One allocation history, whatever produced it: PyTorch's CUDA allocator history of a recorded cell
(timeline.recorded) or the storages of a traced training step (timeline.predicted).

Time is the event index: every allocation and every free is one event, numbered from 0 in order, as PyTorch's
memory_viz draws it. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Tuple

Category = Literal["parameter", "gradient", "optimizer_state", "activation", "input", "other"]
CATEGORIES: Tuple[Category, ...] = ("parameter", "gradient", "optimizer_state", "activation", "input", "other")


@dataclass(frozen=True)
class RawFrame:
    """One frame as recorded, before it is classified as the user's or a library's."""

    file: str
    line: int
    name: str


@dataclass
class Alloc:
    """One storage (one tensor's memory) from its allocation to its free."""

    size: int
    category: Category
    start: int  # event index of the allocation
    end: Optional[int]  # event index of the free; None: alive at the end of the history
    frames: Tuple[RawFrame, ...] = ()  # innermost first, as PyTorch records them
    address: Optional[int] = None  # the device address (recorded); predicted: the allocator model's, if any
    requested: Optional[int] = None  # bytes asked for, when `size` is the allocator's rounded block


@dataclass
class Failed:
    """The allocation that ran out of memory (a timeline captured at an OOM)."""

    size: int
    device_free: Optional[int]
    frames: Tuple[RawFrame, ...] = ()


@dataclass
class History:
    source: Literal["recorded", "predicted"]
    title: str
    device_name: Optional[str]
    device_index: Optional[int]
    device_total: Optional[int]
    allocs: List[Alloc]
    end: int  # the last event index + 1 (the x axis runs 0..end)
    baseline: int = 0  # bytes allocated before the history began and alive throughout (no frames)
    reserved: Optional[List[Tuple[int, int]]] = None  # (event index, reserved bytes) steps, if known
    events_dropped: int = 0
    failed: Optional[Failed] = None
    notes: List[str] = field(default_factory=list)
    # A recorded history keeps PyTorch's own snapshot dict, exported as-is ("Download snapshot").
    raw_snapshot: Optional[Dict[str, Any]] = None

    @property
    def events_total(self) -> int:
        return sum(1 if a.end is None else 2 for a in self.allocs)
