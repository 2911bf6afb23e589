"""Searching the maximum batch: from the same first batch (SEED) whatever batch is analysed, grow until a
batch goes over the device limit, then close the bracket; and the linear fit of footprint against batch size."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis.search.engines import Point
from gpumem_kernel.analysis.report.report import Fit

MAX_BATCH = 1 << 20  # search cap: past this the answer is "at least"


def _fit(points: Sequence[Point]) -> Optional[Fit]:
    """Least-squares line of footprint against batch size, with the worst relative residual."""
    xs = [p.batch_size for p in points]
    if len(set(xs)) < 2:
        return None
    ys = [p.footprint for p in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    residual = None
    if n > 2:
        residual = max(abs(y - (intercept + slope * x)) / y for x, y in zip(xs, ys) if y)
    return Fit(intercept, slope, residual, n)


@dataclass
class Search:
    points: List[Point]
    maximum: Optional[int]
    extrapolated: bool
    note: str
    fit: Optional[Fit]


SEED = 8  # the search's first batch, whatever batch is analysed: the maximum is the model's, not the -b's
GROWTH = 64  # until a batch goes over the limit, one step grows the largest fitting batch at most 64-fold
CLOSE = 200  # the bracket is closed when it is at most 1/200 of the batch wide (0.5%, well inside the ±10%)
TRACED_RUNS = 40  # traces a search may make (fake tensors: tens of milliseconds each for small models)
MEASURED_RUNS = 14  # real three-step runs a search may make on the GPU
NOTHING_FITS = (
    "even batch 1 does not fit: %gpumem analyze … --advise traces what would "
    "(AMP, checkpointing, an 8-bit optimizer, LoRA, sharding…)"
)


def search_maximum(engine: Any, limit: Optional[int], runs: int = TRACED_RUNS) -> Search:
    """The largest batch whose footprint fits `limit`, found the same way whatever batch the user analyses.

    From batch SEED it grows (along the line through the two largest fitting batches, at most GROWTH-fold;
    doubling while the footprint is flat) until a batch goes over the limit, then closes the bracket to 0.5%
    of the batch (exact below 200): secant steps alternating with bisection, so a poor line costs a few runs
    and never a wrong answer. Where SEED is over, batch 1 runs next: over, nothing fits (one run, not a halving
    down to it); fitting, the line through batch 1 and SEED aims at the maximum (a large model's few samples).
    A batch 1 that cannot run (BatchNorm) is left aside until batch 2 is over too.
    Every candidate is run, none is read off the line; a batch that cannot run (an OOM on the GPU, a trace
    error such as BatchNorm at batch 1) counts as over. After `runs` runs the answer is the largest batch
    that fit; if nothing has gone over by then, the line through the largest runs is extrapolated and the
    answer says so."""
    if limit is None:
        return Search([], None, False, "no device limit: pass target= or memory= to get batch sizes", None)
    bracket = _Bracket(engine, limit)
    maximum, extrapolated = bracket.close(runs)
    confirm = getattr(engine, "confirm", None)  # a traced engine's predicted points: the answer is traced
    if confirm is not None and not confirm(bracket.answer(maximum, extrapolated)):
        bracket = _Bracket(engine, limit)  # a prediction was off: the same search on traces alone
        maximum, extrapolated = bracket.close(runs)
    ordered = sorted(bracket.points.values(), key=lambda p: p.batch_size)
    return Search(ordered, maximum, extrapolated, bracket.note(maximum, extrapolated, runs), _fit(ordered))


def nothing_fits(one: Point) -> Search:
    """The search's answer where batch 1 (`one`, traced) is over the limit: maximum 0, as search_maximum ends
    (a bracket whose top is batch 1), without its runs from SEED down."""
    return Search([one], 0, False, NOTHING_FITS, None)


class _Bracket:
    """The runs of one search: the points that ran, the batches that could not, and the next candidate."""

    def __init__(self, engine: Any, limit: int) -> None:
        self.engine, self.limit = engine, limit
        self.points: Dict[int, Point] = {}
        self.failed: set = set()
        self.runs = 0
        self.last_was_secant = False
        self.ran_out = False  # the run budget ended the search before the bracket closed

    def run(self, batch: int) -> None:
        self.runs += 1  # counted whether or not the engine had it cached: the same runs for every -b
        point = self.engine.point(batch)
        if point is None:
            self.failed.add(batch)
        else:
            self.points[batch] = point

    def lo(self) -> Optional[Point]:
        fits = [p for p in self.points.values() if p.footprint <= self.limit]
        return max(fits, key=lambda p: p.batch_size) if fits else None

    def hi(self) -> Optional[int]:
        over = [p.batch_size for p in self.points.values() if p.footprint > self.limit] + list(self.failed)
        if 1 in self.failed and len(over) > 1 and min(b for b in over if b != 1) > 2:
            over.remove(1)  # batch 1 could not run (BatchNorm): a larger batch may, down to batch 2
        return min(over) if over else None

    def close(self, runs: int) -> Tuple[int, bool]:
        """(maximum, extrapolated)."""
        self.run(SEED)
        while True:
            lo, hi = self.lo(), self.hi()
            if lo is None and hi is not None and hi <= 1:
                return 0, False
            if lo is not None and hi is not None and hi - lo.batch_size <= max(1, lo.batch_size // CLOSE):
                return lo.batch_size, False
            if lo is not None and hi is None and lo.batch_size >= MAX_BATCH:
                return MAX_BATCH, False
            if self.runs >= runs:
                self.ran_out = True
                return self._out_of_runs(lo, hi)
            self.run(self._candidate(lo, hi))

    def _candidate(self, lo: Optional[Point], hi: Optional[int]) -> int:
        if lo is None:  # nothing fits yet: batch 1, then halve
            return 1 if 1 not in self.points and 1 not in self.failed else max(1, (hi or 2) // 2)
        if hi is None:  # nothing over yet: grow
            line = self._line_above(lo)
            step = lo.batch_size * 2 if line is None else line
            return min(max(step, lo.batch_size + 1), lo.batch_size * GROWTH, MAX_BATCH)
        secant = None
        if not self.last_was_secant and hi in self.points:
            secant = _line_solve(lo, self.points[hi], self.limit)
        self.last_was_secant = secant is not None
        candidate = secant if secant is not None else (lo.batch_size + hi) // 2
        return min(max(candidate, lo.batch_size + 1), hi - 1)

    def _line_above(self, lo: Point) -> Optional[int]:
        """Where the line through the two largest fitting batches meets the limit (None while it is flat)."""
        fits = sorted((p for p in self.points.values() if p.footprint <= self.limit), key=lambda p: p.batch_size)
        return _line_solve(fits[-2], lo, self.limit) if len(fits) >= 2 else None

    def answer(self, maximum: int, extrapolated: bool) -> List[int]:
        """The batches the answer rests on: the maximum and the batch above it (the bracket's top), or the largest
        batch run when the maximum is extrapolated."""
        batches = [maximum, self.hi()]
        if extrapolated and self.points:
            batches.append(max(self.points))
        return [b for b in batches if b]

    def _out_of_runs(self, lo: Optional[Point], hi: Optional[int]) -> Tuple[int, bool]:
        if lo is None:
            return 0, False
        if hi is None:
            line = self._line_above(lo)
            if line is not None and line > lo.batch_size:
                return min(line, MAX_BATCH), True
        return lo.batch_size, False

    def note(self, maximum: int, extrapolated: bool, runs: int) -> str:
        ordered = sorted(self.points)
        hi = self.hi()
        if extrapolated:
            return (
                f"maximum {maximum} is extrapolated along the line through the largest runs "
                f"(up to batch {ordered[-1]}, {runs} runs)"
            )
        if maximum >= MAX_BATCH:
            return f"memory allows at least {MAX_BATCH}: the search stops there"
        if maximum == 0:
            return NOTHING_FITS
        if hi is not None and hi in self.failed and hi == maximum + 1:
            return f"batch {hi} ran out of memory or could not run: {maximum} is the largest batch below it that ran"
        if self.ran_out and hi is not None:
            return f"the search stopped after {runs} runs: the maximum lies between {maximum} and {hi - 1}"
        return ""


def _line_solve(a: Point, b: Point, limit: int) -> Optional[int]:
    if b.batch_size == a.batch_size or b.footprint <= a.footprint:
        return None
    slope = (b.footprint - a.footprint) / (b.batch_size - a.batch_size)
    return int(math.floor(a.batch_size + (limit - a.footprint) / slope))


def with_analysed_batch(engine: Any, found: Search, batch_size: int, limit: Optional[int]) -> Search:
    """The search's points plus the analysed batch's (and, without a device limit, twice it, for the slope),
    for the curve and the fit; the maximum is the search's alone."""
    batches = [batch_size] if limit is not None else [batch_size, 2 * batch_size]
    points = {p.batch_size: p for p in found.points}
    for batch in batches:
        point = points.get(batch) or engine.point(batch)
        if point is not None:
            points[batch] = point
    ordered = sorted(points.values(), key=lambda p: p.batch_size)
    return Search(ordered, found.maximum, found.extrapolated, found.note, _fit(ordered))
