"""CUDA out of memory: read PyTorch's message, diagnose it with a fresh probe, and turn the
memory-management and host-memory guides' OOM checklists into steps that are buttons, inserted cells or
computed suggestions.

The handler installed by `install_oom_handler` keeps IPython's normal traceback and adds the checklist
as an inline MIME bundle below it. Nothing here imports torch or initialises CUDA.
"""

from __future__ import annotations

import html
import keyword
import math
import os
import re
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from gpumem_kernel.oom.classify import find_message, is_oom, oom_error_name, oom_in_chain
from gpumem_kernel.oom.evaluation import evaluation_evidence
from gpumem_kernel.probe.holders import (
    frame_holder,
    holders,
    resolve_shell,
    torch_kinds,
    traceback_frames,
    user_variables,
)
from gpumem_kernel.probe.processes import own_create_time
from gpumem_kernel.probe.snapshot import take_sample
from gpumem_kernel.probe.torchstats import cuda_initialised, loaded_torch
from gpumem_kernel.render.snippets import LoopNames, accumulation_loop
from gpumem_kernel.render.units import human

OOM_MIME = "application/vnd.gpumem.oom.v1+json"
PAYLOAD_VERSION = 1
ACTIONS = ("clear", "restart", "shutdown-kernel", "insert-cell", "insert-env-cell-and-restart")
GIB = 1024**3
MIB = 1024**2

# --- parsing PyTorch's message -------------------------------------------------------------------------
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
_MESSAGE_LIMIT = 2000


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
    message = segment[:_MESSAGE_LIMIT] or (exception or "")
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


# --- diagnosis -------------------------------------------------------------------------------------------


@dataclass
class Fragmentation:
    reserved_unallocated: int
    threshold: int  # flagged at or above this: 25 % of the request, or 1 GiB
    decisive: bool  # reserved-but-unallocated plus free would have covered the request
    expandable_segments_set: bool
    suggest: bool


@dataclass
class OtherProcess:
    pid: int
    used: Optional[int]  # None: unknown, or an impossible NVML figure (WDDM reports 2**64-1)
    name: Optional[str]
    kernel_id: Optional[str]  # a Jupyter kernel of this server: the browser names its notebook
    child_of_kernel: bool  # a child of this kernel (a DataLoader worker that touched CUDA)
    source: str  # "message" | "probe" | "both"


@dataclass
class TracebackPin:
    frames: int
    tensors: int
    bytes: int
    by_device: Dict[str, int]


@dataclass
class HostMemory:
    rss: Optional[int]
    total: Optional[int]
    available: Optional[int]
    workers: int
    workers_rss: int
    container_limit: Optional[int]
    container_usage: Optional[int]
    low: bool
    # the workers' summed unique memory (USS): what each worker really costs; None when not measured (added later)
    workers_uss: Optional[int] = None


@dataclass
class Loader:
    name: str
    batch_size: Optional[int]
    num_workers: int


@dataclass
class InputSize:
    name: str
    value: int
    kind: str  # "image" | "sequence"


@dataclass
class ModelInfo:
    name: str
    type_name: str
    parameters: int
    bytes: int
    blocks: Optional[str]  # attribute path of its largest ModuleList/Sequential ("" = the model itself)
    blocks_kind: Optional[str]  # "ModuleList" | "Sequential"
    hf_checkpointing: bool  # has gradient_checkpointing_enable() (Hugging Face)
    checkpointing_on: bool


@dataclass
class CodeNames:
    """The user's own names, so inserted snippets run as they are."""

    model: str = "model"
    optimizer: str = "optimizer"
    loader: str = "train_loader"
    criterion: str = "criterion"
    device: str = '"cuda"'


@dataclass
class Cause:
    """What the figures say caused the OOM; the checklist puts this cause's steps first (CAUSE_STEPS)."""

    kind: str  # "too-large" | "other-processes" | "fragmentation" | "traceback" | "host-memory"
    bytes: Optional[int]  # the request (too-large), or the memory that cause holds; None: unknown (host-memory)
    decisive: bool  # explains the OOM alone: that memory plus the free memory would have covered the request


@dataclass
class Diagnosis:
    device: Optional[int]
    too_large: bool
    fragmentation: Optional[Fragmentation]
    other_processes: List[OtherProcess]
    pid_unmatched: bool
    traceback: Optional[TracebackPin]
    host: Optional[HostMemory]
    loaders: List[Loader]
    num_workers: Optional[int]
    amp: str  # "likely" (a GradScaler or a half-precision model exists) | "unknown"
    bf16_supported: Optional[bool]
    batch_size: Optional[int]
    batch_size_source: Optional[str]
    input_size: Optional[InputSize]
    model: Optional[ModelInfo]
    names: CodeNames
    alloc_conf_var: str
    alloc_conf: Optional[str]
    torch_version: Optional[str]
    notes: List[str]
    causes: List[Cause] = field(default_factory=list)  # strongest first; empty: the figures name none
    # why the failed call ran with gradients off (evaluation.py), one line; None: training, or nothing says
    evaluation: Optional[str] = None

    def to_payload(self) -> Dict[str, Any]:
        return asdict(self)


_BATCH_NAMES = {"batch_size", "bs", "batchsize", "train_batch_size", "per_device_train_batch_size"}
_WORKER_NAMES = {"num_workers", "n_workers", "workers", "dataloader_num_workers"}
_IMAGE_NAMES = {"img_size", "image_size", "imgsz", "img_res", "resolution", "input_size", "crop_size"}
_SEQUENCE_NAMES = {
    "seq_len",
    "seq_length",
    "max_seq_len",
    "max_seq_length",
    "max_length",
    "max_len",
    "block_size",
    "context_length",
    "max_source_length",
    "max_target_length",
}


def _positive_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass
class _Scan:
    """What the user namespace says about the training setup."""

    batch: List[Tuple[str, int]] = field(default_factory=list)
    workers: List[Tuple[str, int]] = field(default_factory=list)
    inputs: List[InputSize] = field(default_factory=list)
    loaders: List[Loader] = field(default_factory=list)
    models: List[Tuple[str, Any]] = field(default_factory=list)
    optimizers: List[str] = field(default_factory=list)
    losses: List[str] = field(default_factory=list)
    device: Optional[str] = None
    scaler: Optional[str] = None
    trainer_args: Optional[Tuple[str, Any]] = None


def _is_instance(value: Any, module: str, name: str) -> bool:
    cls = getattr(sys.modules.get(module), name, None)
    try:
        return isinstance(cls, type) and isinstance(value, cls)
    except Exception:
        return False


def _scan_namespace(shell: Any) -> _Scan:
    scan = _Scan()
    kinds = torch_kinds()
    for name, value in user_variables(shell):
        lower = name.lower()
        number = _positive_int(value)
        if number is not None:
            if lower in _BATCH_NAMES:
                scan.batch.append((name, number))
            elif lower in _WORKER_NAMES:
                scan.workers.append((name, number))
            elif lower in _IMAGE_NAMES or lower in _SEQUENCE_NAMES:
                scan.inputs.append(InputSize(name, number, "image" if lower in _IMAGE_NAMES else "sequence"))
            continue
        if type(value) is int and value == 0 and lower in _WORKER_NAMES:
            scan.workers.append((name, 0))
            continue
        if kinds is None:
            continue
        if _is_instance(value, "torch.utils.data", "DataLoader"):
            scan.loaders.append(
                Loader(
                    name, _positive_int(getattr(value, "batch_size", None)), int(getattr(value, "num_workers", 0) or 0)
                )
            )
        elif _is_instance(value, "torch.nn.modules.loss", "_Loss"):
            scan.losses.append(name)
        elif kinds.module is not None and isinstance(value, kinds.module):
            scan.models.append((name, value))
        elif kinds.optimizer is not None and isinstance(value, kinds.optimizer):
            scan.optimizers.append(name)
        elif type(value).__name__ == "GradScaler" and type(value).__module__.startswith("torch"):
            scan.scaler = name
        elif lower == "device" and (isinstance(value, str) or type(value).__name__ == "device"):
            scan.device = name
        elif type(value).__name__ == "TrainingArguments":  # Hugging Face Trainer's setting names
            scan.trainer_args = (name, value)
    return scan


def _model_info(name: str, model: Any) -> ModelInfo:
    parameters = size = 0
    try:
        for p in model.parameters():
            parameters += p.numel()
            size += p.numel() * p.element_size()
    except Exception:
        pass
    blocks, blocks_kind = _largest_blocks(model)
    return ModelInfo(
        name,
        type(model).__name__,
        int(parameters),
        int(size),
        blocks,
        blocks_kind,
        hf_checkpointing=callable(getattr(model, "gradient_checkpointing_enable", None)),
        checkpointing_on=bool(getattr(model, "is_gradient_checkpointing", False)),
    )


def _largest_blocks(model: Any) -> Tuple[Optional[str], Optional[str]]:
    """Attribute path of the ModuleList/Sequential (depth ≤ 3) with the most parameters, for checkpointing."""
    best: Tuple[int, Optional[str], Optional[str]] = (0, None, None)
    try:
        for path, module in model.named_modules():
            kind = type(module).__name__
            if kind not in ("ModuleList", "Sequential") or len(module) < 2:
                continue
            parts = path.split(".") if path else []
            if len(parts) > 3 or not all(_is_name(part) for part in parts):
                continue
            count = sum(p.numel() for p in module.parameters())
            if count > best[0]:
                best = (count, path, kind)
    except Exception:
        return None, None
    return best[1], best[2]


def _pick_batch(scan: _Scan) -> Tuple[Optional[int], Optional[str]]:
    loaders = [loader for loader in scan.loaders if loader.batch_size]
    train = [loader for loader in loaders if "train" in loader.name.lower()] or loaders
    if train:
        return train[0].batch_size, f"{train[0].name}.batch_size"
    if scan.trainer_args is not None:
        value = _positive_int(getattr(scan.trainer_args[1], "per_device_train_batch_size", None))
        if value:
            return value, f"{scan.trainer_args[0]}.per_device_train_batch_size"
    if scan.batch:
        return scan.batch[0][1], scan.batch[0][0]
    return None, None


