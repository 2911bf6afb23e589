"""The host PIDs this server's kernels learned for themselves (probe/hostpidrecord.py), read by the server.

In a container NVML lists host PIDs: the server cannot tell by ancestry which of them is which kernel, or a
process a notebook started. Each kernel writes what its sampler matched; the server reads those records, only
for the kernels it runs itself, and only when the record is the user's own (owner checked, no one else may
write it) and names the very kernel process the server runs (its PID and start time: a record left by an
earlier run of the kernel is ignored). A record is parsed again only when its file changed (mtime and size),
so reading every kernel's once a second costs one stat each.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import psutil

from gpumem_kernel.probe.hostpidrecord import record_dir
from gpumem_kernel.probe.lineage import owned_and_private
from gpumem_kernel.server.kernels import KernelFacts

SAME_START = 0.01  # seconds: psutil's create time is exact to the clock tick


@dataclass(frozen=True)
class Record:
    kernel_id: str
    pid: int
    create_time: float
    host_pids: Tuple[int, ...]  # the kernel's own, confirmed
    children: Tuple[int, ...]  # host PIDs of processes started from its notebook

    @classmethod
    def parse(cls, data: Any) -> Optional["Record"]:
        try:
            return cls(
                str(data["kernel_id"]),
                int(data["pid"]),
                float(data["create_time"]),
                tuple(int(p) for p in data.get("host_pids") or ()),
                tuple(int(c["host_pid"]) for c in data.get("children") or ()),
            )
        except (TypeError, ValueError, KeyError, AttributeError):
            return None


def _runs(kernel_pid: int, record: Record) -> bool:
    """The record's process is the server's kernel process (or a process it started: a wrapper such as
    `conda run` may stand between), started when the record says."""
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.create_time) > SAME_START:
            return False
        return record.pid == kernel_pid or any(p.pid == kernel_pid for p in process.parents())
    except psutil.Error:
        return False


class HostPidRecords:
    """Reads the records of this server's kernels, each parsed again only when its file changed."""

    def __init__(self, folder: Optional[Path] = None) -> None:
        self._folder = folder
        self._cache: Dict[Path, Tuple[Tuple[int, int], Optional[Record]]] = {}

    def folder(self) -> Optional[Path]:
        if self._folder is None:
            try:
                self._folder = record_dir()
            except Exception:
                return None
        return self._folder

    def owners(self, kernels: Iterable[KernelFacts]) -> Dict[int, str]:
        """Host PID -> the id of the kernel of this server that it is, or that its notebook started."""
        folder = self.folder()
        found: Dict[int, str] = {}
        if folder is None or not owned_and_private(folder):
            return found
        seen: List[Path] = []
        for kernel in kernels:
            if kernel.pid is None:
                continue  # not run by this server: nothing proves whose record it would be
            path = folder / f"kernel-{kernel.kernel_id}.json"
            seen.append(path)
            record = self._read(path)
            if record is None or record.kernel_id != kernel.kernel_id or not _runs(kernel.pid, record):
                continue
            for pid in record.host_pids + record.children:
                found.setdefault(pid, kernel.kernel_id)
        for path in [p for p in self._cache if p not in seen]:
            del self._cache[path]  # a kernel shut down: forget its record
        return found

    def _read(self, path: Path) -> Optional[Record]:
        try:
            info = os.stat(path)
        except OSError:
            self._cache.pop(path, None)
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        record = None
        if owned_and_private(path):
            try:
                record = Record.parse(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                record = None
        self._cache[path] = (stamp, record)
        return record
