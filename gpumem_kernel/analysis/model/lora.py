"""LoRA adapters added to a planning copy of the model (`lora="r=16,targets=q_proj,v_proj"`): never to the user's.

With peft installed the adapters are peft's own (`get_peft_model` with a `LoraConfig`); without it, our minimal
modules hold and run the same tensors as peft's `lora.Linear` (peft/tuners/lora/layer.py, release 0.21.2):
A [r, in] and B [out, r] (nn.Linear without bias), in fp32 (`autocast_adapter_dtype`: peft upcasts bf16/fp16
adapters) or, with `dtype=bf16`, in bf16 as LitGPT and torchtune train them (peft's `autocast_adapter_dtype=False`),
a Dropout on the adapter's input when dropout > 0 (its mask and output, kept for backward), the input cast to the
adapters' dtype when it differs (a copy, kept by A for backward), and the sum cast back to the base layer's output
dtype. The base model is frozen: only the adapters train.

torch (and peft) are imported inside functions only: the kernel shim must load without them.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

DEFAULT_ALPHA = 8  # peft's LoraConfig default
DEFAULT_DROPOUT = 0.0  # peft's LoraConfig default
# the attention projections by family: Llama, Mistral, Qwen, Gemma, Phi-3 (qkv_proj), OPT and CLIP (out_proj); BERT
# and ViT; Falcon, BLOOM, GPT-NeoX; GPT-2 (a Conv1D); MPT and ModernBERT; T5
ATTENTION_NAMES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "qkv_proj",
    "out_proj",
    "query",
    "key",
    "value",
    "query_key_value",
    "c_attn",
    "Wqkv",
    "q",
    "k",
    "v",
    "o",
)
_KEYS = ("r", "targets", "alpha", "dropout", "dtype")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
LORA_HELP = (
    "add LoRA adapters to a copy of the model for the plan (never to yours): r=N[,targets=a,b][,alpha=A]"
    "[,dropout=P][,dtype=bf16|fp32]; base frozen, adapters fp32 as peft makes them (dtype=bf16: in bf16, as LitGPT "
    "and torchtune train them); targets default to the attention projections "
    "found by name (q_proj,k_proj,v_proj,o_proj, or the family's: query,key,value; query_key_value; c_attn; q,k,v,o); "
    "alpha 8 and dropout 0 by default (peft's)"
)


@dataclass(frozen=True)
class LoraSpec:
    r: int
    targets: Optional[Tuple[str, ...]] = None  # None: the attention projections found by name
    alpha: float = DEFAULT_ALPHA
    dropout: float = DEFAULT_DROPOUT
    dtype: str = "fp32"  # the adapters' dtype: a key of DTYPES

    def text(self, targets: Optional[Tuple[str, ...]] = None) -> str:
        names = ",".join(targets or self.targets or ("attention",))
        held = "" if self.dtype == "fp32" else f", dtype={self.dtype}"
        return f"r={self.r}, targets={names}, alpha={self.alpha:g}, dropout={self.dropout:g}{held}"

    @property
    def torch_dtype(self) -> str:
        """The adapters' torch dtype name (float32, bfloat16, float16)."""
        return DTYPES[self.dtype]


@dataclass
class Adapters:
    """What adding the adapters did, for the report."""

    spec: LoraSpec
    targets: Tuple[str, ...]  # the names matched
    layers: List[str] = field(default_factory=list)  # dotted paths of the adapted layers
    with_peft: Optional[str] = None  # peft's version when peft added them; None: our own modules


# --- the option -----------------------------------------------------------------------------------------------


def parse_lora(value: Any) -> Optional[LoraSpec]:
    """None, 16, 'r=16', '16', 'r=16,targets=q_proj,v_proj,alpha=32,dropout=0.05,dtype=bf16', a dict of those keys or
    a LoraSpec -> a LoraSpec; ValueError (one line) otherwise."""
    if value is None or value is False or isinstance(value, LoraSpec):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"r": value}
    if isinstance(value, str):
        value = _settings(value)
    if not isinstance(value, dict):
        raise ValueError(f"lora must be 'r=N[,targets=...]', a rank or a dict, not {type(value).__name__}")
    unknown = [key for key in value if key not in _KEYS]
    if unknown:
        raise ValueError(f"lora: unknown setting {unknown[0]!r}; use {', '.join(_KEYS)}")
    if "r" not in value:
        raise ValueError("lora: give the rank, e.g. r=16")
    return LoraSpec(
        r=_rank(value["r"]),
        targets=_targets(value.get("targets")),
        alpha=_number(value.get("alpha", DEFAULT_ALPHA), "alpha", positive=True),
        dropout=_dropout(value.get("dropout", DEFAULT_DROPOUT)),
        dtype=_dtype(value.get("dtype", "fp32")),
    )


