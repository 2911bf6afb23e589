"""One view of the machine for the Jupyter server: every GPU from NVML, every process holding GPU memory with
the kernel of this server it belongs to, and every kernel with its GPU memory and idle time.

The metrics collector and the `/gpumem/kernels` endpoint both read it. A view is kept for `max_age`
seconds (1 s): Prometheus, a dashboard and the panels of many users may ask at once, and each ask would
otherwise cost a round of NVML and /proc reads on the server's event loop. NVML is read through the
project's one reader (probe/prober.py), which never creates a CUDA context and never imports torch.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.probe.prober import Prober
from gpumem_kernel.server.activity import ExecutionWatch
from gpumem_kernel.server.hostpids import HostPidRecords
from gpumem_kernel.server.kernels import Ancestry, KernelFacts, owner_of, read_kernels

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuFacts:
    index: int  # NVML index (the machine's numbering, not a kernel's CUDA_VISIBLE_DEVICES)
    uuid: str
    name: str
    total: Optional[int]
    used: Optional[int]
    util_gpu: Optional[int]
    util_mem: Optional[int]


@dataclass(frozen=True)
class ProcessFacts:
    gpu: int
    uuid: str
    pid: int
    name: str
    used: Optional[int]  # None when NVML does not tell (no permission, WDDM)
    kernel_id: Optional[str]  # this server's kernel that holds it, or None
    path: str  # that kernel's notebook path ("" when none)


@dataclass(frozen=True)
class KernelView:
    facts: KernelFacts
    gpu_bytes: int  # NVML bytes of the kernel's process and its descendants, over every GPU
    idle_seconds: float

    @property
    def holds_gpu(self) -> bool:
        return self.gpu_bytes > 0


@dataclass(frozen=True)
class MachineView:
    time: float
    nvml_available: bool
    reason: Optional[str]  # why NVML is not available
    gpus: List[GpuFacts]
    processes: List[ProcessFacts]
    kernels: List[KernelView]
    errors: List[str] = field(default_factory=list)
    took: float = 0.0  # seconds spent reading it

    def idle_holders(self, idle_seconds: float) -> List[KernelView]:
        """Kernels that hold GPU memory and have been idle longer than `idle_seconds`, longest first."""
        found = [k for k in self.kernels if k.holds_gpu and k.idle_seconds > idle_seconds]
        return sorted(found, key=lambda k: -k.idle_seconds)


class MachineReader:
    """Reads a MachineView on demand, at most once per `max_age` seconds."""

    def __init__(
        self,
        kernel_manager: Any,
        session_manager: Any = None,
        prober: Optional[Prober] = None,
        max_age: float = 1.0,
        clock: Callable[[], float] = time.time,
        executions: Optional[ExecutionWatch] = None,
        hostpids: Optional[HostPidRecords] = None,
    ) -> None:
        self.kernel_manager = kernel_manager
        self.executions = executions
        self.session_manager = session_manager
        # env={}: the server's own CUDA_VISIBLE_DEVICES is irrelevant: it watches every GPU of the machine.
        self.prober = prober or Prober(env={})
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._ancestry = Ancestry()
        # in a container NVML lists host PIDs: the kernels say which are theirs (server/hostpids.py)
        self._hostpids = hostpids or HostPidRecords()
        self._view: Optional[MachineView] = None

    def view(self) -> MachineView:
        with self._lock:
            now = self._clock()
            if self._view is None or now - self._view.time >= self.max_age or now < self._view.time:
                self._view = self._read(now)
            return self._view

    def _read(self, now: float) -> MachineView:
        started = time.perf_counter()
        errors: List[str] = []
        try:
            executions = self.executions.get if self.executions is not None else (lambda kernel_id: None)
            kernels = read_kernels(self.kernel_manager, self.session_manager, executions)
        except Exception as exc:  # the metrics must answer whatever the kernel manager does
            log.warning("gpumem: could not list kernels: %s", exc)
            errors.append(f"kernels: {exc}")
            kernels = []
        try:
            gpu, nvml_errors = self.prober.gpus()
            errors.extend(nvml_errors)
            available, reason, devices = gpu.available, gpu.reason, [d for d in gpu.devices if not d.mig]
        except Exception as exc:  # a broken driver binding: report it, keep the kernel metrics
            log.warning("gpumem: NVML read failed: %s", exc)
            available, reason, devices = False, f"NVML read failed: {exc}", []

        by_pid = {k.pid: k.kernel_id for k in kernels if k.pid is not None}
        try:
            by_host_pid = self._hostpids.owners(kernels)
        except Exception as exc:  # a record the server cannot read: label by ancestry alone
            errors.append(f"host PID records: {exc}")
            by_host_pid = {}
        ids = [k.kernel_id for k in kernels]
        paths = {k.kernel_id: k.path for k in kernels}
        gpus: List[GpuFacts] = []
        processes: List[ProcessFacts] = []
        per_kernel: Dict[str, int] = {}
        for device in devices:
            uuid = device.uuid or ""
            gpus.append(
                GpuFacts(
                    device.nvml_index,
                    uuid,
                    device.name or "",
                    device.total,
                    device.used,
                    device.util_gpu,
                    device.util_mem,
                )
            )
            for p in device.processes:
                owner = by_host_pid.get(p.pid) or owner_of(p.pid, p.kernel_id, self._ancestry, by_pid, ids)
                processes.append(
                    ProcessFacts(
                        device.nvml_index, uuid, p.pid, p.name or "", p.used, owner, paths.get(owner or "", "")
                    )
                )
                if owner is not None and p.used:
                    per_kernel[owner] = per_kernel.get(owner, 0) + p.used
        self._ancestry.forget_all_but(p.pid for p in processes)
        views = [KernelView(k, per_kernel.get(k.kernel_id, 0), k.idle_seconds(now)) for k in kernels]
        took = time.perf_counter() - started
        return MachineView(now, available, reason, gpus, processes, views, errors, took)
