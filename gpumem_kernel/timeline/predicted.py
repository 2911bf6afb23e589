"""The predicted timeline: the traced training step (analysis.trace, no GPU used) as a History.

`%gpumem analyze MODEL ... --timeline` and `predict_timeline(model, ...)` run the analysis with a stack hook:
the trace of the analysed batch records, at each storage's birth, the Python frames inside the training step
(the model's forward, the loss, the optimizer: the frames below `train_steps`, innermost first). The device
events of that trace, as the caching-allocator model replays them (analysis.trace_summary.replay_device), become the
History, one event per malloc or free:
- a band's size is the block the allocator model hands out (rounded to 512 B, or a whole unsplit block) and
  `requested` the storage's own bytes, so the History's peak is the analysis's `peak_allocated` for the same
  step exactly (both are the model's peak). The analysis's headline `peak` (the device footprint) adds the
  reserved cache and a CUDA context that does not exist yet: the timeline shows them as `peak.reserved` and a
  note, never as allocations;
- what the timeline covers is the whole trace: the model's states, then the two traced steps (the first creates
  the optimizer state and gradients, the second is the steady state), as the analysis's peak covers it;
- categories: the analysis's own (trace_summary._category), mapped to the schema's: buffers are drawn as parameters
  (the model's state), forward outputs kept for backward are activations, the autocast weight cache,
  temporaries and the cuBLAS/cuDNN workspaces are `other` (workspaces without a stack);
- storages the analysis keeps on the host (non-fused optimizers' `step` scalars) are not device allocations and
  are left out, as the analysis leaves them out of its device figures.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpumem_kernel.analysis import TraceEvents, TraceResult

from gpumem_kernel.analysis import train_steps
from gpumem_kernel.render.text import shown
from gpumem_kernel.render.units import format_bytes
from gpumem_kernel.timeline.frames import capture_stack
from gpumem_kernel.timeline.history import Alloc, Category, History, RawFrame

# analysis categories -> the timeline schema's
CATEGORY_MAP: Dict[str, Category] = {
    "parameter": "parameter",
    "buffer": "parameter",
    "gradient": "gradient",
    "optimizer_state": "optimizer_state",
    "input": "input",
    "activation": "activation",
    "autocast_cache": "other",
    "temporary": "other",
}
_DISPATCH_WRAPPERS = (
    os.path.join("torch", "_dynamo", "eval_frame.py"),
    os.path.join("torch", "_compile.py"),
    os.path.join("torch", "utils", "_python_dispatch.py"),
)
_WORKSPACE_FRAMES = {
    "cublas": (RawFrame("<cuBLAS workspace>", 0, "cuBLAS workspace (modelled, one per thread)"),),
    "cublaslt": (RawFrame("<cuBLASLt workspace>", 0, "cuBLASLt workspace (modelled, addmm with a bias)"),),
    "cudnn": (RawFrame("<cuDNN workspace>", 0, "cuDNN workspace (modelled, around a convolution)"),),
}
# The analysis's folder, and the file names of its modules that run inside a storage's birth (the storage tracker,
# the trace's dispatch and its modelled CUDA kernels) or around the step (the training loop, the model's copy,
# checkpointing, the entry point, the workbench): matched by name anywhere in the folder, whose layout changes
# (the names of both its flat and its folder-per-stage layouts are listed).
_ANALYSIS_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analysis", "")
_TRACKER_NAMES = frozenset(
    (
        "storage.py",
        "trace.py",
        "run.py",
        "trace_tracker.py",
        "tracker.py",
        "cuda_kernels.py",
        "training_loop.py",
        "model_copy.py",
        "checkpointing.py",
        "analyze.py",
        "workbench.py",
    )
)


def _is_dispatch_frame(file: str) -> bool:
    """The tracker's own frames and the torch wrappers that call a dispatch mode (torch._dynamo's disable)."""
    if file.startswith(_ANALYSIS_ROOT) and os.path.basename(file) in _TRACKER_NAMES:
        return True
    return file.endswith(_DISPATCH_WRAPPERS)


def stack_hook() -> Callable[[], Tuple[RawFrame, ...]]:
    """The hook the tracker calls at each storage birth: the frames inside the training step, innermost first,
    without the tracker's own frames; empty outside the step (the model's states, registered before it)."""
    stop = train_steps.__code__

    def capture() -> Tuple[RawFrame, ...]:
        frames = capture_stack(skip=2, stop=stop)  # from the tracker's _new on (stripped below)
        first = 0
        while first < len(frames) and _is_dispatch_frame(frames[first].file):
            first += 1
        return frames[first:]

    return capture


def history_from_trace(
    events: TraceEvents,
    title: str,
    *,
    device_name: Optional[str] = None,
    device_total: Optional[int] = None,
    notes: Optional[List[str]] = None,
) -> History:
    """The History of a trace's device events (one event index per malloc or free)."""
    records = events.records
    open_: Dict[Any, Alloc] = {}
    allocs: List[Alloc] = []
    reserved: List[Tuple[int, int]] = []
    workspaces = 0
    for index, event in enumerate(events.device):
        if event.kind == "alloc":
            if isinstance(event.handle, tuple):  # ("cublas" | "cublaslt", thread) | ("cublaslt" | "cudnn", n)
                category: Category = "other"
                frames: Tuple[RawFrame, ...] = _WORKSPACE_FRAMES.get(event.handle[0], ())
                workspaces += 1
            else:
                record = records[event.handle]
                category = CATEGORY_MAP.get(events.categories.get(record.sid, "temporary"), "other")
                frames = tuple(record.stack or ())
            alloc = Alloc(event.size, category, index, None, frames, event.address, event.nbytes)
            open_[event.handle] = alloc
            allocs.append(alloc)
        else:
            alloc = open_.pop(event.handle)
            alloc.end = index
        if not reserved or reserved[-1][1] != event.reserved:
            reserved.append((index, event.reserved))
    all_notes = list(notes or [])
    if workspaces:
        all_notes.append(f"{workspaces:,} cuBLAS/cuBLASLt/cuDNN workspace allocations (modelled) are drawn as other")
    return History(
        source="predicted",
        title=title,
        device_name=device_name,
        device_index=None,
        device_total=device_total,
        allocs=allocs,
        end=max(1, len(events.device)),
        baseline=0,
        reserved=reserved,
        notes=all_notes,
    )


