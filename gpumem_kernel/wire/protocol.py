"""The `gpumem` comm protocol, version 1: payload dataclasses, parsing of browser messages, schemas.

The JSON Schemas in schemas/ are the one source of the wire format (schemas/README.md). The dataclasses here
produce their JSON via `dataclasses.asdict`; tests/wire/test_dataclasses_match_schemas.py fails on any
difference between a dataclass and its schema, and the tests validate every message the kernel emits.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional

PROTOCOL_VERSION = 1
# "rounding": `configure` takes `rounding` (the JupyterLab setting "Batch-size rounding" for analyze/autobatch picks)
# "oom_timeline": `configure` takes `oom_timeline` (the JupyterLab setting "oomTimeline": the OOM capture)
# "seq_multiple": `configure` takes `seq_multiple` (the JupyterLab setting "Sequence-length multiple" for --search seq)
# "timeline": the `timeline_export` action (a timeline payload's history as a PyTorch snapshot pickle or a CSV)
CAPABILITIES = (
    "sample",
    "snapshot",
    "history",
    "configure",
    "children",
    "processes",
    "terminate",
    "ping",
    "rounding",
    "timeline",
    "oom_timeline",
    "seq_multiple",
)
ACTIONS = ("snapshot", "history", "configure", "children", "processes", "terminate", "ping", "timeline_export")
TIMELINE_FORMATS = ("snapshot", "csv")
MESSAGE_TYPES = ("open", "request", "hello", "history", "sample", "reply", "error", "growth", "holders", "watch_event")
INTERVAL_MIN, INTERVAL_MAX = 0.1, 60.0
HISTORY_MIN, HISTORY_MAX = 10, 3600
MAX_PIDS = 1024  # per processes/terminate request: a kernel and its workers, never a whole machine
_TIMELINE_ID = re.compile(r"^tl-[0-9a-f]{8,32}$")


# --- sample parts -------------------------------------------------------------------------------


@dataclass
class Allocator:
    """PyTorch caching-allocator statistics of one device (bytes, counts)."""

    allocated: int
    reserved: int
    peak_allocated: int
    peak_reserved: int
    num_ooms: int
    num_alloc_retries: int


@dataclass
class ProcessRank:
    """A process's place in a distributed run, from the RANK, LOCAL_RANK and WORLD_SIZE of its environment."""

    rank: int
    local_rank: Optional[int]
    world_size: int


@dataclass
class GpuProcess:
    pid: int
    name: Optional[str]
    used: Optional[int]
    kernel_id: Optional[str]
    this_kernel: bool
    # who holds it (probe/hostpid.py; added later: older kernels omit them). A container's host PIDs are matched
    # to this kernel and the processes started from its notebook; `note` says how, `local_pid` and
    # `create_time` name a notebook's process in this namespace (what `terminate` takes)
    relation: str = "external"
    note: Optional[str] = None
    local_pid: Optional[int] = None
    create_time: Optional[float] = None
    cmdline: Optional[str] = None
    # a process started from this notebook that is one rank of a distributed run (torchrun, notebook_launcher)
    rank: Optional[ProcessRank] = None

    def __post_init__(self) -> None:
        if self.relation == "external" and (self.this_kernel or self.kernel_id):
            self.relation = "this_kernel" if self.this_kernel else "other_kernel"


@dataclass
class Device:
    nvml_index: int
    cuda_index: Optional[int]
    name: Optional[str]
    uuid: Optional[str]
    mig: bool
    total: Optional[int]
    used: Optional[int]
    free: Optional[int]
    util_gpu: Optional[int]
    util_mem: Optional[int]
    compute_capability: Optional[str]
    sm_count: Optional[int]
    this_kernel: Optional[int]
    allocator: Optional[Allocator]
    processes: List[GpuProcess]
    # NVML's power figures (added later: older kernels omit them); power_note says why one is missing
    power_mw: Optional[int] = None
    power_limit_mw: Optional[int] = None
    energy_mj: Optional[int] = None
    power_note: Optional[str] = None
    # the processes started from this notebook, and host PIDs one of which is this kernel (added later)
    notebook_processes: Optional[int] = None
    uncertain: Optional[int] = None


@dataclass
class Gpu:
    available: bool
    reason: Optional[str]
    driver_version: Optional[str]
    cuda_driver_version: Optional[str]
    visible_devices: Optional[str]
    device_order: str
    devices: List[Device]


@dataclass
class TorchInfo:
    imported: bool
    version: Optional[str]
    cuda_initialized: bool


@dataclass
class KernelInfo:
    pid: int
    gpu_used: Optional[int]
    torch: TorchInfo


@dataclass
class Children:
    count: int
    rss: int
    # unique memory (USS), proportional (PSS) and USS growth in bytes/min; None when not measurable (added later)
    uss: Optional[int] = None
    pss: Optional[int] = None
    uss_growth_per_min: Optional[int] = None


