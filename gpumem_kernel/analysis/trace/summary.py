"""Reading a trace: live bytes along the event stream (peaks per step and phase, the breakdown by category at the
peak) and the device replay through the caching-allocator model with CUDA's workspaces inserted."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.allocator.caching_allocator import AllocatorResult, CachingAllocatorModel, Event
from gpumem_kernel.analysis.trace.llm_facts import logits_trace
from gpumem_kernel.analysis.allocator.storage import Record
from gpumem_kernel.analysis.trace.plan import CATEGORIES, DeviceEvent, TraceEvents, TracePlan, TraceResult
from gpumem_kernel.analysis.trace.tracker import CUDNN_WORKSPACE_CAP, Marker


@dataclass
class TracedStream:
    """What summarize() reads of a tracker: every storage's record, the alloc and free events in order, the phases'
    spans and the op markers (where CUDA's workspaces go). A search can summarize one it predicted from others
    (analysis.search.size_reuse) as it summarizes a trace's; it has no logits watch (the search needs none)."""

    records: List[Record]
    events: List[Tuple[str, int]]
    spans: Dict[Tuple[int, int, str], Tuple[int, int]]
    markers: List[Marker]


def _category(record: Record, forward_end: Dict[Tuple[int, int], int]) -> str:
    if record.role is not None:
        return record.role
    if record.phase == "forward":
        end = forward_end.get((record.step, record.micro))
        if end is not None and _alive(record, end):
            return "activation"
    return "temporary"


def _alive(record: Record, index: int) -> bool:
    """Alive just after event `index - 1`, i.e. at stream position `index`."""
    return record.alloc_index < index and (record.free_index is None or record.free_index >= index)


def summarize(tracker: Any, batch_size: int, fake: bool, plan: TracePlan) -> TraceResult:
    records: List[Record] = tracker.records
    spans = tracker.spans
    last = plan.steps
    forward_end = {(s, m): end for (s, m, phase), (_, end) in spans.items() if phase == "forward"}

    # live bytes along the stream; per-step and per-phase peaks of the last step
    step_range = {
        s: (min(v[0] for k, v in spans.items() if k[0] == s), max(v[1] for k, v in spans.items() if k[0] == s))
        for s in range(1, last + 1)
    }
    phase_of = _phase_index(spans, last)
    step_peaks = [0] * (last + 1)
    phase_peaks: Dict[str, int] = {}
    peak_index, peak_value = 0, -1
    first_last = step_range[last][0]
    # live bytes after each event (a hundred thousand events for an LLM: one pass, no per-event step loop)
    live_at = list(
        accumulate(records[sid].nbytes if kind == "alloc" else -records[sid].nbytes for kind, sid in tracker.events)
    )
    for s, (start, end) in step_range.items():  # events start .. end - 1 are the step's
        step_peaks[s] = max(max(live_at[start:end], default=0), 0)
    for index in range(first_last, min(step_range[last][1], len(live_at))):
        live = live_at[index]
        phase = phase_of.get(index, "other")
        phase_peaks[phase] = max(phase_peaks.get(phase, 0), live)
        if live > peak_value:
            peak_value, peak_index = live, index + 1
    if peak_value < 0:  # a step without any event: the live set never changed
        peak_index, peak_value = first_last, live_at[first_last - 1] if first_last else 0

    breakdown = {c: 0 for c in CATEGORIES}
    for record in records:
        if _alive(record, peak_index):
            breakdown[_category(record, forward_end)] += record.nbytes

    def alive_bytes(index: int, role: str, device_only: bool = True) -> int:
        return sum(r.nbytes for r in records if r.role == role and _alive(r, index) and not (device_only and r.host))

    end = step_range[last][1]
    micro_last = 0 if plan.evaluation else min(plan.grad_accum, 2) - 1
    opt_start, opt_end = spans.get((last, 0, "optimizer"), (end, end))  # none in the evaluation step
    fwd_start, fwd_end = spans[(last, micro_last, "forward")]
    activations = sum(
        r.nbytes
        for r in records
        if r.phase == "forward" and r.step == last and r.micro == micro_last and r.role is None and _alive(r, fwd_end)
    )
    cast = sum(r.nbytes for r in records if r.role == "autocast_cache" and r.step == last and _alive(r, fwd_end))
    opt_live_start = live_at[opt_start - 1] if opt_start else 0
    log: Optional[List[DeviceEvent]] = [] if plan.stack_hook is not None else None
    device, cublas, cudnn = replay_device(tracker, plan, log)
    timeline = None
    if log is not None:
        timeline = TraceEvents(records, log, {r.sid: _category(r, forward_end) for r in records})
    return TraceResult(
        batch_size=batch_size,
        fake=fake,
        peak_live=peak_value,
        peak_phase=phase_of.get(peak_index - 1, "other"),
        step_peaks=step_peaks[1:],
        phase_peaks=phase_peaks,
        breakdown=breakdown,
        parameters=alive_bytes(end, "parameter"),
        buffers=alive_bytes(end, "buffer"),
        gradients=alive_bytes(opt_start, "gradient"),
        optimizer_state=alive_bytes(end, "optimizer_state"),
        optimizer_host=sum(r.nbytes for r in records if r.role == "optimizer_state" and r.host and _alive(r, end)),
        optimizer_transient=max(0, phase_peaks.get("optimizer", 0) - opt_live_start),
        activations=activations,
        autocast_cache=cast,
        input=sum(r.nbytes for r in records if r.role == "input" and r.step == last and _alive(r, fwd_start)),
        device=device,
        cublas_bytes=cublas,
        cudnn_peak_bytes=cudnn,
        timeline=timeline,
        logits=logits_trace(tracker, last, micro_last, peak_index),
        stream=TracedStream(records, tracker.events, spans, tracker.markers),
    )


def _phase_index(spans: Dict[Tuple[int, int, str], Tuple[int, int]], last: int) -> Dict[int, str]:
    """event index -> phase name, for the last step."""
    result: Dict[int, str] = {}
    for (step, _, phase), (start, end) in spans.items():
        if step == last:
            for index in range(start, end):
                result[index] = phase
    return result


def replay_device(
    tracker: Any, plan: TracePlan, log: Optional[List[DeviceEvent]] = None
) -> Tuple[AllocatorResult, int, int]:
    """Replay the device-side events through the allocator model, adding the cuBLAS workspace (one per
    thread that runs a matmul: the forward thread and the autograd engine's device thread), cuBLASLt's for an
    addmm with a bias (kept per thread, or around each call, by torch version) and a cuDNN workspace around
    each convolution (an estimate, capped). The second value is the workspaces kept for good. With `log`,
    every malloc and free is appended to it in order (the predicted timeline). The result keeps the stream it
    replayed (`events`) for the replay under the device's limit (engines.TracedEngine)."""
    model = CachingAllocatorModel(plan.expandable_segments)
    stream: List[Event] = []

    def malloc(handle: Any, nbytes: int) -> None:
        stream.append(("alloc", handle, nbytes))
        block = model.malloc(handle, nbytes)
        if log is not None and block is not None:
            log.append(DeviceEvent("alloc", handle, nbytes, block.size, block.address, model.reserved))

    def free(handle: Any) -> None:
        if log is not None and handle in live:
            log.append(DeviceEvent("free", handle, reserved=model.reserved))
        stream.append(("free", handle, 0))
        model.free(handle)

    live = model.live_handles
    records: List[Record] = tracker.records
    markers = sorted(tracker.markers, key=lambda m: m.index)
    cublas_threads: set = set()
    lt_threads: set = set()
    cudnn_peak = 0
    marker_at = 0
    synthetic = 0

    def apply_markers(upto: int) -> None:
        nonlocal marker_at, cudnn_peak, synthetic
        while marker_at < len(markers) and markers[marker_at].index <= upto:
            marker = markers[marker_at]
            marker_at += 1
            thread = "backward" if marker.phase == "backward" else "main"
            if marker.kind in ("cublas", "cublaslt") and thread not in cublas_threads and plan.cublas_bytes:
                cublas_threads.add(thread)  # a cuBLASLt handle is the thread's cuBLAS handle, workspace and all
                malloc(("cublas", thread), plan.cublas_bytes)
            if marker.kind == "cublaslt" and plan.cublaslt_bytes and thread not in lt_threads:
                lt_threads.add(thread)
                malloc(("cublaslt", thread), plan.cublaslt_bytes)
            elif marker.kind == "cublaslt" and plan.cublaslt_call_bytes:
                synthetic += 1
                malloc(("cublaslt", synthetic), plan.cublaslt_call_bytes)
                free(("cublaslt", synthetic))
            elif marker.kind == "cudnn" and plan.cudnn and marker.nbytes:
                size = min(marker.nbytes, CUDNN_WORKSPACE_CAP)
                cudnn_peak = max(cudnn_peak, size)
                synthetic += 1
                malloc(("cudnn", synthetic), size)
                free(("cudnn", synthetic))
            elif marker.kind == "empty_cache":  # the user's step calls torch.cuda.empty_cache()
                model.empty_cache()

    count = len(markers)
    append, model_malloc, model_free = stream.append, model.malloc, model.free
    for index, (kind, sid) in enumerate(tracker.events):
        if marker_at < count and markers[marker_at].index <= index:
            apply_markers(index)
        record = records[sid]
        if record.host:
            continue
        if log is not None:
            if kind == "alloc":
                malloc(sid, record.nbytes)
            else:
                free(sid)
        elif kind == "alloc":  # malloc() and free() above, inline: a trace has tens of thousands of events
            nbytes = record.nbytes
            append(("alloc", sid, nbytes))
            model_malloc(sid, nbytes)
        else:
            append(("free", sid, 0))
            model_free(sid)
    apply_markers(len(tracker.events))
    kept = len(cublas_threads) * plan.cublas_bytes + len(lt_threads) * plan.cublaslt_bytes
    result = model.result()
    result.events = stream
    return result, kept, cudnn_peak
