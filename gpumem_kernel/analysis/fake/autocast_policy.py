"""CUDA's autocast policy, applied to a CPU trace where CPU autocast's differs.

A trace runs under CPU autocast, whose op lists are not CUDA's (aten/src/ATen/autocast_mode.cpp). Where the two
keep tensors of other dtypes, or make a cast one does not, the trace runs the function as CUDA's autocast would:

- fp32: CUDA casts floating arguments up (normalisation, interpolation, element-wise math, logsumexp, distances);
  CPU autocast leaves them in bf16. The fp32 copy is what backward keeps.
- fp32 dtype: CUDA gives reductions and softmax an fp32 `dtype` when none is given (fp32 output, and softmax's
  fp32 copy of its input); CPU autocast leaves them in bf16.
- promote: CUDA casts mixed floating arguments to the widest (addcmul, atan2, scatter_add, tensordot, ...); CPU
  autocast does not, and some of those CPU kernels refuse mixed dtypes outright.
- native: CPU autocast promotes cat, stack and index_copy with a cast copy; CUDA's leaves them to the kernel's own
  type promotion (no copy).

Each entry was compared with PyTorch's CUDA autocast kernels on fake CUDA tensors (tests/analysis/
test_analysis_autocast_policy.py), on torch 2.11 and 2.13. The policy is swapped on Python attributes (torch,
torch.Tensor, torch.nn.functional, torch.linalg) for a trace only, and put back exactly afterwards.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.gpus.lookup import torch_minor
from gpumem_kernel.analysis.allocator.import_guard import interrupts_held

# torch.nn.functional's functions CUDA runs in fp32; each casts its floating arguments up
FP32_FUNCTIONAL = ("layer_norm", "group_norm", "rms_norm", "interpolate", "softplus", "cosine_similarity")
FP32_SINCE = {"rms_norm": (2, 12)}  # 2.11's CUDA autocast leaves rms_norm in bf16
# ... and those it gives an fp32 `dtype` when none is given
FP32_DTYPE_FUNCTIONAL = ("softmax", "log_softmax")
# torch functions and Tensor methods CUDA runs in fp32 (HF's GELU is torch.pow)
FP32_MATH = (
    "exp", "expm1", "log", "log1p", "log2", "log10", "pow", "rsqrt", "reciprocal",
    "acos", "asin", "cosh", "sinh", "tan", "erfinv", "logsumexp", "dist", "cdist", "renorm",
)  # fmt: skip
# torch functions and Tensor methods CUDA gives an fp32 `dtype` (Tensor.softmax: timm's and many hand-written
# attentions; cumsum: position ids and scans)
FP32_DTYPE = ("softmax", "log_softmax", "sum", "prod", "cumsum", "cumprod", "norm")
FP32_DTYPE_LINALG = ("vector_norm", "matrix_norm")
# torch functions and Tensor methods CUDA promotes to the widest floating argument
PROMOTE = ("addcmul", "addcdiv", "atan2", "scatter_add", "tensordot", "dot", "vdot", "cross")
PROMOTE_FUNCTIONAL = ("bilinear", "grid_sample")
# torch functions and Tensor methods CPU autocast promotes with a copy and CUDA's does not
NATIVE = ("cat", "concat", "concatenate", "stack", "index_copy")

_INHERITED = object()


def cpu_autocast_on() -> bool:
    import torch

    try:
        return bool(torch.is_autocast_enabled("cpu"))
    except TypeError:  # torch before 2.4
        return bool(torch.is_autocast_cpu_enabled())


def _low(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16)


def _tensors(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> List[Any]:
    """Tensor arguments, including those inside a list (cat's and stack's)."""
    import torch

    found: List[Any] = []
    for value in list(args) + list(kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        found += [item for item in items if isinstance(item, torch.Tensor)]
    return found


def _cast(value: Any, dtype: Any) -> Any:
    import torch

    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    return value


def _as_cuda_wraps(original: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """Call `original` as CUDA's autocast wrapper calls the op it wraps: with autocast off inside it, so that a
    composite op's own matmuls (tensordot's mm) stay in the wrapper's dtype."""
    import torch

    with torch.autocast("cpu", enabled=False):
        return original(*args, **kwargs)


class Counter:
    """How many calls the policy changed in one trace."""

    autocast = 0


