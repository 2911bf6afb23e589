"""Host memory around the kernel: its RSS, its child processes (DataLoader workers), the machine, the container.

The host-memory guide's crashes were host-RAM kills (workers × dataset copies) inside a container limit, invisible in
`free -h`; so the container's cgroup limit is read as well as the machine's total.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import psutil

from gpumem_kernel.wire.protocol import Children, Host

# cgroup v1 reports "no limit" as a huge page-aligned number (0x7FFFFFFFFFFFF000 on x86-64).
_V1_UNLIMITED = 2**60


@dataclass(frozen=True)
class CgroupMemory:
    limit: Optional[int]  # None: unlimited or no cgroup found
    usage: Optional[int]  # usage of the cgroup whose limit applies; None without a limit


def _read_int(path: Path) -> Optional[int]:
    """An integer file of the cgroup fs; None when missing, unreadable or "max" (v2's unlimited)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _ancestors(base: Path, path: str) -> List[Path]:
    """base/path, its parents, …, base: a limit set on any ancestor applies to the kernel too."""
    parts = [p for p in path.split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


class CgroupReader:
    """Reads the tightest memory limit over the kernel's cgroup and its ancestors (v2 or v1).

    `root` and `proc_cgroup` are parameters so tests can point them at fake trees.
    """

    def __init__(self, root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> None:
        self._root = Path(root)
        self._proc_cgroup = Path(proc_cgroup)
        self._files: Optional[List[Tuple[Path, Path]]] = None  # (limit file, usage file), found once

    def _candidates(self) -> List[Tuple[Path, Path]]:
        try:
            lines = self._proc_cgroup.read_text().splitlines()
        except OSError:
            return []
        v1_base = self._root / "memory"
        for line in lines:  # v1 (or hybrid with memory on v1): "4:memory:/path"
            fields = line.split(":", 2)
            if len(fields) == 3 and "memory" in fields[1].split(",") and v1_base.is_dir():
                return [
                    (d / "memory.limit_in_bytes", d / "memory.usage_in_bytes") for d in _ancestors(v1_base, fields[2])
                ]
        for line in lines:  # v2: "0::/path"
            if line.startswith("0::"):
                return [(d / "memory.max", d / "memory.current") for d in _ancestors(self._root, line[3:])]
        return []

    def read(self, host_total: int) -> CgroupMemory:
        """Limit and usage now; a limit at or above the machine's RAM counts as unlimited."""
        if self._files is None:
            # Without a cgroup namespace the listed path may not exist under the mount: missing dirs are skipped.
            self._files = [(lim, use) for lim, use in self._candidates() if lim.parent.is_dir()]
        best: Optional[Tuple[int, Path]] = None
        for limit_file, usage_file in self._files:
            limit = _read_int(limit_file)
            if limit is None or limit >= _V1_UNLIMITED or limit >= host_total:
                continue
            if best is None or limit < best[0]:
                best = (limit, usage_file)
        if best is None:
            return CgroupMemory(limit=None, usage=None)
        return CgroupMemory(limit=best[0], usage=_read_int(best[1]))


def _children_via_proc(pid: int) -> List[int]:
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


def _proc_children_supported() -> bool:
    # Needs CONFIG_PROC_CHILDREN; sandboxes such as gVisor lack it.
    return bool(glob.glob(f"/proc/{os.getpid()}/task/*/children"))


def _sum_rss(pids: Sequence[int]) -> Tuple[int, int]:
    count, rss = 0, 0
    for pid in pids:
        try:
            rss += psutil.Process(pid).memory_info().rss
            count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return count, rss


class HostReader:
    """Reads the `host` part of a sample for one process (the kernel by default)."""

    def __init__(self, pid: Optional[int] = None, cgroup: Optional[CgroupReader] = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        self._process = psutil.Process(self.pid)
        self._cgroup = cgroup or CgroupReader()
        self._use_proc = _proc_children_supported()

    def children(self) -> Children:
        """Live descendants and their summed RSS (forked workers share pages, so this over-counts a little)."""
        if self._use_proc:
            pids = _children_via_proc(self.pid)
        else:
            try:
                pids = [p.pid for p in self._process.children(recursive=True)]
            except psutil.Error:
                pids = []
        count, rss = _sum_rss(pids)
        return Children(count=count, rss=rss)

    def read(self) -> Host:
        memory = psutil.virtual_memory()
        cgroup = self._cgroup.read(memory.total)
        return Host(
            rss=self._process.memory_info().rss,
            total=memory.total,
            available=memory.available,
            children=self.children(),
            container_limit=cgroup.limit,
            container_usage=cgroup.usage,
        )
