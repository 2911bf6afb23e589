"""This Jupyter server's kernels as the server sees them, and which GPU processes belong to which kernel.

A kernel's GPU memory is held by its own process or by a process it started (a DataLoader worker spawned
with its own command line, a subprocess): a GPU process belongs to a kernel when the kernel's process is
the process itself or one of its ancestors. The kernel manager knows each local kernel's process
(`provisioner.process`); the sessions know each kernel's notebook path. Idle time comes from the kernel
executions (activity.py: when it last ran code); for a kernel whose IOPub the server cannot listen to, from the
kernel model's `last_activity` and `execution_state`, as jupyter_server's own culler reads them.

Nothing here touches NVML: machine.py joins these facts with the GPUs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import psutil

from gpumem_kernel.server.activity import Executions

# States in which a kernel counts as working (or about to), never as idle.
_NOT_IDLE = {"busy", "starting", "restarting", "autorestarting"}


@dataclass(frozen=True)
class KernelFacts:
    """One kernel of this server at one moment."""

    kernel_id: str
    name: str  # kernel spec name, e.g. "python3"
    path: str  # the notebook (or console) path of its session; "" without a session
    pid: Optional[int]  # its process; None for a kernel the server does not run itself (gateway, remote)
    execution_state: str
    last_activity: Optional[float]  # epoch seconds: jupyter_server's (any message but a few, comm messages too)
    executions: Optional[Executions] = None  # when it last ran code (None: not watched)

    def idle_seconds(self, now: float) -> float:
        """Seconds since the kernel last ran code; 0 while it runs code, starts or restarts."""
        if self.execution_state in _NOT_IDLE - {"busy"}:
            return 0.0
        if self.executions is not None:
            if self.executions.running:
                return 0.0
            return max(0.0, now - (self.executions.last or self.executions.since))
        if self.execution_state == "busy" or self.last_activity is None:
            return 0.0
        return max(0.0, now - self.last_activity)


def _epoch(value: Any) -> Optional[float]:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # jupyter_server's utcnow() is aware; be safe with naive UTC
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp()
    return None


def kernel_pid(kernel: Any) -> Optional[int]:
    """The process id of a kernel the server started locally (LocalProvisioner), else None."""
    provisioner = getattr(kernel, "provisioner", None)
    process = getattr(provisioner, "process", None)
    pid = getattr(process, "pid", None)
    if pid is None:
        pid = getattr(provisioner, "pid", None)
    return pid if isinstance(pid, int) else None


def session_paths(session_manager: Any) -> Dict[str, str]:
    """kernel id → the path of its session, read synchronously (the metrics collector runs inside a
    synchronous call on the event loop and cannot await `list_sessions()`).

    jupyter_server keeps sessions in an SQLite table `session (session_id, path, name, type, kernel_id)`
    in memory by default; one SELECT costs microseconds. Any failure gives no paths, never an error.
    """
    try:
        rows = session_manager.cursor.execute("SELECT kernel_id, path FROM session").fetchall()
    except Exception:
        return {}
    return {str(row[0]): str(row[1] or "") for row in rows if row[0]}


def read_kernels(
    kernel_manager: Any,
    session_manager: Any,
    executions: Callable[[str], Optional[Executions]] = lambda kernel_id: None,
) -> List[KernelFacts]:
    """Every kernel of this server now (a kernel shut down meanwhile is skipped)."""
    paths = session_paths(session_manager) if session_manager is not None else {}
    found: List[KernelFacts] = []
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        try:
            kernel = kernel_manager.get_kernel(kernel_id)
        except Exception:  # KeyError / HTTPError 404: shut down between the two calls
            continue
        found.append(
            KernelFacts(
                kernel_id=kernel_id,
                name=str(getattr(kernel, "kernel_name", "") or ""),
                path=paths.get(kernel_id, ""),
                pid=kernel_pid(kernel),
                execution_state=str(getattr(kernel, "execution_state", "unknown") or "unknown"),
                last_activity=_epoch(getattr(kernel, "last_activity", None)),
                executions=executions(kernel_id),
            )
        )
    return found


class Ancestry:
    """A process's ancestors (itself first), cached by (pid, create time): a GPU process is looked up once,
    not on every scrape, and a reused PID is read again."""

    def __init__(self) -> None:
        self._cache: Dict[int, Tuple[float, Tuple[int, ...]]] = {}

    def of(self, pid: int) -> Tuple[int, ...]:
        try:
            process = psutil.Process(pid)
            created = process.create_time()
            cached = self._cache.get(pid)
            if cached is not None and cached[0] == created:
                return cached[1]
            chain = (pid,) + tuple(p.pid for p in process.parents())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return (pid,)  # e.g. a host PID outside this container's PID namespace
        self._cache[pid] = (created, chain)
        return chain

    def forget_all_but(self, pids: Iterable[int]) -> None:
        keep = set(pids)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]


def owner_of(
    pid: int, cmdline_kernel_id: Optional[str], ancestry: Ancestry, by_pid: Mapping[int, str], ids: Iterable[str]
) -> Optional[str]:
    """The id of this server's kernel that holds GPU process `pid`: the nearest kernel among the process and
    its ancestors; else the kernel id in its command line (`-f …/kernel-<id>.json`, e.g. a forked worker
    whose kernel the server does not run locally) when that kernel is this server's. None: not ours."""
    for ancestor in ancestry.of(pid):
        owner = by_pid.get(ancestor)
        if owner is not None:
            return owner
    if cmdline_kernel_id is not None and cmdline_kernel_id in set(ids):
        return cmdline_kernel_id
    return None
