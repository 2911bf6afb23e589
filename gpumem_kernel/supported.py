"""The versions we support: for each package, the oldest and the newest release a test has run on, and where.

The one table behind README's "Supported versions" (tests/test_supported.py checks that they agree) and behind
scripts/check_versions.py, which the test command runs on each of its venvs so that a venv drifting outside
these ranges fails there rather than passing on versions nobody promised. A bound given as major.minor covers
every patch release of it ("2.15" admits 2.15.1).

Imports nothing of ours (and nothing outside the standard library): scripts load this file on its own."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

Release = Tuple[int, ...]


@dataclass(frozen=True)
class Supported:
    name: str  # as README names it
    distribution: str  # as pip and importlib.metadata name it ("python" for the interpreter)
    oldest: str
    newest: str
    tested: str  # where the bounds were run

    def verdict(self, installed: str) -> Optional[str]:
        """None when `installed` lies in [oldest, newest]; else one line that says which way it misses."""
        release = parse(installed)
        if release is None:
            return f"{self.name} {installed}: not a version this check reads (supported {self.span()})"
        if release < parse_strict(self.oldest):
            return f"{self.name} {installed} is older than the oldest supported {self.oldest} (supported {self.span()})"
        newest = parse_strict(self.newest)
        if release[: len(newest)] > newest:
            return f"{self.name} {installed} is newer than the newest tested {self.newest} (supported {self.span()})"
        return None

    def span(self) -> str:
        return self.oldest if self.oldest == self.newest else f"{self.oldest} to {self.newest}"


SUPPORTED: Tuple[Supported, ...] = (
    Supported(
        "Python",
        "python",
        "3.9",
        "3.12",
        "3.11 in the test command; 3.12 on the GPU image; 3.9 by hand",
    ),
    Supported(
        "torch",
        "torch",
        "2.8",
        "2.15",
        "2.13 (CPU) in the test command; 2.15 by scripts/test_newest_torch.sh; 2.11 on the GPU image; 2.8 by hand",
    ),
    Supported(
        "transformers",
        "transformers",
        "4.57",
        "5.24",
        "5.24.0 and 4.57.6 (the tests its version decides, .venv-transformers4) in the test command",
    ),
    Supported("peft", "peft", "0.21", "0.21", "0.21.2 in the test command"),
    Supported("bitsandbytes", "bitsandbytes", "0.50", "0.50", "0.50.2 (its CPU paths) in the test command"),
    Supported(
        "JupyterLab", "jupyterlab", "4.4", "4.6", "4.4.10 (the build's core packages) and 4.6.6 in the test command"
    ),
    Supported("Notebook", "notebook", "7.4", "7.6", "7.4.7 and 7.6.5 in the test command"),
    Supported(
        "ipykernel", "ipykernel", "6.22", "7.4", "6.31 and 7.4 (the kernel tests run on both) in the test command"
    ),
)


def parse(text: str) -> Optional[Release]:
    """'2.13.0+cpu' -> (2, 13, 0); '7.4.0rc1' -> (7, 4, 0); anything without a leading number -> None."""
    match = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def parse_strict(text: str) -> Release:
    release = parse(text)
    if release is None:
        raise ValueError(f"not a version: {text!r}")
    return release


def markdown_table() -> str:
    """README's table, from SUPPORTED."""
    rows = ["| package | oldest | newest tested | tested on |", "| --- | --- | --- | --- |"]
    rows += [f"| {s.name} | {s.oldest} | {s.newest} | {s.tested} |" for s in SUPPORTED]
    return "\n".join(rows)
