"""The traced engine: run two training steps and follow every tensor storage's life, by category.

With `fake=True` the step runs on a copy of the model whose parameters, buffers and optimizer state are
FakeTensors on the CPU (shapes, dtypes and strides, no memory), so a model of any size traces in seconds
without a GPU. With `fake=False` the same loop runs on a real deep copy with real CPU tensors: that is what
the tests compare the fake trace against.

The storage tracker (analysis.storage) sees every op's outputs and each storage's free. Roles that are only known
later (a backward output that becomes `.grad`, a zeros_like that becomes optimizer state) are assigned once
known and apply to the storage's whole life. The event stream is then replayed through the caching-allocator
model, with cuBLAS and cuDNN workspaces inserted where CUDA would allocate them.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import contextlib
import warnings
import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis import autocast_policy
from gpumem_kernel.analysis.allocator import AllocatorResult, CachingAllocatorModel
from gpumem_kernel.analysis.storage import Record, tracker_class

CATEGORIES = (
    "parameter",
    "buffer",
    "gradient",
    "optimizer_state",
    "input",
    "activation",
    "autocast_cache",
    "temporary",
)
PHASES = ("input", "forward", "backward", "optimizer", "zero_grad")

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


class TraceError(ValueError):
    """The model cannot be traced (data-dependent control flow, lazy parameters, ...): one line."""


# --- the tracker -----------------------------------------------------------------------------------


@dataclass
class Marker:
    index: int  # events before it
    kind: str  # "cublas" | "cublaslt" | "cudnn"
    phase: str
    nbytes: int = 0


@functools.lru_cache(maxsize=None)
def _tracker_class() -> type:
    """analysis.storage's tracker, plus what the allocator model needs: where cuBLAS and cuDNN would allocate
    their workspaces, autocast's cached weight copies, and the workspace fake RNN kernels leave out."""
    import torch
    from torch.utils._pytree import tree_leaves

    class TraceTracker(tracker_class()):
        def __init__(self, cast_cache: bool = False, fake: bool = False) -> None:
            super().__init__()
            self._fake = fake
            self._cast_cache = cast_cache
            self.markers: List[Marker] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if self._fake and name == "mkldnn_rnn_layer":
                out = _with_rnn_workspace(args, out)
            role = None
            if self._cast_cache and name == "_to_copy" and self.phase == "forward" and args:
                if self.role_of(args[0]) == "parameter":
                    role = "autocast_cache"  # autocast's cached low-precision copy of a weight
            self.track_outputs(out, role)
            if name in _MATMUL_OPS:
                kind = "cublaslt" if name in _BIAS_OPS and _runs_on_cublaslt(args, kwargs or {}, out) else "cublas"
                self.markers.append(Marker(len(self.events), kind, self.phase))
            elif name in _CONV_OPS:
                sizes = [t.nbytes for t in tree_leaves((args, out)) if isinstance(t, torch.Tensor)]
                self.markers.append(Marker(len(self.events), "cudnn", self.phase, max(sizes, default=0)))
            return out

    return TraceTracker


class _Rerouted(autocast_policy.Counter):
    attention = 0
    dropout = 0


