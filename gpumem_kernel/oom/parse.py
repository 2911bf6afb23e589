"""PyTorch's out-of-memory message read into numbers: its format, the request, the free, cached and allocated
memory, the other processes it names. Which texts are out-of-memory errors at all is classify.py's rule."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional

from gpumem_kernel.oom.classify import find_message, oom_error_name

GIB = 1024**3
MIB = 1024**2


# Formats (collected in tests/oom/messages/, each with its source):
#   0.x  "cuda runtime error (2) : out of memory at …/THCStorage.cu:66"
#   1.0–1.4  "CUDA out of memory. Tried to allocate X (GPU n; X total capacity; X already allocated;
#             X free; X cached)"                       — "cached" is reserved but unallocated
#   1.5–2.0  "… X free; [X allowed; ]X reserved in total by PyTorch)" [+ " If reserved memory is >>
#             allocated memory try setting max_split_size_mb …"]; 1.13+ raise torch.cuda.OutOfMemoryError
#   2.1+     "CUDA out of memory. Tried to allocate X. GPU n has a total capac(i)ty of X of which X is free.
#             [Process P has X memory in use. ]*[Including non-PyTorch memory, this process has X memory in
#             use. ][X allowed; ]Of the allocated memory X is allocated by PyTorch, [with X allocated in
#             private pools (e.g., CUDA Graphs), ]and X is reserved by PyTorch but unallocated. [hint]"
#   HIP/XPU builds say "HIP out of memory" / "XPU out of memory"; a cudaMalloc outside the caching
#   allocator raises "CUDA error: out of memory" with no numbers, and so do cuBLAS/cuDNN allocation
#   failures. Which texts are out-of-memory errors at all is decided in classify.py (patterns.json).

_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes|KiB|MiB|GiB|TiB)"
_EXCEPTION_NAME = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception))\s*:\s*$")
# The class that starts the message's line when the message does not follow it directly
# ("RuntimeError: [enforce fail at alloc_cpu.cpp:73] . DefaultCPUAllocator: can't allocate memory: …").
_LINE_EXCEPTION = re.compile(r"[ \t]*(?:\[rank\d+\]:[ \t]*)?([A-Za-z_][\w.]*(?:Error|Exception))[ \t]*:")
_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_V2_TOTAL = re.compile(r"GPU (\d+) has a total capaci?ty of " + _SIZE)
_V2_FREE = re.compile(r"of which " + _SIZE + r" is free")
_V1_HEAD = re.compile(r"\(GPU (\d+); " + _SIZE + r" total capacity")
_V1_ALLOCATED = re.compile(_SIZE + r" already allocated")
_V1_FREE = re.compile(r"; " + _SIZE + r" free\b")
_V1_RESERVED = re.compile(_SIZE + r" reserved in total by PyTorch", re.IGNORECASE)
_V1_CACHED = re.compile(_SIZE + r" cached\)")
_ALLOWED = re.compile(_SIZE + r" allowed;")
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_THIS_PROCESS = re.compile(r"this process has " + _SIZE + r" memory in use", re.IGNORECASE)
_V2_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
_PRIVATE_POOLS = re.compile(r"with " + _SIZE + r" allocated in private pools")
_V2_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
MESSAGE_LIMIT = 2000


class ProcessUse(NamedTuple):
    """Another process on the device, as PyTorch's message names it: (pid, bytes)."""

    pid: int
    used: int


