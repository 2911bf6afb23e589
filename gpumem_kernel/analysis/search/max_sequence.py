"""The longest sequence that fits at a fixed batch: the batch search's machinery (analysis.search.max_batch) run over
the sequence length instead of the batch, in steps of a multiple of tokens (64 by default), with the batch picks' rule
(analysis.report.picks.picks_below) for the recommended and safe lengths.

With variable lengths every length below the longest must fit too, and the peak is not monotone in the length: the
caching allocator gives a request under 10 MiB a 20 MiB segment and a larger one a segment of its own size, so a
shorter length can reserve more than a longer one. The check (check_every_length) traces the shortest length and
bisects between traced lengths wherever the allocator opened different large segments (their kinds, in order),
or the longer one is over: elsewhere the same segments grow with the requests. The picks are taken below the length
up to which every length fits; a shorter length that needs more than a longer one is said in the note.

The search counts in multiples: its candidate k is a sequence of k x multiple tokens, so search_maximum's bracket,
growth and run budget apply unchanged and the maximum is a multiple already. Each candidate is the traced step at
that batch with the input at that length (analysis.request.sequence.at_sequence), or predicted from a few traced
lengths (analysis.search.size_reuse, quadratic in the length): the analysis's own trace at its length is one of them
where it traced that batch, and a batch after the first starts from the fit of the one before where the analysis
traced both (SizeFit.at_batch), the answer traced either way. The multiple comes from the call's
`seq_multiple`, else the JupyterLab setting "Sequence-length multiple" (the browser sends it with `configure`), else
64. torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, Hashable, Iterable, List, Optional, Sequence, Set, Tuple

from gpumem_kernel.analysis.allocator.caching_allocator import LARGE_BUFFER
from gpumem_kernel.analysis.search import engines
from gpumem_kernel.analysis.search.engines import Point, TraceMemo, TracedEngine
from gpumem_kernel.analysis.search.size_reuse import QUADRATIC, SizeFit
from gpumem_kernel.analysis.report.picks import Rounding, picks_below
from gpumem_kernel.analysis.search.max_batch import MAX_BATCH, TRACED_RUNS, search_maximum
from gpumem_kernel.analysis.request.sequence import (
    SequenceDip,
    SequencePicks,
    SequencePoint,
    SequenceSearch,
    VariableLengths,
)
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan

DEFAULT_MULTIPLE = 64  # tensor-core friendly, and what tokenizers' pad_to_multiple_of is usually set to
DEFAULT_BATCHES = (1, 4, 8)
MAX_MULTIPLE = 1 << 16
CHECK_RUNS = 16  # traces the every-length check may add to a batch's search (a bisection per segment change)
# lengths it may add in all, predicted ones included (analysis.search.size_reuse: an allocator replay each, no trace):
# a long text's many segment changes at batch 1 are followed to its maximum, not cut short after 16
CHECK_POINTS = 96


# --- the multiple: the call's, the JupyterLab setting's, or the default ------------------------------------------


def parse_multiple(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MULTIPLE:
        raise ValueError(f"seq_multiple must be a whole number of tokens from 1 to {MAX_MULTIPLE}, got {value!r}")
    return value


def resolve_multiple(asked: Optional[Any], setting: Optional[Any] = None) -> Tuple[int, str]:
    """(the multiple to use, where it came from: option | setting | default): the call's, else the JupyterLab
    setting "Sequence-length multiple" the caller passes on (the browser sends it with `configure`), else 64."""
    if asked is not None:
        return parse_multiple(asked), "option"
    return (parse_multiple(setting), "setting") if setting is not None else (DEFAULT_MULTIPLE, "default")


def check_batches(batches: Any) -> Tuple[int, ...]:
    """(1, 4, 8), [2], '1,4,8' -> the batches to search at, ascending and distinct."""
    if batches is None:
        return DEFAULT_BATCHES
    if isinstance(batches, str):
        batches = [b for b in batches.replace(" ", ",").split(",") if b]
    if isinstance(batches, int) and not isinstance(batches, bool):
        batches = [batches]
    try:
        values = sorted({int(b) for b in batches})
    except (TypeError, ValueError):
        raise ValueError(f"seq_batches must be batch sizes such as (1, 4, 8), got {batches!r}") from None
    if not values or values[0] < 1:
        raise ValueError(f"seq_batches must be positive batch sizes such as (1, 4, 8), got {batches!r}")
    return tuple(values)


# --- the search ------------------------------------------------------------------------------------------------


class _SequenceEngine:
    """search_maximum's engine over the sequence: point(k) is the traced step at `batch` with k x multiple tokens,
    labelled k (the search's variable); a length that cannot be traced counts as over, as a batch does."""

    name = "traced"

    def __init__(
        self,
        plan: TracePlan,
        maker: Callable[[int], Any],
        batch: int,
        multiple: int,
        context: int,
        sharding: Any,
        limit: Optional[int],
        reuse: bool = True,
        analysed: Tuple[Optional[int], Optional[TraceMemo]] = (None, None),
    ) -> None:
        self.plan, self.maker, self.batch, self.multiple = plan, maker, batch, multiple
        # (the analysed length in tokens, the analysis's traces of it by batch): that length is not traced again
        self.analysed = analysed
        self.context, self.sharding, self.limit = context, sharding, limit
        self.cache: Dict[int, Optional[Point]] = {}
        self.errors: Dict[int, str] = {}
        self.segments: Dict[int, Hashable] = {}
        # the stream at k predicted from the lengths traced before (quadratic: attention's L x L scores)
        self.fit: Optional[SizeFit] = SizeFit(QUADRATIC) if reuse else None
        self.predicted: Set[int] = set()
        self.traces = 0
        self.agreed = True

    def point(self, k: int, traced: bool = False) -> Optional[Point]:
        """The point at k multiples: predicted where the fit can (unless `traced`), else traced."""
        if k not in self.cache:
            seq = k * self.multiple
            if self.plan.progress is not None:
                self.plan.progress.enter("sequence", f"searching sequence length ({seq} tokens)")
            plan = replace(self.plan, make_batch=self.maker(seq))
            memo = self.analysed[1] if seq == self.analysed[0] else None
            engine = TracedEngine(
                plan, self.context, self.sharding, self.limit, reuse=False, on_trace=self._observe(k), memo=memo
            )
            guess = self.fit.predict(k, plan) if self.fit is not None and not traced else None
            if guess is not None:
                self.predicted.add(k)
                found: Optional[Point] = engine.settle(self.batch, guess)
            else:
                try:
                    found = engine.point(self.batch)
                except TraceError as exc:
                    self.errors[seq] = str(exc)
                    found = None
                self.traces += engine.traces
            if found is not None and found.trace is not None:
                self.segments[k] = segment_kinds(found.trace.device.segments)
            self.cache[k] = None if found is None else replace(found, batch_size=k, trace=None)
        return self.cache[k]

    def take_fit(self, other: "_SequenceEngine") -> None:
        """`other` batch's fit over the length, moved to this batch (size_reuse.SizeFit.at_batch) where the analysis
        traced both batches at its length: the lengths here are predicted from the start, the answer traced."""
        seq, memo = self.analysed
        if self.fit is None or other.fit is None or seq is None or memo is None or seq % self.multiple:
            return
        here, there = memo.get(other.batch), memo.get(self.batch)
        if here is not None and there is not None:
            moved = other.fit.at_batch(here, there, seq // self.multiple, (self.batch, other.batch))
            self.fit = moved or self.fit

    def seed(self) -> None:
        """The analysed length's point first where the analysis traced this batch: a free sample of the fit."""
        seq, memo = self.analysed
        if seq is not None and memo is not None and seq % self.multiple == 0 and memo.get(self.batch) is not None:
            self.point(seq // self.multiple)

    def _observe(self, k: int) -> Callable[[Any], None]:
        def observe(trace: Any) -> None:
            self.agreed = self.fit.add(k, trace) if self.fit is not None else True

        return observe

    def confirm(self, ks: Iterable[int]) -> bool:
        """Trace the predicted ones of `ks` (the answer): True when each gives the predicted point and segments;
        else prediction stops and the predicted points are dropped, for the search to run again on traces."""
        for k in dict.fromkeys(ks):  # the answer's lengths can repeat (the last that fits is also the highest)
            if k not in self.predicted:
                continue
            guess, segments = self.cache.pop(k), self.segments.pop(k, None)
            self.predicted.discard(k)
            self.agreed = False  # a length that does not trace gives no stream to compare
            real = self.point(k, traced=True)
            if real is None or guess is None or real != guess or self.segments.get(k) != segments or not self.agreed:
                self.stop_reuse()
                return False
        return True

    def stop_reuse(self) -> None:
        self.fit = None
        for k in self.predicted:
            self.cache.pop(k, None)
            self.segments.pop(k, None)
        self.predicted.clear()

    def signature(self, k: int) -> Hashable:
        """The segments the allocator opened at k x multiple tokens (segment_kinds); None when it did not trace."""
        self.point(k)
        return self.segments.get(k)


def segment_kinds(segments: Iterable[Any]) -> Tuple[str, ...]:
    """The large pool's segments in the order the allocator opened them, by kind: buffer (a 20 MiB segment for
    requests of 1 to 10 MiB) or exact (a larger request's own size, to 2 MiB). Between two lengths with the same
    kinds the same segments grow with the requests; where the kinds differ the peak can jump, either way. The small
    pool's 2 MiB segments are left out: their number grows with the length, 2 MiB at a time."""
    return tuple("buffer" if s.size == LARGE_BUFFER else "exact" for s in segments if s.pool != "small")


def search_sequences(
    plan: TracePlan,
    maker: Callable[[int], Any],
    batches: Sequence[int],
    multiple: Tuple[int, str],
    *,
    context_bytes: int,
    sharding: Any,
    limit: Optional[int],
    model_context: Optional[int],
    analysed: Tuple[Optional[int], Optional[TraceMemo]] = (None, None),
) -> SequenceSearch:
    """The longest sequence (a multiple of multiple[0] tokens) that fits `limit` at each batch of `batches`.
    maker(seq) -> make_batch(batch, fake) at that length. `analysed`: the analysed length and the analysis's traces
    at it by batch (engines.TraceMemo), a point of the search where a batch is among them."""
    size = multiple[0]
    rounding = Rounding(multiple=size) if size > 1 else Rounding(exact=True)
    results = []
    previous: Optional[_SequenceEngine] = None
    for batch in batches:
        engine = _SequenceEngine(plan, maker, batch, size, context_bytes, sharding, limit, engines.SIZE_REUSE, analysed)
        if previous is not None:
            engine.take_fit(previous)
        engine.seed()
        found, variable = _search_lengths(engine, limit)
        if not engine.confirm(_every_length_answer(variable, size, engine)):
            found, variable = _search_lengths(engine, limit)  # a prediction was off: again on traces alone
        maximum = None if found.maximum is None else found.maximum * size
        recommended, safe = picks_below(maximum if variable is None else variable.every_length, rounding)
        traced = {k: p for k, p in engine.cache.items() if p is not None}
        curve = [SequencePoint(k * size, traced[k].footprint) for k in sorted(traced)]
        note = _note(maximum, batch, size, found, engine, model_context)
        note = "; ".join(words for words in (note, variable_note(variable, maximum)) if words)
        results.append(SequencePicks(batch, maximum, recommended, safe, found.extrapolated, note, curve, variable))
        previous = engine
    return SequenceSearch(size, multiple[1], model_context, "traced", results)


def _search_lengths(engine: _SequenceEngine, limit: Optional[int]) -> Tuple[Any, Optional[VariableLengths]]:
    """The longest length that fits (search_maximum, its answer confirmed by traces) and up to which every
    length fits."""
    found = search_maximum(engine, limit, runs=TRACED_RUNS)
    variable = None
    if found.maximum and limit is not None:
        variable = check_every_length(engine, found.maximum, limit, list(engine.cache))
    return found, variable


def _every_length_answer(variable: Optional[VariableLengths], size: int, engine: _SequenceEngine) -> List[int]:
    """The multiples the every-length answer rests on: the last that fits every length, the next one checked, the
    one with the highest footprint below it, and the lengths of a dip (a shorter length that needs more)."""
    if variable is None:
        return []
    every = variable.every_length // size
    above = [k for k in sorted(engine.cache) if k > every][:1]
    below = [k for k, p in engine.cache.items() if p is not None and k <= every]
    highest = [max(below, key=lambda k: (engine.cache[k].footprint, k))] if below else []  # type: ignore[union-attr]
    dip = [] if variable.dip is None else [variable.dip.shorter // size, variable.dip.longer // size]
    return [k for k in [every, *above, *highest, *dip] if k]


# --- every length up to the picks must fit ---------------------------------------------------------------------


def check_every_length(
    engine: Any, maximum: int, limit: int, traced: Iterable[int], runs: int = CHECK_RUNS
) -> VariableLengths:
    """Up to which length every multiple fits, in tokens, from the search's `maximum` (in multiples) and the
    multiples it `traced`. `engine` has point(k), signature(k) (the segments opened at k: segment_kinds) and
    `multiple`, and may have `predicted` (the multiples whose point it predicted rather than traced). The shortest
    multiple is traced, then the gap between two traced multiples is bisected while their signatures differ or the
    longer one is over the limit, shortest gaps first, at most `runs` new traces and CHECK_POINTS new lengths."""
    known = set(traced)
    predicted = getattr(engine, "predicted", set())
    fits = [k for k in known if k <= maximum and not _over(engine.point(k), limit)]
    top = maximum if maximum in fits else max(fits, default=0)  # an extrapolated maximum: the check ends at the traces
    ks: Set[int] = {k for k in known if k <= top} | {1}
    while True:
        first_over, gap = _first_gap(engine, sorted(ks), limit)
        added = ks - known
        if gap is None or len(added) >= CHECK_POINTS or len(added - predicted) >= runs:
            break
        ks.add((gap[0] + gap[1]) // 2)
    every = gap[0] if gap is not None else (maximum if first_over is None else first_over - 1)
    points = {k: engine.point(k) for k in sorted(ks) if engine.point(k) is not None}
    below = [p for k, p in points.items() if k <= every] or [Point(0, 0, 0, 0, "traced")]
    size = engine.multiple
    return VariableLengths(
        every * size,
        max(p.footprint for p in below),
        max(p.allocated for p in below),
        [k * size for k in sorted(ks)],
        len(ks - known),
        gap is None,
        _dip(points, size),
    )


def _over(point: Optional[Point], limit: int) -> bool:
    return point is None or point.footprint > limit


def _first_gap(engine: Any, ks: List[int], limit: int) -> Tuple[Optional[int], Optional[Tuple[int, int]]]:
    """(the shortest traced multiple that is over, the shortest gap still to bisect below it)."""
    first_over = next((k for k in ks if _over(engine.point(k), limit)), None)
    upto = ks if first_over is None else [k for k in ks if k <= first_over]
    for a, b in zip(upto, upto[1:]):
        if b - a > 1 and (b == first_over or engine.signature(a) != engine.signature(b)):
            return first_over, (a, b)
    return first_over, None


def _dip(points: Dict[int, Point], size: int) -> Optional[SequenceDip]:
    """The shorter length with the highest footprint among those that need more than some longer length, and the
    longer length that needs least; None when the footprint never falls as the length grows."""
    ks = sorted(points)
    worst: Optional[Tuple[int, int]] = None
    for i, s in enumerate(ks[:-1]):
        longer = min(ks[i + 1 :], key=lambda k: points[k].footprint)
        if points[s].footprint > points[longer].footprint:
            if worst is None or points[s].footprint > points[worst[0]].footprint:
                worst = (s, longer)
    if worst is None:
        return None
    s, longer = worst
    return SequenceDip(s * size, longer * size, points[s].footprint, points[longer].footprint)


def variable_note(variable: Optional[VariableLengths], maximum: Optional[int]) -> str:
    """ "512 tokens need 7.6 % more than 560: with variable lengths the limit is 496", when a shorter length needs
    more than a longer one; the limit alone when it is below the maximum for another reason (a shorter length that
    could not be traced, a check that stopped early); else ""."""
    if variable is None:
        return ""
    every = variable.every_length
    if not variable.complete:
        traces = variable.extra_traces
        limit = f"every length was checked up to {every:,} only ({traces} extra traces): the picks are below it"
    elif every == maximum:
        limit = f"every length up to {every:,} fits"
    elif every == 0:
        limit = f"with variable lengths not even {variable.checked[0]:,} tokens fit"
    else:
        limit = f"with variable lengths the limit is {every:,}"
    dip = variable.dip
    if dip is not None:
        return f"{dip.shorter:,} tokens need {_percent(dip.excess)} more than {dip.longer:,}: {limit}"
    return "" if every == maximum else limit


def _percent(share: float) -> str:
    return f"{100 * share:.1f} %" if share >= 0.001 else f"{100 * share:.2f} %"


def _note(
    maximum: Optional[int], batch: int, size: int, found: Any, engine: _SequenceEngine, context: Optional[int]
) -> str:
    """The search's own words, in tokens (search.py's notes speak of batches)."""
    if maximum is None:
        return found.note
    if maximum == 0:
        return f"even {size} tokens do not fit at batch {batch}"
    words = []
    if found.extrapolated:
        words.append(
            f"extrapolated along the line through the longest lengths traced (to {found.points[-1].batch_size * size})"
        )
    if found.maximum >= MAX_BATCH:
        words.append(f"memory allows at least {maximum} tokens: the search stops there")
    if context is not None and maximum > context:
        words.append(f"over the model's context of {context} positions")
    over = maximum + size
    if over in engine.errors:
        words.append(f"{over} tokens could not be traced: {engine.errors[over]}")
    return "; ".join(words)


def model_context(model: Any) -> Optional[int]:
    """The config's max_position_embeddings (n_positions for GPT-2), when the model has a config that says."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
