"""The cell hooks of growth: before and after each cell (IPython's pre_run_cell / post_run_cell), read this kernel's
memory where it is in use, record the run's change under its cell, and when re-running the cell keeps leaving a
consistent step, show the notice in the cell's output and send it to the browser; meanwhile the running cell's
trend follows the sampler. At each cell's end the holders' walk (heldby.hook) runs first, in `cell_ended`, so the
notice can name the holders that grew in the cell that just ended.

Device memory is read only in a kernel where it is in use (one sys.modules look per cell); the kernel's RSS is
read around every cell (one /proc read each), so host memory that re-runs keep growing gets the same notice.
Nothing that goes wrong here reaches the user's cell output: a post_run_cell error would print after every cell.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Optional, Protocol

from gpumem_kernel.growth import memory, reruns, rules
from gpumem_kernel.growth.report import Growth, RerunGrowth, rerun_bundle
from gpumem_kernel.growth.trend import RunningTrend
from gpumem_kernel.heldby.hook import HoldersHook
from gpumem_kernel.heldby.report import HoldersReport

log = logging.getLogger("gpumem_kernel")
Send = Callable[[Dict[str, Any]], None]


class Samples(Protocol):
    """The sampler, as far as the running trend needs it (probe.sampler.Sampler)."""

    def add_listener(self, listener: Callable[[Dict[str, Any]], None]) -> None: ...

    def remove_listener(self, listener: Callable[[Dict[str, Any]], None]) -> None: ...


class CellGrowth:
    """One shell's hooks: the readings before the running cell, the ledger of re-runs, the running trend."""

    def __init__(
        self, shell: Any, send: Send, samples: Optional[Samples] = None, holders: Optional[HoldersHook] = None
    ) -> None:
        self.shell = shell
        self.holders = holders  # walked at each cell's end before growth reads it (cell_ended)
        self._send = send
        self.samples = samples  # the trend listens to it while a cell runs only: an idle kernel pays nothing
        self.ledger = reruns.Ledger()
        self.trend = RunningTrend(lambda message: send(message.to_dict()))
        self._depth = 0  # %%gpumem runs its body as a nested cell: only the outermost run counts
        self._before: Optional[memory.Readings] = None
        self._holders_before: Optional[HoldersReport] = None
        self.uninspected: Optional[str] = None  # the last run's holders skipped these variables (one line)

    def pre_run_cell(self, *_: Any) -> None:
        self._depth += 1
        if self._depth > 1:
            return
        try:
            self._before = memory.read()
            self._holders_before = self._last_holders()
            self.trend.start(getattr(self.shell, "execution_count", None))
            if self.samples is not None:
                self.samples.add_listener(self.trend)
        except Exception:
            log.debug("gpumem: growth skipped a cell's start", exc_info=True)
            self._before = None

    def _last_holders(self) -> Optional[HoldersReport]:
        return self.holders.last.last() if self.holders is not None else None

    def cell_ended(self, result: Any = None) -> None:
        """IPython's post_run_cell: the holders' walk, then growth, in that order (growth's notice names the
        holders that grew in this cell). The walk runs after nested cells too, as the panel's "Held by" does."""
        if self.holders is not None:
            self.holders.after_cell(result)
        self.post_run_cell(result)

    def post_run_cell(self, result: Any = None) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth > 0:
            return
        try:
            if self.samples is not None:
                self.samples.remove_listener(self.trend)
            ended = self.trend.stop()
            notice = self.after(result)
            if notice is not None:
                from IPython.display import display

                display(rerun_bundle(notice, self.uninspected), raw=True)
            if notice is not None or ended:
                self._send(Growth(time=time.time(), running=None, rerun=notice).to_dict())
        except Exception:
            log.debug("gpumem: growth skipped a cell's end", exc_info=True)

    def after(self, result: Any) -> Optional[RerunGrowth]:
        """Record the run that just ended; the notice when the cell's re-runs keep growing memory."""
        after = memory.read()
        if after is None:
            return None
        info = getattr(result, "info", None)
        source = str(getattr(info, "raw_cell", "") or "")
        cell_id = getattr(info, "cell_id", None)
        holders = self._last_holders()
        fresh = holders if holders is not None and holders is not self._holders_before else None
        self.uninspected = fresh.uninspected if fresh is not None else None
        cell, previous = self.ledger.add(reruns.cell_key(cell_id, source), reruns.change(self._before, after), fresh)
        step = reruns.growing(list(cell.runs))
        if step is None:
            return None
        if step.device == memory.HOST:  # the holders' walk reads device memory: none of it is the RSS's
            grown, finding = [], None
            fix = rules.host_fix(source)
        else:
            grown = reruns.grown_holders(previous, fresh)
            finding = rules.classify(rules.Evidence(grown, step.allocated, source, fresh))
            fix = None if finding is None else finding.fix
        left = memory.headroom(step.device, after[step.device])
        return RerunGrowth(
            cell=getattr(result, "execution_count", None),
            cell_id=cell_id if isinstance(cell_id, str) else None,
            device=step.device,
            step=step.allocated,
            reserved_step=step.reserved,
            runs=step.runs,
            runs_left=None if left is None else left // step.allocated,
            holders=grown,
            pattern=None if finding is None else finding.pattern,
            fix=fix,
        )


def install(
    shell: Any, send: Send, samples: Optional[Samples] = None, holders: Optional[HoldersHook] = None
) -> CellGrowth:
    """Register the cell hooks on `shell`; while a cell runs, the trend follows `samples`; at each cell's end
    `holders` walks first. Returns the hooks, for `uninstall`."""
    hooks = CellGrowth(shell, send, samples, holders)
    shell.events.register("pre_run_cell", hooks.pre_run_cell)
    shell.events.register("post_run_cell", hooks.cell_ended)
    return hooks


def uninstall(hooks: CellGrowth) -> None:
    if hooks.samples is not None:
        hooks.samples.remove_listener(hooks.trend)
    for event, callback in (("pre_run_cell", hooks.pre_run_cell), ("post_run_cell", hooks.cell_ended)):
        try:
            hooks.shell.events.unregister(event, callback)
        except ValueError:
            pass  # already gone
