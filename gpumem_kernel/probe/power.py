"""Power draw, power limit and energy of a GPU from NVML, and the energy of a span of time from them.

NVML reads these without a CUDA context. Each figure is optional: NVML says Not Supported for the energy
counter before Volta, for power on some boards, and for all three on a MIG slice (they are the whole GPU's).
A function a device does not support is not called again; the reading then carries a note saying why a
figure is missing. Where the counter is missing but power is read, energy is power × time, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpumem_kernel.probe.nvml import Nvml, describe_error, error_code

NVML_ERROR_NOT_SUPPORTED = 3
POWER = "nvmlDeviceGetPowerUsage"  # mW
LIMIT = "nvmlDeviceGetEnforcedPowerLimit"  # mW
ENERGY = "nvmlDeviceGetTotalEnergyConsumption"  # mJ since the driver loaded (Volta and newer)
MIG_NOTE = "power and energy are the whole GPU's: NVML does not report them per MIG slice"
NO_COUNTER = "no energy counter on this GPU (NVML has it from Volta on): energy is power × time"
ESTIMATED = "from power readings × time: this GPU has no energy counter"
MJ_PER_WH = 3_600_000


@dataclass(frozen=True)
class PowerReading:
    """One device's figures (NVML's units: mW, mJ); None where not measured, with the reason in `note`."""

    power_mw: Optional[int]
    limit_mw: Optional[int]
    energy_mj: Optional[int]
    note: Optional[str]


def _why(function: str, reason: str) -> str:
    if function == ENERGY:
        return "no energy counter: " + reason
    return ("no power limit: " if function == LIMIT else "no power reading: ") + reason


class PowerReader:
    """Reads power, limit and energy; remembers per device (its key) what NVML does not support there."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self._unsupported: Dict[Tuple[str, str], str] = {}  # (device key, function) → why

    def _read(self, key: str, function: str, handle: Any, notes: List[str]) -> Optional[int]:
        known = self._unsupported.get((key, function))
        if known is not None:
            notes.append(known)
            return None
        try:
            return int(self.nvml.call(function, handle))
        except Exception as exc:  # NVMLError, or an old binding without the function
            if error_code(exc) == NVML_ERROR_NOT_SUPPORTED or isinstance(exc, AttributeError):
                why = NO_COUNTER if function == ENERGY else _why(function, "not supported by NVML on this GPU")
                self._unsupported[(key, function)] = why
            else:
                why = _why(function, f"{function}: {describe_error(exc)}")
            notes.append(why)
            return None

    def read(self, key: str, handle: Any, mig: bool = False) -> PowerReading:
        """The figures of the device `key` (a label unique per device); a MIG slice gets none, and the note."""
        if mig:
            return PowerReading(None, None, None, MIG_NOTE)
        notes: List[str] = []
        power = self._read(key, POWER, handle, notes)
        limit = self._read(key, LIMIT, handle, notes)
        energy = self._read(key, ENERGY, handle, notes)
        if energy is None and power is None:
            notes = [n for n in notes if n != NO_COUNTER] + ["no energy counter and no power reading: energy unknown"]
        return PowerReading(power, limit, energy, "; ".join(notes) or None)


# --- the energy of a span of time ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Energy:
    """Energy over a span and its mean power; `note` says when it is power × time rather than the counter."""

    joules: Optional[float]
    mean_watts: Optional[float]
    seconds: float
    note: Optional[str]


def energy_between(readings: Sequence[Tuple[float, Optional[int], Optional[int]]]) -> Energy:
    """Energy over (time s, energy mJ, power mW) readings, oldest first: the counter's difference when the
    first and last have it, else the power readings integrated over time (trapezoids), else unknown."""
    if len(readings) < 2:
        return Energy(None, None, 0.0, "fewer than two readings")
    seconds = readings[-1][0] - readings[0][0]
    first, last = readings[0][1], readings[-1][1]
    if first is not None and last is not None and last >= first and seconds > 0:
        joules = (last - first) / 1000
        return Energy(joules, joules / seconds, seconds, None)
    powered = [(t, p) for t, _, p in readings if p is not None]
    span = powered[-1][0] - powered[0][0] if len(powered) >= 2 else 0.0
    if span <= 0:
        return Energy(None, None, seconds, "no energy counter and too few power readings")
    joules = sum((b[0] - a[0]) * (a[1] + b[1]) / 2000 for a, b in zip(powered, powered[1:]))
    return Energy(joules, joules / span, seconds, ESTIMATED)


# --- the energy of each GPU over a span of samples (the wire format's `sample` dicts) -------------------------


@dataclass(frozen=True)
class DeviceEnergy:
    """`cuda:N`'s energy over a span (the whole GPU: every process on it), or why it is unknown."""

    device: str
    energy: Energy
    reason: Optional[str] = None  # set when nothing was measured


def _whole_gpus(sample: Dict[str, Any], cuda_index: Optional[int]) -> List[Dict[str, Any]]:
    devices = (sample.get("gpu") or {}).get("devices") or []
    return [
        d
        for d in devices
        if d.get("cuda_index") is not None and not d.get("mig") and cuda_index in (None, d["cuda_index"])
    ]


def span_energy(
    start: Dict[str, Any], between: Sequence[Dict[str, Any]], end: Dict[str, Any], cuda_index: Optional[int] = None
) -> List[DeviceEnergy]:
    """Each GPU this kernel sees (or only `cuda_index`): energy from `start` to `end`, the samples `between`
    adding power readings where there is no counter. Nothing when no GPU is visible."""
    result = []
    for first in _whole_gpus(start, cuda_index):
        index = first["nvml_index"]
        readings = []
        for sample in [start, *between, end]:
            device = next((d for d in _whole_gpus(sample, None) if d["nvml_index"] == index), None)
            if device is not None:
                readings.append((float(sample["time"]), device.get("energy_mj"), device.get("power_mw")))
        energy = energy_between(readings)
        last = next((d for d in _whole_gpus(end, None) if d["nvml_index"] == index), first)
        reason = None if energy.joules is not None else (last.get("power_note") or energy.note)
        result.append(DeviceEnergy(f"cuda:{first['cuda_index']}", energy, reason))
    return result
