"""Which of the user's variables hold device memory: one entry per variable (and per thing IPython holds),
each storage charged once, and the remainder no variable reaches.

Order of charging: Modules first (they own their parameters), then tensors, then other values, then
optimizers (charged for their state only, their parameters being the model's), then IPython's output cache
and the last error's traceback (what `del x` would not free). A storage two entries reach is charged to the
first and named on both ("shared with `opt`").

A report holds names, sizes and descriptions only: no user object outlives `collect`.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from gpumem_kernel.heldby import describe
from gpumem_kernel.heldby.report import OUT_ENTRY, TRACEBACK_ENTRY, HolderEntry, HoldersReport
from gpumem_kernel.heldby.walk import Limits, OnDevice, OutOfTime, Reach, Walker, each_variable, frames_reach
from gpumem_kernel.probe.inspection import Skipped
from gpumem_kernel.probe.holders import (
    exception_tracebacks,
    namespace_of,
    resolve_shell,
    torch_kinds,
    traceback_frames,
)

DEFAULT_BUDGET_MS = 50.0  # after every cell: a cell's end must not feel slower
_OUT_NAME = re.compile(r"^(_\d+|_{1,3})$")


@dataclass
class _Root:
    """A thing to charge: its name, where it comes from, and how to describe it (no object kept)."""

    name: str
    source: str
    description: str
    reach: Reach


def _variable_roots(shell: Any, walker: Walker, skipped: Skipped) -> List[_Root]:
    """The variables reaching a storage, in charging order, each described while the walk has it; one that
    cannot be inspected, or whose walk or description raises, is recorded in `skipped` (walk.each_variable)."""
    kinds = walker.kinds
    reached = each_variable(shell, walker, skipped, lambda value, reach: describe.value(value, reach, kinds))
    return [_Root(r.name, "variable", r.read, r.reach) for r in reached]


def _out_root(shell: Any, walker: Walker) -> Optional[_Root]:
    """IPython's output cache: `Out[N]`, and `_N`, `_`, `__`, `___` (the same objects, usually)."""
    namespace, _ = namespace_of(shell)
    out = namespace.get("Out")
    held = list(out.items()) if type(out) is dict else []  # IPython's own; a user's `Out` is a variable
    held += [
        (name, value)
        for name, value in dict(namespace).items()  # a copy, without a tuple kept per name
        if issubclass(type(name), str) and name[:1] == "_" and _OUT_NAME.match(name)
    ]
    total, labels = Reach(), []
    for key, value in held:
        reach = walker.reach(value)
        if reach is not None:
            labels.append(f"Out[{key}]" if isinstance(key, int) else key)
            total.add(reach)
    if not total.storages:
        return None
    return _Root(OUT_ENTRY, "ipython", describe.output_cache(labels, total), total)


def _traceback_root(walker: Walker) -> Optional[_Root]:
    """Locals of the last error's frames (module-level frames are the namespace itself)."""
    tracebacks = [sys.last_traceback] if getattr(sys, "last_traceback", None) is not None else []
    for attr in ("last_value", "last_exc"):
        tracebacks.extend(exception_tracebacks(getattr(sys, attr, None)))
    total, functions = frames_reach(walker, traceback_frames(tracebacks))
    if not total.storages:
        return None
    return _Root(TRACEBACK_ENTRY, "traceback", describe.traceback(functions, total), total)


def _device_of(key: Any, device_name: str) -> str:
    """The device of a storage key (probe.holders.storage_identity puts it first); `device_name` for any other."""
    return str(key[0]) if isinstance(key, tuple) and key else device_name


def _graphs(roots: List[_Root], reachers: Dict[Any, List[str]], device_name: str) -> Dict[str, Dict[str, int]]:
    """root name -> the bytes by device it keeps alive only through autograd graphs: storages saved for backward
    that no root reaches itself, each charged to the first root whose graph saved it."""
    charged: Set[Any] = set()
    graphs: Dict[str, Dict[str, int]] = {}
    for root in roots:
        by_device: Dict[str, int] = {}
        for key, size in root.reach.graph.items():
            if key in reachers or key in charged:
                continue
            charged.add(key)
            device = _device_of(key, device_name)
            by_device[device] = by_device.get(device, 0) + size
        if by_device:
            graphs[root.name] = by_device
    return graphs