@dataclass
class Host:
    rss: int
    total: int
    available: int
    children: Children
    container_limit: Optional[int]
    container_usage: Optional[int]


# --- messages -----------------------------------------------------------------------------------


@dataclass
class Sample:
    type: str = field(default="sample", init=False)
    seq: int
    time: float
    gpu: Gpu
    kernel: KernelInfo
    host: Host
    errors: List[str]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class Hello:
    type: str = field(default="hello", init=False)
    protocol: int
    version: str
    pid: int
    capabilities: List[str]
    interval: float
    history_seconds: int
    python: str
    ipykernel: Optional[str]
    torch: Optional[str]
    # Start time of this kernel process (psutil): with `pid`, what `processes`/`terminate` need after a
    # restart. Added in 0.1 without a protocol bump: optional for the browser.
    create_time: Optional[float] = None


@dataclass
class History:
    type: str = field(default="history", init=False)
    samples: List[Dict[str, Any]]


@dataclass
class Reply:
    type: str = field(default="reply", init=False)
    id: str
    action: str
    result: Dict[str, Any]


@dataclass
class Error:
    type: str = field(default="error", init=False)
    id: Optional[str]
    code: str  # "bad-request" | "unknown-action" | "internal"
    message: str


@dataclass
class Open:
    protocol: int
    interval: Optional[float] = None
    history_seconds: Optional[int] = None
    client: Optional[str] = None


@dataclass
class Request:
    id: str
    action: str
    args: Dict[str, Any] = field(default_factory=dict)  # optional on the wire


# --- process actions (children, processes, terminate) -------------------------------------------


@dataclass(frozen=True)
class ProcessRef:
    """A process as the browser names it: the PID plus its start time, so a reused PID is not mistaken for it."""

    pid: int
    create_time: float


@dataclass
class ChildProcess:
    pid: int
    create_time: float
    name: Optional[str]
    rss: Optional[int]
    gpu_used: Optional[int]


@dataclass
class ProcessState:
    pid: int
    create_time: float  # as asked
    alive: bool
    same_process: bool  # alive and started at `create_time` (within 0.01 s): not a reused PID
    name: Optional[str]
    gpu_used: Optional[int]


@dataclass
class Refusal:
    pid: int
    reason: str


@dataclass
class Terminated:
    terminated: List[int]
    refused: List[Refusal]


@dataclass
class TimelineExportArgs:
    id: str
    format: str  # "snapshot" | "csv"


@dataclass
class TimelineExport:
    """`timeline_export` result: one file made from a timeline this kernel holds."""

    id: str
    format: str  # "snapshot" | "csv"
    filename: str
    media_type: str
    data: str  # base64 of the file's bytes
    bytes: int  # the file's size before base64


def to_json(message: Any) -> Dict[str, Any]:
    """The JSON object (a dict) sent for a message dataclass."""
    return asdict(message)


# --- parsing what the browser sends -------------------------------------------------------------


