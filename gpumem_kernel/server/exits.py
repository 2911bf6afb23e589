"""Why a kernel of this server died: the out-of-memory killer, or something else.

The most common host failure in a notebook is the kernel killed by the out-of-memory killer (workers × dataset
copies, a container limit that `free -h` does not show); JupyterLab then says only "The kernel appears to have
died". The server outlives the kernel, so it watches: for each local kernel it keeps the OOM-kill count of the
kernel's memory cgroup and of the machine (probe/oomkills.py), refreshed every second, and when the kernel
process is gone (the restarter's callback, or a new PID at the next look) it compares. A new kill in the kernel's
cgroup when the kernel died, and an exit by SIGKILL where the exit status is known, name the OOM killer.

Runs on the server's event loop: `sync` from the extension's PeriodicCallback, `check` from the request handler
and from jupyter_server's kernel start and restart events (`follow_starts`).
"""

from __future__ import annotations

import logging
import os
import signal as signals
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import psutil

from gpumem_kernel.probe.descendants import Descendants
from gpumem_kernel.probe.oomkills import OomKillCounter, count_in, counter_for, machine_count, peak_of
from gpumem_kernel.server.kernels import kernel_pid

log = logging.getLogger(__name__)

# Deaths kept per kernel (the browser asks about the last one).
KEPT = 5
# A kill counted this many seconds before the death is the death's: the counter rises when the killer picks its
# victim, and a large process takes a while to exit (still "alive" at a look in between).
WINDOW_S = 5.0


@dataclass
class _Watched:
    pid: int
    create_time: Optional[float]
    counter: OomKillCounter
    counts: List[Tuple[float, Optional[int], Optional[int]]]  # (time, cgroup's, machine's) of the last looks
    rss: Optional[int]  # the kernel's RSS at the last look
    children: Optional[int]  # its child processes (DataLoader workers) at the last look
    children_rss: Optional[int]


@dataclass(frozen=True)
class KernelExit:
    """One death of a kernel process (the kernel id lives on when the server restarts it)."""

    kernel_id: str
    pid: int
    time: float  # when the death was noticed, seconds since the epoch
    returncode: Optional[int]  # the exit status when the server reaped it; negative: the signal
    signal: Optional[str]  # "SIGKILL", … from returncode; None when unknown or a normal exit
    oom_killed: bool
    evidence: Optional[str]  # "cgroup": a new kill in its memory cgroup; "machine": only the machine's count
    kills: int  # new OOM kills counted at the death (in the cgroup, else on the machine)
    cgroup: Optional[str]
    limit: Optional[int]  # the memory limit over its cgroup, bytes; None: none (the machine's RAM)
    peak: Optional[int]  # the cgroup's highest memory usage, bytes (all its processes, not only the kernel)
    rss: Optional[int]  # the kernel's RSS at the server's last look (within a second of the death)
    children: Optional[int]  # its child processes (DataLoader workers) at that look
    children_rss: Optional[int]  # their summed RSS (shared pages counted once per worker)

    def to_payload(self) -> Dict[str, Any]:
        return asdict(self)


def _signal_name(returncode: Optional[int]) -> Optional[str]:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signals.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


@dataclass(frozen=True)
class _Look:
    create_time: Optional[float]  # None: the process is gone (or a zombie)
    rss: Optional[int] = None
    children: Optional[int] = None
    children_rss: Optional[int] = None


