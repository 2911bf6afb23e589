"""The clocks around each phase of a timed step: CUDA events on a GPU, perf_counter on the CPU."""

from __future__ import annotations

import time
from typing import Any, List


class CpuTimer:
    def __init__(self) -> None:
        self.marks: List[float] = []

    def start(self) -> None:
        self.marks = [time.perf_counter()]

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def finish(self) -> List[float]:
        return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


class CudaTimer:
    """CUDA events around each phase: GPU time, not the host's launch time."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.events: List[Any] = []

    def _record(self) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def start(self) -> None:
        self.events = []
        self._record()

    def mark(self) -> None:
        self._record()

    def finish(self) -> List[float]:
        import torch

        torch.cuda.synchronize(self.device)
        return [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:])]
