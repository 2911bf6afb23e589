"""LoRA, QLoRA and PEFT plans: the planning copy analyze() traces in place of the user's model (`lora=`, `peft=`,
`quantize=`), and the report's lines for a fine-tune: quantised weights, adapters (parameters, gradients, optimizer
state) and the dequantisation transients. A PEFT model the user already has is analysed as it is; its adapters get
their line too.

The planning copy shares nothing writable with the user's model: its parameters are new (on the meta device, so
an 8B model costs no memory), its buffers the user's tensors, read only by the trace's own copy.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gpumem_kernel.analysis.model.lora import Adapters, LoraSpec, add_adapters, adapter_parameters, parse_lora
from gpumem_kernel.analysis.model.lora import load_peft
from gpumem_kernel.analysis.model.peft_config import NEEDS_PEFT, PeftAdapters, PeftSpec, apply_peft, lora_settings
from gpumem_kernel.analysis.model.peft_config import method_of, parse_peft
from gpumem_kernel.analysis.trace.model_copy import tensor_attributes
from gpumem_kernel.analysis.model.model_states import unique_bytes
from gpumem_kernel.analysis.model.quantize import QuantSpec, Quantised, is_quantised, parse_quantize, quantize_linears
from gpumem_kernel.analysis.report.report import AnalysisReport, Figure
from gpumem_kernel.render.units import format_bytes


@dataclass
class FineTunePlan:
    """The planning copy and what was done to it."""

    model: Any
    lora: Optional[Adapters] = None
    peft: Optional[PeftAdapters] = None  # what a PEFT config (peft=) added
    quantised: Optional[Quantised] = None
    notes: List[str] = field(default_factory=list)


def check(lora: Any, quantize: Any, optimizer: Any) -> "tuple[Optional[LoraSpec], Optional[QuantSpec]]":
    """The parsed options; ValueError (one line) on a bad one, or on an optimizer object with either (it holds the
    user's own parameters, not the planning copy's)."""
    lora_spec, quant_spec = parse_lora(lora), parse_quantize(quantize)
    if (lora_spec or quant_spec) and not isinstance(optimizer, str):
        raise ValueError(
            "with lora= or quantize=, name the optimizer kind (adamw, paged-adamw8bit, ...): yours holds "
            "your model's own parameters, not the planned copy's"
        )
    return lora_spec, quant_spec


def check_peft(peft: Any, lora: Optional[LoraSpec], optimizer: Any) -> Optional[PeftSpec]:
    """The parsed PEFT config (peft=, --peft); ValueError (one line) on a bad one, with lora= too, or with an
    optimizer object."""
    spec = parse_peft(peft)
    if spec is None:
        return None
    if lora is not None:
        raise ValueError("--peft and --lora both add adapters: use one (lora= or peft=)")
    if not isinstance(optimizer, str):
        raise ValueError(
            "with peft=, name the optimizer kind (adamw, paged-adamw8bit, ...): yours holds your model's own "
            "parameters, not the planned copy's"
        )
    return spec


def planned_model(
    model: Any,
    lora: Optional[LoraSpec],
    quantize: Optional[QuantSpec],
    on_meta: bool = True,
    use_peft: Optional[bool] = None,
    peft: Optional[PeftSpec] = None,
) -> FineTunePlan:
    """A copy of `model` with its Linear layers quantised and LoRA adapters (lora) or a PEFT config's adapters (peft)
    added, as asked. on_meta=False: real CPU tensors (zeros for quantised weights), for a real trace to compare the
    fake one with. use_peft=False: a plain LoRA config by gpumem's own adapter modules."""
    lora, peft_module, use_peft = _peft_or_own(peft, lora, use_peft)
    if peft is not None and quantize is not None and peft.peft_type in ("LOHA", "LOKR"):
        # peft reshapes their delta weight to the base layer's weight: bitsandbytes' packed one has another shape
        raise ValueError(f"peft: {peft.method} does not wrap bitsandbytes' quantised layers in peft; drop --quantize")
    _refuse_twice(model, lora or peft, quantize)
    plan = FineTunePlan(_copy(model, on_meta))
    if quantize is not None:
        plan.quantised = quantize_linears(plan.model, quantize, on_meta)
        plan.notes.append(_quantised_note(plan.quantised))
    if lora is not None:
        plan.model, plan.lora = add_adapters(plan.model, lora, on_meta, use_peft)
        plan.notes.append(_lora_note(plan.lora))
    elif peft is not None:
        for p in plan.model.parameters():
            p.requires_grad_(False)
        _dequantisable(plan.model)
        plan.model, plan.peft = apply_peft(plan.model, peft, peft_module)
        plan.notes += [_peft_note(plan.peft)] + plan.peft.notes
    return plan


def _peft_or_own(
    peft: Optional[PeftSpec], lora: Optional[LoraSpec], use_peft: Optional[bool]
) -> "tuple[Optional[LoraSpec], Any, Optional[bool]]":
    """(the LoRA spec, peft's module, use_peft): without peft (or with use_peft=False) a plain LoRA config becomes
    a LoraSpec for our own modules; any other config needs peft."""
    if peft is None:
        return lora, None, use_peft
    module = load_peft() if use_peft is not False else None
    if module is not None:
        return None, module, use_peft
    settings = lora_settings(peft)
    if settings is None or use_peft:
        raise ValueError(NEEDS_PEFT)
    return parse_lora(settings), None, False


