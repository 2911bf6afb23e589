"""Model memory analysis and batch-size recommendations: `analyze()` and the seeds' Python API.

Two engines, one report (see shared/notes/memory-estimation.md):
- *traced* (no GPU needed, or planning for another GPU): two training steps on fake CPU tensors, every
  storage followed by category, the event stream replayed through a model of the CUDA caching allocator
  (trace.py, allocator.py), plus the CUDA context and workspaces;
- *measured* (CUDA already initialised by the user, or `device="cuda"` asked explicitly): three real steps on
  a copy of the model at each batch size the search tries (at most MEASURED_RUNS) from a clean allocator,
  peaks of steps 2–3, linear fit, residuals.

The maximum batch is searched from the same first batch (SEED) whatever batch the user analyses: it is a
property of the model, the step and the device. The picks below it are rounded as analysis.picks says.

The user's model, optimizer and RNG state are never touched: every run works on copies, and the RNG state
is restored. torch is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from gpumem_kernel.analysis import gpus
from gpumem_kernel.analysis.allocator import settings_from_env
from gpumem_kernel.analysis.picks import RECOMMENDED_SHARE, SAFE_SHARE, Rounding
from gpumem_kernel.analysis.picks import from_options as rounding_from_options
from gpumem_kernel.analysis.picks import resolve as resolve_rounding
from gpumem_kernel.analysis.render import accumulation_code, analysis_yaml
from gpumem_kernel.analysis.storage import NullTracker
from gpumem_kernel.analysis.trace import (
    TraceError,
    TracePlan,
    TraceResult,
    TensorCopier,
    autocast_factory,
    checkpoint_blocks,
    copy_model,
    copy_optimizer,
    default_loss,
    make_optimizer,
    run_trace,
    train_steps,
)
from gpumem_kernel.oom.classify import is_oom
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.units import format_bytes

MIME = "application/vnd.gpumem.analysis.v1+json"
MiB = 1 << 20
GiB = 1 << 30
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum")
OPTIMIZER_NAMES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "sgd-momentum": "SGD (momentum 0.9)"}
STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
AMP_MODES = ("fp16", "bf16")
MAX_BATCH = 1 << 20  # search cap: past this the answer is "at least"
TIGHT_SHARE = 0.9  # a current batch above 90% of the usable memory is "tight"
TRACED_RELATIVE_ERROR = 0.10  # CPU-validated 5% on live bytes + GPU kernels and allocator model
CONTEXT_UNCERTAINTY = 160 * MiB


# --- report -------------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One labelled number of the report: which engine produced it, and how to read it."""

    name: str
    bytes: Optional[int]
    engine: str  # read | traced | measured | modelled | estimate | nvml | source
    note: str = ""


@dataclass
class CurvePoint:
    batch_size: int
    peak_bytes: int  # device footprint: reserved + a CUDA context not yet created (per rank)
    peak_allocated_bytes: int
    peak_reserved_bytes: Optional[int]
    engine: str


@dataclass
class Fit:
    intercept_bytes: float
    slope_bytes_per_sample: float
    max_relative_residual: Optional[float]
    points: int


@dataclass
class DeviceInfo:
    name: Optional[str]
    source: str  # nvml | target | memory | none
    total_bytes: Optional[int]
    free_bytes: Optional[int]
    reclaimable_bytes: int  # this process's memory the training would reuse (the model already there, cache)
    reserve_bytes: Optional[int]
    limit_bytes: Optional[int]  # what a training step may use: free + reclaimable - reserve
    compute_capability: Optional[str]
    bf16: Optional[bool]
    context_bytes: int
    context_source: str  # estimate (added to the footprint) | nvml (measured, already in use) | in use | none

    @property
    def context_to_add(self) -> int:
        """A context that does not exist yet will take memory; one in use is already outside `free`."""
        return self.context_bytes if self.context_source == "estimate" else 0


@dataclass
class Current:
    batch_size: int
    peak_bytes: int
    status: str  # fits | tight | will-not-fit | unknown
    fraction_of_limit: Optional[float]


@dataclass
class Accumulation:
    """Accumulation steps per pick to reach the target effective batch (given, or the current one)."""

    target_effective_batch: int
    explicit_target: bool  # given by the caller: picks above it are capped to it
    maximum: Optional[int]
    recommended: Optional[int]
    safe: Optional[int]


@dataclass
class LrScaling:
    from_effective_batch: int
    to_effective_batch: Optional[int]
    linear: Optional[float]
    sqrt: Optional[float]
    hint: str


@dataclass
class Recommendations:
    maximum: Optional[int]
    recommended: Optional[int]
    safe: Optional[int]
    rounding: str
    extrapolated: bool
    note: str
    current: Current
    accumulation: Accumulation
    lr: LrScaling


@dataclass
class Distributed:
    world_size: int
    strategy: str
    parameters_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    extra_bytes: int
    extra_note: str
    activations_bytes: int
    peak_bytes: int
    note: str


@dataclass
class Evaluation:
    """The evaluation step at `batch` (model.eval(), torch.no_grad(): forward only, no gradients, no optimizer
    step), traced and replayed through the same allocator model, and the largest evaluation batch that fits
    (the same search as the training maximum)."""

    batch: int
    training_batch: int
    peak_live_bytes: int  # tensor level, as the CPU sees them
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_bytes: int  # reserved + CUDA context, as the training step's peak_bytes
    activations_bytes: int
    input_bytes: int
    max_batch: Optional[int]  # None without a device limit
    rule_of_thumb_batch: int  # the guides': at most 1.3 x the training batch unless measured
    engine: str  # always traced
    note: str


EVAL_RULE_OF_THUMB = 1.3


@dataclass
class ErrorBound:
    relative: float
    absolute_bytes: int
    statement: str


