"""The diagnosis payload (oom.schema.json `diagnosis`) and its parts: what the message, a fresh probe and the
user namespace say about one out-of-memory error. diagnose.py fills it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional


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
    child_of_kernel: bool  # started from this notebook: a descendant of this kernel (worker, `!python …`, torchrun)
    source: str  # "message" | "probe" | "both"
    # a process started from this notebook: its command line and its PID in this namespace (added later)
    cmdline: Optional[str] = None
    local_pid: Optional[int] = None


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
    # why the failed call ran with gradients off (grad_mode.py), one line; None: training, or nothing says
    evaluation: Optional[str] = None
    # host PIDs that are (or may be) this kernel in a container: never another process, never to be ended
    this_kernel_pids: List[int] = field(default_factory=list)

    def to_payload(self) -> Dict[str, Any]:
        return asdict(self)
