"""How far a running analysis has got, for a front end's progress line: what it does now and how many traces it has
done. The estimator knows no front end: it calls the request's `on_progress` with a Progress at each change (a new
phase, a trace begun, a trace done), and the caller draws it (the magic's line updated in place, magics.progress).

A callback that raises (Ctrl-C while it draws) stops the analysis there: it is called between traces, never inside
one, so nothing is left half done."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

# the phases, in the order an analysis runs them (each optional but the analysed batch's)
PHASES = (
    "building",  # the model built by name on the meta device
    "batch",  # the analysed batch traced
    "maximum",  # the search for the largest batch that fits
    "amp",  # the same step without AMP, for the saving
    "evaluation",  # the evaluation step (eval_batch=)
    "sequence",  # the longest sequence at each batch (search="seq")
    "levers",  # the step again with each lever that could make it fit
    "done",
)


@dataclass(frozen=True)
class Progress:
    """One update: the phase (one of PHASES), what it does now in words, the traces done so far, and the seconds
    since the analysis began."""

    phase: str
    doing: str
    traces: int
    elapsed: float

    def line(self) -> str:
        done = f"{self.traces} trace{'' if self.traces == 1 else 's'} done"
        return f"{self.doing} · {done} · {self.elapsed:.0f} s"


ProgressCallback = Callable[[Progress], None]


class ProgressReporter:
    """The analysis' side of `on_progress`: keeps the phase, the trace count and the start; shared by every plan of one
    analysis (dataclasses.replace keeps it), so the searches' traces count too. None callback: silent."""

    def __init__(self, callback: Optional[ProgressCallback], started: Optional[float] = None) -> None:
        self.callback = callback
        self.started = time.perf_counter() if started is None else started
        self.phase = "batch"
        self.doing = ""
        self.traces = 0

    def enter(self, phase: str, doing: str) -> None:
        """A new phase begins (`doing`: what it does, in words)."""
        self.phase, self.doing = phase, doing
        self._emit(doing)

    def tracing(self, batch_size: int) -> None:
        """A trace at `batch_size` begins."""
        self._emit(f"{self.doing}: tracing batch {batch_size}" if self.doing else f"tracing batch {batch_size}")

    def traced(self) -> None:
        self.traces += 1
        self._emit(self.doing or "traced")

    def finish(self) -> None:
        self.enter("done", "done")

    def _emit(self, doing: str) -> None:
        if self.callback is not None:
            self.callback(Progress(self.phase, doing, self.traces, time.perf_counter() - self.started))
