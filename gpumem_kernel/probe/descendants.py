"""A process's descendants (DataLoader workers and their children), the one way every reader lists them.

Where the kernel has /proc/<pid>/task/*/children (CONFIG_PROC_CHILDREN) a process's children are read from there,
in time proportional to the descendants. Elsewhere (gVisor, some VMs, macOS) the only way is a walk over every
process's parent, as psutil's `children(recursive=True)` does; on a shared GPU server with thousands of processes
that walk costs tens of milliseconds (43 ms for 2,000 processes on two cores: benchmarks row 8), which a reader
looking once a second (the kernel's sampler, the server's exit watch for each kernel) must not pay every time.
`Descendants` repeats the walk only when its last cost is at most `budget` of the time since (1 % of a core), and
one walk serves every process asked about meanwhile; PIDs from an older walk are checked against their parent
again, so a worker that ended, or a reused PID, is never listed.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import psutil

# The share of one core the periodic walks may take, when /proc has no children files.
WALK_BUDGET = 0.01


def proc_children_supported() -> bool:
    # Needs CONFIG_PROC_CHILDREN; sandboxes such as gVisor lack it.
    return bool(glob.glob(f"/proc/{os.getpid()}/task/*/children"))


def _via_proc(pid: int) -> List[int]:
    """Descendants from /proc/<pid>/task/*/children: no scan of every process on the machine."""
    found: List[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        for children_file in glob.glob(f"/proc/{parent}/task/*/children"):
            try:
                pids = [int(p) for p in Path(children_file).read_text().split()]
            except (OSError, ValueError):
                continue  # thread or process ended while we read
            found.extend(pids)
            pending.extend(pids)
    return found


def _parent_of(pid: int) -> Optional[int]:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def _parents_from_proc() -> Optional[Dict[int, int]]:
    """Linux: each /proc/<pid>/stat's parent field (the 2nd after the command's closing parenthesis)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    found: Dict[int, int] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                found[int(name)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended while we read
    return found or None


def parent_map() -> Dict[int, int]:
    """PID -> parent PID of every process on the machine (the walk)."""
    found = _parents_from_proc()
    if found is not None:
        return found
    found = {}
    for process in psutil.process_iter():
        try:
            found[process.pid] = process.ppid()
        except psutil.Error:
            continue  # ended, or not ours to read
    return found


def _children_of(parents: Dict[int, int]) -> Dict[int, List[int]]:
    """Parent PID -> its children, from a walk's parent map."""
    children: Dict[int, List[int]] = {}
    for child, parent in parents.items():
        if child != parent:
            children.setdefault(parent, []).append(child)
    return children


def _below(children: Dict[int, List[int]], pid: int) -> List[int]:
    found: List[int] = []
    seen = {pid}
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                pending.append(child)
    return found


def descendant_pids(pid: int) -> List[int]:
    """Every live descendant of `pid`, looked up now (for an answer the user acts on, e.g. ending a worker)."""
    return _via_proc(pid) if proc_children_supported() else _below(_children_of(parent_map()), pid)


class Descendants:
    """Descendants for a reader that looks periodically: fresh from /proc where it can, else from a walk
    repeated within `budget` of a core (see the module's docstring)."""

    def __init__(
        self,
        budget: float = WALK_BUDGET,
        use_proc: Optional[bool] = None,
        clock: Callable[[], float] = time.monotonic,
        walk: Callable[[], Dict[int, int]] = parent_map,
    ) -> None:
        self._budget, self._clock, self._walk = budget, clock, walk
        self._use_proc = proc_children_supported() if use_proc is None else use_proc
        self._parents: Dict[int, int] = {}
        self._children: Dict[int, List[int]] = {}  # indexed once per walk: every `of` meanwhile reads it
        self._walked = False
        self._next_walk = 0.0
        self.walks = 0  # how many walks were made (tests, benchmarks)

    def of(self, pid: int) -> List[int]:
        if self._use_proc:
            return _via_proc(pid)
        fresh = self._refresh()
        found = _below(self._children, pid)
        if fresh:
            return found
        # from an older walk: only those still the child of the parent the walk saw
        return [child for child in found if _parent_of(child) == self._parents[child]]

    def _refresh(self) -> bool:
        now = self._clock()
        if self._walked and now < self._next_walk:
            return False
        self._parents = self._walk()
        self._children = _children_of(self._parents)
        self._walked = True
        took = self._clock() - now
        self._next_walk = now + took / self._budget
        self.walks += 1
        return True
