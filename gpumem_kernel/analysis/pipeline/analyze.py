"""Model memory analysis and batch-size recommendations: `analyze()`, and the script API's print_memory_analysis()
and recommend_batch_size() over it.

Two engines, one report (see shared/notes/memory-estimation.md):
- *traced* (no GPU needed, or planning for another GPU): two training steps on fake CPU tensors, every
  storage followed by category, the event stream replayed through a model of the CUDA caching allocator
  (trace/run.py, allocator/caching_allocator.py), plus the CUDA context and workspaces;
- *measured* (CUDA already initialised by the user, or `device="cuda"` asked explicitly): three real steps on
  a copy of the model at each batch size the search tries (at most MEASURED_RUNS) from a clean allocator,
  peaks of steps 2–3, linear fit, residuals.

The maximum batch is searched from the same first batch (SEED) whatever batch the user analyses: it is a
property of the model, the step and the device. The picks below it are rounded as analysis.report.picks says.

The user's model, optimizer and RNG state are never touched: every run works on copies, and the RNG state
is restored. torch is imported inside functions only.

analyze() runs the parts in order: arguments (checks), inputs (the batches), device (the limit), engines with
measure (real steps) and search (the maximum), recommendations (the picks), evaluation (eval_batch=), and
assemble (the AnalysisReport of report.py). The request's on_progress hears each phase and trace
(analysis.request.progress).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.gpus import lookup as gpus
from gpumem_kernel.analysis.allocator.caching_allocator import settings_from_env
from gpumem_kernel.analysis.request.arguments import check_model, optimizer_kind
from gpumem_kernel.analysis.pipeline.assemble import (
    Outcome,
    Setup,
    build_report,
    plan_notes,
    traced_amp,
    with_snippets,
)
from gpumem_kernel.analysis.pipeline.device import (
    measured_device,
    measured_limit,
    basis_notes,
    cuda_notes,
    device_limit,
)
from gpumem_kernel.analysis.search.engines import MeasuredEngine, Point, TraceMemo, TracedEngine, retry_note
from gpumem_kernel.analysis.search.evaluation import evaluate
from gpumem_kernel.analysis.model.fine_tune import FineTunePlan, add_to_report, planned_model
from gpumem_kernel.analysis.model.fine_tune import check as check_fine_tune
from gpumem_kernel.analysis.model.fine_tune import check_peft
from gpumem_kernel.analysis.model.quantize import with_bnb_version
from gpumem_kernel.analysis.gpus.lookup import GiB
from gpumem_kernel.analysis.allocator.import_guard import import_repair
from gpumem_kernel.analysis.request.inputs import batch_maker
from gpumem_kernel.analysis.trace.llm_facts import llm_facts, output_vocabulary
from gpumem_kernel.analysis.trace.optimizer_replay import OptimizerReplay
from gpumem_kernel.analysis.model.model_states import largest_layer_of, Sharding, on_meta, unique_bytes
from gpumem_kernel.analysis.report.picks import from_options as rounding_from_options
from gpumem_kernel.analysis.report.picks import resolve as resolve_rounding
from gpumem_kernel.analysis.search.recommendations import recommend
from gpumem_kernel.analysis.report.report import AnalysisReport
from gpumem_kernel.analysis.request.progress import ProgressReporter
from gpumem_kernel.analysis.request.request import AnalysisRequest, request_of
from gpumem_kernel.analysis.fake.size_hints import check as check_size_hints
from gpumem_kernel.analysis.search.max_batch import MEASURED_RUNS, TRACED_RUNS, nothing_fits, search_maximum
from gpumem_kernel.analysis.search.max_batch import with_analysed_batch
from gpumem_kernel.analysis.search.max_sequence import check_batches, model_context, resolve_multiple, search_sequences
from gpumem_kernel.analysis.request.sequence import at_sequence, sequence_of
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult
from gpumem_kernel.analysis.trace.ranks import RankTraceError, plan_rank
from gpumem_kernel.analysis.fake.torch_rules import parse as parse_torch
from gpumem_kernel.analysis.fake.torch_rules import resolve as resolve_torch
from gpumem_kernel.analysis.trace.training_loop import default_loss
from gpumem_kernel.analysis.trace.user_step import optimizers_of
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.snippets import AMP_DTYPES


@import_repair()  # a Ctrl-C in a lazy import leaves no half-imported module (analysis.allocator.import_guard)
def analyze(model: Any, request: Optional[AnalysisRequest] = None, **keywords: Any) -> AnalysisReport:
    """Memory of one training step of `model` at `request.batch_size`, and the batch sizes that fit. The options
    are an AnalysisRequest, or its fields as keywords (analyze(model, batch_size=32, input=...)):

    input: a shape without the batch ((3, 224, 224), '3x224x224', (512,) tokens for a model starting with
    an Embedding), a sample batch tensor (or tuple / dict of them), or a callable batch_size -> batch.
    loss: callable(output, batch) -> scalar (default: mean of the squared floating outputs).
    optimizer: adamw | adam | sgd | sgd-momentum, or your optimizer (its class, settings and state are used).
    target / memory: plan for a GPU from gpu_table.py or a memory size ('16GiB'); both: that GPU's compute
    capability within that memory (a MIG slice, a share); the traced engine is used.
    reserve: safety reserve in bytes or as a fraction (default max(5%, 512 MiB)).
    rounding: how the recommended and safe picks are rounded down: 'pow2', 'none' or N (a multiple of N;
    `multiple=N` says the same); default: the JupyterLab setting "Batch-size rounding", else pow2.
    The maximum does not depend on batch_size: the search starts from the same batch for every batch_size.
    stack_hook / on_trace (the predicted timeline, timeline.predicted): stack_hook is called at each storage
    birth of the trace of `batch_size` (and no other), and on_trace gets that trace, its events kept.
    eval_batch: also predict the evaluation step at that batch (model.eval(), torch.no_grad(), forward only)
    and the largest evaluation batch that fits (report.evaluation); always traced.
    step: your own training step, step(model, optimizer, batch), traced on copies in place of the built-in one
    (trace_step); `optimizer` may then be a tuple, list or dict of your optimizers, passed to it as given.
    keep_grads: zero_grad(set_to_none=False), gradients kept allocated between steps (the built-in step).
    torch_version: plan for that torch ('1.10'): its memory rules (analysis.fake.torch_rules), workspaces and context;
    default the running torch (an unreadable version falls back to it, with a note). cuda_version: the CUDA
    runtime of that torch's build ('11.2'), for the context (lazy module loading); default the running torch's,
    unknown when another torch is planned.
    size_hints: sizes that depend on tensor values (nonzero, boolean masks, unique): a fraction selected or
    distinct (0.1), or {'select': 0.1, 'unique': 0.25, 'repeat': 4, 'loss.py:400': 0.5}; default every element
    (an upper bound), each rule noted in the report (analysis.fake.size_hints).
    seq: tokens per sample of a token input (a token count, a sample batch of token ids, or a model by name's batch);
    one-line ValueError for an input that is not token ids.
    search: "batch" (the batch picks, always made), or "seq": also the longest sequence that fits at each batch of
    seq_batches (default 1, 4, 8), with its recommended and safe lengths, in multiples of seq_multiple tokens
    (default: the JupyterLab setting "Sequence-length multiple", else 64): report.sequence_search (seq_search.py).
    lora: LoRA adapters added to a copy of the model for the plan, 'r=16,targets=q_proj,v_proj,alpha=32,dropout=0.05',
    a rank, or a dict of those keys (analysis.model.lora; targets default to the attention projections found by name).
    quantize: 'nf4' | 'fp4' | 'int8' (with ',double=off', ',compute=fp16', ',threshold=6'): the copy's Linear layers
    traced as bitsandbytes runs them (analysis.model.quantize). Either plans on a copy: traced, never measured.
    peft: a PEFT adapter config as adapter_config.json holds it (that file's path, a directory holding it, its JSON
    text, a dict or a peft.PeftConfig): LoRA (DoRA, rsLoRA, modules_to_save), IA3, LoHa, LoKr, LN tuning, prompt,
    prefix or P-tuning, added to the copy with peft's get_peft_model (analysis.model.peft_config); not with lora=.
    bnb_version: plan quantize= for that bitsandbytes ('0.41'): its memory rules (analysis.model.bnb_rules: a 4-bit
    layer kept its input for backward before 0.43.2, its forward dequantised into the dtype it was quantised from and
    cast before 0.50.0); default the layers as 0.50 and later run them.
    padded: the token batch (input=N tokens) carries an attention_mask with padding and labels -100 there, as a
    fine-tuning loop's padded batches do (analysis.request.inputs.padded_tokens); transformers then builds a 4-D mask
    and expands a grouped-query model's K/V (report.llm.attention_path names the path traced).
    expandable_segments: trace the caching allocator with expandable segments, as
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True runs it (default: as the environment says).
    on_progress: called with a Progress (analysis.request.progress) as each phase and each trace begins and as each
    trace ends, between traces only: a front end draws it (the magic's progress line); what it raises stops the
    analysis there, the user's objects untouched.
    Raises ValueError with a one-line message on bad arguments.
    """
    import torch

    started = time.perf_counter()
    check_model(model)
    request = request_of(request, keywords)
    # Adapters are initialised at random on the planning copy (LoRA's A, a prompt's embeddings): the user's random
    # stream stays where it was, so a seeded notebook draws the same numbers with or without an analysis between.
    # devices=[]: the CPU generator only; a CUDA generator is never touched, so no CUDA context is made.
    with torch.random.fork_rng(devices=[]):
        prepared = _prepare(model, request)
        prepared.plan.progress = ProgressReporter(request.on_progress, started)
        ran = _run_engines(prepared, request)
        report = _report(prepared, ran, request, started)
    prepared.plan.progress.finish()
    return report


@dataclass
class _Prepared:
    """What analyze() builds before any batch is traced: the planning model, its batches, the device and the plan."""

    model: Any  # the planning copy of a fine-tune, else the user's model
    kind: Any  # the optimizer kind, or the user's optimizers for a step of their own
    input: Any  # the input at the asked sequence length
    sequences: Optional[Callable[[int], Any]]
    fine: Optional[FineTunePlan]
    input_text: str
    info: Any  # the device and its limit (analysis.pipeline.device)
    plan: TracePlan
    notes: List[str]
    sharding: Sharding
    picks_rounding: Any
    measured_on: Any  # the GPU the measured engine runs on, or None (traced)


@dataclass
class _Ran:
    """The engines' answers: the analysed batch's trace and point, the maximum found, the AMP saving and the
    evaluation step."""

    info: Any  # the device, its limit read again on the GPU by the measured engine
    engine: Any
    traced: TracedEngine
    current_trace: Point
    current: Point
    found: Any
    amp_saved: Optional[int]
    evaluation: Any
    notes: List[str]


def _prepare(model: Any, request: AnalysisRequest) -> _Prepared:
    """The request read into a plan: rounding, optimizer, input, fine-tune copy, batches, device limit, trace plan."""
    picks_rounding = resolve_rounding(
        rounding_from_options(request.rounding, request.multiple), request.rounding_setting
    )
    optimizer = request.optimizer
    kind = _step_optimizers(optimizer) if request.step is not None else optimizer_kind(optimizer)
    input = at_sequence(model, request.input, request.seq, request.vocab_size)
    sequences = _sequence_maker(model, input, request)
    fine = _fine_tune_plan(model, request.lora, request.quantize, kind, request.bnb_version, request.peft)
    user_model, model = model, fine.model if fine else model
    make_batch, input_text = batch_maker(model, input, request.vocab_size, request.padded)
    hints = check_size_hints(request.size_hints)
    planned_torch = resolve_torch(request.torch_version)
    stack = _planned_stack(planned_torch, request.torch_version, request.cuda_version)
    # several optimizers (a step of the user's own): the state already on the device is each one's
    resident_opt = None if isinstance(kind, (tuple, list, dict)) else kind
    info = device_limit(
        target=request.target,
        memory=request.memory,
        device=request.device,
        reserve=request.reserve,
        model=user_model,
        optimizer=resident_opt,
        stack=stack,
    )
    rules = planned_torch if planned_torch.rules else None
    plan, notes = _trace_plan(model, kind, make_batch, request, info, stack, hints, rules)
    notes = basis_notes(info, request.target, request.memory) + list(planned_torch.notes) + notes
    sharding = _sharding(model, request, notes)
    sharding.traced = _traced_rank(plan, sharding, request, notes)
    # a model on the meta device (built by name) has no weights to run on a GPU: traced against it instead
    measured_on = (
        None
        if request.step is not None or on_meta(model)
        else measured_device(request.device, request.target, request.memory)
    )
    return _Prepared(
        model, kind, input, sequences, fine, input_text, info, plan, notes, sharding, picks_rounding, measured_on
    )


def _run_engines(prepared: _Prepared, request: AnalysisRequest) -> _Ran:
    """The analysed batch traced, the engine chosen, the maximum searched; a trace error as a one-line ValueError."""
    plan, sharding, info, batch_size = prepared.plan, prepared.sharding, prepared.info, request.batch_size
    notes: List[str] = []
    try:
        # the limit: a batch over it is replayed again under it, as the allocator frees its cache before it raises;
        # the traces kept for the sequence search, whose length as analysed is one of its points at each batch
        memo = request.traces or (TraceMemo() if prepared.sequences is not None else None)
        traced = TracedEngine(plan, info.context_to_add, sharding, info.limit_bytes, memo=memo)
        plan.progress.enter("batch", f"analysing batch {batch_size}")
        current_trace = traced.point(batch_size, request.stack_hook)
        if current_trace is None or current_trace.trace is None:  # point() raises for the first batch
            raise TraceError(f"batch {batch_size} could not be traced")
        if request.on_trace is not None:
            request.on_trace(current_trace.trace)
        if prepared.measured_on is not None:
            states = _state_totals(current_trace.trace)
            engine: Any = MeasuredEngine(plan, prepared.measured_on, sharding, states)
            info = measured_limit(info, prepared.measured_on, prepared.model, prepared.kind, request.reserve)
        else:
            engine = traced
        notes += cuda_notes(info, request.cuda_version)
        plan.progress.enter("maximum", "searching the largest batch")
        if request.advice_row and engine is traced and batch_size == 1 and _over(current_trace, info.limit_bytes):
            found = nothing_fits(current_trace)  # a row reads the maximum only: 0, as the search would find it
        else:
            found = search_maximum(engine, info.limit_bytes, runs=TRACED_RUNS if engine is traced else MEASURED_RUNS)
        found = with_analysed_batch(engine, found, batch_size, info.limit_bytes)
        current = engine.point(batch_size)
        if current is None:  # the user's batch ran out of memory on the GPU itself
            current = _out_of_memory_point(current_trace, info, batch_size)
            notes.append(f"batch {batch_size} ran out of memory on the GPU; its figures are traced")
        amp_saved = (
            None if request.advice_row else _amp_saving(plan, info, sharding, current_trace, engine is traced, notes)
        )
        evaluation = None
        if request.eval_batch is not None and not request.advice_row:
            plan.progress.enter("evaluation", f"analysing the evaluation step at batch {request.eval_batch}")
            evaluation = evaluate(plan, info, sharding, request.eval_batch, batch_size, engine is traced)
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    return _Ran(info, engine, traced, current_trace, current, found, amp_saved, evaluation, notes)


def _over(point: Point, limit: Optional[int]) -> bool:
    """Over the device's limit, after the allocator's last resort (a point that fits through it is not)."""
    return limit is not None and point.footprint > limit


def _out_of_memory_point(current_trace: Point, info: Any, batch_size: int) -> Point:
    """The analysed batch's point when it ran out of memory on the GPU: its traced figures, over the limit."""
    over = (info.limit_bytes or 0) + (info.reserve_bytes or 0) + 1
    return Point(
        batch_size,
        current_trace.allocated,
        current_trace.reserved,
        max(current_trace.footprint, over),
        "measured",
    )


def _report(prepared: _Prepared, ran: _Ran, request: AnalysisRequest, started: float) -> AnalysisReport:
    """The AnalysisReport of the runs: notes, recommendations, the assembled report and its LLM and sequence parts."""
    plan, info, model, batch_size = prepared.plan, ran.info, prepared.model, request.batch_size
    notes = prepared.notes + ran.notes
    notes += [f"batch {b} could not be traced: {e}" for b, e in sorted(ran.traced.errors.items())]
    notes += _retry_notes(ran.current, ran.found)
    trace = ran.current_trace.trace
    notes += trace.notes + plan_notes(plan, info, trace, traced_amp(plan, trace), model)
    recs = recommend(
        ran.found.maximum,
        ran.current,
        info.limit_bytes,
        info.reserve_bytes,
        batch_size=batch_size,
        grad_accum=request.grad_accum,
        effective_batch=request.effective_batch,
        rounding=prepared.picks_rounding[0],
        extrapolated=ran.found.extrapolated,
        note=ran.found.note,
    )
    setup = Setup(model, prepared.kind, plan, info, prepared.sharding, prepared.input_text, prepared.picks_rounding)
    outcome = Outcome(ran.engine.name, trace, ran.current, ran.found, recs, ran.amp_saved, ran.evaluation)
    report = build_report(request, setup, outcome, notes, time.perf_counter() - started)
    add_to_report(report, model, prepared.fine)
    report.settings.update(seq=sequence_of(model, prepared.input, request.vocab_size), search=request.search)
    report.llm = llm_facts(model, trace, batch_size, plan.checkpointing)
    if prepared.sequences is not None:
        report.sequence_search = search_sequences(
            plan,
            prepared.sequences,
            check_batches(request.seq_batches),
            resolve_multiple(request.seq_multiple, request.seq_multiple_setting),
            context_bytes=info.context_to_add,
            sharding=prepared.sharding,
            limit=info.limit_bytes,
            model_context=model_context(model),
            analysed=(report.settings["seq"], ran.traced.memo),
        )
        report.elapsed_seconds = round(time.perf_counter() - started, 3)
    return with_snippets(report)


def _trace_plan(
    model: Any,
    kind: Any,
    make_batch: Any,
    request: AnalysisRequest,
    info: Any,
    stack: Any,
    hints: Any,
    rules: Any,
) -> Tuple[TracePlan, List[str]]:
    """The plan every trace of this analysis runs, and the notes on how it differs from the built-in step."""
    settings = settings_from_env()
    plan = TracePlan(
        model=model,
        optimizer=kind,
        make_batch=make_batch,
        loss_fn=request.loss or default_loss,
        amp=request.amp,
        grad_accum=request.grad_accum,
        checkpointing=bool(request.checkpointing),
        **gpus.blas_workspaces(info.compute_capability, stack[0] if stack else _torch_version()).plan_fields(),
        expandable_segments=settings.expandable_segments or request.expandable_segments,
        keep_grads=bool(request.keep_grads),
        step_fn=request.step,
        torch_rules=rules,
        size_hints=hints,
        logits_vocab=output_vocabulary(model),
        # the search's traces replay the first one's optimizer steps (unless the request asks each to run its own)
        optimizer_replay=OptimizerReplay() if request.replay_optimizer else None,
    )
    notes: List[str] = []
    if request.step is not None:
        notes.append(
            f"your step {getattr(request.step, '__name__', 'function')}(model, optimizer, batch) traced on copies; "
            "loss, grad_accum and keep_grads are its own"
        )
    elif request.keep_grads:
        notes.append("gradients kept between steps (zero_grad(set_to_none=False)): allocated through each forward")
    if settings.expandable_segments or request.expandable_segments:
        notes.append("expandable segments (allocator configuration): traced reserved figures model its 2/20 MiB pages")
    if settings.note:
        notes.append(settings.note)
    return plan, notes


def _sharding(model: Any, request: AnalysisRequest, notes: List[str]) -> Sharding:
    trainable = [p for p in model.parameters() if p.requires_grad]
    sharding = Sharding(request.world_size, request.strategy, largest_layer_of(model)["bytes"], unique_bytes(trainable))
    if request.strategy is None and request.world_size > 1:
        sharding.strategy = "ddp"
        notes.append("world_size > 1 without a strategy: DDP assumed")
    return sharding


def _traced_rank(plan: TracePlan, sharding: Sharding, request: AnalysisRequest, notes: List[str]) -> Any:
    """Rank 0's step traced as the strategy wraps it (analysis.trace.ranks), or None with a note where the
    formula stands in: a step the rank wrappers do not run here, or a trace that failed."""
    if sharding.world_size < 2 or sharding.strategy is None:
        return None
    unsupported = [
        why
        for why, present in (
            ("a step of your own", plan.step_fn is not None),
            ("gradient accumulation", plan.grad_accum > 1),
            ("checkpointing", plan.checkpointing),
            ("kept gradients", plan.keep_grads),
        )
        if present
    ]
    try:
        if unsupported:
            raise RankTraceError(f"{', '.join(unsupported)}: not traced per rank yet")
        make_batch = functools.partial(plan.make_batch, request.batch_size, True)
        return plan_rank(
            plan.model, sharding.strategy, sharding.world_size, plan.optimizer, make_batch, plan.loss_fn, plan.amp
        )
    except RankTraceError as exc:
        notes.append(f"per-rank figures by the formula (a rank's step was not traced: {exc})")
        return None


def _amp_saving(
    plan: TracePlan, info: Any, sharding: Sharding, current: Point, traced: bool, notes: List[str]
) -> Optional[int]:
    """What autocast saves against the same step in fp32 (traced engine only); None when not traced."""
    half = _half_weights(plan.model, plan.amp)
    if half is not None:
        # without AMP this step runs in the weights' own precision, not fp32: no "vs fp32" figure to trace
        weights_dtype, which = half
        notes.append(
            f"AMP's saving is not traced: the {which} are {weights_dtype} already, so without AMP the step "
            f"runs {'mostly ' if which != 'weights' else ''}in {weights_dtype}, not fp32"
        )
        return None
    if plan.amp is None or not traced:
        return None
    plain_plan = TracePlan(**{**asdict_shallow(plan), "amp": None})
    plain = TracedEngine(plain_plan, info.context_to_add, sharding, info.limit_bytes)
    plan.progress.enter("amp", "tracing the step without AMP")
    plain_point = plain.point(current.batch_size)
    return plain_point.footprint - current.footprint if plain_point else None


def _half_weights(model: Any, amp_mode: Optional[str]) -> Optional[Tuple[str, str]]:
    """(the AMP dtype's name, which weights) when the weights already have it: every floating parameter (a bf16 LLM
    under bf16 autocast), or every frozen one (LoRA or QLoRA adapters in fp32 over a bf16 base, whose quantised
    weights compute in bf16): without autocast such a step is no fp32 step, so "vs fp32" would not be its saving."""
    if amp_mode is None:
        return None
    name = AMP_DTYPES[amp_mode]
    floating = [p for p in model.parameters() if p.is_floating_point()]
    frozen = [p for p in floating if not p.requires_grad]
    weights, which = (frozen, "frozen weights") if frozen and len(frozen) < len(floating) else (floating, "weights")
    dtypes = {str(p.dtype) for p in weights}
    return (name, which) if dtypes == {f"torch.{name}"} else None


def _fine_tune_plan(
    model: Any, lora: Any, quantize: Any, kind: Any, bnb_version: Optional[str] = None, peft: Any = None
) -> Optional[FineTunePlan]:
    """The planning copy with LoRA adapters and quantised layers, when asked for (analysis.model.fine_tune); the
    quantised layers as `bnb_version` ran them (analysis.model.bnb_rules)."""
    lora_spec, quant_spec = check_fine_tune(lora, quantize, kind)
    peft_spec = check_peft(peft, lora_spec, kind)
    quant_spec, bnb_notes = with_bnb_version(quant_spec, bnb_version)
    if not (lora_spec or quant_spec or peft_spec):
        return None
    fine = planned_model(model, lora_spec, quant_spec, peft=peft_spec)
    fine.notes += bnb_notes
    return fine


def _sequence_maker(
    model: Any, input: Any, request: AnalysisRequest
) -> Optional[Callable[[int], Callable[[int, bool], Any]]]:
    """With search="seq": seq -> the batch maker at that length, checked once now, so that an input that is not
    token ids fails in one line before any trace; None for the batch search alone."""
    if not request.seq_search:
        return None
    vocab_size = request.vocab_size

    def maker(length: int) -> Callable[[int, bool], Any]:
        at_length = at_sequence(model, input, length, vocab_size, override=True)
        return batch_maker(model, at_length, vocab_size, request.padded)[0]

    maker(resolve_multiple(request.seq_multiple, request.seq_multiple_setting)[0])
    return maker


def _retry_notes(current: Point, found: Any) -> List[str]:
    """The analysed batch's and the maximum's, when they fit only after the allocator frees its cache."""
    points = [current] + [p for p in found.points if p.batch_size == found.maximum and p is not current]
    return [note for note in (retry_note(p) for p in points) if note is not None]


def asdict_shallow(plan: TracePlan) -> Dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def _state_totals(trace: TraceResult) -> Tuple[int, int, int]:
    return trace.parameters, trace.gradients, trace.optimizer_state


def _planned_stack(
    planned: Any, torch_version: Optional[str], cuda_version: Optional[str]
) -> Optional[Tuple[str, Optional[str]]]:
    """(torch, CUDA runtime) the context and workspaces plan for; None: the running torch's build. Another torch
    than the running one has an unknown CUDA unless given (the running build's CUDA is not that torch's)."""
    if torch_version is None and cuda_version is None:
        return None
    if parse_torch(torch_version) is None:  # not given, or not understood: the running torch (noted)
        import torch

        return str(torch.__version__).split("+")[0], cuda_version or getattr(torch.version, "cuda", None)
    return planned.text, cuda_version


def _torch_version() -> str:
    """The torch in this kernel: its cuBLAS and cuBLASLt workspace rules are the ones the step will meet."""
    import torch

    return str(torch.__version__)


# --- the Python API for scripts over analyze() ----------------------------------------------------------


def print_memory_analysis(
    model: Any, batch_size: int = 32, device_id: int = 0, mixed_precision: bool = False, **options: Any
) -> AnalysisReport:
    """The analysis guide's analysis block, printed; also returns the report. `options` go to analyze()."""
    if "amp" not in options:
        options["amp"] = "fp16" if mixed_precision else None
    if "device" not in options and cuda_initialised():
        options["device"] = f"cuda:{device_id}"
    report = analyze(model, batch_size=batch_size, **options)
    print(str(report))
    return report


def recommend_batch_size(
    model: Any,
    gpu_memory_gb: Optional[float] = None,
    safety_margin: float = 0.1,
    mixed_precision: bool = False,
    batch_size: int = 8,
    **options: Any,
) -> Dict[str, Any]:
    """{'maximum', 'recommended', 'safe'} for `model`.

    gpu_memory_gb: plan for this much memory (GiB, as the analysis guide prints 'GB'); default: this machine's GPU.
    safety_margin: fraction of the device kept free (0.1 = 10%). The analysis guide documented 0.7 as "use 70%";
    values above 0.5 are read that way (reserve 1 - value).
    """
    if not 0 <= safety_margin < 1:
        raise ValueError(f"safety_margin must be in [0, 1), got {safety_margin!r}")
    reserve = 1 - safety_margin if safety_margin > 0.5 else safety_margin
    if gpu_memory_gb is not None:
        options.setdefault("memory", int(float(gpu_memory_gb) * GiB))
    options.setdefault("amp", "fp16" if mixed_precision else None)
    report = analyze(model, batch_size=batch_size, reserve=float(reserve), **options)
    recs = report.recommendations
    return {
        "maximum": recs.maximum,
        "recommended": recs.recommended,
        "safe": recs.safe,
        "current": recs.current.status,
        "engine": report.engine,
    }


def _step_optimizers(optimizer: Any) -> Any:
    """With the user's own step: a kind, one of their optimizers, or a tuple, list or dict of them."""
    if isinstance(optimizer, (tuple, list, dict)):
        values = optimizers_of(optimizer)
        if not values or any(isinstance(v, str) for v in values):
            raise ValueError("optimizer: with step=, a tuple, list or dict of your optimizer objects")
        for value in values:
            optimizer_kind(value)
        return optimizer
    return optimizer_kind(optimizer)


def trace_step(
    step: Callable[[Any, Any, Any], Any], model: Any, optimizer: Any = "adamw", **options: Any
) -> AnalysisReport:
    """The analysis of your own training step: `step(model, optimizer, batch)` runs on copies of `model` and
    `optimizer` (FakeTensors: no memory, no GPU) as often as the batch search needs, with as many forward and
    backward passes, optimizers and `torch.cuda.empty_cache()` calls as it makes. The step must use its arguments,
    not your global model. Options as analyze(): batch_size, input, target, memory, amp ...

        def step(model, opt, batch):
            x, y = batch
            loss = F.cross_entropy(model(x.to("cuda")), y.to("cuda"))
            loss.backward()
            opt.step()
            opt.zero_grad()

        gpumem_kernel.trace_step(step, model, opt, batch_size=64, input=make_batch, target="RTX 3090")
    """
    return analyze(model, optimizer=optimizer, step=step, **options)
