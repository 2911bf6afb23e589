"""diagnose(): what the message, a fresh probe (wire format dict) and the user namespace say about one
out-of-memory error: fragmentation, other processes, the host, what the traceback pins, and the causes.
Nothing here imports torch or initialises CUDA."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gpumem_kernel.oom.analyzed import FailedModel, failed_model
from gpumem_kernel.oom.causes import cause_note, cause_threshold, find_causes
from gpumem_kernel.oom.diagnosis import Diagnosis, Fragmentation, HostMemory, OtherProcess, TracebackPin
from gpumem_kernel.oom.grad_mode import grad_off_evidence
from gpumem_kernel.oom.family import family_note
from gpumem_kernel.oom.namespace import (
    code_names,
    half_precision,
    model_info,
    pick_batch,
    pick_workers,
    scan_namespace,
    variables_note,
)
from gpumem_kernel.oom.parse import MIB, OomInfo
from gpumem_kernel.heldby.walk import frame_holder, holders, memory_walker
from gpumem_kernel.probe.holders import resolve_shell, torch_kinds, traceback_frames
from gpumem_kernel.probe.torchstats import cuda_initialised, loaded_torch
from gpumem_kernel.render.units import human


def _alloc_conf(backend: str, env: Mapping[str, str]) -> Tuple[str, Optional[str], bool]:
    """(variable to set, its current value, expandable segments already on)."""
    var = "PYTORCH_HIP_ALLOC_CONF" if backend == "HIP" else "PYTORCH_CUDA_ALLOC_CONF"
    values = [env.get(name) for name in (var, "PYTORCH_ALLOC_CONF") if env.get(name)]
    on = any("expandable_segments:true" in v.replace(" ", "").lower() for v in values)
    return var, env.get(var), on


def _fragmentation(info: OomInfo, expandable_on: bool) -> Optional[Fragmentation]:
    cached = info.cached()
    if cached is None:
        return None
    tried = info.tried_to_allocate
    threshold = cause_threshold(tried)
    # Below one 20 MiB large-pool block the cache cannot be the reason.
    flagged = cached >= threshold and cached >= 20 * MIB
    decisive = bool(tried and info.free is not None and cached + info.free >= tried and cached >= 20 * MIB)
    return Fragmentation(cached, threshold, decisive, expandable_on, flagged and not expandable_on)


def sample_devices(sample: Optional[Mapping[str, Any]], device: Optional[int]) -> List[Mapping[str, Any]]:
    devices = ((sample or {}).get("gpu") or {}).get("devices") or []
    return [d for d in devices if device is None or d.get("cuda_index") == device]


# The sample's relations (probe/hostpid.py) that are this kernel, or may be: never "another process".
_SELF = ("this_kernel", "probably_this_kernel", "ambiguous")


def _descendants() -> set:
    """This kernel's live descendants now (a process started from the notebook that NVML lists as it is)."""
    try:
        from gpumem_kernel.probe.descendants import descendant_pids

        return set(descendant_pids(os.getpid()))
    except Exception:
        return set()


def _sample_processes(devices: List[Mapping[str, Any]], me: int) -> Tuple[List[Mapping[str, Any]], List[int]]:
    """(the processes on these devices that are not this kernel, the host PIDs that are or may be it)."""
    others: List[Mapping[str, Any]] = []
    mine: List[int] = []
    for device in devices:
        for p in device.get("processes") or []:
            relation = p.get("relation") or ("this_kernel" if p.get("this_kernel") else None)
            if relation in _SELF or p.get("pid") == me:
                if p.get("pid") != me and p.get("pid") not in mine:
                    mine.append(p["pid"])
                continue
            others.append(p)
    return others, mine


