"""What the model holds: parameter and buffer bytes over unique storages, the largest layer, the optimizer
state (modelled before a step, or read from a stepped optimizer), and each rank's share of these model states
under a sharding strategy. torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple


def _storage_key(t: Any, keep: List[Any]) -> Any:
    """Identity of a tensor's storage: shared parameters (tied weights, views) count once."""
    st = t.untyped_storage()
    keep.append(st)
    ptr = st.data_ptr() if t.device.type not in ("meta",) else 0
    return (str(t.device), ptr) if ptr else ("id", id(st))


def bytes_by_dtype(tensors: Sequence[Any]) -> Dict[str, int]:
    """Bytes per dtype over unique storages."""
    keep: List[Any] = []
    seen = set()
    result: Dict[str, int] = {}
    for t in tensors:
        key = _storage_key(t, keep)
        if key in seen:
            continue
        seen.add(key)
        dtype = str(t.dtype).replace("torch.", "")
        result[dtype] = result.get(dtype, 0) + int(t.untyped_storage().nbytes())
    return result


def unique_bytes(tensors: Sequence[Any]) -> int:
    return sum(bytes_by_dtype(tensors).values())


def on_meta(model: Any) -> bool:
    """Parameters without data (a model built on the meta device from its config): traced, never measured."""
    first = next(iter(model.parameters()), None)
    return first is not None and first.device.type == "meta"


def largest_layer_of(model: Any) -> Dict[str, Any]:
    """The module with the most parameter bytes of its own (what ZeRO-3/FSDP gathers at once, roughly)."""
    best_name, best = "", 0
    for name, module in model.named_modules():
        own = unique_bytes(list(module.parameters(recurse=False)))
        if own > best:
            best_name, best = name or type(module).__name__, own
    return {"name": best_name, "bytes": best}


@dataclass
class OptimizerModel:
    """Optimizer state as modelled from the parameters (before any step)."""

    state_bytes: int  # device-resident state
    host_bytes: int  # `step` scalars kept on the host (non-fused, non-capturable)
    transient_bytes: int  # extra bytes during step(): foreach temporaries
    known: bool = True


