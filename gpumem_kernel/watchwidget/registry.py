"""The kernel's live watches: at most MAX_LIVE fed at once, the sampler kept at one sample a second while any is,
and the front ends told of an out-of-memory error after the cell that raised it."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.clear import reclaim
from gpumem_kernel.oom import handler as oom_handler
from gpumem_kernel.watchwidget.session import (
    MAX_LIVE,
    STOPPED_BY_USER,
    STOPPED_REPLACED,
    WATCH_INTERVAL,
    Watch,
    Widget,
    watch_event,
)

PIN_KEY = "watch"


class Registry:
    """Owned by the loaded extension (extension.Kernel.watches): the watches of this kernel."""

    def __init__(self, shell: Any, sampler: Any, channel: Any, front_end: bool) -> None:
        self.front_end = front_end  # False outside a kernel (terminal IPython): nothing to keep live
        self._shell = shell
        self._sampler = sampler
        self._channel = channel
        self._lock = threading.Lock()
        self._live: List[Watch] = []
        self._last_oom: Optional[Dict[str, Any]] = None
        self._hooked = False

    @property
    def live(self) -> List[Watch]:
        with self._lock:
            return list(self._live)

    def start(self, widget: Widget) -> Watch:
        """Feed `widget` from now on; the oldest live watch stops when there would be more than MAX_LIVE."""
        watch = Watch(widget, self._sampler, self, self._stopped)
        self._attach(watch)
        return watch

    def stop_all(self, reason: str = STOPPED_BY_USER) -> int:
        """Stop every live watch; returns how many were live."""
        watches = self.live
        for watch in watches:
            watch.stop(reason)
        return len(watches)

    # --- Actions (main thread, from a watch's front end) -----------------------------------------

    def clear(self) -> Dict[str, Any]:
        """The panel's "Clear GPU memory": no variable is deleted; the report says what still holds memory."""
        try:
            report = reclaim.clear_gpu_memory(self._shell)
        except Exception as exc:  # one line in the widget, never a traceback in someone's cell
            return watch_event(error=f"clear failed: {type(exc).__name__}: {exc}".splitlines()[0])
        return watch_event(clear=report.to_payload())

    def reattach(self, watch: Watch) -> None:
        self._attach(watch)

    # --- bookkeeping -----------------------------------------------------------------------------

    def _attach(self, watch: Watch) -> None:
        with self._lock:
            oldest = self._live[0] if len(self._live) >= MAX_LIVE else None
        if oldest is not None:
            oldest.stop(STOPPED_REPLACED)
        with self._lock:
            self._live.append(watch)
            self._retune()
            self._hook()
        watch.attach()

    def _stopped(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._live:
                self._live.remove(watch)
            self._retune()

    def _retune(self) -> None:
        """Caller holds `_lock`."""
        pin: Callable[[str, Optional[float]], None] = getattr(self._channel, "pin_interval", _no_pin)
        pin(PIN_KEY, WATCH_INTERVAL if self._live else None)

    def _hook(self) -> None:
        """Caller holds `_lock`. The OOM handler runs inside the failing cell; its payload is sent after it."""
        if self._hooked or self._shell is None:
            return
        self._last_oom = oom_handler.last_oom(self._shell)  # an OOM from before the watch is not news
        self._shell.events.register("post_run_cell", self._after_cell)
        self._hooked = True

    def close(self) -> None:
        """The extension unloads: every watch stops, and nothing stays hooked to the shell."""
        self.stop_all()
        self.unhook()

    def unhook(self) -> None:
        with self._lock:
            if self._hooked:
                try:
                    self._shell.events.unregister("post_run_cell", self._after_cell)
                except ValueError:
                    pass
                self._hooked = False

    def _after_cell(self, _result: Any = None) -> None:
        oom = oom_handler.last_oom(self._shell)
        if oom is None or oom is self._last_oom:
            return
        self._last_oom = oom
        for watch in self.live:
            watch.send_event(watch_event(oom=oom))


def _no_pin(_key: str, _interval: Optional[float]) -> None:
    """A channel without pinning (tests): the sampler keeps its own rhythm."""
