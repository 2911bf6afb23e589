"""The storage tracker: which tensor storages are alive while a training step runs, and how many bytes they hold.

A `TorchDispatchMode` sees every op's outputs; a storage it has not seen before is an allocation, and a
`weakref.finalize` on the storage object (PyTorch keeps one Python object per live storage) is its free,
whenever and wherever it happens. Each storage becomes a `Record` in an alloc/free event stream, and the live
bytes and their peak are kept as it goes. With a `cap`, going over it raises `SimulatedOOM`: the simulated
device of autobatch and the benchmark. The traced estimator (analysis.trace.run) extends the same tracker with
the op markers its allocator model needs.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from gpumem_kernel.analysis.allocator.import_guard import interrupts_deferred
from gpumem_kernel.render.units import format_bytes


class SimulatedOOM(RuntimeError):
    """Raised by the simulated device the moment tracked live tensor bytes exceed the cap."""


@dataclass
class Record:
    sid: int
    nbytes: int
    phase: str
    step: int
    micro: int
    alloc_index: int  # position of its alloc event in the stream
    free_index: Optional[int] = None
    role: Optional[str] = None
    host: bool = False  # lives in host memory on CUDA too (optimizer `step` scalars of non-fused optimizers)
    stack: Any = None  # what the tracker's stack_hook returned at its birth (the timeline's frames); None: off

    def with_bytes(self, nbytes: int) -> "Record":
        """The same storage's record with another size (a stream predicted at another batch or length): made
        directly, as a search makes thousands of them per predicted stream."""
        return Record(
            self.sid, nbytes, self.phase, self.step, self.micro, self.alloc_index, self.free_index, self.role,
            self.host, self.stack,
        )  # fmt: skip


class NullTracker:
    """Stands in for the tracker where nothing is tracked (a real GPU counts its own bytes)."""

    peak = 0

    def __enter__(self) -> "NullTracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    @contextlib.contextmanager
    def span(self, phase: str, step: int, micro: int) -> Iterator[None]:
        yield

    def register(self, tree: Any, role: Optional[str] = None, host: bool = False, check: bool = False) -> None:
        pass

    def check_baseline(self) -> None:
        pass

    def close(self) -> None:
        pass


def _mib(n: int) -> str:
    return format_bytes(n, "MiB")  # PyTorch's own OOM messages say MiB


@functools.lru_cache(maxsize=None)
def tracker_class() -> type:
    """The StorageTracker class (built on first use: it subclasses torch's TorchDispatchMode).

    Long as one function because it is one class: torch is imported inside functions only, so the class that
    subclasses TorchDispatchMode is defined here; its methods are each short."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
    from torch.utils._pytree import tree_leaves
    from torch.utils.weak import WeakIdKeyDictionary

    class StorageTracker(TorchDispatchMode):
        """Every storage created while active (plus those registered): its record, the event stream, the
        live bytes and their peak, with an optional cap."""

        def __init__(self, cap: Optional[int] = None) -> None:
            super().__init__()
            self.cap = cap
            self.live = 0
            self.peak = 0
            self.records: List[Record] = []
            self.events: List[Tuple[str, int]] = []  # ("alloc" | "free", sid)
            self.spans: Dict[Tuple[int, int, str], Tuple[int, int]] = {}
            self.phase, self.step, self.micro = "setup", 0, 0
            self._sids: Any = WeakIdKeyDictionary()  # storage -> sid of its live record
            self._finalizers: List[weakref.finalize] = []
            self._lock = threading.RLock()  # a storage may be freed on another thread (DataLoader pinning)
            self._closed = False
            # called at each storage birth, its result kept as Record.stack (the timeline's allocating frames);
            # None (the default) costs one attribute check per storage
            self.stack_hook: Optional[Any] = None
            # a deferred Ctrl-C (interrupts_at_operators), raised at the next operator
            self.interrupts: Optional[Any] = None

        # storages -------------------------------------------------------------------------------

        def _storage(self, t: Any) -> Any:
            # device.type, not is_meta: a tenth of the time on a fake tensor (the trace asks for every op's outputs)
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type == "meta":
                return None
            try:
                return t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return None

        def _new(self, st: Any, role: Optional[str], host: bool = False) -> Record:
            record = Record(
                sid=len(self.records),
                nbytes=int(st.nbytes()),
                phase=self.phase,
                step=self.step,
                micro=self.micro,
                alloc_index=len(self.events),
                role=role,
                host=host,
                stack=None if self.stack_hook is None else self.stack_hook(),
            )
            self.records.append(record)
            self.events.append(("alloc", record.sid))
            self._sids[st] = record.sid
            self._finalizers.append(weakref.finalize(st, self._on_free, record.sid))
            self.live += record.nbytes
            return record

        def synthetic(self, nbytes: int, role: Optional[str], host: bool, stack: Any) -> Record:
            """A storage's birth without a storage: a replicated block's event (analysis.trace.replicate), freed by
            `_on_free(sid)` where the block it copies freed its own."""
            with self._lock:
                sid, at = len(self.records), len(self.events)
                record = Record(sid, nbytes, self.phase, self.step, self.micro, at, role=role, host=host, stack=stack)
                self.records.append(record)
                self.events.append(("alloc", record.sid))
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                return record

        def _on_free(self, sid: int) -> None:
            with self._lock:
                record = self.records[sid]
                if not self._closed and record.free_index is None:
                    record.free_index = len(self.events)
                    self.events.append(("free", sid))
                    self.live -= record.nbytes

        def track(self, t: Any, role: Optional[str] = None, host: bool = False, check: bool = True) -> Optional[Record]:
            """The record of `t`'s storage: a new one when the storage is new (or was resized in place, which
            is a new allocation of the new size). Over the cap (and `check`): SimulatedOOM. A wrapper subclass
            (DTensor: a rank's shard inside a tensor of the global shape) holds no storage of its own: its inner
            tensors are tracked, and the first one's record returned."""
            if is_traceable_wrapper_subclass(t):
                inner = [self.track(getattr(t, name), role, host, check) for name in t.__tensor_flatten__()[0]]
                return next((r for r in inner if r is not None), None)
            st = self._storage(t)
            if st is None:
                return None
            with self._lock:
                sid = self._sids.get(st)
                if sid is not None and int(st.nbytes()) == self.records[sid].nbytes:
                    return self.records[sid]
                if sid is not None:  # resized in place
                    self._on_free(sid)
                    previous = self.records[sid]
                    record = self._new(st, role or previous.role, host or previous.host)
                else:
                    record = self._new(st, role, host)
                live = self.live
            if check and self.cap is not None and live > self.cap:
                raise SimulatedOOM(
                    f"CUDA out of memory (simulated). Tried to allocate {_mib(record.nbytes)}; "
                    f"{_mib(live - record.nbytes)} of the {_mib(self.cap)} simulated cap already in use by "
                    "tracked tensors"
                )
            self.peak = max(self.peak, live)
            return record

        def resized(self, st: Any, role: Optional[str] = None) -> None:
            """A storage resized in place by `UntypedStorage.resize_`, which no dispatch mode sees (FSDP frees its
            gathered parameters with resize_(0) and refills them with resize_(n)): its old size freed, its new
            size (if any) a new allocation with the old role, or `role`."""
            with self._lock:
                sid = self._sids.get(st)
                nbytes = int(st.nbytes())
                if sid is not None and nbytes == self.records[sid].nbytes:
                    return
                host = False
                if sid is not None:
                    self._on_free(sid)
                    role, host = self.records[sid].role or role, self.records[sid].host
                    del self._sids[st]
                if nbytes:
                    self._new(st, role, host)
                self.peak = max(self.peak, self.live)

        def register(self, tree: Any, role: Optional[str] = None, host: bool = False, check: bool = False) -> None:
            """Track tensors made outside the mode (model states, a batch from DataLoader workers), and give
            them a role once it is known."""
            for t in tree_leaves(tree):
                record = self.track(t, check=check)
                if record is not None and role is not None:
                    record.role = role
                    record.host = record.host or host

        def role_of(self, t: Any) -> Optional[str]:
            st = self._storage(t)
            sid = self._sids.get(st) if st is not None else None
            return self.records[sid].role if sid is not None else None

        def check_baseline(self) -> None:
            """SimulatedOOM when what is registered before the step already exceeds the cap."""
            if self.cap is not None and self.live > self.cap:
                raise SimulatedOOM(
                    f"CUDA out of memory (simulated): the model's states alone take "
                    f"{_mib(self.live)}, over the {_mib(self.cap)} simulated cap"
                )

        # phases ---------------------------------------------------------------------------------

        @contextlib.contextmanager
        def span(self, phase: str, step: int, micro: int) -> Iterator[None]:
            saved = (self.phase, self.step, self.micro)
            self.phase, self.step, self.micro = phase, step, micro
            start = len(self.events)
            try:
                yield
            finally:
                self.spans[(step, micro, phase)] = (start, len(self.events))
                self.phase, self.step, self.micro = saved

        def close(self) -> None:
            """Stop counting frees (the records stay readable)."""
            self._closed = True
            for fin in self._finalizers:
                fin.detach()
            self._finalizers.clear()

        # the dispatch hook ----------------------------------------------------------------------

        def track_outputs(self, out: Any, role: Optional[str] = None) -> None:
            for t in tree_leaves(out):
                self.track(t, role)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if self.interrupts is not None:
                self.interrupts.raise_if_pending()
            if any(is_traceable_wrapper_subclass(t) for t in tree_leaves((args, kwargs))):
                # the subclass (DTensor) runs its op on its inner tensors: returned to it, the ops it runs come
                # back here, temporaries and all; run here, they would run with this mode off, unseen
                return NotImplemented
            out = func(*args, **(kwargs or {}))
            self.track_outputs(out)
            return out

    return StorageTracker


def make_tracker(cap: Optional[int] = None) -> Any:
    """A fresh tracker (a TorchDispatchMode); enter it with `with tracker:`, `close()` it when done."""
    return tracker_class()(cap)


@contextlib.contextmanager
def interrupts_at_operators(tracker: Any) -> Iterator[None]:
    """Ctrl-C during the block is raised at the tracker's next operator (analysis.allocator.import_guard): raised inside
    a storage's free callback (weakref.finalize) it would be swallowed, and the storage counted as never freed. A
    NullTracker sees no operator: there Ctrl-C comes as it is."""
    if isinstance(tracker, NullTracker):
        yield
        return
    with interrupts_deferred() as pending:
        tracker.interrupts = pending
        try:
            yield
        finally:
            tracker.interrupts = None


def register_states(tracker: Any, model: Any, optimizer: Any = None) -> None:
    """Count what already lives on the (simulated) device: parameters, buffers, gradients, optimizer state."""
    import torch

    tracker.register([p for p in model.parameters()] + [b for b in model.buffers()])
    tracker.register([p.grad for p in model.parameters() if p.grad is not None])
    if optimizer is not None and not isinstance(optimizer, str):
        for state in optimizer.state.values():
            tracker.register([v for v in state.values() if isinstance(v, torch.Tensor)])
