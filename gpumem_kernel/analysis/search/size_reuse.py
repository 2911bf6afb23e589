"""The traced stream at one size predicted from the streams at a few others, so that a search traces a handful of
sizes instead of every candidate.

For a fixed model, optimizer and options the trace's storages and events (allocations and frees, in order) have the
same structure at every batch size: only the storages' bytes change, each a polynomial in the size (affine in the
batch; quadratic in the sequence length where attention keeps L x L scores). SizeFit keeps the streams of the sizes
traced so far while their structure is the same (the same storages, born and freed at the same places, the same
phases and op markers), and predicts each storage's bytes at another size by exact integer interpolation through
degree + 1 of them; the others must lie on the same polynomials, to the byte. The predicted stream is summarized as
a traced one is (analysis.trace.summary), the allocator replay included. Where a stream's structure differs (a kernel
chosen by size, a mask's count), the sizes traced before it are forgotten and prediction waits for enough of the new
structure; a bytes count off the polynomial, or not a whole number, leaves that size to be traced.

A prediction is no trace: the search confirms its answer (the maximum and the size above) with real traces and
searches again without prediction where one disagrees (analysis.search.engines.TracedEngine.confirm)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult
from gpumem_kernel.analysis.trace.summary import TracedStream, summarize
from gpumem_kernel.analysis.trace.tracker import heap_frozen

AFFINE = 1  # bytes against the batch size
QUADRATIC = 2  # bytes against the sequence length (attention's L x L scores)


@dataclass
class _Sample:
    size: int
    stream: TracedStream
    trace: TraceResult  # the traced result whose notes and settings a prediction carries


def _structure(stream: TracedStream) -> Tuple[Any, ...]:
    """Everything of a stream but its bytes: what must be equal for its bytes to be predicted from another's."""
    records = [(r.sid, r.phase, r.step, r.micro, r.alloc_index, r.free_index, r.role, r.host) for r in stream.records]
    markers = [(m.index, m.kind, m.phase) for m in stream.markers]
    return (records, stream.events, sorted(stream.spans.items()), markers)


def _sizes(stream: TracedStream) -> List[int]:
    """The stream's bytes, in a fixed order: each storage's, then each op marker's (a cuDNN workspace)."""
    return [r.nbytes for r in stream.records] + [m.nbytes for m in stream.markers]


