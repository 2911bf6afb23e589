"""Real training steps on the GPU: a copy of the model and optimizer stepped at one batch, the peaks of its
steady-state steps from a clean allocator, out of memory read as "does not fit". Written for CUDA builds;
tested with the `gpu` marker. The user's RNG state is restored. torch is imported inside functions only."""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Callable, Optional, Tuple

from gpumem_kernel.analysis.allocator.storage import NullTracker
from gpumem_kernel.analysis.trace.checkpointing import checkpoint_blocks
from gpumem_kernel.analysis.trace.model_copy import TensorCopier, copy_model, copy_optimizer, make_optimizer
from gpumem_kernel.analysis.trace.plan import TracePlan
from gpumem_kernel.analysis.trace.training_loop import autocast_factory, train_steps
from gpumem_kernel.oom.classify import is_oom
from gpumem_kernel.probe.torchstats import cuda_initialised


def _preserved_rng() -> Any:
    """Save and restore torch's CPU (and initialised CUDA) RNG state around a run."""
    import torch

    @contextlib.contextmanager
    def manager() -> Any:
        cpu = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if cuda_initialised() else None
        try:
            yield
        finally:
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

    return manager()


def run_real_steps(
    plan: TracePlan, batch: int, device: Any, steps: int = 3, on_step: Optional[Callable[[int], None]] = None
) -> None:
    """`steps` real training steps at `batch` on a copy of the model and optimizer placed on `device`."""
    import torch
    from torch.utils._pytree import tree_map

    def to_device(batch_value: Any) -> Any:
        return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch_value)

    copier = TensorCopier(fake=False, device=str(device))
    model, mapping, _ = copy_model(plan.model, copier)
    if plan.checkpointing:
        checkpoint_blocks(model)  # the same blocks as the trace, so both engines measure one step
    if isinstance(plan.optimizer, str):
        optimizer = make_optimizer(plan.optimizer, [p for p in model.parameters() if p.requires_grad])
    else:
        optimizer = copy_optimizer(plan.optimizer, mapping, copier, cuda_defaults=False)
    del mapping
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(device_type) if plan.amp == "fp16" and device_type == "cuda" else None
    train_steps(
        model,
        optimizer,
        lambda: to_device(plan.make_batch(batch, False)),
        plan.loss_fn,
        steps=steps,
        micro=min(plan.grad_accum, 2),
        grad_accum=plan.grad_accum,
        autocast=autocast_factory(plan.amp, device_type),
        tracker=NullTracker(),
        scaler=scaler,
        on_step=on_step,
    )


def clear_cublas_workspaces() -> bool:
    """Free cuBLAS's per-thread workspaces (PyTorch's own CUDA-graph trees do the same around a capture); the next
    matmul on a thread allocates its workspace again. False where this torch has no such call."""
    import torch

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return False
    clear()
    return True


def measure_step_peaks(plan: TracePlan, batch: int, device: Any) -> Optional[Tuple[int, int]]:
    """(peak allocated, peak reserved) of steps 2–3 at `batch` on a copy, over the baseline; None on OOM.

    cuBLAS's workspaces are freed first, so every point counts the ones its step allocates (as the traced engine
    and a fresh process do): kept from an earlier point, they would sit in the baseline of every later one only."""
    import torch

    def reset_at_step_two(step: int) -> None:
        if step == 2:  # optimizer state exists from step 1 on: steps 2-3 are the steady state
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    result: Optional[Tuple[int, int]] = None
    with _preserved_rng():
        gc.collect()
        torch.cuda.synchronize(device)
        clear_cublas_workspaces()
        torch.cuda.empty_cache()
        base_allocated = torch.cuda.memory_allocated(device)
        base_reserved = torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            try:
                run_real_steps(plan, batch, device, steps=3, on_step=reset_at_step_two)
                torch.cuda.synchronize(device)
                result = (
                    torch.cuda.max_memory_allocated(device) - base_allocated,
                    torch.cuda.max_memory_reserved(device) - base_reserved,
                )
            except RuntimeError as exc:  # torch's OutOfMemoryError, and cuBLAS/cuDNN allocation failures
                if not is_oom(exc):
                    raise
                # leaving the except clause drops the traceback and the frames that pin the tensors
        finally:
            gc.collect()  # the copies died with run_real_steps' frame; cycles go now
            torch.cuda.empty_cache()
    return result
