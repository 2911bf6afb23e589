"""One checklist step (oom.schema.json `step`): a button (action), a cell to insert (code) or advice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ACTIONS = ("clear", "restart", "shutdown-kernel", "insert-cell", "insert-env-cell-and-restart")


@dataclass
class Step:
    id: str
    title: str
    detail: str
    action: Optional[str]  # one of ACTIONS, or None for advice
    kernel_id: Optional[str] = None  # for "shutdown-kernel"
    code: Optional[str] = None  # for "insert-cell" and "insert-env-cell-and-restart"
    not_applicable: Optional[str] = None  # why it cannot help here (shown folded); None: it may help


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
