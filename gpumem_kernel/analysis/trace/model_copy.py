"""Copying the user's model and optimizer for a trace: a structural copy whose tensors are stand-ins (fake CPU tensors,
or real copies), storage sharing kept, the user's hooks dropped; the optimizer re-created over the copy with a copy
of its state. The user's objects are never touched.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import collections
import copy
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis.trace import modelled_optimizers as modelled
from gpumem_kernel.analysis.trace.plan import TraceError
from gpumem_kernel.oom.classify import is_oom


# torch's own registries: parameters and buffers are copied as such, submodules walked by model.modules()
_MODULE_REGISTRIES = frozenset(("_parameters", "_buffers", "_modules"))
_CONTAINER_DEPTH = 4  # YOLOv5's `Detect.grid` is a list; deeper nests of tensors are rare, cycles are not


def tensor_attributes(model: Any) -> List[Tuple[Any, str, Any]]:
    """Tensors a module keeps outside its parameters and buffers, directly or inside lists, tuples and dicts (cached
    masks, YOLO's per-level grids): (module, attribute, tensor), each tensor once."""
    import torch

    states = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
    found = []
    holders = (torch.Tensor, list, tuple, dict)
    for module in model.modules():
        for name, value in vars(module).items():
            if name in _MODULE_REGISTRIES or not isinstance(value, holders):  # most are plain settings
                continue
            for t in _reachable_tensors(value, torch.Tensor, _CONTAINER_DEPTH):
                if id(t) not in states:
                    states.add(id(t))
                    found.append((module, name, t))
    return found


def _reachable_tensors(value: Any, tensor_type: type, depth: int) -> Iterator[Any]:
    """The tensors in `value` and in the lists, tuples and dicts (their values) it holds, `depth` levels down."""
    if isinstance(value, tensor_type):
        yield value
    elif depth > 0 and isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _reachable_tensors(item, tensor_type, depth - 1)


class TensorCopier:
    """Maps the user's tensors to stand-ins (fake CPU tensors, or real copies), keeping storage sharing."""

    def __init__(self, fake: bool, device: Optional[str] = None) -> None:
        self.fake = fake
        self.device = device
        self._storages: Dict[int, Tuple[Any, Any]] = {}  # id(user storage) -> (storage, base stand-in)

    def copy(self, t: Any) -> Any:
        import torch

        if self.fake:
            st = t.untyped_storage()
            entry = self._storages.get(id(st))
            if entry is None or entry[1].dtype != t.dtype:
                extent = t.storage_offset() + _extent(t)
                count = max(st.nbytes() // max(t.element_size(), 1), extent)
                if t.storage_offset() == 0 and extent == count:
                    # the tensor spans its storage (nearly every weight): one fake op, not an empty and a view,
                    # the same storage; a later tensor sharing it takes a view of this one (offsets are absolute)
                    out = base = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
                else:
                    base = torch.empty(count, dtype=t.dtype, device="cpu")
                    out = base.as_strided(t.shape, t.stride(), t.storage_offset())
                if entry is None:
                    self._storages[id(st)] = (st, base)
            else:
                out = entry[1].as_strided(t.shape, t.stride(), t.storage_offset())
        elif self.device is not None:
            out = t.detach().to(self.device, copy=True)  # one copy, straight onto the device
        else:
            out = t.detach().clone()
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out

    def valued(self, t: Any) -> Any:
        """A buffer or tensor attribute: under fake mode a small one keeps its values (see _SMALL_TENSOR), since
        forwards read them (YOLOv8's make_anchors fills with each `Detect.stride`); others as copy()."""
        import torch

        small = t.untyped_storage().nbytes() <= _SMALL_TENSOR * t.element_size()
        if not self.fake or not small or isinstance(t, torch.nn.Parameter) or t.device.type == "meta":
            return self.copy(t)
        from torch._guards import detect_fake_mode
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        mode = detect_fake_mode()
        if mode is None:
            return self.copy(t)
        with unset_fake_temporarily():  # a CPU copy of the user's values: the constant must never alias theirs
            real = t.detach().to("cpu", copy=True)
        # a fake tensor that keeps its constant: ops on constants alone compute it, writes from others forget it
        return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)

    def scalar(self, t: Any) -> Any:
        """A one-element state tensor (an optimizer's `step`): under fake mode it must keep its value, since
        optimizers read it with .item()."""
        import torch

        if not self.fake:
            return t.detach().clone()  # stays where it is: non-capturable optimizers keep `step` on the host
        if t.numel() != 1 or t.device.type == "meta":
            return self.copy(t)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # read the user's real value, not a fake of it
            number = t.item()
        value = torch.tensor(number, dtype=t.dtype)  # a fake tensor that remembers its constant
        return value if value.shape == t.shape else value.reshape(t.shape)


# Buffers and attributes of at most this many elements keep their values in a fake copy. Those a forward reads to
# pick shapes or fill values (per-level strides, YOLO's 3 x 3 x 2 anchors, a few class weights) are this small, and
# keeping them costs at most 64 real elements each on the CPU; weights and activations are far larger and stay
# values-free. A storage is judged whole, so a small view into a large tensor stays a view.
_SMALL_TENSOR = 64


def _extent(t: Any) -> int:
    """Elements spanned by a strided tensor (1 + sum((size-1) * stride))."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


_TORCH_HOOK_MODULES = ("torch.",)


def _strip_user_hooks(model: Any) -> int:
    """Drop forward/backward hooks defined outside torch on the copy: they may write into the user's objects.

    torch's own hooks (weight_norm, spectral_norm, pruning, ...) compute weights, so they stay.
    """
    dropped = 0
    for module in model.modules():
        for attr in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_pre_hooks_with_kwargs",
            "_forward_hooks_always_called",
            "_state_dict_hooks",
            "_load_state_dict_pre_hooks",
        ):
            hooks = getattr(module, attr, None)
            if not isinstance(hooks, dict):
                continue
            for key in list(hooks):
                hook = hooks[key]
                owner = getattr(hook, "__module__", None) or type(hook).__module__
                if hook is not True and hook is not False and not str(owner).startswith(_TORCH_HOOK_MODULES):
                    del hooks[key]
                    dropped += 1
    return dropped


def copy_model(model: Any, copier: TensorCopier) -> Tuple[Any, Dict[int, Any], int]:
    """A structural copy of `model` whose tensors are the copier's stand-ins; never touches the user's tensors.

    Returns (copy, {id(user tensor): stand-in}, dropped hooks).
    """
    import torch

    for p in model.parameters():
        if isinstance(p, torch.nn.parameter.UninitializedParameter):
            raise TraceError("the model has uninitialised lazy parameters: run one forward pass first")
    memo: Dict[int, Any] = {}
    mapping: Dict[int, Any] = {}
    tensors = [t for t in model.parameters()] + [t for t in model.buffers()]
    tensors += [value for _, _, value in tensor_attributes(model)]
    for t in tensors:
        if id(t) not in memo:
            stand_in = copier.copy(t) if isinstance(t, torch.nn.Parameter) else copier.valued(t)
            memo[id(t)] = stand_in
            mapping[id(t)] = stand_in
    _empty_containers(model, memo)
    try:
        clone = copy.deepcopy(model, memo)
    except Exception as exc:  # modules holding locks, files, generators ...
        raise TraceError(f"cannot copy the model's structure ({type(exc).__name__}: {exc})") from None
    for p in clone.parameters():
        p.grad = None  # steady state: zero_grad(set_to_none=True) ran before the step
    dropped = _strip_user_hooks(clone)
    # no clone.train(): deepcopy keeps every module's mode, and a submodule the user put in eval() (dropout off,
    # a frozen BatchNorm) must run in the trace as it will in their loop
    return clone, mapping, dropped


# Containers whose empty copy is exactly what deepcopy would make of them, made directly: each module holds a dozen
# (its hook OrderedDicts, its non-persistent-buffer set, an empty `_parameters`), and deepcopy reconstructs an
# OrderedDict through __reduce_ex__, the bulk of copying a peft model's 1,700 modules.
_EMPTY_COPIED = (collections.OrderedDict, dict, set, list)


def _empty_containers(model: Any, memo: Dict[int, Any]) -> None:
    """memo entries for the empty containers the modules hold as attributes: a new empty one each (of the exact
    type), shared where the original is, as deepcopy keeps sharing."""
    for module in model.modules():
        for value in vars(module).values():
            if type(value) in _EMPTY_COPIED and not value and id(value) not in memo:
                memo[id(value)] = type(value)()


def copy_optimizer(optimizer: Any, mapping: Dict[int, Any], copier: TensorCopier, cuda_defaults: bool = True) -> Any:
    """A new optimizer of the user's class over the copied parameters, with the same hyper-parameters and a
    copy of its state. Never a deepcopy: an LR scheduler patches `optimizer.step` with a closure that would
    step the user's optimizer."""
    groups = []
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            if id(p) not in mapping:
                raise TraceError("the optimizer holds parameters that are not the model's")
            params.append(mapping[id(p)])
        settings = {k: v for k, v in group.items() if k != "params"}
        if cuda_defaults and settings.get("foreach") is None and not settings.get("fused") and "foreach" in group:
            settings["foreach"] = True  # what torch picks on CUDA; on CPU it would pick the for-loop
        groups.append({"params": params, **settings})
    cls = type(optimizer)
    try:
        if copier.device is None and modelled.is_bitsandbytes(optimizer):  # CUDA kernels: modelled in a CPU trace
            new = modelled.model_bitsandbytes(optimizer, groups)
        elif isinstance(optimizer, modelled.stand_in_class()):  # a planned stand-in (a release's settings, given)
            new = cls(groups, optimizer.settings, optimizer.modelled, optimizer.defaults)
        else:
            new = _recreate(cls, groups, optimizer.defaults)
        for p, state in optimizer.state.items():
            if id(p) in mapping:
                new.state[mapping[id(p)]] = copied = _copy_state(state, copier)
                modelled.carry_paged_marks(state, copied)
    except Exception as exc:  # a constructor that reads tensor values (bitsandbytes' Adam8bit), or any other
        if reported_as_is(exc):
            raise
        raise optimizer_error(cls, "re-create", exc) from None
    if copier.fake and modelled.reads_values_for_scale_only(new):
        modelled.answer_value_reads(new)
    return new


def _recreate(cls: type, groups: List[Dict[str, Any]], defaults: Dict[str, Any]) -> Any:
    try:
        return cls(groups)
    except TypeError:  # a constructor that takes its hyper-parameters as arguments, not from the groups
        return cls(groups, **dict(defaults))


def _copy_state(state: Dict[str, Any], copier: TensorCopier) -> Dict[str, Any]:
    copied = {}
    for key, value in state.items():
        if is_tensor(value):
            keep_value = value.numel() == 1 and (key == "step" or copier.fake)
            copied[key] = copier.scalar(value) if keep_value else copier.copy(value)
        else:
            copied[key] = copy.deepcopy(value)
    return copied


def reported_as_is(exc: BaseException) -> bool:
    """A trace's own one-line error, or an out-of-memory (what a measured copy on a GPU reports)."""
    return isinstance(exc, TraceError) or is_oom(exc)


def optimizer_error(cls: type, action: str, exc: BaseException) -> TraceError:
    """One line naming the optimizer's class, for any failure to re-create or step its copy."""
    name = type(exc).__name__
    if "DataDependent" in name or "data-dependent" in str(exc):
        reason = "it reads tensor values (e.g. .item()), which the traced engine cannot follow"
    else:
        lines = str(exc).strip().splitlines()
        reason = f"{name}: {lines[0][:200]}" if lines else name
    return TraceError(f"cannot {action} optimizer {cls.__name__} on the traced copy: {reason}")


def is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def make_optimizer(kind: str, params: Sequence[Any], lr: float = 1e-3) -> Any:
    """The optimizer a plan names, as CUDA would run it by default (foreach implementations)."""
    import torch

    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, foreach=True)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=True)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, foreach=True)
    if kind == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=True)
    if kind in _BNB_KINDS:  # planned without bitsandbytes: its state, modelled (analysis/trace/modelled_optimizers.py)
        name, settings, weight_decay = _BNB_KINDS[kind]
        return modelled.planned_bitsandbytes(params, settings, name, lr, weight_decay)
    if kind == "adafactor":
        return modelled.make_adafactor(params, lr)
    raise ValueError(f"unknown optimizer {kind!r}; use {', '.join(OPTIMIZER_KINDS)} or an optimizer object")


