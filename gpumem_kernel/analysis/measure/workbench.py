"""The workbench that real training steps run on, leaving the user's objects as they were.

Shared by autobatch's search and the benchmark's sweep: the user's model (parameters, buffers, gradients,
train/eval flags), optimizer (state, param-group settings) and RNG states (torch CPU + CUDA, python `random`,
numpy if imported) are snapshotted to CPU memory before and restored after, also on Ctrl-C; the device the
steps run on; the pieces of a step (batch to device, GradScaler, optimizer step); and the clean allocator
every trial starts from. torch is imported inside functions only; CUDA is touched only when the device is a
CUDA device.
"""

from __future__ import annotations

import copy
import gc
import random
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from gpumem_kernel.analysis.gpus.lookup import parse_memory
from gpumem_kernel.analysis.trace.model_copy import TensorCopier, copy_model, copy_optimizer, make_optimizer
from gpumem_kernel.probe.torchstats import loaded_torch


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def clean_allocator(device: Any) -> None:
    """gc, then give cached blocks back and reset the peak, so a trial measures only itself. On the CPU
    (simulated) a young-generation gc is enough: a trial counts only what it allocates itself, and a full
    collection costs ~0.2 s with torch loaded."""
    cuda = device is not None and getattr(device, "type", None) == "cuda"
    gc.collect() if cuda else gc.collect(1)
    if cuda:
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def parse_cap(simulate: Any) -> Optional[int]:
    """None, bytes, or a size such as '6GiB' -> bytes."""
    if simulate is None or simulate is False:
        return None
    try:
        return parse_memory(simulate)
    except ValueError as exc:
        raise ValueError(f"simulate: {exc}") from None


def _numpy() -> Any:
    """numpy if the user's code imported it (its RNG state is then saved too), else None."""
    return sys.modules.get("numpy")


def _is_tensor(value: Any) -> bool:
    torch = loaded_torch()
    return torch is not None and isinstance(value, torch.Tensor)


# --- snapshots: the user's objects are byte-identical afterwards -----------------------------------------------


@dataclass
class RngSnapshot:
    torch_cpu: Any
    torch_cuda: Optional[List[Any]]
    python: Any
    numpy: Any

    @classmethod
    def take(cls, cuda: bool) -> "RngSnapshot":
        """`cuda`: also the CUDA generators (only when CUDA is in use: reading them initialises CUDA)."""
        import torch

        np = _numpy()
        return cls(
            torch_cpu=torch.get_rng_state(),
            torch_cuda=torch.cuda.get_rng_state_all() if cuda else None,
            python=random.getstate(),
            numpy=np.random.get_state() if np is not None and hasattr(np, "random") else None,
        )

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        np = _numpy()
        if self.numpy is not None and np is not None:
            np.random.set_state(self.numpy)


def _host_copy(t: Any) -> Any:
    return t.detach().to("cpu", copy=True)


@dataclass
class _SavedTensor:
    host: Any  # the copy in CPU memory
    device: Any  # where the original lived

    def back(self) -> Any:
        return self.host.to(self.device, copy=True)  # copy=True: the snapshot must survive the next restore


_OPTIMIZER_ATTRS = ("_opt_called", "_step_count")  # set by LR schedulers' step wrappers


