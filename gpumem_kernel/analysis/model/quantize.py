"""bitsandbytes' quantised Linear layers, as a plan traces them (`quantize="nf4" | "fp4" | "int8"`): the one source of
their layouts, and the stand-in modules that hold those tensors and run their forward and backward's allocations.

Layouts (bitsandbytes 0.50.2, commit 95f9af30; checked against the real classes on the CPU in tests/analysis/
test_quantize.py):

- 4-bit (`Linear4bit`, `Params4bit`, functional.py `quantize_4bit`): the weight packed two values a byte, uint8
  [ceil(numel / 2), 1]; per 64-element block an absmax; the quant type's 16-value fp32 code. With double
  quantisation (`compress_statistics`, on in QLoRA and in transformers' `bnb_4bit_use_double_quant` recipes) the
  absmax is itself quantised: uint8 per block, plus per 256 blocks an fp32 absmax, its 256-value fp32 code and an
  fp32 offset (`QuantState.state2`, `offset`); without it the absmax is fp32 per block. The bias is cast to the
  compute dtype at the first forward (`Linear4bit.forward`).
- 8-bit (`Linear8bitLt`, `Int8Params`, LLM.int8()): an int8 weight of the full shape and fp32 row scales `SCB`
  [out_features]; the outlier threshold (default 6.0) splits outlier input columns off in fp16 at run time: their
  count depends on values, so the trace leaves them out (noted).

Run time, as CUDA runs a training batch (tokens above the fused kernels' few rows: `_dequant_linear_fallback`):

- 4-bit forward: the input cast to the compute dtype (bf16 by default), the nested absmax dequantised (fp32 per
  block) and the weight dequantised into a [out, in] transient of the compute dtype, then `F.linear`; backward
  (`MatMul4Bit.backward`, only when the input needs a gradient) dequantises again, into the dtype the weight was
  quantised from, cast to the gradient's dtype where it differs. Nothing of the layer is saved for backward but the
  packed weight itself (before 0.43.2 its input too; before 0.43.0 the weight was quantised from fp16 and
  dequantised into it; before 0.50.0 forward too dequantised into the dtype the weight was quantised from and cast
  to the compute dtype, two copies where they differ: the rules of analysis.model.bnb_rules, `bnb_version=`).
- 8-bit forward (`MatMul8bitLt`): the input cast to fp16, int8-quantised (int8 [tokens, in], fp32 scale per row),
  an int32 product [tokens, out] dequantised into the output; the input is kept for backward, which dequantises the
  weight into the input's dtype ([out, in]) for the input's gradient.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from gpumem_kernel.analysis.model.bnb_rules import (
    FOUR_BIT_FORWARD_CASTS,
    FOUR_BIT_FROM_FP16,
    FOUR_BIT_KEEPS_INPUT,
    note,
    rules_for,
)

KINDS = ("nf4", "fp4", "int8")
BLOCKSIZE = 64  # Params4bit's default blocksize
NESTED_BLOCKSIZE = 256  # quantize_4bit's second quantisation of absmax (compress_statistics)
CODE_VALUES_4BIT = 16  # get_4bit_type: one fp32 per 4-bit value
CODE_VALUES_8BIT = 256  # create_dynamic_map for the nested absmax
DEFAULT_COMPUTE = "bf16"
DEFAULT_THRESHOLD = 6.0
COMPUTE_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_SETTINGS = ("double", "compute", "threshold")
QUANTIZE_HELP = (
    "trace the base Linear layers as bitsandbytes runs them: nf4 or fp4 (4-bit, QLoRA: packed weights, absmax per 64 "
    "values, double quantisation on, compute bf16) or int8 (LLM.int8: int8 weights, fp32 row scales); "
    "settings after a comma: double=off, compute=fp16|bf16|fp32, threshold=6.0 (int8); the output layer "
    "(lm_head) stays unquantised, as transformers leaves it"
)


@dataclass(frozen=True)
class QuantSpec:
    """How the base Linear layers are quantised."""

    kind: str  # nf4 | fp4 | int8
    double_quant: bool = True  # 4-bit: the absmax quantised again (QLoRA's default)
    compute: str = DEFAULT_COMPUTE  # 4-bit: the dtype the dequantised weight and the matmul run in
    threshold: float = DEFAULT_THRESHOLD  # int8: outlier threshold (outliers not traced)
    # 4-bit: the layer keeps its input for backward, as bitsandbytes before 0.43.2 did (bnb_rules.FOUR_BIT_KEEPS_INPUT)
    keeps_input: bool = False
    # 4-bit: the dtype the weight was quantised from, where not its own (bitsandbytes before 0.43.0: float16,
    # bnb_rules.FOUR_BIT_FROM_FP16): what backward (and an old forward) dequantises into
    quantized_from: Optional[str] = None
    # 4-bit: forward dequantises into the dtype the weight was quantised from, then casts to the compute dtype, as
    # bitsandbytes before 0.50.0 did (bnb_rules.FOUR_BIT_FORWARD_CASTS); since, into the compute dtype at once
    forward_casts: bool = False

    @property
    def four_bit(self) -> bool:
        return self.kind != "int8"

    def text(self) -> str:
        if not self.four_bit:
            return f"int8 (LLM.int8, threshold {self.threshold:g})"
        double = "double quantisation" if self.double_quant else "no double quantisation"
        kept = ", each layer's input kept for backward" if self.keeps_input else ""
        origin = f", quantised from {self.quantized_from}" if self.quantized_from else ""
        cast = ", forward dequantised into the weight's dtype, then cast" if self.forward_casts else ""
        return f"{self.kind} ({double}, compute {self.compute}{origin}{cast}{kept})"


@dataclass(frozen=True)
class Piece:
    """One resident tensor of a quantised layer."""

    name: str
    shape: Tuple[int, ...]
    dtype: str  # a torch dtype's name

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * _ITEMSIZE[self.dtype]


_ITEMSIZE = {"uint8": 1, "int8": 1, "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}


def parse_quantize(value: Any) -> Optional[QuantSpec]:
    """None, 'nf4', 'nf4,double=off,compute=fp16', 'int8,threshold=4' or a QuantSpec -> a QuantSpec; ValueError
    (one line) otherwise."""
    if value is None or value is False or isinstance(value, QuantSpec):
        return value or None
    if not isinstance(value, str):
        raise ValueError(f"quantize must be one of {', '.join(KINDS)} (a string), not {type(value).__name__}")
    kind, *settings = [part.strip() for part in value.split(",")]
    if kind.lower() not in KINDS:
        raise ValueError(f"unknown quantize {kind!r}; use one of {', '.join(KINDS)}")
    spec = QuantSpec(kind.lower())
    for setting in settings:
        spec = _with_setting(spec, setting, value)
    return spec


def with_bnb_version(spec: Optional[QuantSpec], bnb_version: Optional[str]) -> Tuple[Optional[QuantSpec], List[str]]:
    """`spec` as the planned bitsandbytes runs it (analysis.model.bnb_rules), and a note per rule applied; the
    version is checked (ValueError, one line) even without a spec."""
    rules = rules_for(bnb_version)
    if spec is None or not spec.four_bit or not rules:
        return spec, []
    changes = {"keeps_input": FOUR_BIT_KEEPS_INPUT in rules, "forward_casts": FOUR_BIT_FORWARD_CASTS in rules}
    if FOUR_BIT_FROM_FP16 in rules:
        changes["quantized_from"] = "float16"
    return _replace(spec, **changes), [note(str(bnb_version), rule) for rule in rules]


def _with_setting(spec: QuantSpec, setting: str, text: str) -> QuantSpec:
    key, _, raw = setting.partition("=")
    key, raw = key.strip().lower(), raw.strip().lower()
    if key not in _SETTINGS or not raw:
        raise ValueError(f"quantize {text!r}: unknown setting {setting!r}; use {', '.join(s + '=' for s in _SETTINGS)}")
    if key == "double":
        if raw not in ("on", "off", "true", "false", "1", "0"):
            raise ValueError(f"quantize {text!r}: double must be on or off, got {raw!r}")
        return _replace(spec, double_quant=raw in ("on", "true", "1"))
    if key == "compute":
        if raw not in COMPUTE_DTYPES:
            raise ValueError(f"quantize {text!r}: compute must be one of {', '.join(COMPUTE_DTYPES)}, got {raw!r}")
        return _replace(spec, compute=raw)
    try:
        threshold = float(raw)
    except ValueError:
        threshold = -1.0
    if threshold < 0:
        raise ValueError(f"quantize {text!r}: threshold must be a number >= 0, got {raw!r}")
    return _replace(spec, threshold=threshold)


def _replace(spec: QuantSpec, **changes: Any) -> QuantSpec:
    return QuantSpec(**{**spec.__dict__, **changes})


# --- layouts ------------------------------------------------------------------------------------------------------


def _blocks(count: int, size: int) -> int:
    return -(-count // size)


def layout(spec: QuantSpec, out_features: int, in_features: int) -> List[Piece]:
    """The resident tensors bitsandbytes keeps for one quantised [out, in] weight (the bias aside)."""
    numel = out_features * in_features
    if not spec.four_bit:
        return [Piece("weight", (out_features, in_features), "int8"), Piece("SCB", (out_features,), "float32")]
    blocks = _blocks(numel, BLOCKSIZE)
    pieces = [Piece("weight", (_blocks(numel, 2), 1), "uint8")]
    if spec.double_quant:
        pieces += [
            Piece("absmax", (blocks,), "uint8"),
            Piece("nested_absmax", (_blocks(blocks, NESTED_BLOCKSIZE),), "float32"),
            Piece("nested_code", (CODE_VALUES_8BIT,), "float32"),
            Piece("offset", (), "float32"),
        ]
    else:
        pieces.append(Piece("absmax", (blocks,), "float32"))
    return pieces + [Piece("code", (CODE_VALUES_4BIT,), "float32")]


def resident_bytes(spec: QuantSpec, out_features: int, in_features: int) -> int:
    return sum(piece.nbytes for piece in layout(spec, out_features, in_features))


def dequant_bytes(spec: QuantSpec, out_features: int, in_features: int, weight_dtype: str) -> Tuple[int, int]:
    """(forward, backward) bytes of one layer's dequantisation transients: the dequantised weight (and the fp32
    absmax it is scaled by); a cast to the compute dtype too where the weight was quantised from another: always in
    backward, in forward only as bitsandbytes before 0.50.0 ran it (`forward_casts`)."""
    numel = out_features * in_features
    if not spec.four_bit:  # backward only: the int8 weight dequantised into the input's dtype
        return 0, numel * _ITEMSIZE[weight_dtype] + out_features * 4
    absmax = _blocks(numel, BLOCKSIZE) * 4 if spec.double_quant else 0
    compute = COMPUTE_DTYPES[spec.compute]
    forward = numel * _ITEMSIZE[compute] + absmax
    origin = spec.quantized_from or weight_dtype
    if spec.forward_casts and origin != compute:  # dequantised into the dtype it was quantised from, then cast
        forward += numel * _ITEMSIZE[origin]
    backward = numel * _ITEMSIZE[origin] + absmax
    if origin != compute:
        backward += numel * _ITEMSIZE[compute]
    return forward, backward


# --- the stand-in modules -----------------------------------------------------------------------------------------


@dataclass
class Quantised:
    """What quantising a model's Linear layers did: for the report and its notes."""

    spec: QuantSpec
    layers: int = 0
    resident: int = 0  # packed weights and quant state, all layers
    replaced: int = 0  # the bytes of the weights they replace
    forward_transient: int = 0  # the largest layer's
    backward_transient: int = 0
    largest: str = ""
    skipped: List[str] = field(default_factory=list)


