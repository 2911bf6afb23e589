"""The family of an out-of-memory error (classify.py, patterns.json): what failed to allocate, said as the note
that heads the diagnosis."""

from __future__ import annotations

from typing import Optional

from gpumem_kernel.oom.parse import OomInfo


def wrapper_kind(info: OomInfo) -> str:
    """Which library gave up: "accelerate" (its batch-size finder) or "vllm" (its KV cache)."""
    return "accelerate" if "batch size found" in info.message else "vllm"


_FAMILY_NOTES = {
    "cublas": (
        "cuBLAS could not allocate its handle or workspace: the GPU is full, usually with PyTorch's cached blocks, "
        "so clearing or restarting comes first; cuBLAS allocates outside PyTorch's allocator, so expandable "
        "segments cannot help"
    ),
    "cudnn": (
        "cuDNN could not allocate its handle or workspace: the GPU is full, usually with PyTorch's cached blocks, "
        "so clearing or restarting comes first; torch.backends.cudnn.benchmark = False tries fewer "
        "workspace-hungry algorithms; expandable segments cannot help"
    ),
    "nccl": (
        "NCCL could not allocate its communication buffers on the GPU: other processes and PyTorch's cache left "
        "it too little, so the steps about them come first; NCCL allocates outside PyTorch's allocator, so "
        "expandable segments cannot help"
    ),
    "mps": (
        "Apple GPU (MPS): the GPU shares the Mac's RAM with every application, and PyTorch caps its share "
        "(PYTORCH_MPS_HIGH_WATERMARK_RATIO; 0.0 lifts the cap at the risk of the whole system swapping); "
        "torch.mps.empty_cache() returns MPS's cached memory"
    ),
    "xla": (
        "XLA (JAX, TensorFlow, PyTorch/XLA): JAX takes 75 % of the GPU when it starts, so another JAX or "
        "TensorFlow process, or both frameworks in one kernel, leave little room; set "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION (JAX) or "
        "tf.config.experimental.set_memory_growth (TensorFlow) before the framework starts"
    ),
    "host": (
        "The host's memory (RAM) ran out, not the GPU's: DataLoader workers (each a process with its own copy of "
        "the dataset), pinned memory and the container's limit come first; the GPU's steps are folded"
    ),
}
_WRAPPER_NOTES = {
    "accelerate": (
        "accelerate's find_executable_batch_size halved the batch down to zero: even a batch of 1 ran out of GPU "
        "memory, so one sample's step must get smaller (mixed precision, gradient checkpointing, shorter inputs) "
        "or the model must"
    ),
    "vllm": (
        "vLLM: after loading the weights too little GPU memory is left for the KV cache; raise "
        "gpu_memory_utilization (the share of the GPU vLLM may take, 0.9 by default) when nothing else uses the "
        "GPU, lower max_model_len, or free the GPU from other processes"
    ),
}


def family_note(info: OomInfo) -> Optional[str]:
    if info.family == "wrapper":
        return _WRAPPER_NOTES[wrapper_kind(info)]
    return _FAMILY_NOTES.get(info.family)
