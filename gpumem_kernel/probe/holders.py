"""The pieces the one walk over the user's variables (heldby.walk) is built from: the torch classes a value is
told apart by, looked up without importing torch; the containers walked; a storage's identity; the namespace
and IPython's own names in it; the frames the last error keeps. Nothing here walks: the holders, the safe clear,
the OOM checklist and the growth notice all read the namespace through heldby.walk, by one rule.

What a value is, is its `type()`, never its `__class__`, so a proxy or a Mock cannot pass for a tensor.
Never imports torch: its classes are looked up in `sys.modules` through probe.torchstats.
"""

from __future__ import annotations

import collections
import itertools
import re
import sys
from dataclasses import dataclass
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Tuple,
)

from gpumem_kernel.probe.torchstats import loaded_submodule, loaded_torch

# IPython's own names in user_ns: output cache, input history, helpers.
_IPYTHON_NAMES = re.compile(r"^(_+|_\d+|_i+|_i\d+|_ih|_oh|_dh|In|Out|exit|quit|get_ipython)$")


# --- the torch classes, looked up without importing torch ----------------------------------------


@dataclass(frozen=True)
class TorchKinds:
    """The torch classes a value is checked against; optional ones are None until their module is imported."""

    tensor: type
    module: Optional[type]
    optimizer: Optional[type]


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


# --- what the walk (heldby.walk) reads ----------------------------------------------------------------


# The plain containers walked (not arbitrary Mappings: walking h5py/zarr/shelve objects does I/O).
MAPPINGS = (dict, collections.UserDict)
SEQUENCES = (list, tuple, set, frozenset, collections.deque)


def container_values(obj: Any, mapping: bool, limit: int) -> List[Any]:
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


def storage_identity(tensor: Any) -> Tuple[Any, int, str]:
    """(identity of the memory, its size in bytes, device) — views of one storage count once. The key's first
    item is the device, so a walk that keeps only keys still knows where each storage is."""
    device = str(tensor.device)
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        size = int(storage.nbytes())
        key: Any = (device, pointer) if pointer else (device, "id", id(tensor))
    except Exception:  # sparse and other layouts without a storage
        key, size = (device, "id", id(tensor)), int(tensor.element_size() * tensor.nelement())
    return key, size, device


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


def walk_order(item: Tuple[str, Any], kinds: TorchKinds) -> int:
    # Modules claim their parameters first, so an optimizer is charged only for its own state.
    return {"module": 0, "tensor": 1, "optimizer": 3}.get(kind_of(item[1], kinds), 2)


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
