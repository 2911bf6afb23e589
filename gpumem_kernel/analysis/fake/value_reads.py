"""One line that says exactly which value read a fake trace cannot follow: the operator (an output whose size, or
a Python value, depends on tensor values) and the innermost frame of the user's code that asked for it, e.g.
"aten._unique2 (output size depends on tensor values) at ultralytics/utils/loss.py:218 in preprocess".

FakeTensorMode raises DynamicOutputShapeException (nonzero, unique, masked_select, boolean indexing) or
DataDependentOutputException (.item(), .tolist(), `if tensor:`) with the operator as its message; the frame is
the last one of the traceback outside torch and this package."""

from __future__ import annotations

import traceback
from pathlib import PurePath
from typing import Optional

_KINDS = {
    "DynamicOutputShapeException": "output size depends on tensor values",
    "DataDependentOutputException": "a Python value read from a tensor",
}
OUTSIDE = ("/torch/", "/gpumem_kernel/")


def _user_frame(exc: BaseException) -> Optional[traceback.FrameSummary]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not any(p in f.filename for p in OUTSIDE)]
    return frames[-1] if frames else None


def short_path(filename: str) -> str:
    """The path from its package down (site-packages/ultralytics/utils/loss.py -> ultralytics/utils/loss.py)."""
    parts = PurePath(filename).parts
    for marker in ("site-packages", "dist-packages", ".packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return "/".join(parts[-3:])


def describe(exc: BaseException) -> Optional[str]:
    """'<operator> (<why it cannot be followed>) at <file>:<line> in <function>', or None for other errors."""
    kind = _KINDS.get(type(exc).__name__)
    if kind is None:
        return None
    text = str(exc).strip()
    op = text.splitlines()[0].removesuffix(".default") if text else type(exc).__name__
    frame = _user_frame(exc)
    where = f" at {short_path(frame.filename)}:{frame.lineno} in {frame.name}" if frame else ""
    return f"{op} ({kind}){where}"