@contextlib.contextmanager
def cuda_kernels() -> Iterator[_Rerouted]:
    """For the length of a trace, the CPU runs functions as CUDA does, where the two keep different tensors for
    backward.

    Attention with dropout: CUDA runs scaled_dot_product_attention on a fused kernel (flash for fp16/bf16,
    memory-efficient for fp32 or with a mask), which keeps the output and a row of log-sum-exps and regenerates
    the dropout mask from a seed. The CPU takes the math path and keeps the L x L weights and mask: an error
    quadratic in the sequence. Without dropout the CPU takes its own flash kernel, whose memory has CUDA's shape,
    so attention runs here without its dropout (a trace's values never matter). nn.MultiheadAttention with
    need_weights=False calls the same function; with need_weights=True it takes the math path on CUDA too.

    Dropout: CUDA's fused kernel (native_dropout) keeps a 1-byte mask; the CPU's keeps a mask of the input's
    dtype (4 bytes in fp32). The CPU has native_dropout too. In-place dropout is unfused on CUDA as well.

    Autocast: CUDA's policy, where CPU autocast's keeps other tensors (analysis.autocast_policy: normalisation,
    softmax and reductions, element-wise math and distances in fp32; cross-entropy's cast after log_softmax;
    promotion of mixed arguments).

    The functions are swapped on their Python owners (torch.nn.functional, torch, torch.Tensor), not intercepted by
    a TorchFunctionMode: activation checkpointing recomputes the forward inside backward, where function modes are
    not active."""
    import torch
    import torch.nn.functional as F

    fused = (torch.float16, torch.bfloat16, torch.float32)
    attention, dropout = F.scaled_dot_product_attention, F.dropout
    seen = _Rerouted()

    @functools.wraps(attention)
    def fused_attention(*args: Any, **kwargs: Any) -> Any:
        if args and getattr(args[0], "dtype", None) in fused:
            if len(args) > 4 and args[4]:
                args = args[:4] + (0.0,) + args[5:]
                seen.attention += 1
            elif kwargs.get("dropout_p"):
                kwargs = {**kwargs, "dropout_p": 0.0}
                seen.attention += 1
        return attention(*args, **kwargs)

    @functools.wraps(dropout)
    def fused_dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if training and not inplace and 0 < p < 1 and isinstance(input, torch.Tensor) and input.numel() > 0:
            seen.dropout += 1
            return torch.native_dropout(input, p, True)[0]
        return dropout(input, p, training, inplace)

    swaps = [(F, "scaled_dot_product_attention", fused_attention), (F, "dropout", fused_dropout)]
    with autocast_policy.swapped(swaps + autocast_policy.swaps(seen)):
        yield seen


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


def _with_rnn_workspace(args: Sequence[Any], out: Any) -> Any:
    """The meta kernel of `mkldnn_rnn_layer` returns an empty workspace; the real kernel keeps one for backward
    whose size depends on this CPU's oneDNN (bf16 kernels where the CPU has them, fp32 elsewhere). Ask the real
    kernel (rnn_workspace_bytes)."""
    import torch

    output, hy, cy, workspace = out
    if workspace.numel() > 0:
        return out
    size = rnn_workspace_bytes(tuple(_shape_key(a) for a in args))
    return output, hy, cy, torch.empty(size, dtype=torch.uint8, device=workspace.device)


def _shape_key(arg: Any) -> Any:
    import torch

    if isinstance(arg, torch.Tensor):
        return ("tensor", tuple(arg.shape), arg.dtype)
    if isinstance(arg, list):
        return ("list", tuple(arg))
    return arg


# A real call at the layer's own shape below this many multiply-adds takes a few milliseconds: its workspace is
# the exact figure. Above it, four small calls and the workspace's shape (below) give it within a few pages.
RNN_EXACT_MACS = 100_000_000
_PAGE = 4096


