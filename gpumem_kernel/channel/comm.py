"""The `gpumem` comm target: hello + history on open, live samples, request/reply.

Handlers may run off the main thread (ipykernel 7 with JupyterLab >= 4.4 delivers comm messages on a
subshell), and samples are sent from the sampler thread, so everything shared is behind a lock.
Several comms may be open at once (two browser tabs); they share one sampler, which runs at the fastest
interval a live comm asked for, and each comm gets samples at its own interval.

A tab that crashes or reloads never closes its comm, so the browser pings while it lives and the kernel drops
a comm it has not heard from for QUIET_SECONDS of idle time (closing it with reason "quiet"). Only idle time
counts: on ipykernel 6, and without subshells, the pings wait behind a running cell like every comm message.
At most MAX_COMMS comms are served; a new one beyond that replaces the one heard from least recently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import logging
import os
import platform
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from gpumem_kernel.heldby.hook import LastHolders
from gpumem_kernel.timeline.capture import Capture
from gpumem_kernel.probe import processes
from gpumem_kernel.probe.lineage import Lineage
from gpumem_kernel.wire.protocol import (
    ACTIONS,
    CAPABILITIES,
    PROTOCOL_VERSION,
    Error,
    Hello,
    History,
    ProtocolError,
    Reply,
    Request,
    check_history_seconds,
    check_interval,
    parse_open,
    parse_process_refs,
    parse_request,
    parse_timeline_export_args,
    to_json,
)
from gpumem_kernel.probe.sampler import SampleDict, Sampler
from gpumem_kernel.probe.torchstats import torch_info

log = logging.getLogger("gpumem_kernel")

TARGET_NAME = "gpumem"
QUIET_SECONDS = 180.0  # idle seconds without a message before a comm is dropped (the browser pings every 15 s)
MAX_COMMS = 32
# A comm's samples may come this much early: the sampler's rhythm is set by the fastest comm.
_EARLY = 0.1
# An error's message quotes what the browser sent: a value is cut to ECHO_LIMIT characters, the whole line to
# MESSAGE_LIMIT, so a pasted megabyte never comes back as a megabyte of error.
ECHO_LIMIT = 200
MESSAGE_LIMIT = 1000
_LONG_RUN = re.compile(r"\S{%d,}" % (ECHO_LIMIT + 1))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def bounded(message: str) -> str:
    """An error's one line: its first line, each over-long word (an echoed value) and the whole cut."""
    lines = str(message).strip().splitlines()
    first = lines[0] if lines else ""
    return _cut(_LONG_RUN.sub(lambda run: _cut(run.group(), ECHO_LIMIT), first), MESSAGE_LIMIT) or "error"


def _quiet_seconds() -> float:
    """QUIET_SECONDS, or GPUMEM_COMM_QUIET_SECONDS (tests, and administrators of very throttled browsers)."""
    try:
        return max(1.0, float(os.environ.get("GPUMEM_COMM_QUIET_SECONDS", QUIET_SECONDS)))
    except ValueError:
        return QUIET_SECONDS


