"""The order of the checklist: the family's steps, then the causes', then by cost; the folded ones last."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.family import wrapper_kind
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.oom.step import Step


# The one ordering rule of the checklist (the browser shows the steps in the order the payload gives).
# Steps are keyed by id; "shutdown-*" stands for every "Shut down the notebook kernel …" step.
#
# COST_ORDER, cheapest and least drastic first: what changes nothing in your code (clear: nothing is lost;
# restart: the variables are lost; other processes: someone else's work), then changes to the training step
# that keep the model (computing what each lever does for it, then batch, evaluation batch, accumulation, mixed
# precision, an 8-bit optimizer, input size), the host side
# (host memory, workers), checkpointing (20–30 % more compute), expandable segments (a restart plus a
# different allocator for every later allocation: worth it for fragmentation, which puts it first), and last
# a smaller model (it changes what is trained).
COST_ORDER: Tuple[str, ...] = (
    "clear",
    "restart",
    "shutdown-*",
    "other-processes",
    "fit-advice",
    "batch-size",
    "eval-batch-size",
    "grad-accumulation",
    "mixed-precision",
    "8bit-optimizer",
    "smaller-inputs",
    "host-memory",
    "fewer-workers",
    "grad-checkpointing",
    "expandable-segments",
    "smaller-model",
)
# The steps each cause (Diagnosis.causes, strongest first) puts ahead of COST_ORDER, in this order.
CAUSE_STEPS: Dict[str, Tuple[str, ...]] = {
    # one tensor larger than the GPU: only a smaller step helps
    "too-large": ("batch-size", "smaller-inputs", "mixed-precision", "grad-checkpointing", "grad-accumulation"),
    "other-processes": ("shutdown-*", "other-processes"),
    # clearing returns only whole unused segments, and the fragmentation comes back; expandable segments stop it
    "fragmentation": ("expandable-segments", "clear", "restart"),
    "traceback": ("clear", "restart"),
    "host-memory": ("host-memory", "fewer-workers"),
}
# The steps each family puts first, ahead of its causes' (a host failure is about workers, not the GPU; a
# cuBLAS/cuDNN handle needs PyTorch's cache returned). The caching allocator's families keep the causes' order.
FAMILY_STEPS: Dict[str, Tuple[str, ...]] = {
    "cuda_allocator": (),
    "xpu": (),
    "driver": (),
    "cublas": ("clear", "restart", "shutdown-*", "other-processes"),
    "cudnn": ("clear", "restart", "shutdown-*", "other-processes"),
    "nccl": ("shutdown-*", "other-processes", "restart", "clear"),
    "mps": ("clear", "batch-size", "mixed-precision", "smaller-inputs", "restart"),
    "xla": ("shutdown-*", "other-processes", "restart", "batch-size", "smaller-inputs"),
    "wrapper": ("shutdown-*", "other-processes", "restart", "clear"),  # vLLM's KV cache
    "wrapper-accelerate": ("mixed-precision", "grad-checkpointing", "smaller-inputs", "clear", "restart"),
    "host": ("fewer-workers", "host-memory", "eval-batch-size", "batch-size", "restart"),
}


def family_steps(info: OomInfo) -> Tuple[str, ...]:
    """The FAMILY_STEPS of this message."""
    if info.family == "wrapper" and wrapper_kind(info) == "accelerate":
        return FAMILY_STEPS["wrapper-accelerate"]
    return FAMILY_STEPS.get(info.family, ())


def step_key(step_id: str) -> str:
    """The COST_ORDER/CAUSE_STEPS key of a step id."""
    return "shutdown-*" if step_id.startswith("shutdown-") else step_id


def order_steps(
    steps: Sequence[Step], diagnosis: Diagnosis, first: Sequence[str] = (), lead: Optional[str] = None
) -> List[Step]:
    """The checklist's order: the steps that may help, `lead` (the cheapest lever the fit advice computed to fit
    this model: oom.figures.cheapest_fitting; a figure beats a guess), the evaluation batch when the OOM happened
    in evaluation (`diagnosis.evaluation`), then those of the family (`first`, family_steps) and of the
    diagnosis's causes (strongest cause first), then the rest by COST_ORDER; then the steps that cannot help
    here (shown folded), by COST_ORDER."""
    rank: Dict[str, int] = {}
    if lead is not None:
        rank[lead] = 0
    if diagnosis.evaluation is not None:  # it ran out in evaluation: the evaluation batch comes first
        rank.setdefault("eval-batch-size", len(rank))
    for key in first:
        rank.setdefault(key, len(rank))
    for cause in diagnosis.causes:
        for key in CAUSE_STEPS.get(cause.kind, ()):
            rank.setdefault(key, len(rank))
    for key in COST_ORDER:
        rank.setdefault(key, len(rank))
    cost = {key: i for i, key in enumerate(COST_ORDER)}

    def position(step: Step) -> Tuple[int, int]:
        key = step_key(step.id)
        if step.not_applicable is not None:
            return (1, cost.get(key, len(cost)))
        return (0, rank.get(key, len(rank)))

    return sorted(steps, key=position)  # stable: shutdown steps keep their order (most memory first)
