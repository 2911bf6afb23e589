"""`%gpumem log start FILE.csv [--interval 1s]`, `%gpumem log stop`, `%gpumem log`: the memory log (log/)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable, Mapping, Optional, Protocol

from IPython.core.magic_arguments import argument, magic_arguments

from gpumem_kernel.log import csvlog
from gpumem_kernel.magics.parsing import usage_error
from gpumem_kernel.magics.parsing import parse as _parse
from gpumem_kernel.wire.protocol import Error, to_json

NOT_LOGGING = "not logging (%gpumem log start FILE.csv [--interval 1s])"

logger = logging.getLogger("gpumem_kernel")
Broadcast = Callable[[Mapping[str, Any]], None]


class Keeper:
    """Owned by the loaded extension (extension.Kernel.memlog): the one log of `%gpumem log`, and the saying, once, that
    it stopped by itself (a failed write): at once to every open panel (an `error` with id null, shown among
    the kernel's notes), and at the top of the next cell's output (IPython's pre_run_cell)."""

    def __init__(self, shell: Any, broadcast: Optional[Broadcast] = None) -> None:
        self._shell = shell
        self._broadcast = broadcast
        self._lock = threading.Lock()
        self._log: Optional[csvlog.MemoryLog] = None
        self._untold: Optional[str] = None  # the stopped line the cells have not seen yet
        self._hooked = False

    @property
    def current(self) -> Optional[csvlog.MemoryLog]:
        return self._log

    def start(self, path: str, interval: float) -> csvlog.MemoryLog:
        with self._lock:
            if self._log is not None and self._log.running:
                raise csvlog.LogError(f"already logging to {self._log.path}; %gpumem log stop first")
            self._log = csvlog.MemoryLog(path, interval, on_stopped=self._stopped)
        self._hook()
        return self._log

    def stop(self) -> Optional[csvlog.MemoryLog]:
        with self._lock:
            running, self._log = self._log, None
        if running is not None:
            running.stop()
        return running

    def close(self) -> None:
        """The extension unloads: the log ends with it, and nothing stays hooked to the shell."""
        self.stop()
        self._unhook()

    # --- a log that stopped by itself ------------------------------------------------------------

    def _stopped(self, line: str) -> None:
        """The writer's thread, once: the panel hears now, the next cell's output says it too."""
        self._untold = line
        if self._broadcast is None:
            return
        try:
            self._broadcast(to_json(Error(id=None, code="internal", message=line)))
        except Exception:
            logger.warning("gpumem: telling the panel that the memory log stopped failed", exc_info=True)

    def pre_run_cell(self, *_: Any) -> None:
        line, self._untold = self._untold, None
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    def _hook(self) -> None:
        events = getattr(self._shell, "events", None)
        if events is not None and not self._hooked:
            events.register("pre_run_cell", self.pre_run_cell)
            self._hooked = True

    def _unhook(self) -> None:
        if self._hooked:
            try:
                self._shell.events.unregister("pre_run_cell", self.pre_run_cell)
            except ValueError:
                pass
            self._hooked = False


class Logging(Protocol):
    """The loaded Kernel (extension.Kernel), as far as `%gpumem log` needs it: its one keeper."""

    memlog: Keeper


@magic_arguments("gpumem log")
@argument("action", nargs="?", choices=("start", "stop", "status"), default="status", help="default: status")
@argument("file", nargs="?", metavar="FILE.csv", help="start: the CSV file (appended to when its header matches)")
@argument("--interval", default="1s", metavar="T", help="start: a row per device every T (1s, 200ms, 0.5)")
def log_arguments(line: str) -> None:
    """Log this kernel's GPU memory to a CSV file from the panel's sampler, without blocking it: one row per
    sample and device (time ISO and epoch, device, used, total, this kernel's allocated, reserved and peak,
    utilisation, host RSS; an empty cell where not measured). Rows are flushed as written and synced at most
    once per interval: a crash loses at most one interval. A write that fails (a full disk) stops the log and
    says so once. `stop` ends it; no action shows its status."""


def log(kernel: Logging, rest: str) -> None:
    args = _parse(log_arguments, "log", rest)
    keeper = kernel.memlog
    if args.action == "start":
        if not args.file:
            raise usage_error("log", "start needs a file: %gpumem log start FILE.csv [--interval 1s]")
        try:
            interval = csvlog.parse_interval(args.interval)
            running = keeper.start(args.file, interval)
        except ValueError as error:  # LogError too
            raise usage_error("log", str(error)) from None
        print(running.status())
        return
    if args.file:
        raise usage_error("log", f"{args.action} takes no file")
    if args.action == "stop":
        stopped = keeper.stop()
        print(NOT_LOGGING if stopped is None else stopped.status())
        return
    current = keeper.current
    print(NOT_LOGGING if current is None else current.status())