@dataclass
class OomInfo:
    """The numbers of one OOM message, in bytes; None where this message format does not say."""

    format: str  # "1.x" | "2.x" | "cuda-error" (a message without figures, any family) | "unknown"
    backend: str  # "CUDA" | "HIP" | "XPU"
    exception: Optional[str]
    message: str  # whitespace-normalised, at most 2000 characters
    tried_to_allocate: Optional[int] = None
    device: Optional[int] = None  # torch's device index (cuda:N), not NVML's
    total_capacity: Optional[int] = None
    free: Optional[int] = None
    allowed: Optional[int] = None  # torch.cuda.set_per_process_memory_fraction's limit
    allocated_by_pytorch: Optional[int] = None
    private_pools: Optional[int] = None  # included in allocated_by_pytorch
    reserved_unallocated: Optional[int] = None  # 2.x, and 1.0–1.4's "cached"
    reserved_total: Optional[int] = None  # 1.x "reserved in total by PyTorch"
    this_process_total: Optional[int] = None  # NVML: this process, including non-PyTorch memory
    other_processes: List[ProcessUse] = field(default_factory=list)
    hint: Optional[str] = None  # the fragmentation hint the message gave: "expandable_segments" | "max_split_size_mb"
    family: str = "cuda_allocator"  # classify.py's family (patterns.json): which steps fit

    def cached(self) -> Optional[int]:
        """Reserved but unallocated bytes, whichever way the message put it."""
        if self.reserved_unallocated is not None:
            return self.reserved_unallocated
        if self.reserved_total is not None and self.allocated_by_pytorch is not None:
            return max(0, self.reserved_total - self.allocated_by_pytorch)
        return None

    def to_payload(self) -> Dict[str, Any]:
        payload = asdict(self)
        payload["other_processes"] = [{"pid": p.pid, "used": p.used} for p in self.other_processes]
        return payload


def _to_bytes(number: str, unit: str) -> int:
    return int(round(float(number) * _UNITS[unit]))


def _size(pattern: re.Pattern, text: str, group: int = 1) -> Optional[int]:
    match = pattern.search(text)
    return _to_bytes(match.group(group), match.group(group + 1)) if match else None


def _exception_name(text: str, start: int) -> Optional[str]:
    line_start = text.rfind("\n", 0, start) + 1
    match = _EXCEPTION_NAME.search(text[line_start:start]) or _LINE_EXCEPTION.match(text[line_start:start])
    return match.group(1) if match else None


# The families whose message is the caching allocator's, with figures; the others have none this parser reads.
_WITH_FIGURES = ("cuda_allocator", "xpu")


def parse_oom_message(text: Any) -> Optional[OomInfo]:
    """The numbers of the first out-of-memory message in `text` (a traceback, a log), or None when it holds
    none. Which texts count, and of which family, is classify.py's rule; only the caching allocator's message
    (families cuda_allocator and xpu) carries figures."""
    if not isinstance(text, str):
        return None
    anchor = find_message(text)
    if anchor is None:
        return None
    exception = _exception_name(text, anchor.start)
    segment = " ".join(text[anchor.start : anchor.end].split())
    if not segment:  # the class name alone ("MemoryError"): it is the message
        exception = exception or oom_error_name(text)
    message = segment[:MESSAGE_LIMIT] or (exception or "")
    if anchor.family not in _WITH_FIGURES:  # the driver, cuBLAS, cuDNN, NCCL, MPS, XLA, wrappers, the host
        return OomInfo("cuda-error", anchor.backend, exception, message, family=anchor.family)
    info = OomInfo("unknown", anchor.backend, exception, message, family=anchor.family)
    info.tried_to_allocate = _size(_TRIED, segment)
    head = _V1_HEAD.search(segment)
    if head:
        info.format = "1.x"
        info.device, info.total_capacity = int(head.group(1)), _to_bytes(head.group(2), head.group(3))
        info.allocated_by_pytorch = _size(_V1_ALLOCATED, segment)
        info.free = _size(_V1_FREE, segment)
        info.reserved_total = _size(_V1_RESERVED, segment)
        info.reserved_unallocated = _size(_V1_CACHED, segment)
    else:
        total = _V2_TOTAL.search(segment)
        if total:
            info.device, info.total_capacity = int(total.group(1)), _to_bytes(total.group(2), total.group(3))
        info.free = _size(_V2_FREE, segment)
        info.allocated_by_pytorch = _size(_V2_ALLOCATED, segment)
        info.private_pools = _size(_PRIVATE_POOLS, segment)
        info.reserved_unallocated = _size(_V2_UNALLOCATED, segment)
        info.this_process_total = _size(_THIS_PROCESS, segment)
        info.other_processes = [
            ProcessUse(int(m.group(1)), _to_bytes(m.group(2), m.group(3))) for m in _PROCESS.finditer(segment)
        ]
        if total or info.free is not None or info.allocated_by_pytorch is not None:
            info.format = "2.x"
    info.allowed = _size(_ALLOWED, segment)
    if "expandable_segments" in segment:
        info.hint = "expandable_segments"
    elif "max_split_size_mb" in segment:
        info.hint = "max_split_size_mb"
    return info
