"""The loops a trace runs, as users write them: the training step (batch, forward and loss under autocast, backward,
optimizer step, zero_grad) and the evaluation step (no_grad forward), with the loss a loop backpropagates.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import Any, Callable, Optional

from gpumem_kernel.analysis.trace.model_copy import optimizer_error, register_optimizer_state, reported_as_is
from gpumem_kernel.analysis.trace.plan import TraceError


def feed(model: Any, batch: Any) -> Any:
    """tensor -> model(x); tuple/list -> model(*xs); dict -> model(**xs)."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def model_loss(output: Any) -> Any:
    """The loss the model computed itself (HF `ModelOutput.loss`, `output["loss"]`; set when the batch has
    labels), or None. A training loop backpropagates that one, so the trace must too."""
    import torch

    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.is_floating_point() and loss.requires_grad and loss.numel() == 1:
        return loss if loss.dim() == 0 else loss.reshape(())
    return None


def default_loss(output: Any, batch: Any) -> Any:
    """The model's own loss if it returns one; else the sum over the output's floating tensors that need grad of
    mean(x.float()**2), which touches every output."""
    import torch
    from torch.utils._pytree import tree_leaves

    own = model_loss(output)
    if own is not None:
        return own
    leaves = [
        t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
    ]
    if not leaves:
        raise TraceError("the model's output has no floating tensor that requires grad: pass loss=")
    total = leaves[0].float().pow(2).mean()
    for t in leaves[1:]:
        total = total + t.float().pow(2).mean()
    return total


def train_steps(
    model: Any,
    optimizer: Any,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[Any, Any], Any],
    *,
    steps: int,
    micro: int,
    grad_accum: int,
    autocast: Callable[[], Any],
    tracker: Any,
    scaler: Any = None,
    on_step: Optional[Callable[[int], None]] = None,
    keep_grads: bool = False,
) -> None:
    """The loop users write: new batch, forward + loss under autocast, backward, step, zero_grad.

    zero_grad sets the gradients to None (torch >= 2.0's default) unless `keep_grads`: then they are zeroed in
    place and stay allocated through the next forward (the default before torch 2.0, and still written).
    `out` and `loss` stay bound until the next forward replaces them, as in a user's loop.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    out = loss = batch = None
    for step in range(1, steps + 1):
        if on_step is not None:
            on_step(step)
        for m in range(micro):
            with tracker.span("input", step, m):
                batch = make_batch()
                tracker.register(batch, "input")
            with tracker.span("forward", step, m):
                with autocast():
                    out = feed(model, batch)
                    loss = loss_fn(out, batch)
                if grad_accum > 1:
                    loss = loss / grad_accum
            with tracker.span("backward", step, m):
                (scaler.scale(loss) if scaler is not None else loss).backward()
                for p in params:
                    if p.grad is not None:
                        tracker.register(p.grad, "gradient")
        with tracker.span("optimizer", step, 0):
            try:  # inline, not a helper: the timeline's stacks are the frames below train_steps
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
            except Exception as exc:
                if reported_as_is(exc):
                    raise
                raise optimizer_error(type(optimizer), "step", exc) from None
            register_optimizer_state(tracker, optimizer)
        with tracker.span("zero_grad", step, 0):
            optimizer.zero_grad(set_to_none=not keep_grads)
    del out, loss, batch


def eval_steps(
    model: Any, make_batch: Callable[[], Any], *, steps: int, autocast: Callable[[], Any], tracker: Any
) -> None:
    """The evaluation loop users write: model.eval(), then under torch.no_grad() a new batch and a forward
    per step; no loss, backward or optimizer step. `out` stays bound until the next forward replaces it."""
    import torch

    model.eval()
    out = batch = None
    with torch.no_grad():
        for step in range(1, steps + 1):
            with tracker.span("input", step, 0):
                batch = make_batch()
                tracker.register(batch, "input")
            with tracker.span("forward", step, 0):
                with autocast():
                    out = feed(model, batch)
    del out, batch


def autocast_factory(amp: Optional[str], device_type: str) -> Callable[[], Any]:
    import torch

    if amp is None:
        return contextlib.nullcontext
    if device_type == "cpu":
        dtype = torch.bfloat16  # CPU autocast: fp16 traced with bf16's equal 2-byte width
    else:
        dtype = torch.float16 if amp == "fp16" else torch.bfloat16
    return functools.partial(torch.autocast, device_type, dtype=dtype)