class PredictedTimeline:
    """`predict_timeline(...)`: the analysis report, the History of its traced step and the payload; shows the
    timeline in a notebook (`display(t)` or as a cell's last value)."""

    def __init__(self, report: Any, history: History) -> None:
        from gpumem_kernel.timeline.payload import build_payload

        self.report = report
        self.history = history
        self.payload = build_payload(history)  # kept in the store: timeline_export can name it
        self.id = self.payload.id

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        from gpumem_kernel.timeline.payload import timeline_bundle

        return timeline_bundle(self.payload)

    def __str__(self) -> str:
        from gpumem_kernel.timeline.payload import summary_text

        return summary_text(self.payload)

    def save(self, path: str) -> str:
        """Write the full history: a .pickle (PyTorch's snapshot, for pytorch.org/memory_viz) or a .csv."""
        from gpumem_kernel.timeline.export import save

        return save(self.history, path)


def title_of(report: Any) -> str:
    settings = report.settings
    parts = [f"{report.model_name}, batch {settings.get('batch_size')}", str(settings.get("optimizer"))]
    parts.append(settings.get("amp") or "fp32")
    if (settings.get("grad_accum") or 1) > 1:
        parts.append(f"grad accum {settings['grad_accum']}")
    if settings.get("checkpointing"):
        parts.append("checkpointing")
    return ", ".join(parts) + " (traced step)"


def notes_for(report: Any, trace: TraceResult, peak: int) -> List[str]:
    """What the timeline shows, against the analysis's figures."""
    notes = [
        "predicted from the traced step on the CPU (no GPU used): the model's states, then 2 training steps "
        "(the first creates gradients and optimizer state), through the caching-allocator model; sizes are its "
        "blocks (rounded to 512 B)",
        "the model's parameters and buffers (and the state of an optimizer you passed) exist before the step: no stack",
    ]
    if report.engine == "measured":
        measured = format_bytes(report.peak_allocated_bytes, "fit")
        notes.append(
            f"the analysis measured this step on the GPU (peak_allocated {measured}); this timeline is its trace"
        )
    elif peak != report.peak_allocated_bytes:
        notes.append(
            f"the analysis's per-rank peak_allocated is {format_bytes(report.peak_allocated_bytes, 'fit')} "
            f"({report.settings.get('strategy')} sharding); this timeline is one device's whole step"
        )
    else:
        footprint = format_bytes(report.peak_bytes, "fit")
        extra = "reserved cache and the CUDA context" if report.device.context_to_add else "reserved cache"
        notes.append(f"peak = the analysis's peak_allocated; its footprint {footprint} adds the {extra}")
    return notes


def predict(model: Any, **analyze_kwargs: Any) -> Tuple[Any, History]:
    """(the analysis report, the History of its traced step at `batch_size`)."""
    from gpumem_kernel.analysis import analyze

    kept: List[TraceResult] = []
    report = analyze(model, stack_hook=stack_hook(), on_trace=kept.append, **analyze_kwargs)
    trace = kept[0]
    assert trace.timeline is not None
    events = trace.timeline
    info = report.device
    history = history_from_trace(
        events,
        title_of(report),
        device_name=info.name if info.source != "none" else None,
        device_total=info.total_bytes,
    )
    peak = trace.device.peak_allocated
    history.notes = notes_for(report, trace, peak) + history.notes
    trace.timeline = None
    return report, history


def predict_timeline(model: Any, **analyze_kwargs: Any) -> PredictedTimeline:
    """The predicted memory timeline of one training step of `model` (the arguments of `analyze`, batch_size
    required): what is alive over the step and which line of your code allocated it. `display()` it, or
    `.save("step.pickle")` for pytorch.org/memory_viz, `.save("step.csv")`; `.report` is the analysis."""
    report, history = predict(model, **analyze_kwargs)
    return PredictedTimeline(report, history)


SAVE_SUFFIXES = (".pickle", ".pkl", ".csv")


def option_problem(
    *,
    timeline: bool,
    save: Optional[str],
    world_size: int = 1,
    strategy: Optional[str] = None,
    json: bool = False,
    advise: bool = False,
) -> Optional[str]:
    """One line saying what is wrong with `--timeline`/`--save` (magic and CLI alike), or None; checked before the
    analysis runs, so a bad file name does not cost a trace."""
    if save is not None and not timeline:
        return "--save writes the timeline's history: add --timeline"
    if not timeline:
        return None
    if advise:
        return "--advise and --timeline: one at a time"
    if json and save is None:
        return "with JSON output, --timeline needs --save FILE.pickle|.csv (the timeline is an output of its own)"
    if world_size > 1 or strategy is not None:
        return (
            "--timeline is one device's whole step; it does not model --world-size/--strategy sharding: "
            "drop one of them"
        )
    if save is not None:
        if not save.lower().endswith(SAVE_SUFFIXES):
            return f"--save {shown(save)}: a .pickle (PyTorch's memory snapshot, for pytorch.org/memory_viz) or a .csv"
        folder = os.path.dirname(os.path.abspath(save))
        if not os.path.isdir(folder):
            return f"--save {shown(save)}: the folder {shown(folder)} does not exist"
    return None