class IdleClock:
    """Seconds the kernel has spent outside cell execution: the time in which a browser's message could arrive.

    `busy()`/`idle()` are hooked to IPython's pre_execute/post_execute; without them the clock is always idle.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._total = 0.0
        self._idle_since: Optional[float] = now()

    def busy(self) -> None:
        with self._lock:
            if self._idle_since is not None:
                self._total += self._now() - self._idle_since
                self._idle_since = None

    def idle(self) -> None:
        with self._lock:
            if self._idle_since is None:
                self._idle_since = self._now()

    def read(self) -> float:
        with self._lock:
            running = 0.0 if self._idle_since is None else self._now() - self._idle_since
            return self._total + running


def _ipykernel_version() -> Optional[str]:
    module = sys.modules.get("ipykernel")
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def _torch_version() -> Optional[str]:
    return torch_info().version  # never imports it: only reports what the user loaded


class _Connection:
    """One open comm; its lock keeps hello → history → samples → replies in order across threads."""

    def __init__(self, comm: Any, parent: Mapping[str, Any], heard: float, interval: float, history: int) -> None:
        self.comm = comm
        self.parent = parent  # the browser's latest message on this comm: parent of what we send
        self.lock = threading.Lock()
        self.closed = False
        self.listener: Optional[Callable[[SampleDict], None]] = None
        self.heard = heard  # IdleClock reading at the browser's latest message
        self.interval = interval  # this comm's own sampling interval and history span
        self.history_seconds = history
        self.last_sent: Optional[float] = None  # monotonic time of the last sample sent on this comm

    def send(self, message: Mapping[str, Any], parent: Optional[Mapping[str, Any]] = None) -> None:
        """Publish on the comm with the browser's message as parent.

        Not Comm.send: it takes the kernel's current parent (from the sampler thread: the running cell),
        and ipykernel >= 7.4 routes the browser's next comm message to the subshell of the parent we
        last used, i.e. to the busy main shell, so requests sent on a subshell would queue behind the
        cell. Publishing directly leaves the routing to the browser's own choice of subshell.
        """
        with self.lock:
            self.publish(message, parent)

    def publish(self, message: Mapping[str, Any], parent: Optional[Mapping[str, Any]] = None) -> None:
        """send() for a caller that already holds `lock`."""
        if self.closed:
            return
        kernel = getattr(self.comm, "kernel", None)
        session = getattr(kernel, "session", None)
        iopub = getattr(kernel, "iopub_socket", None)
        if session is None or iopub is None or not hasattr(self.comm, "topic"):
            self.comm.send(dict(message))  # not an ipykernel comm (tests, other kernels)
            return
        content = {"data": dict(message), "comm_id": self.comm.comm_id}
        session.send(iopub, "comm_msg", content, parent=dict(parent or self.parent), ident=self.comm.topic)

    def send_error(self, error: ProtocolError, parent: Optional[Mapping[str, Any]] = None) -> None:
        self.send(to_json(Error(id=error.request_id, code=error.code, message=bounded(str(error)))), parent)


@dataclass(frozen=True)
class BrowserSettings:
    """The JupyterLab settings the browser sends with `configure` that `%gpumem analyze|recommend|autobatch`
    default to, checked: one per kernel, the last browser to send them wins."""

    rounding: Any = None  # "Batch-size rounding": analysis.picks.Rounding
    seq_multiple: Optional[int] = None  # "Sequence-length multiple": tokens


class Channel:
    """Registers the comm target with the kernel and serves every comm opened on it."""

    def __init__(
        self,
        sampler: Sampler,
        version: str,
        clock: Optional[IdleClock] = None,
        now: Callable[[], float] = time.monotonic,
        lineage: Optional[Lineage] = None,
        holders: Optional[LastHolders] = None,
        capture: Optional[Capture] = None,
    ) -> None:
        self._sampler = sampler
        self._holders = holders  # the last cell's `holders` message, for a comm opened since
        self._capture = capture  # the OOM capture the setting "oomTimeline" turns on
        self.lineage = lineage  # this kernel's predecessors in the notebook: whose orphans `terminate` may end
        self._version = version
        self._config_lock = threading.Lock()  # guards _connections and the sampler's settings
        self._connections: Dict[str, _Connection] = {}
        self._manager: Any = None
        self.clock = clock or IdleClock()
        self._now = now
        self.quiet_seconds = _quiet_seconds()
        # What the sampler does with no comm open: the settings it was created with.
        self._base = (sampler.interval, sampler.history_seconds)
        self._pins: Dict[str, float] = {}  # other listeners' intervals (the output-area watch), by owner
        # the browser's settings the magics default to; replaced whole by `configure`, read by the main thread
        self.settings = BrowserSettings()

    # --- registration ----------------------------------------------------------------------------

    @staticmethod
    def _comm_manager(ip: Any) -> Any:
        """The comm manager that receives this kernel's comm_open messages; None outside a kernel."""
        kernel = getattr(ip, "kernel", None)
        if kernel is None:
            return None  # plain IPython / terminal: no frontend to talk to
        try:
            from comm import get_comm_manager

            manager = get_comm_manager()
        except ImportError:
            manager = None
        # On ipykernel < 6.18 `comm` hands out a detached manager: use the kernel's own then.
        kernel_manager = getattr(kernel, "comm_manager", None)
        if kernel_manager is not None and manager is not kernel_manager:
            return kernel_manager
        return manager

    def register(self, ip: Any) -> bool:
        """Register the `gpumem` target; False when there is no kernel to register with."""
        manager = self._comm_manager(ip)
        if manager is None or not hasattr(manager, "register_target"):
            return False
        manager.register_target(TARGET_NAME, self._on_open)
        self._manager = manager
        return True

    def unregister(self) -> None:
        """Close every open comm (the browser sees the panel disconnect) and drop the target."""
        for connection in list(self._connections.values()):
            self._drop(connection)
            try:
                connection.comm.close()
            except Exception:
                pass  # the kernel may be shutting down
        if self._manager is not None:
            try:
                self._manager.unregister_target(TARGET_NAME, self._on_open)
            except KeyError:
                pass
            self._manager = None

    def broadcast(self, message: Mapping[str, Any]) -> None:
        """Send a message on every open comm, from any thread (growth: the cell hooks and the sampler's)."""
        with self._config_lock:
            live = list(self._connections.values())
        for connection in live:
            connection.send(message)

    @property
    def open_comms(self) -> int:
        with self._config_lock:
            return len(self._connections)

    # --- handlers --------------------------------------------------------------------------------

    @staticmethod
    def _settings(interval: Any, history_seconds: Any) -> Tuple[Optional[float], Optional[int]]:
        """Checked values (None: not given); a bad one raises ProtocolError."""
        new_interval = check_interval(interval) if interval is not None else None
        new_history = check_history_seconds(history_seconds) if history_seconds is not None else None
        return new_interval, new_history

    def _retune(self) -> None:
        """The sampler runs at the fastest interval and keeps the longest history any live comm asked for;
        with none open it returns to its own settings. Caller holds `_config_lock`."""
        live = list(self._connections.values())
        interval = min([c.interval for c in live] + list(self._pins.values()), default=self._base[0])
        history = max((c.history_seconds for c in live), default=self._base[1])
        # Reconfiguring wakes the sampler for a sample at once: only when its rhythm or span really changes,
        # not for each `configure` that only carries a setting (rounding, oom_timeline, seq_multiple).
        if (self._sampler.interval, self._sampler.history_seconds) != (interval, history):
            self._sampler.configure(interval, history)

    def pin_interval(self, owner: str, interval: Optional[float]) -> None:
        """Keep the sampler at `interval` or faster while `owner` listens (None: it stopped listening)."""
        with self._config_lock:
            if interval is None:
                self._pins.pop(owner, None)
            else:
                self._pins[owner] = float(interval)
            self._retune()

    def _configure(self, connection: _Connection, interval: Any = None, history_seconds: Any = None) -> Dict[str, Any]:
        new_interval, new_history = self._settings(interval, history_seconds)
        with self._config_lock:
            if new_interval is not None:
                connection.interval = new_interval
            if new_history is not None:
                connection.history_seconds = new_history
            if connection.comm.comm_id in self._connections:
                self._retune()
        return {"interval": connection.interval, "history_seconds": connection.history_seconds}

    def _hello(self, connection: _Connection) -> Dict[str, Any]:
        return to_json(
            Hello(
                protocol=PROTOCOL_VERSION,
                version=self._version,
                pid=os.getpid(),
                capabilities=list(CAPABILITIES),
                interval=connection.interval,
                history_seconds=connection.history_seconds,
                python=platform.python_version(),
                ipykernel=_ipykernel_version(),
                torch=_torch_version(),
                create_time=processes.own_create_time(),
            )
        )

    def _on_open(self, comm: Any, open_msg: Mapping[str, Any]) -> None:
        connection = _Connection(comm, open_msg, self.clock.read(), *self._base)
        try:
            opened = parse_open(open_msg.get("content", {}).get("data"))
        except ProtocolError as error:
            connection.send_error(error)
            comm.close()
            return
        try:
            interval, history = self._settings(opened.interval, opened.history_seconds)
            connection.interval = interval if interval is not None else connection.interval
            connection.history_seconds = history if history is not None else connection.history_seconds
        except ProtocolError as error:
            connection.send_error(error)  # keep the comm: it gets the default settings
        comm.on_msg(lambda msg: self._on_msg(connection, msg))
        comm.on_close(lambda msg: self._drop(connection))
        connection.listener = lambda sample: self._deliver(connection, sample)
        with self._config_lock:
            self._connections[comm.comm_id] = connection
            evicted = self._over_limit()
            self._retune()
        for old in evicted:
            self._close(old, "replaced: too many open comms")
        connection.send(self._hello(connection))
        # Subscribing and sending the history under the lock: a sample produced meanwhile waits, so it
        # follows the history and none is lost or sent twice.
        with connection.lock:
            history = self._sampler.subscribe(connection.listener)
            connection.publish(to_json(History(samples=history)))
            holders = self._holders.last_message() if self._holders is not None else None  # till the next cell
            if holders is not None:
                connection.publish(holders)

    def _over_limit(self) -> List[_Connection]:
        """Remove the comms heard from least recently beyond MAX_COMMS. Caller holds `_config_lock`."""
        if len(self._connections) <= MAX_COMMS:
            return []
        by_silence = sorted(self._connections.values(), key=lambda c: c.heard)
        evicted = by_silence[: len(self._connections) - MAX_COMMS]
        for connection in evicted:
            self._connections.pop(connection.comm.comm_id, None)
        return evicted

    def _deliver(self, connection: _Connection, sample: SampleDict) -> None:
        """Sampler thread: send `sample` if this comm's interval has passed; drop the comm if it went quiet."""
        if self.clock.read() - connection.heard > self.quiet_seconds:
            self._close(connection, "quiet")
            return
        now = self._now()
        if connection.last_sent is not None and now - connection.last_sent < connection.interval * (1 - _EARLY):
            return
        connection.last_sent = now
        connection.send(sample)

    def _close(self, connection: _Connection, reason: str) -> None:
        """Stop serving a comm and tell its browser why (a live browser reconnects on "quiet")."""
        self._drop(connection)
        try:
            connection.comm.close(data={"reason": reason})
        except Exception:
            log.debug("gpumem: closing a comm failed", exc_info=True)

    def _drop(self, connection: _Connection) -> None:
        connection.closed = True
        if connection.listener is not None:
            self._sampler.remove_listener(connection.listener)
        with self._config_lock:
            if self._connections.get(connection.comm.comm_id) is connection:
                del self._connections[connection.comm.comm_id]
                self._retune()

    def _on_msg(self, connection: _Connection, msg: Mapping[str, Any]) -> None:
        connection.parent = msg
        connection.heard = self.clock.read()
        data = msg.get("content", {}).get("data")
        request_id: Optional[str] = None
        try:
            request = parse_request(data)
            request_id = request.id
            result = self._handle(connection, request)
            connection.send(to_json(Reply(id=request.id, action=request.action, result=result)), msg)
        except ProtocolError as error:
            connection.send_error(error, msg)
        except Exception as exc:  # never let a handler's bug surface as a kernel traceback
            log.warning("gpumem: request failed", exc_info=True)
            message = bounded(f"{type(exc).__name__}: {exc}")
            connection.send(to_json(Error(id=request_id, code="internal", message=message)), msg)

    def _handle(self, connection: _Connection, request: Request) -> Dict[str, Any]:
        # children/processes/terminate are psutil calls on PIDs: safe on the subshell thread, unlike
        # anything that touches user objects (clear, the OOM checklist), which the browser runs as a
        # silent execute on the main thread instead (see frontend.py).
        if request.action == "children":
            self._no_args(request)
            found = processes.children(self._sampler.latest())
            if self.lineage is not None:
                self.lineage.note_children([(c.pid, c.create_time) for c in found])
            return {"children": [to_json(c) for c in found]}
        if request.action == "processes":
            refs = parse_process_refs(request.args, request.id)
            return {"processes": [to_json(s) for s in processes.states(refs, self._sampler.latest())]}
        if request.action == "terminate":
            refs = parse_process_refs(request.args, request.id)
            return to_json(processes.terminate(refs, lineage=self.lineage))
        if request.action == "ping":
            self._no_args(request)
            return {}  # being heard is the point: `_on_msg` noted the time
        if request.action == "snapshot":
            return self._sampler.snapshot()
        if request.action == "history":
            return {"samples": self._sampler.history()}
        if request.action == "configure":
            taken = {"interval", "history_seconds", "rounding", "oom_timeline", "seq_multiple"}
            unknown: List[str] = sorted(set(request.args) - taken)
            if unknown:
                raise ProtocolError("bad-request", f"configure does not take {', '.join(unknown)}", request.id)
            if "rounding" in request.args:
                self.settings = replace(self.settings, rounding=_rounding(request.args["rounding"], request.id))
            if "oom_timeline" in request.args:
                _set_oom_timeline(request.args["oom_timeline"], request.id, self._capture)
            if "seq_multiple" in request.args:
                multiple = _seq_multiple(request.args["seq_multiple"], request.id)
                self.settings = replace(self.settings, seq_multiple=multiple)
            try:
                return self._configure(connection, request.args.get("interval"), request.args.get("history_seconds"))
            except ProtocolError as error:
                raise ProtocolError(error.code, str(error), request.id) from None
        if request.action == "timeline_export":
            return _timeline_export(request)
        raise ProtocolError(
            "unknown-action", f"unknown action {request.action!r}; v1 actions: {', '.join(ACTIONS)}", request.id
        )

    @staticmethod
    def _no_args(request: Request) -> None:
        if request.args:
            raise ProtocolError("bad-request", f"{request.action} takes no args", request.id)


