"""Host memory around the kernel: its RSS, its child processes (DataLoader workers), the machine, the container.

Workers are forked, so their RSS counts every page they share with the kernel once per worker; their unique memory
(USS, what ending them would free) is read from /proc/PID/smaps_rollup through psutil's `memory_full_info`. The
kernel walks every mapping for that read: 0.6 ms for a bare Python process, 8.5 ms for a busy DataLoader worker that
imported torch (against 0.06 ms for its RSS; 4 workers on 2 shared cores), so each worker's USS is read at most every
`USS_INTERVAL_S` seconds and kept between samples (about 0.2% of a core per worker). Its rise over the last minute is
the copy-on-read growth of Python-object datasets (every object a worker touches gets its refcount written, which
copies the page).

The host-memory guide's crashes were host-RAM kills (workers × dataset copies) inside a container limit, invisible in
`free -h`; so the container's cgroup limit is read as well as the machine's total (v2, v1 or hybrid). Likewise
`usable_cpus` counts the CPUs the affinity mask and the cgroup's CPU quota leave, not os.cpu_count()'s host cores.
"""

from __future__ import annotations

import collections
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import psutil

from gpumem_kernel.probe.descendants import Descendants
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


def _controller_dirs(root: Path, proc_cgroup: Path, controller: str) -> Tuple[int, List[Path]]:
    """(cgroup version, the process's cgroup directory and its ancestors) for one controller; (0, []) when none.

    v1 first: on a hybrid machine the controllers are on v1 and the unified tree beside them has none."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return 0, []
    v1_base = root / controller
    for line in lines:  # v1: "4:memory:/path", "3:cpu,cpuacct:/path"
        fields = line.split(":", 2)
        if len(fields) == 3 and controller in fields[1].split(",") and v1_base.is_dir():
            return 1, _ancestors(v1_base, fields[2])
    for line in lines:  # v2: "0::/path"
        if line.startswith("0::"):
            return 2, _ancestors(root, line[3:])
    return 0, []


class CgroupReader:
    """Reads the tightest memory limit over the kernel's cgroup and its ancestors (v2 or v1).

    `root` and `proc_cgroup` are parameters so tests can point them at fake trees.
    """

    def __init__(self, root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> None:
        self._root = Path(root)
        self._proc_cgroup = Path(proc_cgroup)
        self._files: Optional[List[Tuple[Path, Path]]] = None  # (limit file, usage file), found once

    def _candidates(self) -> List[Tuple[Path, Path]]:
        version, dirs = _controller_dirs(self._root, self._proc_cgroup, "memory")
        if version == 1:
            return [(d / "memory.limit_in_bytes", d / "memory.usage_in_bytes") for d in dirs]
        return [(d / "memory.max", d / "memory.current") for d in dirs]

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


def _cpu_quota(directory: Path, version: int) -> Optional[float]:
    """CPUs' worth of time one cgroup may use per period; None: unlimited or unreadable."""
    if version == 1:
        quota, period = _read_int(directory / "cpu.cfs_quota_us"), _read_int(directory / "cpu.cfs_period_us")
    else:
        try:
            fields = (directory / "cpu.max").read_text().split()  # "max 100000" or "200000 100000"
        except OSError:
            return None
        numbers = [int(f) if f.isdigit() else None for f in fields[:2]]
        quota, period = numbers if len(numbers) == 2 else (None, None)
    return quota / period if quota and period else None  # v1's unlimited is -1, which _read_int drops


