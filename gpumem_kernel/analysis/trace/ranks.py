"""One rank of a data-parallel training step, wrapped as each strategy wraps it, and its live bytes.

The same code runs a rank for real (CPU tensors, gloo, several processes: analysis.measure.gloo_ranks) and traced
(fake tensors under a fake process group of the world size, in this process: `trace_rank`), so that the two can be
compared to the byte. The strategies, as PyTorch runs them:

- ddp: DistributedDataParallel (its gradient buckets, `bucket_cap_mb` each), the optimizer over every parameter;
- zero1: DistributedDataParallel plus ZeroRedundancyOptimizer (each rank keeps the state of its shard of the
  parameters, then broadcasts them);
- zero2: FSDP2 `fully_shard` per repeated block and at the root with reshard_after_forward=False (parameters stay
  gathered from forward to backward: FSDP's SHARD_GRAD_OP);
- zero3, fsdp: `fully_shard` with reshard_after_forward=True (each block gathered for its forward and again for
  its backward).

The tracker is analysis.allocator.storage's; `UntypedStorage.resize_` (how FSDP frees and refills its gathered
parameters) is reported to it, as no dispatch mode sees it. Communication buffers of the backend are not tensors:
not counted.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from gpumem_kernel.analysis.allocator.storage import make_tracker
from gpumem_kernel.analysis.trace.checkpointing import repeated_blocks
from gpumem_kernel.analysis.trace.model_copy import make_optimizer
from gpumem_kernel.analysis.trace.training_loop import autocast_factory, train_steps

RANK_STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
_ZERO_CLASSES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "sgd-momentum": "SGD"}


@dataclass(frozen=True)
class RankSetup:
    """How every rank wraps the model: the strategy, the world size and the wrappers' own settings."""

    strategy: str  # RANK_STRATEGIES
    world_size: int
    optimizer: str = "adamw"  # a kind of analysis.trace.model_copy.make_optimizer
    bucket_cap_mb: float = 25.0  # DistributedDataParallel's default
    param_dtype: Optional[str] = None  # "bfloat16": FSDP MixedPrecisionPolicy(param_dtype=...), fp32 reduce
    reshard_after_forward: Optional[bool] = None  # FSDP; None: as the strategy (zero2 False, zero3 and fsdp True)

    def __post_init__(self) -> None:
        if self.strategy not in RANK_STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; use {', '.join(RANK_STRATEGIES)}")
        if self.optimizer not in _ZERO_CLASSES:
            raise ValueError(f"a rank's step runs {', '.join(_ZERO_CLASSES)}, not {self.optimizer!r}")

    @property
    def sharded(self) -> bool:
        """FSDP2 shards the parameters (zero2, zero3, fsdp); DDP keeps them whole (ddp, zero1)."""
        return self.strategy in ("zero2", "zero3", "fsdp")

    @property
    def reshards(self) -> bool:
        if self.reshard_after_forward is not None:
            return self.reshard_after_forward
        return self.strategy != "zero2"

    def label(self) -> str:
        """e.g. "fsdp (reshard_after_forward=False, bf16 params) x 4"."""
        extras = []
        if self.sharded and self.reshard_after_forward is not None:
            extras.append(f"reshard_after_forward={self.reshards}")
        if self.param_dtype:
            extras.append(f"{self.param_dtype} params")
        return f"{self.strategy}{' (' + ', '.join(extras) + ')' if extras else ''} x {self.world_size}"


@dataclass
class RankPeak:
    """One rank's live tensor bytes over its second (steady) training step."""

    rank: int
    peak_live: int  # the most bytes alive at once during the step
    start_live: int  # alive as the step begins: what the rank keeps between steps
    peak_phase: str  # input | forward | backward | optimizer | zero_grad