def _other_processes(
    info: OomInfo, sample: Optional[Mapping[str, Any]], notes: List[str]
) -> Tuple[List[OtherProcess], List[int]]:
    """(the other processes on the GPU, largest first; the host PIDs that are or may be this kernel)."""
    devices = sample_devices(sample, info.device)
    capacity = info.total_capacity or max((d.get("total") or 0 for d in devices), default=0) or None
    me = ((sample or {}).get("kernel") or {}).get("pid", os.getpid())
    listed, mine = _sample_processes(devices, me)
    found: Dict[int, OtherProcess] = {}
    for pid, used in info.other_processes:
        if pid not in mine and pid != me:
            found[pid] = OtherProcess(pid, used, None, None, False, "message")
    for p in listed:
        known = found.get(p["pid"])
        if known is None:
            known = found[p["pid"]] = OtherProcess(
                p["pid"], p.get("used"), p.get("name"), p.get("kernel_id"), False, "probe"
            )
        else:
            known.name, known.kernel_id, known.source = p.get("name"), p.get("kernel_id"), "both"
            known.used = known.used if known.used is not None else p.get("used")
        if p.get("relation") == "notebook":
            known.child_of_kernel, known.cmdline, known.local_pid = True, p.get("cmdline"), p.get("local_pid")
    descendants = _descendants() if found else set()
    for process in found.values():
        if process.used is not None and capacity and process.used > capacity:
            notes.append(
                f"NVML reported an impossible {human(process.used)} for PID {process.pid} (a known "
                "Windows/WDDM quirk); its real usage is unknown"
            )
            process.used = None
        process.child_of_kernel = process.child_of_kernel or process.pid in descendants
    return sorted(found.values(), key=lambda p: -(p.used or 0)), mine


def _pid_note(info: OomInfo, mine: List[int]) -> Tuple[bool, Optional[str]]:
    """(PyTorch did not find its own PID and nothing says which it is; the note about it)."""
    if not (info.other_processes and info.this_process_total is None and info.format == "2.x"):
        return False, None
    named = [p.pid for p in info.other_processes if p.pid in mine]
    if len(named) == 1:
        return (
            False,
            f"Process {named[0]} in PyTorch's message is this kernel itself (containers report host PIDs)",
        )
    if named:
        listed = ", ".join(str(p) for p in named)
        return False, (
            f"This kernel is one of processes {listed} in PyTorch's message (containers report host PIDs; "
            "they cannot be told apart yet): none of them is counted as another process"
        )
    return True, (
        "PyTorch did not find its own PID in NVML's list (containers report host PIDs): "
        f"process {info.other_processes[0].pid} may be this kernel itself"
    )


def _host(sample: Optional[Mapping[str, Any]]) -> Optional[HostMemory]:
    host = (sample or {}).get("host")
    if not host:
        return None
    total, available = host.get("total"), host.get("available")
    limit, usage = host.get("container_limit"), host.get("container_usage")
    low = bool(
        (total and available is not None and available < 0.1 * total)
        or (limit and usage is not None and usage >= 0.9 * limit)
    )
    children = host.get("children") or {}
    return HostMemory(
        host.get("rss"),
        total,
        available,
        int(children.get("count") or 0),
        int(children.get("rss") or 0),
        limit,
        usage,
        low,
        children.get("uss"),
    )


def _bf16(info: OomInfo, sample: Optional[Mapping[str, Any]]) -> Optional[bool]:
    """bf16 autocast is worth it on compute capability ≥ 8.0 (Ampere and newer)."""
    if cuda_initialised():
        try:
            return bool(sys.modules["torch.cuda"].is_bf16_supported())
        except Exception:
            pass
    for device in sample_devices(sample, info.device):
        capability = device.get("compute_capability")
        if capability:
            try:
                return float(capability) >= 8.0
            except ValueError:
                continue
    return None


def _traceback_pin(shell: Any, tb: Any) -> Optional[TracebackPin]:
    """Tensors that only the failed call's frames keep alive (what the first checklist step frees)."""
    walker = memory_walker()
    tracebacks = [tb] if tb is not None else [t for t in (getattr(sys, "last_traceback", None),) if t is not None]
    if walker is None or not tracebacks:
        return None
    frames = traceback_frames(tracebacks)
    seen: set = set()
    holders(shell, seen=seen, walker=walker)  # what user variables keep alive is not freed by dropping the traceback
    pinned = frame_holder(frames, walker, seen)
    return TracebackPin(len(frames), pinned.tensors, pinned.bytes, pinned.by_device)


