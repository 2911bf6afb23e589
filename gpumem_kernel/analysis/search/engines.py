"""The two engines behind one report, as the batch search sees them: point(batch) -> the step's peak
footprint at that batch (per rank), or None where it cannot run. Traced: fake CPU tensors replayed through the
allocator model (under the device's limit when it goes over: the allocator's last resort), or the stream predicted
from the batches traced before (analysis.search.size_reuse), the search's answer traced to confirm it; measured:
real steps on the GPU (analysis.measure.real_steps)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterable, Optional, Set, Tuple

from gpumem_kernel.analysis.allocator.caching_allocator import replay
from gpumem_kernel.analysis.measure.real_steps import measure_step_peaks
from gpumem_kernel.analysis.model.model_states import Sharding
from gpumem_kernel.analysis.search.size_reuse import AFFINE, SizeFit
from gpumem_kernel.analysis.trace.run import run_trace
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult
from gpumem_kernel.analysis.trace.tracker import heap_frozen


SIZE_REUSE = True  # the searches predict streams from the sizes traced before (size_reuse); False: trace every one


@dataclass
class Point:
    batch_size: int
    allocated: int
    reserved: Optional[int]
    footprint: int  # reserved (or allocated) + context, per rank
    engine: str
    trace: Optional[TraceResult] = None
    retries: int = 0  # the allocator freed its cache this many times to fit the device (last resort)


class TraceMemo:
    """The traces of one step by batch, as run_trace returned them (stream and device events kept), for the analyses
    that trace that same step: an analysis and those rows of what makes it fit that change only what a trace does
    not read (pipeline.advice). Each engine settles a copy of its own."""

    def __init__(self) -> None:
        self._traces: Dict[int, TraceResult] = {}

    def get(self, batch: int) -> Optional[TraceResult]:
        kept = self._traces.get(batch)
        return None if kept is None else _own_copy(kept)

    def put(self, batch: int, trace: TraceResult) -> None:
        self._traces[batch] = _own_copy(trace)


def _own_copy(trace: TraceResult) -> TraceResult:
    """The result with the parts an engine replaces or empties (settle, the last resort) its own."""
    copied = copy.copy(trace)
    copied.device = copy.copy(trace.device)
    copied.breakdown = dict(trace.breakdown)
    copied.notes = list(trace.notes)
    return copied


class TracedEngine:
    """point(batch) from a trace, or from the stream predicted by the batches traced before it (size_reuse.SizeFit,
    with `reuse`); confirm() traces the predicted batches a search's answer rests on."""

    name = "traced"

    def __init__(
        self,
        plan: TracePlan,
        context: int,
        sharding: Sharding,
        limit: Optional[int] = None,
        reuse: Optional[bool] = None,
        on_trace: Optional[Callable[[TraceResult], None]] = None,
        memo: Optional[TraceMemo] = None,
    ) -> None:
        self.plan, self.context, self.sharding = plan, context, sharding
        self.memo = memo  # traces of this plan that another analysis ran (TraceMemo)
        self.limit = limit  # the device limit the search uses (None: the replay is never limited)
        self.cache: Dict[int, Optional[Point]] = {}
        self.errors: Dict[int, str] = {}
        reuse = SIZE_REUSE if reuse is None else reuse
        self.fit: Optional[SizeFit] = SizeFit(AFFINE) if reuse else None
        self.predicted: Set[int] = set()  # batches whose point came from a predicted stream
        self.traces = 0  # real traces run
        self.agreed = True  # the last trace's stream was the one the fit predicted
        self.on_trace = on_trace  # told of each real trace while its stream is still there

    def point(self, batch: int, stack_hook: Optional[Callable[[], Any]] = None) -> Optional[Point]:
        if batch not in self.cache:
            guess = self.fit.predict(batch, self.plan) if self.fit is not None and stack_hook is None else None
            if guess is not None:
                self.predicted.add(batch)
                self.cache[batch] = self.settle(batch, guess)
            else:
                self.cache[batch] = self._traced(batch, stack_hook)
        return self.cache[batch]

    def _traced(self, batch: int, stack_hook: Optional[Callable[[], Any]]) -> Optional[Point]:
        plan = self.plan if stack_hook is None else replace(self.plan, stack_hook=stack_hook)
        memo = self.memo if stack_hook is None else None  # a hooked trace is the caller's, events and all
        trace = memo.get(batch) if memo is not None else None
        if trace is None:
            try:
                trace = run_trace(plan, batch, fake=True)
            except TraceError as exc:
                if not self.cache:
                    raise  # the user's own batch size must trace
                self.errors[batch] = str(exc)  # e.g. BatchNorm at batch 1: the search treats it as not fitting
                return None
            self.traces += 1
            if memo is not None:
                memo.put(batch, trace)
        self.agreed = self.fit.add(batch, trace) if self.fit is not None else True
        if self.on_trace is not None:
            self.on_trace(trace)
        return self.settle(batch, trace)

    def settle(self, batch: int, trace: TraceResult) -> Point:
        """The point of a trace (or a predicted one): per rank, under the device's limit as a last resort."""
        b = trace.breakdown
        # the breakdown counts state outside the caching allocator too (paged state, host `step` scalars): a rank
        # saves only the share of what the device holds
        on_device = max(0, b["optimizer_state"] - trace.optimizer_host)
        saving = self.sharding.saving(b["parameter"], b["gradient"], on_device)
        allocated = trace.device.peak_allocated - saving
        reserved = trace.device.peak_reserved - saving
        point = self._last_resort(Point(batch, allocated, reserved, reserved + self.context, "traced", trace), saving)
        # the streams are only needed here: do not keep them for every cached point
        trace.device.events = []
        trace.stream = None
        return point

    def confirm(self, batches: Iterable[int]) -> bool:
        """Trace the predicted ones of `batches` (the search's answer): True when each trace gives the predicted
        point; else prediction stops and every predicted point is dropped, for the search to run again on traces."""
        for batch in dict.fromkeys(batches):
            if batch not in self.predicted:
                continue
            guess = self.cache.pop(batch)
            self.predicted.discard(batch)
            real = self._traced(batch, None)
            self.cache[batch] = real
            if real is None or guess is None or _figures(real) != _figures(guess) or not self.agreed:
                self.stop_reuse()
                return False
        return True

    def stop_reuse(self) -> None:
        self.fit = None
        for batch in self.predicted:
            self.cache.pop(batch, None)
        self.predicted.clear()

    def _last_resort(self, point: Point, saving: int) -> Point:
        """The last resort: over the limit, replay the stream again with the device's limit, as the real allocator
        frees its cached segments and retries before it raises (allocator.CachingAllocatorModel._make_room).
        It fits when that replay has no OOM: its figures replace the unlimited ones. The allocator may
        reserve the limit less the context, plus what sharding saves (footprint = reserved - saving + context)."""
        trace = point.trace
        if self.limit is None or point.footprint <= self.limit or trace is None or not trace.device.events:
            return point
        room = self.limit - self.context + saving
        if requested_peak(trace.device.events) > room:
            return point  # more bytes in use at once than the device holds: no freeing of its cache makes room
        with heap_frozen():  # the replay's blocks, many and short-lived
            limited = replay(trace.device.events, self.plan.expandable_segments, room)
        if not limited.fits:
            return point  # over: the unlimited figures say by how much
        trace.device = limited
        reserved = limited.peak_reserved - saving
        allocated = limited.peak_allocated - saving
        return replace(
            point, allocated=allocated, reserved=reserved, footprint=reserved + self.context, retries=limited.retries
        )


