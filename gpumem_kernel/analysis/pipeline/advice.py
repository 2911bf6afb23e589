"""What would make it fit: the analysed step again with each lever the analysis can model set (pipeline.advice_levers),
one at a time, each a separate analysis of its own (so each row's peak is what `analyze()` with that lever gives, to
the byte); when no lever fits alone, the smallest combinations of the cheapest ones; sharding over 2, 4 or 8 GPUs
(per rank, as the analysis traces a rank), and where only adapters or more GPUs fit, sharding with the lever that
keeps full training; the longest sequence that fits; and the smallest GPU of the table that holds the step as it is.
The rows are ordered by what they cost, and the cheapest that fits is the recommendation. Nothing here touches the
user's model or optimizer: each analysis works on copies."""

from __future__ import annotations

import itertools
import shlex
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from gpumem_kernel.analysis.pipeline.advice_levers import (
    COST_KINDS,
    FSDP_SIZES,
    GPU_LEVER_COST,
    LEVERS,
    SHORTER_SEQUENCE,
    Lever,
    Situation,
    command_with,
    fsdp_lever,
    micro_batch_of,
    sequence_changes,
    smallest_gpu,
)
from gpumem_kernel.analysis.measure.workbench import RngSnapshot
from gpumem_kernel.analysis.report.report import AnalysisReport
from gpumem_kernel.analysis.request.progress import Progress
from gpumem_kernel.analysis.request.request import AnalysisRequest
from gpumem_kernel.analysis.search.engines import TraceMemo
from gpumem_kernel.probe.torchstats import cuda_initialised

DEFAULT_COMMAND = "%gpumem analyze model"
# What makes it fit is computed unasked where the step will not fit and its analyses, each about as long as the
# analysis itself, add at most this many seconds; a longer one is left to --advise (the report says how to ask), so
# that a plain analysis of a large model stays as quick as it was.
ADVICE_SECONDS = 20.0
# the request's fields no trace of the step reads: the sharding (a rank's own step is traced apart, and the
# engine's single-device trace is scaled by what sharding saves) and the sequence search (its own engines)
SAME_STEP = frozenset({"world_size", "strategy", "search", "seq_batches"})
COMBINE_CHEAPEST = 4  # combinations are of the cheapest levers only: pairs, then triples where no pair fits
_PAYLOAD_FIELDS = (
    "key lever flags command cost cost_kind peak_bytes peak_allocated_bytes maximum maximum_of status fits per_rank "
    "note"
).split()


@dataclass
class AdviceRow:
    """One lever (or combination) and its analysis: the peak footprint and allocated peak, the largest batch (or
    longest sequence) it allows, the analysed (micro-)batch's status with it; `changes`: the request's fields set."""

    key: str
    lever: str
    flags: str
    command: str
    cost: str
    cost_kind: str
    peak_bytes: Optional[int]
    peak_allocated_bytes: Optional[int]
    maximum: Optional[int]
    maximum_of: str
    status: str  # fits | tight | will-not-fit | unknown
    fits: bool
    per_rank: bool = False
    note: Optional[str] = None
    changes: Dict[str, Any] = field(default_factory=dict)
    limit_bytes: Optional[int] = None  # the usable memory the row is judged against
    order: Tuple[Any, ...] = ()  # the cost order: the costliest part's kind, the number of parts, the levers'

    def to_payload(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in _PAYLOAD_FIELDS}


@dataclass
class Advice:
    """The analysed step's own figures and the rows, cheapest first; `recommended` indexes the row to use."""

    peak_bytes: int
    status: str
    target: Optional[str] = None
    rows: List[AdviceRow] = field(default_factory=list)
    recommended: Optional[int] = None
    reason: Optional[str] = None

    def to_payload(self) -> Dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "status": self.status,
            "target": self.target,
            "recommended": self.recommended,
            "reason": self.reason,
            "rows": [row.to_payload() for row in self.rows],
        }

    def text(self) -> str:
        from gpumem_kernel.analysis.report.render import advice_lines

        return "\n".join(advice_lines(self.to_payload()))