def wrap(model: Any, setup: RankSetup, group: Any = None) -> Tuple[Any, Any]:
    """(the model as the strategy wraps it, its optimizer); the default process group unless `group`."""
    if setup.sharded:
        return _fully_sharded(model, setup), make_optimizer(setup.optimizer, list(model.parameters()))
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, bucket_cap_mb=setup.bucket_cap_mb, process_group=group)
    params = [p for p in ddp.parameters() if p.requires_grad]
    if setup.strategy == "ddp":
        return ddp, make_optimizer(setup.optimizer, params)
    return ddp, _zero_optimizer(params, setup.optimizer, group)


def _fully_sharded(model: Any, setup: RankSetup) -> Any:
    """fully_shard on each repeated block, then on the root (FSDP2's documented order)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if setup.param_dtype:
        policy = MixedPrecisionPolicy(param_dtype=getattr(torch, setup.param_dtype), reduce_dtype=torch.float32)
    for _, block in repeated_blocks(model):
        fully_shard(block, reshard_after_forward=setup.reshards, mp_policy=policy)
    return fully_shard(model, reshard_after_forward=setup.reshards, mp_policy=policy)


def _zero_optimizer(params: List[Any], kind: str, group: Any) -> Any:
    """ZeroRedundancyOptimizer over the optimizer make_optimizer builds for `kind` (same settings)."""
    import inspect

    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer

    cls = getattr(torch.optim, _ZERO_CLASSES[kind])
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in make_optimizer(kind, params[:1]).defaults.items() if k in accepted}
    return ZeroRedundancyOptimizer(params, optimizer_class=cls, process_group=group, **defaults)


@contextlib.contextmanager
def storage_resizes(tracker: Any) -> Iterator[None]:
    """`UntypedStorage.resize_` told to the tracker while the block runs (then put back)."""
    import torch

    original = torch.UntypedStorage.resize_

    def resize_(storage: Any, size: int) -> Any:
        result = original(storage, size)
        tracker.resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]


def rank_step(
    model: Any,
    setup: RankSetup,
    rank: int,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[Any, Any], Any],
    amp: Optional[str] = None,
    group: Any = None,
) -> RankPeak:
    """Wrap `model` (the rank's own copy: it is changed) as `setup` says and run two training steps under the
    tracker; the second one's figures. A process group must be initialised (or `group` given)."""
    tracker = make_tracker()
    with tracker, storage_resizes(tracker):
        tracker.register(list(model.parameters()) + list(model.buffers()))
        wrapped, optimizer = wrap(model, setup, group)
        del model
        train_steps(
            wrapped,
            optimizer,
            make_batch,
            loss_fn,
            steps=2,
            micro=1,
            grad_accum=1,
            autocast=autocast_factory(amp, "cpu"),
            tracker=tracker,
        )
        peak = step_peak(tracker, rank, 2)
        del wrapped, optimizer
    tracker.close()
    return peak


def step_peak(tracker: Any, rank: int, step: int) -> RankPeak:
    """The live bytes of step `step` from the tracker's stream: at its start and at its most."""
    spans = {phase: span for (s, _, phase), span in tracker.spans.items() if s == step}
    start, end = min(a for a, _ in spans.values()), max(b for _, b in spans.values())
    live, start_live, peak, peak_at = 0, 0, 0, start
    for index, (kind, sid) in enumerate(tracker.events[:end]):
        if index == start:
            start_live = peak = live
        live += tracker.records[sid].nbytes if kind == "alloc" else -tracker.records[sid].nbytes
        if index >= start and live > peak:
            peak, peak_at = live, index
    if start == end:
        start_live = peak = live
    phase = next((p for p, (a, b) in spans.items() if a <= peak_at < b), "input")
    return RankPeak(rank=rank, peak_live=peak, start_live=start_live, peak_phase=phase)


def figures(peaks: List[RankPeak]) -> Dict[str, int]:
    """The ranks' largest peak and start (the rank a plan must fit), and their smallest peak."""
    return {
        "peak_live": max(p.peak_live for p in peaks),
        "min_peak_live": min(p.peak_live for p in peaks),
        "start_live": max(p.start_live for p in peaks),
    }