def quantize_linears(model: Any, spec: QuantSpec, on_meta: bool = True) -> Quantised:
    """Replace each layer of `model` (a planning copy: never the user's) that transformers' replace_with_bnb_linear
    converts by the stand-in for bitsandbytes' layer; tensors on the meta device (or zeros on the CPU, for a real trace
    to compare with)."""
    import torch

    kept = _kept_names(model)
    linears = _linears(model, kept)
    converted = {id(child) for _, _, child, _ in linears}
    skipped = [path for path, m in model.named_modules() if path and _convertible(m) and id(m) not in converted]
    done = Quantised(spec, skipped=sorted(skipped))
    for parent, name, child, path in linears:
        stand_in = quant_linear_class()(child, spec, torch.device("meta") if on_meta else torch.device("cpu"))
        setattr(parent, name, stand_in)
        _count(done, stand_in, path)
    return done


def _count(done: Quantised, layer: Any, path: str) -> None:
    out_f, in_f = layer.out_features, layer.in_features
    done.layers += 1
    done.resident += resident_bytes(done.spec, out_f, in_f)
    done.replaced += out_f * in_f * _ITEMSIZE[layer.weight_dtype]
    forward, backward = dequant_bytes(done.spec, out_f, in_f, layer.weight_dtype)
    if forward + backward > done.forward_transient + done.backward_transient:
        done.forward_transient, done.backward_transient, done.largest = forward, backward, path