def diagnose(
    info: OomInfo,
    sample: Optional[Mapping[str, Any]] = None,
    shell: Any = None,
    *,
    tb: Any = None,
    env: Optional[Mapping[str, str]] = None,
) -> Diagnosis:
    """What the message, a fresh probe `sample` (wire format dict) and the user namespace say about the OOM.

    `tb`: the failed call's traceback (the handler passes it; default sys.last_traceback).
    """
    return diagnose_failed(info, sample, shell, tb=tb, env=env)[0]


def diagnose_failed(
    info: OomInfo,
    sample: Optional[Mapping[str, Any]] = None,
    shell: Any = None,
    *,
    tb: Any = None,
    env: Optional[Mapping[str, str]] = None,
) -> Tuple[Diagnosis, Optional[FailedModel]]:
    """`diagnose`, and the model the error failed in (oom.analyzed.failed_model), or None when nothing says."""
    shell = resolve_shell(shell)
    env = os.environ if env is None else env
    notes: List[str] = []
    scan = scan_namespace(shell)
    failed = failed_model(scan.models, tb if tb is not None else getattr(sys, "last_traceback", None), torch_kinds())
    models = sorted((model_info(name, value) for name, value in scan.models), key=lambda m: -m.bytes)
    # the model the error failed in, else the largest: its names go into the inserted cells
    model = model_info(failed.name, failed.value) if failed is not None else (models[0] if models else None)
    batch, batch_source = pick_batch(scan)
    var, conf, expandable_on = _alloc_conf(info.backend, env)
    limit = min(v for v in (info.total_capacity, info.allowed) if v) if (info.total_capacity or info.allowed) else None
    too_large = bool(info.tried_to_allocate and limit and info.tried_to_allocate > limit)
    if too_large:
        notes.append(
            f"One allocation of {human(info.tried_to_allocate)} is larger than all the memory this GPU "
            f"allows ({human(limit)}): freeing memory cannot help; make that tensor smaller"
        )
    if info.allowed:
        notes.append(f"torch.cuda.set_per_process_memory_fraction limits this process to {human(info.allowed)}")
    processes, mine = _other_processes(info, sample, notes)
    pid_unmatched, pid_note = _pid_note(info, mine)
    if pid_note is not None:
        notes.append(pid_note)
    scaler_or_half = scan.scaler or (model and half_precision(scan, model.name))
    torch = loaded_torch()
    diagnosis = Diagnosis(
        device=info.device,
        too_large=too_large,
        fragmentation=_fragmentation(info, expandable_on),
        other_processes=processes,
        pid_unmatched=pid_unmatched,
        traceback=_traceback_pin(shell, tb),
        host=_host(sample),
        loaders=scan.loaders,
        num_workers=pick_workers(scan),
        amp="likely" if scaler_or_half else "unknown",
        bf16_supported=_bf16(info, sample),
        batch_size=batch,
        batch_size_source=batch_source,
        input_size=scan.inputs[0] if scan.inputs else None,
        model=model,
        names=code_names(scan, model),
        alloc_conf_var=var,
        alloc_conf=conf,
        torch_version=(str(getattr(torch, "__version__", "")) or None) if torch is not None else None,
        notes=notes,
        evaluation=grad_off_evidence(tb),
        this_kernel_pids=mine,
    )
    diagnosis.causes = find_causes(info, diagnosis)
    for note in (cause_note(info, diagnosis.causes, diagnosis), family_note(info)):  # the family's note ends up first
        if note is not None:
            notes.insert(0, note)
    held = variables_note(shell)  # what to free that the checklist's clear step leaves
    if held is not None:
        notes.append(held)
    skipped = scan.skipped.line()  # the variables the scan could not inspect, named once
    if skipped is not None:
        notes.append(skipped)
    return diagnosis, failed
