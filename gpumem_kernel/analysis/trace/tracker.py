"""The trace's storage tracker: analysis.allocator.storage's, plus where CUDA's libraries would allocate workspaces
(cuBLAS and cuBLASLt per thread or per call, cuDNN per convolution), autocast's cached weight copies, and the oneDNN RNN
workspace that fake kernels leave out.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set

from gpumem_kernel.analysis.fake.rnn_workspace import with_rnn_workspace
from gpumem_kernel.analysis.fake.size_hints import SizeHints
from gpumem_kernel.analysis.allocator.import_guard import interrupts_held
from gpumem_kernel.analysis.allocator.storage import tracker_class


# ops that run through cuBLAS on CUDA (first use on a thread allocates that thread's workspace)
_MATMUL_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "_addmm_activation",
        "addmv",
        "mv",
        "dot",
        "vdot",
        "addr",
        "_int_mm",
        "linear",
    }
)


_CONV_OPS = frozenset(
    {
        "convolution",
        "convolution_backward",
        "_convolution",
        "cudnn_convolution",
        "cudnn_convolution_transpose",
        "mkldnn_convolution",
    }
)


# addmm with a bias vector runs on cuBLASLt (Blas.cpp's useLtInterface): nn.Linear on 2-D and contiguous 3-D input
_BIAS_OPS = frozenset({"addmm", "_addmm_activation"})


_LT_DTYPES = ("float64", "float32", "float16", "bfloat16")


CUDNN_WORKSPACE_CAP = 128 << 20  # headroom estimate per conv call (cuDNN picks algorithms by workspace size)


# The kinds of op a trace saw whose CUDA kernels (cuDNN's) the trace models least well: a GPU run measures the
# trace's error per kind (analysis.report.gpu_accuracy). An fp32 convolution runs cuDNN's TF32 engines by default.
FP32_CONVOLUTION = "fp32 convolution"
CONVOLUTION = "convolution"  # in a lower precision (bf16, fp16)
LSTM = "LSTM"  # the CPU's fused LSTM (mkldnn_rnn_layer) stands for cuDNN's RNN
_LSTM_OPS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})


@dataclass
class Marker:
    index: int  # events before it
    kind: str  # "cublas" | "cublaslt" | "cudnn" | "empty_cache" (the user's step frees the cache)
    phase: str
    nbytes: int = 0


@functools.lru_cache(maxsize=None)
def trace_tracker_class() -> type:
    """analysis.allocator.storage's tracker, plus what the allocator model needs: where cuBLAS and cuDNN would allocate
    their workspaces, autocast's cached weight copies, and the workspace fake RNN kernels leave out."""
    import torch
    from torch.utils._pytree import tree_leaves

    device_of = torch.ops.prim.device.default

    class TraceTracker(tracker_class()):
        def __init__(self, cast_cache: bool = False, fake: bool = False, size_hints: Any = None) -> None:
            super().__init__()
            self._fake = fake
            self._cast_cache = cast_cache
            self.markers: List[Marker] = []
            # a fake trace answers value-dependent sizes by rule or the user's hint (analysis.fake.size_hints)
            self.size_hints = SizeHints(size_hints) if fake else None
            self.logits: Any = None  # a LogitsWatch (analysis.trace.llm_facts) for a model with an output vocabulary
            # the autocast a step of the user's own entered (analysis.trace.user_step.StepAutocast), None: none seen
            self.step_autocast: Any = None
            # told the storages an autocast cache clear freed (analysis.trace.replicate frees its replayed casts then)
            self.on_cache_clear: Optional[Callable[[Set[int]], None]] = None
            self.op_kinds: Set[str] = set()  # FP32_CONVOLUTION, CONVOLUTION, LSTM: those the step ran

        def cache_cleared(self, start: int) -> None:
            """The frees since event `start` were autocast's cache clear: they go in the order the casts were made
            (the cache frees them in its hash map's, by address, which differs from one trace to the next)."""
            freed = {sid for _, sid in self.events[start:]}
            if self.on_cache_clear is not None:
                self.on_cache_clear(freed)  # more frees, of storages made before the clear began
            tail = self.events[start:]
            if any(event != "free" for event, _ in tail):
                return  # something else ran during the clear: its order is kept
            tail.sort(key=lambda e: e[1])
            self.events[start:] = tail
            for k, (_, sid) in enumerate(tail):
                self.records[sid].free_index = start + k

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is device_of:  # two thirds of a fake trace's calls (the autograd engine asks every tensor's)
                return func(*args, **(kwargs or {}))  # a device: nothing to track
            if self.interrupts is not None and func.namespace != "prim":  # prim: metadata C++ asks, no exception
                self.interrupts.raise_if_pending()  # an operator's exception reaches the trace's caller
            if self._fake and _in_place_foreach(func) and _all_fake(args):
                return None  # no storage made or freed: FakeTensorMode's per-tensor kernels would only cost time
            if self.size_hints is None:
                out = func(*args, **(kwargs or {}))
            else:  # nonzero, unique, boolean masks...: a hinted size instead of FakeTensorMode's refusal
                out = self.size_hints.dispatch(func, args, kwargs or {})
            name = func.overloadpacket.__name__
            if self._fake and name == "mkldnn_rnn_layer":
                out = with_rnn_workspace(args, out)
            role = None
            if self._cast_cache and name == "_to_copy" and self.phase == "forward" and args:
                if self.role_of(args[0]) == "parameter":
                    role = "autocast_cache"  # autocast's cached low-precision copy of a weight
            self.track_outputs(out, role)
            if self.logits is not None:
                self.logits.see(name, args, out, self, kwargs)
            if name in _MATMUL_OPS:
                kind = "cublaslt" if name in _BIAS_OPS and _runs_on_cublaslt(args, kwargs or {}, out) else "cublas"
                self.markers.append(Marker(len(self.events), kind, self.phase))
            elif name in _CONV_OPS:
                tensors = [t for t in tree_leaves((args, out)) if isinstance(t, torch.Tensor)]
                self.markers.append(
                    Marker(len(self.events), "cudnn", self.phase, max((t.nbytes for t in tensors), default=0))
                )
                if tensors:  # the input (forward) or the output's gradient (backward) sets the kernels' precision
                    self.op_kinds.add(FP32_CONVOLUTION if tensors[0].dtype == torch.float32 else CONVOLUTION)
            elif name in _LSTM_OPS:
                self.op_kinds.add(LSTM)
            return out

    return TraceTracker


