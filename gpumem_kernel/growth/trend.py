"""Growth inside the cell that is running: "allocated grows 30 MiB/min on cuda:0 in this cell; full in ~14 min".

The sampler's samples (probe.sampler, one per interval) carry each device's allocator figures; while a cell runs,
RunningTrend (a sampler listener) keeps its devices' (time, allocated) points and fits a line through them. A trend
is claimed only after MIN_SECONDS and MIN_SAMPLES, with the line explaining most of the variation (MIN_FIT), a
rate of at least MIN_RATE, and the newest value above the first by most of what the line says (a training loop's
per-step saw-tooth, or a one-off jump, is no trend).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.growth.report import Growth, RunningGrowth

log = logging.getLogger("gpumem_kernel")

MIN_SECONDS = 60.0
MIN_SAMPLES = 10
MIN_FIT = 0.8  # R² of the line
MIN_RATE = 1 << 20  # bytes per minute
WINDOW_SECONDS = 600.0  # the newest points fitted
Point = Tuple[float, int]  # (seconds since the epoch, bytes allocated)


@dataclass(frozen=True)
class Fit:
    rate: float  # bytes per second
    r2: float
    seconds: float
    samples: int


def fit(points: Sequence[Point]) -> Optional[Fit]:
    """Least squares through the points; None for fewer than two or no time between them."""
    n = len(points)
    if n < 2:
        return None
    t0 = points[0][0]
    xs = [t - t0 for t, _ in points]
    ys = [float(v) for _, v in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    syy = sum((y - my) ** 2 for y in ys)
    slope = sxy / sxx
    r2 = 1.0 if syy == 0 else (sxy * sxy) / (sxx * syy)
    return Fit(slope, r2, xs[-1], n)


def claim(points: Sequence[Point]) -> Optional[Fit]:
    """The fit, when it says allocated grows steadily (module docstring); else None."""
    found = fit(points)
    if found is None or found.samples < MIN_SAMPLES or found.seconds < MIN_SECONDS:
        return None
    if found.rate * 60 < MIN_RATE or found.r2 < MIN_FIT:
        return None
    risen = points[-1][1] - points[0][1]
    if risen < 0.5 * found.rate * found.seconds:
        return None
    return found


def _headroom(device: Mapping[str, Any]) -> Optional[int]:
    """What the device can still give this kernel: NVML's free bytes plus what its allocator caches unused."""
    allocator, free = device.get("allocator"), device.get("free")
    if free is None or allocator is None:
        return None
    return int(free) + max(0, int(allocator["reserved"]) - int(allocator["allocated"]))


class RunningTrend:
    """Fed every sample (a sampler listener, on the sampler thread); told by the cell hooks when a cell starts
    and ends (main thread). `send` gets a Growth message while a trend is claimed, and one with `running` null
    when the claim ends."""

    def __init__(self, send: Callable[[Growth], None], now: Callable[[], float] = time.time) -> None:
        self._send = send
        self._now = now
        self._lock = threading.Lock()
        self._since: Optional[float] = None
        self._cell: Optional[int] = None
        self._points: Dict[str, Deque[Point]] = {}
        self._claimed = False

    def start(self, cell: Optional[int]) -> None:
        with self._lock:
            self._since, self._cell, self._points = self._now(), cell, {}

    def stop(self) -> bool:
        """The cell ended: forget its points; True when a trend was being shown (the caller says it ended)."""
        with self._lock:
            claimed, self._since, self._points, self._claimed = self._claimed, None, {}, False
        return claimed

    def __call__(self, sample: Mapping[str, Any]) -> None:
        try:
            message = self.feed(sample)
            if message is not None:
                self._send(message)
        except Exception:  # the sampler drops a listener that raises: a malformed sample is not worth that
            log.debug("gpumem: growth trend skipped a sample", exc_info=True)

    def feed(self, sample: Mapping[str, Any]) -> Optional[Growth]:
        """Add a sample's points; the message to send (a claim, or the end of one), or None."""
        with self._lock:
            if self._since is None or float(sample.get("time", 0.0)) < self._since:
                return None
            best: Optional[RunningGrowth] = None
            for device in sample.get("gpu", {}).get("devices", []):
                trend = self._device(sample["time"], device)
                if trend is not None and (best is None or trend.rate > best.rate):
                    best = trend
            if best is None and not self._claimed:
                return None
            self._claimed = best is not None
            return Growth(time=float(sample["time"]), running=best, rerun=None)

    def _device(self, at: float, device: Mapping[str, Any]) -> Optional[RunningGrowth]:
        allocator, index = device.get("allocator"), device.get("cuda_index")
        if allocator is None or index is None:
            return None
        name = f"cuda:{index}"
        points = self._points.setdefault(name, deque())
        points.append((float(at), int(allocator["allocated"])))
        while points and points[0][0] < at - WINDOW_SECONDS:
            points.popleft()
        found = claim(points)
        if found is None:
            return None
        headroom = _headroom(device)
        full_in = None if headroom is None else headroom / found.rate
        since = self._since if self._since is not None else at
        return RunningGrowth(
            name, self._cell, int(found.rate * 60), points[-1][1], since, found.seconds, found.samples, full_in
        )
