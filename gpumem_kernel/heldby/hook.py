"""After each cell, where the user's code has initialised CUDA: which variables hold GPU memory, within
DEFAULT_BUDGET_MS. The last report is kept (strings and sizes only) for `last()`, and sent to the browser as the
`holders` message (heldby.message) for the panel's "Held by", whose last copy a newly opened comm gets; a
kernel without CUDA in use pays one sys.modules look per cell."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from gpumem_kernel.heldby.collect import DEFAULT_BUDGET_MS, allocated_by_device, collect, cuda_in_use
from gpumem_kernel.heldby.message import holders_message
from gpumem_kernel.heldby.report import HoldersReport

log = logging.getLogger("gpumem_kernel")
Send = Callable[[Dict[str, Any]], None]

_lock = threading.Lock()
_last: Optional[HoldersReport] = None
_last_message: Optional[Dict[str, Any]] = None
_installed: Dict[int, Callable[..., None]] = {}  # id(shell) -> its callback, to unregister the same one


def after_cell(
    shell: Any, budget_ms: float = DEFAULT_BUDGET_MS, send: Optional[Send] = None, cell: Optional[int] = None
) -> Optional[HoldersReport]:
    """Walk now if CUDA is in use; keep and return the report (None without CUDA: nothing is walked), and send
    its `holders` message when `send` is given."""
    global _last, _last_message
    in_use = cuda_in_use()
    if in_use is None:
        return None
    on_device, allocated = in_use
    try:
        report = collect(shell, on_device, "cuda", allocated, budget_ms)
        message = holders_message(report, allocated_by_device(), cell, time.time()).to_dict()
    except Exception:  # a post_run_cell error would print in every cell: never worth it for a report
        log.debug("gpumem: holders skipped a cell", exc_info=True)
        return None
    with _lock:
        _last, _last_message = report, message
    if send is not None:
        try:
            send(message)
        except Exception:  # a comm closing meanwhile: the next cell's message follows
            log.debug("gpumem: sending holders failed", exc_info=True)
    return report


def last() -> Optional[HoldersReport]:
    """The report of the last cell that ended with CUDA in use, or None."""
    return _last


def last_message() -> Optional[Dict[str, Any]]:
    """The `holders` message of that cell (what a panel opened since should show), or None."""
    return _last_message


def install(shell: Any, send: Optional[Send] = None) -> None:
    """Register the post_run_cell callback (once per shell); `send` gets each cell's `holders` message."""
    if id(shell) in _installed:
        return

    def post_run_cell(result: Any = None, *_: Any) -> None:
        after_cell(shell, send=send, cell=getattr(result, "execution_count", None))

    _installed[id(shell)] = post_run_cell
    shell.events.register("post_run_cell", post_run_cell)


def uninstall(shell: Any) -> None:
    callback = _installed.pop(id(shell), None)
    if callback is not None:
        try:
            shell.events.unregister("post_run_cell", callback)
        except ValueError:
            pass  # already gone
    forget()


def forget() -> None:
    """Drop the last report and message (unloading the extension; tests)."""
    global _last, _last_message
    with _lock:
        _last = _last_message = None
