"""When each kernel of this server last ran code: the idle time that says "nobody is using this GPU memory".

jupyter_server's kernel model has `last_activity`, but it counts every IOPub message but a few, comm messages
included: the GPU panel's samples (one a second while a notebook's panel follows the kernel), its pings and
ipywidgets traffic all make a kernel look busy. A kernel left overnight with its notebook open in a browser tab
would never be idle. So the server extension listens to each kernel's IOPub itself, as jupyter_server does, and
keeps only the status messages that answer an `execute_request`: a cell (or a silent execute) starting and
ending. Idle seconds count from the end of the last one, or from when the watch began for a kernel that has
run nothing since.

Runs on the server's event loop: `sync` is called by a PeriodicCallback, the streams' callbacks by the loop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional

from jupyter_client.session import Session

log = logging.getLogger(__name__)


@dataclass
class Executions:
    since: float  # when the watch began (the kernel's start, within a second)
    last: Optional[float] = None  # when the last execute_request began or ended
    running: bool = False  # an execute_request is running now


class ExecutionWatch:
    """kernel id → Executions, for the kernels of one kernel manager."""

    def __init__(self, kernel_manager: Any, clock: Callable[[], float] = time.time) -> None:
        self.kernel_manager = kernel_manager
        self._clock = clock
        self._streams: Dict[str, Any] = {}
        self._executions: Dict[str, Executions] = {}

    def get(self, kernel_id: str) -> Optional[Executions]:
        return self._executions.get(kernel_id)

    def sync(self, kernel_ids: Optional[Iterable[str]] = None) -> None:
        """Start listening to new kernels and stop for kernels that are gone."""
        ids = set(self.kernel_manager.list_kernel_ids() if kernel_ids is None else kernel_ids)
        for kernel_id in [k for k in self._streams if k not in ids]:
            self._detach(kernel_id)
        for kernel_id in ids - set(self._streams):
            self._attach(kernel_id)

    def close(self) -> None:
        for kernel_id in list(self._streams):
            self._detach(kernel_id)

    def _attach(self, kernel_id: str) -> None:
        try:
            kernel = self.kernel_manager.get_kernel(kernel_id)
            stream = kernel.connect_iopub()  # a ZMQStream on the server's loop (IOLoopKernelManager)
        except Exception as exc:  # a remote kernel without local channels, or shut down meanwhile
            log.debug("gpumem: not watching the executions of kernel %s: %s", kernel_id, exc)
            self._streams[kernel_id] = None
            return
        # A Session of its own (same key): a shared one would refuse the messages it saw ("Duplicate Signature").
        session = Session(config=kernel.session.config, key=kernel.session.key)
        self._executions[kernel_id] = Executions(since=self._clock())
        self._streams[kernel_id] = stream
        stream.on_recv(lambda parts: self._on_message(kernel_id, session, parts))

    def _detach(self, kernel_id: str) -> None:
        stream = self._streams.pop(kernel_id, None)
        self._executions.pop(kernel_id, None)
        if stream is not None:
            try:
                stream.close()
            except Exception:
                pass

    def _on_message(self, kernel_id: str, session: Any, parts: Any) -> None:
        try:
            _, fed = session.feed_identities(parts)
            header = session.deserialize(fed, content=False)
            parent = header.get("parent_header") or {}
            if header["header"]["msg_type"] != "status" or parent.get("msg_type") != "execute_request":
                return
            state = session.deserialize(fed)["content"].get("execution_state")
        except Exception as exc:  # a message we cannot read must not stop the stream
            log.debug("gpumem: unreadable IOPub message from kernel %s: %s", kernel_id, exc)
            return
        executions = self._executions.get(kernel_id)
        if executions is not None and state in ("busy", "idle"):
            executions.last = self._clock()
            executions.running = state == "busy"
