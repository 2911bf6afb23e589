"""The user's own training step, traced: `step(model, optimizer, batch)` runs on the trace's copies, with as many
forward and backward passes, optimizers and `empty_cache` calls as it makes.

The phases the report counts are told apart as the step runs: backward from autograd's entry points, the optimizer
phase and zero_grad from the copied optimizers' own methods. What a step written for a GPU does to reach CUDA is
answered on the CPU for the length of the trace only: `.to("cuda")`, `.cuda()` and `device="cuda"` stay on the
CPU, CUDA autocast becomes the trace's CPU autocast (bf16, the 2-byte width of both), `torch.cuda.synchronize` does
nothing and `torch.cuda.empty_cache` marks where the allocator model frees its cache.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from gpumem_kernel.analysis.fake.autocast_policy import swapped
from gpumem_kernel.analysis.trace.model_copy import optimizer_error, register_optimizer_state, reported_as_is
from gpumem_kernel.analysis.trace.tracker import Marker


def optimizers_of(optimizer: Any) -> List[Any]:
    """The optimizers a step is given: one, or a tuple, list or dict of them (a GAN's two, say)."""
    if optimizer is None:
        return []
    if isinstance(optimizer, dict):
        return list(optimizer.values())
    if isinstance(optimizer, (tuple, list)):
        return list(optimizer)
    return [optimizer]


def same_shape(optimizer: Any, copies: List[Any]) -> Any:
    """The copies in the structure the user gave their optimizers in."""
    if optimizer is None:
        return None
    if isinstance(optimizer, dict):
        return dict(zip(optimizer.keys(), copies))
    if isinstance(optimizer, (tuple, list)):
        return type(optimizer)(copies)
    return copies[0]


# the autocast dtypes that are mixed precision, as the report's `amp` names them
AMP_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class StepAutocast:
    """The autocast a step of the user's own entered, as the step asked for it: `torch.autocast("cuda",
    dtype=torch.bfloat16)` is ("cuda", "bf16") though the trace runs it as CPU autocast."""

    device_type: str
    amp: str  # "bf16" | "fp16"

    def text(self) -> str:
        dtype = {code: name for name, code in AMP_OF_DTYPE.items()}[self.amp]
        return f"torch.autocast({self.device_type!r}, dtype=torch.{dtype})"


class _AutocastWatch:
    """Records the first enabled mixed-precision autocast entered while `watching` (the user's step, not the
    trace's own autocast around it)."""

    def __init__(self) -> None:
        self.watching = False
        self.seen: Optional[StepAutocast] = None

    def entered(self, device_type: str, dtype: Any, enabled: bool) -> None:
        amp = AMP_OF_DTYPE.get(str(dtype).replace("torch.", ""))
        if self.watching and enabled and amp is not None and self.seen is None:
            self.seen = StepAutocast(str(device_type).split(":")[0], amp)

    @contextlib.contextmanager
    def over(self) -> Iterator[None]:
        self.watching = True
        try:
            yield
        finally:
            self.watching = False


class _Phases:
    """The tracker's spans, opened and closed as the user's step moves between phases. Each span gets its own
    index within the step (the tracker's `micro`), so that a second forward pass or a second optimizer does not
    overwrite the first; the first of each is the one the report reads."""

    def __init__(self, tracker: Any, step: int) -> None:
        self.tracker = tracker
        self.step = step
        self.counts: Dict[str, int] = {}
        self._open: Optional[Any] = None

    def enter(self, phase: str) -> None:
        self.close()
        index = self.counts.get(phase, 0)
        self.counts[phase] = index + 1
        self._open = self.tracker.span(phase, self.step, index)
        self._open.__enter__()

    def close(self) -> None:
        if self._open is not None:
            opened, self._open = self._open, None
            opened.__exit__(None, None, None)


def run_user_steps(
    step_fn: Callable[[Any, Any, Any], Any],
    model: Any,
    optimizer: Any,
    make_batch: Callable[[], Any],
    *,
    steps: int,
    autocast: Callable[[], Any],
    tracker: Any,
) -> None:
    """`steps` calls of the user's step on the copies, each with a new batch; gradients and optimizer state are
    registered as they appear. `optimizer` is the copies in the user's structure (or None)."""
    optimizers = optimizers_of(optimizer)
    params = [p for p in model.parameters()]
    phases = _Phases(tracker, 0)
    batch = None
    watch = _AutocastWatch()
    with _step_hooks(phases, optimizers, params, tracker), _cuda_on_the_cpu(tracker, watch):
        for step in range(1, steps + 1):
            phases.step, phases.counts = step, {}
            with tracker.span("input", step, 0):
                batch = make_batch()
                tracker.register(batch, "input")
            phases.enter("forward")
            try:
                with autocast(), watch.over():
                    step_fn(model, optimizer, batch)
            finally:
                phases.close()
    del batch
    tracker.step_autocast = watch.seen


@contextlib.contextmanager
def _step_hooks(phases: _Phases, optimizers: List[Any], params: List[Any], tracker: Any) -> Iterator[None]:
    """Phase changes at autograd's entry points (torch.autograd.backward and grad: Tensor.backward calls the
    former) and at the copies' step and zero_grad (instance attributes: the user's optimizers are not touched)."""
    import torch

    def backward_entry(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            phases.enter("backward")
            result = original(*args, **kwargs)
            for p in params:
                if p.grad is not None:
                    tracker.register(p.grad, "gradient")
            phases.enter("forward")  # what follows a backward in the same step is another pass until told
            return result

        return run

    def optimizer_step(opt: Any) -> Callable[..., Any]:
        original = opt.step

        def step(*args: Any, **kwargs: Any) -> Any:
            phases.enter("optimizer")
            try:
                result = original(*args, **kwargs)
            except Exception as exc:
                if reported_as_is(exc):
                    raise
                raise optimizer_error(type(opt), "step", exc) from None
            register_optimizer_state(tracker, opt)
            return result

        return step

    def zero_grad(opt: Any) -> Callable[..., Any]:
        original = opt.zero_grad

        def zero(*args: Any, **kwargs: Any) -> Any:
            phases.enter("zero_grad")
            return original(*args, **kwargs)

        return zero

    swaps: List[Tuple[Any, str, Any]] = [
        (torch.autograd, "backward", backward_entry(torch.autograd.backward)),
        (torch.autograd, "grad", backward_entry(torch.autograd.grad)),
    ]
    for opt in optimizers:
        swaps += [(opt, "step", optimizer_step(opt)), (opt, "zero_grad", zero_grad(opt))]
    with swapped(swaps):
        yield


@contextlib.contextmanager
def _cuda_on_the_cpu(tracker: Any, watch: _AutocastWatch) -> Iterator[None]:
    """A step written for a GPU, run on the trace's CPU copies (see the module's docstring); the autocast it enters
    told to `watch`, as the step asked for it."""
    import torch

    def empty_cache() -> None:
        tracker.markers.append(Marker(len(tracker.events), "empty_cache", tracker.phase))

    def synchronize(device: Any = None) -> None:
        return None

    cpu_autocast = _cpu_autocast()
    autocast_class = torch.amp.autocast_mode.autocast
    swaps: List[Tuple[Any, str, Any]] = [
        (torch.cuda, "empty_cache", empty_cache),
        (torch.cuda, "synchronize", synchronize),
        (torch, "autocast", cpu_autocast),
        (torch.amp, "autocast", cpu_autocast),
        (torch.cuda.amp, "autocast", functools.partial(cpu_autocast, "cuda")),
        (autocast_class, "__enter__", _watched_enter(autocast_class.__enter__, watch)),
    ]
    with swapped(swaps), _devices_on_the_cpu_mode()():
        yield


def _watched_enter(enter: Callable[[Any], Any], watch: _AutocastWatch) -> Callable[[Any], Any]:
    """autocast.__enter__, telling `watch` the device and dtype the step asked for: a CUDA autocast made CPU's by
    _cpu_autocast keeps what it was asked in `_gpumem_asked`; any other (`from torch import autocast` bound before the
    trace, torch.cpu.amp.autocast) is what it says."""

    def entered(self: Any) -> Any:
        device_type, dtype = getattr(self, "_gpumem_asked", (self.device, self.fast_dtype))
        watch.entered(device_type, dtype, bool(getattr(self, "_enabled", True)))
        return enter(self)

    return entered


def _cpu_autocast() -> Callable[..., Any]:
    import torch

    autocast_class = torch.amp.autocast_mode.autocast

    def autocast(device_type: str = "cuda", dtype: Any = None, enabled: bool = True, cache_enabled: Any = None) -> Any:
        if str(device_type).startswith("cuda"):
            # the trace's CPU autocast: bf16 for fp16 too (the same 2-byte width), CUDA's policy (cuda_kernels)
            made = autocast_class("cpu", dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache_enabled)
            # what the step asked for, for the report (CUDA autocast's default dtype is fp16)
            made._gpumem_asked = ("cuda", torch.float16 if dtype is None else dtype)
            return made
        return autocast_class(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    return autocast


def _on_cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    return value


def _devices_on_the_cpu_mode() -> type:
    import torch
    from torch.overrides import TorchFunctionMode

    class DevicesOnTheCpu(TorchFunctionMode):
        """`.cuda()` is the tensor itself; a CUDA device in `.to(...)` or a `device=` argument is the CPU."""

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = _on_cpu(kwargs["device"])
            if func is torch.Tensor.to:
                args = tuple(_on_cpu(a) for a in args)
            return func(*args, **kwargs)

    return DevicesOnTheCpu
