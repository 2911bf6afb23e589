"""The device an analysis plans for, and the memory a training step may use on it: --memory, --target, this
machine's GPU (NVML, without initialising CUDA), or the GPU itself when the measured engine runs on it."""

from __future__ import annotations

import gc
from typing import Any, List, Optional, Tuple, Union

from gpumem_kernel.analysis.gpus import cuda_context as process_context
from gpumem_kernel.analysis.gpus import lookup as gpus
from gpumem_kernel.analysis.gpus.lookup import MiB
from gpumem_kernel.analysis.model.model_states import unique_bytes
from gpumem_kernel.analysis.report.report import DeviceInfo
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.units import format_bytes


def _device_index(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    text = str(device)
    if ":" in text:
        try:
            return int(text.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad device {device!r}; use e.g. 'cuda:0'") from None
    return 0


def _reserve(total: int, reserve: Union[None, int, float]) -> int:
    """Safety reserve: 5% of the device or 512 MiB, whichever is larger (or the caller's bytes / fraction)."""
    if reserve is None:
        return max(int(0.05 * total), 512 * MiB)
    if isinstance(reserve, float) and 0 <= reserve < 1:
        return int(reserve * total)
    if isinstance(reserve, (int, float)) and reserve >= 0:
        return int(reserve)
    raise ValueError(f"reserve must be bytes or a fraction below 1, got {reserve!r}")


def _local_gpu(index: int) -> Optional[Any]:
    """NVML's view of CUDA device `index` (no CUDA initialisation), or None."""
    try:
        from gpumem_kernel.probe.prober import probe

        sample = probe()
    except Exception:
        return None
    for device in sample.gpu.devices:
        if device.cuda_index == index and device.total is not None:
            return device
    return None


def _resident_bytes(model: Any, optimizer: Any, device_type: str, index: int) -> int:
    """Bytes of model states already on that GPU: a training step reuses them, so they count as available."""
    tensors = [t for t in list(model.parameters()) + list(model.buffers())]
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None and not isinstance(optimizer, str):
        tensors += [v for s in optimizer.state.values() for v in s.values() if hasattr(v, "untyped_storage")]
    return unique_bytes([t for t in tensors if t.device.type == device_type and (t.device.index or 0) == index])


def device_limit(
    *,
    target: Optional[str],
    memory: Any,
    device: Any,
    reserve: Union[None, int, float],
    model: Any = None,
    optimizer: Any = None,
    stack: Optional[Tuple[str, Optional[str]]] = None,
) -> DeviceInfo:
    """Where the limit comes from: --memory, --target, this machine's GPU (NVML), or nowhere. `stack`: the
    (torch, CUDA runtime) a plan is for (analyze's torch_version / cuda_version), for the context estimate."""
    spec = gpus.lookup(target) if target else None
    if memory is not None:
        # --target with --memory: that GPU's generation (context, workspaces, bf16) within this much memory
        # (a MIG slice, a share of the card); --memory alone: no generation, the generic estimates
        total = gpus.parse_memory(memory)
        size = format_bytes(total, "GiB", 1)
        cc = spec.compute_capability if spec else None
        name = f"{spec.name} with {size}" if spec else f"{size} device"
        bf16 = spec.bf16 if spec else None
        return _limit_info(name, "memory", total, total, 0, reserve, cc, bf16, None, model, stack)
    if spec is not None:
        return _limit_info(
            spec.name,
            "target",
            spec.memory_bytes,
            spec.memory_bytes,
            0,
            reserve,
            spec.compute_capability,
            spec.bf16,
            None,
            model,
            stack,
        )
    index = _device_index(device)
    if str(device or "").startswith("cpu"):
        return DeviceInfo(None, "none", None, None, 0, None, None, None, None, 0, "none")
    local = _local_gpu(index)
    if local is None:
        return DeviceInfo(None, "none", None, None, 0, None, None, None, None, 0, "none")
    reclaimable, torch_reserved = 0, 0
    if cuda_initialised():
        import torch

        torch_reserved = torch.cuda.memory_reserved(index)
        if model is not None:
            reclaimable = _resident_bytes(model, optimizer, "cuda", index)
            reclaimable += max(0, torch_reserved - torch.cuda.memory_allocated(index))
    cc = local.compute_capability
    bf16 = None if cc is None else int(cc.split(".")[0]) >= 8
    return _limit_info(
        local.name,
        "nvml",
        local.total,
        local.free,
        reclaimable,
        reserve,
        cc,
        bf16,
        _context_in_use(local, torch_reserved),
        model,
        stack,
    )


def basis_notes(info: DeviceInfo, target: Optional[str], memory: Any) -> List[str]:
    """What a plan from --memory assumed about the GPU, so the report says it."""
    if memory is None:
        return []
    context = format_bytes(info.context_bytes, "MiB", 0)
    if target is None:
        return [
            f"--memory without --target: no GPU generation assumed, so a generic {context} CUDA context estimate "
            "and cuBLAS's default workspace; add --target GPU to plan with that GPU's compute capability"
        ]
    return [
        f"--target with --memory: {info.name}, planned with compute capability {info.compute_capability} "
        f"(its {context} context estimate and workspaces) within that memory"
    ]


def cuda_notes(info: DeviceInfo, cuda_version: Optional[str]) -> List[str]:
    """--cuda plans an estimated CUDA context; where none is estimated it changes nothing, and the report says so."""
    if cuda_version is None or info.context_source == "estimate":
        return []
    if info.context_source == "none":
        return [
            f"--cuda {cuda_version} not used: no GPU to plan a CUDA context for (add --target GPU or --memory SIZE)"
        ]
    return [f"--cuda {cuda_version} not used: the CUDA context is measured on this GPU, with this kernel's own CUDA"]


def _context_in_use(local: Any, torch_reserved: int) -> Optional[Tuple[int, str]]:
    """This kernel's NVML usage minus torch's reserved memory = its CUDA context (and other non-torch
    allocations); None when this kernel has no context on the device yet."""
    if local is not None and local.this_kernel:
        return max(0, local.this_kernel - torch_reserved), "nvml"
    if cuda_initialised():
        return 0, "in use"  # NVML cannot see per-process usage here (containers, WDDM)
    return None


def _limit_info(
    name: Optional[str],
    source: str,
    total: int,
    free: int,
    reclaimable: int,
    reserve: Union[None, int, float],
    cc: Optional[str],
    bf16: Optional[bool],
    context: Optional[Tuple[int, str]],
    model: Any = None,
    stack: Optional[Tuple[str, Optional[str]]] = None,
) -> DeviceInfo:
    """`context`: None -> estimated from this kernel's torch, the environment and the GPU (planned for that GPU
    when it is not this machine's); else (bytes, "nvml" | "in use"), measured."""
    reserve_bytes = _reserve(total, reserve)
    if context is None:
        factors = process_context.read_factors(cc, planned=source != "nvml", model=model, stack=stack)
        estimate = process_context.estimate(factors)
        context_bytes, context_source, basis = estimate.bytes, "estimate", estimate.basis
    else:
        context_bytes, context_source = context
        basis = "measured" if context_source == "nvml" else "measured: in use, size not visible to NVML"
    return DeviceInfo(
        name=name,
        source=source,
        total_bytes=total,
        free_bytes=free,
        reclaimable_bytes=reclaimable,
        reserve_bytes=reserve_bytes,
        limit_bytes=max(0, free + reclaimable - reserve_bytes),
        compute_capability=cc,
        bf16=bf16,
        context_bytes=context_bytes,
        context_source=context_source,
        context_basis=basis,
    )


def measured_device(device: Any, target: Optional[str], memory: Any) -> Optional[Any]:
    """The CUDA device to measure on, or None: only if the user initialised CUDA or named a CUDA device."""
    if target is not None or memory is not None:
        return None
    import torch

    explicit = device is not None and str(device).startswith("cuda")
    if explicit:
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but this torch build or machine has no CUDA")
        return torch.device(device if isinstance(device, str) else str(device))
    if device is None and cuda_initialised() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return None


def measured_limit(
    info: DeviceInfo, device: Any, model: Any, optimizer: Any, reserve: Union[None, int, float]
) -> DeviceInfo:
    """On the GPU itself: free memory after emptying the cache, plus the model states already there."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    resident = _resident_bytes(model, optimizer, "cuda", index)
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    context = _context_in_use(_local_gpu(index), torch.cuda.memory_reserved(device)) or (0, "in use")
    return _limit_info(name, "nvml", total, free, resident, reserve, f"{major}.{minor}", major >= 8, context)
