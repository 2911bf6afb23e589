"""Repeated blocks traced once: a fake trace runs the first and the last block of a run of identical blocks (a
transformer's decoder layers, a ResNet stage's bottlenecks) and replays the others' storage events instead of
dispatching their ops, so that an 80-layer model traces in the time of a few layers.

A run is consecutive blocks of checkpointing.repeated_blocks with the same class, parameter and buffer shapes,
dtypes and requires_grad, and the same plain attributes (a per-layer index aside). In the first forward pass at a
call signature, the first call of a run records its forward window (every alloc and free, and the cuBLAS/cuDNN
markers between them) and the last block records its backward window (from its output's gradient to its input's);
the next step's passes replay every block of the run. A block in between whose call matches the first's (inputs'
shapes, dtypes and strides, the plain arguments, grad mode, autocast, which gradients exist) becomes one autograd
node: its forward emits the forward window with fresh storage ids and returns real
outputs of the recorded metadata; its backward emits the backward window and hands back the input's gradient and
the parameters' `.grad`. Storages that leave a window (outputs, gradients) are real tensors made at the position
the block made them; the others are records without a storage. Everything outside the blocks (embedding, head,
loss, optimizer, zero_grad) runs as before, so the stream, the breakdown and the peak equal the full trace's.

The block after the first runs for real too: whether its input is still alive when the next block is called says
whether a block keeps its input (the first's may be kept by its caller). Autocast's cached casts of fp32 weights
(an fp32 model under AMP, LoRA adapters) outlive a block until autocast exits: the real blocks learn which of
their window's allocs its cache clear frees, and the replayed blocks' copies of those are freed in the same clear,
which frees in the order the casts were made (trace_tracker.ordered_cache_clears).

A transformers KV cache among the arguments (a causal LM's forward with use_cache, the Hub configs' default): each
block writes its own layer of it (DynamicCache.update: a copy of its keys and values, kept by the cache until the
model's output lets go of it). The real blocks record which of their window's allocs their layer keeps and its
other attributes; a replayed block makes those allocs as real tensors and puts them in its layer (its index in the
run plus the first's offset), so they live as long as the cache, as the full trace's do. A layer not fresh as the
first block's was, or a block writing several layers, runs for real.

A call that differs, another object among the arguments, a storage that outlives the block in a way the replay
cannot reproduce, or a last block whose windows differ from the first's: that call runs for real, or the trace
reruns in full (ReplicationMismatch, trace.run_trace).

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from gpumem_kernel.analysis.fake.autocast_policy import cpu_autocast_on
from gpumem_kernel.analysis.trace.checkpointing import name_span, repeated_blocks
from gpumem_kernel.analysis.trace.tracker import Marker

MIN_AUTO_RUN = 8  # fewer identical blocks in a row (auto mode): a small model, traced in full in a few seconds
MIN_RUN = 3  # the first and last run for real: a run needs one in between to replay
_PLAIN = (type(None), bool, int, float, str)
# attributes that name a block's place, not its behaviour (the KV cache's index, off while training)
_PLACE_ATTRIBUTES = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "block_idx", "idx"})

_TENSOR = object()  # an output's tensor leaf, made anew by each replay
Ref = Tuple[str, int]  # ("f" | "x", k): the k-th alloc of the forward or backward window; ("in" | "out" | ...)


class ReplicationMismatch(RuntimeError):
    """A replayed block's window cannot be reproduced after all: the trace reruns in full."""


@dataclass
class Replication:
    """Which trace ran: blocks replayed from their run's first and last, or the full trace (and why)."""

    used: bool
    kind: str = ""
    blocks: int = 0  # blocks in the replicated runs
    replayed: int = 0  # block calls replayed, all passes together
    names: str = ""
    reason: str = ""

    def note(self) -> Optional[str]:
        if self.used and self.replayed:
            return (
                f"{self.blocks} {self.kind} blocks ({self.names}) traced once and replicated: {self.replayed} "
                "block calls replayed from the events of the first step's first and last block "
                "(analysis.trace.replicate)"
            )
        if self.reason:
            return f"full trace of every block: {self.reason}"
        return None


@dataclass
class Alloc:
    nbytes: int
    role: Optional[str]
    host: bool
    stack: Any
    tag: Optional[Ref] = None  # ("out", k) | ("gin", k) | ("grad", m): made as a real tensor


@dataclass
class Free:
    ref: Ref


@dataclass
class Window:
    entries: List[Union[Alloc, Free]]
    markers: List[Tuple[int, str, int]]  # (events before it in the window, kind, nbytes)

    def shape(self) -> Tuple[Any, ...]:
        """What must match between two blocks' windows for one to stand for the other (stacks aside)."""
        entries = tuple((e.nbytes, e.role, e.host, e.tag) if isinstance(e, Alloc) else e.ref for e in self.entries)
        return entries, tuple(self.markers)