def usable_cpus(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The CPUs this process can keep busy: its affinity mask, capped by the tightest CPU quota over its cgroup and
    ancestors. os.cpu_count() is the host's count, 64 in a container given 2 CPUs of a 64-core host."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    version, dirs = _controller_dirs(Path(root), Path(proc_cgroup), "cpu")
    quotas = [q for q in (_cpu_quota(d, version) for d in dirs if d.is_dir()) if q is not None]
    return max(1, min([cpus, *(math.floor(q) for q in quotas)]))  # 2.5 CPUs keep two busy, not three


# A worker's USS is read at most this often (smaps_rollup walks every mapping: up to ~9 ms per worker).
USS_INTERVAL_S = 5.0
# Growth is the slope over the measurements of about the last minute, once two are at least this far apart.
GROWTH_WINDOW_S = 60.0
GROWTH_MIN_SPAN_S = 4.0


class _Unmeasurable(Exception):
    """memory_full_info is not available for this process (platform, permissions, no smaps_rollup)."""


def _full_info(process: psutil.Process) -> Tuple[int, Optional[int]]:
    """(USS, PSS or None) of one process; raises _Unmeasurable, or NoSuchProcess when it ended."""
    try:
        info = process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        raise
    except (psutil.AccessDenied, NotImplementedError, OSError, AttributeError) as e:
        raise _Unmeasurable(str(e)) from e
    uss = getattr(info, "uss", None)
    if uss is None:
        raise _Unmeasurable("no uss")
    pss = getattr(info, "pss", None)
    return int(uss), None if pss is None else int(pss)


@dataclass
class _Worker:
    create_time: float
    uss: Optional[int] = None  # None: not measurable
    pss: Optional[int] = None
    read_at: float = float("-inf")
    history: Deque[Tuple[float, int]] = field(default_factory=collections.deque)  # (when, USS), about a minute

    def growth_per_min(self) -> Optional[float]:
        if len(self.history) < 2:
            return None
        (t0, u0), (t1, u1) = self.history[0], self.history[-1]
        if t1 - t0 < GROWTH_MIN_SPAN_S:
            return None
        return (u1 - u0) / (t1 - t0) * 60.0


class UssTracker:
    """Each worker's USS and PSS, read at most every `interval` seconds and kept in between, and its growth."""

    def __init__(self, interval: float = USS_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._workers: Dict[int, _Worker] = {}

    def update(self, processes: Sequence[psutil.Process]) -> Tuple[Optional[int], Optional[int], Optional[int]]:
        """(summed USS, summed PSS, summed USS growth in bytes/min) of these live workers; None when unknown."""
        now = self._clock()
        seen: Dict[int, _Worker] = {}
        for process in processes:
            worker = self._workers.get(process.pid)
            created = process.create_time()
            if worker is None or worker.create_time != created:  # new, or its PID was reused
                worker = _Worker(create_time=created)
            if now - worker.read_at >= self.interval:
                worker.read_at = now
                try:
                    worker.uss, worker.pss = _full_info(process)
                except _Unmeasurable:
                    worker.uss = worker.pss = None
                    worker.history.clear()
                except psutil.Error:
                    continue  # it ended between the listing and this read
                if worker.uss is not None:
                    worker.history.append((now, worker.uss))
                    while len(worker.history) > 2 and now - worker.history[1][0] >= GROWTH_WINDOW_S:
                        worker.history.popleft()
            seen[process.pid] = worker
        self._workers = seen
        workers = list(seen.values())
        if not workers or any(w.uss is None for w in workers):
            return None, None, None
        pss = None if any(w.pss is None for w in workers) else sum(w.pss or 0 for w in workers)
        slopes = [w.growth_per_min() for w in workers]
        known = [s for s in slopes if s is not None]
        growth = round(sum(known)) if known else None
        return sum(w.uss or 0 for w in workers), pss, growth


def _live(pids: Sequence[int]) -> Tuple[List[psutil.Process], int]:
    """The processes still alive among pids, and their summed RSS."""
    processes: List[psutil.Process] = []
    rss = 0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            rss += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        processes.append(process)
    return processes, rss


class HostReader:
    """Reads the `host` part of a sample for one process (the kernel by default)."""

    def __init__(
        self,
        pid: Optional[int] = None,
        cgroup: Optional[CgroupReader] = None,
        descendants: Optional[Descendants] = None,
    ) -> None:
        self.pid = os.getpid() if pid is None else pid
        self._process = psutil.Process(self.pid)
        self._cgroup = cgroup or CgroupReader()
        self._descendants = descendants or Descendants()
        self.uss = UssTracker()

    def children(self) -> Children:
        """Live descendants: summed RSS (counts shared pages once per worker), unique memory and its growth."""
        processes, rss = _live(self._descendants.of(self.pid))
        uss, pss, growth = self.uss.update(processes)
        return Children(count=len(processes), rss=rss, uss=uss, pss=pss, uss_growth_per_min=growth)

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
