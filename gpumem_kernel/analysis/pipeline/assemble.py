"""Assembling the AnalysisReport from an analysis' runs: the settings, the labelled figures and which
engine produced each, the notes on how the step was traced, the per-rank figures and the error bound."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.search.engines import Point
from gpumem_kernel.analysis.gpus.lookup import MiB
from gpumem_kernel.analysis.model.model_states import (
    parameter_count,
    OptimizerModel,
    largest_layer_of,
    optimizer_settings,
    Sharding,
    unique_tensors,
    bytes_by_dtype,
    model_optimizer_state,
    read_optimizer_state,
    unique_bytes,
)
from gpumem_kernel.analysis.report.picks import RECOMMENDED_SHARE, SAFE_SHARE, Rounding
from gpumem_kernel.analysis.report.report import (
    AnalysisReport,
    CurvePoint,
    DeviceInfo,
    Distributed,
    ErrorBound,
    Evaluation,
    Figure,
    Recommendations,
)
from gpumem_kernel.analysis.report.gpu_accuracy import LIBRARY_MODULES_MIB, traced_bound
from gpumem_kernel.analysis.report.render import accumulation_code, analysis_yaml
from gpumem_kernel.analysis.request.request import AnalysisRequest
from gpumem_kernel.analysis.search.max_batch import Search
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult
from gpumem_kernel.analysis.trace.training_loop import default_loss
from gpumem_kernel.analysis.trace.user_step import optimizers_of
from gpumem_kernel.render.units import format_bytes

OPTIMIZER_NAMES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "sgd-momentum": "SGD (momentum 0.9)"}
CONTEXT_UNCERTAINTY = 160 * MiB


def plan_notes(plan: TracePlan, info: DeviceInfo, trace: TraceResult, amp: Optional[str], model: Any) -> List[str]:
    notes: List[str] = []
    if trace.step_autocast is not None:
        notes.append(
            f"your step enters {trace.step_autocast.text()}: traced with it, and the settings say so "
            + ("(the request's amp= runs around it)" if plan.amp is not None else "(AMP on, though amp= was not given)")
        )
    if amp is not None:
        notes.append(
            "AMP traced with CPU autocast under CUDA's autocast policy (normalisation, softmax, reductions and "
            "element-wise math in fp32; mixed arguments promoted as CUDA's promotes them)"
        )
    if amp == "fp16":
        notes.append("fp16 AMP traced with bf16 (same 2-byte width) on CPU; GradScaler's few scalars not counted")
    if amp == "bf16" and info.bf16 is False:
        notes.append(f"{info.name} has no bf16 support: use amp='fp16'")
    if trace.dropped_hooks:
        notes.append(f"{trace.dropped_hooks} user hook(s) left out of the trace copy")
    if plan.grad_accum > 1:
        notes.append(f"gradient accumulation: 2 of {plan.grad_accum} micro-batches traced (memory repeats)")
    notes += _mode_notes(model)
    if any(type(m).__name__ in ("LSTM", "GRU", "RNN") for m in model.modules()):
        notes.append("RNNs: CUDA runs cuDNN RNN kernels whose reserve space differs from the CPU trace")
    return notes


def _mode_notes(model: Any) -> List[str]:
    """The trace keeps every module's mode: say so where a mode is not train()."""
    if not model.training:
        return [
            "the model is in eval mode: traced as you left it (dropout off, BatchNorm on running statistics); "
            "call model.train() first to analyse a training-mode step"
        ]
    in_eval: List[str] = []

    def walk(module: Any, prefix: str) -> None:
        for name, child in module.named_children():
            if not child.training:
                in_eval.append(f"{prefix}{name} ({type(child).__name__})")  # its whole subtree, once
            else:
                walk(child, f"{prefix}{name}.")

    walk(model, "")
    if not in_eval:
        return []
    shown = ", ".join(in_eval[:4]) + (f", … {len(in_eval) - 4} more" if len(in_eval) > 4 else "")
    return [f"{len(in_eval)} submodule(s) in eval mode, traced as you left them: {shown}"]


