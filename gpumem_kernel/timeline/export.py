"""Files made from a History: PyTorch's own memory snapshot (a pickle, what pytorch.org/memory_viz and
`torch.cuda._memory_viz` read) and a CSV with one row per allocation.

A recorded History exports PyTorch's snapshot as it was taken (`raw_snapshot`). Otherwise the snapshot is
written from the allocations: `device_traces` holds one `alloc` and, for each freed storage, a
`free_requested` + `free_completed` pair (as PyTorch records a free on one stream), plus a `segment_alloc`
where the caching-allocator model (analysis.allocator) opens a segment; `segments` is the model's state at the
end of the history (the live blocks of each segment, the gaps between them `inactive`). Addresses are the
model's, so both views of the file agree. Nothing here imports torch.
"""

from __future__ import annotations

import base64
import csv
import io
import pickle
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis import CachingAllocatorModel
from gpumem_kernel.probe.cells import cell_of
from gpumem_kernel.timeline.history import Alloc, History, RawFrame

FORMATS = ("snapshot", "csv")
MEDIA_TYPES = {"snapshot": "application/octet-stream", "csv": "text/csv"}
SUFFIXES = {"snapshot": ".pickle", "csv": ".csv"}
CSV_HEADER = ("start", "end", "size", "category", "file", "line", "name", "cell")
# the largest file `timeline_export` sends to the browser (base64 adds a third); larger ones are saved from the kernel
MAX_EXPORT_BYTES = 256 << 20


@dataclass
class ExportedFile:
    filename: str
    media_type: str
    data: bytes


def export(history: History, fmt: str, timeline_id: str = "timeline") -> ExportedFile:
    """The file `fmt` ("snapshot" | "csv") of `history`; ValueError for another format."""
    if fmt == "snapshot":
        data = pickle.dumps(snapshot_dict(history), protocol=4)
    elif fmt == "csv":
        data = csv_text(history).encode("utf-8")
    else:
        raise ValueError(f"export format must be snapshot or csv, got {fmt!r}")
    return ExportedFile(f"gpumem-{timeline_id}{SUFFIXES[fmt]}", MEDIA_TYPES[fmt], data)


def export_result(history: History, fmt: str, timeline_id: str) -> Dict[str, Any]:
    """The `timeline_export` reply result (wire/schemas/reply.schema.json#/$defs/timeline_export_result)."""
    from gpumem_kernel.wire.protocol import TimelineExport, to_json

    made = export(history, fmt, timeline_id)
    if len(made.data) > MAX_EXPORT_BYTES:
        raise ValueError(
            f"timeline {timeline_id} makes a {len(made.data) / 2**20:.0f} MiB file, over the "
            f"{MAX_EXPORT_BYTES >> 20} MiB sent to the browser: save it in the kernel (--save FILE, or .save(FILE))"
        )
    encoded = base64.b64encode(made.data).decode("ascii")
    return to_json(TimelineExport(timeline_id, fmt, made.filename, made.media_type, encoded, len(made.data)))


def save(history: History, path: str) -> str:
    """Write the export its suffix names (.pickle/.pkl: snapshot, .csv: CSV); returns the format."""
    lower = str(path).lower()
    if lower.endswith((".pickle", ".pkl")):
        fmt = "snapshot"
    elif lower.endswith(".csv"):
        fmt = "csv"
    else:
        raise ValueError(f"--save needs a .pickle or .csv file name, got {path!r}")
    made = export(history, fmt)
    with open(path, "wb") as handle:
        handle.write(made.data)
    return fmt


# --- CSV ----------------------------------------------------------------------------------------------------


def _source(frames: Tuple[RawFrame, ...]) -> Optional[RawFrame]:
    from gpumem_kernel.timeline.frames import is_user_frame

    for frame in frames:
        if is_user_frame(frame.file):
            return frame
    return None


