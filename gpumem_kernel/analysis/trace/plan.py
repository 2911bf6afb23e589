"""What a trace takes and gives: the plan (model, optimizer, batch maker, loss and the step's settings), the
result (peaks and figures by category, the allocator replay), the device events a timeline draws, and the one-line
error a trace raises when it cannot follow the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional

from gpumem_kernel.analysis.allocator.caching_allocator import AllocatorResult
from gpumem_kernel.analysis.allocator.storage import Record


CATEGORIES = (
    "parameter",
    "buffer",
    "gradient",
    "optimizer_state",
    "input",
    "activation",
    "autocast_cache",
    "temporary",
)


PHASES = ("input", "forward", "backward", "optimizer", "zero_grad")


class TraceError(ValueError):
    """The model cannot be traced (data-dependent control flow, lazy parameters, ...): one line."""


@dataclass
class TracePlan:
    """Everything a trace needs besides the batch size; built once by analysis.pipeline.analyze."""

    model: Any
    optimizer: Any  # str kind or the user's optimizer
    make_batch: Callable[[int, bool], Any]  # (batch size, fake) -> batch
    loss_fn: Callable[[Any, Any], Any]
    amp: Optional[str] = None  # "bf16" | "fp16": traced as bf16 on CPU
    grad_accum: int = 1
    checkpointing: bool = False
    steps: int = 2
    # gpus.blas_workspaces gives all three for the device and torch version (the defaults: 8 MiB, unified Lt)
    cublas_bytes: int = 8_519_680
    cublaslt_bytes: int = 0
    cublaslt_call_bytes: int = 0
    cudnn: bool = True
    expandable_segments: bool = False  # the allocator configuration's (allocator.settings_from_env)
    # called at each storage birth (the timeline's frame capture); the trace then keeps its events (`timeline`)
    stack_hook: Optional[Callable[[], Any]] = None
    # the evaluation step instead (eval_steps): model.eval(), no_grad, forward only, no optimizer
    evaluation: bool = False
    # zero_grad(set_to_none=False): gradients zeroed in place, alive through the next forward
    keep_grads: bool = False
    # the user's own step, step_fn(model, optimizer, batch), instead of the built-in loop (user_step)
    step_fn: Optional[Callable[[Any, Any, Any], Any]] = None
    # the torch planned for (`--torch 1.10`) and its rules (analysis.fake.torch_rules.Planned); None: the running torch
    torch_rules: Any = None
    # sizes that depend on tensor values (nonzero, unique, boolean masks): analysis.fake.size_hints.check's,
    # None: defaults
    size_hints: Any = None
    # repeated blocks traced once and replayed (analysis.trace.replicate): None when worth it, False never, True always
    replicate: Optional[bool] = None
    # the output head's vocabulary: the trace watches the logits and the loss's copies of them
    # (analysis.trace.llm_facts)
    logits_vocab: Optional[int] = None
    # the optimizer's steps recorded by the first trace and replayed by the others (analysis.trace.optimizer_replay's
    # OptimizerReplay, shared by the plans of one analysis); None: always run
    optimizer_replay: Any = None
    # the analysis' progress (analysis.request.progress.ProgressReporter, shared by the plans of one analysis): told
    # when each trace begins and ends; None: silent
    progress: Any = None


@dataclass
class TraceResult:
    batch_size: int
    fake: bool
    peak_live: int  # max live storage bytes in the last step (all storages, as the CPU sees them)
    peak_phase: str
    step_peaks: List[int]
    phase_peaks: Dict[str, int]
    breakdown: Dict[str, int]  # live bytes by category at the last step's peak
    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int  # device-resident state
    optimizer_host: int  # `step` scalars that stay on the host with CUDA
    optimizer_transient: int  # extra bytes at the step's peak over its start (foreach temporaries)
    activations: int  # forward outputs of the last step still alive when its forward ended
    autocast_cache: int
    input: int
    device: AllocatorResult  # the replay through the caching-allocator model, workspaces included
    cublas_bytes: int
    cudnn_peak_bytes: int
    dropped_hooks: int = 0
    loss_source: str = "custom"  # model (output.loss) | default (mean of squares) | custom (the caller's)
    notes: List[str] = field(default_factory=list)
    timeline: Optional["TraceEvents"] = None  # only when the plan has a stack_hook
    replication: Any = None  # analysis.trace.replicate.Replication: blocks replayed, or the full trace and why
    # the autocast a step of the user's own entered (analysis.trace.user_step.StepAutocast); None: none seen
    step_autocast: Any = None
    # the kinds of op whose CUDA kernels the trace models least well that the step ran (analysis.trace.tracker's
    # FP32_CONVOLUTION, CONVOLUTION, LSTM)
    op_kinds: FrozenSet[str] = frozenset()
    # analysis.trace.llm_facts.LogitsTrace, when the plan names a logits_vocab and the trace saw them
    logits: Any = None
    # analysis.trace.summary.TracedStream: the storages and events summarize() read, for a search that predicts the
    # stream at other sizes (analysis.search.size_reuse); the search drops it once read
    stream: Any = None


@dataclass
class DeviceEvent:
    """One event of the device replay: a storage's (or a workspace's) malloc or free in the allocator model."""

    kind: str  # "alloc" | "free"
    handle: Any  # a Record's sid, or ("cublas" | "cublaslt", thread) / ("cublaslt" | "cudnn", n)
    nbytes: int = 0  # requested (alloc)
    size: int = 0  # the block the model handed out (alloc)
    address: int = 0
    reserved: int = 0  # the model's reserved bytes after the event


@dataclass
class TraceEvents:
    """What a timeline needs of a trace: the records (with their stacks), the device events in order, and each
    record's category as the analysis counts it."""

    records: List[Record]
    device: List[DeviceEvent]
    categories: Dict[int, str]  # sid -> CATEGORIES entry