def _linears(model: Any, kept: List[str]) -> List[Tuple[Any, str, Any, str]]:
    """(parent, attribute, layer, dotted path) for each layer transformers' `_replace_with_bnb_linear` converts: an
    nn.Linear, its subclasses too (Falcon's FalconLinear), or a transformers Conv1D (GPT-2), unless its name is one
    of `kept` or its path is or lies under one of them."""
    import torch

    found = []
    for path, parent in model.named_modules():
        if isinstance(parent, torch.nn.MultiheadAttention):  # reads out_proj.weight itself: never calls the layer
            continue
        for name, child in parent.named_children():
            full = f"{path}.{name}" if path else name
            if _convertible(child) and name not in kept and not any(k == full or k + "." in full for k in kept):
                found.append((parent, name, child, full))
    return found


def _convertible(module: Any) -> bool:
    """A float layer bitsandbytes' replacement takes: not one of its own layers, nor our stand-in for them."""
    import torch

    if type(module).__module__.startswith("bitsandbytes") or isinstance(module, quant_linear_class()):
        return False
    return isinstance(module, torch.nn.Linear) or _is_conv1d(module)


def _is_conv1d(module: Any) -> bool:
    """transformers' Conv1D (GPT-2's projections): a Linear with its weight stored [in, out]; by name, so that
    transformers need not be imported."""
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf") and getattr(module, "weight", None) is not None


