"""How many processes the kernel's out-of-memory killer has ended: per memory cgroup, and on the whole machine.

A kernel killed by the OOM killer simply vanishes: the browser only learns "The kernel appears to have died".
The kernel counts every kill in the victim's memory cgroup and that cgroup's ancestors (v2 `memory.events`
`oom_kill`; v1 `memory.oom_control` `oom_kill`, Linux 4.13+), and on the machine (`/proc/vmstat` `oom_kill`), so a
new kill at the moment a kernel dies says why it died. The cgroup is found from the kernel's `/proc/PID/cgroup`
while it lives; a dead process has no such file.

Reads only world-readable files; nothing here needs the process to be ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from gpumem_kernel.probe.host import CgroupReader


@dataclass(frozen=True)
class OomKillCounter:
    """Where one process's OOM kills are counted, and the memory limit that applies to it."""

    cgroup: Optional[str]  # the process's memory cgroup ("/process_api/abc"), None when it has none
    events: Optional[Path]  # memory.events (v2) or memory.oom_control (v1); None when not readable
    peak: Optional[Path]  # memory.peak (v2) or memory.max_usage_in_bytes (v1): the cgroup's highest usage
    limit: Optional[int]  # the tightest memory limit over the cgroup and its ancestors; None: unlimited


def count_in(path: Optional[Path]) -> Optional[int]:
    """The `oom_kill N` line of memory.events, memory.oom_control or /proc/vmstat; None when absent."""
    if path is None:
        return None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and fields[0] == "oom_kill" and fields[1].isdigit():
            return int(fields[1])
    return None


def machine_count(vmstat: str = "/proc/vmstat") -> Optional[int]:
    """OOM kills on the whole machine since boot (a container sees its host's count)."""
    return count_in(Path(vmstat))


def peak_of(counter: OomKillCounter) -> Optional[int]:
    """The cgroup's highest memory usage so far (bytes), when the kernel records it."""
    if counter.peak is None:
        return None
    try:
        text = counter.peak.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _existing(base: Path, path: str) -> Optional[Path]:
    """base/path, or its nearest existing ancestor (without a cgroup namespace the listed path may be absent)."""
    parts = [p for p in path.split("/") if p]
    for n in range(len(parts), -1, -1):
        candidate = base.joinpath(*parts[:n])
        if candidate.is_dir():
            return candidate
    return None


def counter_for(pid: int, host_total: int, root: str = "/sys/fs/cgroup", proc: str = "/proc") -> OomKillCounter:
    """The counter of process `pid` (alive), v1 memory controller first as CgroupReader reads the limit."""
    proc_cgroup = f"{proc}/{pid}/cgroup"
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return OomKillCounter(None, None, None, None)
    limit = CgroupReader(root, proc_cgroup).read(host_total).limit
    base = Path(root)
    found: List[OomKillCounter] = []
    for line in lines:  # v1 (or hybrid with memory on v1): "4:memory:/path"
        fields = line.split(":", 2)
        if len(fields) == 3 and "memory" in fields[1].split(",") and (base / "memory").is_dir():
            directory = _existing(base / "memory", fields[2])
            if directory is not None:
                found.append(
                    OomKillCounter(
                        fields[2], directory / "memory.oom_control", directory / "memory.max_usage_in_bytes", limit
                    )
                )
    for line in lines:  # v2: "0::/path"
        if line.startswith("0::"):
            directory = _existing(base, line[3:])
            if directory is not None and (directory / "memory.events").exists():
                found.append(OomKillCounter(line[3:], directory / "memory.events", directory / "memory.peak", limit))
    for counter in found:
        if count_in(counter.events) is not None:
            return counter
    return OomKillCounter(found[0].cgroup if found else None, None, None, limit)
