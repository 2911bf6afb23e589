"""The one walk from the user's variables to the device storages they keep alive, bounded in depth, in objects
and in time. The holders (panel and `%gpumem holders`), the safe clear, the OOM checklist and the growth notice
all read the namespace through it, so a variable holds the same memory in each of them.

The rule: a tensor (and its `.grad`, and what its autograd graph keeps alive), an nn.Module's parameters, gradients
and buffers, an optimizer's state tensors and parameters, and the same through containers (list, tuple, set, dict,
deque), dataclasses and other objects' `__dict__`, up to `Limits.depth` levels below the variable (a `trainer`
holding `.model` and `.optimizer` holds their memory). Which tensors count is the caller's `on_device` predicate:
the hook passes "is a CUDA tensor", the clear "any tensor with memory", tests "is a CPU tensor", so all run this
same code.

A tensor with a `grad_fn` keeps its autograd graph alive, and the graph keeps the tensors its nodes saved for
backward (a kept `loss` keeps the step's activations): the walk follows `grad_fn.next_functions` and reads each
node's saved tensors, within `Limits.graph_nodes` nodes per walk, and counts those storages apart, in
`Reach.graph` (what the variable keeps alive only through graphs, not what it holds itself).

The user's objects are never trusted (probe.inspection): `user_variables` leaves out a value whose `__class__`
raises, what a value is comes from `type()`, and `each_variable` runs each variable's walk and reading under
`Skipped.guard`, so one odd object costs its own entry and is named once, never the feature.

Nothing here keeps a reference once a call returns: a Reach holds storage keys (device, address) and sizes only.
Never imports torch: its classes come from probe.holders.torch_kinds (looked up in sys.modules).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

from gpumem_kernel.probe.holders import (
    MAPPINGS,
    SEQUENCES,
    TorchKinds,
    container_values,
    is_ipython_name,
    kept_grad,
    kind_of,
    namespace_of,
    resolve_shell,
    storage_identity,
    torch_kinds,
    walk_order,
)
from gpumem_kernel.probe.inspection import PROXIES, Skipped, type_name

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
# probe.holders names, LEAF (_OPAQUE, whose attributes are not data) or OBJECT (its __dict__ or dataclass fields).
ATOM, TENSOR, MODULE, OPTIMIZER, MAPPING, SEQUENCE, LEAF, OBJECT = range(8)
_ATOM_TYPES = frozenset(ATOMS)  # exact types: the common elements of a list, told apart by one set lookup


@dataclass(frozen=True)
class Limits:
    depth: int = 3  # levels of containers/objects below a variable
    items: int = 10_000  # elements looked at per container (a dataset list must not stall the kernel)
    objects: int = 200_000  # objects looked at per walk, all variables together
    graph_nodes: int = 20_000  # autograd graph nodes looked at per walk, all variables together


class OutOfTime(Exception):
    """The walk passed its deadline: the caller reports a skip instead of a partial (misleading) answer."""


@dataclass
class Reach:
    """What one variable reaches: storage key -> bytes, and counts for its description."""

    storages: Dict[Any, int] = field(default_factory=dict)
    graph: Dict[Any, int] = field(default_factory=dict)  # storages its autograd graphs saved for backward
    tensors: int = 0  # on-device tensors reached (views of one storage each count)
    with_history: int = 0  # of them, results of autograd operations (they keep their graph alive)
    gradients: int = 0  # .grad tensors reached

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())

    def through_graphs(self) -> Dict[Any, int]:
        """The storages only its autograd graphs keep alive: saved for backward, not reached otherwise."""
        return {key: size for key, size in self.graph.items() if key not in self.storages}

    def add(self, part: "Reach") -> None:
        """Take in what another walk reached (a storage both reach counts once)."""
        self.storages.update(part.storages)
        self.graph.update(part.graph)
        self.tensors += part.tensors
        self.with_history += part.with_history
        self.gradients += part.gradients


class Walker:
    """One pass over a namespace: the object budget and the deadline are shared by all its variables."""

    def __init__(self, kinds: TorchKinds, on_device: OnDevice, limits: Limits, deadline: Optional[float]) -> None:
        self.kinds = kinds
        self.on_device = on_device
        self.limits = limits
        self.deadline = deadline  # time.perf_counter() value, or None for no limit
        self.visited = 0
        self.truncated = False  # the object budget ran out: some objects were not looked at
        self.graph_nodes = 0  # autograd graph nodes looked at, all variables together
        self.graph_truncated = False  # the node budget ran out: some graphs were followed in part
        self.failed: Optional[str] = None  # what reading the last reach()'s object itself raised, if anything
        self._depth = limits.depth
        self._by_type: Dict[type, int] = dict.fromkeys(_ATOM_TYPES, ATOM)  # type -> what its values are
        self._scratch = Reach()  # filled by the next reach(); handed out only when it found a storage
        self._path: Set[int] = set()  # ids of the containers being walked, to end cycles
        self._nodes: Set[int] = set()  # ids of the graph nodes this reach() followed (a shared node once)
        self._saved_names: Dict[type, Tuple[str, ...]] = {}  # a node class -> its saved-tensor attributes
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
        if found.storages or found.tensors or found.graph:  # left over where an error escaped the last walk
            found = self._scratch = Reach()
        self.failed = None
        self._nodes.clear()
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
        grad_fn = tensor.grad_fn
        if grad_fn is not None:
            found.with_history += 1
            self._graph(grad_fn, found)
        grad = kept_grad(tensor)
        if grad is not None:
            self._tensor(grad, found, gradient=True)

    def _graph(self, root: Any, found: Reach) -> None:
        """The tensors the autograd graph from `root` saved for backward, into `found.graph`. Every read is
        guarded: a graph that backward already freed raises on its saved tensors (it then keeps none)."""
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in self._nodes:
                continue
            if self.graph_nodes >= self.limits.graph_nodes:
                self.graph_truncated = True
                return
            self._nodes.add(id(node))
            self.graph_nodes += 1
            if self.graph_nodes % _CHECK_EVERY == 0 and self.deadline is not None:
                if time.perf_counter() > self.deadline:  # the per-cell walk's budget counts graph nodes too
                    raise OutOfTime()
            for name in self._saved_attributes(type(node)):
                try:
                    saved = getattr(node, name)
                except Exception:  # freed by backward, or not saved in this call
                    continue
                self._saved(saved, found)
            try:
                stack.extend(parent for parent, _ in node.next_functions if parent is not None)
            except Exception:  # a node without inputs to follow
                continue

    def _saved_attributes(self, cls: type) -> Tuple[str, ...]:
        """A graph node class's saved tensors: `_saved_*` of torch's nodes (not their sizes and strides),
        `saved_tensors` of a custom autograd.Function, the leaf `variable` of AccumulateGrad."""
        names = self._saved_names.get(cls)
        if names is None:
            try:
                attributes = dir(cls)
            except Exception:  # a class whose dir() raises has nothing to read
                attributes = []
            names = self._saved_names[cls] = tuple(
                name
                for name in attributes
                if (name.startswith("_saved_") and "_sym_" not in name) or name in ("saved_tensors", "variable")
            )
        return names

    def _saved(self, saved: Any, found: Reach) -> None:
        """One saved value: a tensor, or a tuple or list of them (torch.cat's inputs)."""
        tensor = self.kinds.tensor
        for value in saved if type(saved) in (tuple, list) else (saved,):
            if issubclass(type(value), tensor) and self.on_device(value):
                key, size, _ = storage_identity(value)
                found.graph[key] = size

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


# --- the user's variables: the one loop every feature reads them by ------------------------------------------

T = TypeVar("T")
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


def read_variables(
    shell: Any,
    skipped: Skipped,
    read: Callable[[str, Any], None],
    skip: Tuple[type, ...] = (),
    passes: Tuple[type, ...] = (),
) -> None:
    """`read(name, value)` for every user variable that can be inspected, each under its own guard: what one
    raises (but `passes`, KeyboardInterrupt and SystemExit) records its name in `skipped` and ends only its part."""
    for name, value in user_variables(shell, skip=skip, skipped=skipped):
        with skipped.guard(name, passes=passes):
            read(name, value)


@dataclass
class Reached(Generic[T]):
    """A variable that reaches storages, and what its caller read from it while the walk had it (no value kept)."""

    name: str
    order: int  # probe.holders.walk_order: Modules first, optimizers last
    reach: Reach
    read: T


def _reach(
    name: str, value: Any, walker: Walker, skipped: Skipped, read: Callable[[Any, Reach], T]
) -> Optional[Reached[T]]:
    """The walk from one variable, and `read(value, reach)`; None when it reaches nothing or its own reading
    raised (then `name` is recorded in `skipped`). Run under the caller's guard."""
    reach = walker.reach(value)
    if walker.failed is not None:
        skipped.add(name, walker.failed)
        return None
    if reach is None:
        return None
    return Reached(name, walk_order((name, value), walker.kinds), reach, read(value, reach))


def each_variable(
    shell: Any,
    walker: Walker,
    skipped: Skipped,
    read: Callable[[Any, Reach], T],
    exclude: Sequence[str] = (),
) -> List[Reached[T]]:
    """Every user variable that reaches a storage, in charging order (walked in namespace order: sorting 10,000
    names by kind would cost more than skipping the numbers and strings among them). One that cannot be
    inspected, or whose walk or `read` raises, is recorded in `skipped` and never returned. Past the walker's
    deadline, OutOfTime ends the whole walk."""
    found: List[Reached[T]] = []

    def one(name: str, value: Any) -> None:
        if name not in exclude:
            reached = _reach(name, value, walker, skipped, read)
            if reached is not None:
                found.append(reached)

    read_variables(shell, skipped, one, skip=ATOMS, passes=(OutOfTime,))
    return sorted(found, key=lambda reached: reached.order)


def named_variable(
    name: str, value: Any, walker: Walker, skipped: Skipped, read: Callable[[Any, Reach], T]
) -> Optional[Reached[T]]:
    """The walk from a variable the user named, by the same rules as `each_variable`; None when it reaches
    nothing, or cannot be inspected (recorded in `skipped`)."""
    if not skipped.accepts(name, value):
        return None
    with skipped.guard(name, passes=(OutOfTime,)):
        return _reach(name, value, walker, skipped, read)
    return None  # the guard recorded what reading it raised


def frames_reach(walker: Walker, frames: Iterable[Any]) -> Tuple[Reach, List[str]]:
    """What the locals of some frames reach, and the frames' function names. Module-level frames are the user
    namespace itself and are skipped. Two levels: a local and what it holds. Deeper, IPython's own frames reach
    the shell and through it the whole namespace, which is the variables' memory, not the frames'."""
    total, functions = Reach(), []
    for frame in frames:
        try:
            if frame.f_code.co_name == "<module>" or frame.f_locals is frame.f_globals:
                continue
            local_values = list(frame.f_locals.values())
        except Exception:  # a frame whose locals cannot be read holds nothing we can name
            continue
        reach = walker.reach(local_values, depth=2)
        del local_values
        if reach is not None:
            functions.append(frame.f_code.co_name)
            total.add(reach)
    return total, functions


# --- what a variable frees: each storage charged once, on every device ---------------------------------------


def any_memory(tensor: Any) -> bool:
    """The clear's and the OOM checklist's predicate: every tensor with memory, on any device (a meta tensor has
    none)."""
    return bool(tensor.device.type != "meta")


def memory_walker(on_device: OnDevice = any_memory, limits: Optional[Limits] = None) -> Optional[Walker]:
    """A walker over the tensors `on_device` accepts (default: every device's), bounded in objects but not in time
    (a command the user runs, not the per-cell hook); None when torch is not imported (nothing holds a tensor)."""
    kinds = torch_kinds()
    return None if kinds is None else Walker(kinds, on_device, limits or Limits(), None)


@dataclass(frozen=True)
class Looks:
    """What a holder is, read by type while the walk has it."""

    kind: str  # tensor | module | optimizer | list | tuple | dict | set | traceback | other
    type_name: str
    shape: Optional[List[int]] = None
    dtype: Optional[str] = None


def looks(value: Any, kinds: TorchKinds) -> Looks:
    kind = kind_of(value, kinds)
    shape = dtype = None
    if kind == "tensor":
        try:
            shape, dtype = [int(n) for n in value.shape], str(value.dtype).replace("torch.", "")
        except Exception:  # a tensor subclass whose shape raises: its memory still counts
            pass
    return Looks(kind, type_name(type(value)), shape, dtype)


@dataclass
class Holder:
    """A name that keeps tensors alive, and how much memory only it keeps (bytes per device)."""

    name: str
    kind: str  # tensor | module | optimizer | list | tuple | dict | set | traceback | other
    type_name: str
    bytes: int
    by_device: Dict[str, int]
    tensors: int  # storages only it keeps (views of one storage count once)
    shape: Optional[List[int]] = None
    dtype: Optional[str] = None
    # what it keeps alive only through autograd graphs (saved for backward), by device: apart from `bytes`
    graph_by_device: Dict[str, int] = field(default_factory=dict)

    def on_cuda(self) -> int:
        return sum(n for device, n in self.by_device.items() if device.startswith("cuda"))

    @property
    def graph_bytes(self) -> int:
        return sum(self.graph_by_device.values())


def _graph_key(key: Any) -> Tuple[str, Any]:
    """The key a storage charged through a graph is kept under in `seen` (apart from the storages held)."""
    return ("graph", key)


def charge(
    name: str,
    reach: Reach,
    what: Looks,
    seen: Set[Any],
    keep_empty: bool = False,
    held: Optional[Set[Any]] = None,
) -> Optional[Holder]:
    """The storages `reach` holds that no earlier-charged holder (`seen`) already accounts for; None when there
    are none, unless `keep_empty`. Apart: what it keeps alive only through autograd graphs, less what an
    earlier holder's graph, or any holder itself (`seen`, `held`: every holder's storages), accounts for."""
    by_device: Dict[str, int] = {}
    count = 0
    for key, size in reach.storages.items():
        if key in seen:
            continue
        seen.add(key)
        count += 1
        by_device[key[0]] = by_device.get(key[0], 0) + size  # probe.holders.storage_identity: device first
    graph: Dict[str, int] = {}
    for key, size in reach.through_graphs().items():
        if key in seen or _graph_key(key) in seen or (held is not None and key in held):
            continue
        seen.add(_graph_key(key))
        graph[key[0]] = graph.get(key[0], 0) + size
    if count == 0 and not graph and not keep_empty:
        return None
    return Holder(
        name, what.kind, what.type_name, sum(by_device.values()), by_device, count, what.shape, what.dtype, graph
    )


def empty_holder(name: str, value: Any) -> Holder:
    """A holder that frees nothing: its name and type only (read by type: it may be one that cannot be inspected)."""
    return Holder(name, "other", type_name(type(value)), 0, {}, 0)


def holders(
    shell: Any = None,
    exclude: Sequence[str] = (),
    seen: Optional[Set[Any]] = None,
    skipped: Optional[Skipped] = None,
    walker: Optional[Walker] = None,
) -> List[Holder]:
    """Every user variable that keeps tensors alive, each storage charged to the first in charging order, largest
    CUDA share first, then largest overall; a variable that cannot be inspected is recorded in `skipped`."""
    walker = walker or memory_walker()
    if walker is None:
        return []
    seen = set() if seen is None else seen
    kinds = walker.kinds
    reached = each_variable(
        resolve_shell(shell), walker, Skipped() if skipped is None else skipped, lambda v, _: looks(v, kinds), exclude
    )
    held = {key for r in reached for key in r.reach.storages}  # a storage a variable holds is not the graph's
    found = [h for h in (charge(r.name, r.reach, r.read, seen, held=held) for r in reached) if h is not None]
    return sorted(found, key=lambda h: (-h.on_cuda(), -h.bytes, h.name))


def frame_holder(frames: Sequence[Any], walker: Walker, seen: Set[Any], name: str = "traceback") -> Holder:
    """The tensors held only by the locals of some frames (not by what `seen` already charged)."""
    reach, _ = frames_reach(walker, frames)
    held = charge(name, reach, Looks("traceback", "traceback"), seen, keep_empty=True)
    return held or Holder(name, "traceback", "traceback", 0, {}, 0)
