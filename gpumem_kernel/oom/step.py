"""One checklist step (oom.schema.json `step`): a button (action), a cell to insert (code) or advice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ACTIONS = ("clear", "restart", "shutdown-kernel", "insert-cell", "insert-env-cell-and-restart")


@dataclass
class StepFigure:
    """One advice row on its checklist step (oom.schema.json `figure`)."""

    key: str  # the advice row's key ("checkpointing")
    flags: str  # what the lever adds to `%gpumem analyze` ("--checkpointing")
    batch: int  # the (micro-)batch the row analysed
    peak_bytes: int
    peak_allocated_bytes: Optional[int]
    maximum: Optional[int]  # the largest (micro-)batch that fits with the lever; None: no device limit known
    status: str  # fits | tight | will-not-fit | unknown, at `batch`
    fits: bool
    source: str  # "last-analysis" (the last %gpumem analyze --advise of this model) | "computed" (for this error)
    text: str  # one line: "gradient checkpointing: peak 31.2 GiB → fits at batch 8 (up to 24)"


@dataclass
class Step:
    id: str
    title: str
    detail: str
    action: Optional[str]  # one of ACTIONS, or None for advice
    kernel_id: Optional[str] = None  # for "shutdown-kernel"
    code: Optional[str] = None  # for "insert-cell" and "insert-env-cell-and-restart"
    not_applicable: Optional[str] = None  # why it cannot help here (shown folded); None: it may help
    figure: Optional[StepFigure] = None  # what the fit advice computed for this step's lever (oom.figures)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
