"""Is this error an out-of-memory error, and of which family? The one answer for the whole kernel.

The families, their patterns and the exception names that count are data, in patterns.json, which the browser's
src/actions/oom/detect.ts reads too (both sides are tested against the corpus in tests/oom/):

  cuda_allocator  PyTorch's CUDA/HIP caching allocator ("CUDA out of memory. Tried to allocate …", the
                  cudaMallocAsync backend's "Allocation on device N would exceed allowed memory", any
                  torch.OutOfMemoryError with another text). Its message carries figures (request, free,
                  reserved-but-unallocated, other processes): the checklist computes fragmentation, a batch size
                  and who else holds the GPU.
  xpu             the same allocator on Intel GPUs ("XPU out of memory. …", figures parsed too).
  mps             Apple's MPS backend ("MPS backend out of memory (MPS allocated: …)").
  driver          a CUDA/HIP call outside the allocator ("CUDA error: out of memory", hipErrorOutOfMemory,
                  CUDA_ERROR_OUT_OF_MEMORY, "cuda failed with error 2", 0.x's "cuda runtime error (2)").
  cublas, cudnn   CUBLAS_STATUS_ALLOC_FAILED / CUDNN_STATUS_ALLOC_FAILED: the library's handle or workspace.
  nccl            NCCL's "Cuda failure 'out of memory'" (other NCCL errors are not recognised).
  xla             XLA/JAX/TensorFlow: RESOURCE_EXHAUSTED, "Resource exhausted: OOM when allocating tensor", any
                  case; TensorFlow's ResourceExhaustedError by name.
  wrapper         a library gave up: accelerate's "No executable batch size found, reached zero", vLLM's KV
                  cache errors ("No available memory for the cache blocks", "The model's max seq len … is larger
                  than the maximum number of tokens that can be stored in KV cache").
  host            CPU RAM: MemoryError (numpy's "Unable to allocate X GiB for an array with shape"), torch's
                  "DefaultCPUAllocator: can't allocate memory", "DataLoader worker (pid N) is killed by signal:
                  Killed".

The rule, the same on both sides: an exception name that decides (MemoryError → host, ResourceExhaustedError →
xla) names the family; else the earliest message pattern in the exception's message; else a fallback name
(torch.OutOfMemoryError → cuda_allocator). Illegal memory accesses, device-side asserts, CUDNN_STATUS_INTERNAL_ERROR
or NOT_INITIALIZED, TensorFlow's "ran out of memory … this is not a failure" warning and NCCL errors without "out of
memory" are not out-of-memory errors and are never recognised.

In a text (a traceback, a log) the exception's own line decides, never the text around it: when the text has
exception lines ("Name: message", also after a "[rank0]:" or a logger's "…] " prefix, and VS Code's "Exception has
occurred: Name"), the first of them whose name and message classify gives the family; a line an application prints
beside it ("if you encounter CUDA out of memory, reduce the batch size") does not count. Only a text without any
exception line (a log) is searched as a whole.

`classify(type_name, message)` is the rule the browser applies to an IOPub error (ename, evalue);
`classify_exception(exc)` applies it to a live exception, where two more facts are known: a class name counts
only when the package it belongs to defines it (patterns.json `modules`), and a message counts only on the
built-in classes its family is raised as (`raised_as`). Nothing here imports torch.

An error raised from an out-of-memory error (`raise … from oom`) is that error, on both sides: PyTorch's main
process raises "DataLoader worker (pid(s) N) exited unexpectedly" from the worker's "… is killed by signal:
Killed.", and only the cause names the signal. The kernel follows `__cause__`; the browser reads the cause from
the IOPub traceback (src/actions/oom/detect.ts). An error raised while handling one (`__context__` alone) is not.

A live "exited unexpectedly" whose cause says nothing (the fetch timed out, or the pipe broke, before PyTorch's
SIGCHLD handler ran) is the host's too when the worker it names ended by SIGKILL: the DataLoader iterator in its
traceback keeps each worker's process and exit code (`killed_worker`). Only the kernel knows that fact.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from importlib import resources
from typing import Any, Dict, List, NamedTuple, Optional, Tuple


class _Pattern(NamedTuple):
    family: str
    regex: re.Pattern


class _Name(NamedTuple):
    family: str
    regex: re.Pattern
    modules: Tuple[str, ...]
    decides: bool


def _load() -> Tuple[List[_Pattern], List[_Name], Dict[str, Tuple[str, ...]], Tuple[str, ...]]:
    data = json.loads(resources.files("gpumem_kernel").joinpath("oom", "patterns.json").read_text("utf-8"))
    patterns = [
        _Pattern(entry["family"], re.compile(pattern, re.ASCII | (re.IGNORECASE if entry.get("ignore_case") else 0)))
        for entry in data["families"]
        for pattern in entry["patterns"]
    ]
    names = [
        _Name(entry["family"], re.compile(entry["pattern"], re.ASCII), tuple(entry["modules"]), entry["decides"])
        for entry in data["exception_names"]
    ]
    names.sort(key=lambda name: not name.decides)  # the names that decide first, the fallbacks last
    raised_as = {entry["family"]: tuple(entry["raised_as"]) for entry in data["families"]}
    families = tuple(dict.fromkeys(entry["family"] for entry in data["families"]))
    return patterns, names, raised_as, families


_PATTERNS, _NAMES, _RAISED_AS, FAMILIES = _load()
# An exception line: "[rank0]: torch.OutOfMemoryError: …", "ERROR 05-12 [core.py:396] ValueError: …",
# "ResourceExhaustedError (see above for traceback): …", "Exception has occurred: RuntimeError" (VS Code). The
# name must look like an exception class (…Error, …Exception, …Warning) or be one patterns.json names.
_ERROR_LINE = re.compile(
    r"^(?:[^\n]*?[\]|][ \t]+)?[ \t]*(?:\[rank\d+\]:[ \t]*)?(?:Exception has occurred:[ \t]*)?"
    r"([A-Za-z_][\w.]*)[ \t]*(?:\([^)\n]*\)[ \t]*)?(?::|$)",
    re.ASCII | re.MULTILINE,
)
_EXCEPTION_WORD = re.compile(r"(?:Error|Exception|Warning)$", re.ASCII)


@dataclass(frozen=True)
class OomMessage:
    """Where an out-of-memory message starts in a text, where its part of the text ends, and what it is."""

    family: str
    backend: str  # "CUDA" | "HIP" | "XPU": the GPU API the message names, CUDA where it names none
    start: int
    end: int  # the end of the message's part of the text: the next exception line, or the end


def _backend(family: str, matched: str) -> str:
    if family == "xpu":
        return "XPU"
    if family not in ("cuda_allocator", "driver"):
        return "CUDA"
    return "HIP" if matched.lower().startswith("hip") else "CUDA"


def _name_family(type_name: str, decides: bool) -> Optional[str]:
    return next((n.family for n in _NAMES if n.decides == decides and n.regex.search(type_name)), None)


def _earliest(text: str, start: int, end: int) -> Optional[Tuple[str, re.Match]]:
    best: Optional[Tuple[str, re.Match]] = None
    for pattern in _PATTERNS:
        match = pattern.regex.search(text, start, end)
        if match is not None and (best is None or match.start() < best[1].start()):
            best = (pattern.family, match)
    return best


def _classify_part(type_name: str, text: str, start: int, end: int) -> Optional[OomMessage]:
    """The rule on one exception (its name and the part of the text that is its message)."""
    decided = _name_family(type_name, True)
    found = _earliest(text, start, end)
    if decided is not None:
        at = found[1].start() if found is not None and found[0] == decided else start
        return OomMessage(decided, "CUDA", at, end)
    if found is not None:
        family, match = found
        return OomMessage(family, _backend(family, match.group(0)), match.start(), end)
    fallback = _name_family(type_name, False)
    return OomMessage(fallback, "CUDA", start, end) if fallback is not None and type_name else None


def _exception_lines(text: str, start: int) -> List[Tuple[str, int, int]]:
    """(name, where its message starts, where the line starts) of each exception line from `start` on."""
    lines = []
    for match in _ERROR_LINE.finditer(text, start):
        name = match.group(1)
        if _EXCEPTION_WORD.search(name) or _name_family(name, True) or _name_family(name, False):
            lines.append((name, match.end(), match.start()))
    return lines


def find_message(text: str, start: int = 0) -> Optional[OomMessage]:
    """The first out-of-memory message in `text` at or after `start` (a traceback, a log, an evalue): the
    first exception line that classifies when the text has exception lines, else the earliest message."""
    lines = _exception_lines(text, start)
    if not lines:
        found = _earliest(text, start, len(text))
        if found is None:
            return None
        family, match = found
        following = _earliest(text, match.end(), len(text))
        end = following[1].start() if following is not None else len(text)
        return OomMessage(family, _backend(family, match.group(0)), match.start(), end)
    for i, (name, at, _) in enumerate(lines):
        end = lines[i + 1][2] if i + 1 < len(lines) else len(text)
        found = _classify_part(name, text, at, end)
        if found is not None:
            return found
    return None


def is_oom_name(type_name: str) -> bool:
    """An exception class name that names an out-of-memory error by itself (torch.OutOfMemoryError,
    MemoryError, ResourceExhaustedError), qualified or not."""
    return any(n.regex.search(type_name) for n in _NAMES)


def classify(type_name: str, message: str) -> Optional[str]:
    """The family of an error with this class name and message, or None when it is not an out-of-memory error."""
    found = _classify_part(type_name, message, 0, len(message))
    return found.family if found is not None else None


def oom_error_name(text: str) -> Optional[str]:
    """The class name of the first exception line in `text` that names an out-of-memory error, or None."""
    return next((name for name, _, _ in _exception_lines(text, 0) if is_oom_name(name)), None)


def classify_text(text: str) -> Optional[str]:
    """The family of the first out-of-memory error in a text (a traceback, a log, the browser's "ename: evalue")."""
    found = find_message(text)
    return found.family if found is not None else None


def _defined_by(base: type, modules: Tuple[str, ...]) -> bool:
    return str(getattr(base, "__module__", "")).split(".")[0] in modules


def _class_family(cls: type, decides: bool) -> Optional[str]:
    for name in _NAMES:
        if name.decides != decides:
            continue
        if any(name.regex.search(base.__name__) and _defined_by(base, name.modules) for base in cls.__mro__):
            return name.family
    return None


def _raised_as(cls: type, family: str) -> bool:
    allowed = _RAISED_AS.get(family, ())
    return any(base.__name__ in allowed and base.__module__ == "builtins" for base in cls.__mro__)


def _own_family(exc: Any) -> Optional[str]:
    """The family of one live exception (or exception class) by its own class and message, or None."""
    cls = exc if isinstance(exc, type) else type(exc)
    if not isinstance(getattr(cls, "__mro__", None), tuple):
        return None
    decided = _class_family(cls, True)
    if decided is not None:
        return decided
    if not isinstance(exc, type) and isinstance(exc, BaseException):
        try:
            message = str(exc)
        except Exception:
            message = ""
        best: Optional[Tuple[str, int]] = None
        for pattern in _PATTERNS:
            match = pattern.regex.search(message)
            if match is not None and _raised_as(cls, pattern.family) and (best is None or match.start() < best[1]):
                best = (pattern.family, match.start())
        if best is not None:
            return best[0]
        if killed_worker(exc) is not None:
            return "host"
    return _class_family(cls, False)


# PyTorch's main-process message for workers it found dead; their PIDs, comma-separated.
_WORKERS_EXITED = re.compile(r"^DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly$", re.ASCII)
# How many traceback frames and workers are looked at (a deep recursion or a huge pool stops there).
_FRAMES_LIMIT = 256
_WORKERS_LIMIT = 1024


def _iterator_workers(frame: Any) -> List[Any]:
    """The worker processes of a DataLoader iterator that is `self` in this frame, else []. Every read is
    guarded: a user's object named `self` may raise from any attribute."""
    try:
        owner = frame.f_locals.get("self")
        if type(owner).__name__ != "_MultiProcessingDataLoaderIter":
            return []
        workers = owner._workers
        return list(workers[:_WORKERS_LIMIT]) if isinstance(workers, list) else []
    except Exception:
        return []


def _killed_pid(workers: List[Any], pids: Tuple[int, ...]) -> Optional[int]:
    for worker in workers:
        try:
            pid, code = worker.pid, worker.exitcode
        except Exception:
            continue
        if pid in pids and code == -signal.SIGKILL:
            return pid
    return None


def killed_worker(exc: Any) -> Optional[str]:
    """PyTorch's words for a DataLoader worker that SIGKILL ended ("DataLoader worker (pid N) is killed by signal:
    Killed.", what its SIGCHLD handler raises), when `exc` is the main process's "DataLoader worker (pid(s) N)
    exited unexpectedly" and a worker it names has exit code -SIGKILL in the iterator its traceback holds; None
    otherwise. The kernel's out-of-memory killer ends a process with SIGKILL."""
    if not isinstance(exc, RuntimeError):
        return None
    try:
        match = _WORKERS_EXITED.match(str(exc))
    except Exception:
        return None
    if match is None:
        return None
    pids = tuple(int(pid) for pid in match.group(1).split(",") if pid.strip())
    tb, frames = exc.__traceback__, 0
    while tb is not None and frames < _FRAMES_LIMIT:
        pid = _killed_pid(_iterator_workers(tb.tb_frame), pids)
        if pid is not None:
            return f"DataLoader worker (pid {pid}) is killed by signal: Killed."
        tb, frames = tb.tb_next, frames + 1
    return None


# How far `raise … from` chains are followed (a cycle stops there too).
_CAUSE_DEPTH = 8


def oom_in_chain(exc: Any) -> Optional[Tuple[Any, str]]:
    """The out-of-memory error of a live exception and its family: the exception itself, else the nearest one it
    was raised from (`__cause__`; PyTorch raises "DataLoader worker (pid(s) N) exited unexpectedly" from the
    worker's "is killed by signal: Killed."). Never an exception it was merely raised while handling
    (`__context__` alone). None when none of them is one."""
    seen = 0
    while exc is not None and seen < _CAUSE_DEPTH:
        family = _own_family(exc)
        if family is not None:
            return exc, family
        if isinstance(exc, type):
            return None
        exc = getattr(exc, "__cause__", None)
        seen += 1
    return None


def classify_exception(exc: Any) -> Optional[str]:
    """The family of a live exception (or exception class), or None: its own, else that of the exception it was
    raised from (see `oom_in_chain`). torch need not be imported."""
    found = oom_in_chain(exc)
    return found[1] if found is not None else None


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
    "killed_worker",
    "oom_error_name",
    "oom_in_chain",
]
