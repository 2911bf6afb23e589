"""Which of NVML's PIDs is this kernel, and which were started from this notebook, when NVML lists host PIDs.

Docker, Kubernetes, Colab and Kaggle run the kernel in its own PID namespace, and NVML names every process by
its PID on the host: the kernel's own `os.getpid()` is not in NVML's list, and its memory would show as another
process's. Nothing in the namespace says which host PID is ours, so it is inferred from what each sample sees,
without a CUDA context and without touching the user's tensors:

- the *window*: the PIDs NVML lists for the first time in the samples around the one in which this kernel's torch
  initialised CUDA (one before: NVML may list the context before torch marks CUDA initialised; one after: NVML
  may have been read just before the context existed) are the candidates;
- *tracking*: a candidate is this kernel when NVML's figure for it follows PyTorch's reserved bytes plus a
  roughly constant context (used - reserved stays within `tolerance`) while reserved changes by at least
  `confirm_move`; a candidate whose figure diverges twice in a row is dropped;
- where CUDA was initialised before the first sample (no window), tracking alone decides among the PIDs this
  namespace cannot see, on the devices where this kernel has reserved memory, whose figure fits reserved plus
  a context.

Until confirmed, a single candidate is "probably this kernel", and several that cannot be told apart are
"ambiguous": neither is ever counted as another process. Processes started from this notebook (its
descendants) are matched the same way: a new host PID appearing when a descendant starts CUDA (where the
machine has /dev/nvidia-uvm, a process that opened it has started CUDA; NVML alone only opens /dev/nvidiactl).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple

import psutil

MIB = 1024**2
GIB = 1024**3

TOLERANCE = 256 * MIB  # how far used - reserved may move (lazily loaded kernels grow the context a little)
CONFIRM_MOVE = 512 * MIB  # reserved must change this much while tracking before a candidate is confirmed
MAX_CONTEXT = 4 * GIB  # used - reserved above this is no CUDA context (fallback candidates only)
STRIKES = 2  # consecutive diverging samples that drop a candidate (one may be NVML and torch read apart)
CMDLINE_CHARS = 300

THIS_KERNEL = "this_kernel"
PROBABLY_THIS_KERNEL = "probably_this_kernel"
AMBIGUOUS = "ambiguous"
NOTEBOOK = "notebook"
OTHER_KERNEL = "other_kernel"
EXTERNAL = "external"


@dataclass(frozen=True)
class DeviceView:
    """What the matcher reads of one device in one sample."""

    key: str
    reserved: Optional[int]  # this kernel's allocator reserved bytes on it; None: torch does not see it
    used_by: Mapping[int, Optional[int]]  # NVML's PIDs and their figures (None: unknown)


@dataclass(frozen=True)
class Relation:
    """Who a PID NVML lists is, as far as this kernel can tell."""

    relation: str
    note: Optional[str] = None
    local_pid: Optional[int] = None  # its PID in this kernel's namespace, when known
    create_time: Optional[float] = None  # its start time (with local_pid: what `terminate` takes)
    cmdline: Optional[str] = None


@dataclass(frozen=True)
class Identity:
    create_time: float
    cmdline: Optional[str]


class LocalView:
    """What this PID namespace can see of a PID. Every answer tolerates a process ending while it is read."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self.has_uvm = os.path.exists("/dev/nvidia-uvm")  # CUDA is usable here: the fd signal means something

    def plausible(self, pid: int) -> bool:
        """A process of this namespace that may be the one NVML lists: it exists, and it has an NVIDIA device
        open or its open files cannot be read (another user's process)."""
        if not psutil.pid_exists(pid):
            return False
        fds = self._nvidia_fds(pid)
        return fds is None or bool(fds)

    def uses_cuda(self, pid: int) -> Optional[bool]:
        """True: it has /dev/nvidia-uvm open (CUDA started); False: it has not; None: cannot tell."""
        if not self.has_uvm:
            return None
        fds = self._nvidia_fds(pid)
        return None if fds is None else "/dev/nvidia-uvm" in fds

    def _nvidia_fds(self, pid: int) -> Optional[Set[str]]:
        folder = f"{self._proc}/{pid}/fd"
        try:
            names = os.listdir(folder)
        except OSError:
            return None
        found = set()
        for name in names:
            try:
                target = os.readlink(f"{folder}/{name}")
            except OSError:
                continue  # closed while we read
            if target.startswith("/dev/nvidia"):
                found.add(target)
        return found

    def identity(self, pid: int) -> Optional[Identity]:
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                created = process.create_time()
                try:
                    cmdline: Optional[str] = " ".join(process.cmdline())[:CMDLINE_CHARS] or None
                except psutil.AccessDenied:
                    cmdline = None
            return Identity(created, cmdline)
        except psutil.Error:
            return None


