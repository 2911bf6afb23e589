"""The steps that free or rearrange GPU memory without changing the training code: clear, restart, other
processes and kernels on the GPU, expandable segments."""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Optional, Sequence

from gpumem_kernel.oom.diagnosis import Diagnosis, OtherProcess
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.oom.step import Step, plural
from gpumem_kernel.render.units import human


def clear_step(info: OomInfo, d: Diagnosis) -> Step:
    detail = (
        "Drops the last traceback and the cached outputs that keep tensors alive, runs gc.collect() and "
        "returns PyTorch's cached blocks to the driver. Your variables stay."
    )
    if d.traceback and d.traceback.tensors:
        detail += (
            f" The failed call's frames alone keep {plural(d.traceback.tensors, 'tensor')} "
            f"({human(d.traceback.bytes)}) alive."
        )
    return Step("clear", "Clear GPU memory", detail, "clear")


def restart_step(info: OomInfo, d: Diagnosis, sample: Optional[Mapping[str, Any]]) -> Step:
    held = info.this_process_total
    if held is not None and info.total_capacity and held > info.total_capacity:
        held = None  # WDDM's 2**64-1
    if held is None:
        held = ((sample or {}).get("kernel") or {}).get("gpu_used") if sample else None
    amount = f" ({human(held)} on the GPU, CUDA context included)" if held else ""
    return Step(
        "restart",
        "Restart the kernel and free its memory",
        f"Frees everything this kernel holds{amount}; afterwards re-run only the cells you need. "
        "Use it when clearing is not enough.",
        "restart",
    )


def _slug(text: str) -> str:
    """A step id part from a kernel id (a UUID normally; anything else is reduced to [a-z0-9-])."""
    return re.sub(r"[^a-z0-9-]", "", text.lower())[:64]


def _who(p: OtherProcess) -> str:
    name = f" {p.name}" if p.name else " (a host PID: not visible from this kernel)"
    return f"PID {p.pid}{name} ({human(p.used)})"


def _notebook_detail(mine: Sequence[OtherProcess]) -> str:
    """The notebook's own GPU processes: the user started them, and ends them where they were started."""
    listed = "; ".join(
        f"PID {p.local_pid if p.local_pid is not None else p.pid}"
        + (f" `{p.cmdline[:80]}`" if p.cmdline else (f" {p.name}" if p.name else ""))
        + f" ({human(p.used)})"
        for p in mine[:8]
    )
    return (
        f"Started from this notebook: {listed}. They are yours: stop them in the cell that started them, or with "
        "End in the GPU panel's process list (DataLoader workers end with their loader)."
    )


def _others_detail(others: Sequence[OtherProcess], d: Diagnosis) -> str:
    listed = "; ".join(_who(p) for p in others[:8])
    if d.pid_unmatched:
        # PyTorch did not find its own PID among these: one of them is very likely this kernel itself
        return (
            f"Processes on this GPU: {listed}. One of them is probably this kernel itself (a container reports "
            "host PIDs), so end none of them by PID from here; nvidia-smi on the host tells them apart."
        )
    return (
        f"Other processes on this GPU: {listed}. End the ones you own (kill <PID>); a browser or desktop session "
        "using the GPU counts too."
    )


def process_steps(d: Diagnosis) -> List[Step]:
    steps = [
        Step(
            f"shutdown-{_slug(p.kernel_id) or p.pid}",
            f"Shut down the notebook kernel {p.kernel_id[:8]} ({human(p.used)})",
            f"Another Jupyter kernel of this server (PID {p.pid}{', ' + p.name if p.name else ''}) holds "
            f"{human(p.used)} on this GPU.",
            "shutdown-kernel",
            kernel_id=p.kernel_id,
        )
        for p in d.other_processes
        if p.kernel_id and not p.child_of_kernel
    ]
    mine = [p for p in d.other_processes if p.child_of_kernel]
    others = [p for p in d.other_processes if not p.kernel_id and not p.child_of_kernel]
    parts = []
    if others:
        parts.append(_others_detail(others, d))
    if mine:
        parts.append(_notebook_detail(mine))
    if d.this_kernel_pids:
        pids = ", ".join(str(p) for p in d.this_kernel_pids)
        parts.append(f"Host PID {pids} is this kernel (or may be): restart the kernel to free it, never kill it.")
    if parts:
        detail = " ".join(parts)
    elif d.other_processes:
        detail = "No process outside this server's kernels holds memory on this GPU."
    else:
        detail = (
            "No other process was found on this GPU (or NVML cannot list processes here); nvidia-smi shows "
            "the same list."
        )
    steps.append(Step("other-processes", "Check other processes on the GPU", detail, None))
    return steps


def expandable_step(info: OomInfo, d: Diagnosis) -> Step:
    f = d.fragmentation
    options = [
        o for o in (d.alloc_conf or "").split(",") if o.strip() and not o.strip().startswith("expandable_segments")
    ]
    value = ",".join(options + ["expandable_segments:True"])
    code = (
        "import os\n\n"
        "# Must run before torch first uses the GPU: this cell goes to the top, then the kernel restarts.\n"
        f'os.environ["{d.alloc_conf_var}"] = "{value}"\n'
    )
    if f is not None and f.expandable_segments_set:
        detail = f"Already on in this kernel ({d.alloc_conf_var})."
    elif f is not None and f.suggest:
        detail = (
            f"PyTorch held {human(f.reserved_unallocated)} reserved but unallocated: the free memory is cut into "
            "pieces too small for this request. Expandable segments let the allocator grow segments instead."
        )
        if f.decisive:
            detail += " That memory plus the free memory would have covered the request."
    elif f is not None:
        detail = (
            f"Only {human(f.reserved_unallocated)} was reserved but unallocated, so fragmentation is not the main "
            "cause here; it still helps when batch or sequence sizes vary."
        )
    else:
        detail = "Reduces fragmentation when tensor sizes vary between steps."
    detail += (
        " (CUDA_LAUNCH_BLOCKING=1 only makes the traceback point at the failing line; it saves no memory and "
        "slows every step.)"
    )
    return Step(
        "expandable-segments",
        "Turn on expandable segments (restarts the kernel)",
        detail,
        "insert-env-cell-and-restart",
        code=code,
    )
