"""One `sample` of the wire format: every GPU NVML sees, who uses it, this kernel's share, the host.

Runs every second in the sampler thread while the user trains, so it is kept cheap: static device facts,
NVML handles and process names are cached; only the processes NVML lists are looked at (never the
whole process table). It never imports torch and never initialises CUDA (see torchstats).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import psutil

from gpumem_kernel import current
from gpumem_kernel.probe.descendants import Descendants
from gpumem_kernel.probe.devices import MigInstance, Visible, device_order, visible_devices
from gpumem_kernel.probe.host import HostReader
from gpumem_kernel.probe.hostpid import (
    AMBIGUOUS,
    NOTEBOOK,
    PROBABLY_THIS_KERNEL,
    THIS_KERNEL,
    DeviceView,
    HostPids,
    LocalView,
    Relation,
    relation_of_unmatched,
)
from gpumem_kernel.probe.nvml import Nvml, describe_error
from gpumem_kernel.probe.hostpidrecord import HostPidRecord
from gpumem_kernel.probe.power import PowerReader
from gpumem_kernel.probe.processes import rank_of
from gpumem_kernel.wire.protocol import Device, Gpu, GpuProcess, KernelInfo, Sample
from gpumem_kernel.probe.torchstats import allocator_stats, cuda_initialised, sm_counts, torch_info

# Jupyter starts kernels with `-f …/kernel-<kernel id>.json`; the id names the notebook's session.
_KERNEL_FILE = re.compile(r"kernel-([A-Za-z0-9_-]+)\.json")


def _text(value: Any) -> str:
    """NVML strings are bytes in old nvidia-ml-py releases and str in new ones."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def kernel_id_from_cmdline(cmdline: Sequence[str]) -> Optional[str]:
    """The Jupyter kernel id in a process's command line, or None."""
    for arg in cmdline:
        match = _KERNEL_FILE.search(os.path.basename(arg))
        if match:
            return match.group(1)
    return None


@dataclass(frozen=True)
class _ProcessFacts:
    create_time: float
    name: Optional[str]
    kernel_id: Optional[str]


class ProcessNames:
    """Name and Jupyter kernel id of a PID, cached by (pid, create time) so a reused PID is re-read."""

    def __init__(self) -> None:
        self._cache: Dict[int, _ProcessFacts] = {}

    def lookup(self, pid: int) -> Tuple[Optional[str], Optional[str]]:
        try:
            process = psutil.Process(pid)  # reads the create time: cheap identity check
            cached = self._cache.get(pid)
            if cached is None or cached.create_time != process.create_time():
                with process.oneshot():
                    cached = _ProcessFacts(process.create_time(), process.name(), self._kernel_id(process))
                self._cache[pid] = cached
            return cached.name, cached.kernel_id
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            # e.g. NVML reports host PIDs that do not exist in a container's PID namespace
            return None, None

    @staticmethod
    def _kernel_id(process: psutil.Process) -> Optional[str]:
        try:
            return kernel_id_from_cmdline(process.cmdline())
        except (psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def forget_all_but(self, pids: Sequence[int]) -> None:
        keep = set(pids)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]


@dataclass
class _StaticFacts:
    name: Optional[str]
    uuid: Optional[str]
    compute_capability: Optional[str]
    sm_count: Optional[int] = None