@dataclass
class _Candidate:
    pid: int
    fallback: bool
    baseline: Dict[str, int] = field(default_factory=dict)  # device key -> first used - reserved
    low: Optional[int] = None  # the smallest and largest reserved seen while it tracked
    high: Optional[int] = None
    strikes: int = 0

    def moved(self) -> int:
        return 0 if self.low is None or self.high is None else self.high - self.low


@dataclass
class _Child:
    """A descendant of this kernel that may hold GPU memory under a host PID."""

    pid: int
    identity: Identity
    started: Optional[int] = None  # the sample in which it was first seen using CUDA
    host_pid: Optional[int] = None


@dataclass(frozen=True)
class Learned:
    """What the matcher knows, for the record the Jupyter server reads."""

    kernel_host_pids: Tuple[int, ...]  # confirmed: one; probable: one; ambiguous: several
    kernel_state: str  # "direct" | "confirmed" | "probable" | "ambiguous" | "unknown"
    children: Tuple[Tuple[int, float, int], ...]  # (local pid, create time, host pid)


class HostPids:
    """Matches this kernel and its descendants to the PIDs NVML lists; feed it every sample (`update`)."""

    def __init__(
        self,
        pid: int,
        view: Optional[LocalView] = None,
        tolerance: int = TOLERANCE,
        confirm_move: int = CONFIRM_MOVE,
        max_context: int = MAX_CONTEXT,
    ) -> None:
        self.pid = pid
        self.view = view or LocalView()
        self.tolerance, self.confirm_move, self.max_context = tolerance, confirm_move, max_context
        self._tick = 0
        self._first_seen: Dict[int, int] = {}
        self._cuda_was: Optional[bool] = None
        self._flip: Optional[int] = None  # the sample in which this kernel's CUDA became initialised
        self._candidates: Dict[int, _Candidate] = {}
        self._dropped: Set[Tuple[int, int]] = set()  # (pid, first seen): a reused PID is a new process
        self._confirmed: Optional[int] = None
        self._direct = False
        self._children: Dict[int, _Child] = {}
        self._locality: Dict[int, Tuple[int, bool]] = {}  # pid -> (first seen, a process of this namespace)

    # --- the sample ------------------------------------------------------------------------------------

    def update(self, devices: Sequence[DeviceView], cuda_on: bool, descendants: Sequence[int]) -> Dict[int, Relation]:
        """The relation of every PID that is this kernel's or its notebook's (others are left out)."""
        self._tick += 1
        listed = {pid for device in devices for pid in device.used_by}
        self._see(listed)
        if cuda_on and self._cuda_was is False:
            self._flip = self._tick
        self._cuda_was = cuda_on
        self._direct = self.pid in listed
        if self._direct:
            self._candidates.clear()
            self._confirmed = None
        elif cuda_on:
            self._match_kernel(devices, listed)
        self._match_children(listed, descendants)
        return self._relations(listed)

    def _see(self, listed: Set[int]) -> None:
        for pid in listed:
            self._first_seen.setdefault(pid, self._tick)
        for pid in [p for p in self._first_seen if p not in listed]:
            del self._first_seen[pid]  # gone: if the PID comes back it is another process
            self._locality.pop(pid, None)
            self._candidates.pop(pid, None)
            if self._confirmed == pid:
                self._confirmed = None
        for child in self._children.values():
            if child.host_pid is not None and child.host_pid not in listed:
                child.host_pid = None

    # --- this kernel -----------------------------------------------------------------------------------

    def _local(self, pid: int) -> bool:
        """A process of this namespace (not a host PID only NVML knows); asked once while NVML lists the PID."""
        if pid == self.pid:
            return True
        seen = self._first_seen.get(pid, 0)
        known = self._locality.get(pid)
        if known is None or known[0] != seen:
            known = self._locality[pid] = (seen, self.view.plausible(pid))
        return known[1]

    def _taken(self) -> Set[int]:
        return {c.host_pid for c in self._children.values() if c.host_pid is not None}

    def _match_kernel(self, devices: Sequence[DeviceView], listed: Set[int]) -> None:
        if self._confirmed is not None:
            return
        taken = self._taken()
        for pid in self._window(listed) - taken:
            self._add(pid, fallback=False)
        if not self._candidates and not self._window_open():
            for pid in self._fallback(devices, listed) - taken:
                self._add(pid, fallback=True)
        for pid in list(self._candidates):
            if pid in taken:
                del self._candidates[pid]
        self._track(devices)
        sure = [c for c in self._candidates.values() if c.moved() >= self.confirm_move]
        if len(self._candidates) == 1 and sure:
            self._confirmed = sure[0].pid
            self._candidates.clear()

    def _window_open(self) -> bool:
        return self._flip is not None and self._tick <= self._flip + 1

    def _window(self, listed: Set[int]) -> Set[int]:
        if not self._window_open():
            return set()
        assert self._flip is not None
        return {
            pid
            for pid in listed
            if self._flip - 1 <= self._first_seen[pid] <= self._flip + 1
            and self._first_seen[pid] > 1
            and not self._local(pid)
        }

    def _fallback(self, devices: Sequence[DeviceView], listed: Set[int]) -> Set[int]:
        found: Set[int] = set()
        for device in devices:
            if not device.reserved:
                continue
            for pid, used in device.used_by.items():
                if used is None or self._local(pid):
                    continue
                if -self.tolerance <= used - device.reserved <= self.max_context:
                    found.add(pid)
        return found

    def _add(self, pid: int, fallback: bool) -> None:
        if pid in self._candidates or (pid, self._first_seen.get(pid, 0)) in self._dropped:
            return
        self._candidates[pid] = _Candidate(pid, fallback)

    def _track(self, devices: Sequence[DeviceView]) -> None:
        for candidate in list(self._candidates.values()):
            verdict = self._follows(candidate, devices)
            if verdict is False:
                candidate.strikes += 1
                if candidate.strikes >= STRIKES:
                    del self._candidates[candidate.pid]
                    self._dropped.add((candidate.pid, self._first_seen.get(candidate.pid, 0)))
            elif verdict is True:
                candidate.strikes = 0

    def _follows(self, candidate: _Candidate, devices: Sequence[DeviceView]) -> Optional[bool]:
        """Whether its NVML figure follows reserved plus a constant context on every device this kernel uses;
        None when nothing can be compared yet."""
        compared = False
        for device in devices:
            if device.reserved is None:
                continue
            used = device.used_by.get(candidate.pid)
            if used is None:
                if device.reserved > 0 and candidate.pid not in device.used_by:
                    return False  # this kernel holds memory there; its process would be listed
                continue
            offset = used - device.reserved
            baseline = candidate.baseline.setdefault(device.key, offset)
            if offset < -self.tolerance or abs(offset - baseline) > self.tolerance:
                return False
            compared = True
            candidate.low = device.reserved if candidate.low is None else min(candidate.low, device.reserved)
            candidate.high = device.reserved if candidate.high is None else max(candidate.high, device.reserved)
        return True if compared else None

    # --- the notebook's processes -----------------------------------------------------------------------

    def _match_children(self, listed: Set[int], descendants: Sequence[int]) -> None:
        alive = set(descendants)
        for pid in [p for p in self._children if p not in alive]:
            del self._children[pid]  # ended: its host PID (if NVML still lists it) is someone else's now
        for pid in alive:
            child = self._children.get(pid)
            identity = self.view.identity(pid)
            if identity is None:
                continue
            if child is None or abs(child.identity.create_time - identity.create_time) > 0.01:
                child = self._children[pid] = _Child(pid, identity)
            else:
                child.identity = identity  # read again: just after fork it still has its parent's command line
            if child.started is None and pid not in listed:
                uses = self.view.uses_cuda(pid)
                if uses is True or uses is None:  # None: no fd signal here; its first sample is the moment
                    child.started = self._tick
        self._pair_children(listed)

    def _pair_children(self, listed: Set[int]) -> None:
        waiting = [c for c in self._children.values() if c.host_pid is None and c.started is not None]
        if not waiting or self._direct:
            return
        busy = self._taken() | set(self._candidates) | {self._confirmed}
        fresh = [pid for pid in listed if pid not in busy and pid not in self._children and not self._local(pid)]
        for child in waiting:
            assert child.started is not None
            started = child.started
            # CUDA starts after the child opened /dev/nvidia-uvm (or appeared), so NVML lists it then or one later
            pool = [pid for pid in fresh if started <= self._first_seen[pid] <= started + 1]
            rivals = [c for c in waiting if c.started is not None and abs(c.started - started) <= 1]
            if len(pool) == 1 and len(rivals) == 1:
                child.host_pid = pool[0]
                fresh.remove(pool[0])

    # --- the answer -------------------------------------------------------------------------------------

    def _relations(self, listed: Set[int]) -> Dict[int, Relation]:
        found: Dict[int, Relation] = {}
        if self._direct:
            found[self.pid] = Relation(THIS_KERNEL, None, self.pid)
        elif self._confirmed is not None:
            found[self._confirmed] = Relation(
                THIS_KERNEL,
                f"host PID of this kernel (local PID {self.pid}): NVML's figure follows PyTorch's reserved memory",
                self.pid,
            )
        elif len(self._candidates) == 1:
            (pid,) = self._candidates
            found[pid] = Relation(PROBABLY_THIS_KERNEL, self._probable_note(self._candidates[pid]), self.pid)
        elif self._candidates:
            pids = ", ".join(str(p) for p in sorted(self._candidates))
            note = f"this kernel is one of host PIDs {pids} (they cannot be told apart yet)"
            found.update({pid: Relation(AMBIGUOUS, note) for pid in self._candidates})
        for child in self._children.values():
            host = child.pid if child.pid in listed else child.host_pid
            if host is None or host in found:
                continue
            note = None if host == child.pid else f"host PID of process {child.pid} started from this notebook"
            found[host] = Relation(NOTEBOOK, note, child.pid, child.identity.create_time, child.identity.cmdline)
        return found

    @staticmethod
    def _probable_note(candidate: _Candidate) -> str:
        why = (
            "its memory fits this kernel's reserved memory plus a CUDA context"
            if candidate.fallback
            else "it appeared when this kernel initialised CUDA"
        )
        return f"probably this kernel (host PID {candidate.pid}): {why}; not yet confirmed"

    def learned(self) -> Learned:
        if self._direct:
            state, pids = "direct", (self.pid,)
        elif self._confirmed is not None:
            state, pids = "confirmed", (self._confirmed,)
        elif len(self._candidates) == 1:
            state, pids = "probable", tuple(self._candidates)
        elif self._candidates:
            state, pids = "ambiguous", tuple(sorted(self._candidates))
        else:
            state, pids = "unknown", ()
        children = tuple(
            sorted(
                (c.pid, c.identity.create_time, c.host_pid) for c in self._children.values() if c.host_pid is not None
            )
        )
        return Learned(pids, state, children)


def relation_of_unmatched(kernel_id: Optional[str]) -> str:
    """A PID neither this kernel's nor its notebook's: another Jupyter kernel, or anything else."""
    return OTHER_KERNEL if kernel_id else EXTERNAL
