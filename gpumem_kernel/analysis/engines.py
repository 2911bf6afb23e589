"""The two engines behind one report, as the batch search sees them: point(batch) -> the step's peak
footprint at that batch (per rank), or None where it cannot run. Traced: fake CPU tensors replayed through the
allocator model; measured: real steps on the GPU (analysis.measure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional, Tuple

from gpumem_kernel.analysis.measure import measure_step_peaks
from gpumem_kernel.analysis.model_states import _Sharding
from gpumem_kernel.analysis.trace import run_trace
from gpumem_kernel.analysis.trace_plan import TraceError, TracePlan, TraceResult


@dataclass
class _Point:
    batch_size: int
    allocated: int
    reserved: Optional[int]
    footprint: int  # reserved (or allocated) + context, per rank
    engine: str
    trace: Optional[TraceResult] = None


class _TracedEngine:
    name = "traced"

    def __init__(self, plan: TracePlan, context: int, sharding: _Sharding) -> None:
        self.plan, self.context, self.sharding = plan, context, sharding
        self.cache: Dict[int, Optional[_Point]] = {}
        self.errors: Dict[int, str] = {}

    def point(self, batch: int, stack_hook: Optional[Callable[[], Any]] = None) -> Optional[_Point]:
        if batch not in self.cache:
            plan = self.plan if stack_hook is None else replace(self.plan, stack_hook=stack_hook)
            try:
                trace = run_trace(plan, batch, fake=True)
            except TraceError as exc:
                if not self.cache:
                    raise  # the user's own batch size must trace
                self.errors[batch] = str(exc)  # e.g. BatchNorm at batch 1: the search treats it as not fitting
                self.cache[batch] = None
                return None
            b = trace.breakdown
            saving = self.sharding.saving(b["parameter"], b["gradient"], b["optimizer_state"])
            allocated = trace.device.peak_allocated - saving
            reserved = trace.device.peak_reserved - saving
            self.cache[batch] = _Point(batch, allocated, reserved, reserved + self.context, "traced", trace)
        return self.cache[batch]


class _MeasuredEngine:
    """Real steps on a copy of the model on the GPU. Written for CUDA builds; tested with the `gpu` marker."""

    name = "measured"

    def __init__(self, plan: TracePlan, device: Any, sharding: _Sharding, states: Tuple[int, int, int]) -> None:
        self.plan, self.device, self.sharding, self.states = plan, device, sharding, states
        self.cache: Dict[int, Optional[_Point]] = {}

    def point(self, batch: int) -> Optional[_Point]:
        if batch not in self.cache:
            measured = measure_step_peaks(self.plan, batch, self.device)
            if measured is None:
                self.cache[batch] = None
            else:
                allocated, reserved = measured
                saving = self.sharding.saving(*self.states)
                self.cache[batch] = _Point(batch, allocated - saving, reserved - saving, reserved - saving, "measured")
        return self.cache[batch]