def _figures(
    engine: str,
    trace: TraceResult,
    info: DeviceInfo,
    user_opt: Optional[Tuple[int, int]],
    modelled: OptimizerModel,
    point: Point,
    plan: TracePlan,
) -> List[Figure]:
    act_engine = "traced"
    opt_figure = (
        Figure("optimizer", user_opt[0], "read", "your optimizer's state tensors")
        if user_opt
        else Figure(
            "optimizer",
            trace.optimizer_state,
            "traced",
            f"modelled: {format_bytes(modelled.state_bytes, 'fit')}" if modelled.known else "traced only",
        )
    )
    return [
        Figure("parameters", trace.parameters, "read", "unique storages (tied weights once)"),
        Figure("buffers", trace.buffers, "read", ""),
        Figure("gradients", trace.gradients, "traced", "one per trainable parameter"),
        opt_figure,
        Figure(
            "optimizer_transient",
            trace.optimizer_transient,
            "traced",
            f"temporaries during step(); modelled {format_bytes(modelled.transient_bytes, 'fit')}"
            if modelled.known
            else "temporaries during step()",
        ),
        Figure("activations", trace.activations, act_engine, "kept by the forward pass for backward"),
        Figure("input", trace.input, "traced", "one batch"),
        Figure("peak_allocated", point.allocated, engine, "steady state: step 2"),
        Figure(
            "peak_reserved",
            point.reserved,
            engine,
            "caching-allocator model" if engine == "traced" else "torch.cuda.max_memory_reserved",
        ),
        Figure(
            "cublas_workspace",
            trace.cublas_bytes,
            "source",
            "CublasHandlePool.cpp for this torch: one per thread (forward, autograd), cuBLASLt's too where kept",
        ),
        Figure("cudnn_workspace", trace.cudnn_peak_bytes, "estimate", "per convolution, capped at 128 MiB"),
        Figure(
            "context",
            info.context_bytes,
            "estimate" if info.context_source == "estimate" else "nvml",
            {
                "estimate": info.context_basis or "CUDA context + kernels, by GPU generation",
                "nvml": "this kernel's, already in use",
                "in use": "already in use, size not visible to NVML",
                "none": "no GPU",
            }[info.context_source],
        ),
        Figure(
            "peak",
            point.footprint,
            engine,
            "peak_reserved + context: the step's device footprint"
            if info.context_to_add
            else "peak_reserved: the step's device footprint (no context added: "
            + ("none counted without a GPU)" if info.context_source == "none" else "already in use)"),
        ),
    ]


@dataclass(frozen=True)
class Setup:
    """What the analysis traced: the model (the planning copy), the optimizer kind, the plan, the device limit."""

    model: Any
    kind: Any
    plan: TracePlan
    info: DeviceInfo
    sharding: Sharding
    input_text: str
    picks_rounding: Tuple[Rounding, str]


@dataclass(frozen=True)
class Outcome:
    """What the engines found: the analysed step's trace and point, the search, the picks."""

    engine: str
    trace: TraceResult
    point: Point
    found: Search
    recs: Recommendations
    amp_saved: Optional[int]
    evaluation: Optional[Evaluation] = None


def build_report(
    request: AnalysisRequest, setup: Setup, outcome: Outcome, notes: List[str], elapsed: float
) -> AnalysisReport:
    model, plan, info, sharding = setup.model, setup.plan, setup.info, setup.sharding
    engine, trace, point, found, recs = outcome.engine, outcome.trace, outcome.point, outcome.found, outcome.recs
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    optimizer = _optimizer_read(setup.kind, trainable)
    settings = _settings(request, setup, outcome, optimizer.label)
    distributed = _distributed(sharding, trace, point, recs) if sharding.world_size > 1 or sharding.strategy else None
    notes.extend(note for note in sharding.notes() if note not in notes)  # a search assembles more than once
    user_opt = optimizer.user
    figures = _figures(engine, trace, info, user_opt, optimizer.modelled, point, plan)
    if engine == "measured":
        notes.append("breakdown figures are from a trace of the same step; peaks are measured on the GPU")
    return AnalysisReport(
        engine=engine,
        model_name=type(model).__name__,
        parameter_count=parameter_count(model, params),
        trainable_parameter_count=sum(p.numel() for p in unique_tensors(trainable)),
        parameters_by_dtype=bytes_by_dtype(params),
        buffers_by_dtype=bytes_by_dtype(list(model.buffers())),
        largest_layer=largest_layer_of(model),
        settings=settings,
        parameters_bytes=unique_bytes(params),
        buffers_bytes=unique_bytes(list(model.buffers())),
        gradients_bytes=trace.gradients,
        optimizer_bytes=user_opt[0] if user_opt else trace.optimizer_state,
        optimizer_host_bytes=user_opt[1] if user_opt else trace.optimizer_host,
        optimizer_transient_bytes=trace.optimizer_transient,
        activations_bytes=trace.activations,
        input_bytes=trace.input,
        autocast_cache_bytes=trace.autocast_cache,
        temporary_bytes=trace.breakdown["temporary"],
        peak_live_bytes=trace.peak_live,
        peak_allocated_bytes=point.allocated,
        peak_reserved_bytes=point.reserved,
        context_bytes=info.context_bytes,
        workspace_bytes=trace.cublas_bytes + trace.cudnn_peak_bytes,
        peak_bytes=point.footprint,
        figures=figures,
        breakdown_at_peak=dict(trace.breakdown),
        phase_peaks=dict(trace.phase_peaks),
        peak_phase=trace.peak_phase,
        amp_saved_bytes=outcome.amp_saved,
        allocator=_allocator_summary(trace.device),
        device=info,
        curve=[CurvePoint(p.batch_size, p.footprint, p.allocated, p.reserved, p.engine) for p in found.points],
        fit=found.fit,
        recommendations=recs,
        distributed=distributed,
        error_bound=_error_bound(engine, info, found, trace),
        notes=notes,
        elapsed_seconds=round(elapsed, 3),
        evaluation=outcome.evaluation,
    )