def _own(pid: int) -> Tuple[Optional[float], int]:
    """A living process's start time and RSS; (None, 0) when it is gone or a zombie."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None, 0
        return process.create_time(), process.memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None, 0


def _look(pid: int, descendants: Descendants) -> _Look:
    """A living process's start time, RSS and children's RSS (what it held just before a kill)."""
    created, rss = _own(pid)
    if created is None:
        return _Look(None)
    count = total = 0
    for child in descendants.of(pid):
        try:
            total += psutil.Process(child).memory_info().rss
            count += 1
        except psutil.Error:
            continue  # ended meanwhile
    return _Look(created, rss, count, total)


def _has_memory(pid: int, create_time: Optional[float]) -> bool:
    """Whether the process `pid` started at `create_time` still has its memory. An exiting process releases its
    memory before it leaves its cgroup, so one that has it after a cgroup read was in that cgroup when it was read."""
    created, rss = _own(pid)
    return created is not None and created == create_time and rss > 0


def _returncode(kernel: Any, pid: int) -> Optional[int]:
    """The exit status of the kernel's process `pid`: its provisioner's, once reaped (LocalProvisioner), else
    read from the unreaped child without reaping it (WNOWAIT: the provisioner still gets its status)."""
    process = getattr(getattr(kernel, "provisioner", None), "process", None)
    code = getattr(process, "returncode", None) if getattr(process, "pid", None) == pid else None
    if isinstance(code, int):
        return code
    try:
        found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (OSError, AttributeError):  # not our child, already reaped, or no waitid (Windows, macOS)
        return None
    if found is None or found.si_pid != pid:
        return None
    if found.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -found.si_status
    return found.si_status if found.si_code == os.CLD_EXITED else None


# jupyter_server's event for kernel starts, restarts and shutdowns (ServerKernelManager)
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


class ExitWatch:
    """kernel id → the deaths of its processes, for the local kernels of one kernel manager."""

    def __init__(
        self,
        kernel_manager: Any,
        *,
        cgroup_root: str = "/sys/fs/cgroup",
        proc: str = "/proc",
        vmstat: str = "/proc/vmstat",
        clock: Callable[[], float] = time.time,
        descendants: Optional[Descendants] = None,
    ) -> None:
        self.kernel_manager = kernel_manager
        self._descendants = descendants or Descendants()  # one walk of the machine serves every kernel
        self._root, self._proc, self._vmstat, self._clock = cgroup_root, proc, vmstat, clock
        self._watched: Dict[str, _Watched] = {}
        self._exits: Dict[str, List[KernelExit]] = {}
        self._callbacks: Dict[str, Tuple[Any, Callable[[], None]]] = {}
        self._total = psutil.virtual_memory().total

    def follow_starts(self, event_logger: Any) -> None:
        """Watch each kernel process from its start or restart, not from the next second's sync: a cell that
        fills the memory cgroup at once can be killed before that sync, and a process first seen dead has
        no cgroup left to read (jupyter_server's kernel action events; without them the sync still watches)."""

        async def on_action(logger: Any, schema_id: str, data: Dict[str, Any]) -> None:  # called by keyword
            if data.get("action") in ("start", "restart") and data.get("status") == "success":
                try:
                    self.check(str(data.get("kernel_id")))
                except Exception:  # the next sync looks again
                    log.exception("gpumem: could not watch kernel %s", data.get("kernel_id"))

        try:
            event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=on_action)
        except Exception:  # an older jupyter_server without kernel action events
            log.info("gpumem: kernel action events unavailable; kernels are watched from the next sync")

    def exits(self, kernel_id: str) -> List[KernelExit]:
        """The deaths seen of this kernel's processes, oldest first."""
        return list(self._exits.get(kernel_id, ()))

    def sync(self) -> None:
        """Look at every kernel: judge the ones whose process is gone, watch new processes."""
        ids = set(self.kernel_manager.list_kernel_ids())
        for kernel_id in ids:
            self.check(kernel_id)
        for gone in [k for k in self._watched if k not in ids]:  # shut down: no death to explain
            self._forget(gone)
        for gone in [k for k in self._exits if k not in ids]:
            del self._exits[gone]

    def check(self, kernel_id: str) -> Optional[KernelExit]:
        """Judge this kernel now if its watched process is gone; start watching its current process."""
        try:
            kernel = self.kernel_manager.get_kernel(kernel_id)
        except Exception:  # KeyError / HTTPError 404: shut down meanwhile
            return None
        self._follow_restarts(kernel_id, kernel)
        judged: Optional[KernelExit] = None
        watched = self._watched.get(kernel_id)
        if watched is not None:
            look = _look(watched.pid, self._descendants)
            replaced = watched.create_time is not None and look.create_time != watched.create_time
            if look.create_time is None or replaced:
                judged = self._judge(kernel_id, watched, _returncode(kernel, watched.pid))
            else:
                self._refresh(watched, look)
        pid = kernel_pid(kernel)
        if pid is not None and (kernel_id not in self._watched):
            self._watch(kernel_id, pid)
        return judged

    def _watch(self, kernel_id: str, pid: int) -> None:
        look = _look(pid, self._descendants)
        if look.create_time is None:
            return  # not started yet, or already gone: the next look decides
        counter = counter_for(pid, self._total, self._root, self._proc)
        self._watched[kernel_id] = _Watched(
            pid,
            look.create_time,
            counter,
            [(self._clock(), count_in(counter.events), machine_count(self._vmstat))],
            look.rss,
            look.children,
            look.children_rss,
        )

    def _refresh(self, watched: _Watched, look: _Look) -> None:
        """The counts now (a kill while the kernel lives, e.g. of a worker, is not its death) and its memory.
        The cgroup is read again: a launcher may move the kernel into its cgroup after it started.

        A process without memory is exiting (a kill's victim on a busy machine can be seen so): the kernel has
        released its pages and, before it becomes a zombie, reports it in the root cgroup, whose counter (cgroup
        v1's root memory.oom_control) never counted its kill. The last living look stands until it is gone."""
        if look.rss == 0:
            return
        counter = counter_for(watched.pid, self._total, self._root, self._proc)
        if counter.events != watched.counter.events and (counter.events is not None or watched.counter.events is None):
            if not _has_memory(watched.pid, watched.create_time):
                return  # it began to exit between the look and the cgroup read: that cgroup is the root's
            watched.counter = counter
            watched.counts.clear()  # another counter: its counts start here
        now = self._clock()
        watched.counts.append((now, count_in(watched.counter.events), machine_count(self._vmstat)))
        while len(watched.counts) > 1 and watched.counts[1][0] <= now - WINDOW_S:
            del watched.counts[0]  # keep the newest look older than the window: the baseline
        watched.rss, watched.children, watched.children_rss = look.rss, look.children, look.children_rss

    def _judge(self, kernel_id: str, watched: _Watched, returncode: Optional[int]) -> KernelExit:
        del self._watched[kernel_id]
        kills_now = count_in(watched.counter.events)
        machine_now = machine_count(self._vmstat)
        _, kills_before, machine_before = watched.counts[0]
        cgroup_new = kills_now - kills_before if kills_now is not None and kills_before is not None else None
        machine_new = machine_now - machine_before if machine_now is not None and machine_before is not None else None
        killed_by_sigkill = returncode is None or returncode == -signals.SIGKILL
        if cgroup_new is not None:
            evidence, kills = ("cgroup", cgroup_new) if cgroup_new > 0 else (None, 0)
        elif machine_new is not None and machine_new > 0:
            evidence, kills = "machine", machine_new
        else:
            evidence, kills = None, 0
        death = KernelExit(
            kernel_id=kernel_id,
            pid=watched.pid,
            time=self._clock(),
            returncode=returncode,
            signal=_signal_name(returncode),
            oom_killed=evidence is not None and killed_by_sigkill,
            evidence=evidence,
            kills=kills,
            cgroup=watched.counter.cgroup,
            limit=watched.counter.limit,
            peak=peak_of(watched.counter),
            rss=watched.rss,
            children=watched.children,
            children_rss=watched.children_rss,
        )
        kept = self._exits.setdefault(kernel_id, [])
        kept.append(death)
        del kept[:-KEPT]
        if death.oom_killed:
            log.warning(
                "gpumem: the out-of-memory killer ended kernel %s (PID %d; memory limit %s)",
                kernel_id,
                watched.pid,
                death.limit if death.limit is not None else "none",
            )
        return death

    def _follow_restarts(self, kernel_id: str, kernel: Any) -> None:
        """Judge at the restarter's callback, while the dead process's exit status is still the provisioner's."""
        restarter = getattr(kernel, "_restarter", None)
        known = self._callbacks.get(kernel_id)
        if restarter is None or (known is not None and known[0] is restarter):
            return

        def on_death() -> None:
            try:
                self.check(kernel_id)
            except Exception:  # never break the restarter: the next look judges it
                log.exception("gpumem: could not read why kernel %s died", kernel_id)

        for event in ("restart", "dead"):
            try:
                kernel.add_restart_callback(on_death, event)
            except Exception:
                return
        self._callbacks[kernel_id] = (restarter, on_death)

    def _forget(self, kernel_id: str) -> None:
        self._watched.pop(kernel_id, None)
        self._callbacks.pop(kernel_id, None)
