"""Is this error an out-of-memory error, and of which family? The one answer for the whole kernel.

Recognised (patterns in patterns.json, which the browser's src/actions/oom/detect.ts reads too):
  allocator     PyTorch's device allocator refused a tensor: "CUDA/HIP/XPU out of memory. Tried to allocate …"
                from the caching allocator, "Allocation on device N would exceed allowed memory" from its
                cudaMallocAsync backend, or any torch.OutOfMemoryError. The only family whose message carries
                figures (request, free, reserved-but-unallocated, other processes), so the checklist can compute
                fragmentation, a batch size and who else holds the GPU.
  driver        "CUDA error: out of memory" (and HIP's, and 0.x's "cuda runtime error (2)"): a CUDA call outside
                the allocator found the device full. No figures; freeing or restarting still helps.
  cublas-cudnn  CUBLAS_STATUS_ALLOC_FAILED / CUDNN_STATUS_ALLOC_FAILED: the library could not get its handle or
                workspace, almost always because the device is full, which users rarely read as an OOM. Gets the
                same checklist as the driver family. CUDNN_STATUS_INTERNAL_ERROR, illegal memory accesses and
                device-side asserts are not out-of-memory errors and are never recognised.

`classify(type_name, message)` is the rule the browser applies to an IOPub error (ename, evalue);
`classify_exception(exc)` applies it to a live exception, where two more facts are known: a class named
OutOfMemoryError counts only when torch defines it, and a message counts only on a RuntimeError (PyTorch raises
all of these as RuntimeError or a subclass). Nothing here imports torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, List, NamedTuple, Optional, Tuple


class _Pattern(NamedTuple):
    family: str
    regex: re.Pattern


def _load() -> Tuple[re.Pattern, str, List[_Pattern]]:
    data = json.loads(resources.files("gpumem_kernel").joinpath("oom", "patterns.json").read_text("utf-8"))
    compiled = [
        _Pattern(entry["family"], re.compile(pattern, re.ASCII))
        for entry in data["families"]
        for pattern in entry["patterns"]
    ]
    return re.compile(data["exception_name"], re.ASCII), data["exception_name_family"], compiled


_NAME, _NAME_FAMILY, _PATTERNS = _load()
FAMILIES: Tuple[str, ...] = tuple(dict.fromkeys(p.family for p in _PATTERNS))
# An exception line as Python prints it, "[rank0]: torch.OutOfMemoryError: …": the class name it starts with.
_ERROR_LINE = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*)\s*(?::|$)", re.ASCII | re.MULTILINE)


@dataclass(frozen=True)
class OomMessage:
    """Where an out-of-memory message starts in a text, and what it is."""

    family: str
    backend: str  # "CUDA" | "HIP" | "XPU"
    start: int
    end: int


def _backend(matched: str) -> str:
    first = matched.split(" ", 1)[0].upper()
    return first if first in ("HIP", "XPU") else "CUDA"


def find_message(text: str, start: int = 0) -> Optional[OomMessage]:
    """The earliest out-of-memory message in `text` at or after `start` (a traceback, a log, an evalue)."""
    best: Optional[re.Match] = None
    family = ""
    for pattern in _PATTERNS:
        match = pattern.regex.search(text, start)
        if match is not None and (best is None or match.start() < best.start()):
            best, family = match, pattern.family
    if best is None:
        return None
    return OomMessage(family, _backend(best.group(0)), best.start(), best.end())


def is_oom_name(type_name: str) -> bool:
    """torch.OutOfMemoryError / torch.cuda.OutOfMemoryError by name, qualified or not."""
    return _NAME.search(type_name) is not None


def classify(type_name: str, message: str) -> Optional[str]:
    """The family of an error with this class name and message, or None when it is not an out-of-memory error."""
    found = find_message(message)
    if found is not None:
        return found.family
    return _NAME_FAMILY if is_oom_name(type_name) else None


def oom_error_name(text: str) -> Optional[str]:
    """The class name of the first exception line in `text` that names torch.OutOfMemoryError, or None."""
    return next((m.group(1) for m in _ERROR_LINE.finditer(text) if is_oom_name(m.group(1))), None)


def classify_text(text: str) -> Optional[str]:
    """The family of the first out-of-memory error in a text (a traceback, or the browser's "ename: evalue"):
    a message pattern anywhere, else an exception line that names torch.OutOfMemoryError."""
    found = find_message(text)
    if found is not None:
        return found.family
    return _NAME_FAMILY if oom_error_name(text) is not None else None


def _torch_oom_class(cls: type) -> bool:
    return any(
        is_oom_name(base.__name__) and str(getattr(base, "__module__", "")).split(".")[0] == "torch"
        for base in getattr(cls, "__mro__", ())
    )


def classify_exception(exc: Any) -> Optional[str]:
    """The family of a live exception (or exception class), or None. torch need not be imported."""
    cls = exc if isinstance(exc, type) else type(exc)
    if _torch_oom_class(cls):
        return _NAME_FAMILY
    if not isinstance(exc, RuntimeError):
        return None
    try:
        message = str(exc)
    except Exception:
        return None
    found = find_message(message)
    return found.family if found is not None else None


def is_oom(exc: Any) -> bool:
    """Whether a live exception (or exception class) is an out-of-memory error of any family."""
    return classify_exception(exc) is not None


__all__ = [
    "FAMILIES",
    "OomMessage",
    "classify",
    "classify_exception",
    "classify_text",
    "find_message",
    "is_oom",
    "is_oom_name",
    "oom_error_name",
]
