"""The levers the fit advice traces (pipeline.advice): each one change to the analysed request, with the flags that
set it, what it costs and which kind of cost that is. A lever that does not apply (set already, a step of the
user's own, an optimizer it does not replace, a model without Linear layers) gives no changes and so no row.

Also the two levers that are not one change of the request: the smallest GPU of the table that fits the step as it
is (not traced: the analysed peak against that GPU's memory and CUDA context), and the command line of a row."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.allocator.caching_allocator import settings_from_env
from gpumem_kernel.analysis.gpus.table import GPUS
from gpumem_kernel.analysis.model.lora import ATTENTION_NAMES, adaptable
from gpumem_kernel.analysis.pipeline.device import device_limit
from gpumem_kernel.analysis.report.report import AnalysisReport
from gpumem_kernel.analysis.request.arguments import optimizer_kind
from gpumem_kernel.analysis.request.request import AnalysisRequest
from gpumem_kernel.analysis.search.recommendations import TIGHT_SHARE

# cheapest first: what a row's cost_kind says, and the order the rows take
COST_KINDS = ("none", "compute", "precision", "training", "gpus", "hardware")
LORA_RANK = 16
FSDP_SIZES = (2, 4, 8)
FRAGMENTED_SHARE = 0.05  # reserved over allocated by this share of reserved: fragmentation worth a row


@dataclass(frozen=True)
class Situation:
    """What a lever reads to decide whether it applies: the user's model, the analysed request and its report."""

    model: Any
    request: AnalysisRequest
    report: AnalysisReport

    @property
    def built_in_step(self) -> bool:
        return self.request.step is None

    @property
    def optimizer(self) -> Optional[str]:
        """The optimizer kind named by a string ("adamw"); None for an optimizer object."""
        optimizer = self.request.optimizer
        return optimizer_kind(optimizer) if isinstance(optimizer, str) else None


@dataclass(frozen=True)
class Lever:
    """One change the analysis can trace: its key and label, what it costs, the request's fields with it set (None:
    it does not apply), and the flags that set it. Levers of one group set the same thing: never combined."""

    key: str
    label: str
    cost: str
    cost_kind: str
    changes: Callable[[Situation], Optional[Dict[str, Any]]]
    flags: Callable[[Dict[str, Any]], str]
    group: str

    @property
    def rank(self) -> int:
        return COST_KINDS.index(self.cost_kind)


def _expandable(s: Situation) -> Optional[Dict[str, Any]]:
    """Where fragmentation is the gap: reserved over allocated by a share of reserved, or the allocated peak would
    fit where the reserved one does not."""
    report = s.report
    if s.request.expandable_segments or settings_from_env().expandable_segments or report.peak_reserved_bytes is None:
        return None
    gap = report.peak_reserved_bytes - report.peak_allocated_bytes
    limit = report.device.limit_bytes
    closes_it = limit is not None and report.peak_bytes - gap <= limit < report.peak_bytes
    return (
        {"expandable_segments": True}
        if gap > 0 and (closes_it or gap >= FRAGMENTED_SHARE * report.peak_reserved_bytes)
        else None
    )


def micro_batch_of(batch: int, maximum: Optional[int]) -> int:
    """The largest divisor of `batch` below it that the analysed maximum allows (the samples per optimizer step kept
    exactly); half the batch where the maximum is unknown or the batch fits; 1 where nothing does."""
    divisors = [d for d in range(batch - 1, 0, -1) if batch % d == 0]
    if maximum is None or maximum >= batch:
        return divisors[0]
    return next((d for d in divisors if d <= maximum), 1)


