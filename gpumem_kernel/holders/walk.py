"""The walk from one object to the device storages it keeps alive, bounded in depth, in objects and in time.

What counts as reaching a storage: a tensor (and its `.grad`), an nn.Module's parameters, gradients and
buffers, an optimizer's state tensors and parameters, and the same through containers (list, tuple, set, dict,
deque), dataclasses and other objects' `__dict__`, up to `Limits.depth` levels below the variable. Which
tensors count is the caller's `on_device` predicate: the hook passes "is a CUDA tensor", tests pass "is a CPU
tensor", so both run this same code.

Nothing here keeps a reference once a call returns: a Reach holds storage keys (device, address) and sizes only.
Never imports torch: its classes come from probe.holders.torch_kinds (looked up in sys.modules).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional, Set

from gpumem_kernel.probe.inspection import PROXIES, type_name
from gpumem_kernel.probe.holders import (
    MAPPINGS,
    SEQUENCES,
    TorchKinds,
    container_values,
    kept_grad,
    storage_identity,
)

OnDevice = Callable[[Any], bool]  # a tensor -> whether its memory is the memory being accounted

# Values that can hold nothing: looked at first, so a namespace of numbers and strings costs a type check each.
ATOMS = (int, float, complex, bool, str, bytes, bytearray, type(None), range, slice)
# Objects whose attributes are not the user's data (walking a module's __dict__ would walk a whole library).
_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GeneratorType,
) + PROXIES  # a weak proxy keeps nothing alive
_CHECK_EVERY = 256  # objects between two looks at the clock (perf_counter costs ~60 ns; an object ~1 µs)

# What a value is to the walk, decided once per type: ATOM (holds nothing), the torch classes, the containers
# probe.holders walks, LEAF (_OPAQUE, whose attributes are not data) or OBJECT (its __dict__ or dataclass fields).
ATOM, TENSOR, MODULE, OPTIMIZER, MAPPING, SEQUENCE, LEAF, OBJECT = range(8)
_ATOM_TYPES = frozenset(ATOMS)  # exact types: the common elements of a list, told apart by one set lookup


@dataclass(frozen=True)
class Limits:
    depth: int = 3  # levels of containers/objects below a variable
    items: int = 10_000  # elements looked at per container (a dataset list must not stall the kernel)
    objects: int = 200_000  # objects looked at per walk, all variables together


class OutOfTime(Exception):
    """The walk passed its deadline: the caller reports a skip instead of a partial (misleading) answer."""


@dataclass
class Reach:
    """What one variable reaches: storage key -> bytes, and counts for its description."""

    storages: Dict[Any, int] = field(default_factory=dict)
    tensors: int = 0  # on-device tensors reached (views of one storage each count)
    with_history: int = 0  # of them, results of autograd operations (they keep their graph alive)
    gradients: int = 0  # .grad tensors reached

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


class Walker:
    """One pass over a namespace: the object budget and the deadline are shared by all its variables."""

    def __init__(self, kinds: TorchKinds, on_device: OnDevice, limits: Limits, deadline: Optional[float]) -> None:
        self.kinds = kinds
        self.on_device = on_device
        self.limits = limits
        self.deadline = deadline  # time.perf_counter() value, or None for no limit
        self.visited = 0
        self.truncated = False  # the object budget ran out: some objects were not looked at
        self.failed: Optional[str] = None  # what reading the last reach()'s object itself raised, if anything
        self._depth = limits.depth
        self._by_type: Dict[type, int] = dict.fromkeys(_ATOM_TYPES, ATOM)  # type -> what its values are
        self._scratch = Reach()  # filled by the next reach(); handed out only when it found a storage
        self._path: Set[int] = set()  # ids of the containers being walked, to end cycles
        self._classes = (
            (ATOMS, ATOM),
            (kinds.tensor, TENSOR),
            (kinds.module, MODULE),
            (kinds.optimizer, OPTIMIZER),
            (MAPPINGS, MAPPING),
            (SEQUENCES, SEQUENCE),
            (_OPAQUE, LEAF),
        )

    def reach(self, obj: Any, depth: Optional[int] = None) -> Optional[Reach]:
        """The storages `obj` reaches, `depth` (default: the limits') levels of containers/objects down; None when
        it reaches none (most variables: one scratch Reach serves them all)."""
        found = self._scratch
        if found.storages or found.tensors:  # left over where an error escaped the last walk
            found = self._scratch = Reach()
        self.failed = None
        self._depth = self.limits.depth if depth is None else min(depth, self.limits.depth)
        self._path.clear()  # left over where an error ended a walk inside a container
        self._visit(obj, found, 0, self._path)
        if not found.storages:
            return None
        self._scratch = Reach()
        return found

    def _classify(self, cls: type) -> int:
        """What values of `cls` are to the walk, in the walk's order; decided by the type, never by a value's
        `__class__` (a proxy or a Mock would answer for what it claims to be)."""
        try:
            kind = next((k for classes, k in self._classes if classes and issubclass(cls, classes)), OBJECT)
        except Exception:  # a class whose metaclass breaks issubclass: nothing to walk
            kind = LEAF
        self._by_type[cls] = kind
        return kind

    def _tick(self) -> bool:
        """Count one object; False once the object budget is spent. Raises OutOfTime past the deadline."""
        self.visited += 1
        if self.visited > self.limits.objects:
            self.truncated = True
            return False
        if self.deadline is not None and self.visited % _CHECK_EVERY == 0 and time.perf_counter() > self.deadline:
            raise OutOfTime()
        return True

    def _visit(self, obj: Any, found: Reach, depth: int, path: Set[int]) -> None:
        cls = type(obj)
        kind = self._by_type.get(cls)  # once per object: no call for the types already seen
        if kind is None:
            kind = self._classify(cls)
        if kind == ATOM or not self._tick():
            return
        try:
            if kind <= OPTIMIZER:
                self._torch_value(obj, kind, found, depth, path)
            elif kind != LEAF and depth < self._depth and id(obj) not in path:
                children = self._children(obj, kind)
                if children is not None:
                    path.add(id(obj))  # a container that contains itself (x.append(x)) is walked once
                    for child in children:
                        if type(child) not in _ATOM_TYPES:  # most elements: spare them a call
                            self._visit(child, found, depth + 1, path)
                    path.discard(id(obj))
        except OutOfTime:
            raise
        except Exception as error:  # a half-built Module, an object whose __dict__ raises: not ours to fix
            if depth == 0:
                self.failed = type_name(type(error))

    def _torch_value(self, obj: Any, kind: int, found: Reach, depth: int, path: Set[int]) -> None:
        if kind == TENSOR:
            self._tensor(obj, found)
        elif kind == MODULE:
            self._module(obj, found)
        else:
            self._optimizer(obj, found, depth, path)

    def _tensor(self, tensor: Any, found: Reach, gradient: bool = False) -> None:
        if not self.on_device(tensor):
            return
        key, size, _ = storage_identity(tensor)
        found.storages[key] = size
        found.tensors += 1
        found.gradients += gradient
        if tensor.grad_fn is not None:
            found.with_history += 1
        grad = kept_grad(tensor)
        if grad is not None:
            self._tensor(grad, found, gradient=True)

    def _module(self, module: Any, found: Reach) -> None:
        for parameter in module.parameters():
            self._tick()
            self._tensor(parameter, found)
        for buffer in module.buffers():
            self._tick()
            self._tensor(buffer, found)

    def _optimizer(self, optimizer: Any, found: Reach, depth: int, path: Set[int]) -> None:
        for state in list(optimizer.state.values()):
            self._visit(state, found, min(depth, self._depth - 1), path)  # a dict of tensors per parameter
        for group in optimizer.param_groups:
            for parameter in group.get("params", ()):
                self._tick()
                self._tensor(parameter, found)

    def _children(self, obj: Any, kind: int) -> Optional[Iterable[Any]]:
        """The values inside a container, dataclass or plain object (bounded), or None for a leaf."""
        items = self.limits.items
        if kind == SEQUENCE and type(obj) in (list, tuple) and len(obj) <= items:
            return obj  # iterated as is: neither changes size under an iterator (a dict, set or deque would raise)
        if kind in (MAPPING, SEQUENCE):
            return container_values(obj, kind == MAPPING, items)
        attributes = _own(obj, "__dict__")
        if type(attributes) is dict:  # vars(obj): never calls properties, __getattr__ or __getattribute__
            return list(itertools.islice(attributes.values(), items))
        cls = type(obj)
        if dataclasses.is_dataclass(cls):  # slots=True: no __dict__
            return [_own(obj, f.name) for f in dataclasses.fields(cls)]
        return None


def _own(obj: Any, name: str) -> Any:
    """`obj`'s attribute as Python stores it (its class's `__getattribute__` and `__getattr__` not asked), or None."""
    try:
        return object.__getattribute__(obj, name)
    except AttributeError:
        return None
