"""Model memory analysis and batch-size recommendations: `analyze()`, and the script API's print_memory_analysis()
and recommend_batch_size() over it.

Two engines, one report (see shared/notes/memory-estimation.md):
- *traced* (no GPU needed, or planning for another GPU): two training steps on fake CPU tensors, every
  storage followed by category, the event stream replayed through a model of the CUDA caching allocator
  (trace.py, allocator.py), plus the CUDA context and workspaces;
- *measured* (CUDA already initialised by the user, or `device="cuda"` asked explicitly): three real steps on
  a copy of the model at each batch size the search tries (at most MEASURED_RUNS) from a clean allocator,
  peaks of steps 2–3, linear fit, residuals.

The maximum batch is searched from the same first batch (SEED) whatever batch the user analyses: it is a
property of the model, the step and the device. The picks below it are rounded as analysis.picks says.

The user's model, optimizer and RNG state are never touched: every run works on copies, and the RNG state
is restored. torch is imported inside functions only.

analyze() runs the parts in order: arguments (checks), inputs (the batches), device (the limit), engines with
measure (real steps) and search (the maximum), recommendations (the picks), evaluation (eval_batch=), and
assemble (the AnalysisReport of report.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from gpumem_kernel.analysis import gpus
from gpumem_kernel.analysis.allocator import settings_from_env
from gpumem_kernel.analysis.arguments import (
    STRATEGIES,
    _amp_mode,
    _check_choice,
    _check_model,
    _optimizer_kind,
    _positive_int,
)
from gpumem_kernel.analysis.assemble import _plan_notes, _report
from gpumem_kernel.analysis.device import _measured_device, _measured_limit, basis_notes, cuda_notes, device_limit
from gpumem_kernel.analysis.engines import _MeasuredEngine, _Point, _TracedEngine, retry_note
from gpumem_kernel.analysis.evaluation import _evaluation
from gpumem_kernel.analysis.fine_tune import FineTunePlan, add_to_report, planned_model
from gpumem_kernel.analysis.fine_tune import check as check_fine_tune
from gpumem_kernel.analysis.gpus import GiB
from gpumem_kernel.analysis.import_guard import import_repair
from gpumem_kernel.analysis.inputs import batch_maker
from gpumem_kernel.analysis.llm_facts import llm_facts, output_vocabulary
from gpumem_kernel.analysis.optimizer_replay import OptimizerReplay
from gpumem_kernel.analysis.model_states import _largest_layer, _Sharding, on_meta, unique_bytes
from gpumem_kernel.analysis.picks import from_options as rounding_from_options
from gpumem_kernel.analysis.picks import resolve as resolve_rounding
from gpumem_kernel.analysis.recommendations import recommend
from gpumem_kernel.analysis.report import AnalysisReport
from gpumem_kernel.analysis.size_hints import check as check_size_hints
from gpumem_kernel.analysis.search import MEASURED_RUNS, TRACED_RUNS, _with_analysed_batch, search_maximum
from gpumem_kernel.analysis.seq_search import check_batches, model_context, resolve_multiple, search_sequences
from gpumem_kernel.analysis.sequence import at_sequence, sequence_of
from gpumem_kernel.analysis.trace_plan import TraceError, TracePlan, TraceResult
from gpumem_kernel.analysis.torch_rules import parse as parse_torch
from gpumem_kernel.analysis.torch_rules import resolve as resolve_torch
from gpumem_kernel.analysis.training_loop import default_loss
from gpumem_kernel.analysis.user_step import optimizers_of
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.snippets import AMP_DTYPES

SEARCHES = ("batch", "seq")  # what analyze searches besides the analysed step: the batch picks, or also the sequence


@import_repair()  # a Ctrl-C in a lazy import leaves no half-imported module (analysis.import_guard)
def analyze(
    model: Any,
    *,
    batch_size: int,
    input: Any = None,
    loss: Optional[Callable[[Any, Any], Any]] = None,
    optimizer: Any = "adamw",
    amp: Any = None,
    grad_accum: int = 1,
    checkpointing: bool = False,
    device: Any = None,
    target: Optional[str] = None,
    memory: Any = None,
    world_size: int = 1,
    strategy: Optional[str] = None,
    multiple: Optional[int] = None,
    effective_batch: Optional[int] = None,
    reserve: Union[None, int, float] = None,
    vocab_size: Optional[int] = None,
    rounding: Any = None,
    stack_hook: Optional[Callable[[], Any]] = None,
    on_trace: Optional[Callable[[TraceResult], None]] = None,
    eval_batch: Optional[int] = None,
    step: Optional[Callable[[Any, Any, Any], Any]] = None,
    keep_grads: bool = False,
    torch_version: Optional[str] = None,
    cuda_version: Optional[str] = None,
    size_hints: Any = None,
    seq: Optional[int] = None,
    search: str = "batch",
    seq_batches: Any = None,
    seq_multiple: Optional[int] = None,
    lora: Any = None,
    quantize: Any = None,
) -> AnalysisReport:
    """Memory of one training step of `model` at `batch_size`, and the batch sizes that fit.

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
    torch_version: plan for that torch ('1.10'): its memory rules (analysis.torch_rules), workspaces and context;
    default the running torch (an unreadable version falls back to it, with a note). cuda_version: the CUDA
    runtime of that torch's build ('11.2'), for the context (lazy module loading); default the running torch's,
    unknown when another torch is planned.
    size_hints: sizes that depend on tensor values (nonzero, boolean masks, unique): a fraction selected or
    distinct (0.1), or {'select': 0.1, 'unique': 0.25, 'repeat': 4, 'loss.py:400': 0.5}; default every element
    (an upper bound), each rule noted in the report (analysis.size_hints).
    seq: tokens per sample of a token input (a token count, a sample batch of token ids, or a model by name's batch);
    one-line ValueError for an input that is not token ids.
    search: "batch" (the batch picks, always made), or "seq": also the longest sequence that fits at each batch of
    seq_batches (default 1, 4, 8), with its recommended and safe lengths, in multiples of seq_multiple tokens
    (default: the JupyterLab setting "Sequence-length multiple", else 64): report.sequence_search (seq_search.py).
    lora: LoRA adapters added to a copy of the model for the plan, 'r=16,targets=q_proj,v_proj,alpha=32,dropout=0.05',
    a rank, or a dict of those keys (analysis.lora; targets default to the attention projections found by name).
    quantize: 'nf4' | 'fp4' | 'int8' (with ',double=off', ',compute=fp16', ',threshold=6'): the copy's Linear layers
    traced as bitsandbytes runs them (analysis.quantize). Either plans on a copy: traced, never measured.
    Raises ValueError with a one-line message on bad arguments.
    """
    started = time.perf_counter()
    _check_model(model)
    batch_size = _positive_int(batch_size, "batch_size")
    grad_accum = _positive_int(grad_accum, "grad_accum")
    world_size = _positive_int(world_size, "world_size")
    if multiple is not None:
        multiple = _positive_int(multiple, "multiple")
    picks_rounding = resolve_rounding(rounding_from_options(rounding, multiple))
    if effective_batch is not None:
        effective_batch = _positive_int(effective_batch, "effective_batch")
    if eval_batch is not None:
        eval_batch = _positive_int(eval_batch, "eval_batch")
    strategy = _check_choice(strategy, STRATEGIES, "strategy")
    amp_mode = _amp_mode(amp)
    kind = _step_optimizers(optimizer) if step is not None else _optimizer_kind(optimizer)
    if step is not None and not callable(step):
        raise ValueError("step must be a callable (model, optimizer, batch) that runs one training step")
    if loss is not None and not callable(loss):
        raise ValueError("loss must be a callable (output, batch) -> scalar")
    input = at_sequence(model, input, None if seq is None else _positive_int(seq, "seq"), vocab_size)
    sequences = _sequence_maker(model, input, vocab_size, search, seq_multiple)
    fine = _fine_tune_plan(model, lora, quantize, kind)
    user_model, model = model, fine.model if fine else model
    make_batch, input_text = batch_maker(model, input, vocab_size)
    hints = check_size_hints(size_hints)
    planned_torch = resolve_torch(torch_version)
    stack = _planned_stack(planned_torch, torch_version, cuda_version)
    # several optimizers (a step of the user's own): the state already on the device is each one's
    resident_opt = None if isinstance(kind, (tuple, list, dict)) else kind
    info = device_limit(
        target=target,
        memory=memory,
        device=device,
        reserve=reserve,
        model=user_model,
        optimizer=resident_opt,
        stack=stack,
    )
    notes: List[str] = basis_notes(info, target, memory) + list(planned_torch.notes)
    settings = settings_from_env()
    plan = TracePlan(
        model=model,
        optimizer=kind,
        make_batch=make_batch,
        loss_fn=loss or default_loss,
        amp=amp_mode,
        grad_accum=grad_accum,
        checkpointing=bool(checkpointing),
        **gpus.blas_workspaces(info.compute_capability, stack[0] if stack else _torch_version()).plan_fields(),
        expandable_segments=settings.expandable_segments,
        keep_grads=bool(keep_grads),
        step_fn=step,
        torch_rules=planned_torch if planned_torch.rules else None,
        size_hints=hints,
        logits_vocab=output_vocabulary(model),
        optimizer_replay=OptimizerReplay(),  # the search's traces replay the first one's optimizer steps
    )
    if step is not None:
        notes.append(
            f"your step {getattr(step, '__name__', 'function')}(model, optimizer, batch) traced on copies; "
            "loss, grad_accum and keep_grads are its own"
        )
    elif keep_grads:
        notes.append("gradients kept between steps (zero_grad(set_to_none=False)): allocated through each forward")
    if settings.expandable_segments:
        notes.append("expandable segments (allocator configuration): traced reserved figures model its 2/20 MiB pages")
    if settings.note:
        notes.append(settings.note)
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads_total = unique_bytes(trainable)
    sharding = _Sharding(world_size, strategy, _largest_layer(model)["bytes"], grads_total)
    if strategy is None and world_size > 1:
        sharding.strategy = "ddp"
        notes.append("world_size > 1 without a strategy: DDP assumed")

    # a model on the meta device (built by name) has no weights to run on a GPU: traced against it instead
    measured_on = None if step is not None or on_meta(model) else _measured_device(device, target, memory)
    try:
        # the limit: a batch over it is replayed again under it, as the allocator frees its cache before it raises
        traced = _TracedEngine(plan, info.context_to_add, sharding, info.limit_bytes)
        current_trace = traced.point(batch_size, stack_hook)
        if current_trace is None or current_trace.trace is None:  # point() raises for the first batch
            raise TraceError(f"batch {batch_size} could not be traced")
        if on_trace is not None:
            on_trace(current_trace.trace)
        if measured_on is not None:
            states = _state_totals(current_trace.trace)
            engine: Any = _MeasuredEngine(plan, measured_on, sharding, states)
            info = _measured_limit(info, measured_on, model, kind, reserve)
        else:
            engine = traced
        notes += cuda_notes(info, cuda_version)
        found = search_maximum(engine, info.limit_bytes, runs=TRACED_RUNS if engine is traced else MEASURED_RUNS)
        found = _with_analysed_batch(engine, found, batch_size, info.limit_bytes)
        current = engine.point(batch_size)
        if current is None:  # the user's batch ran out of memory on the GPU itself
            over = (info.limit_bytes or 0) + (info.reserve_bytes or 0) + 1
            current = _Point(
                batch_size,
                current_trace.allocated,
                current_trace.reserved,
                max(current_trace.footprint, over),
                "measured",
            )
            notes.append(f"batch {batch_size} ran out of memory on the GPU; its figures are traced")
        amp_saved = None
        weights_dtype = _half_weights(model, amp_mode)
        if weights_dtype is not None:
            # without AMP this step runs in the weights' own precision, not fp32: no "vs fp32" figure to trace
            notes.append(
                f"AMP's saving is not traced: the weights are {weights_dtype} already, so without AMP the step "
                f"runs in {weights_dtype}, not fp32"
            )
        elif amp_mode is not None and engine is traced:
            plain_plan = TracePlan(**{**asdict_shallow(plan), "amp": None})
            plain = _TracedEngine(plain_plan, info.context_to_add, sharding, info.limit_bytes)
            plain_point = plain.point(batch_size)
            amp_saved = plain_point.footprint - current_trace.footprint if plain_point else None
        evaluation = None
        if eval_batch is not None:
            evaluation = _evaluation(plan, info, sharding, eval_batch, batch_size, engine is traced)
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    notes += [f"batch {b} could not be traced: {e}" for b, e in sorted(traced.errors.items())]
    notes += _retry_notes(current, found)
    trace = current_trace.trace
    notes += trace.notes + _plan_notes(plan, info, trace, amp_mode, model)
    recs = recommend(
        found.maximum,
        current,
        info.limit_bytes,
        info.reserve_bytes,
        batch_size=batch_size,
        grad_accum=grad_accum,
        effective_batch=effective_batch,
        rounding=picks_rounding[0],
        extrapolated=found.extrapolated,
        note=found.note,
    )
    report = _report(
        model,
        kind,
        plan,
        info,
        engine.name,
        trace,
        current,
        found,
        recs,
        sharding,
        amp_saved,
        notes,
        input_text,
        batch_size,
        target,
        memory,
        device,
        picks_rounding,
        time.perf_counter() - started,
        evaluation,
    )
    add_to_report(report, model, fine)
    report.settings.update(seq=sequence_of(model, input, vocab_size), search=search)
    report.llm = llm_facts(model, trace, batch_size, plan.checkpointing)
    if sequences is not None:
        report.sequence_search = search_sequences(
            plan,
            sequences,
            check_batches(seq_batches),
            resolve_multiple(seq_multiple),
            context_bytes=info.context_to_add,
            sharding=sharding,
            limit=info.limit_bytes,
            model_context=model_context(model),
        )
        report.elapsed_seconds = round(time.perf_counter() - started, 3)
    return report


def _half_weights(model: Any, amp_mode: Optional[str]) -> Optional[str]:
    """The AMP dtype's name when every floating parameter already has it (a bf16 LLM under bf16 autocast)."""
    if amp_mode is None:
        return None
    name = AMP_DTYPES[amp_mode]
    dtypes = {str(p.dtype) for p in model.parameters() if p.is_floating_point()}
    return name if dtypes == {f"torch.{name}"} else None


def _fine_tune_plan(model: Any, lora: Any, quantize: Any, kind: Any) -> Optional[FineTunePlan]:
    """The planning copy with LoRA adapters and quantised layers, when asked for (analysis.fine_tune)."""
    lora_spec, quant_spec = check_fine_tune(lora, quantize, kind)
    return planned_model(model, lora_spec, quant_spec) if lora_spec or quant_spec else None


def _sequence_maker(
    model: Any, input: Any, vocab_size: Optional[int], search: str, seq_multiple: Optional[int]
) -> Optional[Callable[[int], Callable[[int, bool], Any]]]:
    """With search="seq": seq -> the batch maker at that length, checked once now, so that an input that is not
    token ids fails in one line before any trace; None for the batch search alone."""
    if _check_choice(search, SEARCHES, "search") != "seq":
        return None

    def maker(length: int) -> Callable[[int, bool], Any]:
        return batch_maker(model, at_sequence(model, input, length, vocab_size, override=True), vocab_size)[0]

    maker(resolve_multiple(seq_multiple)[0])
    return maker


def _retry_notes(current: _Point, found: Any) -> List[str]:
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
            _optimizer_kind(value)
        return optimizer
    return _optimizer_kind(optimizer)


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
