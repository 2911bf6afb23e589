"""Which kernel processes ran before this one in the same notebook, and which processes each reported as its
children: the proof `terminate` needs before it ends an orphaned worker of a predecessor.

A restart (Kernel > Restart, Restart and free, the server's auto-restart after a crash) keeps the kernel id and
its connection file, so the connection file's name ties the runs of one notebook's kernel together. Each run
appends itself to a record in the user's Jupyter runtime directory, and adds every child it reports to the
browser (`children`); the browser can only ever name children it was told about, so the record holds all of
them. The record is the user's own file (checked: owner and not writable by others), in a 0700 directory.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

RUNS_KEPT = 8  # runs of one kernel remembered (a few restarts back)
CHILDREN_KEPT = 4096  # per run: a kernel and its workers, never a whole machine
STALE_DAYS = 7  # records untouched this long belong to kernels long gone


@dataclass
class Run:
    """One kernel process: its identity and the children it reported."""

    pid: int
    create_time: float
    children: Set[Tuple[int, float]] = field(default_factory=set)

    def to_json(self) -> Dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time, "children": sorted(self.children)}

    @classmethod
    def from_json(cls, data: Any) -> Optional["Run"]:
        try:
            children = {(int(pid), float(created)) for pid, created in data.get("children", [])}
            return cls(int(data["pid"]), float(data["create_time"]), children)
        except (TypeError, ValueError, KeyError, AttributeError):
            return None


def connection_file() -> Optional[str]:
    """This kernel's connection file, or None outside an ipykernel (tests, terminal IPython, the server)."""
    if "ipykernel.kernelapp" not in sys.modules:
        return None  # not a kernel: importing ipykernel here would load IPython into the Jupyter server
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return None
    # Not IPKernelApp.instance(): in terminal IPython the singleton is the terminal app, which instance() refuses
    # (MultipleInstanceError) and initialized() still reports, since both share IPython's application base.
    app = getattr(IPKernelApp, "_instance", None)
    if not isinstance(app, IPKernelApp):
        return None
    path = getattr(app, "connection_file", None)
    return str(path) if path else None


def record_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / "gpumem-lineage"


def owned_and_private(path: Path) -> bool:
    """Our own file or directory, not writable by group or others: what it says was written by this user."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class Lineage:
    """The record of one kernel id: this run and its predecessors. Thread-safe (the comm runs on a subshell)."""

    def __init__(self, path: Optional[Path], me: Run) -> None:
        self.path = path
        self.me = me
        self._lock = threading.Lock()
        self._predecessors: List[Run] = self._read() if path is not None else []
        self._write()

    @classmethod
    def for_this_kernel(cls, pid: int, create_time: float) -> "Lineage":
        """The lineage of the running kernel; without a connection file only this run is known."""
        me = Run(pid, create_time)
        conn = connection_file()
        if conn is None:
            return cls(None, me)
        folder = record_dir()
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            _prune(folder)
        except OSError:
            return cls(None, me)
        return cls(folder / f"{Path(conn).stem}.json", me)

    @property
    def predecessors(self) -> List[Run]:
        with self._lock:
            return list(self._predecessors)

    def note_children(self, children: Sequence[Tuple[int, float]]) -> None:
        """Remember processes this run reported as its children (the browser may name them after a restart)."""
        with self._lock:
            before = len(self.me.children)
            for child in children:
                if len(self.me.children) >= CHILDREN_KEPT:
                    break
                self.me.children.add((int(child[0]), float(child[1])))
            changed = len(self.me.children) != before
        if changed:
            self._write()

    def predecessor_of(self, pid: int, create_time: float, tolerance: float) -> Optional[Run]:
        """The earlier run of this kernel that reported (pid, create_time) as its child, if any."""
        for run in reversed(self.predecessors):
            if any(p == pid and abs(c - create_time) <= tolerance for p, c in run.children):
                return run
        return None

    # --- the file ------------------------------------------------------------------------------------

    def _read(self) -> List[Run]:
        assert self.path is not None
        if not self.path.exists() or not (owned_and_private(self.path) and owned_and_private(self.path.parent)):
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        runs = [run for item in (data.get("runs") or []) if (run := Run.from_json(item)) is not None]
        for run in runs:  # the extension loaded again in the same kernel: keep what it reported before
            if (run.pid, run.create_time) == (self.me.pid, self.me.create_time):
                self.me.children |= run.children
        return [r for r in runs if (r.pid, r.create_time) != (self.me.pid, self.me.create_time)][-RUNS_KEPT:]

    def _write(self) -> None:
        """Atomically replace the record (a crash mid-write leaves the old one)."""
        if self.path is None:
            return
        with self._lock:
            runs = [r.to_json() for r in self._predecessors[-(RUNS_KEPT - 1) :]] + [self.me.to_json()]
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"runs": runs}, handle)
            os.replace(tmp, self.path)
        except OSError:
            pass  # no record: after a restart only this kernel's own children can be ended


def _prune(folder: Path) -> None:
    """Drop records of kernels untouched for STALE_DAYS."""
    cutoff = time.time() - STALE_DAYS * 86400
    for path in folder.glob("*.json"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            continue
