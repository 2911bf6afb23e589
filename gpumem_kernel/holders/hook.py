"""After each cell, where the user's code has initialised CUDA: which variables hold GPU memory, within
DEFAULT_BUDGET_MS. The last report is kept (strings and sizes only) for `last()` and the panel; a kernel
without CUDA in use pays one sys.modules look per cell."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

from gpumem_kernel.holders.collect import DEFAULT_BUDGET_MS, collect, cuda_in_use
from gpumem_kernel.holders.report import HoldersReport

_lock = threading.Lock()
_last: Optional[HoldersReport] = None
_installed: Dict[int, Callable[..., None]] = {}  # id(shell) -> its callback, to unregister the same one


def after_cell(shell: Any, budget_ms: float = DEFAULT_BUDGET_MS) -> Optional[HoldersReport]:
    """Walk now if CUDA is in use; keep and return the report (None without CUDA: nothing is walked)."""
    global _last
    in_use = cuda_in_use()
    if in_use is None:
        return None
    on_device, allocated = in_use
    try:
        report = collect(shell, on_device, "cuda", allocated, budget_ms)
    except Exception:  # a post_run_cell error would print in every cell: never worth it for a report
        return None
    with _lock:
        _last = report
    return report


def last() -> Optional[HoldersReport]:
    """The report of the last cell that ended with CUDA in use, or None."""
    return _last


def install(shell: Any) -> None:
    """Register the post_run_cell callback (once per shell)."""
    if id(shell) in _installed:
        return

    def post_run_cell(*_: Any) -> None:
        after_cell(shell)

    _installed[id(shell)] = post_run_cell
    shell.events.register("post_run_cell", post_run_cell)


def uninstall(shell: Any) -> None:
    global _last
    callback = _installed.pop(id(shell), None)
    if callback is not None:
        try:
            shell.events.unregister("post_run_cell", callback)
        except ValueError:
            pass  # already gone
    _last = None
