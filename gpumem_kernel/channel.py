"""The `gpumem` comm target: hello + history on open, live samples, request/reply.

Handlers may run off the main thread (ipykernel 7 with JupyterLab >= 4.4 delivers comm messages on a
subshell), and samples are sent from the sampler thread, so everything shared is behind a lock.
Several comms may be open at once (two browser tabs); they share one sampler.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import processes
from .protocol import (
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
    to_json,
)
from .sampler import SampleDict, Sampler

log = logging.getLogger("gpumem_kernel")

TARGET_NAME = "gpumem"


def _ipykernel_version() -> Optional[str]:
    module = sys.modules.get("ipykernel")
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def _torch_version() -> Optional[str]:
    torch = sys.modules.get("torch")  # never import it: only report what the user loaded
    version = getattr(torch, "__version__", None)
    return str(version) if version is not None else None


class _Connection:
    """One open comm; its lock keeps hello → history → samples → replies in order across threads."""

    def __init__(self, comm: Any, parent: Mapping[str, Any]) -> None:
        self.comm = comm
        self.parent = parent  # the browser's latest message on this comm: parent of what we send
        self.lock = threading.Lock()
        self.closed = False
        self.listener: Optional[Callable[[SampleDict], None]] = None

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
        self.send(to_json(Error(id=error.request_id, code=error.code, message=str(error))), parent)


class Channel:
    """Registers the comm target with the kernel and serves every comm opened on it."""

    def __init__(self, sampler: Sampler, version: str) -> None:
        self._sampler = sampler
        self._version = version
        self._config_lock = threading.Lock()
        self._connections: Dict[str, _Connection] = {}
        self._manager: Any = None

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

    @property
    def open_comms(self) -> int:
        return len(self._connections)

    # --- handlers --------------------------------------------------------------------------------

    def _configure(self, interval: Any = None, history_seconds: Any = None) -> Dict[str, Any]:
        new_interval = check_interval(interval) if interval is not None else None
        new_history = check_history_seconds(history_seconds) if history_seconds is not None else None
        with self._config_lock:
            applied = self._sampler.configure(new_interval, new_history)
        return {"interval": applied[0], "history_seconds": applied[1]}

    def _hello(self) -> Dict[str, Any]:
        return to_json(
            Hello(
                protocol=PROTOCOL_VERSION,
                version=self._version,
                pid=os.getpid(),
                capabilities=list(CAPABILITIES),
                interval=self._sampler.interval,
                history_seconds=self._sampler.history_seconds,
                python=platform.python_version(),
                ipykernel=_ipykernel_version(),
                torch=_torch_version(),
                create_time=processes.own_create_time(),
            )
        )

    def _on_open(self, comm: Any, open_msg: Mapping[str, Any]) -> None:
        connection = _Connection(comm, open_msg)
        try:
            opened = parse_open(open_msg.get("content", {}).get("data"))
        except ProtocolError as error:
            connection.send_error(error)
            comm.close()
            return
        try:
            self._configure(opened.interval, opened.history_seconds)
        except ProtocolError as error:
            connection.send_error(error)  # keep the comm: the sampler keeps its current settings
        self._connections[comm.comm_id] = connection
        comm.on_msg(lambda msg: self._on_msg(connection, msg))
        comm.on_close(lambda msg: self._drop(connection))
        connection.listener = connection.send
        connection.send(self._hello())
        # Subscribing and sending the history under the lock: a sample produced meanwhile waits, so it
        # follows the history and none is lost or sent twice.
        with connection.lock:
            history = self._sampler.subscribe(connection.listener)
            connection.publish(to_json(History(samples=history)))

    def _drop(self, connection: _Connection) -> None:
        connection.closed = True
        if connection.listener is not None:
            self._sampler.remove_listener(connection.listener)
        self._connections.pop(connection.comm.comm_id, None)

    def _on_msg(self, connection: _Connection, msg: Mapping[str, Any]) -> None:
        connection.parent = msg
        data = msg.get("content", {}).get("data")
        request_id: Optional[str] = None
        try:
            request = parse_request(data)
            request_id = request.id
            result = self._handle(request)
            connection.send(to_json(Reply(id=request.id, action=request.action, result=result)), msg)
        except ProtocolError as error:
            connection.send_error(error, msg)
        except Exception as exc:  # never let a handler's bug surface as a kernel traceback
            log.warning("gpumem: request failed", exc_info=True)
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            connection.send(to_json(Error(id=request_id, code="internal", message=message)), msg)

    def _handle(self, request: Request) -> Dict[str, Any]:
        # children/processes/terminate are psutil calls on PIDs: safe on the subshell thread, unlike
        # anything that touches user objects (clear, the OOM checklist), which the browser runs as a
        # silent execute on the main thread instead (see frontend.py).
        if request.action == "children":
            self._no_args(request)
            return {"children": [to_json(c) for c in processes.children(self._sampler.latest())]}
        if request.action == "processes":
            refs = parse_process_refs(request.args, request.id)
            return {"processes": [to_json(s) for s in processes.states(refs, self._sampler.latest())]}
        if request.action == "terminate":
            return to_json(processes.terminate(parse_process_refs(request.args, request.id)))
        if request.action == "snapshot":
            return self._sampler.snapshot()
        if request.action == "history":
            return {"samples": self._sampler.history()}
        if request.action == "configure":
            unknown: List[str] = sorted(set(request.args) - {"interval", "history_seconds"})
            if unknown:
                raise ProtocolError("bad-request", f"configure does not take {', '.join(unknown)}", request.id)
            try:
                return self._configure(request.args.get("interval"), request.args.get("history_seconds"))
            except ProtocolError as error:
                raise ProtocolError(error.code, str(error), request.id) from None
        raise ProtocolError(
            "unknown-action", f"unknown action {request.action!r}; v1 actions: {', '.join(ACTIONS)}", request.id
        )

    @staticmethod
    def _no_args(request: Request) -> None:
        if request.args:
            raise ProtocolError("bad-request", f"{request.action} takes no args", request.id)
