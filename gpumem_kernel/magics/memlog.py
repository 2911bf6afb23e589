"""`%gpumem log start FILE.csv [--interval 1s]`, `%gpumem log stop`, `%gpumem log`: the memory log (log/)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic_arguments import argument, magic_arguments

from gpumem_kernel.log import csvlog
from gpumem_kernel.magics.parsing import _fail
from gpumem_kernel.magics.parsing import parse as _parse

NOT_LOGGING = "not logging (%gpumem log start FILE.csv [--interval 1s])"


@magic_arguments("gpumem log")
@argument("action", nargs="?", choices=("start", "stop", "status"), default="status", help="default: status")
@argument("file", nargs="?", metavar="FILE.csv", help="start: the CSV file (appended to when its header matches)")
@argument("--interval", default="1s", metavar="T", help="start: a row per device every T (1s, 200ms, 0.5)")
def log_arguments(line: str) -> None:
    """Log this kernel's GPU memory to a CSV file from the panel's sampler, without blocking it: one row per
    sample and device (time ISO and epoch, device, used, total, this kernel's allocated, reserved and peak,
    utilisation, host RSS; an empty cell where not measured). Rows are flushed as written and synced at most
    once per interval: a crash loses at most one interval. `stop` ends it; no action shows its status."""


def log(shell: Any, rest: str) -> None:
    args = _parse(log_arguments, "log", rest)
    if args.action == "start":
        if not args.file:
            raise _fail("log", "start needs a file: %gpumem log start FILE.csv [--interval 1s]")
        try:
            interval = csvlog.parse_interval(args.interval)
            running = csvlog.start_magic_log(args.file, interval)
        except ValueError as error:  # LogError too
            raise _fail("log", str(error)) from None
        print(running.status())
        return
    if args.file:
        raise _fail("log", f"{args.action} takes no file")
    if args.action == "stop":
        stopped = csvlog.stop_magic_log()
        print(NOT_LOGGING if stopped is None else stopped.status())
        return
    current = csvlog.magic_log()
    print(NOT_LOGGING if current is None else current.status())
