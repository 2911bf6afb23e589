"""The longest sequence that fits at a fixed batch: the batch search's machinery (analysis.search.max_batch) run over
the sequence length instead of the batch, in steps of a multiple of tokens (64 by default), with the batch picks' rule
(analysis.report.picks.picks_below) for the recommended and safe lengths.

The search counts in multiples: its candidate k is a sequence of k x multiple tokens, so search_maximum's bracket,
growth and run budget apply unchanged and the maximum is a multiple already. Each candidate is the traced step at
that batch with the input at that length (analysis.request.sequence.at_sequence). The multiple comes from the call's
`seq_multiple`, else the JupyterLab setting "Sequence-length multiple" (the browser sends it with `configure`), else
64. torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from gpumem_kernel.analysis.search.engines import Point, TracedEngine
from gpumem_kernel.analysis.report.picks import Rounding, picks_below
from gpumem_kernel.analysis.search.max_batch import MAX_BATCH, TRACED_RUNS, search_maximum
from gpumem_kernel.analysis.request.sequence import SequencePicks, SequencePoint, SequenceSearch
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan

DEFAULT_MULTIPLE = 64  # tensor-core friendly, and what tokenizers' pad_to_multiple_of is usually set to
DEFAULT_BATCHES = (1, 4, 8)
MAX_MULTIPLE = 1 << 16


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
    ) -> None:
        self.plan, self.maker, self.batch, self.multiple = plan, maker, batch, multiple
        self.context, self.sharding, self.limit = context, sharding, limit
        self.cache: Dict[int, Optional[Point]] = {}
        self.errors: Dict[int, str] = {}

    def point(self, k: int) -> Optional[Point]:
        if k not in self.cache:
            seq = k * self.multiple
            engine = TracedEngine(
                replace(self.plan, make_batch=self.maker(seq)), self.context, self.sharding, self.limit
            )
            try:
                found = engine.point(self.batch)
            except TraceError as exc:
                self.errors[seq] = str(exc)
                found = None
            self.cache[k] = None if found is None else replace(found, batch_size=k, trace=None)
        return self.cache[k]


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
) -> SequenceSearch:
    """The longest sequence (a multiple of multiple[0] tokens) that fits `limit` at each batch of `batches`.
    maker(seq) -> make_batch(batch, fake) at that length."""
    size = multiple[0]
    rounding = Rounding(multiple=size) if size > 1 else Rounding(exact=True)
    results = []
    for batch in batches:
        engine = _SequenceEngine(plan, maker, batch, size, context_bytes, sharding, limit)
        found = search_maximum(engine, limit, runs=TRACED_RUNS)
        maximum = None if found.maximum is None else found.maximum * size
        recommended, safe = picks_below(maximum, rounding)
        curve = [SequencePoint(p.batch_size * size, p.footprint) for p in found.points]
        note = _note(maximum, batch, size, found, engine, model_context)
        results.append(SequencePicks(batch, maximum, recommended, safe, found.extrapolated, note, curve))
    return SequenceSearch(size, multiple[1], model_context, "traced", results)


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