class _Interpolation:
    """Exact integer Lagrange interpolation through (x_i, y_i): y(x) = sum(y_i * w_i) / d, with integer weights."""

    def __init__(self, xs: Sequence[int], x: int) -> None:
        numerators, denominators = [], []
        for i, xi in enumerate(xs):
            num = den = 1
            for j, xj in enumerate(xs):
                if j != i:
                    num *= x - xj
                    den *= xi - xj
            numerators.append(num)
            denominators.append(den)
        self.d = abs(math.lcm(*denominators))
        self.weights = [n * (self.d // den) for n, den in zip(numerators, denominators)]

    def value(self, ys: Sequence[int]) -> Optional[int]:
        total = sum(y * w for y, w in zip(ys, self.weights))
        return total // self.d if total % self.d == 0 else None


class SizeFit:
    """The streams traced at a few sizes of one structure, and the stream they predict at another size."""

    def __init__(self, degree: int = AFFINE) -> None:
        self.degree = degree
        self.samples: List[_Sample] = []
        self.structure: Optional[Tuple[Any, ...]] = None
        self.varying: List[Tuple[int, Tuple[int, ...]]] = []  # (position in _sizes, the bytes at each fit size)
        self.consistent = True  # every traced size of the structure lies on the fit, to the byte

    def ready(self) -> bool:
        return self.consistent and len(self.samples) > self.degree

    def add(self, size: int, trace: TraceResult) -> bool:
        """A traced size: another point of the fit, or the first of a new structure. True when its stream is what
        the fit predicted (or the fit had too few sizes to predict it)."""
        stream = trace.stream
        if stream is None or any(s.size == size for s in self.samples):
            return True
        could = self.ready()
        structure = _structure(stream)
        if structure != self.structure:
            self.samples, self.structure, self.consistent, self.varying = [], structure, True, []
            self.samples.append(_Sample(size, stream, trace))
            return not could
        self.samples.append(_Sample(size, stream, trace))
        if len(self.samples) == self.degree + 1:
            self._fit()
        elif len(self.samples) > self.degree + 1:
            self.consistent = self.consistent and self._sizes_at(size) == _sizes(stream)
        return self.consistent

    def _fit(self) -> None:
        columns = zip(*(_sizes(s.stream) for s in self.samples))
        self.varying = [(i, ys) for i, ys in enumerate(columns) if any(y != ys[0] for y in ys)]

    def _sizes_at(self, size: int) -> Optional[List[int]]:
        """Every bytes count of the stream at `size`, or None where one is not a whole number of bytes."""
        fit = self.samples[: self.degree + 1]
        sizes = _sizes(fit[0].stream)
        curve = _Interpolation([s.size for s in fit], size)
        for i, ys in self.varying:
            value = curve.value(ys)
            if value is None or value < 0:
                return None
            sizes[i] = value
        return sizes

    def at_batch(self, here: TraceResult, there: TraceResult, size: int, ratio: Tuple[int, int]) -> Optional["SizeFit"]:
        """This fit over the sequence length at one batch, moved to another: `here` and `there` are the traces of
        the two batches at one length (`size`, in the fit's units), ratio = (the other batch, this batch). A
        storage's bytes are a product of its dimensions, so each is either the same at both batches or in their
        ratio, as the two traces show; the fit's samples are scaled so, and the moved fit must give `there` at
        `size` to the byte. None where the structures differ, a storage is neither (a dimension such as
        batch x length + c) or the check fails: the other batch then traces its own samples."""
        if not self.ready() or here.stream is None or there.stream is None:
            return None
        if not self.structure == _structure(here.stream) == _structure(there.stream):
            return None
        other, this = ratio
        scaled = []
        for i, (a, b) in enumerate(zip(_sizes(here.stream), _sizes(there.stream))):
            if a != b:
                if a * other != b * this:
                    return None
                scaled.append(i)
        moved = SizeFit(self.degree)
        moved.structure = self.structure
        for sample in self.samples[: self.degree + 1]:
            sizes = _sizes(sample.stream)
            if any(sizes[i] * other % this for i in scaled):
                return None
            for i in scaled:
                sizes[i] = sizes[i] * other // this
            moved.samples.append(_Sample(sample.size, _with_sizes(sample.stream, sizes, scaled), there))
        moved._fit()
        return moved if moved._sizes_at(size) == _sizes(there.stream) else None

    def predict(self, size: int, plan: TracePlan) -> Optional[TraceResult]:
        """The trace at `size` as its stream would summarize, or None when it cannot be predicted."""
        if not self.ready():
            return None
        sizes = self._sizes_at(size)
        if sizes is None:
            return None
        base = self.samples[0]
        with heap_frozen():  # a stream's worth of new records and allocator blocks
            stream = _with_sizes(base.stream, sizes, [i for i, _ in self.varying])
            result = summarize(stream, size, base.trace.fake, plan)
        result.dropped_hooks = base.trace.dropped_hooks
        result.replication = base.trace.replication
        result.loss_source = base.trace.loss_source
        result.step_autocast = base.trace.step_autocast
        result.op_kinds = base.trace.op_kinds
        result.notes = list(base.trace.notes)
        return result


def _with_sizes(stream: TracedStream, sizes: List[int], changed: List[int]) -> TracedStream:
    """The stream with the bytes at positions `changed` (of _sizes) replaced; the unchanged records are shared."""
    records, markers = list(stream.records), list(stream.markers)
    count = len(records)
    for i in changed:
        if i < count:
            records[i] = records[i].with_bytes(sizes[i])
        else:
            marker = copy.copy(markers[i - count])
            marker.nbytes = sizes[i]
            markers[i - count] = marker
    return TracedStream(records, stream.events, stream.spans, markers)