def csv_text(history: History) -> str:
    """One row per allocation, in allocation order: start,end,size,category,file,line,name,cell (the allocating
    user frame; empty when none was recorded; end empty when still alive at the end)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    cells: Dict[str, Optional[int]] = {}
    for alloc in sorted(history.allocs, key=lambda a: a.start):
        frame = _source(alloc.frames)
        if frame is None:
            where: Tuple[Any, ...] = ("", "", "", "")
        else:
            if frame.file not in cells:
                cells[frame.file] = cell_of(frame.file)
            cell = cells[frame.file]
            where = (frame.file, frame.line, frame.name, "" if cell is None else cell)
        end = "" if alloc.end is None else alloc.end
        writer.writerow((alloc.start, end, alloc.size, alloc.category, *where))
    return out.getvalue()


# --- PyTorch's snapshot -------------------------------------------------------------------------------------


def _frames(frames: Tuple[RawFrame, ...], memo: Dict[Tuple[RawFrame, ...], List[Dict[str, Any]]]) -> List[Any]:
    found = memo.get(frames)
    if found is None:
        found = memo[frames] = [{"filename": f.file, "line": f.line, "name": f.name} for f in frames]
    return found


@dataclass
class _Layout:
    """Where each allocation sits: (address, block size) per alloc, the segments, and when each was opened."""

    blocks: List[Tuple[int, int]]
    segments: List[Tuple[int, int, int, str]]  # (event index opened, address, size, "small" | "large")


def _layout(allocs: List[Alloc], end: int) -> _Layout:
    """Replay the history through the caching-allocator model (the same model the analysis uses)."""
    model = CachingAllocatorModel()
    order: List[Tuple[int, int, int]] = []  # (event index, 0 free / 1 alloc, alloc number)
    for number, alloc in enumerate(allocs):
        order.append((alloc.start, 1, number))
        if alloc.end is not None:
            order.append((alloc.end, 0, number))
    order.sort()
    blocks: List[Tuple[int, int]] = [(0, 0)] * len(allocs)
    segments: List[Tuple[int, int, int, str]] = []
    for at, is_alloc, number in order:
        if not is_alloc:
            model.free(number)
            continue
        alloc = allocs[number]
        requested = alloc.requested if alloc.requested is not None else alloc.size
        reserved = model.reserved
        block = model.malloc(number, max(requested, 1))
        assert block is not None
        blocks[number] = (block.address, block.size)
        if model.reserved > reserved:  # the model opened a segment for it (segments are never released)
            segments.append((at, block.segment, model.reserved - reserved, "small" if block.small else "large"))
    return _Layout(blocks, segments)


def snapshot_dict(history: History) -> Dict[str, Any]:
    """PyTorch's `torch.cuda.memory._snapshot()` dict for `history` (its own, as-is, when recorded)."""
    if history.raw_snapshot is not None:
        return history.raw_snapshot
    allocs = list(history.allocs)
    if history.baseline:  # what was allocated before the history began: one live block from the start
        allocs.insert(0, Alloc(size=history.baseline, category="other", start=0, end=None))
    layout = _layout(allocs, history.end)
    memo: Dict[Tuple[RawFrame, ...], List[Dict[str, Any]]] = {}
    # (event index, order within it, entry): segments open before the allocation that needed them
    entries: List[Tuple[int, int, Dict[str, Any]]] = []
    for at, address, size, _pool in layout.segments:
        entries.append((at, 0, {"action": "segment_alloc", "addr": address, "size": size, "stream": 0, "frames": []}))
    for number, alloc in enumerate(allocs):
        address, block = layout.blocks[number]
        frames = _frames(alloc.frames, memo)
        entry = {"action": "alloc", "addr": address, "size": block, "stream": 0, "frames": frames}
        entries.append((alloc.start, 1, entry))
        if alloc.end is not None:
            for action in ("free_requested", "free_completed"):
                free = {"action": action, "addr": address, "size": block, "stream": 0, "frames": frames}
                entries.append((alloc.end, 1 if action == "free_requested" else 2, free))
    entries.sort(key=lambda e: (e[0], e[1]))
    trace = [e for _, _, e in entries]
    for at, entry in enumerate(trace):
        entry["time_us"] = at  # event order: a predicted step has no clock

    alive: Dict[int, List[Tuple[int, int, Alloc]]] = {}  # segment address -> (address, block size, alloc)
    starts = sorted((address, size) for _, address, size, _ in layout.segments)
    for number, alloc in enumerate(allocs):
        if alloc.end is None:
            address, block = layout.blocks[number]
            segment = _segment_of(starts, address)
            alive.setdefault(segment, []).append((address, block, alloc))
    segments = []
    for _, address, size, pool in sorted(layout.segments, key=lambda s: s[1]):
        blocks: List[Dict[str, Any]] = []
        cursor = address
        for block_address, block, alloc in sorted(alive.get(address, []), key=lambda b: b[0]):
            if block_address > cursor:
                blocks.append(_inactive(cursor, block_address - cursor))
            requested = alloc.requested if alloc.requested is not None else alloc.size
            blocks.append(
                {
                    "address": block_address,
                    "size": block,
                    "requested_size": min(requested, block),
                    "state": "active_allocated",
                    "frames": _frames(alloc.frames, memo),
                }
            )
            cursor = block_address + block
        if cursor < address + size:
            blocks.append(_inactive(cursor, address + size - cursor))
        active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        segments.append(
            {
                "device": history.device_index or 0,
                "address": address,
                "total_size": size,
                "allocated_size": active,
                "active_size": active,
                "requested_size": sum(b.get("requested_size", 0) for b in blocks),
                "stream": 0,
                "segment_type": pool,
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": blocks,
            }
        )
    traces: List[List[Dict[str, Any]]] = [[] for _ in range((history.device_index or 0) + 1)]
    traces[history.device_index or 0] = trace
    return {"segments": segments, "device_traces": traces, "allocator_settings": {}}


def _inactive(address: int, size: int) -> Dict[str, Any]:
    return {"address": address, "size": size, "requested_size": 0, "state": "inactive", "frames": []}


def _segment_of(starts: List[Tuple[int, int]], address: int) -> int:
    import bisect

    index = bisect.bisect_right(starts, (address, float("inf"))) - 1
    return starts[index][0]