@dataclass(frozen=True)
class _OptimizerRead:
    """The optimizer as the report shows it: the user's own state (bytes on the device and host) when it has any,
    the state modelled before a step, and its name in the settings."""

    user: Optional[Tuple[int, int]]
    modelled: OptimizerModel
    label: str


def _optimizer_read(kind: Any, trainable: List[Any]) -> _OptimizerRead:
    several = optimizers_of(kind) if isinstance(kind, (tuple, list, dict)) else None
    if several:  # a step of the user's own with several optimizers: their state is the trace's
        joined = " + ".join(type(opt).__name__ for opt in several)
        return _OptimizerRead(None, OptimizerModel(0, 0, 0, known=False), OPTIMIZER_NAMES.get(joined, joined))
    user_opt = None if isinstance(kind, str) else read_optimizer_state(kind)
    opt_name, _ = optimizer_settings(kind)
    label = OPTIMIZER_NAMES.get(opt_name, opt_name) if isinstance(kind, str) else type(kind).__name__
    return _OptimizerRead(user_opt, model_optimizer_state(trainable, kind), label)


def _settings(request: AnalysisRequest, setup: Setup, outcome: Outcome, optimizer: str) -> Dict[str, Any]:
    """The report's settings: the analysed configuration as the user asked for it and as it was traced."""
    plan, sharding, picks_rounding = setup.plan, setup.sharding, setup.picks_rounding
    device, memory = request.device, request.memory
    return {
        "batch_size": request.batch_size,
        "input": setup.input_text,
        "loss": _loss_setting(plan, outcome.trace),
        "optimizer": optimizer,
        "amp": traced_amp(plan, outcome.trace),
        "grad_accum": plan.grad_accum,
        "checkpointing": plan.checkpointing,
        "device": None if device is None else str(device),
        "target": request.target,
        "memory": None if memory is None else str(memory),
        "world_size": sharding.world_size,
        "strategy": sharding.strategy,
        "multiple": picks_rounding[0].multiple,
        "effective_batch": outcome.recs.accumulation.target_effective_batch,
        # how the picks were rounded (--round's value) and where that came from: option | setting | default
        "round": picks_rounding[0].code,
        "round_source": picks_rounding[1],
        # the shares of the maximum the recommended and safe picks aim at, before rounding
        "pick_shares": {"recommended": RECOMMENDED_SHARE, "safe": SAFE_SHARE},
        **_step_autocast(outcome.trace),
    }


def traced_amp(plan: TracePlan, trace: TraceResult) -> Optional[str]:
    """The AMP the traced step ran: the request's, else the autocast a step of the user's own entered."""
    seen = trace.step_autocast
    return plan.amp if plan.amp is not None else (seen.amp if seen is not None else None)


def _step_autocast(trace: TraceResult) -> Dict[str, Any]:
    """settings.step_autocast when the user's step entered autocast (absent otherwise, as in older payloads)."""
    seen = trace.step_autocast
    return {} if seen is None else {"step_autocast": {"device_type": seen.device_type, "amp": seen.amp}}


