"""After each cell, where the user's code has initialised CUDA: which variables hold GPU memory, within
DEFAULT_BUDGET_MS. The last report is kept (strings and sizes only) by the kernel's `LastHolders`, and sent to the
browser as the `holders` message (heldby.message) for the panel's "Held by", whose last copy a newly opened comm
gets; a kernel without CUDA in use pays one sys.modules look per cell.

The walk is run by the cell-end step of growth.hook, before growth reads it: the growth notice names the holders
that grew in the cell that just ended."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from gpumem_kernel.heldby.collect import DEFAULT_BUDGET_MS, allocated_by_device, collect, cuda_in_use
from gpumem_kernel.heldby.message import holders_message
from gpumem_kernel.heldby.report import HoldersReport

log = logging.getLogger("gpumem_kernel")
Send = Callable[[Dict[str, Any]], None]


@dataclass
class LastHolders:
    """The report and `holders` message of the last cell that ended with CUDA in use (one per loaded kernel):
    read by growth on the main thread and by a comm opening on the comm's thread."""

    report: Optional[HoldersReport] = None
    message: Optional[Dict[str, Any]] = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def keep(self, report: HoldersReport, message: Dict[str, Any]) -> None:
        with self._lock:
            self.report, self.message = report, message

    def last(self) -> Optional[HoldersReport]:
        """The report of the last cell that ended with CUDA in use, or None."""
        with self._lock:
            return self.report

    def last_message(self) -> Optional[Dict[str, Any]]:
        """The `holders` message of that cell (what a panel opened since should show), or None."""
        with self._lock:
            return self.message

    def forget(self) -> None:
        """Drop the last report and message (unloading the extension)."""
        with self._lock:
            self.report = self.message = None


def after_cell(
    shell: Any,
    budget_ms: float = DEFAULT_BUDGET_MS,
    send: Optional[Send] = None,
    cell: Optional[int] = None,
    keep: Optional[LastHolders] = None,
) -> Optional[HoldersReport]:
    """Walk now if CUDA is in use; return the report (None without CUDA: nothing is walked), kept in `keep`
    when given, and send its `holders` message when `send` is given."""
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
    if keep is not None:
        keep.keep(report, message)
    if send is not None:
        try:
            send(message)
        except Exception:  # a comm closing meanwhile: the next cell's message follows
            log.debug("gpumem: sending holders failed", exc_info=True)
    return report


@dataclass
class HoldersHook:
    """One shell's walk at each cell's end, its result kept in `last` and sent with `send`."""

    shell: Any
    last: LastHolders
    send: Optional[Send] = None

    def after_cell(self, result: Any = None) -> Optional[HoldersReport]:
        # through the module's `after_cell`, looked up at each cell: the tests' switches replace it
        return after_cell(self.shell, send=self.send, cell=getattr(result, "execution_count", None), keep=self.last)
