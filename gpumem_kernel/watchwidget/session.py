"""A live watch: one output-area widget fed by the kernel's one sampler, as the panel's comm is.

The widget's messages are the panel's own wire messages (`history`, then one `sample` per tick), so the front end
validates them with the same checks; the few the panel has no use for (`watch_event`: stopped, cleared, an OOM)
are in wire/schemas/watch_event.schema.json. Samples are sent from the sampler thread, so they reach the front end while
a cell runs; the front end's requests (the history, "Clear GPU memory") arrive on the main thread between cells,
where touching the user's objects is safe.

Nothing here imports anywidget: `Widget` is any object with `send(content)` and `on_msg(callback)`, so the
listener's bookkeeping is tested without a front end (watchwidget.widget builds the real one).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol

from gpumem_kernel.probe.sampler import SampleDict, Sampler
from gpumem_kernel.wire.protocol import History, to_json

log = logging.getLogger("gpumem_kernel")

# The chart's span: the history a new view gets, and what the front end keeps.
CHART_SECONDS = 300
# Samples a second, whatever the panel asked for: the widget exists to be watched during a cell.
WATCH_INTERVAL = 1.0
# Watches fed at once; the oldest stops when a new one would exceed this (each stays on screen, frozen).
MAX_LIVE = 8

REQUESTS = ("history", "clear", "detach")
STOPPED_BY_USER = "stopped: run %gpumem watch to watch again"
STOPPED_REPLACED = f"stopped: more than {MAX_LIVE} watches were live; this one was the oldest"
STOPPED_DETACHED = "stopped: its output was closed"
STOPPED_CLOSED = "stopped: the widget was closed"


class Widget(Protocol):
    def send(self, content: Dict[str, Any], buffers: Any = None) -> None: ...

    def on_msg(self, callback: Callable[..., None], remove: bool = False) -> None: ...


@dataclass
class WatchEvent:
    """A `watch_event` message (wire/schemas/watch_event.schema.json): one of its fields set."""

    type: str = field(default="watch_event", init=False)
    stopped: Optional[str] = None
    oom: Optional[Dict[str, Any]] = None
    clear: Optional[Dict[str, Any]] = None
    error: Optional[str] = None


def watch_event(
    stopped: Optional[str] = None,
    oom: Optional[Mapping[str, Any]] = None,
    clear: Optional[Mapping[str, Any]] = None,
    error: Optional[str] = None,
) -> Dict[str, Any]:
    """The JSON object of a WatchEvent."""
    return to_json(
        WatchEvent(
            stopped=stopped,
            oom=dict(oom) if oom is not None else None,
            clear=dict(clear) if clear is not None else None,
            error=error,
        )
    )


class Watch:
    """One widget fed by the sampler from `attach()` to `stop()`; thread-safe (sampler thread, main thread)."""

    def __init__(self, widget: Widget, sampler: Sampler, actions: "Actions", on_stop: Callable[["Watch"], None]):
        self.widget = widget
        self._sampler = sampler
        self._actions = actions
        self._on_stop = on_stop
        self._lock = threading.Lock()  # orders history → samples, and stop against a sample in flight
        self._live = False
        self.stopped: Optional[str] = None
        widget.on_msg(self._on_msg)
        on_close = getattr(widget, "on_close", None)
        if on_close is not None:  # a closed widget never comes back: no listener may stay behind
            on_close(lambda: self.stop(STOPPED_CLOSED))

    @property
    def live(self) -> bool:
        return self._live

    def attach(self) -> None:
        """Start feeding: the recent history, then every sample (none missed or sent twice, as on the comm)."""
        with self._lock:
            if self._live:
                return
            self._live, self.stopped = True, None
            history = self._sampler.subscribe(self._deliver)
            self.widget.send(to_json(History(samples=_recent(history))))

    def stop(self, reason: str = STOPPED_BY_USER) -> None:
        """Stop feeding and tell the front end why (it keeps the last picture, marked stopped)."""
        with self._lock:
            if not self._live:
                return
            self._live, self.stopped = False, reason
            self._sampler.remove_listener(self._deliver)
            self._send(watch_event(stopped=reason))
        self._on_stop(self)

    def send_event(self, event: Dict[str, Any]) -> None:
        with self._lock:
            self._send(event)

    def _deliver(self, sample: SampleDict) -> None:
        """Sampler thread."""
        with self._lock:
            if self._live:
                self._send(sample)

    def _send(self, message: Dict[str, Any]) -> None:
        try:
            self.widget.send(message)
        except Exception:  # a closed comm, a kernel shutting down: the watch ends, the sampler goes on
            log.debug("gpumem: a watch could not send", exc_info=True)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any = None) -> None:
        """Main thread: the front end's requests. A bad one is answered with one line, never raised."""
        request = content.get("request") if isinstance(content, dict) else None
        if request not in REQUESTS:
            shown = repr(request)[:60]  # whatever the front end sent, on one short line
            self.send_event(watch_event(error=f"unknown watch request {shown}: expected one of {REQUESTS}"))
        elif request == "history":  # a view (re)rendered: start again if only its output had been closed
            if self.stopped == STOPPED_DETACHED:
                self._actions.reattach(self)
            else:
                with self._lock:
                    self._send(to_json(History(samples=_recent(self._sampler.history()))))
        elif request == "detach":
            self.stop(STOPPED_DETACHED)
        else:
            self.send_event(self._actions.clear())


class Actions(Protocol):
    def clear(self) -> Dict[str, Any]: ...

    def reattach(self, watch: Watch) -> None: ...


def _recent(history: List[SampleDict]) -> List[SampleDict]:
    if not history:
        return []
    newest = history[-1].get("time", 0.0)
    return [s for s in history if newest - s.get("time", 0.0) <= CHART_SECONDS]
