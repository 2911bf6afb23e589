"""What would make it fit: the analysed step again with each lever the analysis can model set, one at a time, each a
separate analysis of its own (so each row's peak is what `analyze()` with that lever gives, to the byte), the rows
ordered by what the lever costs. Nothing here touches the user's model or optimizer: each analysis works on copies.

The levers: AMP bf16, gradient checkpointing, a smaller micro-batch with gradient accumulation keeping the effective
batch, an 8-bit optimizer (bitsandbytes' block-wise state). A lever the request has set already has no row."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.analysis.report.report import AnalysisReport
from gpumem_kernel.analysis.request.progress import Progress
from gpumem_kernel.analysis.request.request import AnalysisRequest

_EIGHT_BIT = {"adamw": "adamw8bit", "adam": "adam8bit"}


@dataclass(frozen=True)
class Lever:
    """One change the analysis can trace: its name, the flags that set it, what it costs, and the request's fields
    with it set (None: it does not apply, or is set already)."""

    name: str
    cost: str
    changes: Callable[[AnalysisRequest], Optional[Dict[str, Any]]]
    flags: Callable[[Dict[str, Any]], str]


def _amp(request: AnalysisRequest) -> Optional[Dict[str, Any]]:
    return {"amp": "bf16"} if request.amp is None and request.step is None else None


def _checkpointing(request: AnalysisRequest) -> Optional[Dict[str, Any]]:
    return {"checkpointing": True} if not request.checkpointing and request.step is None else None


def _micro_batch(request: AnalysisRequest) -> Optional[Dict[str, Any]]:
    """Half the batch (or 1 for an odd one), twice the accumulation: the same samples per optimizer step."""
    batch = request.batch_size
    if batch < 2 or request.step is not None:
        return None
    micro = batch // 2 if batch % 2 == 0 else 1
    return {"batch_size": micro, "grad_accum": request.grad_accum * (batch // micro)}


def _eight_bit(request: AnalysisRequest) -> Optional[Dict[str, Any]]:
    optimizer = request.optimizer
    if not isinstance(optimizer, str) or optimizer.lower() not in _EIGHT_BIT or request.step is not None:
        return None
    return {"optimizer": _EIGHT_BIT[optimizer.lower()]}


LEVERS = (
    Lever("8-bit optimizer", "optimizer state in 8 bits (bitsandbytes on the GPU)", _eight_bit,
          lambda c: f"--optimizer {c['optimizer']}"),
    Lever("AMP bf16", "activations in bf16 (an Ampere or newer GPU)", _amp, lambda c: "--amp bf16"),
    Lever("smaller micro-batch", "more, smaller steps per update: slower where the GPU is underused", _micro_batch,
          lambda c: f"-b {c['batch_size']} --accum {c['grad_accum']}"),
    Lever("gradient checkpointing", "the blocks' forward runs again in backward (about a third more compute)",
          _checkpointing, lambda c: "--checkpointing"),
)  # fmt: skip


@dataclass
class AdviceRow:
    """One lever's analysis: its peak footprint and peak allocated, the largest batch it allows (of the micro-batch
    for that lever) and whether the analysed batch then fits."""

    lever: str
    flags: str
    cost: str
    changes: Dict[str, Any]
    peak_bytes: int
    peak_allocated_bytes: int
    maximum: Optional[int]
    status: str  # the analysed (micro-)batch's: fits | tight | will-not-fit | unknown


@dataclass
class Advice:
    """The analysed step's own figures and one row per lever, cheapest first."""

    peak_bytes: int
    status: str
    rows: List[AdviceRow] = field(default_factory=list)

    def to_payload(self) -> Dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "status": self.status,
            "rows": [{k: v for k, v in vars(r).items()} for r in self.rows],
        }

    def text(self) -> str:
        from gpumem_kernel.render.units import format_bytes

        analysed = format_bytes(self.peak_bytes, "fit")
        lines = [f"What makes it fit (each lever traced on its own; as analysed: {analysed}, {self.status})"]
        for r in self.rows:
            peak, maximum = format_bytes(r.peak_bytes, "fit"), str(r.maximum)
            lines.append(f"  {r.lever:<24} {peak:>10}  max batch {maximum:<5} {r.status:<13} {r.flags}  ({r.cost})")
        return "\n".join(lines)

    def bundle(self) -> Dict[str, str]:
        return {"text/plain": self.text(), "text/html": f"<pre class='gpumem-advice'>{html.escape(self.text())}</pre>"}


def advise(model: Any, request: AnalysisRequest, report: AnalysisReport) -> Advice:
    """One row per lever that applies: `analyze(model, request with that lever)`, `report` the request's own; the
    progress told to the request's on_progress as the phase "levers" ("trying levers k of n")."""
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    levers = [(lever, lever.changes(request)) for lever in LEVERS]
    chosen = [(lever, changes) for lever, changes in levers if changes is not None]
    heard = _LeverProgress(request.on_progress, len(chosen))
    rows = []
    for k, (lever, changes) in enumerate(chosen, 1):
        heard.lever = f"trying levers {k} of {len(chosen)} ({lever.name})"
        lever_report = analyze(model, replace(request, on_progress=heard, **changes))
        heard.finished()
        rows.append(
            AdviceRow(
                lever.name,
                lever.flags(changes),
                lever.cost,
                changes,
                lever_report.peak_bytes,
                lever_report.peak_allocated_bytes,
                lever_report.recommendations.maximum,
                lever_report.recommendations.current.status,
            )
        )
    return Advice(report.peak_bytes, report.recommendations.current.status, rows)


class _LeverProgress:
    """The levers' analyses as one phase: their updates relabelled, their traces counted on from the ones before."""

    def __init__(self, callback: Optional[Callable[[Progress], None]], total: int) -> None:
        self.callback = callback
        self.started = time.perf_counter()
        self.lever = ""
        self.before = 0  # traces of the levers done
        self.last = 0

    def __call__(self, update: Progress) -> None:
        self.last = update.traces
        if self.callback is not None and update.phase != "done":
            doing = f"{self.lever}: {update.doing}"
            elapsed = time.perf_counter() - self.started
            self.callback(Progress("levers", doing, self.before + update.traces, elapsed))

    def finished(self) -> None:
        self.before += self.last
        self.last = 0
