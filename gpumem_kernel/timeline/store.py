"""The timelines this kernel run holds, by id, for `timeline_export` (the full History, not the downsampled payload).

Bounded: the last KEEP timelines; an older id is forgotten and its export answers "re-run the cell". Thread-safe:
the comm handler that exports may run on a subshell thread while a cell adds a new timeline on the main thread.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Optional

from gpumem_kernel.timeline.history import History

KEEP = 4  # timelines per kernel run: a full history of a large step can take hundreds of MB


class TimelineStore:
    def __init__(self, keep: int = KEEP) -> None:
        self._keep = max(1, keep)
        self._lock = threading.Lock()
        self._items: "OrderedDict[str, History]" = OrderedDict()

    def add(self, history: History) -> str:
        """Keep `history` under a new id ("tl-" + 16 hex digits); the oldest beyond `keep` is dropped."""
        with self._lock:
            timeline_id = new_id()
            while timeline_id in self._items:  # pragma: no cover - 64 random bits
                timeline_id = new_id()
            self._items[timeline_id] = history
            while len(self._items) > self._keep:
                self._items.popitem(last=False)
            return timeline_id

    def get(self, timeline_id: str) -> Optional[History]:
        with self._lock:
            return self._items.get(timeline_id)

    def ids(self) -> list:
        """Held ids, oldest first."""
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def new_id() -> str:
    return "tl-" + secrets.token_hex(8)


# The one store of this kernel process (magics and the Python API add to it, the comm reads it).
STORE = TimelineStore()


def unknown_message(timeline_id: str) -> str:
    """The one line an export of an id this kernel run does not hold answers."""
    return f"this kernel no longer holds timeline {timeline_id}; re-run the cell"
