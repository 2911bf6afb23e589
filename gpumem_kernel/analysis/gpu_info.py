"""get_gpu_info() and print_gpu_info() of the Python API: the GPUs visible to this kernel, from NVML."""

from __future__ import annotations

from typing import Any, Dict, List


def get_gpu_info() -> List[Dict[str, Any]]:
    """One dict per GPU visible to this kernel (NVML; never initialises CUDA)."""
    try:
        from gpumem_kernel.probe.prober import probe

        sample = probe()
    except Exception:
        return []
    result = []
    for d in sample.gpu.devices:
        if d.cuda_index is None:
            continue
        result.append(
            {
                "index": d.cuda_index,
                "name": d.name,
                "uuid": d.uuid,
                "mig": d.mig,
                "total_memory": d.total,
                "used_memory": d.used,
                "free_memory": d.free,
                "compute_capability": d.compute_capability,
                "multi_processor_count": d.sm_count,
                "this_kernel": d.this_kernel,
            }
        )
    return sorted(result, key=lambda r: r["index"])


def print_gpu_info() -> None:
    from gpumem_kernel.analysis.render import render_gpu_info

    print(render_gpu_info(get_gpu_info()))