def advise(
    model: Any,
    request: AnalysisRequest,
    report: AnalysisReport,
    command: Optional[str] = None,
    only: Optional[Sequence[str]] = None,
) -> Advice:
    """The rows of what makes `model`'s step fit, `report` the analysis of `request` itself; `command` the analysed
    %gpumem analyze line the rows' commands add their flags to; `only`: the lever keys to try ("fsdp" for sharding),
    default all. The progress is told to the request's on_progress as the phase "levers" ("trying levers k of n")."""
    situation = Situation(model, request, report)
    tracer = _Tracer(model, request, command or DEFAULT_COMMAND)
    plan = _Plan.of(situation, only)
    singles, sharding, sequence, tried = plan.singles, plan.sharding, plan.sequence, plan.tried
    tracer.planned = plan.runs
    traced = [(single, tracer.try_row((single[0],), single[1])) for single in singles]
    singles = [single for single, row in traced if row is not None and _changed(row, report)]
    rows = [row for _, row in traced if row is not None and _changed(row, report)]
    alone = list(rows)
    sharded = _sharded(situation, tracer) if sharding else None
    if sharded is not None:
        rows.append(sharded)
        rows += _sharded_keeping_training(singles, alone, sharded, situation, tracer)
    if sequence:
        rows += _shorter_sequence(situation, tracer)
    # no lever of the table fits alone: pairs of the cheapest may still cost less than more GPUs or a shorter text
    if report.device.limit_bytes is not None and not any(r.fits for r in alone):
        rows += _combinations(singles, alone, situation, tracer)
    if tried("gpu"):
        rows += _gpu_row(situation, tracer.command)
    rows.sort(key=lambda r: r.order)
    recommended, reason = _recommendation(report, rows)
    return Advice(
        report.peak_bytes, report.recommendations.current.status, report.device.name, rows, recommended, reason
    )


@dataclass
class _Plan:
    """The levers advise() traces first: those that change the step, one analysis each; sharding; and the shorter
    sequence (two analyses, none where the weights and optimizer state alone are over). Pairs follow only where no
    lever fits alone."""

    wanted: Optional[Set[str]]
    singles: List[Tuple[Any, Dict[str, Any]]] = field(default_factory=list)
    sharding: bool = False
    sequence: bool = False

    @classmethod
    def of(cls, situation: Situation, only: Optional[Sequence[str]]) -> "_Plan":
        plan = cls(set(only) if only is not None else None)
        levers = [lever for lever in LEVERS if plan.tried(lever.key)]
        changed = [(lever, lever.changes(situation)) for lever in levers]
        plan.singles = [(lever, changes) for lever, changes in changed if changes is not None]
        plan.sharding = plan.tried("fsdp") and fsdp_lever(FSDP_SIZES[0]).changes(situation) is not None
        plan.sequence = plan.tried(SHORTER_SEQUENCE.key) and _sequence_applies(situation)
        return plan

    def tried(self, key: str) -> bool:
        return self.wanted is None or key in self.wanted

    @property
    def runs(self) -> int:
        return len(self.singles) + int(self.sharding) + 2 * int(self.sequence)


def wants_advice(report: AnalysisReport, when: Optional[bool]) -> bool:
    """True: always; None: where the analysed batch will not fit a known limit (a target, a memory or this
    machine's GPU); False: never."""
    if when is None:
        known = report.device.limit_bytes is not None
        return known and report.recommendations.current.status == "will-not-fit"
    return when


def analyzed_with_advice(
    model: Any,
    request: AnalysisRequest,
    when: Optional[bool],
    command: Optional[str] = None,
    budget_seconds: float = ADVICE_SECONDS,
) -> Tuple[AnalysisReport, Optional[Advice]]:
    """(analyze()'s report, what makes it fit or None), the advice also in the report's payload (`advice`): `when`
    True always advising; None where wants_advice and the advice's analyses, at the analysis's own pace, add at
    most `budget_seconds`; False never. `command`: the analysed command line the rows add their flags to."""
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    started = time.monotonic()
    request = replace(request, traces=request.traces or TraceMemo())  # for the rows that trace the same step
    report = analyze(model, request)
    if not wants_advice(report, when):
        return report, None
    if when is None and advice_runs(model, request, report) * (time.monotonic() - started) > budget_seconds:
        return report, None
    advice = advise(model, request, report, command)
    report.advice = advice.to_payload()
    return report, advice


def advice_runs(model: Any, request: AnalysisRequest, report: AnalysisReport) -> int:
    """How many analyses advise() runs at least for this step (pairs of levers can add more): what it costs, at
    about the analysis's own time each."""
    return _Plan.of(Situation(model, request, report), None).runs