class StateSnapshot:
    """Model tensors, gradients, train flags and optimizer state, copied to CPU memory; restored in place."""

    def __init__(self, model: Any, optimizer: Any = None) -> None:
        named = dict(model.named_parameters())
        named.update({f"buffer:{k}": v for k, v in model.named_buffers()})
        self.model = model
        self.tensors = [(t, _host_copy(t)) for t in named.values()]
        self.grads = [(p, None if p.grad is None else _host_copy(p.grad)) for p in model.parameters()]
        self.training = [(m, m.training) for m in model.modules()]
        self.optimizer = optimizer if optimizer is not None and not isinstance(optimizer, str) else None
        self.opt_state: Dict[Any, Dict[str, Any]] = {}
        self.opt_groups: List[Dict[str, Any]] = []
        self.opt_attrs: Dict[str, Any] = {}
        if self.optimizer is not None:
            for p, state in self.optimizer.state.items():
                self.opt_state[p] = {
                    k: _SavedTensor(_host_copy(v), v.device) if _is_tensor(v) else copy.deepcopy(v)
                    for k, v in state.items()
                }
            self.opt_groups = [
                copy.deepcopy({k: v for k, v in g.items() if k != "params"}) for g in self.optimizer.param_groups
            ]
            self.opt_attrs = {a: getattr(self.optimizer, a) for a in _OPTIMIZER_ATTRS if hasattr(self.optimizer, a)}

    def restore(self) -> None:
        import torch

        with torch.no_grad():
            for t, saved in self.tensors:
                if t.shape != saved.shape or t.dtype != saved.dtype:
                    t.data = saved.to(t.device, copy=True)  # replaced by user code during the run
                else:
                    t.copy_(saved)
        for p, grad in self.grads:
            p.grad = None if grad is None else grad.to(p.device, copy=True)
        for module, flag in self.training:
            module.training = flag
        if self.optimizer is not None:
            self._restore_optimizer()

    def _restore_optimizer(self) -> None:
        opt = self.optimizer
        opt.state.clear()
        for p, state in self.opt_state.items():
            opt.state[p] = {k: v.back() if isinstance(v, _SavedTensor) else copy.deepcopy(v) for k, v in state.items()}
        for group, saved in zip(opt.param_groups, self.opt_groups):
            for key in [k for k in group if k != "params" and k not in saved]:
                del group[key]
            group.update(copy.deepcopy(saved))
        for attr in _OPTIMIZER_ATTRS:
            if attr in self.opt_attrs:
                setattr(opt, attr, self.opt_attrs[attr])
            elif hasattr(opt, attr):
                delattr(opt, attr)


# --- where the training steps run ------------------------------------------------------------------------------


def resolve_device(device: Any, model: Any, simulated: bool) -> Any:
    """torch.device to train on. Simulated runs are on the CPU; otherwise the named device, 'auto', or the
    model's own device. CUDA is initialised only when the caller names it (or the model already lives there)."""
    import torch

    if simulated:
        return torch.device("cpu")
    if device is None:
        first = next(iter(model.parameters()), None)
        return first.device if first is not None else torch.device("cpu")
    text = str(device)
    if text == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    try:
        resolved = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    except (RuntimeError, TypeError):
        raise ValueError(f"bad device {device!r}; use cpu, cuda, cuda:0 or auto") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {text!r} asked for, but this torch build or machine has no CUDA; "
                "use simulate='6GiB' to run the search without a GPU"
            )
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    elif resolved.type != "cpu":
        raise ValueError(f"device {text!r} is not supported; use cpu or cuda[:N]")
    return resolved


def _on_device(model: Any, device: Any) -> bool:
    return all(t.device == device for t in list(model.parameters()) + list(model.buffers()))


class Workbench:
    """The model and optimizer the steps run on: the user's own when they already live on the device
    (snapshot, then restore after every trial and at the end), else a copy placed on the device."""

    def __init__(self, model: Any, optimizer: Any, device: Any) -> None:
        self.device = device
        self.in_place = _on_device(model, device)
        if self.in_place:
            self.model, self.optimizer = model, optimizer
        else:
            copier = TensorCopier(fake=False, device=str(device))
            self.model, mapping, _ = copy_model(model, copier)
            self.optimizer = (
                optimizer
                if isinstance(optimizer, str)
                else copy_optimizer(optimizer, mapping, copier, cuda_defaults=False)
            )
            del mapping
        self.snapshot = StateSnapshot(self.model, self.optimizer)

    def new_optimizer(self) -> Any:
        if isinstance(self.optimizer, str):
            return make_optimizer(self.optimizer, [p for p in self.model.parameters() if p.requires_grad])
        return self.optimizer

    def reset(self) -> None:
        self.snapshot.restore()

    def close(self) -> None:
        self.reset()
        if not self.in_place:
            self.model = self.optimizer = None
        self.snapshot = None


def to_device(batch: Any, device: Any, non_blocking: bool = False) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    if device.type == "cpu":
        return batch
    return tree_map(lambda t: t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t, batch)


def grad_scaler(amp: Optional[str], device: Any) -> Any:
    import torch

    return torch.amp.GradScaler("cuda") if amp == "fp16" and device.type == "cuda" else None


def optimizer_step(optimizer: Any, scaler: Any) -> None:
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
