"""What ipykernel hands a comm target, for tests of the kernel's comm side."""

from __future__ import annotations

import json
from typing import Any, Callable, List, Optional


class FakeComm:
    """What ipykernel hands a comm target: records what the kernel sends."""

    def __init__(self, comm_id: str = "comm-1") -> None:
        self.comm_id = comm_id
        self.sent: List[dict] = []
        self.closed = False
        self.close_data: Optional[dict] = None
        self._on_msg: Optional[Callable[[dict], None]] = None
        self._on_close: Optional[Callable[[dict], None]] = None

    def send(self, data: dict) -> None:
        json.dumps(data)  # must be JSON-serialisable as it stands
        self.sent.append(data)

    def close(self, data: Optional[dict] = None) -> None:
        self.closed = True
        self.close_data = data

    def on_msg(self, callback) -> None:
        self._on_msg = callback

    def on_close(self, callback) -> None:
        self._on_close = callback

    def browser_sends(self, data: Any) -> None:
        self._on_msg({"content": {"comm_id": self.comm_id, "data": data}})

    def browser_closes(self) -> None:
        self._on_close({"content": {"comm_id": self.comm_id, "data": {}}})


def open_msg(data: Any) -> dict:
    return {"content": {"comm_id": "comm-1", "target_name": "gpumem", "data": data}}
