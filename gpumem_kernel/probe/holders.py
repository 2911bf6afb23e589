"""Who holds GPU memory in the user's namespace: the user's variables and the tensors each keeps alive, the
last error's traceback frames, IPython's own names. Read by the safe clear (what it drops, what still holds
memory) and by the OOM checklist (what to free), never changing anything.

`user_variables` is the one way into the namespace for every feature that walks it: values that cannot be
inspected (probe.inspection) are skipped there and recorded for the feature's one line. What a value is, is its
`type()`, never its `__class__`, so a proxy or a Mock cannot pass for a tensor.

Never imports torch: its classes are looked up in `sys.modules` through probe.torchstats.
"""

from __future__ import annotations

import collections
import itertools
import re
import sys
import types
from dataclasses import dataclass
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from gpumem_kernel.probe.inspection import PROXIES, Skipped, type_name
from gpumem_kernel.probe.torchstats import loaded_submodule, loaded_torch

# Items looked at per list/dict: a million-element dataset list must not stall the kernel.
_CONTAINER_LIMIT = 10_000
# IPython's own names in user_ns: output cache, input history, helpers.
_IPYTHON_NAMES = re.compile(r"^(_+|_\d+|_i+|_i\d+|_ih|_oh|_dh|In|Out|exit|quit|get_ipython)$")


# --- the torch classes, looked up without importing torch ----------------------------------------


@dataclass(frozen=True)
class TorchKinds:
    """The torch classes a value is checked against; optional ones are None until their module is imported."""

    tensor: type
    module: Optional[type]
    optimizer: Optional[type]

    def holds_torch(self, obj: Any) -> bool:
        """A tensor, Module or Optimizer, itself or one level deep in a list/tuple/set/dict."""
        if self._is_torch(obj):
            return True
        return any(self._is_torch(item) for item in container_items(obj) or ())

    def _is_torch(self, obj: Any) -> bool:
        return issubclass(type(obj), tuple(c for c in (self.tensor, self.module, self.optimizer) if c is not None))


def torch_kinds() -> Optional[TorchKinds]:
    """The classes to look for, or None when torch is not imported (then nothing can hold a tensor)."""
    torch = loaded_torch()
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    if not isinstance(tensor, type):
        return None
    module = getattr(loaded_submodule("nn"), "Module", None)
    optimizer = getattr(loaded_submodule("optim"), "Optimizer", None)
    return TorchKinds(
        tensor, module if isinstance(module, type) else None, optimizer if isinstance(optimizer, type) else None
    )


# --- walking objects to their tensors ----------------------------------------------------------------


# The plain containers walked (not arbitrary Mappings: walking h5py/zarr/shelve objects does I/O).
MAPPINGS = (dict, collections.UserDict)
SEQUENCES = (list, tuple, set, frozenset, collections.deque)


def container_items(obj: Any, limit: int = _CONTAINER_LIMIT) -> Optional[List[Any]]:
    """Elements of a plain container (MAPPINGS' values, SEQUENCES' elements), at most `limit`; None when `obj`
    is not one. Read by this walk; holders.walk, which knows the type already, reads container_values."""
    cls = type(obj)
    if issubclass(cls, MAPPINGS):
        return container_values(obj, True, limit)
    if issubclass(cls, SEQUENCES):
        return container_values(obj, False, limit)
    return None


def container_values(obj: Any, mapping: bool, limit: int = _CONTAINER_LIMIT) -> List[Any]:
    """At most `limit` values of a container known to be a mapping (its values) or a sequence (its elements)."""
    try:
        values: Iterable[Any] = obj.values() if mapping else obj
        return list(itertools.islice(values, limit))
    except Exception:  # a container mutated by another thread, or a broken subclass
        return []


def kept_grad(tensor: Any) -> Any:
    """The `.grad` a tensor keeps alive, or None. Read only where torch keeps one (a leaf, or retains_grad):
    reading .grad of a non-leaf tensor makes torch print a UserWarning in the user's cell."""
    if getattr(tensor, "is_leaf", True) or getattr(tensor, "retains_grad", False):
        return getattr(tensor, "grad", None)
    return None


