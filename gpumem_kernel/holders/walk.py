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

from gpumem_kernel.probe.holders import TorchKinds, container_items, kept_grad, storage_identity

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
)
_CHECK_EVERY = 256  # objects between two looks at the clock (perf_counter costs ~60 ns; an object ~1 µs)


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
        self._depth = limits.depth
        # one isinstance for the common case, a value that is none of them
        self._torch = tuple(c for c in (kinds.tensor, kinds.module, kinds.optimizer) if c is not None)

    def reach(self, obj: Any, depth: Optional[int] = None) -> Reach:
        """The storages `obj` reaches, `depth` (default: the limits') levels of containers/objects down."""
        found = Reach()
        self._depth = self.limits.depth if depth is None else min(depth, self.limits.depth)
        self._visit(obj, found, 0, set())
        return found

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
        if isinstance(obj, ATOMS) or not self._tick():
            return
        try:
            if isinstance(obj, self._torch):
                self._torch_value(obj, found, depth, path)
            elif depth < self._depth and id(obj) not in path:
                children = self._children(obj)
                if children is not None:
                    path.add(id(obj))  # a container that contains itself (x.append(x)) is walked once
                    for child in children:
                        if not isinstance(child, ATOMS):  # most elements: spare them a call
                            self._visit(child, found, depth + 1, path)
                    path.discard(id(obj))
        except OutOfTime:
            raise
        except Exception:  # a half-built Module, a proxy whose isinstance or __dict__ raises: not ours to fix
            return

    def _torch_value(self, obj: Any, found: Reach, depth: int, path: Set[int]) -> None:
        kinds = self.kinds
        if isinstance(obj, kinds.tensor):
            self._tensor(obj, found)
        elif kinds.module is not None and isinstance(obj, kinds.module):
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

    def _children(self, obj: Any) -> Optional[Iterable[Any]]:
        """The values inside a container, dataclass or plain object (bounded), or None for a leaf."""
        items = self.limits.items
        elements = container_items(obj, items)
        if elements is not None:
            return elements
        if isinstance(obj, _OPAQUE):
            return None
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):  # vars(obj): never calls properties or __getattr__
            return list(itertools.islice(attributes.values(), items))
        if dataclasses.is_dataclass(obj):  # slots=True: no __dict__
            return [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
        return None
