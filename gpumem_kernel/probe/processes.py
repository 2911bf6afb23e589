"""This kernel's child processes, and other processes named by (PID, start time): look up and end them.

Backs the comm actions `children`, `processes` and `terminate`. After a restart the browser asks the NEW
kernel about the OLD kernel's PID and its orphaned DataLoader workers. The start time the browser names only
tells a reused PID apart (anyone can read it), so it proves identity, not ownership: `terminate` ends only
this kernel's own descendants and the orphaned children of this kernel's predecessor in the same notebook
(lineage.py holds that proof), of this user, and refuses everything else with a reason.
Everything here is psutil plus a sample dict: safe on any thread (comm requests may run on a subshell).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import psutil

from gpumem_kernel.probe.descendants import descendant_pids
from gpumem_kernel.probe.lineage import Lineage
from gpumem_kernel.wire.protocol import ChildProcess, ProcessRank, ProcessRef, ProcessState, Refusal, Terminated

SAME_START = 0.01  # seconds: psutil's create_time is exact to the clock tick; more means another process
GRACE = 3.0  # seconds between SIGTERM and SIGKILL
KILL_WAIT = 2.0  # seconds to wait for SIGKILL to take effect
_POLL = 0.05
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


# --- GPU usage per PID, from a sample ----------------------------------------------------------------------


def _local_pid(process: Mapping[str, Any]) -> Any:
    """The PID in this kernel's namespace: NVML's host PID in a container, matched to this kernel or a process
    started from its notebook (probe/hostpid.py); the PID as listed otherwise."""
    local = process.get("local_pid")
    return (
        local
        if isinstance(local, int) and process.get("relation") in ("this_kernel", "notebook")
        else process.get("pid")
    )


def gpu_usage(sample: Optional[Mapping[str, Any]]) -> Optional[Dict[int, Optional[int]]]:
    """NVML bytes per PID over every device of a sample (wire format); None when the sample saw no GPU.

    A PID listed only with an unknown figure maps to None. A MIG slice counts only where its parent GPU did
    not list that PID (a MIG-enabled parent may list its slices' processes too), as for `kernel.gpu_used`.
    """
    gpu = (sample or {}).get("gpu") or {}
    devices = gpu.get("devices") or []
    if not gpu.get("available") or not devices:
        return None
    on_whole: Set[Tuple[int, int]] = {
        (d.get("nvml_index"), _local_pid(p)) for d in devices if not d.get("mig") for p in d.get("processes") or []
    }
    usage: Dict[int, Optional[int]] = {}
    for device in devices:
        for process in device.get("processes") or []:
            pid, used = _local_pid(process), process.get("used")
            if not isinstance(pid, int) or (device.get("mig") and (device.get("nvml_index"), pid) in on_whole):
                continue
            known = usage.get(pid)
            usage[pid] = known if used is None else (known or 0) + used
    return usage


def _gpu_used(usage: Optional[Dict[int, Optional[int]]], pid: int) -> Optional[int]:
    """0 when NVML works and does not list the PID; None when there is no GPU or the figure is unknown."""
    if usage is None:
        return None
    return usage[pid] if pid in usage else 0


def own_create_time() -> Optional[float]:
    """This kernel's start time, for `hello`: the browser names the kernel by (pid, create_time)."""
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


# --- a process's rank in a distributed run -------------------------------------------------------------------

_RANK_KEYS = (b"RANK", b"LOCAL_RANK", b"WORLD_SIZE")
ENVIRON_BYTES = 1 << 20  # an environment larger than this is not a launcher's: the rank is not looked for


def _environ_ints(raw: bytes) -> Dict[bytes, int]:
    """RANK, LOCAL_RANK and WORLD_SIZE among NUL-separated KEY=VALUE entries, where each is a whole number."""
    found: Dict[bytes, int] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in _RANK_KEYS:
            try:
                found[key] = int(value)
            except ValueError:
                continue  # not a launcher's rank (some other tool's RANK=...)
    return found


def parse_rank(raw: bytes) -> Optional[ProcessRank]:
    """The rank an environment (as /proc/PID/environ holds it) gives; None unless RANK and WORLD_SIZE are whole
    numbers with 0 <= RANK < WORLD_SIZE (LOCAL_RANK, where set, below WORLD_SIZE too)."""
    values = _environ_ints(raw)
    rank, world, local = values.get(b"RANK"), values.get(b"WORLD_SIZE"), values.get(b"LOCAL_RANK")
    if rank is None or world is None or not 0 <= rank < world:
        return None
    if local is not None and not 0 <= local < world:
        local = None
    return ProcessRank(rank=rank, local_rank=local, world_size=world)


RANKS_KEPT = 256  # ranks remembered by (pid, create_time): a few runs' worth of processes
_ranks: Dict[Tuple[int, float, str], ProcessRank] = {}
_ranks_lock = threading.Lock()  # the sampler and a sample taken on request may look at once


def _read_rank(pid: int, proc: str) -> Optional[ProcessRank]:
    folder = f"{proc}/{pid}"
    try:
        if os.stat(folder).st_uid != os.getuid():
            return None  # another user's process: its environment is not ours to read
        with open(f"{folder}/environ", "rb") as handle:
            raw = handle.read(ENVIRON_BYTES)
    except OSError:  # ended, or not readable (hidepid, a setuid process): no rank, never an error
        return None
    return parse_rank(raw)


def rank_of(pid: int, create_time: Optional[float] = None, proc: str = "/proc") -> Optional[ProcessRank]:
    """The rank of a process of this user in a distributed run it was started into (torchrun and most launchers
    set RANK, LOCAL_RANK and WORLD_SIZE before it execs), or None. A rank found is remembered per (pid,
    create_time): the sampler asks every second, and the environment is fixed at exec. No rank is not remembered:
    just after a fork, before its exec, a process still shows its parent's environment. A process forked without an
    exec keeps showing it, so a rank set by `os.environ` after the fork is not seen."""
    key = None if create_time is None else (pid, create_time, proc)
    if key is not None:
        with _ranks_lock:
            known = _ranks.get(key)
        if known is not None:
            return known
    found = _read_rank(pid, proc)
    if key is not None and found is not None:
        with _ranks_lock:
            if len(_ranks) >= RANKS_KEPT:
                _ranks.pop(next(iter(_ranks)))  # the oldest: its run has most likely ended
            _ranks[key] = found
    return found


# --- looking processes up ------------------------------------------------------------------------------------


def _name(process: psutil.Process) -> Optional[str]:
    try:
        return process.name()
    except psutil.Error:
        return None


def _rss(process: psutil.Process) -> Optional[int]:
    try:
        return int(process.memory_info().rss)
    except psutil.Error:
        return None


def _descendants(pid: int) -> List[psutil.Process]:
    """Looked up now: the table the user acts on, and the check before ending a process, need no stale entry."""
    found = []
    for child in descendant_pids(pid):
        try:
            found.append(psutil.Process(child))
        except psutil.Error:
            continue  # ended meanwhile
    return found


def children(sample: Optional[Mapping[str, Any]] = None, pid: Optional[int] = None) -> List[ChildProcess]:
    """Every live descendant of this kernel (DataLoader workers and their own children), by PID."""
    usage = gpu_usage(sample)
    found = []
    for process in _descendants(os.getpid() if pid is None else pid):
        try:
            with process.oneshot():
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue  # ended, waiting for its parent to reap it: holds no memory
                created = process.create_time()
                found.append(
                    ChildProcess(process.pid, created, _name(process), _rss(process), _gpu_used(usage, process.pid))
                )
        except psutil.Error:
            continue  # ended while we looked
    return sorted(found, key=lambda c: c.pid)


def _same(ref: ProcessRef) -> Tuple[Optional[psutil.Process], bool]:
    """(the running process with that PID or None, whether it is the one started at ref.create_time)."""
    try:
        process = psutil.Process(ref.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None, False
        return process, abs(process.create_time() - ref.create_time) <= SAME_START
    except psutil.Error:
        return None, False


def states(refs: Sequence[ProcessRef], sample: Optional[Mapping[str, Any]] = None) -> List[ProcessState]:
    """Whether each named process still runs; name and GPU usage only for the very same process (a reused
    PID's figures belong to someone else)."""
    usage = gpu_usage(sample)
    found = []
    for ref in refs:
        process, same = _same(ref)
        found.append(
            ProcessState(
                pid=ref.pid,
                create_time=ref.create_time,
                alive=process is not None,
                same_process=same,
                name=_name(process) if same and process is not None else None,
                gpu_used=_gpu_used(usage, ref.pid) if same else None,
            )
        )
    return found


# --- ending them -------------------------------------------------------------------------------------------


def _protected() -> Dict[int, str]:
    """PIDs never to signal: this kernel and every ancestor (its launcher, the Jupyter server, init)."""
    # This kernel's own label wins: in a container the kernel itself may be PID 1.
    protected = {1: "init", os.getpid(): "this kernel"}
    try:
        for parent in psutil.Process().parents():
            protected.setdefault(parent.pid, f"a parent of this kernel ({_name(parent) or 'unknown'})")
    except psutil.Error:
        pass
    return protected


def _ended(process: psutil.Process) -> bool:
    """Gone, or a zombie: it holds no memory any more; reaping it is its parent's business (a Popen or a
    multiprocessing worker of this kernel must be reaped by its owner, or the owner loses its exit status)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except _GONE:
        return True
    except psutil.Error:
        return False


def _wait(processes: List[psutil.Process], timeout: float) -> List[psutil.Process]:
    """The processes still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    running = [p for p in processes if not _ended(p)]
    while running and time.monotonic() < deadline:
        time.sleep(_POLL)
        running = [p for p in running if not _ended(p)]
    return running


def _signal(processes: List[psutil.Process], kill: bool, refused: List[Refusal]) -> List[psutil.Process]:
    """SIGTERM (or SIGKILL) each; those we may not signal go to `refused`. psutil re-checks the start time."""
    sent = []
    for process in processes:
        try:
            if kill:
                process.kill()
            else:
                process.terminate()
            sent.append(process)
        except _GONE:
            sent.append(process)  # ended meanwhile: counts as terminated
        except psutil.AccessDenied:
            refused.append(Refusal(process.pid, "permission denied (another user's process)"))
        except psutil.Error as exc:
            refused.append(Refusal(process.pid, f"{type(exc).__name__}: {exc}".splitlines()[0]))
    return sent


def _uid(process: psutil.Process) -> Optional[int]:
    try:
        return process.uids().real
    except psutil.Error:
        return None


def _descendant_pids() -> Set[int]:
    return {p.pid for p in _descendants(os.getpid())}


def _not_ours(process: psutil.Process, ref: ProcessRef, lineage: Optional[Lineage], mine: Set[int]) -> Optional[str]:
    """Why this kernel may not end `process`, or None when it may: a descendant of this kernel, or an orphaned
    child of this kernel's predecessor in the same notebook (started after it, now that it is gone)."""
    uid = _uid(process)
    if uid != os.getuid():
        return f"another user's process (uid {uid})" if uid is not None else "owner unknown"
    if process.pid in mine:
        return None
    run = lineage.predecessor_of(ref.pid, ref.create_time, SAME_START) if lineage is not None else None
    if run is None:
        return "not a process of this kernel or of its predecessor in this notebook"
    if _same(ProcessRef(run.pid, run.create_time))[1]:
        return f"its kernel (PID {run.pid}) is still running: that kernel ends it"
    if ref.create_time < run.create_time - SAME_START:
        return "started before the kernel it is said to belong to"
    return None


def terminate(refs: Sequence[ProcessRef], grace: float = GRACE, lineage: Optional[Lineage] = None) -> Terminated:
    """SIGTERM every named process that this kernel may end and that is still the same process, SIGKILL those
    alive after `grace` s.

    Never signals this kernel, its ancestors, a PID whose start time differs (reused by another process), or
    anything that is neither this kernel's descendant nor an orphaned child of its predecessor (`lineage`).
    """
    protected = _protected()
    mine = _descendant_pids()
    refused: List[Refusal] = []
    targets: List[psutil.Process] = []
    for ref in refs:
        if ref.pid in protected:
            refused.append(Refusal(ref.pid, protected[ref.pid]))
            continue
        process, same = _same(ref)
        if process is None:
            refused.append(Refusal(ref.pid, "not running"))
        elif not same:
            refused.append(Refusal(ref.pid, "start time differs: the PID now belongs to another process"))
        elif (reason := _not_ours(process, ref, lineage, mine)) is not None:
            refused.append(Refusal(ref.pid, reason))
        else:
            targets.append(process)
    sent = _signal(targets, kill=False, refused=refused)
    survivors = _wait(sent, grace)
    if survivors:
        killed = _signal(survivors, kill=True, refused=refused)
        for process in _wait(killed, KILL_WAIT):
            refused.append(Refusal(process.pid, "still running after SIGKILL"))
    refused_pids = {r.pid for r in refused}
    terminated = sorted(p.pid for p in sent if p.pid not in refused_pids)
    return Terminated(terminated=terminated, refused=refused)
