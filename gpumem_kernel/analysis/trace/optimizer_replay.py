"""The optimizer's steps traced once per analysis and replayed in its other traces.

The storages an optimizer step makes and frees (its state on the first step, its foreach temporaries on every step)
depend on the parameters, their gradients and the optimizer, never on the batch: the batch search's traces of one
plan all make the same ones. The first trace of a plan records its optimizer spans' events; the later traces emit
them in place of running `optimizer.step()` (a quarter of a language model's trace: one foreach call over every
parameter per update term, and the first step's state). The event stream, and so every figure, is the one a real
step gives; tests/analysis/test_optimizer_replay.py compares the two streams event by event.

Only the built-in torch optimizers are replayed, whose step touches nothing but its own storages; a step that frees
a storage it did not make, or state freed before the optimizer dies, is not recorded and runs for real. A replay
whose gradients differ from the recording's (which parameters have one, their shapes and dtypes) raises
OptimizerReplayMismatch: the trace runs again with real steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.trace.replicate import Alloc, Free, Window, emit_region
from gpumem_kernel.analysis.trace.plan import TraceError

REPLAYED_KINDS = ("adamw", "adam", "sgd", "sgd-momentum")  # analysis.trace.model_copy.make_optimizer's torch optimizers

GradSignature = Tuple[Optional[Tuple[Tuple[int, ...], str]], ...]


class OptimizerReplayMismatch(TraceError):
    """A replayed step's gradients are not those of the recorded one (a TraceError, so that the training loop
    passes it on as it is: analysis.trace.run reruns the trace with real steps)."""


@dataclass
class Recording:
    windows: List[Window]  # one per step, in order
    signatures: List[GradSignature]  # the gradients each recorded step updated
    survivors: List[Tuple[str, int]]  # refs of the storages alive after the last step, in the order they are freed


@dataclass
class OptimizerReplay:
    """Shared by the plans of one analysis (dataclasses.replace keeps it): the first eligible trace fills it."""

    recording: Optional[Recording] = None
    declined: str = ""  # why the first trace's steps cannot be replayed ("" while none was recorded)
    replays: int = 0  # traces that replayed it (tests read it)


def eligible(plan: Any, fake: bool) -> bool:
    return (
        fake
        and plan.optimizer_replay is not None
        and isinstance(plan.optimizer, str)
        and plan.optimizer in REPLAYED_KINDS
        and plan.step_fn is None
        and not plan.evaluation
    )


def signature(optimizer: Any) -> GradSignature:
    return tuple(
        None if p.grad is None else (tuple(p.grad.shape), str(p.grad.dtype))
        for group in optimizer.param_groups
        for p in group["params"]
    )


class Stepper:
    """The steps of the trace's optimizer copy: run and their gradients noted (`recording` None), or replayed. It
    replaces the copy's `step` (the copy is the trace's own), so that everything else sees the optimizer itself."""

    def __init__(self, optimizer: Any, tracker: Any, recording: Optional[Recording]) -> None:
        self.optimizer, self.tracker, self.recording = optimizer, tracker, recording
        self.run = optimizer.step
        self.signatures: List[GradSignature] = []
        self.born: List[int] = []  # sids of the replayed allocs, across steps
        optimizer.step = self.step

    def step(self, closure: Any = None) -> None:
        grads = signature(self.optimizer)
        self.signatures.append(grads)
        if self.recording is None:
            self.run(closure)
            return
        index = len(self.signatures) - 1
        if index >= len(self.recording.windows) or self.recording.signatures[index] != grads:
            raise OptimizerReplayMismatch(f"step {index + 1}'s gradients are not the recorded step's")
        bound = {("o", k): sid for k, sid in enumerate(self.born)}
        self.born += emit_region(self.tracker, self.recording.windows[index], bound, None, _no_tensor)

    def release(self) -> None:
        """Just before the copy is deleted: let it go (its state is freed by its deletion, as in any trace), and
        free the replayed state there."""
        del self.optimizer.step  # the instance's attribute: the class's step again, and no cycle through us
        self.optimizer = self.run = None
        if self.recording is not None:
            for ref in self.recording.survivors:
                self.tracker._on_free(self.born[ref[1]])


def _no_tensor(tag: Any) -> Any:
    raise OptimizerReplayMismatch("a recorded optimizer step made a tensor that leaves it")  # never recorded so


def record(tracker: Any, steps: int, signatures: List[GradSignature]) -> Tuple[Optional[Recording], str]:
    """The optimizer spans of a finished trace (its teardown included) as windows, or None and why not."""
    spans = [tracker.spans.get((s, 0, "optimizer")) for s in range(1, steps + 1)]
    if any(span is None for span in spans) or len(signatures) != steps:
        return None, "a step without its optimizer span"
    train_end = max(end for _, end in tracker.spans.values())
    born: Dict[int, int] = {}  # sid -> its ordinal among the optimizer's allocs
    windows: List[Window] = []
    for start, end in spans:  # type: ignore[misc]
        entries: List[Any] = []
        local: Dict[int, int] = {}
        for index in range(start, end):
            kind, sid = tracker.events[index]
            record = tracker.records[sid]
            if kind == "alloc":
                local[sid] = len(local)
                born[sid] = len(born)
                entries.append(Alloc(record.nbytes, record.role, record.host, None))
            elif sid in local:
                entries.append(Free(("f", local[sid])))
            elif sid in born:
                entries.append(Free(("o", born[sid])))
            else:
                return None, "a step frees a storage it did not make"
        mine = [m for m in tracker.markers if m.phase == "optimizer" and start <= m.index <= end]
        markers = [(m.index - start, m.kind, m.nbytes) for m in mine]
        windows.append(Window(entries, markers))
    inside = {index for start, end in spans for index in range(start, end)}  # type: ignore[misc]
    survivors: List[Tuple[int, int]] = []
    for sid, ordinal in born.items():
        freed = tracker.records[sid].free_index
        if freed is not None and freed in inside:
            continue
        if freed is not None and freed < train_end:
            return None, "a step's storage is freed before the optimizer dies"
        survivors.append((freed if freed is not None else len(tracker.events), ordinal))
    frees = sorted(freed for freed, _ in survivors)
    if frees and (frees[-1] == len(tracker.events) or frees[-1] - frees[0] != len(frees) - 1):
        return None, "the optimizer's state is not freed at once when it dies"  # the replay frees it at once
    ordered = [("o", ordinal) for _, ordinal in sorted(survivors)]
    return Recording(windows, list(signatures), ordered), ""