def _entries(roots: List[_Root], device_name: str) -> List[HolderEntry]:
    """Charge each storage to the first root reaching it (by device); name the others sharing it on both sides.
    Apart: what each keeps alive only through autograd graphs."""
    reachers: Dict[Any, List[str]] = {}
    for root in roots:
        for key in root.reach.storages:
            reachers.setdefault(key, []).append(root.name)
    graphs = _graphs(roots, reachers, device_name)
    entries = []
    for root in roots:
        by_device: Dict[str, int] = {}
        for key, size in root.reach.storages.items():
            if reachers[key][0] == root.name:
                device = _device_of(key, device_name)
                by_device[device] = by_device.get(device, 0) + size
        shared: Dict[str, None] = {}
        for key in root.reach.storages:
            shared.update((name, None) for name in reachers[key] if name != root.name)
        graph = graphs.get(root.name, {})
        entries.append(
            HolderEntry(
                root.name,
                root.source,
                root.description + describe.graph_note(sum(graph.values())),
                sum(by_device.values()),
                root.reach.bytes,
                root.reach.tensors,
                list(shared),
                by_device,
                graph,
            )
        )
    return sorted(entries, key=lambda e: (-e.bytes, -e.reached_bytes, e.name))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the walk runs: its objects die by reference count, and a
    full collection of a large kernel's heap (100 ms and more) lands outside the walk's budget instead of making
    it skip. Left as it was where the user's code turned it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect(
    shell: Any = None,
    on_device: Optional[OnDevice] = None,
    device: str = "cuda",
    allocated: Optional[int] = None,
    budget_ms: Optional[float] = DEFAULT_BUDGET_MS,
    limits: Optional[Limits] = None,
) -> HoldersReport:
    """Walk the user's variables, IPython's output cache and the last traceback to the storages `on_device`
    accepts (default: tensors whose device type is `device`), within `limits` (default: Limits()). Past
    `budget_ms` (None: no limit) the report is a skip with a note, never a partial list."""
    started = time.perf_counter()
    accept = on_device or (lambda tensor: tensor.device.type == device)
    kinds = torch_kinds()
    if kinds is None:
        return _report(device, [], allocated, started, budget_ms, note="torch is not imported in this kernel")
    shell = resolve_shell(shell)
    deadline = None if budget_ms is None else started + budget_ms / 1000.0
    limits = limits or Limits()
    walker = Walker(kinds, accept, limits, deadline)
    skipped = Skipped()
    try:
        with _collector_paused():
            roots = _variable_roots(shell, walker, skipped)
            roots += [r for r in (_out_root(shell, walker), _traceback_root(walker)) if r is not None]
    except OutOfTime:
        note = (
            f"skipped: looking through your variables took over {budget_ms:g} ms "
            f"({walker.visited:,} objects looked at); `%gpumem holders` looks without the per-cell limit"
        )
        return _report(device, [], allocated, started, budget_ms, note=note, skipped=True)
    notes = []
    if walker.truncated:
        notes.append(f"stopped after {limits.objects:,} objects: variables reached only through more may be missing")
    if walker.graph_truncated:
        notes.append(
            f"autograd graphs followed for {limits.graph_nodes:,} nodes: what they keep alive may be more than shown"
        )
    note = "; ".join(notes) or None
    report = _report(device, _entries(roots, device), allocated, started, budget_ms, note=note)
    report.history_hint = describe.history_hint([(r.name, r.reach) for r in roots])
    report.uninspected = skipped.line()
    return report


def _report(
    device: str,
    entries: List[HolderEntry],
    allocated: Optional[int],
    started: float,
    budget_ms: Optional[float],
    note: Optional[str] = None,
    skipped: bool = False,
) -> HoldersReport:
    reachable = sum(e.bytes for e in entries)
    unreachable = None if allocated is None or skipped else max(0, allocated - reachable)
    elapsed = (time.perf_counter() - started) * 1000.0
    return HoldersReport(device, entries, allocated, reachable, unreachable, skipped, note, elapsed, budget_ms)


def allocated_by_device() -> Optional[Dict[str, int]]:
    """{"cuda:0": bytes allocated, ...} when the user's code initialised CUDA, else None. Never initialises CUDA."""
    from gpumem_kernel.probe.torchstats import initialised_cuda

    cuda = initialised_cuda()
    if cuda is None:
        return None
    return {f"cuda:{i}": int(cuda.memory_allocated(i)) for i in range(cuda.device_count())}


def cuda_in_use() -> Optional[Tuple[OnDevice, int]]:
    """(is-a-CUDA-tensor, bytes allocated on every device) when the user's code initialised CUDA, else None.
    Never initialises CUDA."""
    allocated = allocated_by_device()
    if allocated is None:
        return None
    return (lambda tensor: tensor.is_cuda), sum(allocated.values())


NO_CUDA = "CUDA is not initialised in this kernel: no variable holds GPU memory"


def holders(shell: Any = None, budget_ms: Optional[float] = 1000.0) -> HoldersReport:
    """Which of your variables hold GPU memory, largest first; the remainder no variable reaches. Never
    initialises CUDA: without it in use, an empty report saying so."""
    in_use = cuda_in_use()
    if in_use is None:
        return _report("cuda", [], None, time.perf_counter(), budget_ms, note=NO_CUDA)
    on_device, allocated = in_use
    return collect(shell, on_device, "cuda", allocated, budget_ms)
