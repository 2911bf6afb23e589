"""PyTorch caching-allocator statistics, read without importing torch or initialising CUDA.

Rule: look only at `sys.modules`, and read `torch.cuda.*` only once the user's own code has initialised
CUDA. A probe that initialised CUDA would cost hundreds of MB on every visible GPU. This module is the one
place in gpumem_kernel that reads torch from `sys.modules` and asks whether CUDA is initialised
(`loaded_torch`, `initialised_cuda`, `cuda_initialised`); tests/probe/test_torch_rule.py checks that.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional

from gpumem_kernel.wire.protocol import Allocator, TorchInfo

_STAT_KEYS = {
    "allocated": "allocated_bytes.all.current",
    "reserved": "reserved_bytes.all.current",
    "peak_allocated": "allocated_bytes.all.peak",
    "peak_reserved": "reserved_bytes.all.peak",
    "num_ooms": "num_ooms",
    "num_alloc_retries": "num_alloc_retries",
}

# SM counts never change for a device; get_device_properties is cached by torch too, but skip the call.
_sm_counts: Dict[int, int] = {}


def loaded_torch() -> Optional[Any]:
    """The torch module if the user imported it and the import has finished, else None (never imports it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    # The sampler thread may look while the main thread is still running `import torch`.
    if getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


def loaded_submodule(name: str) -> Optional[Any]:
    """`torch.<name>` (e.g. "nn", "optim") if torch is loaded and has imported it, else None."""
    return sys.modules.get(f"torch.{name}") if loaded_torch() is not None else None


def initialised_cuda() -> Optional[Any]:
    """torch.cuda if the user's code already initialised CUDA in this process, else None (never initialises it)."""
    if loaded_torch() is None:
        return None
    cuda = sys.modules.get("torch.cuda")  # not `torch.cuda`: attribute access could trigger an import
    is_initialized = getattr(cuda, "is_initialized", None)
    try:
        return cuda if is_initialized is not None and is_initialized() else None
    except Exception:
        return None


def cuda_initialised() -> bool:
    """True only when the user's code already initialised CUDA (never initialises it)."""
    return initialised_cuda() is not None


def torch_info() -> TorchInfo:
    """Whether torch is imported, its version, and whether CUDA is initialised, without importing it."""
    torch = sys.modules.get("torch")  # imported counts from the start of `import torch`
    if torch is None:
        return TorchInfo(imported=False, version=None, cuda_initialized=False)
    version = getattr(torch, "__version__", None)
    return TorchInfo(
        imported=True,
        version=str(version) if version is not None else None,
        cuda_initialized=cuda_initialised(),
    )


def _allocator(cuda: Any, index: int) -> Allocator:
    stats = cuda.memory_stats(index)
    return Allocator(**{field: int(stats.get(key, 0)) for field, key in _STAT_KEYS.items()})


def _sm_count(cuda: Any, index: int) -> int:
    if index not in _sm_counts:
        _sm_counts[index] = int(cuda.get_device_properties(index).multi_processor_count)
    return _sm_counts[index]


def allocator_stats() -> Dict[int, Allocator]:
    """{cuda index: Allocator} for every device torch sees; {} unless CUDA is already initialised."""
    cuda = initialised_cuda()
    if cuda is None:
        return {}
    return {index: _allocator(cuda, index) for index in range(cuda.device_count())}


def sm_counts() -> Dict[int, int]:
    """{cuda index: multiprocessor count}; {} unless CUDA is already initialised."""
    cuda = initialised_cuda()
    if cuda is None:
        return {}
    return {index: _sm_count(cuda, index) for index in range(cuda.device_count())}
