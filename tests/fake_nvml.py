"""A test double for the NVIDIA driver: a module-like object with pynvml's function names.

Handles are the FakeGpu / FakeMig objects themselves. Any function can be made to fail on a given
device by putting its name in `fail` with an NVML error code. A GPU draws `power_mw` and its energy counter
(mJ since the driver loaded) grows with time at that draw; `pre_volta()` makes one without the counter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}

GiB = 1024**3


class NVMLError(Exception):
    """Like pynvml.NVMLError: the return code is in `.value`, str() is NVML's text."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


@dataclass
class FakeMig:
    uuid: str
    gpu_instance: int
    compute_instance: int
    total: int = 10 * GiB
    used: int = 1 * GiB
    name: str = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    sm_count: int = 14
    processes: List[Tuple[int, Optional[int]]] = field(default_factory=list)
    fail: Dict[str, int] = field(default_factory=dict)


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total: int = 16 * GiB
    used: int = 2 * GiB
    cc: Tuple[int, int] = (8, 9)
    util: Tuple[int, int] = (37, 12)
    processes: List[Tuple[int, Optional[int]]] = field(default_factory=list)  # (pid, used bytes)
    graphics: List[Tuple[int, Optional[int]]] = field(default_factory=list)
    migs: List[Optional[FakeMig]] = field(default_factory=list)  # MIG slots; None = empty slot
    fail: Dict[str, int] = field(default_factory=dict)  # function name → NVML error code
    power_mw: int = 250_000  # the draw now; the energy counter grows at this rate
    power_limit_mw: int = 320_000
    energy_base_mj: int = 7_200_000  # the counter when the fake was made (2 Wh since the "driver load")
    born: float = field(default_factory=time.monotonic)


def pre_volta(name: str, uuid: str, **extra: object) -> FakeGpu:
    """A GPU older than Volta: power and its limit, but no energy counter (NVML: Not Supported)."""
    gpu = FakeGpu(name, uuid, cc=(6, 1), **extra)  # type: ignore[arg-type]
    gpu.fail.setdefault("nvmlDeviceGetTotalEnergyConsumption", NVML_ERROR_NOT_SUPPORTED)
    return gpu


class FakeNvml:
    """Stands in for the `pynvml` module."""

    NVMLError = NVMLError

    def __init__(self, gpus: List[FakeGpu], init_error: Optional[int] = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0
        self.calls: Dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _check(self, handle: object, name: str) -> None:
        self._count(name)
        code = getattr(handle, "fail", {}).get(name)
        if code is not None:
            raise NVMLError(code)

    def _whole_gpu(self, handle: object, name: str) -> None:
        """Power and energy are a whole GPU's: NVML says Not Supported on a MIG slice's handle."""
        self._check(handle, name)
        if isinstance(handle, FakeMig):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # --- system ---
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    # --- devices ---
    def nvmlDeviceGetCount(self) -> int:
        self._count("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        self._check(handle, "nvmlDeviceGetName")
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._check(handle, "nvmlDeviceGetUUID")
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=handle.total, used=handle.used, free=handle.total - handle.used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=handle.util[0], memory=handle.util[1])

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> Tuple[int, int]:
        self._check(handle, "nvmlDeviceGetCudaComputeCapability")
        return handle.cc

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> List[SimpleNamespace]:
        self._check(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu) -> List[SimpleNamespace]:
        self._check(handle, "nvmlDeviceGetGraphicsRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in getattr(handle, "graphics", [])]

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._whole_gpu(handle, "nvmlDeviceGetPowerUsage")
        return handle.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        self._whole_gpu(handle, "nvmlDeviceGetEnforcedPowerLimit")
        return handle.power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        """mJ since the driver loaded: the base plus the draw over the fake's lifetime (a constant draw)."""
        self._whole_gpu(handle, "nvmlDeviceGetTotalEnergyConsumption")
        return handle.energy_base_mj + round(handle.power_mw * (time.monotonic() - handle.born))

    # --- MIG ---
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if not handle.migs:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return len(handle.migs)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeMig:
        mig = handle.migs[index]
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMig) -> int:
        return handle.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMig) -> int:
        return handle.compute_instance

    def nvmlDeviceGetAttributes(self, handle: FakeMig) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetAttributes")
        return SimpleNamespace(multiprocessorCount=handle.sm_count)


def install_in_running_kernel(gpus: List[FakeGpu]) -> None:
    """Make the loaded extension sample this fake driver (the browser tests: this machine has no GPU).

    Re-initialises the kernel's shared Prober in place, under the sampler's probe lock, so the sampler
    thread, snapshots and the OOM handler all see the fake from their next sample on.
    """
    from gpumem_kernel import extension
    from gpumem_kernel.probe import prober as probe
    from gpumem_kernel.probe.nvml import Nvml

    loaded = extension.current()
    if loaded is None:
        raise RuntimeError("load gpumem_kernel first")
    prober = probe.default_prober()
    with loaded.sampler._probe_lock:
        prober.__init__(nvml=Nvml(module=FakeNvml(gpus)))


def install_in_running_server(module: object) -> None:
    """Make the loaded server extension (gpumem_kernel.server) read this fake driver from its next read on.

    The server's counterpart of install_in_running_kernel, called inside the Jupyter server process by the
    test-only server extension tests/server/server_fake_nvml.py: no production code reads a test switch.
    """
    from gpumem_kernel import server
    from gpumem_kernel.probe.nvml import Nvml

    loaded = server.current()
    if loaded is None:
        raise RuntimeError("load gpumem_kernel.server first")
    machine = loaded.machine
    with machine._lock:
        machine.prober.__init__(nvml=Nvml(module=module), env={})
        machine._view = None