def _cuda_version(value: int) -> str:
    """NVML's CUDA driver version 12040 → "12.4"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


class Prober:
    """Takes samples; keeps the caches that make a sample cheap. Call it to get a `Sample` (seq 0)."""

    def __init__(
        self,
        nvml: Optional[Nvml] = None,
        env: Optional[Mapping[str, str]] = None,
        host: Optional[HostReader] = None,
        pid: Optional[int] = None,
        view: Optional[LocalView] = None,
        descendants: Optional[Callable[[int], List[int]]] = None,
        record: Optional[HostPidRecord] = None,
    ) -> None:
        self.nvml = nvml or Nvml()
        self._env = env  # None: read os.environ each time (users set CUDA_VISIBLE_DEVICES in a cell)
        self.pid = os.getpid() if pid is None else pid
        # one lookup of this kernel's descendants for the host's workers and the GPU's notebook processes: where
        # it is a walk over every process, one walk within its budget serves both
        walk = Descendants()
        self._host = host or HostReader(self.pid, descendants=walk)
        self._names = ProcessNames()
        self._handles: Optional[List[Any]] = None
        self._static: Dict[str, _StaticFacts] = {}
        self._migs: Optional[List[Tuple[MigInstance, Any]]] = None
        self._versions: Optional[Tuple[Optional[str], Optional[str]]] = None
        self._power = PowerReader(self.nvml)
        # who NVML's host PIDs are (a container lists them, not this namespace's): learned sample by sample
        self.hostpids = HostPids(self.pid, view)
        self._descendants = descendants or walk.of
        # the kernel's own prober tells the Jupyter server what it learned (no file outside an ipykernel)
        self._record = record or (
            HostPidRecord.for_this_kernel(self.pid, _create_time(self.pid)) if pid is None else None
        )

    # --- NVML calls that turn failures into error strings ---------------------------------------

    def _query(self, function: str, handle: Any, label: str, errors: List[str]) -> Any:
        try:
            return self.nvml.call(function, handle)
        except Exception as exc:  # NVMLError (NOT_SUPPORTED, GPU_IS_LOST, …) or a missing old function
            errors.append(f"{function}({label}): {describe_error(exc)}")
            return None

    def _versions_once(self, errors: List[str]) -> Tuple[Optional[str], Optional[str]]:
        if self._versions is None:
            driver = None
            try:
                driver = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
            except Exception as exc:
                errors.append(f"nvmlSystemGetDriverVersion: {describe_error(exc)}")
            cuda = None
            try:
                cuda = _cuda_version(int(self.nvml.call("nvmlSystemGetCudaDriverVersion")))
            except Exception as exc:
                errors.append(f"nvmlSystemGetCudaDriverVersion: {describe_error(exc)}")
            self._versions = (driver, cuda)
        return self._versions

    def driver_version(self) -> Optional[str]:
        """NVML's driver version, read once and kept: no sample is taken for it."""
        return self._versions_once([])[0]

    def _device_handles(self) -> List[Any]:
        # GPUs do not appear or disappear under a running driver: count and handles are fetched once.
        if self._handles is None:
            count = int(self.nvml.call("nvmlDeviceGetCount"))
            self._handles = [self.nvml.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        return self._handles

    def _facts(self, key: str, handle: Any, label: str, errors: List[str], mig: bool = False) -> _StaticFacts:
        facts = self._static.get(key)
        if facts is None:
            name = self._query("nvmlDeviceGetName", handle, label, errors)
            uuid = self._query("nvmlDeviceGetUUID", handle, label, errors)
            cc = None if mig else self._query("nvmlDeviceGetCudaComputeCapability", handle, label, errors)
            # NVML knows the SM count of a MIG slice; for whole GPUs only torch tells it (once CUDA is up).
            attrs = self._query("nvmlDeviceGetAttributes", handle, label, errors) if mig else None
            facts = _StaticFacts(
                name=_text(name) if name is not None else None,
                uuid=_text(uuid) if uuid is not None else None,
                compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
                sm_count=int(attrs.multiprocessorCount) if attrs is not None else None,
            )
            if name is not None and uuid is not None:
                self._static[key] = facts  # cache only complete facts; a failed query is retried
        return facts

    def _mig_instances(self) -> List[Tuple[MigInstance, Any]]:
        """Every MIG slice on the machine with its handle; enumerated once, only if CUDA_VISIBLE_DEVICES names one."""
        if self._migs is None:
            found: List[Tuple[MigInstance, Any]] = []
            for parent, handle in enumerate(self._device_handles()):
                try:
                    slots = int(self.nvml.call("nvmlDeviceGetMaxMigDeviceCount", handle))
                except Exception:
                    continue  # not MIG-capable
                for slot in range(slots):
                    try:
                        mig = self.nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
                        uuid = _text(self.nvml.call("nvmlDeviceGetUUID", mig))
                    except Exception:
                        continue  # empty slot (NVML_ERROR_NOT_FOUND) or a slice being torn down
                    found.append(
                        (
                            MigInstance(
                                parent,
                                slot,
                                uuid,
                                self._optional_int("nvmlDeviceGetGpuInstanceId", mig),
                                self._optional_int("nvmlDeviceGetComputeInstanceId", mig),
                            ),
                            mig,
                        )
                    )
            self._migs = found
        return self._migs

    def _optional_int(self, function: str, handle: Any) -> Optional[int]:
        try:
            return int(self.nvml.call(function, handle))
        except Exception:
            return None

    # --- per-device measurement ------------------------------------------------------------------

    def _processes(self, handle: Any, label: str, errors: List[str]) -> List[GpuProcess]:
        used_by: Dict[int, Optional[int]] = {}
        for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for info in self._query(function, handle, label, errors) or ():
                used = getattr(info, "usedGpuMemory", None)  # None on WDDM / without permission
                previous = used_by.get(info.pid)
                used_by[info.pid] = used if previous is None else max(previous, used or 0)
        result = []
        for pid, used in used_by.items():
            name, kernel_id = self._names.lookup(pid)
            result.append(GpuProcess(pid=pid, name=name, used=used, kernel_id=kernel_id, this_kernel=pid == self.pid))
        return result

    def _device(
        self,
        nvml_index: int,
        handle: Any,
        cuda_index: Optional[int],
        label: str,
        errors: List[str],
        mig: bool = False,
        parent_facts: Optional[_StaticFacts] = None,
    ) -> Device:
        facts = self._facts(label, handle, label, errors, mig=mig)
        memory = self._query("nvmlDeviceGetMemoryInfo", handle, label, errors)
        util = None if mig else self._query("nvmlDeviceGetUtilizationRates", handle, label, errors)
        power = self._power.read(label, handle, mig=mig)
        processes = self._processes(handle, label, errors)
        mine = [p for p in processes if p.this_kernel]
        this_kernel = sum(p.used or 0 for p in mine) if mine and all(p.used is not None for p in mine) else None
        return Device(
            nvml_index=nvml_index,
            cuda_index=cuda_index,
            name=facts.name,
            uuid=facts.uuid,
            mig=mig,
            total=int(memory.total) if memory is not None else None,
            used=int(memory.used) if memory is not None else None,
            free=int(memory.free) if memory is not None else None,
            util_gpu=int(util.gpu) if util is not None else None,
            util_mem=int(util.memory) if util is not None else None,
            compute_capability=facts.compute_capability or (parent_facts.compute_capability if parent_facts else None),
            sm_count=facts.sm_count,
            this_kernel=this_kernel,
            allocator=None,
            processes=processes,
            power_mw=power.power_mw,
            power_limit_mw=power.limit_mw,
            energy_mj=power.energy_mj,
            power_note=power.note,
        )

    def _devices(self, visible_value: Optional[str], errors: List[str]) -> List[Device]:
        handles = self._device_handles()
        uuids = [self._facts(str(i), h, str(i), errors).uuid or "" for i, h in enumerate(handles)]
        mig_handles: Dict[str, Any] = {}

        def mig_list() -> List[MigInstance]:
            pairs = self._mig_instances()
            mig_handles.update({m.uuid: h for m, h in pairs})
            return [m for m, _ in pairs]

        visible: List[Visible] = visible_devices(visible_value, uuids, mig_list)
        whole = {v.nvml_index: n for n, v in enumerate(visible) if v.mig is None}
        devices: List[Device] = []
        for index, handle in enumerate(handles):
            parent = self._facts(str(index), handle, str(index), errors)
            devices.append(self._device(index, handle, whole.get(index), str(index), errors))
            for n, v in enumerate(visible):  # MIG slices this kernel uses follow their GPU
                if v.mig is not None and v.nvml_index == index:
                    label = f"{index}/{v.mig.uuid}"
                    devices.append(
                        self._device(index, mig_handles[v.mig.uuid], n, label, errors, mig=True, parent_facts=parent)
                    )
        self._names.forget_all_but([p.pid for d in devices for p in d.processes])
        return devices

    def _gpu(self, errors: List[str]) -> Gpu:
        env = os.environ if self._env is None else self._env
        visible_value = env.get("CUDA_VISIBLE_DEVICES")
        order = device_order(env)

        def unavailable(reason: str) -> Gpu:
            return Gpu(False, reason, None, None, visible_value, order, [])

        reason = self.nvml.start()
        if reason is not None:
            return unavailable(reason)
        driver, cuda = self._versions_once(errors)
        try:
            if not self._device_handles():
                return unavailable("NVML found no NVIDIA GPU")
        except Exception as exc:
            self._handles = None
            return unavailable(f"NVML could not list GPUs: {describe_error(exc)}")
        devices = self._devices(visible_value, errors)
        return Gpu(True, None, driver, cuda, visible_value, order, devices)

    def gpus(self) -> Tuple[Gpu, List[str]]:
        """Only what NVML says about every GPU and its processes, with the problems met (no host memory, no
        torch): what the Jupyter server's extension reads for the whole machine (gpumem_kernel/server/)."""
        errors: List[str] = []
        return self._gpu(errors), errors

    # --- the sample ------------------------------------------------------------------------------

    def _attach_torch(self, devices: List[Device], errors: List[str]) -> None:
        try:
            stats = allocator_stats()
            sms = sm_counts()
        except Exception as exc:  # a torch build without the stats API, a device lost mid-call
            errors.append(f"torch.cuda.memory_stats: {describe_error(exc)}")
            return
        for device in devices:
            if device.cuda_index is not None:
                device.allocator = stats.get(device.cuda_index)
                device.sm_count = sms.get(device.cuda_index, device.sm_count)

    def _relate(self, devices: List[Device]) -> None:
        """Label every process (this kernel, probably, ambiguous, the notebook's, another kernel, external) and
        sum each device's figures by those labels; in a container the host PIDs are matched (hostpid.py)."""
        views = [
            DeviceView(
                _key(d), d.allocator.reserved if d.allocator is not None else None, {p.pid: p.used for p in d.processes}
            )
            for d in devices
        ]
        try:
            descendants = self._descendants(self.pid)
        except Exception:
            descendants = []  # the process table changed under us: next sample
        relations = self.hostpids.update(views, cuda_initialised(), descendants)
        for device in devices:
            for process in device.processes:
                _label(process, relations.get(process.pid))
            device.this_kernel = _figure(device.processes, (THIS_KERNEL, PROBABLY_THIS_KERNEL))
            device.notebook_processes = _figure(device.processes, (NOTEBOOK,))
            device.uncertain = _figure(device.processes, (AMBIGUOUS,))
        if self._record is not None:
            self._record.write(self.hostpids.learned())

    def __call__(self) -> Sample:
        errors: List[str] = []
        gpu = self._gpu(errors)
        self._attach_torch(gpu.devices, errors)
        if gpu.devices:
            self._relate(gpu.devices)
        return Sample(
            seq=0,
            time=time.time(),
            gpu=gpu,
            kernel=KernelInfo(pid=self.pid, gpu_used=_kernel_total(gpu.devices), torch=torch_info()),
            host=self._host.read(),
            errors=errors,
        )


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def _key(device: Device) -> str:
    return f"{device.nvml_index}/{device.uuid}" if device.mig else str(device.nvml_index)


def _label(process: GpuProcess, relation: Optional[Relation]) -> None:
    if relation is None:
        process.relation = relation_of_unmatched(process.kernel_id)
        process.this_kernel = False
        return
    process.relation = relation.relation
    process.this_kernel = relation.relation == THIS_KERNEL
    process.note, process.local_pid = relation.note, relation.local_pid
    process.create_time, process.cmdline = relation.create_time, relation.cmdline
    if relation.relation == NOTEBOOK and relation.local_pid is not None:
        process.rank = rank_of(relation.local_pid, relation.create_time)


def _figure(processes: Sequence[GpuProcess], relations: Tuple[str, ...]) -> Optional[int]:
    """NVML's figures summed over the processes of these relations; None when none is listed or one is unknown."""
    chosen = [p for p in processes if p.relation in relations]
    return sum(p.used or 0 for p in chosen) if chosen and all(p.used is not None for p in chosen) else None


def _kernel_total(devices: Sequence[Device]) -> Optional[int]:
    """This PID's NVML usage over all GPUs; a MIG slice counts only when its parent GPU did not list us
    (a MIG-enabled parent may list the processes of its slices too)."""
    listed_on_whole = {d.nvml_index for d in devices if not d.mig and d.this_kernel is not None}
    figures = [
        d.this_kernel for d in devices if d.this_kernel is not None and not (d.mig and d.nvml_index in listed_on_whole)
    ]
    return sum(figures) if figures else None


def default_prober() -> Prober:
    """The loaded extension's Prober (one NVML session, one set of caches, sampled by its sampler's thread), else a
    new one for this caller alone: without the extension nothing else samples through it."""
    kernel = current.kernel()
    return kernel.prober if kernel is not None else Prober()


def probe(
    nvml: Optional[Nvml] = None,
    env: Optional[Mapping[str, str]] = None,
    host: Optional[HostReader] = None,
    pid: Optional[int] = None,
) -> Sample:
    """Take one sample now. With no arguments it uses the loaded extension's Prober and its caches, else the one
    prober the calls without the extension share (gpumem_kernel.current: NVML starts once, not at every call)."""
    if nvml is None and env is None and host is None and pid is None:
        kernel = current.kernel()
        return kernel.prober() if kernel is not None else current.probe_alone(Prober)
    return Prober(nvml=nvml, env=env, host=host, pid=pid)()


ProbeFunction = Callable[[], Sample]