def _allocator_summary(device_result: Any) -> Dict[str, Any]:
    """The allocator model's segments at the end of the replay, by pool, and its fragmentation."""
    return {
        "segments": len(device_result.segments),
        "small_segments": sum(1 for s in device_result.segments if s.pool == "small"),
        "large_segments": sum(1 for s in device_result.segments if s.pool == "large"),
        "fragmentation": round(device_result.fragmentation, 4),
    }


def _loss_setting(plan: TracePlan, trace: TraceResult) -> str:
    if plan.loss_fn is not default_loss:
        return getattr(plan.loss_fn, "__name__", "custom")
    return "the model's own (output.loss)" if trace.loss_source == "model" else "default"


def _distributed(sharding: Sharding, trace: TraceResult, point: Point, recs: Recommendations) -> Distributed:
    if sharding.traced is not None:
        return _traced_distributed(sharding, point)
    fp, fg, fo = sharding.factors()
    extra, extra_note = sharding.extra()
    note = (
        "per-rank model states by the strategy's sharding, activations of this rank's batch (not sharded); "
        "communication buffers (NCCL) are not counted"
    )
    return Distributed(
        world_size=sharding.world_size,
        strategy=sharding.strategy or "ddp",
        parameters_bytes=int(trace.parameters * fp),
        gradients_bytes=int(trace.gradients * fg),
        optimizer_bytes=int(trace.optimizer_state * fo),
        extra_bytes=extra,
        extra_note=extra_note,
        activations_bytes=trace.activations,
        peak_bytes=point.footprint,
        note=note,
    )


# what the wrappers hold besides the states (analysis.trace.ranks.RankPeak.breakdown), in the report's words
_HELD = {"held": "DDP's gradient buckets", "gathered": "parameters FSDP gathered in full"}


def _traced_distributed(sharding: Sharding, point: Point) -> Distributed:
    """The per-rank lines from rank 0's traced step: what it holds at its peak, by what holds it."""
    traced = sharding.traced
    held = traced.rank.breakdown
    extra = {name: held.get(key, 0) for key, name in _HELD.items() if held.get(key, 0)}
    note = (
        f"traced: rank 0's step as {traced.setup.label()} runs it (PyTorch's own wrappers on fake tensors under a "
        "fake process group), figures at its peak; a real rank matches it to the byte under DDP and ZeRO-1, and "
        "under FSDP may hold a collective's buffers more while the backend finishes with them; "
        "communication buffers (NCCL) are not counted"
    )
    if (sharding.strategy or "").startswith("zero"):
        note += "; DeepSpeed's ZeRO stage of that name keeps its own buffers (not traced)"
    return Distributed(
        world_size=sharding.world_size,
        strategy=sharding.strategy or "ddp",
        parameters_bytes=held.get("parameter", 0) + held.get("buffer", 0),
        gradients_bytes=held.get("gradient", 0),
        optimizer_bytes=held.get("optimizer_state", 0),
        extra_bytes=sum(extra.values()),
        extra_note=", ".join(extra),
        activations_bytes=held.get("activation", 0) + held.get("input", 0),
        peak_bytes=point.footprint,
        note=note,
        engine="traced",
    )


def _error_bound(engine: str, info: DeviceInfo, found: Search, trace: TraceResult) -> ErrorBound:
    residual = found.fit.max_relative_residual if found.fit and found.fit.max_relative_residual else 0.0
    absolute = CONTEXT_UNCERTAINTY if info.context_source == "estimate" else 0
    if engine == "measured":
        relative = round(residual + 0.02, 4)
        statement = (
            f"measured peaks of steps 2-3 on this GPU; linear fit residual {residual:.1%}; "
            f"expect within ±{relative:.0%} for runs like these"
        )
    else:
        relative, statement = traced_bound(trace.op_kinds)
        if absolute:
            low, high = LIBRARY_MODULES_MIB
            statement += (
                f"; plus ±{format_bytes(absolute, 'MiB', 0)} for the estimated CUDA context, whose libraries' "
                f"modules are not counted ({low}-{high} MiB more on that GPU)"
            )
    return ErrorBound(relative, absolute, statement)


def with_snippets(report: AnalysisReport) -> AnalysisReport:
    """The complete report with what "Copy as YAML" copies and "Insert code" inserts, written from its payload."""
    payload = report.to_payload()
    return replace(report, config_yaml=analysis_yaml(payload), accumulation_code=accumulation_code(payload))
