"""The evaluation step (model.eval(), torch.no_grad(): forward only) of an analysis: traced at its batch
(training_loop.eval_steps) and the largest evaluation batch that fits, with the same batch search as training."""

from __future__ import annotations

from dataclasses import replace

from gpumem_kernel.analysis.search.engines import TracedEngine
from gpumem_kernel.analysis.model.model_states import Sharding
from gpumem_kernel.analysis.report.report import DeviceInfo, Evaluation
from gpumem_kernel.analysis.search.max_batch import search_maximum
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan

EVAL_RULE_OF_THUMB = 1.3  # the guides' evaluation batch: at most 1.3 x the training batch unless measured


def evaluate(
    plan: TracePlan, info: DeviceInfo, sharding: Sharding, eval_batch: int, batch_size: int, traced: bool
) -> Evaluation:
    """The evaluation step on the traced engine (its own plan: evaluation=True) and the same batch search."""
    eval_plan = replace(plan, evaluation=True, stack_hook=None)
    engine = TracedEngine(eval_plan, info.context_to_add, sharding, info.limit_bytes)  # the allocator's last resort
    try:
        point = engine.point(eval_batch)
    except TraceError as exc:
        reason = str(exc).replace("training step failed while tracing: ", "")
        raise TraceError(f"the evaluation step at batch {eval_batch} could not be traced: {reason}") from None
    assert point is not None and point.trace is not None  # point() raises for its first batch
    found = search_maximum(engine, info.limit_bytes)
    rule = max(1, int(batch_size * EVAL_RULE_OF_THUMB))
    parts = [
        "model.eval() under torch.no_grad(): forward only; parameters and buffers resident, no gradients "
        "or optimizer state"
    ]
    if not traced:
        parts.append("traced (the training figures are measured on the GPU)")
    if found.note:
        parts.append(found.note)
    return Evaluation(
        batch=eval_batch,
        training_batch=batch_size,
        peak_live_bytes=point.trace.peak_live,
        peak_allocated_bytes=point.allocated,
        peak_reserved_bytes=point.reserved or 0,
        peak_bytes=point.footprint,
        activations_bytes=point.trace.activations,
        input_bytes=point.trace.input,
        max_batch=found.maximum,
        rule_of_thumb_batch=rule,
        engine="traced",
        note="; ".join(parts),
    )