def _timeline_export(request: Request) -> Dict[str, Any]:
    """A timeline this kernel run holds, as a file (base64). Touches only the store's own History objects, never
    the user's, so it is safe on the subshell thread."""
    from gpumem_kernel.timeline.export import export_result
    from gpumem_kernel.timeline.store import STORE, unknown_message

    args = parse_timeline_export_args(request.args, request.id)
    history = STORE.get(args.id)
    if history is None:
        raise ProtocolError("bad-request", unknown_message(args.id), request.id)
    try:
        return export_result(history, args.format, args.id)
    except ValueError as error:  # too large to send: one line saying how to save it instead
        raise ProtocolError("bad-request", str(error), request.id) from None


def _set_oom_timeline(value: Any, request_id: str, capture: Optional[Capture]) -> None:
    """The JupyterLab setting "oomTimeline": record a bounded allocator history while cells run and attach
    what was alive to the OOM checklist (timeline.capture; one per kernel: the last browser to send it wins).
    Only a flag: the recording starts at the next cell's start (pre_run_cell), on the main thread. A channel
    without a capture (tests) checks the value only."""
    if not isinstance(value, bool):
        raise ProtocolError("bad-request", "configure: oom_timeline must be true or false", request_id)
    if capture is not None:
        capture.set_enabled(value)