def _features(layer: Any) -> Tuple[int, int]:
    """(in_features, out_features) as transformers reads them for the bitsandbytes layer it builds."""
    if _is_conv1d(layer):
        in_features, out_features = layer.weight.shape
        return int(in_features), int(out_features)
    return layer.in_features, layer.out_features


def _kept_names(model: Any) -> List[str]:
    """The modules transformers keeps unquantised by default: the output layer (`get_keys_to_not_convert`: the
    output embeddings; lm_head) and the model's `_keep_in_fp32_modules`, which its bitsandbytes quantizers add."""
    getter = getattr(model, "get_output_embeddings", None)
    try:
        output = getter() if callable(getter) else None
    except (NotImplementedError, AttributeError):
        output = None
    kept = [path for path, m in model.named_modules() if output is not None and m is output and path]
    fp32 = getattr(model, "_keep_in_fp32_modules", None)
    return kept + [str(name) for name in fp32 or () if isinstance(name, str)]


def is_quantised(module: Any) -> bool:
    return isinstance(module, quant_linear_class())


def packed_numel(module: Any, weight: Any) -> Optional[int]:
    """The elements a packed 4-bit `weight` of `module` stands for: its original [out, in] shape, as the
    quantisation records it (our stand-in's features; bitsandbytes' Params4bit keeps it in `quant_state.shape`).
    None for any other weight, an 8-bit one included (it keeps the full shape)."""
    spec = getattr(module, "spec", None)
    if isinstance(spec, QuantSpec):
        return module.out_features * module.in_features if spec.four_bit else None
    shape = getattr(getattr(weight, "quant_state", None), "shape", None)
    if shape is None:
        return None
    count = 1
    for size in shape:
        count *= int(size)
    return count