def _pick_workers(scan: _Scan) -> Optional[int]:
    counts = [loader.num_workers for loader in scan.loaders] + [n for _, n in scan.workers]
    if scan.trainer_args is not None:
        counts.append(int(getattr(scan.trainer_args[1], "dataloader_num_workers", 0) or 0))
    return max(counts) if counts else None


def _is_name(text: str) -> bool:
    """Whether code can spell `text` as a name: namespace keys are any strings (globals()["x = 1; ..."])."""
    return text.isidentifier() and not keyword.iskeyword(text)


def _code_name(candidates: Sequence[str], placeholder: str) -> str:
    """The first candidate code can spell, else the placeholder the user fills: inserted cells are code the user
    runs, so a key that is not an identifier never reaches them."""
    return next((name for name in candidates if _is_name(name)), placeholder)


def _code_names(scan: _Scan, model: Optional[ModelInfo]) -> CodeNames:
    names = [loader.name for loader in scan.loaders]
    train = [name for name in names if "train" in name.lower()] or names
    default = CodeNames()
    return CodeNames(
        model=_code_name([model.name] if model else [], default.model),
        optimizer=_code_name(scan.optimizers, default.optimizer),
        loader=_code_name(train, default.loader),
        criterion=_code_name(scan.losses, default.criterion),
        device=_code_name([scan.device] if scan.device else [], default.device),
    )


def _alloc_conf(backend: str, env: Mapping[str, str]) -> Tuple[str, Optional[str], bool]:
    """(variable to set, its current value, expandable segments already on)."""
    var = "PYTORCH_HIP_ALLOC_CONF" if backend == "HIP" else "PYTORCH_CUDA_ALLOC_CONF"
    values = [env.get(name) for name in (var, "PYTORCH_ALLOC_CONF") if env.get(name)]
    on = any("expandable_segments:true" in v.replace(" ", "").lower() for v in values)
    return var, env.get(var), on


def _fragmentation(info: OomInfo, expandable_on: bool) -> Optional[Fragmentation]:
    cached = info.cached()
    if cached is None:
        return None
    tried = info.tried_to_allocate
    threshold = _threshold(tried)
    # Below one 20 MiB large-pool block the cache cannot be the reason.
    flagged = cached >= threshold and cached >= 20 * MIB
    decisive = bool(tried and info.free is not None and cached + info.free >= tried and cached >= 20 * MIB)
    return Fragmentation(cached, threshold, decisive, expandable_on, flagged and not expandable_on)


def _sample_devices(sample: Optional[Mapping[str, Any]], device: Optional[int]) -> List[Mapping[str, Any]]:
    devices = ((sample or {}).get("gpu") or {}).get("devices") or []
    return [d for d in devices if device is None or d.get("cuda_index") == device]


def _is_child(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).ppid() == os.getpid()
    except Exception:
        return False


def _other_processes(info: OomInfo, sample: Optional[Mapping[str, Any]], notes: List[str]) -> List[OtherProcess]:
    devices = _sample_devices(sample, info.device)
    capacity = info.total_capacity or max((d.get("total") or 0 for d in devices), default=0) or None
    me = ((sample or {}).get("kernel") or {}).get("pid", os.getpid())
    found: Dict[int, OtherProcess] = {}
    for pid, used in info.other_processes:
        found[pid] = OtherProcess(pid, used, None, None, False, "message")
    for device in devices:
        for p in device.get("processes") or []:
            if p.get("this_kernel") or p.get("pid") == me:
                continue
            known = found.get(p["pid"])
            if known is None:
                found[p["pid"]] = OtherProcess(
                    p["pid"], p.get("used"), p.get("name"), p.get("kernel_id"), False, "probe"
                )
            else:
                known.name, known.kernel_id, known.source = p.get("name"), p.get("kernel_id"), "both"
                known.used = known.used if known.used is not None else p.get("used")
    for process in found.values():
        if process.used is not None and capacity and process.used > capacity:
            notes.append(
                f"NVML reported an impossible {human(process.used)} for PID {process.pid} (a known "
                "Windows/WDDM quirk); its real usage is unknown"
            )
            process.used = None
        process.child_of_kernel = _is_child(process.pid)
    return sorted(found.values(), key=lambda p: -(p.used or 0))


def _host(sample: Optional[Mapping[str, Any]]) -> Optional[HostMemory]:
    host = (sample or {}).get("host")
    if not host:
        return None
    total, available = host.get("total"), host.get("available")
    limit, usage = host.get("container_limit"), host.get("container_usage")
    low = bool(
        (total and available is not None and available < 0.1 * total)
        or (limit and usage is not None and usage >= 0.9 * limit)
    )
    children = host.get("children") or {}
    return HostMemory(
        host.get("rss"),
        total,
        available,
        int(children.get("count") or 0),
        int(children.get("rss") or 0),
        limit,
        usage,
        low,
        children.get("uss"),
    )


def _bf16(info: OomInfo, sample: Optional[Mapping[str, Any]]) -> Optional[bool]:
    """bf16 autocast is worth it on compute capability ≥ 8.0 (Ampere and newer)."""
    if cuda_initialised():
        try:
            return bool(sys.modules["torch.cuda"].is_bf16_supported())
        except Exception:
            pass
    for device in _sample_devices(sample, info.device):
        capability = device.get("compute_capability")
        if capability:
            try:
                return float(capability) >= 8.0
            except ValueError:
                continue
    return None


def _traceback_pin(shell: Any, tb: Any) -> Optional[TracebackPin]:
    """Tensors that only the failed call's frames keep alive (what the first checklist step frees)."""
    kinds = torch_kinds()
    tracebacks = [tb] if tb is not None else [t for t in (getattr(sys, "last_traceback", None),) if t is not None]
    if kinds is None or not tracebacks:
        return None
    frames = traceback_frames(tracebacks)
    seen: set = set()
    holders(shell, seen=seen)  # what user variables keep alive is not freed by dropping the traceback
    pinned = frame_holder(frames, kinds, seen)
    return TracebackPin(len(frames), pinned.tensors, pinned.bytes, pinned.by_device)


def diagnose(
    info: OomInfo,
    sample: Optional[Mapping[str, Any]] = None,
    shell: Any = None,
    *,
    tb: Any = None,
    env: Optional[Mapping[str, str]] = None,
) -> Diagnosis:
    """What the message, a fresh probe `sample` (wire format dict) and the user namespace say about the OOM.

    `tb`: the failed call's traceback (the handler passes it; default sys.last_traceback).
    """
    shell = resolve_shell(shell)
    env = os.environ if env is None else env
    notes: List[str] = []
    scan = _scan_namespace(shell)
    models = sorted((_model_info(name, value) for name, value in scan.models), key=lambda m: -m.bytes)
    model = models[0] if models else None
    batch, batch_source = _pick_batch(scan)
    var, conf, expandable_on = _alloc_conf(info.backend, env)
    limit = min(v for v in (info.total_capacity, info.allowed) if v) if (info.total_capacity or info.allowed) else None
    too_large = bool(info.tried_to_allocate and limit and info.tried_to_allocate > limit)
    if too_large:
        notes.append(
            f"One allocation of {human(info.tried_to_allocate)} is larger than all the memory this GPU "
            f"allows ({human(limit)}): freeing memory cannot help; make that tensor smaller"
        )
    if info.allowed:
        notes.append(f"torch.cuda.set_per_process_memory_fraction limits this process to {human(info.allowed)}")
    processes = _other_processes(info, sample, notes)
    pid_unmatched = bool(info.other_processes and info.this_process_total is None and info.format == "2.x")
    if pid_unmatched:
        notes.append(
            "PyTorch did not find its own PID in NVML's list (containers report host PIDs): "
            f"process {info.other_processes[0].pid} may be this kernel itself"
        )
    scaler_or_half = scan.scaler or (model and _half_precision(scan, model.name))
    torch = loaded_torch()
    diagnosis = Diagnosis(
        device=info.device,
        too_large=too_large,
        fragmentation=_fragmentation(info, expandable_on),
        other_processes=processes,
        pid_unmatched=pid_unmatched,
        traceback=_traceback_pin(shell, tb),
        host=_host(sample),
        loaders=scan.loaders,
        num_workers=_pick_workers(scan),
        amp="likely" if scaler_or_half else "unknown",
        bf16_supported=_bf16(info, sample),
        batch_size=batch,
        batch_size_source=batch_source,
        input_size=scan.inputs[0] if scan.inputs else None,
        model=model,
        names=_code_names(scan, model),
        alloc_conf_var=var,
        alloc_conf=conf,
        torch_version=(str(getattr(torch, "__version__", "")) or None) if torch is not None else None,
        notes=notes,
        evaluation=evaluation_evidence(tb),
    )
    diagnosis.causes = _causes(info, diagnosis)
    cause_note = _cause_note(info, diagnosis.causes)
    if cause_note is not None:
        notes.insert(0, cause_note)
    family_note = _family_note(info)
    if family_note is not None:
        notes.insert(0, family_note)
    return diagnosis


# --- the family: what failed to allocate, and which steps fit it -------------------------------------------


def _wrapper_kind(info: OomInfo) -> str:
    """Which library gave up: "accelerate" (its batch-size finder) or "vllm" (its KV cache)."""
    return "accelerate" if "batch size found" in info.message else "vllm"