class _Tracer:
    """Runs analyze() with a lever's changes and makes its row; the progress of every run as the phase "levers"."""

    def __init__(self, model: Any, request: AnalysisRequest, command: str) -> None:
        self.model, self.request, self.command = model, request, command
        # the analysed step's traces: a row that changes only what a trace does not read traces nothing anew
        self.traces = request.traces or TraceMemo()
        # the traces of each other step a row traced (by its changes that a trace reads), for the rows that shard it
        self.steps: Dict[Tuple[Tuple[str, str], ...], TraceMemo] = {}
        self.heard = _LeverProgress(request.on_progress)
        self.planned = 0
        self.done = 0

    def analyze(self, label: str, changes: Dict[str, Any]) -> AnalysisReport:
        from gpumem_kernel.analysis.pipeline.analyze import analyze

        self.done += 1
        self.planned = max(self.planned, self.done)
        self.heard.lever = f"trying levers {self.done} of {self.planned} ({label})"
        # the user's RNG state as it was: the planning copy's adapters are initialised from it (lora=)
        rng = RngSnapshot.take(cuda=cuda_initialised())
        try:
            traces = self._memo(changes)
            request = replace(self.request, on_progress=self.heard, advice_row=True, traces=traces, **changes)
            return analyze(self.model, request)
        finally:
            rng.restore()
            self.heard.finished()

    def _memo(self, changes: Dict[str, Any]) -> TraceMemo:
        """The traces of the step `changes` make: the analysed step's where they change only what no trace reads."""
        step = tuple(sorted((name, repr(value)) for name, value in changes.items() if name not in SAME_STEP))
        return self.steps.setdefault(step, TraceMemo()) if step else self.traces

    def row(self, levers: Sequence[Lever], changes: Dict[str, Any], note: Optional[str] = None) -> AdviceRow:
        """The row of `changes`; with a smaller micro-batch that does not fit, traced once more at the largest
        micro-batch its own analysis allows (accumulation keeps the gradients between micro-steps: a lower maximum
        than the analysed step's)."""
        label = " + ".join(lever.label for lever in levers)
        row = self.row_of(levers, changes, self.analyze(label, changes), note)
        if "grad_accum" not in changes or row.fits or not row.maximum or row.maximum >= changes["batch_size"]:
            return row
        batch, accum = self.request.batch_size, self.request.grad_accum
        micro = micro_batch_of(batch, row.maximum)
        changes = {**changes, "batch_size": micro, "grad_accum": accum * (batch // micro)}
        self.planned += 1
        return self.row_of(levers, changes, self.analyze(label, changes), note)

    def try_row(self, levers: Sequence[Lever], changes: Dict[str, Any]) -> Optional[AdviceRow]:
        """The row, or None where the analysis with the lever refuses it (a ValueError's one line): that lever has
        no row, the others keep theirs."""
        try:
            return self.row(levers, changes)
        except ValueError:
            return None

    def row_of(
        self, levers: Sequence[Lever], changes: Dict[str, Any], report: AnalysisReport, note: Optional[str] = None
    ) -> AdviceRow:
        flags = " ".join(lever.flags(changes) for lever in levers)
        status = report.recommendations.current.status
        limit = report.device.limit_bytes
        return AdviceRow(
            key="+".join(lever.key for lever in levers),
            lever=" + ".join(lever.label for lever in levers),
            flags=flags,
            command=command_with(self.command, flags),
            cost="; ".join(lever.cost for lever in levers),
            cost_kind=max(levers, key=lambda lever: lever.rank).cost_kind,
            peak_bytes=report.peak_bytes,
            peak_allocated_bytes=report.peak_allocated_bytes,
            maximum=report.recommendations.maximum,
            maximum_of="batch",
            status=status,
            fits=status == "fits" or (status == "tight" and limit is not None and report.peak_bytes <= limit),
            per_rank=report.distributed is not None,
            note=note if note is not None else _note(levers, changes, report),
            changes=dict(changes),
            limit_bytes=limit,
            order=_order(levers),
        )


def _changed(row: AdviceRow, report: AnalysisReport) -> bool:
    """Whether the lever saves memory: a lower peak, or a larger batch (checkpointing a model without blocks saves
    nothing, LoRA on a small MLP adds its adapters' activations)."""
    larger = (row.maximum or 0) > (report.recommendations.maximum or 0)
    return row.peak_bytes is not None and (row.peak_bytes < report.peak_bytes or larger)


def _order(levers: Sequence[Lever]) -> Tuple[Any, ...]:
    """Cheapest first: by the costliest part's kind, then fewer parts, then the parts' kinds and the levers' order."""
    ranks = sorted((lever.rank for lever in levers), reverse=True)
    places = sorted(_place(lever) for lever in levers)
    return (ranks[0], len(levers), tuple(ranks), tuple(places))


def _place(lever: Lever) -> int:
    keys = [known.key for known in LEVERS] + [SHORTER_SEQUENCE.key]
    return keys.index(lever.key) if lever.key in keys else len(keys) + lever.rank


def _note(levers: Sequence[Lever], changes: Dict[str, Any], report: AnalysisReport) -> Optional[str]:
    """What the row's figures are, where the flags alone do not say it."""
    parts = []
    if "grad_accum" in changes:
        micro, steps = changes["batch_size"], changes["grad_accum"]
        parts.append(f"{micro} x {steps} accumulation steps: the same {micro * steps} samples per optimizer step")
    if report.distributed is not None:
        traced = report.distributed.engine == "traced"
        parts.append("per GPU: rank 0 traced under FSDP" if traced else "per GPU, by the formula (rank not traced)")
    return "; ".join(parts) or None


# --- the levers that are more than one change -------------------------------------------------------------------


def _sharded(situation: Situation, tracer: _Tracer) -> Optional[AdviceRow]:
    """FSDP over the fewest of 2, 4, 8 GPUs that fits (8 where none does): one row, per rank. Bisected: 4 first,
    then 2 where 4 fits, else 8."""
    sizes = sorted(FSDP_SIZES)
    low, high = 0, len(sizes) - 1
    best: Optional[AdviceRow] = None
    closest: Optional[AdviceRow] = None
    while low <= high:
        middle = (low + high) // 2
        lever = fsdp_lever(sizes[middle])
        row = tracer.try_row((lever,), lever.changes(situation) or {})
        if row is None:
            break
        if row.fits:
            best, high = row, middle - 1
        else:
            closest, low = row, middle + 1
        tracer.planned += int(low <= high)
    return best or closest


def _sharded_keeping_training(
    singles: List[Tuple[Lever, Dict[str, Any]]],
    alone: List[AdviceRow],
    sharded: AdviceRow,
    situation: Situation,
    tracer: _Tracer,
) -> List[AdviceRow]:
    """Where no row that keeps what is trained fits (only adapters, another optimizer, a shorter text or more GPUs
    do): FSDP over fewer GPUs than it needs alone, with the lever that keeps what is trained and saves most on its
    own (an 8-bit or paged optimizer, AMP, checkpointing, a smaller micro-batch), fewest GPUs first; the next such
    lever only where that one fits at no size. One row: how a full fine-tune stays full, and on how many GPUs."""
    training = COST_KINDS.index("training")
    if any(row.fits and COST_KINDS.index(row.cost_kind) < training for row in alone):
        return []
    peaks = {row.key: row.peak_bytes for row in alone if row.peak_bytes is not None}
    keeping = sorted(
        ((lever, changes) for lever, changes in singles if lever.rank < training and lever.key in peaks),
        key=lambda single: peaks[single[0].key],
    )
    fewer = sorted(size for size in FSDP_SIZES if not sharded.fits or size < sharded.changes["world_size"])
    for lever, changes in keeping:
        for size in fewer:  # a size that is over stops at the batch the lever's own row traced
            gpus = fsdp_lever(size)
            tracer.planned += 1
            row = tracer.try_row((lever, gpus), {**changes, **(gpus.changes(situation) or {})})
            if row is not None and row.fits:
                return [row]
    return []


def _sequence_applies(situation: Situation) -> bool:
    report, request = situation.report, situation.request
    return (
        report.settings.get("seq") is not None
        and report.device.limit_bytes is not None
        and report.recommendations.current.status == "will-not-fit"
        and not request.seq_search
        and situation.built_in_step
        and sequence_changes(request, 1) is not None
        and not _states_over(report)
    )


def _states_over(report: AnalysisReport) -> bool:
    """The weights and the optimizer's state on one GPU, which no sequence length changes and which every step holds
    at once, over its limit on their own: no shorter sequence fits, and its search would only trace that."""
    limit = report.device.limit_bytes
    states = report.parameters_bytes + report.optimizer_bytes
    return report.distributed is None and limit is not None and states > limit


def _shorter_sequence(situation: Situation, tracer: _Tracer) -> List[AdviceRow]:
    """The longest sequence that fits at the analysed batch (the analysis' sequence search), then the step at it."""
    request = situation.request
    try:
        searched = tracer.analyze("the longest sequence", {"search": "seq", "seq_batches": [request.batch_size]})
    except ValueError:  # the sequence search refuses this input: no row
        return []
    found = searched.sequence_search
    longest = found.results[0].maximum if found is not None and found.results else None
    changes = sequence_changes(request, longest) if longest else None
    if changes is None or longest >= int(situation.report.settings["seq"]):
        return []
    row = tracer.try_row((SHORTER_SEQUENCE,), changes)
    if row is None:
        return []
    row.maximum, row.maximum_of = longest, "sequence"
    row.note = f"the longest that fits at batch {request.batch_size}, in multiples of {found.multiple} tokens"
    return [row]


def _combinations(
    singles: List[Tuple[Lever, Dict[str, Any]]], rows: List[AdviceRow], situation: Situation, tracer: _Tracer
) -> List[AdviceRow]:
    """Pairs of the cheapest levers, then triples where no pair fits: the ones that fit, or else the closest. A smaller
    micro-batch in a combination is the largest its other levers' own analysis allows."""
    cheapest = sorted(singles, key=lambda pair: _order((pair[0],)))[:COMBINE_CHEAPEST]
    maxima = {frozenset(row.key.split("+")): row.maximum for row in rows}
    tried: List[AdviceRow] = []
    for size in (2, 3):
        combos = [c for c in itertools.combinations(cheapest, size) if len({lever.group for lever, _ in c}) == size]
        tracer.planned += len(combos)
        found = [
            row
            for c in combos
            for row in [tracer.try_row([lever for lever, _ in c], _merged(c, maxima, situation))]
            if row is not None
        ]
        maxima.update({frozenset(row.key.split("+")): row.maximum for row in found})
        tried += found
        if any(r.fits for r in found):
            return [r for r in found if r.fits]
    if not tried:
        return []
    closest = min(tried, key=lambda r: r.peak_bytes if r.peak_bytes is not None else float("inf"))
    closest.note = "; ".join(filter(None, [closest.note, "the closest combination traced: still over"]))
    return [closest]


def _merged(
    combination: Sequence[Tuple[Lever, Dict[str, Any]]], maxima: Dict[Any, Optional[int]], situation: Situation
) -> Dict[str, Any]:
    merged: Dict[str, Any] = {}
    for _, changes in combination:
        merged.update(changes)
    others = frozenset(lever.key for lever, _ in combination if lever.key != "micro-batch")
    if len(others) < len(combination) and others in maxima:
        batch, accum = situation.request.batch_size, situation.request.grad_accum
        micro = micro_batch_of(batch, maxima[others])
        merged.update(batch_size=micro, grad_accum=accum * (batch // micro))
    return merged


_GPU = Lever("gpu", "a larger GPU", GPU_LEVER_COST, "hardware", lambda s: None, lambda c: "", "hardware")


def _gpu_row(situation: Situation, command: str) -> List[AdviceRow]:
    """The smallest GPU of the table that holds the step as it is: not traced (its peak is the analysed one with that
    GPU's CUDA context)."""
    fit = smallest_gpu(situation)
    if fit is None or fit.name == situation.report.device.name:
        return []
    report = situation.report
    flags = f"--target {shlex.quote(fit.name)}"
    return [
        AdviceRow(
            key="gpu",
            lever=fit.name,
            flags=flags,
            command=command_with(command, flags),
            cost=GPU_LEVER_COST,
            cost_kind="hardware",
            peak_bytes=fit.peak_bytes,
            peak_allocated_bytes=report.peak_allocated_bytes,
            maximum=None,
            maximum_of="batch",
            status=fit.status,
            fits=True,
            note="not traced: the analysed peak with this GPU's CUDA context against its memory",
            limit_bytes=fit.limit_bytes,
            order=_order((_GPU,)),
        )
    ]


def _recommendation(report: AnalysisReport, rows: List[AdviceRow]) -> Tuple[Optional[int], Optional[str]]:
    """(index of the cheapest row that fits with room, else the cheapest that fits at all; one sentence why)."""
    from gpumem_kernel.render.units import human

    status, limit = report.recommendations.current.status, report.device.limit_bytes
    if limit is None:
        return None, "no memory limit known (give --target or --memory): no row can be judged"
    if status == "fits":
        return (
            None,
            f"the step fits as analysed ({human(report.peak_bytes)} of {human(limit)} usable): nothing to change",
        )
    for i, row in enumerate(rows):
        if row.fits:
            room = "" if row.status == "fits" else ", tight"
            peak = human(row.peak_bytes) + (" per GPU" if row.per_rank else "")
            usable = human(row.limit_bytes)
            return i, f"the cheapest change that fits ({peak} of {usable} usable{room}): {row.cost}"
    return None, "no lever or combination traced here makes it fit"


class _LeverProgress:
    """The levers' analyses as one phase: their updates relabelled, their traces counted on from the ones before."""

    def __init__(self, callback: Optional[Callable[[Progress], None]]) -> None:
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