def _rounding(value: Any, request_id: str) -> Any:
    """The JupyterLab setting "Batch-size rounding", checked: the default of this kernel's analyze/autobatch picks
    (one per kernel: the last browser to send it wins)."""
    from gpumem_kernel.analysis import MAX_ROUNDING_MULTIPLE as MAX_MULTIPLE, parse_rounding

    if not isinstance(value, str):
        raise ProtocolError("bad-request", "configure: rounding must be a string (pow2, none or N)", request_id)
    digits = value.strip().lstrip("0")
    if digits.isascii() and digits.isdigit() and len(digits) > len(str(MAX_MULTIPLE)):  # never int() a million digits
        raise ProtocolError(
            "bad-request",
            f"configure: rounding N must be a multiple from 1 to {MAX_MULTIPLE}, got a {len(digits):,}-digit number",
            request_id,
        )
    try:
        return parse_rounding(value)
    except ValueError as error:
        raise ProtocolError("bad-request", f"configure: {error}", request_id) from None


def _number_shown(value: int) -> str:
    """An int as a message quotes it; a huge one by its size (Python refuses to write one of 4300+ digits)."""
    if value.bit_length() <= 64:
        return str(value)
    return f"a number of about {int(value.bit_length() * 0.30103) + 1:,} digits"


def _seq_multiple(value: Any, request_id: str) -> int:
    """The JupyterLab setting "Sequence-length multiple", checked: the default step of this kernel's sequence search
    (one per kernel: the last browser to send it wins)."""
    from gpumem_kernel.analysis import MAX_SEQ_MULTIPLE as MAX_MULTIPLE, parse_multiple

    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError("bad-request", "configure: seq_multiple must be a whole number of tokens", request_id)
    if not 1 <= value <= MAX_MULTIPLE:
        raise ProtocolError(
            "bad-request",
            f"configure: seq_multiple must be a whole number of tokens from 1 to {MAX_MULTIPLE}, "
            f"got {_number_shown(value)}",
            request_id,
        )
    try:
        return parse_multiple(value)
    except ValueError as error:
        raise ProtocolError("bad-request", f"configure: {error}", request_id) from None