def _dequantisable(model: Any) -> None:
    """peft's DoRA reads each base layer's weight dequantised (`dequantize_module_weight`: its norm, each forward):
    bitsandbytes' layers dequantise theirs, our stand-ins answer through the same hook HQQ's layers use (`W_q`,
    `dequantize()`) with an [out, in] tensor of the weight's original dtype, the transient bitsandbytes makes (its
    values do not change the memory)."""
    for module in model.modules():
        if is_quantised(module):
            object.__setattr__(module, "W_q", module.weight)  # not registered: the packed weight is the parameter
            object.__setattr__(module, "dequantize", functools.partial(_dequantised_weight, module))


def _dequantised_weight(layer: Any) -> Any:
    import torch

    shape = (layer.out_features, layer.in_features)
    return torch.zeros(shape, dtype=getattr(torch, layer.weight_dtype), device=layer.weight.device)


def _refuse_twice(model: Any, lora: Any, quantize: Optional[QuantSpec]) -> None:
    if lora is not None and adapter_parameters(model):
        option = "peft" if isinstance(lora, PeftSpec) else "lora"
        name = type(model).__name__
        raise ValueError(f"{option}: {name} already has adapters: drop {option}= to analyse it as it is")
    names = {type(m).__name__ for m in model.modules()}
    if quantize is not None and names & {"Linear4bit", "Linear8bitLt"}:
        raise ValueError(f"quantize: {type(model).__name__} is already quantised by bitsandbytes")


def _copy(model: Any, on_meta: bool) -> Any:
    """The structure deep-copied, each parameter a new one (meta, or a real clone), buffers shared."""
    import torch

    memo: Dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            data = torch.empty_like(p, device="meta") if on_meta else p.detach().clone()
            memo[id(p)] = torch.nn.Parameter(data, requires_grad=p.requires_grad)
    for b in model.buffers():
        memo.setdefault(id(b), b if on_meta else b.clone())
    for _, _, t in tensor_attributes(model):  # cached masks, grids: the user's, never copied onto their device
        memo.setdefault(id(t), t)
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:  # modules holding locks, files, generators ...
        raise ValueError(f"cannot copy the model's structure to plan on ({type(exc).__name__}: {exc})") from None


def _quantised_note(done: Quantised) -> str:
    skipped = f"; kept unquantised: {', '.join(done.skipped)}" if done.skipped else ""
    return (
        f"quantised as bitsandbytes {done.spec.text()}: {done.layers} Linear layers, "
        f"{format_bytes(done.replaced, 'fit')} of weights held in {format_bytes(done.resident, 'fit')}{skipped}; "
        + (
            "the weight is dequantised per layer in forward and again in backward"
            if done.spec.four_bit
            else "the input is int8-quantised per layer in forward, the weight dequantised in backward; LLM.int8's "
            "outlier columns (value-dependent) are not counted"
        )
    )


def _lora_note(done: Adapters) -> str:
    how = f"peft {done.with_peft}" if done.with_peft else "gpumem's own adapter modules (peft's tensors; peft not used)"
    return (
        f"LoRA {done.spec.text(done.targets)} on {len(done.layers)} layers of a copy of the model, added with {how}; "
        "the base is frozen, only the adapters train"
    )


def _peft_note(done: PeftAdapters) -> str:
    where = f" on {done.layers} layers" if done.layers else ""
    return (
        f"{done.text}{where} of a copy of the model ({done.spec.source}), added with peft {done.version}'s "
        f"get_peft_model: {done.trainable:,} trainable parameters; the base is frozen"
    )


# --- the report ---------------------------------------------------------------------------------------------------


def add_to_report(report: AnalysisReport, model: Any, plan: Optional[FineTunePlan]) -> None:
    """The fine-tune's figures, and the notes saying what the planning copy is."""
    adapters = adapter_parameters(model)
    figures = []
    if plan is not None and plan.quantised is not None:
        figures += _quantised_figures(plan.quantised)
    if adapters:
        figures.append(_adapter_figure(adapters, report, method_of(model)))
    report.figures += figures
    if plan is not None:  # after the model's own notes (a model by name's come first)
        report.notes[:0] = plan.notes


def _quantised_figures(done: Quantised) -> List[Figure]:
    return [
        Figure(
            "quantised_weights",
            done.resident,
            "modelled",
            f"{done.layers} layers, {done.spec.kind}: packed weights and quant state (in parameters and buffers)",
        ),
        Figure(
            "dequant_transient",
            max(done.forward_transient, done.backward_transient),
            "modelled",
            f"one layer at a time ({done.largest}): forward {format_bytes(done.forward_transient, 'fit')}, "
            f"backward {format_bytes(done.backward_transient, 'fit')} (in the step's temporaries)",
        ),
    ]


def _adapter_figure(adapters: List[Any], report: AnalysisReport, method: str = "LoRA") -> Figure:
    params = unique_bytes(adapters)
    trainable = [p for p in adapters if p.requires_grad]
    grads = unique_bytes(trainable)
    # the optimizer steps only trainable parameters; the adapters are all of them unless the model trains more
    only_adapters = sum(p.numel() for p in trainable) == report.trainable_parameter_count
    state = report.optimizer_bytes if only_adapters else 0
    said = f" + {format_bytes(state, 'fit')} optimizer state" if only_adapters else " (optimizer state: see above)"
    return Figure(
        "adapters",
        params + grads + state,
        "traced",
        f"{method}: {format_bytes(params, 'fit')} parameters + {format_bytes(grads, 'fit')} gradients{said}",
    )