def _tensors(obj: Any, kinds: TorchKinds, depth: int = 1) -> Iterator[Any]:
    """Every tensor `obj` keeps alive: itself, a Module's parameters/gradients/buffers, an Optimizer's
    state and parameters, or those of the elements of a container `depth` levels deep."""
    cls = type(obj)
    try:
        if issubclass(cls, kinds.tensor):
            yield obj
            grad = kept_grad(obj)
            if grad is not None:
                yield grad
            return
        if kinds.module is not None and issubclass(cls, kinds.module):
            for parameter in obj.parameters():
                yield from _tensors(parameter, kinds, 0)
            yield from obj.buffers()
            return
        if kinds.optimizer is not None and issubclass(cls, kinds.optimizer):
            for state in list(obj.state.values()):
                for value in state.values() if issubclass(type(state), dict) else ():
                    if issubclass(type(value), kinds.tensor):
                        yield value
            for group in obj.param_groups:
                for parameter in group.get("params", ()):
                    yield from _tensors(parameter, kinds, 0)
            return
    except Exception:  # a half-built Module, a user subclass with odd attributes
        return
    if depth > 0:
        for item in container_items(obj) or ():
            yield from _tensors(item, kinds, depth - 1)


def storage_identity(tensor: Any) -> Tuple[Any, int, str]:
    """(identity of the memory, its size in bytes, device) — views of one storage count once."""
    device = str(tensor.device)
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        size = int(storage.nbytes())
        key: Any = (device, pointer) if pointer else ("id", id(tensor))
    except Exception:  # sparse and other layouts without a storage
        key, size = ("id", id(tensor)), int(tensor.element_size() * tensor.nelement())
    return key, size, device


@dataclass
class Holder:
    """A name that keeps tensors alive, and how much memory only it keeps (bytes per device)."""

    name: str
    kind: str  # tensor | module | optimizer | list | tuple | dict | set | traceback | other
    type_name: str
    bytes: int
    by_device: Dict[str, int]
    tensors: int
    shape: Optional[List[int]] = None
    dtype: Optional[str] = None

    def on_cuda(self) -> int:
        return sum(n for device, n in self.by_device.items() if device.startswith("cuda"))


def kind_of(obj: Any, kinds: TorchKinds) -> str:
    """What `obj` is by its type (its `__class__` may lie)."""
    cls = type(obj)
    if issubclass(cls, kinds.tensor):
        return "tensor"
    if kinds.module is not None and issubclass(cls, kinds.module):
        return "module"
    if kinds.optimizer is not None and issubclass(cls, kinds.optimizer):
        return "optimizer"
    for container, name in (
        (dict, "dict"),
        (collections.UserDict, "dict"),
        (list, "list"),
        (tuple, "tuple"),
        (set, "set"),
        (frozenset, "set"),
        (collections.deque, "list"),
    ):
        if issubclass(cls, container):
            return name
    return "other"


def measure(name: str, obj: Any, kinds: TorchKinds, seen: Set[Any], keep_empty: bool = False) -> Optional[Holder]:
    """The memory `obj` keeps alive that no earlier-measured object (`seen`) already accounts for."""
    by_device: Dict[str, int] = {}
    count = 0
    for tensor in _tensors(obj, kinds):
        try:
            key, size, device = storage_identity(tensor)
        except Exception:
            continue
        if device == "meta" or key in seen:
            continue
        seen.add(key)
        count += 1
        by_device[device] = by_device.get(device, 0) + size
    if count == 0 and not keep_empty:
        return None
    kind = kind_of(obj, kinds)
    shape = dtype = None
    if kind == "tensor":
        try:
            shape, dtype = [int(n) for n in obj.shape], str(obj.dtype).replace("torch.", "")
        except Exception:
            pass
    return Holder(name, kind, type_name(type(obj)), sum(by_device.values()), by_device, count, shape, dtype)


def has_cuda_tensor(obj: Any, kinds: TorchKinds) -> bool:
    for tensor in _tensors(obj, kinds):
        try:
            if str(tensor.device).startswith("cuda"):
                return True
        except Exception:
            continue
    return False


# --- the namespace and IPython's hidden references ---------------------------------------------------


def resolve_shell(shell: Any = None) -> Any:
    """The given shell, else the running IPython shell, else None (plain Python)."""
    if shell is not None:
        return shell
    ipython = sys.modules.get("IPython")
    try:
        return ipython.get_ipython() if ipython is not None else None
    except Exception:
        return None