@dataclass
class Meta:
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    offset: int
    dtype: Any
    device: Any
    nbytes: int  # the storage's
    requires_grad: bool = False


@dataclass
class Backward:
    """A block's recorded backward window and where its gradients go."""

    window: Window
    gin: Optional[Ref] = None  # where the input's gradient comes from when not made in the window
    gin_meta: Optional[Meta] = None
    grads: Dict[int, Meta] = field(default_factory=dict)  # parameter index -> its new .grad's metadata


@dataclass
class Pass:
    """One forward pass of one run at one call signature: the windows its real blocks recorded."""

    forward: Optional[Window] = None
    probe: List[int] = field(default_factory=list)  # the input sids of the block after the first (run for real)
    outputs: List[Meta] = field(default_factory=list)
    out_counts: List[int] = field(default_factory=list)  # the first block's outputs' storage use counts
    out_leaves: List[Any] = field(default_factory=list)  # the output's leaves, tensors as _TENSOR
    out_spec: Any = None
    hold: Optional[List[bool]] = None  # inputs a replayed block keeps until its backward window frees them
    backward: Optional[Backward] = None  # the last block's: every replayed block's but the first's
    # the first block's, which frees what all blocks are handed (rotary tables, masks): the first's, when replayed
    backward_first: Optional[Backward] = None
    first_index: int = 0  # the first block's place in the run
    # autocast's cached weight casts: which of the forward window's allocs the cache clear frees (None: no clear
    # yet), the real blocks' forward sids and the replayed blocks' waiting for the next clear
    cached: Optional[List[int]] = None
    recorded: List[List[int]] = field(default_factory=list)
    awaiting: List[List[int]] = field(default_factory=list)
    unsupported: str = ""
    replayed: int = 0
    # the KV cache layer the run's blocks write (their index in the run + cache_offset; None: no cache), its state
    # before the first's call (a replayed block's must match), and its attributes after: (name, value), a kept
    # storage as ("cache", j) with cache_metas[j]
    cache_offset: Optional[int] = None
    cache_before: Any = None
    cache_after: List[Tuple[str, Any]] = field(default_factory=list)
    cache_metas: List[Meta] = field(default_factory=list)


def _meta(t: Any, tracker: Any) -> Meta:
    storage = t.untyped_storage()
    return Meta(
        tuple(t.shape),
        tuple(t.stride()),
        t.storage_offset(),
        t.dtype,
        t.device,
        int(storage.nbytes()),
        bool(t.requires_grad),
    )


def _use_count(t: Any) -> int:
    """References to the tensor's storage: more on a block's output than on a fresh tensor means the block's
    graph keeps a copy of it (a ReLU saving its result), which a replay must keep as long."""
    import torch

    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


def _sid(tracker: Any, t: Any) -> Optional[int]:
    storage = tracker._storage(t)
    return None if storage is None else tracker._sids.get(storage)