@dataclass
class AnalysisReport:
    engine: str  # traced | measured
    model_name: str
    parameter_count: int
    trainable_parameter_count: int
    parameters_by_dtype: Dict[str, int]
    buffers_by_dtype: Dict[str, int]
    largest_layer: Dict[str, Any]
    settings: Dict[str, Any]
    parameters_bytes: int
    buffers_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    optimizer_host_bytes: int
    optimizer_transient_bytes: int
    activations_bytes: int
    input_bytes: int
    autocast_cache_bytes: int
    temporary_bytes: int
    peak_live_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: Optional[int]
    context_bytes: int
    workspace_bytes: int
    peak_bytes: int
    figures: List[Figure]
    breakdown_at_peak: Optional[Dict[str, int]]
    phase_peaks: Optional[Dict[str, int]]
    peak_phase: Optional[str]
    amp_saved_bytes: Optional[int]
    allocator: Optional[Dict[str, Any]]
    device: DeviceInfo
    curve: List[CurvePoint]
    fit: Optional[Fit]
    recommendations: Recommendations
    distributed: Optional[Distributed]
    error_bound: ErrorBound
    notes: List[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    version: int = 1
    # written from the rest of the payload by to_payload: what "Copy as YAML" copies and "Insert code" inserts
    config_yaml: str = ""
    accumulation_code: Optional[str] = None
    evaluation: Optional[Evaluation] = None  # only with eval_batch=

    def to_payload(self) -> Dict[str, Any]:
        """The JSON of `application/vnd.gpumem.analysis.v1+json` (schemas/analysis.schema.json)."""
        data = asdict(self)
        model = {
            "name": data.pop("model_name"),
            "parameter_count": data.pop("parameter_count"),
            "trainable_parameter_count": data.pop("trainable_parameter_count"),
            "parameters_by_dtype": data.pop("parameters_by_dtype"),
            "buffers_by_dtype": data.pop("buffers_by_dtype"),
            "largest_layer": data.pop("largest_layer"),
        }
        payload = {"version": data.pop("version"), "model": model, **data}
        self.config_yaml = payload["config_yaml"] = analysis_yaml(payload)
        self.accumulation_code = payload["accumulation_code"] = accumulation_code(payload)
        return payload

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        from gpumem_kernel.analysis.render import analysis_bundle

        return analysis_bundle(self)

    def __str__(self) -> str:
        from gpumem_kernel.analysis.render import render_text

        return render_text(self.to_payload())


# --- argument checking ---------------------------------------------------------------------------------


def _check_model(model: Any) -> None:
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not any(True for _ in model.parameters()):
        raise ValueError(f"{type(model).__name__} has no parameters: nothing to train")


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def parse_shape(value: Any) -> Tuple[int, ...]:
    """(3, 224, 224), [512], '3x224x224', '512', '(3,224,224)', '(512,)' -> a shape without the batch dimension."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] + text[-1:] in ("()", "[]"):  # the tuple form a hint or a Python user writes
            text = text[1:-1]
        parts = text.lower().replace("×", "x").replace(",", "x").split("x")
        try:
            value = tuple(int(p) for p in parts if p.strip())
        except ValueError:
            raise ValueError(f"bad input shape {value!r}: write e.g. 3x224x224, (3,224,224) or 512") from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if (
        not isinstance(value, (tuple, list))
        or not value
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)
    ):
        raise ValueError(f"bad input shape {value!r}: a tuple of positive sizes without the batch, e.g. (3, 224, 224)")
    return tuple(value)


def _check_choice(value: Optional[str], choices: Sequence[str], name: str) -> Optional[str]:
    if value is None:
        return None
    text = str(value).lower()
    if text not in choices:
        raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(choices)}")
    return text


def _amp_mode(amp: Any) -> Optional[str]:
    if amp in (None, False, "off", "none", "fp32"):
        return None
    if amp is True:
        return "fp16"
    text = str(amp).lower().replace("float16", "fp16").replace("bfloat16", "bf16")
    return _check_choice(text, AMP_MODES, "amp mode")


def _optimizer_kind(optimizer: Any) -> Union[str, Any]:
    import torch

    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        kind = optimizer.lower().replace("_", "-")
        kind = {"sgdm": "sgd-momentum", "momentum": "sgd-momentum"}.get(kind, kind)
        if kind in OPTIMIZERS:
            return kind
    raise ValueError(f"unknown optimizer {optimizer!r}; use adamw, adam, sgd, sgd-momentum or an optimizer object")


# --- what the model holds ---------------------------------------------------------------------------------


def _storage_key(t: Any, keep: List[Any]) -> Any:
    """Identity of a tensor's storage: shared parameters (tied weights, views) count once."""
    st = t.untyped_storage()
    keep.append(st)
    ptr = st.data_ptr() if t.device.type not in ("meta",) else 0
    return (str(t.device), ptr) if ptr else ("id", id(st))


def bytes_by_dtype(tensors: Sequence[Any]) -> Dict[str, int]:
    """Bytes per dtype over unique storages."""
    keep: List[Any] = []
    seen = set()
    result: Dict[str, int] = {}
    for t in tensors:
        key = _storage_key(t, keep)
        if key in seen:
            continue
        seen.add(key)
        dtype = str(t.dtype).replace("torch.", "")
        result[dtype] = result.get(dtype, 0) + int(t.untyped_storage().nbytes())
    return result


def unique_bytes(tensors: Sequence[Any]) -> int:
    return sum(bytes_by_dtype(tensors).values())


def _largest_layer(model: Any) -> Dict[str, Any]:
    """The module with the most parameter bytes of its own (what ZeRO-3/FSDP gathers at once, roughly)."""
    best_name, best = "", 0
    for name, module in model.named_modules():
        own = unique_bytes(list(module.parameters(recurse=False)))
        if own > best:
            best_name, best = name or type(module).__name__, own
    return {"name": best_name, "bytes": best}


@dataclass
class OptimizerModel:
    """Optimizer state as modelled from the parameters (before any step)."""

    state_bytes: int  # device-resident state
    host_bytes: int  # `step` scalars kept on the host (non-fused, non-capturable)
    transient_bytes: int  # extra bytes during step(): foreach temporaries
    known: bool = True


def _optimizer_settings(optimizer: Any) -> Tuple[str, List[Dict[str, Any]]]:
    """(kind, param groups) for a kind string or an optimizer object (groups keep their own settings)."""
    import torch

    if isinstance(optimizer, str):
        defaults = {"adamw": {"weight_decay": 0.01}, "adam": {}, "sgd": {}, "sgd-momentum": {"momentum": 0.9}}
        return optimizer, [dict(defaults[optimizer], foreach=True)]
    if isinstance(optimizer, torch.optim.AdamW):
        kind = "adamw"
    elif isinstance(optimizer, torch.optim.Adam):
        kind = "adamw" if optimizer.defaults.get("decoupled_weight_decay") else "adam"
    elif isinstance(optimizer, torch.optim.SGD):
        kind = "sgd-momentum" if any(g.get("momentum") for g in optimizer.param_groups) else "sgd"
    else:
        kind = type(optimizer).__name__
    return kind, [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def model_optimizer_state(params: Sequence[Any], optimizer: Any) -> OptimizerModel:
    """State bytes a torch optimizer creates at its first step, and its foreach temporaries.

    Adam/AdamW: exp_avg + exp_avg_sq (+ max_exp_avg_sq with amsgrad) like each parameter, and a `step`
    scalar (float32; on the host unless fused/capturable). SGD with momentum: momentum_buffer; plain SGD: 0.
    Foreach temporaries: `_foreach_sqrt(exp_avg_sq)` holds one copy of a (device, dtype) group's parameters
    (two for Adam with coupled weight decay, which first makes `grad + wd * param`); the for-loop
    implementation holds one parameter's worth; fused kernels none.
    """
    import torch

    kind, groups = _optimizer_settings(optimizer)
    if isinstance(optimizer, str):
        param_groups = [list(params)]
    else:
        param_groups = [list(g["params"]) for g in optimizer.param_groups]
    scalar = torch.tensor(0.0).element_size() if torch.get_default_dtype() != torch.float64 else 8
    state = host = transient = 0
    for settings, group in zip(groups, param_groups):
        trainable = [p for p in group if p.requires_grad]
        sizes = [p.numel() * p.element_size() for p in trainable]
        fused = bool(settings.get("fused"))
        on_device_step = fused or bool(settings.get("capturable"))
        foreach = settings.get("foreach") is not False and not fused
        if kind in ("adam", "adamw"):
            copies = 3 if settings.get("amsgrad") else 2
            state += copies * sum(sizes)
            if on_device_step:
                state += scalar * len(sizes)
            else:
                host += scalar * len(sizes)
            temps = 1 + (1 if kind == "adam" and settings.get("weight_decay") else 0)
        elif kind == "sgd-momentum":
            state += sum(sizes)
            temps = (1 if settings.get("weight_decay") else 0) + (1 if settings.get("nesterov") else 0)
        elif kind == "sgd":
            temps = 1 if settings.get("weight_decay") else 0
        else:
            return OptimizerModel(0, 0, 0, known=False)
        if fused:
            temps = 0
        by_group: Dict[Tuple[str, str], int] = {}
        for p, size in zip(trainable, sizes):
            key = (str(p.device), str(p.dtype))
            by_group[key] = by_group.get(key, 0) + size
        widest = max(by_group.values(), default=0) if foreach else max(sizes, default=0)
        transient = max(transient, temps * widest)
    return OptimizerModel(state, host, transient)


def read_optimizer_state(optimizer: Any) -> Optional[Tuple[int, int]]:
    """(device bytes, host `step` bytes) of a stepped optimizer's state; None if it has not stepped."""
    from gpumem_kernel.analysis.trace import optimizer_uses_device_step

    if not optimizer.state:
        return None
    device_step = optimizer_uses_device_step(optimizer)
    on_device, on_host = [], []
    for state in optimizer.state.values():
        for key, value in state.items():
            if hasattr(value, "untyped_storage"):
                (on_host if key == "step" and not device_step else on_device).append(value)
    return unique_bytes(on_device), unique_bytes(on_host)


# --- inputs -----------------------------------------------------------------------------------------------


def _first_leaf(model: Any) -> Any:
    for module in model.modules():
        if not list(module.children()) and any(True for _ in module.parameters(recurse=False)):
            return module
    return None


def _float_dtype(model: Any) -> Any:
    import torch

    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def infer_input(model: Any) -> Tuple[int, ...]:
    """A shape for models whose first layer says it (Linear); others must pass input=."""
    import torch

    leaf = _first_leaf(model)
    if isinstance(leaf, torch.nn.Linear):
        return (leaf.in_features,)
    what, example = _input_hint(leaf)
    message = f"cannot tell {type(model).__name__}'s input shape: pass input= with {what}"
    raise ValueError(message + (f", e.g. input={example}" if example else ""))


def _input_hint(leaf: Any) -> Tuple[str, Optional[str]]:
    """(what input= needs, an example accepted as written), from the model's first layer. The example has no
    spaces, so the magic's `--input (3,224,224)` reads it as one word too."""
    import torch

    if isinstance(leaf, torch.nn.Embedding):
        return "the token sequence's length", "(512,)"
    if isinstance(leaf, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
        sizes = {1: ("length", "1024"), 2: ("height, width", "224,224"), 3: ("depth, height, width", "16,112,112")}
        names, example = sizes[len(leaf.kernel_size)]
        return f"one sample's shape (channels, {names})", f"({leaf.in_channels},{example})"
    return "one sample's shape without the batch, a sample batch, or a function batch_size -> batch", None


def _fake_cpu_leaves(batch: Any) -> Any:
    """In a fake trace everything must be a fake CPU tensor; values do not matter."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map

    def convert(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and not (isinstance(t, FakeTensor) and t.device.type == "cpu"):
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
        return t

    return tree_map(convert, batch)


def batch_maker(model: Any, input: Any, vocab_size: Optional[int] = None) -> Tuple[Callable[[int, bool], Any], str]:
    """(make_batch(batch_size, fake), description) for the accepted input forms."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    if input is None:
        input = infer_input(model)
    if callable(input) and not isinstance(input, torch.Tensor):

        def from_callable(b: int, fake: bool) -> Any:
            batch = input(b)
            return _fake_cpu_leaves(batch) if fake else batch

        return from_callable, f"{getattr(input, '__name__', 'callable')}(batch_size)"
    if isinstance(input, (torch.Tensor, dict)) or (
        isinstance(input, (tuple, list)) and input and all(isinstance(t, torch.Tensor) for t in input)
    ):
        samples = [t for t in tree_leaves(input) if isinstance(t, torch.Tensor)]
        if not samples or any(t.dim() == 0 for t in samples):
            raise ValueError("input tensors must have a batch dimension first")

        def resize(t: Any, b: int, fake: bool) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            if fake:
                return torch.empty((b,) + tuple(t.shape[1:]), dtype=t.dtype, device="cpu")
            rows = torch.arange(b, device=t.device) % t.shape[0]  # real rows, cycled: valid token ids
            return t.detach()[rows]

        described = ", ".join(f"{tuple(t.shape[1:])} {str(t.dtype).replace('torch.', '')}" for t in samples)
        return (lambda b, fake: tree_map(lambda t: resize(t, b, fake), input)), f"sample: {described}"
    shape = parse_shape(input)
    leaf = _first_leaf(model)
    if vocab_size is None and len(shape) == 1 and isinstance(leaf, torch.nn.Embedding):
        vocab_size = leaf.num_embeddings
    if vocab_size is not None:
        vocab = _positive_int(vocab_size, "vocab_size")
        return (
            (lambda b, fake: torch.randint(0, vocab, (b,) + shape, device="cpu")),
            f"tokens {shape} (vocab {vocab})",
        )
    dtype = _float_dtype(model)
    return (
        (lambda b, fake: torch.randn((b,) + shape, dtype=dtype, device="cpu")),
        f"{shape} {str(dtype).replace('torch.', '')}",
    )


# --- the device ---------------------------------------------------------------------------------------------


def _device_index(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    text = str(device)
    if ":" in text:
        try:
            return int(text.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad device {device!r}; use e.g. 'cuda:0'") from None
    return 0


def _reserve(total: int, reserve: Union[None, int, float]) -> int:
    """Safety reserve: 5% of the device or 512 MiB, whichever is larger (or the caller's bytes / fraction)."""
    if reserve is None:
        return max(int(0.05 * total), 512 * MiB)
    if isinstance(reserve, float) and 0 <= reserve < 1:
        return int(reserve * total)
    if isinstance(reserve, (int, float)) and reserve >= 0:
        return int(reserve)
    raise ValueError(f"reserve must be bytes or a fraction below 1, got {reserve!r}")


def _local_gpu(index: int) -> Optional[Any]:
    """NVML's view of CUDA device `index` (no CUDA initialisation), or None."""
    try:
        from gpumem_kernel.probe.prober import probe

        sample = probe()
    except Exception:
        return None
    for device in sample.gpu.devices:
        if device.cuda_index == index and device.total is not None:
            return device
    return None


def _resident_bytes(model: Any, optimizer: Any, device_type: str, index: int) -> int:
    """Bytes of model states already on that GPU: a training step reuses them, so they count as available."""
    tensors = [t for t in list(model.parameters()) + list(model.buffers())]
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None and not isinstance(optimizer, str):
        tensors += [v for s in optimizer.state.values() for v in s.values() if hasattr(v, "untyped_storage")]
    return unique_bytes([t for t in tensors if t.device.type == device_type and (t.device.index or 0) == index])


def device_limit(
    *,
    target: Optional[str],
    memory: Any,
    device: Any,
    reserve: Union[None, int, float],
    model: Any = None,
    optimizer: Any = None,
) -> DeviceInfo:
    """Where the limit comes from: --memory, --target, this machine's GPU (NVML), or nowhere."""
    spec = gpus.lookup(target) if target else None
    if memory is not None:
        total = gpus.parse_memory(memory)
        cc = spec.compute_capability if spec else None
        name = spec.name if spec else f"{format_bytes(total, 'GiB', 1)} device"
        return _limit_info(name, "memory", total, total, 0, reserve, cc, spec.bf16 if spec else None, None)
    if spec is not None:
        return _limit_info(
            spec.name,
            "target",
            spec.memory_bytes,
            spec.memory_bytes,
            0,
            reserve,
            spec.compute_capability,
            spec.bf16,
            None,
        )
    index = _device_index(device)
    if str(device or "").startswith("cpu"):
        return DeviceInfo(None, "none", None, None, 0, None, None, None, None, 0, "none")
    local = _local_gpu(index)
    if local is None:
        return DeviceInfo(None, "none", None, None, 0, None, None, None, None, 0, "none")
    reclaimable, torch_reserved = 0, 0
    if cuda_initialised():
        import torch

        torch_reserved = torch.cuda.memory_reserved(index)
        if model is not None:
            reclaimable = _resident_bytes(model, optimizer, "cuda", index)
            reclaimable += max(0, torch_reserved - torch.cuda.memory_allocated(index))
    cc = local.compute_capability
    bf16 = None if cc is None else int(cc.split(".")[0]) >= 8
    return _limit_info(
        local.name,
        "nvml",
        local.total,
        local.free,
        reclaimable,
        reserve,
        cc,
        bf16,
        _context_in_use(local, torch_reserved),
    )


def _context_in_use(local: Any, torch_reserved: int) -> Optional[Tuple[int, str]]:
    """This kernel's NVML usage minus torch's reserved memory = its CUDA context (and other non-torch
    allocations); None when this kernel has no context on the device yet."""
    if local is not None and local.this_kernel:
        return max(0, local.this_kernel - torch_reserved), "nvml"
    if cuda_initialised():
        return 0, "in use"  # NVML cannot see per-process usage here (containers, WDDM)
    return None


def _limit_info(
    name: Optional[str],
    source: str,
    total: int,
    free: int,
    reclaimable: int,
    reserve: Union[None, int, float],
    cc: Optional[str],
    bf16: Optional[bool],
    context: Optional[Tuple[int, str]],
) -> DeviceInfo:
    """`context`: None -> estimate by GPU generation; else (bytes, "nvml" | "in use")."""
    reserve_bytes = _reserve(total, reserve)
    context_bytes, context_source = (gpus.context_estimate(cc), "estimate") if context is None else context
    return DeviceInfo(
        name=name,
        source=source,
        total_bytes=total,
        free_bytes=free,
        reclaimable_bytes=reclaimable,
        reserve_bytes=reserve_bytes,
        limit_bytes=max(0, free + reclaimable - reserve_bytes),
        compute_capability=cc,
        bf16=bf16,
        context_bytes=context_bytes,
        context_source=context_source,
    )


# --- distributed ------------------------------------------------------------------------------------------------


@dataclass
class _Sharding:
    world_size: int
    strategy: Optional[str]
    largest_layer: int
    gradients_total: int

    def factors(self) -> Tuple[float, float, float]:
        """Per-rank shares of (parameters, gradients, optimizer state)."""
        n = self.world_size
        return {
            None: (1.0, 1.0, 1.0),
            "ddp": (1.0, 1.0, 1.0),
            "zero1": (1.0, 1.0, 1 / n),
            "zero2": (1.0, 1 / n, 1 / n),
            "zero3": (1 / n, 1 / n, 1 / n),
            "fsdp": (1 / n, 1 / n, 1 / n),
        }[self.strategy]

    def extra(self) -> Tuple[int, str]:
        if self.strategy == "ddp" and self.world_size > 1:
            return self.gradients_total, "DDP gradient buckets (a second copy of the gradients)"
        if self.strategy in ("zero3", "fsdp") and self.world_size > 1:
            return self.largest_layer, "the largest layer's parameters, gathered in full"
        return 0, ""

    def saving(self, params: int, grads: int, optimizer: int) -> int:
        """Bytes a rank does not hold (of those live at the peak) minus what the strategy adds."""
        fp, fg, fo = self.factors()
        return int(params * (1 - fp) + grads * (1 - fg) + optimizer * (1 - fo)) - self.extra()[0]


# --- engines -----------------------------------------------------------------------------------------------------


@dataclass
class _Point:
    batch_size: int
    allocated: int
    reserved: Optional[int]
    footprint: int  # reserved (or allocated) + context, per rank
    engine: str
    trace: Optional[TraceResult] = None


class _TracedEngine:
    name = "traced"

    def __init__(self, plan: TracePlan, context: int, sharding: _Sharding) -> None:
        self.plan, self.context, self.sharding = plan, context, sharding
        self.cache: Dict[int, Optional[_Point]] = {}
        self.errors: Dict[int, str] = {}

    def point(self, batch: int, stack_hook: Optional[Callable[[], Any]] = None) -> Optional[_Point]:
        if batch not in self.cache:
            plan = self.plan if stack_hook is None else replace(self.plan, stack_hook=stack_hook)
            try:
                trace = run_trace(plan, batch, fake=True)
            except TraceError as exc:
                if not self.cache:
                    raise  # the user's own batch size must trace
                self.errors[batch] = str(exc)  # e.g. BatchNorm at batch 1: the search treats it as not fitting
                self.cache[batch] = None
                return None
            b = trace.breakdown
            saving = self.sharding.saving(b["parameter"], b["gradient"], b["optimizer_state"])
            allocated = trace.device.peak_allocated - saving
            reserved = trace.device.peak_reserved - saving
            self.cache[batch] = _Point(batch, allocated, reserved, reserved + self.context, "traced", trace)
        return self.cache[batch]


class _MeasuredEngine:
    """Real steps on a copy of the model on the GPU. Written for CUDA builds; tested with the `gpu` marker."""

    name = "measured"

    def __init__(self, plan: TracePlan, device: Any, sharding: _Sharding, states: Tuple[int, int, int]) -> None:
        self.plan, self.device, self.sharding, self.states = plan, device, sharding, states
        self.cache: Dict[int, Optional[_Point]] = {}

    def point(self, batch: int) -> Optional[_Point]:
        if batch not in self.cache:
            measured = measure_step_peaks(self.plan, batch, self.device)
            if measured is None:
                self.cache[batch] = None
            else:
                allocated, reserved = measured
                saving = self.sharding.saving(*self.states)
                self.cache[batch] = _Point(batch, allocated - saving, reserved - saving, reserved - saving, "measured")
        return self.cache[batch]


def _preserved_rng() -> Any:
    """Save and restore torch's CPU (and initialised CUDA) RNG state around a run."""
    import torch

    @contextlib.contextmanager
    def manager() -> Any:
        cpu = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if cuda_initialised() else None
        try:
            yield
        finally:
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

    return manager()


def run_real_steps(
    plan: TracePlan, batch: int, device: Any, steps: int = 3, on_step: Optional[Callable[[int], None]] = None
) -> None:
    """`steps` real training steps at `batch` on a copy of the model and optimizer placed on `device`."""
    import torch
    from torch.utils._pytree import tree_map

    def to_device(batch_value: Any) -> Any:
        return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch_value)

    copier = TensorCopier(fake=False, device=str(device))
    model, mapping, _ = copy_model(plan.model, copier)
    if plan.checkpointing:
        checkpoint_blocks(model)  # the same blocks as the trace, so both engines measure one step
    if isinstance(plan.optimizer, str):
        optimizer = make_optimizer(plan.optimizer, [p for p in model.parameters() if p.requires_grad])
    else:
        optimizer = copy_optimizer(plan.optimizer, mapping, copier, cuda_defaults=False)
    del mapping
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(device_type) if plan.amp == "fp16" and device_type == "cuda" else None
    train_steps(
        model,
        optimizer,
        lambda: to_device(plan.make_batch(batch, False)),
        plan.loss_fn,
        steps=steps,
        micro=min(plan.grad_accum, 2),
        grad_accum=plan.grad_accum,
        autocast=autocast_factory(plan.amp, device_type),
        tracker=NullTracker(),
        scaler=scaler,
        on_step=on_step,
    )


def clear_cublas_workspaces() -> bool:
    """Free cuBLAS's per-thread workspaces (PyTorch's own CUDA-graph trees do the same around a capture); the next
    matmul on a thread allocates its workspace again. False where this torch has no such call."""
    import torch

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return False
    clear()
    return True


def measure_step_peaks(plan: TracePlan, batch: int, device: Any) -> Optional[Tuple[int, int]]:
    """(peak allocated, peak reserved) of steps 2–3 at `batch` on a copy, over the baseline; None on OOM.

    cuBLAS's workspaces are freed first, so every point counts the ones its step allocates (as the traced engine
    and a fresh process do): kept from an earlier point, they would sit in the baseline of every later one only."""
    import torch

    def reset_at_step_two(step: int) -> None:
        if step == 2:  # optimizer state exists from step 1 on: steps 2-3 are the steady state
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    result: Optional[Tuple[int, int]] = None
    with _preserved_rng():
        gc.collect()
        torch.cuda.synchronize(device)
        clear_cublas_workspaces()
        torch.cuda.empty_cache()
        base_allocated = torch.cuda.memory_allocated(device)
        base_reserved = torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            try:
                run_real_steps(plan, batch, device, steps=3, on_step=reset_at_step_two)
                torch.cuda.synchronize(device)
                result = (
                    torch.cuda.max_memory_allocated(device) - base_allocated,
                    torch.cuda.max_memory_reserved(device) - base_reserved,
                )
            except RuntimeError as exc:  # torch's OutOfMemoryError, and cuBLAS/cuDNN allocation failures
                if not is_oom(exc):
                    raise
                # leaving the except clause drops the traceback and the frames that pin the tensors
        finally:
            gc.collect()  # the copies died with run_real_steps' frame; cycles go now
            torch.cuda.empty_cache()
    return result


def _torch_version() -> str:
    """The torch in this kernel: its cuBLAS and cuBLASLt workspace rules are the ones the step will meet."""
    import torch

    return str(torch.__version__)


def _measured_device(device: Any, target: Optional[str], memory: Any) -> Optional[Any]:
    """The CUDA device to measure on, or None: only if the user initialised CUDA or named a CUDA device."""
    if target is not None or memory is not None:
        return None
    import torch

    explicit = device is not None and str(device).startswith("cuda")
    if explicit:
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but this torch build or machine has no CUDA")
        return torch.device(device if isinstance(device, str) else str(device))
    if device is None and cuda_initialised() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return None


# --- fitting and searching ------------------------------------------------------------------------------------


def _fit(points: Sequence[_Point]) -> Optional[Fit]:
    """Least-squares line of footprint against batch size, with the worst relative residual."""
    xs = [p.batch_size for p in points]
    if len(set(xs)) < 2:
        return None
    ys = [p.footprint for p in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    residual = None
    if n > 2:
        residual = max(abs(y - (intercept + slope * x)) / y for x, y in zip(xs, ys) if y)
    return Fit(intercept, slope, residual, n)


@dataclass
class _Search:
    points: List[_Point]
    maximum: Optional[int]
    extrapolated: bool
    note: str
    fit: Optional[Fit]


SEED = 8  # the search's first batch, whatever batch is analysed: the maximum is the model's, not the -b's
GROWTH = 64  # until a batch goes over the limit, one step grows the largest fitting batch at most 64-fold
CLOSE = 200  # the bracket is closed when it is at most 1/200 of the batch wide (0.5%, well inside the ±10%)
TRACED_RUNS = 40  # traces a search may make (fake tensors: tens of milliseconds each for small models)
MEASURED_RUNS = 14  # real three-step runs a search may make on the GPU


def search_maximum(engine: Any, limit: Optional[int], runs: int = TRACED_RUNS) -> _Search:
    """The largest batch whose footprint fits `limit`, found the same way whatever batch the user analyses.

    From batch SEED it grows (along the line through the two largest fitting batches, at most GROWTH-fold;
    doubling while the footprint is flat) until a batch goes over the limit, then closes the bracket to 0.5%
    of the batch (exact below 200): secant steps alternating with bisection, so a poor line costs a few runs
    and never a wrong answer.
    Every candidate is run, none is read off the line; a batch that cannot run (an OOM on the GPU, a trace
    error such as BatchNorm at batch 1) counts as over. After `runs` runs the answer is the largest batch
    that fit; if nothing has gone over by then, the line through the largest runs is extrapolated and the
    answer says so."""
    if limit is None:
        return _Search([], None, False, "no device limit: pass target= or memory= to get batch sizes", None)
    bracket = _Bracket(engine, limit)
    maximum, extrapolated = bracket.close(runs)
    ordered = sorted(bracket.points.values(), key=lambda p: p.batch_size)
    return _Search(ordered, maximum, extrapolated, bracket.note(maximum, extrapolated, runs), _fit(ordered))


class _Bracket:
    """The runs of one search: the points that ran, the batches that could not, and the next candidate."""

    def __init__(self, engine: Any, limit: int) -> None:
        self.engine, self.limit = engine, limit
        self.points: Dict[int, _Point] = {}
        self.failed: set = set()
        self.runs = 0
        self.last_was_secant = False
        self.ran_out = False  # the run budget ended the search before the bracket closed

    def run(self, batch: int) -> None:
        self.runs += 1  # counted whether or not the engine had it cached: the same runs for every -b
        point = self.engine.point(batch)
        if point is None:
            self.failed.add(batch)
        else:
            self.points[batch] = point

    def lo(self) -> Optional[_Point]:
        fits = [p for p in self.points.values() if p.footprint <= self.limit]
        return max(fits, key=lambda p: p.batch_size) if fits else None

    def hi(self) -> Optional[int]:
        over = [p.batch_size for p in self.points.values() if p.footprint > self.limit] + list(self.failed)
        return min(over) if over else None

    def close(self, runs: int) -> Tuple[int, bool]:
        """(maximum, extrapolated)."""
        self.run(SEED)
        while True:
            lo, hi = self.lo(), self.hi()
            if lo is None and hi is not None and hi <= 1:
                return 0, False
            if lo is not None and hi is not None and hi - lo.batch_size <= max(1, lo.batch_size // CLOSE):
                return lo.batch_size, False
            if lo is not None and hi is None and lo.batch_size >= MAX_BATCH:
                return MAX_BATCH, False
            if self.runs >= runs:
                self.ran_out = True
                return self._out_of_runs(lo, hi)
            self.run(self._candidate(lo, hi))

    def _candidate(self, lo: Optional[_Point], hi: Optional[int]) -> int:
        if lo is None:  # nothing fits yet: halve
            return max(1, (hi or 2) // 2)
        if hi is None:  # nothing over yet: grow
            line = self._line_above(lo)
            step = lo.batch_size * 2 if line is None else line
            return min(max(step, lo.batch_size + 1), lo.batch_size * GROWTH, MAX_BATCH)
        secant = None
        if not self.last_was_secant and hi in self.points:
            secant = _line_solve(lo, self.points[hi], self.limit)
        self.last_was_secant = secant is not None
        candidate = secant if secant is not None else (lo.batch_size + hi) // 2
        return min(max(candidate, lo.batch_size + 1), hi - 1)

    def _line_above(self, lo: _Point) -> Optional[int]:
        """Where the line through the two largest fitting batches meets the limit (None while it is flat)."""
        fits = sorted((p for p in self.points.values() if p.footprint <= self.limit), key=lambda p: p.batch_size)
        return _line_solve(fits[-2], lo, self.limit) if len(fits) >= 2 else None

    def _out_of_runs(self, lo: Optional[_Point], hi: Optional[int]) -> Tuple[int, bool]:
        if lo is None:
            return 0, False
        if hi is None:
            line = self._line_above(lo)
            if line is not None and line > lo.batch_size:
                return min(line, MAX_BATCH), True
        return lo.batch_size, False

    def note(self, maximum: int, extrapolated: bool, runs: int) -> str:
        ordered = sorted(self.points)
        hi = self.hi()
        if extrapolated:
            return (
                f"maximum {maximum} is extrapolated along the line through the largest runs "
                f"(up to batch {ordered[-1]}, {runs} runs)"
            )
        if maximum >= MAX_BATCH:
            return f"memory allows at least {MAX_BATCH}: the search stops there"
        if maximum == 0:
            return "even batch 1 does not fit: try amp, checkpointing, a sharded strategy or a smaller model"
        if hi is not None and hi in self.failed and hi == maximum + 1:
            return f"batch {hi} ran out of memory or could not run: {maximum} is the largest batch below it that ran"
        if self.ran_out and hi is not None:
            return f"the search stopped after {runs} runs: the maximum lies between {maximum} and {hi - 1}"
        return ""


def _line_solve(a: _Point, b: _Point, limit: int) -> Optional[int]:
    if b.batch_size == a.batch_size or b.footprint <= a.footprint:
        return None
    slope = (b.footprint - a.footprint) / (b.batch_size - a.batch_size)
    return int(math.floor(a.batch_size + (limit - a.footprint) / slope))


# --- recommendations ----------------------------------------------------------------------------------------------


def recommend(
    maximum: Optional[int],
    current: _Point,
    limit: Optional[int],
    reserve: Optional[int],
    *,
    batch_size: int,
    grad_accum: int,
    effective_batch: Optional[int],
    rounding: Rounding,
    extrapolated: bool,
    note: str,
) -> Recommendations:
    picks: Dict[str, Optional[int]] = {"maximum": maximum, "recommended": None, "safe": None}
    if maximum is not None and maximum >= 1:
        picks["recommended"] = max(1, rounding.apply(RECOMMENDED_SHARE * maximum))
        picks["safe"] = max(1, rounding.apply(SAFE_SHARE * maximum))
        if picks["safe"] == picks["recommended"] and picks["recommended"] > 1:  # rounding merged them
            picks["safe"] = rounding.step_below(picks["recommended"])
    status, fraction = "unknown", None
    if limit:
        fraction = current.footprint / limit
        if current.footprint <= TIGHT_SHARE * limit:
            status = "fits"
        elif current.footprint <= limit + (reserve or 0):
            status = "tight"
        else:
            status = "will-not-fit"
    target = effective_batch or batch_size * grad_accum

    def micro_batch(pick: Optional[int]) -> Optional[int]:
        # with a target effective batch, a pick above it is capped to it (no accumulation needed)
        return min(pick, target) if pick and effective_batch else pick

    steps = {k: (math.ceil(target / micro_batch(v)) if v else None) for k, v in picks.items()}
    lr = _lr_scaling(batch_size * grad_accum, micro_batch(picks["recommended"]), steps["recommended"])
    return Recommendations(
        maximum=picks["maximum"],
        recommended=picks["recommended"],
        safe=picks["safe"],
        rounding=rounding.label,
        extrapolated=extrapolated,
        note=note,
        current=Current(batch_size, current.footprint, status, fraction),
        accumulation=Accumulation(
            target, effective_batch is not None, steps["maximum"], steps["recommended"], steps["safe"]
        ),
        lr=lr,
    )


def _lr_scaling(current_effective: int, batch: Optional[int], steps: Optional[int]) -> LrScaling:
    if not batch or not steps:
        return LrScaling(current_effective, None, None, None, "no recommendation: learning rate unchanged")
    new = batch * steps
    plan = f"{batch} x {steps} accumulation steps" if steps > 1 else f"batch {batch}"
    if new == current_effective:
        hint = f"effective batch stays {new} ({plan}): keep the learning rate"
        return LrScaling(current_effective, new, 1.0, 1.0, hint)
    k = new / current_effective
    hint = (
        f"effective batch {current_effective} -> {new} ({plan}): scale the learning rate by {k:.3g} "
        f"(linear rule, SGD) or {math.sqrt(k):.3g} (square-root rule, Adam-family), with warm-up"
    )
    return LrScaling(current_effective, new, k, math.sqrt(k), hint)


# --- analyze ------------------------------------------------------------------------------------------------------


def analyze(
    model: Any,
    *,
    batch_size: int,
    input: Any = None,
    loss: Optional[Callable[[Any, Any], Any]] = None,
    optimizer: Any = "adamw",
    amp: Any = None,
    grad_accum: int = 1,
    checkpointing: bool = False,
    device: Any = None,
    target: Optional[str] = None,
    memory: Any = None,
    world_size: int = 1,
    strategy: Optional[str] = None,
    multiple: Optional[int] = None,
    effective_batch: Optional[int] = None,
    reserve: Union[None, int, float] = None,
    vocab_size: Optional[int] = None,
    rounding: Any = None,
    stack_hook: Optional[Callable[[], Any]] = None,
    on_trace: Optional[Callable[[TraceResult], None]] = None,
    eval_batch: Optional[int] = None,
) -> AnalysisReport:
    """Memory of one training step of `model` at `batch_size`, and the batch sizes that fit.

    input: a shape without the batch ((3, 224, 224), '3x224x224', (512,) tokens for a model starting with
    an Embedding), a sample batch tensor (or tuple / dict of them), or a callable batch_size -> batch.
    loss: callable(output, batch) -> scalar (default: mean of the squared floating outputs).
    optimizer: adamw | adam | sgd | sgd-momentum, or your optimizer (its class, settings and state are used).
    target / memory: plan for a GPU from gpus.py or a memory size ('16GiB'); the traced engine is used.
    reserve: safety reserve in bytes or as a fraction (default max(5%, 512 MiB)).
    rounding: how the recommended and safe picks are rounded down: 'pow2', 'none' or N (a multiple of N;
    `multiple=N` says the same); default: the JupyterLab setting "Batch-size rounding", else pow2.
    The maximum does not depend on batch_size: the search starts from the same batch for every batch_size.
    stack_hook / on_trace (the predicted timeline, timeline.predicted): stack_hook is called at each storage
    birth of the trace of `batch_size` (and no other), and on_trace gets that trace, its events kept.
    eval_batch: also predict the evaluation step at that batch (model.eval(), torch.no_grad(), forward only)
    and the largest evaluation batch that fits (report.evaluation); always traced.
    Raises ValueError with a one-line message on bad arguments.
    """
    started = time.perf_counter()
    _check_model(model)
    batch_size = _positive_int(batch_size, "batch_size")
    grad_accum = _positive_int(grad_accum, "grad_accum")
    world_size = _positive_int(world_size, "world_size")
    if multiple is not None:
        multiple = _positive_int(multiple, "multiple")
    picks_rounding = resolve_rounding(rounding_from_options(rounding, multiple))
    if effective_batch is not None:
        effective_batch = _positive_int(effective_batch, "effective_batch")
    if eval_batch is not None:
        eval_batch = _positive_int(eval_batch, "eval_batch")
    strategy = _check_choice(strategy, STRATEGIES, "strategy")
    amp_mode = _amp_mode(amp)
    kind = _optimizer_kind(optimizer)
    if loss is not None and not callable(loss):
        raise ValueError("loss must be a callable (output, batch) -> scalar")
    make_batch, input_text = batch_maker(model, input, vocab_size)
    info = device_limit(target=target, memory=memory, device=device, reserve=reserve, model=model, optimizer=kind)
    notes: List[str] = []
    settings = settings_from_env()
    plan = TracePlan(
        model=model,
        optimizer=kind,
        make_batch=make_batch,
        loss_fn=loss or default_loss,
        amp=amp_mode,
        grad_accum=grad_accum,
        checkpointing=bool(checkpointing),
        **gpus.blas_workspaces(info.compute_capability, _torch_version()).plan_fields(),
        expandable_segments=settings.expandable_segments,
    )
    if settings.expandable_segments:
        notes.append("expandable segments (allocator configuration): traced reserved figures model its 2/20 MiB pages")
    if settings.note:
        notes.append(settings.note)
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads_total = unique_bytes(trainable)
    sharding = _Sharding(world_size, strategy, _largest_layer(model)["bytes"], grads_total)
    if strategy is None and world_size > 1:
        sharding.strategy = "ddp"
        notes.append("world_size > 1 without a strategy: DDP assumed")

    measured_on = _measured_device(device, target, memory)
    try:
        traced = _TracedEngine(plan, info.context_to_add, sharding)
        current_trace = traced.point(batch_size, stack_hook)
        if current_trace is None or current_trace.trace is None:  # point() raises for the first batch
            raise TraceError(f"batch {batch_size} could not be traced")
        if on_trace is not None:
            on_trace(current_trace.trace)
        if measured_on is not None:
            states = _state_totals(current_trace.trace)
            engine: Any = _MeasuredEngine(plan, measured_on, sharding, states)
            info = _measured_limit(info, measured_on, model, kind, reserve)
        else:
            engine = traced
        found = search_maximum(engine, info.limit_bytes, runs=TRACED_RUNS if engine is traced else MEASURED_RUNS)
        found = _with_analysed_batch(engine, found, batch_size, info.limit_bytes)
        current = engine.point(batch_size)
        if current is None:  # the user's batch ran out of memory on the GPU itself
            over = (info.limit_bytes or 0) + (info.reserve_bytes or 0) + 1
            current = _Point(
                batch_size,
                current_trace.allocated,
                current_trace.reserved,
                max(current_trace.footprint, over),
                "measured",
            )
            notes.append(f"batch {batch_size} ran out of memory on the GPU; its figures are traced")
        amp_saved = None
        if amp_mode is not None and engine is traced:
            plain = _TracedEngine(TracePlan(**{**asdict_shallow(plan), "amp": None}), info.context_to_add, sharding)
            plain_point = plain.point(batch_size)
            amp_saved = plain_point.footprint - current_trace.footprint if plain_point else None
        evaluation = None
        if eval_batch is not None:
            evaluation = _evaluation(plan, info, sharding, eval_batch, batch_size, engine is traced)
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    notes += [f"batch {b} could not be traced: {e}" for b, e in sorted(traced.errors.items())]
    trace = current_trace.trace
    notes += trace.notes + _plan_notes(plan, info, trace, amp_mode, model)
    recs = recommend(
        found.maximum,
        current,
        info.limit_bytes,
        info.reserve_bytes,
        batch_size=batch_size,
        grad_accum=grad_accum,
        effective_batch=effective_batch,
        rounding=picks_rounding[0],
        extrapolated=found.extrapolated,
        note=found.note,
    )
    return _report(
        model,
        kind,
        plan,
        info,
        engine.name,
        trace,
        current,
        found,
        recs,
        sharding,
        amp_saved,
        notes,
        input_text,
        batch_size,
        target,
        memory,
        device,
        picks_rounding,
        time.perf_counter() - started,
        evaluation,
    )


def _evaluation(
    plan: TracePlan, info: DeviceInfo, sharding: _Sharding, eval_batch: int, batch_size: int, traced: bool
) -> Evaluation:
    """The evaluation step on the traced engine (its own plan: evaluation=True) and the same batch search."""
    engine = _TracedEngine(replace(plan, evaluation=True, stack_hook=None), info.context_to_add, sharding)
    try:
        point = engine.point(eval_batch)
    except TraceError as exc:
        reason = str(exc).replace("training step failed while tracing: ", "")
        raise TraceError(f"the evaluation step at batch {eval_batch} could not be traced: {reason}") from None
    assert point is not None and point.trace is not None  # point() raises for its first batch
    found = search_maximum(engine, info.limit_bytes)
    rule = max(1, int(batch_size * EVAL_RULE_OF_THUMB))
    parts = [
        "model.eval() under torch.no_grad(): forward only; parameters and buffers resident, no gradients "
        "or optimizer state"
    ]
    if not traced:
        parts.append("traced (the training figures are measured on the GPU)")
    if found.note:
        parts.append(found.note)
    return Evaluation(
        batch=eval_batch,
        training_batch=batch_size,
        peak_live_bytes=point.trace.peak_live,
        peak_allocated_bytes=point.allocated,
        peak_reserved_bytes=point.reserved or 0,
        peak_bytes=point.footprint,
        activations_bytes=point.trace.activations,
        input_bytes=point.trace.input,
        max_batch=found.maximum,
        rule_of_thumb_batch=rule,
        engine="traced",
        note="; ".join(parts),
    )


def _with_analysed_batch(engine: Any, found: _Search, batch_size: int, limit: Optional[int]) -> _Search:
    """The search's points plus the analysed batch's (and, without a device limit, twice it, for the slope),
    for the curve and the fit; the maximum is the search's alone."""
    batches = [batch_size] if limit is not None else [batch_size, 2 * batch_size]
    points = {p.batch_size: p for p in found.points}
    for batch in batches:
        point = points.get(batch) or engine.point(batch)
        if point is not None:
            points[batch] = point
    ordered = sorted(points.values(), key=lambda p: p.batch_size)
    return _Search(ordered, found.maximum, found.extrapolated, found.note, _fit(ordered))


def asdict_shallow(plan: TracePlan) -> Dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def _state_totals(trace: TraceResult) -> Tuple[int, int, int]:
    return trace.parameters, trace.gradients, trace.optimizer_state


def _measured_limit(
    info: DeviceInfo, device: Any, model: Any, optimizer: Any, reserve: Union[None, int, float]
) -> DeviceInfo:
    """On the GPU itself: free memory after emptying the cache, plus the model states already there."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    resident = _resident_bytes(model, optimizer, "cuda", index)
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    context = _context_in_use(_local_gpu(index), torch.cuda.memory_reserved(device)) or (0, "in use")
    return _limit_info(name, "nvml", total, free, resident, reserve, f"{major}.{minor}", major >= 8, context)


def _plan_notes(plan: TracePlan, info: DeviceInfo, trace: TraceResult, amp: Optional[str], model: Any) -> List[str]:
    notes: List[str] = []
    if amp is not None:
        notes.append(
            "AMP traced with CPU autocast under CUDA's autocast policy (normalisation, softmax, reductions and "
            "element-wise math in fp32; mixed arguments promoted as CUDA's promotes them)"
        )
    if amp == "fp16":
        notes.append("fp16 AMP traced with bf16 (same 2-byte width) on CPU; GradScaler's few scalars not counted")
    if amp == "bf16" and info.bf16 is False:
        notes.append(f"{info.name} has no bf16 support: use amp='fp16'")
    if trace.dropped_hooks:
        notes.append(f"{trace.dropped_hooks} user hook(s) left out of the trace copy")
    if plan.grad_accum > 1:
        notes.append(f"gradient accumulation: 2 of {plan.grad_accum} micro-batches traced (memory repeats)")
    notes += _mode_notes(model)
    if any(type(m).__name__ in ("LSTM", "GRU", "RNN") for m in model.modules()):
        notes.append("RNNs: CUDA runs cuDNN RNN kernels whose reserve space differs from the CPU trace")
    return notes


def _mode_notes(model: Any) -> List[str]:
    """The trace keeps every module's mode: say so where a mode is not train()."""
    if not model.training:
        return [
            "the model is in eval mode: traced as you left it (dropout off, BatchNorm on running statistics); "
            "call model.train() first to analyse a training-mode step"
        ]
    in_eval: List[str] = []

    def walk(module: Any, prefix: str) -> None:
        for name, child in module.named_children():
            if not child.training:
                in_eval.append(f"{prefix}{name} ({type(child).__name__})")  # its whole subtree, once
            else:
                walk(child, f"{prefix}{name}.")

    walk(model, "")
    if not in_eval:
        return []
    shown = ", ".join(in_eval[:4]) + (f", … {len(in_eval) - 4} more" if len(in_eval) > 4 else "")
    return [f"{len(in_eval)} submodule(s) in eval mode, traced as you left them: {shown}"]


def _figures(
    engine: str,
    trace: TraceResult,
    info: DeviceInfo,
    user_opt: Optional[Tuple[int, int]],
    modelled: OptimizerModel,
    point: _Point,
    plan: TracePlan,
) -> List[Figure]:
    act_engine = "traced"
    opt_figure = (
        Figure("optimizer", user_opt[0], "read", "your optimizer's state tensors")
        if user_opt
        else Figure(
            "optimizer",
            trace.optimizer_state,
            "traced",
            f"modelled: {format_bytes(modelled.state_bytes, 'fit')}" if modelled.known else "traced only",
        )
    )
    return [
        Figure("parameters", trace.parameters, "read", "unique storages (tied weights once)"),
        Figure("buffers", trace.buffers, "read", ""),
        Figure("gradients", trace.gradients, "traced", "one per trainable parameter"),
        opt_figure,
        Figure(
            "optimizer_transient",
            trace.optimizer_transient,
            "traced",
            f"temporaries during step(); modelled {format_bytes(modelled.transient_bytes, 'fit')}"
            if modelled.known
            else "temporaries during step()",
        ),
        Figure("activations", trace.activations, act_engine, "kept by the forward pass for backward"),
        Figure("input", trace.input, "traced", "one batch"),
        Figure("peak_allocated", point.allocated, engine, "steady state: step 2"),
        Figure(
            "peak_reserved",
            point.reserved,
            engine,
            "caching-allocator model" if engine == "traced" else "torch.cuda.max_memory_reserved",
        ),
        Figure(
            "cublas_workspace",
            trace.cublas_bytes,
            "source",
            "CublasHandlePool.cpp for this torch: one per thread (forward, autograd), cuBLASLt's too where kept",
        ),
        Figure("cudnn_workspace", trace.cudnn_peak_bytes, "estimate", "per convolution, capped at 128 MiB"),
        Figure(
            "context",
            info.context_bytes,
            "estimate" if info.context_source == "estimate" else "nvml",
            {
                "estimate": "CUDA context + kernels, by GPU generation",
                "nvml": "this kernel's, already in use",
                "in use": "already in use, size not visible to NVML",
                "none": "no GPU",
            }[info.context_source],
        ),
        Figure(
            "peak",
            point.footprint,
            engine,
            "peak_reserved + context: the step's device footprint"
            if info.context_to_add
            else "peak_reserved: the step's device footprint (no context added: "
            + ("none counted without a GPU)" if info.context_source == "none" else "already in use)"),
        ),
    ]


def _report(
    model: Any,
    kind: Any,
    plan: TracePlan,
    info: DeviceInfo,
    engine: str,
    trace: TraceResult,
    point: _Point,
    found: _Search,
    recs: Recommendations,
    sharding: _Sharding,
    amp_saved: Optional[int],
    notes: List[str],
    input_text: str,
    batch_size: int,
    target: Any,
    memory: Any,
    device: Any,
    picks_rounding: Tuple[Rounding, str],
    elapsed: float,
    evaluation: Optional[Evaluation] = None,
) -> AnalysisReport:
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    user_opt = None if isinstance(kind, str) else read_optimizer_state(kind)
    modelled = model_optimizer_state(trainable, kind)
    opt_name, _ = _optimizer_settings(kind)
    settings = {
        "batch_size": batch_size,
        "input": input_text,
        "loss": _loss_setting(plan, trace),
        "optimizer": OPTIMIZER_NAMES.get(opt_name, opt_name) if isinstance(kind, str) else type(kind).__name__,
        "amp": plan.amp,
        "grad_accum": plan.grad_accum,
        "checkpointing": plan.checkpointing,
        "device": None if device is None else str(device),
        "target": target,
        "memory": None if memory is None else str(memory),
        "world_size": sharding.world_size,
        "strategy": sharding.strategy,
        "multiple": picks_rounding[0].multiple,
        "effective_batch": recs.accumulation.target_effective_batch,
        # how the picks were rounded (--round's value) and where that came from: option | setting | default
        "round": picks_rounding[0].code,
        "round_source": picks_rounding[1],
        # the shares of the maximum the recommended and safe picks aim at, before rounding
        "pick_shares": {"recommended": RECOMMENDED_SHARE, "safe": SAFE_SHARE},
    }
    distributed = _distributed(sharding, trace, point, recs) if sharding.world_size > 1 or sharding.strategy else None
    device_result = trace.device
    figures = _figures(engine, trace, info, user_opt, modelled, point, plan)
    if engine == "measured":
        notes.append("breakdown figures are from a trace of the same step; peaks are measured on the GPU")
    return AnalysisReport(
        engine=engine,
        model_name=type(model).__name__,
        parameter_count=sum(p.numel() for p in _unique(params)),
        trainable_parameter_count=sum(p.numel() for p in _unique(trainable)),
        parameters_by_dtype=bytes_by_dtype(params),
        buffers_by_dtype=bytes_by_dtype(list(model.buffers())),
        largest_layer=_largest_layer(model),
        settings=settings,
        parameters_bytes=unique_bytes(params),
        buffers_bytes=unique_bytes(list(model.buffers())),
        gradients_bytes=trace.gradients,
        optimizer_bytes=user_opt[0] if user_opt else trace.optimizer_state,
        optimizer_host_bytes=user_opt[1] if user_opt else trace.optimizer_host,
        optimizer_transient_bytes=trace.optimizer_transient,
        activations_bytes=trace.activations,
        input_bytes=trace.input,
        autocast_cache_bytes=trace.autocast_cache,
        temporary_bytes=trace.breakdown["temporary"],
        peak_live_bytes=trace.peak_live,
        peak_allocated_bytes=point.allocated,
        peak_reserved_bytes=point.reserved,
        context_bytes=info.context_bytes,
        workspace_bytes=trace.cublas_bytes + trace.cudnn_peak_bytes,
        peak_bytes=point.footprint,
        figures=figures,
        breakdown_at_peak=dict(trace.breakdown),
        phase_peaks=dict(trace.phase_peaks),
        peak_phase=trace.peak_phase,
        amp_saved_bytes=amp_saved,
        allocator={
            "segments": len(device_result.segments),
            "small_segments": sum(1 for s in device_result.segments if s.pool == "small"),
            "large_segments": sum(1 for s in device_result.segments if s.pool == "large"),
            "fragmentation": round(device_result.fragmentation, 4),
        },
        device=info,
        curve=[CurvePoint(p.batch_size, p.footprint, p.allocated, p.reserved, p.engine) for p in found.points],
        fit=found.fit,
        recommendations=recs,
        distributed=distributed,
        error_bound=_error_bound(engine, info, found),
        notes=notes,
        elapsed_seconds=round(elapsed, 3),
        evaluation=evaluation,
    )


def _loss_setting(plan: TracePlan, trace: TraceResult) -> str:
    if plan.loss_fn is not default_loss:
        return getattr(plan.loss_fn, "__name__", "custom")
    return "the model's own (output.loss)" if trace.loss_source == "model" else "default"


def _unique(params: Sequence[Any]) -> List[Any]:
    keep: List[Any] = []
    seen, result = set(), []
    for p in params:
        key = _storage_key(p, keep)
        if key not in seen:
            seen.add(key)
            result.append(p)
    return result


def _distributed(sharding: _Sharding, trace: TraceResult, point: _Point, recs: Recommendations) -> Distributed:
    fp, fg, fo = sharding.factors()
    extra, extra_note = sharding.extra()
    note = (
        "per-rank model states by the strategy's sharding, activations of this rank's batch (not sharded); "
        "communication buffers (NCCL) are not counted"
    )
    return Distributed(
        world_size=sharding.world_size,
        strategy=sharding.strategy or "ddp",
        parameters_bytes=int(trace.parameters * fp),
        gradients_bytes=int(trace.gradients * fg),
        optimizer_bytes=int(trace.optimizer_state * fo),
        extra_bytes=extra,
        extra_note=extra_note,
        activations_bytes=trace.activations,
        peak_bytes=point.footprint,
        note=note,
    )


def _error_bound(engine: str, info: DeviceInfo, found: _Search) -> ErrorBound:
    residual = found.fit.max_relative_residual if found.fit and found.fit.max_relative_residual else 0.0
    absolute = CONTEXT_UNCERTAINTY if info.context_source == "estimate" else 0
    if engine == "measured":
        relative = round(residual + 0.02, 4)
        statement = (
            f"measured peaks of steps 2-3 on this GPU; linear fit residual {residual:.1%}; "
            f"expect within ±{relative:.0%} for runs like these"
        )
    else:
        relative = TRACED_RELATIVE_ERROR
        statement = (
            "traced on fake CPU tensors: live tensor bytes agree with a real CPU step within 5% "
            "(MLP, CNN, ResNet, Transformer, LSTM); CUDA kernels (cuDNN workspaces, fused attention) "
            "and the caching-allocator model add uncertainty: expect within ±10%"
        )
        if absolute:
            statement += f", plus ±{format_bytes(absolute, 'MiB', 0)} for the estimated CUDA context"
    return ErrorBound(relative, absolute, statement)


# --- the seeds' Python API -------------------------------------------------------------------------------------


def get_gpu_info() -> List[Dict[str, Any]]:
    """One dict per GPU visible to this kernel (NVML; never initialises CUDA)."""
    try:
        from gpumem_kernel.probe.prober import probe

        sample = probe()
    except Exception:
        return []
    result = []
    for d in sample.gpu.devices:
        if d.cuda_index is None:
            continue
        result.append(
            {
                "index": d.cuda_index,
                "name": d.name,
                "uuid": d.uuid,
                "mig": d.mig,
                "total_memory": d.total,
                "used_memory": d.used,
                "free_memory": d.free,
                "compute_capability": d.compute_capability,
                "multi_processor_count": d.sm_count,
                "this_kernel": d.this_kernel,
            }
        )
    return sorted(result, key=lambda r: r["index"])


def print_gpu_info() -> None:
    from gpumem_kernel.analysis.render import render_gpu_info

    print(render_gpu_info(get_gpu_info()))


def print_memory_analysis(
    model: Any, batch_size: int = 32, device_id: int = 0, mixed_precision: bool = False, **options: Any
) -> AnalysisReport:
    """The analysis guide's analysis block, printed; also returns the report. `options` go to analyze()."""
    if "amp" not in options:
        options["amp"] = "fp16" if mixed_precision else None
    if "device" not in options and cuda_initialised():
        options["device"] = f"cuda:{device_id}"
    report = analyze(model, batch_size=batch_size, **options)
    print(str(report))
    return report


def recommend_batch_size(
    model: Any,
    gpu_memory_gb: Optional[float] = None,
    safety_margin: float = 0.1,
    mixed_precision: bool = False,
    batch_size: int = 8,
    **options: Any,
) -> Dict[str, Any]:
    """{'maximum', 'recommended', 'safe'} for `model`.

    gpu_memory_gb: plan for this much memory (GiB, as the analysis guide prints 'GB'); default: this machine's GPU.
    safety_margin: fraction of the device kept free (0.1 = 10%). The analysis guide documented 0.7 as "use 70%";
    values above 0.5 are read that way (reserve 1 - value).
    """
    if not 0 <= safety_margin < 1:
        raise ValueError(f"safety_margin must be in [0, 1), got {safety_margin!r}")
    reserve = 1 - safety_margin if safety_margin > 0.5 else safety_margin
    if gpu_memory_gb is not None:
        options.setdefault("memory", int(float(gpu_memory_gb) * GiB))
    options.setdefault("amp", "fp16" if mixed_precision else None)
    report = analyze(model, batch_size=batch_size, reserve=float(reserve), **options)
    recs = report.recommendations
    return {
        "maximum": recs.maximum,
        "recommended": recs.recommended,
        "safe": recs.safe,
        "current": recs.current.status,
        "engine": report.engine,
    }


def _synchronize_used(torch: Any, device_id: int) -> None:
    """Wait for the device's queued work, but only on a device this process has allocated on: synchronising
    a device it never used would create a CUDA context there (~300-500 MiB of someone's GPU)."""
    if torch.cuda.memory_reserved(device_id) > 0:
        torch.cuda.synchronize(device_id)


@dataclass
class MonitorResult:
    device: str  # "cuda:N" or "host"
    peak_bytes: Optional[int]  # peak over the block's start (GPU); None on the host
    delta_bytes: int
    reserved_bytes: Optional[int]
    note: str

    def text(self, label: str = "") -> str:
        head = f"🔍 {label + ': ' if label else ''}{self.device}"
        if self.device == "host":
            return f"{head} RSS delta {format_bytes(self.delta_bytes, 'auto')} ({self.note})"
        peak, delta = format_bytes(self.peak_bytes, "auto"), format_bytes(self.delta_bytes, "auto")
        return f"{head} peak +{peak}, delta {delta}, reserved {format_bytes(self.reserved_bytes, 'auto')}"


class MemoryMonitor:
    """`with monitor_gpu_memory(0): ...` or `@monitor_gpu_memory(0)`: the block's peak and delta.

    GPU figures are read only if CUDA is initialised (by the block or before); otherwise the host RSS delta
    is reported, and the report says so.
    """

    def __init__(
        self, device_id: int = 0, reset: bool = True, label: str = "", printer: Optional[Callable[[str], None]] = print
    ) -> None:
        self.device_id, self.reset, self.label, self.printer = device_id, reset, label, printer
        self.result: Optional[MonitorResult] = None
        self._start_allocated = 0
        self._start_rss = 0
        self._cuda_at_start = False

    def __enter__(self) -> "MemoryMonitor":
        import psutil

        self._cuda_at_start = cuda_initialised()
        self._start_rss = psutil.Process().memory_info().rss
        if self._cuda_at_start:
            import torch

            _synchronize_used(torch, self.device_id)
            if self.reset:
                torch.cuda.reset_peak_memory_stats(self.device_id)
            self._start_allocated = torch.cuda.memory_allocated(self.device_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        import psutil

        if cuda_initialised():
            import torch

            _synchronize_used(torch, self.device_id)
            start = self._start_allocated if self._cuda_at_start else 0
            self.result = MonitorResult(
                f"cuda:{self.device_id}",
                torch.cuda.max_memory_allocated(self.device_id) - start,
                torch.cuda.memory_allocated(self.device_id) - start,
                torch.cuda.memory_reserved(self.device_id),
                "" if self.reset or not self._cuda_at_start else "peak since the last reset",
            )
        else:
            delta = psutil.Process().memory_info().rss - self._start_rss
            self.result = MonitorResult("host", None, delta, None, "host RSS: CUDA is not initialised in this kernel")
        if self.printer is not None:
            self.printer(self.result.text(self.label))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with MemoryMonitor(self.device_id, self.reset, self.label or fn.__name__, self.printer):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        if cuda_initialised():
            import torch

            index = self.device_id
            return (
                f"GPU {index}: allocated {format_bytes(torch.cuda.memory_allocated(index), 'auto')}, "
                f"reserved {format_bytes(torch.cuda.memory_reserved(index), 'auto')}, "
                f"peak {format_bytes(torch.cuda.max_memory_allocated(index), 'auto')}"
            )
        return "CUDA is not initialised in this kernel: no GPU memory in use (use it as `with` or a decorator)"


def monitor_gpu_memory(device_id: int = 0, reset: bool = True, label: str = "") -> MemoryMonitor:
    """The guides' memory monitor: a context manager and a decorator; shown bare, it reports the current state."""
    return MemoryMonitor(device_id, reset, label)


def analysis_bundle(report: AnalysisReport) -> Dict[str, Any]:
    from gpumem_kernel.analysis.render import analysis_bundle as bundle

    return bundle(report)