def namespace_of(shell: Any) -> Tuple[MutableMapping[str, Any], Mapping[str, Any]]:
    """(user namespace, IPython's hidden names) — __main__ outside IPython."""
    if shell is not None and isinstance(getattr(shell, "user_ns", None), dict):
        return shell.user_ns, getattr(shell, "user_ns_hidden", {}) or {}
    return sys.modules["__main__"].__dict__, {}


def is_ipython_name(name: str, value: Any, hidden: Mapping[str, Any]) -> bool:
    return bool(_IPYTHON_NAMES.match(name)) or name.startswith("__") or (name in hidden and hidden[name] is value)


# Not data: modules, classes, functions; and weak proxies, which keep nothing alive (what one points to is walked
# under its own name).
_NOT_VARIABLES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType) + PROXIES


def user_variables(
    shell: Any = None, skip: Tuple[type, ...] = (), skipped: Optional[Skipped] = None
) -> List[Tuple[str, Any]]:
    """The user's own variables: IPython's names, modules, classes and functions left out, and values of the
    `skip` types (a type check before the names' checks: a namespace of 10,000 numbers costs 10,000 of them).
    A value that cannot be inspected is left out too, and its name recorded in `skipped`."""
    namespace, hidden = namespace_of(resolve_shell(shell))
    record = Skipped() if skipped is None else skipped
    found = []
    for name, value in dict(namespace).items():  # a copy: reading a value's __class__ runs the user's code
        cls = type(value)
        if issubclass(cls, skip) or not issubclass(type(name), str) or is_ipython_name(name, value, hidden):
            continue
        if record.accepts(name, value) and not issubclass(cls, _NOT_VARIABLES):
            found.append((name, value))
    return found


def walk_order(item: Tuple[str, Any], kinds: TorchKinds) -> int:
    # Modules claim their parameters first, so an optimizer is charged only for its own state.
    return {"module": 0, "tensor": 1, "optimizer": 3}.get(kind_of(item[1], kinds), 2)


def holders(
    shell: Any = None,
    exclude: Sequence[str] = (),
    seen: Optional[Set[Any]] = None,
    skipped: Optional[Skipped] = None,
) -> List[Holder]:
    """Every user variable that keeps tensors alive, largest CUDA share first, then largest overall; a variable
    that cannot be inspected is recorded in `skipped` instead."""
    kinds = torch_kinds()
    if kinds is None:
        return []
    seen = set() if seen is None else seen
    record = Skipped() if skipped is None else skipped
    found = []
    for name, value in sorted(user_variables(shell, skipped=record), key=lambda item: walk_order(item, kinds)):
        if name in exclude:
            continue
        with record.guard(name):
            holder = measure(name, value, kinds, seen)
            if holder is not None:
                found.append(holder)
    return sorted(found, key=lambda h: (-h.on_cuda(), -h.bytes, h.name))


def exception_tracebacks(value: Any, limit: int = 50) -> List[Any]:
    """Tracebacks of an exception and of its causes/contexts (chained exceptions pin frames too)."""
    found, pending, seen = [], [value], set()
    while pending and len(seen) < limit:
        exc = pending.pop()
        if not isinstance(exc, BaseException) or id(exc) in seen:
            continue
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            found.append(exc.__traceback__)
        pending.extend((exc.__cause__, exc.__context__))
    return found


def traceback_frames(tracebacks: Iterable[Any]) -> List[Any]:
    """The distinct frames of some tracebacks, in order."""
    frames: Dict[int, Any] = {}
    for tb in tracebacks:
        while tb is not None:
            frames.setdefault(id(tb.tb_frame), tb.tb_frame)
            tb = tb.tb_next
    return list(frames.values())


def frame_holder(frames: Sequence[Any], kinds: TorchKinds, seen: Set[Any], name: str = "traceback") -> Holder:
    """The tensors held only by the local variables of some frames (module-level frames are the user
    namespace itself and are skipped)."""
    total = Holder(name, "traceback", "traceback", 0, {}, 0)
    for frame in frames:
        try:
            if frame.f_code.co_name == "<module>" or frame.f_locals is frame.f_globals:
                continue
            local_values = list(frame.f_locals.values())
        except Exception:
            continue
        for value in local_values:
            part = measure(name, value, kinds, seen)
            if part is not None:
                total.tensors += part.tensors
                for device, size in part.by_device.items():
                    total.by_device[device] = total.by_device.get(device, 0) + size
        del local_values
    total.bytes = sum(total.by_device.values())
    return total