@functools.lru_cache(maxsize=None)
def quant_linear_class() -> type:
    """The stand-in for bnb.nn.Linear4bit / Linear8bitLt. A subclass of nn.Linear (without a float weight), so that
    peft and our own adapters wrap it as they wrap bitsandbytes' layers."""
    import torch

    dequantise = _dequantise_function()

    class QuantLinear(torch.nn.Linear):
        def __init__(self, linear: Any, spec: QuantSpec, device: Any) -> None:
            torch.nn.Module.__init__(self)
            self.in_features, self.out_features = _features(linear)
            self.spec = spec
            self.weight_dtype = str(linear.weight.dtype).replace("torch.", "")
            # what bitsandbytes dequantises into: the dtype the weight was quantised from
            self.dequant_dtype = spec.quantized_from or self.weight_dtype
            for piece in layout(spec, self.out_features, self.in_features):
                tensor = torch.zeros(piece.shape, dtype=getattr(torch, piece.dtype), device=device)
                if piece.name == "weight":  # a frozen Parameter, as Params4bit and Int8Params are
                    self.weight = torch.nn.Parameter(tensor, requires_grad=False)
                else:  # the quant state: attributes of the weight in bitsandbytes, buffers here
                    self.register_buffer(piece.name, tensor, persistent=False)
            bias = linear.bias
            if bias is not None:
                dtype = getattr(torch, COMPUTE_DTYPES[spec.compute]) if spec.four_bit else bias.dtype
                bias = torch.nn.Parameter(torch.zeros(bias.shape, dtype=dtype, device=device), requires_grad=False)
            self.bias = bias

        def forward(self, x: Any) -> Any:
            if not self.spec.four_bit:
                return dequantise.apply(x, self)
            given = x.dtype
            x = x.to(getattr(torch, COMPUTE_DTYPES[self.spec.compute]))
            return dequantise.apply(x, self).to(given)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, {self.spec.text()}"

    return QuantLinear


def _dequantised(layer: Any, dtype: Any) -> Any:
    """A 4-bit layer's weight dequantised into `dtype`, [out, in], as bitsandbytes allocates it (the nested absmax
    first, in fp32). Zeros: only the allocation matters to the trace."""
    import torch

    # dequantize_blockwise, then + offset: alive while the weight is dequantised
    absmax = layer.absmax.to(torch.float32) + layer.offset if layer.spec.double_quant else None
    weight = layer.weight.new_zeros((layer.out_features, layer.in_features), dtype=dtype)
    del absmax
    return weight


@functools.lru_cache(maxsize=None)
def _dequantise_function() -> type:
    import torch

    class Dequantise(torch.autograd.Function):
        """MatMul4Bit / MatMul8bitLt's allocations: the weight dequantised in forward and again in backward."""

        @staticmethod
        def forward(ctx: Any, x: Any, layer: Any) -> Any:
            ctx.layer = layer
            if layer.spec.four_bit:
                if layer.spec.keeps_input and ctx.needs_input_grad[0]:
                    ctx.kept = x  # MatMul4Bit before 0.43.2: ctx.tensors = (A, B), alive as long as the node
                if layer.spec.forward_casts:  # before 0.50.0: F.dequantize_4bit(B, state).to(A.dtype)
                    weight = _dequantised(layer, getattr(torch, layer.dequant_dtype)).to(x.dtype)
                else:  # gemm_4bit's fallback: dequantised into A.dtype (_dequant_linear_fallback)
                    weight = _dequantised(layer, x.dtype)
                return torch.nn.functional.linear(x, weight, layer.bias)
            ctx.kept = x  # MatMul8bitLt keeps its input (ctx.tensors = (CAt, subA, A))
            return _int8_forward(x, layer)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Tuple[Any, None]:
            layer = ctx.layer
            if layer.spec.four_bit:
                weight = _dequantised(layer, getattr(torch, layer.dequant_dtype))
                return torch.matmul(grad, weight.to(grad.dtype)), None
            weight = layer.weight.to(ctx.kept.dtype).mul_(layer.SCB.unsqueeze(1).mul(1.0 / 127.0))
            return torch.matmul(grad.to(ctx.kept.dtype), weight), None

    return Dequantise


def _int8_forward(x: Any, layer: Any) -> Any:
    """int8_vectorwise_quant of the fp16 input (int8 values, fp32 row scales), the int32 product, its dequantised
    output (+ bias) in the input's dtype."""
    import torch

    rows = x.reshape(-1, x.shape[-1]).to(torch.float16)
    quantised = rows.to(torch.int8)
    scales = rows.new_zeros(rows.shape[0], dtype=torch.float32)
    product = quantised.new_zeros((rows.shape[0], layer.out_features), dtype=torch.int32)
    out = product.to(x.dtype)
    if layer.bias is not None:
        out = out + layer.bias.to(x.dtype)
    del rows, quantised, scales, product
    return out.reshape(*x.shape[:-1], layer.out_features)
