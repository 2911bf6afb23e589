"""Bounded one-line messages: a value echoed back is cut, and a whole one-line error is bounded, so a pasted
megabyte never comes back as a megabyte of error (argument checks, config files, failed training steps)."""

from __future__ import annotations

import re
from typing import Any

ECHO_LIMIT = 80  # characters of a value echoed in a message
LINE_LIMIT = 400  # characters of a whole one-line error
_LONG_RUN = re.compile(r"\S{%d,}" % (ECHO_LIMIT + 1))


def cut(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text`, or its first `limit` - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: Any) -> str:
    """A value as a message quotes it (its repr), cut."""
    return cut(repr(value))


def one_line(text: str) -> str:
    """The first line of a message, every over-long word (an echoed value) cut, and the whole bounded."""
    lines = str(text).strip().splitlines()
    return cut(_LONG_RUN.sub(lambda match: cut(match.group()), lines[0] if lines else ""), LINE_LIMIT)