# named bitsandbytes kinds: (its class, the state it allocates, its default weight decay)
_BNB_KINDS = {
    "adam8bit": ("Adam8bit", modelled.BnbSettings(states=2), 0.0),
    "adamw8bit": ("AdamW8bit", modelled.BnbSettings(states=2), 1e-2),
    "paged-adamw8bit": ("PagedAdamW8bit", modelled.BnbSettings(states=2, is_paged=True), 1e-2),
    "paged-adamw": ("PagedAdamW", modelled.BnbSettings(states=2, optim_bits=32, is_paged=True), 1e-2),
}
OPTIMIZER_KINDS = ("adamw", "adam", "sgd", "sgd-momentum", *_BNB_KINDS, "adafactor")


def optimizer_uses_device_step(optimizer: Any) -> bool:
    """Fused and capturable optimizers keep `step` on the device; the others keep a CPU scalar."""
    return any(group.get("fused") or group.get("capturable") for group in optimizer.param_groups)


def register_optimizer_state(tracker: Any, optimizer: Any) -> None:
    """Each state tensor of `optimizer` as optimizer state; outside the device replay where CUDA keeps it outside
    the caching allocator (`step` scalars on the host, bitsandbytes' paged state in unified memory)."""
    device_step = optimizer_uses_device_step(optimizer)
    for state in optimizer.state.values():
        for key, value in state.items():
            if is_tensor(value):
                tracker.register(value, "optimizer_state", host=modelled.outside_allocator(key, value, device_step))