@functools.lru_cache(maxsize=64)
def rnn_workspace_bytes(key: Tuple[Any, ...]) -> int:
    """The bytes oneDNN's RNN layer keeps for backward, for `mkldnn_rnn_layer`'s arguments given as shape keys.

    oneDNN's workspace is a row of page-aligned parts (gates, layer and iteration states, c states ...), each
    T or T + 1 time steps of B rows of a 64-byte-aligned width, plus parts that depend on neither. At batches 64
    and 128 every step-dependent part fills whole pages, so four calls there (steps 1 and 2) give the affine
    form const + B * (p * T + q) exactly; at any other batch each part rounds up to its page, so the figure is
    that form rounded up, at most a page per part low. A small layer is measured at its own shape instead."""
    # args: input, w0..w3, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
    # bidirectional, batch_first, train. The input arrives time-major whatever batch_first says.
    steps, batch = key[0][1][0], key[0][1][1]
    gates, inputs = key[1][1][0], key[1][1][1]
    hidden = key[2][1][1]
    if steps * batch * gates * (inputs + hidden) <= RNN_EXACT_MACS:
        return _measured_rnn_workspace(key, steps, batch)
    at = {(t, b): _measured_rnn_workspace(key, t, b) for t in (1, 2) for b in (64, 128)}
    per_row = {t: (at[t, 128] - at[t, 64]) / 64 for t in (1, 2)}
    const = 2 * at[1, 64] - at[1, 128]
    row = per_row[1] + (per_row[2] - per_row[1]) * (steps - 1)
    return int(-(-round(const + batch * row) // _PAGE) * _PAGE)


def _measured_rnn_workspace(key: Tuple[Any, ...], steps: int, batch: int) -> int:
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def real(k: Any, index: int) -> Any:
        if isinstance(k, tuple) and k and k[0] == "tensor":
            shape = list(k[1])
            if index == 0:
                shape[0], shape[1] = steps, batch
            elif index in (5, 6) and len(shape) == 2:  # hx, cx: (B, H)
                shape[0] = batch
            return torch.zeros(shape, dtype=k[2])
        if isinstance(k, tuple) and k and k[0] == "list":
            return list(k[1])
        return k

    with unset_fake_temporarily():  # not under no_grad: the kernel then skips the workspace
        out = torch.ops.aten.mkldnn_rnn_layer.default(*[real(k, i) for i, k in enumerate(key)])
    return int(out[3].untyped_storage().nbytes())


# --- copying the model and the optimizer ----------------------------------------------------------


def _tensor_attributes(model: Any) -> List[Tuple[Any, str, Any]]:
    """Tensors kept as plain module attributes (not parameters or buffers), e.g. cached masks."""
    import torch

    found = []
    for module in model.modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                found.append((module, name, value))
    return found


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
                count = max(st.nbytes() // max(t.element_size(), 1), t.storage_offset() + _extent(t))
                base = torch.empty(count, dtype=t.dtype, device="cpu")
                if entry is None:
                    self._storages[id(st)] = (st, base)
            else:
                base = entry[1]
            out = base.as_strided(t.shape, t.stride(), t.storage_offset())
        elif self.device is not None:
            out = t.detach().to(self.device, copy=True)  # one copy, straight onto the device
        else:
            out = t.detach().clone()
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out

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
    tensors += [value for _, _, value in _tensor_attributes(model)]
    for t in tensors:
        if id(t) not in memo:
            stand_in = copier.copy(t)
            memo[id(t)] = stand_in
            mapping[id(t)] = stand_in
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
        new = cls(groups)
    except TypeError:
        try:
            new = cls(groups, **{k: v for k, v in optimizer.defaults.items()})
        except Exception as exc:
            raise TraceError(f"cannot re-create optimizer {cls.__name__} ({exc})") from None
    for p, state in optimizer.state.items():
        if id(p) not in mapping:
            continue
        copied = {}
        for key, value in state.items():
            if _is_tensor(value):
                keep_value = value.numel() == 1 and (key == "step" or copier.fake)
                copied[key] = copier.scalar(value) if keep_value else copier.copy(value)
            else:
                copied[key] = copy.deepcopy(value)
        new.state[mapping[id(p)]] = copied
    return new


def _is_tensor(value: Any) -> bool:
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
    raise ValueError(f"unknown optimizer {kind!r}; use adamw, adam, sgd, sgd-momentum or an optimizer object")


def optimizer_uses_device_step(optimizer: Any) -> bool:
    """Fused and capturable optimizers keep `step` on the device; the others keep a CPU scalar."""
    return any(group.get("fused") or group.get("capturable") for group in optimizer.param_groups)


# --- the training loop -------------------------------------------------------------------------------


def feed(model: Any, batch: Any) -> Any:
    """tensor -> model(x); tuple/list -> model(*xs); dict -> model(**xs)."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def model_loss(output: Any) -> Any:
    """The loss the model computed itself (HF `ModelOutput.loss`, `output["loss"]`; set when the batch has
    labels), or None. A training loop backpropagates that one, so the trace must too."""
    import torch

    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.is_floating_point() and loss.requires_grad and loss.numel() == 1:
        return loss if loss.dim() == 0 else loss.reshape(())
    return None


def default_loss(output: Any, batch: Any) -> Any:
    """The model's own loss if it returns one; else the sum over the output's floating tensors that need grad of
    mean(x.float()**2), which touches every output."""
    import torch
    from torch.utils._pytree import tree_leaves

    own = model_loss(output)
    if own is not None:
        return own
    leaves = [
        t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
    ]
    if not leaves:
        raise TraceError("the model's output has no floating tensor that requires grad: pass loss=")
    total = leaves[0].float().pow(2).mean()
    for t in leaves[1:]:
        total = total + t.float().pow(2).mean()
    return total


def train_steps(
    model: Any,
    optimizer: Any,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[Any, Any], Any],
    *,
    steps: int,
    micro: int,
    grad_accum: int,
    autocast: Callable[[], Any],
    tracker: Any,
    scaler: Any = None,
    on_step: Optional[Callable[[int], None]] = None,
) -> None:
    """The loop users write: new batch, forward + loss under autocast, backward, step, zero_grad(None).

    `out` and `loss` stay bound until the next forward replaces them, as in a user's loop.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    out = loss = batch = None
    for step in range(1, steps + 1):
        if on_step is not None:
            on_step(step)
        for m in range(micro):
            with tracker.span("input", step, m):
                batch = make_batch()
                tracker.register(batch, "input")
            with tracker.span("forward", step, m):
                with autocast():
                    out = feed(model, batch)
                    loss = loss_fn(out, batch)
                if grad_accum > 1:
                    loss = loss / grad_accum
            with tracker.span("backward", step, m):
                (scaler.scale(loss) if scaler is not None else loss).backward()
                for p in params:
                    if p.grad is not None:
                        tracker.register(p.grad, "gradient")
        with tracker.span("optimizer", step, 0):
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            device_step = optimizer_uses_device_step(optimizer)
            for state in optimizer.state.values():
                for key, value in state.items():
                    if _is_tensor(value):
                        tracker.register(value, "optimizer_state", host=key == "step" and not device_step)
        with tracker.span("zero_grad", step, 0):
            optimizer.zero_grad(set_to_none=True)
    del out, loss, batch


def eval_steps(
    model: Any, make_batch: Callable[[], Any], *, steps: int, autocast: Callable[[], Any], tracker: Any
) -> None:
    """The evaluation loop users write: model.eval(), then under torch.no_grad() a new batch and a forward
    per step; no loss, backward or optimizer step. `out` stays bound until the next forward replaces it."""
    import torch

    model.eval()
    out = batch = None
    with torch.no_grad():
        for step in range(1, steps + 1):
            with tracker.span("input", step, 0):
                batch = make_batch()
                tracker.register(batch, "input")
            with tracker.span("forward", step, 0):
                with autocast():
                    out = feed(model, batch)
    del out, batch


# --- running a trace ------------------------------------------------------------------------------------


@dataclass
class TracePlan:
    """Everything a trace needs besides the batch size; built once by analysis.analyze."""

    model: Any
    optimizer: Any  # str kind or the user's optimizer
    make_batch: Callable[[int, bool], Any]  # (batch size, fake) -> batch
    loss_fn: Callable[[Any, Any], Any]
    amp: Optional[str] = None  # "bf16" | "fp16": traced as bf16 on CPU
    grad_accum: int = 1
    checkpointing: bool = False
    steps: int = 2
    # gpus.blas_workspaces gives all three for the device and torch version (the defaults: 8 MiB, unified Lt)
    cublas_bytes: int = 8_519_680
    cublaslt_bytes: int = 0
    cublaslt_call_bytes: int = 0
    cudnn: bool = True
    expandable_segments: bool = False  # the allocator configuration's (allocator.settings_from_env)
    # called at each storage birth (the timeline's frame capture); the trace then keeps its events (`timeline`)
    stack_hook: Optional[Callable[[], Any]] = None
    # the evaluation step instead (eval_steps): model.eval(), no_grad, forward only, no optimizer
    evaluation: bool = False


@dataclass
class TraceResult:
    batch_size: int
    fake: bool
    peak_live: int  # max live storage bytes in the last step (all storages, as the CPU sees them)
    peak_phase: str
    step_peaks: List[int]
    phase_peaks: Dict[str, int]
    breakdown: Dict[str, int]  # live bytes by category at the last step's peak
    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int  # device-resident state
    optimizer_host: int  # `step` scalars that stay on the host with CUDA
    optimizer_transient: int  # extra bytes at the step's peak over its start (foreach temporaries)
    activations: int  # forward outputs of the last step still alive when its forward ended
    autocast_cache: int
    input: int
    device: AllocatorResult  # the replay through the caching-allocator model, workspaces included
    cublas_bytes: int
    cudnn_peak_bytes: int
    dropped_hooks: int = 0
    loss_source: str = "custom"  # model (output.loss) | default (mean of squares) | custom (the caller's)
    notes: List[str] = field(default_factory=list)
    timeline: Optional["TraceEvents"] = None  # only when the plan has a stack_hook


@dataclass
class DeviceEvent:
    """One event of the device replay: a storage's (or a workspace's) malloc or free in the allocator model."""

    kind: str  # "alloc" | "free"
    handle: Any  # a Record's sid, or ("cublas" | "cublaslt", thread) / ("cublaslt" | "cudnn", n)
    nbytes: int = 0  # requested (alloc)
    size: int = 0  # the block the model handed out (alloc)
    address: int = 0
    reserved: int = 0  # the model's reserved bytes after the event


@dataclass
class TraceEvents:
    """What a timeline needs of a trace: the records (with their stacks), the device events in order, and each
    record's category as the analysis counts it."""

    records: List[Record]
    device: List[DeviceEvent]
    categories: Dict[int, str]  # sid -> CATEGORIES entry


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def repeated_blocks(model: Any) -> List[Tuple[str, Any]]:
    """(name, module) of the blocks a user means by "checkpoint the model": children of ModuleList/Sequential
    containers, grouped by class. The group that wins is repeated, made of composite blocks rather than single
    layers or containers, and covers the most parameters: a ResNet's bottlenecks across all four stages, a
    transformer's layers. Blocks nested inside another of the group are left to it."""
    import torch

    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    groups: Dict[type, Dict[int, Any]] = {}
    for container in model.modules():
        if isinstance(container, containers):
            for child in container.children():
                if _has_parameters(child):
                    groups.setdefault(type(child), {})[id(child)] = child
    if not groups:
        return []

    def score(item: Tuple[type, Dict[int, Any]]) -> Tuple[bool, bool, bool, int, int]:
        kind, members = item
        blocks = list(members.values())
        composite = any(True for b in blocks for _ in b.children())
        covered = {id(p): p.numel() for b in blocks for p in b.parameters()}
        return len(blocks) > 1, composite, not issubclass(kind, containers), sum(covered.values()), len(blocks)

    members = max(groups.items(), key=score)[1]
    nested = {id(m) for block in members.values() for m in block.modules() if m is not block}
    return [(name, m) for name, m in model.named_modules() if id(m) in members and id(m) not in nested]


def _name_span(names: Sequence[str]) -> str:
    """['layer1.0', 'layer1.1', 'layer2.0'] -> 'layer1.0-1, layer2.0': consecutive indices of one parent."""
    runs: List[List[str]] = []  # [parent, first, last]
    for name in names:
        parent, _, index = name.rpartition(".")
        run = runs[-1] if runs else None
        if run and run[0] == parent and index.isdigit() and run[2].isdigit() and int(index) == int(run[2]) + 1:
            run[2] = index
        else:
            runs.append([parent, index, index])
    return ", ".join((f"{p}." if p else "") + (a if a == b else f"{a}-{b}") for p, a, b in runs)


def checkpoint_blocks(model: Any) -> List[str]:
    """Wrap every repeated block of the (copied) model in non-reentrant activation checkpointing, and turn a
    KV cache off as Hugging Face's gradient checkpointing does; returns what was done, for the report."""
    from torch.utils.checkpoint import checkpoint

    blocks = repeated_blocks(model)
    if not blocks:
        return ["checkpointing: no ModuleList/Sequential of blocks found; traced without it"]
    for _, block in blocks:
        inner = block.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        block.forward = forward
    kind = type(blocks[0][1]).__name__  # one class: repeated_blocks picks one group
    notes = [f"checkpointing: wrapped {len(blocks)} {kind} blocks ({_name_span([n for n, _ in blocks])})"]
    if _disable_kv_cache(model):
        notes.append(
            "checkpointing: use_cache turned off on the copy, as Hugging Face's gradient checkpointing "
            "does (no KV cache kept through backward)"
        )
    return notes


def _disable_kv_cache(model: Any) -> bool:
    """config.use_cache = False on the copy's configs (a deep copy: the user's config keeps its value)."""
    changed = False
    for module in model.modules():
        config = getattr(module, "config", None)
        if getattr(config, "use_cache", None) is True:
            config.use_cache = False
            changed = True
    return changed


def _recording_loss(loss_fn: Callable[[Any, Any], Any], sources: List[str]) -> Callable[[Any, Any], Any]:
    """The plan's loss, noting whether the default loss found the model's own (for the report)."""
    if loss_fn is not default_loss:
        return loss_fn

    def loss(output: Any, batch: Any) -> Any:
        if not sources:
            sources.append("model" if model_loss(output) is not None else "default")
        return default_loss(output, batch)

    return loss


def autocast_factory(amp: Optional[str], device_type: str) -> Callable[[], Any]:
    import torch

    if amp is None:
        return contextlib.nullcontext
    if device_type == "cpu":
        dtype = torch.bfloat16  # CPU autocast: fp16 traced with bf16's equal 2-byte width
    else:
        dtype = torch.float16 if amp == "fp16" else torch.bfloat16
    return functools.partial(torch.autocast, device_type, dtype=dtype)


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """FakeTensorMode logs a traceback at ERROR before re-raising a failed meta kernel; we report the error
    as one line instead, so that log stays silent during a trace."""
    import logging

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def run_trace(plan: TracePlan, batch_size: int, *, fake: bool = True) -> TraceResult:
    """Two training steps at `batch_size` on a copy (fake or real CPU); the user's objects stay untouched.

    A CPU whose oneDNN has no bf16 RNN kernel cannot trace an LSTM under autocast: the step is traced again
    without oneDNN, where CPU autocast leaves RNN layers in fp32 (an upper bound for them, and said so)."""

    try:
        return _run_trace(plan, batch_size, fake=fake)
    except TraceError as exc:
        if plan.amp is None or "primitive descriptor" not in str(exc):
            raise
    with _without_onednn():
        result = _run_trace(plan, batch_size, fake=fake)
    result.notes.append("this CPU's oneDNN has no bf16 RNN kernel: RNN layers traced in fp32 (an upper bound for them)")
    return result


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    """torch.backends.mkldnn.flags(enabled=False), without the note its entry and exit print (on TF32 for
    Intel GPUs: nothing the user did), and only that note: the trace's own warnings still reach the user."""
    import torch

    def quietly(step: Callable[[], Any]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            step()

    flags = torch.backends.mkldnn.flags(enabled=False)
    quietly(flags.__enter__)
    try:
        yield
    finally:
        quietly(lambda: flags.__exit__(None, None, None))


def _run_trace(plan: TracePlan, batch_size: int, *, fake: bool) -> TraceResult:
    import torch

    rng = torch.get_rng_state()
    tracker = _tracker_class()(cast_cache=plan.amp is not None, fake=fake)
    tracker.stack_hook = plan.stack_hook
    notes: List[str] = []
    loss_sources: List[str] = []
    try:
        mode: Any = contextlib.nullcontext()
        if fake:
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode, _quiet_fake_tensor_log():
            copier = TensorCopier(fake=fake)
            model, mapping, dropped = copy_model(plan.model, copier)
            if plan.checkpointing and not plan.evaluation:
                notes += checkpoint_blocks(model)
            if plan.evaluation:
                optimizer = None
            elif isinstance(plan.optimizer, str):
                optimizer = make_optimizer(plan.optimizer, [p for p in model.parameters() if p.requires_grad])
            else:
                optimizer = copy_optimizer(plan.optimizer, mapping, copier)
            loss_fn = _recording_loss(plan.loss_fn, loss_sources)
            with cuda_kernels() as rerouted, tracker:
                _register_model(tracker, model, optimizer)
                try:
                    if plan.evaluation:
                        eval_steps(
                            model,
                            lambda: plan.make_batch(batch_size, fake),
                            steps=plan.steps,
                            autocast=autocast_factory(plan.amp, "cpu"),
                            tracker=tracker,
                        )
                    else:
                        train_steps(
                            model,
                            optimizer,
                            lambda: plan.make_batch(batch_size, fake),
                            loss_fn,
                            steps=plan.steps,
                            micro=min(plan.grad_accum, 2),
                            grad_accum=plan.grad_accum,
                            autocast=autocast_factory(plan.amp, "cpu"),
                            tracker=tracker,
                        )
                except TraceError:
                    raise
                except Exception as exc:
                    raise TraceError(_explain(exc)) from None
                del model, optimizer, mapping, copier
        if rerouted.attention:
            notes.append(
                "attention with dropout: traced as CUDA's fused kernels keep it (no L x L weights or mask; the CPU's "
                "math path would keep them)"
            )
        result = summarize(tracker, batch_size, fake, plan)
        result.dropped_hooks = dropped
        result.loss_source = loss_sources[0] if loss_sources else "custom"
        if result.loss_source == "model" and not plan.evaluation:
            notes.append(
                "loss: the model's own loss (output.loss, from the batch's labels), as a training loop "
                "backpropagates it; pass loss= for another"
            )
        result.notes += notes
        return result
    finally:
        tracker.close()
        torch.set_rng_state(rng)


def _register_model(tracker: Any, model: Any, optimizer: Any) -> None:
    for p in model.parameters():
        tracker.register(p, "parameter")
    for b in model.buffers():
        tracker.register(b, "buffer")
    for _, _, value in _tensor_attributes(model):
        tracker.register(value, "buffer")
    if optimizer is None:  # the evaluation step
        return
    device_step = optimizer_uses_device_step(optimizer)
    for state in optimizer.state.values():
        for key, value in state.items():
            if _is_tensor(value):
                tracker.register(value, "optimizer_state", host=key == "step" and not device_step)


def _explain(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = type(exc).__name__
    if "DataDependent" in name or "data-dependent" in text or "DynamicOutputShape" in name:
        return (
            "the model's forward depends on tensor values (e.g. .item(), masking, nonzero), which the "
            "traced engine cannot follow: run on a GPU for a measured analysis"
        )
    return f"training step failed while tracing: {name}: {text[:200]}"


# --- reading a trace -------------------------------------------------------------------------------------


def _category(record: Record, forward_end: Dict[Tuple[int, int], int]) -> str:
    if record.role is not None:
        return record.role
    if record.phase == "forward":
        end = forward_end.get((record.step, record.micro))
        if end is not None and _alive(record, end):
            return "activation"
    return "temporary"


def _alive(record: Record, index: int) -> bool:
    """Alive just after event `index - 1`, i.e. at stream position `index`."""
    return record.alloc_index < index and (record.free_index is None or record.free_index >= index)


def summarize(tracker: Any, batch_size: int, fake: bool, plan: TracePlan) -> TraceResult:
    records: List[Record] = tracker.records
    spans = tracker.spans
    last = plan.steps
    forward_end = {(s, m): end for (s, m, phase), (_, end) in spans.items() if phase == "forward"}

    # live bytes along the stream; per-step and per-phase peaks of the last step
    step_range = {
        s: (min(v[0] for k, v in spans.items() if k[0] == s), max(v[1] for k, v in spans.items() if k[0] == s))
        for s in range(1, last + 1)
    }
    phase_of = _phase_index(spans, last)
    live = 0
    step_peaks = [0] * (last + 1)
    phase_peaks: Dict[str, int] = {}
    peak_index, peak_value = 0, -1
    first_last = step_range[last][0]
    live_at: List[int] = []
    for index, (kind, sid) in enumerate(tracker.events):
        live += records[sid].nbytes if kind == "alloc" else -records[sid].nbytes
        live_at.append(live)
        position = index + 1
        for s, (start, end) in step_range.items():
            if start < position <= end:
                step_peaks[s] = max(step_peaks[s], live)
        if position > first_last and position <= step_range[last][1]:
            phase = phase_of.get(index, "other")
            phase_peaks[phase] = max(phase_peaks.get(phase, 0), live)
            if live > peak_value:
                peak_value, peak_index = live, position
    if peak_value < 0:  # a step without any event: the live set never changed
        peak_index, peak_value = first_last, live_at[first_last - 1] if first_last else 0

    breakdown = {c: 0 for c in CATEGORIES}
    for record in records:
        if _alive(record, peak_index):
            breakdown[_category(record, forward_end)] += record.nbytes

    def alive_bytes(index: int, role: str, device_only: bool = True) -> int:
        return sum(r.nbytes for r in records if r.role == role and _alive(r, index) and not (device_only and r.host))

    end = step_range[last][1]
    micro_last = 0 if plan.evaluation else min(plan.grad_accum, 2) - 1
    opt_start, opt_end = spans.get((last, 0, "optimizer"), (end, end))  # none in the evaluation step
    fwd_start, fwd_end = spans[(last, micro_last, "forward")]
    activations = sum(
        r.nbytes
        for r in records
        if r.phase == "forward" and r.step == last and r.micro == micro_last and r.role is None and _alive(r, fwd_end)
    )
    cast = sum(r.nbytes for r in records if r.role == "autocast_cache" and r.step == last and _alive(r, fwd_end))
    opt_live_start = live_at[opt_start - 1] if opt_start else 0
    log: Optional[List[DeviceEvent]] = [] if plan.stack_hook is not None else None
    device, cublas, cudnn = replay_device(tracker, plan, log)
    timeline = None
    if log is not None:
        timeline = TraceEvents(records, log, {r.sid: _category(r, forward_end) for r in records})
    return TraceResult(
        batch_size=batch_size,
        fake=fake,
        peak_live=peak_value,
        peak_phase=phase_of.get(peak_index - 1, "other"),
        step_peaks=step_peaks[1:],
        phase_peaks=phase_peaks,
        breakdown=breakdown,
        parameters=alive_bytes(end, "parameter"),
        buffers=alive_bytes(end, "buffer"),
        gradients=alive_bytes(opt_start, "gradient"),
        optimizer_state=alive_bytes(end, "optimizer_state"),
        optimizer_host=sum(r.nbytes for r in records if r.role == "optimizer_state" and r.host and _alive(r, end)),
        optimizer_transient=max(0, phase_peaks.get("optimizer", 0) - opt_live_start),
        activations=activations,
        autocast_cache=cast,
        input=sum(r.nbytes for r in records if r.role == "input" and r.step == last and _alive(r, fwd_start)),
        device=device,
        cublas_bytes=cublas,
        cudnn_peak_bytes=cudnn,
        timeline=timeline,
    )


def _phase_index(spans: Dict[Tuple[int, int, str], Tuple[int, int]], last: int) -> Dict[int, str]:
    """event index -> phase name, for the last step."""
    result: Dict[int, str] = {}
    for (step, _, phase), (start, end) in spans.items():
        if step == last:
            for index in range(start, end):
                result[index] = phase
    return result


def replay_device(
    tracker: Any, plan: TracePlan, log: Optional[List[DeviceEvent]] = None
) -> Tuple[AllocatorResult, int, int]:
    """Replay the device-side events through the allocator model, adding the cuBLAS workspace (one per
    thread that runs a matmul: the forward thread and the autograd engine's device thread), cuBLASLt's for an
    addmm with a bias (kept per thread, or around each call, by torch version) and a cuDNN workspace around
    each convolution (an estimate, capped). The second value is the workspaces kept for good. With `log`,
    every malloc and free is appended to it in order (the predicted timeline)."""
    model = CachingAllocatorModel(plan.expandable_segments)

    def malloc(handle: Any, nbytes: int) -> None:
        block = model.malloc(handle, nbytes)
        if log is not None and block is not None:
            log.append(DeviceEvent("alloc", handle, nbytes, block.size, block.address, model.reserved))

    def free(handle: Any) -> None:
        if log is not None and handle in live:
            log.append(DeviceEvent("free", handle, reserved=model.reserved))
        model.free(handle)

    live = model.live_handles
    records: List[Record] = tracker.records
    markers = sorted(tracker.markers, key=lambda m: m.index)
    cublas_threads: set = set()
    lt_threads: set = set()
    cudnn_peak = 0
    marker_at = 0
    synthetic = 0

    def apply_markers(upto: int) -> None:
        nonlocal marker_at, cudnn_peak, synthetic
        while marker_at < len(markers) and markers[marker_at].index <= upto:
            marker = markers[marker_at]
            marker_at += 1
            thread = "backward" if marker.phase == "backward" else "main"
            if marker.kind in ("cublas", "cublaslt") and thread not in cublas_threads and plan.cublas_bytes:
                cublas_threads.add(thread)  # a cuBLASLt handle is the thread's cuBLAS handle, workspace and all
                malloc(("cublas", thread), plan.cublas_bytes)
            if marker.kind == "cublaslt" and plan.cublaslt_bytes and thread not in lt_threads:
                lt_threads.add(thread)
                malloc(("cublaslt", thread), plan.cublaslt_bytes)
            elif marker.kind == "cublaslt" and plan.cublaslt_call_bytes:
                synthetic += 1
                malloc(("cublaslt", synthetic), plan.cublaslt_call_bytes)
                free(("cublaslt", synthetic))
            elif marker.kind == "cudnn" and plan.cudnn and marker.nbytes:
                size = min(marker.nbytes, CUDNN_WORKSPACE_CAP)
                cudnn_peak = max(cudnn_peak, size)
                synthetic += 1
                malloc(("cudnn", synthetic), size)
                free(("cudnn", synthetic))

    for index, (kind, sid) in enumerate(tracker.events):
        apply_markers(index)
        record = records[sid]
        if record.host:
            continue
        if kind == "alloc":
            malloc(sid, record.nbytes)
        else:
            free(sid)
    apply_markers(len(tracker.events))
    kept = len(cublas_threads) * plan.cublas_bytes + len(lt_threads) * plan.cublaslt_bytes
    return model.result(), kept, cudnn_peak