def ours_to_freeze() -> bool:
    """Whether a trace freezes what exists before it (no garbage of it: the collection at the trace's end then walks
    the trace's objects only) and thaws it after. gc.unfreeze() thaws every frozen object, so where the process froze
    objects of its own (gc.freeze() in a user's or a server's start-up) the trace freezes nothing and their freeze
    stays as it was."""
    return gc.get_freeze_count() == 0


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """What exists now frozen while the block runs (where ours_to_freeze): the collections its many new objects set
    off walk those objects only, not the model, the libraries and the traced streams a search keeps."""
    freezes = ours_to_freeze()
    try:
        if freezes:
            gc.freeze()
        yield
    finally:
        if freezes:
            with interrupts_held():  # a Ctrl-C meanwhile waits: nothing is left frozen
                gc.unfreeze()


@contextlib.contextmanager
def ordered_cache_clears(tracker: Any) -> Iterator[None]:
    """torch.clear_autocast_cache, which autocast's outermost exit calls, with the tracker told what it freed
    (TraceTracker.cache_cleared); put back on exit."""
    import torch

    clear = torch.clear_autocast_cache

    def ordered() -> None:
        start = len(tracker.events)
        clear()
        tracker.cache_cleared(start)

    try:
        torch.clear_autocast_cache = ordered
        yield
    finally:
        torch.clear_autocast_cache = clear


@functools.lru_cache(maxsize=None)
def _in_place_foreach(func: Any) -> bool:
    """An optimizer's in-place foreach op (`_foreach_addcdiv_`, `_foreach_lerp_`...): it returns nothing and writes
    into the lists it is given, a third of a fake AdamW step's time over hundreds of parameters."""
    name = func.overloadpacket.__name__
    return name.startswith("_foreach_") and name.endswith("_") and not func._schema.returns


def _all_fake(args: Any) -> bool:
    """Only fake tensors without a value: FakeTensorMode keeps a scalar's (the optimizer's `step` counters, whose
    values it reads) by running each op on it."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_leaves

    return all(
        isinstance(t, FakeTensor) and t.constant is None for t in tree_leaves(args) if isinstance(t, torch.Tensor)
    )


def _runs_on_cublaslt(args: Sequence[Any], kwargs: Dict[str, Any], out: Any) -> bool:
    """Blas.cpp's useLtInterface for CUDA 12.1+: beta 1, a contiguous 1-D bias as wide as the product, a
    contiguous 2-D result, a floating dtype, and a second matrix with more than one row and column."""
    if len(args) < 3 or kwargs.get("beta", args[3] if len(args) > 3 else 1) != 1:
        return False
    bias, mat2 = args[0], args[2]
    try:
        return (
            bias.dim() == 1
            and bias.is_contiguous()
            and out.dim() == 2
            and out.is_contiguous()
            and mat2.dim() == 2
            and bias.shape[0] == mat2.shape[1]
            and mat2.shape[0] > 1
            and mat2.shape[1] > 1
            and str(bias.dtype).replace("torch.", "") in _LT_DTYPES
        )
    except (AttributeError, TypeError):  # not tensors: the op's own checks say what is wrong
        return False
