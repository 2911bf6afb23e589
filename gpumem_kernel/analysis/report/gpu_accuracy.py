"""How far the traced engine was from real steps on a GPU, by the kinds of op a step runs: the error bound a traced
report states is what was measured for steps like it, not a hope.

The figures are benchmarks/gpu's estimator section (benchmarks/results/gpu_estimator.json): 156 configurations of
13 models, fp32 and bf16, AdamW and SGD, three batches each, each step's prediction against max_memory_allocated
and max_memory_reserved of its real steps 2-3. tests/analysis/test_gpu_accuracy.py recomputes them from that file,
so a new GPU run that changes them fails there until this table says what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import AbstractSet, List, Optional, Tuple

from gpumem_kernel.analysis.trace.tracker import CONVOLUTION, FP32_CONVOLUTION, LSTM

MEASURED_ON = "an H200 (torch 2.11.0, CUDA 13.0, cuDNN 9.19)"
# the measured engine on the same GPU, peak allocated (its 13 rows' largest error)
MEASURED_ENGINE_ALLOCATED = 0.0017
# what the process held beyond the allocator's reserved bytes after its steps, less the context it held at its
# start (518 MiB): the modules cuBLAS and cuDNN loaded (gpus.cuda_context names them, counting none)
LIBRARY_MODULES_MIB = (112, 248)


@dataclass(frozen=True)
class MeasuredKind:
    """The traced engine's signed errors, (trace - real) / real, over the measured steps of one kind."""

    op_kind: Optional[str]  # analysis.trace.tracker's kind; None: the steps that ran none of them
    steps: int
    models: str
    allocated: Tuple[float, float]  # (lowest, highest) error on the peak allocated
    reserved: Tuple[float, float]  # the same on the peak reserved

    def bound(self) -> float:
        """The largest error of either peak, up to a whole percent."""
        return max(_ceil_percent(abs(e)) for e in self.allocated + self.reserved) / 100


_CONV_MODELS = "ResNet-50, ResNet-18, EfficientNet-B0, U-Net, a small CNN and two ViTs"
MEASURED_KINDS: Tuple[MeasuredKind, ...] = (
    MeasuredKind(FP32_CONVOLUTION, 42, _CONV_MODELS, (-0.3617, 0.0003), (-0.5604, -0.009)),
    MeasuredKind(CONVOLUTION, 42, _CONV_MODELS, (-0.0453, 0.0015), (-0.1754, 0.0392)),
    MeasuredKind(LSTM, 12, "a two-layer LSTM language model", (-0.1626, 0.1504), (-0.2034, 0.3167)),
    MeasuredKind(None, 60, "an MLP, GPT-2, BERT-base, BERT-mini and nanoGPT", (-0.0996, 0.006), (-0.2083, 0.0858)),
)

_PHRASES = {
    FP32_CONVOLUTION: "with fp32 convolutions",
    CONVOLUTION: "with bf16 convolutions (fp16 ones are traced as bf16)",
    LSTM: "with an LSTM",
    None: "without convolutions or LSTMs",
}


def _ceil_percent(value: float) -> int:
    return math.ceil(round(value * 100, 6))


def _span(errors: Tuple[float, float]) -> str:
    """'up to 37% below', 'up to 2% above', 'from 18% below to 4% above': the outer bounds, whole percents up."""
    low, high = errors
    if high <= 0:
        return f"up to {_ceil_percent(-low)}% below"
    if low >= 0:
        return f"up to {_ceil_percent(high)}% above"
    return f"from {_ceil_percent(-low)}% below to {_ceil_percent(high)}% above"


def kinds_of(op_kinds: AbstractSet[str]) -> List[MeasuredKind]:
    """The measured kinds a step with these op kinds belongs to; the one of plain steps when none."""
    found = [k for k in MEASURED_KINDS if k.op_kind is not None and k.op_kind in op_kinds]
    return found or [k for k in MEASURED_KINDS if k.op_kind is None]


def traced_bound(op_kinds: AbstractSet[str]) -> Tuple[float, str]:
    """(relative bound, what it rests on) for a traced report of a step that ran these op kinds."""
    kinds = kinds_of(op_kinds)
    relative = max(k.bound() for k in kinds)
    measured = "; ".join(
        f"for {k.steps} steps {_PHRASES[k.op_kind]} ({k.models}) the trace was {_span(k.allocated)} the real "
        f"peak allocated and {_span(k.reserved)} the peak reserved"
        for k in kinds
    )
    statement = (
        "traced on fake CPU tensors, with models of cuBLAS's and cuDNN's workspaces and of the caching allocator. "
        f"Measured on {MEASURED_ON}, {measured}: expect within ±{relative:.0%}. "
        f"Measuring the step on the GPU instead (--device cuda) came within {MEASURED_ENGINE_ALLOCATED:.1%} of its "
        "peak allocated there"
    )
    return relative, statement