def _materialize(meta: Meta) -> Any:
    """A tensor of `meta`'s shape, strides and storage size: one allocation, as the block's own was."""
    import torch

    size = meta.dtype.itemsize
    span = meta.offset + 1 + sum((n - 1) * s for n, s in zip(meta.shape, meta.stride)) if all(meta.shape) else 0
    if meta.offset == 0 and span * size == meta.nbytes:
        return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=meta.device)
    base = torch.empty((meta.nbytes // size,), dtype=meta.dtype, device=meta.device)
    return base.as_strided(meta.shape, meta.stride, meta.offset)


def _flatten(value: Any, tensors: List[Any], plain: List[Any], caches: List[Any]) -> bool:
    """Tensors and plain values of the call's arguments, through tuples, lists and dicts only, and transformers KV
    caches (`caches`, each block writing its own layer): anything else (a config) may change with the layer, so the
    call runs for real (False)."""
    import torch

    if is_layered_cache(value):
        caches.append(value)
        plain.append(("cache", type(value).__name__, len(value.layers)))
        return True
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        plain.append("<tensor>")
        return True
    if isinstance(value, _PLAIN) or isinstance(value, (torch.dtype, torch.device)):
        plain.append(value)
        return True
    if isinstance(value, (tuple, list)):
        plain.append((type(value).__name__, len(value)))
        return all(_flatten(v, tensors, plain, caches) for v in value)
    if isinstance(value, dict):
        plain.append(("dict", tuple(value)))
        return all(_flatten(v, tensors, plain, caches) for v in value.values())
    return False


def is_layered_cache(value: Any) -> bool:
    """A transformers Cache of per-layer objects (DynamicCache and its kin since 4.56), where a decoder layer's
    update touches only layers[layer_idx]."""
    module = type(value).__module__ or ""
    return module.startswith("transformers.") and isinstance(getattr(value, "layers", None), list)


def _is_plain(value: Any) -> bool:
    import torch

    return isinstance(value, _PLAIN) or isinstance(value, (torch.dtype, torch.device))


def _layer_state(layer: Any) -> Tuple[Any, ...]:
    """A cache layer's attributes, its tensors by identity and metadata: what tells a written layer from a fresh one."""
    state = []
    for name, value in sorted(vars(layer).items()):
        if _is_tensor(value):
            value = ("tensor", id(value), tuple(value.shape), value.dtype)
        state.append((name, value))
    return tuple(state)


def _fresh_state(state: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A layer's state with tensor identities left out: what two blocks' layers must share before they are written."""
    return tuple((n, v[2:] if isinstance(v, tuple) and v[:1] == ("tensor",) else v) for n, v in state)


def _plain_attributes(module: Any) -> Tuple[Any, ...]:
    return tuple(
        (k, v)
        for k, v in sorted(vars(module).items())
        if k not in _PLACE_ATTRIBUTES and not k.startswith("_") and isinstance(v, _PLAIN)
    )


def block_signature(block: Any) -> Tuple[Any, ...]:
    """What two blocks must share to trace alike: structure, states and plain settings."""

    def states(items: Any) -> Tuple[Any, ...]:
        return tuple((n, tuple(t.shape), t.dtype, t.requires_grad) for n, t in items if t is not None)

    modules = tuple((n, type(m), m.training, _plain_attributes(m)) for n, m in block.named_modules())
    return type(block), modules, states(block.named_parameters()), states(block.named_buffers())


def block_runs(model: Any, minimum: int) -> List[List[Tuple[str, Any]]]:
    """Runs of consecutive repeated blocks with one signature, at least `minimum` long."""
    runs: List[List[Tuple[str, Any]]] = []
    previous = None
    for name, block in repeated_blocks(model):
        signature = block_signature(block)
        if runs and signature == previous:
            runs[-1].append((name, block))
        else:
            runs.append([(name, block)])
        previous = signature
    return [run for run in runs if len(run) >= minimum]


class Replicator:
    """Installed on the trace's copy: each block of a run calls through `call`."""

    def __init__(self, tracker: Any, runs: List[List[Tuple[str, Any]]]) -> None:
        self.tracker = tracker
        self.runs = runs
        self.position: Dict[int, Tuple[int, int]] = {}  # id(block) -> (run, index in run)
        self.passes: Dict[Tuple[Any, ...], Pass] = {}
        self.skipped: Set[str] = set()  # why block calls ran for real without a pass to replay (for the report)
        self.originals: List[Tuple[Any, Any]] = []  # (block, its own forward attribute or None)
        self.problem = ""  # a replay found not to match where it cannot raise (autocast's cache clear)
        for r, run in enumerate(runs):
            for i, (_, block) in enumerate(run):
                self.position[id(block)] = (r, i)
                self.originals.append((block, vars(block).get("forward")))
                block.forward = functools.partial(self.call, block, block.forward)
        tracker.on_cache_clear = self.cache_cleared

    def finish(self) -> Replication:
        """What was replayed; the blocks get their forward back and the Replicator lets go of them, so the copy
        is freed where the full trace frees it (a block -> forward -> Replicator -> block cycle waits for gc)."""
        info = self.info()
        self.tracker.on_cache_clear = None
        for block, forward in self.originals:
            if forward is None:
                del block.forward
            else:
                block.forward = forward
        self.originals.clear()
        self.runs.clear()
        if self.problem:
            raise ReplicationMismatch(self.problem)
        return info

    def info(self) -> Replication:
        replayed = sum(p.replayed for p in self.passes.values())
        blocks = sum(len(run) for run in self.runs)
        names = ", ".join(name_span([n for n, _ in run]) for run in self.runs)
        kind = type(self.runs[0][0][1]).__name__ if self.runs else ""
        unsupported = sorted({p.unsupported for p in self.passes.values() if p.unsupported} | self.skipped)
        reason = "; ".join(unsupported) if not replayed else ""
        return Replication(bool(replayed), kind, blocks, replayed, names, reason)

    def cache_cleared(self, freed: Set[int]) -> None:
        """Autocast's cache clear freed `freed`: the casts a real block made learn which of its window's allocs
        the cache held to the clear, and the replayed blocks' copies of those are freed with them. A mismatch is
        raised by finish(), not here: autocast's exit, which clears, would leave autocast on."""
        for state in self.passes.values():
            for local in state.recorded:
                cached = [k for k, sid in enumerate(local) if sid in freed]
                if state.cached is not None and cached != state.cached:
                    self.problem = self.problem or "autocast's cache held other casts of a run's blocks"
                state.cached = cached
            state.recorded.clear()
            for local in state.awaiting:
                if state.cached is None:
                    self.problem = self.problem or "a replayed block's casts were cleared before its run's first"
                for k in state.cached or ():
                    self.tracker._on_free(local[k])
            state.awaiting.clear()

    # the call ------------------------------------------------------------------------------------------

    def call(self, block: Any, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import torch

        tensors: List[Any] = []
        plain: List[Any] = []
        caches: List[Any] = []
        tracker = self.tracker
        real = functools.partial(self._real, real)
        if tracker.phase != "forward" or not torch.is_grad_enabled():
            self.skipped.add("blocks run without gradients (an evaluation step) are not replayed")
            return real(*args, **kwargs)
        if not _flatten((args, kwargs), tensors, plain, caches) or len(caches) > 1:
            self.skipped.add("the blocks are handed an object that may differ per layer (a cache without layers)")
            return real(*args, **kwargs)
        cache = caches[0] if caches else None
        if sum(t.requires_grad for t in tensors) != 1:  # the backward window ends at the one input's gradient
            self.skipped.add("the blocks take no input, or several, that needs a gradient")
            return real(*args, **kwargs)
        run, index = self.position[id(block)]
        members = self.runs[run]
        params = [p for p in block.parameters() if p.requires_grad]
        key = (  # no step: the first step's windows serve the next, whose blocks are then all replayed
            run,
            tracker.micro,
            tuple(plain),
            tuple((tuple(t.shape), t.stride(), t.dtype, t.requires_grad, t.storage_offset()) for t in tensors),
            tuple(p.grad is None for p in params),
            torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"),
        )
        state = self.passes.setdefault(key, Pass())
        if state.unsupported:
            return real(*args, **kwargs)
        if state.forward is None:
            state.first_index = index
            return self._first(state, block, real, args, kwargs, tensors, cache)
        if not state.probe:  # the block after the first runs for real: what it keeps of its input, _holds reads
            state.probe = [_sid(tracker, t) or -1 for t in tensors]
            return real(*args, **kwargs)
        if state.hold is None:
            state.hold = self._holds(state, tensors)
        complete = state.backward is not None and state.backward_first is not None
        if not complete and index == len(members) - 1:
            return self._last(state, block, real, args, kwargs, tensors, cache)
        layer = _target_layer(state, cache, index)
        if layer is False:
            self.skipped.add("a block's KV cache layer was written already")
            return real(*args, **kwargs)
        return self._replay(state, block, tensors, complete and index == state.first_index, layer)

    def _real(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The block's own forward; the frames of this module leave its storages' stacks (the timeline's), which
        then read as the full trace's."""
        first = len(self.tracker.records)
        out = real(*args, **kwargs)
        for record in self.tracker.records[first:]:
            if isinstance(record.stack, tuple):
                record.stack = tuple(f for f in record.stack if getattr(f, "file", None) != __file__)
        return out

    def _record(
        self, real: Callable[..., Any], args: Any, kwargs: Any, tensors: List[Any]
    ) -> Tuple[Any, Window, List[int], List[Any], Dict[int, Ref]]:
        """Run the block for real and read its forward window: (output, window, its allocs' sids, output
        tensors, slots of the storages from outside). The KV cache a block writes: _cache_written after it."""
        from torch.utils._pytree import tree_flatten

        tracker = self.tracker
        slots: Dict[int, Ref] = {}
        for k, t in enumerate(tensors):
            sid = _sid(tracker, t)
            if sid is not None:
                slots.setdefault(sid, ("in", k))
        start, marks = len(tracker.events), len(tracker.markers)
        out = real(*args, **kwargs)
        leaves, _ = tree_flatten(out)
        outputs = [leaf for leaf in leaves if _is_tensor(leaf)]
        window, local = _window(tracker, start, marks, slots)
        return out, window, local, outputs, slots

    def _first(
        self,
        state: Pass,
        block: Any,
        real: Callable[..., Any],
        args: Any,
        kwargs: Any,
        tensors: List[Any],
        cache: Any,
    ) -> Any:
        """The run's first block runs for real and records its forward window, and its backward window for the
        next step, whose first block is replayed too."""
        from torch.utils._pytree import tree_flatten

        tracker = self.tracker
        before = None if cache is None else [_layer_state(layer) for layer in cache.layers]
        out, window, local, outputs, slots = self._record(real, args, kwargs, tensors)
        if cpu_autocast_on():
            state.recorded.append(local)
        leaves, state.out_spec = tree_flatten(out)
        state.out_leaves = [_TENSOR if _is_tensor(leaf) else leaf for leaf in leaves]
        state.unsupported = _tag_outputs(tracker, window, local, outputs)
        if before is not None and not state.unsupported:
            written = _cache_written(tracker, cache, before, window, local)
            state.unsupported = written.problem
            if written.layer is not None:
                state.cache_offset = written.layer - state.first_index
                state.cache_before, state.cache_after, state.cache_metas = written.before, written.after, written.metas
        state.outputs = [_meta(t, tracker) for t in outputs]
        state.out_counts = [_use_count(t) for t in outputs]
        state.forward = window
        if not state.unsupported:
            self._watch_backward(state, block, tensors, outputs, local, slots, first=True)
        return out

    def _holds(self, state: Pass, tensors: List[Any]) -> List[bool]:
        """Which inputs a block keeps alive, read as the block after the probe is called: one all blocks share
        (rotary tables, masks) is kept by its caller; a chained one (the hidden states) is kept when the probe's
        was not freed as its caller moved on. (The first block's input cannot tell: its caller may keep it, as
        BERT keeps its embedding output, where the blocks of an fp32 model under AMP keep only casts of theirs.)"""
        tracker = self.tracker
        holds = []
        for k, t in enumerate(tensors):
            probe = state.probe[k]
            shared = probe == _sid(tracker, t) or probe < 0
            holds.append(not shared and tracker.records[probe].free_index is None)
        return holds

    def _last(
        self,
        state: Pass,
        block: Any,
        real: Callable[..., Any],
        args: Any,
        kwargs: Any,
        tensors: List[Any],
        cache: Any,
    ) -> Any:
        """The run's last block runs for real and records its backward window, which the replayed blocks emit."""
        tracker = self.tracker
        before = None if cache is None else [_layer_state(layer) for layer in cache.layers]
        out, window, local, outputs, slots = self._record(real, args, kwargs, tensors)
        if cpu_autocast_on():
            state.recorded.append(local)
        problem = _tag_outputs(tracker, window, local, outputs)
        if before is not None and not problem:
            index = self.position[id(block)][1]
            problem = _same_cache_write(state, _cache_written(tracker, cache, before, window, local), index)
        if problem or window.shape() != state.forward.shape():  # type: ignore[union-attr]
            if state.replayed:
                raise ReplicationMismatch(problem or "the run's last block's forward differs from its first's")
            state.unsupported = problem or "blocks of one signature traced differently"
            return out
        self._watch_backward(state, block, tensors, outputs, local, slots, first=False)
        return out

    def _watch_backward(
        self,
        state: Pass,
        block: Any,
        tensors: List[Any],
        outputs: List[Any],
        local: List[int],
        slots: Dict[int, Ref],
        first: bool,
    ) -> None:
        """Hooks on a real block's outputs (its backward starts when their gradient is whole) and on its input
        (it ends when the input's is): they keep storage ids only, never a tensor."""
        tracker = self.tracker
        for k, t in enumerate(outputs):
            slots.setdefault(_sid(tracker, t), ("out", k))  # type: ignore[arg-type]
        params = [p for p in block.parameters() if p.requires_grad]
        for m, p in enumerate(params):
            if p.grad is not None:
                slots.setdefault(_sid(tracker, p.grad), ("pgrad", m))  # type: ignore[arg-type]
        begun: List[Tuple[int, int]] = []
        handles: List[Any] = []
        forward_local = {sid: k for k, sid in enumerate(local)}
        kept = {_sid(tracker, t) for t in outputs}  # ids only: a tensor in a hook would live as long as the graph
        allocs = [e for e in state.forward.entries if isinstance(e, Alloc)]  # type: ignore[union-attr]
        cached = {k for k, e in enumerate(allocs) if e.tag is not None and e.tag[0] == "cache"}
        kept |= {sid for sid, k in forward_local.items() if k in cached}  # the KV cache keeps them past the block

        def started(k: int) -> Callable[[Any], None]:
            def hook(grad: Any) -> None:
                if not begun:
                    begun.append((len(tracker.events), len(tracker.markers)))
                sid = _sid(tracker, grad)
                if sid is not None:
                    slots.setdefault(sid, ("gout", k))

            return hook

        def ended(grad: Any) -> None:
            for handle in handles:
                handle.remove()
            if not begun:
                state.unsupported = "the block's output had no gradient"
                return
            start, marks = begun[0]
            window, own = _window(tracker, start, marks, slots, forward_local)
            backward = Backward(window)
            problem = self._tag_gradients(backward, own, grad, params, slots) or _outlives(tracker, forward_local, kept)
            if any(isinstance(e, Free) and e.ref[0] == "f" and e.ref[1] in cached for e in window.entries):
                problem = problem or "the KV cache let go of a block's keys in its backward"
            state.unsupported = state.unsupported or problem
            if first:
                state.backward_first = backward
            else:
                state.backward = backward

        for k, t in enumerate(outputs):
            if t.requires_grad:
                handles.append(t.register_hook(started(k)))
        handles.append(next(t for t in tensors if t.requires_grad).register_hook(ended))

    def _tag_gradients(
        self, backward: Backward, own: List[int], grad: Any, params: List[Any], slots: Dict[int, Ref]
    ) -> str:
        """Mark the backward window's allocs that leave it (the input's gradient, the parameters' new .grad) as
        real tensors; anything else that outlives the window cannot be replayed."""
        tracker = self.tracker
        window = backward.window
        if any(isinstance(e, Free) and e.ref[0] == "?" for e in window.entries):
            return "a block's backward frees a storage it was not given"
        position = {sid: k for k, sid in enumerate(own)}
        allocs = [e for e in window.entries if isinstance(e, Alloc)]
        sid = _sid(tracker, grad)
        if sid in position:
            allocs[position[sid]].tag = ("gin", 0)
        elif sid in slots:
            backward.gin = slots[sid]
        else:
            return "the input's gradient comes from outside the block"
        backward.gin_meta = _meta(grad, tracker)
        for m, p in enumerate(params):
            if p.grad is None:
                return "a parameter had no gradient when its block's backward ended"
            sid = _sid(tracker, p.grad)
            if sid in position:
                allocs[position[sid]].tag = ("grad", m)
                backward.grads[m] = _meta(p.grad, tracker)
            elif slots.get(sid) != ("pgrad", m):  # type: ignore[arg-type]
                return "a parameter's gradient comes from outside the block"
        for k, sid in enumerate(own):
            if tracker.records[sid].free_index is None and allocs[k].tag is None:
                return "a storage made in the block's backward outlives it"
        return ""

    # the replay ----------------------------------------------------------------------------------------

    def _replay(self, state: Pass, block: Any, tensors: List[Any], first: bool, layer: Any) -> Any:
        from torch.utils._pytree import tree_unflatten

        state.replayed += 1
        params = [p for p in block.parameters() if p.requires_grad]
        node = _Replayed(self.tracker, state, tensors, params, first, layer)
        outputs = iter(_replay_function().apply(node, *tensors))
        if cpu_autocast_on():
            state.awaiting.append(node.forward_local)
        leaves = [next(outputs) if leaf is _TENSOR else leaf for leaf in state.out_leaves]
        return tree_unflatten(leaves, state.out_spec)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _window(
    tracker: Any, start: int, marks: int, slots: Dict[int, Ref], forward_local: Optional[Dict[int, int]] = None
) -> Tuple[Window, List[int]]:
    """The events and markers since `start`, storages named by their place in the window ("f" forward, "x"
    backward), in the block's forward window (`forward_local`, for a backward one) or among its arguments (`slots`)."""
    local: Dict[int, int] = {}
    entries: List[Union[Alloc, Free]] = []
    kind = "f" if forward_local is None else "x"
    forward_local = forward_local or {}
    for event, sid in tracker.events[start:]:
        record = tracker.records[sid]
        if event == "alloc" and record.alloc_index >= start:
            local[sid] = len(local)
            entries.append(Alloc(record.nbytes, record.role, record.host, record.stack))
        elif event == "free" and sid in local:
            entries.append(Free((kind, local[sid])))
        elif event == "free" and sid in forward_local:
            entries.append(Free(("f", forward_local[sid])))
        elif event == "free" and sid in slots:
            entries.append(Free(slots[sid]))
        else:  # a storage from outside the block freed inside it: nothing a replay could name
            entries.append(Free(("?", sid)))
    markers = [(m.index - start, m.kind, m.nbytes) for m in tracker.markers[marks:]]
    return Window(entries, markers), list(local)


@dataclass
class _CacheWrite:
    """What a real block's call did to the KV cache: the layer it wrote (None: none), that layer's state before,
    its attributes after (a kept storage as ("cache", j), its metadata metas[j]), or why it cannot be replayed."""

    layer: Optional[int] = None
    before: Any = None
    after: List[Tuple[str, Any]] = field(default_factory=list)
    metas: List[Meta] = field(default_factory=list)
    problem: str = ""


def _cache_written(tracker: Any, cache: Any, before: List[Any], window: Window, local: List[int]) -> _CacheWrite:
    """The layer the block's call wrote, its storages tagged in `window` as ("cache", j): each must be one the
    block made (a replay makes it anew)."""
    written = [k for k, layer in enumerate(cache.layers) if k >= len(before) or _layer_state(layer) != before[k]]
    if not written:
        return _CacheWrite()
    if len(written) > 1 or written[0] >= len(before):
        return _CacheWrite(problem="a block wrote several layers of the KV cache")
    position = {sid: k for k, sid in enumerate(local)}
    allocs = [e for e in window.entries if isinstance(e, Alloc)]
    found = _CacheWrite(written[0], _fresh_state(before[written[0]]))
    had = dict(before[written[0]])
    for name, value in sorted(vars(cache.layers[written[0]]).items()):
        before_value = had.get(name)
        if _is_tensor(value) and isinstance(before_value, tuple) and before_value[:2] == ("tensor", id(value)):
            continue  # a tensor of the layer's own from before the call (the sliding window's size): left as it is
        if not _is_tensor(value):
            if not _is_plain(value):  # an object every replayed layer would share
                return _CacheWrite(problem="a KV cache layer holds an object besides its tensors")
            found.after.append((name, value))
            continue
        k = position.get(_sid(tracker, value))  # type: ignore[arg-type]
        if k is None or allocs[k].tag is not None:
            return _CacheWrite(problem="the KV cache keeps a storage its block did not make")
        allocs[k].tag = ("cache", len(found.metas))
        found.after.append((name, ("cache", len(found.metas))))
        found.metas.append(_meta(value, tracker))
    return found


def _same_cache_write(state: Pass, written: _CacheWrite, index: int) -> str:
    """'' when the run's last block (at `index`) wrote its cache layer as its first did: the same place relative to
    it, the same state before and the same attributes and storages after."""
    if written.problem:
        return written.problem
    offset = None if written.layer is None else written.layer - index
    same = offset == state.cache_offset and (
        offset is None
        or (
            written.before == state.cache_before
            and written.after == state.cache_after
            and written.metas == state.cache_metas
        )
    )
    return "" if same else "the run's last block wrote the KV cache unlike its first"


def _target_layer(state: Pass, cache: Any, index: int) -> Any:
    """The cache layer a replayed block at `index` writes (None: no cache), or False when it is not fresh as the
    first block's was (that call runs for real)."""
    if state.cache_offset is None:
        return None
    place = index + state.cache_offset
    if cache is None or not 0 <= place < len(cache.layers):
        return False
    layer = cache.layers[place]
    return layer if _fresh_state(_layer_state(layer)) == state.cache_before else False


def _outlives(tracker: Any, forward_local: Dict[int, int], kept: Any) -> str:
    """'' when every storage the block's forward made is freed by its backward's end or is an output (`kept`)."""
    for sid in forward_local:
        if tracker.records[sid].free_index is None and sid not in kept:
            return "a storage made in the block's forward outlives its backward"
    return ""


def _tag_outputs(tracker: Any, window: Window, local: List[int], outputs: List[Any]) -> str:
    """Mark the forward window's allocs that are the block's outputs; '' or why the block cannot be replayed."""
    if any(isinstance(e, Free) and e.ref[0] == "?" for e in window.entries):
        return "a block frees a storage it was not given"
    position = {sid: k for k, sid in enumerate(local)}
    allocs = [e for e in window.entries if isinstance(e, Alloc)]
    for k, t in enumerate(outputs):
        sid = _sid(tracker, t)
        if sid not in position:
            return "a block returns a storage it did not make"
        allocs[position[sid]].tag = ("out", k)
    return ""


class _Replayed:
    """One replayed block call: its bindings from window slots to storage ids, and what it must hand back."""

    def __init__(
        self, tracker: Any, state: Pass, tensors: List[Any], params: List[Any], first: bool, layer: Any = None
    ) -> None:
        self.tracker = tracker
        self.state = state
        self.layer = layer  # the KV cache layer it writes, or None
        self.params = params
        self.first = first  # the run's first block, in a step after the first: its own backward window
        self.bound: Dict[Ref, int] = {("in", k): _sid(tracker, t) for k, t in enumerate(tensors)}  # type: ignore
        assert state.hold is not None
        holds = state.hold
        if first:  # it holds what its backward window frees, the inputs all blocks share included
            freed = {e.ref for e in state.backward_first.window.entries if isinstance(e, Free)}  # type: ignore
            holds = [("in", k) in freed for k in range(len(tensors))]
        self.held = [t for t, hold in zip(tensors, holds) if hold]  # freed by the backward window
        self.wanting = [t.requires_grad for t in tensors]
        self.forward_local: List[int] = []

    def forward(self) -> List[Any]:
        state = self.state
        outputs: Dict[int, Any] = {}

        cached: Dict[int, Any] = {}

        def make(tag: Ref) -> Any:
            if tag[0] == "cache":
                cached[tag[1]] = _materialize(state.cache_metas[tag[1]])
                return cached[tag[1]]
            t = _materialize(state.outputs[tag[1]])
            outputs[tag[1]] = t
            return t

        self.forward_local = emit_region(self.tracker, state.forward, self.bound, None, make)  # type: ignore[arg-type]
        if self.layer is not None:  # the layer as the block's update leaves it, its storages kept by the cache
            for name, value in state.cache_after:
                is_kept = isinstance(value, tuple) and len(value) == 2 and value[0] == "cache"
                setattr(self.layer, name, cached[value[1]] if is_kept else value)
        for k, t in outputs.items():
            self.bound[("out", k)] = _sid(self.tracker, t)  # type: ignore[assignment]
            if _use_count(t) < state.out_counts[k]:
                self.held.append(t)  # the block's own graph would keep it until its backward frees it
        return [outputs[k] for k in range(len(state.outputs))]

    def backward(self, grads: Sequence[Any]) -> List[Any]:
        state = self.state
        backward = state.backward_first if self.first else state.backward
        if backward is None or state.unsupported:
            raise ReplicationMismatch(state.unsupported or "a replayed block's backward ran before its run's last")
        for k, g in enumerate(grads):
            if g is not None:
                self.bound[("gout", k)] = _sid(self.tracker, g)  # type: ignore[assignment]
        for m, p in enumerate(self.params):
            if p.grad is not None:
                self.bound[("pgrad", m)] = _sid(self.tracker, p.grad)  # type: ignore[assignment]
        made: Dict[Ref, Any] = {}

        def make(tag: Ref) -> Any:
            meta = backward.gin_meta if tag[0] == "gin" else backward.grads[tag[1]]  # type: ignore[union-attr]
            made[tag] = _materialize(meta)  # type: ignore[arg-type]
            return made[tag]

        forward = {("f", k): sid for k, sid in enumerate(self.forward_local)}
        emit_region(self.tracker, backward.window, self.bound, forward, make)
        for (kind, m), t in made.items():
            if kind == "grad":
                self.params[m].grad = t
        gin = made.get(("gin", 0))
        if gin is None and backward.gin is not None and backward.gin[0] == "gout":
            gin = grads[backward.gin[1]]
        self.held.clear()
        return [gin if wants else None for wants in self.wanting]


def emit_region(
    tracker: Any, window: Window, bound: Dict[Ref, int], outer: Optional[Dict[Ref, int]], make: Callable[[Ref], Any]
) -> List[int]:
    """Append `window`'s events (and markers) to the tracker with fresh storage ids; allocs tagged as leaving
    the window are real tensors from `make`. `outer`: the forward window's sids, for a backward window. Returns
    the sids of the window's allocs, in order."""
    local: List[int] = []
    kind = "f" if outer is None else "x"
    outer = outer or {}
    markers = iter(window.markers)
    marker = next(markers, None)
    start = len(tracker.events)
    for entry in window.entries:
        while marker is not None and marker[0] <= len(tracker.events) - start:
            tracker.markers.append(Marker(start + marker[0], marker[1], tracker.phase, marker[2]))
            marker = next(markers, None)
        if isinstance(entry, Alloc) and entry.tag is None:
            local.append(tracker.synthetic(entry.nbytes, entry.role, entry.host, entry.stack).sid)
        elif isinstance(entry, Alloc):
            before = len(tracker.records)
            t = make(entry.tag)
            if len(tracker.records) != before + 1:
                raise ReplicationMismatch("a replayed block's tensor did not allocate as its model's did")
            record = tracker.records[_sid(tracker, t)]
            record.role, record.host, record.stack = entry.role, entry.host, entry.stack
            local.append(record.sid)
        else:
            ref = entry.ref
            sid = local[ref[1]] if ref[0] == kind else outer.get(ref, bound.get(ref))
            if sid is None or tracker.records[sid].free_index is not None:
                raise ReplicationMismatch(f"a replayed block frees {ref} that is not alive")
            tracker._on_free(sid)
    while marker is not None:
        tracker.markers.append(Marker(start + marker[0], marker[1], tracker.phase, marker[2]))
        marker = next(markers, None)
    return local


@functools.lru_cache(maxsize=None)
def _replay_function() -> Any:
    """The autograd node a replayed block is: forward and backward emit the recorded windows."""
    import torch

    class Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, node: _Replayed, *tensors: Any) -> Any:
            ctx.set_materialize_grads(False)  # zeros for an unused output would be an allocation the block never made
            ctx.node = node
            outputs = node.forward()
            ctx.mark_non_differentiable(*[t for t, m in zip(outputs, node.state.outputs) if not m.requires_grad])
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            node, ctx.node = ctx.node, None
            return (None, *node.backward(grads))

    return Replay


def install(model: Any, tracker: Any, replicate: Optional[bool]) -> Optional[Replicator]:
    """A Replicator over the copy's runs of identical blocks; None when there is none worth replaying (`replicate`
    None: runs of MIN_AUTO_RUN blocks or more; True: any run with a block between its first and last)."""
    if replicate is False:
        return None
    runs = block_runs(model, MIN_RUN if replicate else MIN_AUTO_RUN)
    return Replicator(tracker, runs) if runs else None
