"""Re-runs of one cell: the memory each run leaves (allocated after the run minus before it, per device), and
when the last runs left a consistent step.

A cell is the same cell when its notebook cell id is the same (IPython >= 8 passes it when the front end sends
it), or, without an id, its source. Each run's change is measured around the run itself, so other cells run
in between do not count. Bounded: the last KEEP_RUNS changes of the last KEEP_CELLS cells, names and sizes only.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from gpumem_kernel.growth.memory import Reading, Readings
from gpumem_kernel.growth.report import HOST, GrowingHolder
from gpumem_kernel.heldby.report import UNREACHABLE, HoldersReport

MIN_RUNS = 3  # consecutive runs with the same step before saying so
MIN_STEP = 1 << 20  # 1 MiB: below it, allocator rounding and one-off caches
HOST_MIN_STEP = 4 << 20  # the RSS: below 4 MiB, the interpreter's own heap and IPython's history move it
SPREAD = 1.5  # the largest step of the runs counted is at most this times the smallest
KEEP_RUNS = 12
KEEP_CELLS = 64
TOP_HOLDERS = 5


@dataclass
class Run:
    allocated: Dict[str, int]  # device -> change over the run
    reserved: Dict[str, int]


@dataclass
class CellRuns:
    runs: Deque[Run] = field(default_factory=lambda: deque(maxlen=KEEP_RUNS))
    holders: Optional[HoldersReport] = None  # after the latest run, when walked (sizes and names only)


def change(before: Optional[Readings], after: Readings) -> Run:
    """The run's change per device (a device with nothing before it started from 0: CUDA was not in use)."""
    before = before or {}
    zero = Reading(0, 0)
    return Run(
        {d: r.allocated - before.get(d, zero).allocated for d, r in after.items()},
        {d: r.reserved - before.get(d, zero).reserved for d, r in after.items()},
    )


def consistent_tail(steps: Sequence[int], min_step: int = MIN_STEP, spread: float = SPREAD) -> List[int]:
    """The longest run of last steps that each grew at least `min_step`, the largest at most `spread` times the
    smallest (oldest first)."""
    tail: List[int] = []
    for step in reversed(steps):
        if step < min_step:
            break
        low, high = min(tail + [step]), max(tail + [step])
        if high > spread * low:
            break
        tail.insert(0, step)
    return tail


@dataclass(frozen=True)
class Step:
    device: str
    allocated: int  # median of the consistent runs
    reserved: int
    runs: int


def growing(runs: Sequence[Run], min_runs: int = MIN_RUNS) -> Optional[Step]:
    """The device whose last runs left the longest consistent step (at least `min_runs`), the larger step on a
    tie; the host's RSS only when no device grew in the last run (a device's leak often drags the RSS along,
    sooner consistent: the device's notice, which names its holders and fix, comes when its own runs are). None
    when nothing did."""
    devices = [d for d in (runs[-1].allocated if runs else {}) if d != HOST]
    found = _longest(runs, devices, min_runs)
    if found is not None or any(runs[-1].allocated[d] >= MIN_STEP for d in devices):
        return found
    return _longest(runs, [HOST] if runs and HOST in runs[-1].allocated else [], min_runs)


def _longest(runs: Sequence[Run], devices: Sequence[str], min_runs: int) -> Optional[Step]:
    best: Optional[Step] = None
    for device in devices:
        steps = [run.allocated.get(device, 0) for run in runs]
        tail = consistent_tail(steps, HOST_MIN_STEP if device == HOST else MIN_STEP)
        if len(tail) < min_runs:
            continue
        reserved = [run.reserved.get(device, 0) for run in runs[-len(tail) :]]
        step = Step(device, int(statistics.median(tail)), int(statistics.median(reserved)), len(tail))
        if best is None or (step.runs, step.allocated) > (best.runs, best.allocated):
            best = step
    return best


def grown_holders(before: Optional[HoldersReport], after: Optional[HoldersReport]) -> List[GrowingHolder]:
    """The holders holding more after this run than after the previous one, largest growth first; the remainder
    no variable reaches counts as one."""
    if before is None or after is None or before.skipped or after.skipped:
        return []
    old: Dict[str, Tuple[int, int]] = {e.name: (e.reached_bytes, e.tensors) for e in before.entries}
    grown = []
    for entry in after.entries:
        bytes_then, tensors_then = old.get(entry.name, (0, 0))
        more, tensors = entry.reached_bytes - bytes_then, entry.tensors - tensors_then
        if more > 0 or tensors > 0:
            grown.append(GrowingHolder(entry.name, more, tensors, entry.description))
    if before.unreachable is not None and after.unreachable is not None and after.unreachable > before.unreachable:
        what = after.history_hint or "autograd graphs, a library's caches, lost references"
        grown.append(GrowingHolder(UNREACHABLE, after.unreachable - before.unreachable, 0, what))
    grown.sort(key=lambda h: (-h.bytes, -h.tensors, h.name))
    return grown[:TOP_HOLDERS]


class Ledger:
    """Every cell's recent runs, by key; not thread-safe (the main thread's post_run_cell only)."""

    def __init__(self, keep_cells: int = KEEP_CELLS) -> None:
        self._cells: "OrderedDict[str, CellRuns]" = OrderedDict()
        self._keep = keep_cells

    def add(self, key: str, run: Run, holders: Optional[HoldersReport]) -> Tuple[CellRuns, Optional[HoldersReport]]:
        """Record a run; the cell's runs and the holders after its previous run."""
        cell = self._cells.pop(key, None) or CellRuns()
        self._cells[key] = cell  # the most recently run last
        while len(self._cells) > self._keep:
            self._cells.popitem(last=False)
        cell.runs.append(run)
        previous, cell.holders = cell.holders, holders
        return cell, previous

    def clear(self) -> None:
        self._cells.clear()


def cell_key(cell_id: Optional[str], source: str) -> str:
    """The notebook's cell id, or a digest of the source (no source text is kept)."""
    if cell_id:
        return f"id:{cell_id}"
    return "source:" + hashlib.sha1(source.strip().encode("utf-8", "replace")).hexdigest()