def _micro_batch(s: Situation) -> Optional[Dict[str, Any]]:
    batch = s.request.batch_size
    if batch < 2 or not s.built_in_step:
        return None
    micro = micro_batch_of(batch, s.report.recommendations.maximum)
    return {"batch_size": micro, "grad_accum": s.request.grad_accum * (batch // micro)}


def _checkpointing(s: Situation) -> Optional[Dict[str, Any]]:
    return {"checkpointing": True} if not s.request.checkpointing and s.built_in_step else None


def _half_weights(model: Any) -> bool:
    import torch

    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return bool(dtypes) and dtypes <= {torch.float16, torch.bfloat16}


def _amp(mode: str) -> Callable[[Situation], Optional[Dict[str, Any]]]:
    """AMP in `mode`: bf16 where the GPU has it (or is unknown), fp16 on one without; not over half weights."""

    def changes(s: Situation) -> Optional[Dict[str, Any]]:
        if s.request.amp is not None or not s.built_in_step or _half_weights(s.model):
            return None
        without_bf16 = s.report.device.bf16 is False
        return {"amp": mode} if (mode == "fp16") == without_bf16 else None

    return changes


def _optimizer(replacing: Dict[str, str]) -> Callable[[Situation], Optional[Dict[str, Any]]]:
    """The named optimizer replaced by replacing[its kind] (the user's object is never replaced)."""

    def changes(s: Situation) -> Optional[Dict[str, Any]]:
        kind = s.optimizer
        if kind not in replacing or not s.built_in_step:
            return None
        return {"optimizer": replacing[kind]}

    return changes


def lora_setting(model: Any) -> Optional[str]:
    """r=16 on the attention projections found by name, else on every Linear layer; None without one."""
    leaves = sorted({path.rsplit(".", 1)[-1] for path, _ in adaptable(model)})
    if not leaves:
        return None
    if any(name in leaves for name in ATTENTION_NAMES):
        return f"r={LORA_RANK}"
    return f"r={LORA_RANK},targets={','.join(leaves)}"


def _adapters(quantize: Optional[str]) -> Callable[[Situation], Optional[Dict[str, Any]]]:
    def changes(s: Situation) -> Optional[Dict[str, Any]]:
        request = s.request
        if s.optimizer is None or not s.built_in_step or request.lora or request.peft or request.quantize:
            return None
        setting = lora_setting(s.model)
        if setting is None:
            return None
        return {"lora": setting} if quantize is None else {"lora": setting, "quantize": quantize}

    return changes


def _adapter_flags(c: Dict[str, Any]) -> str:
    return f"--lora {c['lora']}" + (f" --quantize {c['quantize']}" if "quantize" in c else "")


def _optimizer_flags(c: Dict[str, Any]) -> str:
    return f"--optimizer {c['optimizer']}"


LEVERS: Tuple[Lever, ...] = (
    Lever(
        "expandable-segments",
        "expandable segments",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before CUDA starts: no cost to the step",
        "none",
        _expandable,
        lambda c: "--expandable-segments",
        "allocator",
    ),
    Lever(
        "micro-batch",
        "smaller micro-batch",
        "more, smaller steps per update: slower where the GPU is underused",
        "compute",
        _micro_batch,
        lambda c: f"-b {c['batch_size']} --accum {c['grad_accum']}",
        "batch",
    ),
    Lever(
        "checkpointing",
        "gradient checkpointing",
        "the blocks' forward runs again in backward (about a third more compute)",
        "compute",
        _checkpointing,
        lambda c: "--checkpointing",
        "checkpointing",
    ),
    Lever(
        "paged-optimizer",
        "paged optimizer",
        "optimizer state in unified memory, paged to the host when the GPU runs short (bitsandbytes): slower then",
        "compute",
        _optimizer({"adamw": "paged-adamw"}),
        _optimizer_flags,
        "optimizer",
    ),
    Lever(
        "amp-bf16",
        "AMP bf16",
        "activations in bf16 under autocast (an Ampere or newer GPU)",
        "precision",
        _amp("bf16"),
        lambda c: "--amp bf16",
        "amp",
    ),
    Lever(
        "amp-fp16",
        "AMP fp16",
        "activations in fp16 under autocast, with a GradScaler",
        "precision",
        _amp("fp16"),
        lambda c: "--amp fp16",
        "amp",
    ),
    Lever(
        "8bit-optimizer",
        "8-bit optimizer",
        "optimizer state in 8 bits, block-wise (bitsandbytes on the GPU)",
        "precision",
        _optimizer({"adamw": "adamw8bit", "adam": "adam8bit"}),
        _optimizer_flags,
        "optimizer",
    ),
    Lever(
        "adafactor",
        "Adafactor",
        "another optimizer (factored second moments): the learning rate to tune again",
        "training",
        _optimizer({"adamw": "adafactor", "adam": "adafactor"}),
        _optimizer_flags,
        "optimizer",
    ),
    Lever(
        "lora",
        f"LoRA (r={LORA_RANK})",
        "only low-rank adapters train, the base frozen: a fine-tune, not full training",
        "training",
        _adapters(None),
        _adapter_flags,
        "adapters",
    ),
    Lever(
        "qlora",
        f"QLoRA (nf4, r={LORA_RANK})",
        "base weights frozen in 4-bit NF4, low-rank adapters train (bitsandbytes on the GPU)",
        "training",
        _adapters("nf4"),
        _adapter_flags,
        "adapters",
    ),
)


def sequence_changes(request: AnalysisRequest, length: int) -> Optional[Dict[str, Any]]:
    """The request at `length` tokens: --seq where the line gives it or no input, --input N for a token count; None
    for a sample batch of the user's (its tokens are theirs)."""
    if request.seq is not None or request.input is None:
        return {"seq": length}
    if isinstance(request.input, (int, str, tuple, list)) and not isinstance(request.input, bool):
        return {"input": (length,)}
    return None


def _sequence_flags(c: Dict[str, Any]) -> str:
    return f"--seq {c['seq']}" if "seq" in c else f"--input {c['input'][0]}"


SHORTER_SEQUENCE = Lever(
    "shorter-sequence", "shorter sequence", "fewer tokens per sample: longer texts cut or split",
    "training", lambda s: None, _sequence_flags, "sequence",
)  # fmt: skip


def fsdp_lever(size: int) -> Lever:
    return Lever(
        f"fsdp-{size}",
        f"FSDP over {size} GPUs",
        f"{size} GPUs, parameters, gradients and optimizer state sharded over them",
        "gpus",
        lambda s: {"world_size": size, "strategy": "fsdp"} if s.request.world_size == 1 and s.built_in_step else None,
        lambda c: f"--world-size {c['world_size']} --strategy fsdp",
        "ranks",
    )


GPU_LEVER_COST = "another GPU: the step as it is, on more memory"


@dataclass(frozen=True)
class GpuFit:
    """The smallest GPU of the table whose memory holds the analysed step (not traced)."""

    name: str
    peak_bytes: int
    limit_bytes: int
    status: str


def smallest_gpu(s: Situation) -> Optional[GpuFit]:
    """The analysed peak with each GPU's own CUDA context in place of the planned one, against that GPU's usable
    memory (its reserve as the request's); the smallest that fits with room ("fits", not "tight"), bf16 ones only
    under bf16 autocast. None when none does."""
    report, request = s.report, s.request
    step = report.peak_bytes - report.device.context_to_add
    candidates = sorted(
        (spec for spec in GPUS if spec.bf16 or request.amp != "bf16"), key=lambda spec: spec.memory_bytes
    )
    for spec in candidates:
        info = device_limit(target=spec.name, memory=None, device=None, reserve=request.reserve)
        peak = step + info.context_to_add
        if info.limit_bytes and peak <= TIGHT_SHARE * info.limit_bytes:
            return GpuFit(spec.name, peak, info.limit_bytes, "fits")
    return None


# value-taking options a row's flags may set again: the analysed line's own are dropped from its command
_VALUE_OPTIONS = {
    "-b": ("-b", "--batch"),
    "--accum": ("--accum",),
    "--optimizer": ("--optimizer",),
    "--amp": ("--amp",),
    "--lora": ("--lora",),
    "--quantize": ("--quantize",),
    "--seq": ("--seq",),
    "--input": ("--input",),
    "--world-size": ("--world-size",),
    "--strategy": ("--strategy",),
    "--target": ("--target", "--memory"),  # the table's GPU as it is, not within the analysed memory
}


def _split(line: str) -> List[str]:
    try:
        return shlex.split(line)
    except ValueError:  # unbalanced quotes: the line as it was written
        return line.split()


def command_with(base: str, flags: str) -> str:
    """`base` (a %gpumem analyze line) with `flags` added and the options they set again removed from it."""
    added = _split(flags)
    replaced = {flag for token in added for flag in _VALUE_OPTIONS.get(token, ())}
    kept: List[str] = []
    tokens = _split(base)
    skip = False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in replaced:
            skip = "=" not in token and i + 1 < len(tokens)
            continue
        kept.append(token)
    return " ".join(shlex.quote(t) if not t.startswith("%") else t for t in kept + added)