def _settings(text: str) -> Dict[str, Any]:
    """'r=16,targets=q_proj,v_proj,alpha=32' -> {'r': '16', 'targets': 'q_proj,v_proj', 'alpha': '32'}: a part
    without '=' continues the previous setting's list (targets')."""
    settings: Dict[str, Any] = {}
    key = None
    for part in (p.strip() for p in text.split(",")):
        if "=" in part:
            key, _, raw = part.partition("=")
            key = key.strip().lower()
            settings[key] = raw.strip()
        elif key is None and part:  # a bare rank: '16'
            key, settings["r"] = "r", part
        elif key is not None and part:
            settings[key] = f"{settings[key]},{part}"
    return settings


def _rank(value: Any) -> int:
    try:
        rank = int(str(value).strip())
    except ValueError:
        rank = 0
    if isinstance(value, bool) or rank < 1 or (isinstance(value, float) and value != rank):
        raise ValueError(f"lora: r must be a positive integer, got {value!r}")
    return rank


def _number(value: Any, name: str, positive: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"lora: {name} must be a number, got {value!r}") from None
    if positive and number <= 0:
        raise ValueError(f"lora: {name} must be positive, got {value!r}")
    return number


def _dropout(value: Any) -> float:
    number = _number(value, "dropout")
    if not 0 <= number < 1:
        raise ValueError(f"lora: dropout must be in [0, 1), got {value!r}")
    return number


def _dtype(value: Any) -> str:
    name = str(value).strip().lower()
    aliases = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "torch.float32": "fp32"}
    aliases.update({"torch.bfloat16": "bf16", "torch.float16": "fp16"})
    name = aliases.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"lora: dtype must be one of {', '.join(DTYPES)}, got {value!r}")
    return name


def _targets(value: Any) -> Optional[Tuple[str, ...]]:
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in names if str(n).strip()]
    if not names:
        raise ValueError("lora: targets is empty; name layers, e.g. targets=q_proj,v_proj")
    return tuple(names)


# --- the adapters ---------------------------------------------------------------------------------------------