_FAMILY_NOTES = {
    "cublas": (
        "cuBLAS could not allocate its handle or workspace: the GPU is full, usually with PyTorch's cached blocks, "
        "so clearing or restarting comes first; cuBLAS allocates outside PyTorch's allocator, so expandable "
        "segments cannot help"
    ),
    "cudnn": (
        "cuDNN could not allocate its handle or workspace: the GPU is full, usually with PyTorch's cached blocks, "
        "so clearing or restarting comes first; torch.backends.cudnn.benchmark = False tries fewer "
        "workspace-hungry algorithms; expandable segments cannot help"
    ),
    "nccl": (
        "NCCL could not allocate its communication buffers on the GPU: other processes and PyTorch's cache left "
        "it too little, so the steps about them come first; NCCL allocates outside PyTorch's allocator, so "
        "expandable segments cannot help"
    ),
    "mps": (
        "Apple GPU (MPS): the GPU shares the Mac's RAM with every application, and PyTorch caps its share "
        "(PYTORCH_MPS_HIGH_WATERMARK_RATIO; 0.0 lifts the cap at the risk of the whole system swapping); "
        "torch.mps.empty_cache() returns MPS's cached memory"
    ),
    "xla": (
        "XLA (JAX, TensorFlow, PyTorch/XLA): JAX takes 75 % of the GPU when it starts, so another JAX or "
        "TensorFlow process, or both frameworks in one kernel, leave little room; set "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION (JAX) or "
        "tf.config.experimental.set_memory_growth (TensorFlow) before the framework starts"
    ),
    "host": (
        "The host's memory (RAM) ran out, not the GPU's: DataLoader workers (each a process with its own copy of "
        "the dataset), pinned memory and the container's limit come first; the GPU's steps are folded"
    ),
}
_WRAPPER_NOTES = {
    "accelerate": (
        "accelerate's find_executable_batch_size halved the batch down to zero: even a batch of 1 ran out of GPU "
        "memory, so one sample's step must get smaller (mixed precision, gradient checkpointing, shorter inputs) "
        "or the model must"
    ),
    "vllm": (
        "vLLM: after loading the weights too little GPU memory is left for the KV cache; raise "
        "gpu_memory_utilization (the share of the GPU vLLM may take, 0.9 by default) when nothing else uses the "
        "GPU, lower max_model_len, or free the GPU from other processes"
    ),
}


def _family_note(info: OomInfo) -> Optional[str]:
    if info.family == "wrapper":
        return _WRAPPER_NOTES[_wrapper_kind(info)]
    return _FAMILY_NOTES.get(info.family)


# --- the cause: which steps come first --------------------------------------------------------------------
# A finding is a cause when the memory it holds matters for this request: at least a quarter of it (at most
# 1 GiB; 1 GiB when the request is unknown) and at least one 20 MiB large-pool block. It is decisive when that
# memory plus the free memory would have covered the request. Causes are ordered: a request larger than the
# GPU first (nothing else can help), then decisive causes, then the others, each group largest first.


