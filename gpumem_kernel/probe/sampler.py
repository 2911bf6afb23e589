"""The background sampler: one daemon thread that probes every `interval` seconds and keeps a bounded history.

A thread (not a silent execute from the browser) is what keeps the panel live while a cell runs: comm
messages from it reach the browser while the main thread is busy training. It samples as long as the
extension is loaded, so a panel opened late still gets the recent past, but sends only to listeners.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from gpumem_kernel.wire.protocol import Sample

log = logging.getLogger("gpumem_kernel")

SampleDict = Dict[str, Any]
Listener = Callable[[SampleDict], None]


def _history_length(history_seconds: int, interval: float) -> int:
    return max(1, math.ceil(history_seconds / interval))


class Sampler:
    """Samples `probe()` on a daemon thread named "gpumem-sampler"; thread-safe to configure and listen to."""

    THREAD_NAME = "gpumem-sampler"

    def __init__(self, probe: Callable[[], Sample], interval: float = 1.0, history_seconds: int = 600) -> None:
        self._probe = probe
        self._lock = threading.Lock()  # guards config, history, listeners, seq, error bookkeeping
        self._probe_lock = threading.Lock()  # the probe's caches are not shared between threads
        self._interval = float(interval)
        self._history_seconds = int(history_seconds)
        self._history: Deque[SampleDict] = deque(maxlen=_history_length(history_seconds, interval))
        self._listeners: List[Listener] = []
        self._seq = 0
        self._reported: set = set()
        self._pending_errors: List[str] = []
        self.errors: List[str] = []  # every distinct problem reported so far, in order
        self._wake = threading.Event()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    # --- configuration ---------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def history_seconds(self) -> int:
        return self._history_seconds

    def configure(self, interval: Optional[float] = None, history_seconds: Optional[int] = None) -> Tuple[float, int]:
        """Change the sampling interval and/or the history span; takes effect at once."""
        with self._lock:
            if interval is not None:
                self._interval = float(interval)
            if history_seconds is not None:
                self._history_seconds = int(history_seconds)
            length = _history_length(self._history_seconds, self._interval)
            if length != self._history.maxlen:
                self._history = deque(self._history, maxlen=length)  # keeps the newest samples
            result = (self._interval, self._history_seconds)
        self._wake.set()  # a sleeping thread picks up the new interval now, not after the old one
        return result

    # --- listeners and history -------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def subscribe(self, listener: Listener) -> List[SampleDict]:
        """Add a listener and return the history up to that moment: no sample is missed or sent twice."""
        with self._lock:
            self._listeners.append(listener)
            return list(self._history)

    def history(self) -> List[SampleDict]:
        with self._lock:
            return list(self._history)

    def latest(self) -> SampleDict:
        """The newest stored sample, or one taken now when none is stored yet (the sampler just started)."""
        with self._lock:
            if self._history:
                return self._history[-1]
        return self.snapshot()

    @property
    def listener_count(self) -> int:
        with self._lock:
            return len(self._listeners)

    # --- sampling --------------------------------------------------------------------------------

    def _new_errors(self, errors: List[str]) -> List[str]:
        """Errors not reported before (each distinct string is reported once per kernel)."""
        fresh = []
        for error in errors:
            if error not in self._reported:
                self._reported.add(error)
                self.errors.append(error)
                fresh.append(error)
        return fresh

    def snapshot(self) -> SampleDict:
        """A sample taken now (seq 0), with all its current errors; not stored in the history."""
        with self._probe_lock:
            return self._probe().to_dict()

    def sample_once(self) -> Optional[SampleDict]:
        """Probe, store and dispatch one sample; a failing probe is reported once and yields None."""
        try:
            with self._probe_lock:
                sample = self._probe()
        except Exception as exc:
            message = f"probe failed: {type(exc).__name__}: {exc}"
            with self._lock:
                if message not in self._reported:
                    log.warning("gpumem: %s", message, exc_info=True)
                    self._pending_errors.append(message)  # sent with the next sample that works
            return None
        with self._lock:
            self._seq += 1
            sample.seq = self._seq
            sample.errors = self._new_errors(self._pending_errors + sample.errors)
            self._pending_errors = []
            data = sample.to_dict()
            self._history.append(data)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(data)
            except Exception:
                log.warning("gpumem: dropping a sample listener that raised", exc_info=True)
                self.remove_listener(listener)
        return data

    def _run(self) -> None:
        while not self._stopping:
            started = time.monotonic()
            self.sample_once()
            with self._lock:
                interval = self._interval
            self._wake.wait(max(0.0, interval - (time.monotonic() - started)))
            self._wake.clear()

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most one probe's duration)."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None
        with self._lock:
            self._listeners.clear()
