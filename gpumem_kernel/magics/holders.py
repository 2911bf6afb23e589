"""`%gpumem holders [--json] [--top N] [--budget MS]`: which of your variables hold GPU memory (holders/)."""

from __future__ import annotations

import json
from typing import Any

from IPython.core.magic_arguments import argument, magic_arguments

from gpumem_kernel.heldby import collect
from gpumem_kernel.heldby.report import text
from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.parsing import parse as _parse

MAGIC_BUDGET_MS = 5000  # asked for: a large namespace may take longer than the per-cell walk's limit


@magic_arguments("gpumem holders")
@argument("--json", action="store_true", help="print the report as JSON instead of a table")
@argument("--top", metavar="N", type=argcheck.count, help="show the N largest holders only (the totals stay)")
@argument(
    "--budget",
    metavar="MS",
    type=argcheck.count,
    default=MAGIC_BUDGET_MS,
    help=f"give up after MS milliseconds of looking (default {MAGIC_BUDGET_MS})",
)
def holders_arguments(line: str) -> None:
    """Which of your variables hold GPU memory: what each reaches (a model's parameters, buffers and gradients,
    an optimizer's state, tensors and their .grad, and containers and objects of them, 3 levels deep), each
    storage counted once ("shared with" when two names reach it); IPython's output cache and the last error's
    traceback apart; and what no variable reaches. Needs CUDA already in use; never initialises it."""


def holders(shell: Any, rest: str) -> None:
    args = _parse(holders_arguments, "holders", rest)
    report = collect.holders(shell, budget_ms=float(args.budget))
    if args.json:
        print(json.dumps(report.to_dict(args.top), indent=2))
    else:
        print(text(report, args.top))
