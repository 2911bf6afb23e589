"""The recorded timeline: PyTorch's CUDA allocator history of a block of code, as a History.

`history_from_snapshot(snapshot)` converts the dict `torch.cuda.memory._snapshot()` returns (`segments`: the
allocator's state when the snapshot was taken; `device_traces[d]`: device d's ring buffer of `alloc`,
`free_requested`, `free_completed`, `segment_alloc`/`segment_map`, `segment_free`/`segment_unmap`, `oom` and
`snapshot` entries, oldest first) into a History. It is plain Python and imports no torch.

- Time is the position in the device trace (entry i is event index i), so an index names the same moment in
  PyTorch's own viewer of the exported snapshot. `end` is the number of entries.
- An allocation ends at its `free_requested` (where torch.cuda.memory_allocated drops; `free_completed` follows
  it at once unless another stream still uses the block), or at its `free_completed` when no request was kept.
- Sizes: a trace entry carries the bytes asked for; the allocator counts whole 512-byte blocks
  (torch.cuda.max_memory_allocated does). `size` is the request rounded up to 512 bytes (`requested` keeps the
  request); a block still alive when the snapshot was taken has its exact size from the segments. The allocator
  may also leave a large block unsplit (up to 1 MiB more than rounded): the recorded peak can be that much
  below max_memory_allocated, never above it.
- Blocks alive in the snapshot that no kept entry allocated were allocated before the history began and
  never freed in it: `baseline`. A free whose allocation is not in the trace (allocated before, or lost from
  the ring buffer) is an allocation from index 0 to that free, without frames.
- `events_dropped`: what the ring buffer lost, from the allocator's counters when the recorder read them.
- Category: PyTorch records no category, so it is a heuristic from the allocating frames and the lifetime,
  said in the notes (`categorize`).

`TimelineRecorder` (`gpumem_kernel.record_timeline`) records a block: it starts the history only when the
user's code has already initialised CUDA (it never initialises CUDA), stops it on exit even when the block
raised, takes the snapshot and builds the History. The private torch APIs it calls are guarded: without them
it says so in one line and the block runs unrecorded.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.probe.torchstats import cuda_initialised, loaded_torch
from gpumem_kernel.timeline.history import Alloc, Category, Failed, History, RawFrame

BLOCK = 512  # the caching allocator's smallest block and rounding unit (kMinBlockSize)
DEFAULT_MAX_ENTRIES = 100_000
NOT_IN_USE = "gpumem: nothing to record: CUDA is not in use in this kernel (the timeline never initialises it)"
ALREADY = (
    "gpumem: nothing recorded: PyTorch's allocator history is already recording "
    "(torch.cuda.memory._record_memory_history was called): gpumem leaves yours as it is"
)
NO_API = (
    "gpumem: nothing to record: this torch ({version}) has no CUDA allocator history "
    "(torch.cuda.memory._record_memory_history / _snapshot)"
)
CATEGORY_NOTE = (
    "categories are a heuristic (PyTorch records none): from the allocating frames (torch.optim, the module "
    "conversion, forward, backward, the line's .to()/.cuda()) and whether the block outlives the history"
)

_FREE = ("free_requested", "free_completed")
_SEGMENT_UP = ("segment_alloc", "segment_map")
_SEGMENT_DOWN = ("segment_free", "segment_unmap")


def rounded(size: int) -> int:
    """The allocator's block for a request of `size` bytes (512-byte multiples, at least 512)."""
    return max(BLOCK, -(-int(size) // BLOCK) * BLOCK)


def raw_frames(frames: Any) -> Tuple[RawFrame, ...]:
    """PyTorch's frame dicts (`filename`, `line`, `name`; innermost first) as RawFrames."""
    out: List[RawFrame] = []
    if not frames:
        return ()
    for f in frames or ():
        if isinstance(f, Mapping):
            try:
                out.append(RawFrame(str(f.get("filename", "?")), int(f.get("line", 0) or 0), str(f.get("name", "?"))))
            except (TypeError, ValueError):
                continue
    return tuple(out)


# --- categories (a heuristic) ------------------------------------------------------------------------------


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def _has(frames: Sequence[RawFrame], folder: str, names: Iterable[str] = ()) -> bool:
    wanted = set(names)
    return any(folder in _norm(f.file) and (not wanted or f.name in wanted) for f in frames)


_PARAMETER_NAMES = ("_apply", "convert", "to", "cuda", "to_empty", "reset_parameters", "__init__", "_to")
_BACKWARD_NAMES = ("backward", "_engine_run_backward", "grad")
_FORWARD_NAMES = ("forward", "_call_impl", "_wrapped_call_impl")


def _source_line(frame: RawFrame) -> str:
    import linecache

    try:
        return linecache.getline(frame.file, frame.line) or ""
    except Exception:  # a file that cannot be read
        return ""


def categorize(frames: Sequence[RawFrame], survives: bool) -> Category:
    """The category of one allocation, guessed from its frames (innermost first) and whether it is still alive
    when the history ends (`survives`). A heuristic, in this order:

    - allocated inside torch.optim: optimizer state when it survives, else `other` (the step's temporaries);
    - inside torch.nn's module conversion or construction (`model.to/cuda()`, `__init__`, `reset_parameters`,
      torch.nn.init): parameter;
    - inside backward, or with no Python frame at all (the autograd engine allocates on its own thread, where
      Python has no stack): gradient when it survives, else `other` (backward's temporaries);
    - inside a module's forward: activation;
    - inside torch.utils.data, or the innermost frame is the user's line calling `.to(`/`.cuda(`: input;
    - else other.
    """
    if _has(frames, "torch/optim/"):
        return "optimizer_state" if survives else "other"
    if _has(frames, "torch/nn/modules/", _PARAMETER_NAMES) and not _has(frames, "torch/nn/modules/", _FORWARD_NAMES):
        return "parameter"
    if _has(frames, "torch/nn/init.py"):
        return "parameter"
    if (
        not frames
        or _has(frames, "torch/autograd/", _BACKWARD_NAMES)
        or _has(frames, "torch/_tensor.py", ("backward",))
    ):
        return "gradient" if survives else "other"
    if _has(frames, "torch/nn/", _FORWARD_NAMES) or _has(frames, "torch/nn/functional.py"):
        return "activation"
    if _has(frames, "torch/utils/data/"):
        return "input"
    line = _source_line(frames[0])
    if ".to(" in line or ".cuda(" in line:
        return "input"
    return "other"


# --- the conversion ----------------------------------------------------------------------------------------


def alive_blocks(snapshot: Mapping[str, Any], device: int) -> Dict[int, Mapping[str, Any]]:
    """The snapshot's `active_allocated` blocks of `device`, by address."""
    found: Dict[int, Mapping[str, Any]] = {}
    for segment in snapshot.get("segments") or ():
        if segment.get("device", device) != device:
            continue
        address = int(segment.get("address") or 0)
        for block in segment.get("blocks") or ():
            size = int(block.get("size") or 0)
            at = int(block.get("address", address))
            if block.get("state") == "active_allocated":
                found[at] = block
            address = at + size
    return found


def reserved_at_end(snapshot: Mapping[str, Any], device: int) -> int:
    return sum(
        int(s.get("total_size") or 0) for s in snapshot.get("segments") or () if s.get("device", device) == device
    )


def pick_device(snapshot: Mapping[str, Any], device: Optional[int]) -> int:
    """`device`, else the first device whose trace has entries, else 0."""
    if device is not None:
        return int(device)
    for index, trace in enumerate(snapshot.get("device_traces") or ()):
        if trace:
            return index
    return 0


def history_from_snapshot(
    snapshot: Mapping[str, Any],
    device: Optional[int] = None,
    *,
    title: str = "recorded",
    device_name: Optional[str] = None,
    device_total: Optional[int] = None,
    events_dropped: Optional[int] = None,
    max_entries: Optional[int] = None,
    failed: Optional[Failed] = None,
    keep_raw: bool = True,
) -> History:
    """The History of one device of a `torch.cuda.memory._snapshot()` dict (see the module's docstring).

    `events_dropped`: entries the ring buffer lost, when the caller knows (the recorder reads the allocator's
    counters); else, when the trace holds `max_entries` entries, it may have lost some and a note says so.
    `failed`: the allocation an OOM observer saw, when the trace holds no `oom` entry for it."""
    d = pick_device(snapshot, device)
    traces = snapshot.get("device_traces") or []
    trace = traces[d] if d < len(traces) else []
    blocks = alive_blocks(snapshot, d)
    notes: List[str] = []
    allocs: List[Alloc] = []
    open_: Dict[int, Alloc] = {}
    awaiting: Dict[int, Alloc] = {}  # free requested, not completed yet
    reserved_changes: List[Tuple[int, int]] = []
    net_reserved = 0
    found_failed: Optional[Failed] = None
    orphans: List[Alloc] = []  # freed in the history, allocated before it (or lost from the ring buffer)
    for index, entry in enumerate(trace):
        action = entry.get("action")
        size = int(entry.get("size") or 0)
        addr = entry.get("addr")
        if action == "alloc":
            alloc = Alloc(
                size=rounded(size),
                category="other",
                start=index,
                end=None,
                frames=raw_frames(entry.get("frames")),
                address=addr,
                requested=size,
            )
            open_[addr] = alloc
            allocs.append(alloc)
        elif action in _FREE:
            alloc = open_.pop(addr, None)
            if alloc is not None:
                alloc.end = index
                if action == "free_requested":
                    awaiting[addr] = alloc
            elif action == "free_completed" and awaiting.pop(addr, None) is not None:
                pass  # the request ended it
            else:  # allocated before the kept history: alive from its start
                alloc = Alloc(rounded(size), "other", 0, index, (), addr, size)
                orphans.append(alloc)
                allocs.append(alloc)
                if action == "free_requested":
                    awaiting[addr] = alloc
        elif action in _SEGMENT_UP or action in _SEGMENT_DOWN:
            net_reserved += size if action in _SEGMENT_UP else -size
            reserved_changes.append((index, net_reserved))
        elif action == "oom":
            found_failed = Failed(
                size=size, device_free=entry.get("device_free"), frames=raw_frames(entry.get("frames"))
            )
    baseline = 0
    for address, block in blocks.items():
        alloc = open_.get(address)
        if alloc is not None:
            alloc.size = int(block.get("size") or alloc.size)
        else:
            baseline += int(block.get("size") or 0)
    for address in open_:
        if address not in blocks and blocks:
            notes.append(
                "an allocation the history left alive is not in the snapshot's segments (a free was not recorded)"
            )
            break
    memo: Dict[Tuple[Tuple[RawFrame, ...], bool], Category] = {}  # one decision per stack and lifetime
    unknown = {id(a) for a in orphans}
    for alloc in allocs:
        if id(alloc) in unknown:
            continue  # allocated before the kept history, no frames: "other"
        key = (alloc.frames, alloc.end is None)
        found = memo.get(key)
        if found is None:
            found = memo[key] = categorize(*key)
        alloc.category = found
    reserved_end = reserved_at_end(snapshot, d)
    start_reserved = reserved_end - net_reserved
    reserved: Optional[List[Tuple[int, int]]] = None
    if start_reserved >= 0 and (blocks or trace):
        reserved = [(0, start_reserved)] + [(i, start_reserved + v) for i, v in reserved_changes]
    if events_dropped is None:
        events_dropped = 0
        if max_entries is not None and len(trace) >= max_entries:
            notes.append(
                f"the history kept its last {max_entries} entries: earlier events may be lost "
                "(their allocations count from index 0)"
            )
    elif events_dropped > 0:
        notes.append(
            f"PyTorch's ring buffer dropped {events_dropped} events before the kept ones: allocations they "
            "made and that were freed later count from index 0, without frames"
        )
    if orphans:
        notes.append(
            f"{len(orphans)} frees of blocks allocated before the history began: alive from index 0, no frames"
        )
    if allocs:
        notes.append(CATEGORY_NOTE)
    other_devices = [i for i, t in enumerate(traces) if t and i != d]
    if other_devices:
        notes.append(f"devices {', '.join(map(str, other_devices))} also have history; this timeline is cuda:{d}")
    return History(
        source="recorded",
        title=title,
        device_name=device_name,
        device_index=d,
        device_total=device_total,
        allocs=allocs,
        end=len(trace),
        baseline=baseline,
        reserved=reserved,
        events_dropped=int(events_dropped),
        failed=failed if found_failed is None else found_failed,
        notes=notes,
        raw_snapshot=dict(snapshot) if keep_raw else None,
    )


# --- what was alive at the end (an OOM) ---------------------------------------------------------------------


@dataclass
class AliveGroup:
    """Blocks alive when the snapshot was taken, grouped by category and allocating source line."""

    size: int
    count: int
    category: Category
    frames: Tuple[RawFrame, ...]  # the first block's frames, innermost first (empty: none recorded)


def alive_groups(snapshot: Mapping[str, Any], device: Optional[int] = None) -> List[AliveGroup]:
    """Every block alive in the snapshot (allocated before the history too: a block keeps the frames recorded
    when it was allocated), grouped by (category, innermost user frame or innermost frame), largest first."""
    from gpumem_kernel.timeline.frames import source_index

    d = pick_device(snapshot, device)
    groups: Dict[Tuple[Any, ...], AliveGroup] = {}
    for block in alive_blocks(snapshot, d).values():
        frames = raw_frames(block.get("frames"))
        category = categorize(frames, True) if frames else "other"
        where = source_index(frames) if frames else None
        frame = frames[where] if where is not None else (frames[0] if frames else None)
        key = (category, None if frame is None else (frame.file, frame.line))
        size = int(block.get("size") or 0)
        group = groups.get(key)
        if group is None:
            groups[key] = AliveGroup(size, 1, category, frames)
        else:
            group.size += size
            group.count += 1
    return sorted(groups.values(), key=lambda g: -g.size)


# --- the recorder -------------------------------------------------------------------------------------------


def history_api(torch: Any) -> Optional[str]:
    """None when this torch has the private allocator-history APIs the recorder calls; else the one line."""
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    if memory is None or not all(hasattr(memory, n) for n in ("_record_memory_history", "_snapshot")):
        return NO_API.format(version=getattr(torch, "__version__", "?"))
    return None


def history_enabled(torch: Any) -> bool:
    """True when PyTorch's allocator history is recording now (False when this torch cannot tell)."""
    check = getattr(getattr(torch, "_C", None), "_cuda_isHistoryEnabled", None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:
        return False


def start_history(torch: Any, max_entries: int, clear: bool = True) -> None:
    """Record allocations with Python stacks, at most `max_entries` entries (a ring buffer)."""
    record = torch.cuda.memory._record_memory_history
    try:
        record(enabled="all", context="all", stacks="python", max_entries=int(max_entries), clear_history=clear)
    except TypeError:  # torch < 2.4 has no clear_history
        record(enabled="all", context="all", stacks="python", max_entries=int(max_entries))


def stop_history(torch: Any) -> None:
    torch.cuda.memory._record_memory_history(enabled=None)


def _counts(torch: Any, device: int) -> Optional[Tuple[int, int]]:
    """The allocator's cumulative (allocations, frees) on `device`."""
    try:
        stats = torch.cuda.memory_stats(device)
        return int(stats.get("allocation.all.allocated", 0)), int(stats.get("allocation.all.freed", 0))
    except Exception:
        return None


def dropped(
    before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]], trace: Sequence[Mapping]
) -> Optional[int]:
    """Alloc and free events the allocator made between the counters and the trace does not hold."""
    if before is None or after is None:
        return None
    made = (after[0] - before[0]) + (after[1] - before[1])
    kept = sum(1 for e in trace if e.get("action") in ("alloc", "free_requested"))
    return max(0, made - kept)


# The OOM capture (timeline.capture) registers how to pause its own recording while a recorder runs.
PAUSERS: List[Callable[[], Optional[Callable[[], None]]]] = []


class TimelineRecorder:
    """`with gpumem_kernel.record_timeline() as rec: ...` then `rec.show()`, `rec.payload()`, `rec.save(path)`.

    Records the allocator history of the block on `device` (default: the current CUDA device) with Python
    stacks, at most `max_entries` entries (PyTorch's ring buffer keeps the last ones). Does nothing but print
    one line when CUDA is not in use (never initialises it) or this torch lacks the private API."""

    def __init__(
        self,
        device: Optional[int] = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        title: Optional[str] = None,
        quiet: bool = False,
        printer: Any = None,
    ) -> None:
        if int(max_entries) < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.device = device
        self.max_entries = int(max_entries)
        self.title = title or "recorded block"
        self.quiet = quiet
        self._print = printer or (lambda line: print(line, file=sys.stderr))
        self.history: Optional[History] = None
        self.timeline_id: Optional[str] = None
        self.reason: Optional[str] = None  # why nothing was recorded
        self.error: Optional[str] = None  # the snapshot failed (one line)
        self._torch: Any = None
        self._index = 0
        self._before: Optional[Tuple[int, int]] = None
        self._resume: Any = None
        self.started = 0.0

    # context manager -------------------------------------------------------------------------------------
    def __enter__(self) -> "TimelineRecorder":
        torch = loaded_torch() if cuda_initialised() else None
        if torch is None:
            self.reason = NOT_IN_USE
        else:
            self.reason = history_api(torch)
        if self.reason is not None:
            if not self.quiet:
                self._print(self.reason)
            return self
        self._torch = torch
        self._index = int(self.device) if self.device is not None else int(torch.cuda.current_device())
        self._resume = PAUSERS[0]() if PAUSERS else None  # the OOM capture's own recording, resumed on exit
        if self._resume is None and history_enabled(torch):  # the user's own recording: not ours to clear
            self.reason, self._torch = ALREADY, None
            if not self.quiet:
                self._print(self.reason)
            return self
        self._before = _counts(torch, self._index)
        self.started = time.time()
        try:
            start_history(torch, self.max_entries, clear=True)
        except Exception as exc:
            self.reason = f"gpumem: could not start the allocator history: {type(exc).__name__}: {exc}".splitlines()[0]
            self._torch = None
            if self._resume is not None:
                self._resume()
            if not self.quiet:
                self._print(self.reason)
        return self

    def __exit__(self, etype: Any, value: Any, tb: Any) -> None:
        torch = self._torch
        if torch is None:
            return None
        snapshot: Optional[Dict[str, Any]] = None
        try:
            snapshot = torch.cuda.memory._snapshot()
        except Exception as exc:
            self.error = f"gpumem: could not take the allocator snapshot: {type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            try:
                stop_history(torch)
            finally:
                if self._resume is not None:
                    self._resume()
        if snapshot is None:
            if not self.quiet:
                self._print(self.error)
            return None
        after = _counts(torch, self._index)
        traces = snapshot.get("device_traces") or []
        trace = traces[self._index] if self._index < len(traces) else []
        name, total = _device_info(torch, self._index)
        self.history = history_from_snapshot(
            snapshot,
            self._index,
            title=self.title,
            device_name=name,
            device_total=total,
            events_dropped=dropped(self._before, after, trace) if len(trace) >= self.max_entries else 0,
            max_entries=self.max_entries,
        )
        from gpumem_kernel.timeline.store import STORE

        self.timeline_id = STORE.add(self.history)
        return None  # never swallows the block's exception

    # results ---------------------------------------------------------------------------------------------
    def payload(self) -> Optional[Dict[str, Any]]:
        """The timeline payload (application/vnd.gpumem.timeline.v1+json); None when nothing was recorded."""
        if self.history is None or self.timeline_id is None:
            return None
        return timeline_payload(self.history, self.timeline_id)

    def bundle(self) -> Optional[Dict[str, Any]]:
        payload = self.payload()
        return None if payload is None else timeline_bundle(payload)

    def show(self) -> None:
        """Display the timeline (a notebook renders it; a terminal gets its text summary)."""
        bundle = self.bundle()
        if bundle is None:
            self._print(self.reason or self.error or NOT_IN_USE)
            return
        try:
            from IPython.display import display

            display(bundle, raw=True)
        except ImportError:
            print(bundle["text/plain"])

    def save(self, path: str) -> str:
        """Write the full history: `.pickle`/`.pkl` PyTorch's snapshot (pytorch.org/memory_viz opens it), `.csv`
        one row per allocation. Returns the format written."""
        if self.history is None:
            raise RuntimeError(self.reason or self.error or NOT_IN_USE)
        from gpumem_kernel.timeline.export import save

        return save(self.history, path)


def _device_info(torch: Any, index: int) -> Tuple[Optional[str], Optional[int]]:
    try:
        props = torch.cuda.get_device_properties(index)
        return str(props.name), int(props.total_memory)
    except Exception:
        return None, None


def record_timeline(device: Optional[int] = None, max_entries: int = DEFAULT_MAX_ENTRIES) -> TimelineRecorder:
    """Record the CUDA allocator history of a `with` block (see TimelineRecorder)."""
    return TimelineRecorder(device=device, max_entries=max_entries)


# --- the payload ------------------------------------------------------------------------------------------


def timeline_payload(history: History, timeline_id: str) -> Dict[str, Any]:
    """The timeline payload of a History this kernel keeps under `timeline_id` (timeline.payload)."""
    from gpumem_kernel.timeline import payload as payloads

    return payloads.to_json(payloads.build_payload(history, timeline_id))


def timeline_bundle(payload: Dict[str, Any]) -> Dict[str, Any]:
    """The MIME bundle (the payload, escaped text/html and text/plain summaries)."""
    from gpumem_kernel.timeline import payload as payloads

    return payloads.timeline_bundle(payload)