def _threshold(tried: Optional[int]) -> int:
    return min(GIB, tried // 4) if tried else GIB


def _cause(amount: int, info: OomInfo, kind: str) -> Optional[Cause]:
    tried = info.tried_to_allocate
    decisive = bool(tried and info.free is not None and amount + info.free >= tried)
    if amount < 20 * MIB or not (decisive or amount >= _threshold(tried)):
        return None
    return Cause(kind, amount, decisive)


def _causes(info: OomInfo, d: Diagnosis) -> List[Cause]:
    if d.too_large:
        return [Cause("too-large", info.tried_to_allocate, True)]
    found: List[Cause] = []
    others = sum(p.used or 0 for p in d.other_processes)
    if others and not d.pid_unmatched:  # unmatched: the "other" process may be this kernel itself
        found.append(_cause(others, info, "other-processes"))
    f = d.fragmentation
    if f is not None and f.suggest:
        found.append(_cause(f.reserved_unallocated, info, "fragmentation"))
    if d.traceback is not None:  # what the failed call's frames keep alive on the GPU that ran out
        cuda = {device: n for device, n in d.traceback.by_device.items() if device.startswith("cuda")}
        pinned = cuda.get(f"cuda:{info.device}", 0) if info.device is not None else sum(cuda.values())
        if pinned:
            found.append(_cause(pinned, info, "traceback"))
    causes = sorted((c for c in found if c is not None), key=lambda c: (not c.decisive, -(c.bytes or 0)))
    if d.host is not None and d.host.low:
        causes.append(Cause("host-memory", None, False))
    return causes


_CAUSE_WORDS = {  # kind: (what holds the memory, given its size; what comes first)
    "other-processes": ("other processes hold {} on this GPU", "the steps about them come first"),
    "fragmentation": ("fragmentation, {} reserved but unallocated", "expandable segments come first"),
    "traceback": ("the failed call's traceback keeps {} of tensors alive", "clearing comes first"),
}


def _cause_note(info: OomInfo, causes: Sequence[Cause]) -> Optional[str]:
    """One line naming the first cause and what it puts first (too-large and host memory have their own)."""
    cause = causes[0] if causes else None
    if cause is None or cause.bytes is None or cause.kind not in _CAUSE_WORDS:
        return None
    what, first = _CAUSE_WORDS[cause.kind]
    head = "Likely cause: " + what.format(human(cause.bytes))
    if cause.decisive:
        return f"{head}; that memory plus the free memory would have covered the request, so {first}"
    if info.tried_to_allocate and info.free is not None:
        return (
            f"{head}, so {first}; with the free memory that makes {human(cause.bytes + info.free)} of the "
            f"{human(info.tried_to_allocate)} requested: make the step smaller as well"
        )
    return f"{head}, so {first}"


def _half_precision(scan: _Scan, model_name: str) -> bool:
    for name, value in scan.models:
        if name == model_name:
            try:
                return str(next(value.parameters()).dtype) in ("torch.float16", "torch.bfloat16")
            except Exception:
                return False
    return False


# --- the checklist ---------------------------------------------------------------------------------------
# Every step of the seeds' checklists, and the step that covers it (tests check each id appears):
SEED_STEPS: Dict[str, str] = {
    "001 #1 Jupyter 커널 재시작 (restart the kernel)": "restart",
    "001 #2 clear_gpu_memory() 실행": "clear",
    "001 #3 다른 GPU 프로세스 확인 (nvidia-smi)": "other-processes",
    "001 #4 BATCH_SIZE 16 → 8": "batch-size",
    "001 #5 num_workers 2 → 0": "fewer-workers",
    "001 #6 IMG_SIZE 224 → 192": "smaller-inputs",
    "001 #7 Mixed Precision Training": "mixed-precision",
    "001 #8 더 작은 모델로 변경 (smaller model)": "smaller-model",
    "003 즉시 확인: GPU 메모리 사용량 (nvidia-smi)": "other-processes",
    "003 즉시 확인: 시스템 메모리 사용량 (free -h)": "host-memory",
    "003 즉시 확인: DataLoader 워커 프로세스 수": "host-memory",
    "003 즉시 확인: 콘테이너 메모리 제한": "host-memory",
    "003 1단계: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True": "expandable-segments",
    "003 1단계: CUDA_LAUNCH_BLOCKING=1 (explained as a debugging aid, not a memory saver)": "expandable-segments",
    "003 2단계 #1 dataloader_num_workers 50% 감소": "fewer-workers",
    "003 2단계 #2 per_device_eval_batch_size 30-50% 감소": "eval-batch-size",
    "003 2단계 #3 per_device_train_batch_size 20-30% 감소": "batch-size",
    "003 2단계 #4 gradient_accumulation_steps 증가로 유효 배치 보상": "grad-accumulation",
    "003 3단계 gradient_checkpointing: true": "grad-checkpointing",
    "003 3단계 fp16: true": "mixed-precision",
    "003 3단계 dataloader_drop_last: true": "batch-size",
}


@dataclass
class Step:
    id: str
    title: str
    detail: str
    action: Optional[str]  # one of ACTIONS, or None for advice
    kernel_id: Optional[str] = None  # for "shutdown-kernel"
    code: Optional[str] = None  # for "insert-cell" and "insert-env-cell-and-restart"
    not_applicable: Optional[str] = None  # why it cannot help here (shown folded); None: it may help


def suggested_batch(last_recommendation: Optional[int], batch_size: Optional[int]) -> Tuple[Optional[int], str]:
    """(new batch size, why): the last %gpumem analyze recommendation if it is below the batch that
    failed, else half the current batch, else None."""
    if last_recommendation and (batch_size is None or last_recommendation < batch_size):
        return last_recommendation, "the last %gpumem analyze recommendation"
    if batch_size:
        return max(1, batch_size // 2), f"half of {batch_size}"
    return None, "half of your current batch"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _count(n: int) -> str:
    for factor, suffix in ((1e9, " B"), (1e6, " M")):
        if n >= factor:
            return f"{n / factor:.1f}{suffix}"
    return f"{n:,}"


def _clear_step(info: OomInfo, d: Diagnosis) -> Step:
    detail = (
        "Drops the last traceback and the cached outputs that keep tensors alive, runs gc.collect() and "
        "returns PyTorch's cached blocks to the driver. Your variables stay."
    )
    if d.traceback and d.traceback.tensors:
        detail += (
            f" The failed call's frames alone keep {_plural(d.traceback.tensors, 'tensor')} "
            f"({human(d.traceback.bytes)}) alive."
        )
    return Step("clear", "Clear GPU memory", detail, "clear")


def _restart_step(info: OomInfo, d: Diagnosis, sample: Optional[Mapping[str, Any]]) -> Step:
    held = info.this_process_total
    if held is not None and info.total_capacity and held > info.total_capacity:
        held = None  # WDDM's 2**64-1
    if held is None:
        held = ((sample or {}).get("kernel") or {}).get("gpu_used") if sample else None
    amount = f" ({human(held)} on the GPU, CUDA context included)" if held else ""
    return Step(
        "restart",
        "Restart the kernel and free its memory",
        f"Frees everything this kernel holds{amount}; afterwards re-run only the cells you need. "
        "Use it when clearing is not enough.",
        "restart",
    )


def _slug(text: str) -> str:
    """A step id part from a kernel id (a UUID normally; anything else is reduced to [a-z0-9-])."""
    return re.sub(r"[^a-z0-9-]", "", text.lower())[:64]


def _process_steps(d: Diagnosis) -> List[Step]:
    steps = [
        Step(
            f"shutdown-{_slug(p.kernel_id) or p.pid}",
            f"Shut down the notebook kernel {p.kernel_id[:8]} ({human(p.used)})",
            f"Another Jupyter kernel of this server (PID {p.pid}{', ' + p.name if p.name else ''}) holds "
            f"{human(p.used)} on this GPU.",
            "shutdown-kernel",
            kernel_id=p.kernel_id,
        )
        for p in d.other_processes
        if p.kernel_id
    ]
    others = [p for p in d.other_processes if not p.kernel_id]
    if others:
        child = " — a child of this kernel, e.g. a DataLoader worker that used CUDA"
        listed = "; ".join(
            f"PID {p.pid}{' ' + p.name if p.name else ''} ({human(p.used)}){child if p.child_of_kernel else ''}"
            for p in others[:8]
        )
        detail = (
            f"Other processes on this GPU: {listed}. End the ones you own (kill <PID>); a browser or desktop "
            "session using the GPU counts too."
        )
    elif d.other_processes:
        detail = "No process outside this server's kernels holds memory on this GPU."
    else:
        detail = (
            "No other process was found on this GPU (or NVML cannot list processes here); nvidia-smi shows "
            "the same list."
        )
    steps.append(Step("other-processes", "Check other processes on the GPU", detail, None))
    return steps


def _batch_steps(d: Diagnosis, new_batch: Optional[int], why: str, batch: Optional[int]) -> List[Step]:
    if new_batch is None:
        title, detail = "Halve the batch size", "Half of your current batch is a good first try."
    elif batch is not None and batch <= 1:
        title, detail = "Batch size is already 1", "Use gradient accumulation, smaller inputs or the steps below."
    else:
        title = f"Reduce the batch size to {new_batch}"
        where = f" (found in `{d.batch_size_source}`)" if d.batch_size_source and batch else ""
        detail = f"{new_batch} is {why}{where}."
        if batch and batch >= 4:
            detail += (
                f" Or step down by a quarter at a time: {batch} → {max(1, batch * 3 // 4)} → {max(1, batch // 2)}."
            )
    detail += " Rebuild the DataLoader with the new batch_size; drop_last=True keeps every batch the same size."
    return [Step("batch-size", title, detail, None), _eval_batch_step(d, new_batch, batch)]


EVAL_BATCH_RATIO = 1.3  # the evaluation batch at most 1.3× the training batch (the memory guide's rule)
_EVAL_LOADER_WORDS = ("val", "test", "eval", "pred")


def _eval_batch_step(d: Diagnosis, new_batch: Optional[int], batch: Optional[int]) -> Step:
    """The evaluation batch: advice for any OOM, and the first step with its cap when the OOM happened in
    evaluation (`d.evaluation`)."""
    if d.evaluation is None:
        eval_cap = f" (at most {math.floor((new_batch or batch) * EVAL_BATCH_RATIO)})" if (new_batch or batch) else ""
        return Step(
            "eval-batch-size",
            "Keep the evaluation batch small",
            "If it failed during evaluation or inference: run it under torch.no_grad() or torch.inference_mode() "
            f"so no activations are kept, and keep its batch at most 1.3× the training batch{eval_cap}.",
            None,
        )
    cap = math.floor(batch * EVAL_BATCH_RATIO) if batch else None
    title = f"Reduce the evaluation batch to at most {cap}" if cap else "Reduce the evaluation batch"
    detail = (
        f"This out-of-memory error happened in evaluation: {d.evaluation}. Gradients were off, so no activations "
        "were kept for backward: the evaluation batch (and its input size) decides the memory. "
    )
    if cap:
        where = f" (found in `{d.batch_size_source}`)" if d.batch_size_source and batch == d.batch_size else ""
        detail += f"Keep it at most 1.3× the training batch of {batch}{where}: {cap}."
    else:
        detail += "Keep it at most 1.3× the training batch; halve it until it fits."
    detail += _eval_loader_sizes(d, cap)
    detail += " Rebuild the evaluation DataLoader (or per_device_eval_batch_size, generate()'s batch) with it."
    return Step("eval-batch-size", title, detail, None)


def _eval_loader_sizes(d: Diagnosis, cap: Optional[int]) -> str:
    """The evaluation DataLoaders found in the namespace whose batch is above the cap (or any, without one)."""
    found = [
        loader
        for loader in d.loaders
        if loader.batch_size
        and any(word in loader.name.lower() for word in _EVAL_LOADER_WORDS)
        and (cap is None or loader.batch_size > cap)
    ]
    if not found:
        return ""
    listed = ", ".join(f"`{loader.name}` has batch_size {loader.batch_size}" for loader in found[:4])
    return f" In your namespace {listed}."


def _accumulation_code(d: Diagnosis, new_batch: Optional[int], batch: Optional[int]) -> Tuple[int, str]:
    n = d.names
    if new_batch and batch and batch > new_batch:
        steps = math.ceil(batch / new_batch)
        head = [
            f"Gradient accumulation: batches of {new_batch}, one optimizer step every {steps} batches "
            f"= effective batch {new_batch * steps}.",
            f"Rebuild {n.loader} with batch_size={new_batch} first.",
        ]
    else:
        steps = 2
        head = [
            "Gradient accumulation: make each batch smaller (e.g. half), then set",
            "ACCUM_STEPS = old batch size / new batch size to keep the effective batch.",
        ]
    # the loop keeps the user's mixed precision: without it, activations would take twice the memory
    amp = None if d.amp != "likely" else ("bf16" if d.bf16_supported else "fp16")
    new_torch = _torch_at_least(d.torch_version, 2, 3)
    names = LoopNames(
        model=n.model,
        optimizer=n.optimizer,
        loader=n.loader,
        criterion=n.criterion,
        device=n.device,
        device_type='"cuda"',
        steps="ACCUM_STEPS",
        new_scaler='torch.amp.GradScaler("cuda")' if new_torch else "torch.cuda.amp.GradScaler()",
    )
    code = accumulation_loop(steps, amp, names, comments=head)
    return steps, code


def _torch_at_least(version: Optional[str], major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (major, minor)


def _amp_step(d: Diagnosis) -> Step:
    n = d.names
    loop = (
        f"for inputs, targets in {n.loader}:\n"
        f"    inputs, targets = inputs.to({n.device}), targets.to({n.device})\n"
        f"    {n.optimizer}.zero_grad(set_to_none=True)\n"
    )
    if d.bf16_supported:
        title = "Train in mixed precision (bfloat16)"
        code = (
            "import torch\n\n# Mixed precision with bfloat16 (this GPU supports it): eligible ops run in 16 bits;\n"
            "# bfloat16 has float32's range, so no GradScaler is needed.\n"
            + loop
            + '    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
            f"        loss = {n.criterion}({n.model}(inputs), targets)\n"
            "    loss.backward()\n"
            f"    {n.optimizer}.step()\n"
        )
    else:
        title = "Train in mixed precision (float16 with GradScaler)"
        scaler = (
            'torch.amp.GradScaler("cuda")' if _torch_at_least(d.torch_version, 2, 3) else "torch.cuda.amp.GradScaler()"
        )
        code = (
            "import torch\n\n# Mixed precision with float16: eligible ops run in 16 bits; GradScaler keeps small\n"
            "# gradients from underflowing. (On compute capability 8.0+ prefer dtype=torch.bfloat16, no scaler.)\n"
            f"scaler = {scaler}\n" + loop + '    with torch.autocast(device_type="cuda", dtype=torch.float16):\n'
            f"        loss = {n.criterion}({n.model}(inputs), targets)\n"
            "    scaler.scale(loss).backward()\n"
            f"    scaler.step({n.optimizer})\n"
            "    scaler.update()\n"
        )
    if d.amp == "likely":
        detail = (
            "You may use it already (a GradScaler or a half-precision model exists); if you are not using "
            "autocast, activations take about half the memory with it."
        )
    else:
        detail = "If you are not using autocast, activations take about half the memory with it."
    return Step("mixed-precision", title, detail, "insert-cell", code=code)


def _inputs_step(d: Diagnosis) -> Step:
    size = d.input_size
    if size is None:
        detail = (
            "Activation memory grows with the pixels per image and the tokens per sequence: e.g. images "
            "224 → 192 px (−27 % pixels), sequences 512 → 384 tokens."
        )
    elif size.kind == "image":
        smaller = max(32, int(size.value * 0.86) // 32 * 32)
        saving = 1 - (smaller / size.value) ** 2
        detail = (
            f"`{size.name}` = {size.value} → {smaller}: {saving:.0%} fewer pixels per image, and about that "
            "much less activation memory."
        )
    else:
        smaller = max(64, int(size.value * 0.75) // 64 * 64)
        detail = (
            f"`{size.name}` = {size.value} → {smaller} tokens: activations shrink at least in proportion "
            "(attention scores quadratically)."
        )
    return Step("smaller-inputs", "Use smaller images or shorter sequences", detail, None)


_CONTAINER = (
    " In a container its memory limit counts, not the machine's RAM (cat /sys/fs/cgroup/memory.max), and the "
    "kernel's out-of-memory killer ends the largest process first, often a DataLoader worker."
)


def _host_step(d: Diagnosis, host_oom: bool = False) -> Step:
    h = d.host
    if h is None:
        detail = (
            "free -h (or the Task Manager) shows the host's memory; each DataLoader worker is a process of its own."
        )
        return Step(
            "host-memory", "Check host memory and DataLoader workers", detail + (_CONTAINER if host_oom else ""), None
        )
    parts = [f"kernel RSS {human(h.rss)}"]
    if h.total and h.available is not None:  # unknown for a kernel the OOM killer ended (oom/killed.py)
        parts.append(f"{human(h.available)} of {human(h.total)} available")
    if h.workers:
        parts.append(
            f"{h.workers} child process{'es' if h.workers != 1 else ''} (DataLoader workers?) "
            f"using {human(h.workers_rss)}"
            + (f" RSS, {human(h.workers_uss)} of it unique" if h.workers_uss is not None else "")
        )
    if h.container_limit:
        parts.append(f"container limit {human(h.container_limit)}, {human(h.container_usage)} used")
    detail = "; ".join(parts) + "."
    if h.low:
        detail += " Host memory is nearly exhausted: fewer workers and no pin_memory help here."
    if host_oom and not h.container_limit:
        detail += _CONTAINER
    return Step("host-memory", "Check host memory and DataLoader workers", detail, None)


# Workers are sized to leave this share of the container's (or machine's) memory free.
WORKERS_MARGIN = 0.10


def workers_that_fit(h: Optional[HostMemory]) -> Optional[Tuple[int, int]]:
    """(workers that fit with the margin, each worker's measured unique memory), from the workers' USS and the
    container's limit (else the machine's RAM); None without a measurement."""
    if h is None or not h.workers or not h.workers_uss:
        return None
    if h.container_limit and h.container_usage is not None:
        limit, used = h.container_limit, h.container_usage
    elif h.total and h.available is not None:
        limit, used = h.total, h.total - h.available
    else:
        return None
    per_worker = max(1, h.workers_uss // h.workers)
    headroom = limit * (1 - WORKERS_MARGIN) - (used - h.workers_uss)
    return max(0, int(headroom // per_worker)), per_worker


def _host_workers_step(workers: int, h: Optional[HostMemory] = None) -> Step:
    """The workers step when the host ran out: as many as fit by the measured unique memory, else halve them."""
    fit = workers_that_fit(h)
    if fit is not None and h is not None:
        n, per_worker = fit
        where = "the container's limit" if h.container_limit else "the machine's RAM"
        if workers > 0:
            n = min(n, workers - 1)  # it ran out with `workers`
        title = f"Use at most {n} DataLoader worker{'s' if n != 1 else ''}"
        detail = (
            f"Each worker holds {human(per_worker)} of its own (unique memory, measured over {h.workers}); "
            f"{n} fit in {where} leaving {WORKERS_MARGIN:.0%} free (0 loads in the kernel). A worker's unique "
            "memory grows while it iterates a dataset of Python objects: measure again after an epoch."
        )
    elif workers > 1:
        halves = [workers]
        while len(halves) < 3 and halves[-1] > 1:
            halves.append(halves[-1] // 2)
        title = f"Use fewer DataLoader workers ({' → '.join(str(n) for n in halves)})"
        detail = f"Halve num_workers until it fits ({' → '.join(str(n) for n in halves)}; 0 loads in the kernel)."
    else:
        title, detail = "Use fewer DataLoader workers", "Halve num_workers until it fits (e.g. 32 → 16 → 8)."
    detail += (
        " Each worker is a process with its own copy of the dataset object (copy-on-write pages get copied as "
        "Python touches them). pin_memory=True only with RAM to spare: it pins every batch in host memory. "
        "persistent_workers=True keeps the workers between epochs instead of forking new ones each epoch."
    )
    return Step("fewer-workers", title, detail, None)


def _workers_step(d: Diagnosis, host_oom: bool = False) -> Step:
    workers = d.num_workers or 0
    children = d.host.workers if d.host else 0
    if host_oom:
        return _host_workers_step(workers, d.host)
    if workers <= 0 and children <= 0:
        title, detail = "Use fewer DataLoader workers", "Lower num_workers (0 loads in the kernel itself)."
    elif workers > 0:
        title = f"Use fewer DataLoader workers ({workers} → {workers // 2})"
        detail = f"Halve num_workers ({workers} → {workers // 2}; 0 loads in the kernel itself)."
    else:
        title, detail = (
            "Use fewer DataLoader workers",
            f"This kernel has {children} child processes; lower num_workers.",
        )
    detail += (
        " Each worker is a process with its own copy of the dataset object; pin_memory=True pins host memory "
        "per batch, and a worker that touches CUDA holds a CUDA context of its own."
    )
    return Step("fewer-workers", title, detail, None)


_CHECKPOINT_WRAPPER = '''import torch
from torch.utils.checkpoint import checkpoint


class Checkpointed(torch.nn.Module):
    """Runs a block without keeping its activations; they are recomputed during backward."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.block(*args, **kwargs)
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


'''


def _checkpoint_step(d: Diagnosis) -> Step:
    m, name = d.model, d.names.model
    title, action = "Use gradient checkpointing", "insert-cell"
    if m is not None and m.checkpointing_on:
        return Step("grad-checkpointing", title, f"`{name}` already has gradient checkpointing on.", None)
    if m is not None and m.hf_checkpointing:
        code = (
            "# Gradient checkpointing (Hugging Face): activations are recomputed in backward instead of stored.\n"
            f"{name}.gradient_checkpointing_enable()\n"
        )
        return Step(
            "grad-checkpointing", title, "Less activation memory for roughly 20–30 % more compute.", action, code=code
        )
    head = (
        "# Gradient checkpointing: less activation memory for roughly 20-30% more compute.\n"
        "# Saved state_dict keys gain a '.block' part.\n"
    )
    if m is not None and m.blocks is not None:
        target = f"{name}.{m.blocks}" if m.blocks else name
        if m.blocks_kind == "Sequential":
            wrap = f"{target} = torch.nn.Sequential(*(Checkpointed(block) for block in {target}))\n"
        else:
            wrap = f"{target} = torch.nn.ModuleList(Checkpointed(block) for block in {target})\n"
        detail = (
            f"Wraps every layer of `{name}` ({m.blocks_kind})."
            if not m.blocks
            else f"Wraps every block of `{target}`, the largest repeated part of `{name}`."
        )
    else:
        wrap = (
            "# Wrap the model's repeated blocks, for example:\n"
            f"# {name}.layers = torch.nn.ModuleList(Checkpointed(b) for b in {name}.layers)\n"
        )
        detail = "Wrap the repeated blocks (layers) of your model."
    return Step(
        "grad-checkpointing",
        title,
        detail + " Less activation memory for roughly 20–30 % more compute.",
        action,
        code=head + _CHECKPOINT_WRAPPER + wrap,
    )


def _expandable_step(info: OomInfo, d: Diagnosis) -> Step:
    f = d.fragmentation
    options = [
        o for o in (d.alloc_conf or "").split(",") if o.strip() and not o.strip().startswith("expandable_segments")
    ]
    value = ",".join(options + ["expandable_segments:True"])
    code = (
        "import os\n\n"
        "# Must run before torch first uses the GPU: this cell goes to the top, then the kernel restarts.\n"
        f'os.environ["{d.alloc_conf_var}"] = "{value}"\n'
    )
    if f is not None and f.expandable_segments_set:
        detail = f"Already on in this kernel ({d.alloc_conf_var})."
    elif f is not None and f.suggest:
        detail = (
            f"PyTorch held {human(f.reserved_unallocated)} reserved but unallocated: the free memory is cut into "
            "pieces too small for this request. Expandable segments let the allocator grow segments instead."
        )
        if f.decisive:
            detail += " That memory plus the free memory would have covered the request."
    elif f is not None:
        detail = (
            f"Only {human(f.reserved_unallocated)} was reserved but unallocated, so fragmentation is not the main "
            "cause here; it still helps when batch or sequence sizes vary."
        )
    else:
        detail = "Reduces fragmentation when tensor sizes vary between steps."
    detail += (
        " (CUDA_LAUNCH_BLOCKING=1 only makes the traceback point at the failing line; it saves no memory and "
        "slows every step.)"
    )
    return Step(
        "expandable-segments",
        "Turn on expandable segments (restarts the kernel)",
        detail,
        "insert-env-cell-and-restart",
        code=code,
    )


def _model_step(d: Diagnosis) -> Step:
    m = d.model
    if m is not None:
        detail = (
            f"`{m.name}` ({m.type_name}, {_count(m.parameters)} parameters, {human(m.bytes)} of weights; "
            "gradients and optimizer state add 2–3× that in training). A smaller variant of the same family "
            "(e.g. resnet18 or mobilenet_v3_small, T5-small instead of T5-base) needs a fraction of it."
        )
    else:
        detail = (
            "Weights, gradients and optimizer state grow with the parameter count: a smaller variant of the "
            "same family (e.g. mobilenet_v3_small, T5-small) needs a fraction of the memory."
        )
    return Step("smaller-model", "Use a smaller model", detail, None)


# --- the order and the fold -------------------------------------------------------------------------------
# The one ordering rule of the checklist (the browser shows the steps in the order the payload gives).
# Steps are keyed by id; "shutdown-*" stands for every "Shut down the notebook kernel …" step.
#
# COST_ORDER, cheapest and least drastic first: what changes nothing in your code (clear: nothing is lost;
# restart: the variables are lost; other processes: someone else's work), then changes to the training step
# that keep the model (batch, evaluation batch, accumulation, mixed precision, input size), the host side
# (host memory, workers), checkpointing (20–30 % more compute), expandable segments (a restart plus a
# different allocator for every later allocation: worth it for fragmentation, which puts it first), and last
# a smaller model (it changes what is trained).
COST_ORDER: Tuple[str, ...] = (
    "clear",
    "restart",
    "shutdown-*",
    "other-processes",
    "batch-size",
    "eval-batch-size",
    "grad-accumulation",
    "mixed-precision",
    "smaller-inputs",
    "host-memory",
    "fewer-workers",
    "grad-checkpointing",
    "expandable-segments",
    "smaller-model",
)
# The steps each cause (Diagnosis.causes, strongest first) puts ahead of COST_ORDER, in this order.
CAUSE_STEPS: Dict[str, Tuple[str, ...]] = {
    # one tensor larger than the GPU: only a smaller step helps
    "too-large": ("batch-size", "smaller-inputs", "mixed-precision", "grad-checkpointing", "grad-accumulation"),
    "other-processes": ("shutdown-*", "other-processes"),
    # clearing returns only whole unused segments, and the fragmentation comes back; expandable segments stop it
    "fragmentation": ("expandable-segments", "clear", "restart"),
    "traceback": ("clear", "restart"),
    "host-memory": ("host-memory", "fewer-workers"),
}
# The steps each family puts first, ahead of its causes' (a host failure is about workers, not the GPU; a
# cuBLAS/cuDNN handle needs PyTorch's cache returned). The caching allocator's families keep the causes' order.
FAMILY_STEPS: Dict[str, Tuple[str, ...]] = {
    "cuda_allocator": (),
    "xpu": (),
    "driver": (),
    "cublas": ("clear", "restart", "shutdown-*", "other-processes"),
    "cudnn": ("clear", "restart", "shutdown-*", "other-processes"),
    "nccl": ("shutdown-*", "other-processes", "restart", "clear"),
    "mps": ("clear", "batch-size", "mixed-precision", "smaller-inputs", "restart"),
    "xla": ("shutdown-*", "other-processes", "restart", "batch-size", "smaller-inputs"),
    "wrapper": ("shutdown-*", "other-processes", "restart", "clear"),  # vLLM's KV cache
    "wrapper-accelerate": ("mixed-precision", "grad-checkpointing", "smaller-inputs", "clear", "restart"),
    "host": ("fewer-workers", "host-memory", "eval-batch-size", "batch-size", "restart"),
}


def family_steps(info: OomInfo) -> Tuple[str, ...]:
    """The FAMILY_STEPS of this message."""
    if info.family == "wrapper" and _wrapper_kind(info) == "accelerate":
        return FAMILY_STEPS["wrapper-accelerate"]
    return FAMILY_STEPS.get(info.family, ())


# What cannot help when one allocation is larger than the GPU: freeing or rearranging memory.
_FREES_MEMORY = ("clear", "restart", "shutdown-*", "other-processes", "expandable-segments")


def step_key(step_id: str) -> str:
    """The COST_ORDER/CAUSE_STEPS key of a step id."""
    return "shutdown-*" if step_id.startswith("shutdown-") else step_id


def order_steps(steps: Sequence[Step], diagnosis: Diagnosis, first: Sequence[str] = ()) -> List[Step]:
    """The checklist's order: the steps that may help, the evaluation batch when the OOM happened in evaluation
    (`diagnosis.evaluation`), then those of the family (`first`, family_steps) and of the diagnosis's causes
    (strongest cause first), then the rest by COST_ORDER; then the steps that cannot help here (shown folded),
    by COST_ORDER."""
    rank: Dict[str, int] = {}
    if diagnosis.evaluation is not None:  # it ran out in evaluation: the evaluation batch comes first
        rank["eval-batch-size"] = 0
    for key in first:
        rank.setdefault(key, len(rank))
    for cause in diagnosis.causes:
        for key in CAUSE_STEPS.get(cause.kind, ()):
            rank.setdefault(key, len(rank))
    for key in COST_ORDER:
        rank.setdefault(key, len(rank))
    cost = {key: i for i, key in enumerate(COST_ORDER)}

    def position(step: Step) -> Tuple[int, int]:
        key = step_key(step.id)
        if step.not_applicable is not None:
            return (1, cost.get(key, len(cost)))
        return (0, rank.get(key, len(rank)))

    return sorted(steps, key=position)  # stable: shutdown steps keep their order (most memory first)


def _processes_listed(info: OomInfo, sample: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Who listed the GPU's processes, when someone could: PyTorch's 2.x message (it names this process
    only when NVML's list was read) or the probe (NVML listed this kernel). None: nobody could tell."""
    if info.format == "2.x" and info.this_process_total is not None:
        return "PyTorch's message"
    if any(device.get("this_kernel") is not None for device in _sample_devices(sample, info.device)):
        return "NVML"
    return None


def _not_applicable(
    step: Step, info: OomInfo, d: Diagnosis, batch: Optional[int], sample: Optional[Mapping[str, Any]]
) -> Optional[str]:
    """Why `step` cannot help with this OOM, or None when it may. The one place steps are folded."""
    key = step_key(step.id)
    by_family = _family_not_applicable(key, info)
    if by_family is not None:
        return by_family
    if d.too_large and key in _FREES_MEMORY:
        return (
            f"One allocation of {human(info.tried_to_allocate)} is larger than all the memory this GPU allows: "
            "freeing or rearranging memory cannot make room for it."
        )
    f = d.fragmentation
    if key == "other-processes" and not d.other_processes:
        listed = _processes_listed(info, sample)
        if listed is not None:
            return f"{listed} lists no other process on this GPU."
    if key == "clear" and f is not None and f.reserved_unallocated < 20 * MIB:
        if d.traceback is not None and d.traceback.tensors == 0:
            return (
                f"PyTorch held only {human(f.reserved_unallocated)} reserved but unallocated, and the failed "
                "call's traceback keeps no tensor alive: clearing has little to free."
            )
    if key in ("batch-size", "grad-accumulation") and batch is not None and batch <= 1:
        return "The batch size is already 1: it cannot be made smaller."
    if key == "grad-checkpointing" and d.model is not None and d.model.checkpointing_on:
        return f"`{d.names.model}` already has gradient checkpointing on."
    if key == "expandable-segments" and f is not None and f.expandable_segments_set:
        return f"Expandable segments are already on ({d.alloc_conf_var})."
    if key == "host-memory" and d.host is None:
        return "The probe could not read the host's memory."
    if key == "fewer-workers" and not (d.num_workers or 0) and not (d.host.workers if d.host else 0):
        return "There are no DataLoader workers (num_workers is 0 and the kernel has no child processes)."
    return None


_TORCH_CODE = (
    "The cell this step inserts is PyTorch code; in JAX use jax.checkpoint and bfloat16 parameters, in "
    "TensorFlow tf.keras.mixed_precision and tf.recompute_grad."
)
_OUTSIDE_ALLOCATOR = (
    "{} allocates outside PyTorch's caching allocator (cudaMalloc): expandable segments do not change it. "
    "Clearing returns PyTorch's cached blocks to the driver, which is what it needs."
)
_NOT_THE_GPU = "The host's memory (RAM) ran out, not the GPU's: {}."
_FAMILY_NOT_APPLICABLE: Dict[str, Dict[str, str]] = {
    "cublas": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("cuBLAS")},
    "cudnn": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("cuDNN")},
    "nccl": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("NCCL")},
    "mps": {
        "expandable-segments": (
            "Expandable segments are a setting of PyTorch's CUDA allocator; MPS has its own, capped by "
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO."
        ),
        "other-processes": (
            "NVML does not see Apple GPUs: on a Mac the GPU shares RAM with every application, so close the ones "
            "you do not need (Activity Monitor)."
        ),
        "shutdown-*": "NVML does not see Apple GPUs: it cannot tell which kernel holds MPS memory.",
    },
    "xla": {
        "expandable-segments": (
            "Expandable segments are a setting of PyTorch's CUDA allocator; XLA has its own: "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION (JAX), "
            "tf.config.experimental.set_memory_growth (TensorFlow)."
        ),
        "mixed-precision": _TORCH_CODE,
        "grad-accumulation": _TORCH_CODE,
        "grad-checkpointing": _TORCH_CODE,
    },
    "wrapper-accelerate": {
        "batch-size": "accelerate's batch-size finder already tried every batch down to 1: none fits.",
        "grad-accumulation": "Even a batch of 1 ran out of memory: accumulating smaller batches cannot help.",
        "eval-batch-size": "accelerate's batch-size finder already tried every batch down to 1: none fits.",
    },
    "wrapper": {  # vLLM
        "batch-size": "vLLM serves the model: what must fit is the weights plus the KV cache, not a training batch.",
        "eval-batch-size": "vLLM schedules its own batches inside the KV cache it could allocate.",
        "grad-accumulation": "vLLM serves the model: there are no gradients to accumulate.",
        "mixed-precision": "vLLM already runs the model in 16 bits (or the dtype you passed).",
        "grad-checkpointing": "vLLM serves the model: there are no activations kept for backward.",
        "fewer-workers": "vLLM does not use DataLoader workers.",
    },
    "host": {
        "shutdown-*": _NOT_THE_GPU.format("other kernels' GPU memory does not matter here"),
        "other-processes": _NOT_THE_GPU.format("the processes on the GPU do not matter here"),
        "expandable-segments": _NOT_THE_GPU.format("expandable segments arrange GPU memory only"),
        "mixed-precision": _NOT_THE_GPU.format("mixed precision shrinks activations on the GPU"),
        "grad-checkpointing": _NOT_THE_GPU.format("checkpointing shrinks activations on the GPU"),
    },
}


def _family_not_applicable(key: str, info: OomInfo) -> Optional[str]:
    """Why a step cannot help with an out-of-memory error of this family, or None."""
    family = info.family
    if family == "wrapper" and _wrapper_kind(info) == "accelerate":
        family = "wrapper-accelerate"
    return _FAMILY_NOT_APPLICABLE.get(family, {}).get(key)


def build_checklist(
    info: OomInfo,
    diagnosis: Diagnosis,
    last_recommendation: Optional[int] = None,
    batch_size: Optional[int] = None,
    sample: Optional[Mapping[str, Any]] = None,
) -> List[Step]:
    """The steps in order_steps's order: the diagnosis's causes first, then by cost, the steps that cannot
    help last (with why). `batch_size` overrides the one found in the namespace."""
    d = diagnosis
    batch = batch_size or d.batch_size
    new_batch, why = suggested_batch(last_recommendation, batch)
    accum_steps, accum_code = _accumulation_code(d, new_batch, batch)
    effective = f" (effective batch {new_batch * accum_steps})" if new_batch and batch and batch > new_batch else ""
    steps: List[Optional[Step]] = [
        _clear_step(info, d),
        _restart_step(info, d, sample),
        *_process_steps(d),
        *_batch_steps(d, new_batch, why, batch),
        Step(
            "grad-accumulation",
            f"Accumulate gradients over {accum_steps} batches{effective}",
            "Keeps the effective batch (and the training dynamics) while each step holds fewer activations.",
            "insert-cell",
            code=accum_code,
        ),
        _amp_step(d),
        _inputs_step(d),
        _host_step(d, info.family == "host"),
        _workers_step(d, info.family == "host"),
        _checkpoint_step(d),
        _expandable_step(info, d),
        _model_step(d),
    ]
    present = [s for s in steps if s is not None]
    for step in present:
        step.not_applicable = _not_applicable(step, info, d, batch, sample)
    return order_steps(present, d, family_steps(info))


# --- the bundle ------------------------------------------------------------------------------------------


_FAMILY_SUMMARY = {
    "cublas": "cuBLAS could not allocate its handle or workspace (CUBLAS_STATUS_ALLOC_FAILED): the GPU is full",
    "cudnn": "cuDNN could not allocate its handle or workspace (CUDNN_STATUS_ALLOC_FAILED): the GPU is full",
    "nccl": "NCCL ran out of GPU memory for its buffers (Cuda failure 'out of memory')",
    "mps": "MPS (Apple GPU) out of memory: the GPU's share of the Mac's RAM is used up",
    "xla": "XLA out of memory (RESOURCE_EXHAUSTED): JAX, TensorFlow or PyTorch/XLA",
    "host": "Host memory (RAM) out of memory: the CPU side ran out, not the GPU",
}
_WRAPPER_SUMMARY = {
    "accelerate": "accelerate found no batch size that fits (its batch-size finder reached zero)",
    "vllm": "vLLM out of memory: no room left for the KV cache",
}


def _summary(info: OomInfo) -> List[str]:
    where = f" on GPU {info.device}" if info.device is not None else ""
    if info.format == "cuda-error" and info.family in _FAMILY_SUMMARY:
        return [_FAMILY_SUMMARY[info.family]]
    if info.family == "wrapper":
        return [_WRAPPER_SUMMARY[_wrapper_kind(info)]]
    if info.format == "cuda-error":
        return [f"{info.backend} error: out of memory{where} (a CUDA call outside PyTorch's allocator; no figures)"]
    first = f"{info.backend} out of memory{where}"
    if info.tried_to_allocate is not None:
        first += f": tried to allocate {human(info.tried_to_allocate)}"
    if info.free is not None:
        first += f"; {human(info.free)} free of {human(info.total_capacity)}"
    lines = [first]
    pytorch = []
    if info.allocated_by_pytorch is not None:
        pytorch.append(f"{human(info.allocated_by_pytorch)} allocated")
    if info.private_pools:
        pytorch.append(f"{human(info.private_pools)} of it in private pools (CUDA Graphs)")
    if info.cached() is not None:
        pytorch.append(f"{human(info.cached())} reserved but unallocated")
    if pytorch:
        lines.append("PyTorch: " + ", ".join(pytorch))
    if info.this_process_total is not None:
        lines.append(f"This process (NVML, with the CUDA context): {human(info.this_process_total)}")
    return lines


def _diagnosis_lines(d: Diagnosis) -> List[str]:
    lines = list(d.notes)
    if d.evaluation is not None:
        lines.append(f"In evaluation (gradients off): {d.evaluation}")
    f = d.fragmentation
    named = bool(d.causes) and d.causes[0].kind == "fragmentation"  # the "Likely cause" note gives the figure
    if f is not None and f.suggest and not named:
        lines.append(f"Fragmentation: {human(f.reserved_unallocated)} reserved but unallocated")
    elif f is not None and f.expandable_segments_set:
        lines.append(f"Expandable segments are already on ({d.alloc_conf_var})")
    holders_ = [p for p in d.other_processes if p.used]
    if holders_:
        lines.append("Other processes: " + ", ".join(f"PID {p.pid} ({human(p.used)})" for p in holders_[:6]))
    if d.traceback and d.traceback.tensors:
        lines.append(
            f"The failed call's traceback keeps {_plural(d.traceback.tensors, 'tensor')} "
            f"({human(d.traceback.bytes)}) alive"
        )
    if d.batch_size:
        lines.append(f"Batch size in use: {d.batch_size} ({d.batch_size_source})")
    if d.host and d.host.low:
        lines.append("Host memory is nearly exhausted")
    return lines


def occurrence() -> Dict[str, Any]:
    """Which error a checklist is about: one out-of-memory error in one run of this kernel process. The
    browser keeps the checklist's ticks under `id` (a new error starts unticked), and tells a checklist of an
    earlier kernel run by (`kernel_pid`, `kernel_start`), which `hello` carries as (`pid`, `create_time`)."""
    return {
        "id": uuid.uuid4().hex,
        "kernel_pid": os.getpid(),
        "kernel_start": own_create_time(),
        "time": time.time(),
    }


def oom_bundle(
    info: OomInfo, diagnosis: Diagnosis, steps: Sequence[Step], alive: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """MIME bundle for display(..., raw=True): the rich payload, static escaped HTML, a numbered checklist.
    `alive`: what the OOM capture found alive at the error (timeline.capture.alive_at_oom), when it ran."""
    payload = {
        "version": PAYLOAD_VERSION,
        "summary": _summary(info),
        "info": info.to_payload(),
        "diagnosis": diagnosis.to_payload(),
        "steps": [asdict(s) for s in steps],
        "occurrence": occurrence(),
    }
    if alive is not None:
        payload["alive"] = alive
    return {
        OOM_MIME: payload,
        "text/html": _oom_html(info, diagnosis, steps, alive),
        "text/plain": _oom_text(info, diagnosis, steps, alive),
    }


# --- what was alive (the OOM capture) and the re-run step ------------------------------------------------------


def source_line(source: Optional[Mapping[str, Any]]) -> str:
    """ "In [5], line 3" for a notebook cell, else "model.py:42 in forward"; "no line recorded" without one."""
    if not source:
        return "no line recorded"
    if source.get("cell") is not None:
        return f"In [{source['cell']}], line {source['line']}"
    return f"{os.path.basename(str(source.get('file', '?')))}:{source.get('line')} in {source.get('name')}"


def _alive_lines(alive: Mapping[str, Any], top: int = 5) -> List[str]:
    lines = [f"What was alive at the error: {human(alive['allocated'])} in {_plural(alive['blocks'], 'block')}"]
    for holder in alive["holders"][:top]:
        count = f" ×{holder['count']}" if holder["count"] > 1 else ""
        lines.append(f"{human(holder['size'])} {holder['category']}{count}: {source_line(holder['source'])}")
    failed = alive.get("failed")
    if failed:
        lines.append(f"Failed: {human(failed['size'])} at {source_line(failed['source'])}")
    return lines


RERUN_STEP_ID = "timeline-rerun"
_RERUN_LIMIT = 20_000  # characters of a cell copied into the step


def timeline_rerun_code(cell: Optional[str]) -> Optional[str]:
    """The failed cell with `%%gpumem --timeline` as its first line (added to a `%%gpumem` line that is
    there); None when there is no cell, it is too long to copy, or it already records its timeline."""
    if not cell or not cell.strip() or len(cell) > _RERUN_LIMIT:
        return None
    lines = cell.split("\n")
    first = lines[0].strip()
    if first.startswith("%%gpumem"):
        if "--timeline" in first.split():
            return None
        lines[0] = lines[0].rstrip() + " --timeline"
        return "\n".join(lines)
    return "%%gpumem --timeline\n" + cell


def timeline_rerun_step(cell: Optional[str]) -> Optional[Step]:
    code = timeline_rerun_code(cell)
    if code is None:
        return None
    return Step(
        RERUN_STEP_ID,
        "Re-run this cell with the timeline on",
        "Inserts a copy of the failed cell below with %%gpumem --timeline as its first line; it is not run. "
        "Free memory first, then run it: the timeline shows what was alive at each moment and which line "
        'allocated it, up to the failing allocation. The setting "Capture the timeline at an out-of-memory '
        'error" attaches this to the next error by itself (about 2 µs per allocation while cells run).',
        "insert-cell",
        code=code,
    )


RERUN_AFTER = 3  # the panel's brief shows the first steps: those stay the fixes, the re-run (a diagnosis) follows


def with_rerun_step(steps: Sequence[Step], rerun: Step) -> List[Step]:
    """The steps with the re-run step after the first RERUN_AFTER applicable steps, which are the fixes the
    diagnosis ranks first ("Clear GPU memory" among them, so memory is freed before the re-run); never among
    the folded ones."""
    ordered = list(steps)
    applicable = [i for i, s in enumerate(ordered) if s.not_applicable is None]
    clear = [i for i in applicable if ordered[i].id == "clear"]
    first = applicable[:RERUN_AFTER]
    at = max(first + clear) + 1 if first or clear else 0
    ordered.insert(at, rerun)
    return ordered


def failing_cell(shell: Any) -> Optional[str]:
    """The source of the cell running now (IPython stores it before running it), or None."""
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    try:
        cell = history[-1] if history else None
    except Exception:
        return None
    return cell if isinstance(cell, str) else None


def _steps_heading(d: Diagnosis) -> str:
    likely = d.causes or d.evaluation is not None
    return "Checklist (likely cause first, then cheapest)" if likely else "Checklist (cheapest first)"


def _oom_text(info: OomInfo, d: Diagnosis, steps: Sequence[Step], alive: Optional[Mapping[str, Any]] = None) -> str:
    lines = _summary(info) + [f"  - {line}" for line in _diagnosis_lines(d)]
    if alive is not None:
        found = _alive_lines(alive)
        lines += [found[0] + ":"] + [f"    {line}" for line in found[1:]]
    lines.append(f"{_steps_heading(d)}:")
    folded = [s for s in steps if s.not_applicable is not None]
    for number, step in enumerate(steps, 1):
        if folded and step is folded[0]:
            lines.append(f"Not applicable here ({len(folded)}):")
        button = f"  [{step.action}]" if step.action else ""
        lines.append(f"{number:2d}. [ ] {step.title}{button}")
        if step.not_applicable is not None:
            lines.append(f"      Not applicable: {step.not_applicable}")
        lines.append(f"      {step.detail}")
        if step.code:
            lines.extend(f"        {line}" for line in step.code.rstrip("\n").split("\n"))
    return "\n".join(lines)


def _oom_html(info: OomInfo, d: Diagnosis, steps: Sequence[Step], alive: Optional[Mapping[str, Any]] = None) -> str:
    e = html.escape
    parts = ['<div class="gpumem-oom">', f"<h4>{e(_summary(info)[0])} — checklist</h4>"]
    parts.extend(f"<p>{e(line)}</p>" for line in _summary(info)[1:])
    diagnosis = _diagnosis_lines(d)
    if diagnosis:
        parts.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in diagnosis) + "</ul>")
    if alive is not None:
        found = _alive_lines(alive)
        parts.append(f"<p>{e(found[0])}</p><ul>" + "".join(f"<li>{e(line)}</li>" for line in found[1:]) + "</ul>")
    parts.append(f"<details><summary>PyTorch's message</summary><pre>{e(info.message)}</pre></details>")
    parts.append(f"<p><strong>{e(_steps_heading(d))}</strong></p><ol>")
    folded = [s for s in steps if s.not_applicable is not None]
    for number, step in enumerate(steps, 1):
        if folded and step is folded[0]:
            parts.append(f'</ol><details><summary>Not applicable here ({len(folded)})</summary><ol start="{number}">')
        code = f"<pre><code>{e(step.code)}</code></pre>" if step.code else ""
        why = f"<br><em>Not applicable: {e(step.not_applicable)}</em>" if step.not_applicable is not None else ""
        parts.append(
            f'<li data-step="{e(step.id)}"><strong>{e(step.title)}</strong>{why}<br>{e(step.detail)}{code}</li>'
        )
    parts.append("</ol></details></div>" if folded else "</ol></div>")
    return "".join(parts)


def _unparsed_oom_name(source: Any, text: str) -> Optional[str]:
    """The class name of an out-of-memory error whose text holds no known message (a torch.OutOfMemoryError
    with its own text, e.g. re-raised by an app), or None when `source` is not an out-of-memory error."""
    if isinstance(source, str):
        return oom_error_name(text)
    return type(source).__name__ if is_oom(source) else None


def oom_report(
    source: Any,
    shell: Any = None,
    *,
    sample: Optional[Mapping[str, Any]] = None,
    tb: Any = None,
    last_recommendation: Optional[int] = None,
    batch_size: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None,
    cell: Optional[str] = None,
) -> Optional[Dict[str, Any]]:
    """One call for the handler and the comm: parse an exception or message text, probe, diagnose and
    return the checklist bundle; None when `source` is not an out-of-memory error.

    `capture(tried, device, title)`: what the OOM capture (setting "oomTimeline", timeline.capture.alive_at_oom)
    found alive at this error, or None; the extension passes it to the handler;
    `cell`: the failed cell's source, for the step "Re-run this cell with the timeline on" (offered when no
    capture is attached)."""
    chained = oom_in_chain(source) if isinstance(source, BaseException) else None
    if chained is not None:  # the error it was raised from says what ran out (a DataLoader worker's death)
        source = chained[0]
    text = source if isinstance(source, str) else f"{type(source).__name__}: {source}"
    info = parse_oom_message(text)
    if info is None:  # a torch.OutOfMemoryError whose text is none of the known messages
        name = _unparsed_oom_name(source, text)
        if name is None:
            return None
        info = OomInfo("unknown", "CUDA", name, " ".join(text.split())[:_MESSAGE_LIMIT])
    alive = None
    if capture is not None:
        count = getattr(shell, "execution_count", None)
        title = f"In [{count}], out of memory" if isinstance(count, int) else "out of memory"
        alive = capture(info.tried_to_allocate, info.device, title)
    sample = take_sample() if sample is None else sample
    diagnosis = diagnose(info, sample, shell, tb=tb, env=env)
    steps = build_checklist(info, diagnosis, last_recommendation, batch_size, sample)
    rerun = timeline_rerun_step(cell) if alive is None else None
    if rerun is not None:
        steps = with_rerun_step(steps, rerun)
    return oom_bundle(info, diagnosis, steps, alive)


# --- the IPython exception handler -----------------------------------------------------------------------

_STATE = "_gpumem_oom_handler"


@dataclass
class _HandlerState:
    previous_exceptions: Tuple[type, ...]
    previous_handler: Any  # the shell's CustomTB before ours (a bound method), or None
    installed_handler: Any = None
    probe: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None
    recommendation: Optional[Callable[[], Optional[int]]] = None
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None  # the OOM capture's alive_at_oom
    last: Optional[Dict[str, Any]] = None  # the last OOM payload, for the panel
    last_bundle: Optional[Dict[str, Any]] = None  # the whole bundle, for `%gpumem oom`


def _handle(
    shell: Any, state: _HandlerState, etype: type, value: BaseException, tb: Any, tb_offset: Optional[int]
) -> Any:
    stb = None
    if state.previous_exceptions and issubclass(etype, state.previous_exceptions):
        stb = state.previous_handler(etype, value, tb, tb_offset=tb_offset)  # the user's handler runs as before
    else:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)  # IPython's normal traceback
    if not is_oom(value):
        return stb
    try:
        sample = state.probe() if state.probe else None
        recommendation = state.recommendation() if state.recommendation else None
        bundle = oom_report(
            value,
            shell,
            sample=sample,
            tb=tb,
            last_recommendation=recommendation,
            capture=state.capture,
            cell=failing_cell(shell),
        )
        if bundle is not None:
            state.last, state.last_bundle = bundle[OOM_MIME], bundle
            shell.display_pub.publish(data=bundle, metadata={})
    except Exception as exc:  # never let IPython unregister the handler (it does when a handler raises)
        print(
            f"gpumem: could not build the OOM checklist: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr
        )
    return stb


def install_oom_handler(
    shell: Any,
    *,
    probe: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None,
    recommendation: Optional[Callable[[], Optional[int]]] = None,
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None,
) -> str:
    """Show the OOM checklist under the traceback of every out-of-memory error (any family). Returns one line
    saying what was done. A custom handler the user already set keeps running first for its exceptions.
    `capture(tried, device, title)`: what was alive at the error (the OOM capture), or None."""
    if getattr(shell, _STATE, None) is not None:
        return "the OOM checklist is already installed"
    previous = tuple(getattr(shell, "custom_exceptions", ()) or ())
    state = _HandlerState(
        previous,
        shell.CustomTB if previous else None,
        probe=probe or take_sample,
        recommendation=recommendation,
        capture=capture,
    )

    def handler(self: Any, etype: type, value: BaseException, tb: Any, tb_offset: Optional[int] = None) -> Any:
        return _handle(self, state, etype, value, tb, tb_offset)

    torch = loaded_torch()
    # torch.OutOfMemoryError subclasses RuntimeError; RuntimeError also catches it when torch is imported later
    # and catches the older RuntimeError("CUDA out of memory…"), XLA's, NCCL's and accelerate's. MemoryError is
    # the host's (numpy's too), ValueError vLLM's KV-cache errors. Other exceptions get the normal traceback.
    # TensorFlow's ResourceExhaustedError is neither: its class counts when TensorFlow is already imported.
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    candidates = (
        getattr(torch, "OutOfMemoryError", None),
        RuntimeError,
        MemoryError,
        ValueError,
        getattr(tf_errors, "ResourceExhaustedError", None),
    )
    ours = tuple(c for c in candidates if isinstance(c, type))
    shell.set_custom_exc(previous + tuple(c for c in ours if c not in previous), handler)
    state.installed_handler = shell.CustomTB
    setattr(shell, _STATE, state)
    if previous:
        names = ", ".join(c.__name__ for c in previous)
        return f"OOM checklist installed; your exception handler for {names} still runs first"
    return "OOM checklist installed"


def uninstall_oom_handler(shell: Any) -> str:
    """Remove the OOM handler and put back the handler that was there before. Returns one line."""
    state: Optional[_HandlerState] = getattr(shell, _STATE, None)
    if state is None:
        return "the OOM checklist is not installed"
    delattr(shell, _STATE)
    if shell.CustomTB != state.installed_handler:
        return "the OOM checklist was replaced by another exception handler since; left that one in place"
    if state.previous_exceptions:
        shell.custom_exceptions, shell.CustomTB = state.previous_exceptions, state.previous_handler
    else:
        shell.set_custom_exc((), None)
    return "OOM checklist removed"


def last_oom(shell: Any) -> Optional[Dict[str, Any]]:
    """The payload of the last OOM the handler saw (for the panel's checklist), or None."""
    state: Optional[_HandlerState] = getattr(shell, _STATE, None)
    return state.last if state is not None else None


def last_oom_bundle(shell: Any) -> Optional[Dict[str, Any]]:
    """The checklist bundle of the last OOM: the one the handler showed, else one built now from
    `sys.last_value` when that is an OOM the handler did not see (the extension was loaded after it)."""
    state: Optional[_HandlerState] = getattr(shell, _STATE, None)
    if state is not None and state.last_bundle is not None:
        return state.last_bundle
    value = getattr(sys, "last_value", None)
    if not isinstance(value, BaseException) or not is_oom(value):
        return None
    probe = state.probe if state is not None and state.probe is not None else take_sample
    bundle = oom_report(value, shell, sample=probe(), tb=getattr(sys, "last_traceback", None))
    if bundle is not None and state is not None:
        state.last, state.last_bundle = bundle[OOM_MIME], bundle
    return bundle
