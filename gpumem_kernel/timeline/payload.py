"""The timeline payload (`application/vnd.gpumem.timeline.v1+json`, wire/schemas/timeline.schema.json) built from
a History, downsampled to a bound that holds for any history.

The bounds, whatever the history (10^6 allocations included):
- bands: the allocations of at least `min_band_bytes`, chosen so there are at most MAX_BANDS (1500); the smaller
  ones are summed per category into `small`;
- `small` and `reserved`: at most MAX_POINTS (1500) points each; when a series has more, it is cut into buckets
  of consecutive points and each bucket keeps its highest point (so no local maximum is lowered), and the
  point of the peak is kept exactly, so `peak` is exact and bands + small + baseline reach it at `peak.at`;
- `alive_at_peak`: at most MAX_HOLDERS (200) groups by (category, allocating source line), largest first, then
  one `rest` row; the sizes sum to peak.bytes exactly (the baseline is an `other` row without a stack);
- `stacks`: deduplicated, at most MAX_STACK_FRAMES (24) frames each (the allocating user frame, a few library
  frames inside it and its callers outward; the full stacks are in the export), and as many as fit the JSON
  budget, given first to the failed allocation, then the holders, then the bands by size;
- the whole payload, as JSON, is at most MAX_PAYLOAD_BYTES (1 MiB): the parts above are bounded, and the stacks
  get what is left of the budget (tests/timeline/test_payload.py checks it on 10^6 allocations).
`notes` say, one line each, what was downsampled or left out.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from array import array
from itertools import accumulate
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from gpumem_kernel.render.units import format_bytes
from gpumem_kernel.probe.cells import cell_of
from gpumem_kernel.timeline.frames import is_user_frame
from gpumem_kernel.timeline.history import CATEGORIES, Alloc, History, RawFrame

TIMELINE_MIME = "application/vnd.gpumem.timeline.v1+json"
MAX_BANDS = 1500  # default; the schema allows 4000
MAX_POINTS = 1500  # per step series (small, reserved); the schema allows 4000
MAX_HOLDERS = 200  # groups before the `rest` row
MAX_STACKS = 4000  # the schema's bound
MAX_STACK_FRAMES = 24  # frames per stack in the payload (the schema allows 64)
MAX_PAYLOAD_BYTES = 1 << 20  # the JSON of a whole payload
TITLE_LIMIT = 200
_NOTE_LIMIT = 300
_MAX_NOTES = 20
_BUDGET_MARGIN = 48 << 10  # room for what is added after the stacks are budgeted (notes, failed)


# --- the payload (field by field as the schema) ---------------------------------------------------------------


@dataclass
class TimelineDevice:
    name: Optional[str]
    index: Optional[int]
    total: Optional[int]


@dataclass
class TimelinePeak:
    bytes: int
    at: int
    reserved: Optional[int]


@dataclass
class Band:
    size: int
    category: str
    start: int
    end: Optional[int]
    stack: Optional[int]


@dataclass
class ByCategory:
    parameter: int = 0
    gradient: int = 0
    optimizer_state: int = 0
    activation: int = 0
    input: int = 0
    other: int = 0


@dataclass
class SmallPoint:
    at: int
    bytes: ByCategory


@dataclass
class SeriesPoint:
    at: int
    bytes: int


@dataclass
class Holder:
    size: int
    count: int
    category: str
    stack: Optional[int]
    rest: bool


@dataclass
class Frame:
    file: str
    line: int
    name: str
    cell: Optional[int]
    user: bool


@dataclass
class Stack:
    frames: List[Frame]
    source: Optional[int]


@dataclass
class FailedAlloc:
    size: int
    device_free: Optional[int]
    stack: Optional[int]


@dataclass
class TimelinePayload:
    id: str
    source: str  # recorded | predicted
    title: str
    device: TimelineDevice
    created: float
    events_total: int
    events_dropped: int
    min_band_bytes: int
    baseline: int
    end: int
    peak: TimelinePeak
    bands: List[Band]
    small: List[SmallPoint]
    reserved: Optional[List[SeriesPoint]]
    alive_at_peak: List[Holder]
    stacks: List[Stack]
    failed: Optional[FailedAlloc]
    notes: List[str] = field(default_factory=list)
    version: int = 1

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


# --- building it ------------------------------------------------------------------------------------------------


def choose_min_band_bytes(sizes: Sequence[int], max_bands: int = MAX_BANDS) -> int:
    """The smallest threshold that leaves at most `max_bands` allocations of at least it (0: all are bands)."""
    if len(sizes) <= max_bands:
        return 0
    ordered = sorted(sizes, reverse=True)
    return ordered[max_bands] + 1


def live_curve(history: History) -> List[int]:
    """Allocated bytes after each event index 0..end-1 (baseline included)."""
    end = max([history.end, 1] + [(a.start if a.end is None else a.end) + 1 for a in history.allocs])
    deltas = [0] * end
    for alloc in history.allocs:
        deltas[alloc.start] += alloc.size
        if alloc.end is not None:
            deltas[alloc.end] -= alloc.size
    deltas[0] += history.baseline
    return list(accumulate(deltas))


def _alive(alloc: Alloc, at: int) -> bool:
    return alloc.start <= at and (alloc.end is None or alloc.end > at)


class _Stacks:
    """Deduplicated payload stacks, within a JSON byte budget."""

    def __init__(self, budget: int) -> None:
        self.items: List[Stack] = []
        self.budget = budget
        self.used = 2
        self.refused = 0
        self._index: Dict[Tuple[RawFrame, ...], Optional[int]] = {}
        self._cells: Dict[str, Optional[int]] = {}

    def index(self, frames: Tuple[RawFrame, ...]) -> Optional[int]:
        if not frames:
            return None
        if frames in self._index:
            return self._index[frames]
        stack = self._stack(frames)
        size = len(json.dumps(asdict(stack))) + 2
        if len(self.items) >= MAX_STACKS or self.used + size > self.budget:
            self.refused += 1
            self._index[frames] = None
            return None
        self.used += size
        self.items.append(stack)
        self._index[frames] = len(self.items) - 1
        return self._index[frames]

    def _cell(self, file: str) -> Optional[int]:
        if file not in self._cells:
            self._cells[file] = cell_of(file)
        return self._cells[file]

    def _stack(self, raw: Tuple[RawFrame, ...]) -> Stack:
        source = next((i for i, f in enumerate(raw) if is_user_frame(f.file)), None)
        frames = list(enumerate(raw))
        if len(frames) > MAX_STACK_FRAMES:
            # keep 4 frames inside the allocating line (the library calls it made) and its callers outward
            first = 0 if source is None else max(0, source - 4)
            frames = frames[first : first + MAX_STACK_FRAMES]
        kept = [Frame(f.file, max(0, f.line), f.name, self._cell(f.file), is_user_frame(f.file)) for _, f in frames]
        position = None if source is None else next(i for i, (n, _) in enumerate(frames) if n == source)
        return Stack(kept, position)


def _source_key(frames: Tuple[RawFrame, ...], memo: Dict[int, Optional[RawFrame]]) -> Optional[RawFrame]:
    """The allocating user frame; without one, the innermost frame (a library's line), so allocations of
    different library calls are not lumped together; None without frames."""
    key = id(frames)
    if key not in memo:
        memo[key] = next((f for f in frames if is_user_frame(f.file)), frames[0] if frames else None)
    return memo[key]


def _step_points(
    stream: Iterable[Tuple[int, Any]], count: int, end: int, keep_at: Optional[int], limit: int, total: Any, zero: Any
) -> List[Tuple[int, Any]]:
    """A step series (`stream`: (at, value) in order of `at`, `count` of them, each value holding until the next)
    in at most `limit` points. Up to `limit` changes: every one, exact. More: the event axis 0..end is cut
    into at most `limit` - 4 equal spans, plus one span of its own at `keep_at` and one from `keep_at` + 1; each
    span is one point at its start with the highest value (by `total`) in force anywhere in it. No local maximum
    is lowered, and the value in force at `keep_at` is exact."""
    if count <= limit:
        return list(stream)
    width = -(-max(end, 1) // max(1, limit - 4))
    cuts = sorted(c for c in {keep_at, None if keep_at is None else keep_at + 1} if c is not None and 0 <= c < end)

    def span_of(at: int) -> int:
        start = (at // width) * width
        for cut in cuts:
            if start <= cut <= at:
                start = cut
        return start

    points: List[Tuple[int, Any]] = []

    def emit(at: int, value: Any) -> None:
        if not points or points[-1][1] != value:
            points.append((at, value))

    current, span, best = zero, 0, zero
    for at, value in stream:
        start = span_of(at)
        if start != span:
            emit(span, best)
            for cut in cuts:  # a span of its own with no change inside: the value in force there
                if span < cut < start:
                    emit(cut, current)
            span, best = start, current if start < at else value
        current = value
        if total(value) > total(best):
            best = value
    emit(span, best)
    for cut in cuts:
        if cut > span:
            emit(cut, current)
    return points


def _small_stream(small: List[Alloc], end: int) -> Tuple[int, Iterator[Tuple[int, Tuple[int, ...]]]]:
    """(at most how many changes, the per-category bytes of the small allocations after each change, in order),
    from one array of deltas over the event axis: no list of 10^6 points is ever made."""
    index = {c: i for i, c in enumerate(CATEGORIES)}
    deltas = array("q", bytes(8 * end))
    category = bytearray(end)  # 1 + the category index of the change at that event; 0: none; 255: mixed
    mixed: Dict[int, Dict[int, int]] = {}  # events where more than one category changes (rare)
    for alloc in small:
        c = index[alloc.category]
        for at, delta in ((alloc.start, alloc.size), (alloc.end, -alloc.size)):
            if at is None:
                continue
            previous = category[at]
            if previous == 0:
                category[at], deltas[at] = c + 1, delta
            elif previous == c + 1:
                deltas[at] += delta
            else:
                entry = mixed.get(at)
                if entry is None:
                    entry = mixed[at] = {previous - 1: deltas[at]}
                    category[at] = 255
                entry[c] = entry.get(c, 0) + delta

    def stream() -> Iterator[Tuple[int, Tuple[int, ...]]]:
        values = [0] * len(CATEGORIES)
        last: Tuple[int, ...] = tuple(values)
        for at in range(end):
            changed = category[at]
            if not changed:
                continue
            if changed == 255:
                for c, delta in mixed[at].items():
                    values[c] += delta
            else:
                values[changed - 1] += deltas[at]
            now = tuple(values)
            if now != last:
                last = now
                yield at, now

    return end - category.count(0), stream()


def build_payload(
    history: History,
    timeline_id: Optional[str] = None,
    *,
    min_band_bytes: Optional[int] = None,
    max_bands: int = MAX_BANDS,
) -> TimelinePayload:
    """The payload of `history`. Without `timeline_id`, the history is kept in this kernel's store (timeline.store,
    for `timeline_export`) and its new id is used. `min_band_bytes`: the caller's threshold (raised if it
    would give more than 4000 bands); default: the smallest that gives at most `max_bands`."""
    if timeline_id is None:
        from gpumem_kernel.timeline.store import STORE

        timeline_id = STORE.add(history)
    notes = [_line(n) for n in history.notes]
    allocs = sorted(history.allocs, key=lambda a: a.start)
    sizes = [a.size for a in allocs]
    if min_band_bytes is None:
        threshold = choose_min_band_bytes(sizes, max_bands)
    else:
        threshold = max(0, int(min_band_bytes))
        if sum(1 for s in sizes if s >= threshold) > 4000:
            threshold = choose_min_band_bytes(sizes, 4000)
            notes.append(f"min_band_bytes raised to {format_bytes(threshold, 'fit')}: at most 4000 bands are drawn")
    big = [a for a in allocs if a.size >= threshold]
    small = [a for a in allocs if a.size < threshold]
    if small:
        notes.append(
            f"{len(small):,} allocations under {format_bytes(threshold, 'fit')} are summed per category "
            f"(the small series); {len(big):,} larger ones are drawn one by one"
        )

    curve = live_curve(history)
    peak_bytes = max(curve)
    peak_at = curve.index(peak_bytes)
    reserved_full = history.reserved
    in_force = [b for at, b in reserved_full or () if at <= peak_at]
    peak_reserved = in_force[-1] if in_force else None

    # alive at the peak, grouped by (category, allocating source line)
    memo: Dict[int, Optional[RawFrame]] = {}
    groups: Dict[Tuple[str, Optional[Tuple[str, int]]], List[Any]] = {}
    for alloc in allocs:
        if alloc.start > peak_at:
            break
        if not _alive(alloc, peak_at):
            continue
        source = _source_key(alloc.frames, memo)
        key = (alloc.category, None if source is None else (source.file, source.line))
        group = groups.get(key)
        if group is None:
            groups[key] = [alloc.size, 1, alloc]
        else:
            group[0] += alloc.size
            group[1] += 1
            if alloc.size > group[2].size:
                group[2] = alloc  # the group's stack: its largest allocation's
    rows = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0][0]))
    if history.baseline:
        rows.append((("other", None), [history.baseline, 1, None]))
        rows.sort(key=lambda kv: -kv[1][0])

    # the parts other than stacks, and the byte budget left for the stacks
    zero = (0,) * len(CATEGORIES)
    small_points: List[Tuple[int, Tuple[int, ...]]] = []
    if small:
        changes, stream = _small_stream(small, len(curve))
        small_points = _step_points(stream, changes, len(curve), peak_at, MAX_POINTS, sum, zero)
        if changes > MAX_POINTS:
            notes.append(
                f"small series: {changes:,} changes shown as {len(small_points):,} steps "
                "(each span keeps its highest point; exact at the peak)"
            )
    reserved_points = None
    if reserved_full is not None:
        reserved_points = _step_points(iter(reserved_full), len(reserved_full), len(curve), peak_at, MAX_POINTS, int, 0)
        if len(reserved_full) > MAX_POINTS:
            notes.append(
                f"reserved: {len(reserved_full):,} changes shown as {len(reserved_points):,} steps "
                "(each span keeps its highest point; exact at the peak)"
            )

    payload = TimelinePayload(
        id=timeline_id,
        source=history.source,
        title=_line(history.title, TITLE_LIMIT),
        device=TimelineDevice(history.device_name, history.device_index, history.device_total),
        created=time.time(),
        events_total=history.events_total,
        events_dropped=history.events_dropped,
        min_band_bytes=threshold,
        baseline=history.baseline,
        end=max(history.end, 1),
        peak=TimelinePeak(peak_bytes, peak_at, peak_reserved),
        bands=[Band(a.size, a.category, a.start, a.end, None) for a in big],
        small=[SmallPoint(at, ByCategory(*values)) for at, values in small_points],
        reserved=None if reserved_points is None else [SeriesPoint(at, b) for at, b in reserved_points],
        alive_at_peak=[],
        stacks=[],
        failed=None,
        notes=[],
    )
    holders = [Holder(size, count, category, None, False) for (category, _), (size, count, _a) in rows]
    if len(holders) > MAX_HOLDERS:
        rest = holders[MAX_HOLDERS:]
        holders = holders[:MAX_HOLDERS] + [
            Holder(sum(h.size for h in rest), sum(h.count for h in rest), "other", None, True)
        ]
        notes.append(f"alive at the peak: {len(rows):,} groups; the smallest {len(rest):,} summed in one row")
    payload.alive_at_peak = holders

    budget = MAX_PAYLOAD_BYTES - _BUDGET_MARGIN - len(json.dumps(payload.to_dict()))
    stacks = _Stacks(max(0, budget))
    if history.failed is not None:
        f = history.failed
        payload.failed = FailedAlloc(f.size, f.device_free, stacks.index(tuple(f.frames)))
    for holder, (_key, (_size, _count, alloc)) in zip(holders, rows):
        if alloc is not None and not holder.rest:
            holder.stack = stacks.index(alloc.frames)
    by_size = sorted(range(len(big)), key=lambda i: -big[i].size)
    for i in by_size:
        payload.bands[i].stack = stacks.index(big[i].frames)
    if stacks.refused:
        notes.append(f"{stacks.refused:,} call stacks left out to keep the payload under 1 MiB (see the export)")
    payload.stacks = stacks.items
    payload.notes = [_line(n) for n in notes[:_MAX_NOTES]]
    return payload


def _line(text: str, limit: int = _NOTE_LIMIT) -> str:
    lines = str(text).strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


# --- the output -----------------------------------------------------------------------------------------------


def to_json(payload: Union[TimelinePayload, Mapping[str, Any]]) -> Dict[str, Any]:
    """The JSON object of a payload (a dict is returned as it is)."""
    return payload.to_dict() if isinstance(payload, TimelinePayload) else dict(payload)


def source_text(payload: Mapping[str, Any], stack: Optional[int]) -> str:
    """ "model.py:42 in forward" / "In [5], line 3 in <module>" / "no user frame (linear.py:125)"."""
    stacks = payload.get("stacks") or []
    if stack is None or stack >= len(stacks):
        return "no stack recorded"
    found = stacks[stack]
    frames = found.get("frames") or []
    if found.get("source") is None:
        inner = frames[0] if frames else None
        if inner is None:
            return "no user frame"
        return f"no user frame ({inner['file'].rsplit('/', 1)[-1]}:{inner['line']} in {inner['name']})"
    frame = frames[found["source"]]
    if frame.get("cell") is not None:
        return f"In [{frame['cell']}], line {frame['line']} in {frame['name']}"
    return f"{frame['file']}:{frame['line']} in {frame['name']}"


def summary_text(payload: Union[TimelinePayload, Mapping[str, Any]], top: int = 5) -> str:
    """The text/plain form: the title, the peak, and the top `top` groups alive at the peak with their lines."""
    data = to_json(payload)
    peak = data["peak"]
    reserved = "" if peak.get("reserved") is None else f", reserved {format_bytes(peak['reserved'], 'fit')}"
    holders = data.get("alive_at_peak") or []
    lines = [
        f"Memory timeline ({data['source']}): {data['title']}",
        f"peak {format_bytes(peak['bytes'], 'fit')} at event {peak['at']:,} of {data['end']:,}{reserved}",
        f"alive at the peak, largest first (top {min(top, len(holders))} of {len(holders)} groups):",
    ]
    for holder in holders[:top]:
        size = format_bytes(holder["size"], "fit")
        if holder.get("rest"):
            lines.append(f"  {size:>12}  the rest ({holder['count']:,} allocations)")
            continue
        count = f" ×{holder['count']}" if holder["count"] > 1 else ""
        lines.append(f"  {size:>12}  {holder['category']}{count}: {source_text(data, holder.get('stack'))}")
    failed = data.get("failed")
    if failed:
        lines.append(
            f"failed allocation: {format_bytes(failed['size'], 'fit')} ({source_text(data, failed.get('stack'))})"
        )
    lines += [f"note: {n}" for n in data.get("notes") or ()]
    return "\n".join(lines)


def timeline_bundle(payload: Union[TimelinePayload, Mapping[str, Any]]) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    import html

    data = to_json(payload)
    text = summary_text(data)
    return {TIMELINE_MIME: data, "text/html": f"<pre>{html.escape(text)}</pre>", "text/plain": text}