def _fp32(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:
    import torch

    @functools.wraps(original)
    def cast_up(*args: Any, **kwargs: Any) -> Any:
        if cpu_autocast_on() and any(_low(t) for t in _tensors(args, kwargs)):
            seen.autocast += 1
            args = tuple(_cast(a, torch.float32) if _low(a) else a for a in args)
            kwargs = {k: _cast(v, torch.float32) if _low(v) else v for k, v in kwargs.items()}
            return _as_cuda_wraps(original, args, kwargs)
        return original(*args, **kwargs)

    return cast_up


def _fp32_dtype_functional(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:
    import torch

    @functools.wraps(original)
    def with_dtype(input: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        if dtype is None and cpu_autocast_on() and isinstance(input, torch.Tensor) and input.is_floating_point():
            seen.autocast += _low(input)
            return _as_cuda_wraps(original, (input, dim, _stacklevel, torch.float32), {})
        return original(input, dim, _stacklevel, dtype)

    return with_dtype


def _fp32_dtype(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:
    """CUDA's fp32_set_opt_dtype: a `dtype` of fp32 when none is given and the first argument is bf16/fp16."""
    import torch

    @functools.wraps(original)
    def with_dtype(*args: Any, **kwargs: Any) -> Any:
        if args and _low(args[0]) and cpu_autocast_on():
            if kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args):  # softmax(x, 1, dt)
                return original(*args, **kwargs)
            seen.autocast += 1
            return _as_cuda_wraps(original, args, {**kwargs, "dtype": torch.float32})
        return original(*args, **kwargs)

    return with_dtype


def _promote(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:
    import torch

    @functools.wraps(original)
    def promoted(*args: Any, **kwargs: Any) -> Any:
        if not cpu_autocast_on():
            return original(*args, **kwargs)
        floats = [t.dtype for t in _tensors(args, kwargs) if t.is_floating_point()]
        if len(set(floats)) > 1:
            widest = functools.reduce(torch.promote_types, floats)
            seen.autocast += 1
            args = tuple(_cast(a, widest) for a in args)
            kwargs = {k: _cast(v, widest) for k, v in kwargs.items()}
            return _as_cuda_wraps(original, args, kwargs)
        return original(*args, **kwargs)

    return promoted


def _native(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:

    @functools.wraps(original)
    def uncast(*args: Any, **kwargs: Any) -> Any:
        if cpu_autocast_on() and len({t.dtype for t in _tensors(args, kwargs) if t.is_floating_point()}) > 1:
            seen.autocast += 1
            return _as_cuda_wraps(original, args, kwargs)
        return original(*args, **kwargs)

    return uncast


def _cross_entropy(original: Callable[..., Any], seen: Counter) -> Callable[..., Any]:
    """CPU autocast casts the logits to fp32 before log_softmax; CUDA's runs log_softmax in their dtype and casts
    for nll_loss, which keeps that fp32 copy: 6 bytes per logit kept, not 4 (class-index targets)."""
    import torch
    import torch.nn.functional as F

    @functools.wraps(original)
    def cuda_cross_entropy(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        options = dict(zip(("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"), args))
        options.update(kwargs)
        plain = (
            not options.get("label_smoothing") and options.get("size_average") is None and options.get("reduce") is None
        )
        if (
            plain
            and cpu_autocast_on()
            and _low(input)
            and isinstance(target, torch.Tensor)
            and not target.is_floating_point()
        ):
            seen.autocast += 1
            log_probs = torch.log_softmax(input, 1 if input.dim() > 1 else 0, dtype=input.dtype)
            return F.nll_loss(
                log_probs,
                target,
                options.get("weight"),
                ignore_index=options.get("ignore_index", -100),
                reduction=options.get("reduction", "mean"),
            )
        return original(input, target, *args, **kwargs)

    return cuda_cross_entropy


def _both(names: Tuple[str, ...], wrap: Callable[..., Any], seen: Counter) -> List[Tuple[Any, str, Any]]:
    """The torch function and the Tensor method of each name, where they exist."""
    import torch

    return [
        (owner, name, wrap(getattr(owner, name), seen))
        for name in names
        for owner in (torch, torch.Tensor)
        if hasattr(owner, name)
    ]


def swaps(seen: Counter, torch_version: Optional[Tuple[int, int]] = None) -> List[Tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for every function whose policy differs, for the running torch or the
    one planned for (analysis.fake.torch_rules)."""
    import torch
    import torch.nn.functional as F

    version = torch_version or torch_minor(torch.__version__)
    out = [(F, "cross_entropy", _cross_entropy(F.cross_entropy, seen))]
    out += [
        (F, name, _fp32(getattr(F, name), seen))
        for name in FP32_FUNCTIONAL
        if hasattr(F, name) and version >= FP32_SINCE.get(name, (0, 0))
    ]
    out += [(F, name, _fp32_dtype_functional(getattr(F, name), seen)) for name in FP32_DTYPE_FUNCTIONAL]
    out += [(F, name, _promote(getattr(F, name), seen)) for name in PROMOTE_FUNCTIONAL if hasattr(F, name)]
    out += _both(FP32_MATH, _fp32, seen)
    out += [(torch.Tensor, name, _fp32(getattr(torch.Tensor, name), seen)) for name in ("__pow__", "__rpow__")]
    out += _both(FP32_DTYPE, _fp32_dtype, seen)
    out += [(torch.linalg, name, _fp32_dtype(getattr(torch.linalg, name), seen)) for name in FP32_DTYPE_LINALG]
    out += _both(PROMOTE, _promote, seen)
    out += _both(NATIVE, _native, seen)
    return out


@contextlib.contextmanager
def swapped(replacements: List[Tuple[Any, str, Any]]) -> Any:
    """Set each attribute for the block; put back the original, or nothing where torch.Tensor only inherited it
    from TensorBase."""
    originals = [(owner, name, owner.__dict__.get(name, _INHERITED)) for owner, name, _ in replacements]
    try:
        with interrupts_held():  # all swapped or none: a Ctrl-C waits, then the finally puts every one back
            for owner, name, function in replacements:
                setattr(owner, name, function)
        yield
    finally:
        with interrupts_held():
            for owner, name, function in reversed(originals):
                if function is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, function)