class ProtocolError(Exception):
    """A browser message we refuse; `code` and the message become an `error` reply."""

    def __init__(self, code: str, message: str, request_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_interval(value: Any) -> float:
    if not _is_number(value) or not INTERVAL_MIN <= value <= INTERVAL_MAX:
        raise ProtocolError(
            "bad-request", f"interval must be a number of seconds from {INTERVAL_MIN} to {INTERVAL_MAX}, got {value!r}"
        )
    return float(value)


def check_history_seconds(value: Any) -> int:
    if not _is_number(value) or value != int(value) or not HISTORY_MIN <= value <= HISTORY_MAX:
        raise ProtocolError(
            "bad-request", f"history_seconds must be a whole number from {HISTORY_MIN} to {HISTORY_MAX}, got {value!r}"
        )
    return int(value)


def parse_open(data: Any) -> Open:
    """Check the comm_open data; a wrong type or protocol raises ProtocolError (the comm is then closed)."""
    if not isinstance(data, Mapping) or data.get("type") != "open":
        raise ProtocolError("bad-request", "comm_open data must be an object with type 'open'")
    protocol = data.get("protocol")
    if protocol != PROTOCOL_VERSION or isinstance(protocol, bool):
        raise ProtocolError(
            "bad-request",
            f"kernel speaks gpumem protocol v{PROTOCOL_VERSION}, the browser asked for v{protocol}",
        )
    client = data.get("client")
    return Open(
        protocol=PROTOCOL_VERSION,
        interval=data.get("interval"),
        history_seconds=data.get("history_seconds"),
        client=client if isinstance(client, str) else None,
    )


def parse_request(data: Any) -> Request:
    """Check a comm message from the browser; anything but a well-formed `request` raises ProtocolError."""
    if not isinstance(data, Mapping):
        raise ProtocolError("bad-request", "message must be a JSON object")
    request_id = data.get("id") if isinstance(data.get("id"), str) else None
    if data.get("type") != "request":
        raise ProtocolError(
            "bad-request", f"unexpected message type {data.get('type')!r}; expected 'request'", request_id
        )
    if request_id is None:
        raise ProtocolError("bad-request", "request needs a string 'id'")
    action = data.get("action")
    if not isinstance(action, str):
        raise ProtocolError("bad-request", "request needs a string 'action'", request_id)
    args = data.get("args", {})
    if not isinstance(args, Mapping):
        raise ProtocolError("bad-request", "request 'args' must be an object", request_id)
    return Request(id=request_id, action=action, args=dict(args))


def parse_process_refs(args: Mapping[str, Any], request_id: Optional[str] = None) -> List[ProcessRef]:
    """`{"pids": [{"pid": int, "create_time": float}, ...]}` → refs (duplicates dropped); else ProtocolError."""
    unknown = sorted(set(args) - {"pids"})
    if unknown:
        raise ProtocolError("bad-request", f"unexpected args: {', '.join(unknown)}", request_id)
    items = args.get("pids")
    if not isinstance(items, list) or len(items) > MAX_PIDS:
        raise ProtocolError("bad-request", f"'pids' must be a list of at most {MAX_PIDS} objects", request_id)
    refs: Dict[ProcessRef, None] = {}
    for item in items:
        pid = item.get("pid") if isinstance(item, Mapping) else None
        created = item.get("create_time") if isinstance(item, Mapping) else None
        if (
            not isinstance(item, Mapping)
            or set(item) != {"pid", "create_time"}
            or not isinstance(pid, int)
            or isinstance(pid, bool)
            or pid <= 0
            or not _is_number(created)
            or created < 0
        ):
            shape = '{"pid": positive int, "create_time": seconds}'
            raise ProtocolError("bad-request", f"each pid must be {shape}, got {repr(item)[:80]}", request_id)
        refs[ProcessRef(pid, float(created))] = None
    return list(refs)


def parse_timeline_export_args(args: Mapping[str, Any], request_id: Optional[str] = None) -> TimelineExportArgs:
    """`{"id": "tl-…", "format": "snapshot" | "csv"}`; anything else raises ProtocolError."""
    unknown = sorted(set(args) - {"id", "format"})
    if unknown:
        raise ProtocolError("bad-request", f"timeline_export does not take {', '.join(unknown)}", request_id)
    timeline_id, fmt = args.get("id"), args.get("format")
    if not isinstance(timeline_id, str) or not _TIMELINE_ID.match(timeline_id):
        raise ProtocolError(
            "bad-request", f"timeline_export needs an 'id' like tl-1a2b3c4d, got {timeline_id!r}"[:200], request_id
        )
    if fmt not in TIMELINE_FORMATS:
        raise ProtocolError(
            "bad-request", f"timeline_export 'format' must be snapshot or csv, got {fmt!r}"[:200], request_id
        )
    return TimelineExportArgs(id=timeline_id, format=fmt)


# --- schemas ------------------------------------------------------------------------------------


def load_schema(message_type: str) -> Dict[str, Any]:
    """The JSON Schema of one message type, read from the package's schemas/ folder."""
    if message_type not in MESSAGE_TYPES:
        raise ValueError(f"no schema for message type {message_type!r}")
    text = (
        resources.files("gpumem_kernel")
        .joinpath("wire", "schemas")
        .joinpath(f"{message_type}.schema.json")
        .read_text("utf-8")
    )
    return json.loads(text)


def load_payload_schema(name: str) -> Dict[str, Any]:
    """JSON Schema of an inline payload: "clear", "oom", "analysis", "autobatch" or "benchmark"."""
    if name not in ("clear", "oom", "analysis", "autobatch", "benchmark"):
        raise ValueError(f"no payload schema named {name!r}")
    text = resources.files("gpumem_kernel").joinpath("wire", "schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


@lru_cache(maxsize=None)
def _validator(message_type: str) -> Any:
    # jsonschema is a test dependency only: import it here, never at module level.
    import jsonschema
    from referencing import Registry, Resource

    # history and reply refer to "sample.schema.json" by file name, watch_event to the oom and clear payloads';
    # register every file under its name.
    payloads = ("clear", "oom")
    registry = Registry().with_resources(
        [(f"{name}.schema.json", Resource.from_contents(load_schema(name))) for name in MESSAGE_TYPES]
        + [(f"{name}.schema.json", Resource.from_contents(load_payload_schema(name))) for name in payloads]
    )
    schema = load_schema(message_type)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER)


def validate(message: Mapping[str, Any], message_type: Optional[str] = None) -> None:
    """Raise jsonschema.ValidationError unless `message` matches the schema of its `type`."""
    kind = message_type or message.get("type")
    if not isinstance(kind, str) or kind not in MESSAGE_TYPES:
        raise ValueError(f"message has no known type: {kind!r}")
    _validator(kind).validate(message)
