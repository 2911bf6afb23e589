"""get_gpu_info() and print_gpu_info() of the Python API: the GPUs visible to this kernel, from NVML."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from gpumem_kernel.render.units import format_bytes

_BANNER = "=" * 70  # the width of the analysis report's banner, which this block is printed beside


def _row(label: str, value: str) -> str:
    return f"  {label + ':':<18}{value}"


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
    print(render_gpu_info(get_gpu_info()))


def render_gpu_info(infos: Sequence[Mapping[str, Any]]) -> str:
    """The analysis guide's print_gpu_info block."""
    if not infos:
        return "No NVIDIA GPU visible to this kernel (NVML found none, or CUDA_VISIBLE_DEVICES hides them)."
    lines = [_BANNER, f"🖥️  GPU Information ({len(infos)} GPU{'s' if len(infos) > 1 else ''})", _BANNER]
    for info in infos:
        total = info.get("total_memory")
        used = info.get("used_memory")
        share = f" ({100 * used / total:.1f}%)" if used is not None and total else ""
        lines += [
            f"GPU {info['index']}: {info.get('name') or 'unknown'}",
            _row("Total Memory", format_bytes(total)),
            _row("Used", format_bytes(used) + share),
            _row("Free", format_bytes(info.get("free_memory"))),
            _row("Compute", str(info.get("compute_capability") or "n/a")),
            _row("Multiprocessors", str(info.get("multi_processor_count") or "n/a (CUDA not initialised)")),
        ]
    lines.append(_BANNER)
    return "\n".join(lines)
