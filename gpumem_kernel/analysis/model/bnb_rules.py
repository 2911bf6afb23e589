"""Where an older bitsandbytes keeps other tensors than the one the quantised layers are modelled on (0.50.2, see
quantize.py): named rules, each with its source, and how the traced layer applies it (`--bnb 0.41`: plan for the
bitsandbytes a run will use). Like the torch rules (analysis.fake.torch_rules): never a factor, each rule makes the
trace keep the tensors that bitsandbytes kept.

No torch here: the option table reads this module when the extension loads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

Version = Tuple[int, int, int]


@dataclass(frozen=True)
class BnbRule:
    name: str
    changed_in: Version  # the first bitsandbytes with the new behaviour; the rule applies to versions before it
    source: str
    old: str  # what bitsandbytes kept before the change
    applied: str  # how the trace applies it

    def names(self, version: Version) -> bool:
        return version < self.changed_in


FOUR_BIT_KEEPS_INPUT = BnbRule(
    "4bit-keeps-input",
    (0, 43, 2),
    "https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270 (commit 9e75374, first released in 0.43.2)",
    "MatMul4Bit kept each 4-bit layer's input for backward (ctx.tensors = (A, B)) though backward never read it",
    "each traced 4-bit layer whose input needs a gradient keeps that input (cast to the compute dtype) on its "
    "autograd node, freed with the graph as ctx.tensors was",
)
FOUR_BIT_FROM_FP16 = BnbRule(
    "4bit-quantized-from-fp16",
    (0, 43, 0),
    "https://github.com/bitsandbytes-foundation/bitsandbytes/pull/970 (commit dcfb6f8, first released in 0.43.0)",
    "Params4bit quantised a copy of the weight cast to fp16 (`.half()`), so MatMul4Bit dequantised into fp16 and cast "
    "that to the input's dtype in forward (`.to(A.dtype)`) and to the gradient's in backward",
    "each traced 4-bit layer is dequantised into fp16 (the dtype it was quantised from), cast to the gradient's "
    "dtype in backward and, with 4bit-forward-casts (before 0.50.0), to the input's in forward",
)
FOUR_BIT_FORWARD_CASTS = BnbRule(
    "4bit-forward-casts",
    (0, 50, 0),
    "https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1949 (commit 5453368, first released in 0.50.0)",
    "MatMul4Bit.forward dequantised the weight into the dtype it was quantised from and cast that to the input's "
    "(`F.dequantize_4bit(B, quant_state).to(A.dtype)`): two [out, in] copies where those dtypes differ",
    "each traced 4-bit layer's forward dequantises into the dtype its weight was quantised from, then casts to the "
    "compute dtype where that differs (since 0.50.0 the gemm_4bit fallback dequantises into the compute dtype)",
)
RULES: Tuple[BnbRule, ...] = (FOUR_BIT_KEEPS_INPUT, FOUR_BIT_FROM_FP16, FOUR_BIT_FORWARD_CASTS)
BNB_HELP = (
    "plan the quantised layers for this bitsandbytes, e.g. 0.41: its memory rules (4-bit layers kept their input "
    "for backward before 0.43.2, were quantised from fp16 before 0.43.0, and their forward dequantised into that "
    "dtype and cast before 0.50.0) (default: the layers as bitsandbytes 0.50 runs them)"
)


def parse(text: Optional[str]) -> Optional[Version]:
    """'0.41', '0.41.1', '0.43.2.dev0', '0.45.0+cu121' -> (major, minor, patch); None -> None; ValueError (one
    line) for anything else."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(?:dev|post|rc|a|b)\d*)?(?:\+\S+)?\s*", str(text))
    if not match:
        raise ValueError(f"bnb_version {text!r} not understood: give a bitsandbytes version such as 0.41 or 0.41.1")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def rules_for(text: Optional[str]) -> Tuple[BnbRule, ...]:
    """The rules that make the planned bitsandbytes differ from the modelled one; () when none is planned."""
    version = parse(text)
    return () if version is None else tuple(r for r in RULES if r.names(version))


def note(text: str, rule: BnbRule) -> str:
    return f"bitsandbytes {text.strip()}: rule {rule.name} ({rule.old}; {rule.source})"
