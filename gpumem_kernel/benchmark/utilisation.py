"""GPU utilisation, device memory, power and energy during the measured steps, sampled from NVML in a thread."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, List, Optional, Tuple

from gpumem_kernel.probe.power import Energy, PowerReader, energy_between

Reading = Tuple[float, Optional[int], Optional[int]]  # (time s, energy counter mJ, power mW)


class UtilSampler:
    """GPU utilisation, device memory used and power, from NVML in a daemon thread (never creates a CUDA
    context), and the energy counter at start and stop. `source` (an Nvml and a device handle) is for tests."""

    def __init__(
        self, cuda_index: Optional[int], interval: float = 0.05, source: Optional[Tuple[Any, Any]] = None
    ) -> None:
        self.interval = interval
        self.util: List[float] = []
        self.used: List[int] = []
        self.power: List[Reading] = []
        self.total: Optional[int] = None
        self.power_note: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if source is None:
            source = _nvml_handle(cuda_index) if cuda_index is not None else (None, None)
        self._nvml, self._handle = source
        self._power = PowerReader(self._nvml) if self._handle is not None else None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def _read_power(self) -> None:
        if self._power is None:
            return
        reading = self._power.read("benchmark", self._handle)
        self.power.append((time.monotonic(), reading.energy_mj, reading.power_mw))
        self.power_note = reading.note

    def _read(self) -> None:
        try:
            rates = self._nvml.call("nvmlDeviceGetUtilizationRates", self._handle)
            memory = self._nvml.call("nvmlDeviceGetMemoryInfo", self._handle)
        except Exception:
            return  # a failed read leaves a gap; the next one may work
        self.util.append(float(rates.gpu))
        self.used.append(int(memory.used))
        self.total = int(memory.total)
        self._read_power()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def start(self) -> None:
        if self._handle is not None and self._thread is None:
            self._read_power()  # the counter when the measured steps begin
            self._thread = threading.Thread(target=self._run, name="gpumem-benchmark-util", daemon=True)
            self._thread.start()

    def stop(self) -> Tuple[Optional[float], Optional[int]]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self._thread = None
            self._read()  # at least one reading for very short runs, and the counter at the end
        mean = round(statistics.fmean(self.util), 1) if self.util else None
        return mean, (max(self.used) if self.used else None)

    def energy(self) -> Optional[Energy]:
        """The whole GPU's energy from start to stop (the counter, else power × time); None without NVML."""
        return energy_between(self.power) if self._power is not None else None


def _nvml_handle(cuda_index: int) -> Tuple[Any, Any]:
    try:
        from gpumem_kernel.probe.prober import default_prober, probe

        devices = [d for d in probe().gpu.devices if d.cuda_index == cuda_index and not d.mig]
        nvml = default_prober().nvml
        if not devices or nvml.start() is not None:
            return None, None
        return nvml, nvml.call("nvmlDeviceGetHandleByIndex", devices[0].nvml_index)
    except Exception:
        return None, None
