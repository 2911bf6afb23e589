"""Why a step cannot help with this out-of-memory error (shown folded): the one place steps are folded, by the
figures and by the error's family."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from gpumem_kernel.oom.diagnose import sample_devices
from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.family import wrapper_kind
from gpumem_kernel.oom.order import step_key
from gpumem_kernel.oom.parse import MIB, OomInfo
from gpumem_kernel.oom.step import Step
from gpumem_kernel.render.units import human


# What cannot help when one allocation is larger than the GPU: freeing or rearranging memory.
_FREES_MEMORY = ("clear", "restart", "shutdown-*", "other-processes", "expandable-segments")


def _processes_listed(info: OomInfo, sample: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Who listed the GPU's processes, when someone could: PyTorch's 2.x message (it names this process
    only when NVML's list was read) or the probe (NVML listed this kernel). None: nobody could tell."""
    if info.format == "2.x" and info.this_process_total is not None:
        return "PyTorch's message"
    if any(device.get("this_kernel") is not None for device in sample_devices(sample, info.device)):
        return "NVML"
    return None


def not_applicable(
    step: Step, info: OomInfo, d: Diagnosis, batch: Optional[int], sample: Optional[Mapping[str, Any]]
) -> Optional[str]:
    """Why `step` cannot help with this OOM, or None when it may. The one place steps are folded."""
    key = step_key(step.id)
    by_family = _family_not_applicable(key, info)
    if by_family is not None:
        return by_family
    if d.too_large and key in _FREES_MEMORY:
        return (
            f"One allocation of {human(info.tried_to_allocate)} is larger than all the memory this GPU allows: "
            "freeing or rearranging memory cannot make room for it."
        )
    f = d.fragmentation
    if key == "other-processes" and not d.other_processes:
        listed = _processes_listed(info, sample)
        if listed is not None:
            return f"{listed} lists no other process on this GPU."
    if key == "clear" and f is not None and f.reserved_unallocated < 20 * MIB:
        if d.traceback is not None and d.traceback.tensors == 0:
            return (
                f"PyTorch held only {human(f.reserved_unallocated)} reserved but unallocated, and the failed "
                "call's traceback keeps no tensor alive: clearing has little to free."
            )
    if key in ("batch-size", "grad-accumulation") and batch is not None and batch <= 1:
        return "The batch size is already 1: it cannot be made smaller."
    if key == "grad-checkpointing" and d.model is not None and d.model.checkpointing_on:
        return f"`{d.names.model}` already has gradient checkpointing on."
    if key == "expandable-segments" and f is not None and f.expandable_segments_set:
        return f"Expandable segments are already on ({d.alloc_conf_var})."
    if key == "host-memory" and d.host is None:
        return "The probe could not read the host's memory."
    if key == "fewer-workers" and not (d.num_workers or 0) and not (d.host.workers if d.host else 0):
        return "There are no DataLoader workers (num_workers is 0 and the kernel has no child processes)."
    return None


_TORCH_CODE = (
    "The cell this step inserts is PyTorch code; in JAX use jax.checkpoint and bfloat16 parameters, in "
    "TensorFlow tf.keras.mixed_precision and tf.recompute_grad."
)
_OUTSIDE_ALLOCATOR = (
    "{} allocates outside PyTorch's caching allocator (cudaMalloc): expandable segments do not change it. "
    "Clearing returns PyTorch's cached blocks to the driver, which is what it needs."
)
_NOT_THE_GPU = "The host's memory (RAM) ran out, not the GPU's: {}."
_FAMILY_NOT_APPLICABLE: Dict[str, Dict[str, str]] = {
    "cublas": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("cuBLAS")},
    "cudnn": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("cuDNN")},
    "nccl": {"expandable-segments": _OUTSIDE_ALLOCATOR.format("NCCL")},
    "mps": {
        "expandable-segments": (
            "Expandable segments are a setting of PyTorch's CUDA allocator; MPS has its own, capped by "
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO."
        ),
        "other-processes": (
            "NVML does not see Apple GPUs: on a Mac the GPU shares RAM with every application, so close the ones "
            "you do not need (Activity Monitor)."
        ),
        "shutdown-*": "NVML does not see Apple GPUs: it cannot tell which kernel holds MPS memory.",
    },
    "xla": {
        "expandable-segments": (
            "Expandable segments are a setting of PyTorch's CUDA allocator; XLA has its own: "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION (JAX), "
            "tf.config.experimental.set_memory_growth (TensorFlow)."
        ),
        "mixed-precision": _TORCH_CODE,
        "grad-accumulation": _TORCH_CODE,
        "grad-checkpointing": _TORCH_CODE,
    },
    "wrapper-accelerate": {
        "batch-size": "accelerate's batch-size finder already tried every batch down to 1: none fits.",
        "grad-accumulation": "Even a batch of 1 ran out of memory: accumulating smaller batches cannot help.",
        "eval-batch-size": "accelerate's batch-size finder already tried every batch down to 1: none fits.",
    },
    "wrapper": {  # vLLM
        "batch-size": "vLLM serves the model: what must fit is the weights plus the KV cache, not a training batch.",
        "eval-batch-size": "vLLM schedules its own batches inside the KV cache it could allocate.",
        "grad-accumulation": "vLLM serves the model: there are no gradients to accumulate.",
        "mixed-precision": "vLLM already runs the model in 16 bits (or the dtype you passed).",
        "grad-checkpointing": "vLLM serves the model: there are no activations kept for backward.",
        "fewer-workers": "vLLM does not use DataLoader workers.",
    },
    "host": {
        "shutdown-*": _NOT_THE_GPU.format("other kernels' GPU memory does not matter here"),
        "other-processes": _NOT_THE_GPU.format("the processes on the GPU do not matter here"),
        "expandable-segments": _NOT_THE_GPU.format("expandable segments arrange GPU memory only"),
        "mixed-precision": _NOT_THE_GPU.format("mixed precision shrinks activations on the GPU"),
        "grad-checkpointing": _NOT_THE_GPU.format("checkpointing shrinks activations on the GPU"),
    },
}


def _family_not_applicable(key: str, info: OomInfo) -> Optional[str]:
    """Why a step cannot help with an out-of-memory error of this family, or None."""
    family = info.family
    if family == "wrapper" and wrapper_kind(info) == "accelerate":
        family = "wrapper-accelerate"
    return _FAMILY_NOT_APPLICABLE.get(family, {}).get(key)