def adaptable(model: Any) -> List[Tuple[str, Any]]:
    """(dotted path, layer) of each layer LoRA can wrap: nn.Linear (bitsandbytes' stand-ins among them) and
    transformers' Conv1D (GPT-2)."""
    import torch

    return [
        (path, m)
        for path, m in model.named_modules()
        if path and (isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D")
    ]


def matches(path: str, target: str) -> bool:
    """peft's rule for a name in target_modules: the whole path, or its last dotted parts."""
    return path == target or path.endswith("." + target)


def resolve_targets(model: Any, spec: LoraSpec) -> Tuple[Tuple[str, ...], List[str]]:
    """(target names, adapted layer paths); ValueError when the targets match no layer."""
    layers = adaptable(model)
    leaves = sorted({path.rsplit(".", 1)[-1] for path, _ in layers})
    if spec.targets is None:
        targets = tuple(n for n in ATTENTION_NAMES if n in leaves)
        if not targets:
            raise ValueError(
                f"lora: no attention projection found by name in {type(model).__name__} (its layers end in: "
                f"{_shown(leaves)}); name them with targets=..."
            )
    else:
        targets = spec.targets
        missing = [t for t in targets if not any(matches(path, t) for path, _ in layers)]
        if missing:
            raise ValueError(
                f"lora: targets {','.join(missing)} match no Linear layer of {type(model).__name__} "
                f"(its layers end in: {_shown(leaves)})"
            )
    return targets, [path for path, _ in layers if any(matches(path, t) for t in targets)]


def _shown(names: List[str], most: int = 8) -> str:
    if not names:
        return "none"
    return ", ".join(names[:most]) + (f", … {len(names) - most} more" if len(names) > most else "")


def add_adapters(
    model: Any, spec: LoraSpec, on_meta: bool = True, use_peft: Optional[bool] = None
) -> Tuple[Any, Adapters]:
    """(the model with adapters, what was added): peft's when installed (or use_peft=True), else our own. `model`
    is a planning copy; its parameters are frozen."""
    targets, paths = resolve_targets(model, spec)
    peft = _peft() if use_peft is not False else None
    if use_peft and peft is None:
        raise ValueError("lora: peft is not installed in this kernel")
    done = Adapters(spec, targets, paths)
    for p in model.parameters():
        p.requires_grad_(False)
    if peft is not None:
        done.with_peft = str(peft.__version__)
        return _with_peft(peft, model, spec, targets), done
    for path in paths:
        _wrap(model, path, spec, on_meta)
    return model, done


def load_peft() -> Any:
    """The peft module, None when it is not installed (imported quietly: see _peft)."""
    return _peft()


def _peft() -> Any:
    # peft imports bitsandbytes where it is installed; on a CPU with AVX512-BF16 and without the `kernels` package,
    # that import logs a warning about a CPU 4-bit matmul kernel. The plan runs no such matmul, and the warning
    # would read as a failure under the user's cell, so it is dropped while this import runs (only that record).
    cpu_ops = logging.getLogger("bitsandbytes.backends.cpu.ops")
    quiet = _DropRecord("Failed to load CPU gemm_4bit_forward")
    cpu_ops.addFilter(quiet)
    try:
        import peft
    except ImportError:
        return None
    finally:
        cpu_ops.removeFilter(quiet)
    return peft


class _DropRecord(logging.Filter):
    """Drops the log records whose message starts with `prefix`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _with_peft(peft: Any, model: Any, spec: LoraSpec, targets: Tuple[str, ...]) -> Any:
    config = peft.LoraConfig(
        r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=list(targets), bias="none"
    )
    try:
        # fp32 adapters are peft's default (it upcasts bf16/fp16 ones); another dtype: peft leaves them in the base
        # layer's dtype, and they are cast to the one asked (a 4-bit or fp32 base layer has another)
        wrapped = peft.get_peft_model(model, config, autocast_adapter_dtype=spec.dtype == "fp32")
    except Exception as exc:  # a layer type peft does not wrap, a model its checks refuse ...
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"lora: peft cannot add the adapters ({type(exc).__name__}: {first})") from None
    cast_adapters(wrapped, spec.torch_dtype)
    return wrapped


def cast_adapters(model: Any, dtype_name: str) -> None:
    """The trainable parameters (the adapters) held in `dtype_name`, in place."""
    import torch

    dtype = getattr(torch, dtype_name)
    for p in model.parameters():
        if p.requires_grad and p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)


def _wrap(model: Any, path: str, spec: LoraSpec, on_meta: bool) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, lora_linear_class()(getattr(parent, name), spec, "meta" if on_meta else "cpu"))


def layer_features(layer: Any) -> Tuple[int, int]:
    """(in, out) of a Linear or a Conv1D (whose weight is [in, out])."""
    if type(layer).__name__ == "Conv1D":
        return int(layer.weight.shape[0]), int(layer.weight.shape[1])
    return int(layer.in_features), int(layer.out_features)


@functools.lru_cache(maxsize=None)
def lora_linear_class() -> type:
    """Our adapter module: peft's lora.Linear forward for one adapter, with the same tensors."""
    import torch

    class LoraLinear(torch.nn.Module):
        def __init__(self, base: Any, spec: LoraSpec, device: str) -> None:
            super().__init__()
            self.base_layer = base
            in_features, out_features = layer_features(base)
            dtype = getattr(torch, spec.torch_dtype)
            self.lora_A = torch.nn.Linear(in_features, spec.r, bias=False, device=device, dtype=dtype)
            self.lora_B = torch.nn.Linear(spec.r, out_features, bias=False, device=device, dtype=dtype)
            self.lora_dropout = torch.nn.Dropout(spec.dropout) if spec.dropout > 0 else torch.nn.Identity()
            self.scaling = spec.alpha / spec.r

        def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            result = self.base_layer(x, *args, **kwargs)
            dtype = result.dtype
            x = x.to(self.lora_A.weight.dtype)  # peft's _cast_input_dtype: a copy only when the dtypes differ
            result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
            return result.to(dtype)

    return LoraLinear


# the adapters' parameter names by method: LoRA and DoRA (lora_A, lora_B, lora_embedding_*, lora_magnitude_vector),
# IA3, LoHa, LoKr, LN tuning's trained copies, and the prompt encoder of prompt, prefix and P-tuning
ADAPTER_PREFIXES = ("lora_", "ia3_", "hada_", "lokr_", "ln_tuning_layers", "prompt_encoder")


def adapter_parameters(model: Any) -> List[Any]:
    """The adapter parameters of a model (peft's or ours), by name (ADAPTER_PREFIXES)."""
    return [p for name, p in model.named_parameters() if any(f".{prefix}" in f".{name}" for prefix in ADAPTER_PREFIXES)]
