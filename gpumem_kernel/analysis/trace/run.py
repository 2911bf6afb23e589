"""The traced engine: run two training steps and follow every tensor storage's life, by category.

With `fake=True` the step runs on a copy of the model whose parameters, buffers and optimizer state are
FakeTensors on the CPU (shapes, dtypes and strides, no memory), so a model of any size traces in seconds
without a GPU. With `fake=False` the same loop runs on a real deep copy with real CPU tensors: that is what
the tests compare the fake trace against.

The storage tracker (analysis.allocator.storage) sees every op's outputs and each storage's free. Roles that are only
known later (a backward output that becomes `.grad`, a zeros_like that becomes optimizer state) are assigned once known
and apply to the storage's whole life. The event stream is then replayed through the caching-allocator model, with
cuBLAS and cuDNN workspaces inserted where CUDA would allocate them.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import warnings
from dataclasses import replace
from typing import Any, Callable, Dict, Iterator, List, Optional

from gpumem_kernel.analysis.trace.checkpointing import checkpoint_blocks
from gpumem_kernel.analysis.fake.cuda_kernels import cuda_kernels
from gpumem_kernel.analysis.fake.fast_paths import answer_fast_paths
from gpumem_kernel.analysis.allocator.import_guard import (
    interrupts_deferred,
    interrupts_held,
    pending_interrupt,
    tracer_imports,
)
from gpumem_kernel.analysis.trace.llm_facts import LogitsWatch
from gpumem_kernel.analysis.trace.model_copy import (
    TensorCopier,
    copy_model,
    copy_optimizer,
    make_optimizer,
    register_optimizer_state,
    tensor_attributes,
)
from gpumem_kernel.analysis.trace.optimizer_replay import OptimizerReplayMismatch, Stepper, eligible, record
from gpumem_kernel.analysis.trace.modelled_optimizers import paged_state_bytes
from gpumem_kernel.analysis.trace.replicate import Replication, ReplicationMismatch, install
from gpumem_kernel.analysis.fake.torch_rules import applied as torch_rules_applied
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult
from gpumem_kernel.analysis.trace.summary import summarize
from gpumem_kernel.analysis.trace.tracker import heap_frozen, ordered_cache_clears, trace_tracker_class
from gpumem_kernel.analysis.trace.training_loop import (
    autocast_factory,
    default_loss,
    eval_steps,
    model_loss,
    train_steps,
)
from gpumem_kernel.analysis.fake.value_reads import describe
from gpumem_kernel.analysis.trace.user_step import optimizers_of, run_user_steps, same_shape
from gpumem_kernel.render.units import format_bytes


def _recording_loss(loss_fn: Callable[[Any, Any], Any], sources: List[str]) -> Callable[[Any, Any], Any]:
    """The plan's loss, noting whether the default loss found the model's own (for the report)."""
    if loss_fn is not default_loss:
        return loss_fn

    def loss(output: Any, batch: Any) -> Any:
        if not sources:
            sources.append("model" if model_loss(output) is not None else "default")
        return default_loss(output, batch)

    return loss


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """FakeTensorMode logs a traceback at ERROR before re-raising a failed meta kernel; we report the error
    as one line instead, so that log stays silent during a trace."""
    import logging

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous = logger.disabled
    try:
        logger.disabled = True
        yield
    finally:
        logger.disabled = previous


def run_trace(plan: TracePlan, batch_size: int, *, fake: bool = True) -> TraceResult:
    """Two training steps at `batch_size` on a copy (fake or real CPU); the user's objects stay untouched.

    A CPU whose oneDNN has no bf16 RNN kernel cannot trace an LSTM under autocast: the step is traced again
    without oneDNN, where CPU autocast leaves RNN layers in fp32 (an upper bound for them, and said so).

    Ctrl-C during the trace is raised at the tracker's next operator (analysis.allocator.import_guard: elsewhere in a
    fake trace it could abort the process).

    The plan's progress reporter is told before the trace begins and after it ends, never inside it: a callback that
    raises (Ctrl-C while it draws) stops the analysis between traces."""
    if plan.progress is not None:
        plan.progress.tracing(batch_size)
    with interrupts_deferred():
        result = _with_onednn_fallback(plan, batch_size, fake)
    if plan.progress is not None:
        plan.progress.traced()
    return result


def _with_onednn_fallback(plan: TracePlan, batch_size: int, fake: bool) -> TraceResult:
    try:
        return _run_trace(plan, batch_size, fake=fake)
    except TraceError as exc:
        if plan.amp is None or "primitive descriptor" not in str(exc):
            raise
    with _without_onednn():
        result = _run_trace(plan, batch_size, fake=fake)
    result.notes.append("this CPU's oneDNN has no bf16 RNN kernel: RNN layers traced in fp32 (an upper bound for them)")
    return result


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    """torch.backends.mkldnn.flags(enabled=False), without the note its entry and exit print (on TF32 for
    Intel GPUs: nothing the user did), and only that note: the trace's own warnings still reach the user."""
    import torch

    def quietly(step: Callable[[], Any]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            step()

    flags = torch.backends.mkldnn.flags(enabled=False)
    entered = False
    try:
        with interrupts_held():  # a Ctrl-C waits until the flag is set and noted, so that the finally puts it back
            quietly(flags.__enter__)
            entered = True
        yield
    finally:
        if entered:
            with interrupts_held():
                quietly(lambda: flags.__exit__(None, None, None))


def _run_trace(plan: TracePlan, batch_size: int, *, fake: bool) -> TraceResult:
    """Repeated blocks replayed where the plan allows (fake traces only: a real one computes values); a replay
    that turns out not to match its blocks reruns the trace in full."""
    replicate = plan.replicate if fake else False
    try:
        return _trace_once(plan, batch_size, fake, replicate)
    except ReplicationMismatch as exc:
        why = str(exc)
    except OptimizerReplayMismatch:
        return _run_trace(replace(plan, optimizer_replay=None), batch_size, fake=fake)  # its steps run for real
    result = _trace_once(plan, batch_size, fake, False)
    result.replication = Replication(False, reason=f"a replayed block did not match ({why})")
    result.notes.append(result.replication.note())
    return result


def _trace_once(plan: TracePlan, batch_size: int, fake: bool, replicate: Optional[bool]) -> TraceResult:
    import torch

    rng = torch.get_rng_state()
    # a step of the user's own may enter autocast itself
    tracker = trace_tracker_class()(
        cast_cache=plan.amp is not None or plan.step_fn is not None, fake=fake, size_hints=plan.size_hints
    )
    tracker.stack_hook = plan.stack_hook
    tracker.interrupts = pending_interrupt()
    tracker.logits = LogitsWatch(plan.logits_vocab) if plan.logits_vocab else None
    notes: List[str] = []
    loss_sources: List[str] = []
    with heap_frozen():  # the collection at the trace's end walks its own objects only
        try:
            mode: Any = contextlib.nullcontext()
            if fake:
                # its first use imports torch._dynamo and sympy: loaded whole here, whatever Ctrl-C does meanwhile
                mode = tracer_imports()(allow_non_fake_inputs=True)
            # fast paths answered in the real trace too, so that it follows the fake trace's path it is compared with
            with mode, _quiet_fake_tensor_log(), answer_fast_paths():
                copier = TensorCopier(fake=fake)
                model, mapping, dropped = copy_model(plan.model, copier)
                if plan.checkpointing and not plan.evaluation:
                    notes += checkpoint_blocks(model)
                optimizer = None if plan.evaluation else _optimizer_copies(plan, model, mapping, copier)
                stepped = _stepped(plan, fake, optimizer, tracker)
                replicator = install(model, tracker, replicate)
                loss_fn = _recording_loss(plan.loss_fn, loss_sources)
                planned, rules = plan.torch_rules, torch_rules_applied(plan.torch_rules, plan.evaluation)
                # the planned torch's rules (analysis.fake.torch_rules): swaps over the CUDA ones, a mode over the
                # tracker
                kernels, clears = cuda_kernels(planned.version if planned else None), ordered_cache_clears(tracker)
                with kernels as rerouted, tracker, rules, clears:
                    _register_model(tracker, model, optimizers_of(optimizer))
                    make_batch = functools.partial(plan.make_batch, batch_size, fake)
                    _steps_explained(plan, model, optimizer, make_batch, loss_fn, tracker, replicator)
                    replication = replicator.finish() if replicator is not None else Replication(False)
                    notes += _paged_notes(optimizers_of(optimizer))
                    notes += tracker.size_hints.notes() if tracker.size_hints else []  # which sizes were hinted
                    del model
                    if stepped is not None:
                        stepped.release()  # a replayed state is freed where the deletion below frees a real one
                    del optimizer, mapping, copier
                    gc.collect()  # the copy's teardown recorded whether or not the collector ran (a cycle may hold it)
                    _keep_steps(plan, stepped, tracker)
            if rerouted.attention:
                notes.append(
                    "attention with dropout: traced as CUDA's fused kernels keep it (no L x L weights or mask; the "
                    "CPU's math path would keep them)"
                )
            result = summarize(tracker, batch_size, fake, plan)
            result.dropped_hooks = dropped
            result.replication = replication
            result.loss_source = loss_sources[0] if loss_sources else "custom"
            result.step_autocast = tracker.step_autocast
            result.op_kinds = frozenset(tracker.op_kinds)
            result.notes += notes + _result_notes(result, plan)
            return result
        finally:
            with interrupts_held():  # a Ctrl-C meanwhile waits: the tracker and the RNG are put back whole
                tracker.close()
                torch.set_rng_state(rng)


def _steps_explained(
    plan: TracePlan, model: Any, optimizer: Any, make_batch: Any, loss_fn: Any, tracker: Any, replicator: Any
) -> None:
    """The plan's steps on the copies (evaluation, the user's step or the built-in one); an exception becomes a
    one-line TraceError, or a ReplicationMismatch where a replayed block that did not match led to it."""
    autocast = autocast_factory(plan.amp, "cpu")
    try:
        if plan.evaluation:
            eval_steps(model, make_batch, steps=plan.steps, autocast=autocast, tracker=tracker)
        elif plan.step_fn is not None:
            run_user_steps(
                plan.step_fn, model, optimizer, make_batch, steps=plan.steps, autocast=autocast, tracker=tracker
            )
        else:
            train_steps(
                model,
                optimizer,
                make_batch,
                loss_fn,
                steps=plan.steps,
                micro=min(plan.grad_accum, 2),
                grad_accum=plan.grad_accum,
                autocast=autocast,
                tracker=tracker,
                keep_grads=plan.keep_grads,
            )
    except ReplicationMismatch:
        raise
    except Exception as exc:
        if replicator is not None and replicator.problem:  # what a replay that did not match led to
            raise ReplicationMismatch(replicator.problem) from None
        if isinstance(exc, TraceError):
            raise
        raise TraceError(_explain(exc)) from None


def _result_notes(result: TraceResult, plan: TracePlan) -> List[str]:
    """The notes a finished trace adds about itself: the replication, and a loss that is the model's own."""
    notes = [note for note in [result.replication.note()] if note]
    if result.loss_source == "model" and not plan.evaluation:
        notes.append(
            "loss: the model's own loss (output.loss, from the batch's labels), as a training loop "
            "backpropagates it; pass loss= for another"
        )
    return notes


def _stepped(plan: TracePlan, fake: bool, optimizer: Any, tracker: Any) -> Optional[Stepper]:
    """The optimizer train_steps runs when its steps are recorded or replayed (analysis.trace.optimizer_replay)."""
    if optimizer is None or not eligible(plan, fake):
        return None
    box = plan.optimizer_replay
    if box.recording is None and box.declined:
        return None
    if box.recording is not None and plan.stack_hook is not None:
        return None  # the timeline's trace keeps each storage's frames: its steps run
    return Stepper(optimizer, tracker, box.recording)


def _keep_steps(plan: TracePlan, stepped: Optional[Stepper], tracker: Any) -> None:
    """After the first eligible trace: its optimizer steps, for the plan's other traces."""
    if stepped is None:
        return
    box = plan.optimizer_replay
    if stepped.recording is not None:
        box.replays += 1
    elif box.recording is None:
        box.recording, box.declined = record(tracker, plan.steps, stepped.signatures)


def _optimizer_copies(plan: TracePlan, model: Any, mapping: Dict[int, Any], copier: TensorCopier) -> Any:
    """The optimizer the plan names, made over the copy's trainable parameters, or copies of the user's (one, or
    the tuple, list or dict of them that their own step takes), in the same structure."""
    if isinstance(plan.optimizer, str):
        return make_optimizer(plan.optimizer, [p for p in model.parameters() if p.requires_grad])
    copies = [copy_optimizer(opt, mapping, copier) for opt in optimizers_of(plan.optimizer)]
    return same_shape(plan.optimizer, copies)


def _paged_notes(optimizers: List[Any]) -> List[str]:
    """bitsandbytes' paged state is cudaMallocManaged memory: outside the caching allocator (and the figures
    replayed through it), counted by nvidia-smi while resident, moved to the host when the GPU runs short."""
    paged = sum(paged_state_bytes(opt) for opt in optimizers)
    if not paged:
        return []
    return [
        f"paged optimizer state: {format_bytes(paged, 'fit')} in unified memory, outside PyTorch's caching "
        "allocator (not in reserved); nvidia-smi counts it while resident, and it pages out to the host under pressure"
    ]


def _register_model(tracker: Any, model: Any, optimizers: List[Any]) -> None:
    for p in model.parameters():
        tracker.register(p, "parameter")
    for b in model.buffers():
        tracker.register(b, "buffer")
    for _, _, value in tensor_attributes(model):
        tracker.register(value, "buffer")
    for optimizer in optimizers:  # none in the evaluation step
        register_optimizer_state(tracker, optimizer)


def _explain(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = type(exc).__name__
    if "DataDependent" in name or "data-dependent" in text or "DynamicOutputShape" in name:
        # which operator, and which line of the user's code asked for it (value_reads.describe)
        what = describe(exc) or "e.g. .item(), masking, nonzero"
        return (
            f"the model's forward depends on tensor values ({what}), which the traced engine cannot follow: "
            "run on a GPU for a measured analysis"
        )
    return f"training step failed while tracing: {name}: {text[:200]}"