def optimizer_settings(optimizer: Any) -> Tuple[str, List[Dict[str, Any]]]:
    """(kind, param groups) for a kind string or an optimizer object (groups keep their own settings)."""
    import torch

    if isinstance(optimizer, str):
        defaults = {"adamw": {"weight_decay": 0.01}, "adam": {}, "sgd": {}, "sgd-momentum": {"momentum": 0.9}}
        return optimizer, [dict(defaults.get(optimizer, {}), foreach=True)]  # other kinds: traced only
    if isinstance(optimizer, torch.optim.AdamW):
        kind = "adamw"
    elif isinstance(optimizer, torch.optim.Adam):
        kind = "adamw" if optimizer.defaults.get("decoupled_weight_decay") else "adam"
    elif isinstance(optimizer, torch.optim.SGD):
        kind = "sgd-momentum" if any(g.get("momentum") for g in optimizer.param_groups) else "sgd"
    else:
        kind = type(optimizer).__name__
    return kind, [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def model_optimizer_state(params: Sequence[Any], optimizer: Any) -> OptimizerModel:
    """State bytes a torch optimizer creates at its first step, and its foreach temporaries.

    Adam/AdamW: exp_avg + exp_avg_sq (+ max_exp_avg_sq with amsgrad) like each parameter, and a `step`
    scalar (float32; on the host unless fused/capturable). SGD with momentum: momentum_buffer; plain SGD: 0.
    Foreach temporaries: `_foreach_sqrt(exp_avg_sq)` holds one copy of a (device, dtype) group's parameters
    (two for Adam with coupled weight decay, which first makes `grad + wd * param`); the for-loop
    implementation holds one parameter's worth; fused kernels none.
    """
    import torch

    kind, groups = optimizer_settings(optimizer)
    if isinstance(optimizer, str):
        param_groups = [list(params)]
    else:
        param_groups = [list(g["params"]) for g in optimizer.param_groups]
    scalar = torch.tensor(0.0).element_size() if torch.get_default_dtype() != torch.float64 else 8
    state = host = transient = 0
    for settings, group in zip(groups, param_groups):
        trainable = [p for p in group if p.requires_grad]
        sizes = [p.numel() * p.element_size() for p in trainable]
        fused = bool(settings.get("fused"))
        on_device_step = fused or bool(settings.get("capturable"))
        foreach = settings.get("foreach") is not False and not fused
        if kind in ("adam", "adamw"):
            copies = 3 if settings.get("amsgrad") else 2
            state += copies * sum(sizes)
            if on_device_step:
                state += scalar * len(sizes)
            else:
                host += scalar * len(sizes)
            temps = 1 + (1 if kind == "adam" and settings.get("weight_decay") else 0)
        elif kind == "sgd-momentum":
            state += sum(sizes)
            temps = (1 if settings.get("weight_decay") else 0) + (1 if settings.get("nesterov") else 0)
        elif kind == "sgd":
            temps = 1 if settings.get("weight_decay") else 0
        else:
            return OptimizerModel(0, 0, 0, known=False)
        if fused:
            temps = 0
        by_group: Dict[Tuple[str, str], int] = {}
        for p, size in zip(trainable, sizes):
            key = (str(p.device), str(p.dtype))
            by_group[key] = by_group.get(key, 0) + size
        widest = max(by_group.values(), default=0) if foreach else max(sizes, default=0)
        transient = max(transient, temps * widest)
    return OptimizerModel(state, host, transient)


def read_optimizer_state(optimizer: Any) -> Optional[Tuple[int, int]]:
    """(device bytes, bytes outside the caching allocator) of a stepped optimizer's state; None if it has not
    stepped. Outside: `step` scalars on the host, bitsandbytes' paged state (optimizers.outside_allocator)."""
    from gpumem_kernel.analysis.trace.model_copy import optimizer_uses_device_step
    from gpumem_kernel.analysis.trace.modelled_optimizers import outside_allocator

    if not optimizer.state:
        return None
    device_step = optimizer_uses_device_step(optimizer)
    on_device, on_host = [], []
    for state in optimizer.state.values():
        for key, value in state.items():
            if hasattr(value, "untyped_storage"):
                (on_host if outside_allocator(key, value, device_step) else on_device).append(value)
    return unique_bytes(on_device), unique_bytes(on_host)


def parameter_count(model: Any, params: Sequence[Any]) -> int:
    """The parameters as the model has them, over unique storages: a packed 4-bit weight counts the elements of
    its original shape (two per byte of packed storage), not its bytes; parameters_bytes is the storage."""
    from gpumem_kernel.analysis.model.quantize import packed_numel

    logical: Dict[int, int] = {}
    for module in model.modules():
        weight = module._parameters.get("weight")
        count = packed_numel(module, weight) if weight is not None else None
        if count is not None:
            logical[id(weight)] = count
    return sum(logical.get(id(p), p.numel()) for p in unique_tensors(params))


def unique_tensors(params: Sequence[Any]) -> List[Any]:
    keep: List[Any] = []
    seen, result = set(), []
    for p in params:
        key = _storage_key(p, keep)
        if key not in seen:
            seen.add(key)
            result.append(p)
    return result


# --- distributed: each rank's share ------------------------------------------------------------------------


@dataclass
class Sharding:
    world_size: int
    strategy: Optional[str]
    largest_layer: int
    gradients_total: int
    # rank 0's step traced under the strategy's wrappers (analysis.trace.ranks.RankTrace); None: the formula below
    traced: Any = None

    def factors(self) -> Tuple[float, float, float]:
        """Per-rank shares of (parameters, gradients, optimizer state)."""
        n = self.world_size
        return {
            None: (1.0, 1.0, 1.0),
            "ddp": (1.0, 1.0, 1.0),
            "zero1": (1.0, 1.0, 1 / n),
            "zero2": (1.0, 1 / n, 1 / n),
            "zero3": (1 / n, 1 / n, 1 / n),
            "fsdp": (1 / n, 1 / n, 1 / n),
        }[self.strategy]

    def extra(self) -> Tuple[int, str]:
        if self.strategy == "ddp" and self.world_size > 1:
            return self.gradients_total, "DDP gradient buckets (a second copy of the gradients)"
        if self.strategy in ("zero3", "fsdp") and self.world_size > 1:
            return self.largest_layer, "the largest layer's parameters, gathered in full"
        return 0, ""

    def notes(self) -> List[str]:
        """A sharding strategy at world size 1 divides by one: say so, or the report reads as if it sharded."""
        shown = {"zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP"}.get(self.strategy or "")
        if shown is None or self.world_size > 1:
            return []
        return [
            f"{shown} at world size 1 shards nothing: one GPU holds every parameter, gradient and optimizer state, "
            "as without a strategy; give the number of ranks (--world-size N) to plan a rank's share"
        ]

    def saving(self, params: int, grads: int, optimizer: int) -> int:
        """Bytes a rank does not hold (of those live at the peak) minus what the strategy adds: the traced rank's
        against the same steps in one process where traced (at the analysed batch: the states and the wrappers'
        buffers do not grow with the batch), else by the formula."""
        if self.traced is not None:
            return int(self.traced.saving)
        fp, fg, fo = self.factors()
        return int(params * (1 - fp) + grads * (1 - fg) + optimizer * (1 - fo)) - self.extra()[0]
