"""The memory monitor of the Python API: `with monitor_gpu_memory(0): ...` or `@monitor_gpu_memory(0)` reports a block's
peak and delta on the GPU, or the host RSS delta where CUDA is not initialised."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.units import format_bytes


def _synchronize_used(torch: Any, device_id: int) -> None:
    """Wait for the device's queued work, but only on a device this process has allocated on: synchronising
    a device it never used would create a CUDA context there (~300-500 MiB of someone's GPU)."""
    if torch.cuda.memory_reserved(device_id) > 0:
        torch.cuda.synchronize(device_id)


@dataclass
class MonitorResult:
    device: str  # "cuda:N" or "host"
    peak_bytes: Optional[int]  # peak over the block's start (GPU); None on the host
    delta_bytes: int
    reserved_bytes: Optional[int]
    note: str

    def text(self, label: str = "") -> str:
        head = f"🔍 {label + ': ' if label else ''}{self.device}"
        if self.device == "host":
            return f"{head} RSS delta {format_bytes(self.delta_bytes, 'auto')} ({self.note})"
        peak, delta = format_bytes(self.peak_bytes, "auto"), format_bytes(self.delta_bytes, "auto")
        return f"{head} peak +{peak}, delta {delta}, reserved {format_bytes(self.reserved_bytes, 'auto')}"


class MemoryMonitor:
    """`with monitor_gpu_memory(0): ...` or `@monitor_gpu_memory(0)`: the block's peak and delta.

    GPU figures are read only if CUDA is initialised (by the block or before); otherwise the host RSS delta
    is reported, and the report says so.
    """

    def __init__(
        self, device_id: int = 0, reset: bool = True, label: str = "", printer: Optional[Callable[[str], None]] = print
    ) -> None:
        self.device_id, self.reset, self.label, self.printer = device_id, reset, label, printer
        self.result: Optional[MonitorResult] = None
        self._start_allocated = 0
        self._start_rss = 0
        self._cuda_at_start = False

    def __enter__(self) -> "MemoryMonitor":
        import psutil

        self._cuda_at_start = cuda_initialised()
        self._start_rss = psutil.Process().memory_info().rss
        if self._cuda_at_start:
            import torch

            _synchronize_used(torch, self.device_id)
            if self.reset:
                torch.cuda.reset_peak_memory_stats(self.device_id)
            self._start_allocated = torch.cuda.memory_allocated(self.device_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        import psutil

        if cuda_initialised():
            import torch

            _synchronize_used(torch, self.device_id)
            start = self._start_allocated if self._cuda_at_start else 0
            self.result = MonitorResult(
                f"cuda:{self.device_id}",
                torch.cuda.max_memory_allocated(self.device_id) - start,
                torch.cuda.memory_allocated(self.device_id) - start,
                torch.cuda.memory_reserved(self.device_id),
                "" if self.reset or not self._cuda_at_start else "peak since the last reset",
            )
        else:
            delta = psutil.Process().memory_info().rss - self._start_rss
            self.result = MonitorResult("host", None, delta, None, "host RSS: CUDA is not initialised in this kernel")
        if self.printer is not None:
            self.printer(self.result.text(self.label))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with MemoryMonitor(self.device_id, self.reset, self.label or fn.__name__, self.printer):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        if cuda_initialised():
            import torch

            index = self.device_id
            return (
                f"GPU {index}: allocated {format_bytes(torch.cuda.memory_allocated(index), 'auto')}, "
                f"reserved {format_bytes(torch.cuda.memory_reserved(index), 'auto')}, "
                f"peak {format_bytes(torch.cuda.max_memory_allocated(index), 'auto')}"
            )
        return "CUDA is not initialised in this kernel: no GPU memory in use (use it as `with` or a decorator)"


def monitor_gpu_memory(device_id: int = 0, reset: bool = True, label: str = "") -> MemoryMonitor:
    """The guides' memory monitor: a context manager and a decorator; shown bare, it reports the current state."""
    return MemoryMonitor(device_id, reset, label)