def requested_peak(events: Iterable[Tuple[str, Any, int]]) -> int:
    """The most bytes the stream's allocations ask for at once: what any allocator, its cache emptied, must hold
    (each block it hands out is at least the bytes asked)."""
    asked: Dict[Any, int] = {}
    live = peak = 0
    for kind, handle, nbytes in events:
        if kind == "alloc":
            asked[handle] = nbytes
            live += nbytes
            peak = max(peak, live)
        else:
            live -= asked.pop(handle, 0)
    return peak


class MeasuredEngine:
    """Real steps on a copy of the model on the GPU. Written for CUDA builds; tested with the `gpu` marker."""

    name = "measured"

    def __init__(self, plan: TracePlan, device: Any, sharding: Sharding, states: Tuple[int, int, int]) -> None:
        self.plan, self.device, self.sharding, self.states = plan, device, sharding, states
        self.cache: Dict[int, Optional[Point]] = {}

    def point(self, batch: int) -> Optional[Point]:
        if batch not in self.cache:
            measured = measure_step_peaks(self.plan, batch, self.device)
            if measured is None:
                self.cache[batch] = None
            else:
                allocated, reserved = measured
                saving = self.sharding.saving(*self.states)
                self.cache[batch] = Point(batch, allocated - saving, reserved - saving, reserved - saving, "measured")
        return self.cache[batch]


def _figures(point: Point) -> Tuple[int, Optional[int], int, int]:
    return point.allocated, point.reserved, point.footprint, point.retries


def retry_note(point: Point) -> Optional[str]:
    """The report's line for a batch that fits only through the allocator's last resort."""
    if not point.retries:
        return None
    times = "once" if point.retries == 1 else f"{point.retries} times"
    return (
        f"batch {point.batch_size} fits after the allocator frees its cache {times} (release_cached_blocks): "
        "expect slower steps, consider expandable_segments:True in PYTORCH_CUDA_ALLOC_CONF"
    )
